//! Real threads hammering one bucket on the real (TSC) clock. Over the run, the admitted cost
//! never exceeds initial + k*d/P; and every token that accrued was either admitted or is still
//! in the bucket at the last reading (within one token), so a saturated limiter admits no less
//! than the model allows. No timing assertions: the bounds come from the clock readings the
//! threads passed to the limiter.

use sluicegate::{Clock, Limiter, MonotonicClock, Quota};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Hammers one bucket from `threads` threads for `run` and checks the bounds.
fn hammer(rate: &str, threads: usize, cost: u64, run: Duration) {
    let quota: Quota = rate.parse().unwrap();
    let clock = MonotonicClock::new();
    let t0_before = clock.now();
    let limiter = Arc::new(Limiter::with_clock(quota, clock.clone()).unwrap());
    let t0_after = clock.now();
    let stop = Arc::new(AtomicBool::new(false));
    let admitted = Arc::new(AtomicU64::new(0));
    let t_last = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (l, stop, admitted, t_last, clock) = (
                limiter.clone(),
                stop.clone(),
                admitted.clone(),
                t_last.clone(),
                clock.clone(),
            );
            std::thread::spawn(move || {
                let (mut mine, mut last) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let now = clock.now();
                    if l.try_acquire_at(now, cost).unwrap().allowed() {
                        mine += cost;
                    }
                    last = last.max(now);
                }
                admitted.fetch_add(mine, Ordering::Relaxed);
                t_last.fetch_max(last, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(run);
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    let t_last = t_last.load(Ordering::Relaxed);
    let admitted = u128::from(admitted.load(Ordering::Relaxed));
    let (k, p, b) = (
        u128::from(quota.count()),
        u128::from(quota.period_ns()),
        u128::from(quota.burst()),
    );
    let initial = u128::from(quota.initial());
    // Upper bound (invariant 1): never more than the initial tokens plus what accrued.
    let upper = initial + k * u128::from(t_last - t0_before) / p;
    assert!(
        admitted <= upper,
        "{rate}: admitted {admitted} > bound {upper}"
    );
    // Conservation: tokens that accrued by t_last were admitted or are still in the bucket.
    // Exact when the bucket can never fill during the run (so none overflowed).
    let left = u128::from(limiter.try_acquire_at(t_last, 0).unwrap().remaining());
    let accrued_min = initial + k * u128::from(t_last - t0_after) / p;
    eprintln!("{rate}: {threads} threads, admitted {admitted}, bound {upper}, left {left}");
    if initial + upper < b {
        assert!(
            admitted + left + 1 >= accrued_min,
            "{rate}: admitted {admitted} + left {left} < accrued {accrued_min}: tokens lost"
        );
    }
}

#[test]
fn two_threads_never_over_admit_continuous() {
    hammer("100000/s; burst=100", 2, 1, Duration::from_millis(300));
    // Empty at the start and too deep to fill: the conservation check is exact.
    hammer(
        "100000/s; burst=1000000; initial=0",
        2,
        1,
        Duration::from_millis(300),
    );
}

#[test]
fn four_threads_weighted_never_over_admit() {
    hammer(
        "200000/s; burst=5000000; initial=0",
        4,
        3,
        Duration::from_millis(300),
    );
}

#[test]
fn wide_word_never_over_admits() {
    // 999/ms reduces to k = 999: the 128-bit word.
    let l = Limiter::new("999/ms; burst=50".parse().unwrap());
    assert!(l.is_wide());
    hammer("999/ms; burst=50", 2, 1, Duration::from_millis(300));
    hammer(
        "999/ms; burst=10000000; initial=0",
        2,
        1,
        Duration::from_millis(300),
    );
}

#[test]
fn interval_refill_never_over_admits() {
    let quota: Quota = "1000/10ms; burst=1000; initial=0; refill=interval"
        .parse()
        .unwrap();
    let clock = MonotonicClock::new();
    // Read before the limiter exists: its tokens accrue from its creation, not after it.
    let t0 = clock.now();
    let limiter = Arc::new(Limiter::with_clock(quota, clock.clone()).unwrap());
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                let end = clock.now() + 200_000_000;
                while clock.now() < end {
                    if limiter.try_acquire(1).unwrap().allowed() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    let t_end = clock.now();
    // Whole periods completed since creation, each adding 1000 tokens.
    let periods = (t_end - t0) / 10_000_000;
    assert!(admitted.load(Ordering::Relaxed) <= periods * 1000);
}
