//! Property tests for every algorithm besides the token bucket (tests/props.rs): the limiter
//! agrees exactly with the plain reference model (tests/support/model.rs) for random quotas
//! and random (time, cost, refund) sequences, clocks that jump backwards included; GCRA makes
//! exactly the continuous token bucket's decisions; composite limits match the sequential
//! all-or-nothing model.

use sluicegate_model as model;

use model::{out, AnyModel, Composite as CompositeModel, Kind, ModelError, Out, Params};
use proptest::prelude::*;
use sluicegate::composite::Composite;
use sluicegate::{Algorithm, Decision, Error, Limiter, ManualClock, Quota};
use std::num::NonZeroU64;
use std::time::Duration;

#[derive(Clone, Debug)]
pub(crate) enum Op {
    Acquire(u64),
    Refund(u64),
    /// Leaky queue only: a reservation bounded by a maximum wait (ns).
    Within(u64, u64),
}

#[derive(Clone, Debug)]
pub(crate) enum Step {
    Forward(u64),
    Back(u64),
    Stay,
}

pub(crate) fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u64..2_000_000_000).prop_map(Step::Forward),
        3 => (0u64..20_000_000).prop_map(Step::Forward),
        1 => (0u64..3_000_000_000).prop_map(Step::Back),
        3 => Just(Step::Stay),
    ]
}

pub(crate) fn op(max_cost: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..=max_cost + 1).prop_map(Op::Acquire),
        1 => (0..=max_cost + 1).prop_map(Op::Refund),
        1 => ((0..=max_cost + 1), 0u64..3_000_000_000).prop_map(|(c, w)| Op::Within(c, w)),
    ]
}

pub(crate) fn period() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1_000_000_000u64),
        Just(60_000_000_000),
        Just(10_000_000),
        Just(3_000_000_000),
        1u64..5_000_000_000,
    ]
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Gcra),
        Just(Kind::FixedWindow),
        Just(Kind::SlidingWindow),
        Just(Kind::SlidingLog),
        Just(Kind::LeakyQueue),
    ]
}

fn algorithm(kind: Kind) -> Algorithm {
    match kind {
        Kind::TokenBucket | Kind::TokenBucketInterval => Algorithm::TokenBucket,
        Kind::Gcra => Algorithm::Gcra,
        Kind::FixedWindow => Algorithm::FixedWindow,
        Kind::SlidingWindow => Algorithm::SlidingWindow,
        Kind::SlidingLog => Algorithm::SlidingLog,
        Kind::LeakyQueue => Algorithm::LeakyQueue,
    }
}

prop_compose! {
    pub(crate) fn params_of(kind: Kind)(count in prop_oneof![1u64..12, 1u64..300], period in period(),
                             burst in 1u64..100, delay in prop_oneof![Just(0u64), 0u64..4_000_000_000])
                            (initial in 0..=burst, count in Just(count), period in Just(period),
                             burst in Just(burst), delay in Just(delay)) -> Params {
        let bucket = matches!(kind, Kind::Gcra | Kind::TokenBucket);
        Params {
            kind,
            count,
            period_ns: period,
            burst: if bucket { burst } else { count },
            initial: if bucket { initial } else { count },
            max_delay_ns: delay,
        }
    }
}

pub(crate) fn params() -> impl Strategy<Value = Params> {
    kind().prop_flat_map(params_of)
}

pub(crate) fn quota(p: &Params) -> Quota {
    let nz = |v: u64| NonZeroU64::new(v).unwrap();
    let mut q = Quota::new(nz(p.count), nz(p.period_ns))
        .with_burst(nz(p.burst))
        .with_initial(p.initial)
        .with_algorithm(algorithm(p.kind));
    if p.kind == Kind::LeakyQueue {
        q = q.with_max_delay(Duration::from_nanos(p.max_delay_ns));
    }
    if p.kind == Kind::TokenBucketInterval {
        q = q.with_refill(sluicegate::Refill::Interval);
    }
    q
}

pub(crate) fn same(
    got: Result<Decision, Error>,
    want: Result<Out, ModelError>,
    what: &str,
) -> Result<(), TestCaseError> {
    match (got, want) {
        (Ok(d), Ok(m)) => prop_assert_eq!(out(&d), m, "{}", what),
        (Err(Error::InsufficientCapacity { .. }), Err(ModelError::InsufficientCapacity)) => {}
        (g, w) => prop_assert!(false, "{what}: limiter {g:?} vs model {w:?}"),
    }
    Ok(())
}

pub(crate) fn advance(t: u64, s: &Step) -> u64 {
    match *s {
        Step::Forward(d) => t.saturating_add(d),
        Step::Back(d) => t.saturating_sub(d),
        Step::Stay => t,
    }
}

fn run(p: Params, start: u64, steps: Vec<(Step, Op)>) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(start);
    let limiter = Limiter::with_clock(quota(&p), clock.clone()).unwrap();
    let mut model = AnyModel::new(p, start);
    let mut t = start;
    for (i, (s, o)) in steps.into_iter().enumerate() {
        t = advance(t, &s);
        clock.set(t);
        let what = format!("step {i} at t={t}: {o:?}");
        match o {
            Op::Acquire(c) => same(limiter.try_acquire(c), model.acquire(t, c), &what)?,
            Op::Refund(c) => {
                limiter.refund(c).unwrap();
                model.refund(t, c);
            }
            Op::Within(c, w) => {
                let got = limiter.reserve_within(c, Duration::from_nanos(w));
                let want = match &mut model {
                    AnyModel::LeakyQueue(q) => q.reserve(t, c, w),
                    m => m.acquire(t, c),
                };
                same(got, want, &what)?;
            }
        }
        // Lossless eviction (DESIGN invariant 4): with initial == burst, a bucket the limiter
        // calls full decides every later request exactly as a bucket created now would.
        if p.initial == p.burst && limiter.is_full().unwrap() {
            let fresh = AnyModel::new(p, t);
            let limit = model.probe(t, 0).unwrap().limit;
            for dt in [0, 1, p.period_ns / 3, p.period_ns, 3 * p.period_ns] {
                for c in [1, limit] {
                    let later = t.saturating_add(dt);
                    prop_assert_eq!(
                        model.probe(later, c),
                        fresh.probe(later, c),
                        "{} dt={}",
                        what,
                        dt
                    );
                }
            }
        }
    }
    Ok(())
}

