//! [`AtomicU128`]: portable-atomic's 128-bit atomic, with its load and compare-exchange
//! inline on x86_64.
//!
//! portable-atomic reaches `cmpxchg16b` (and the AVX load, `vmovdqa`) through pointers set by
//! its run-time CPU detection, unless the build targets those features: an indirect call per
//! operation, which also makes the caller keep its live values in memory across it. Here the
//! CPU is asked once (by std's detection) and the answer kept in one byte; every load and
//! compare-exchange after that is one test of that byte and the instruction itself, inline.
//! Where the CPU has not both features, or the target is not x86_64, or under Miri (which
//! runs no inline assembly), every operation is portable-atomic's own.
//!
//! The two paths agree on one word: when `cmpxchg16b` and AVX are there, portable-atomic uses
//! the very same instructions (its load is `vmovdqa`, atomic on every CPU with AVX, as Intel
//! and AMD document; its compare-exchange is `lock cmpxchg16b`), and its other operations
//! are atomic instructions on the same word too (a store is `vmovdqa`, followed by `mfence`
//! when sequentially consistent; a swap is a `cmpxchg16b` loop), so mixing them with the ones
//! here is mixing atomic instructions on one aligned 16-byte word.

use core::sync::atomic::Ordering;

/// A 128-bit atomic (see the module).
#[repr(transparent)]
#[derive(Debug)]
pub(crate) struct AtomicU128(portable_atomic::AtomicU128);

impl AtomicU128 {
    pub(crate) const fn new(v: u128) -> Self {
        Self(portable_atomic::AtomicU128::new(v))
    }

    /// Whether the operations are lock-free (portable-atomic's fallback is a lock table, which
    /// other processes do not see).
    pub(crate) fn is_lock_free() -> bool {
        portable_atomic::AtomicU128::is_lock_free()
    }

    #[inline(always)]
    pub(crate) fn load(&self, order: Ordering) -> u128 {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        if x86::inline() {
            // SAFETY: `as_ptr` is the word's, valid for reads and 16-byte aligned (the type's
            // alignment); the CPU has AVX and cmpxchg16b (`inline`); every other access to the
            // word is atomic (ours or portable-atomic's, the same instructions).
            return unsafe { x86::load(self.0.as_ptr()) };
        }
        self.0.load(order)
    }

    #[inline]
    pub(crate) fn store(&self, v: u128, order: Ordering) {
        self.0.store(v, order);
    }

    #[inline]
    pub(crate) fn swap(&self, v: u128, order: Ordering) -> u128 {
        self.0.swap(v, order)
    }

