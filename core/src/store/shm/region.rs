//! A shared-memory region: the file, its mapping, and the header every opener validates.
//!
//! # Layout (version 3; the host's byte order, one host's processes share it)
//!
//! ```text
//! 0      header (HEADER_LEN bytes): every field an atomic, read once at open
//! 4096   insert locks: LOCKS x u64
//! ...    slots: `slots` x 32 bytes, 64-byte aligned
//! ```
//!
//! The header holds the magic and version, the state of its initialisation and who does it,
//! the geometry (slot and lock counts, offsets, the file's length), the quota (its parameters
//! and canonical text), the clock (the creator's base, and the limiter clock's origin for the
//! interval grid), the fingerprints' secret, the counters shared by every process (live keys,
//! the key bound's hint and watermark), and a checksum of its fixed fields.
//!
//! # Creation and opening
//!
//! The creator makes the file with `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600, sizes it, maps
//! it, claims the initialisation with a CAS of its process token, writes every fixed field
//! and publishes `READY` with a release store. An opener (the file exists) opens it without
//! following links, refuses a file that is not a regular file, belongs to another user or is
//! open to other users, waits (bounded) for `READY`, and validates every field: the region's
//! bytes are untrusted input. A creator that died before `READY` is detected by its token and
//! its initialisation taken over; one that takes too long is a [`StoreErrorKind::Timeout`].

use super::table::Slot;
use crate::algorithm::Codec;
use crate::clock::ClockBase;
use crate::error::{Error, StoreErrorKind};
use crate::quota::{Algorithm, Quota, Refill};
use crate::store::bound::Hint;
use crate::sync::{AtomicU32, AtomicU64, Ordering};
use core::hash::Hasher;
use std::path::Path;
use std::time::{Duration, Instant};

/// "SLGTSHM1".
const MAGIC: u64 = u64::from_le_bytes(*b"SLGTSHM1");
/// 4: the boot and the PID namespace the region was made in; 3: short keys compared in full
/// (`table::exact_value`); 2 hashed every key.
const VERSION: u32 = 4;
/// The header's bytes (a page), before the locks.
const HEADER_LEN: usize = 4096;
/// Insert locks: a new key holds the one of its home (modulo this count).
pub(crate) const LOCKS: usize = 4096;
const SLOT_BYTES: usize = core::mem::size_of::<Slot>();
/// The most slots a region may have (16 GiB of slots).
const MAX_SLOTS: u64 = 1 << 29;
/// How long an opener waits for a creator to finish.
const INIT_WAIT: Duration = Duration::from_secs(3);
/// How long an opener waits for a creator that is still sizing and allocating the file (a
/// region of gigabytes can take longer than [`INIT_WAIT`]).
const SIZING_WAIT: Duration = Duration::from_secs(60);
/// Room for the quota's canonical text.
const QUOTA_TEXT: usize = 128;

const STATE_EMPTY: u32 = 0;
const STATE_READY: u32 = 2;

/// The header, as atomics over the mapping: every field is read with a load, so that a
/// process writing the region meanwhile (a hostile one included) is never a data race.
#[repr(C)]
pub(crate) struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    state: AtomicU32,
    /// The token of the process initialising the region (see `lock::token`).
    initialiser: AtomicU64,
    slots: AtomicU64,
    capacity: AtomicU64,
    locks: AtomicU64,
    locks_offset: AtomicU64,
    slots_offset: AtomicU64,
    file_len: AtomicU64,
    /// 1: TSC (origin, mult); 2: OS clock (origin).
    clock_kind: AtomicU64,
    clock_origin: AtomicU64,
    clock_mult: AtomicU64,
    /// The limiter clock's reading at creation: the interval grid's anchor.
    origin: AtomicU64,
    secret: [AtomicU64; 2],
    count: AtomicU64,
    period_ns: AtomicU64,
    burst: AtomicU64,
    initial: AtomicU64,
    max_delay_ns: AtomicU64,
    /// `refill` (0 continuous, 1 interval) | `algorithm` (its index) << 8.
    kinds: AtomicU64,
    quota_text: [AtomicU64; QUOTA_TEXT / 8],
    /// The boot the region was made in (Linux's boot id; 0: unknown): a region that outlived
    /// a reboot (a file on a disk) holds readings of a clock that has restarted since.
    boot: [AtomicU64; 2],
    /// The PID namespace of its creator (the namespace file's device and inode; 0: unknown):
    /// a process in another namespace cannot tell whether the region's processes are alive.
    pid_ns: [AtomicU64; 2],
    /// A checksum of every field above but `state` and `initialiser`.
    checksum: AtomicU64,
    // Shared counters (not checksummed: they change).
    pub(crate) live: AtomicU64,
    pub(crate) hint: Hint,
}

const _: () = assert!(core::mem::size_of::<Header>() <= HEADER_LEN);

/// What the fixed fields say, read once at open and validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) slots: u64,
    pub(crate) capacity: u64,
    pub(crate) clock: ClockBase,
    pub(crate) origin: u64,
    pub(crate) secret: [u64; 2],
    pub(crate) quota: Quota,
    pub(crate) boot: [u64; 2],
    pub(crate) pid_ns: [u64; 2],
}

/// An open region: the mapping, and its validated geometry.
pub(crate) struct Region {
    map: memmap2::MmapRaw,
    pub(crate) meta: Meta,
    /// The path, as given (for errors).
    pub(crate) name: String,
}

/// What a limiter asks of a region.
pub(crate) struct Want<'a> {
    pub(crate) path: &'a Path,
    pub(crate) quota: Quota,
    /// Keys; `None`: whatever the region was made with (a new region gets `default`).
    pub(crate) capacity: Option<u64>,
    pub(crate) default_capacity: u64,
    /// The limiter clock's reading as it would read through a new region's base: the
    /// region's origin (the interval grid's anchor).
    pub(crate) origin: &'a dyn Fn(ClockBase) -> u64,
}

