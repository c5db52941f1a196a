//! loom models of the keyed store of sliding logs (core/src/keyed_log.rs): the shared key
//! bound across shards, the try-lock scan of other shards, and the hint protocol (a refund
//! racing a scan at the bound). Each shard's lock is loom's mutex, so every interleaving of the
//! critical sections (up to the preemption bound) is explored.
//!
//! `RUSTFLAGS="--cfg sluicegate_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test -p sluicegate --release --test loom_keyed_log`
#![cfg(sluicegate_loom)]

use loom::sync::Arc;
use loom::thread;
use sluicegate::{KeyedLimiter, ManualClock};
use support::{admitted, keys_of};

use super::bound as support;

const S: u64 = 1_000_000_000;

/// 2 per second, sliding log; two shards.
fn limiter(max_keys: usize) -> Arc<KeyedLimiter<u64, ManualClock>> {
    support::two_shards("2/s; algorithm=sliding_log", max_keys)
}

/// Two new keys of different shards at the bound: the shared counter admits exactly one.
#[test]
fn two_new_keys_on_two_shards_at_the_bound() {
    let x = keys_of(0).next().unwrap();
    let y = keys_of(1).next().unwrap();
    loom::model(move || {
        let kl = limiter(1);
        let a = {
            let kl = kl.clone();
            thread::spawn(move || kl.try_acquire_at(&x, 0, 1))
        };
        let b = kl.try_acquire_at(&y, 0, 1);
        let a = a.join().unwrap();
        assert_eq!(kl.len(), 1);
        assert!(admitted(&a) != admitted(&b), "{a:?} {b:?}");
    });
}

/// Two new keys of different shards at the bound, with one full log (evictable) in a third
/// place: exactly one of them gets its place.
#[test]
fn two_new_keys_race_for_one_evictable_log() {
    let mut zero = keys_of(0);
    let (old, x) = (zero.next().unwrap(), zero.next().unwrap());
    let y = keys_of(1).next().unwrap();
    loom::model(move || {
        let kl = limiter(1);
        kl.try_acquire_at(&old, 0, 1).unwrap();
        let a = {
            let kl = kl.clone();
            thread::spawn(move || kl.try_acquire_at(&x, S, 1))
        };
        let b = kl.try_acquire_at(&y, S, 1);
        let a = a.join().unwrap();
        assert_eq!(kl.len(), 1);
        assert!(admitted(&a) != admitted(&b), "{a:?} {b:?}");
        assert!(!kl.snapshot_at(S).unwrap().iter().any(|e| e.0 == old));
    });
}

/// A new key at the bound scans the other shard only if it is free. If it was busy (another
/// new key being linked there), the new key records no hint, lets go of its shard's lock,
/// waits for each shard in turn, and looks again; the full log it could not see makes room
/// for one new key, whichever. (A consume would not do as the busy
/// thread: its critical section has no atomic operation, so loom never preempts inside it.)
#[test]
fn a_busy_shard_is_skipped_without_a_hint() {
    let mut zero = keys_of(0);
    let (full, kept, e) = (
        zero.next().unwrap(),
        zero.next().unwrap(),
        zero.next().unwrap(),
    );
    let mut one = keys_of(1);
    let (c, d) = (one.next().unwrap(), one.next().unwrap());
    loom::model(move || {
        let kl = limiter(3);
        kl.try_acquire_at(&full, 0, 1).unwrap(); // full from 1 s
        kl.try_acquire_at(&kept, S / 2, 1).unwrap(); // full from 1.5 s
        let a = {
            let kl = kl.clone();
            thread::spawn(move || kl.try_acquire_at(&e, S, 1))
        };
        let b = kl.try_acquire_at(&c, S, 1);
        let a = a.join().unwrap();
        let later = kl.try_acquire_at(&d, S, 1);
        // One free place and the one `full` frees: two of the three new keys get in.
        let n = [&a, &b, &later].iter().filter(|r| admitted(r)).count();
        assert_eq!(n, 2, "{a:?} {b:?} {later:?}");
        assert_eq!(kl.len(), 3);
        assert!(!kl.snapshot_at(S).unwrap().iter().any(|e| e.0 == full));
    });
}

/// The hint protocol at the bound (crate::bound), on logs: a refund empties the refunded
/// log's window. See tests/support/loom_bound.rs.
#[test]
fn refund_racing_a_scan_at_the_bound() {
    support::refund_racing_a_scan_at_the_bound("2/s; algorithm=sliding_log");
}

/// A consume racing the sweep that would evict its (full) log is never lost: it lands on the
/// log before the sweep (which then keeps it) or on the log created after.
#[test]
fn consume_vs_sweep() {
    let k = keys_of(0).next().unwrap();
    loom::model(move || {
        let kl = limiter(4);
        kl.try_acquire_at(&k, 0, 1).unwrap();
        let a = {
            let kl = kl.clone();
            thread::spawn(move || kl.try_acquire_at(&k, S, 2).unwrap())
        };
        let evicted = kl.sweep_at(S).unwrap();
        let d = a.join().unwrap();
        assert!(d.allowed());
        assert_eq!(d.remaining(), 0);
        assert!(evicted <= 1);
        assert_eq!(kl.len(), 1);
        assert_eq!(kl.peek_at(&k, S).unwrap().remaining(), 0);
    });
}

/// A sweep making room at the bound of one key races a new key of another shard: see
/// tests/loom/bound.rs.
#[test]
fn a_new_key_at_the_bound_races_a_sweep_that_makes_room() {
    support::a_new_key_at_the_bound_races_a_sweep_that_makes_room("1/s; algorithm=sliding_log");
}

/// The same across the store of long keys' digests and the main store: see
/// tests/loom/bound.rs.
#[test]
fn a_key_of_the_other_store_races_a_sweep_that_makes_room() {
    support::a_key_of_the_other_store_races_a_sweep_that_makes_room("1/s; algorithm=sliding_log");
}
