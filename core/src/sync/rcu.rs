//! Read sections for the keyed store's tables: memory unlinked while a thread is inside a
//! section is freed only after that section ends.
//!
//! # Protocol (user-space RCU, "memb" flavour)
//!
//! Every thread that reads owns a [`Record`] (registered once, cached in a thread-local): a
//! counter that is odd while the thread is inside a read section.
//!
//! * **Reader**: `ctr += 1` (now odd; a plain store, only the owner writes it), a *light* fence,
//!   then it loads the shared pointers and reads; at the end `ctr += 1` (even) with Release.
//! * **Writer** (holding the shard's lock): unlinks the old table (swaps the shard's pointer),
//!   runs a *heavy* fence, then snapshots the counters that are odd. The old table is freed
//!   once every counter in the snapshot has moved on (see [`Domain::passed`]).
//!
//! The light and heavy fences together act as a pair of `SeqCst` fences (the store-buffering
//! pattern): either the writer's snapshot sees a reader's odd counter (and waits for it), or
//! that reader's pointer load comes after the swap and finds the new table. Nested sections
//! (a section opened inside another on the same thread) are free: the counter is already odd.
//!
//! # Why not crossbeam-epoch
//!
//! crossbeam-epoch's pin issues a full fence (a locked instruction on x86) on every lookup,
//! and calls out of line into its thread-local handle: a third of a keyed decision here
//! (docs/DESIGN-NOTES.md, note 6), and more with many keys, where the fence also stops the core from overlapping one
//! lookup's cache miss with the next. With `membarrier(2)` (Linux 4.14+), the reader's fence is
//! a compiler fence only: the writer's system call makes every running thread of the process
//! execute a full barrier instead. Writers are rare (a table is replaced when it grows,
//! shrinks or compacts), so the reader's path gets the saving and the writer pays microseconds.
//! This is the same division of labour as liburcu's membarrier flavour and folly's
//! asymmetric fences. Where `membarrier` is missing or refused (other systems, old kernels,
//! seccomp), the light fence is a real `SeqCst` fence and the heavy one an ordinary fence:
//! the classic symmetric protocol, as fast as crossbeam-epoch's.
//!
//! A table is freed by the next writer that finds its snapshot passed, with no shard lock
//! held (see `store::memory::Core::collect`), or with the limiter; a thread stalled inside a section
//! delays only the tables retired while it was there.
//!
//! # Proof
//!
//! The loom model at the end of this file runs the real `Domain` code, with both fences as
//! `SeqCst` fences (loom has no `membarrier`), and checks with loom's cell tracking that no
//! reader touches a table after it was freed; it fails if the light fence is dropped.

// Under loom the keyed store keeps retired tables until it is dropped; only the model below
// uses this module there.
#![cfg_attr(sluicegate_loom, allow(dead_code))]

use crate::sync::{fence, AtomicBool, AtomicPtr, AtomicU64, Ordering};
use core::ptr;
use crossbeam_utils::CachePadded;

/// One thread's read-section counter (odd: inside a section).
pub(crate) struct Record {
    ctr: AtomicU64,
    /// Whether the reader's fence is a compiler fence only (the writers' `membarrier` covers
    /// it). Decided once per process before the first record is made, so it is the same in
    /// every record; kept here, beside the counter the reader loads anyway, so that entering
    /// a section reads no other line (a global flag cost a load through the GOT and a branch).
    light: bool,
    in_use: AtomicBool,
    /// The next record of the domain's list; written before the record is published.
    next: AtomicPtr<CachePadded<Record>>,
}

