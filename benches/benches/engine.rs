//! sluicegate against its peers, in one run on one machine. `ci/bench.sh` runs this and turns
//! the medians into `BENCHMARKS.md`; `BENCH_QUICK=1` shortens every measurement for a smoke run.
//!
//! Groups (criterion group ids, which `benches/report.py` reads):
//! * `clocks`: one reading of each clock the engine offers, and the raw sources under them.
//! * `single/allow`, `single/reject`: one bucket, one thread. The allow path never runs dry
//!   (10^9 tokens/s); the reject path is drained (1 token/hour) and reads `retry_after` on
//!   every call.
//! * `shared/allow`, `shared/reject`: one bucket shared by N threads; a criterion iteration is
//!   one decision on each thread, so the aggregate rate is `N / time`.
//! * `algorithms/...`: every algorithm the core offers, same two paths.
//! * `keyed/allow`, `keyed/reject`: random access over 1, 100 000 and 1 000 000 keys, with
//!   the keyed floor (read-only map + clock + CAS) beside the limiters.
//! * `keyed-2t/allow`, `keyed-2t/reject`: two threads at once on disjoint halves of the keys.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sluicegate::{Clock, CoarseClock, Limiter, MonotonicClock, Quota, StdClock};
use sluicegate_benches::setup::{self, Path};
use sluicegate_benches::{
    quanta_reader, run_threads, run_threads_indexed, std_reader, thread_counts, Floor, KeyedFloor,
    PlLock, Rng, StdLock,
};
use std::hint::black_box;
use std::time::{Duration, Instant};

const PATHS: [Path; 2] = [Path::Allow, Path::Reject];

fn quick() -> bool {
    std::env::var_os("BENCH_QUICK").is_some_and(|v| !v.is_empty() && v != "0")
}

fn config() -> Criterion {
    let c = Criterion::default().configure_from_args();
    if quick() {
        c.warm_up_time(Duration::from_millis(300))
            .measurement_time(Duration::from_millis(700))
            .sample_size(20)
    } else {
        c.warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3))
            .sample_size(50)
    }
}

/// One decision of the engine, reading what a caller reads on that path.
#[inline(always)]
fn ours_acquire<C: Clock>(l: &Limiter<C>) -> u64 {
    let d = l.try_acquire(1).expect("cost within capacity");
    if d.allowed() {
        0
    } else {
        d.retry_after_nanos()
    }
}

fn clocks(c: &mut Criterion) {
    let mut g = c.benchmark_group("clocks");
    let q = quanta::Clock::new();
    g.bench_function("quanta/raw", |b| b.iter(|| black_box(q.raw())));
    g.bench_function("quanta/now", |b| b.iter(|| black_box(q.now())));
    g.bench_function("std/Instant::now", |b| b.iter(|| black_box(Instant::now())));
    let mono = MonotonicClock::new();
    g.bench_function("sluicegate/MonotonicClock", |b| {
        b.iter(|| black_box(mono.now()))
    });
    let std_clock = StdClock::new();
    g.bench_function("sluicegate/StdClock", |b| {
        b.iter(|| black_box(std_clock.now()))
    });
    let coarse = CoarseClock::new();
    g.bench_function("sluicegate/CoarseClock", |b| {
        b.iter(|| black_box(coarse.now()))
    });
    g.finish();
}

