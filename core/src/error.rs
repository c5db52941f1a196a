//! The one error type of the engine. Every binding maps it, once, to its own idiom.

use core::fmt;

/// Misuse, or a request that can never succeed. A rate-limit rejection is not an error: it is
/// a [`Decision`](crate::Decision) with `allowed() == false`.
///
/// The enum is deliberately exhaustive: every binding maps it in one `match` with no wildcard
/// arm, so adding a variant is a compile error in each binding until it is mapped there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// A quota parameter is out of its domain (zero rate, zero burst, initial above burst,
    /// arithmetic that would overflow).
    InvalidQuota {
        /// What is wrong, in words.
        reason: String,
    },
    /// A rate string could not be parsed.
    Parse {
        /// The whole input.
        input: String,
        /// Byte offset of the offending text in `input`.
        offset: usize,
        /// The offending text itself.
        fragment: String,
        /// What was expected there.
        reason: String,
    },
    /// `cost` exceeds the bucket's capacity: the request can never be admitted.
    InsufficientCapacity {
        /// The cost asked for.
        cost: u64,
        /// The capacity (burst) of the quota.
        capacity: u64,
    },
    /// The clock reads past the last instant the quota's exact arithmetic covers (always more
    /// than a century after the limiter's clock origin).
    ClockOutOfRange {
        /// The reading, in nanoseconds.
        now: u64,
        /// The last reading the limiter accepts.
        horizon: u64,
    },
    /// A named setting has a value outside its choices (a refill mode, an algorithm, a header
    /// style, an `OnFull` policy, a store).
    InvalidOption {
        /// The setting (`"refill"`, `"algorithm"`, ...).
        option: &'static str,
        /// The value given.
        value: String,
        /// The choices, in words.
        expected: String,
    },
    /// A store outside the process failed or refused: a shared-memory region that cannot be
    /// opened, does not match this limiter, or is corrupt.
    Store {
        /// What kind of failure, for programs to act on.
        kind: StoreErrorKind,
        /// The store, as configured (a path, a URL).
        store: String,
        /// What happened, in words.
        reason: String,
    },
    /// A keyed limiter is at its key bound and the policy is to reject new keys.
    KeyStoreFull {
        /// The configured bound.
        max_keys: usize,
    },
}

impl Error {
    /// A stable, machine-readable name for the variant (used as error codes by the bindings).
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidQuota { .. } => "invalid_quota",
            Error::Parse { .. } => "parse_error",
            Error::InsufficientCapacity { .. } => "insufficient_capacity",
            Error::ClockOutOfRange { .. } => "clock_out_of_range",
            Error::InvalidOption { .. } => "invalid_option",
            Error::Store { kind, .. } => kind.code(),
            Error::KeyStoreFull { .. } => "key_store_full",
        }
    }

    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        Error::InvalidQuota {
            reason: reason.into(),
        }
    }
}

/// What went wrong with a store ([`Error::Store`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store cannot be reached or opened (a missing directory, an I/O error).
    Unavailable,
    /// The store holds buckets of another quota or layout than this limiter's.
    Mismatch,
    /// The store's contents are not a valid store (truncated, corrupt, hostile bytes).
    Corrupt,
    /// The store is not ours to use: another user's file, a symbolic link, loose permissions.
    Permission,
    /// The store cannot do what was asked (an algorithm it does not keep, listing its keys).
    Unsupported,
    /// The store did not answer in time (a region whose creator never finished).
    Timeout,
}

impl StoreErrorKind {
    /// The stable, machine-readable name (the error's [`code`](Error::code)).
    pub const fn code(self) -> &'static str {
        match self {
            StoreErrorKind::Unavailable => "store_unavailable",
            StoreErrorKind::Mismatch => "store_mismatch",
            StoreErrorKind::Corrupt => "store_corrupt",
            StoreErrorKind::Permission => "store_permission",
            StoreErrorKind::Unsupported => "store_unsupported",
            StoreErrorKind::Timeout => "store_timeout",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            StoreErrorKind::Unavailable => "store unavailable",
            StoreErrorKind::Mismatch => "store mismatch",
            StoreErrorKind::Corrupt => "corrupt store",
            StoreErrorKind::Permission => "store refused",
            StoreErrorKind::Unsupported => "unsupported by the store",
            StoreErrorKind::Timeout => "store timed out",
        }
    }
}

impl Error {
    /// A [`Error::Store`] error.
    pub(crate) fn store(
        kind: StoreErrorKind,
        store: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Store {
            kind,
            store: store.into(),
            reason: reason.into(),
        }
    }
}

/// Parses `value` as one of `table`'s names (ASCII case-insensitive; aliases allowed), or the
/// [`Error::InvalidOption`] that lists the first name of each choice.
pub(crate) fn choose<T: Copy + PartialEq>(
    option: &'static str,
    value: &str,
    table: &[(&str, T)],
) -> Result<T, Error> {
    if let Some(&(_, v)) = table
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(value))
    {
        return Ok(v);
    }
    let mut names: Vec<String> = Vec::new();
    for (i, (name, v)) in table.iter().enumerate() {
        if table[..i].iter().all(|(_, w)| w != v) {
            names.push(format!("{name:?}"));
        }
    }
    let expected = match names.as_slice() {
        [one] => one.clone(),
        [a, b] => format!("{a} or {b}"),
        all => format!("one of {}", all.join(", ")),
    };
    Err(Error::InvalidOption {
        option,
        value: value.to_string(),
        expected,
    })
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidQuota { reason } => write!(f, "invalid quota: {reason}"),
            Error::Parse {
                input,
                offset,
                fragment,
                reason,
            } => write!(
                f,
                "invalid rate {:?}: {reason} at byte {offset} ({:?})",
                Clip(input),
                Clip(fragment)
            ),
            Error::InsufficientCapacity { cost, capacity } => write!(
                f,
                "cost {cost} exceeds the capacity {capacity}: the request can never be admitted"
            ),
            Error::ClockOutOfRange { now, horizon } => write!(
                f,
                "clock reading {now} ns is past the limiter's horizon of {horizon} ns"
            ),
            Error::InvalidOption {
                option,
                value,
                expected,
            } => write!(f, "{option} must be {expected}, not {:?}", Clip(value)),
            Error::Store {
                kind,
                store,
                reason,
            } => write!(f, "{} {:?}: {reason}", kind.describe(), Clip(store)),
            Error::KeyStoreFull { max_keys } => {
                write!(f, "key store full: {max_keys} keys and none evictable")
            }
        }
    }
}

impl std::error::Error for Error {}

/// Quotes at most 64 characters of hostile input in messages (the whole text stays in the
/// error's fields), so a megabyte of junk never becomes a megabyte of error message.
struct Clip<'a>(&'a str);

impl fmt::Debug for Clip<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const MAX: usize = 64;
        match self.0.char_indices().nth(MAX) {
            None => fmt::Debug::fmt(self.0, f),
            Some((cut, _)) => {
                let rest = self.0.len() - cut;
                write!(f, "{:?}... ({rest} more bytes)", &self.0[..cut])
            }
        }
    }
}