impl Record {
    /// Opens a read section; returns what [`exit`](Self::exit) must store, or 0 for a section
    /// nested in one this thread already has open.
    #[inline]
    pub(crate) fn enter(&self) -> u64 {
        // Only this record's owner writes `ctr`: a Relaxed load reads its own last store.
        let c = self.ctr.load(Ordering::Relaxed);
        if c & 1 == 1 {
            return 0;
        }
        self.ctr.store(c + 1, Ordering::Relaxed);
        if self.light {
            core::sync::atomic::compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
        c + 2
    }

    /// Closes the section [`enter`](Self::enter) opened. Release: everything the section read
    /// happens before a writer that sees the new count frees anything.
    #[inline]
    pub(crate) fn exit(&self, next: u64) {
        if next != 0 {
            self.ctr.store(next, Ordering::Release);
        }
    }
}

/// The records of every thread that ever read (reused after a thread exits).
pub(crate) struct Domain {
    head: AtomicPtr<CachePadded<Record>>,
}

/// The counters that were odd when a table was retired.
pub(crate) struct Snapshot(Vec<(*const Record, u64)>);

// SAFETY: the pointers name records that live as long as their domain (never freed before
// it), and are only used to load their atomic counters.
unsafe impl Send for Snapshot {}

impl Domain {
    #[cfg(not(sluicegate_loom))]
    pub(crate) const fn new() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    #[cfg(sluicegate_loom)]
    pub(crate) fn new() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// A record for the calling thread: a released one if any, else a new one.
    pub(crate) fn register(&self) -> &Record {
        init_mode();
        let mut p = self.head.load(Ordering::Acquire);
        // SAFETY: records are published (Release) fully initialised and freed only with the
        // domain, which `&self` keeps alive.
        while let Some(r) = unsafe { p.as_ref() } {
            if !r.in_use.load(Ordering::Relaxed)
                && r.in_use
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return r;
            }
            p = r.next.load(Ordering::Acquire);
        }
        let r = Box::into_raw(Box::new(CachePadded::new(Record {
            ctr: AtomicU64::new(0),
            light: light_fence_only(),
            in_use: AtomicBool::new(true),
            next: AtomicPtr::new(ptr::null_mut()),
        })));
        // SAFETY: `r` is valid (just allocated) and freed only with the domain.
        let rec: &Record = unsafe { &*r };
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            // Ours until the CAS below publishes it.
            rec.next.store(head, Ordering::Relaxed);
            match self
                .head
                .compare_exchange(head, r, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
        rec
    }

    /// Gives a record back (its thread will not use it again; its counter is even).
    pub(crate) fn release(&self, r: &Record) {
        r.in_use.store(false, Ordering::Release);
    }

    /// Call after unlinking shared memory: the heavy fence, then the counters of the sections
    /// open now. `None` if the heavy fence failed: the memory must then never be freed.
    pub(crate) fn snapshot(&self) -> Option<Snapshot> {
        if !heavy_fence() {
            return None;
        }
        let mut open = Vec::new();
        let mut p = self.head.load(Ordering::Acquire);
        // SAFETY: as in `register`.
        while let Some(r) = unsafe { p.as_ref() } {
            let c = r.ctr.load(Ordering::Acquire);
            if c & 1 == 1 {
                open.push((&**r as *const Record, c));
            }
            p = r.next.load(Ordering::Acquire);
        }
        Some(Snapshot(open))
    }