fn single(c: &mut Criterion) {
    for path in PATHS {
        let mut g = c.benchmark_group(format!("single/{}", path.name()));
        g.throughput(Throughput::Elements(1));

        let l = setup::ours(MonotonicClock::new(), path);
        g.bench_function("sluicegate/mono", |b| {
            b.iter(|| black_box(ours_acquire(&l)))
        });
        let l = setup::ours(StdClock::new(), path);
        g.bench_function("sluicegate/std", |b| b.iter(|| black_box(ours_acquire(&l))));
        let l = setup::ours(CoarseClock::new(), path);
        g.bench_function("sluicegate/coarse", |b| {
            b.iter(|| black_box(ours_acquire(&l)))
        });

        let gov = setup::governor(path);
        g.bench_function("governor", |b| {
            b.iter(|| black_box(setup::governor_acquire(&gov)))
        });
        let rl = setup::ratelimit(path);
        g.bench_function("ratelimit", |b| {
            b.iter(|| black_box(setup::ratelimit_acquire(&rl)))
        });
        let m = setup::mutex::<StdLock<_>>(path);
        g.bench_function("mutex/std", |b| b.iter(|| black_box(m.try_acquire(1))));
        let m = setup::mutex::<PlLock<_>>(path);
        g.bench_function("mutex/parking_lot", |b| {
            b.iter(|| black_box(m.try_acquire(1)))
        });

        // The floor is one clock read + one CAS on both paths (the definition); the
        // reject path also gets the read-only floor (clock + load), since a rejection is a read.
        let f = Floor::new(quanta_reader());
        g.bench_function("floor/quanta", |b| b.iter(|| black_box(f.cas())));
        let f = Floor::new(std_reader());
        g.bench_function("floor/std", |b| b.iter(|| black_box(f.cas())));
        let coarse = CoarseClock::new();
        let f = Floor::new(move || coarse.now());
        g.bench_function("floor/coarse", |b| b.iter(|| black_box(f.cas())));
        if path == Path::Reject {
            let f = Floor::new(quanta_reader());
            g.bench_function("floor-read/quanta", |b| b.iter(|| black_box(f.read_only())));
            let f = Floor::new(std_reader());
            g.bench_function("floor-read/std", |b| b.iter(|| black_box(f.read_only())));
            let f = Floor::new(move || coarse.now());
            g.bench_function("floor-read/coarse", |b| b.iter(|| black_box(f.read_only())));
        }
        g.finish();
    }
}

fn shared(c: &mut Criterion) {
    for path in PATHS {
        let mut g = c.benchmark_group(format!("shared/{}", path.name()));
        for threads in thread_counts() {
            g.throughput(Throughput::Elements(threads as u64));
            let mut run = |name: &str, op: &(dyn Fn() + Sync)| {
                g.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &n| {
                    b.iter_custom(|iters| run_threads(n, iters, op))
                });
            };
            let l = setup::ours(MonotonicClock::new(), path);
            run("sluicegate/mono", &|| {
                black_box(ours_acquire(&l));
            });
            let l = setup::ours(CoarseClock::new(), path);
            run("sluicegate/coarse", &|| {
                black_box(ours_acquire(&l));
            });
            let gov = setup::governor(path);
            run("governor", &|| {
                black_box(setup::governor_acquire(&gov));
            });
            let rl = setup::ratelimit(path);
            run("ratelimit", &|| {
                black_box(setup::ratelimit_acquire(&rl));
            });
            let m = setup::mutex::<StdLock<_>>(path);
            run("mutex/std", &|| {
                black_box(m.try_acquire(1));
            });
            let m = setup::mutex::<PlLock<_>>(path);
            run("mutex/parking_lot", &|| {
                black_box(m.try_acquire(1));
            });
            let f = Floor::new(quanta_reader());
            match path {
                Path::Allow => run("floor/quanta", &|| {
                    black_box(f.cas());
                }),
                Path::Reject => run("floor-read/quanta", &|| {
                    black_box(f.read_only());
                }),
            }
        }
        g.finish();
    }
}

