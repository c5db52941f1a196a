//! `KeyedLimiter` with `algorithm=sliding_log` (the keyed store of logs, core/src/keyed_log.rs)
//! against a map of sequential reference models (`support::model::SlidingLog`), one per key,
//! each created at its key's first request; plus the key bound, a flood of distinct keys and
//! real threads.
//!
//! * Exact mode: clocks may jump backwards. The store evicts only on `sweep` and at the key
//!   bound; with one shard the model mirrors both (every full log goes, and the watermark
//!   moves to that instant), so every decision, count and snapshot must agree exactly.
//! * Lossless mode: clocks move forward, any shard count. A full log is then
//!   indistinguishable from an absent one, so the model forgets full logs at every step and
//!   the limiter may hold some that the model forgot, never the reverse.
//!
//! With `EvictFullest` the key the store evicted at the bound is read from the snapshot and
//! mirrored; with one shard (and fewer than 32 keys) it must be one with the least
//! `reset_after`.

use super::keyed_ops;
use sluicegate_model as model;

use keyed_ops::{cases, check_snapshot, key_bytes, op, step, Op};
use model::{out, SlidingLog as LogModel};
use proptest::prelude::*;
use sluicegate::{Algorithm, Clock, Error, KeyedLimiter, ManualClock, OnFull, Quota};
use std::collections::{BTreeSet, HashMap};
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const S: u64 = 1_000_000_000;

/// `(N, W)`.
fn log_quota() -> impl Strategy<Value = (u64, u64)> {
    (1u64..10, prop_oneof![Just(S), Just(S / 4), 1u64..5 * S])
}

struct Models {
    n: u64,
    w: u64,
    /// The latest instant at which a log was evicted: new logs start there.
    watermark: u64,
    map: HashMap<u8, LogModel>,
}

impl Models {
    fn fresh(&self, t: u64) -> LogModel {
        LogModel::new(self.n, self.w, t.max(self.watermark))
    }

    fn reset_after(m: &LogModel, t: u64) -> u64 {
        m.clone().acquire(t, 0).unwrap().reset_after_ns
    }