pub(crate) fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn every_algorithm_matches_its_model(p in params(), start in 0u64..10_000_000_000,
                                         steps in prop::collection::vec((step(), op(30)), 1..100)) {
        run(p, start, steps)?;
    }

    #[test]
    fn near_capacity_costs(p in params(), steps in prop::collection::vec((step(), op(300)), 1..60)) {
        run(p, 0, steps)?;
    }

    /// States that need the 128-bit word (a large rate, or a large window limit), at clock
    /// readings past a century.
    #[test]
    fn wide_words_match_model(kind in kind(), count in 600_000u64..10_000_000,
                              start in 0u64..(3 * sluicegate::CENTURY_NS),
                              steps in prop::collection::vec((step(), op(50)), 1..40)) {
        let (count, period) = match kind {
            Kind::SlidingLog => (count % 1000 + 1, 1_000_000_007),
            // A window limit of 2^33..: the index field runs short in 64 bits.
            Kind::FixedWindow | Kind::SlidingWindow => (count << 14, 1_000_000_007),
            _ => (count, 1_000_000_007), // prime: k stays large after the gcd
        };
        let p = Params { kind, count, period_ns: period, burst: count.min(50),
                         initial: count.min(50), max_delay_ns: 999_999_937 };
        let p = if matches!(kind, Kind::Gcra) { p } else { Params { burst: count, initial: count, ..p } };
        let l = Limiter::with_clock(quota(&p), ManualClock::new(0)).unwrap();
        prop_assert_eq!(l.is_wide(), kind != Kind::SlidingLog);
        run(p, start, steps)?;
    }

    /// GCRA and the continuous token bucket make identical decisions, call for call.
    #[test]
    fn gcra_equals_continuous_token_bucket(p in params_of(Kind::Gcra), start in 0u64..10_000_000_000,
                                           steps in prop::collection::vec((step(), op(40)), 1..120)) {
        let clock = ManualClock::new(start);
        let gcra = Limiter::with_clock(quota(&p), clock.clone()).unwrap();
        let bucket = Limiter::with_clock(quota(&Params { kind: Kind::TokenBucket, ..p }), clock.clone()).unwrap();
        prop_assert_eq!(gcra.is_wide(), bucket.is_wide());
        let mut t = start;
        for (i, (s, o)) in steps.into_iter().enumerate() {
            t = advance(t, &s);
            clock.set(t);
            match o {
                Op::Acquire(c) | Op::Within(c, _) => {
                    prop_assert_eq!(gcra.try_acquire(c), bucket.try_acquire(c), "step {}", i);
                }
                Op::Refund(c) => {
                    gcra.refund(c).unwrap();
                    bucket.refund(c).unwrap();
                }
            }
            prop_assert_eq!(gcra.is_full(), bucket.is_full());
        }
    }

    /// Composite limits (2-3 parts of any algorithms) against the sequential model.
    #[test]
    fn composite_matches_model(parts in prop::collection::vec(
                                   prop_oneof![params(), params_of(Kind::TokenBucket)], 1..4),
                               start in 0u64..10_000_000_000,
                               steps in prop::collection::vec((step(), op(20)), 1..80)) {
        let clock = ManualClock::new(start);
        let limiters = parts.iter()
            .map(|p| Limiter::with_clock(quota(p), clock.clone()).unwrap())
            .collect();
        let composite = Composite::new(limiters);
        let mut model = CompositeModel { parts: parts.iter().map(|p| AnyModel::new(*p, start)).collect() };
        let mut t = start;
        for (i, (s, o)) in steps.into_iter().enumerate() {
            t = advance(t, &s);
            clock.set(t);
            match o {
                Op::Acquire(c) | Op::Within(c, _) => {
                    same(composite.try_acquire(c), model.acquire(t, c), &format!("step {i} at t={t}: {c}"))?;
                }
                Op::Refund(c) => {
                    composite.refund_at(t, c).unwrap();
                    model.refund(t, c);
                }
            }
        }
    }

    #[test]
    fn rate_strings_round_trip(count in 1u64..100_000, n in 1u64..100, unit in 0usize..7,
                               kind in kind(), delay in 0u64..100_000, dunit in 0usize..7) {
        let units = ["ns", "us", "ms", "s", "m", "h", "d"];
        let mut s = format!("{count}/{n}{}; algorithm={}", units[unit], algorithm(kind));
        if kind == Kind::LeakyQueue {
            s.push_str(&format!("; max_delay={delay}{}", units[dunit]));
        }
        if let Ok(q) = s.parse::<Quota>() {
            prop_assert_eq!(q.algorithm(), algorithm(kind));
            let again: Quota = q.to_string().parse().unwrap();
            prop_assert_eq!(q, again);
        }
    }
}
