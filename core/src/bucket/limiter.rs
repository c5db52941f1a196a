//! One bucket: the whole state in one atomic word on its own cache line.

use super::acquire::{self, AcquirePlan, Next};
use super::live::{Live, Stage};
use crate::algorithm::Codec;
use crate::bucket::cell::Slot;
use crate::clock::{Clock, DefaultClock};
use crate::metrics::{KeyRef, Metrics, Observe, ObserveOptions, Rejection};
use crate::store::StoreSpec;
use crate::{Decision, Error, Quota};
use crossbeam_utils::CachePadded;
use std::sync::Arc;
use std::time::Duration;

/// The first generation (see `live.rs`): the word and the codec, inline.
type Inner = Stage;

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

impl External {
    /// The store, as errors name it (`shm:PATH`, the Redis URL with its password redacted).
    fn store_name(&self) -> String {
        external!(self, e => e.store_name())
    }
}

// Under loom neither store is built in: `External` has no variant and `f` goes unused.
#[allow(unused_variables)]
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
    /// `Limiter::peek`: a request of cost 0; on Redis a look, which no fail policy answers.
    fn look(&self, now: u64) -> Result<Decision, Error> {
        match *self {
            #[cfg(all(unix, not(sluicegate_loom)))]
            External::Shm(ref b) => b.reserve(now, 0, u64::MAX),
            #[cfg(all(feature = "redis", not(sluicegate_loom)))]
            External::Redis(ref b) => b.look(now),
        }
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
    observe: ObserveOptions<()>,
}

impl<C: Clock> LimiterBuilder<C> {
    /// Reads `clock` instead of the default clock.
    pub fn clock<C2: Clock>(self, clock: C2) -> LimiterBuilder<C2> {
        LimiterBuilder {
            quota: self.quota,
            clock,
            store: self.store,
            observe: self.observe,
        }
    }

    /// Starts in shadow (dry-run) mode (default off; switch at runtime with
    /// [`Limiter::set_shadow`]): every decision is made and recorded as enforcement makes it,
    /// but a would-be rejection is returned allowed, flagged
    /// [`shadow_rejected`](Decision::shadow_rejected).
    pub fn shadow(mut self, on: bool) -> Self {
        self.observe.shadow = on;
        self
    }

    /// Counts decisions ([`Limiter::metrics`]; default off: a decision then tests one
    /// pointer, and counting costs a load and a store on a line of the calling thread's own).
    pub fn metrics(mut self, on: bool) -> Self {
        self.observe.metrics = on;
        self
    }

    /// Calls `hook` for each rejection (shadow ones included), for logging: on the deciding
    /// thread, after the decision, outside the limiter's read sections. Admissions never
    /// call it.
    pub fn on_reject(mut self, hook: impl Fn(&Rejection<'_>) + Send + Sync + 'static) -> Self {
        self.observe.hook = Some(Arc::new(hook));
        self
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
            StoreSpec::Memory => Limiter::observed(self.quota, self.clock, self.observe),
            #[cfg(all(unix, not(sluicegate_loom)))]
            ref spec @ StoreSpec::Shm { .. } => {
                use crate::store::shm::{ShmBucket, ShmStore};
                let mut clock = self.clock;
                let store = ShmStore::open_for(spec, self.quota, Some(1), 1, &mut clock)?;
                let bucket = ShmBucket::new(store, &self.quota)?;
                let inner = Inner {
                    codec: bucket.codec().clone(),
                    slot: Slot::External(Box::new(External::Shm(bucket))),
                };
                Ok(Limiter::assemble(inner, self.quota, 0, clock, self.observe))
            }
            #[cfg(all(feature = "redis", not(sluicegate_loom)))]
            ref spec @ StoreSpec::Redis { .. } => {
                let bucket =
                    crate::store::redis::RedisBucket::open(spec, &self.quota, self.clock.now())?;
                let inner = Inner {
                    codec: bucket.codec().clone(),
                    slot: Slot::External(Box::new(External::Redis(bucket))),
                };
                Ok(Limiter::assemble(
                    inner,
                    self.quota,
                    0,
                    self.clock,
                    self.observe,
                ))
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
    // touches exactly this block, the clock and the counters' pointer beside it, and no
    // neighbour shares its cache lines.
    inner: CachePadded<Inner>,
    clock: C,
    obs: Observe<()>,
    /// The generations after the first (live reconfiguration, `live.rs`).
    live: Live,
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
            observe: ObserveOptions::default(),
        }
    }
}

impl<C: Clock> Limiter<C> {
    /// A limiter reading `clock`; the bucket is created now, with the quota's initial tokens.
    pub fn with_clock(quota: Quota, clock: C) -> Result<Self, Error> {
        Self::observed(quota, clock, ObserveOptions::default())
    }