    /// Whether every section open at `s` has ended: memory unlinked before `s` was taken can be
    /// freed (Acquire: the sections' reads happen before the free).
    pub(crate) fn passed(&self, s: &Snapshot) -> bool {
        s.0.iter().all(|&(r, c)| {
            // SAFETY: records live as long as the domain, and the snapshot came from it.
            unsafe { &*r }.ctr.load(Ordering::Acquire) != c
        })
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        let mut p = self.head.load(Ordering::Relaxed);
        while !p.is_null() {
            // SAFETY: `&mut self`: no thread uses the domain any more; every record came from
            // Box::into_raw and is in the list once.
            let r = unsafe { Box::from_raw(p) };
            p = r.next.load(Ordering::Relaxed);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fences.
// ---------------------------------------------------------------------------------------------

/// Whether the reader's fence can be a compiler fence only (the writer's `membarrier`
/// covers it); else it is a `SeqCst` fence. Fixed once `init_mode` has run.
fn light_fence_only() -> bool {
    #[cfg(all(target_os = "linux", not(sluicegate_loom), not(miri)))]
    if membarrier::asymmetric() {
        return true;
    }
    false
}

/// The writer's fence; `false` if it could not be issued.
fn heavy_fence() -> bool {
    #[cfg(all(target_os = "linux", not(sluicegate_loom), not(miri)))]
    if membarrier::asymmetric() {
        return membarrier::barrier();
    }
    fence(Ordering::SeqCst);
    true
}

/// Decides once per process whether the asymmetric fences are available.
fn init_mode() {
    #[cfg(all(target_os = "linux", not(sluicegate_loom), not(miri)))]
    membarrier::init();
}

#[cfg(all(target_os = "linux", not(sluicegate_loom), not(miri)))]
mod membarrier {
    use crate::sync::real::{AtomicBool, Ordering};

    // From linux/membarrier.h (stable kernel ABI).
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    static ASYMMETRIC: AtomicBool = AtomicBool::new(false);
    static DONE: AtomicBool = AtomicBool::new(false);

    fn syscall(cmd: libc::c_long) -> bool {
        // SAFETY: membarrier takes (cmd, flags, cpu_id) integers and touches no memory of
        // ours; an unknown command or a refused call returns -1.
        unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                cmd,
                0 as libc::c_long,
                0 as libc::c_long,
            ) == 0
        }
    }

    /// Registers the process for expedited private barriers. Every reader passes here (in
    /// `Domain::register`) before its first section: it returns once the flag is set if the
    /// registration succeeds, by this thread or by one whose `DONE` it read (Acquire), so a
    /// reader never skips its fence while a writer relies on it. Threads that come first
    /// together each register (idempotent, and alike: the environment is the process's).
    /// Lock-free: a `OnceLock` that a thread was initialising at a `fork()` would block the
    /// child's first reader for good. (A forked child inherits the registration.)
    pub(super) fn init() {
        if DONE.load(Ordering::Acquire) {
            return;
        }
        if std::env::var_os("SLUICEGATE_NO_MEMBARRIER").is_none()
            && syscall(CMD_REGISTER_PRIVATE_EXPEDITED)
        {
            ASYMMETRIC.store(true, Ordering::Release);
        }
        DONE.store(true, Ordering::Release);
    }

    #[inline(always)]
    pub(super) fn asymmetric() -> bool {
        ASYMMETRIC.load(Ordering::Relaxed)
    }

    /// Every running thread of the process executes a full memory barrier before this
    /// returns `true`.
    pub(super) fn barrier() -> bool {
        syscall(CMD_PRIVATE_EXPEDITED)
    }
}

// ---------------------------------------------------------------------------------------------
// The process-wide domain, and the calling thread's record.
// ---------------------------------------------------------------------------------------------

#[cfg(not(sluicegate_loom))]
mod global {
    use super::{Domain, Record};
    use core::cell::Cell;

    pub(super) static DOMAIN: Domain = Domain::new();

    thread_local! {
        /// The thread's record, once registered. No destructor, so reading it is one load.
        static RECORD: Cell<Option<&'static Record>> = const { Cell::new(None) };
        /// Registered with the record: gives it back when the thread exits.
        static RELEASE: Release = const { Release };
    }

    struct Release;

    impl Drop for Release {
        fn drop(&mut self) {
            if let Ok(Some(r)) = RECORD.try_with(|c| c.take()) {
                DOMAIN.release(r);
            }
        }
    }

    /// The calling thread's record, and whether it must be given back after this one use
    /// (the thread is exiting: its thread-locals are being destroyed).
    #[inline]
    pub(super) fn record() -> (&'static Record, bool) {
        match RECORD.try_with(Cell::get) {
            Ok(Some(r)) => (r, false),
            _ => register(),
        }
    }

    /// Whether this thread's record (if it has one) is inside a section.
    pub(super) fn in_section() -> bool {
        match RECORD.try_with(Cell::get) {
            Ok(Some(r)) => r.ctr.load(crate::sync::Ordering::Relaxed) & 1 == 1,
            _ => false,
        }
    }

