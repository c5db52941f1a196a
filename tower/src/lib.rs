//! # sluicegate-tower
//!
//! A [`tower`](https://docs.rs/tower) layer that rate-limits HTTP requests with
//! [`sluicegate`]: lock-free, exact keyed limits, answered with `429 Too Many Requests`,
//! `Retry-After` and the IETF `RateLimit` fields. For axum, hyper, tonic and anything else
//! built on `tower::Service<http::Request<_>>`.
//!
//! * **Clones share state.** Every clone of a [`RateLimitLayer`] and every service it makes
//!   use the same buckets (axum clones the service per connection).
//! * **Keys a client cannot forge.** [`KeyBy::Client`] keys by the peer address (axum's
//!   `ConnectInfo`), IPv6 by /64 and IPv4-mapped IPv6 as IPv4; forwarding headers count only
//!   from proxies you trust ([`sluicegate::client`], `docs/CLIENT-IDENTITY.md`). Or key by a
//!   header, one global bucket, or a closure.
//! * **Several limits per route, limits shared across routes, a quota per route**: a layer
//!   takes any number of [`Limit`]s (all or nothing); a `Limit` cloned into two layers is one
//!   limit; a layer on one route is that route's quota.
//! * **Hooks**: skip and allowlist, a global [`Switch`], refund by response status, the
//!   response to a refusal ([`RateLimitLayer::respond_with`]: a JSON body).
//!
//! The README's example, run as a test:
#![doc = include_str!("../README.md")]

/// One line on standard error, as `eprintln!` writes it, ignoring a failure to write (a
/// closed or full standard error): `eprintln!` panics then, in a request's path.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($t)*);
    }};
}
pub(crate) use say;

mod fields;
mod layer;
mod limit;
mod request;
#[cfg(feature = "redis")]
mod watch;

pub use layer::{
    Admitted, ErrorEvent, ErrorEventFn, ErrorFn, RateLimit, RateLimitLayer, RefundFn, Refusal,
    Refused, RespondFn, ResponseFuture, SkipFn, Switch, WarnFn,
};
pub use limit::{KeyBy, KeyFn, Limit, Limiter};
pub use request::RequestRef;
pub use sluicegate;
