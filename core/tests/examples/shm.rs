//! The shared-memory store, by example: regions made and opened by several limiters (the
//! multi-process checks are in the stress layer), what a region refuses, and the errors.
#![cfg(unix)]

use sluicegate::{
    Error, KeyedLimiter, Limiter, ManualClock, OnFull, Quota, StdClock, StoreErrorKind, StoreSpec,
};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// A region file in the temporary directory, removed when dropped.
pub struct Region(pub PathBuf);

impl Region {
    pub fn new(what: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        Self(
            std::env::temp_dir().join(format!("sluicegate-test-{what}-{}-{n}", std::process::id())),
        )
    }

    pub fn spec(&self) -> StoreSpec {
        StoreSpec::shm(self.0.to_str().unwrap())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn quota(s: &str) -> Quota {
    s.parse().unwrap()
}

fn keyed(q: &str, r: &Region) -> KeyedLimiter<Box<[u8]>> {
    KeyedLimiter::builder(quota(q))
        .store(r.spec())
        .max_keys(1000)
        .build()
        .unwrap()
}

fn store_kind(e: &Error) -> Option<StoreErrorKind> {
    match e {
        Error::Store { kind, .. } => Some(*kind),
        _ => None,
    }
}

#[test]
fn two_limiters_on_one_region_share_its_buckets() {
    let r = Region::new("share");
    let (a, b) = (keyed("10/minute", &r), keyed("10/minute", &r));
    let admitted = (0..30)
        .filter(|i| {
            let l = if i % 2 == 0 { &a } else { &b };
            l.try_acquire(b"alice".as_slice(), 1).unwrap().allowed()
        })
        .count();
    assert_eq!(admitted, 10);
    assert_eq!((a.len(), b.len()), (1, 1));
    assert!(b.try_acquire(b"bob".as_slice(), 1).unwrap().allowed());
    assert_eq!(a.peek(b"bob".as_slice()).unwrap().remaining(), 9);
    assert!(a.remove(b"bob".as_slice()).unwrap());
    assert_eq!(b.peek(b"bob".as_slice()).unwrap().remaining(), 10);
}

/// A Rust `str` key and the byte key of its UTF-8 (every binding's key: Python's `"alice"`,
/// C's `"alice"`) are one bucket in a region; an integer is its decimal digits there only
/// when written so (`IntKey`), as the bindings write theirs.
#[test]
fn text_keys_share_buckets_with_the_bindings_byte_keys() {
    let r = Region::new("text");
    let bytes = keyed("5/hour", &r);
    let text: KeyedLimiter<String> = KeyedLimiter::builder(quota("5/hour"))
        .store(r.spec())
        .max_keys(1000)
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(text.try_acquire("alice", 1).unwrap().allowed());
    }
    assert_eq!(bytes.peek(b"alice".as_slice()).unwrap().remaining(), 2);
    assert!(bytes.try_acquire(b"alice".as_slice(), 2).unwrap().allowed());
    assert!(!text.try_acquire("alice", 1).unwrap().allowed());
    assert_eq!(text.peek("alice").unwrap().remaining(), 0);
    // Longer than the region compares in full (hashed): one key still.
    let long = "a key longer than any the region holds as it is: ".repeat(3);
    assert!(text.try_acquire(long.as_str(), 5).unwrap().allowed());
    assert_eq!(bytes.peek(long.as_bytes()).unwrap().remaining(), 0);
    assert!(text.remove("alice").unwrap());
    assert_eq!(bytes.peek(b"alice".as_slice()).unwrap().remaining(), 5);
    assert_eq!(bytes.len(), 1, "alice's and the long key's bucket");
    // 42 as a binding writes it: its digits.
    let ints: KeyedLimiter<u64> = KeyedLimiter::builder(quota("5/hour"))
        .store(r.spec())
        .max_keys(1000)
        .build()
        .unwrap();
    assert!(bytes
        .try_acquire(sluicegate::IntKey::new(42).as_bytes(), 5)
        .unwrap()
        .allowed());
    assert_eq!(text.peek("42").unwrap().remaining(), 0);
    assert_eq!(
        ints.peek(&42).unwrap().remaining(),
        5,
        "a u64 key is its 8 bytes"
    );
}

#[test]
fn a_region_is_a_private_regular_file_sized_for_its_capacity() {
    let r = Region::new("file");
    let _l = keyed("5/s", &r);
    let m = std::fs::symlink_metadata(&r.0).unwrap();
    assert!(m.file_type().is_file());
    assert_eq!(m.mode() & 0o777, 0o600);
    // SAFETY: geteuid has no preconditions.
    assert_eq!(m.uid(), unsafe { libc_geteuid() });
    // 4 KiB header, 32 KiB of locks, 32 bytes a slot for 1000 keys at a load of 7/8.
    assert_eq!(m.len(), 4096 + 32768 + 32 * 1143);
}

extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

#[test]
fn a_second_opener_with_another_quota_or_capacity_is_refused_naming_both() {
    let r = Region::new("mismatch");
    let _l = keyed("10/minute", &r);
    let e = KeyedLimiter::<Box<[u8]>>::builder(quota("20/minute"))
        .store(r.spec())
        .build()
        .unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Mismatch), "{e}");
    let text = e.to_string();
    assert!(text.contains("10/m") && text.contains("20/m"), "{text}");
    let e = KeyedLimiter::<Box<[u8]>>::builder(quota("10/minute"))
        .store(r.spec())
        .max_keys(7)
        .build()
        .unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Mismatch), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("asked for 7: a region keeps the capacity it was made with (give this one"),
        "{text}"
    );
    // A single limiter on a keyed limiter's region: why, in one sentence (there were two
    // parenthesised remarks back to back).
    let e = Limiter::builder(quota("10/minute"))
        .store(r.spec())
        .build()
        .unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Mismatch), "{e}");
    let text = e.to_string();
    assert!(
        text.contains(
            "asked for 1, what a single-bucket limiter asks for: a keyed limiter's region is \
             opened by keyed limiters, and a region keeps the capacity it was made with (give"
        ),
        "{text}"
    );
    assert!(!text.contains(") ("), "{text}");
    // The other way round: a keyed limiter asking no size would open a single limiter's
    // region at its one key; refused, unless one key is asked for.
    let one = Region::new("mismatch-single");
    let _single = Limiter::builder(quota("10/minute"))
        .store(one.spec())
        .build()
        .unwrap();
    let e = KeyedLimiter::<Box<[u8]>>::builder(quota("10/minute"))
        .store(one.spec())
        .build()
        .unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Mismatch), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("the region holds one key (as a single limiter's or a global limit's region does), and this keyed limiter asked for no key bound"),
        "{text}"
    );
    let l = KeyedLimiter::<Box<[u8]>>::builder(quota("10/minute"))
        .store(one.spec())
        .max_keys(1)
        .build()
        .unwrap();
    assert_eq!(l.max_keys(), 1);
    let sized: StoreSpec = format!("{}?capacity=1", one.spec()).parse().unwrap();
    assert!(KeyedLimiter::<Box<[u8]>>::builder(quota("10/minute"))
        .store(sized)
        .build()
        .is_ok());
    // Without max_keys, an opener takes the region's capacity.
    let l = KeyedLimiter::<Box<[u8]>>::builder(quota("10/minute"))
        .store(r.spec())
        .build()
        .unwrap();
    assert_eq!(l.max_keys(), 1000);
}