    #[cold]
    fn register() -> (&'static Record, bool) {
        let r = DOMAIN.register();
        // Keep it only if the release hook can still be registered for this thread.
        if RELEASE.try_with(|_| ()).is_ok() && RECORD.try_with(|c| c.set(Some(r))).is_ok() {
            (r, false)
        } else {
            (r, true)
        }
    }
}

/// An open read section of the process-wide domain (not `Send`: it is its thread's).
#[cfg(not(sluicegate_loom))]
pub(crate) struct Guard {
    record: &'static Record,
    /// What `Record::exit` stores (even, or 0 for a nested section), plus 1 when the record
    /// was registered for this section alone and is given back after it.
    exit: u64,
    _not_send: core::marker::PhantomData<*const ()>,
}

/// Opens a read section: shared memory loaded inside it stays allocated until it is dropped.
#[cfg(not(sluicegate_loom))]
#[inline]
pub(crate) fn read() -> Guard {
    let (record, release) = global::record();
    Guard {
        record,
        exit: record.enter() | u64::from(release),
        _not_send: core::marker::PhantomData,
    }
}

#[cfg(not(sluicegate_loom))]
impl Guard {
    /// Closes a section whose record was registered for it alone (its thread is exiting).
    #[cold]
    fn exit_and_release(&self) {
        self.record.exit(self.exit & !1);
        global::DOMAIN.release(self.record);
    }
}

#[cfg(not(sluicegate_loom))]
impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        // 0: nested in a section this thread has open, nothing to do.
        if self.exit != 0 {
            if self.exit & 1 == 0 {
                self.record.exit(self.exit);
            } else {
                self.exit_and_release();
            }
        }
    }
}

/// Under loom a read section is a stand-in: the stores keep retired memory until they are
/// dropped (every model is short), their models check the stores' own protocols, and this
/// module's model checks the sections themselves.
#[cfg(sluicegate_loom)]
pub(crate) struct Guard(());

/// Nothing to close; a `Drop` all the same, so that the stores' `drop(guard)` (which ends a
/// real section early) means the same under loom and lints clean there.
#[cfg(sluicegate_loom)]
impl Drop for Guard {
    fn drop(&mut self) {}
}

/// The loom stand-in for [`read`]: opens nothing.
#[cfg(sluicegate_loom)]
pub(crate) fn read() -> Guard {
    Guard(())
}

/// [`Domain::snapshot`] of the process-wide domain.
#[cfg(not(sluicegate_loom))]
pub(crate) fn snapshot() -> Option<Snapshot> {
    global::DOMAIN.snapshot()
}

/// [`Domain::passed`] of the process-wide domain.
#[cfg(not(sluicegate_loom))]
pub(crate) fn passed(s: &Snapshot) -> bool {
    global::DOMAIN.passed(s)
}

/// Waits until every read section open now (of any thread) has ended: a grace period, for a
/// writer that has just made new sections avoid what it is about to change. `false` if the
/// heavy fence could not be issued (then nothing can be waited for). Never call it inside a
/// read section ([`in_section`]): it would wait for itself.
#[cfg(not(sluicegate_loom))]
pub(crate) fn synchronize() -> bool {
    let Some(s) = snapshot() else {
        return false;
    };
    while !passed(&s) {
        std::thread::yield_now();
    }
    true
}

/// Whether the calling thread is inside a read section.
#[cfg(not(sluicegate_loom))]
pub(crate) fn in_section() -> bool {
    global::in_section()
}

