//! The rate-limit fields of one limit's decision, written without the core's intermediate
//! strings: the fields that depend on the quota alone (`RateLimit-Policy`, the limit) are
//! rendered once by the core ([`Decision::headers`]) and reused; the others are written from
//! the decision's numbers into one buffer each. `tests` checks every style against the core.

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use sluicegate::http::HeaderStyle;
use sluicegate::{Decision, IntKey};
use std::sync::OnceLock;

/// The fields of a response: a list (allocated only when there is a field), so that the
/// response future stays small (it is moved, and boxed by axum, on every request).
#[derive(Default)]
pub(crate) struct Fields(Vec<(HeaderName, HeaderValue)>);

impl Fields {
    pub(crate) fn push(&mut self, name: HeaderName, value: HeaderValue) {
        if self.0.capacity() == 0 {
            self.0.reserve_exact(4);
        }
        self.0.push((name, value));
    }

    pub(crate) fn has(&self, name: &HeaderName) -> bool {
        self.0.iter().any(|(n, _)| n == name)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// These fields less those whose name `h` has.
    pub(crate) fn absent_from(mut self, h: &http::HeaderMap) -> Self {
        self.0.retain(|(n, _)| !h.contains_key(n));
        self
    }
}

impl IntoIterator for Fields {
    type Item = (HeaderName, HeaderValue);
    type IntoIter = std::vec::IntoIter<Self::Item>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

/// A limit's fields that depend on its quota alone, as the core renders them for one
/// (limit, window) pair, and the policy's quoted name (IETF style).
pub(crate) struct Fixed {
    limit: u64,
    window: u64,
    values: Vec<(HeaderName, HeaderValue)>,
    quoted: Bytes,
}

/// The fixed fields of one limit, made on its first decision.
pub(crate) type FixedCell = OnceLock<Fixed>;

/// The field names the core renders, as `http`'s (lower-case) names.
pub(crate) fn header_name(n: &'static str) -> HeaderName {
    match n {
        "Retry-After" => RETRY_AFTER,
        "RateLimit" => HeaderName::from_static("ratelimit"),
        "RateLimit-Policy" => HeaderName::from_static("ratelimit-policy"),
        "RateLimit-Limit" => HeaderName::from_static("ratelimit-limit"),
        "RateLimit-Remaining" => HeaderName::from_static("ratelimit-remaining"),
        "RateLimit-Reset" => HeaderName::from_static("ratelimit-reset"),
        "X-RateLimit-Limit" => HeaderName::from_static("x-ratelimit-limit"),
        "X-RateLimit-Remaining" => HeaderName::from_static("x-ratelimit-remaining"),
        "X-RateLimit-Reset" => HeaderName::from_static("x-ratelimit-reset"),
        other => HeaderName::from_bytes(other.as_bytes()).unwrap_or(RETRY_AFTER),
    }
}

/// The core's fields as `http` values (a value that is not a valid field is dropped; the
/// core writes only printable ASCII).
pub(crate) fn from_core(
    fields: Vec<(&'static str, String)>,
) -> impl Iterator<Item = (HeaderName, HeaderValue)> {
    fields
        .into_iter()
        .filter_map(|(n, v)| Some((header_name(n), HeaderValue::try_from(v).ok()?)))
}

/// Whether the style's field `name` depends on the quota alone.
fn fixed_field(style: HeaderStyle, name: &str) -> bool {
    match style {
        HeaderStyle::Ietf | HeaderStyle::Draft7 => name == "RateLimit-Policy",
        HeaderStyle::Draft6 => name == "RateLimit-Policy" || name == "RateLimit-Limit",
        HeaderStyle::Legacy => name == "X-RateLimit-Limit",
        _ => false,
    }
}

/// `n` in decimal (the core's integer key rendering: digits on the stack).
fn push_num(buf: &mut Vec<u8>, n: u64) {
    buf.extend_from_slice(IntKey::new(n.into()).as_bytes());
}

fn number(n: u64) -> HeaderValue {
    let mut v = Vec::with_capacity(20);
    push_num(&mut v, n);
    value(v)
}

fn value(v: Vec<u8>) -> HeaderValue {
    HeaderValue::from_maybe_shared(Bytes::from(v)).unwrap_or(HeaderValue::from_static("0"))
}

/// The fields of `d`, decided by the limit named `policy`, in the core's order (refusals
/// included: `Retry-After` last).
pub(crate) fn write(
    d: &Decision,
    style: HeaderStyle,
    policy: &str,
    cell: &FixedCell,
    out: &mut Fields,
) {
    if style == HeaderStyle::None {
        if let Some(s) = d.retry_after_header() {
            out.push(RETRY_AFTER, number(s));
        }
        return;
    }
    let fixed = cell.get_or_init(|| {
        let all = d.headers(style, policy);
        let quoted = all
            .iter()
            .find(|(n, _)| *n == "RateLimit-Policy")
            .and_then(|(_, v)| v.rfind(";q=").map(|at| Bytes::from(v[..at].to_string())))
            .unwrap_or_default();
        let values = from_core(
            all.into_iter()
                .filter(|(n, _)| fixed_field(style, n))
                .collect(),
        )
        .collect();
        Fixed {
            limit: d.limit(),
            window: d.window_secs(),
            values,
            quoted,
        }
    });
    if (fixed.limit, fixed.window) != (d.limit(), d.window_secs()) {
        // Not the quota the fixed fields were made for: the core's rendering, whole.
        for (n, v) in from_core(d.headers(style, policy)) {
            out.push(n, v);
        }
        return;
    }
    let (remaining, reset) = (d.remaining(), d.reset_secs());
    let fixed_values = fixed.values.iter().cloned();
    match style {
        HeaderStyle::Ietf => {
            fixed_values.for_each(|(n, v)| out.push(n, v));
            let mut v = Vec::with_capacity(fixed.quoted.len() + 32);
            v.extend_from_slice(&fixed.quoted);
            v.extend_from_slice(b";r=");
            push_num(&mut v, remaining);
            v.extend_from_slice(b";t=");
            push_num(&mut v, reset);
            out.push(HeaderName::from_static("ratelimit"), value(v));
        }
        HeaderStyle::Draft6 | HeaderStyle::Legacy => {
            let (r, t) = if style == HeaderStyle::Draft6 {
                ("ratelimit-remaining", "ratelimit-reset")
            } else {
                ("x-ratelimit-remaining", "x-ratelimit-reset")
            };
            fixed_values.for_each(|(n, v)| out.push(n, v));
            out.push(HeaderName::from_static(r), number(remaining));
            out.push(HeaderName::from_static(t), number(reset));
        }
        HeaderStyle::Draft7 => {
            fixed_values.for_each(|(n, v)| out.push(n, v));
            let mut v = Vec::with_capacity(64);
            v.extend_from_slice(b"limit=");
            push_num(&mut v, d.limit());
            v.extend_from_slice(b", remaining=");
            push_num(&mut v, remaining);
            v.extend_from_slice(b", reset=");
            push_num(&mut v, reset);
            out.push(HeaderName::from_static("ratelimit"), value(v));
        }
        _ => {
            for (n, v) in from_core(d.headers(style, policy)) {
                out.push(n, v);
            }
            return;
        }
    }
    if let Some(s) = d.retry_after_header() {
        out.push(RETRY_AFTER, number(s));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluicegate::{Limiter, ManualClock};

    /// Every style, allowed and refused, fresh and reused fixed fields: the same fields as
    /// the core's, in the same order.
    #[test]
    fn the_same_fields_as_the_core() {
        let styles = [
            HeaderStyle::Ietf,
            HeaderStyle::Draft6,
            HeaderStyle::Draft7,
            HeaderStyle::Legacy,
            HeaderStyle::None,
        ];
        for quota in [
            "10/s; burst=50",
            "1/minute; burst=3",
            "5/s; algorithm=fixed_window",
        ] {
            for style in styles {
                for policy in ["api", "a \"quoted\";q=1 name", ""] {
                    let clock = ManualClock::new(0);
                    let l = Limiter::with_clock(quota.parse().unwrap(), clock.clone()).unwrap();
                    let cell = FixedCell::new();
                    for step in 0..60u64 {
                        clock.advance_nanos(step * 7_000_000);
                        let d = l.try_acquire(1 + step % 3).unwrap();
                        let mut ours = Fields::default();
                        write(&d, style, policy, &cell, &mut ours);
                        let ours: Vec<_> = ours.into_iter().collect();
                        let core: Vec<_> = from_core(d.headers(style, policy)).collect();
                        assert_eq!(ours, core, "{quota} {style:?} {policy:?} step {step}");
                    }
                }
            }
        }
    }
}
