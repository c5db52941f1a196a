//! The shared-memory store against the in-process one: `shmpath [ROUNDS]` prints a Markdown
//! section (`ci/bench.sh` puts it in BENCHMARKS.md) with
//!
//! * nanoseconds per keyed decision, in-process and in a region, at 1, 10^5 and 10^6 keys, on
//!   the allow and reject paths, the two subjects interleaved in round-robin blocks so that
//!   their ratio holds up on a machine whose load moves: decisions back to back, and (on
//!   x86-64) one at a time, each finished before the next begins;
//! * two workers on one limit: two threads of one process on an in-process limiter, and two
//!   processes on one region (each on its own half of the keys, at the same moments);
//! * what a region costs: creating one for 10^6 keys, opening an existing one, and its bytes
//!   per key (the file's allocated blocks, and the region's own arithmetic).
//!
//! With `--tight` the first table's regions are sized for the keys they hold (`max_keys` =
//! keys + 16, a load of up to 7/8) rather than for twice as many (as the in-process store's
//! bound is): the region's footprint is then its keys', as the in-process store's is.
//!
//! `shmpath --child REGION KEYS LO SPAN ROUNDS PATH` is one of the two processes (internal);
//! `shmpath --profile KEYS N [region|memory] [allow|reject]` runs N decisions in a region only
//! (for callgrind or perf), or with `memory` in the in-process store only (the same loop, for
//! comparison), on the allow path or the reject path.

use sluicegate::StoreSpec;
use sluicegate_benches::setup::{self, Path};
use sluicegate_benches::Rng;
use std::hint::black_box;
use std::os::unix::fs::MetadataExt;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Barrier;
use std::time::Instant;

const BLOCK: u64 = 20_000;

#[inline(never)]
fn keyed_loop(l: &setup::OursKeyed, n: u64, lo: u64, span: u64, seed: u64) -> u64 {
    let mut rng = Rng::new(seed);
    (0..n).fold(0u64, |a, _| {
        a.wrapping_add(setup::ours_keyed_acquire(l, lo + rng.below(span)))
    })
}

/// [`keyed_loop`] one decision at a time: each decision starts once the one before it has
/// finished (an `lfence` between them), as a server's decisions do, each between its
/// request's other work. Back to back, the CPU runs the next decision's hashing and its
/// slot's load while the previous decision waits for memory, so the loop measures how much
/// of a decision overlaps the next as well as what one costs.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn keyed_loop_serial(l: &setup::OursKeyed, n: u64, lo: u64, span: u64, seed: u64) -> u64 {
    let mut rng = Rng::new(seed);
    (0..n).fold(0u64, |a, _| {
        let a = a.wrapping_add(setup::ours_keyed_acquire(l, lo + rng.below(span)));
        // SAFETY: `lfence` reads and writes no memory, and every x86-64 CPU has it (SSE2).
        unsafe { core::arch::x86_64::_mm_lfence() };
        a
    })
}

/// How a block runs its decisions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    BackToBack,
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    OneAtATime,
}

/// Nanoseconds per decision of one block.
fn block(l: &setup::OursKeyed, lo: u64, span: u64, seed: u64) -> f64 {
    block_in(Mode::BackToBack, l, lo, span, seed)
}

