//! `sg_keyed_limiter`: one bucket per key; keys are byte strings `(pointer, length)`.

use crate::clock;
use crate::decision::sg_decision;
use crate::error::{fail, from_core, null, sg_result};
use crate::handle::{self, Handle};
use crate::limiter::new;
use crate::options;
use crate::sg_manual_clock;
use crate::sg_quota;
use crate::store;
use core::ffi::c_char;
use sluicegate::{AnyClock, Clock, Quota, StoreSpec, DEFAULT_MAX_KEYS};
use std::time::Duration;

/// A lock-free rate limiter with one bucket per key. Opaque and thread-safe: every function
/// taking a `const sg_keyed_limiter *` may be called from any number of threads at once.
/// Made by `sg_keyed_limiter_new`, `sg_keyed_limiter_new_with_clock` or
/// `sg_keyed_limiter_new_in_store` (buckets shared by the processes of a host), released by
/// `sg_keyed_limiter_free`.
///
/// Keys are byte strings `(key, key_len)`: any bytes, NUL included, compared in full. A key
/// is copied only when it is new; `key` may be NULL when `key_len` is 0 (the empty key).
/// An integer key is its decimal digits (`-` first when negative: `snprintf(buf, n, "%"
/// PRId64, id)`), as in every binding: 42 in Python or Node and "42" here are one bucket.
pub struct sg_keyed_limiter {
    _private: [u8; 0],
}

/// The default key bound of `sg_keyed_limiter_new` (2^20 keys).
pub const SG_KEYED_DEFAULT_MAX_KEYS: u64 = 1_048_576;
// Spelled out for cbindgen, which cannot evaluate the core's constant; kept equal to it.
const _: () = assert!(SG_KEYED_DEFAULT_MAX_KEYS == DEFAULT_MAX_KEYS as u64);

/// The limiter behind an `sg_keyed_limiter`: buckets keyed by the key's bytes (the one key
/// rule: an integer key is its decimal digits, in every language), on the default clock or a
/// manual one.
///
/// cbindgen:ignore
pub(crate) type KeyedLimiter = sluicegate::KeyedLimiter<Box<[u8]>, AnyClock>;

impl Handle for KeyedLimiter {
    type Opaque = sg_keyed_limiter;
    const MAGIC: u64 = u64::from_be_bytes(*b"sg:keyed");
    const NAME: &'static str = "sg_keyed_limiter";
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

pub(crate) fn max_keys(n: u64, func: &str) -> Result<usize, sg_result> {
    usize::try_from(n).map_err(|_| {
        fail(
            sg_result::SG_ERR_INVALID_ARGUMENT,
            format_args!("{func}: max_keys {n} does not fit in size_t"),
        )
    })
}

/// The constructor of `new`, for `max_keys` (`None`: not given), the `on_full` value and the
/// store, which `store` parses when the quota and clock have passed their checks.
fn builder<'a>(
    max_keys: Option<u64>,
    on_full: u32,
    store: impl FnOnce() -> Result<StoreSpec, sg_result> + 'a,
    func: &'a str,
) -> impl FnOnce(Quota, AnyClock) -> Result<KeyedLimiter, sg_result> + 'a {
    move |quota, clock| {
        let on_full = options::on_full(on_full).map_err(from_core)?;
        let mut b = sluicegate::KeyedLimiter::builder(quota)
            .clock(clock)
            .on_full(on_full)
            .store(store()?);
        if let Some(n) = max_keys {
            b = b.max_keys(self::max_keys(n, func)?);
        }
        b.build().map_err(from_core)
    }
}

/// The store of `sg_keyed_limiter_new` and `_new_with_clock`.
fn memory() -> Result<StoreSpec, sg_result> {
    Ok(StoreSpec::Memory)
}

/// Writes a new keyed limiter to `*out`: every key gets its own bucket enforcing `quota`,
/// created on the key's first request with the quota's initial tokens, on the default clock.
/// At most `max_keys` keys are held (`SG_KEYED_DEFAULT_MAX_KEYS` is a good default); buckets
/// that are full are evicted first, and `on_full` (an `sg_on_full` value) says what happens
/// when none is.
///
/// Errors: `SG_ERR_INVALID_OPTION` (`max_keys == 0`, or `on_full` not an `sg_on_full`
/// value).
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
        let clock = || Ok(AnyClock::default());
        // SAFETY: forwarded caller contract.
        unsafe {
            new(
                quota,
                clock,
                out,
                F,
                builder(Some(max_keys), on_full, memory, F),
            )
        }
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
        let build = builder(Some(max_keys), on_full, memory, F);
        // SAFETY: forwarded caller contract (`clock` is NULL or a live handle).
        unsafe { new(quota, || clock::manual(clock, F), out, F, build) }
    })
}

