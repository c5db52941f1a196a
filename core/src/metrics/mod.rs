//! What a limiter did: decision counters ([`Metrics`]), rendered in the Prometheus text format
//! by [`render_prometheus`]; shadow (dry-run) mode; and the hook called for each rejection
//! ([`Rejection`]). docs/OPERATIONS.md describes each counter and the output.
//!
//! Counting is optional (off by default: `LimiterBuilder::metrics`, `KeyedBuilder::metrics`).
//! When on, a decision adds one to a slot of the calling thread's own (a load and a store on a
//! line no other thread writes; see `counters.rs`); when off it costs one test of a pointer.
//! Shadow mode and the rejection hook are read only on a rejection's path.

mod counters;
mod prometheus;

pub(crate) use counters::{Counters, Outcome};
pub use prometheus::render_prometheus;

use crate::sync::real::{AtomicU8, Ordering};
use crate::{Decision, Error};
use std::sync::Arc;

/// A snapshot of a limiter's counters ([`Limiter::metrics`](crate::Limiter::metrics),
/// [`KeyedLimiter::metrics`](crate::KeyedLimiter::metrics),
/// [`Composite::metrics`](crate::composite::Composite::metrics)).
///
/// Every decision a caller asked for (`try_acquire`, `reserve`, the outcome of an `acquire`)
/// is counted once, as exactly one of `allowed`, `rejected` or `shadow_rejected`; peeks,
/// refunds and the rounds an `acquire` waited through are not. Counters only grow (they wrap
/// at 2^64). While decisions run on other threads a snapshot holds, for each counter, a value
/// it had during the read; once they are done, the exact totals.
///
/// ```
/// use sluicegate::{Limiter, ManualClock};
///
/// let limiter = Limiter::builder("2/s".parse()?).clock(ManualClock::new(0)).metrics(true).build()?;
/// for _ in 0..3 {
///     limiter.try_acquire(1)?;
/// }
/// let m = limiter.metrics().expect("counting is on");
/// assert_eq!((m.allowed, m.rejected, m.shadow_rejected), (2, 1, 0));
/// # Ok::<(), sluicegate::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Metrics {
    /// Requests admitted.
    pub allowed: u64,
    /// Requests rejected (enforced).
    pub rejected: u64,
    /// Requests that enforcement would have rejected, let through by shadow mode.
    pub shadow_rejected: u64,
    /// Keys evicted to make room or by a sweep (keyed limiters; full buckets, or the fullest
    /// under `OnFull::EvictFullest`). Removals and clears are not evictions.
    pub keys_evicted: u64,
    /// New keys refused at the key bound ([`Error::KeyStoreFull`]).
    pub key_store_full: u64,
    /// Calls that failed with a store's error ([`Error::Store`]).
    pub store_errors: u64,
    /// Quotas set by live reconfiguration (`set_quota`).
    pub reconfigurations: u64,
    /// Keys held now (keyed limiters in this process's memory; `None` otherwise).
    pub keys: Option<u64>,
    /// Whether the limiter is in shadow mode now.
    pub shadow: bool,
}

/// A rejection, as the hook set with `on_reject` sees it: the request's key (`()` for a
/// single-bucket limiter or a composite), its cost, and the decision. In shadow mode the
/// request went through: [`Decision::shadow_rejected`] tells.
#[derive(Clone, Copy, Debug)]
pub struct Rejection<'a, K: ?Sized = ()> {
    key: &'a K,
    decision: Decision,
    cost: u64,
}

impl<'a, K: ?Sized> Rejection<'a, K> {
    /// The key whose bucket rejected the request.
    pub fn key(&self) -> &'a K {
        self.key
    }

    /// The decision returned (`allowed()` is true in shadow mode, with
    /// [`shadow_rejected`](Decision::shadow_rejected) set).
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The cost asked for.
    pub fn cost(&self) -> u64 {
        self.cost
    }
}