fn block_in(mode: Mode, l: &setup::OursKeyed, lo: u64, span: u64, seed: u64) -> f64 {
    let start = Instant::now();
    match mode {
        Mode::BackToBack => black_box(keyed_loop(l, BLOCK, lo, span, seed)),
        #[cfg(target_arch = "x86_64")]
        Mode::OneAtATime => black_box(keyed_loop_serial(l, BLOCK, lo, span, seed)),
        #[cfg(not(target_arch = "x86_64"))]
        Mode::OneAtATime => unreachable!("one at a time is measured on x86-64 only"),
    };
    start.elapsed().as_nanos() as f64 / BLOCK as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A region file for this run, removed when dropped.
struct Region(std::path::PathBuf);

impl Region {
    fn new(what: &str) -> Self {
        // `SHMPATH_DIR` when set (a tmpfs mounted with other options, as `huge=`), else
        // /dev/shm where there is one (what users should use), else the temporary directory.
        let dir = std::env::var_os("SHMPATH_DIR").map(std::path::PathBuf::from);
        let dir = dir.as_deref().unwrap_or(std::path::Path::new("/dev/shm"));
        let dir = if dir.is_dir() {
            dir.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let r = Self(dir.join(format!("sluicegate-bench-{what}-{}", std::process::id())));
        let _ = std::fs::remove_file(&r.0);
        r
    }

    fn spec(&self) -> StoreSpec {
        StoreSpec::shm(self.0.to_str().expect("a UTF-8 path"))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn path_named(s: &str) -> Path {
    if s == "reject" {
        Path::Reject
    } else {
        Path::Allow
    }
}

/// One of the two processes: opens the region, waits for the start signal on stdin, runs its
/// blocks and prints their medians.
fn child(args: &[String]) -> ExitCode {
    let [region, keys, lo, span, rounds, path] = args else {
        eprintln!("usage: shmpath --child REGION KEYS LO SPAN ROUNDS PATH");
        return ExitCode::FAILURE;
    };
    let n = |s: &String| s.parse::<u64>().expect("a number");
    let (keys, lo, span, rounds) = (n(keys), n(lo), n(span), n(rounds));
    let q = match path_named(path) {
        Path::Allow => setup::keyed_allow_quota(),
        Path::Reject => setup::quota(Path::Reject),
    };
    let l = setup::OursKeyed::builder(q)
        .max_keys(2 * keys as usize + 16)
        .store(StoreSpec::shm(region.clone()))
        .build()
        .expect("the region");
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .expect("the start signal");
    let times: Vec<f64> = (0..rounds)
        .map(|r| block(&l, lo, span, 0x5eed + r + lo))
        .collect();
    println!("{:.2}", median(times));
    ExitCode::SUCCESS
}

/// Two processes on one region, each on its own half of the keys; their medians.
fn two_processes(region: &Region, keys: u64, rounds: u64, path: Path) -> (f64, f64) {
    let exe = std::env::current_exe().expect("this program");
    let half = (keys / 2).max(1);
    let mut kids: Vec<_> = (0..2u64)
        .map(|i| {
            let lo = (i * half).min(keys - 1);
            Command::new(&exe)
                .arg("--child")
                .arg(&region.0)
                .args([keys, lo, half.min(keys - lo), rounds].map(|v| v.to_string()))
                .arg(path.name())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a child")
        })
        .collect();
    // Both have opened the region by the time they read the signal; a short pause lets them.
    std::thread::sleep(std::time::Duration::from_millis(300));
    for k in &mut kids {
        use std::io::Write;
        writeln!(k.stdin.as_mut().expect("stdin")).expect("the start signal");
    }
    let out: Vec<f64> = kids
        .into_iter()
        .map(|k| {
            let o = k.wait_with_output().expect("the child's result");
            assert!(o.status.success(), "a child failed");
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .parse()
                .expect("a median")
        })
        .collect();
    (out[0], out[1])
}

/// Two threads of this process on one in-process limiter, each on its own half of the keys.
fn two_threads(l: &setup::OursKeyed, keys: u64, rounds: u64) -> f64 {
    let half = (keys / 2).max(1);
    let barrier = Barrier::new(2);
    let medians: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2u64)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || {
                    let lo = (i * half).min(keys - 1);
                    barrier.wait();
                    let t: Vec<f64> = (0..rounds)
                        .map(|r| block(l, lo, half.min(keys - lo), 0x5eed + r + lo))
                        .collect();
                    median(t)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    medians.iter().sum::<f64>() / 2.0
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("--profile") {
        // `shmpath --profile KEYS N [region|memory] [allow|reject]`: N decisions in a region
        // (or in-process) only, on the allow path unless told, for callgrind/perf.
        let n = |i: usize| args.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(1);
        let (keys, decisions) = (n(1), n(2));
        let region = Region::new("profile");
        let spec = match args.get(3).map(String::as_str) {
            Some("memory") => StoreSpec::default(),
            _ => region.spec(),
        };
        let path = path_named(args.get(4).map_or("allow", String::as_str));
        let l = setup::ours_keyed_in(path, keys, spec);
        black_box(keyed_loop(&l, decisions, 0, keys, 1));
        return ExitCode::SUCCESS;
    }
    // `--tight`: regions sized for the keys they hold (`max_keys` = keys + 16) rather than
    // for twice as many, so that a region's footprint is its keys', as an in-process store's is.
    let tight = args.iter().any(|a| a == "--tight");
    let args: Vec<String> = args.into_iter().filter(|a| a != "--tight").collect();
    let rounds: u64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(100);
    let load = || {
        std::fs::read_to_string("/proc/loadavg")
            .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|_| "?".into())
    };
    let load_start = load();
    println!("## Shared-memory store (`shmpath`)\n");
    println!(
        "Nanoseconds per keyed decision (median of {rounds} blocks of {BLOCK} decisions on \
         random keys), in-process and in a region in `/dev/shm`, interleaved block by block.\n"
    );
    let modes: &[Mode] = if cfg!(target_arch = "x86_64") {
        &[Mode::BackToBack, Mode::OneAtATime]
    } else {
        &[Mode::BackToBack]
    };
    println!(
        "Back to back, the CPU overlaps a decision's wait for memory with the next decision's \
         work; one at a time (x86-64: an `lfence` after each decision), each decision runs \
         alone, as a server's do between its requests' other work.\n"
    );
    println!(
        "Each limiter's key bound (a region's capacity, fixed when it is made): {}.\n",
        if tight {
            "the keys it holds plus 16 (`--tight`)"
        } else {
            "twice the keys it holds plus 16"
        }
    );
    println!(
        "| keys | path | in-process | region | region / in-process | one at a time: \
         in-process | region | region / in-process |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|");
    for keys in [1u64, 100_000, 1_000_000] {
        for path in [Path::Allow, Path::Reject] {
            let region = Region::new("keyed");
            let mem = setup::ours_keyed(path, keys);
            let max_keys = if tight { keys + 16 } else { 2 * keys + 16 };
            let shm = setup::ours_keyed_sized(path, keys, max_keys as usize, region.spec());
            let mut cells = String::new();
            for &mode in modes {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                block_in(mode, &mem, 0, keys, 1);
                block_in(mode, &shm, 0, keys, 1);
                for r in 0..rounds {
                    let seed = 0x5eed + r;
                    if r % 2 == 0 {
                        a.push(block_in(mode, &mem, 0, keys, seed));
                        b.push(block_in(mode, &shm, 0, keys, seed));
                    } else {
                        b.push(block_in(mode, &shm, 0, keys, seed));
                        a.push(block_in(mode, &mem, 0, keys, seed));
                    }
                }
                let (a, b) = (median(a), median(b));
                cells += &format!(" {a:.1} | {b:.1} | {:.2}x |", b / a);
            }
            if modes.len() == 1 {
                cells += " - | - | - |";
            }
            println!("| {keys} | {} |{cells}", path.name());
        }
    }
    println!(
        "\nTwo workers on one limit at 10^5 keys, each on its own half (ns per decision per \
         worker; a perfect scaling equals the one-worker figure above):\n"
    );
    println!("| path | 2 threads, in-process | 2 processes, one region |");
    println!("|---|---:|---:|");
    let keys = 100_000;
    for path in [Path::Allow, Path::Reject] {
        let mem = setup::ours_keyed(path, keys);
        let threads = two_threads(&mem, keys, rounds / 2);
        let region = Region::new("procs");
        let shm = setup::ours_keyed_in(path, keys, region.spec());
        let (p1, p2) = two_processes(&region, keys, rounds / 2, path);
        drop(shm);
        println!(
            "| {} | {threads:.1} | {:.1} |",
            path.name(),
            (p1 + p2) / 2.0
        );
    }
    // What a region costs.
    let keys = 1_000_000u64;
    let region = Region::new("size");
    let q = setup::keyed_allow_quota();
    let started = Instant::now();
    let l = setup::OursKeyed::builder(q)
        .max_keys(keys as usize)
        .store(region.spec())
        .build()
        .expect("a region");
    let create = started.elapsed();
    let empty_blocks = std::fs::metadata(&region.0)
        .map(|m| m.blocks() * 512)
        .unwrap_or(0);
    let opens: Vec<f64> = (0..50)
        .map(|_| {
            let t = Instant::now();
            let o = setup::OursKeyed::builder(q)
                .store(region.spec())
                .build()
                .expect("the region");
            let e = t.elapsed().as_nanos() as f64;
            drop(o);
            e
        })
        .collect();
    for key in 0..keys {
        l.try_acquire(&key, 1).expect("a decision");
    }
    let meta = std::fs::metadata(&region.0).expect("the region's file");
    let full_blocks = meta.blocks() * 512;
    println!("\nA region for 10^6 keys:\n");
    println!("| measure | value |");
    println!("|---|---:|");
    println!("| file length | {:.1} MiB |", meta.len() as f64 / 1048576.0);
    println!(
        "| allocated when created (posix_fallocate: the whole file) | {:.1} MiB |",
        empty_blocks as f64 / 1048576.0
    );
    println!(
        "| allocated with 10^6 keys | {:.1} MiB ({:.1} bytes per key) |",
        full_blocks as f64 / 1048576.0,
        full_blocks as f64 / keys as f64
    );
    println!("| create | {:.2} ms |", create.as_secs_f64() * 1e3);
    println!(
        "| open an existing one (median of 50) | {:.1} µs |",
        median(opens) / 1e3
    );
    println!(
        "\nLoad average at the start: {load_start}; at the end: {}.",
        load()
    );
    ExitCode::SUCCESS
}
