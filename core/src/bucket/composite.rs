//! Composite limits: several limiters (per user, per tenant, global) consumed all-or-nothing.
//!
//! A request `(t, c)` is checked against every part first (a cost above any part's capacity is
//! an error and consumes nothing), then acquired from each part in order at the same `t`. If
//! part `j` rejects, the cost already taken from parts `0..j` is refunded at `t` and the
//! request is rejected. The decision reports the tightest part (least `remaining`, the first
//! on ties: its `limit` and `remaining`) and the longest `retry_after` and `reset_after` of all
//! parts. For a rejection the parts are read as they stand after the refund: parts before `j`
//! as a peek, part `j` as its rejection, parts after `j` as the decision they would give for
//! `c` (read, not consumed). See `docs/SEMANTICS.md`, "Composite limits".
//!
//! A part's refund can fail (a shared-memory region found corrupt, a Redis part's error):
//! every part is still given its cost back, and the first error is returned once all were
//! tried, by the refund of a rejection and by [`Composite::refund`] alike. Only the parts that
//! failed may keep the cost.
//!
//! Between the acquisition from part `i` and its refund another thread may see part `i`
//! with `c` fewer tokens: a transient, conservative rejection, never an over-admission (each
//! part is only ever consumed through its own lock-free protocol). The loom model
//! `composite_refund_is_all_or_nothing` checks every interleaving of two such requests.

use super::acquire::{self, AcquirePlan, Next};
use crate::clock::Clock;
use crate::metrics::{KeyRef, Metrics, Observe, ObserveOptions, Rejection};
use crate::{Decision, Error, Limiter};
use core::borrow::Borrow;
use std::sync::Arc;
use std::time::Duration;

/// Several limiters consumed all-or-nothing, reading one clock (the first limiter's; a part
/// whose default clock counts from another origin, a shared-memory region's or this
/// process's beside a region, is decided at its own reading, taken at the same moment).
///
/// ```
/// use sluicegate::{composite::Composite, Limiter, ManualClock};
///
/// let clock = ManualClock::new(0);
/// let per_user = Limiter::with_clock("2/s".parse()?, clock.clone())?;
/// let global = Limiter::with_clock("3/s; algorithm=fixed_window".parse()?, clock.clone())?;
/// let both = Composite::new(vec![per_user, global]);
/// assert_eq!(both.try_acquire(1)?.remaining(), 1); // the tighter of 1 and 2
/// assert!(both.try_acquire(1)?.allowed());
/// let d = both.try_acquire(1)?; // per_user is empty: the global window is refunded
/// assert!(!d.allowed());
/// assert_eq!(both.parts()[1].peek()?.remaining(), 1);
/// # Ok::<(), sluicegate::Error>(())
/// ```
///
/// A composite counts, shadows and hooks as one limiter ([`with_metrics`](Self::with_metrics),
/// [`with_shadow`](Self::with_shadow), [`with_on_reject`](Self::with_on_reject)): its parts
/// decide for it raw, and their own counters, shadow modes and hooks apply to the calls made
/// on them directly. A part's quota can be changed live ([`Limiter::set_quota`] on
/// `parts()[i]`); a request racing it checks and decides against the quota it meets.
pub struct Composite<C: Clock> {
    parts: Vec<Limiter<C>>,
    obs: Observe<()>,
}

impl<C: Clock> Composite<C> {
    /// Limiters consumed in the given order (put the most likely to reject first).
    ///
    /// # Panics
    /// If `parts` is empty.
    pub fn new(parts: Vec<Limiter<C>>) -> Self {
        assert!(
            !parts.is_empty(),
            "a composite limit needs at least one part"
        );
        Self {
            parts,
            obs: Observe::new(ObserveOptions::default()),
        }
    }

    fn with_options(self, f: impl FnOnce(&mut ObserveOptions<()>)) -> Self {
        let mut o = ObserveOptions {
            metrics: self.obs.counters.is_some(),
            shadow: self.obs.is_shadow(),
            hook: self.obs.hook().cloned(),
        };
        f(&mut o);
        Self {
            parts: self.parts,
            obs: Observe::new(o),
        }
    }

    /// Counts the composite's decisions ([`metrics`](Self::metrics); default off).
    #[must_use]
    pub fn with_metrics(self, on: bool) -> Self {
        self.with_options(|o| o.metrics = on)
    }

    /// Starts in shadow (dry-run) mode: see
    /// [`LimiterBuilder::shadow`](crate::LimiterBuilder::shadow). A would-be rejection takes
    /// nothing from any part (the parts taken before the rejecting one are refunded, as in
    /// enforcement), and is let through.
    #[must_use]
    pub fn with_shadow(self, on: bool) -> Self {
        self.with_options(|o| o.shadow = on)
    }

