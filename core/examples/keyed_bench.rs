//! A quick std::time benchmark of `KeyedLimiter<u64>`: ns per decision at 1, 100k and 1M keys
//! (random key order, default TSC clock), bytes per key at 1M keys (RSS), and 2 threads on
//! disjoint keys. Run: `cargo run -p sluicegate --release --example keyed_bench`.

use sluicegate::{KeyedLimiter, Quota};
use std::hint::black_box;
use std::time::Instant;

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn limiter(max_keys: usize) -> KeyedLimiter<u64> {
    // Buckets stay non-full (and so stay linked) for a minute after a request.
    let q: Quota = "1/min; burst=100000".parse().unwrap();
    KeyedLimiter::<u64>::builder(q)
        .max_keys(max_keys)
        .build()
        .unwrap()
}

fn per_decision(l: &KeyedLimiter<u64>, keys: u64, iters: u64, seed: u64) -> f64 {
    let mut x = seed | 1;
    let start = Instant::now();
    for _ in 0..iters {
        let k = xorshift(&mut x) % keys;
        black_box(l.try_acquire(&k, 1).unwrap());
    }
    start.elapsed().as_nanos() as f64 / iters as f64
}

fn main() {
    let iters = 20_000_000;
    for &n in &[1u64, 100_000, 1_000_000] {
        let before = rss_bytes();
        let l = limiter(2_000_000);
        for k in 0..n {
            l.try_acquire(&k, 1).unwrap();
        }
        let after = rss_bytes();
        let ns = per_decision(&l, n, iters, 0x9e37_79b9);
        let ns = ns.min(per_decision(&l, n, iters, 0x1234_5678));
        println!(
            "keys={n:>8} ns/decision={ns:6.1} len={} capacity={} rss_delta/key={:.1} B",
            l.len(),
            l.capacity(),
            (after.saturating_sub(before)) as f64 / n as f64
        );
        if n == 100_000 {
            let t1 = per_decision(&l, n, iters, 7);
            let l = &l;
            let start = Instant::now();
            std::thread::scope(|s| {
                for t in 0..2u64 {
                    s.spawn(move || {
                        let mut x = 0x5555 + t;
                        for _ in 0..iters {
                            // Thread t uses keys of parity t: disjoint keys.
                            let k = (xorshift(&mut x) % (n / 2)) * 2 + t;
                            black_box(l.try_acquire(&k, 1).unwrap());
                        }
                    });
                }
            });
            let el = start.elapsed().as_nanos() as f64;
            let two = (2 * iters) as f64 / el * t1;
            println!("2 threads, disjoint keys at 100k: throughput {two:.2}x one thread");
        }
    }
}
