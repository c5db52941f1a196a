//! One bucket: the whole state in one atomic word on its own cache line.

use super::acquire::{self, AcquirePlan, Next};
use crate::algorithm::Codec;
use crate::bucket::cell::{self, Slot};
use crate::clock::{Clock, DefaultClock};
use crate::store::StoreSpec;
use crate::{Decision, Error, Quota};
use crossbeam_utils::CachePadded;
use std::time::Duration;

struct Inner {
    slot: Slot,
    codec: Codec,
}

/// A bucket outside the process: a shared-memory region of one key, or a Redis key. Empty
/// (never made) where neither store is built in.
pub(crate) enum External {
    /// A shared-memory region of one key.
    #[cfg(all(unix, not(sluicegate_loom)))]
    Shm(crate::store::shm::ShmBucket),
    /// A key on a Redis server.
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    Redis(crate::store::redis::RedisBucket),
}

/// Runs `$x` with `$b` bound to the external bucket.
macro_rules! external {
    ($e:expr, $b:ident => $x:expr) => {
        match *$e {
            #[cfg(all(unix, not(sluicegate_loom)))]
            External::Shm(ref $b) => $x,
            #[cfg(all(feature = "redis", not(sluicegate_loom)))]
            External::Redis(ref $b) => $x,
        }
    };
}

impl core::fmt::Debug for External {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        external!(self, b => core::fmt::Debug::fmt(b, f))
    }
}

#[allow(unused_variables)]
impl External {
    fn check(&self, now: u64, cost: u64) -> Result<(), Error> {
        external!(self, b => b.check(now, cost))
    }
    fn reserve(&self, now: u64, cost: u64, within: u64) -> Result<Decision, Error> {
        external!(self, b => b.reserve(now, cost, within))
    }
    fn peek(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        external!(self, b => b.peek(now, cost))
    }
    fn refund(&self, now: u64, cost: u64) -> Result<(), Error> {
        external!(self, b => b.refund(now, cost))
    }
    fn is_full(&self, now: u64) -> Result<bool, Error> {
        external!(self, b => b.is_full(now))
    }
}

impl Inner {
    /// The bucket outside the process, if that is where it lives.
    #[inline]
    fn external(&self) -> Option<&External> {
        if let Slot::External(b) = &self.slot {
            return Some(b);
        }
        None
    }

    /// The Redis bucket, if that is where it lives.
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    fn redis(&self) -> Option<&crate::store::redis::RedisBucket> {
        match self.external() {
            Some(External::Redis(b)) => Some(b),
            _ => None,
        }
    }
}

/// Builds a [`Limiter`] whose bucket lives in a store: `Limiter::builder(q).store(s).build()`.
#[derive(Debug)]
#[must_use]
pub struct LimiterBuilder<C: Clock = DefaultClock> {
    quota: Quota,
    clock: C,
    store: StoreSpec,
}

impl<C: Clock> LimiterBuilder<C> {
    /// Reads `clock` instead of the default clock.
    pub fn clock<C2: Clock>(self, clock: C2) -> LimiterBuilder<C2> {
        LimiterBuilder {
            quota: self.quota,
            clock,
            store: self.store,
        }
    }

    /// Where the bucket lives (default [`StoreSpec::Memory`]): with [`StoreSpec::Shm`], every
    /// process that opens the same region shares the one bucket (a region of one key; the
    /// clock rules of [`KeyedBuilder::store`](crate::KeyedBuilder::store) apply); with
    /// [`StoreSpec::Redis`] (feature `redis`) every host on the same URL and quota shares the
    /// one key `PREFIX:QUOTA:{TAG}` (the `prefix` and `tag` options name it), decided on the
    /// server's clock.
    pub fn store(mut self, store: StoreSpec) -> Self {
        self.store = store;
        self
    }

    /// The limiter, or why the quota or the store cannot be used.
    pub fn build(self) -> Result<Limiter<C>, Error> {
        match self.store {
            StoreSpec::Memory => Limiter::with_clock(self.quota, self.clock),
            #[cfg(all(unix, not(sluicegate_loom)))]
            ref spec @ StoreSpec::Shm { .. } => {
                use crate::store::shm::{ShmBucket, ShmStore};
                let mut clock = self.clock;
                let store = ShmStore::open_for(spec, self.quota, Some(1), 1, &mut clock)?;
                let bucket = ShmBucket::new(store, &self.quota)?;
                Ok(Limiter {
                    inner: CachePadded::new(Inner {
                        codec: bucket.codec().clone(),
                        slot: Slot::External(Box::new(External::Shm(bucket))),
                    }),
                    quota: self.quota,
                    clock,
                })
            }
            #[cfg(all(feature = "redis", not(sluicegate_loom)))]
            ref spec @ StoreSpec::Redis { .. } => {
                let bucket =
                    crate::store::redis::RedisBucket::open(spec, &self.quota, self.clock.now())?;
                Ok(Limiter {
                    inner: CachePadded::new(Inner {
                        codec: bucket.codec().clone(),
                        slot: Slot::External(Box::new(External::Redis(bucket))),
                    }),
                    quota: self.quota,
                    clock: self.clock,
                })
            }
            #[cfg(not(all(feature = "redis", not(sluicegate_loom))))]
            StoreSpec::Redis { .. } => Err(Error::store(
                crate::error::StoreErrorKind::Unsupported,
                self.store.to_string(),
                "sluicegate was built without the cargo feature redis",
            )),
            #[cfg(not(all(unix, not(sluicegate_loom))))]
            StoreSpec::Shm { .. } => Err(Error::store(
                crate::error::StoreErrorKind::Unsupported,
                self.store.to_string(),
                "shared-memory regions need a Unix system",
            )),
        }
    }
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

