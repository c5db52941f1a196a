//! Behaviour of `KeyedLimiter` under a manual clock (issue 3).

use sluicegate_model as model;

use model::Model;
use sluicegate::{Error, KeyedLimiter, Limiter, ManualClock, OnFull, Quota};

const S: u64 = 1_000_000_000;

fn keyed<K: std::hash::Hash + Eq + Send + 'static>(
    rate: &str,
    clock: &ManualClock,
) -> KeyedLimiter<K, ManualClock> {
    KeyedLimiter::builder(rate.parse().unwrap())
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn keys_have_independent_buckets_with_the_limiter_contract() {
    let clock = ManualClock::new(5 * S);
    let kl = keyed::<u64>("2/s; burst=3", &clock);
    let single = Limiter::with_clock("2/s; burst=3".parse().unwrap(), clock.clone()).unwrap();
    for _ in 0..4 {
        assert_eq!(
            kl.try_acquire(&7, 1).unwrap(),
            single.try_acquire(1).unwrap()
        );
    }
    // Key 8 is untouched by key 7's consumption.
    assert_eq!(kl.try_acquire(&8, 3).unwrap().remaining(), 0);
    let denied = kl.try_acquire(&7, 1).unwrap();
    assert!(!denied.allowed());
    assert_eq!(denied.retry_after_nanos(), S / 2);
    assert_eq!(kl.len(), 2);
    assert!(matches!(
        kl.try_acquire(&9, 4),
        Err(Error::InsufficientCapacity {
            cost: 4,
            capacity: 3
        })
    ));
    // A cost above capacity never creates the key.
    assert_eq!(kl.len(), 2);
}

#[test]
fn byte_string_keys_are_looked_up_by_slice() {
    let clock = ManualClock::new(0);
    let boxed = keyed::<Box<[u8]>>("1/s", &clock);
    assert!(boxed.try_acquire(b"alice".as_slice(), 1).unwrap().allowed());
    assert!(!boxed.try_acquire(b"alice".as_slice(), 1).unwrap().allowed());
    assert!(boxed.try_acquire(&b"bob"[..], 1).unwrap().allowed());
    let vec = keyed::<Vec<u8>>("1/s", &clock);
    assert!(vec.try_acquire(&[1u8, 2, 3][..], 1).unwrap().allowed());
    assert!(!vec.try_acquire(&vec![1u8, 2, 3][..], 1).unwrap().allowed());
    let strings = keyed::<String>("1/s", &clock);
    assert!(strings.try_acquire("carol", 1).unwrap().allowed());
    assert!(!strings.try_acquire("carol", 1).unwrap().allowed());
    let mut snap = strings.snapshot().unwrap();
    snap.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(snap.len(), 1);
    assert_eq!(snap[0].0, "carol");
    assert_eq!(snap[0].1.remaining(), 0);
}

#[test]
fn buckets_start_at_first_request_on_the_limiters_interval_grid() {
    // Grid origin: the limiter's creation (t = 0.3 s); key created at 1.5 s.
    let clock = ManualClock::new(3 * S / 10);
    let kl = keyed::<u32>("4/s; burst=4; initial=1; refill=interval", &clock);
    let mut m = Model::new_keyed(4, S, 4, 1, true, 3 * S / 10, 3 * S / 2);
    for (t, c) in [
        (3 * S / 2, 1),
        (3 * S / 2, 1),
        (2 * S, 2),
        (2 * S + S / 2, 4),
    ] {
        let d = kl.try_acquire_at(&1, t, c).unwrap();
        let o = m.acquire(t, c).unwrap();
        assert_eq!(
            (
                d.allowed(),
                d.remaining(),
                d.retry_after_nanos(),
                d.reset_after_nanos()
            ),
            (o.allowed, o.remaining, o.retry_after_ns, o.reset_after_ns),
            "t={t} c={c}"
        );
    }
}

#[test]
fn a_stale_sweep_does_not_take_an_interval_bucket_back_a_period() {
    // Period 1 (1 s to 2 s) used up, then refunded: full within period 1. A sweep at a stale
    // reading (0.5 s, period 0) must not take it for full: evicted and re-created at 0.5 s,
    // it would admit once more in period 1.
    let clock = ManualClock::new(0);
    let kl = keyed::<u64>("1/s; refill=interval", &clock);
    assert!(kl.try_acquire_at(&1, 3 * S / 2, 1).unwrap().allowed());
    kl.refund_at(&1, 3 * S / 2, 1).unwrap();
    assert_eq!(
        kl.sweep_at(S / 2).unwrap(),
        0,
        "a reading before its period"
    );
    assert!(kl.try_acquire_at(&1, S / 2, 1).unwrap().allowed());
    let d = kl.try_acquire_at(&1, 3 * S / 2, 1).unwrap();
    assert!(!d.allowed(), "one admission in period 1");
    assert_eq!(d.retry_after_nanos(), S / 2);
    // At a reading within its period a full bucket is full.
    kl.refund_at(&1, 3 * S / 2, 1).unwrap();
    assert_eq!(kl.sweep_at(3 * S / 2).unwrap(), 1);
}

#[test]
fn peek_does_not_create_and_refund_of_absent_key_is_a_no_op() {
    let clock = ManualClock::new(0);
    let kl = keyed::<u64>("1/s; burst=2; initial=0", &clock);
    let d = kl.peek(&1).unwrap();
    assert_eq!((d.allowed(), d.remaining()), (true, 0));
    assert_eq!(d.reset_after_nanos(), 2 * S);
    kl.refund(&1, 2).unwrap();
    assert!(kl.is_empty());
    clock.set(S);
    // Created now, with initial = 0 tokens: the earlier peek did not anchor it.
    assert!(!kl.try_acquire(&1, 1).unwrap().allowed());
    kl.refund(&1, 1).unwrap();
    assert!(kl.try_acquire(&1, 1).unwrap().allowed());
}

#[test]
fn sweep_evicts_only_full_buckets() {
    let clock = ManualClock::new(0);
    let kl = keyed::<u64>("1/s; burst=2", &clock);
    kl.try_acquire(&1, 1).unwrap();
    kl.try_acquire(&2, 2).unwrap();
    kl.try_acquire(&3, 0).unwrap(); // created full
    assert_eq!(kl.len(), 3);
    assert_eq!(kl.sweep().unwrap(), 1);
    assert_eq!(kl.len(), 2);
    clock.set(S);
    assert_eq!(kl.sweep().unwrap(), 1); // key 1 is full again; key 2 has 1 token
    clock.set(2 * S);
    assert_eq!(kl.sweep().unwrap(), 1);
    assert!(kl.is_empty());
    // Evicted keys come back as fresh buckets: indistinguishable (initial == burst).
    assert_eq!(kl.try_acquire(&1, 2).unwrap().remaining(), 0);
}

#[test]
fn eviction_with_initial_below_burst_is_conservative() {
    let clock = ManualClock::new(0);
    let kl = keyed::<u64>("1/s; burst=4; initial=1", &clock);
    kl.try_acquire(&1, 1).unwrap();
    clock.set(10 * S);
    assert_eq!(kl.peek(&1).unwrap().remaining(), 4);
    assert_eq!(kl.sweep().unwrap(), 1);
    // Re-created with `initial` tokens: fewer than the evicted bucket had, never more.
    assert_eq!(kl.try_acquire(&1, 1).unwrap().remaining(), 0);
}

#[test]
fn remove_clear_len_and_snapshot() {
    let clock = ManualClock::new(0);
    let kl = keyed::<u64>("1/s; burst=5", &clock);
    for k in 0..100 {
        kl.try_acquire(&k, 1 + k % 3).unwrap();
    }
    assert_eq!(kl.len(), 100);
    assert!(kl.remove(&42).unwrap());
    assert!(!kl.remove(&42).unwrap());
    assert_eq!(kl.len(), 99);
    assert_eq!(kl.peek(&42).unwrap().remaining(), 5);
    let mut snap = kl.snapshot().unwrap();
    snap.sort_by_key(|e| e.0);
    assert_eq!(snap.len(), 99);
    for (k, d) in &snap {
        assert_eq!(d.remaining(), 5 - (1 + k % 3), "key {k}");
    }
    kl.clear().unwrap();
    assert!(kl.is_empty());
    assert!(kl.snapshot().unwrap().is_empty());
    assert_eq!(kl.try_acquire(&1, 5).unwrap().remaining(), 0);
}

#[test]
fn many_distinct_keys_never_share_a_bucket() {
    let clock = ManualClock::new(0);
    let kl = keyed::<u64>("1/h; burst=3", &clock);
    for k in 0..50_000u64 {
        assert!(kl.try_acquire(&k, 3).unwrap().allowed(), "key {k}");
    }
    for k in 0..50_000u64 {
        assert!(!kl.try_acquire(&k, 1).unwrap().allowed(), "key {k}");
    }
    assert_eq!(kl.len(), 50_000);
}

#[test]
fn reject_new_keys_at_the_bound_unless_a_bucket_is_full() {
    let clock = ManualClock::new(0);
    // One shard, so that which keys one eviction takes does not depend on the random hash
    // seed: a new key evicts every full bucket of one shard (its own, or the first other
    // one that has any), and with 64 shards keys 1 and 2 shared one in about one run in 64.
    let kl = KeyedLimiter::<u64, _>::builder("1/s; burst=2".parse().unwrap())
        .max_keys(2)
        .shards(1)
        .on_full(OnFull::RejectNewKeys)
        .clock(clock.clone())
        .build()
        .unwrap();
    kl.try_acquire(&1, 1).unwrap();
    kl.try_acquire(&2, 2).unwrap();
    assert_eq!(
        kl.try_acquire(&3, 1),
        Err(Error::KeyStoreFull { max_keys: 2 })
    );
    assert_eq!(kl.try_acquire(&3, 1).unwrap_err().code(), "key_store_full");
    // Existing keys still work at the bound.
    assert!(kl.try_acquire(&1, 1).unwrap().allowed());
    // At 2 s key 1 is full again, and key 2 too: both are evicted to make room.
    clock.set(2 * S);
    assert!(kl.try_acquire(&3, 1).unwrap().allowed());
    assert_eq!(kl.len(), 1);
    clock.set(2 * S + 1);
    kl.try_acquire(&4, 1).unwrap();
    assert_eq!(kl.len(), 2);
    // A refund that fills a bucket makes it evictable at once.
    assert!(kl.try_acquire(&5, 1).is_err());
    kl.refund(&4, 1).unwrap();
    assert!(kl.try_acquire(&5, 1).unwrap().allowed());
}

/// Regression (found by `keyed_log`'s property test in CI): a scan at the bound records when
/// a bucket can first become full; new buckets lower that hint. A bucket full from instant 0
/// on lowered it to 1 (0 meaning "no hint"), so a new key at instant 0 was refused without the
/// scan that would have evicted it.
#[test]
fn a_bucket_full_from_instant_zero_is_evicted_at_instant_zero() {
    use sluicegate::Algorithm;
    for algorithm in [
        Algorithm::TokenBucket,
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
        Algorithm::SlidingLog,
    ] {
        for on_full in [OnFull::RejectNewKeys, OnFull::EvictFullest] {
            let clock = ManualClock::new(0);
            let quota = "4/s".parse::<Quota>().unwrap().with_algorithm(algorithm);
            let kl = KeyedLimiter::<u64, _>::builder(quota)
                .max_keys(2)
                .on_full(on_full)
                .clock(clock.clone())
                .build()
                .unwrap();
            kl.try_acquire(&1, 1).unwrap();
            kl.try_acquire(&2, 1).unwrap();
            // Nothing is full before 0.25 s: the scan records that.
            if on_full == OnFull::RejectNewKeys {
                assert_eq!(
                    kl.try_acquire(&3, 0),
                    Err(Error::KeyStoreFull { max_keys: 2 }),
                    "{algorithm:?}"
                );
            }
            kl.clear().unwrap();
            // Cost 0: full from instant 0 on.
            kl.try_acquire(&4, 0).unwrap();
            kl.try_acquire(&5, 0).unwrap();
            let d = kl.try_acquire(&6, 1).unwrap();
            assert!(d.allowed(), "{algorithm:?} {on_full:?}");
            assert_eq!(d.remaining(), 3, "{algorithm:?} {on_full:?}");
            assert!(kl.len() <= 2);
        }
    }
}

#[test]
fn evict_fullest_makes_room_for_new_keys() {
    let clock = ManualClock::new(0);
    let kl = KeyedLimiter::<u64, _>::builder("1/s; burst=10".parse().unwrap())
        .max_keys(3)
        .on_full(OnFull::EvictFullest)
        .shards(1)
        .clock(clock.clone())
        .build()
        .unwrap();
    kl.try_acquire(&1, 9).unwrap();
    kl.try_acquire(&2, 1).unwrap(); // the fullest
    kl.try_acquire(&3, 5).unwrap();
    assert!(kl.try_acquire(&4, 1).unwrap().allowed());
    assert_eq!(kl.len(), 3);
    let mut keys: Vec<u64> = kl.snapshot().unwrap().into_iter().map(|e| e.0).collect();
    keys.sort_unstable();
    assert_eq!(keys, [1, 3, 4]);
}

/// `EvictFullest` evicts a bucket that is not full only when no bucket is full: a full bucket
/// of a long key (held by its digest, in a store of its own) goes before the fullest short
/// key's, and the other way round. Before, a new key evicted its own store's fullest bucket
/// (lossy: the key came back with a fresh bucket) while the other store held a full one.
#[test]
fn evict_fullest_takes_a_full_bucket_of_either_key_length_first() {
    let long = |c: char| c.to_string().repeat(100);
    // (quota, the reading at which the first key's bucket is full and the second's not yet)
    for (quota, at) in [
        ("1/s; burst=10", 1_000_000_000),
        ("1/s; burst=10; algorithm=gcra", 1_000_000_000),
        ("10/10s; algorithm=sliding_log", 10_500_000_000),
    ] {
        for long_first in [true, false] {
            let clock = ManualClock::new(0);
            let kl = KeyedLimiter::<String, _>::builder(quota.parse().unwrap())
                .max_keys(2)
                .shards(1)
                .on_full(OnFull::EvictFullest)
                .metrics(true)
                .clock(clock.clone())
                .build()
                .unwrap();
            // `full` will be full at `at`; `used` keeps 9 units taken half-way there.
            let (full, used, new) = if long_first {
                (long('f'), "used".to_string(), "new".to_string())
            } else {
                ("full".to_string(), long('u'), long('n'))
            };
            assert!(kl.try_acquire(full.as_str(), 1).unwrap().allowed());
            clock.set(at / 2);
            assert!(kl.try_acquire(used.as_str(), 9).unwrap().allowed());
            clock.set(at);
            let before = kl.peek(used.as_str()).unwrap().remaining();
            assert!(before < 10, "{quota}: {before}");
            assert!(kl.try_acquire(new.as_str(), 1).unwrap().allowed());
            assert_eq!(
                kl.peek(used.as_str()).unwrap().remaining(),
                before,
                "{quota}, long key full: {long_first}: the bucket in use was evicted"
            );
            assert_eq!(kl.len(), 2);
            assert_eq!(kl.metrics().unwrap().keys_evicted, 1);
        }
    }
}

#[test]
fn builder_validates() {
    let q: Quota = "1/s".parse().unwrap();
    assert!(matches!(
        KeyedLimiter::<u64>::builder(q).max_keys(0).build(),
        Err(Error::InvalidOption {
            option: "max_keys",
            ..
        })
    ));
    let kl = KeyedLimiter::<u64>::new(q);
    assert_eq!(kl.max_keys(), sluicegate::DEFAULT_MAX_KEYS);
    assert!(kl.try_acquire(&1, 1).unwrap().allowed());
}

#[test]
fn growth_and_shrink_keep_every_bucket() {
    let clock = ManualClock::new(0);
    let kl = KeyedLimiter::<u64, _>::builder("1/h; burst=2".parse().unwrap())
        .shards(2)
        .clock(clock.clone())
        .build()
        .unwrap();
    for k in 0..10_000u64 {
        kl.try_acquire(&k, 1 + (k & 1)).unwrap();
    }
    for k in (0..10_000u64).step_by(3) {
        assert!(kl.remove(&k).unwrap());
    }
    // Tombstones are compacted by a sweep (nothing is full after 0 s).
    let cap_before = kl.capacity();
    assert_eq!(kl.sweep().unwrap(), 0);
    assert!(kl.capacity() <= cap_before);
    for k in 0..10_000u64 {
        let d = kl.peek(&k).unwrap();
        let want = if k % 3 == 0 { 2 } else { 1 - (k & 1) };
        assert_eq!(d.remaining(), want, "key {k}");
    }
}

/// `sweep_on_grow(false)`: tables grow with every key instead of dropping the full buckets
/// first; `sweep` and the key bound still evict them, and no decision differs from a limiter
/// that drops them (the eviction is lossless).
#[test]
fn sweep_on_grow_off_keeps_full_buckets_until_asked() {
    let clock = ManualClock::new(0);
    let build = |sweep: bool, max_keys: usize| {
        KeyedLimiter::<u64, _>::builder("10/s; burst=5".parse().unwrap())
            .shards(2)
            .max_keys(max_keys)
            .sweep_on_grow(sweep)
            .clock(clock.clone())
            .build()
            .unwrap()
    };
    let (kept, dropped) = (build(false, 1 << 20), build(true, 1 << 20));
    // Both limiters decide alike.
    let same = |k: u64, cost: u64| {
        let (a, b) = (
            kept.try_acquire(&k, cost).unwrap(),
            dropped.try_acquire(&k, cost).unwrap(),
        );
        assert_eq!(
            (a.allowed(), a.remaining()),
            (b.allowed(), b.remaining()),
            "key {k}"
        );
    };
    // Every key's bucket is full again 100 ms after its one token, before the next key comes.
    for k in 0..5_000u64 {
        clock.set(k * S / 5);
        same(k, 1);
    }
    assert_eq!(kept.len(), 5_000, "growth evicted nothing");
    assert!(dropped.len() < 100, "growth evicted the full buckets");
    // The same keys again, then a burst on one: the same decisions.
    for k in 0..5_000u64 {
        clock.set((5_000 + k) * S / 5);
        same(k, 2);
    }
    for _ in 0..6 {
        same(7, 1);
    }
    assert_eq!(kept.len(), 5_000);
    // A sweep still evicts every full bucket.
    clock.set(10_000 * S);
    assert_eq!(kept.sweep().unwrap(), 5_000);
    assert!(kept.is_empty());
    // A reconfigured limiter keeps the setting: its new tables grow without evicting either.
    kept.set_quota("20/s; burst=5".parse().unwrap()).unwrap();
    for k in 0..5_000u64 {
        clock.set(10_001 * S + k * S / 5);
        assert!(kept.try_acquire(&k, 1).unwrap().allowed(), "key {k}");
    }
    assert_eq!(kept.len(), 5_000, "growth after set_quota evicted nothing");
    // At the bound, full buckets still make room for new keys.
    let bounded = build(false, 100);
    clock.set(20_000 * S);
    for k in 0..100u64 {
        bounded.try_acquire(&k, 1).unwrap();
    }
    assert_eq!(
        bounded.try_acquire(&100, 1),
        Err(Error::KeyStoreFull { max_keys: 100 })
    );
    clock.set(20_001 * S);
    assert!(bounded.try_acquire(&100, 1).unwrap().allowed());
}

/// `prefetch` is a hint: it creates nothing and changes no bucket, for every store kind
/// (narrow and wide words, sliding logs), present and absent keys alike.
#[test]
fn prefetch_changes_nothing() {
    for rate in ["10/s; burst=50", "999/s", "3/s; algorithm=sliding_log"] {
        let clock = ManualClock::new(0);
        let kl = keyed::<String>(rate, &clock);
        kl.prefetch("absent");
        assert!(kl.is_empty(), "{rate}");
        for i in 0..1_000u64 {
            kl.try_acquire(format!("k{i}").as_str(), 1).unwrap();
        }
        let before = kl.peek("k7").unwrap();
        for i in 0..2_000u64 {
            kl.prefetch(format!("k{i}").as_str());
        }
        assert_eq!(kl.len(), 1_000, "{rate}");
        assert_eq!(kl.peek("k7").unwrap(), before, "{rate}");
        // A prefetched absent key is still absent: as fresh as a key never named.
        assert_eq!(
            kl.peek("k1999").unwrap(),
            kl.peek("never").unwrap(),
            "{rate}"
        );
    }
}

/// `algorithm=sliding_log` is kept per key (in the keyed store of logs): each key decides
/// exactly as its own single-bucket sliding log, and the store's whole API works on it.
#[test]
fn sliding_log_is_kept_per_key() {
    let rate = "3/s; algorithm=sliding_log";
    let clock = ManualClock::new(5 * S);
    let kl = keyed::<String>(rate, &clock);
    let single = Limiter::with_clock(rate.parse().unwrap(), clock.clone()).unwrap();
    for (dt, cost) in [
        (0, 1),
        (0, 2),
        (0, 1),
        (S / 2, 1),
        (S / 2, 1),
        (1, 2),
        (S, 3),
    ] {
        clock.advance_nanos(dt);
        assert_eq!(
            kl.try_acquire("alice", cost).unwrap(),
            single.try_acquire(cost).unwrap()
        );
    }
    // Keys are independent; cost above the limit is an error and creates nothing.
    assert_eq!(kl.try_acquire("bob", 3).unwrap().remaining(), 0);
    assert!(matches!(
        kl.try_acquire("carol", 4),
        Err(Error::InsufficientCapacity {
            cost: 4,
            capacity: 3
        })
    ));
    assert_eq!(kl.len(), 2);
    // Peek creates nothing; refund of an absent key does nothing.
    assert_eq!(kl.peek("dave").unwrap().remaining(), 3);
    kl.refund("dave", 1).unwrap();
    assert_eq!(kl.len(), 2);
    // A refund gives back the newest units.
    kl.refund("bob", 2).unwrap();
    assert_eq!(kl.peek("bob").unwrap().remaining(), 2);
    // Sweep evicts only logs whose window is empty.
    assert_eq!(kl.sweep().unwrap(), 0);
    clock.advance_nanos(S);
    assert_eq!(kl.sweep().unwrap(), 2);
    assert!(kl.is_empty());
    // Remove and clear.
    kl.try_acquire("erin", 1).unwrap();
    assert!(kl.remove("erin").unwrap());
    assert!(!kl.remove("erin").unwrap());
    kl.try_acquire("frank", 1).unwrap();
    let snap = kl.snapshot().unwrap();
    assert_eq!(snap.len(), 1);
    assert_eq!((snap[0].0.as_str(), snap[0].1.remaining()), ("frank", 2));
    kl.clear().unwrap();
    assert_eq!(kl.len(), 0);
    assert_eq!(kl.try_acquire("frank", 3).unwrap().remaining(), 0);
}

/// The key bound with sliding logs: new keys are refused exactly while no log is full, and
/// `EvictFullest` evicts the log whose window empties first.
#[test]
fn sliding_log_key_bound() {
    let clock = ManualClock::new(0);
    let strict = KeyedLimiter::<u64, _>::builder("2/s; algorithm=sliding_log".parse().unwrap())
        .max_keys(2)
        .clock(clock.clone())
        .build()
        .unwrap();
    strict.try_acquire(&1, 1).unwrap();
    clock.set(S / 2);
    strict.try_acquire(&2, 1).unwrap();
    assert_eq!(
        strict.try_acquire(&3, 1),
        Err(Error::KeyStoreFull { max_keys: 2 })
    );
    // At 1 s key 1's window is empty: evicted for key 3.
    clock.set(S);
    assert!(strict.try_acquire(&3, 1).unwrap().allowed());
    assert_eq!(strict.len(), 2);
    assert_eq!(
        strict.try_acquire(&4, 1).unwrap_err().code(),
        "key_store_full"
    );
    // A refund that empties a window makes its log evictable at once.
    strict.refund(&3, 1).unwrap();
    assert!(strict.try_acquire(&4, 1).unwrap().allowed());
    let mut keys: Vec<u64> = strict
        .snapshot()
        .unwrap()
        .into_iter()
        .map(|e| e.0)
        .collect();
    keys.sort_unstable();
    assert_eq!(keys, [2, 4]);

    let clock = ManualClock::new(0);
    let lossy = KeyedLimiter::<u64, _>::builder("5/s; algorithm=sliding_log".parse().unwrap())
        .max_keys(3)
        .shards(1)
        .on_full(OnFull::EvictFullest)
        .clock(clock.clone())
        .build()
        .unwrap();
    lossy.try_acquire(&1, 1).unwrap(); // its window empties first
    clock.set(S / 4);
    lossy.try_acquire(&2, 1).unwrap();
    lossy.try_acquire(&3, 1).unwrap();
    assert!(lossy.try_acquire(&4, 1).unwrap().allowed());
    assert_eq!(lossy.len(), 3);
    let mut keys: Vec<u64> = lossy.snapshot().unwrap().into_iter().map(|e| e.0).collect();
    keys.sort_unstable();
    assert_eq!(keys, [2, 3, 4]);
}

/// A key whose conversion from its borrowed form panics for "boom": user code that runs after
/// the new key's place under the bound was reserved, and before the key is linked.
#[derive(Hash, PartialEq, Eq, Debug)]
struct Fussy(String);

impl std::borrow::Borrow<str> for Fussy {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<String> for Fussy {
    fn from(s: String) -> Self {
        assert_ne!(s, "boom", "this key cannot be converted");
        Fussy(s)
    }
}

/// A key conversion that unwinds gives its reserved place back: the bound still admits
/// `max_keys` keys afterwards, in the word store and in the sliding-log store.
#[test]
fn a_key_conversion_that_panics_gives_its_place_back() {
    for quota in ["2/s", "2/s; algorithm=sliding_log"] {
        let l = KeyedLimiter::<Fussy, _>::builder(quota.parse().unwrap())
            .max_keys(2)
            .clock(ManualClock::new(0))
            .build()
            .unwrap();
        assert!(l.try_acquire("a", 1).unwrap().allowed());
        let boom =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l.try_acquire("boom", 1)));
        assert!(boom.is_err(), "{quota}: the conversion panics");
        assert_eq!(l.len(), 1, "{quota}");
        assert!(l.try_acquire("b", 1).unwrap().allowed(), "{quota}");
        assert!(
            matches!(
                l.try_acquire("c", 1),
                Err(Error::KeyStoreFull { max_keys: 2 })
            ),
            "{quota}"
        );
        assert_eq!(l.len(), 2, "{quota}");
    }
}

