//! Shadow (dry-run) mode: on the same traffic, a limiter in shadow mode never rejects, and
//! flags exactly the requests an enforcing limiter rejects (with the same figures: the
//! rejection's `remaining` and `retry_after`), because it decides and records exactly as
//! enforcement does. Its counters match: shadow-rejected = rejected, allowed = allowed. For
//! every algorithm; single buckets, keyed limiters and composites; with the mode switched at
//! runtime, too.

use super::algorithms::{advance, cases, op, params, params_of, quota, step, Op, Step};
use proptest::prelude::*;
use sluicegate::composite::Composite;
use sluicegate::{Decision, Error, KeyedLimiter, Limiter, ManualClock, Metrics};
use sluicegate_model::{Kind, Params};
use std::time::Duration;

fn any_params() -> impl Strategy<Value = Params> {
    prop_oneof![
        params(),
        params_of(Kind::TokenBucket),
        params_of(Kind::TokenBucketInterval)
    ]
}

/// The shadow decision for the request the enforcing one decided.
fn shadows(
    enforced: &Result<Decision, Error>,
    shadow: &Result<Decision, Error>,
    what: &str,
) -> Result<(), TestCaseError> {
    match (enforced, shadow) {
        (Ok(e), Ok(s)) => {
            prop_assert!(s.allowed(), "{}: shadow mode rejected", what);
            prop_assert_eq!(s.shadow_rejected(), !e.allowed(), "{}", what);
            prop_assert!(!e.shadow_rejected(), "{}", what);
            prop_assert_eq!(
                (e.limit(), e.remaining(), e.retry_after(), e.reset_after()),
                (s.limit(), s.remaining(), s.retry_after(), s.reset_after()),
                "{}",
                what
            );
        }
        (Err(e), Err(s)) => prop_assert_eq!(e, s, "{}", what),
        (e, s) => prop_assert!(false, "{what}: enforcing {e:?} vs shadow {s:?}"),
    }
    Ok(())
}

fn counted(enforcing: Metrics, shadow: Metrics, what: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(enforcing.shadow_rejected, 0, "{}", what);
    prop_assert_eq!(shadow.rejected, 0, "{}", what);
    prop_assert_eq!(shadow.shadow_rejected, enforcing.rejected, "{}", what);
    prop_assert_eq!(shadow.allowed, enforcing.allowed, "{}", what);
    Ok(())
}

fn within(op: &Op) -> Option<Duration> {
    match op {
        Op::Within(_, w) => Some(Duration::from_nanos(*w)),
        _ => None,
    }
}

fn single(p: Params, start: u64, steps: Vec<(Step, Op)>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(start);
    let build = |shadow| {
        Limiter::builder(quota(&p))
            .clock(clock.clone())
            .metrics(true)
            .shadow(shadow)
            .build()
            .unwrap()
    };
    let (enforcing, shadow) = (build(false), build(true));
    let mut t = start;
    for (i, (s, o)) in steps.into_iter().enumerate() {
        t = advance(t, &s);
        clock.set(t);
        let what = format!("step {i} at t={t}: {o:?}");
        match o {
            Op::Refund(c) => {
                enforcing.refund(c).unwrap();
                shadow.refund(c).unwrap();
            }
            Op::Acquire(c) | Op::Within(c, _) => {
                let (e, s) = match within(&o) {
                    Some(w) => (enforcing.reserve_within(c, w), shadow.reserve_within(c, w)),
                    None => (enforcing.try_acquire(c), shadow.try_acquire(c)),
                };
                shadows(&e, &s, &what)?;
            }
        }
        // Shadow mode writes exactly what enforcement writes.
        prop_assert_eq!(enforcing.peek(), shadow.peek(), "{}", what);
    }
    counted(
        enforcing.metrics().unwrap(),
        shadow.metrics().unwrap(),
        "single",
    )
}

