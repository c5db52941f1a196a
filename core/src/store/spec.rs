//! [`StoreSpec`]: where a keyed limiter's buckets live, as configured, spelled the same in
//! every language (`store="shm:/api-limits"` in Python, `store: 'shm:/api-limits'` in Node, a
//! string in C).

use crate::error::Error;
use core::fmt;
use core::str::FromStr;
use std::path::PathBuf;

/// Where a keyed limiter's buckets live.
///
/// ```
/// use sluicegate::StoreSpec;
/// let s: StoreSpec = "shm:/api-limits?capacity=100000".parse()?;
/// assert_eq!(s.to_string(), "shm:/api-limits?capacity=100000");
/// assert_eq!("memory".parse::<StoreSpec>()?, StoreSpec::Memory);
/// # Ok::<(), sluicegate::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreSpec {
    /// In this process (the default): `"memory"`.
    #[default]
    Memory,
    /// A shared-memory region every process of the host that opens it shares:
    /// `"shm:NAME"`. A name with no `/` after its leading one (`/api-limits`, as `shm_open`
    /// spells them) is a file in `/dev/shm`; anything else is a path. `?capacity=N` sets the
    /// keys a new region holds (default: the limiter's `max_keys`).
    Shm {
        /// The name or path, as given.
        name: String,
        /// The keys a new region holds, if given.
        capacity: Option<u64>,
    },
}

impl StoreSpec {
    /// A shared-memory region at `name` (see [`StoreSpec::Shm`]).
    pub fn shm(name: impl Into<String>) -> Self {
        StoreSpec::Shm {
            name: name.into(),
            capacity: None,
        }
    }

    /// The region's file, for a [`StoreSpec::Shm`].
    pub fn shm_path(&self) -> Option<PathBuf> {
        match self {
            StoreSpec::Shm { name, .. } => {
                let rest = name
                    .strip_prefix('/')
                    .filter(|r| !r.is_empty() && !r.contains('/'));
                Some(match rest {
                    Some(file) => PathBuf::from("/dev/shm").join(file),
                    None => PathBuf::from(name),
                })
            }
            StoreSpec::Memory => None,
        }
    }
}

fn invalid(value: &str, why: &str) -> Error {
    Error::InvalidOption {
        option: "store",
        value: value.to_string(),
        expected: format!("\"memory\" or \"shm:NAME[?capacity=N]\" ({why})"),
    }
}

impl FromStr for StoreSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("memory") {
            return Ok(StoreSpec::Memory);
        }
        let Some(rest) = t.strip_prefix("shm:") else {
            return Err(invalid(s, "an unknown store"));
        };
        let (name, query) = match rest.split_once('?') {
            Some((n, q)) => (n, Some(q)),
            None => (rest, None),
        };
        if name.is_empty() || name.contains('\0') {
            return Err(invalid(s, "a region needs a name or path"));
        }
        let mut capacity = None;
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("capacity", v)) if capacity.is_none() => {
                    let n: u64 = v.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        invalid(s, "capacity is a whole number of keys, at least 1")
                    })?;
                    capacity = Some(n);
                }
                _ => return Err(invalid(s, "the only option is capacity=N, given once")),
            }
        }
        Ok(StoreSpec::Shm {
            name: name.to_string(),
            capacity,
        })
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Shm { name, capacity } => {
                write!(f, "shm:{name}")?;
                if let Some(c) = capacity {
                    write!(f, "?capacity={c}")?;
                }
                Ok(())
            }
        }
    }
}