#[test]
fn a_region_refuses_what_it_cannot_keep_exactly() {
    let r = Region::new("refuse");
    for q in [
        "10/s; algorithm=sliding_log",
        // Two 48-bit counts leave a 95-bit state no room for the window's index.
        "281474976710655/s; algorithm=sliding_window",
    ] {
        let e = KeyedLimiter::<Box<[u8]>>::builder(quota(q))
            .store(r.spec())
            .build()
            .unwrap_err();
        assert_eq!(
            store_kind(&e),
            Some(StoreErrorKind::Unsupported),
            "{q}: {e}"
        );
    }
    // A clock with an origin of its own process cannot be shared.
    let e = KeyedLimiter::<Box<[u8]>>::builder(quota("5/s"))
        .store(r.spec())
        .clock(StdClock::new())
        .build()
        .unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Unsupported), "{e}");
    assert!(!r.0.exists(), "nothing was created");
}

#[test]
fn links_other_users_files_and_loose_permissions_are_refused() {
    let r = Region::new("perm");
    let _l = keyed("5/s", &r);
    let link = Region::new("link");
    std::os::unix::fs::symlink(&r.0, &link.0).unwrap();
    let e = KeyedLimiter::<Box<[u8]>>::builder(quota("5/s"))
        .store(link.spec())
        .build()
        .unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Permission), "{e}");
    std::fs::set_permissions(&r.0, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = KeyedLimiter::<Box<[u8]>>::builder(quota("5/s"))
        .store(r.spec())
        .build()
        .unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Permission), "{e}");
    let dir = Region::new("dir");
    std::fs::create_dir(&dir.0).unwrap();
    let e = KeyedLimiter::<Box<[u8]>>::builder(quota("5/s"))
        .store(dir.spec())
        .build()
        .unwrap_err();
    let single = Limiter::builder(quota("5/s")).store(dir.spec()).build();
    std::fs::remove_dir(&dir.0).unwrap();
    // Not a regular file, as /dev/null is (docs/SHM.md): it was `Unavailable`, "Is a
    // directory".
    for e in [e, single.unwrap_err()] {
        assert_eq!(store_kind(&e), Some(StoreErrorKind::Permission), "{e}");
        assert!(
            e.to_string().contains("not a regular file (a directory)"),
            "{e}"
        );
    }
    let e = KeyedLimiter::<Box<[u8]>>::builder(quota("5/s"))
        .store(StoreSpec::shm("/dev/null"))
        .build()
        .unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Permission), "{e}");
    assert!(e.to_string().contains("not a regular file"), "{e}");
    let missing = StoreSpec::shm("/nonexistent-directory-of-sluicegate/region");
    let e = KeyedLimiter::<Box<[u8]>>::builder(quota("5/s"))
        .store(missing)
        .build()
        .unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Unavailable), "{e}");
}