    /// Calls `hook` for each rejection of the composite (shadow ones included).
    #[must_use]
    pub fn with_on_reject(self, hook: impl Fn(&Rejection<'_>) + Send + Sync + 'static) -> Self {
        self.with_options(|o| o.hook = Some(Arc::new(hook)))
    }

    /// Switches shadow mode on or off.
    pub fn set_shadow(&self, on: bool) {
        self.obs.set_shadow(on);
    }

    /// Whether the composite is in shadow mode.
    pub fn is_shadow(&self) -> bool {
        self.obs.is_shadow()
    }

    /// The composite's counters, or `None` when counting is off.
    pub fn metrics(&self) -> Option<Metrics> {
        self.obs.snapshot()
    }

    fn observed(&self, r: Result<Decision, Error>, cost: u64) -> Result<Decision, Error> {
        match r {
            Ok(d) => Ok(self.obs.decided(d, no_key, cost)),
            Err(e) => {
                self.obs.failed(&e);
                Err(e)
            }
        }
    }

    /// The limiters, in order.
    pub fn parts(&self) -> &[Limiter<C>] {
        &self.parts
    }

    /// Acquires `cost` from every part now, or from none.
    pub fn try_acquire(&self, cost: u64) -> Result<Decision, Error> {
        let r = all_or_nothing(&self.parts, &Readings::read(&self.parts), cost, |_, _| {});
        self.observed(r, cost)
    }

    /// [`try_acquire`](Self::try_acquire) at an explicit clock reading.
    pub fn try_acquire_at(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        let r = all_or_nothing(&self.parts, &Readings::One(now), cost, |_, _| {});
        self.observed(r, cost)
    }

    /// [`try_acquire`](Self::try_acquire), also returning each part's decision (in order), e.g.
    /// to list every policy in the HTTP fields with [`crate::http::policies_headers`].
    pub fn try_acquire_each(&self, cost: u64) -> Result<(Decision, Vec<Decision>), Error> {
        self.each_at(&Readings::read(&self.parts), cost)
    }

    /// [`try_acquire_each`](Self::try_acquire_each) at an explicit clock reading.
    pub fn try_acquire_each_at(
        &self,
        now: u64,
        cost: u64,
    ) -> Result<(Decision, Vec<Decision>), Error> {
        self.each_at(&Readings::One(now), cost)
    }

    fn each_at(&self, now: &Readings, cost: u64) -> Result<(Decision, Vec<Decision>), Error> {
        let mut each: Vec<Option<Decision>> = vec![None; self.parts.len()];
        let r = all_or_nothing(&self.parts, now, cost, |i, d| each[i] = Some(d));
        let d = self.observed(r, cost)?;
        let each = each
            .into_iter()
            .map(|d| d.expect("every part reports a decision"))
            .collect();
        Ok((d, each))
    }

    /// The combined current state, changing nothing and counting nothing ([`peek_all`]).
    pub fn peek(&self) -> Result<Decision, Error> {
        peek_all(&self.parts)
    }

    /// [`peek`](Self::peek), also returning each part's state (in order).
    pub fn peek_each(&self) -> Result<(Decision, Vec<Decision>), Error> {
        peek_each(&self.parts)
    }

    /// Acquires `cost` from every part, blocking the thread for at most `max_wait`: the
    /// policy of [`AcquirePlan`] over [`try_acquire`](Self::try_acquire) (a leaky-queue part
    /// admits with its own wait, which the caller then sleeps).
    pub fn acquire(&self, cost: u64, max_wait: Duration) -> Result<Decision, Error> {
        let mut plan = self.start_acquire(cost, max_wait);
        acquire::block_on(|| self.poll_acquire(&mut plan))
    }

    /// Starts an acquire for callers that do their own waiting; see
    /// [`Limiter::start_acquire`].
    pub fn start_acquire(&self, cost: u64, max_wait: Duration) -> AcquirePlan {
        AcquirePlan::new(self.parts[0].clock().now(), cost, max_wait, false)
    }

    /// One round of `plan` at the first part's clock reading now.
    pub fn poll_acquire(&self, plan: &mut AcquirePlan) -> Result<Next, Error> {
        let cost = plan.cost();
        let now = self.parts[0].clock().now();
        let next = plan.poll(now, |now, _left| {
            let now = Readings::of(&self.parts, now);
            let d = all_or_nothing(&self.parts, &now, cost, |_, _| {})?;
            Ok(self.obs.shadowed(d))
        });
        match next {
            Ok(Next::Admit(d)) | Ok(Next::Reject(d)) => self.obs.outcome(d, no_key, cost),
            Ok(Next::Retry(_)) => {}
            Err(ref e) => self.obs.failed(e),
        }
        next
    }

    /// Gives `cost` back to every part now. A part that fails does not stop the others: each
    /// is tried, and the first error is returned once all were (the failed part may keep the
    /// cost; retry it alone, `parts()[i].refund`, since the others were refunded).
    pub fn refund(&self, cost: u64) -> Result<(), Error> {
        refund_each(&self.parts, &Readings::read(&self.parts), cost)
    }

    /// [`refund`](Self::refund) at an explicit clock reading.
    pub fn refund_at(&self, now: u64, cost: u64) -> Result<(), Error> {
        refund_each(&self.parts, &Readings::One(now), cost)
    }
}

/// The clock reading each part is decided at: one for all (the first part's, or the caller's
/// `now` in the `_at` functions), or, where some parts' default clocks count from other
/// origins than the first part's ([`Clock::same_timeline`]: two shared-memory regions, or a
/// region and this process), each such part's own, read at the same moment. The first part's
/// reading would be seconds off for such a part, which it would then over-admit or refuse.
enum Readings {
    One(u64),
    Each(Vec<u64>),
}

impl Readings {
    /// The readings, the first part's being `first`.
    fn of<C: Clock, L: Borrow<Limiter<C>>>(parts: &[L], first: u64) -> Self {
        let clock = parts[0].borrow().clock();
        if parts[1..]
            .iter()
            .all(|p| p.borrow().clock().same_timeline(clock))
        {
            return Readings::One(first);
        }
        Readings::Each(
            parts
                .iter()
                .map(|p| {
                    let own = p.borrow().clock();
                    if own.same_timeline(clock) {
                        first
                    } else {
                        own.now()
                    }
                })
                .collect(),
        )
    }

