//! Property tests: the lock-free limiter agrees exactly with the sequential reference model
//! (tests/support/model.rs) for random quotas and random (time, cost, refund) sequences,
//! including clocks that jump backwards, both refill modes and both word widths.

use sluicegate_model as model;

use model::{out, Model, ModelError};
use proptest::prelude::*;
use sluicegate::{Clock, Error, Limiter, ManualClock, Quota, Refill};

#[derive(Clone, Debug)]
enum Op {
    Acquire(u64),
    Refund(u64),
}

#[derive(Clone, Debug)]
enum Step {
    Forward(u64),
    Back(u64),
    Stay,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u64..2_000_000_000).prop_map(Step::Forward),
        2 => (0u64..2_000_000).prop_map(Step::Forward),
        1 => (0u64..5_000_000_000).prop_map(Step::Back),
        2 => Just(Step::Stay),
    ]
}

fn op(max_cost: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..=max_cost + 2).prop_map(Op::Acquire),
        1 => (0..=max_cost + 2).prop_map(Op::Refund),
    ]
}

fn period() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1_000_000_000u64),
        Just(60_000_000_000),
        Just(1_000_000),
        Just(2_000_000_000),
        1u64..10_000_000_000,
    ]
}

prop_compose! {
    fn quota()(count in prop_oneof![1u64..20, 1u64..5_000], period in period(),
               burst in 1u64..200, interval in any::<bool>())
              (count in Just(count), period in Just(period), burst in Just(burst),
               initial in 0..=burst, interval in Just(interval)) -> (u64, u64, u64, u64, bool) {
        (count, period, burst, initial, interval)
    }
}

fn run(
    (count, period, burst, initial, interval): (u64, u64, u64, u64, bool),
    start: u64,
    steps: Vec<(Step, Op)>,
) -> Result<(), TestCaseError> {
    let mut q = Quota::try_new(count, period, burst)
        .unwrap()
        .with_initial(initial);
    if interval {
        q = q.with_refill(Refill::Interval);
    }
    let clock = ManualClock::new(start);
    let limiter = Limiter::with_clock(q, clock.clone()).unwrap();
    let mut model = Model::new(count, period, burst, initial, interval, start);
    let mut t = start;
    for (i, (s, o)) in steps.into_iter().enumerate() {
        t = match s {
            Step::Forward(d) => t.saturating_add(d),
            Step::Back(d) => t.saturating_sub(d),
            Step::Stay => t,
        };
        clock.set(t);
        match o {
            Op::Acquire(c) => {
                let got = limiter.try_acquire(c);
                let want = model.acquire(t, c);
                match (got, want) {
                    (Ok(d), Ok(m)) => {
                        prop_assert_eq!(out(&d), m, "step {} at t={} cost {}", i, t, c)
                    }
                    (
                        Err(Error::InsufficientCapacity { .. }),
                        Err(ModelError::InsufficientCapacity),
                    ) => {}
                    (g, w) => prop_assert!(false, "step {i}: limiter {g:?} vs model {w:?}"),
                }
            }
            Op::Refund(c) => {
                limiter.refund(c).unwrap();
                model.refund(t, c);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1024)))]

    #[test]
    fn limiter_matches_model(q in quota(), start in 0u64..10_000_000_000,
                             steps in prop::collection::vec((step(), op(40)), 1..120)) {
        run(q, start, steps)?;
    }

    #[test]
    fn weighted_costs_near_capacity(q in quota(), steps in prop::collection::vec((step(), op(200)), 1..60)) {
        run(q, 0, steps)?;
    }

    /// Quotas whose exact state needs the 128-bit word (large k after gcd reduction), at
    /// clock readings beyond a century.
    #[test]
    fn wide_words_match_model(count in 600_000u64..10_000_000, burst in 1u64..50,
                              start in 0u64..(4 * sluicegate::CENTURY_NS),
                              steps in prop::collection::vec((step(), op(50)), 1..60)) {
        let period = 1_000_000_007; // prime: nothing cancels, k stays large
        let q = Quota::try_new(count, period, burst).unwrap();
        prop_assert!(Limiter::with_clock(q, ManualClock::new(0)).unwrap().is_wide());
        run((count, period, burst, burst, false), start, steps)?;
    }

    #[test]
    fn rate_strings_round_trip(count in 1u64..1_000_000, n in 1u64..100, unit in 0usize..7,
                               burst in 1u64..1_000_000, interval in any::<bool>()) {
        let units = ["ns", "us", "ms", "s", "m", "h", "d"];
        let mut s = format!("{count}/{n}{}; burst={burst}", units[unit]);
        if interval { s.push_str("; refill=interval"); }
        if let Ok(q) = s.parse::<Quota>() {
            let again: Quota = q.to_string().parse().unwrap();
            prop_assert_eq!(q, again);
        }
    }

    #[test]
    fn parser_never_panics(s in "\\PC{0,40}") {
        let _ = s.parse::<Quota>();
    }
}

/// No drift over 10^9 decisions' worth of time: a 3/s bucket drained continuously for a
/// simulated 10^9 requests' span admits exactly floor(3 * t) + burst, not a token more or less.
#[test]
fn no_drift_over_a_billion_steps_of_time() {
    let clock = ManualClock::new(0);
    let limiter = Limiter::with_clock("3/s; burst=1".parse().unwrap(), clock.clone()).unwrap();
    assert!(limiter.try_acquire(1).unwrap().allowed());
    // Step in increments that never divide a token evenly (333_333_333 ns < 1/3 s).
    let step = 333_333_333u64;
    let mut admitted = 1u64;
    let steps = 1_000_000u64;
    for i in 1..=steps {
        clock.set(i * step * 1000);
        let d = limiter.try_acquire(1).unwrap();
        admitted += u64::from(d.allowed());
    }
    // Each step is 333.333333 s: 999.999999 tokens accrue, capped at a burst of 1.
    assert_eq!(admitted, 1 + steps);
    // Now exact accrual: 1e9 steps of 1 ns at 3/s is exactly 3 tokens.
    let l2 =
        Limiter::with_clock("3/s; burst=3; initial=0".parse().unwrap(), clock.clone()).unwrap();
    let t0 = clock.now();
    clock.set(t0 + 1_000_000_000);
    assert_eq!(l2.peek().unwrap().remaining(), 3);
    clock.set(t0 + 999_999_999);
    let l3 = Limiter::with_clock(
        "3/s; burst=3; initial=0".parse().unwrap(),
        ManualClock::new(t0),
    )
    .unwrap();
    let d = l3.try_acquire_at(t0 + 999_999_999, 3).unwrap();
    assert!(!d.allowed());
    assert_eq!(d.retry_after_nanos(), 1);
}