/// A composite limit over parts whose default clocks count from different origins (two
/// regions made a second apart, and this process's clock): each part is decided at its own
/// reading. It was decided at the first part's, a second ahead of the second region's, which
/// refilled its bucket: a limit of 1 per 2 s admitted twice within milliseconds.
#[test]
fn a_composite_over_regions_reads_each_regions_clock() {
    use sluicegate::composite::{refund_all, try_acquire_all, Composite};
    let (global, tenant) = (
        Region::new("composite-global"),
        Region::new("composite-tenant"),
    );
    let single = |q: &str, r: &Region| Limiter::builder(quota(q)).store(r.spec()).build().unwrap();
    let global = single("1000/s", &global);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let tenant = single("1/2s", &tenant);
    let local = Limiter::new(quota("1000/s"));
    assert!(tenant.try_acquire(1).unwrap().allowed());
    assert!(!try_acquire_all(&[&global, &tenant], 1).unwrap().allowed());
    assert!(!try_acquire_all(&[&local, &tenant], 1).unwrap().allowed());
    assert!(!try_acquire_all(&[&tenant, &global], 1).unwrap().allowed());
    let parts = Composite::new(vec![global, tenant, local]);
    let (d, each) = parts.try_acquire_each(1).unwrap();
    assert!(
        !d.allowed() && each[1].retry_after().as_millis() > 1000,
        "{each:?}"
    );
    // The refused request left the other parts as they were.
    assert_eq!(parts.parts()[0].peek().unwrap().remaining(), 1000);
    parts.refund(1).unwrap();
    assert!(parts.try_acquire(1).unwrap().allowed());
    // The bindings' refund over limiters owned elsewhere: the tenant's token comes back (at
    // the first part's reading it was lost, the bucket's state being ahead of it).
    let refs: Vec<&Limiter> = parts.parts().iter().collect();
    assert!(!try_acquire_all(&refs, 1).unwrap().allowed());
    refund_all(&refs, 1).unwrap();
    assert!(try_acquire_all(&refs, 1).unwrap().allowed());
}

