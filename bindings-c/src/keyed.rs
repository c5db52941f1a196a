//! `sg_keyed_limiter`: one bucket per key; keys are byte strings `(pointer, length)`.

use crate::clock::C;
use crate::decision::sg_decision;
use crate::error::{fail, from_core, sg_result};
use crate::handle::{self, Handle};
use crate::limiter::{acquire_timeout, null};
use crate::quota::{sg_quota, Q};
use crate::sg_manual_clock;
use sluicegate::{
    Clock, Decision, Error, KeyedLimiter, ManualClock, MonotonicClock, OnFull, Quota,
    DEFAULT_MAX_KEYS,
};

/// A lock-free rate limiter with one bucket per key. Opaque and thread-safe: every function
/// taking a `const sg_keyed_limiter *` may be called from any number of threads at once.
/// Made by `sg_keyed_limiter_new` / `sg_keyed_limiter_new_with_clock`, released by
/// `sg_keyed_limiter_free`.
///
/// Keys are byte strings `(key, key_len)`: any bytes, NUL included, compared in full. A key
/// is copied only when it is new; `key` may be NULL when `key_len` is 0 (the empty key).
pub struct sg_keyed_limiter {
    _private: [u8; 0],
}

/// The default key bound of `sg_keyed_limiter_new` (2^20 keys).
pub const SG_KEYED_DEFAULT_MAX_KEYS: u64 = 1_048_576;
// Spelled out for cbindgen, which cannot evaluate the core's constant; kept equal to it.
const _: () = assert!(SG_KEYED_DEFAULT_MAX_KEYS == DEFAULT_MAX_KEYS as u64);

/// What a keyed limiter does when a new key arrives at `max_keys` and no bucket is full
/// (full buckets are always evicted first: that loses nothing).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sg_on_full {
    /// The request fails with `SG_ERR_KEY_STORE_FULL`; existing keys are untouched (exact).
    SG_ON_FULL_REJECT_NEW_KEYS = 0,
    /// Evict the bucket closest to full among a sample of keys (bounded memory beats
    /// exactness: the evicted key starts again with the quota's initial tokens).
    SG_ON_FULL_EVICT_FULLEST = 1,
}

type Key = Box<[u8]>;

/// One limiter type per clock, so the hot path stays monomorphic after one branch.
pub(crate) enum K {
    Monotonic(KeyedLimiter<Key, MonotonicClock>),
    Manual(KeyedLimiter<Key, ManualClock>),
}

impl Handle for K {
    type C = sg_keyed_limiter;
    const MAGIC: u64 = u64::from_be_bytes(*b"sg:keyed");
    const NAME: &'static str = "sg_keyed_limiter";
}

macro_rules! with {
    ($l:expr, $x:ident => $e:expr) => {
        match $l {
            K::Monotonic($x) => $e,
            K::Manual($x) => $e,
        }
    };
}

impl K {
    #[inline]
    fn now(&self) -> u64 {
        with!(self, l => l.clock().now())
    }
}

/// The key as a slice, without copying it.
///
/// # Safety
/// `key` is NULL or valid for `len` bytes of reads for the duration of the call.
#[inline]
unsafe fn key_bytes<'a>(key: *const u8, len: usize, func: &str) -> Result<&'a [u8], sg_result> {
    if len == 0 {
        return Ok(&[]);
    }
    if key.is_null() {
        return Err(fail(
            sg_result::SG_ERR_NULL_ARGUMENT,
            format_args!("{func}: `key` is NULL but `key_len` is {len}"),
        ));
    }
    if len > isize::MAX as usize {
        return Err(fail(
            sg_result::SG_ERR_INVALID_ARGUMENT,
            format_args!("{func}: `key_len` {len} is larger than any object"),
        ));
    }
    // SAFETY: non-NULL, `len` bytes readable for the call (caller contract), `len <=
    // isize::MAX`; the bytes are only read, and the slice does not outlive the call.
    Ok(unsafe { core::slice::from_raw_parts(key, len) })
}

fn on_full(policy: u32, func: &str) -> Result<OnFull, sg_result> {
    match policy {
        p if p == sg_on_full::SG_ON_FULL_REJECT_NEW_KEYS as u32 => Ok(OnFull::RejectNewKeys),
        p if p == sg_on_full::SG_ON_FULL_EVICT_FULLEST as u32 => Ok(OnFull::EvictFullest),
        other => Err(fail(
            sg_result::SG_ERR_INVALID_ARGUMENT,
            format_args!("{func}: {other} is not an sg_on_full value (0 or 1)"),
        )),
    }
}

fn max_keys(n: u64, func: &str) -> Result<usize, sg_result> {
    usize::try_from(n).map_err(|_| {
        fail(
            sg_result::SG_ERR_INVALID_ARGUMENT,
            format_args!("{func}: max_keys {n} does not fit in size_t"),
        )
    })
}

