//! Property tests: a `DenseLimiter` makes exactly the decisions of a `KeyedLimiter` on the
//! same quota built at the same clock reading (indices for keys), for every algorithm and
//! random requests, refunds and peeks, clocks that jump backwards included, while the key
//! bound is not met; at the bound it refuses new indices and goes on with the others.

use super::algorithms::{advance, params_of, quota, step, Step};
use super::reconfigure::any_kind;

use proptest::prelude::*;
use sluicegate::{DenseLimiter, Error, KeyedLimiter, Limiter, ManualClock, Quota};

#[derive(Clone, Debug)]
enum Op {
    Acquire(u8, u64),
    Refund(u8, u64),
    Peek(u8),
}

fn op(max_cost: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..5, 0..=max_cost + 1).prop_map(|(k, c)| Op::Acquire(k, c)),
        1 => (0u8..5, 0..=max_cost + 1).prop_map(|(k, c)| Op::Refund(k, c)),
        1 => (0u8..5).prop_map(Op::Peek),
    ]
}

/// Plays `steps` on both limiters, built at `start`, comparing every result.
fn run(q: Quota, start: u64, steps: &[(Step, Op)]) -> Result<(), TestCaseError> {
    let clock = ManualClock::new(start);
    let keyed: KeyedLimiter<u8, ManualClock> = KeyedLimiter::builder(q)
        .sweep_on_grow(false)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut dense = DenseLimiter::new(q, start, 5).unwrap();
    let mut t = start;
    for (i, (s, o)) in steps.iter().enumerate() {
        t = advance(t, s);
        clock.set(t);
        let what = format!("{q} step {i} {s:?} {o:?} at {t}");
        let (a, b) = match *o {
            Op::Acquire(k, c) => (
                format!("{:?}", keyed.try_acquire_at(&k, t, c)),
                format!("{:?}", dense.try_acquire_at(usize::from(k), t, c)),
            ),
            Op::Refund(k, c) => (
                format!("{:?}", keyed.refund_at(&k, t, c)),
                format!("{:?}", dense.refund_at(usize::from(k), t, c)),
            ),
            Op::Peek(k) => (
                format!("{:?}", keyed.peek_at(&k, t)),
                format!("{:?}", dense.peek_at(usize::from(k), t)),
            ),
        };
        prop_assert_eq!(a, b, "{}", what);
        prop_assert_eq!(keyed.len(), dense.len(), "{}", what);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(super::keyed_ops::cases()))]

    #[test]
    fn dense_limiter_decides_as_the_keyed_limiter(
        p in any_kind().prop_flat_map(params_of),
        start in prop_oneof![Just(0u64), 0u64..10_000_000_000],
        steps in prop::collection::vec((step(), op(100)), 1..120),
    ) {
        run(quota(&p), start, &steps)?;
    }

    /// Quotas whose exact state needs the 128-bit word, at readings beyond a century.
    #[test]
    fn wide_words_too(
        count in 600_000u64..10_000_000,
        burst in 1u64..50,
        start in 0u64..(3 * sluicegate::CENTURY_NS),
        steps in prop::collection::vec((step(), op(50)), 1..60),
    ) {
        let q = Quota::try_new(count, 1_000_000_007, burst).unwrap();
        prop_assert!(Limiter::with_clock(q, ManualClock::new(0)).unwrap().is_wide());
        run(q, start, &steps)?;
    }
}