/// Every algorithm the core offers, one bucket, both paths: one thread (`algorithms/...`)
/// and the same limiter shared by two threads (`algorithms-2t/...`, a criterion iteration is
/// one decision on each thread).
fn algorithms(c: &mut Criterion) {
    for path in PATHS {
        let mut g = c.benchmark_group(format!("algorithms/{}", path.name()));
        g.throughput(Throughput::Elements(1));
        let continuous = setup::quota(path);
        let interval = continuous.with_refill(sluicegate::Refill::Interval);
        // About the same rates with k and P coprime and k > 6: a century of scaled time no
        // longer fits 64 bits, so the state takes the 128-bit word (portable-atomic).
        let wide = match path {
            Path::Allow => Quota::try_new(1_000_000_007, 1_000_000_000, 1_000_000_000),
            Path::Reject => Quota::try_new(7, 7 * 3_600_000_000_000 + 1, 1),
        }
        .expect("wide quota");
        let mut subjects: Vec<(&str, Limiter<MonotonicClock>)> = Vec::new();
        for (name, quota, is_wide) in [
            ("token-bucket/continuous", continuous, false),
            ("token-bucket/continuous-wide", wide, true),
            ("token-bucket/interval", interval, false),
        ] {
            let l = Limiter::with_clock(quota, MonotonicClock::new()).expect("limiter");
            let l = setup::prime(l, path);
            assert_eq!(l.is_wide(), is_wide, "{name}");
            g.bench_function(name, |b| b.iter(|| black_box(ours_acquire(&l))));
            subjects.push((name, l));
        }
        // Every other algorithm, from its rate string, primed and checked like the rows above.
        // Allow: rates far above what one thread can ask for (the sliding log's count is
        // capped at 2^20 per window, so its window is 1 ms). Reject: 1/hour, drained.
        let algos: [(&str, &str, &str); 5] = [
            (
                "gcra",
                "1000000000/s; burst=1000000000; algorithm=gcra",
                "1/h; algorithm=gcra",
            ),
            (
                "fixed-window",
                "1000000000/s; algorithm=fixed_window",
                "1/h; algorithm=fixed_window",
            ),
            (
                "sliding-window",
                "1000000000/s; algorithm=sliding_window",
                "1/h; algorithm=sliding_window",
            ),
            (
                "sliding-log",
                "1048576/ms; algorithm=sliding_log",
                "1/h; algorithm=sliding_log",
            ),
            (
                "leaky-queue",
                "1000000000/s; algorithm=leaky_queue; max_delay=1s",
                "1/h; algorithm=leaky_queue; max_delay=1ms",
            ),
        ];
        for (name, allow, reject) in algos {
            let rate = if path == Path::Allow { allow } else { reject };
            let quota: Quota = rate.parse().expect(name);
            let l = setup::prime(
                Limiter::with_clock(quota, MonotonicClock::new()).expect(name),
                path,
            );
            g.bench_function(name, |b| b.iter(|| black_box(ours_acquire(&l))));
            subjects.push((name, l));
        }
        // Composite: per-user and global limits consumed all-or-nothing (the reject path is
        // rejected by the second part, so the first part's token is refunded every call).
        let parts = match path {
            Path::Allow => vec![
                setup::ours(MonotonicClock::new(), path),
                setup::ours(MonotonicClock::new(), path),
            ],
            Path::Reject => vec![
                setup::ours(MonotonicClock::new(), Path::Allow),
                setup::ours(MonotonicClock::new(), Path::Reject),
            ],
        };
        let composite = sluicegate::composite::Composite::new(parts);
        let composite_acquire = || {
            let d = composite.try_acquire(1).expect("composite");
            black_box(if d.allowed() {
                0
            } else {
                d.retry_after_nanos()
            })
        };
        g.bench_function("composite-2", |b| b.iter(composite_acquire));
        g.finish();

        let mut g2 = c.benchmark_group(format!("algorithms-2t/{}", path.name()));
        g2.throughput(Throughput::Elements(2));
        for (name, l) in &subjects {
            let op = || {
                black_box(ours_acquire(l));
            };
            g2.bench_function(*name, |b| b.iter_custom(|iters| run_threads(2, iters, op)));
        }
        let op = || {
            composite_acquire();
        };
        g2.bench_function("composite-2", |b| {
            b.iter_custom(|iters| run_threads(2, iters, op))
        });
        g2.finish();
    }
}