fn build<Cl: Clock>(
    quota: Quota,
    clock: Cl,
    max_keys: usize,
    policy: OnFull,
) -> Result<KeyedLimiter<Key, Cl>, Error> {
    KeyedLimiter::builder(quota)
        .clock(clock)
        .max_keys(max_keys)
        .on_full(policy)
        .build()
}

/// Writes a new keyed limiter to `*out`: every key gets its own bucket enforcing `quota`,
/// created on the key's first request with the quota's initial tokens, on the default clock.
/// At most `max_keys` keys are held (`SG_KEYED_DEFAULT_MAX_KEYS` is a good default); buckets
/// that are full are evicted first, and `on_full` (an `sg_on_full` value) says what happens
/// when none is.
///
/// Errors: `SG_ERR_INVALID_QUOTA` (`max_keys == 0`), `SG_ERR_INVALID_ARGUMENT` (`on_full`).
///
/// # Safety
/// `quota` is NULL or a live handle; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_new(
    quota: *const sg_quota,
    max_keys: u64,
    on_full: u32,
    out: *mut *mut sg_keyed_limiter,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_new";
        // SAFETY: forwarded caller contract.
        let q = unsafe { handle::borrow::<Q>(quota, F, "quota")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let (n, policy) = (self::max_keys(max_keys, F)?, self::on_full(on_full, F)?);
        let l = build(q.0, MonotonicClock::new(), n, policy).map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(handle::into_raw(K::Monotonic(l))) };
        Ok(())
    })
}

/// Like `sg_keyed_limiter_new`, on a manual clock (shared, as `sg_limiter_new_with_clock`).
/// With `SG_REFILL_INTERVAL`, every key's period grid is anchored at the clock's reading now.
///
/// # Safety
/// `quota` and `clock` are NULL or live handles; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_new_with_clock(
    quota: *const sg_quota,
    max_keys: u64,
    on_full: u32,
    clock: *const sg_manual_clock,
    out: *mut *mut sg_keyed_limiter,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_new_with_clock";
        // SAFETY: forwarded caller contract.
        let q = unsafe { handle::borrow::<Q>(quota, F, "quota")? };
        // SAFETY: forwarded caller contract.
        let c = unsafe { handle::borrow::<C>(clock, F, "clock")? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let (n, policy) = (self::max_keys(max_keys, F)?, self::on_full(on_full, F)?);
        let l = build(q.0, c.0.clone(), n, policy).map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(handle::into_raw(K::Manual(l))) };
        Ok(())
    })
}

/// Asks for `cost` tokens of `key`'s bucket now (creating it on the key's first request) and
/// writes the decision to `*out`. A rejection is `SG_OK` with `out->allowed == false`.
///
/// Errors: `SG_ERR_INSUFFICIENT_CAPACITY` (never creates the key), `SG_ERR_KEY_STORE_FULL`
/// (a new key at the bound under `SG_ON_FULL_REJECT_NEW_KEYS`), `SG_ERR_CLOCK_OUT_OF_RANGE`,
/// `SG_ERR_NULL_ARGUMENT` (also for a NULL `key` with a non-zero `key_len`).
///
/// # Safety
/// `limiter` is NULL or a live handle; `key` is NULL or valid for `key_len` bytes of reads;
/// `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_try_acquire(
    limiter: *const sg_keyed_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    out: *mut sg_decision,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_try_acquire";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<K>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = with!(l, l => l.try_acquire(key, cost)).map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(sg_decision::new(&d)) };
        Ok(())
    })
}

/// `sg_keyed_limiter_try_acquire` at an explicit clock reading `now_ns` (the limiter's
/// clock's timeline: see `sg_keyed_limiter_now`).
///
/// # Safety
/// As `sg_keyed_limiter_try_acquire`.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_try_acquire_at(
    limiter: *const sg_keyed_limiter,
    key: *const u8,
    key_len: usize,
    now_ns: u64,
    cost: u64,
    out: *mut sg_decision,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_try_acquire_at";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<K>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = with!(l, l => l.try_acquire_at(key, now_ns, cost)).map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(sg_decision::new(&d)) };
        Ok(())
    })
}

/// Writes the state of `key`'s bucket now to `*out`, changing nothing. An absent key reports
/// a bucket created now, without creating it.
///
/// # Safety
/// As `sg_keyed_limiter_try_acquire`.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_peek(
    limiter: *const sg_keyed_limiter,
    key: *const u8,
    key_len: usize,
    out: *mut sg_decision,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_peek";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<K>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = with!(l, l => l.peek(key)).map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(sg_decision::new(&d)) };
        Ok(())
    })
}