static HASH_PANICS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A key whose `Hash` panics for "victim" while `HASH_PANICS` is set: user code that a table
/// rebuild runs, under the shard's lock, for every live key.
#[derive(Clone, PartialEq, Eq, Debug)]
struct Flaky(String);

impl std::hash::Hash for Flaky {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        if self.0 == "victim" && HASH_PANICS.load(std::sync::atomic::Ordering::Relaxed) {
            panic!("this key cannot be hashed now");
        }
        self.0.hash(h);
    }
}

/// A `Hash` that unwinds during a table rebuild leaves the store as it was: every key keeps
/// its bucket (no state lost, no key dropped twice), the bound counts what is linked, and the
/// next insert rebuilds normally.
#[test]
fn a_hash_that_panics_during_a_rebuild_changes_nothing() {
    let l = KeyedLimiter::<Flaky, _>::builder("5/s".parse().unwrap())
        .shards(1)
        .clock(ManualClock::new(0))
        .build()
        .unwrap();
    let key = |s: &str| Flaky(s.to_string());
    let mut linked = vec![key("victim")];
    linked.extend((0..5).map(|i| key(&format!("k{i}"))));
    for k in &linked {
        assert_eq!(l.try_acquire(k, 1).unwrap().remaining(), 4);
    }
    HASH_PANICS.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut failed = None;
    for i in 0..1000 {
        let k = key(&format!("n{i}"));
        let cap = l.capacity();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l.try_acquire(&k, 1)));
        match r {
            Ok(d) => {
                assert_eq!(d.unwrap().remaining(), 4);
                linked.push(k);
            }
            Err(_) => {
                assert_eq!(l.capacity(), cap, "the rebuild was not published");
                failed = Some(k);
                break;
            }
        }
    }
    HASH_PANICS.store(false, std::sync::atomic::Ordering::Relaxed);
    let failed = failed.expect("some insert rebuilt the table");
    assert_eq!(l.len(), linked.len());
    for k in &linked {
        assert_eq!(l.peek(k).unwrap().remaining(), 4, "{k:?} kept its bucket");
    }
    assert!(!l.snapshot().unwrap().iter().any(|(k, _)| *k == failed));
    assert_eq!(l.try_acquire(&failed, 1).unwrap().remaining(), 4);
    assert_eq!(l.len(), linked.len() + 1);
    for k in &linked {
        assert_eq!(l.peek(k).unwrap().remaining(), 4, "{k:?} after the rebuild");
    }
}

