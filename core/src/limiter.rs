//! One bucket: the whole state in one atomic word on its own cache line.

use crate::algorithm::Algo;
use crate::cell::Slot;
use crate::clock::{Clock, DefaultClock};
use crate::{Decision, Error, Quota};
use crossbeam_utils::CachePadded;

struct Inner {
    slot: Slot,
    algo: Algo,
}

/// A lock-free rate limiter for one bucket.
///
/// Every method takes `&self`; share it between threads with an `Arc` or a `static`.
///
/// ```
/// use sluicegate::{Limiter, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new(0);
/// let limiter = Limiter::with_clock("2/s; burst=2".parse()?, clock.clone())?;
/// assert!(limiter.try_acquire(1)?.allowed());
/// assert!(limiter.try_acquire(1)?.allowed());
/// let denied = limiter.try_acquire(1)?;
/// assert!(!denied.allowed());
/// assert_eq!(denied.retry_after(), Duration::from_millis(500));
/// clock.advance(Duration::from_millis(500));
/// assert!(limiter.try_acquire(1)?.allowed());
/// # Ok::<(), sluicegate::Error>(())
/// ```
pub struct Limiter<C: Clock = DefaultClock> {
    // The word and the read-only parameters it needs share one padded block: a decision
    // touches exactly this block and the clock, and no neighbour shares its cache lines.
    inner: CachePadded<Inner>,
    quota: Quota,
    clock: C,
}

impl Limiter<DefaultClock> {
    /// A limiter on the default (TSC) clock.
    ///
    /// # Panics
    /// If the quota is invalid (see [`Quota::validate`]); use [`try_new`](Self::try_new) for
    /// quotas that come from configuration.
    pub fn new(quota: Quota) -> Self {
        match Self::try_new(quota) {
            Ok(l) => l,
            Err(e) => panic!("{e}"),
        }
    }

    /// A limiter on the default clock, or the reason the quota is invalid.
    pub fn try_new(quota: Quota) -> Result<Self, Error> {
        Self::with_clock(quota, DefaultClock::new())
    }
}

impl<C: Clock> Limiter<C> {
    /// A limiter reading `clock`; the bucket is created now, with the quota's initial tokens.
    pub fn with_clock(quota: Quota, clock: C) -> Result<Self, Error> {
        let now = clock.now();
        let algo = Algo::new(&quota, now)?;
        algo.check(now, 0)?;
        Ok(Self {
            inner: CachePadded::new(Inner {
                slot: Slot::new(&algo, now),
                algo,
            }),
            quota,
            clock,
        })
    }

    /// Asks for `cost` tokens now. A rejection is `Ok` with `allowed() == false`; `Err` means
    /// the request can never succeed (`cost` above the capacity) or the clock is out of range.
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<Decision, Error> {
        self.try_acquire_at(self.clock.now(), cost)
    }

    /// [`try_acquire`](Self::try_acquire) at an explicit clock reading (simulations, or a
    /// clock owned by the caller). Readings earlier than earlier ones are clamped.
    #[inline]
    pub fn try_acquire_at(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        let inner = &*self.inner;
        inner.algo.check(now, cost)?;
        Ok(inner.slot.acquire(&inner.algo, now, cost))
    }

    /// The current state, changing nothing (a request of cost 0).
    pub fn peek(&self) -> Result<Decision, Error> {
        self.try_acquire(0)
    }

    /// Gives `cost` tokens back (for work that was admitted but not done), capped at capacity.
    pub fn refund(&self, cost: u64) -> Result<(), Error> {
        self.refund_at(self.clock.now(), cost)
    }

    /// [`refund`](Self::refund) at an explicit clock reading.
    pub fn refund_at(&self, now: u64, cost: u64) -> Result<(), Error> {
        let inner = &*self.inner;
        inner.algo.check(now, 0)?;
        inner.slot.refund(&inner.algo, now, cost);
        Ok(())
    }

    /// Whether the bucket is full now.
    pub fn is_full(&self) -> bool {
        let inner = &*self.inner;
        inner.slot.is_full(&inner.algo, self.clock.now())
    }

    /// The quota this limiter enforces.
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Whether the state needs the 128-bit word (exposed for benchmarks and diagnostics).
    pub fn is_wide(&self) -> bool {
        self.inner.algo.wide()
    }
}

impl<C: Clock> core::fmt::Debug for Limiter<C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Limiter")
            .field("quota", &self.quota.to_string())
            .field("wide", &self.is_wide())
            .finish_non_exhaustive()
    }
}
