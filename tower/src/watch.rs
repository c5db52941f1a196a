//! Outages of the Redis stores a layer's limits use, said once each (feature `redis`).
//!
//! A limit on Redis whose server does not answer is decided by the URL's `on_error` policy
//! (`local`, the default: each process alone with its share of the quota), which no response
//! shows. So, as the Python and Node integrations do, a layer looks at each such limit's
//! counters (`redis_stats()`) at most once a second, from a request of that limit, and says
//! when its calls begin to fail (to [`RateLimitLayer::on_error`](crate::RateLimitLayer::on_error),
//! by default one line on standard error) and, on standard error, when the server decides
//! again.

use crate::limit::Limit;
use sluicegate::{Error, StoreErrorKind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// How often a store's counters are looked at, in milliseconds.
const EVERY_MS: u64 = 1000;

/// One watch per limit of the layer (`None`: not on Redis).
pub(crate) struct Watches {
    each: Vec<Option<Watch>>,
    born: Instant,
}

struct Watch {
    /// When to look next (milliseconds since `born`).
    next: AtomicU64,
    /// The counts seen at the last look: (calls the policy decided, calls the server decided).
    seen: Mutex<(u64, u64)>,
    failing: AtomicBool,
    /// The store as printed (the password `***`), and what its policy does.
    name: String,
    policy: String,
}

/// An outage's begin or end, to be said by the layer.
pub(crate) enum Event {
    Failing(Error),
    /// The end of the outage whose notice was `.0`.
    Recovered(Error),
}

impl Watches {
    pub(crate) fn of(limits: &[Limit]) -> Self {
        Watches {
            each: limits.iter().map(Watch::of).collect(),
            born: Instant::now(),
        }
    }

    /// Whether some limit is on Redis (its decisions wait for a server).
    #[inline]
    pub(crate) fn remote(&self) -> bool {
        self.each.iter().any(Option::is_some)
    }

    /// Looks at limit `i`'s store if it is time; the event to say, if any.
    #[inline]
    pub(crate) fn tick(&self, i: usize, limit: &Limit) -> Option<Event> {
        let w = self.each.get(i)?.as_ref()?;
        let now = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        let next = w.next.load(Ordering::Relaxed);
        if now < next
            || w.next
                .compare_exchange(next, now + EVERY_MS, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return None;
        }
        w.look(&limit.limiter)
    }
}

impl Watch {
    fn of(limit: &Limit) -> Option<Watch> {
        let stats = limit.limiter.redis_stats()?;
        let name = limit
            .store
            .as_deref()
            .unwrap_or("the Redis store")
            .to_string();
        let policy = policy_said(&name);
        Some(Watch {
            next: AtomicU64::new(EVERY_MS),
            seen: Mutex::new((failures(&stats), stats.decided)),
            failing: AtomicBool::new(stats.connects == 0),
            name,
            policy,
        })
    }

    #[cold]
    fn look(&self, limiter: &crate::Limiter) -> Option<Event> {
        let stats = limiter.redis_stats()?;
        let (failed, decided) = (failures(&stats), stats.decided);
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let (more_failed, more_decided) = (failed > seen.0, decided > seen.1);
        *seen = (failed, decided);
        drop(seen);
        // A look that finds both keeps the state it had: some calls still fail.
        if more_failed && !more_decided && !self.failing.swap(true, Ordering::Relaxed) {
            return Some(Event::Failing(outage_of(&self.name, &self.policy)));
        }
        if more_decided && !more_failed && self.failing.swap(false, Ordering::Relaxed) {
            return Some(Event::Recovered(outage_of(&self.name, &self.policy)));
        }
        None
    }
}

/// The notice of an outage of the store printed `name`, whose policy is said `policy`
/// ([`policy_said`]).
fn outage_of(name: &str, policy: &str) -> Error {
    Error::Store {
        kind: StoreErrorKind::Unavailable,
        store: name.to_string(),
        reason: format!(
            "the server does not answer: its limits are decided by its {policy} until it does"
        ),
    }
}

/// The notice of an outage of the store `store` (for tests of what is said of it).
#[cfg(test)]
pub(crate) fn outage(store: &str) -> Error {
    outage_of(store, &policy_said(store))
}

/// Said when a limit is put on a Redis store whose first connection failed (a wrong host or
/// port, a server down): nothing else would say that its requests are decided by its
/// `on_error` policy until it connects.
pub(crate) fn unreachable_at_start(limit: &Limit) {
    let (Some(stats), Some(name)) = (limit.limiter.redis_stats(), limit.store.as_deref()) else {
        return;
    };
    if stats.connects == 0 {
        crate::say!(
            "sluicegate: cannot reach the Redis store {name}: limit {:?} is decided by its {} \
             until it connects",
            &*limit.name,
            policy_said(name)
        );
    }
}

/// The calls a store did not decide: each decided by its `on_error` policy (or an error).
fn failures(s: &sluicegate::RedisStats) -> u64 {
    s.failed_open + s.failed_closed + s.failed_local + s.failed_error
}

/// A store string's `on_error` policy and what it does (`local` when the URL names none).
fn policy_said(store: &str) -> String {
    let query = store.split_once('?').map_or("", |(_, q)| q);
    let named = query.split('&').find_map(|p| p.strip_prefix("on_error="));
    // The core reads the value in any case (`on_error=OPEN` is `open`).
    let policy = named.map_or_else(|| "local".to_string(), str::to_ascii_lowercase);
    let does = match policy.as_str() {
        "local" => "each process alone, with its share of the quota",
        "open" => "every request admitted",
        "closed" => "every request refused",
        "error" => "every request an error (500)",
        _ => "the URL's policy",
    };
    format!(
        "on_error={policy}{} policy ({does})",
        if named.is_none() { ", the default" } else { "" }
    )
}