    /// The readings now.
    fn read<C: Clock, L: Borrow<Limiter<C>>>(parts: &[L]) -> Self {
        Self::of(parts, parts[0].borrow().clock().now())
    }

    /// Part `i`'s reading.
    #[inline]
    fn at(&self, i: usize) -> u64 {
        match self {
            Readings::One(now) => *now,
            Readings::Each(each) => each[i],
        }
    }
}

/// A composite has no key: the hook is shown `()`.
fn no_key<'a>() -> Option<KeyRef<'a, ()>> {
    Some(KeyRef::Borrowed(&()))
}

impl<C: Clock> core::fmt::Debug for Composite<C> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(&self.parts).finish()
    }
}

/// Acquires `cost` from every limiter at `now`, all-or-nothing (limiters owned elsewhere,
/// e.g. one per user and one global). Clocks are not read: `now` applies to every part.
///
/// # Panics
/// If `parts` is empty.
pub fn try_acquire_all_at<C: Clock>(
    parts: &[&Limiter<C>],
    now: u64,
    cost: u64,
) -> Result<Decision, Error> {
    all_or_nothing(parts, &Readings::One(now), cost, |_, _| {})
}

/// The combined current state of `parts`, changing nothing and counting nothing: each part's
/// [`Limiter::peek`], combined as a request of cost 0 is (the tightest part's figures). On
/// Redis each part's bucket is read, and a server that does not answer is a store error
/// whatever the URL's `on_error` says, as a single limiter's peek is (a peek is not an
/// admission; a request of cost 0 was decided by the policy instead, and counted).
///
/// # Panics
/// If `parts` is empty.
pub fn peek_all<C: Clock, L: Borrow<Limiter<C>>>(parts: &[L]) -> Result<Decision, Error> {
    Ok(peek_each(parts)?.0)
}

/// [`peek_all`], also returning each part's state (in order).
///
/// # Panics
/// If `parts` is empty.
pub fn peek_each<C: Clock, L: Borrow<Limiter<C>>>(
    parts: &[L],
) -> Result<(Decision, Vec<Decision>), Error> {
    assert!(
        !parts.is_empty(),
        "a composite limit needs at least one part"
    );
    let each = parts
        .iter()
        .map(|p| p.borrow().peek())
        .collect::<Result<Vec<_>, _>>()?;
    Ok((combined(&each), each))
}

/// Parts' states combined as a request of cost 0 is: the tightest part's figures, the longest
/// waits; admitted if every part admits it.
fn combined(each: &[Decision]) -> Decision {
    let mut acc = Combined::default();
    each.iter().for_each(|&d| acc.add(d));
    acc.finish(each.iter().all(Decision::allowed))
}