/// Writes a new keyed limiter to `*out` whose buckets are kept in `store`, a NUL-terminated
/// string: `"memory"` (this process, as `sg_keyed_limiter_new`) or `"shm:NAME[?capacity=N]"`,
/// a shared-memory region that every process of the host opening the same NAME shares: the
/// limit of each key holds for all of them together (see `sg_limiter_new_in_store` for the
/// names, the clock and the errors). Keys are the same bytes in every process and every
/// language, so a C, a Python and a Node worker on one region count one bucket per key.
///
/// `max_keys`: the keys held at once; 0 takes the region's own capacity when it exists
/// (else the store's `capacity=N`, else `SG_KEYED_DEFAULT_MAX_KEYS`; for `"memory"`,
/// `SG_KEYED_DEFAULT_MAX_KEYS`). Any other value must equal an existing region's capacity
/// (`SG_ERR_STORE_MISMATCH` otherwise) and the store's `capacity=N` when it gives one
/// (`SG_ERR_INVALID_OPTION` otherwise). `on_full` is an `sg_on_full` value, as in
/// `sg_keyed_limiter_new`. `clock` NULL: the default clock (the region's timeline).
///
/// On a region, every call of `sg_keyed_limiter_*` works as in memory. `store` may also be a
/// Redis URL (see `sg_limiter_new_in_store`): each key's bucket is a key on the server
/// (`PREFIX:QUOTA:{FINGERPRINT}`), `max_keys` is not used, every call blocks for a round
/// trip, and `sg_keyed_limiter_len` and `_clear` scan the server's keys of this prefix and
/// quota.
///
/// # Safety
/// `quota` and `clock` are NULL or live handles; `store` is NULL or a NUL-terminated string;
/// `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_new_in_store(
    quota: *const sg_quota,
    store: *const c_char,
    max_keys: u64,
    on_full: u32,
    clock: *const sg_manual_clock,
    out: *mut *mut sg_keyed_limiter,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_new_in_store";
        // SAFETY: forwarded caller contract (`clock` is NULL or a live handle).
        let clock = || unsafe { store::clock(clock, F) };
        // SAFETY: forwarded caller contract (`store` is NULL or NUL-terminated).
        let spec = || unsafe { store::spec(store, F) };
        let build = builder((max_keys != 0).then_some(max_keys), on_full, spec, F);
        // SAFETY: forwarded caller contract.
        unsafe { new(quota, clock, out, F, build) }
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
        let l = unsafe { handle::borrow::<KeyedLimiter>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = l.try_acquire(key, cost).map_err(from_core)?;
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
        let l = unsafe { handle::borrow::<KeyedLimiter>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = l.try_acquire_at(key, now_ns, cost).map_err(from_core)?;
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
        let l = unsafe { handle::borrow::<KeyedLimiter>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = l.peek(key).map_err(from_core)?;
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
        let l = unsafe { handle::borrow::<KeyedLimiter>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        l.refund(key, cost).map_err(from_core)
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
        let l = unsafe { handle::borrow::<KeyedLimiter>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        l.refund_at(key, now_ns, cost).map_err(from_core)
    })
}

/// `sg_limiter_acquire_timeout` for `key`'s bucket: blocks (sleeping) until `cost` tokens
/// are admitted or `timeout_ns` has run out, and writes the outcome to `*out` with `SG_OK`:
/// the admission, or the rejection when the quota cannot admit `cost` in time (a decision,
/// not an error). The same wait policy: a rejection whose `retry_after_ns` exceeds the time
/// left is the outcome at once; a leaky queue's admission comes after its slot's wait,
/// already slept; a manual clock that nobody advances returns the rejection instead of
/// waiting forever.
///
/// Errors: as `sg_keyed_limiter_try_acquire`.
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
        let l = unsafe { handle::borrow::<KeyedLimiter>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        if out.is_null() {
            return Err(null(F, "out"));
        }
        let d = l
            .acquire(key, cost, Duration::from_nanos(timeout_ns))
            .map_err(from_core)?;
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
        let l = unsafe { handle::borrow::<KeyedLimiter>(limiter, F, "limiter")? };
        // SAFETY: forwarded caller contract.
        let key = unsafe { key_bytes(key, key_len, F)? };
        let removed = l.remove(key).map_err(from_core)?;
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
        let l = unsafe {
            handle::borrow::<KeyedLimiter>(limiter, "sg_keyed_limiter_sweep", "limiter")?
        };
        let n = l.sweep().map_err(from_core)?;
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
        let l = unsafe {
            handle::borrow::<KeyedLimiter>(limiter, "sg_keyed_limiter_clear", "limiter")?
        };
        l.clear().map_err(from_core)
    })
}

/// Writes the number of keys held to `*out_len`. On Redis a SCAN of the limiter's keys:
/// `SG_ERR_STORE_*` when the server cannot be asked (nothing is written then).
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
        let l = unsafe { handle::borrow::<KeyedLimiter>(limiter, F, "limiter")? };
        if out_len.is_null() {
            return Err(null(F, "out_len"));
        }
        let n = l.try_len().map_err(from_core)?;
        // SAFETY: non-NULL and valid for one write (caller contract).
        unsafe { out_len.write(n as u64) };
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
        let l = unsafe { handle::borrow::<KeyedLimiter>(limiter, F, "limiter")? };
        if out_ns.is_null() {
            return Err(null(F, "out_ns"));
        }
        // SAFETY: non-NULL and valid for one write (caller contract).
        unsafe { out_ns.write(l.clock().now()) };
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
        unsafe { handle::free::<KeyedLimiter>(limiter, "sg_keyed_limiter_free") }
    })
}