/// Random access over 1, 100 000 and 1 000 000 keys; every key exists before measuring.
fn keyed(c: &mut Criterion) {
    for path in PATHS {
        let mut g = c.benchmark_group(format!("keyed/{}", path.name()));
        g.throughput(Throughput::Elements(1));
        for keys in [1u64, 100_000, 1_000_000] {
            let gov = setup::governor_keyed(path, keys);
            g.bench_with_input(BenchmarkId::new("governor", keys), &keys, |b, &n| {
                let mut rng = Rng::new(0x5eed);
                b.iter(|| black_box(setup::governor_keyed_acquire(&gov, rng.below(n))))
            });
            drop(gov);
            keyed_ours(&mut g, path, keys);
            if keys > 1 {
                let f = KeyedFloor::new(keys, quanta_reader());
                g.bench_with_input(BenchmarkId::new("floor", keys), &keys, |b, &n| {
                    let mut rng = Rng::new(0x5eed);
                    b.iter(|| black_box(f.decide(rng.below(n), path)))
                });
            }
        }
        g.finish();
    }
}

/// Two threads at once, each on its own half of the keys (disjoint), random access. The time
/// is per decision of each thread: equal to the one-thread row means perfect scaling.
fn keyed_2t(c: &mut Criterion) {
    const THREADS: usize = 2;
    for path in PATHS {
        let mut g = c.benchmark_group(format!("keyed-2t/{}", path.name()));
        g.throughput(Throughput::Elements(THREADS as u64));
        for keys in [100_000u64, 1_000_000] {
            let half = keys / THREADS as u64;
            // One subject: `decide(key)` on both threads, thread t on keys t*half..(t+1)*half.
            let mut run = |name: &str, decide: &(dyn Fn(u64) -> u64 + Sync)| {
                g.bench_with_input(BenchmarkId::new(name, keys), &keys, |b, _| {
                    b.iter_custom(|iters| {
                        run_threads_indexed(THREADS, iters, |t, n| {
                            let mut rng = Rng::new(0x5eed + t as u64);
                            let lo = t as u64 * half;
                            for _ in 0..n {
                                black_box(decide(lo + rng.below(half)));
                            }
                        })
                    })
                });
            };
            let gov = setup::governor_keyed(path, keys);
            run("governor", &|k| setup::governor_keyed_acquire(&gov, k));
            drop(gov);
            let l = setup::ours_keyed(path, keys);
            run("sluicegate", &|k| setup::ours_keyed_acquire(&l, k));
            drop(l);
            let f = KeyedFloor::new(keys, quanta_reader());
            run("floor", &|k| f.decide(k, path));
        }
        g.finish();
    }
}

/// sluicegate's `KeyedLimiter` with `keys` keys in the state `path` measures (checked, as
/// `setup::governor_keyed` does), on the same `Rng::new(0x5eed)` key sequence, so the report
/// pairs it with the governor row of the same key count.
fn keyed_ours(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    path: Path,
    keys: u64,
) {
    let l = setup::ours_keyed(path, keys);
    g.bench_with_input(BenchmarkId::new("sluicegate", keys), &keys, |b, &n| {
        let mut rng = Rng::new(0x5eed);
        b.iter(|| black_box(setup::ours_keyed_acquire(&l, rng.below(n))))
    });
}

/// docs/OPERATIONS.md's costs: one bucket, and a keyed limiter of 8 keys, as built by default,
/// with counters on, in shadow mode, and after a live reconfiguration; the quanta floor beside
/// them.
fn operations(c: &mut Criterion) {
    for path in PATHS {
        let mut g = c.benchmark_group(format!("operations/{}", path.name()));
        g.throughput(Throughput::Elements(1));
        for mode in setup::Mode::ALL {
            let l = setup::ours_mode(path, mode);
            g.bench_function(format!("limiter/{}", mode.name()), |b| {
                b.iter(|| black_box(ours_acquire(&l)))
            });
            let kl = setup::ours_keyed_mode(path, 8, mode);
            g.bench_function(format!("keyed-8/{}", mode.name()), |b| {
                let mut i = 0u64;
                b.iter(|| {
                    i = i.wrapping_add(1);
                    black_box(setup::ours_keyed_acquire(&kl, i & 7))
                })
            });
        }
        let f = Floor::new(quanta_reader());
        g.bench_function("floor/quanta", |b| b.iter(|| black_box(f.cas())));
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = config();
    targets = clocks, single, shared, algorithms, keyed, keyed_2t, operations
}
criterion_main!(benches);