/// The limiter a `Reentrant` key calls back into when it is dropped.
type Echo = KeyedLimiter<Reentrant, ManualClock>;
static ECHO: std::sync::Mutex<Option<std::sync::Arc<Echo>>> = std::sync::Mutex::new(None);
/// How many tripwire keys called back, and how many of those calls returned.
static ECHOES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A key whose `Drop` (user code), for the tripwire key 0, asks the same limiter for a new
/// key: it takes the lock of the shard the key lived in. Run under that lock, it deadlocks.
/// Only the store's own copies (made by `Clone`) call back, not the caller's borrowed ones.
#[derive(Debug)]
struct Reentrant {
    id: u64,
    stored: bool,
}

fn reentrant(id: u64) -> Reentrant {
    Reentrant { id, stored: false }
}

impl Clone for Reentrant {
    fn clone(&self) -> Self {
        Reentrant {
            id: self.id,
            stored: true,
        }
    }
}

impl PartialEq for Reentrant {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for Reentrant {}

impl std::hash::Hash for Reentrant {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.id.hash(h);
    }
}

impl Drop for Reentrant {
    fn drop(&mut self) {
        if self.id != 0 || !self.stored {
            return;
        }
        let l = ECHO.lock().unwrap().clone();
        if let Some(l) = l {
            let _ = l.try_acquire(&reentrant(1_000_000), 1);
            ECHOES.fetch_add(1, SeqCst);
        }
    }
}

