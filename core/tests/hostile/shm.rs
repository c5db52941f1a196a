//! A shared-memory region's bytes are untrusted input: a region written by a buggy or hostile
//! process of the same user (the file is private to its user), or corrupted on disk, gives a
//! typed error or a decision, never a panic, a hang or an out-of-bounds access.
//!
//! The byte offsets below are layout version 4's (`core/src/store/shm/region.rs`); the test
//! checks the magic number first, so a layout change fails loudly here.

use sluicegate::{Error, KeyedLimiter, ManualClock, Quota, StoreErrorKind, StoreSpec};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// The header's checksummed fields end here (the checksum's offset).
const CHECKSUM_AT: u64 = 328;
/// `state` and `initialiser`: not checksummed (they change while a region is made).
const UNCHECKED: std::ops::Range<u64> = 12..24;
const LOCKS_AT: u64 = 4096;
const SLOTS_AT: u64 = 4096 + 4096 * 8;
const SLOT: u64 = 32;

struct Region(PathBuf);

impl Region {
    fn new() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        Self(std::env::temp_dir().join(format!("sluicegate-hostile-{}-{n}", std::process::id())))
    }

    fn spec(&self) -> StoreSpec {
        StoreSpec::shm(self.0.to_str().unwrap())
    }

    fn open(&self, clock: &ManualClock) -> Result<KeyedLimiter<Box<[u8]>, ManualClock>, Error> {
        KeyedLimiter::builder(quota())
            .store(self.spec())
            .max_keys(64)
            .clock(clock.clone())
            .build()
    }

    fn write_at(&self, at: u64, bytes: &[u8]) {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.0)
            .unwrap();
        f.seek(SeekFrom::Start(at)).unwrap();
        f.write_all(bytes).unwrap();
    }

    fn read_at(&self, at: u64, n: usize) -> Vec<u8> {
        let mut f = std::fs::File::open(&self.0).unwrap();
        f.seek(SeekFrom::Start(at)).unwrap();
        let mut v = vec![0; n];
        f.read_exact(&mut v).unwrap();
        v
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn quota() -> Quota {
    "5/s".parse().unwrap()
}

fn kind(e: &Error) -> Option<StoreErrorKind> {
    match e {
        Error::Store { kind, .. } => Some(*kind),
        _ => None,
    }
}

/// A region with a few keys in it, made and closed.
fn made(clock: &ManualClock) -> Region {
    let r = Region::new();
    let l = r.open(clock).unwrap();
    for k in 0..20u32 {
        l.try_acquire(k.to_string().as_bytes(), 2).unwrap();
    }
    drop(l);
    assert_eq!(r.read_at(0, 8), b"SLGTSHM1", "the magic number");
    assert_eq!(r.read_at(8, 4), 4u32.to_ne_bytes(), "layout version 4");
    r
}

/// A region of another layout version (whose slots this library would misread) is refused
/// as a mismatch, not opened; restored, it opens with its keys.
#[test]
fn a_region_of_another_layout_version_is_a_mismatch() {
    let clock = ManualClock::new(0);
    let r = made(&clock);
    for version in [0u32, 1, 2, 3, 5, u32::MAX] {
        r.write_at(8, &version.to_ne_bytes());
        let Err(e) = r.open(&clock) else {
            panic!("a region of layout version {version} was opened");
        };
        assert_eq!(kind(&e), Some(StoreErrorKind::Mismatch), "{e}");
        assert!(
            e.to_string().contains(&format!("layout version {version}")),
            "{e}"
        );
    }
    r.write_at(8, &4u32.to_ne_bytes());
    let l = r.open(&clock).unwrap();
    assert_eq!(l.peek(b"3".as_slice()).unwrap().remaining(), 3);
}

/// A tiny deterministic generator (the test must be reproducible).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn every_changed_header_field_is_a_typed_error() {
    let clock = ManualClock::new(1_000);
    let r = made(&clock);
    let original = r.read_at(0, CHECKSUM_AT as usize + 8);
    for at in (0..CHECKSUM_AT + 8).step_by(4) {
        if UNCHECKED.contains(&at) {
            continue;
        }
        for flip in [1u8, 0x80] {
            let mut b = original[at as usize..at as usize + 4].to_vec();
            b[0] ^= flip;
            r.write_at(at, &b);
            let e = r
                .open(&clock)
                .err()
                .unwrap_or_else(|| panic!("a region whose byte {at} changed was opened"));
            let k = kind(&e);
            assert!(
                matches!(k, Some(StoreErrorKind::Corrupt | StoreErrorKind::Mismatch)),
                "byte {at}: {e}"
            );
            r.write_at(at, &original[at as usize..at as usize + 4]);
        }
    }
    // Restored, it opens and still holds its keys.
    let l = r.open(&clock).unwrap();
    assert_eq!(l.peek(b"3".as_slice()).unwrap().remaining(), 3);
}

