//! `sg_result`: the codes every function returns, their messages, the thread-local detail of
//! the last failure, and the one mapping from the core's `Error`.

use core::ffi::{c_char, CStr};
use core::fmt::{self, Write as _};
use sluicegate::Error;
use std::cell::{Cell, RefCell};

/// What a call did. `SG_OK` is zero; every other value is an error, and values are never
/// reused: a code that is retired stays reserved.
///
/// 1-99: misuse of the C API itself; 100-199: the engine's errors (`sg_result_name` gives
/// the core's stable name, e.g. `"parse_error"`).
#[allow(non_camel_case_types)]
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sg_result {
    /// Success.
    SG_OK = 0,
    /// A required pointer argument was NULL (or a key pointer was NULL with a non-zero length).
    SG_ERR_NULL_ARGUMENT = 1,
    /// A handle of another kind (or a freed one, where that is detectable) was passed.
    SG_ERR_WRONG_HANDLE = 2,
    /// The library panicked; the call had no effect that the engine could observe. A bug: please report it.
    SG_ERR_PANIC = 3,
    /// An integer argument is out of its domain (a length larger than any object, an empty
    /// composite limit). A value outside an option's enum is `SG_ERR_INVALID_OPTION`.
    SG_ERR_INVALID_ARGUMENT = 4,
    /// The caller's buffer was too small: the text was truncated (and still NUL-terminated).
    SG_ERR_BUFFER_TOO_SMALL = 5,
    /// A quota parameter is out of its domain (zero rate, zero burst, initial above burst,
    /// arithmetic that would overflow). Core name `invalid_quota`.
    SG_ERR_INVALID_QUOTA = 100,
    /// A rate string could not be parsed (the detail quotes the text and its byte offset).
    /// Core name `parse_error`.
    SG_ERR_PARSE = 101,
    /// `cost` exceeds the bucket's capacity: the request can never be admitted.
    /// Core name `insufficient_capacity`.
    SG_ERR_INSUFFICIENT_CAPACITY = 102,
    /// The clock reads past the last instant the quota's exact arithmetic covers.
    /// Core name `clock_out_of_range`.
    SG_ERR_CLOCK_OUT_OF_RANGE = 103,
    /// A keyed limiter is at its key bound and none of its keys can be evicted.
    /// Core name `key_store_full`.
    SG_ERR_KEY_STORE_FULL = 104,
    /// A named option has a value outside its choices: an `sg_refill`, `sg_on_full` or
    /// `sg_header_style` argument that is none of the enum's values (the detail names the
    /// option, the value and the choices). Core name `invalid_option`.
    SG_ERR_INVALID_OPTION = 105,
    /// A store outside the process cannot be reached or opened (a missing directory, an I/O
    /// error). Core name `store_unavailable`.
    SG_ERR_STORE_UNAVAILABLE = 106,
    /// The store holds buckets of another quota or layout (the detail names both). Core name
    /// `store_mismatch`.
    SG_ERR_STORE_MISMATCH = 107,
    /// The store's contents are not a valid store (truncated, corrupt, hostile bytes). Core
    /// name `store_corrupt`.
    SG_ERR_STORE_CORRUPT = 108,
    /// The store is not ours to use (another user's file, a symbolic link, loose
    /// permissions). Core name `store_permission`.
    SG_ERR_STORE_PERMISSION = 109,
    /// The store cannot do what was asked (an algorithm it does not keep, listing its keys).
    /// Core name `store_unsupported`.
    SG_ERR_STORE_UNSUPPORTED = 110,
    /// The store did not answer in time. Core name `store_timeout`.
    SG_ERR_STORE_TIMEOUT = 111,
    /// Reserved, never returned: every engine error has a code of its own (the core's error
    /// enum is exhaustive and mapped without a wildcard). Kept so that the value is never
    /// reused.
    SG_ERR_OTHER = 199,
}

use sg_result::*;