#[test]
fn a_single_limiter_shares_its_one_bucket() {
    let r = Region::new("single");
    let make = || {
        // 3/minute: no token comes back while the test reads what the other took.
        Limiter::builder(quota("3/minute"))
            .store(r.spec())
            .build()
            .unwrap()
    };
    let (a, b) = (make(), make());
    assert!(a.try_acquire(2).unwrap().allowed());
    assert_eq!(b.peek().unwrap().remaining(), 1);
    assert!(!b.try_acquire(2).unwrap().allowed());
    b.refund(1).unwrap();
    assert_eq!(a.peek().unwrap().remaining(), 2);
    // A single limiter's region is a region of one key: a keyed limiter cannot share it.
    let e = KeyedLimiter::<Box<[u8]>>::builder(quota("3/minute"))
        .store(r.spec())
        .max_keys(10)
        .build()
        .unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Mismatch), "{e}");
}

#[test]
fn manual_clocks_decide_exactly_and_the_interval_grid_is_the_regions() {
    let r = Region::new("manual");
    let q = "1/s; burst=2; initial=0; refill=interval";
    let c1 = ManualClock::new(5_000_000_000_123);
    let a = KeyedLimiter::<Box<[u8]>, _>::builder(quota(q))
        .store(r.spec())
        .clock(c1.clone())
        .build()
        .unwrap();
    // A second limiter made later: the grid stays anchored at the region's creation.
    c1.advance_nanos(700_000_000);
    let b = KeyedLimiter::<Box<[u8]>, _>::builder(quota(q))
        .store(r.spec())
        .clock(c1.clone())
        .build()
        .unwrap();
    assert!(!b.try_acquire(b"k".as_slice(), 1).unwrap().allowed());
    c1.advance_nanos(300_000_000); // one period after the creation
    assert!(a.try_acquire(b"k".as_slice(), 1).unwrap().allowed());
    let d = b.try_acquire(b"k".as_slice(), 1).unwrap();
    assert!(!d.allowed());
    assert_eq!(d.retry_after_nanos(), 1_000_000_000);
}

#[test]
fn the_bound_evicts_full_buckets_then_follows_on_full() {
    let r = Region::new("bound");
    let clock = ManualClock::new(0);
    let l = KeyedLimiter::<Box<[u8]>, _>::builder(quota("1/s"))
        .store(r.spec())
        .max_keys(3)
        .clock(clock.clone())
        .build()
        .unwrap();
    for k in [b"a", b"b", b"c"] {
        assert!(l.try_acquire(k.as_slice(), 1).unwrap().allowed());
    }
    let e = l.try_acquire(b"d".as_slice(), 1).unwrap_err();
    assert_eq!(e.code(), "key_store_full");
    clock.advance_nanos(1_000_000_000);
    assert!(
        l.try_acquire(b"d".as_slice(), 1).unwrap().allowed(),
        "full buckets make room"
    );
    assert!(l.len() <= 3);
    let r2 = Region::new("fullest");
    let l2 = KeyedLimiter::<Box<[u8]>, _>::builder(quota("1/s"))
        .store(r2.spec())
        .max_keys(1)
        .on_full(OnFull::EvictFullest)
        .clock(ManualClock::new(0))
        .build()
        .unwrap();
    assert!(l2.try_acquire(b"x".as_slice(), 1).unwrap().allowed());
    assert!(l2.try_acquire(b"y".as_slice(), 1).unwrap().allowed());
    assert_eq!(l2.len(), 1);
}

