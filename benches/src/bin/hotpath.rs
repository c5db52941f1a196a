//! A profiling driver: `hotpath SUBJECT PATH [ITERS]` makes ITERS decisions (default 10^7) of
//! one subject on one path in a tight loop and prints the time per decision, so that
//! `perf stat` or `valgrind --tool=callgrind` see the hot path and nothing else:
//!
//! ```sh
//! cargo build --release -p sluicegate-benches --bin hotpath
//! valgrind --tool=callgrind target/release/hotpath ours-mono allow 1000000
//! ```
//!
//! Subjects: ours-mono, ours-std, ours-coarse, governor, floor-quanta, floor-std, floor-coarse.
//! Paths: allow, reject (the floors ignore the path: clock + CAS on allow, clock + load on
//! reject).

use sluicegate::{Clock, CoarseClock, Limiter, MonotonicClock, StdClock};
use sluicegate_benches::setup::{self, Path};
use sluicegate_benches::{quanta_reader, std_reader, Floor};
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

#[inline(never)]
fn ours_loop<C: Clock>(l: &Limiter<C>, iters: u64) -> u64 {
    let mut acc = 0u64;
    for _ in 0..iters {
        let d = black_box(l).try_acquire(1).expect("cost within capacity");
        acc = acc.wrapping_add(if d.allowed() {
            0
        } else {
            d.retry_after_nanos()
        });
    }
    acc
}

#[inline(never)]
fn floor_loop<F: Fn() -> u64>(f: &Floor<F>, path: Path, iters: u64) -> u64 {
    let mut acc = 0u64;
    for _ in 0..iters {
        acc = acc.wrapping_add(match path {
            Path::Allow => black_box(f).cas(),
            Path::Reject => black_box(f).read_only(),
        });
    }
    acc
}

#[inline(never)]
fn governor_loop(l: &setup::Governor, iters: u64) -> u64 {
    let mut acc = 0u64;
    for _ in 0..iters {
        acc = acc.wrapping_add(setup::governor_acquire(black_box(l)));
    }
    acc
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (subject, path) = match (args.first(), args.get(1).map(String::as_str)) {
        (Some(s), Some("allow")) => (s.as_str(), Path::Allow),
        (Some(s), Some("reject")) => (s.as_str(), Path::Reject),
        _ => {
            eprintln!("usage: hotpath SUBJECT allow|reject [ITERS]");
            return ExitCode::FAILURE;
        }
    };
    let iters: u64 = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let start = Instant::now();
    let acc = match subject {
        "ours-mono" => ours_loop(&setup::ours(MonotonicClock::new(), path), iters),
        "ours-std" => ours_loop(&setup::ours(StdClock::new(), path), iters),
        "ours-coarse" => ours_loop(&setup::ours(CoarseClock::new(), path), iters),
        "governor" => governor_loop(&setup::governor(path), iters),
        "floor-quanta" => floor_loop(&Floor::new(quanta_reader()), path, iters),
        "floor-std" => floor_loop(&Floor::new(std_reader()), path, iters),
        "floor-coarse" => {
            let c = CoarseClock::new();
            floor_loop(&Floor::new(move || c.now()), path, iters)
        }
        other => {
            eprintln!("hotpath: unknown subject {other:?}");
            return ExitCode::FAILURE;
        }
    };
    let ns = start.elapsed().as_nanos() as f64 / iters as f64;
    println!(
        "{subject} {}: {ns:.2} ns/decision (checksum {acc})",
        path.name()
    );
    ExitCode::SUCCESS
}