/// The protocol. `each(i, d)` receives part `i`'s decision as the combined one reads it (a
/// part may be reported twice; the last report stands).
fn all_or_nothing<C: Clock, L: Borrow<Limiter<C>>>(
    parts: &[L],
    now: &Readings,
    cost: u64,
    mut each: impl FnMut(usize, Decision),
) -> Result<Decision, Error> {
    assert!(
        !parts.is_empty(),
        "a composite limit needs at least one part"
    );
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    if let Some(r) = on_redis(parts, now.at(0), cost, false) {
        let (d, ds) = r?;
        ds.into_iter().enumerate().for_each(|(i, d)| each(i, d));
        return Ok(d);
    }
    let parts = || parts.iter().map(Borrow::borrow);
    for (i, p) in parts().enumerate() {
        p.check_at(now.at(i), cost)?;
    }
    let mut acc = Combined::default();
    for (j, p) in parts().enumerate() {
        // A part in a shared-memory region can fail (a corrupt region, a stalled insert): the
        // parts already taken are given back, and the error returned.
        let d = match p.acquire_checked(now.at(j), cost) {
            Ok(d) => d,
            Err(e) => {
                let _ = refund_every(parts().take(j), now, cost);
                return Err(e);
            }
        };
        each(j, d);
        if d.allowed() {
            acc.add(d);
            continue;
        }
        // Every part taken is given its cost back, even after one of them failed to take it
        // back: the first error is returned once all were tried.
        refund_every(parts().take(j), now, cost)?;
        let mut acc = Combined::default();
        for (i, q) in parts().enumerate().take(j) {
            let pd = q.peek_checked(now.at(i), 0)?;
            each(i, pd);
            acc.add(pd);
        }
        acc.add(d);
        for (i, q) in parts().enumerate().skip(j + 1) {
            let pd = q.peek_checked(now.at(i), cost)?;
            each(i, pd);
            acc.add(pd);
        }
        return Ok(acc.finish(false));
    }
    Ok(acc.finish(true))
}

/// [`refund_all_at`] reading the clocks as [`try_acquire_all`] does (each part whose default
/// clock counts from another origin than the first part's at its own reading).
///
/// # Panics
/// If `parts` is empty.
pub fn refund_all<C: Clock>(parts: &[&Limiter<C>], cost: u64) -> Result<(), Error> {
    assert!(
        !parts.is_empty(),
        "a composite limit needs at least one part"
    );
    refund_each(parts, &Readings::read(parts), cost)
}

/// Gives `cost` back to every limiter at `now` (limiters owned elsewhere), or to none when
/// the reading is out of any one's range. A limiter whose refund fails does not stop the
/// others: the first error is returned once all were tried (see [`Composite::refund`]).
pub fn refund_all_at<C: Clock>(parts: &[&Limiter<C>], now: u64, cost: u64) -> Result<(), Error> {
    refund_each(parts, &Readings::One(now), cost)
}

fn refund_each<C: Clock, L: Borrow<Limiter<C>>>(
    parts: &[L],
    now: &Readings,
    cost: u64,
) -> Result<(), Error> {
    #[cfg(all(feature = "redis", not(sluicegate_loom)))]
    if let Some(r) = on_redis(parts, now.at(0), cost, true) {
        return r.map(drop);
    }
    for (i, p) in parts.iter().enumerate() {
        p.borrow().check_at(now.at(i), 0)?;
    }
    refund_every(parts.iter().map(Borrow::borrow), now, cost)
}

