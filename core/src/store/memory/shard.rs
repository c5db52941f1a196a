//! A shard: the pointer to its current table, the table's geometry published beside it under a
//! sequence lock (so that a lookup reads where to probe from the shard's own line), and the
//! lock that every change of the shard's set of entries holds.

use super::table::{Entry, Table, TableView, GROUP};
use crate::bucket::cell::Word;
use crate::sync::{fence, rcu, AtomicPtr, AtomicU64, AtomicUsize, Mutex, Ordering};
use core::ptr;

/// Bookkeeping under the shard's lock.
#[derive(Default)]
pub(super) struct ShardState {
    /// Slots not EMPTY in the current table (live + unlinked).
    pub(super) used: usize,
    /// Live entries in the current table.
    pub(super) live: usize,
    /// Where the next sampled eviction starts.
    pub(super) cursor: usize,
}

pub(super) struct Shard<K, W: Word> {
    pub(super) table: AtomicPtr<Table<K, W>>,
    /// The current table's geometry, published beside its pointer under a sequence lock, so
    /// that a lookup reads where to probe from this line instead of from the table's header
    /// behind the pointer: one dependent load fewer between the key's hash and its control
    /// word (measured in docs/KEYED.md). Even while stable, odd while a lock
    /// holder rewrites the fields ([`publish`](Self::publish), [`view`](Self::view)).
    pub(super) seq: AtomicU64,
    /// The table's control words (null with no table), their count, and its slots.
    pub(super) view_ctrl: AtomicPtr<AtomicU64>,
    pub(super) view_groups: AtomicUsize,
    pub(super) view_slots: AtomicPtr<Entry<K, W>>,
    pub(super) lock: Mutex<ShardState>,
    /// Under loom, retired tables are kept until the store is dropped (no epoch).
    #[cfg(sluicegate_loom)]
    #[allow(clippy::vec_box)] // the tables were boxes, and are dropped as boxes
    pub(super) graveyard: Mutex<Vec<Box<Table<K, W>>>>,
}

impl<K, W: Word> Shard<K, W> {
    pub(super) fn new() -> Self {
        Self {
            table: AtomicPtr::new(ptr::null_mut()),
            seq: AtomicU64::new(0),
            view_ctrl: AtomicPtr::new(ptr::null_mut()),
            view_groups: AtomicUsize::new(0),
            view_slots: AtomicPtr::new(ptr::null_mut()),
            lock: Mutex::new(ShardState::default()),
            #[cfg(sluicegate_loom)]
            graveyard: Mutex::new(Vec::new()),
        }
    }