#[test]
fn sweep_clear_and_what_a_region_cannot_do() {
    let r = Region::new("sweep");
    let clock = ManualClock::new(0);
    let l = KeyedLimiter::<Box<[u8]>, _>::builder(quota("2/s"))
        .store(r.spec())
        .clock(clock.clone())
        .build()
        .unwrap();
    for k in 0..10u8 {
        l.try_acquire(&[k][..], 1).unwrap();
    }
    assert_eq!(l.sweep().unwrap(), 0);
    clock.advance_nanos(500_000_000);
    assert_eq!(l.sweep().unwrap(), 10);
    assert!(l.is_empty());
    l.try_acquire(b"z".as_slice(), 1).unwrap();
    l.clear().unwrap();
    assert_eq!(l.len(), 0);
    let e = l.snapshot().unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Unsupported));
    let audit = l.audit().unwrap();
    assert_eq!((audit.live, audit.duplicates, audit.unreachable), (0, 0, 0));
}

/// A capacity in the store string and a different `max_keys`: two sizes for one region, an
/// error (the string's capacity won silently, and a reopening with the same `max_keys` was a
/// mismatch). The same figure twice, or either alone, is fine.
#[test]
fn a_capacity_and_another_max_keys_are_an_error() {
    let r = Region::new("two-sizes");
    let with = |spec: &str, max_keys: Option<usize>| {
        let b = KeyedLimiter::<u64>::builder(quota("2/s")).store(spec.parse().unwrap());
        match max_keys {
            Some(n) => b.max_keys(n),
            None => b,
        }
        .build()
    };
    let at = |cap: u32| format!("shm:{}?capacity={cap}", r.0.display());
    let e = with(&at(5), Some(7)).unwrap_err();
    assert!(
        matches!(
            &e,
            sluicegate::Error::InvalidOption {
                option: "max_keys",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("capacity (5)"), "{e}");
    assert!(!r.0.exists(), "no region made");
    assert_eq!(with(&at(5), Some(5)).unwrap().max_keys(), 5);
    assert_eq!(with(&at(5), None).unwrap().max_keys(), 5);
}

#[test]
fn store_specs_parse_and_print() {
    let s: StoreSpec = "shm:/api-limits?capacity=5000".parse().unwrap();
    assert_eq!(s.shm_path().unwrap(), PathBuf::from("/dev/shm/api-limits"));
    assert_eq!(s.to_string(), "shm:/api-limits?capacity=5000");
    let p: StoreSpec = "shm:/var/run/app/limits".parse().unwrap();
    assert_eq!(p.shm_path().unwrap(), PathBuf::from("/var/run/app/limits"));
    for bad in [
        "shm:",
        "shm:/x?capacity=0",
        "shm:/x?cap=3",
        "redis",
        "shm:/x?capacity=1&capacity=2",
    ] {
        let e = bad.parse::<StoreSpec>().unwrap_err();
        assert_eq!(e.code(), "invalid_option", "{bad}");
    }
}

#[test]
fn rates_with_large_counts_in_lowest_terms_are_kept_exactly() {
    // A 95-bit state holds what a 64-bit one could not: these outgrow 64 bits within years.
    for q in ["1000003/hour", "999/s; burst=3", "4294967291/s"] {
        let r = Region::new("large");
        let clock = ManualClock::new(7);
        let l = KeyedLimiter::<Box<[u8]>, _>::builder(quota(q))
            .store(r.spec())
            .max_keys(10)
            .clock(clock.clone())
            .build()
            .unwrap_or_else(|e| panic!("{q}: {e}"));
        let mem = KeyedLimiter::<Box<[u8]>, _>::builder(quota(q))
            .clock(clock.clone())
            .build()
            .unwrap();
        // Ninety years on, decisions still match the in-process ones.
        for t in [7, 1_000_000, 3_000_000_000, 90 * 31_557_600 * 1_000_000_000] {
            clock.set(t);
            for cost in [1, 2] {
                let k: &[u8] = b"k";
                assert_eq!(
                    l.try_acquire(k, cost).unwrap(),
                    mem.try_acquire(k, cost).unwrap(),
                    "{q} at {t}"
                );
            }
        }
    }
}

#[test]
fn a_single_limiter_on_a_region_reserves_and_acquires() {
    let r = Region::new("reserve");
    let clock = ManualClock::new(0);
    let q = quota("10/s; algorithm=leaky_queue; max_delay=250ms");
    let l = Limiter::builder(q)
        .store(r.spec())
        .clock(clock.clone())
        .build()
        .unwrap();
    let waits: Vec<u64> = (0..3)
        .map(|_| l.reserve(1).unwrap().retry_after_nanos())
        .collect();
    assert_eq!(waits, [0, 100_000_000, 200_000_000]);
    assert!(!l.reserve(1).unwrap().allowed());
    l.cancel(1).unwrap();
    let d = l
        .reserve_within(1, std::time::Duration::from_millis(150))
        .unwrap();
    assert!(!d.allowed(), "a 200 ms wait is past 150 ms");
    let d = l.acquire(1, std::time::Duration::ZERO).unwrap();
    assert!(!d.allowed());
    clock.set(1_000_000_000);
    assert!(l.acquire(1, std::time::Duration::ZERO).unwrap().allowed());
}

#[test]
fn a_region_created_late_reports_its_horizon_on_the_limiters_clock() {
    let r = Region::new("horizon");
    let start = 5_000_000_000_000_000_000;
    let clock = ManualClock::new(start);
    let l = KeyedLimiter::<Box<[u8]>, _>::builder(quota("5/s"))
        .store(r.spec())
        .max_keys(10)
        .clock(clock.clone())
        .build()
        .unwrap();
    let k: &[u8] = b"k";
    clock.set(start + sluicegate::CENTURY_NS);
    assert!(
        l.try_acquire(k, 1).unwrap().allowed(),
        "a century is covered"
    );
    clock.set(u64::MAX);
    match l.try_acquire(k, 1) {
        Err(Error::ClockOutOfRange { now, horizon }) => {
            assert_eq!(now, u64::MAX);
            assert!(horizon >= start + sluicegate::CENTURY_NS, "{horizon}");
        }
        other => panic!("{other:?}"),
    }
}

/// An empty file at a region's name that no creator is sizing (made by a person, `install -m
/// 600 /dev/null`, or systemd-tmpfiles; or left by a creator that died before sizing it) is
/// sized and made a region by the first opener, at once (it waited 3 s, then refused it as
/// `Corrupt`). One whose creator is sizing it (its sizing lock held) is waited for, and a
/// short file with bytes in it is someone's: refused, left as it was.
#[test]
fn an_empty_file_is_made_a_region_and_a_short_one_is_left_alone() {
    use std::os::fd::AsRawFd;
    let r = Region::new("empty");
    std::fs::write(&r.0, b"").unwrap();
    std::fs::set_permissions(&r.0, std::fs::Permissions::from_mode(0o600)).unwrap();
    let t = std::time::Instant::now();
    let kl = keyed("5/s", &r);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(kl.try_acquire(b"a".as_slice(), 1).unwrap().remaining(), 4);
    assert_eq!(
        keyed("5/s", &r).peek(b"a".as_slice()).unwrap().remaining(),
        4
    );

    // A creator sizing it (here: its lock held by another descriptor, as another process
    // holds it): waited for, then refused once the wait is over, the file left as it was.
    let r2 = Region::new("empty-held");
    std::fs::write(&r2.0, b"").unwrap();
    std::fs::set_permissions(&r2.0, std::fs::Permissions::from_mode(0o600)).unwrap();
    let holder = std::fs::File::open(&r2.0).unwrap();
    // SAFETY: flock on a descriptor `holder` owns.
    assert_eq!(unsafe { libc::flock(holder.as_raw_fd(), libc::LOCK_EX) }, 0);
    let e = KeyedLimiter::<Box<[u8]>>::builder(quota("5/s"))
        .store(r2.spec())
        .build()
        .unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Corrupt), "{e}");
    assert_eq!(std::fs::metadata(&r2.0).unwrap().len(), 0);
    drop(holder);
    assert!(keyed("5/s", &r2)
        .try_acquire(b"a".as_slice(), 1)
        .unwrap()
        .allowed());

    // A short file with bytes: someone's.
    let r3 = Region::new("short");
    std::fs::write(&r3.0, b"hello").unwrap();
    std::fs::set_permissions(&r3.0, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = KeyedLimiter::<Box<[u8]>>::builder(quota("5/s"))
        .store(r3.spec())
        .build()
        .unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Corrupt), "{e}");
    assert_eq!(std::fs::read(&r3.0).unwrap(), b"hello");
}

