//! The open-addressing table of one shard: control bytes in SWAR groups of eight beside the
//! entries (a state word and a key), and the lookup that probes it.

use crate::bucket::cell::Word;
use crate::sync::{AtomicU64, Ordering};
use core::borrow::Borrow;
use core::cell::UnsafeCell;
use core::mem::MaybeUninit;

// ---------------------------------------------------------------------------------------------
// Control bytes.
// ---------------------------------------------------------------------------------------------

// Control bytes, eight to a group word. A slot's byte goes EMPTY -> LIVE -> TOMB or MOVED and
// never back, so a key is always found before the first group with an EMPTY byte on its probe
// sequence, and a key, once written, is never overwritten while its table lives.
pub(super) const EMPTY: u8 = 0;
/// Unlinked; the table still owns the key (dropped with the table).
pub(super) const TOMB: u8 = 1;
/// Unlinked; the key was moved (bitwise) into a newer table, which owns it.
pub(super) const MOVED: u8 = 2;
/// Set in every live control byte, whose other 7 bits are hash bits.
pub(super) const LIVE: u8 = 0x80;

/// Slots per group: one `u64` of control bytes, compared with one SWAR step.
pub(super) const GROUP: usize = 8;
/// The first table of a shard: one group.
pub(super) const MIN_CAP: usize = GROUP;

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// The control byte of a live entry: the hash's top 7 bits (the group and shard come from
/// other bits), with LIVE set.
#[inline]
pub(super) fn tag(h: u64) -> u8 {
    ((h >> 57) as u8) | LIVE
}

/// A bit (the byte's top bit) for exactly the bytes of `g` equal to `b` (SWAR: adding 0x7f to
/// a byte's low seven bits carries into its top bit iff they are not all zero; no borrow
/// crosses bytes, so there are no false matches).
#[inline]
fn match_byte(g: u64, b: u8) -> u64 {
    const LOW7: u64 = !HI;
    let x = g ^ (LO * u64::from(b));
    !(((x & LOW7).wrapping_add(LOW7)) | x | LOW7)
}

pub(super) struct Entry<K, W: Word> {
    pub(super) word: W::Atomic,
    /// Initialised iff the control byte is LIVE or TOMB (or MOVED, as a stale bitwise copy
    /// that only readers that entered before the move may still compare).
    pub(super) key: UnsafeCell<MaybeUninit<K>>,
}

/// An open-addressing table probed group by group: `ctrl[g]` holds the control bytes of
/// `slots[8g..8g + 8]`. A lookup loads one control word, compares the key only where the tag
/// matches (almost always once, at the first group), and stops at the first group with an
/// EMPTY byte: its branches are predictable, so the out-of-order core overlaps consecutive
/// lookups' cache misses (a slot-by-slot linear probe mispredicts on every collision).
pub(super) struct Table<K, W: Word> {
    pub(super) ctrl: Box<[AtomicU64]>,
    pub(super) slots: Box<[Entry<K, W>]>,
}

