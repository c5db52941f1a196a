//! A profiling driver: `hotpath SUBJECT PATH [ITERS]` makes ITERS decisions (default 10^7) of
//! one subject on one path in a tight loop and prints the time per decision, so that
//! `perf stat` or `valgrind --tool=callgrind` see the hot path and nothing else:
//!
//! ```sh
//! cargo build --release -p sluicegate-benches --bin hotpath
//! valgrind --tool=callgrind target/release/hotpath ours-mono allow 1000000
//! ```
//!
//! Subjects: ours-mono, ours-std, ours-coarse, governor, floor-quanta, floor-std, floor-coarse;
//! and the operations subjects (docs/OPERATIONS.md): ops-limiter-MODE and ops-keyed-MODE (8
//! keys), MODE one of plain, metrics, shadow, reconfigured. `hotpath --operations [ROUNDS]`
//! runs them interleaved, and times `set_quota`.
//! Paths: allow, reject (the floors ignore the path: clock + CAS on allow, clock + load on
//! reject).
//!
//! `hotpath --interleave [ROUNDS]` measures every single-bucket subject of both paths in
//! round-robin blocks (each round visits every subject once, in a rotated order) and prints
//! one JSON line per subject with the median, p25 and p75 of its block times. Subjects are
//! thus measured at the same moments, so their ratios hold up on a machine whose load moves,
//! where criterion's one-subject-after-another medians drift apart.

use sluicegate::{Clock, CoarseClock, Limiter, MonotonicClock, StdClock};
use sluicegate_benches::setup::{self, Path};
use sluicegate_benches::{quanta_reader, std_reader, Floor, PlLock, StdLock};
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
fn keyed_loop(l: &setup::OursKeyed, iters: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..iters {
        acc = acc.wrapping_add(setup::ours_keyed_acquire(black_box(l), i & 7));
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

/// A subject of the interleaved run: its name and a block of `n` decisions.
type Block<'a> = (&'static str, Box<dyn Fn(u64) -> u64 + 'a>);

fn subjects(path: Path) -> Vec<Block<'static>> {
    fn ours<C: Clock + 'static>(name: &'static str, c: C, path: Path) -> Block<'static> {
        let l = setup::ours(c, path);
        (name, Box::new(move |n| ours_loop(&l, n)))
    }
    fn floor<F: Fn() -> u64 + 'static>(name: &'static str, f: F, path: Path) -> Block<'static> {
        let f = Floor::new(f);
        (name, Box::new(move |n| floor_loop(&f, path, n)))
    }
    let gov = setup::governor(path);
    let rl = setup::ratelimit(path);
    let ms = setup::mutex::<StdLock<_>>(path);
    let mp = setup::mutex::<PlLock<_>>(path);
    let coarse = CoarseClock::new();
    let floor_name = |kind: &'static str| match (path, kind) {
        (Path::Allow, "quanta") => "floor/quanta",
        (Path::Allow, "std") => "floor/std",
        (Path::Allow, _) => "floor/coarse",
        (Path::Reject, "quanta") => "floor-read/quanta",
        (Path::Reject, "std") => "floor-read/std",
        (Path::Reject, _) => "floor-read/coarse",
    };
    vec![
        ours("sluicegate/mono", MonotonicClock::new(), path),
        ours("sluicegate/std", StdClock::new(), path),
        ours("sluicegate/coarse", coarse, path),
        ("governor", Box::new(move |n| governor_loop(&gov, n))),
        (
            "ratelimit",
            Box::new(move |n| {
                (0..n).fold(0u64, |a, _| {
                    a.wrapping_add(setup::ratelimit_acquire(black_box(&rl)))
                })
            }),
        ),
        (
            "mutex/std",
            Box::new(move |n| {
                (0..n).fold(0u64, |a, _| {
                    a.wrapping_add(black_box(&ms).try_acquire(1).retry_after_nanos)
                })
            }),
        ),
        (
            "mutex/parking_lot",
            Box::new(move |n| {
                (0..n).fold(0u64, |a, _| {
                    a.wrapping_add(black_box(&mp).try_acquire(1).retry_after_nanos)
                })
            }),
        ),
        floor(floor_name("quanta"), quanta_reader(), path),
        floor(floor_name("std"), std_reader(), path),
        floor(floor_name("coarse"), move || coarse.now(), path),
    ]
}

/// An operations subject (`ops-limiter-MODE` or `ops-keyed-MODE`, 8 keys): the default
/// clock's limiter with counters, shadow mode or a reconfiguration (docs/OPERATIONS.md).
fn operations_subject(name: &str, path: Path) -> Option<Box<dyn Fn(u64) -> u64>> {
    let (kind, mode) = name.strip_prefix("ops-")?.split_once('-')?;
    let mode = *setup::Mode::ALL.iter().find(|m| m.name() == mode)?;
    match kind {
        "limiter" => {
            let l = setup::ours_mode(path, mode);
            Some(Box::new(move |n| ours_loop(&l, n)))
        }
        "keyed" => {
            let l = setup::ours_keyed_mode(path, 8, mode);
            Some(Box::new(move |n| keyed_loop(&l, n)))
        }
        _ => None,
    }
}