fn err(kind: StoreErrorKind, path: &Path, reason: impl Into<String>) -> Error {
    Error::store(kind, path.display().to_string(), reason)
}

/// The slot count for `capacity` keys: room for a load of at most 7/8.
fn slots_for(capacity: u64) -> u64 {
    capacity
        .saturating_mul(8)
        .div_ceil(7)
        .max(capacity.saturating_add(1))
}

/// Where a region of `capacity` keys keeps its insert locks and its slots, and its length.
struct Layout {
    slots: u64,
    locks_offset: u64,
    slots_offset: u64,
    file_len: u64,
}

fn layout(capacity: u64) -> Layout {
    let slots = slots_for(capacity);
    let locks_offset = HEADER_LEN as u64;
    let slots_offset = locks_offset + (LOCKS * 8) as u64;
    Layout {
        slots,
        locks_offset,
        slots_offset,
        file_len: slots_offset + slots * SLOT_BYTES as u64,
    }
}

/// The quota's algorithm as a number stored in the header.
fn algorithm_index(a: Algorithm) -> u64 {
    match a {
        Algorithm::TokenBucket => 0,
        Algorithm::Gcra => 1,
        Algorithm::FixedWindow => 2,
        Algorithm::SlidingWindow => 3,
        Algorithm::SlidingLog => 4,
        Algorithm::LeakyQueue => 5,
    }
}

fn algorithm_of(i: u64) -> Option<Algorithm> {
    Some(match i {
        0 => Algorithm::TokenBucket,
        1 => Algorithm::Gcra,
        2 => Algorithm::FixedWindow,
        3 => Algorithm::SlidingWindow,
        4 => Algorithm::SlidingLog,
        5 => Algorithm::LeakyQueue,
        _ => return None,
    })
}

/// The codec a region runs `quota` with (on readings relative to the region's creation: see
/// `ShmStore::base`), or why a region cannot keep its buckets: one 96-bit state each (see
/// `table::STATE`), exact for a century of readings.
pub(crate) fn check_quota(path: &Path, quota: &Quota) -> Result<Codec, Error> {
    let Some(codec) = Codec::narrow(quota, 0, super::table::STATE)? else {
        return Err(err(
            StoreErrorKind::Unsupported,
            path,
            format!(
                "{quota}: a shared-memory region keeps a {}-bit state per key, and this \
                 quota's exact state outgrows it within a century of readings (its rate \
                 reduced to lowest terms has an enormous count per period)",
                super::table::STATE.bits
            ),
        ));
    };
    if matches!(codec, Codec::SlidingLog(_)) {
        return Err(err(
            StoreErrorKind::Unsupported,
            path,
            format!(
                "{quota}: a shared-memory region keeps one word per key (a 95-bit state), and a \
                 sliding log keeps up to `count` timestamps; use algorithm=sliding_window (the exact \
                 rational counter) for a window in shared memory"
            ),
        ));
    }
    Ok(codec)
}