impl<K, W: Word> Table<K, W> {
    /// A table of at least `cap` slots (a whole number of groups).
    pub(super) fn new(cap: usize) -> Box<Self> {
        let groups = cap.div_ceil(GROUP).max(1);
        let ctrl = (0..groups).map(|_| AtomicU64::new(0)).collect();
        let slots = (0..groups * GROUP)
            .map(|_| Entry {
                word: W::new_atomic(0),
                key: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect();
        Box::new(Self { ctrl, slots })
    }

    #[inline]
    pub(super) fn cap(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    pub(super) fn entry(&self, i: usize) -> &Entry<K, W> {
        &self.slots[i]
    }

    /// Slot `i`'s control byte (Relaxed: for lock holders, who wrote every byte themselves).
    #[inline]
    pub(super) fn ctrl(&self, i: usize) -> u8 {
        self.ctrl_ordered(i, Ordering::Relaxed)
    }

    /// Slot `i`'s control byte, loaded with `order` (Acquire for readers without the lock: a
    /// LIVE byte's key is then visible, as in `find`).
    #[inline]
    pub(super) fn ctrl_ordered(&self, i: usize, order: Ordering) -> u8 {
        (self.ctrl[i / GROUP].load(order) >> (8 * (i % GROUP))) as u8
    }

    /// Sets slot `i`'s control byte. Lock holders only (the one writer of the table's control
    /// words), so the read-modify-write of the group word loses nothing. Release: a reader
    /// that sees LIVE (Acquire) sees the key and the word written before.
    #[inline]
    pub(super) fn set_ctrl(&self, i: usize, b: u8) {
        let g = &self.ctrl[i / GROUP];
        let shift = 8 * (i % GROUP);
        let v = g.load(Ordering::Relaxed);
        g.store(
            (v & !(0xff << shift)) | (u64::from(b) << shift),
            Ordering::Release,
        );
    }

    /// The table as a lookup sees it.
    #[inline]
    pub(super) fn view(&self) -> TableView<'_, K, W> {
        TableView {
            ctrl: &self.ctrl,
            slots: &self.slots,
        }
    }

    /// [`TableView::home`] of this table.
    #[inline]
    pub(super) fn home(&self, h: u64) -> usize {
        self.view().home(h)
    }

    /// [`TableView::find`] in this table.
    #[inline]
    pub(super) fn find<Q>(&self, h: u64, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.view().find(h, key)
    }

    /// The first EMPTY slot on `h`'s probe sequence (lock holders; the table is not full).
    pub(super) fn free_slot(&self, h: u64) -> usize {
        let groups = self.ctrl.len();
        let mut g = self.home(h);
        loop {
            let m = match_byte(self.ctrl[g].load(Ordering::Relaxed), EMPTY);
            if m != 0 {
                return g * GROUP + (m.trailing_zeros() / 8) as usize;
            }
            g += 1;
            if g == groups {
                g = 0;
            }
        }
    }
}

/// What a lookup reads of a table: its control words and its slots (`slots.len()` is
/// `GROUP * ctrl.len()`, and `ctrl` is never empty). Borrowed from a [`Table`], or from the
/// view its shard publishes ([`Shard::view`]).
pub(super) struct TableView<'a, K, W: Word> {
    pub(super) ctrl: &'a [AtomicU64],
    pub(super) slots: &'a [Entry<K, W>],
}

impl<K, W: Word> Clone for TableView<'_, K, W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, W: Word> Copy for TableView<'_, K, W> {}

impl<'a, K, W: Word> TableView<'a, K, W> {
    /// The entry of a slot [`find`](Self::find) returned (unchecked: `find` returns only
    /// indexes of these slots).
    #[inline]
    pub(super) fn found(self, i: usize) -> &'a Entry<K, W> {
        debug_assert!(i < self.slots.len());
        // SAFETY: `find` returns only indexes of this table's slots.
        unsafe { self.slots.get_unchecked(i) }
    }

    /// The first group to probe: a multiply-shift of the hash's low 32 bits.
    #[inline]
    pub(super) fn home(self, h: u64) -> usize {
        ((u64::from(h as u32) * self.ctrl.len() as u64) >> 32) as usize
    }