/// Threads of one process opening one new region at once, and an empty file's adopters among
/// them: every one opens the one region (a creator whose sizing lock an adopter took in the
/// instant after the file was made waited for that adopter's mapping to end: forever, as the
/// lock of a mapped file outlives its descriptor).
#[test]
fn threads_making_and_adopting_one_region_at_once_all_open_it() {
    for round in 0..20 {
        let r = Region::new(&format!("race-{round}"));
        if round % 2 == 1 {
            std::fs::write(&r.0, b"").unwrap();
            std::fs::set_permissions(&r.0, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let barrier = std::sync::Barrier::new(6);
        let t = std::time::Instant::now();
        let opened: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..6)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        keyed("10/s", &r)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            t.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            t.elapsed()
        );
        for (i, kl) in opened.iter().enumerate() {
            let d = kl.try_acquire(b"k".as_slice(), 1).unwrap();
            assert_eq!(
                d.remaining(),
                9 - i as u64,
                "round {round}: one region for all"
            );
        }
    }
}

#[test]
fn a_file_that_is_not_a_region_is_never_taken_over() {
    let r = Region::new("foreign");
    let text = "a user's own file, which a region name happened to point at\n".repeat(200);
    std::fs::write(&r.0, &text).unwrap();
    std::fs::set_permissions(&r.0, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = KeyedLimiter::<Box<[u8]>>::builder(quota("5/s"))
        .store(r.spec())
        .build()
        .unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Corrupt), "{e}");
    assert_eq!(
        std::fs::read_to_string(&r.0).unwrap(),
        text,
        "left as it was"
    );
}