fn keyed(p: Params, start: u64, steps: Vec<(Step, Op, u8)>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(start);
    let build = |shadow| {
        KeyedLimiter::<u8, _>::builder(quota(&p))
            .clock(clock.clone())
            .metrics(true)
            .shadow(shadow)
            .build()
            .unwrap()
    };
    let (enforcing, shadow) = (build(false), build(true));
    let mut t = start;
    for (i, (s, o, key)) in steps.into_iter().enumerate() {
        t = advance(t, &s);
        clock.set(t);
        let what = format!("step {i} at t={t} key {key}: {o:?}");
        match o {
            Op::Refund(c) => {
                enforcing.refund(&key, c).unwrap();
                shadow.refund(&key, c).unwrap();
            }
            Op::Acquire(c) | Op::Within(c, _) => {
                let (e, s) = match within(&o) {
                    Some(w) => (
                        enforcing.reserve_within(&key, c, w),
                        shadow.reserve_within(&key, c, w),
                    ),
                    None => (enforcing.try_acquire(&key, c), shadow.try_acquire(&key, c)),
                };
                shadows(&e, &s, &what)?;
            }
        }
        prop_assert_eq!(enforcing.peek(&key), shadow.peek(&key), "{}", what);
    }
    counted(
        enforcing.metrics().unwrap(),
        shadow.metrics().unwrap(),
        "keyed",
    )
}

fn composite(parts: Vec<Params>, start: u64, steps: Vec<(Step, Op)>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(start);
    let build = |shadow| {
        let limiters = parts
            .iter()
            .map(|p| Limiter::with_clock(quota(p), clock.clone()).unwrap())
            .collect();
        Composite::new(limiters)
            .with_metrics(true)
            .with_shadow(shadow)
    };
    let (enforcing, shadow) = (build(false), build(true));
    let mut t = start;
    for (i, (s, o)) in steps.into_iter().enumerate() {
        t = advance(t, &s);
        clock.set(t);
        let what = format!("step {i} at t={t}: {o:?}");
        match o {
            Op::Refund(c) => {
                enforcing.refund(c).unwrap();
                shadow.refund(c).unwrap();
            }
            Op::Acquire(c) | Op::Within(c, _) => {
                shadows(&enforcing.try_acquire(c), &shadow.try_acquire(c), &what)?;
            }
        }
        for (e, s) in enforcing.parts().iter().zip(shadow.parts()) {
            prop_assert_eq!(e.peek(), s.peek(), "{}", what);
        }
    }
    counted(
        enforcing.metrics().unwrap(),
        shadow.metrics().unwrap(),
        "composite",
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn shadow_mode_never_rejects_and_flags_exactly_the_rejections(
        p in any_params(), start in 0u64..10_000_000_000,
        steps in prop::collection::vec((step(), op(30)), 1..80)) {
        single(p, start, steps)?;
    }

    #[test]
    fn shadow_mode_of_a_keyed_limiter(
        p in any_params(), start in 0u64..10_000_000_000,
        steps in prop::collection::vec((step(), op(30), 0u8..3), 1..80)) {
        keyed(p, start, steps)?;
    }

    #[test]
    fn shadow_mode_of_a_composite(
        parts in prop::collection::vec(any_params(), 1..4), start in 0u64..10_000_000_000,
        steps in prop::collection::vec((step(), op(20)), 1..60)) {
        composite(parts, start, steps)?;
    }
}

/// Switched at runtime: the decisions made while it was on are flagged, the others enforced.
#[test]
fn shadow_mode_switches_at_runtime() {
    let clock = ManualClock::new(0);
    let l = Limiter::builder("1/s".parse().unwrap())
        .clock(clock.clone())
        .metrics(true)
        .build()
        .unwrap();
    assert!(!l.is_shadow());
    assert!(l.try_acquire(1).unwrap().allowed());
    assert!(!l.try_acquire(1).unwrap().allowed());
    l.set_shadow(true);
    assert!(l.is_shadow());
    let d = l.try_acquire(1).unwrap();
    assert!(d.allowed() && d.shadow_rejected());
    assert_eq!(d.retry_after(), Duration::from_secs(1));
    // A shadow acquire goes through at once instead of waiting.
    let d = l.acquire(1, Duration::MAX).unwrap();
    assert!(d.allowed() && d.shadow_rejected());
    l.set_shadow(false);
    assert!(!l.try_acquire(1).unwrap().allowed());
    let m = l.metrics().unwrap();
    assert_eq!((m.allowed, m.rejected, m.shadow_rejected), (1, 2, 2));
    assert!(!m.shadow);
}