#[test]
fn a_truncated_or_extended_region_is_corrupt() {
    let clock = ManualClock::new(0);
    let r = made(&clock);
    let len = std::fs::metadata(&r.0).unwrap().len();
    for new_len in [len - SLOT, len + 4096, 4096, 5000] {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&r.0)
            .unwrap()
            .set_len(new_len)
            .unwrap();
        let Err(e) = r.open(&clock) else {
            panic!("opened a region resized to {new_len} bytes")
        };
        assert_eq!(kind(&e), Some(StoreErrorKind::Corrupt), "{new_len}: {e}");
    }
}

#[test]
fn garbage_slots_and_locks_give_decisions_or_typed_errors() {
    let clock = ManualClock::new(0);
    let r = made(&clock);
    let len = std::fs::metadata(&r.0).unwrap().len();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..40 {
        // Garbage over some slots (their words, fingerprints and reaches) and some locks.
        for _ in 0..8 {
            let slot = rng.next() % ((len - SLOTS_AT) / SLOT);
            let mut b = [0u8; SLOT as usize];
            for chunk in b.chunks_mut(8) {
                chunk.copy_from_slice(&rng.next().to_le_bytes());
            }
            // Sometimes only a field: a state, a reach.
            let (at, n) = match rng.next() % 3 {
                0 => (0, 32),
                1 => (0, 16),
                _ => (24, 8),
            };
            r.write_at(
                SLOTS_AT + slot * SLOT + at,
                &b[at as usize..at as usize + n],
            );
        }
        if round % 4 == 0 {
            let lock = rng.next() % 4096;
            // A dead process's token (pid 0 never is a holder), or any bits.
            let token = if round % 8 == 0 { 7 } else { rng.next() };
            r.write_at(LOCKS_AT + lock * 8, &token.to_le_bytes());
        }
        let l = r.open(&clock).expect("the header is intact");
        for i in 0..64u32 {
            clock.set(u64::from(i) * 100_000_000);
            let key = (rng.next() % 40).to_string();
            let outcomes = [
                l.try_acquire(key.as_bytes(), 1 + rng.next() % 5)
                    .map(|_| ()),
                l.peek(key.as_bytes()).map(|_| ()),
                l.refund(key.as_bytes(), 1),
                l.remove(key.as_bytes()).map(|_| ()),
            ];
            for o in outcomes {
                match o {
                    Ok(()) => {}
                    // A bucket outside its algorithm's range, a new key at a bound the garbage
                    // filled, or a lock held by a live process the garbage named.
                    Err(e) => assert!(
                        matches!(
                            kind(&e),
                            Some(StoreErrorKind::Corrupt | StoreErrorKind::Timeout)
                        ) || e.code() == "key_store_full",
                        "{e}"
                    ),
                }
            }
        }
        match l.sweep() {
            Ok(_) => {}
            Err(e) => assert_eq!(kind(&e), Some(StoreErrorKind::Corrupt), "{e}"),
        }
        let _ = l.len();
    }
}

#[test]
fn clearing_a_garbage_region_makes_it_whole_again() {
    let clock = ManualClock::new(0);
    let r = made(&clock);
    let len = std::fs::metadata(&r.0).unwrap().len();
    let mut rng = Rng(42);
    let mut junk = vec![0u8; (len - SLOTS_AT) as usize];
    for chunk in junk.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next().to_le_bytes());
    }
    r.write_at(SLOTS_AT, &junk);
    let l = r.open(&clock).unwrap();
    l.clear().unwrap();
    // Every key decides from a fresh bucket again: 5 admitted, the sixth rejected.
    for k in 0..10u32 {
        let key = k.to_string();
        for _ in 0..5 {
            assert!(l.try_acquire(key.as_bytes(), 1).unwrap().allowed(), "{k}");
        }
        assert!(!l.try_acquire(key.as_bytes(), 1).unwrap().allowed(), "{k}");
    }
}

