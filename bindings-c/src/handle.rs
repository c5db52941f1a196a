//! Opaque handles with a kind tag.
//!
//! Every handle this library returns is a `Box<Tagged<Value>>`: a `#[repr(C)]` block whose first
//! field is a 64-bit magic number naming the kind. Each use reads that word before anything
//! else, so passing an `sg_quota *` where an `sg_limiter *` belongs (C converts pointers
//! silently through `void *`, and FFI layers such as LuaJIT's hand out untyped pointers)
//! returns `SG_ERR_WRONG_HANDLE` instead of reading a quota as a limiter. `_free` overwrites
//! the tag before releasing the memory, so a double free is caught while the allocator has
//! not reused the block; after that it is undefined behaviour, as in any C library.

use crate::error::{fail, sg_result};
use crate::keyed::KeyedLimiter;
use crate::limiter::Limiter;
use core::mem::align_of;
use sluicegate::{ManualClock, Quota};

/// A Rust value exposed to C as the opaque type `Opaque`.
pub(crate) trait Handle: Sized {
    /// The opaque C type (`sg_limiter`, ...).
    type Opaque;
    /// The kind tag: distinct for every kind, and never a plausible small integer or pointer.
    const MAGIC: u64;
    /// The C type's name, for error details.
    const NAME: &'static str;
}

/// The tag `_free` leaves behind.
const FREED: u64 = u64::from_be_bytes(*b"sg:freed");

#[repr(C)]
struct Tagged<Value> {
    magic: u64,
    value: Value,
}

/// The name of the kind a tag belongs to, for error details.
fn kind_of(magic: u64) -> &'static str {
    match magic {
        <Quota as Handle>::MAGIC => <Quota as Handle>::NAME,
        <ManualClock as Handle>::MAGIC => <ManualClock as Handle>::NAME,
        <Limiter as Handle>::MAGIC => <Limiter as Handle>::NAME,
        <KeyedLimiter as Handle>::MAGIC => <KeyedLimiter as Handle>::NAME,
        FREED => "a freed handle",
        _ => "not a sluicegate handle",
    }
}

/// Moves `value` to the heap and returns it as an opaque handle.
pub(crate) fn into_raw<Value: Handle>(value: Value) -> *mut Value::Opaque {
    Box::into_raw(Box::new(Tagged {
        magic: Value::MAGIC,
        value,
    }))
    .cast()
}

/// Reads the tag of `ptr`, checking NULL, alignment and kind.
///
/// # Safety
/// `ptr` is NULL or a live handle returned by this library (of any kind).
#[inline(always)]
unsafe fn check<Value: Handle>(
    ptr: *const Value::Opaque,
    func: &str,
    arg: &str,
) -> Result<(), sg_result> {
    if ptr.is_null() || ptr as usize % align_of::<u64>() != 0 {
        return Err(bad_pointer(ptr.is_null(), func, arg, Value::NAME));
    }
    // SAFETY: every handle of every kind is a `Tagged<_>`, `#[repr(C)]` with the `u64` tag
    // first, so a live handle of any kind has an initialized, aligned `u64` at `ptr`.
    let magic = unsafe { ptr.cast::<u64>().read() };
    if magic != Value::MAGIC {
        return Err(wrong_kind(magic, func, arg, Value::NAME));
    }
    Ok(())
}

// The failure paths are out of line and cold, so that a call's fast path does no more than
// two tests and one compare before the engine runs.
#[cold]
#[inline(never)]
fn bad_pointer(null: bool, func: &str, arg: &str, want: &str) -> sg_result {
    if null {
        crate::error::null(func, arg)
    } else {
        fail(
            sg_result::SG_ERR_WRONG_HANDLE,
            format_args!("{func}: `{arg}` is a misaligned pointer, not an {want}"),
        )
    }
}

#[cold]
#[inline(never)]
fn wrong_kind(magic: u64, func: &str, arg: &str, want: &str) -> sg_result {
    fail(
        sg_result::SG_ERR_WRONG_HANDLE,
        format_args!(
            "{func}: `{arg}` should be an {want}, but is {}",
            kind_of(magic)
        ),
    )
}

/// Borrows the value behind a handle for the duration of a call.
///
/// # Safety
/// `ptr` is NULL or a live handle returned by this library (of any kind), not freed during
/// the call.
#[inline(always)]
pub(crate) unsafe fn borrow<'a, Value: Handle>(
    ptr: *const Value::Opaque,
    func: &str,
    arg: &str,
) -> Result<&'a Value, sg_result> {
    // SAFETY: forwarded caller contract.
    unsafe { check::<Value>(ptr, func, arg)? };
    // SAFETY: the tag says this is a live `Tagged<Value>`; only `&` references to its value are
    // ever made while it is shared (`Value` is `Sync`: every kind is safe to use from many threads).
    Ok(unsafe { &(*ptr.cast::<Tagged<Value>>()).value })
}

/// Borrows the value behind a handle mutably (quota setters).
///
/// # Safety
/// As [`borrow`], and the caller has exclusive access to the handle during the call.
pub(crate) unsafe fn borrow_mut<'a, Value: Handle>(
    ptr: *mut Value::Opaque,
    func: &str,
    arg: &str,
) -> Result<&'a mut Value, sg_result> {
    // SAFETY: forwarded caller contract.
    unsafe { check::<Value>(ptr, func, arg)? };
    // SAFETY: a live `Tagged<Value>` (tag checked), and the caller guarantees exclusive access.
    Ok(unsafe { &mut (*ptr.cast::<Tagged<Value>>()).value })
}

/// Frees a handle. NULL is a no-op; a handle of another kind is left alone (and reported in
/// the last-error detail): leaking it beats freeing it as the wrong type.
///
/// # Safety
/// `ptr` is NULL or a live handle returned by this library, no longer used by anyone.
pub(crate) unsafe fn free<Value: Handle>(ptr: *mut Value::Opaque, func: &str) {
    if ptr.is_null() {
        return;
    }
    // SAFETY: forwarded caller contract.
    if unsafe { check::<Value>(ptr, func, "handle") }.is_err() {
        return;
    }
    let tagged = ptr.cast::<Tagged<Value>>();
    // SAFETY: a live `Tagged<Value>` made by `into_raw` (tag checked) that nobody uses any more:
    // overwrite the tag, then rebuild the `Box` exactly once to drop it.
    unsafe {
        (*tagged).magic = FREED;
        drop(Box::from_raw(tagged));
    }
}
