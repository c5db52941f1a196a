//! Live reconfiguration against the model: a limiter reconfigured at `t` decides exactly as the
//! model does with the old quota until `t`, the carry rule at `t`, and the new quota after it
//! (`AnyModel::reconfigure`), for every algorithm, random quota pairs, clocks that jump
//! backwards, and several reconfigurations in a row. Single buckets and keyed ones.

use super::algorithms::{advance, cases, op, params_of, quota, same, step, Op, Step};
use sluicegate_model as model;

use model::{AnyModel, Kind, Params};
use proptest::prelude::*;
use sluicegate::{Error, KeyedLimiter, Limiter, ManualClock};
use std::time::Duration;

/// Every algorithm, both token-bucket refills included.
pub(crate) fn any_kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::TokenBucket),
        Just(Kind::TokenBucketInterval),
        Just(Kind::Gcra),
        Just(Kind::FixedWindow),
        Just(Kind::SlidingWindow),
        Just(Kind::SlidingLog),
        Just(Kind::LeakyQueue),
    ]
}

#[derive(Clone, Debug)]
enum Act {
    Op(Op),
    Reconfigure(Params),
}

/// A kind, its first quota, and steps among which some set a new quota of the same kind.
fn scenario(len: usize) -> impl Strategy<Value = (Params, u64, Vec<(Step, Act, u8)>)> {
    any_kind().prop_flat_map(move |kind| {
        let act = prop_oneof![
            6 => op(40).prop_map(Act::Op),
            1 => params_of(kind).prop_map(Act::Reconfigure),
        ];
        (
            params_of(kind),
            0u64..10_000_000_000,
            prop::collection::vec((step(), act, 0u8..3), 1..len),
        )
    })
}

fn reconfigured_limiter_matches_model(
    p: Params,
    start: u64,
    steps: Vec<(Step, Act, u8)>,
) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(start);
    let limiter = Limiter::with_clock(quota(&p), clock.clone()).unwrap();
    let mut m = AnyModel::new(p, start);
    let mut t = start;
    for (i, (s, a, _)) in steps.into_iter().enumerate() {
        t = advance(t, &s);
        clock.set(t);
        let what = format!("step {i} at t={t}: {a:?}");
        match a {
            Act::Reconfigure(p2) => {
                limiter.set_quota_at(quota(&p2), t).unwrap();
                m.reconfigure(p2, t, start);
                prop_assert_eq!(limiter.quota(), quota(&p2));
            }
            Act::Op(Op::Acquire(c)) => same(limiter.try_acquire(c), m.acquire(t, c), &what)?,
            Act::Op(Op::Refund(c)) => {
                limiter.refund(c).unwrap();
                m.refund(t, c);
            }
            Act::Op(Op::Within(c, w)) => {
                let got = limiter.reserve_within(c, Duration::from_nanos(w));
                let want = match &mut m {
                    AnyModel::LeakyQueue(q) => q.reserve(t, c, w),
                    m => m.acquire(t, c),
                };
                same(got, want, &what)?;
            }
        }
        same(limiter.peek(), m.probe(t, 0), &format!("{what}: peek"))?;
    }
    Ok(())
}

/// The same for a keyed limiter: three keys, each a bucket; keys first seen after a
/// reconfiguration start fresh under the quota in force.
fn reconfigured_keyed_matches_model(
    p: Params,
    start: u64,
    steps: Vec<(Step, Act, u8)>,
) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(start);
    let limiter = KeyedLimiter::<u8, _>::builder(quota(&p))
        .shards(2)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut current = p;
    let mut models: [Option<AnyModel>; 3] = [None, None, None];
    let mut t = start;
    for (i, (s, a, key)) in steps.into_iter().enumerate() {
        t = advance(t, &s);
        clock.set(t);
        let what = format!("step {i} at t={t} key {key}: {a:?}");
        let k = usize::from(key);
        match a {
            Act::Reconfigure(p2) => {
                limiter.set_quota_at(quota(&p2), t).unwrap();
                for m in models.iter_mut().flatten() {
                    m.reconfigure(p2, t, start);
                }
                current = p2;
            }
            // An absent key's refund does nothing, and a request above the capacity creates
            // no bucket: the model of a key starts with its first bucket.
            Act::Op(Op::Refund(c)) => {
                limiter.refund(&key, c).unwrap();
                if let Some(m) = &mut models[k] {
                    m.refund(t, c);
                }
            }
            Act::Op(op) => {
                let fresh = models[k].is_none();
                let m = models[k].get_or_insert_with(|| AnyModel::new_keyed(current, start, t));
                let (got, want) = match op {
                    Op::Acquire(c) => (limiter.try_acquire(&key, c), m.acquire(t, c)),
                    Op::Within(c, w) => {
                        let got = limiter.reserve_within(&key, c, Duration::from_nanos(w));
                        let want = match m {
                            AnyModel::LeakyQueue(q) => q.reserve(t, c, w),
                            m => m.acquire(t, c),
                        };
                        (got, want)
                    }
                    Op::Refund(_) => unreachable!(),
                };
                if fresh && want.is_err() {
                    models[k] = None;
                }
                same(got, want, &what)?;
            }
        }
        for (key, m) in models.iter().enumerate() {
            if let Some(m) = m {
                let key = key as u8;
                same(
                    limiter.peek(&key),
                    m.probe(t, 0),
                    &format!("{what}: peek {key}"),
                )?;
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn a_reconfigured_limiter_matches_the_model((p, start, steps) in scenario(80)) {
        reconfigured_limiter_matches_model(p, start, steps)?;
    }

    #[test]
    fn a_reconfigured_keyed_limiter_matches_the_model((p, start, steps) in scenario(60)) {
        reconfigured_keyed_matches_model(p, start, steps)?;
    }
}

/// Reconfiguring to the quota in force changes no decision.
#[test]
fn reconfiguring_to_the_same_quota_is_the_identity() {
    for rate in [
        "7/s; burst=20",
        "3/s; burst=9; refill=interval",
        "5/s; burst=8; algorithm=gcra",
        "10/s; algorithm=fixed_window",
        "10/s; algorithm=sliding_window",
        "6/s; algorithm=sliding_log",
        "4/s; algorithm=leaky_queue; max_delay=900ms",
    ] {
        let q: sluicegate::Quota = rate.parse().unwrap();
        let clock = ManualClock::new(5_000_000_000);
        let a = Limiter::with_clock(q, clock.clone()).unwrap();
        let b = Limiter::with_clock(q, clock.clone()).unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..400u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            clock.advance_nanos(x % 150_000_000);
            if i % 7 == 0 {
                b.set_quota(q).unwrap();
            }
            let c = x % 3;
            assert_eq!(a.try_acquire(c), b.try_acquire(c), "{rate} step {i}");
        }
        assert_eq!(b.metrics(), None, "counting is off by default");
    }
}

#[test]
fn another_algorithm_is_refused_and_changes_nothing() {
    let clock = ManualClock::new(0);
    let l = Limiter::with_clock("2/s".parse().unwrap(), clock).unwrap();
    l.try_acquire(1).unwrap();
    for other in [
        "2/s; algorithm=gcra",
        "2/s; refill=interval",
        "2/s; algorithm=fixed_window",
    ] {
        let e = l.set_quota(other.parse().unwrap()).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidOption {
                    option: "quota",
                    ..
                }
            ),
            "{e:?}"
        );
    }
    assert_eq!(l.quota().to_string(), "2/s");
    assert_eq!(l.peek().unwrap().remaining(), 1);
}
