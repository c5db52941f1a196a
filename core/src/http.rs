//! HTTP response fields rendered from a [`Decision`].
//!
//! ```
//! use sluicegate::{http::HeaderStyle, Limiter, ManualClock};
//! let limiter = Limiter::with_clock("1/s; burst=2".parse().unwrap(), ManualClock::new(0)).unwrap();
//! limiter.try_acquire(2).unwrap();
//! let denied = limiter.try_acquire(1).unwrap();
//! let headers = denied.headers(HeaderStyle::Ietf, "default");
//! assert!(headers.contains(&("Retry-After", "1".to_string())));
//! assert!(headers.contains(&("RateLimit", "\"default\";r=0;t=1".to_string())));
//! assert!(headers.contains(&("RateLimit-Policy", "\"default\";q=2;w=2".to_string())));
//! ```

use crate::Decision;

const NS_PER_S: u64 = 1_000_000_000;

/// Which family of rate-limit fields to emit (`Retry-After` is always added on rejection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum HeaderStyle {
    /// draft-ietf-httpapi-ratelimit-headers (-08 and later): `RateLimit` and `RateLimit-Policy`
    /// as Structured-Field lists of named policies.
    #[default]
    Ietf,
    /// draft-06: `RateLimit-Policy`, `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`.
    Draft6,
    /// draft-07: `RateLimit: limit=, remaining=, reset=` and `RateLimit-Policy: q;w=`.
    Draft7,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (seconds from now).
    Legacy,
    /// Only `Retry-After`.
    None,
}

fn ceil_secs(ns: u64) -> u64 {
    ns.div_ceil(NS_PER_S)
}

impl Decision {
    /// `Retry-After` in whole seconds, at least 1 (so a client never retries early); `None`
    /// when the request was allowed.
    pub fn retry_after_header(&self) -> Option<u64> {
        (!self.allowed()).then(|| ceil_secs(self.retry_after_nanos()).max(1))
    }

    /// Whole seconds until more quota: the retry wait when rejected, else the time to full.
    pub fn reset_secs(&self) -> u64 {
        if self.allowed() {
            ceil_secs(self.reset_after_nanos())
        } else {
            ceil_secs(self.retry_after_nanos()).max(1)
        }
    }

    /// The response fields for this decision in the given style; `policy` names the policy in
    /// the IETF fields (a Structured-Field string: quotes and backslashes are escaped).
    pub fn headers(&self, style: HeaderStyle, policy: &str) -> Vec<(&'static str, String)> {
        let mut out = Vec::with_capacity(4);
        let (limit, remaining, reset, w) = (
            self.limit(),
            self.remaining(),
            self.reset_secs(),
            self.window_secs(),
        );
        match style {
            HeaderStyle::Ietf => {
                let name = sf_string(policy);
                out.push(("RateLimit-Policy", format!("{name};q={limit};w={w}")));
                out.push(("RateLimit", format!("{name};r={remaining};t={reset}")));
            }
            HeaderStyle::Draft6 => {
                out.push(("RateLimit-Policy", format!("{limit};w={w}")));
                out.push(("RateLimit-Limit", limit.to_string()));
                out.push(("RateLimit-Remaining", remaining.to_string()));
                out.push(("RateLimit-Reset", reset.to_string()));
            }
            HeaderStyle::Draft7 => {
                out.push(("RateLimit-Policy", format!("{limit};w={w}")));
                out.push((
                    "RateLimit",
                    format!("limit={limit}, remaining={remaining}, reset={reset}"),
                ));
            }
            HeaderStyle::Legacy => {
                out.push(("X-RateLimit-Limit", limit.to_string()));
                out.push(("X-RateLimit-Remaining", remaining.to_string()));
                out.push(("X-RateLimit-Reset", reset.to_string()));
            }
            HeaderStyle::None => {}
        }
        if let Some(secs) = self.retry_after_header() {
            out.push(("Retry-After", secs.to_string()));
        }
        out
    }
}

/// A Structured-Field string (RFC 8941 3.3.3): printable ASCII, `"` and `\` escaped; other
/// characters are replaced by `_` so the field always stays valid.
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' | '\\' => {
                out.push('\\');
                out.push(ch);
            }
            ' '..='~' => out.push(ch),
            _ => out.push('_'),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limiter, ManualClock};

    #[test]
    fn escapes_policy_names() {
        assert_eq!(sf_string("a\"b\\c\u{e9}"), "\"a\\\"b\\\\c_\"");
    }

    #[test]
    fn every_style_renders() {
        let clock = ManualClock::new(0);
        let l = Limiter::with_clock("10/s; burst=50".parse().unwrap(), clock.clone()).unwrap();
        let d = l.try_acquire(10).unwrap();
        assert_eq!(
            d.headers(HeaderStyle::Ietf, "api"),
            vec![
                ("RateLimit-Policy", "\"api\";q=50;w=5".to_string()),
                ("RateLimit", "\"api\";r=40;t=1".to_string()),
            ]
        );
        assert_eq!(
            d.headers(HeaderStyle::Draft7, "api"),
            vec![
                ("RateLimit-Policy", "50;w=5".to_string()),
                ("RateLimit", "limit=50, remaining=40, reset=1".to_string()),
            ]
        );
        assert_eq!(
            d.headers(HeaderStyle::Legacy, "api"),
            vec![
                ("X-RateLimit-Limit", "50".to_string()),
                ("X-RateLimit-Remaining", "40".to_string()),
                ("X-RateLimit-Reset", "1".to_string()),
            ]
        );
        l.try_acquire(40).unwrap();
        let denied = l.try_acquire(3).unwrap();
        assert!(!denied.allowed());
        // 3 tokens at 10/s: 300 ms, rendered as 1 s.
        assert_eq!(denied.retry_after_header(), Some(1));
        let h = denied.headers(HeaderStyle::Draft6, "api");
        assert_eq!(h.last().unwrap(), &("Retry-After", "1".to_string()));
        assert!(h.contains(&("RateLimit-Reset", "1".to_string())));
        assert_eq!(
            denied.headers(HeaderStyle::None, "api"),
            vec![("Retry-After", "1".to_string())]
        );
    }
}