/// Gives `cost` back to each of `parts` at `now` (their checks passed): every part is tried,
/// even after one failed (a shared-memory region found corrupt, a Redis part's error), and the
/// first error is returned once all were. A part that failed may keep the cost; every other
/// part got it back, so a caller retrying the whole refund would give those parts the cost
/// twice (retry the failed part alone: `parts()[i].refund`).
fn refund_every<'a, C: Clock + 'a>(
    parts: impl Iterator<Item = &'a Limiter<C>>,
    now: &Readings,
    cost: u64,
) -> Result<(), Error> {
    let mut first = None;
    for (i, p) in parts.enumerate() {
        if let Err(e) = p.refund_checked(now.at(i), cost) {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// Starts an acquire over limiters owned elsewhere (see [`Composite::start_acquire`]), at the
/// first limiter's clock reading.
///
/// # Panics
/// If `parts` is empty.
pub fn start_acquire_all<C: Clock>(
    parts: &[&Limiter<C>],
    cost: u64,
    max_wait: Duration,
) -> AcquirePlan {
    assert!(
        !parts.is_empty(),
        "a composite limit needs at least one part"
    );
    AcquirePlan::new(parts[0].clock().now(), cost, max_wait, false)
}

/// One round of `plan` over limiters owned elsewhere, at the first limiter's clock reading
/// now (see [`Composite::poll_acquire`]).
///
/// # Panics
/// If `parts` is empty.
pub fn poll_acquire_all<C: Clock>(
    parts: &[&Limiter<C>],
    plan: &mut AcquirePlan,
) -> Result<Next, Error> {
    assert!(
        !parts.is_empty(),
        "a composite limit needs at least one part"
    );
    let cost = plan.cost();
    let now = parts[0].clock().now();
    plan.poll(now, |now, _left| {
        all_or_nothing(parts, &Readings::of(parts, now), cost, |_, _| {})
    })
}

/// [`try_acquire_all_at`] reading the first limiter's clock.
pub fn try_acquire_all<C: Clock>(parts: &[&Limiter<C>], cost: u64) -> Result<Decision, Error> {
    assert!(
        !parts.is_empty(),
        "a composite limit needs at least one part"
    );
    all_or_nothing(parts, &Readings::read(parts), cost, |_, _| {})
}

/// The parts' Redis buckets, when every part is on Redis.
#[cfg(all(feature = "redis", not(sluicegate_loom)))]
fn redis_parts<'a, C: Clock + 'a, L: Borrow<Limiter<C>>>(
    parts: &'a [L],
) -> Option<Vec<&'a crate::store::redis::RedisBucket>> {
    parts.iter().map(|p| p.borrow().redis_bucket()).collect()
}

/// A composite request over limiters that are all on one Redis deployment: one script call,
/// all-or-nothing on the server (`None` when the parts are not all there).
#[cfg(all(feature = "redis", not(sluicegate_loom)))]
#[allow(clippy::type_complexity)]
fn on_redis<C: Clock, L: Borrow<Limiter<C>>>(
    parts: &[L],
    now: u64,
    cost: u64,
    refund: bool,
) -> Option<Result<(Decision, Vec<Decision>), Error>> {
    crate::store::redis::composite(&redis_parts(parts)?, now, cost, refund)
}

#[cfg(all(feature = "redis", not(sluicegate_loom)))]
impl<C: Clock> Composite<C> {
    /// [`try_acquire`](Self::try_acquire) for async code (cargo feature `redis`): when every
    /// part is on one Redis deployment, one script call decides all of them, awaited instead
    /// of blocking the thread; otherwise the parts are decided as `try_acquire` does.
    pub async fn try_acquire_async(&self, cost: u64) -> Result<Decision, Error> {
        Ok(self.try_acquire_each_async(cost).await?.0)
    }

    /// [`peek`](Self::peek) for async code (cargo feature `redis`): each part read as
    /// [`Limiter::peek_async`] reads it, awaited instead of blocking the thread.
    pub async fn peek_async(&self) -> Result<Decision, Error> {
        let mut each = Vec::with_capacity(self.parts.len());
        for p in &self.parts {
            each.push(p.peek_async().await?);
        }
        Ok(combined(&each))
    }

    /// [`try_acquire_each`](Self::try_acquire_each) for async code (cargo feature `redis`).
    pub async fn try_acquire_each_async(
        &self,
        cost: u64,
    ) -> Result<(Decision, Vec<Decision>), Error> {
        let now = Readings::read(&self.parts);
        if let Some(parts) = redis_parts(&self.parts) {
            if let Some(r) = crate::store::redis::composite_async(&parts, now.at(0), cost).await {
                let (d, each) = match r {
                    Ok(r) => r,
                    Err(e) => {
                        self.obs.failed(&e);
                        return Err(e);
                    }
                };
                return Ok((self.obs.decided(d, no_key, cost), each));
            }
        }
        self.each_at(&now, cost)
    }
}

#[derive(Default)]
struct Combined {
    tightest: Option<Decision>,
    retry: u64,
    reset: u64,
}

impl Combined {
    fn add(&mut self, d: Decision) {
        if self.tightest.is_none_or(|t| d.remaining() < t.remaining()) {
            self.tightest = Some(d);
        }
        self.retry = self.retry.max(d.retry_after_nanos());
        self.reset = self.reset.max(d.reset_after_nanos());
    }

    fn finish(self, allowed: bool) -> Decision {
        let t = self.tightest.expect("at least one part");
        Decision::from_parts(
            allowed,
            t.limit(),
            t.remaining(),
            1,
            self.retry,
            self.reset,
            1,
            t.window_secs(),
        )
    }
}