#[test]
fn at_the_bound_new_indices_are_refused_and_held_ones_go_on() {
    for q in [
        "1/s; burst=2",
        "1/s; algorithm=sliding_log",
        "5/m; algorithm=leaky_queue; max_delay=1s",
    ] {
        let mut d = DenseLimiter::new(q.parse().unwrap(), 0, 4).unwrap();
        assert!(d.try_acquire_at(3, 0, 1).unwrap().allowed(), "{q}");
        // An index at the bound or past it is refused, whatever is held (the arrays hold
        // every index up to the largest: they stay within `max_keys` states).
        for past in [4, 5, usize::MAX] {
            assert!(
                matches!(
                    d.try_acquire_at(past, 0, 1),
                    Err(Error::KeyStoreFull { max_keys: 4 })
                ),
                "{q}"
            );
        }
        assert!(d.try_acquire_at(0, 0, 1).unwrap().allowed(), "{q}");
        assert!(d.try_acquire_at(2, 0, 1).unwrap().allowed(), "{q}");
        assert_eq!(d.len(), 3, "{q}");
        let mut d = DenseLimiter::new(q.parse().unwrap(), 0, 2).unwrap();
        assert!(d.is_empty(), "{q}");
        assert!(d.try_acquire_at(1, 0, 1).unwrap().allowed(), "{q}");
        assert!(d.try_acquire_at(0, 0, 1).unwrap().allowed(), "{q}");
        assert!(!d.is_empty() && d.len() == 2 && d.max_keys() == 2, "{q}");
        // At the bound: a new index is refused.
        assert!(
            matches!(
                d.try_acquire_at(2, 0, 1),
                Err(Error::KeyStoreFull { max_keys: 2 })
            ),
            "{q}"
        );
        assert!(
            d.peek_at(4, 0).unwrap().allowed(),
            "{q}: a peek creates nothing"
        );
        d.refund_at(4, 0, 1).unwrap();
        assert_eq!(d.len(), 2, "{q}: a refund creates nothing");
        assert!(d.try_acquire_at(1, 5_000_000_000, 1).is_ok(), "{q}");
        assert!(
            matches!(
                d.try_acquire_at(0, 0, 1_000),
                Err(Error::InsufficientCapacity { .. })
            ),
            "{q}"
        );
        assert!(
            matches!(
                d.try_acquire_at(0, u64::MAX, 1),
                Err(Error::ClockOutOfRange { .. })
            ),
            "{q}"
        );
    }
    assert!(DenseLimiter::new("1/s".parse().unwrap(), 0, 0).is_err());
}

/// A fixed window whose count is all ones in its field (2^40 - 1), in a narrow word whose
/// index field ends inside u64 (a window of 2^39 ns: the horizon is 2^63 - 1, past a century):
/// its last window's full state is the all-ones word, which both stores take for the mark of
/// a bucket that is not there. `limit()` keeps readings below that window; the stores' checks
/// test only `now < horizon`.
#[test]
fn the_last_window_never_makes_a_full_bucket_absent() {
    let q: Quota = "1099511627775/549755813888ns; algorithm=fixed_window"
        .parse()
        .unwrap();
    let mut d = DenseLimiter::new(q, 0, 4).unwrap();
    let now = (1u64 << 63) - (1 << 39) + 5; // in the last window, below the horizon
    let cap = (1u64 << 40) - 1;
    let first = d.try_acquire_at(0, now, cap);
    let second = d.try_acquire_at(0, now, cap);
    assert!(
        !matches!((&first, &second), (Ok(a), Ok(b)) if a.allowed() && b.allowed()),
        "the window's count admitted twice: {first:?} {second:?}, {} buckets",
        d.len()
    );
}

/// The same last window on a `KeyedLimiter` (whose check also tests only `now < horizon`).
#[test]
fn the_last_window_never_makes_a_full_keyed_bucket_absent() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let q: Quota = "1099511627775/549755813888ns; algorithm=fixed_window"
            .parse()
            .unwrap();
        let k: KeyedLimiter<u8, ManualClock> = KeyedLimiter::builder(q)
            .clock(ManualClock::new(0))
            .build()
            .unwrap();
        let now = (1u64 << 63) - (1 << 39) + 5;
        let cap = (1u64 << 40) - 1;
        let first = k.try_acquire_at(&0, now, cap);
        let second = k.try_acquire_at(&0, now, cap);
        let _ = tx.send(format!("{first:?} {second:?} len {}", k.len()));
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the keyed limiter did not answer within 20 s");
    assert!(got.matches("allowed: true").count() < 2, "{got}");
}

/// `max_keys` bounds the index, and the arrays hold every index up to the largest asked
/// for: a bound no array can reach (`usize::MAX`, "no bound") must not turn a large index
/// into a panic ("capacity overflow") or an abort (allocation failure) instead of an error.
#[test]
fn an_index_no_array_can_hold_is_an_error_not_a_panic() {
    let mut d = DenseLimiter::new("1/s".parse().unwrap(), 0, usize::MAX).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        d.try_acquire_at(usize::MAX / 2, 0, 1).map(|d| d.allowed())
    }));
    assert!(matches!(r, Ok(Err(_))), "{r:?}");
}
