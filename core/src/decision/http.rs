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

use crate::{Decision, IntKey};

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

impl HeaderStyle {
    /// Every name [`FromStr`](core::str::FromStr) accepts.
    const NAMES: &'static [(&'static str, HeaderStyle)] = &[
        ("ietf", HeaderStyle::Ietf),
        ("draft6", HeaderStyle::Draft6),
        ("draft7", HeaderStyle::Draft7),
        ("legacy", HeaderStyle::Legacy),
        ("none", HeaderStyle::None),
    ];

    /// The style's name, as the bindings' options spell it.
    pub fn name(self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(_, s)| *s == self)
            .map_or("ietf", |(n, _)| n)
    }
}

impl core::str::FromStr for HeaderStyle {
    type Err = crate::Error;

    /// `"ietf"`, `"draft6"`, `"draft7"`, `"legacy"` or `"none"` (ASCII case-insensitive), else
    /// [`Error::InvalidOption`](crate::Error::InvalidOption).
    fn from_str(s: &str) -> Result<Self, crate::Error> {
        crate::error::choose("style", s, Self::NAMES)
    }
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
        // Written into buffers sized up front, without `format!`: these fields go on most
        // responses, and formatting and growing strings was most of their cost.
        let mut out = Vec::with_capacity(4);
        let (limit, remaining, reset, w) = (
            self.limit(),
            self.remaining(),
            self.reset_secs(),
            self.window_secs(),
        );
        match style {
            HeaderStyle::Ietf => {
                let mut name = String::with_capacity(policy.len() + 2 + 2 * 23);
                push_sf_string(&mut name, policy);
                let mut state = String::with_capacity(name.capacity());
                state.push_str(&name);
                out.push((
                    "RateLimit-Policy",
                    figures(name, &[(";q=", limit), (";w=", w)]),
                ));
                out.push((
                    "RateLimit",
                    figures(state, &[(";r=", remaining), (";t=", reset)]),
                ));
            }
            HeaderStyle::Draft6 => {
                out.push((
                    "RateLimit-Policy",
                    figures(String::new(), &[("", limit), (";w=", w)]),
                ));
                out.push(("RateLimit-Limit", figures(String::new(), &[("", limit)])));
                out.push((
                    "RateLimit-Remaining",
                    figures(String::new(), &[("", remaining)]),
                ));
                out.push(("RateLimit-Reset", figures(String::new(), &[("", reset)])));
            }
            HeaderStyle::Draft7 => {
                out.push((
                    "RateLimit-Policy",
                    figures(String::new(), &[("", limit), (";w=", w)]),
                ));
                out.push((
                    "RateLimit",
                    figures(
                        String::new(),
                        &[
                            ("limit=", limit),
                            (", remaining=", remaining),
                            (", reset=", reset),
                        ],
                    ),
                ));
            }
            HeaderStyle::Legacy => {
                out.push(("X-RateLimit-Limit", figures(String::new(), &[("", limit)])));
                out.push((
                    "X-RateLimit-Remaining",
                    figures(String::new(), &[("", remaining)]),
                ));
                out.push(("X-RateLimit-Reset", figures(String::new(), &[("", reset)])));
            }
            HeaderStyle::None => {}
        }
        if let Some(secs) = self.retry_after_header() {
            out.push(("Retry-After", figures(String::new(), &[("", secs)])));
        }
        out
    }
}

/// `out` followed by each label and its number in decimal, grown once.
fn figures(mut out: String, items: &[(&str, u64)]) -> String {
    out.reserve(items.iter().map(|(label, _)| label.len() + 20).sum());
    for &(label, n) in items {
        out.push_str(label);
        out.extend(
            IntKey::new(n.into())
                .as_bytes()
                .iter()
                .map(|&d| char::from(d)),
        );
    }
    out
}