    /// `cmpxchg16b` is always strong and sequentially consistent, whatever the orderings.
    #[inline(always)]
    pub(crate) fn compare_exchange(
        &self,
        current: u128,
        new: u128,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u128, u128> {
        self.inline_cas(current, new)
            .unwrap_or_else(|| self.0.compare_exchange(current, new, success, failure))
    }

    /// Strong where it runs inline (a weak one gains nothing on x86_64, and portable-atomic's
    /// is strong there too).
    #[inline(always)]
    pub(crate) fn compare_exchange_weak(
        &self,
        current: u128,
        new: u128,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u128, u128> {
        self.inline_cas(current, new)
            .unwrap_or_else(|| self.0.compare_exchange_weak(current, new, success, failure))
    }

    /// The compare-exchange inline, where it runs so (else `None`).
    #[inline(always)]
    fn inline_cas(&self, current: u128, new: u128) -> Option<Result<u128, u128>> {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        if x86::inline() {
            // SAFETY: as in `load`, the word valid for reads and writes (a shared reference to
            // an atomic permits writes through its cell).
            return Some(unsafe { x86::cmpxchg16b(self.0.as_ptr(), current, new) });
        }
        let _ = (current, new);
        None
    }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod x86 {
    use core::arch::asm;
    use std::sync::atomic::{AtomicU8, Ordering};

    /// 0: not asked yet; 1: cmpxchg16b and AVX (the inline path); 2: not both.
    static FEATURES: AtomicU8 = AtomicU8::new(0);

    /// Whether the inline path applies (the CPU asked on the first call).
    #[inline(always)]
    pub(super) fn inline() -> bool {
        match FEATURES.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => detect(),
        }
    }

    #[cold]
    #[inline(never)]
    fn detect() -> bool {
        // std's detection of AVX includes the OS's saving of its registers (XSAVE).
        let both = std::arch::is_x86_feature_detected!("cmpxchg16b")
            && std::arch::is_x86_feature_detected!("avx");
        FEATURES.store(if both { 1 } else { 2 }, Ordering::Relaxed);
        both
    }

    /// An atomic 16-byte load (`vmovdqa`, atomic when the CPU has AVX). A plain x86 load:
    /// acquire (and sequentially consistent with the `lock`ed writes); the assembly is a
    /// compiler barrier as well (it may read any memory).
    ///
    /// # Safety
    /// `src` valid for reads, 16-byte aligned, accessed only atomically; AVX present.
    #[inline(always)]
    pub(super) unsafe fn load(src: *mut u128) -> u128 {
        let (lo, hi): (u64, u64);
        // SAFETY: the caller's contract; `vmovdqa` faults on a misaligned address, never
        // reads past the 16 bytes.
        unsafe {
            asm!(
                "vmovdqa {x}, xmmword ptr [{src}]",
                "vmovq {lo}, {x}",
                "vpextrq {hi}, {x}, 1",
                src = in(reg) src,
                x = out(xmm_reg) _,
                lo = out(reg) lo,
                hi = out(reg) hi,
                options(nostack, preserves_flags),
            );
        }
        (u128::from(hi) << 64) | u128::from(lo)
    }

    /// `lock cmpxchg16b`: `Ok(current)` if the word was `current` and is now `new`, else
    /// `Err(the word)`. Sequentially consistent.
    ///
    /// # Safety
    /// `dst` valid for reads and writes, 16-byte aligned, accessed only atomically;
    /// cmpxchg16b present.
    #[inline(always)]
    pub(super) unsafe fn cmpxchg16b(
        dst: *mut u128,
        current: u128,
        new: u128,
    ) -> Result<u128, u128> {
        let (lo, hi): (u64, u64);
        let ok: u8;
        // SAFETY: the caller's contract. rbx, which the instruction reads (the new word's low
        // half) and an operand may not name, is swapped with r8 around it and restored. The
        // address and the new word's low half are in named registers: a `reg` operand may be
        // given rbx itself, which the swap would overwrite.
        unsafe {
            asm!(
                "xchg r8, rbx",
                "lock cmpxchg16b xmmword ptr [rsi]",
                "sete cl",
                "mov rbx, r8",
                in("rsi") dst,
                inout("r8") new as u64 => _,
                in("rcx") (new >> 64) as u64,
                lateout("cl") ok,
                inout("rax") current as u64 => lo,
                inout("rdx") (current >> 64) as u64 => hi,
                options(nostack),
            );
        }
        let seen = (u128::from(hi) << 64) | u128::from(lo);
        if ok != 0 {
            Ok(seen)
        } else {
            Err(seen)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Loads and compare-exchanges (inline where the CPU allows) against portable-atomic's own
    /// on one word: the same results, values with both halves' bits set.
    #[test]
    fn agrees_with_portable_atomic() {
        let w = AtomicU128::new(0);
        let vals = [
            0u128,
            1,
            u128::MAX,
            1 << 64,
            (1 << 64) - 1,
            0x0123_4567_89ab_cdef << 32,
        ];
        for &a in &vals {
            w.store(a, Ordering::Release);
            assert_eq!(w.load(Ordering::Acquire), a);
            assert_eq!(w.0.load(Ordering::Acquire), a);
            for &b in &vals {
                let wrong = a ^ (1 << 70);
                assert_eq!(
                    w.compare_exchange(wrong, b, Ordering::AcqRel, Ordering::Acquire),
                    Err(a)
                );
                assert_eq!(
                    w.compare_exchange_weak(a, b, Ordering::AcqRel, Ordering::Acquire),
                    Ok(a)
                );
                assert_eq!(w.0.load(Ordering::Acquire), b);
                w.store(a, Ordering::Release);
            }
        }
    }

    /// Two threads add to both halves of one word by compare-exchange loops: no update lost,
    /// no torn word seen (the halves always move together).
    #[test]
    #[cfg_attr(miri, ignore = "slow under Miri; the inline path does not run there")]
    fn concurrent_updates_are_atomic() {
        const N: u64 = 20_000;
        let w = Arc::new(AtomicU128::new(0));
        let add = |w: Arc<AtomicU128>| {
            move || {
                for _ in 0..N {
                    let mut cur = w.load(Ordering::Acquire);
                    loop {
                        let (hi, lo) = ((cur >> 64) as u64, cur as u64);
                        assert_eq!(hi, lo.wrapping_mul(3), "a torn word");
                        let lo = lo + 1;
                        let new = (u128::from(lo.wrapping_mul(3)) << 64) | u128::from(lo);
                        match w.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
                        {
                            Ok(_) => break,
                            Err(seen) => cur = seen,
                        }
                    }
                }
            }
        };
        let t = std::thread::spawn(add(w.clone()));
        add(w.clone())();
        t.join().unwrap();
        assert_eq!(w.load(Ordering::Acquire) as u64, 2 * N);
    }
}