    /// A builder, for a limiter whose bucket lives in a store ([`LimiterBuilder::store`]) or
    /// reads another clock.
    pub fn builder(quota: Quota) -> LimiterBuilder<DefaultClock> {
        LimiterBuilder {
            quota,
            clock: DefaultClock::new(),
            store: StoreSpec::Memory,
        }
    }
}

impl<C: Clock> Limiter<C> {
    /// A limiter reading `clock`; the bucket is created now, with the quota's initial tokens.
    pub fn with_clock(quota: Quota, clock: C) -> Result<Self, Error> {
        let now = clock.now();
        let codec = Codec::new(&quota, now)?;
        codec.check(now, 0)?;
        Ok(Self {
            inner: CachePadded::new(Inner {
                slot: Slot::new(&codec, now),
                codec,
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
    #[inline(always)]
    pub fn try_acquire_at(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        let inner = &*self.inner;
        // The default quota (continuous refill, one u64 word) inlines into the caller in u64
        // arithmetic; every other algorithm, width or error goes through the general path.
        if let (Slot::Narrow(word), Codec::Continuous(a)) = (&inner.slot, &inner.codec) {
            if a.fast_ok(now, cost) {
                return Ok(cell::cas_loop::<u64>(word, |f| a.step_narrow(f, now, cost)));
            }
        }
        self.try_acquire_general(now, cost)
    }

    #[inline(never)]
    fn try_acquire_general(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        let inner = &*self.inner;
        if let Some(b) = inner.external() {
            return b.reserve(now, cost, u64::MAX);
        }
        inner.codec.check(now, cost)?;
        Ok(inner.slot.acquire(&inner.codec, now, cost))
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
        self.check_at(now, 0)?;
        self.refund_checked(now, cost)
    }

    /// Reserves `cost` now. For [`Algorithm::LeakyQueue`](crate::Algorithm::LeakyQueue) an
    /// admitted reservation may come with a wait: `retry_after()` is the delay until its slot,
    /// which the caller must let pass before going ahead (or give back with
    /// [`cancel`](Self::cancel)). For every other algorithm this is
    /// [`try_acquire`](Self::try_acquire): admitted now, or rejected.
    ///
    /// ```
    /// use sluicegate::{Limiter, ManualClock};
    /// use std::time::Duration;
    ///
    /// let q = "10/s; algorithm=leaky_queue; max_delay=250ms".parse()?;
    /// let limiter = Limiter::with_clock(q, ManualClock::new(0))?;
    /// let waits: Vec<Duration> = (0..3).map(|_| limiter.reserve(1).unwrap().retry_after()).collect();
    /// assert_eq!(waits, [Duration::ZERO, Duration::from_millis(100), Duration::from_millis(200)]);
    /// let full = limiter.reserve(1)?; // a 300 ms wait would exceed max_delay
    /// assert!(!full.allowed());
    /// limiter.cancel(1)?; // the last reservation is given back
    /// assert_eq!(limiter.reserve(1)?.retry_after(), Duration::from_millis(200));
    /// # Ok::<(), sluicegate::Error>(())
    /// ```
    #[inline]
    pub fn reserve(&self, cost: u64) -> Result<Decision, Error> {
        self.try_acquire(cost)
    }

    /// [`reserve`](Self::reserve), admitted only if the wait is at most `max_wait` (a leaky
    /// queue then leaves no reservation behind; other algorithms never wait).
    pub fn reserve_within(&self, cost: u64, max_wait: Duration) -> Result<Decision, Error> {
        let max_wait = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        self.reserve_within_at(self.clock.now(), cost, max_wait)
    }

    /// [`reserve_within`](Self::reserve_within) at an explicit clock reading, the bound in
    /// nanoseconds.
    pub fn reserve_within_at(
        &self,
        now: u64,
        cost: u64,
        max_wait_ns: u64,
    ) -> Result<Decision, Error> {
        let inner = &*self.inner;
        if let Some(b) = inner.external() {
            return b.reserve(now, cost, max_wait_ns.min(u64::MAX - 1));
        }
        inner.codec.check(now, cost)?;
        Ok(inner.slot.reserve(&inner.codec, now, cost, max_wait_ns))
    }

    /// Gives a reservation (or admitted cost) back: the same as [`refund`](Self::refund).
    pub fn cancel(&self, cost: u64) -> Result<(), Error> {
        self.refund(cost)
    }

    /// Acquires `cost`, blocking the thread for at most `max_wait` ([`Duration::MAX`]: as long
    /// as needed). Returns the admitting decision, or the rejection when the quota cannot admit
    /// `cost` in time: the policy of [`AcquirePlan`] (a leaky queue reserves a slot within the
    /// deadline and sleeps until it; other algorithms sleep `retry_after` and try again).
    pub fn acquire(&self, cost: u64, max_wait: Duration) -> Result<Decision, Error> {
        let mut plan = self.start_acquire(cost, max_wait);
        acquire::block_on(|| self.poll_acquire(&mut plan))
    }

    /// [`acquire`](Self::acquire) for async code: the same decisions, waiting with
    /// `tokio::time::sleep` instead of blocking the thread (cargo feature `tokio`). Dropping
    /// the future while a leaky queue's slot is pending does not give the slot back; call
    /// [`cancel`](Self::cancel) for that.
    #[cfg(feature = "tokio")]
    pub async fn acquire_async(&self, cost: u64, max_wait: Duration) -> Result<Decision, Error> {
        let mut plan = self.start_acquire(cost, max_wait);
        acquire::sleep_on(|| self.poll_acquire(&mut plan)).await
    }

    /// Starts an acquire of `cost` with a deadline `max_wait` from now, for callers that do
    /// their own waiting (the bindings): poll it with [`poll_acquire`](Self::poll_acquire).
    pub fn start_acquire(&self, cost: u64, max_wait: Duration) -> AcquirePlan {
        let queue = matches!(self.inner.codec, Codec::LeakyQueue(_));
        AcquirePlan::new(self.clock.now(), cost, max_wait, queue)
    }

    /// One round of `plan` at the clock's reading now: what to do next ([`Next`]).
    pub fn poll_acquire(&self, plan: &mut AcquirePlan) -> Result<Next, Error> {
        let cost = plan.cost();
        plan.poll(self.clock.now(), |now, left| {
            self.reserve_within_at(now, cost, left)
        })
    }

    /// Checks a request against the quota without consuming (composite limits).
    #[inline]
    pub(crate) fn check_at(&self, now: u64, cost: u64) -> Result<(), Error> {
        match self.inner.external() {
            Some(b) => b.check(now, cost),
            None => self.inner.codec.check(now, cost),
        }
    }

    /// `try_acquire_at` after `check_at` passed. `Err` only from a shared-memory region.
    #[inline]
    pub(crate) fn acquire_checked(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        let inner = &*self.inner;
        if let Some(b) = inner.external() {
            return b.reserve(now, cost, u64::MAX);
        }
        Ok(inner.slot.acquire(&inner.codec, now, cost))
    }

    /// The decision `try_acquire_at` would return, consuming nothing (after `check_at`).
    #[inline]
    pub(crate) fn peek_checked(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        let inner = &*self.inner;
        if let Some(b) = inner.external() {
            return b.peek(now, cost);
        }
        Ok(inner.slot.peek(&inner.codec, now, cost))
    }

    /// `refund_at` after `check_at(now, 0)` passed.
    #[inline]
    pub(crate) fn refund_checked(&self, now: u64, cost: u64) -> Result<(), Error> {
        let inner = &*self.inner;
        if let Some(b) = inner.external() {
            return b.refund(now, cost);
        }
        inner.slot.refund(&inner.codec, now, cost);
        Ok(())
    }

    /// The Redis bucket, if that is where this limiter's lives (composite limits).
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    pub(crate) fn redis_bucket(&self) -> Option<&crate::store::redis::RedisBucket> {
        self.inner.redis()
    }

    /// [`try_acquire`](Self::try_acquire) for async code (cargo feature `redis`): on a Redis
    /// store the call is awaited instead of blocking the thread (any executor); every other
    /// store answers at once.
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    pub async fn try_acquire_async(&self, cost: u64) -> Result<Decision, Error> {
        let now = self.clock.now();
        match self.inner.redis() {
            Some(b) => b.acquire_async(now, cost).await,
            None => self.try_acquire_at(now, cost),
        }
    }

    /// [`refund`](Self::refund) for async code (cargo feature `redis`).
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    pub async fn refund_async(&self, cost: u64) -> Result<(), Error> {
        let now = self.clock.now();
        match self.inner.redis() {
            Some(b) => b.refund_async(now, cost).await,
            None => self.refund_at(now, cost),
        }
    }

    /// The Redis store's counters (decisions, cached rejections, each fail policy's
    /// outcomes, timeouts, reconnections), or `None` for other stores (feature `redis`).
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    pub fn redis_stats(&self) -> Option<crate::RedisStats> {
        self.inner.redis().map(|b| b.stats())
    }

    /// Whether the bucket is full now. `Err` only from a shared-memory region.
    pub fn is_full(&self) -> Result<bool, Error> {
        let inner = &*self.inner;
        let now = self.clock.now();
        if let Some(b) = inner.external() {
            return b.is_full(now);
        }
        Ok(inner.slot.is_full(&inner.codec, now))
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
        self.inner.codec.wide()
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
