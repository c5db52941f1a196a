//! The keyed store under key floods with evictions: every decision equals a map of
//! sequential reference models (so no consume is ever lost to an eviction), the key bound
//! holds, and `KeyStoreFull` happens exactly when every live bucket is below full.
//!
//! Time only moves forward here, and initial == burst, so "full" (and with it eviction,
//! which is lossless) is exactly predictable from the models.
#![no_main]

use sluicegate_model as model;

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use model::Model;
use sluicegate::{Error, KeyedLimiter, ManualClock, OnFull, Quota, Refill};
use std::collections::HashMap;

#[derive(Arbitrary, Debug)]
enum Op {
    Acquire { key: u8, cost: u8, dt: u16 },
    Refund { key: u8, cost: u8 },
    Remove { key: u8 },
    Sweep,
    Flood { first: u16, n: u8 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    count: u8,
    period_ms: u16,
    burst: u8,
    interval: bool,
    max_keys: u8,
    ops: Vec<Op>,
}

fn out(d: &sluicegate::Decision) -> (bool, u64, u64, u64, u64) {
    (d.allowed(), d.limit(), d.remaining(), d.retry_after_nanos(), d.reset_after_nanos())
}

fuzz_target!(|input: Input| {
    let count = u64::from(input.count.max(1));
    let period = u64::from(input.period_ms.max(1)) * 1_000_000;
    let burst = u64::from(input.burst.max(1));
    let max_keys = usize::from(input.max_keys.max(1));
    let mut q = Quota::try_new(count, period, burst).unwrap();
    if input.interval {
        q = q.with_refill(Refill::Interval);
    }
    let clock = ManualClock::new(0);
    let keyed: KeyedLimiter<Vec<u8>, ManualClock> = KeyedLimiter::builder(q)
        .max_keys(max_keys)
        .on_full(OnFull::RejectNewKeys)
        .shards(1 + usize::from(input.max_keys % 4))
        .clock(clock.clone())
        .build()
        .unwrap();
    let mut models: HashMap<Vec<u8>, Model> = HashMap::new();
    let mut t = 0u64;
    let full = |m: &mut Model, t: u64| m.is_full(t);
    let mut acquire = |key: Vec<u8>, cost: u64, t: u64, models: &mut HashMap<Vec<u8>, Model>| {
        let got = keyed.try_acquire(&key[..], cost);
        // A bucket that is full is indistinguishable from an absent key.
        models.retain(|_, m| !full(m, t));
        let live = models.len();
        let known = models.contains_key(&key);
        if cost > burst {
            assert!(matches!(got, Err(Error::InsufficientCapacity { .. })), "{got:?}");
            return;
        }
        if !known && live >= max_keys {
            assert!(matches!(got, Err(Error::KeyStoreFull { .. })), "{got:?}: {live} live");
            return;
        }
        let m = models
            .entry(key.clone())
            .or_insert_with(|| Model::new_keyed(count, period, burst, burst, input.interval, 0, t));
        let want = m.acquire(t, cost).unwrap();
        let got = got.unwrap_or_else(|e| panic!("key {key:?} at {t}: {e}"));
        assert_eq!(
            out(&got),
            (want.allowed, want.limit, want.remaining, want.retry_after_ns, want.reset_after_ns),
            "key {key:?} cost {cost} at t={t}"
        );
        assert!(keyed.len() <= max_keys, "len {} > {max_keys}", keyed.len());
    };
    for op in input.ops.iter().take(300) {
        match *op {
            Op::Acquire { key, cost, dt } => {
                t += u64::from(dt) * 100_000;
                clock.set(t);
                acquire(vec![key], u64::from(cost % 8), t, &mut models);
            }
            Op::Refund { key, cost } => {
                keyed.refund(&[key][..], u64::from(cost)).unwrap();
                if let Some(m) = models.get_mut(&vec![key]) {
                    m.refund(t, u64::from(cost));
                }
            }
            Op::Remove { key } => {
                // Removing forgets the bucket: the key starts full again.
                keyed.remove(&[key][..]).expect("the in-process store");
                models.remove(&vec![key]);
            }
            Op::Sweep => {
                keyed.sweep().expect("the in-process store");
            }
            Op::Flood { first, n } => {
                for i in 0..u16::from(n) {
                    let k = first.wrapping_add(i).to_le_bytes().to_vec();
                    acquire([b"flood-".as_slice(), &k].concat(), 1, t, &mut models);
                }
            }
        }
        assert!(keyed.len() <= max_keys);
    }
});
