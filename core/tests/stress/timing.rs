//! Rough per-decision timings of every algorithm (allow and reject paths, 1 and 2 threads on
//! one limiter). Not a benchmark suite (that is `benches/`): a quick, dependency-free check,
//! run with `cargo test -p sluicegate --release --test timing_algos -- --ignored --nocapture`.

use sluicegate::{Limiter, ManualClock};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

const N: u64 = 2_000_000;

fn per_op(f: impl Fn(u64)) -> f64 {
    let start = Instant::now();
    for i in 0..N {
        f(i);
    }
    start.elapsed().as_nanos() as f64 / N as f64
}

#[test]
#[ignore = "timing; run in release"]
fn timings() {
    let rates = [
        ("token_bucket", "1000/ms; burst=1000"),
        ("gcra", "1000/ms; burst=1000; algorithm=gcra"),
        ("fixed_window", "1000/ms; algorithm=fixed_window"),
        ("sliding_window", "1000/ms; algorithm=sliding_window"),
        ("sliding_log", "1000/ms; algorithm=sliding_log"),
        (
            "leaky_queue",
            "1000/ms; algorithm=leaky_queue; max_delay=1ms",
        ),
    ];
    println!("algorithm        allow(1t)  reject(1t)  allow(2t, one limiter)  ns/decision");
    for (name, rate) in rates {
        let l = Arc::new(Limiter::with_clock(rate.parse().unwrap(), ManualClock::new(0)).unwrap());
        // 2 us apart at 1000/ms: every request is admitted (500 per window).
        let allow = per_op(|i| {
            black_box(l.try_acquire_at(1_000_000 + i * 2_000, 1).unwrap());
        });
        let t_end = 1_000_000 + N * 2_000;
        for _ in 0..3000 {
            l.try_acquire_at(t_end, 1).unwrap();
        }
        let reject = per_op(|_| {
            assert!(!black_box(l.try_acquire_at(t_end, 1).unwrap()).allowed());
        });
        let l2 = Arc::new(Limiter::with_clock(rate.parse().unwrap(), ManualClock::new(0)).unwrap());
        let start = Instant::now();
        let hs: Vec<_> = (0..2u64)
            .map(|k| {
                let l2 = l2.clone();
                std::thread::spawn(move || {
                    for i in 0..N / 2 {
                        black_box(
                            l2.try_acquire_at(1_000_000 + (2 * i + k) * 2_000, 1)
                                .unwrap(),
                        );
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let two = start.elapsed().as_nanos() as f64 / N as f64;
        println!("{name:<16} {allow:>9.1}  {reject:>10.1}  {two:>22.1}");
    }
}