impl Region {
    /// Opens the region at `want.path`, creating and initialising it if it does not exist.
    pub(crate) fn open(want: &Want<'_>) -> Result<Self, Error> {
        let path = want.path;
        check_quota(path, &want.quota)?;
        if !crate::sync::AtomicU128::is_lock_free() {
            // Without a 128-bit compare-and-swap instruction the atomics fall back to locks
            // private to each process, which would not make a slot's update atomic between
            // processes.
            return Err(err(
                StoreErrorKind::Unsupported,
                path,
                "this CPU has no 128-bit compare-and-swap, which a region's slots need",
            ));
        }
        // A capacity no region can have is refused before any file is made (an existing
        // region is still opened, at its own capacity, when none was asked for).
        let capacity = want.capacity.unwrap_or(want.default_capacity);
        let creatable = check_capacity(capacity);
        let mut waited = Instant::now();
        loop {
            if creatable.is_ok() {
                match create_new(path) {
                    Ok(file) => {
                        // The sizing lock, held until the file is sized (`initialise`
                        // releases it): an opener that finds an empty file sizes it only
                        // under this lock. An opener that took it in the instant before ours
                        // is sizing the file, or has: open that region instead (waiting for
                        // it to be ready).
                        let lock = match lock_sizing(&file, path) {
                            Ok(l) => l,
                            Err(e) => {
                                // This process's empty file: not left for openers to wait on.
                                if !replaced(&file, path) {
                                    let _ = std::fs::remove_file(path);
                                }
                                return Err(e);
                            }
                        };
                        let sized_by_other = match lock {
                            Sizing::Held => {
                                if file_len(&file, path)? == 0 {
                                    return Self::initialise(
                                        file,
                                        path,
                                        want,
                                        capacity,
                                        Origin::Created,
                                    );
                                }
                                unlock_sizing(&file);
                                true
                            }
                            Sizing::Busy => true,
                            // A file system without `flock`: sized as before the lock existed
                            // (no opener adopts an empty file there).
                            Sizing::Unsupported => false,
                        };
                        if !sized_by_other {
                            return Self::initialise(file, path, want, capacity, Origin::Created);
                        }
                        if let Some(region) = Self::attach(file, path, want, &mut waited)? {
                            return Ok(region);
                        }
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io_error(path, "create", &e)),
                }
            }
            let file = match open_existing(path) {
                Ok(f) => f,
                // Removed between our two opens: try to create it again.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    creatable.clone()?;
                    continue;
                }
                Err(e) => return Err(io_error(path, "open", &e)),
            };
            check_owner(&file, path)?;
            match Self::attach(file, path, want, &mut waited)? {
                Some(region) => return Ok(region),
                None => continue,
            }
        }
    }

    /// Maps an existing region and waits for it to be ready; `None` when it should be opened
    /// again (it was replaced meanwhile).
    fn attach(
        file: std::fs::File,
        path: &Path,
        want: &Want<'_>,
        waited: &mut Instant,
    ) -> Result<Option<Self>, Error> {
        loop {
            let len = file
                .metadata()
                .map_err(|e| io_error(path, "stat", &e))?
                .len();
            if len >= HEADER_LEN as u64 {
                // A region made sparse (by an older version, or a creator still sizing it):
                // its pages allocated before any is touched.
                reserve(&file, len, path)?;
                let map = map(&file, path)?;
                // SAFETY: the mapping is at least HEADER_LEN bytes, page-aligned, and `Header`
                // is made of atomics only, which any bit pattern is a valid value of.
                let header = unsafe { &*map.as_ptr().cast::<Header>() };
                if header.state.load(Ordering::Acquire) == STATE_READY {
                    let meta = read_meta(header, len, path)?;
                    if before_this_boot(&meta) {
                        // Made before the machine last booted (a region on a disk): its
                        // readings are of a clock that has restarted since, and every process
                        // that used it is gone. Made anew in place, at its size, under the
                        // sizing lock, by the first opener of this boot to get the lock.
                        matches(&meta, want)?;
                        match lock_sizing(&file, path)? {
                            Sizing::Held => {
                                let still = header.state.load(Ordering::Acquire) == STATE_READY
                                    && read_meta(header, len, path)
                                        .is_ok_and(|m| before_this_boot(&m));
                                if !still {
                                    // Another opener made it anew meanwhile.
                                    unlock_sizing(&file);
                                    continue;
                                }
                                header
                                    .initialiser
                                    .store(super::lock::token(), Ordering::Release);
                                drop(map);
                                let lock = file.try_clone();
                                let made = Self::fill(file, path, want, meta.capacity, true);
                                if let Ok(lock) = lock {
                                    unlock_sizing(&lock);
                                }
                                return made.map(Some);
                            }
                            Sizing::Busy if waited.elapsed() <= INIT_WAIT => {
                                std::thread::sleep(Duration::from_millis(2));
                                continue;
                            }
                            Sizing::Busy => {
                                return Err(err(
                                    StoreErrorKind::Timeout,
                                    path,
                                    format!(
                                        "the region was made before the machine last booted, \
                                         and another process has held its sizing lock for \
                                         {INIT_WAIT:?} without making it anew"
                                    ),
                                ))
                            }
                            Sizing::Unsupported => {
                                return Err(err(
                                    StoreErrorKind::Mismatch,
                                    path,
                                    "the region was made before the machine last booted (its \
                                     clock readings are of a clock that has restarted since), \
                                     and its file system has no lock to make it anew under: \
                                     remove the file",
                                ))
                            }
                        }
                    }
                    check_pid_ns(&meta, path)?;
                    matches(&meta, want)?;
                    let name = path.display().to_string();
                    return Ok(Some(Region { map, meta, name }));
                }
                let holder = header.initialiser.load(Ordering::Acquire);
                if waited.elapsed() > INIT_WAIT {
                    let magic = header.magic.load(Ordering::Acquire);
                    if magic != 0 && magic != MAGIC {
                        // Not a region (a file of someone's, at a name we were given): never
                        // take it over, it is not ours to overwrite.
                        return Err(err(
                            StoreErrorKind::Corrupt,
                            path,
                            "the file is not a sluicegate region (its first bytes are not the \
                             region's magic number); choose another name, or remove the file",
                        ));
                    }
                    if replaced(&file, path) {
                        // Removed or replaced meanwhile: never take over a file no longer at
                        // the name (its region would be this process's alone).
                        return Ok(None);
                    }
                    if holder == 0 || !super::lock::alive(holder) {
                        // A creator claims the initialisation once the file is sized and
                        // allocated, under its sizing lock, which for a large region can take
                        // longer than the wait: while the lock is held, it is still at it.
                        let sizing = if holder == 0 {
                            lock_sizing(&file, path)?
                        } else {
                            Sizing::Unsupported
                        };
                        if sizing == Sizing::Busy {
                            if waited.elapsed() <= SIZING_WAIT {
                                std::thread::sleep(Duration::from_millis(2));
                                continue;
                            }
                            return Err(err(
                                StoreErrorKind::Timeout,
                                path,
                                format!(
                                    "the region's creator has been sizing and allocating its \
                                     file for {SIZING_WAIT:?}"
                                ),
                            ));
                        }
                        // Its creator died before it was ready: nobody can have used it.
                        let me = super::lock::token();
                        if header
                            .initialiser
                            .compare_exchange(holder, me, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                        {
                            let capacity = want.capacity.unwrap_or(want.default_capacity);
                            drop(map);
                            return Self::initialise(file, path, want, capacity, Origin::TakenOver)
                                .map(Some);
                        }
                        if sizing == Sizing::Held {
                            unlock_sizing(&file);
                        }
                        *waited = Instant::now();
                        continue;
                    }
                    return Err(err(
                        StoreErrorKind::Timeout,
                        path,
                        format!(
                            "the region's creator (process {}) has not finished initialising \
                             it after {INIT_WAIT:?}",
                            holder >> 32
                        ),
                    ));
                }
            } else if replaced(&file, path) {
                // Its creator failed and removed it (or someone replaced it): start again.
                return Ok(None);
            } else if len == 0 && lock_sizing(&file, path)? == Sizing::Held {
                // An empty file that no creator is sizing (a creator holds the sizing lock
                // from the file's creation until it is sized): its creator died before sizing
                // it, or a person made it (`install -m 600 /dev/null`, systemd-tmpfiles).
                // Sized here, under the lock, if it is still empty; else opened as it is now.
                if file_len(&file, path)? == 0 && !replaced(&file, path) {
                    // (`initialise` checks the capacity, and releases the lock either way.)
                    let capacity = want.capacity.unwrap_or(want.default_capacity);
                    return Self::initialise(file, path, want, capacity, Origin::Adopted).map(Some);
                }
                unlock_sizing(&file);
                continue;
            } else if waited.elapsed() > INIT_WAIT {
                // Short (not empty) for that long, or empty and its sizing lock held that
                // long: another program's file, or a creator stopped before sizing it. Two
                // processes resizing it at once could split the region in two, so this one
                // is left to a person.
                return Err(err(
                    StoreErrorKind::Corrupt,
                    path,
                    format!(
                        "the file has {len} bytes, too few for a region's header: a region whose \
                         creator stopped before sizing it (remove the file: no process can have \
                         used it), or another program's file (give the region another name)"
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Sizes, maps and initialises a region for `capacity` keys (see [`Origin`]). The sizing
    /// lock, if this process holds it, is released once the file is sized (or sizing failed):
    /// a lock on a mapped file outlives the file's descriptor, for as long as the mapping.
    fn initialise(
        file: std::fs::File,
        path: &Path,
        want: &Want<'_>,
        capacity: u64,
        origin: Origin,
    ) -> Result<Self, Error> {
        let sized = Self::size(&file, path, capacity, origin);
        unlock_sizing(&file);
        sized?;
        Self::fill(file, path, want, capacity, origin == Origin::TakenOver)
    }

    /// Sizes and allocates the file of a region for `capacity` keys.
    fn size(file: &std::fs::File, path: &Path, capacity: u64, origin: Origin) -> Result<(), Error> {
        check_capacity(capacity)?;
        let file_len = layout(capacity).file_len;
        let created = |file: &std::fs::File| {
            // The file this process made: nobody else sizes or takes over an empty file it is
            // sizing, so removing it harms no one (a mapping of it stays valid), and spares the
            // name a short file (an opener waiting on it meanwhile sees it gone, and starts
            // again).
            if origin == Origin::Created && !replaced(file, path) {
                let _ = std::fs::remove_file(path);
            }
        };
        if let Err(e) = file.set_len(file_len) {
            // A person's empty file, not sized: left as it was found (still empty).
            created(file);
            return Err(io_error(path, "size", &e));
        }
        if let Err(e) = reserve(file, file_len, path) {
            // Sized: an opener may have mapped it already, so it is never shortened (its
            // reads past the end would raise SIGBUS there). An adopted file stays sized and
            // uninitialised, which the next opener takes over as a dead creator's.
            created(file);
            return Err(e);
        }
        Ok(())
    }

    /// Maps and initialises a sized region file. `taken_over`: the file existed, its creator
    /// died, and this process holds its initialisation already.
    fn fill(
        file: std::fs::File,
        path: &Path,
        want: &Want<'_>,
        capacity: u64,
        taken_over: bool,
    ) -> Result<Self, Error> {
        let Layout {
            slots,
            locks_offset,
            slots_offset,
            file_len,
        } = layout(capacity);
        let map = map(&file, path)?;
        // SAFETY: as in `attach`: the mapping is `file_len` bytes, page-aligned, and the
        // header is atomics only.
        let header = unsafe { &*map.as_ptr().cast::<Header>() };
        let me = super::lock::token();
        if !taken_over
            && header
                .initialiser
                .compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            // Someone took the initialisation over from us (we were too slow): open it.
            drop(map);
            let mut waited = Instant::now();
            return Self::attach(file, path, want, &mut waited)?
                .ok_or_else(|| err(StoreErrorKind::Unavailable, path, "the region was replaced"));
        }
        header.state.store(STATE_EMPTY, Ordering::Release);
        // A fresh base every process will read time through, and the limiter clock's reading
        // through it now (about 0 for the default clock; a manual clock's own reading).
        let base = ClockBase::now_base(true);
        let origin = (want.origin)(base);
        let secret = crate::store::key::random_secret();
        let q = want.quota;
        let meta = Meta {
            slots,
            capacity,
            clock: base,
            origin,
            secret,
            quota: q,
            boot: this_boot(),
            pid_ns: this_pid_ns(),
        };
        write_meta(header, &meta, locks_offset, slots_offset, file_len);
        let region = Region {
            map,
            meta,
            name: path.display().to_string(),
        };
        // Every lock free, every slot empty. A file this process created is all zeros already
        // (and stays sparse: a page is allocated when a key first lands in it); a taken-over
        // one may hold anything.
        if taken_over {
            for l in region.locks() {
                l.store(0, Ordering::Relaxed);
            }
            for s in region.slots() {
                s.word.store(0, Ordering::Relaxed);
                s.tag_hi.store(0, Ordering::Relaxed);
                s.side.store(0, Ordering::Relaxed);
            }
        }
        header.live.store(0, Ordering::Relaxed);
        header.hint.reset();
        header.checksum.store(checksum(header), Ordering::Relaxed);
        header.state.store(STATE_READY, Ordering::Release);
        Ok(region)
    }

    pub(crate) fn header(&self) -> &Header {
        // SAFETY: validated at open: the mapping holds a header.
        unsafe { &*self.map.as_ptr().cast::<Header>() }
    }

    pub(crate) fn locks(&self) -> &[AtomicU64] {
        // SAFETY: the validated layout puts LOCKS u64 words, 8-aligned, at HEADER_LEN, inside
        // the mapping; atomics accept any bit pattern.
        unsafe {
            core::slice::from_raw_parts(
                self.map.as_ptr().add(HEADER_LEN).cast::<AtomicU64>(),
                LOCKS,
            )
        }
    }

    pub(crate) fn slots(&self) -> &[Slot] {
        let offset = HEADER_LEN + LOCKS * 8;
        // SAFETY: the validated layout puts `slots` slots, 64-aligned (a page plus 32 KiB),
        // at `offset`, inside the mapping (`file_len` was checked against the file); a slot is
        // atomics only, which accept any bit pattern.
        unsafe {
            core::slice::from_raw_parts(
                self.map.as_ptr().add(offset).cast::<Slot>(),
                self.meta.slots as usize,
            )
        }
    }
}

/// Checks that the region of `meta` keeps this limiter's quota, at the asked capacity.
fn matches(meta: &Meta, want: &Want<'_>) -> Result<(), Error> {
    if meta.quota != want.quota {
        return Err(err(
            StoreErrorKind::Mismatch,
            want.path,
            format!(
                "the region enforces {:?}, this limiter {:?} (a region keeps the limit it \
                 was made with: give this one another name, or remove the file once no \
                 process has it open)",
                meta.quota.to_string(),
                want.quota.to_string()
            ),
        ));
    }
    if let Some(c) = want.capacity {
        if c != meta.capacity {
            let why = if c == 1 {
                ", what a single-bucket limiter asks for: a keyed limiter's region is opened \
                 by keyed limiters, and a region keeps the capacity it was made with"
            } else {
                ": a region keeps the capacity it was made with"
            };
            return Err(err(
                StoreErrorKind::Mismatch,
                want.path,
                format!(
                    "the region holds {} keys, this limiter asked for {c}{why} (give this \
                     one another name, or remove the file once no process has it open)",
                    meta.capacity,
                ),
            ));
        }
    }
    Ok(())
}

fn io_error(path: &Path, what: &str, e: &std::io::Error) -> Error {
    use std::os::unix::fs::MetadataExt;
    let kind = match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            // A region another user made (0600): say whose, which the bare error does not.
            if let Ok(m) = std::fs::symlink_metadata(path) {
                // SAFETY: geteuid has no preconditions and cannot fail.
                let me = unsafe { libc::geteuid() };
                if m.uid() != me {
                    return err(
                        StoreErrorKind::Permission,
                        path,
                        format!(
                            "cannot {what} the region: it belongs to user {}, not to this \
                             process's user {me} (the processes sharing a region run as one user)",
                            m.uid()
                        ),
                    );
                }
            }
            StoreErrorKind::Permission
        }
        std::io::ErrorKind::NotFound => {
            // A region's directory is not made for it (`/dev/shm`, or the path's own).
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
            if let Some(dir) = dir.filter(|d| !d.is_dir()) {
                return err(
                    StoreErrorKind::Unavailable,
                    path,
                    format!(
                        "cannot {what} the region: its directory {} does not exist (a region's \
                         directory is not made for it)",
                        dir.display()
                    ),
                );
            }
            StoreErrorKind::Unavailable
        }
        // A directory (EISDIR), a socket or a device with nothing behind it (ENXIO): not a
        // regular file, as `check_owner` says of one that opens (`/dev/null`, a FIFO).
        _ if matches!(e.raw_os_error(), Some(libc::EISDIR | libc::ENXIO)) => {
            let what_is = if e.raw_os_error() == Some(libc::EISDIR) {
                "a directory"
            } else {
                "a socket or a device"
            };
            return err(
                StoreErrorKind::Permission,
                path,
                format!("cannot {what} the region: not a regular file ({what_is})"),
            );
        }
        _ if e.raw_os_error() == Some(libc::ELOOP) => {
            return err(
                StoreErrorKind::Permission,
                path,
                format!("cannot {what} the region: it is a symbolic link, which is not followed"),
            )
        }
        _ => StoreErrorKind::Unavailable,
    };
    err(kind, path, format!("cannot {what} the region: {e}"))
}

/// The keys a region may hold: `capacity * 8 / 7` slots, at most [`MAX_SLOTS`].
const MAX_CAPACITY: u64 = crate::store::spec::SHM_MAX_CAPACITY;
const _: () = assert!(MAX_CAPACITY == MAX_SLOTS / 8 * 7);

/// Whether a region can be made for `capacity` keys.
fn check_capacity(capacity: u64) -> Result<(), Error> {
    if capacity == 0 {
        return Err(Error::invalid(
            "a shared-memory region needs a capacity of at least 1 key",
        ));
    }
    if capacity > MAX_CAPACITY {
        return Err(Error::invalid(format!(
            "a shared-memory region holds at most {MAX_CAPACITY} keys, not {capacity}"
        )));
    }
    debug_assert!(slots_for(capacity) <= MAX_SLOTS);
    Ok(())
}

/// Whether `path` no longer names the file `file` was opened from (removed, or replaced).
fn replaced(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(ours) = file.metadata() else {
        return false;
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) => (m.dev(), m.ino()) != (ours.dev(), ours.ino()),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Where a region's file comes from, for [`Region::initialise`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Made by this process (`O_EXCL`), empty.
    Created,
    /// Found empty, its sizing lock free (a person's, or a dead creator's): left as it is if
    /// sizing or allocating it fails.
    Adopted,
    /// Sized, its creator dead before it was ready; this process holds its initialisation.
    TakenOver,
}

/// What taking a file's sizing lock came to.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sizing {
    /// This process holds it.
    Held,
    /// Another process holds it (a creator sizing the file, or an opener adopting it).
    Busy,
    /// The file system has no `flock` (the lock is then not used).
    Unsupported,
}

/// Tries the file's sizing lock (`flock`, exclusive, not waiting). The lock is the open
/// file's: it goes with `unlock_sizing`, with the file's last descriptor while it is not
/// mapped, or with the process.
fn lock_sizing(file: &std::fs::File, path: &Path) -> Result<Sizing, Error> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock on a descriptor this `File` owns and keeps open for the call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(Sizing::Held);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(Sizing::Busy),
            Some(libc::ENOLCK | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOSYS) => {
                return Ok(Sizing::Unsupported)
            }
            _ => return Err(io_error(path, "lock", &e)),
        }
    }
}