    /// The current table, if any, valid while `_guard` is held.
    #[inline]
    pub(super) fn table<'g>(&self, _guard: &'g rcu::Guard) -> Option<&'g Table<K, W>> {
        let t = self.table.load(Ordering::Acquire);
        // SAFETY: a published table is freed only after it was unlinked and every guard
        // pinned before that was dropped (`retire`); ours is alive for 'g.
        unsafe { t.as_ref() }
    }

    /// Replaces the shard's table by `new` (null: none), returning the old one for the
    /// caller to retire. Lock holders only. The view's fields are rewritten under the
    /// sequence lock (a seqlock's writer: odd, Release fence, fields, even with Release), then
    /// the pointer is swapped; both before the old table is retired, so that the grace period
    /// that protects a reader of the old pointer protects a reader of the old view alike.
    pub(super) fn publish(&self, new: *mut Table<K, W>) -> *mut Table<K, W> {
        // SAFETY: `new` is null or a table built by the caller, not freed before it is
        // retired, which follows this publication.
        let (ctrl, groups, slots) = match unsafe { new.as_ref() } {
            Some(t) => (
                t.ctrl.as_ptr().cast_mut(),
                t.ctrl.len(),
                t.slots.as_ptr().cast_mut(),
            ),
            None => (ptr::null_mut(), 0, ptr::null_mut()),
        };
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.view_ctrl.store(ctrl, Ordering::Relaxed);
        self.view_groups.store(groups, Ordering::Relaxed);
        self.view_slots.store(slots, Ordering::Relaxed);
        self.seq.store(s.wrapping_add(2), Ordering::Release);
        self.table.swap(new, Ordering::AcqRel)
    }

    /// The current table as a lookup reads it, valid while `_guard` is held: the view's
    /// fields, read as a seqlock's reader does (sequence with Acquire, fields, Acquire fence,
    /// sequence again). `None` with no table, and when read while a lock holder rewrites the
    /// fields: the caller then goes on under the shard's lock, as for an absent key.
    ///
    /// Why the view outlives nothing it names: validated, its fields all come from one
    /// [`publish`](Self::publish) of a table `t`. If a later publish replaced `t`, it wrote
    /// the view before the heavy fence of `t`'s retirement, and this section read the older
    /// fields after its own light fence: as for the table pointer (crate::sync::rcu), the
    /// retirement's snapshot then saw this section open, and `t` is freed only after `guard`
    /// is dropped.
    #[inline(always)]
    pub(super) fn view<'g>(&self, _guard: &'g rcu::Guard) -> Option<TableView<'g, K, W>> {
        let s1 = self.seq.load(Ordering::Acquire);
        let ctrl = self.view_ctrl.load(Ordering::Relaxed);
        let groups = self.view_groups.load(Ordering::Relaxed);
        let slots = self.view_slots.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        let s2 = self.seq.load(Ordering::Relaxed);
        if s1 != s2 || s1 & 1 != 0 || ctrl.is_null() {
            return None;
        }
        // SAFETY: validated by the sequence, the fields describe one published table: its
        // `groups` control words at `ctrl` and `GROUP * groups` slots at `slots`, alive while
        // `guard` is held (above), and written only through atomics and the key cells that
        // lookups read as before.
        unsafe {
            Some(TableView {
                ctrl: core::slice::from_raw_parts(ctrl, groups),
                slots: core::slice::from_raw_parts(slots, groups * GROUP),
            })
        }
    }
}

impl<K, W: Word> Drop for Shard<K, W> {
    fn drop(&mut self) {
        let t = self.table.load(Ordering::Relaxed);
        if !t.is_null() {
            // SAFETY: `&mut self`: no reader is left, and the pointer came from Box::into_raw.
            drop(unsafe { Box::from_raw(t) });
        }
    }
}

#[cfg(all(test, sluicegate_loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    pub(super) fn geometry(t: *mut Table<u64, u64>) -> (usize, usize, usize) {
        // SAFETY: the tables of the model live until its end.
        let t = unsafe { &*t };
        (
            t.ctrl.as_ptr() as usize,
            t.ctrl.len(),
            t.slots.as_ptr() as usize,
        )
    }

    /// A lookup's view of a shard, read while a lock holder publishes a table of another
    /// size, is `None` or exactly one published table's geometry, never a mix of two (the
    /// sequence lock of `Shard::publish` and `Shard::view`). Without the sequence check the
    /// reader can pair one table's control words with the other's group count.
    #[test]
    pub(super) fn a_shard_view_is_never_torn() {
        loom::model(|| {
            let shard = Arc::new(Shard::<u64, u64>::new());
            let a = Box::into_raw(Table::<u64, u64>::new(GROUP));
            let b = Box::into_raw(Table::<u64, u64>::new(4 * GROUP));
            let (ga, gb) = (geometry(a), geometry(b));
            assert!(shard.publish(a).is_null());
            let writer = {
                let shard = shard.clone();
                // The pointer travels as an integer: the table outlives the model's threads.
                let b = b as usize;
                loom::thread::spawn(move || shard.publish(b as *mut Table<u64, u64>) as usize)
            };
            let guard = rcu::read();
            if let Some(p) = shard.view(&guard) {
                let g = (
                    p.ctrl.as_ptr() as usize,
                    p.ctrl.len(),
                    p.slots.as_ptr() as usize,
                );
                assert!(g == ga || g == gb, "a torn view: {g:?}");
                assert_eq!(p.slots.len(), GROUP * p.ctrl.len());
            }
            assert_eq!(writer.join().unwrap(), a as usize);
            assert_eq!(shard.publish(ptr::null_mut()), b);
            // SAFETY: both came from Box::into_raw and are unpublished; no reader is left.
            unsafe {
                drop(Box::from_raw(a));
                drop(Box::from_raw(b));
            }
        });
    }
}
