//! Property tests: a `KeyedLimiter` agrees exactly with a map of sequential reference models
//! (tests/support/model.rs), one per key, created at the key's first request, for random
//! quotas, keys, times and costs, with sweeps, removes, clears, refunds and peeks interleaved
//! and table rebuilds happening underneath.
//!
//! * `initial == burst`: every eviction the limiter makes on its own (table rebuilds, the key
//!   bound) is invisible, so the model simply forgets full buckets. Clocks move forward here:
//!   a key re-created after an eviction at `T` starts at `max(now, T)` (see `keyed.rs`).
//! * `initial < burst`: the limiter evicts only when told (`sweep`), conservatively; the model
//!   mirrors the sweep, including the watermark, and clocks may jump backwards.

use super::keyed_ops;
use sluicegate_model as model;

use keyed_ops::{cases, check_snapshot, key_bytes, op, step, Op};
use model::{out, Model, ModelError};
use proptest::prelude::*;
use sluicegate::{Error, KeyedLimiter, ManualClock, OnFull, Quota, Refill};
use std::collections::HashMap;

#[derive(Clone, Copy, Debug)]
struct Q {
    count: u64,
    period: u64,
    burst: u64,
    initial: u64,
    interval: bool,
}

fn quota(lossless: bool) -> impl Strategy<Value = Q> {
    (
        1u64..10,
        prop_oneof![
            Just(1_000_000_000u64),
            Just(250_000_000),
            1u64..5_000_000_000
        ],
        1u64..12,
        any::<bool>(),
    )
        .prop_flat_map(move |(count, period, burst, interval)| {
            let initial = if lossless {
                (burst..=burst).boxed()
            } else {
                (0..burst).boxed()
            };
            initial.prop_map(move |initial| Q {
                count,
                period,
                burst,
                initial,
                interval,
            })
        })
}

struct Models {
    q: Q,
    origin: u64,
    /// The latest sweep time that evicted something: re-created keys start there.
    watermark: u64,
    map: HashMap<u8, Model>,
}

impl Models {
    fn fresh(&self, t: u64) -> Model {
        let q = self.q;
        let t0 = t.max(self.watermark);
        Model::new_keyed(
            q.count,
            q.period,
            q.burst,
            q.initial,
            q.interval,
            self.origin,
            t0,
        )
    }

    fn is_full(m: &Model, t: u64) -> bool {
        m.is_full(t)
    }

    /// Evicts the full buckets as of `t`; returns how many.
    fn sweep(&mut self, t: u64) -> usize {
        let before = self.map.len();
        self.map.retain(|_, m| !Self::is_full(m, t));
        let n = before - self.map.len();
        if n > 0 {
            self.watermark = self.watermark.max(t);
        }
        n
    }
}

fn run(
    q: Q,
    shards: usize,
    max_keys: usize,
    sweep_on_grow: bool,
    start: u64,
    steps: Vec<(i64, Op)>,
) -> Result<(), TestCaseError> {
    let lossless = q.initial == q.burst;
    let mut quota = Quota::try_new(q.count, q.period, q.burst)
        .unwrap()
        .with_initial(q.initial);
    if q.interval {
        quota = quota.with_refill(Refill::Interval);
    }
    let clock = ManualClock::new(start);
    let kl = KeyedLimiter::<Box<[u8]>, _>::builder(quota)
        .shards(shards)
        .max_keys(max_keys)
        .on_full(OnFull::RejectNewKeys)
        .sweep_on_grow(sweep_on_grow)
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut m = Models {
        q,
        origin: start,
        watermark: 0,
        map: HashMap::new(),
    };
    let mut t = start;
    for (i, (dt, op)) in steps.into_iter().enumerate() {
        t = t.saturating_add_signed(dt);
        clock.set(t);
        if lossless {
            // Full buckets are indistinguishable from absent ones.
            m.sweep(t);
        }
        match op {
            Op::Acquire(k, c) => {
                // A hint, which must change nothing.
                kl.prefetch(key_bytes(k).as_slice());
                let got = kl.try_acquire(key_bytes(k).as_slice(), c);
                if c > q.burst {
                    prop_assert!(
                        matches!(got, Err(Error::InsufficientCapacity { .. })),
                        "step {i}: {got:?}"
                    );
                    continue;
                }
                if !m.map.contains_key(&k) && m.map.len() >= max_keys {
                    prop_assert_eq!(got, Err(Error::KeyStoreFull { max_keys }), "step {}", i);
                    continue;
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
                prop_assert_eq!(Ok(out(&d)), w.map_err(|_: ModelError| ()), "step {}", i);
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
                if lossless {
                    // The limiter may hold full buckets the model forgot, never the reverse.
                    prop_assert!(got || !want, "step {i}: lost a non-full key");
                } else {
                    prop_assert_eq!(got, want, "step {}", i);
                }
            }
            Op::Sweep => {
                let got = kl.sweep().unwrap();
                let want = m.sweep(t);
                if !lossless {
                    prop_assert_eq!(got, want, "step {}", i);
                }
            }
            Op::Clear => {
                kl.clear().unwrap();
                m.map.clear();
            }
        }
        if lossless {
            prop_assert!(kl.len() >= m.map.len(), "step {i}");
        } else {
            prop_assert_eq!(kl.len(), m.map.len(), "step {}", i);
        }
        prop_assert!(kl.len() <= max_keys);
    }
    // The snapshot shows exactly the live buckets (with lossless eviction, possibly full ones
    // that the model forgot).
    let mut snap = kl.snapshot().unwrap();
    snap.sort_by(|a, b| a.0.cmp(&b.0));
    check_snapshot(
        &snap,
        m.map
            .iter()
            .map(|(k, b)| (*k, b.clone().acquire(t, 0).unwrap())),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    /// initial == burst, clocks moving forward, no bound pressure: evictions are invisible.
    #[test]
    fn lossless_keyed_matches_models(q in quota(true), shards in prop_oneof![Just(1usize), Just(2), Just(64)],
                                     sweep_on_grow in any::<bool>(),
                                     start in 0u64..10_000_000_000,
                                     steps in prop::collection::vec((step(false), op(14, 12, 2)), 1..150)) {
        run(q, shards, 1000, sweep_on_grow, start, steps)?;
    }

    /// initial == burst at a small key bound: a new key is refused exactly when every held
    /// bucket is non-full.
    #[test]
    fn lossless_keyed_at_the_bound_matches_models(q in quota(true), shards in prop_oneof![Just(1usize), Just(4)],
                                                  max_keys in 1usize..6,
                                                  sweep_on_grow in any::<bool>(),
                                                  steps in prop::collection::vec((step(false), op(10, 12, 2)), 1..150)) {
        run(q, shards, max_keys, sweep_on_grow, 1_000, steps)?;
    }

    /// initial < burst, clocks jumping backwards too: only sweeps evict, conservatively, and
    /// the model mirrors them.
    #[test]
    fn conservative_keyed_matches_models(q in quota(false), shards in prop_oneof![Just(1usize), Just(2), Just(64)],
                                         sweep_on_grow in any::<bool>(),
                                         start in 0u64..10_000_000_000,
                                         steps in prop::collection::vec((step(true), op(14, 12, 2)), 1..150)) {
        run(q, shards, 1000, sweep_on_grow, start, steps)?;
    }
}