/// `hotpath --operations [ROUNDS]`: every operations subject of both paths, interleaved as
/// `--interleave` does; then the time `set_quota` takes (a single bucket; a keyed limiter of
/// 10^5 keys, every key carried). One JSON line each.
fn operations(rounds: usize) {
    const BLOCK: u64 = 20_000;
    for path in [Path::Allow, Path::Reject] {
        let names: Vec<String> = ["limiter", "keyed"]
            .iter()
            .flat_map(|k| {
                setup::Mode::ALL
                    .iter()
                    .map(move |m| format!("ops-{k}-{}", m.name()))
            })
            .collect();
        let subjects: Vec<_> = names
            .iter()
            .map(|n| operations_subject(n, path).expect("subject"))
            .collect();
        let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); subjects.len()];
        let mut sink = 0u64;
        for run in &subjects {
            sink = sink.wrapping_add(run(BLOCK));
        }
        for round in 0..rounds {
            for i in 0..subjects.len() {
                let j = (i + round) % subjects.len();
                let start = Instant::now();
                sink = sink.wrapping_add(subjects[j](BLOCK));
                times[j].push(start.elapsed().as_nanos() as f64 / BLOCK as f64);
            }
        }
        black_box(sink);
        for (name, mut t) in names.iter().zip(times) {
            t.sort_by(f64::total_cmp);
            let q = |p: f64| t[((t.len() - 1) as f64 * p).round() as usize];
            println!(
                "{{\"subject\":\"{name}\",\"path\":\"{}\",\"rounds\":{rounds},\"block\":{BLOCK},\
                 \"median_ns\":{:.3},\"p25_ns\":{:.3},\"p75_ns\":{:.3}}}",
                path.name(),
                q(0.5),
                q(0.25),
                q(0.75)
            );
        }
    }
    let median = |mut t: Vec<f64>| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    };
    let l = setup::ours_mode(Path::Allow, setup::Mode::Plain);
    let q = [setup::quota(Path::Allow), setup::quota(Path::Reject)];
    let t: Vec<f64> = (0..2000)
        .map(|i| {
            let start = Instant::now();
            l.set_quota(q[i % 2]).expect("set_quota");
            start.elapsed().as_nanos() as f64
        })
        .collect();
    println!(
        "{{\"subject\":\"set_quota/limiter\",\"median_ns\":{:.1}}}",
        median(t)
    );
    let keys = 100_000;
    let kl = setup::ours_keyed_mode(Path::Reject, keys, setup::Mode::Plain);
    let q = [setup::quota(Path::Reject), setup::keyed_allow_quota()];
    let t: Vec<f64> = (0..10)
        .map(|i| {
            let start = Instant::now();
            kl.set_quota(q[i % 2]).expect("set_quota");
            start.elapsed().as_nanos() as f64
        })
        .collect();
    assert_eq!(kl.len() as u64, keys);
    println!(
        "{{\"subject\":\"set_quota/keyed-{keys}\",\"median_ns\":{:.1}}}",
        median(t)
    );
}

fn interleave(rounds: usize) {
    const BLOCK: u64 = 20_000;
    for path in [Path::Allow, Path::Reject] {
        let subjects = subjects(path);
        let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); subjects.len()];
        let mut sink = 0u64;
        for (_, run) in &subjects {
            sink = sink.wrapping_add(run(BLOCK)); // warm up
        }
        for round in 0..rounds {
            for i in 0..subjects.len() {
                let j = (i + round) % subjects.len();
                let start = Instant::now();
                sink = sink.wrapping_add((subjects[j].1)(BLOCK));
                times[j].push(start.elapsed().as_nanos() as f64 / BLOCK as f64);
            }
        }
        black_box(sink);
        for ((name, _), mut t) in subjects.iter().zip(times) {
            t.sort_by(f64::total_cmp);
            let q = |p: f64| t[((t.len() - 1) as f64 * p).round() as usize];
            println!(
                "{{\"subject\":\"{name}\",\"path\":\"{}\",\"rounds\":{rounds},\"block\":{BLOCK},\
                 \"median_ns\":{:.3},\"p25_ns\":{:.3},\"p75_ns\":{:.3}}}",
                path.name(),
                q(0.5),
                q(0.25),
                q(0.75)
            );
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--operations") {
        let rounds = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(300);
        operations(rounds.max(1));
        return ExitCode::SUCCESS;
    }
    if args.first().map(String::as_str) == Some("--interleave") {
        let rounds = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(300);
        interleave(rounds.max(1));
        return ExitCode::SUCCESS;
    }
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
        s if s.starts_with("ops-") => match operations_subject(s, path) {
            Some(run) => run(iters),
            None => {
                eprintln!("hotpath: unknown subject {s:?}");
                return ExitCode::FAILURE;
            }
        },
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