    fn observed(quota: Quota, clock: C, observe: ObserveOptions<()>) -> Result<Self, Error> {
        let now = clock.now();
        let codec = Codec::new(&quota, now)?;
        codec.check_word(now, 0)?;
        let inner = Inner {
            slot: Slot::new(&codec, now),
            codec,
        };
        Ok(Self::assemble(inner, quota, now, clock, observe))
    }

    /// `origin`: the clock reading the codecs are compiled for (the interval grid's anchor).
    fn assemble(
        inner: Inner,
        quota: Quota,
        origin: u64,
        clock: C,
        observe: ObserveOptions<()>,
    ) -> Self {
        Self {
            inner: CachePadded::new(inner),
            clock,
            obs: Observe::new(observe),
            live: Live::new(quota, origin),
        }
    }

    /// `f` on the current generation: the inline one, or (once a reconfiguration sealed it)
    /// the published one. `f` returns `None` when the slot it was given is sealed.
    #[inline(always)]
    fn on_current<R>(&self, f: impl Fn(&Stage) -> Result<Option<R>, Error>) -> Result<R, Error> {
        match f(&self.inner)? {
            Some(r) => Ok(r),
            None => self.live.decide(&self.inner, &f),
        }
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
        // The default quota (continuous refill, one u64 word) inlines into the caller in u64
        // arithmetic; every other algorithm, width, error or generation goes through the
        // general path.
        if let Some(d) = self.inner.fast(now, cost) {
            return Ok(self.obs.decided(d, no_key, cost));
        }
        self.try_acquire_general(now, cost)
    }

    #[inline(never)]
    fn try_acquire_general(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        // A reconfigured limiter's first generation is sealed: the current one, by the same
        // fast path, inside a read section.
        if self.live.published() {
            if let Some(d) = self.live.fast(now, cost) {
                return Ok(self.obs.decided(d, no_key, cost));
            }
        }
        let r = self.decide(now, cost, u64::MAX);
        self.observed_result(r, cost)
    }

    /// Counts (and, in shadow mode, lets through) a decision a caller asked for.
    #[inline]
    fn observed_result(&self, r: Result<Decision, Error>, cost: u64) -> Result<Decision, Error> {
        match r {
            Ok(d) => Ok(self.obs.decided(d, no_key, cost)),
            Err(e) => {
                self.obs.failed(&e);
                Err(e)
            }
        }
    }

    /// The decision for `cost` at `now`, a leaky queue admitting only with a wait of at most
    /// `within` ns (`u64::MAX`: its own bound); not counted, no shadow.
    fn decide(&self, now: u64, cost: u64, within: u64) -> Result<Decision, Error> {
        if let Some(b) = self.inner.external() {
            return b.reserve(now, cost, within);
        }
        self.on_current(|g| general(g, now, cost, within))
    }

    /// The current state, changing nothing (a request of cost 0; not counted). On Redis,
    /// `Err(`[`Error::Store`]`)` when the server does not answer, whatever the URL's
    /// `on_error` says: a peek is not an admission (docs/REDIS.md, "When Redis is slow or
    /// down").
    pub fn peek(&self) -> Result<Decision, Error> {
        let now = self.clock.now();
        if let Some(b) = self.inner.external() {
            return b.look(now);
        }
        self.decide(now, 0, u64::MAX)
    }

    /// Gives `cost` tokens back (for work that was admitted but not done), capped at capacity.
    pub fn refund(&self, cost: u64) -> Result<(), Error> {
        self.refund_at(self.clock.now(), cost)
    }

    /// [`refund`](Self::refund) at an explicit clock reading.
    pub fn refund_at(&self, now: u64, cost: u64) -> Result<(), Error> {
        if let Some(b) = self.inner.external() {
            b.check(now, 0)?;
            return b.refund(now, cost);
        }
        self.on_current(|g| {
            if !checked(g, now, 0)? {
                return Ok(None);
            }
            Ok(g.slot.refund(&g.codec, now, cost))
        })
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
        let within = if self.inner.external().is_some() {
            max_wait_ns.min(u64::MAX - 1)
        } else {
            max_wait_ns
        };
        let r = self.decide(now, cost, within);
        self.observed_result(r, cost)
    }