/// Live reconfiguration is refused on a region (every process decides with the quota in its
/// header; docs/OPERATIONS.md), with a typed error, and the limiter goes on as it was.
#[test]
fn a_region_refuses_live_reconfiguration() {
    let r = Region::new("reconfigure");
    let kl = keyed("10/minute", &r);
    assert!(kl.try_acquire(b"a".as_slice(), 1).unwrap().allowed());
    let e = kl.set_quota(quota("20/minute")).unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Unsupported), "{e:?}");
    assert_eq!(kl.quota(), quota("10/minute"));
    assert_eq!(kl.peek(b"a".as_slice()).unwrap().remaining(), 9);
    // Decisions go on (a region's path enters no read section: the refusal paused nothing).
    assert_eq!(kl.try_acquire(b"a".as_slice(), 1).unwrap().remaining(), 8);
    let r2 = Region::new("reconfigure-single");
    let l = Limiter::builder(quota("5/s"))
        .store(r2.spec())
        .build()
        .unwrap();
    let e = l.set_quota(quota("6/s")).unwrap_err();
    assert_eq!(store_kind(&e), Some(StoreErrorKind::Unsupported), "{e:?}");
    // The store named as a user wrote it, for both (it was a Debug dump of the bucket).
    for e in [e, kl.set_quota(quota("20/minute")).unwrap_err()] {
        let Error::Store { store, .. } = &e else {
            unreachable!()
        };
        assert!(store.starts_with("shm:/") && !store.contains('{'), "{e:?}");
    }
    assert!(l.try_acquire(1).unwrap().allowed());
}

