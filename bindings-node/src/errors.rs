//! The one mapping from the core's errors to JavaScript errors: an `Error` whose `code` is a
//! stable `ERR_SLUICEGATE_*` string. Tests assert on `err.code`, never on message text.

use napi::sys;

/// Every `code` a sluicegate error can carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// A quota parameter is out of its domain (zero rate or burst, initial above burst, ...).
    InvalidQuota,
    /// A rate string does not match the grammar.
    Parse,
    /// `cost` exceeds the capacity: the request can never be admitted.
    InsufficientCapacity,
    /// The clock reads past the limiter's horizon.
    ClockOutOfRange,
    /// A named setting (refill, algorithm, onFull, header style) has a value outside its
    /// choices.
    InvalidOption,
    /// A keyed limiter is at its key bound and none is evictable.
    KeyStoreFull,
    /// A store outside the process failed or refused, by kind (`ERR_SLUICEGATE_STORE_*`).
    Store(sluicegate::StoreErrorKind),
    /// A JavaScript argument of the wrong type or out of range (binding-level, not a core error).
    InvalidArg,
}

impl AsRef<str> for ErrorCode {
    fn as_ref(&self) -> &str {
        match self {
            ErrorCode::InvalidQuota => "ERR_SLUICEGATE_INVALID_QUOTA",
            ErrorCode::Parse => "ERR_SLUICEGATE_PARSE",
            ErrorCode::InsufficientCapacity => "ERR_SLUICEGATE_INSUFFICIENT_CAPACITY",
            ErrorCode::ClockOutOfRange => "ERR_SLUICEGATE_CLOCK_OUT_OF_RANGE",
            ErrorCode::InvalidOption => "ERR_SLUICEGATE_INVALID_OPTION",
            ErrorCode::KeyStoreFull => "ERR_SLUICEGATE_KEY_STORE_FULL",
            ErrorCode::Store(kind) => store_code(*kind),
            ErrorCode::InvalidArg => "ERR_SLUICEGATE_INVALID_ARG",
        }
    }
}

/// The code of a store error of `kind`: the core's code in capitals (`store_mismatch` is
/// `ERR_SLUICEGATE_STORE_MISMATCH`).
fn store_code(kind: sluicegate::StoreErrorKind) -> &'static str {
    use sluicegate::StoreErrorKind as K;
    match kind {
        K::Unavailable => "ERR_SLUICEGATE_STORE_UNAVAILABLE",
        K::Mismatch => "ERR_SLUICEGATE_STORE_MISMATCH",
        K::Corrupt => "ERR_SLUICEGATE_STORE_CORRUPT",
        K::Permission => "ERR_SLUICEGATE_STORE_PERMISSION",
        K::Unsupported => "ERR_SLUICEGATE_STORE_UNSUPPORTED",
        K::Timeout => "ERR_SLUICEGATE_STORE_TIMEOUT",
        _ => "ERR_SLUICEGATE_STORE",
    }
}

/// A JavaScript error ready to throw.
pub type JsErr = napi::Error<ErrorCode>;

/// The only place a core error becomes a JavaScript one.
///
/// The match is exhaustive with no wildcard arm: a variant added to the core does not compile
/// until it is mapped here; `every_core_code_is_mapped` pins each one's code.
pub fn from_core(e: sluicegate::Error) -> JsErr {
    use sluicegate::Error as E;
    let code = match &e {
        E::InvalidQuota { .. } => ErrorCode::InvalidQuota,
        E::Parse { .. } => ErrorCode::Parse,
        E::InsufficientCapacity { .. } => ErrorCode::InsufficientCapacity,
        E::ClockOutOfRange { .. } => ErrorCode::ClockOutOfRange,
        E::InvalidOption { .. } => ErrorCode::InvalidOption,
        E::KeyStoreFull { .. } => ErrorCode::KeyStoreFull,
        E::Store { kind, .. } => ErrorCode::Store(*kind),
    };
    napi::Error::new(code, e.to_string())
}

/// An `ERR_SLUICEGATE_STORE_*` error of `kind` raised by the binding itself.
pub fn store_error(kind: sluicegate::StoreErrorKind, reason: impl Into<String>) -> JsErr {
    napi::Error::new(ErrorCode::Store(kind), reason.into())
}

/// An `ERR_SLUICEGATE_INVALID_ARG` error.
pub fn invalid_arg(reason: impl Into<String>) -> JsErr {
    napi::Error::new(ErrorCode::InvalidArg, reason.into())
}

/// Throws `err` into `env` (for the hand-written callbacks in `hot.rs`).
///
/// # Safety
/// `env` must be the environment of the callback currently running on this thread.
pub unsafe fn throw(env: sys::napi_env, err: JsErr) {
    // SAFETY: the caller passes the live env of the running callback.
    unsafe { napi::JsError::from(err).throw_into(env) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_core_code_is_mapped() {
        // One error of each kind the core can produce through its public API.
        let q: sluicegate::Quota = "1/s".parse().unwrap();
        let errs = [
            "0/s".parse::<sluicegate::Quota>().unwrap_err(),
            "x".parse::<sluicegate::Quota>().unwrap_err(),
            sluicegate::Limiter::with_clock(q, sluicegate::ManualClock::new(0))
                .unwrap()
                .try_acquire(2)
                .unwrap_err(),
            sluicegate::Error::ClockOutOfRange { now: 1, horizon: 0 },
            "sometimes".parse::<sluicegate::Refill>().unwrap_err(),
            sluicegate::Error::KeyStoreFull { max_keys: 1 },
            "shm:/nonexistent-dir/x"
                .parse::<sluicegate::StoreSpec>()
                .map(|s| {
                    sluicegate::KeyedLimiter::<Box<[u8]>>::builder(q)
                        .store(s)
                        .build()
                        .unwrap_err()
                })
                .unwrap(),
        ];
        for e in errs {
            let core = e.code();
            let js = from_core(e).status;
            let expected = match core {
                "invalid_quota" => "ERR_SLUICEGATE_INVALID_QUOTA",
                "parse_error" => "ERR_SLUICEGATE_PARSE",
                "insufficient_capacity" => "ERR_SLUICEGATE_INSUFFICIENT_CAPACITY",
                "clock_out_of_range" => "ERR_SLUICEGATE_CLOCK_OUT_OF_RANGE",
                "invalid_option" => "ERR_SLUICEGATE_INVALID_OPTION",
                "key_store_full" => "ERR_SLUICEGATE_KEY_STORE_FULL",
                "store_unavailable" => "ERR_SLUICEGATE_STORE_UNAVAILABLE",
                other => panic!("core code {other:?} has no JavaScript mapping"),
            };
            assert_eq!(js.as_ref(), expected);
        }
    }
}