impl sg_result {
    /// Every code, in order (for `sg_result_name` / `sg_result_message` lookups).
    const ALL: [sg_result; 19] = [
        SG_OK,
        SG_ERR_NULL_ARGUMENT,
        SG_ERR_WRONG_HANDLE,
        SG_ERR_PANIC,
        SG_ERR_INVALID_ARGUMENT,
        SG_ERR_BUFFER_TOO_SMALL,
        SG_ERR_INVALID_QUOTA,
        SG_ERR_PARSE,
        SG_ERR_INSUFFICIENT_CAPACITY,
        SG_ERR_CLOCK_OUT_OF_RANGE,
        SG_ERR_KEY_STORE_FULL,
        SG_ERR_INVALID_OPTION,
        SG_ERR_STORE_UNAVAILABLE,
        SG_ERR_STORE_MISMATCH,
        SG_ERR_STORE_CORRUPT,
        SG_ERR_STORE_PERMISSION,
        SG_ERR_STORE_UNSUPPORTED,
        SG_ERR_STORE_TIMEOUT,
        SG_ERR_OTHER,
    ];

    fn from_code(code: u32) -> Option<Self> {
        Self::ALL.iter().copied().find(|r| *r as u32 == code)
    }

    /// The stable name: the core's `Error::code()` for engine errors, else a C-API name.
    fn name(self) -> &'static CStr {
        match self {
            SG_OK => c"ok",
            SG_ERR_NULL_ARGUMENT => c"null_argument",
            SG_ERR_WRONG_HANDLE => c"wrong_handle",
            SG_ERR_PANIC => c"panic",
            SG_ERR_INVALID_ARGUMENT => c"invalid_argument",
            SG_ERR_BUFFER_TOO_SMALL => c"buffer_too_small",
            SG_ERR_INVALID_QUOTA => c"invalid_quota",
            SG_ERR_PARSE => c"parse_error",
            SG_ERR_INSUFFICIENT_CAPACITY => c"insufficient_capacity",
            SG_ERR_CLOCK_OUT_OF_RANGE => c"clock_out_of_range",
            SG_ERR_KEY_STORE_FULL => c"key_store_full",
            SG_ERR_INVALID_OPTION => c"invalid_option",
            SG_ERR_STORE_UNAVAILABLE => c"store_unavailable",
            SG_ERR_STORE_MISMATCH => c"store_mismatch",
            SG_ERR_STORE_CORRUPT => c"store_corrupt",
            SG_ERR_STORE_PERMISSION => c"store_permission",
            SG_ERR_STORE_UNSUPPORTED => c"store_unsupported",
            SG_ERR_STORE_TIMEOUT => c"store_timeout",
            SG_ERR_OTHER => c"other",
        }
    }

    fn message(self) -> &'static str {
        match self {
            SG_OK => "success",
            SG_ERR_NULL_ARGUMENT => "a required pointer argument was NULL",
            SG_ERR_WRONG_HANDLE => "a handle of the wrong kind (or a freed handle) was passed",
            SG_ERR_PANIC => "the library panicked (a bug in sluicegate: please report it)",
            SG_ERR_INVALID_ARGUMENT => "an integer argument is out of its domain",
            SG_ERR_BUFFER_TOO_SMALL => "the buffer was too small; the text was truncated",
            SG_ERR_INVALID_QUOTA => "invalid quota parameters",
            SG_ERR_PARSE => "the rate string could not be parsed",
            SG_ERR_INSUFFICIENT_CAPACITY => {
                "cost exceeds the bucket's capacity: the request can never be admitted"
            }
            SG_ERR_CLOCK_OUT_OF_RANGE => "the clock reads past the limiter's horizon",
            SG_ERR_KEY_STORE_FULL => "the keyed limiter is at its key bound",
            SG_ERR_INVALID_OPTION => "an option has a value outside its choices",
            SG_ERR_STORE_UNAVAILABLE => "the store cannot be reached or opened",
            SG_ERR_STORE_MISMATCH => "the store holds buckets of another quota or layout",
            SG_ERR_STORE_CORRUPT => "the store's contents are not a valid store",
            SG_ERR_STORE_PERMISSION => "the store is not this process's to use",
            SG_ERR_STORE_UNSUPPORTED => "the store cannot do what was asked",
            SG_ERR_STORE_TIMEOUT => "the store did not answer in time",
            SG_ERR_OTHER => "reserved (no engine error maps to it)",
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
    /// Set while a text accessor runs ([`keeping_last_error`]): failures record no detail.
    static KEEP: Cell<bool> = const { Cell::new(false) };
}

/// Runs the body of a text accessor (`sg_quota_to_string`) so that, whatever it fails with
/// (a NULL or foreign handle), the last error's detail stays as it was: the header promises
/// that the text accessors never change it, so a truncated detail can be read again.
pub(crate) fn keeping_last_error<T>(body: impl FnOnce() -> T) -> T {
    /// Clears the flag however the body ends (a panic is caught further out).
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            let _ = KEEP.try_with(|k| k.set(false));
        }
    }
    let _ = KEEP.try_with(|k| k.set(true));
    let _reset = Reset;
    body()
}

