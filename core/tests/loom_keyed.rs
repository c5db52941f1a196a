//! loom models of the keyed store's protocol: every interleaving (up to the preemption bound)
//! of insert, consume, evict, remove, migration to a new table and the key bound.
//!
//! `RUSTFLAGS="--cfg sluicegate_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p sluicegate --release --test loom_keyed`
#![cfg(sluicegate_loom)]

use loom::sync::Arc;
use loom::thread;
use sluicegate::{Error, KeyedLimiter, ManualClock, OnFull};

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
        let evicted = kl.sweep_at(S);
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
        let removed = kl.remove(&1);
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
                assert_eq!(kl.snapshot_at(S)[0].0, 1);
            }
            // Key 2 took the place: the consume of (re-created) key 1 is refused.
            (Err(Error::KeyStoreFull { .. }), Ok(d)) => {
                assert_eq!(d.remaining(), 1);
                assert_eq!(kl.snapshot_at(S)[0].0, 2);
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

/// Keys of shard `s` of a two-shard limiter. Under loom the limiter hashes with foldhash's
/// fixed state and picks the shard from bits 40.. of the hash (keyed.rs); should that change,
/// the model below still holds, it only stops spanning two shards.
fn keys_of(s: usize) -> impl Iterator<Item = u64> {
    use core::hash::BuildHasher;
    let h = foldhash::quality::FixedState::default();
    (0u64..).filter(move |k| (h.hash_one(k) >> 40) as usize & 1 == s)
}

/// A refund that fills a bucket races a new key's scan at the bound (two shards, the
/// refunded key on the shard scanned second). If the scan missed the refund and found nothing
/// to evict, the hint it records must not outlive the refund: the next new key finds the
/// refilled bucket and takes its place, so exactly one of the two new keys gets in.
#[test]
fn refund_racing_a_scan_at_the_bound() {
    let refunded = keys_of(0).next().unwrap();
    let mut one = keys_of(1);
    let (other, c, d) = (
        one.next().unwrap(),
        one.next().unwrap(),
        one.next().unwrap(),
    );
    loom::model(move || {
        let kl = Arc::new(
            KeyedLimiter::<u64>::builder("1/s; burst=2".parse().unwrap())
                .shards(2)
                .max_keys(2)
                .on_full(OnFull::RejectNewKeys)
                .clock(ManualClock::new(0))
                .build()
                .unwrap(),
        );
        kl.try_acquire_at(&refunded, 0, 1).unwrap(); // full at 1 s, or at once if refunded
        kl.try_acquire_at(&other, 0, 1).unwrap(); // full at 1 s
        let a = {
            let kl = kl.clone();
            thread::spawn(move || kl.refund_at(&refunded, 1, 1).unwrap())
        };
        let b = kl.try_acquire_at(&c, 1, 1);
        a.join().unwrap();
        let later = kl.try_acquire_at(&d, 1, 1);
        let admitted = |r: &Result<sluicegate::Decision, Error>| match r {
            Ok(d) => d.allowed(),
            Err(Error::KeyStoreFull { .. }) => false,
            Err(e) => panic!("{e}"),
        };
        assert!(admitted(&b) != admitted(&later), "{b:?} {later:?}");
        assert_eq!(kl.len(), 2);
        assert!(!kl.snapshot_at(1).iter().any(|e| e.0 == refunded));
    });
}