use std::sync::atomic::Ordering::SeqCst;

/// Keys are dropped only after the store's locks are released: a key whose destructor calls
/// back into the same limiter completes (word store: unlinked keys freed with their table,
/// after a rebuild; sliding-log store: a full log evicted at the bound). On a store that
/// drops keys under a shard's lock this deadlocks, which the test reports after a minute
/// rather than hanging.
#[test]
fn a_key_dropped_by_the_store_may_call_back_into_it() {
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Word store: remove the tripwire (its key stays in the table, unlinked), then grow
        // the table until the old one is retired, and free what the rebuilds retired.
        let clock = ManualClock::new(0);
        let l = std::sync::Arc::new(
            KeyedLimiter::<Reentrant>::builder("5/s".parse().unwrap())
                .shards(1)
                .clock(clock.clone())
                .build()
                .unwrap(),
        );
        *ECHO.lock().unwrap() = Some(l.clone());
        assert!(l.try_acquire(&reentrant(0), 1).unwrap().allowed());
        assert!(l.remove(&reentrant(0)).unwrap());
        for k in 1..200 {
            assert!(l.try_acquire(&reentrant(k), 1).unwrap().allowed());
        }
        l.sweep().unwrap();
        // A retired table is freed once every read section open when it was retired has
        // closed. Tests on other threads of this process read too: a section of theirs may
        // still have been open at the sweep's collect, so sweep again until it is freed.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while ECHOES.load(SeqCst) == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
            l.sweep().unwrap();
        }
        let word = ECHOES.load(SeqCst);

        // Sliding-log store: the tripwire's window is empty after a second, so the next new
        // key at the bound evicts it.
        let l = std::sync::Arc::new(
            KeyedLimiter::<Reentrant>::builder("5/s; algorithm=sliding_log".parse().unwrap())
                .shards(1)
                .max_keys(2)
                .clock(clock.clone())
                .build()
                .unwrap(),
        );
        *ECHO.lock().unwrap() = Some(l.clone());
        assert!(l.try_acquire(&reentrant(0), 1).unwrap().allowed());
        clock.advance(std::time::Duration::from_secs(2));
        assert!(l.try_acquire(&reentrant(1), 1).unwrap().allowed());
        assert!(l.try_acquire(&reentrant(2), 1).unwrap().allowed());
        let log = ECHOES.load(SeqCst) - word;
        *ECHO.lock().unwrap() = None;
        done.send((word, log)).unwrap();
    });
    let (word, log) = wait
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a key's Drop ran under a lock of the store it calls back into: deadlock");
    assert_eq!(word, 1, "the word store freed the unlinked tripwire once");
    assert_eq!(log, 1, "the log store evicted the tripwire once");
}