/// Records `detail` as this thread's last error and returns `code`: every failing path goes
/// through here (or [`from_core`]), so the detail always matches the code just returned
/// (except inside [`keeping_last_error`]).
pub(crate) fn fail(code: sg_result, detail: fmt::Arguments<'_>) -> sg_result {
    if KEEP.try_with(Cell::get).unwrap_or(false) {
        return code;
    }
    // `try_with`: during thread teardown the slot may be gone; the code still gets through.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut s) = slot.try_borrow_mut() {
            s.clear();
            let _ = s.write_fmt(detail);
        }
    });
    code
}

/// `SG_ERR_NULL_ARGUMENT` for the required pointer `arg` of `func`.
#[cold]
#[inline(never)]
pub(crate) fn null(func: &str, arg: &str) -> sg_result {
    fail(
        SG_ERR_NULL_ARGUMENT,
        format_args!("{func}: `{arg}` is NULL"),
    )
}

/// The code of a store error of `kind` (the core's kinds are non-exhaustive: a new one is
/// `SG_ERR_STORE_UNAVAILABLE` until it has a code of its own).
fn store_code(kind: sluicegate::StoreErrorKind) -> sg_result {
    use sluicegate::StoreErrorKind as K;
    match kind {
        K::Mismatch => SG_ERR_STORE_MISMATCH,
        K::Corrupt => SG_ERR_STORE_CORRUPT,
        K::Permission => SG_ERR_STORE_PERMISSION,
        K::Unsupported => SG_ERR_STORE_UNSUPPORTED,
        K::Timeout => SG_ERR_STORE_TIMEOUT,
        _ => SG_ERR_STORE_UNAVAILABLE,
    }
}

/// The one mapping from the core's error to a code (plus its Display text as the detail).
#[cold]
#[inline(never)]
pub(crate) fn from_core(e: Error) -> sg_result {
    // Exhaustive, no wildcard: a new core variant does not compile until it is mapped here.
    let code = match e {
        Error::InvalidQuota { .. } => SG_ERR_INVALID_QUOTA,
        Error::Parse { .. } => SG_ERR_PARSE,
        Error::InsufficientCapacity { .. } => SG_ERR_INSUFFICIENT_CAPACITY,
        Error::ClockOutOfRange { .. } => SG_ERR_CLOCK_OUT_OF_RANGE,
        Error::InvalidOption { .. } => SG_ERR_INVALID_OPTION,
        Error::KeyStoreFull { .. } => SG_ERR_KEY_STORE_FULL,
        Error::Store { kind, .. } => store_code(kind),
    };
    fail(code, format_args!("{e}"))
}

/// Copies `text` into the caller's buffer as a NUL-terminated string, truncating at a
/// character boundary when it does not fit. It never touches the last-error detail, so
/// `sg_last_error_message` can be retried with a bigger buffer.
///
/// # Safety
/// `buf` is NULL or valid for `len` bytes of writes; `out_written` is NULL or valid for one
/// `size_t` write.
pub(crate) unsafe fn write_text(
    text: &str,
    buf: *mut c_char,
    len: usize,
    out_written: *mut usize,
) -> Result<(), sg_result> {
    if buf.is_null() && len > 0 {
        return Err(SG_ERR_NULL_ARGUMENT);
    }
    let mut n = text.len().min(len.saturating_sub(1));
    while !text.is_char_boundary(n) {
        n -= 1;
    }
    if len > 0 {
        // SAFETY: `buf` is non-NULL and valid for `len` bytes (caller contract); `n < len`, so
        // the `n` text bytes and the NUL fit; `text` is a separate Rust allocation, no overlap.
        unsafe {
            core::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            buf.add(n).write(0);
        }
    }
    if !out_written.is_null() {
        // SAFETY: non-NULL, and valid for one write (caller contract).
        unsafe { out_written.write(n) };
    }
    if n < text.len() {
        return Err(SG_ERR_BUFFER_TOO_SMALL);
    }
    Ok(())
}