/// Gives `cost` tokens back to `key`'s bucket, capped at the burst. An absent key is left
/// absent (it is as full as a fresh bucket).
///
/// # Safety
/// `limiter` is NULL or a live handle; `key` is NULL or valid for `key_len` bytes of reads.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_refund(
    limiter: *const sg_keyed_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_refund";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<K>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        with!(l, l => l.refund(key, cost)).map_err(from_core)
    })
}

/// `sg_keyed_limiter_refund` at an explicit clock reading.
///
/// # Safety
/// As `sg_keyed_limiter_refund`.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_refund_at(
    limiter: *const sg_keyed_limiter,
    key: *const u8,
    key_len: usize,
    now_ns: u64,
    cost: u64,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_refund_at";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<K>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        with!(l, l => l.refund_at(key, now_ns, cost)).map_err(from_core)
    })
}

/// Blocks (sleeping) until `cost` tokens of `key`'s bucket are admitted or `timeout_ns` has
/// passed: it retries after each rejection's `retry_after_ns` while that ends within the
/// timeout, measuring time on the limiter's clock and the real clock, whichever moved
/// further. A leaky queue's admission is returned as `sg_keyed_limiter_try_acquire` gives
/// it: its `retry_after_ns` is the wait until the request's slot, which the caller lets pass.
///
/// # Safety
/// As `sg_keyed_limiter_try_acquire`.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_acquire_timeout(
    limiter: *const sg_keyed_limiter,
    key: *const u8,
    key_len: usize,
    cost: u64,
    timeout_ns: u64,
    out: *mut sg_decision,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_acquire_timeout";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<K>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let attempt = || -> Result<Decision, Error> { with!(l, l => l.try_acquire(key, cost)) };
        let d = acquire_timeout(|| l.now(), attempt, timeout_ns).map_err(from_core)?;
        // SAFETY: `out` is non-NULL and valid for one write (caller contract).
        unsafe { out.write(sg_decision::new(&d)) };
        Ok(())
    })
}

/// Forgets `key` (its next request starts a fresh bucket) and writes whether it was present
/// to `*out_removed` (which may be NULL).
///
/// # Safety
/// `limiter` is NULL or a live handle; `key` is NULL or valid for `key_len` bytes of reads;
/// `out_removed` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_remove(
    limiter: *const sg_keyed_limiter,
    key: *const u8,
    key_len: usize,
    out_removed: *mut bool,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_remove";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<K>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        let removed = with!(l, l => l.remove(key));
        if !out_removed.is_null() {
            // SAFETY: non-NULL and valid for one write (caller contract).
            unsafe { out_removed.write(removed) };
        }
        Ok(())
    })
}

/// Evicts every bucket that is full now (lossless when the quota's initial tokens equal its
/// burst) and writes how many to `*out_evicted` (which may be NULL). Callers may schedule
/// it; lookups never wait for it.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out_evicted` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_sweep(
    limiter: *const sg_keyed_limiter,
    out_evicted: *mut u64,
) -> sg_result {
    ffi!({
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<K>(limiter, "sg_keyed_limiter_sweep", "limiter")? };
        let n = with!(l, l => l.sweep());
        if !out_evicted.is_null() {
            // SAFETY: non-NULL and valid for one write (caller contract).
            unsafe { out_evicted.write(n as u64) };
        }
        Ok(())
    })
}

/// Forgets every key.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_clear(limiter: *const sg_keyed_limiter) -> sg_result {
    ffi!({
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<K>(limiter, "sg_keyed_limiter_clear", "limiter")? };
        with!(l, l => l.clear());
        Ok(())
    })
}

/// Writes the number of keys held to `*out_len`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out_len` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_len(
    limiter: *const sg_keyed_limiter,
    out_len: *mut u64,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_len";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<K>(limiter, F, "limiter")? };
        if out_len.is_null() {
            return Err(null(F, "out_len"));
        }
        // SAFETY: non-NULL and valid for one write (caller contract).
        unsafe { out_len.write(with!(l, l => l.len()) as u64) };
        Ok(())
    })
}

/// Writes the current reading of the limiter's clock (nanoseconds) to `*out_ns`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out_ns` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_now(
    limiter: *const sg_keyed_limiter,
    out_ns: *mut u64,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_now";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<K>(limiter, F, "limiter")? };
        if out_ns.is_null() {
            return Err(null(F, "out_ns"));
        }
        // SAFETY: non-NULL and valid for one write (caller contract).
        unsafe { out_ns.write(l.now()) };
        Ok(())
    })
}

/// Releases a keyed limiter and every key it holds. NULL is a no-op; a handle of another
/// kind is left alone.
///
/// # Safety
/// `limiter` is NULL or a live handle that no thread uses any more.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_free(limiter: *mut sg_keyed_limiter) {
    ffi_or!((), {
        // SAFETY: forwarded caller contract.
        unsafe { handle::free::<K>(limiter, "sg_keyed_limiter_free") }
    })
}