#[cfg(all(test, not(sluicegate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_section_open_at_the_snapshot_holds_it_until_it_ends() {
        let d = Domain::new();
        let r = d.register();
        let exit = r.enter();
        assert_ne!(exit, 0);
        let nested = r.enter();
        assert_eq!(nested, 0, "a nested section changes nothing");
        let s = d.snapshot().expect("fence");
        assert!(!d.passed(&s));
        r.exit(nested);
        assert!(!d.passed(&s), "the outer section is still open");
        r.exit(exit);
        assert!(d.passed(&s));
        // A section opened after the snapshot does not hold it.
        let again = r.enter();
        assert!(d.passed(&s));
        r.exit(again);
        // Closed sections are not in a snapshot at all.
        assert!(d.passed(&d.snapshot().expect("fence")));
    }

    #[test]
    fn released_records_are_reused() {
        let d = Domain::new();
        let a = d.register() as *const Record;
        // SAFETY: `a` lives as long as `d`.
        d.release(unsafe { &*a });
        assert_eq!(d.register() as *const Record, a);
        assert_ne!(d.register() as *const Record, a, "in use: a new record");
    }

    #[test]
    fn a_section_opened_while_the_thread_exits_still_works() {
        struct Late;
        impl Drop for Late {
            fn drop(&mut self) {
                // Thread-locals are being destroyed: the record may be gone; a section still
                // opens (on a record registered for it alone) and closes.
                let g = read();
                assert_eq!(g.record.ctr.load(Ordering::Relaxed) & 1, 1);
            }
        }
        thread_local! { static LATE: Late = const { Late }; }
        std::thread::spawn(|| {
            drop(read()); // registers the record and its release hook first
            LATE.with(|_| ());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn threads_get_their_own_records_and_give_them_back() {
        let g = read();
        let mine = g.record as *const Record;
        let other = std::thread::spawn(|| read().record as *const Record as usize)
            .join()
            .unwrap();
        assert_ne!(other, mine as usize);
        drop(g);
        let s = snapshot().expect("fence");
        // Our section closed; the other thread exited.
        assert!(s.0.iter().all(|&(r, _)| r != mine));
    }
}

#[cfg(all(test, sluicegate_loom))]
mod loom_models {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::Arc;

    /// The writer's side once the old table (cell 0) is unlinked: snapshot the open sections,
    /// wait for them to pass, then "free" the table (write its cell).
    fn free_old_table(d: &Domain, tables: &[UnsafeCell<u64>; 2]) {
        let s = d.snapshot().expect("fence");
        while !d.passed(&s) {
            loom::thread::yield_now();
        }
        tables[0].with_mut(|p| {
            // SAFETY: the "free" of the old table, after its snapshot passed.
            unsafe { *p = 0 }
        });
    }

    /// A reader looks up the current "table" (one of two cells) and reads it inside a section;
    /// a writer swaps the current table, snapshots, waits for the snapshot to pass and
    /// "frees" the old one (writes its cell). loom reports a causality violation if the free
    /// can race the read.
    #[test]
    fn no_read_of_a_freed_table() {
        loom::model(|| {
            let d = Arc::new(Domain::new());
            let tables = Arc::new([UnsafeCell::new(1u64), UnsafeCell::new(2u64)]);
            let current = Arc::new(AtomicUsize::new(0));

            let reader = {
                let (d, tables, current) = (d.clone(), tables.clone(), current.clone());
                loom::thread::spawn(move || {
                    let r = d.register();
                    let exit = r.enter();
                    let t = current.load(Ordering::Acquire);
                    let v = tables[t].with(|p| {
                        // SAFETY: a read of the table the section found; loom checks that
                        // it never races the free below.
                        unsafe { *p }
                    });
                    assert!(v != 0, "read a freed table");
                    r.exit(exit);
                    d.release(r);
                })
            };

            current.store(1, Ordering::SeqCst);
            free_old_table(&d, &tables);
            reader.join().unwrap();
        });
    }

    /// The same, with the reader finding the table through a view published under a
    /// sequence lock (as `keyed::Shard::publish` and `Shard::view` do: Relaxed fields between
    /// the sequence's stores, read between its loads) instead of one pointer.
    #[test]
    fn no_read_of_a_freed_table_through_a_seqlock_view() {
        loom::model(|| {
            let d = Arc::new(Domain::new());
            let tables = Arc::new([UnsafeCell::new(1u64), UnsafeCell::new(2u64)]);
            // (seq, table index, a second field of the same table: its index plus 10)
            let view = Arc::new((AtomicU64::new(0), AtomicUsize::new(0), AtomicUsize::new(10)));

            let reader = {
                let (d, tables, view) = (d.clone(), tables.clone(), view.clone());
                loom::thread::spawn(move || {
                    let r = d.register();
                    let exit = r.enter();
                    let s1 = view.0.load(Ordering::Acquire);
                    let t = view.1.load(Ordering::Relaxed);
                    let u = view.2.load(Ordering::Relaxed);
                    fence(Ordering::Acquire);
                    let s2 = view.0.load(Ordering::Relaxed);
                    if s1 == s2 && s1 & 1 == 0 {
                        assert_eq!(u, t + 10, "a torn view");
                        let v = tables[t].with(|p| {
                            // SAFETY: a read of the table the view named; loom checks that
                            // it never races the free below.
                            unsafe { *p }
                        });
                        assert!(v != 0, "read a freed table");
                    }
                    r.exit(exit);
                    d.release(r);
                })
            };

            view.0.store(1, Ordering::Relaxed);
            fence(Ordering::Release);
            view.1.store(1, Ordering::Relaxed);
            view.2.store(11, Ordering::Relaxed);
            view.0.store(2, Ordering::Release);
            free_old_table(&d, &tables);
            reader.join().unwrap();
        });
    }
}