/// Releases the sizing lock (before the file is kept open to be attached).
fn unlock_sizing(file: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: as in `lock_sizing`. A failure leaves the lock to the file's close.
    unsafe {
        libc::flock(file.as_raw_fd(), libc::LOCK_UN);
    }
}

fn file_len(file: &std::fs::File, path: &Path) -> Result<u64, Error> {
    Ok(file
        .metadata()
        .map_err(|e| io_error(path, "stat", &e))?
        .len())
}

fn create_new(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

fn open_existing(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Refuses a region that is not a regular file, belongs to another user, or that other users
/// may write or read (their processes could then forge or watch our buckets).
fn check_owner(file: &std::fs::File, path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata().map_err(|e| io_error(path, "stat", &e))?;
    if !m.file_type().is_file() {
        return Err(err(StoreErrorKind::Permission, path, "not a regular file"));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if m.uid() != me {
        return Err(err(
            StoreErrorKind::Permission,
            path,
            format!(
                "the region belongs to user {}, not to this process's user {me}",
                m.uid()
            ),
        ));
    }
    if m.mode() & 0o077 != 0 {
        return Err(err(
            StoreErrorKind::Permission,
            path,
            format!(
                "the region's mode {:o} lets other users read or write it; it must be 600",
                m.mode() & 0o777
            ),
        ));
    }
    Ok(())
}

/// Allocates the file's first `len` bytes on its file system (`posix_fallocate`), before it is
/// mapped. A sparse file on a tmpfs with no room left (a container's 64 MB `/dev/shm`) raises
/// SIGBUS at the first touch of a page with no block behind it, which kills the process, on a
/// decision or on opening the region; allocated here, the file system's `ENOSPC` is an error
/// instead. The region's memory is then committed when it is made (its file length), not as
/// keys touch its pages.
fn reserve(file: &std::fs::File, len: u64, path: &Path) -> Result<(), Error> {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        // Allocated already (a region made by this version): one `fstat`, not a walk over its
        // pages (which took an open of a 35 MB region from about 20 to 700 microseconds).
        if file
            .metadata()
            .is_ok_and(|m| m.blocks().saturating_mul(512) >= len)
        {
            return Ok(());
        }
        let Ok(n) = libc::off_t::try_from(len) else {
            return Err(err(
                StoreErrorKind::Unavailable,
                path,
                format!("a region of {len} bytes"),
            ));
        };
        // SAFETY: `file` is open (its descriptor lives as long as the borrow); the call reads
        // and writes no memory of ours.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, n) };
        match rc {
            0 => {}
            // A file system that cannot allocate ahead: the region stays sparse, as before.
            libc::EOPNOTSUPP | libc::EINVAL => {}
            libc::ENOSPC | libc::EFBIG => {
                return Err(err(
                    StoreErrorKind::Unavailable,
                    path,
                    format!(
                        "no room for the region's {len} bytes on its file system ({}): enlarge \
                         it (a container's /dev/shm: docker run --shm-size, Kubernetes: an \
                         emptyDir of medium Memory), or give a smaller key bound (max_keys, maxKeys, \
                         MAX_KEYS or ?capacity=N: about 37 bytes a key)",
                        std::io::Error::from_raw_os_error(rc)
                    ),
                ))
            }
            _ => {
                return Err(io_error(
                    path,
                    "allocate",
                    &std::io::Error::from_raw_os_error(rc),
                ))
            }
        }
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = (file, len, path);
    Ok(())
}

fn map(file: &std::fs::File, path: &Path) -> Result<memmap2::MmapRaw, Error> {
    memmap2::MmapRaw::map_raw(file).map_err(|e| io_error(path, "map", &e))
}

fn write_meta(h: &Header, m: &Meta, locks_offset: u64, slots_offset: u64, file_len: u64) {
    let r = Ordering::Relaxed;
    h.magic.store(MAGIC, r);
    h.version.store(VERSION, r);
    h.slots.store(m.slots, r);
    h.capacity.store(m.capacity, r);
    h.locks.store(LOCKS as u64, r);
    h.locks_offset.store(locks_offset, r);
    h.slots_offset.store(slots_offset, r);
    h.file_len.store(file_len, r);
    let (kind, origin, mult) = match m.clock {
        ClockBase::Tsc { origin, mult } => (1, origin, mult),
        ClockBase::Os { origin } => (2, origin, 0),
    };
    h.clock_kind.store(kind, r);
    h.clock_origin.store(origin, r);
    h.clock_mult.store(mult, r);
    h.origin.store(m.origin, r);
    h.secret[0].store(m.secret[0], r);
    h.secret[1].store(m.secret[1], r);
    let q = &m.quota;
    h.count.store(q.count(), r);
    h.period_ns.store(q.period_ns(), r);
    h.burst.store(q.burst(), r);
    h.initial.store(q.initial(), r);
    h.max_delay_ns.store(q.max_delay_ns(), r);
    let refill = match q.refill() {
        Refill::Continuous => 0,
        Refill::Interval => 1,
    };
    h.kinds
        .store(refill | algorithm_index(q.algorithm()) << 8, r);
    let text = q.to_string();
    let mut bytes = [0u8; QUOTA_TEXT];
    let n = text.len().min(QUOTA_TEXT);
    bytes[..n].copy_from_slice(&text.as_bytes()[..n]);
    for (i, w) in h.quota_text.iter().enumerate() {
        let chunk: [u8; 8] = bytes[i * 8..i * 8 + 8].try_into().unwrap_or_default();
        w.store(u64::from_le_bytes(chunk), r);
    }
    for (w, v) in h.boot.iter().zip(m.boot) {
        w.store(v, r);
    }
    for (w, v) in h.pid_ns.iter().zip(m.pid_ns) {
        w.store(v, r);
    }
}

/// A checksum of the fixed fields (a mangled header is refused, not misread).
fn checksum(h: &Header) -> u64 {
    let mut s = siphasher::sip::SipHasher13::new_with_keys(0x736c_7569_6365, 0x6761_7465);
    let r = Ordering::Relaxed;
    s.write_u64(h.magic.load(r));
    s.write_u32(h.version.load(r));
    for f in [
        &h.slots,
        &h.capacity,
        &h.locks,
        &h.locks_offset,
        &h.slots_offset,
        &h.file_len,
        &h.clock_kind,
        &h.clock_origin,
        &h.clock_mult,
        &h.origin,
        &h.secret[0],
        &h.secret[1],
        &h.count,
        &h.period_ns,
        &h.burst,
        &h.initial,
        &h.max_delay_ns,
        &h.kinds,
    ] {
        s.write_u64(f.load(r));
    }
    for w in h.quota_text.iter().chain(&h.boot).chain(&h.pid_ns) {
        s.write_u64(w.load(r));
    }
    s.finish()
}

/// Reads and validates the fixed fields of a ready region of `len` bytes.
fn read_meta(h: &Header, len: u64, path: &Path) -> Result<Meta, Error> {
    let r = Ordering::Acquire;
    let corrupt = |what: &str| err(StoreErrorKind::Corrupt, path, what.to_string());
    if h.magic.load(r) != MAGIC {
        return Err(corrupt("not a sluicegate region (bad magic number)"));
    }
    let version = h.version.load(r);
    if version != VERSION {
        return Err(err(
            StoreErrorKind::Mismatch,
            path,
            format!(
                "the region has layout version {version}, this library reads {VERSION} (remove \
                 the file once no process of the older version has it open)"
            ),
        ));
    }
    if h.checksum.load(r) != checksum(h) {
        return Err(corrupt("the header's checksum does not match its fields"));
    }
    let slots = h.slots.load(r);
    let capacity = h.capacity.load(r);
    if slots == 0 || slots > MAX_SLOTS || capacity == 0 || slots != slots_for(capacity) {
        return Err(corrupt("the slot count does not fit the capacity"));
    }
    let locks_offset = HEADER_LEN as u64;
    let slots_offset = locks_offset + (LOCKS * 8) as u64;
    let file_len = slots_offset + slots * SLOT_BYTES as u64;
    if h.locks.load(r) != LOCKS as u64
        || h.locks_offset.load(r) != locks_offset
        || h.slots_offset.load(r) != slots_offset
        || h.file_len.load(r) != file_len
    {
        return Err(corrupt("the header's geometry is not this layout's"));
    }
    if len != file_len {
        return Err(corrupt(&format!(
            "the file has {len} bytes, its header says {file_len}"
        )));
    }
    let clock = match h.clock_kind.load(r) {
        1 => {
            let mult = h.clock_mult.load(r);
            if mult == 0 {
                return Err(corrupt("a TSC clock with no multiplier"));
            }
            ClockBase::Tsc {
                origin: h.clock_origin.load(r),
                mult,
            }
        }
        2 => ClockBase::Os {
            origin: h.clock_origin.load(r),
        },
        _ => return Err(corrupt("an unknown clock kind")),
    };
    let kinds = h.kinds.load(r);
    let refill = match kinds & 0xff {
        0 => Refill::Continuous,
        1 => Refill::Interval,
        _ => return Err(corrupt("an unknown refill mode")),
    };
    let algorithm = algorithm_of(kinds >> 8).ok_or_else(|| corrupt("an unknown algorithm"))?;
    let options = crate::QuotaOptions {
        count: h.count.load(r),
        period_ns: h.period_ns.load(r),
        burst: Some(h.burst.load(r)),
        initial: Some(h.initial.load(r)),
        refill: Some(refill),
        algorithm: Some(algorithm),
        max_delay_ns: (algorithm == Algorithm::LeakyQueue).then(|| h.max_delay_ns.load(r)),
    };
    let quota = options
        .build()
        .map_err(|e| corrupt(&format!("the region's quota is invalid: {e}")))?;
    check_quota(path, &quota)
        .map_err(|_| corrupt("the region's quota cannot be kept in shared memory"))?;
    Ok(Meta {
        slots,
        capacity,
        clock,
        origin: h.origin.load(r),
        secret: [h.secret[0].load(r), h.secret[1].load(r)],
        quota,
        boot: [h.boot[0].load(r), h.boot[1].load(r)],
        pid_ns: [h.pid_ns[0].load(r), h.pid_ns[1].load(r)],
    })
}

/// The boot this process runs in (Linux's `/proc/sys/kernel/random/boot_id`, 128 bits); 0
/// where it cannot be read.
fn this_boot() -> [u64; 2] {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        static BOOT: std::sync::OnceLock<[u64; 2]> = std::sync::OnceLock::new();
        *BOOT.get_or_init(|| {
            let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") else {
                return [0, 0];
            };
            let hex: String = text.trim().chars().filter(|&c| c != '-').collect();
            match u128::from_str_radix(&hex, 16) {
                Ok(v) if hex.len() == 32 => [(v >> 64) as u64, v as u64],
                _ => [0, 0],
            }
        })
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    {
        [0, 0]
    }
}

/// This process's PID namespace (the device and inode of `/proc/self/ns/pid`); 0 where it
/// cannot be read. Read at every open: a child may be in another namespace than its parent.
fn this_pid_ns() -> [u64; 2] {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self/ns/pid").map_or([0, 0], |m| [m.dev(), m.ino()])
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    {
        [0, 0]
    }
}

/// Whether the region of `meta` was made before the machine last booted (where both boots
/// are known).
fn before_this_boot(meta: &Meta) -> bool {
    let mine = this_boot();
    meta.boot != [0, 0] && mine != [0, 0] && meta.boot != mine
}

/// Refuses a region made in another PID namespace (another container, where both are known):
/// the liveness of the processes named in its locks and marks cannot be told from here, and
/// a live holder taken for dead would let two processes insert one key.
fn check_pid_ns(meta: &Meta, path: &Path) -> Result<(), Error> {
    let mine = this_pid_ns();
    if meta.pid_ns == [0, 0] || mine == [0, 0] || meta.pid_ns == mine {
        return Ok(());
    }
    Err(err(
        StoreErrorKind::Unsupported,
        path,
        "the region was made by a process in another PID namespace (another container): a \
         region's processes must see each other's process ids, to tell a dead lock holder from \
         a live one. Share one PID namespace (Kubernetes: shareProcessNamespace; docker run \
         --pid container:NAME), or give each container its own region (or Redis, for one limit \
         across them)",
    ))
}

#[cfg(all(test, target_os = "linux", not(miri), not(sluicegate_loom)))]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// A region's path in the temporary directory, its file removed when dropped.
    struct Name(PathBuf);

    impl Name {
        fn new(what: &str) -> Self {
            static N: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
            let n = N.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
            Self(std::env::temp_dir().join(format!(
                "sluicegate-region-{what}-{}-{n}",
                std::process::id()
            )))
        }
    }

    impl Drop for Name {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn open(name: &Name) -> Result<Region, Error> {
        let origin = |_| 0;
        Region::open(&Want {
            path: &name.0,
            quota: "5/s".parse().unwrap(),
            capacity: Some(8),
            default_capacity: 8,
            origin: &origin,
        })
    }

    /// Writes a fixed field of an open region as another process would have, its checksum
    /// made to match.
    fn rewrite(r: &Region, f: impl FnOnce(&Header)) {
        let h = r.header();
        f(h);
        h.checksum.store(checksum(h), Ordering::Relaxed);
    }

    /// A region that outlived a reboot (a file on a disk) holds readings of a clock that has
    /// restarted since: its buckets froze until the new uptime passed the old. The first
    /// opener of the new boot makes it anew in place (every bucket full, a new clock base and
    /// secret), once; a region of this boot is opened as it is.
    #[test]
    fn a_region_made_before_the_last_boot_is_made_anew_once() {
        assert_ne!(this_boot(), [0, 0], "this machine's boot id is readable");
        let name = Name::new("boot");
        let r = open(&name).unwrap();
        assert_eq!(r.meta.boot, this_boot());
        r.slots()[3].word.store(0x1234, Ordering::Relaxed);
        r.header().live.store(1, Ordering::Relaxed);
        let secret = r.meta.secret;
        rewrite(&r, |h| {
            h.boot[1].store(this_boot()[1] ^ 1, Ordering::Relaxed)
        });
        drop(r);

        let again = open(&name).unwrap();
        assert_eq!(again.meta.boot, this_boot());
        assert_ne!(again.meta.secret, secret, "made anew");
        assert_eq!(again.slots()[3].word.load(Ordering::Relaxed), 0);
        assert_eq!(again.header().live.load(Ordering::Relaxed), 0);
        // Made anew once: a second opener of this boot shares it as it is.
        again.slots()[3].word.store(0x99, Ordering::Relaxed);
        let third = open(&name).unwrap();
        assert_eq!(third.meta.secret, again.meta.secret);
        assert_eq!(third.slots()[3].word.load(Ordering::Relaxed), 0x99);

        // One of another quota is a mismatch, as in this boot: not made anew.
        rewrite(&third, |h| {
            h.boot[0].store(this_boot()[0] ^ 1, Ordering::Relaxed)
        });
        let origin = |_| 0;
        let other = Region::open(&Want {
            path: &name.0,
            quota: "6/s".parse().unwrap(),
            capacity: Some(8),
            default_capacity: 8,
            origin: &origin,
        });
        assert!(
            matches!(
                &other,
                Err(Error::Store {
                    kind: StoreErrorKind::Mismatch,
                    ..
                })
            ),
            "{:?}",
            other.err()
        );
        assert_eq!(third.slots()[3].word.load(Ordering::Relaxed), 0x99);
    }

    /// A region made in another PID namespace (another container sharing the file) is
    /// refused: the process ids in its locks and marks are not this namespace's, and a live
    /// holder taken for dead would let two processes insert one key.
    #[test]
    fn a_region_of_another_pid_namespace_is_refused() {
        assert_ne!(
            this_pid_ns(),
            [0, 0],
            "this process's PID namespace is readable"
        );
        let name = Name::new("pidns");
        let r = open(&name).unwrap();
        assert_eq!(r.meta.pid_ns, this_pid_ns());
        rewrite(&r, |h| {
            h.pid_ns[1].store(this_pid_ns()[1] ^ 1, Ordering::Relaxed)
        });
        let Err(e) = open(&name) else {
            panic!("opened another PID namespace's region")
        };
        assert!(
            matches!(
                &e,
                Error::Store {
                    kind: StoreErrorKind::Unsupported,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("PID namespace"), "{e}");
        // Its own namespace's opens it.
        rewrite(&r, |h| {
            h.pid_ns[1].store(this_pid_ns()[1], Ordering::Relaxed)
        });
        assert!(open(&name).is_ok());
    }

    /// A creator still sizing and allocating a large region (its sizing lock held, its claim
    /// of the initialisation not made yet) is waited for past the usual wait, not taken over.
    #[test]
    fn a_creator_still_sizing_is_waited_for() {
        let name = Name::new("sizing");
        let creator = create_new(&name.0).unwrap();
        assert_eq!(lock_sizing(&creator, &name.0).unwrap(), Sizing::Held);
        creator.set_len(HEADER_LEN as u64).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(INIT_WAIT + Duration::from_millis(700));
            // Not done: the creator gives up (as if it died after sizing the file).
            unlock_sizing(&creator);
            drop(creator);
        });
        let started = Instant::now();
        let r = open(&name).unwrap();
        assert!(
            started.elapsed() >= INIT_WAIT + Duration::from_millis(700),
            "taken over while its creator held the sizing lock"
        );
        assert_eq!(r.header().state.load(Ordering::Acquire), STATE_READY);
        release.join().unwrap();
    }
}
