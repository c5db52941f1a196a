//! A keyed-store driver: `keyedpath KEYS [ROUNDS]` measures sluicegate's `KeyedLimiter`,
//! governor's keyed limiter (DashMap + SipHash) and a floor (`KeyedFloor`: a read-only std
//! `HashMap` of `AtomicU64` with foldhash, plus the quanta clock and one CAS, or one load on
//! the reject path: what any keyed limiter must at least do) on the same random key sequence, interleaved in round-robin blocks so that
//! their ratios hold up on a machine whose load moves. One JSON line per subject and path.
//!
//! `keyedpath KEYS --threads T [--only SUBJECT] [ROUNDS]` runs each subject on T threads at once, each thread
//! on its own disjoint slice of the keys, and reports nanoseconds per decision per thread
//! (a perfect scaling keeps it equal to the one-thread figure).
//!
//! ```sh
//! cargo run --release -p sluicegate-benches --bin keyedpath -- 100000
//! perf record cargo run --release -p sluicegate-benches --bin keyedpath -- 100000 ours
//! ```

use sluicegate_benches::setup::{self, Path};
use sluicegate_benches::{quanta_reader, KeyedFloor, Rng};
use std::hint::black_box;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Instant;

const BLOCK: u64 = 20_000;

/// `(name, run)`: `run(n, lo, span, seed)` makes `n` decisions on keys drawn from `lo..lo + span`
/// by a generator seeded with `seed` (a new seed every block, so that blocks do not replay
/// the same keys and the working set is every key).
type Subject<'a> = (
    &'static str,
    Box<dyn Fn(u64, u64, u64, u64) -> u64 + Sync + 'a>,
);

// Named, never inlined loops, so that `perf` attributes samples to a subject.

#[inline(never)]
fn ours_loop(l: &setup::OursKeyed, n: u64, lo: u64, span: u64, seed: u64) -> u64 {
    let mut rng = Rng::new(seed);
    (0..n).fold(0u64, |a, _| {
        a.wrapping_add(setup::ours_keyed_acquire(l, lo + rng.below(span)))
    })
}

#[inline(never)]
fn governor_loop(l: &setup::GovernorKeyed, n: u64, lo: u64, span: u64, seed: u64) -> u64 {
    let mut rng = Rng::new(seed);
    (0..n).fold(0u64, |a, _| {
        a.wrapping_add(setup::governor_keyed_acquire(l, lo + rng.below(span)))
    })
}

#[inline(never)]
fn floor_loop<F: Fn() -> u64>(
    f: &KeyedFloor<F>,
    path: Path,
    n: u64,
    lo: u64,
    span: u64,
    seed: u64,
) -> u64 {
    let mut rng = Rng::new(seed);
    (0..n).fold(0u64, |a, _| {
        a.wrapping_add(black_box(f).decide(lo + rng.below(span), path))
    })
}

/// Each subject runs `n` decisions on keys drawn from `lo..lo + span`.
fn subjects(path: Path, keys: u64, only: Option<&str>) -> Vec<Subject<'static>> {
    let keep = |name: &str| only.is_none_or(|o| o == name);
    let mut v: Vec<Subject<'static>> = Vec::new();
    if keep("sluicegate") {
        let l = setup::ours_keyed(path, keys);
        v.push((
            "sluicegate",
            Box::new(move |n, lo, span, seed| ours_loop(&l, n, lo, span, seed)),
        ));
    }
    if keep("governor") {
        let l = setup::governor_keyed(path, keys);
        v.push((
            "governor",
            Box::new(move |n, lo, span, seed| governor_loop(&l, n, lo, span, seed)),
        ));
    }
    if keep("floor") {
        let f = KeyedFloor::new(keys, quanta_reader());
        v.push((
            "floor",
            Box::new(move |n, lo, span, seed| floor_loop(&f, path, n, lo, span, seed)),
        ));
    }
    v
}

/// One block of `subject` on `threads` threads (thread i on the i-th slice of the keys);
/// nanoseconds per decision per thread.
fn block(subject: &Subject<'_>, keys: u64, threads: u64, seed: u64, sink: &AtomicU64) -> f64 {
    if threads == 1 {
        let start = Instant::now();
        let v = (subject.1)(BLOCK, 0, keys, seed);
        sink.fetch_add(v, Ordering::Relaxed);
        return start.elapsed().as_nanos() as f64 / BLOCK as f64;
    }
    let span = (keys / threads).max(1);
    let barrier = Barrier::new(threads as usize);
    let total = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let lo = (t * span).min(keys - 1);
                    let v = (subject.1)(BLOCK, lo, span.min(keys - lo), seed ^ (t << 32));
                    sink.fetch_add(v, Ordering::Relaxed);
                    start.elapsed().as_nanos() as f64
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("thread"))
            .fold(0.0, f64::max)
    });
    total / BLOCK as f64
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(keys) = args
        .first()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&k| k > 0)
    else {
        eprintln!(
            "usage: keyedpath KEYS [--threads T] [--only sluicegate|governor|floor] [ROUNDS]"
        );
        return ExitCode::FAILURE;
    };
    let mut rest = &args[1..];
    let mut threads = 1u64;
    if rest.first().map(String::as_str) == Some("--threads") {
        threads = rest.get(1).and_then(|s| s.parse().ok()).unwrap_or(2).max(1);
        rest = &rest[rest.len().min(2)..];
    }
    let mut only = None;
    if rest.first().map(String::as_str) == Some("--only") {
        only = rest.get(1).cloned();
        rest = &rest[rest.len().min(2)..];
    }
    let rounds: usize = rest.first().and_then(|s| s.parse().ok()).unwrap_or(200);
    let sink = AtomicU64::new(0);
    for path in [Path::Allow, Path::Reject] {
        let subjects = subjects(path, keys, only.as_deref());
        for s in &subjects {
            block(s, keys, threads, 0x5eed, &sink); // warm up
        }
        let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); subjects.len()];
        for round in 0..rounds {
            for i in 0..subjects.len() {
                let j = (i + round) % subjects.len();
                times[j].push(block(
                    &subjects[j],
                    keys,
                    threads,
                    0x5eed + round as u64 + 1,
                    &sink,
                ));
            }
        }
        for ((name, _), mut t) in subjects.iter().zip(times) {
            t.sort_by(f64::total_cmp);
            let q = |p: f64| t[((t.len() - 1) as f64 * p).round() as usize];
            println!(
                "{{\"subject\":\"{name}\",\"path\":\"{}\",\"keys\":{keys},\"threads\":{threads},\
                 \"rounds\":{rounds},\"block\":{BLOCK},\"median_ns\":{:.2},\"p25_ns\":{:.2},\
                 \"p75_ns\":{:.2}}}",
                path.name(),
                q(0.5),
                q(0.25),
                q(0.75)
            );
        }
    }
    black_box(sink.load(Ordering::Relaxed));
    ExitCode::SUCCESS
}