#[test]
fn a_region_opened_by_another_user_or_world_writable_is_refused() {
    let clock = ManualClock::new(0);
    let r = made(&clock);
    for mode in [0o666, 0o604, 0o620] {
        std::fs::set_permissions(&r.0, std::fs::Permissions::from_mode(mode)).unwrap();
        let Err(e) = r.open(&clock) else {
            panic!("opened a region others can write")
        };
        assert_eq!(kind(&e), Some(StoreErrorKind::Permission), "{mode:o}: {e}");
    }
}

#[test]
fn a_region_whose_every_slot_is_garbage_refuses_new_keys_without_hanging() {
    let clock = ManualClock::new(0);
    let r = made(&clock);
    let len = std::fs::metadata(&r.0).unwrap().len();
    let mut rng = Rng(7);
    let mut junk = vec![0u8; (len - SLOTS_AT) as usize];
    for chunk in junk.chunks_mut(8) {
        chunk.copy_from_slice(&rng.next().to_le_bytes());
    }
    // Clear every claim mark (bit 95 of each word), so that every slot looks like a live key.
    for slot in junk.chunks_mut(SLOT as usize) {
        slot[11] &= 0x7f;
        slot[15] |= 1; // a tag, never 0
    }
    r.write_at(SLOTS_AT, &junk);
    let (tx, rx) = std::sync::mpsc::channel();
    let path = r.0.clone();
    std::thread::spawn(move || {
        let r = Region(path);
        let l = r.open(&ManualClock::new(0)).unwrap();
        let outcome = l.try_acquire(b"new".as_slice(), 1).map(|d| d.allowed());
        std::mem::forget(r); // the test's own Region removes the file
        tx.send(outcome.map_err(|e| e.code())).unwrap();
    });
    let outcome = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("a new key hung on a region of garbage");
    assert!(
        matches!(outcome, Err("key_store_full" | "store_corrupt") | Ok(true)),
        "{outcome:?}"
    );
}

/// A file at the region's name owned by another user (who could forge its buckets, or watch
/// ours) is refused before it is read. Making one needs `chown`, which only root may do: run
/// as another user, this test has nothing to make its file with, and under `CI=true` fails
/// rather than pass without checking.
#[test]
fn a_region_owned_by_another_user_is_refused() {
    let clock = ManualClock::new(0);
    let r = made(&clock);
    // nobody / nogroup
    if let Err(e) = std::os::unix::fs::chown(&r.0, Some(65534), Some(65534)) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "cannot give the region to another user ({e}): run the tests as root"
        );
        eprintln!("not checked: only root can give a file to another user ({e})");
        return;
    }
    let Err(e) = r.open(&clock) else {
        panic!("opened a region another user owns")
    };
    assert_eq!(kind(&e), Some(StoreErrorKind::Permission), "{e}");
    assert!(e.to_string().contains("belongs to user 65534"), "{e}");
}

/// A region in a directory that does not exist: the error says so (it said "No such file or
/// directory", which reads as the region missing), and nothing is made.
#[test]
fn a_region_in_a_missing_directory_names_the_directory() {
    let dir = std::env::temp_dir().join(format!("sluicegate-no-such-dir-{}", std::process::id()));
    let path = dir.join("limits");
    let Err(e) = KeyedLimiter::<Box<[u8]>>::builder(quota())
        .store(StoreSpec::shm(path.to_str().unwrap()))
        .max_keys(64)
        .clock(ManualClock::new(0))
        .build()
    else {
        panic!("made a region in a missing directory")
    };
    assert_eq!(kind(&e), Some(StoreErrorKind::Unavailable), "{e}");
    let said = e.to_string();
    assert!(
        said.contains(&format!("its directory {} does not exist", dir.display())),
        "{said}"
    );
    assert!(!dir.exists());
}