    /// Gives a reservation (or admitted cost) back: the same as [`refund`](Self::refund).
    pub fn cancel(&self, cost: u64) -> Result<(), Error> {
        self.refund(cost)
    }

    /// Acquires `cost`, blocking the thread for at most `max_wait` ([`Duration::MAX`]: as long
    /// as needed). Returns the admitting decision, or the rejection when the quota cannot admit
    /// `cost` in time: the policy of [`AcquirePlan`] (a leaky queue reserves a slot within the
    /// deadline and sleeps until it; other algorithms sleep `retry_after` and try again). In
    /// shadow mode it never waits: a round enforcement would refuse is let through.
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
        // The algorithm never changes: a reconfiguration keeps it.
        let queue = matches!(self.inner.codec, Codec::LeakyQueue(_));
        AcquirePlan::new(self.clock.now(), cost, max_wait, queue)
    }

    /// One round of `plan` at the clock's reading now: what to do next ([`Next`]). The
    /// outcome (admitted, or rejected for good) is counted once; the rounds before it are not.
    pub fn poll_acquire(&self, plan: &mut AcquirePlan) -> Result<Next, Error> {
        let cost = plan.cost();
        let external = self.inner.external().is_some();
        let next = plan.poll(self.clock.now(), |now, left| {
            let within = if external {
                left.min(u64::MAX - 1)
            } else {
                left
            };
            let d = self.decide(now, cost, within)?;
            Ok(self.obs.shadowed(d))
        });
        match next {
            Ok(Next::Admit(d)) | Ok(Next::Reject(d)) => {
                self.obs.outcome(d, no_key, cost);
            }
            Ok(Next::Retry(_)) => {}
            Err(ref e) => self.obs.failed(e),
        }
        next
    }

    /// Checks a request against the quota without consuming (composite limits). Advisory: the
    /// operations below check again against the generation they run on.
    #[inline]
    pub(crate) fn check_at(&self, now: u64, cost: u64) -> Result<(), Error> {
        match self.inner.external() {
            Some(b) => b.check(now, cost),
            None => self.on_current(|g| Ok(checked(g, now, cost)?.then_some(()))),
        }
    }

    /// `try_acquire_at`, not counted and without shadow mode (a composite's part). `Err` for
    /// a request the current quota refuses, or from a store outside the process.
    #[inline]
    pub(crate) fn acquire_checked(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        self.decide(now, cost, u64::MAX)
    }

    /// The decision `try_acquire_at` would return, consuming nothing.
    #[inline]
    pub(crate) fn peek_checked(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        if let Some(b) = self.inner.external() {
            return b.peek(now, cost);
        }
        self.on_current(|g| {
            if !checked(g, now, cost)? {
                return Ok(None);
            }
            Ok(g.slot.peek(&g.codec, now, cost))
        })
    }

