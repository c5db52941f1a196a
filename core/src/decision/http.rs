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
        let mut out = Vec::with_capacity(4);
        self.for_each_header(style, policy, |name, value| {
            out.push((name, value.to_owned()));
        });
        out
    }

    /// [`headers`](Self::headers) without allocating: each field's name and value, in the
    /// same order, handed to `f` (for an adapter that writes them straight into its
    /// framework's response). The values are ASCII.
    ///
    /// ```
    /// use sluicegate::{http::HeaderStyle, Limiter, ManualClock};
    /// let limiter = Limiter::with_clock("10/s".parse()?, ManualClock::new(0))?;
    /// let d = limiter.try_acquire(1)?;
    /// let mut text = String::new();
    /// d.for_each_header(HeaderStyle::Legacy, "default", |name, value| {
    ///     text += &format!("{name}: {value}\n");
    /// });
    /// assert_eq!(text, "X-RateLimit-Limit: 10\nX-RateLimit-Remaining: 9\nX-RateLimit-Reset: 1\n");
    /// # Ok::<(), sluicegate::Error>(())
    /// ```
    pub fn for_each_header(
        &self,
        style: HeaderStyle,
        policy: &str,
        mut f: impl FnMut(&'static str, &str),
    ) {
        // Written on the stack, digits two at a time: these fields go on most responses, and
        // formatting and allocating strings was most of their cost.
        let (limit, remaining, reset, w) = (
            self.limit(),
            self.remaining(),
            self.reset_secs(),
            self.window_secs(),
        );
        let mut num = itoa::Buffer::new();
        let mut v = Value::new();
        match style {
            HeaderStyle::Ietf => {
                v.sf_string(policy);
                let name = v.len();
                v.figures(&[(b";q=", limit), (b";w=", w)]);
                f("RateLimit-Policy", v.as_str());
                v.truncate(name);
                v.figures(&[(b";r=", remaining), (b";t=", reset)]);
                f("RateLimit", v.as_str());
            }
            HeaderStyle::Draft6 => {
                v.figures(&[(b"", limit), (b";w=", w)]);
                f("RateLimit-Policy", v.as_str());
                f("RateLimit-Limit", num.format(limit));
                f("RateLimit-Remaining", num.format(remaining));
                f("RateLimit-Reset", num.format(reset));
            }
            HeaderStyle::Draft7 => {
                v.figures(&[(b"", limit), (b";w=", w)]);
                f("RateLimit-Policy", v.as_str());
                v.truncate(0);
                v.figures(&[
                    (b"limit=", limit),
                    (b", remaining=", remaining),
                    (b", reset=", reset),
                ]);
                f("RateLimit", v.as_str());
            }
            HeaderStyle::Legacy => {
                f("X-RateLimit-Limit", num.format(limit));
                f("X-RateLimit-Remaining", num.format(remaining));
                f("X-RateLimit-Reset", num.format(reset));
            }
            HeaderStyle::None => {}
        }
        if let Some(secs) = self.retry_after_header() {
            f("Retry-After", num.format(secs));
        }
    }
}

/// A field's value being written: ASCII on the stack, moved to the heap only when a policy
/// name makes it longer than the stack's room.
struct Value {
    stack: [u8; 160],
    len: usize,
    /// In use (holding the whole value) when not empty.
    heap: Vec<u8>,
}

impl Value {
    fn new() -> Self {
        Self {
            stack: [0; 160],
            len: 0,
            heap: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        if self.heap.is_empty() {
            self.len
        } else {
            self.heap.len()
        }
    }

    fn truncate(&mut self, n: usize) {
        if self.heap.is_empty() {
            self.len = self.len.min(n);
        } else {
            self.heap.truncate(n);
            // Back on the stack (empty) if nothing is left.
            self.len = 0;
        }
    }

    fn push(&mut self, s: &[u8]) {
        if self.heap.is_empty() {
            if let Some(room) = self.stack.get_mut(self.len..self.len + s.len()) {
                room.copy_from_slice(s);
                self.len += s.len();
                return;
            }
            self.heap.extend_from_slice(&self.stack[..self.len]);
        }
        self.heap.extend_from_slice(s);
    }

    /// Appends each label and its number in decimal.
    fn figures(&mut self, items: &[(&[u8], u64)]) {
        let mut digits = itoa::Buffer::new();
        for &(label, n) in items {
            self.push(label);
            self.push(digits.format(n).as_bytes());
        }
    }

    /// Appends [`sf_string`]`(s)`, copying runs of characters that need no change whole.
    fn sf_string(&mut self, s: &str) {
        self.push(b"\"");
        let mut plain = 0; // where the run of characters written as they are starts
        for (i, ch) in s.char_indices() {
            match ch {
                '"' | '\\' => {
                    self.push(&s.as_bytes()[plain..i]);
                    self.push(&[b'\\', ch as u8]);
                    plain = i + 1;
                }
                ' '..='~' => {}
                _ => {
                    self.push(&s.as_bytes()[plain..i]);
                    self.push(b"_");
                    plain = i + ch.len_utf8();
                }
            }
        }
        self.push(&s.as_bytes()[plain..]);
        self.push(b"\"");
    }

    fn as_str(&self) -> &str {
        let bytes = if self.heap.is_empty() {
            &self.stack[..self.len]
        } else {
            &self.heap
        };
        // Only ASCII is ever written.
        core::str::from_utf8(bytes).unwrap_or_default()
    }
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
    let mut v = Value::new();
    v.sf_string(s);
    v.as_str().to_owned()
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

    /// A Structured-Field string written character by character: the reference for
    /// `Value::sf_string`, which copies runs.
    fn reference_sf_string(s: &str) -> String {
        let mut out = String::from('"');
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

    /// The fields as `format!` writes them: the plain reference `headers` is checked against.
    fn reference(d: &Decision, style: HeaderStyle, policy: &str) -> Vec<(&'static str, String)> {
        let (limit, remaining, reset, w) =
            (d.limit(), d.remaining(), d.reset_secs(), d.window_secs());
        let name = reference_sf_string(policy);
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
            // Short names, and long ones full of escapes: past the stack's room.
            policy in "\\PC{0,12}|[a-z\"\\\\\u{e9}]{60,200}",
        ) {
            let d = Decision::from_figures(allowed, limit, remaining.min(limit), retry, reset, window);
            for (_, style) in HeaderStyle::NAMES {
                proptest::prop_assert_eq!(d.headers(*style, &policy), reference(&d, *style, &policy));
            }
        }
    }
}
