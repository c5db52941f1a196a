//! One bucket: the compare-and-swap loop over its state word ([`cell`]), the single-bucket
//! [`Limiter`], composite limits, and the acquire planner (how long to wait, and whether to
//! try again) that every language's blocking and async `acquire` share.

pub(crate) mod acquire;
pub(crate) mod cell;
pub mod composite;
mod limiter;
pub(crate) mod live;

pub use acquire::{AcquirePlan, Next};
pub use limiter::{Limiter, LimiterBuilder};
