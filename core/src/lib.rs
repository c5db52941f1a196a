//! # sluicegate
//!
//! Lock-free, exact rate limiting. A bucket's whole state is one atomic word, updated by a
//! compare-and-swap loop: never decrement-then-check, never a lock, and a rejection writes
//! nothing. Arithmetic is exact integer arithmetic (no float drift, ever); time comes from an
//! injectable [`Clock`].
//!
//! # Quick example
//!
//! ```
//! use sluicegate::{Limiter, Quota};
//!
//! let limiter = Limiter::new("10/s; burst=50".parse::<Quota>()?);
//! let decision = limiter.try_acquire(1)?;
//! assert!(decision.allowed());
//! assert_eq!(decision.limit(), 50);
//! assert_eq!(decision.remaining(), 49);
//!
//! let too_big = limiter.try_acquire(51);
//! assert!(matches!(too_big, Err(sluicegate::Error::InsufficientCapacity { .. })));
//! # Ok::<(), sluicegate::Error>(())
//! ```
//!
//! The semantics every binding shares are in `docs/SEMANTICS.md`.

#![warn(missing_docs)]

mod algorithm;
mod bound;
mod cell;
pub mod clock;
pub mod composite;
mod decision;
mod error;
mod gcra;
pub mod http;
mod keyed;
mod keyed_log;
mod limiter;
mod log;
mod queue;
mod quota;
mod reclaim;
mod sync;
mod window;

pub use algorithm::CENTURY_NS;
pub use clock::{Clock, CoarseClock, DefaultClock, ManualClock, MonotonicClock, StdClock};
pub use decision::Decision;
pub use error::Error;
pub use keyed::{KeyedBuilder, KeyedLimiter, OnFull, DEFAULT_MAX_KEYS};
pub use limiter::Limiter;
pub use quota::{Algorithm, Quota, Refill, MAX_SLIDING_LOG};

/// The README's Rust snippets, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
