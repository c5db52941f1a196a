//! The loom model of the key bound's hint protocol (crate::bound), played by both keyed
//! stores: tests/loom_keyed.rs (word buckets) and tests/loom_keyed_log.rs (sliding logs).

use core::borrow::Borrow;
use core::fmt::Debug;
use core::hash::Hash;
use loom::sync::Arc;
use loom::thread;
use sluicegate::{Decision, Error, KeyedLimiter, ManualClock, OnFull, LONG_KEY_BYTES};

/// Keys of shard `s` of a two-shard limiter. Under loom the limiter hashes with foldhash's
/// `fast` fixed state (store/memory's `KeyHasher`) and picks the shard from bits 40.. of the
/// hash (keyed.rs, keyed_log.rs); should
/// that change, the models still hold, they only stop spanning two shards.
pub fn keys_of(s: usize) -> impl Iterator<Item = u64> {
    use core::hash::BuildHasher;
    let h = foldhash::fast::FixedState::default();
    (0u64..).filter(move |k| (h.hash_one(k) >> 40) as usize & 1 == s)
}

/// Admitted, or refused (by the bucket or at the key bound); any other error fails the model.
pub fn admitted(r: &Result<Decision, Error>) -> bool {
    match r {
        Ok(d) => d.allowed(),
        Err(Error::KeyStoreFull { .. }) => false,
        Err(e) => panic!("{e}"),
    }
}

/// A refund that makes a bucket full again races a new key's scan at the bound (two shards,
/// the refunded key on the shard scanned second). If the scan missed the refund and found
/// nothing to evict, the hint it records must not outlive the refund: the refund's `gen` bump
/// makes the scanner drop it, or the refund lowers it. The next new key then takes the
/// refilled bucket's place, so exactly one of the two new keys gets in.
///
/// `quota` admits 2 units per second: both keys spend 1 at 0, and at 1 ns neither is full
/// unless refunded.
pub fn refund_racing_a_scan_at_the_bound(quota: &'static str) {
    let refunded = keys_of(0).next().unwrap();
    let mut one = keys_of(1);
    let (other, c, d) = (
        one.next().unwrap(),
        one.next().unwrap(),
        one.next().unwrap(),
    );
    loom::model(move || {
        let kl = two_shards::<u64>(quota, 2);
        kl.try_acquire_at(&refunded, 0, 1).unwrap();
        kl.try_acquire_at(&other, 0, 1).unwrap();
        let a = {
            let kl = kl.clone();
            thread::spawn(move || kl.refund_at(&refunded, 1, 1).unwrap())
        };
        let b = kl.try_acquire_at(&c, 1, 1);
        a.join().unwrap();
        let later = kl.try_acquire_at(&d, 1, 1);
        assert!(admitted(&b) != admitted(&later), "{b:?} {later:?}");
        assert_eq!(kl.len(), 2);
        assert!(!kl.snapshot_at(1).unwrap().iter().any(|e| e.0 == refunded));
    });
}

/// At a bound of one key, a sweep evicts the one (full) bucket, on one shard, while a new key
/// of the other shard is inserted. Whichever way they interleave (the sweep holding the full
/// bucket's shard when the new key looks there included), the sweep makes room for the new
/// key, which is admitted.
///
/// `quota` admits 1 unit per second: the old key spends it at 0 and is full again at 1 s.
pub fn a_new_key_at_the_bound_races_a_sweep_that_makes_room(quota: &'static str) {
    let old = keys_of(0).next().unwrap();
    let new = keys_of(1).next().unwrap();
    loom::model(move || {
        let kl = two_shards::<u64>(quota, 1);
        new_key_beside_a_sweep(&kl, &old, &new);
        assert!(!kl.snapshot_at(S).unwrap().iter().any(|e| e.0 == old));
    });
}

/// A limiter of `quota` with two shards, at most `max_keys` keys, new keys refused at the
/// bound.
pub fn two_shards<K: Hash + Eq + Send + 'static>(
    quota: &str,
    max_keys: usize,
) -> Arc<KeyedLimiter<K, ManualClock>> {
    Arc::new(
        KeyedLimiter::builder(quota.parse().unwrap())
            .shards(2)
            .max_keys(max_keys)
            .on_full(OnFull::RejectNewKeys)
            .clock(ManualClock::new(0))
            .build()
            .unwrap(),
    )
}

/// At a bound of one key: `old` spends its one token at 0, then a sweep at 1 s races `new`'s
/// first request, which is admitted, the one key left.
fn new_key_beside_a_sweep<K, Q>(kl: &Arc<KeyedLimiter<K, ManualClock>>, old: &Q, new: &Q)
where
    K: Hash + Eq + Send + Sync + Borrow<Q> + 'static,
    Q: Hash + Eq + ToOwned + Debug + ?Sized,
    Q::Owned: Into<K>,
{
    kl.try_acquire_at(old, 0, 1).unwrap();
    let sweeper = {
        let kl = kl.clone();
        thread::spawn(move || kl.sweep_at(S).unwrap())
    };
    let inserted = kl.try_acquire_at(new, S, 1);
    sweeper.join().unwrap();
    assert!(admitted(&inserted), "{old:?} -> {new:?}: {inserted:?}");
    assert_eq!(kl.len(), 1);
}

/// Short string keys of shard `s` of a two-shard limiter's main store (the store's own
/// fixed hasher under loom: foldhash's `fast` variant).
fn short_keys_of(s: usize) -> impl Iterator<Item = String> {
    use core::hash::BuildHasher;
    let h = foldhash::fast::FixedState::default();
    (0u64..)
        .map(|k| k.to_string())
        .filter(move |k| (h.hash_one(k.as_str()) >> 40) as usize & 1 == s)
}

/// A key longer than `LONG_KEY_BYTES`: held as a digest, in the second store.
fn long_key(c: char) -> String {
    c.to_string().repeat(LONG_KEY_BYTES + 1)
}

/// [`a_new_key_at_the_bound_races_a_sweep_that_makes_room`] across the two stores that share
/// the bound (core/src/store/memory/long.rs): the old key's full bucket is in one store, the
/// new key goes to the other, whose refusal asks the first for room while the sweep may hold
/// the old key's shard there. The new key is admitted whichever way they interleave.
///
/// A long new key beside a short old one on shard 1 of the main store (a room-maker locks
/// shard 0 and only tries the others); a short new key beside a long old one, for a few long
/// keys (where a digest lies follows the loom build's fixed secret).
pub fn a_key_of_the_other_store_races_a_sweep_that_makes_room(quota: &'static str) {
    let short = short_keys_of(1).next().unwrap();
    let mut cases = vec![(short.clone(), long_key('n'))];
    cases.extend("abc".chars().map(|c| (long_key(c), short.clone())));
    for (old, new) in cases {
        loom::model(move || {
            let kl = two_shards::<String>(quota, 1);
            // The digests' store is made by the first long key: before the threads start.
            kl.try_acquire_at(long_key('z').as_str(), 0, 1).unwrap();
            assert!(kl.remove(long_key('z').as_str()).unwrap());
            new_key_beside_a_sweep(&kl, old.as_str(), new.as_str());
        });
    }
}

const S: u64 = 1_000_000_000;