    /// `refund_at` after `check_at(now, 0)` passed.
    #[inline]
    pub(crate) fn refund_checked(&self, now: u64, cost: u64) -> Result<(), Error> {
        if let Some(b) = self.inner.external() {
            return b.refund(now, cost);
        }
        self.refund_at(now, cost)
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
            Some(b) => {
                let r = b.acquire_async(now, cost).await;
                self.observed_result(r, cost)
            }
            None => self.try_acquire_at(now, cost),
        }
    }

    /// [`peek`](Self::peek) for async code (cargo feature `redis`): not counted, as `peek`.
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    pub async fn peek_async(&self) -> Result<Decision, Error> {
        let now = self.clock.now();
        match self.inner.redis() {
            Some(b) => b.peek_async(now).await,
            None => self.decide(now, 0, u64::MAX),
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

    /// Whether the bucket is full now. `Err` only from a shared-memory region, or from a Redis
    /// server that does not answer (whatever `on_error` says, as [`peek`](Self::peek)).
    pub fn is_full(&self) -> Result<bool, Error> {
        let now = self.clock.now();
        if let Some(b) = self.inner.external() {
            return b.is_full(now);
        }
        self.on_current(|g| Ok(g.slot.is_full(&g.codec, now)))
    }

    /// Changes the quota now, keeping the bucket's state: what it holds is carried into the new
    /// quota by the carry rule of docs/OPERATIONS.md (a token bucket's tokens are kept as
    /// tokens, clamped to the new burst; a window keeps its count; a leaky queue its backlog;
    /// a sliding log its log). Atomic with respect to every decision racing it: each runs
    /// either the old quota on the old state or the new quota on the carried state. The lever
    /// of an adaptive rate: call it from your own signal (latency, error rate, a downstream's
    /// quota), from any thread.
    ///
    /// `Err(`[`Error::InvalidOption`]`)` for a quota of another algorithm or refill mode
    /// (carrying is defined within one), `Err(`[`Error::Store`]`)` of kind `Unsupported` for a
    /// bucket in a shared-memory region or on Redis (docs/OPERATIONS.md says why), and the
    /// quota's own errors; the limiter is then unchanged.
    ///
    /// ```
    /// use sluicegate::{Limiter, ManualClock};
    ///
    /// let limiter = Limiter::with_clock("10/s".parse()?, ManualClock::new(0))?;
    /// limiter.try_acquire(4)?; // 6 tokens left
    /// limiter.set_quota("100/s; burst=5".parse()?)?; // tokens carried, clamped to the burst
    /// assert_eq!(limiter.peek()?.remaining(), 5);
    /// assert_eq!(limiter.quota().to_string(), "100/s; burst=5");
    /// # Ok::<(), sluicegate::Error>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) -> Result<(), Error> {
        self.reconfigure(quota, None)
    }

    /// [`set_quota`](Self::set_quota) at an explicit clock reading (simulations, tests).
    pub fn set_quota_at(&self, quota: Quota, now: u64) -> Result<(), Error> {
        self.reconfigure(quota, Some(now))
    }

    fn reconfigure(&self, quota: Quota, at: Option<u64>) -> Result<(), Error> {
        if let Some(b) = self.inner.external() {
            let store = b.store_name();
            return Err(Error::store(
                crate::error::StoreErrorKind::Unsupported,
                store,
                "live reconfiguration of a bucket in a shared-memory region or on Redis: every \
                 process decides with the quota its region or key was made for \
                 (docs/OPERATIONS.md); open a new region or key for the new quota",
            ));
        }
        let r = self.live.reconfigure(&self.inner, quota, || {
            at.unwrap_or_else(|| self.clock.now())
        });
        if r.is_ok() {
            self.obs.reconfigured();
        }
        r
    }

    /// Switches shadow (dry-run) mode on or off (see [`LimiterBuilder::shadow`]); the next
    /// decisions follow it.
    pub fn set_shadow(&self, on: bool) {
        self.obs.set_shadow(on);
    }

    /// Whether the limiter is in shadow mode.
    pub fn is_shadow(&self) -> bool {
        self.obs.is_shadow()
    }

    /// The counters ([`Metrics`]), or `None` when counting is off
    /// ([`LimiterBuilder::metrics`]).
    pub fn metrics(&self) -> Option<Metrics> {
        self.obs.snapshot()
    }

    /// The quota this limiter enforces now.
    pub fn quota(&self) -> Quota {
        self.live.quota()
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Whether the state needs the 128-bit word (exposed for benchmarks and diagnostics).
    pub fn is_wide(&self) -> bool {
        self.live.inspect(&self.inner, |g| g.codec.wide())
    }
}

/// A single bucket has no key: the hook is shown `()`.
#[inline(always)]
fn no_key<'a>() -> Option<KeyRef<'a, ()>> {
    Some(KeyRef::Borrowed(&()))
}

/// The decision of one generation for `cost` at `now` (a leaky queue admitting only with a
/// wait of at most `within` ns); `None` when its slot is sealed.
#[inline]
fn general(g: &Stage, now: u64, cost: u64, within: u64) -> Result<Option<Decision>, Error> {
    if !checked(g, now, cost)? {
        return Ok(None);
    }
    Ok(g.slot.reserve(&g.codec, now, cost, within))
}

/// The request checks against a generation's codec: `Ok(true)` to go on, `Ok(false)` when the
/// generation's slot is sealed (its checks no longer apply: the caller moves on to the next),
/// `Err` when they fail on a generation that was current.
#[inline]
fn checked(g: &Stage, now: u64, cost: u64) -> Result<bool, Error> {
    match g.codec.check_word(now, cost) {
        Ok(()) => Ok(true),
        Err(_) if g.slot.is_sealed() => Ok(false),
        Err(e) => Err(e),
    }
}

impl<C: Clock> core::fmt::Debug for Limiter<C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Limiter")
            .field("quota", &self.quota().to_string())
            .field("wide", &self.is_wide())
            .finish_non_exhaustive()
    }
}