    /// Evicts the full logs as of `t`; returns how many.
    fn sweep(&mut self, t: u64) -> usize {
        let before = self.map.len();
        self.map.retain(|_, m| !m.is_full(t));
        let n = before - self.map.len();
        if n > 0 {
            self.watermark = self.watermark.max(t);
        }
        n
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Exact,
    Lossless,
}

#[allow(clippy::too_many_arguments)]
fn run(
    (n, w): (u64, u64),
    shards: usize,
    max_keys: usize,
    on_full: OnFull,
    mode: Mode,
    start: u64,
    steps: Vec<(i64, Op)>,
) -> Result<(), TestCaseError> {
    let quota = Quota::new(NonZeroU64::new(n).unwrap(), NonZeroU64::new(w).unwrap())
        .with_algorithm(Algorithm::SlidingLog);
    let clock = ManualClock::new(start);
    let kl = KeyedLimiter::<Box<[u8]>, _>::builder(quota)
        .shards(shards)
        .max_keys(max_keys)
        .on_full(on_full)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut m = Models {
        n,
        w,
        watermark: 0,
        map: HashMap::new(),
    };
    let exact = mode == Mode::Exact;
    let mut t = start;
    for (i, (dt, op)) in steps.into_iter().enumerate() {
        t = t.saturating_add_signed(dt);
        clock.set(t);
        if !exact {
            m.map.retain(|_, b| !b.is_full(t));
        }
        match op {
            Op::Acquire(k, c) => {
                let got = kl.try_acquire(key_bytes(k).as_slice(), c);
                if c > n {
                    prop_assert!(
                        matches!(got, Err(Error::InsufficientCapacity { .. })),
                        "step {i}: {got:?}"
                    );
                    continue;
                }
                if !m.map.contains_key(&k) && m.map.len() >= max_keys {
                    // Full logs make room first (one shard: all of them, like a sweep).
                    if !exact || m.sweep(t) == 0 {
                        match on_full {
                            OnFull::RejectNewKeys => {
                                prop_assert_eq!(
                                    got,
                                    Err(Error::KeyStoreFull { max_keys }),
                                    "step {}",
                                    i
                                );
                                continue;
                            }
                            _ => {
                                let held: BTreeSet<u8> =
                                    kl.snapshot().unwrap().iter().map(|e| e.0[0]).collect();
                                let gone: Vec<u8> = m
                                    .map
                                    .keys()
                                    .copied()
                                    .filter(|k2| !held.contains(k2))
                                    .collect();
                                // The store holds at most `max_keys` keys, these among them:
                                // none is full, so one of them made room.
                                prop_assert_eq!(gone.len(), 1, "step {}: evicted {:?}", i, gone);
                                let least = m.map.values().map(|b| Models::reset_after(b, t)).min();
                                if shards == 1 {
                                    prop_assert_eq!(
                                        Some(Models::reset_after(&m.map[&gone[0]], t)),
                                        least,
                                        "step {}: not the fullest",
                                        i
                                    );
                                }
                                m.map.remove(&gone[0]);
                                m.watermark = m.watermark.max(t);
                            }
                        }
                    }
                }
                let fresh = m.fresh(t);
                let want = m.map.entry(k).or_insert(fresh).acquire(t, c);
                match (got, want) {
                    (Ok(d), Ok(w)) => prop_assert_eq!(out(&d), w, "step {} t={} key {}", i, t, k),
                    (g, w) => prop_assert!(false, "step {i}: limiter {g:?} vs model {w:?}"),
                }
            }
            Op::Peek(k) => {
                let d = kl.peek(key_bytes(k).as_slice()).unwrap();
                let w = match m.map.get(&k) {
                    Some(b) => b.clone().acquire(t, 0),
                    None => m.fresh(t).acquire(t, 0),
                };
                prop_assert_eq!(out(&d), w.unwrap(), "step {}", i);
            }
            Op::Refund(k, c) => {
                kl.refund(key_bytes(k).as_slice(), c).unwrap();
                if let Some(b) = m.map.get_mut(&k) {
                    b.refund(t, c);
                }
            }
            Op::Remove(k) => {
                let got = kl.remove(key_bytes(k).as_slice()).unwrap();
                let want = m.map.remove(&k).is_some();
                if exact {
                    prop_assert_eq!(got, want, "step {}", i);
                } else {
                    prop_assert!(got || !want, "step {i}: lost a non-full key");
                }
            }
            Op::Sweep => {
                let got = kl.sweep().unwrap();
                let want = m.sweep(t);
                if exact {
                    prop_assert_eq!(got, want, "step {}", i);
                }
            }
            Op::Clear => {
                kl.clear().unwrap();
                m.map.clear();
            }
        }
        if exact {
            prop_assert_eq!(kl.len(), m.map.len(), "step {}", i);
        } else {
            prop_assert!(kl.len() >= m.map.len(), "step {i}");
        }
        prop_assert!(kl.len() <= max_keys);
    }
    let snap = kl.snapshot().unwrap();
    prop_assert_eq!(snap.len(), kl.len());
    if exact {
        prop_assert_eq!(snap.len(), m.map.len());
    }
    check_snapshot(
        &snap,
        m.map
            .iter()
            .map(|(k, b)| (*k, b.clone().acquire(t, 0).unwrap())),
    )
}

fn policy() -> impl Strategy<Value = OnFull> {
    prop_oneof![Just(OnFull::RejectNewKeys), Just(OnFull::EvictFullest)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// Clocks jumping backwards, no bound pressure, any shard count: only sweeps evict, and
    /// the model mirrors them.
    #[test]
    fn keyed_logs_match_models(q in log_quota(), shards in prop_oneof![Just(1usize), Just(2), Just(64)],
                               start in 0u64..10_000_000_000,
                               steps in prop::collection::vec((step(true), op(14, 10, 3)), 1..150)) {
        run(q, shards, 1000, OnFull::RejectNewKeys, Mode::Exact, start, steps)?;
    }

    /// Clocks jumping backwards at a small key bound, one shard: a new key evicts every full
    /// log, else is refused (or evicts the fullest), exactly as the model says.
    #[test]
    fn keyed_logs_at_the_bound_match_models(q in log_quota(), max_keys in 1usize..6, on_full in policy(),
                                            start in 0u64..10_000_000_000,
                                            steps in prop::collection::vec((step(true), op(10, 10, 3)), 1..150)) {
        run(q, 1, max_keys, on_full, Mode::Exact, start, steps)?;
    }

    /// Clocks moving forward at a small bound over several shards: evictions of full logs
    /// anywhere are invisible, and a new key is refused only when no log is full.
    #[test]
    fn keyed_logs_at_the_bound_over_shards(q in log_quota(), shards in prop_oneof![Just(2usize), Just(4)],
                                           max_keys in 1usize..8, on_full in policy(),
                                           steps in prop::collection::vec((step(false), op(12, 10, 3)), 1..150)) {
        run(q, shards, max_keys, on_full, Mode::Lossless, 1_000, steps)?;
    }
}

fn log_limiter(
    rate: &str,
    shards: usize,
    max_keys: usize,
    on_full: OnFull,
    clock: &ManualClock,
) -> KeyedLimiter<u64, ManualClock> {
    KeyedLimiter::builder(rate.parse().unwrap())
        .shards(shards)
        .max_keys(max_keys)
        .on_full(on_full)
        .clock(clock.clone())
        .build()
        .unwrap()
}

/// `RejectNewKeys` is exact at the bound: `max_keys` keys are held, the next is refused and
/// changes nothing, and any key removed, refunded empty or grown full makes room for exactly
/// one.
#[test]
fn reject_new_keys_is_exact_at_the_bound() {
    let clock = ManualClock::new(0);
    let kl = log_limiter(
        "2/s; algorithm=sliding_log",
        8,
        100,
        OnFull::RejectNewKeys,
        &clock,
    );
    for k in 0..100 {
        clock.set(k * 1_000_000); // key k's window empties at k ms + 1 s
        assert!(kl.try_acquire(&k, 1).unwrap().allowed());
    }
    assert_eq!(kl.len(), 100);
    for k in 100..150 {
        assert_eq!(
            kl.try_acquire(&k, 1),
            Err(Error::KeyStoreFull { max_keys: 100 })
        );
        assert_eq!(kl.peek(&k).unwrap().remaining(), 2);
    }
    assert_eq!(kl.len(), 100);
    assert!(kl.try_acquire(&7, 1).unwrap().allowed()); // held keys are served
    assert!(!kl.try_acquire(&7, 1).unwrap().allowed());
    assert!(kl.remove(&3).unwrap());
    assert!(kl.try_acquire(&100, 1).unwrap().allowed());
    assert!(kl.try_acquire(&101, 1).is_err());
    kl.refund(&5, 1).unwrap(); // key 5's window is now empty: evictable
    assert!(kl.try_acquire(&101, 1).unwrap().allowed());
    assert!(kl.try_acquire(&102, 1).is_err());
    // At 1 s + 1.5 ms keys 0 and 1 are full (key 0: admitted at 0; key 1 at 1 ms).
    clock.set(S + 1_500_000);
    assert!(kl.try_acquire(&102, 1).unwrap().allowed());
    assert!(kl.try_acquire(&103, 1).unwrap().allowed());
    assert!(kl.try_acquire(&104, 1).is_err());
    assert_eq!(kl.len(), 100);
    let held: BTreeSet<u64> = kl.snapshot().unwrap().into_iter().map(|e| e.0).collect();
    assert!(!held.contains(&0) && !held.contains(&1) && !held.contains(&3));
    assert!(!held.contains(&5) && held.contains(&2) && held.contains(&103));
}

/// `EvictFullest` never holds more than `max_keys`, whatever the traffic.
#[test]
fn evict_fullest_keeps_len_within_the_bound() {
    let clock = ManualClock::new(0);
    let kl = log_limiter(
        "5/100ms; algorithm=sliding_log",
        4,
        50,
        OnFull::EvictFullest,
        &clock,
    );
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let mut rnd = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    for _ in 0..50_000 {
        clock.advance_nanos(rnd(200_000));
        let k = rnd(400);
        match rnd(20) {
            0 => kl.refund(&k, rnd(3)).unwrap(),
            1 => {
                kl.remove(&k).unwrap();
            }
            2 => {
                kl.sweep().unwrap();
            }
            _ => {
                let d = kl.try_acquire(&k, rnd(4)).unwrap();
                assert!(d.remaining() <= 5);
            }
        }
        assert!(kl.len() <= 50);
    }
    assert_eq!(kl.snapshot().unwrap().len(), kl.len());
}

/// A flood of a million distinct keys against a bound of 10 000 keeps the key count at the
/// bound and the tables' capacity bounded, under both policies (O(1) per refused or evicting
/// key: the hint spares the scans).
#[test]
fn a_flood_of_distinct_keys_keeps_memory_bounded() {
    for on_full in [OnFull::RejectNewKeys, OnFull::EvictFullest] {
        let clock = ManualClock::new(0);
        let kl = log_limiter("3/min; algorithm=sliding_log", 64, 10_000, on_full, &clock);
        let mut refused = 0;
        for k in 0..1_000_000u64 {
            clock.advance_nanos(1_000);
            match kl.try_acquire(&k, 1) {
                Ok(d) => assert!(d.allowed()),
                Err(Error::KeyStoreFull { .. }) => refused += 1,
                Err(e) => panic!("{e}"),
            }
            if k % 100_000 == 0 {
                assert!(
                    kl.capacity() <= 4 * 10_000,
                    "{on_full:?}: {}",
                    kl.capacity()
                );
            }
        }
        assert_eq!(kl.len(), 10_000);
        assert!(
            kl.capacity() <= 4 * 10_000,
            "{on_full:?}: {}",
            kl.capacity()
        );
        match on_full {
            OnFull::RejectNewKeys => assert_eq!(refused, 990_000),
            _ => assert_eq!(refused, 0),
        }
    }
}

/// Real threads on a few hot keys while the clock moves, sweeps run and a flood of other keys
/// presses on a small bound: the cost admitted per key in any window never exceeds `N`.
///
/// A decision's instant `t_e` is the limiter's clock reading clamped to the log's newest
/// admission, so it lies between the clock read just before and just after the call: every
/// admission whose whole interval lies in one window `(x - W, x]` counts in it.
#[test]
fn admitted_per_key_within_a_window_never_exceeds_the_limit() {
    const N: u64 = 5;
    const W: u64 = 20_000_000; // 20 ms
    const HOT: u64 = 3;
    const THREADS: u64 = 4;
    let clock = ManualClock::new(0);
    let kl = Arc::new(log_limiter(
        "5/20ms; algorithm=sliding_log",
        2,
        6,
        OnFull::RejectNewKeys,
        &clock,
    ));
    // Per hot key: (clock before, clock after, cost) of every admission.
    type Admissions = Vec<Vec<(u64, u64, u64)>>;
    let admitted: Arc<Mutex<Admissions>> =
        Arc::new(Mutex::new((0..HOT).map(|_| Vec::new()).collect()));
    for k in 0..HOT {
        // The hot keys hold places before the flood starts, with a unit in their window so
        // that they are not full (evictable) then; the workers keep them so.
        assert!(kl.try_acquire(&k, 1).unwrap().allowed());
        admitted.lock().unwrap()[k as usize].push((0, 0, 1));
    }
    let done = Arc::new(AtomicBool::new(false));
    // The clock advances only after the workers made THREADS attempts since the last tick:
    // however the threads are scheduled, every window sees the workers' requests (so the hot
    // keys stay non-full and the run admits plenty), not only the flooder's.
    let attempts = Arc::new(AtomicU64::new(0));
    let ticker = {
        let (kl, clock, done, attempts) =
            (kl.clone(), clock.clone(), done.clone(), attempts.clone());
        std::thread::spawn(move || {
            let (mut ticks, mut seen) = (0u64, 0u64);
            while !done.load(Ordering::Acquire) {
                let now = attempts.load(Ordering::Acquire);
                if now >= seen + THREADS {
                    seen = now;
                    clock.advance_nanos(250_000);
                    ticks += 1;
                    if ticks % 16 == 0 {
                        kl.sweep().unwrap();
                    }
                }
                std::thread::yield_now();
            }
        })
    };
    let flooder = {
        let (kl, done) = (kl.clone(), done.clone());
        std::thread::spawn(move || {
            let mut k = 1_000u64;
            while !done.load(Ordering::Acquire) {
                let _ = kl.try_acquire(&k, 1);
                k += 1;
            }
        })
    };
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (kl, clock, admitted, attempts) = (
                kl.clone(),
                clock.clone(),
                admitted.clone(),
                attempts.clone(),
            );
            std::thread::spawn(move || {
                let mut x = 0x9e37_79b9 ^ (t + 1);
                let mut mine = vec![Vec::new(); HOT as usize];
                // 300 ms of clock: 15 windows.
                while clock.now() < 300_000_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = x % HOT;
                    let cost = 1 + (x >> 8) % 2;
                    let before = clock.now();
                    let got = kl.try_acquire(&k, cost);
                    let after = clock.now();
                    attempts.fetch_add(1, Ordering::AcqRel);
                    if matches!(got, Ok(d) if d.allowed()) {
                        mine[k as usize].push((before, after, cost));
                    }
                }
                let mut all = admitted.lock().unwrap();
                for (k, v) in mine.into_iter().enumerate() {
                    all[k].extend(v);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Release);
    ticker.join().unwrap();
    flooder.join().unwrap();
    let all = admitted.lock().unwrap();
    let mut total = 0;
    for (k, adm) in all.iter().enumerate() {
        total += adm.len();
        for &(_, x, _) in adm {
            let inside: u64 = adm
                .iter()
                .filter(|&&(a, b, _)| a + W > x && b <= x)
                .map(|e| e.2)
                .sum();
            assert!(
                inside <= N,
                "key {k}: {inside} admitted in the window ending at {x}"
            );
        }
    }
    // At most 15 windows' worth per key, and (the clock waits for the workers) far more than
    // the first window's.
    assert!(total > 6 * HOT as usize, "{total}");
    assert!(kl.len() <= 6);
}

/// Nanoseconds per keyed decision, sliding log against the word store's sliding window in
/// the same run (release, one thread, noisy: for the report, not asserted):
/// `cargo test -p sluicegate --release --test keyed_log -- --ignored --nocapture`.
#[test]
#[ignore]
fn timing_keyed_log_decisions() {
    const OPS: u64 = 2_000_000;
    for keys in [1u64, 100_000] {
        // 100/s: a key drawn every 100 ms (100 000 keys) holds about 10 runs; 100/ms: one.
        for rate in [
            "100/s; algorithm=sliding_log",
            "100/ms; algorithm=sliding_log",
            "100/s; algorithm=sliding_window",
        ] {
            let clock = ManualClock::new(0);
            let kl = log_limiter(rate, 64, 1 << 20, OnFull::RejectNewKeys, &clock);
            let mut x = 0x9e37_79b9_7f4a_7c15_u64;
            let mut order: Vec<u64> = (0..OPS)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x % keys
                })
                .collect();
            for k in 0..keys {
                kl.try_acquire(&k, 1).unwrap(); // every key exists: no insert is timed
            }
            let mut best = f64::MAX;
            for _ in 0..5 {
                let mut allowed = 0u64;
                let t0 = std::time::Instant::now();
                for &k in &order {
                    clock.advance_nanos(1_000);
                    allowed += u64::from(kl.try_acquire(&k, 1).unwrap().allowed());
                }
                let ns = t0.elapsed().as_nanos() as f64 / OPS as f64;
                best = best.min(ns);
                std::hint::black_box(allowed);
                order.rotate_left(1);
            }
            println!("{keys:>7} keys  {rate:<32} {best:6.1} ns/decision (best of 5)");
        }
    }
}