/// The low 32 bits of a process's start time (`/proc/PID/stat`, field 22): the other half of
/// a process token, with the pid (`core/src/store/shm/lock.rs`).
fn start_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    let ticks: u64 = rest.split_whitespace().nth(19).unwrap().parse().unwrap();
    ticks & 0xffff_ffff
}

/// A region file as its creator leaves it when it stops after sizing the file (`len` bytes,
/// zeros) and claiming the initialisation with its process `token` (0: before the claim).
fn abandoned(len: u64, token: u64) -> Region {
    use std::os::unix::fs::OpenOptionsExt;
    let r = Region::new();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&r.0)
        .unwrap();
    f.set_len(len).unwrap();
    drop(f);
    if token != 0 {
        r.write_at(UNCHECKED.start + 4, &token.to_ne_bytes());
    }
    r
}

/// A creator that died while initialising (its token names a process that exited, or it
/// died before its claim) is taken over once an opener has waited for it: the region is
/// initialised afresh and serves its quota, whoever it was sized for.
#[test]
fn a_creator_that_died_before_the_region_was_ready_is_taken_over() {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    for token in [u64::from(pid) << 32, 0] {
        let r = abandoned(4096, token);
        let clock = ManualClock::new(0);
        let started = std::time::Instant::now();
        let l = r.open(&clock).unwrap();
        assert!(
            started.elapsed() >= std::time::Duration::from_secs(3),
            "taken over before the creator's time was up"
        );
        assert_eq!(r.read_at(0, 8), b"SLGTSHM1", "initialised");
        for _ in 0..5 {
            assert!(l.try_acquire(b"k".as_slice(), 1).unwrap().allowed());
        }
        assert!(!l.try_acquire(b"k".as_slice(), 1).unwrap().allowed());
        // A second opener sees the same buckets.
        let again = r.open(&clock).unwrap();
        assert_eq!(again.peek(b"k".as_slice()).unwrap().remaining(), 0);
    }
}

/// A creator that is alive but never finishes (stopped, traced) is waited for a bounded time,
/// then reported by a typed `Timeout` naming it; the region is not taken from it.
#[test]
fn a_live_creator_that_never_finishes_is_a_timeout() {
    let me = std::process::id();
    let token = (u64::from(me) << 32) | start_ticks(me);
    let r = abandoned(4096, token);
    r.write_at(0, b"SLGTSHM1"); // its first field written, not the rest
    let Err(e) = r.open(&ManualClock::new(0)) else {
        panic!("opened a region its live creator has not finished")
    };
    assert_eq!(kind(&e), Some(StoreErrorKind::Timeout), "{e}");
    assert!(e.to_string().contains(&format!("process {me}")), "{e}");
    assert_eq!(
        r.read_at(UNCHECKED.start + 4, 8),
        token.to_ne_bytes(),
        "still its creator's"
    );
}

/// A file its creator never sized (it stopped between creating and sizing it: its sizing lock
/// is free) is made a region by the next opener, at once; a short file with bytes in it, or a
/// stranger's file at the region's name, is never resized or overwritten: a typed `Corrupt`
/// that says what to do, after the bounded wait.
#[test]
fn an_unsized_file_is_adopted_and_a_strangers_file_is_corrupt_not_overwritten() {
    let r = abandoned(0, 0);
    let l = r
        .open(&ManualClock::new(0))
        .expect("an empty file made a region");
    assert!(l.try_acquire(&b"k"[..], 1).unwrap().allowed());
    assert!(std::fs::metadata(&r.0).unwrap().len() > 4096);

    let r = abandoned(0, 0);
    r.write_at(0, b"#!");
    let Err(e) = r.open(&ManualClock::new(0)) else {
        panic!("took a short file over")
    };
    assert_eq!(kind(&e), Some(StoreErrorKind::Corrupt), "{e}");
    assert!(e.to_string().contains("remove the file"), "{e}");
    assert_eq!(r.read_at(0, 2), b"#!", "left as it was");

    let r = abandoned(4096, 0);
    r.write_at(0, b"#!/bin/sh\n");
    let Err(e) = r.open(&ManualClock::new(0)) else {
        panic!("took a stranger's file over")
    };
    assert_eq!(kind(&e), Some(StoreErrorKind::Corrupt), "{e}");
    assert!(e.to_string().contains("not a sluicegate region"), "{e}");
    assert_eq!(r.read_at(0, 10), b"#!/bin/sh\n", "left as it was");
}