/// A hook called for each rejection (for logging): it runs on the deciding thread, after the
/// decision, outside every lock and read section of the limiter, so it may call the limiter
/// back. A panic in it unwinds to the caller of the decision.
pub type RejectHook<K> = Arc<dyn Fn(&Rejection<'_, K>) + Send + Sync>;

/// [`Observe::flags`]: shadow mode is on.
const SHADOW: u8 = 1;
/// [`Observe::flags`]: decisions are counted.
const COUNTING: u8 = 2;
/// [`Observe::flags`]: a hook is set.
const HOOKED: u8 = 4;

/// What a limiter observes about its decisions: the counters (if on), shadow mode, the hook.
/// One byte of flags says which apply, so that a decision with nothing to observe pays one
/// load and a test: an admission tests the counting bit, a rejection the whole byte.
pub(crate) struct Observe<K: ?Sized> {
    flags: AtomicU8,
    pub(crate) counters: Option<Box<Counters>>,
    hook: Option<RejectHook<K>>,
}

/// The options of [`Observe`], as builders collect them.
pub(crate) struct ObserveOptions<K: ?Sized> {
    pub(crate) metrics: bool,
    pub(crate) shadow: bool,
    pub(crate) hook: Option<RejectHook<K>>,
}

impl<K: ?Sized> Default for ObserveOptions<K> {
    fn default() -> Self {
        Self {
            metrics: false,
            shadow: false,
            hook: None,
        }
    }
}

impl<K: ?Sized> core::fmt::Debug for ObserveOptions<K> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ObserveOptions")
            .field("metrics", &self.metrics)
            .field("shadow", &self.shadow)
            .field("hook", &self.hook.is_some())
            .finish()
    }
}

impl<K: ?Sized> Observe<K> {
    pub(crate) fn new(o: ObserveOptions<K>) -> Self {
        let flags = if o.shadow { SHADOW } else { 0 }
            | if o.metrics { COUNTING } else { 0 }
            | if o.hook.is_some() { HOOKED } else { 0 };
        Self {
            flags: AtomicU8::new(flags),
            counters: o.metrics.then(Counters::boxed),
            hook: o.hook,
        }
    }

    /// Whether there is nothing to observe: no counters (their flag is set at build, never
    /// later), no shadow mode, no hook. [`decided`](Self::decided) then returns the decision
    /// as it is and [`failed`](Self::failed) does nothing, so a caller may skip both.
    #[inline(always)]
    pub(crate) fn quiet(&self) -> bool {
        self.flags.load(Ordering::Relaxed) == 0
    }