/// The fields for a composite limit: with [`HeaderStyle::Ietf`], `RateLimit-Policy` and
/// `RateLimit` list one named item per policy (in the given order); the older styles have
/// room for one policy only and render `combined` (the tightest part). `Retry-After` comes
/// from `combined`, the longest wait of all parts.
///
/// ```
/// use sluicegate::{composite::Composite, http::{policies_headers, HeaderStyle}, Limiter, ManualClock};
/// let clock = ManualClock::new(0);
/// let user = Limiter::with_clock("2/s".parse()?, clock.clone())?;
/// let global = Limiter::with_clock("100/minute".parse()?, clock.clone())?;
/// let both = Composite::new(vec![user, global]);
/// let (d, each) = both.try_acquire_each(1)?;
/// let h = policies_headers(&d, &[("user", each[0]), ("global", each[1])], HeaderStyle::Ietf);
/// assert_eq!(h[0], ("RateLimit-Policy", r#""user";q=2;w=1, "global";q=100;w=60"#.to_string()));
/// assert_eq!(h[1], ("RateLimit", r#""user";r=1;t=1, "global";r=99;t=1"#.to_string()));
/// # Ok::<(), sluicegate::Error>(())
/// ```
pub fn policies_headers(
    combined: &Decision,
    parts: &[(&str, Decision)],
    style: HeaderStyle,
) -> Vec<(&'static str, String)> {
    if style != HeaderStyle::Ietf || parts.is_empty() {
        return combined.headers(style, parts.first().map_or("default", |p| p.0));
    }
    let policy = parts
        .iter()
        .map(|(name, d)| format!("{};q={};w={}", sf_string(name), d.limit(), d.window_secs()))
        .collect::<Vec<_>>()
        .join(", ");
    let state = parts
        .iter()
        .map(|(name, d)| {
            format!(
                "{};r={};t={}",
                sf_string(name),
                d.remaining(),
                d.reset_secs()
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut out = vec![("RateLimit-Policy", policy), ("RateLimit", state)];
    if let Some(secs) = combined.retry_after_header() {
        out.push(("Retry-After", secs.to_string()));
    }
    out
}

/// A Structured-Field string (RFC 8941 3.3.3): printable ASCII, `"` and `\` escaped; other
/// characters are replaced by `_` so the field always stays valid.
fn sf_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_sf_string(&mut out, s);
    out
}

/// Appends [`sf_string`]`(s)`.
fn push_sf_string(out: &mut String, s: &str) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Limiter, ManualClock};

    #[test]
    fn composite_rejection_lists_every_policy() {
        let clock = ManualClock::new(0);
        let user = Limiter::with_clock("1/s".parse().unwrap(), clock.clone()).unwrap();
        let global = Limiter::with_clock("10/minute".parse().unwrap(), clock).unwrap();
        let both = crate::composite::Composite::new(vec![user, global]);
        assert!(both.try_acquire(1).unwrap().allowed());
        let (d, each) = both.try_acquire_each(1).unwrap();
        assert!(!d.allowed());
        let h = policies_headers(
            &d,
            &[("user", each[0]), ("global", each[1])],
            HeaderStyle::Ietf,
        );
        assert_eq!(
            h,
            vec![
                (
                    "RateLimit-Policy",
                    r#""user";q=1;w=1, "global";q=10;w=60"#.to_string()
                ),
                // user: rejected, 1 s until a token. global, after the rejecting part, is read
                // as the decision it would give for this cost (not consumed): 9 - 1 = 8 left,
                // two tokens (12 s at 10/minute) from full.
                (
                    "RateLimit",
                    r#""user";r=0;t=1, "global";r=8;t=12"#.to_string()
                ),
                ("Retry-After", "1".to_string()),
            ]
        );
        // Single-policy styles render the combined decision.
        let legacy = policies_headers(&d, &[("user", each[0])], HeaderStyle::Legacy);
        assert_eq!(legacy[1], ("X-RateLimit-Remaining", "0".to_string()));
    }

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

    /// The fields as `format!` writes them: the plain reference `headers` is checked against.
    fn reference(d: &Decision, style: HeaderStyle, policy: &str) -> Vec<(&'static str, String)> {
        let (limit, remaining, reset, w) =
            (d.limit(), d.remaining(), d.reset_secs(), d.window_secs());
        let name = sf_string(policy);
        let mut out = match style {
            HeaderStyle::Ietf => vec![
                ("RateLimit-Policy", format!("{name};q={limit};w={w}")),
                ("RateLimit", format!("{name};r={remaining};t={reset}")),
            ],
            HeaderStyle::Draft6 => vec![
                ("RateLimit-Policy", format!("{limit};w={w}")),
                ("RateLimit-Limit", limit.to_string()),
                ("RateLimit-Remaining", remaining.to_string()),
                ("RateLimit-Reset", reset.to_string()),
            ],
            HeaderStyle::Draft7 => vec![
                ("RateLimit-Policy", format!("{limit};w={w}")),
                (
                    "RateLimit",
                    format!("limit={limit}, remaining={remaining}, reset={reset}"),
                ),
            ],
            HeaderStyle::Legacy => vec![
                ("X-RateLimit-Limit", limit.to_string()),
                ("X-RateLimit-Remaining", remaining.to_string()),
                ("X-RateLimit-Reset", reset.to_string()),
            ],
            HeaderStyle::None => vec![],
        };
        if let Some(secs) = d.retry_after_header() {
            out.push(("Retry-After", secs.to_string()));
        }
        out
    }

    proptest::proptest! {
        // No unsafe code here for Miri to check, and proptest's failure file needs the
        // working directory, which Miri's isolation refuses.
        #[test]
        #[cfg_attr(miri, ignore)]
        fn every_style_renders_as_format_would(
            allowed: bool,
            limit: u64,
            remaining in proptest::prop_oneof![0u64..10, proptest::num::u64::ANY],
            retry: u64,
            reset: u64,
            window: u64,
            policy in "\\PC{0,12}",
        ) {
            let d = Decision::from_figures(allowed, limit, remaining.min(limit), retry, reset, window);
            for (_, style) in HeaderStyle::NAMES {
                proptest::prop_assert_eq!(d.headers(*style, &policy), reference(&d, *style, &policy));
            }
        }
    }
}
