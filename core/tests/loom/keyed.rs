//! loom models of the keyed store's protocol: every interleaving (up to the preemption bound)
//! of insert, consume, evict, remove, migration to a new table and the key bound.
//!
//! `RUSTFLAGS="--cfg sluicegate_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p sluicegate --release --test loom_keyed`
#![cfg(sluicegate_loom)]

use loom::sync::Arc;
use loom::thread;
use sluicegate::{Error, KeyedLimiter, ManualClock, OnFull};

use super::bound as support;

const S: u64 = 1_000_000_000;

/// 1 token a second, burst 2; one shard, so that every key shares the shard's lock and table.
fn limiter(max_keys: usize) -> Arc<KeyedLimiter<u64, ManualClock>> {
    Arc::new(
        KeyedLimiter::builder("1/s; burst=2".parse().unwrap())
            .shards(1)
            .max_keys(max_keys)
            .on_full(OnFull::RejectNewKeys)
            .clock(ManualClock::new(0))
            .build()
            .unwrap(),
    )
}

/// Two first requests for the same key: one bucket results and both consumes count.
#[test]
fn insert_vs_insert_of_the_same_key() {
    loom::model(|| {
        let kl = limiter(4);
        let a = {
            let kl = kl.clone();
            thread::spawn(move || kl.try_acquire_at(&1, 0, 1).unwrap())
        };
        let b = kl.try_acquire_at(&1, 0, 1).unwrap();
        let a = a.join().unwrap();
        assert!(a.allowed() && b.allowed());
        let mut rem = [a.remaining(), b.remaining()];
        rem.sort_unstable();
        assert_eq!(rem, [0, 1]);
        assert_eq!(kl.len(), 1);
        assert_eq!(kl.peek_at(&1, 0).unwrap().remaining(), 0);
    });
}

/// A consume racing with the eviction of its (full) bucket is never lost: it lands either on
/// the old bucket (which then is no longer full and stays) or on the re-created one.
#[test]
fn consume_vs_evict() {
    loom::model(|| {
        let kl = limiter(4);
        kl.try_acquire_at(&1, 0, 1).unwrap();
        // At 1 s the bucket is full again.
        let a = {
            let kl = kl.clone();
            thread::spawn(move || kl.try_acquire_at(&1, S, 2).unwrap())
        };
        let evicted = kl.sweep_at(S).unwrap();
        let d = a.join().unwrap();
        assert!(d.allowed());
        assert_eq!(d.remaining(), 0);
        assert!(evicted <= 1);
        assert_eq!(kl.len(), 1);
        assert_eq!(kl.peek_at(&1, S).unwrap().remaining(), 0);
    });
}

/// A consume racing with `remove`: either it came first (and was removed with the bucket) or
/// it landed on the fresh bucket created after; the decision tells which.
#[test]
fn consume_vs_remove() {
    loom::model(|| {
        let kl = limiter(4);
        kl.try_acquire_at(&1, 0, 1).unwrap();
        let a = {
            let kl = kl.clone();
            thread::spawn(move || kl.try_acquire_at(&1, 0, 1).unwrap())
        };
        let removed = kl.remove(&1).unwrap();
        let d = a.join().unwrap();
        assert!(removed);
        assert!(d.allowed());
        if d.remaining() == 0 {
            // Consumed the old bucket, then removed.
            assert_eq!(kl.len(), 0);
            assert_eq!(kl.peek_at(&1, 0).unwrap().remaining(), 2);
        } else {
            // Removed, then a fresh bucket.
            assert_eq!(d.remaining(), 1);
            assert_eq!(kl.len(), 1);
            assert_eq!(kl.peek_at(&1, 0).unwrap().remaining(), 1);
        }
    });
}

/// Two new keys at the bound, where the one existing key is full (evictable): exactly one of
/// them gets the freed place.
#[test]
fn two_new_keys_at_the_bound() {
    loom::model(|| {
        let kl = limiter(1);
        kl.try_acquire_at(&1, 0, 1).unwrap();
        let a = {
            let kl = kl.clone();
            thread::spawn(move || kl.try_acquire_at(&2, S, 1))
        };
        let b = kl.try_acquire_at(&3, S, 1);
        let a = a.join().unwrap();
        assert_eq!(kl.len(), 1);
        match (a, b) {
            (Ok(d), Err(Error::KeyStoreFull { max_keys: 1 }))
            | (Err(Error::KeyStoreFull { max_keys: 1 }), Ok(d)) => assert!(d.allowed()),
            other => panic!("{other:?}"),
        }
    });
}

/// A consume of the only (full) key races with a new key that needs its place: the outcome
/// is one of the two serial orders, and the consume is either applied or refused, never lost.
#[test]
fn consume_vs_eviction_at_the_bound() {
    loom::model(|| {
        let kl = limiter(1);
        kl.try_acquire_at(&1, 0, 1).unwrap();
        let a = {
            let kl = kl.clone();
            thread::spawn(move || kl.try_acquire_at(&1, S, 1))
        };
        let b = kl.try_acquire_at(&2, S, 1);
        let a = a.join().unwrap();
        assert_eq!(kl.len(), 1);
        match (a, b) {
            // Consume first: key 1 is no longer full, key 2 is refused.
            (Ok(d), Err(Error::KeyStoreFull { .. })) => {
                assert_eq!(d.remaining(), 1);
                assert_eq!(kl.peek_at(&1, S).unwrap().remaining(), 1);
                assert_eq!(kl.snapshot_at(S).unwrap()[0].0, 1);
            }
            // Key 2 took the place: the consume of (re-created) key 1 is refused.
            (Err(Error::KeyStoreFull { .. }), Ok(d)) => {
                assert_eq!(d.remaining(), 1);
                assert_eq!(kl.snapshot_at(S).unwrap()[0].0, 2);
            }
            other => panic!("{other:?}"),
        }
    });
}

/// A consume racing with the migration of its bucket to a larger table (triggered by an
/// insert) is carried over.
#[test]
fn consume_vs_table_rebuild() {
    loom::model(|| {
        let kl = limiter(16);
        // The first table has 8 slots and is rebuilt at the 8th key.
        for k in 1..=7 {
            kl.try_acquire_at(&k, 0, 1).unwrap();
        }
        let cap = kl.capacity();
        let a = {
            let kl = kl.clone();
            thread::spawn(move || kl.try_acquire_at(&1, 0, 1).unwrap())
        };
        kl.try_acquire_at(&8, 0, 1).unwrap();
        let d = a.join().unwrap();
        assert!(d.allowed());
        assert_eq!(d.remaining(), 0);
        assert!(kl.capacity() > cap);
        assert_eq!(kl.len(), 8);
        assert!(!kl.try_acquire_at(&1, 0, 1).unwrap().allowed());
    });
}

/// The hint protocol at the bound (crate::bound): see tests/support/loom_bound.rs.
#[test]
fn refund_racing_a_scan_at_the_bound() {
    support::refund_racing_a_scan_at_the_bound("2/s");
}

/// A sweep making room at the bound of one key races a new key of another shard: see
/// tests/loom/bound.rs.
#[test]
fn a_new_key_at_the_bound_races_a_sweep_that_makes_room() {
    support::a_new_key_at_the_bound_races_a_sweep_that_makes_room("1/s");
}

/// The same across the store of long keys' digests and the main store: see
/// tests/loom/bound.rs.
#[test]
fn a_key_of_the_other_store_races_a_sweep_that_makes_room() {
    support::a_key_of_the_other_store_races_a_sweep_that_makes_room("1/s");
}