/// A keyed limiter works from a thread-local destructor that runs after the thread's other
/// thread-locals were destroyed (the keyed store's read sections register per-thread state
/// lazily; a section opened that late must still open and close). `seize`, evaluated as an
/// alternative to the RCU (docs/ARCHITECTURE.md), aborted the process here.
#[test]
fn a_keyed_limiter_works_in_a_late_thread_local_destructor() {
    use std::sync::{Arc, OnceLock};
    static L: OnceLock<Arc<KeyedLimiter<u64, ManualClock>>> = OnceLock::new();
    struct Late;
    impl Drop for Late {
        fn drop(&mut self) {
            let l = L.get().unwrap();
            // An existing key (the lock-free path) and a new one (the locked path).
            assert!(l.try_acquire(&1, 1).unwrap().allowed());
            assert!(l.try_acquire(&2, 1).unwrap().allowed());
        }
    }
    thread_local! { static LATE: Late = const { Late }; }
    let clock = ManualClock::new(0);
    L.get_or_init(|| Arc::new(keyed::<u64>("5/s", &clock)));
    let status = std::thread::spawn(|| {
        // Registered first, so destroyed after what the limiter registers below.
        LATE.with(|_| ());
        assert!(L.get().unwrap().try_acquire(&1, 1).unwrap().allowed());
    })
    .join();
    assert!(status.is_ok());
    assert_eq!(
        L.get().unwrap().len(),
        2,
        "the destructor ran and made its decisions"
    );
}