    /// A decision a caller asked for: counted; a rejection let through in shadow mode, and
    /// shown to the hook (out of line).
    #[inline(always)]
    pub(crate) fn decided<'k>(
        &self,
        d: Decision,
        key: impl FnOnce() -> Option<KeyRef<'k, K>>,
        cost: u64,
    ) -> Decision
    where
        K: Sized + 'k,
    {
        let f = self.flags.load(Ordering::Relaxed);
        if d.allowed() {
            if f & COUNTING != 0 {
                self.count(Outcome::Allowed);
            }
            return d;
        }
        if f == 0 {
            return d;
        }
        // Branch-free: shadow mode sets two flags of the decision, and picks the counter.
        let shadow = f & SHADOW != 0;
        let d = d.shadow_if(shadow);
        if f & COUNTING != 0 {
            if let Some(c) = &self.counters {
                c.count_index(Outcome::Rejected as usize + usize::from(shadow));
            }
        }
        if f & HOOKED != 0 {
            // The decision stays in registers: the call takes a copy, and returns nothing.
            self.hooked(d, key, cost);
        }
        d
    }

    #[inline(always)]
    fn count(&self, o: Outcome) {
        if let Some(c) = &self.counters {
            c.count(o);
        }
    }

    /// Shows a rejection (as returned: let through in shadow mode) to the hook.
    #[cold]
    #[inline(never)]
    fn hooked<'k>(&self, d: Decision, key: impl FnOnce() -> Option<KeyRef<'k, K>>, cost: u64)
    where
        K: Sized + 'k,
    {
        if let Some(h) = &self.hook {
            call_hook(h, d, key, cost);
        }
    }

    /// Counts a decision already made as shadow mode makes it (an `acquire`'s outcome), and
    /// shows a rejection to the hook.
    #[inline]
    pub(crate) fn outcome<'k>(
        &self,
        d: Decision,
        key: impl FnOnce() -> Option<KeyRef<'k, K>>,
        cost: u64,
    ) where
        K: Sized + 'k,
    {
        let o = if d.shadow_rejected() {
            Outcome::ShadowRejected
        } else if d.allowed() {
            Outcome::Allowed
        } else {
            Outcome::Rejected
        };
        if let Some(c) = &self.counters {
            c.count(o);
        }
        if o != Outcome::Allowed {
            if let Some(h) = &self.hook {
                call_hook(h, d, key, cost);
            }
        }
    }

    /// A decision as shadow mode makes it, not counted (an `acquire`'s rounds).
    #[inline]
    pub(crate) fn shadowed(&self, d: Decision) -> Decision {
        if !d.allowed() && self.is_shadow() {
            return d.into_shadow();
        }
        d
    }

    /// Counts an error of a call, if it is one that is counted.
    #[cold]
    pub(crate) fn failed(&self, e: &Error) {
        let Some(c) = &self.counters else {
            return;
        };
        let counter = match e {
            Error::KeyStoreFull { .. } => &c.rare.key_store_full,
            Error::Store { .. } => &c.rare.store_errors,
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a reconfiguration.
    pub(crate) fn reconfigured(&self) {
        if let Some(c) = &self.counters {
            c.rare.reconfigurations.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(crate) fn hook(&self) -> Option<&RejectHook<K>> {
        self.hook.as_ref()
    }

    pub(crate) fn set_shadow(&self, on: bool) {
        if on {
            self.flags.fetch_or(SHADOW, Ordering::Relaxed);
        } else {
            self.flags.fetch_and(!SHADOW, Ordering::Relaxed);
        }
    }

    pub(crate) fn is_shadow(&self) -> bool {
        self.flags.load(Ordering::Relaxed) & SHADOW != 0
    }

    /// The snapshot, with the store's figures (`evicted`, `keys`) filled in by the caller;
    /// `None` when counting is off.
    pub(crate) fn snapshot(&self) -> Option<Metrics> {
        let c = self.counters.as_ref()?;
        let [allowed, rejected, shadow_rejected] = c.sums();
        Some(Metrics {
            allowed,
            rejected,
            shadow_rejected,
            keys_evicted: 0,
            key_store_full: c.rare.key_store_full.load(Ordering::Relaxed),
            store_errors: c.rare.store_errors.load(Ordering::Relaxed),
            reconfigurations: c.rare.reconfigurations.load(Ordering::Relaxed),
            keys: None,
            shadow: self.is_shadow(),
        })
    }
}

/// The key a hook is shown: borrowed from the caller, or made from the caller's borrowed form.
pub(crate) enum KeyRef<'a, K: 'a> {
    Borrowed(&'a K),
    Owned(K),
}

/// Calls the hook out of line: the rejection path carries only the test of its pointer.
#[cold]
#[inline(never)]
fn call_hook<'a, K: 'a>(
    h: &RejectHook<K>,
    decision: Decision,
    key: impl FnOnce() -> Option<KeyRef<'a, K>>,
    cost: u64,
) {
    let Some(key) = key() else {
        return;
    };
    let key = match &key {
        KeyRef::Borrowed(k) => *k,
        KeyRef::Owned(k) => k,
    };
    h(&Rejection {
        key,
        decision,
        cost,
    });
}
