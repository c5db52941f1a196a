//! The C enums of the core's named options (`sg_refill`, `sg_on_full`, `sg_header_style`)
//! and their one conversion each way.
//!
//! Functions take them as `uint32_t`, so that a value outside the enum is an error rather
//! than undefined behaviour in Rust: the core's `Error::InvalidOption` (the error a bad
//! option name is in every other language), which `error::from_core` maps to
//! `SG_ERR_INVALID_OPTION`. The `option` of that error is the core's own name for the
//! setting.

use sluicegate::http::HeaderStyle;
use sluicegate::{Error, OnFull, Refill};

/// How tokens come back (the rate string's `refill=` option).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sg_refill {
    /// Fractional tokens accrue continuously (the default): `count / period_ns` per ns.
    SG_REFILL_CONTINUOUS = 0,
    /// `count` whole tokens at each full period, on a grid anchored at the limiter's creation.
    SG_REFILL_INTERVAL = 1,
}

/// What a keyed limiter does when a new key arrives at `max_keys` and no bucket is full
/// (full buckets are always evicted first: that loses nothing).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sg_on_full {
    /// The request fails with `SG_ERR_KEY_STORE_FULL`; existing keys are untouched (exact).
    SG_ON_FULL_REJECT_NEW_KEYS = 0,
    /// Evict the bucket closest to full among a sample of keys (bounded memory beats
    /// exactness: the evicted key starts again with the quota's initial tokens).
    SG_ON_FULL_EVICT_FULLEST = 1,
}

/// Which family of rate-limit fields `sg_decision_headers` renders (`Retry-After` is always
/// added to a rejection). Passed as a `uint32_t`; other values are `SG_ERR_INVALID_OPTION`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum sg_header_style {
    /// draft-ietf-httpapi-ratelimit-headers (-08 and later): `RateLimit-Policy` and
    /// `RateLimit`, as lists of named policies.
    SG_HEADERS_IETF = 0,
    /// draft-06: `RateLimit-Policy`, `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`.
    SG_HEADERS_DRAFT6 = 1,
    /// draft-07: `RateLimit-Policy: q;w=` and `RateLimit: limit=, remaining=, reset=`.
    SG_HEADERS_DRAFT7 = 2,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (seconds from now).
    SG_HEADERS_LEGACY = 3,
    /// Only `Retry-After` (on a rejection).
    SG_HEADERS_NONE = 4,
}

/// The core's error for `value`, which is none of `option`'s `expected` enumerators.
#[cold]
#[inline(never)]
fn invalid(option: &'static str, value: u32, expected: &str) -> Error {
    Error::InvalidOption {
        option,
        value: value.to_string(),
        expected: expected.to_string(),
    }
}

/// The refill mode an `sg_refill` value stands for.
pub(crate) fn refill(value: u32) -> Result<Refill, Error> {
    use sg_refill::*;
    match value {
        v if v == SG_REFILL_CONTINUOUS as u32 => Ok(Refill::Continuous),
        v if v == SG_REFILL_INTERVAL as u32 => Ok(Refill::Interval),
        _ => Err(invalid(
            "refill",
            value,
            "SG_REFILL_CONTINUOUS (0) or SG_REFILL_INTERVAL (1)",
        )),
    }
}

impl From<Refill> for sg_refill {
    fn from(refill: Refill) -> Self {
        match refill {
            Refill::Continuous => sg_refill::SG_REFILL_CONTINUOUS,
            Refill::Interval => sg_refill::SG_REFILL_INTERVAL,
        }
    }
}

/// The policy an `sg_on_full` value stands for.
pub(crate) fn on_full(value: u32) -> Result<OnFull, Error> {
    use sg_on_full::*;
    match value {
        v if v == SG_ON_FULL_REJECT_NEW_KEYS as u32 => Ok(OnFull::RejectNewKeys),
        v if v == SG_ON_FULL_EVICT_FULLEST as u32 => Ok(OnFull::EvictFullest),
        _ => Err(invalid(
            "on_full",
            value,
            "SG_ON_FULL_REJECT_NEW_KEYS (0) or SG_ON_FULL_EVICT_FULLEST (1)",
        )),
    }
}

/// The header style an `sg_header_style` value stands for.
pub(crate) fn header_style(value: u32) -> Result<HeaderStyle, Error> {
    use sg_header_style::*;
    match value {
        v if v == SG_HEADERS_IETF as u32 => Ok(HeaderStyle::Ietf),
        v if v == SG_HEADERS_DRAFT6 as u32 => Ok(HeaderStyle::Draft6),
        v if v == SG_HEADERS_DRAFT7 as u32 => Ok(HeaderStyle::Draft7),
        v if v == SG_HEADERS_LEGACY as u32 => Ok(HeaderStyle::Legacy),
        v if v == SG_HEADERS_NONE as u32 => Ok(HeaderStyle::None),
        _ => Err(invalid(
            "style",
            value,
            "one of SG_HEADERS_IETF (0), SG_HEADERS_DRAFT6 (1), SG_HEADERS_DRAFT7 (2), \
             SG_HEADERS_LEGACY (3), SG_HEADERS_NONE (4)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `option` the core names in its own error for a bad name of this setting.
    fn option_of(e: Error) -> &'static str {
        match e {
            Error::InvalidOption { option, .. } => option,
            other => panic!("not an InvalidOption: {other:?}"),
        }
    }

    /// Each enumerator spells the core's name of the value it stands for
    /// (`SG_REFILL_INTERVAL` is `"interval"`, `SG_ON_FULL_EVICT_FULLEST` is `"evict"`, ...).
    fn spells(enumerator: impl core::fmt::Debug, prefix: &str, core_name: &str) {
        let name = format!("{enumerator:?}").to_ascii_lowercase();
        let rest = name.strip_prefix(prefix).expect("the enum's prefix");
        assert!(rest.starts_with(core_name), "{name} is not {core_name:?}");
    }

    #[test]
    fn refill_values_are_the_core_modes_and_back() {
        for c in [
            sg_refill::SG_REFILL_CONTINUOUS,
            sg_refill::SG_REFILL_INTERVAL,
        ] {
            let core = refill(c as u32).unwrap();
            spells(c, "sg_refill_", core.name());
            assert_eq!(sg_refill::from(core), c);
        }
        let core_err = "hourly".parse::<Refill>().unwrap_err();
        assert_eq!(option_of(refill(2).unwrap_err()), option_of(core_err));
    }

    #[test]
    fn on_full_values_are_the_core_policies() {
        use sg_on_full::*;
        for c in [SG_ON_FULL_REJECT_NEW_KEYS, SG_ON_FULL_EVICT_FULLEST] {
            spells(c, "sg_on_full_", on_full(c as u32).unwrap().name());
        }
        let core_err = "drop".parse::<OnFull>().unwrap_err();
        assert_eq!(option_of(on_full(2).unwrap_err()), option_of(core_err));
    }

    #[test]
    fn header_styles_are_the_core_styles() {
        use sg_header_style::*;
        let all = [
            SG_HEADERS_IETF,
            SG_HEADERS_DRAFT6,
            SG_HEADERS_DRAFT7,
            SG_HEADERS_LEGACY,
            SG_HEADERS_NONE,
        ];
        for c in all {
            spells(c, "sg_headers_", header_style(c as u32).unwrap().name());
        }
        let core_err = "draft9".parse::<HeaderStyle>().unwrap_err();
        let err = header_style(5).unwrap_err();
        assert!(err.to_string().contains("not \"5\""), "{err}");
        assert_eq!(option_of(err), option_of(core_err));
    }
}