/// A composite's refund tries every part: a part whose region is found corrupt between the
/// acquire and the refund fails its own refund, and the parts after it are still given their
/// cost back (the first error is returned once all were tried). It stopped at the corrupt
/// part, leaving the later ones consumed.
#[test]
fn a_composite_refund_past_a_corrupt_part_refunds_the_others() {
    use sluicegate::composite::{self, Composite};
    use sluicegate::Limiter;
    let clock = ManualClock::new(0);
    let q: Quota = "5/s; algorithm=fixed_window".parse().unwrap();
    let r = Region::new();
    let shm = Limiter::builder(q)
        .store(r.spec())
        .clock(clock.clone())
        .build()
        .unwrap();
    let mem = || Limiter::with_clock(q, clock.clone()).unwrap();
    let both = Composite::new(vec![shm, mem(), mem()]);
    assert!(both.try_acquire(2).unwrap().allowed());
    // The region's one bucket (its word is the only one set): a count past the window's
    // limit in its state's low bits, its fingerprint's tag kept.
    let file = std::fs::read(&r.0).unwrap();
    let slot = file[SLOTS_AT as usize..]
        .chunks(SLOT as usize)
        .position(|s| s[..16].iter().any(|&b| b != 0))
        .expect("the bucket's slot") as u64;
    r.write_at(SLOTS_AT + slot * SLOT, &[0xff]);
    let e = both.refund(2).unwrap_err();
    assert_eq!(kind(&e), Some(StoreErrorKind::Corrupt), "{e}");
    for p in &both.parts()[1..] {
        assert_eq!(
            p.peek().unwrap().remaining(),
            5,
            "a part after the corrupt one kept the cost"
        );
    }
    // The free function over limiters owned elsewhere, likewise.
    let parts: Vec<&Limiter<ManualClock>> = both.parts().iter().collect();
    for p in &parts[1..] {
        assert!(p.try_acquire(2).unwrap().allowed());
    }
    let e = composite::refund_all_at(&parts, 0, 2).unwrap_err();
    assert_eq!(kind(&e), Some(StoreErrorKind::Corrupt), "{e}");
    for p in &parts[1..] {
        assert_eq!(p.peek().unwrap().remaining(), 5);
    }
}

/// A capacity no region can have is refused before any file is made: it left an empty file
/// at the name, which every later opener, whatever its capacity, waited 3 s for and then
/// refused as a creator that stopped.
#[test]
fn a_capacity_too_large_leaves_no_file_behind() {
    for spelled in ["999999999999", "469762049", "+10", "0", "1e3"] {
        let spec = format!("shm:/x?capacity={spelled}");
        assert!(
            matches!(
                spec.parse::<StoreSpec>(),
                Err(Error::InvalidOption {
                    option: "store",
                    ..
                })
            ),
            "{spec}"
        );
    }
    assert!("shm:/x?capacity=469762048".parse::<StoreSpec>().is_ok());
    let r = Region::new();
    let huge = KeyedLimiter::<Box<[u8]>, _>::builder(quota())
        .store(r.spec())
        .max_keys(usize::MAX)
        .clock(ManualClock::new(0))
        .build();
    assert!(
        matches!(huge, Err(Error::InvalidQuota { .. })),
        "{:?}",
        huge.err()
    );
    assert!(!r.0.exists(), "a file was left at the name");
    let started = std::time::Instant::now();
    r.open(&ManualClock::new(0)).unwrap();
    // (The opener no longer waits for a creator: nothing to wait for. Not a timing
    // assertion, a report.)
    eprintln!("opened in {:?}", started.elapsed());
}

/// An opener waiting for a creator to size its file starts again when the file is removed (a
/// creator that failed removes its file): it made a region at once, where it waited 3 s
/// for a file no longer there and refused it as corrupt.
#[test]
fn an_opener_waiting_on_a_removed_file_starts_again() {
    let r = abandoned(0, 0);
    let path = r.0.clone();
    let remover = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(100));
        std::fs::remove_file(&path).unwrap();
    });
    let opened = r.open(&ManualClock::new(0));
    remover.join().unwrap();
    let l = opened.unwrap();
    assert!(l.try_acquire(b"k".as_slice(), 1).unwrap().allowed());
}

