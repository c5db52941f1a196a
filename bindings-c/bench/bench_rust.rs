//! The same calls as bench/bench.c, in Rust against the core: `Limiter::try_acquire` and
//! `KeyedLimiter<Box<[u8]>>::try_acquire(&[u8])`, every decision read in full (the five
//! figures summed, as the C side reads its `sg_decision`). Best of 5 runs of N calls.
//! Run by bench/run.sh: `cargo run --release -p sluicegate-c --example bench_rust`.

use sluicegate::{Decision, KeyedLimiter, Limiter, Quota};
use std::hint::black_box;
use std::time::Instant;

const N: u32 = 4_000_000;
const RUNS: u32 = 5;
const KEYS: usize = 100_000;

fn fold(d: &Decision) -> u64 {
    u64::from(d.allowed())
        + d.limit()
        + d.remaining()
        + d.retry_after_nanos()
        + d.reset_after_nanos()
}

fn best(mut run: impl FnMut() -> u64) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..RUNS {
        let t0 = Instant::now();
        black_box(run());
        best = best.min(t0.elapsed().as_nanos() as f64 / f64::from(N));
    }
    best
}

fn main() -> Result<(), sluicegate::Error> {
    let allow: Quota = "1000000000/s; burst=1000000000".parse()?;
    let reject: Quota = "1/h; burst=1".parse()?;
    let la = Limiter::try_new(allow)?;
    let lr = Limiter::try_new(reject)?;
    lr.try_acquire(1)?;
    for (name, l) in [("allow", &la), ("reject", &lr)] {
        let ns = best(|| {
            let l = black_box(l);
            (0..N)
                .map(|_| fold(&l.try_acquire(black_box(1)).unwrap()))
                .sum()
        });
        println!("limiter {name} {ns:.2}");
    }

    let keys: Vec<Vec<u8>> = (0..KEYS)
        .map(|i| format!("client-{i:06}").into_bytes())
        .collect();
    let ka = KeyedLimiter::<Box<[u8]>>::try_new(allow)?;
    let kr = KeyedLimiter::<Box<[u8]>>::try_new(reject)?;
    for k in &keys {
        ka.try_acquire(k.as_slice(), 1)?;
        kr.try_acquire(k.as_slice(), 1)?;
    }
    for (label, n) in [("keyed-1", 1), ("keyed-100k", KEYS)] {
        for (name, k) in [("allow", &ka), ("reject", &kr)] {
            let ns = best(|| {
                let k = black_box(k);
                let mut j = 0;
                let mut acc = 0;
                for _ in 0..N {
                    acc += fold(&k.try_acquire(keys[j].as_slice(), black_box(1)).unwrap());
                    j += 1;
                    if j == n {
                        j = 0;
                    }
                }
                acc
            });
            println!("{label} {name} {ns:.2}");
        }
    }
    Ok(())
}