/// A region's decisions are observed as in-process ones: counted, shown to the hook, let
/// through in shadow mode (switched on while the limiter runs), and a refused new key counted.
#[test]
fn a_regions_decisions_are_counted_hooked_and_shadowed() {
    let r = Region::new("observe");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let hook = seen.clone();
    let kl = KeyedLimiter::<Box<[u8]>>::builder(quota("2/minute"))
        .store(r.spec())
        .max_keys(1)
        .metrics(true)
        .on_reject(move |j| hook.lock().unwrap().push(j.key().to_vec()))
        .build()
        .unwrap();
    let a = b"a".as_slice();
    assert!(kl.try_acquire(a, 1).unwrap().allowed());
    assert!(kl.try_acquire(a, 1).unwrap().allowed());
    assert!(!kl.try_acquire(a, 1).unwrap().allowed());
    kl.set_shadow(true);
    let d = kl.try_acquire(a, 1).unwrap();
    assert!(d.allowed() && d.shadow_rejected(), "{d:?}");
    let e = kl.try_acquire(b"b".as_slice(), 1).unwrap_err();
    assert!(matches!(e, Error::KeyStoreFull { max_keys: 1 }), "{e}");
    let m = kl.metrics().unwrap();
    assert_eq!((m.allowed, m.rejected, m.shadow_rejected), (2, 1, 1));
    assert_eq!(m.key_store_full, 1);
    assert_eq!(*seen.lock().unwrap(), [b"a".to_vec(), b"a".to_vec()]);

    // Without counters or a hook, shadow mode switched on later still lets rejections through.
    let r2 = Region::new("observe-quiet");
    let quiet = keyed("1/minute", &r2);
    assert!(quiet.try_acquire(a, 1).unwrap().allowed());
    assert!(!quiet.try_acquire(a, 1).unwrap().allowed());
    quiet.set_shadow(true);
    let d = quiet.try_acquire(a, 1).unwrap();
    assert!(d.allowed() && d.shadow_rejected(), "{d:?}");
}

/// Short keys are compared in full (their bytes are their fingerprint): the 65 536 addresses
/// of one /16, whose texts share their first bytes, and keys of up to 15 bytes that differ in
/// one byte, each get a bucket of their own; a long key and every short key are apart too.
#[test]
fn every_short_key_has_a_bucket_of_its_own() {
    let r = Region::new("short");
    let l = KeyedLimiter::<Box<[u8]>, _>::builder(quota("1/hour"))
        .store(r.spec())
        .max_keys(70_000)
        .clock(ManualClock::new(0))
        .build()
        .unwrap();
    let mut keys: Vec<Vec<u8>> = (0..=255u32)
        .flat_map(|a| (0..=255u32).map(move |b| format!("10.7.{a}.{b}").into_bytes()))
        .collect();
    for n in 0..=15 {
        for at in 0..n {
            let mut k = vec![b'x'; n];
            k[at] = b'y';
            keys.push(k);
        }
        keys.push(vec![b'x'; n]);
    }
    keys.push(vec![b'x'; 64]);
    for k in &keys {
        assert!(
            l.try_acquire(&k[..], 1).unwrap().allowed(),
            "{k:?}: a bucket of its own"
        );
    }
    for k in &keys {
        assert!(
            !l.try_acquire(&k[..], 1).unwrap().allowed(),
            "{k:?}: its own bucket, spent"
        );
    }
    let audit = l.audit().unwrap();
    assert_eq!(
        (audit.live, audit.duplicates, audit.unreachable),
        (keys.len(), 0, 0)
    );
}