/// A small tmpfs for one test: mounted by root (and unmounted when dropped), or, for another
/// user, by the test run again in a user and mount namespace of its own (`unshare -rm`),
/// where the mount is the child's alone.
enum SmallTmpfs {
    Mounted(PathBuf),
    /// The child of `unshare`: the directory its shell mounted.
    Child(PathBuf),
}

impl SmallTmpfs {
    fn dir(&self) -> &PathBuf {
        match self {
            SmallTmpfs::Mounted(d) | SmallTmpfs::Child(d) => d,
        }
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        if let SmallTmpfs::Mounted(dir) = self {
            let _ = std::process::Command::new("umount").arg(&*dir).status();
            let _ = std::fs::remove_dir(&*dir);
        }
    }
}

/// A 1 MiB tmpfs for `test` (its name), or `None` when this run is the parent of a child run
/// in a namespace (`Err` if that child failed) or no way to mount one exists.
fn small_tmpfs(test: &str) -> Option<SmallTmpfs> {
    if let Ok(dir) = std::env::var("SG_SMALL_TMPFS") {
        return Some(SmallTmpfs::Child(PathBuf::from(dir)));
    }
    let dir = std::env::temp_dir().join(format!("sluicegate-small-tmpfs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(SmallTmpfs::Mounted(dir));
        }
    }
    let exe = std::env::current_exe().unwrap();
    let child = std::process::Command::new("unshare")
        .args(["-r", "-m", "sh", "-c"])
        .arg("mount -t tmpfs -o size=1m tmpfs \"$0\" && exec \"$1\" --exact \"$2\" --nocapture")
        .arg(&dir)
        .arg(&exe)
        .arg(test)
        .env("SG_SMALL_TMPFS", &dir)
        .status();
    let _ = std::fs::remove_dir(&dir);
    match child {
        Ok(s) if s.success() => None,
        Ok(s) if s.code() == Some(101) => panic!("the test failed in its namespace: {s}"),
        r => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test} needs root or unprivileged user namespaces (unshare -rm): {r:?}"
            );
            eprintln!("{test} did not run: no way to mount a tmpfs here ({r:?})");
            None
        }
    }
}

/// A region that does not fit its file system (a container's small /dev/shm) is an error
/// when it is made or opened, never SIGBUS at a later page's first touch, which killed the
/// process (a sparse file's pages were allocated as keys landed in them).
#[test]
fn a_file_system_without_room_for_the_region_is_an_error_not_a_crash() {
    let Some(fs) =
        small_tmpfs("shm::a_file_system_without_room_for_the_region_is_an_error_not_a_crash")
    else {
        return;
    };
    let dir = fs.dir().clone();
    let at = |name: &str, max_keys: usize| {
        KeyedLimiter::<Box<[u8]>>::builder("10/minute".parse().unwrap())
            .store(StoreSpec::shm(dir.join(name).to_str().unwrap()))
            .max_keys(max_keys)
            .build()
    };
    // 100 000 keys: 3.7 MB, on a 1 MB file system.
    let e = at("big", 100_000).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Store {
                kind: StoreErrorKind::Unavailable,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("no room"), "{e}");
    assert!(!dir.join("big").exists(), "the half-made file is removed");
    // A small one fits, and decides.
    let small = at("small", 1_000).unwrap();
    for k in 0..1_000u32 {
        assert!(small
            .try_acquire(&k.to_be_bytes()[..], 1)
            .unwrap()
            .allowed());
    }
    // A sparse file of a region's length (as an older version made them) on the full file
    // system: opening it is an error, not SIGBUS at the header's first read.
    let sparse = dir.join("sparse");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&sparse)
        .unwrap();
    std::fs::set_permissions(&sparse, std::fs::Permissions::from_mode(0o600)).unwrap();
    f.set_len(8 << 20).unwrap();
    drop(f);
    let e = at("sparse", 100_000).unwrap_err();
    assert!(matches!(e, Error::Store { .. }), "{e:?}");
}
