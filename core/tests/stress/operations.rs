//! Real threads on the operations of docs/OPERATIONS.md: the counters are exact under
//! concurrency (and across threads that come and go, reusing their slots), and a limiter whose
//! quota is changed over and over while threads decide never admits more than the largest
//! burst plus what the fastest rate accrues: a reconfiguration never mints tokens.

use sluicegate::{Clock, KeyedLimiter, Limiter, ManualClock, MonotonicClock, Quota};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Per outcome: (allowed, rejected, shadow-rejected) as the deciding threads saw them.
fn tally(d: &sluicegate::Decision, t: &mut [u64; 3]) {
    let i = if d.shadow_rejected() {
        2
    } else if d.allowed() {
        0
    } else {
        1
    };
    t[i] += 1;
}

#[test]
fn counters_are_exact_under_threads() {
    for shadow in [false, true] {
        let clock = ManualClock::new(0);
        let l = Arc::new(
            Limiter::builder("1000/s; burst=5000".parse().unwrap())
                .clock(clock.clone())
                .metrics(true)
                .shadow(shadow)
                .build()
                .unwrap(),
        );
        let kl = Arc::new(
            KeyedLimiter::<u64, _>::builder("100/s".parse().unwrap())
                .clock(clock.clone())
                .metrics(true)
                .shadow(shadow)
                .build()
                .unwrap(),
        );
        let mut seen = [[0u64; 3]; 2];
        // Waves of short-lived threads: more threads over time than a chunk of slots, each
        // wave's indexes reused by the next.
        for wave in 0..6u64 {
            let hs: Vec<_> = (0..6u64)
                .map(|t| {
                    let (l, kl, clock) = (l.clone(), kl.clone(), clock.clone());
                    std::thread::spawn(move || {
                        let mut mine = [[0u64; 3]; 2];
                        for i in 0..3_000u64 {
                            if i % 500 == 0 && t == 0 {
                                clock.advance_nanos(1_000_000);
                            }
                            tally(&l.try_acquire(1).unwrap(), &mut mine[0]);
                            let key = (wave * 7 + t * 3 + i) % 40;
                            tally(&kl.try_acquire(&key, 1).unwrap(), &mut mine[1]);
                        }
                        mine
                    })
                })
                .collect();
            for h in hs {
                let mine = h.join().unwrap();
                for (s, m) in seen.iter_mut().zip(mine) {
                    for (a, b) in s.iter_mut().zip(m) {
                        *a += b;
                    }
                }
            }
        }
        for (m, s) in [l.metrics().unwrap(), kl.metrics().unwrap()]
            .iter()
            .zip(seen)
        {
            assert_eq!(
                [m.allowed, m.rejected, m.shadow_rejected],
                s,
                "shadow={shadow}"
            );
            assert_eq!(s.iter().sum::<u64>(), 6 * 6 * 3_000);
            assert!(s[0] > 0 && s[1] + s[2] > 0, "{s:?}");
            assert_eq!(if shadow { s[1] } else { s[2] }, 0);
        }
    }
}

/// Threads hammer a limiter (or a keyed one) while another thread switches its quota back
/// and forth every millisecond or so: the admitted cost stays within the largest burst (or
/// initial tokens) plus what the fastest rate accrues over the run.
fn hammer_while_reconfiguring<F, R>(
    threads: usize,
    decide: F,
    reconfigure: R,
    bound: impl Fn(u64) -> u128,
) where
    F: Fn(u64, u64) -> bool + Send + Sync + 'static,
    R: Fn(usize) + Send + 'static,
{
    let clock = MonotonicClock::new();
    let decide = Arc::new(decide);
    let stop = Arc::new(AtomicBool::new(false));
    let admitted = Arc::new(AtomicU64::new(0));
    let t0 = clock.now();
    let t_last = Arc::new(AtomicU64::new(t0));
    let workers: Vec<_> = (0..threads as u64)
        .map(|t| {
            let (decide, stop, admitted, t_last, clock) = (
                decide.clone(),
                stop.clone(),
                admitted.clone(),
                t_last.clone(),
                clock.clone(),
            );
            std::thread::spawn(move || {
                let (mut mine, mut last, mut i) = (0u64, 0u64, t);
                while !stop.load(Ordering::Relaxed) {
                    let now = clock.now();
                    if decide(now, i) {
                        mine += 1;
                    }
                    last = last.max(now);
                    i += threads as u64;
                }
                admitted.fetch_add(mine, Ordering::Relaxed);
                t_last.fetch_max(last, Ordering::Relaxed);
            })
        })
        .collect();
    let switched = Arc::new(AtomicU64::new(0));
    let switcher = {
        let (stop, switched) = (stop.clone(), switched.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                reconfigure(n);
                n += 1;
                switched.store(n as u64, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(700));
            }
            n
        })
    };
    // 300 ms of decisions, and on until the switcher has reconfigured more than 10 times (a
    // loaded machine may have kept it off the CPU; 30 s at most).
    std::thread::sleep(Duration::from_millis(300));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while switched.load(Ordering::Relaxed) <= 10 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    workers.into_iter().for_each(|w| w.join().unwrap());
    let switches = switcher.join().unwrap();
    let d = t_last.load(Ordering::Relaxed) - t0;
    let (admitted, upper) = (u128::from(admitted.load(Ordering::Relaxed)), bound(d));
    eprintln!("admitted {admitted}, bound {upper}, {switches} reconfigurations");
    assert!(switches > 10, "{switches}");
    assert!(admitted <= upper, "admitted {admitted} > bound {upper}");
}

#[test]
fn a_limiter_reconfigured_under_threads_never_over_admits() {
    // 200 000/s with a burst of 100, and 50 000/s with a burst of 3000 (a 128-bit word:
    // 49 999 tokens per 999 999 997 ns), one empty at the start.
    let a: Quota = "200000/s; burst=100; initial=0".parse().unwrap();
    let b = Quota::try_new(49_999, 999_999_997, 3000).unwrap();
    let l = Arc::new(Limiter::with_clock(a, MonotonicClock::new()).unwrap());
    let (l1, l2) = (l.clone(), l.clone());
    hammer_while_reconfiguring(
        2,
        move |now, _| l1.try_acquire_at(now, 1).unwrap().allowed(),
        move |n| l2.set_quota(if n % 2 == 0 { b } else { a }).unwrap(),
        // Never more than the largest burst plus the fastest rate over the run.
        |d| 3000 + 200_000 * u128::from(d) / 1_000_000_000,
    );
    assert!(l.metrics().is_none());
}

#[test]
fn a_keyed_limiter_reconfigured_under_threads_never_over_admits() {
    let a: Quota = "100000/s; burst=50".parse().unwrap();
    let b = Quota::try_new(39_999, 999_999_997, 400).unwrap();
    let keys = 4u64;
    let kl = Arc::new(
        KeyedLimiter::<u64, _>::builder(a)
            .shards(2)
            .clock(MonotonicClock::new())
            .build()
            .unwrap(),
    );
    let (k1, k2) = (kl.clone(), kl.clone());
    hammer_while_reconfiguring(
        3,
        move |now, i| k1.try_acquire_at(&(i % keys), now, 1).unwrap().allowed(),
        move |n| k2.set_quota(if n % 2 == 0 { b } else { a }).unwrap(),
        // Per key: the largest initial tokens plus the fastest rate over the run.
        |d| u128::from(keys) * (400 + 100_000 * u128::from(d) / 1_000_000_000),
    );
    assert_eq!(kl.len() as u64, keys);
}