    /// Asks the cache for group `g`'s entries while its control word is being loaded, so
    /// that a lookup waits for one memory access instead of two in a row (a hint: no effect
    /// on what is read).
    #[inline(always)]
    pub(super) fn prefetch_group(self, g: usize) {
        #[cfg(all(target_arch = "x86_64", not(sluicegate_loom), not(miri)))]
        {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let first = self.slots.as_ptr().wrapping_add(g * GROUP).cast::<i8>();
            let bytes = GROUP * core::mem::size_of::<Entry<K, W>>();
            let mut off = 0;
            while off < bytes {
                // SAFETY: a prefetch never faults and reads nothing; the address is within (or
                // one group past the end of) this table's slots.
                unsafe { _mm_prefetch(first.wrapping_add(off), _MM_HINT_T0) };
                off += 64;
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(sluicegate_loom), not(miri))))]
        let _ = g;
    }

    /// Asks the cache for `h`'s home group (its control word and its entries), where a
    /// lookup of that hash almost always ends (a hint: no effect on what is read).
    #[inline(always)]
    pub(super) fn prefetch(self, h: u64) {
        let g = self.home(h);
        #[cfg(all(target_arch = "x86_64", not(sluicegate_loom), not(miri)))]
        {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let word = self.ctrl.as_ptr().wrapping_add(g).cast::<i8>();
            // SAFETY: a prefetch never faults and reads nothing; the address is this table's
            // control word `g` (`home` maps into 0..groups).
            unsafe { _mm_prefetch(word, _MM_HINT_T0) };
        }
        self.prefetch_group(g);
    }

    /// Probes for `key`; returns its slot, live as of its control word's load.
    ///
    /// The home group inline, the rest of the probe out of line: at a load of at most 7/8 a
    /// lookup almost always ends in its home group (a match, or an EMPTY byte), and without
    /// the probe loop's bookkeeping the hot path keeps its values in registers.
    #[inline]
    pub(super) fn find<Q>(self, h: u64, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let want = tag(h);
        let g = self.home(h);
        self.prefetch_group(g);
        // SAFETY: a table has at least one group (`new`) and `home` maps into 0..groups.
        let word = unsafe { self.ctrl.get_unchecked(g) }.load(Ordering::Acquire);
        if let Some(i) = self.match_group(g, word, want, key) {
            return Some(i);
        }
        if match_byte(word, EMPTY) != 0 {
            return None;
        }
        Self::find_after(self.ctrl, self.slots.as_ptr(), g, want, key)
    }

    /// [`find`](Self::find) past a full home group `first`: the following groups, wrapping,
    /// up to the first one with an EMPTY byte. The view comes in as its parts, in registers:
    /// passed whole, it was written to the stack on every lookup for this rare call.
    #[cold]
    #[inline(never)]
    pub(super) fn find_after<Q>(
        ctrl: &'a [AtomicU64],
        slots: *const Entry<K, W>,
        first: usize,
        want: u8,
        key: &Q,
    ) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        // SAFETY: `slots` is the slots' pointer of the view that `ctrl` came from: its
        // `GROUP * ctrl.len()` entries live for 'a.
        let slots = unsafe { core::slice::from_raw_parts(slots, GROUP * ctrl.len()) };
        let p = TableView { ctrl, slots };
        let groups = ctrl.len();
        let mut g = first;
        for _ in 1..groups {
            g += 1;
            if g == groups {
                g = 0;
            }
            let word = p.ctrl[g].load(Ordering::Acquire);
            if let Some(i) = p.match_group(g, word, want, key) {
                return Some(i);
            }
            if match_byte(word, EMPTY) != 0 {
                return None;
            }
        }
        None
    }

    /// The slot of group `g` (whose control word, loaded with Acquire, is `word`) holding
    /// `key`, among those tagged `want`.
    #[inline(always)]
    pub(super) fn match_group<Q>(self, g: usize, word: u64, want: u8, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let mut m = match_byte(word, want);
        while m != 0 {
            let b = (m.trailing_zeros() / 8) as usize;
            m &= m - 1;
            let i = g * GROUP + b;
            // SAFETY: `slots` has GROUP slots per control word, so `i` is in bounds. This
            // slot's control byte, as loaded (Acquire) in `word`, is LIVE: it was stored
            // (Release) after the key was written, and keys are never overwritten while the
            // table lives, which it does while our caller's read section (or the shard lock)
            // lasts. A key moved to a newer table since is a bitwise copy whose owner is kept
            // alive by the same section (see `Core::rebuild`).
            let k = unsafe { (*self.slots.get_unchecked(i).key.get()).assume_init_ref() };
            if k.borrow() == key {
                return Some(i);
            }
        }
        None
    }
}

impl<K, W: Word> Drop for Table<K, W> {
    fn drop(&mut self) {
        for i in 0..self.slots.len() {
            let c = self.ctrl(i);
            if c == TOMB || c & LIVE != 0 {
                // SAFETY: LIVE and TOMB slots own an initialised key (MOVED ones do not), and
                // `&mut self` means no reader is left.
                unsafe { self.slots[i].key.get_mut().assume_init_drop() };
            }
        }
    }
}

#[cfg(test)]
mod match_tests {
    use super::*;

    #[test]
    pub(super) fn match_byte_flags_exactly_the_equal_bytes() {
        let naive = |g: u64, b: u8| {
            (0..8).fold(0u64, |m, i| {
                if (g >> (8 * i)) as u8 == b {
                    m | (0x80 << (8 * i))
                } else {
                    m
                }
            })
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let rounds = if cfg!(miri) { 200 } else { 20_000u32 };
        for round in 0..rounds {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Bias some bytes towards the interesting values (0, 1, 0x80, 0x81, 0xff).
            let mut g = x;
            if round % 2 == 0 {
                for i in 0..8 {
                    let pick = [0u8, 1, 0x80, 0x81, 0xff, 0x7f][((x >> (3 * i)) % 6) as usize];
                    if (x >> (40 + i)) & 1 == 1 {
                        g = (g & !(0xff << (8 * i))) | (u64::from(pick) << (8 * i));
                    }
                }
            }
            for b in [
                0u8,
                1,
                2,
                0x7f,
                0x80,
                0x81,
                0xfe,
                0xff,
                (x >> 56) as u8,
                g as u8,
            ] {
                assert_eq!(match_byte(g, b), naive(g, b), "g={g:#018x} b={b:#04x}");
            }
        }
    }
}