/// [`write_text`] for a function whose failures set the last-error detail (every one but the
/// text accessors): a NULL `buf` or a buffer too small for `text` names the function and the
/// size needed.
///
/// # Safety
/// As [`write_text`].
pub(crate) unsafe fn write_output(
    func: &str,
    text: &str,
    buf: *mut c_char,
    len: usize,
    out_written: *mut usize,
) -> Result<(), sg_result> {
    // SAFETY: forwarded caller contract.
    match unsafe { write_text(text, buf, len, out_written) } {
        Err(SG_ERR_NULL_ARGUMENT) => Err(null(func, "buf")),
        Err(SG_ERR_BUFFER_TOO_SMALL) => Err(fail(
            SG_ERR_BUFFER_TOO_SMALL,
            format_args!(
                "{func}: the text is {} bytes: `len` must be at least {} (the NUL included)",
                text.len(),
                text.len() + 1
            ),
        )),
        r => r,
    }
}

/// Writes the message of `code` into `buf` (at most `len` bytes, NUL included) and the
/// number of bytes written (NUL excluded) into `*out_written`.
///
/// An unknown code gets the text "unknown sg_result N". Returns `SG_ERR_BUFFER_TOO_SMALL`
/// if the text was truncated; 128 bytes hold every message.
///
/// # Safety
/// `buf` is NULL (only with `len == 0`) or valid for `len` bytes of writes; `out_written` is
/// NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_result_message(
    code: u32,
    buf: *mut c_char,
    len: usize,
    out_written: *mut usize,
) -> sg_result {
    ffi!({
        let unknown;
        let text = match sg_result::from_code(code) {
            Some(r) => r.message(),
            None => {
                unknown = format!("unknown sg_result {code}");
                &unknown
            }
        };
        // SAFETY: forwarded caller contract.
        unsafe { write_text(text, buf, len, out_written) }
    })
}

/// The stable name of `code` as a static NUL-terminated string (never NULL, never freed):
/// the core's error code for engine errors (`"parse_error"`, `"insufficient_capacity"`, ...),
/// `"ok"` for `SG_OK`, `"unknown"` for a value that is not a code.
#[no_mangle]
pub extern "C" fn sg_result_name(code: u32) -> *const c_char {
    ffi_or!(c"panic".as_ptr(), {
        sg_result::from_code(code)
            .map_or(c"unknown", sg_result::name)
            .as_ptr()
    })
}

/// Writes the detail of the last error returned to this thread (e.g. `invalid rate
/// "10/fortnight": unknown time unit ... at byte 3 ("fortnight")`) into `buf`, like
/// `sg_result_message`. The detail is thread-local, is set by every failing call and is left
/// alone by successful ones (like `errno`); it is empty before the first failure. The text
/// accessors (`sg_result_message`, `sg_last_error_message`, `sg_quota_to_string`) never
/// change it, not even when they fail, so a truncated detail can be read again.
///
/// # Safety
/// As `sg_result_message`.
#[no_mangle]
pub unsafe extern "C" fn sg_last_error_message(
    buf: *mut c_char,
    len: usize,
    out_written: *mut usize,
) -> sg_result {
    ffi!({
        let text = LAST_ERROR
            .try_with(|slot| slot.try_borrow().map(|s| s.clone()).unwrap_or_default())
            .unwrap_or_default();
        // SAFETY: forwarded caller contract.
        unsafe { write_text(&text, buf, len, out_written) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_named() {
        for (i, a) in sg_result::ALL.iter().enumerate() {
            assert_eq!(sg_result::from_code(*a as u32), Some(*a));
            assert!(sg_result::ALL[..i].iter().all(|b| *b as u32 != *a as u32));
            assert!(a.message().len() < 128);
        }
    }

    /// `sg_result_name` of an engine error is the core's `Error::code()` (one name for one
    /// error in every language), in the engine's range of codes.
    #[test]
    fn engine_codes_carry_the_core_names() {
        let errors = [
            Error::InvalidQuota { reason: "r".into() },
            Error::Parse {
                input: "i".into(),
                offset: 0,
                fragment: "f".into(),
                reason: "r".into(),
            },
            Error::InsufficientCapacity {
                cost: 2,
                capacity: 1,
            },
            Error::ClockOutOfRange { now: 2, horizon: 1 },
            Error::InvalidOption {
                option: "refill",
                value: "v".into(),
                expected: "e".into(),
            },
            Error::KeyStoreFull { max_keys: 1 },
        ];
        for e in errors {
            let name = e.code();
            let code = from_core(e);
            assert_eq!(code.name().to_str(), Ok(name));
            assert!((100..199).contains(&(code as u32)), "{code:?}");
        }
    }
}
