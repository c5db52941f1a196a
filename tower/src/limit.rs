//! A limit: a named quota, the keyed limiter that enforces it, what keys it, and the cost of
//! a request.

use crate::RequestRef;
use http::HeaderName;
use sluicegate::client::ClientKey;
use sluicegate::{
    AnyClock, Decision, Error, KeyedLimiter, Metrics, Quota, StoreErrorKind, StoreSpec,
};
use std::sync::Arc;

/// The keyed limiter a [`Limit`] runs: byte-string keys (the same key rule as every binding),
/// any clock.
pub type Limiter = KeyedLimiter<Box<[u8]>, AnyClock>;

/// A key function: `None` exempts the request from the limit.
pub type KeyFn = dyn Fn(&RequestRef<'_>) -> Option<Vec<u8>> + Send + Sync;

/// What a [`Limit`] keys its buckets by.
#[derive(Clone)]
#[non_exhaustive]
pub enum KeyBy {
    /// The client's key (docs/CLIENT-IDENTITY.md): its address (IPv6 by /64), or the
    /// right-most untrusted hop behind trusted proxies.
    Client,
    /// A header's value (an API key). A request without the header is not limited by this
    /// limit: pair it with a per-client limit on the same route.
    Header(HeaderName),
    /// One bucket for every request.
    Global,
    /// A function of the request; `None` exempts the request from this limit.
    Custom(Arc<KeyFn>),
}

impl core::fmt::Debug for KeyBy {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            KeyBy::Client => f.write_str("Client"),
            KeyBy::Header(h) => write!(f, "Header({h})"),
            KeyBy::Global => f.write_str("Global"),
            KeyBy::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// A request's key for one limit, borrowed where it can be.
pub(crate) enum Key<'r> {
    Bytes(&'r [u8]),
    Client(&'r ClientKey),
    Owned(Vec<u8>),
}

impl Key<'_> {
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Bytes(b) => b,
            Key::Client(c) => c.as_bytes(),
            Key::Owned(v) => v,
        }
    }
}

impl KeyBy {
    pub(crate) fn key<'r>(&self, req: &'r RequestRef<'_>) -> Option<Key<'r>> {
        match self {
            KeyBy::Client => Some(Key::Client(req.client())),
            KeyBy::Header(h) => req.headers().get(h).map(|v| Key::Bytes(v.as_bytes())),
            KeyBy::Global => Some(Key::Bytes(b"")),
            KeyBy::Custom(f) => f(req).map(Key::Owned),
        }
    }
}

/// A named limit: a quota enforced per key by a shared keyed limiter. Clones share the
/// limiter, so one `Limit` given to the layers of several routes is one limit across them,
/// and a `Limit` kept aside serves admin tools ([`get`](Self::get), [`reset`](Self::reset)).
///
/// ```
/// use sluicegate_tower::Limit;
/// let per_client = Limit::per_client("api", "10/s; burst=20")?;
/// let per_key = Limit::by_header("key", "x-api-key", "1000/hour")?.cost(2)?;
/// assert_eq!(per_key.name(), "key");
/// assert!(per_client.get(b"203.0.113.7")?.allowed());
/// # Ok::<(), sluicegate::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Limit {
    pub(crate) name: Arc<str>,
    pub(crate) limiter: Arc<Limiter>,
    pub(crate) key: KeyBy,
    pub(crate) cost: u64,
    /// The store given to [`store`](Self::store), as printed (a password `***`).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) store: Option<Arc<str>>,
}

impl Limit {
    /// A limit named `name` (its policy name in the `RateLimit` headers) over `limiter`,
    /// keyed by `key`, costing 1 per request.
    pub fn new(name: impl Into<Arc<str>>, limiter: Limiter, key: KeyBy) -> Self {
        Self {
            name: name.into(),
            limiter: Arc::new(limiter),
            key,
            cost: 1,
            store: None,
        }
    }

    /// A limit of `quota` (a rate string, `"10/s; burst=20"`) keyed by `key`, on the default
    /// clock with the default key bound, counting its decisions ([`metrics`](Self::metrics)).
    pub fn keyed(name: impl Into<Arc<str>>, quota: &str, key: KeyBy) -> Result<Self, Error> {
        let q: Quota = quota.parse()?;
        Ok(Self::new(
            name,
            KeyedLimiter::builder(q)
                .clock(AnyClock::default())
                .metrics(true)
                .build()?,
            key,
        ))
    }

    /// The same limit (name, key, cost, quota) on a shared store, so that it holds across the
    /// processes of a host (`"shm:/api-limits"`: a shared-memory region) or across hosts
    /// (`"redis://cache:6379/0?prefix=api"`: the cargo feature `redis`), as in every binding
    /// (docs/SHM.md, docs/REDIS.md). Its buckets are the store's: the limiter `self` had (and
    /// what it counted) is dropped. Give each limit its own region, or its own `prefix` on
    /// Redis: a region holds one quota, and a second limit of another quota on it is
    /// `Error::Store { kind: Mismatch }`. A region is allocated whole when it is made, for
    /// the store string's `?capacity=N` keys, else for the default key bound (2^20 keys,
    /// about 37 MB), or for one key for a [`global`](Self::global) limit (36 KiB); one made
    /// with another capacity is opened at its own. A store string that does not parse is
    /// `Error::InvalidOption`; a store that cannot be opened, its `Error::Store`.
    ///
    /// ```
    /// use sluicegate_tower::Limit;
    /// let dir = std::env::temp_dir().join(format!("tower-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir).unwrap();
    /// let api = Limit::per_client("api", "10/minute")?
    ///     .store(&format!("shm:{}/api", dir.display()))?;
    /// assert_eq!(api.limiter().try_acquire(&b"203.0.113.7"[..], 1)?.remaining(), 9);
    /// # std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), sluicegate::Error>(())
    /// ```
    pub fn store(self, store: &str) -> Result<Self, Error> {
        let spec: StoreSpec = store.parse()?;
        let build = |max_keys: Option<usize>| {
            let b = KeyedLimiter::builder(self.limiter.quota())
                .clock(AnyClock::default())
                .metrics(true)
                .store(spec.clone());
            match max_keys {
                Some(n) => b.max_keys(n),
                None => b,
            }
            .build()
        };
        // A region is allocated whole for its capacity when it is made (the default key
        // bound's, 2^20 keys: about 37 MB), and a global limit holds one key: its new region
        // holds one. The store string's `?capacity=N` wins; a region made with another
        // capacity (by an earlier version, or with a `?capacity=N`) is opened at its own, as
        // a limit that asks for none opens it (asking for one makes that a mismatch).
        let one_key = matches!(self.key, KeyBy::Global)
            && matches!(spec, StoreSpec::Shm { capacity: None, .. });
        let limiter = if one_key {
            match build(Some(1)) {
                Err(Error::Store {
                    kind: StoreErrorKind::Mismatch,
                    ..
                }) => build(None),
                made => made,
            }
        } else {
            build(None)
        }?;
        // A keyed limit on a region a global limit made (the same path, after a limit changed
        // from global to keyed: regions outlive restarts) is refused by the core (`Mismatch`),
        // where it would open the region at its one key.
        let limit = Self {
            store: Some(spec.to_string().into()),
            limiter: Arc::new(limiter),
            ..self
        };
        #[cfg(feature = "redis")]
        crate::watch::unreachable_at_start(&limit);
        Ok(limit)
    }

    /// [`keyed`](Self::keyed) by the client ([`KeyBy::Client`]).
    pub fn per_client(name: impl Into<Arc<str>>, quota: &str) -> Result<Self, Error> {
        Self::keyed(name, quota, KeyBy::Client)
    }

    /// [`keyed`](Self::keyed) by a header's value ([`KeyBy::Header`]), the header named in
    /// any case (`"X-Api-Key"`); a name that is not a valid header name is
    /// [`Error::InvalidOption`].
    pub fn by_header(name: impl Into<Arc<str>>, header: &str, quota: &str) -> Result<Self, Error> {
        let h = HeaderName::from_bytes(header.as_bytes()).map_err(|_| Error::InvalidOption {
            option: "header",
            value: header.to_string(),
            expected: "an HTTP header name (letters, digits and !#$%&'*+-.^_`|~)".to_string(),
        })?;
        Self::keyed(name, quota, KeyBy::Header(h))
    }

    /// [`keyed`](Self::keyed) with one bucket for all ([`KeyBy::Global`]).
    pub fn global(name: impl Into<Arc<str>>, quota: &str) -> Result<Self, Error> {
        Self::keyed(name, quota, KeyBy::Global)
    }

    /// [`keyed`](Self::keyed) by a function ([`KeyBy::Custom`]).
    pub fn by<F>(name: impl Into<Arc<str>>, quota: &str, f: F) -> Result<Self, Error>
    where
        F: Fn(&RequestRef<'_>) -> Option<Vec<u8>> + Send + Sync + 'static,
    {
        Self::keyed(name, quota, KeyBy::Custom(Arc::new(f)))
    }

    /// The same limit (the same buckets) at `cost` per request. A cost above what the quota
    /// can ever admit (its [`max_cost`](sluicegate::Quota::max_cost): the burst) is
    /// `Error::InsufficientCapacity` here, where it would otherwise refuse every request.
    pub fn cost(mut self, cost: u64) -> Result<Self, Error> {
        if cost == 0 {
            // A request that costs nothing is never refused: the limit would limit nothing.
            return Err(Error::InvalidOption {
                option: "cost",
                value: "0".to_string(),
                expected: "a cost of 1 or more".to_string(),
            });
        }
        let capacity = self.limiter.quota().max_cost()?;
        if cost > capacity {
            return Err(Error::InsufficientCapacity { cost, capacity });
        }
        self.cost = cost;
        Ok(self)
    }

    /// The policy name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The keyed limiter (shared by every clone of this limit).
    pub fn limiter(&self) -> &Limiter {
        &self.limiter
    }

    /// The limit's counters in this process, labelled by its name, for
    /// [`render_prometheus`](sluicegate::render_prometheus): `None` for a limiter given to
    /// [`new`](Self::new) without `.metrics(true)`; the constructors from a quota count.
    ///
    /// ```
    /// use sluicegate_tower::Limit;
    /// let api = Limit::per_client("api", "10/s")?;
    /// api.limiter().try_acquire(&b"203.0.113.7"[..], 1)?;
    /// let (labels, counts) = api.metrics().expect("counted");
    /// assert_eq!((labels[0], counts.allowed), (("limit", "api"), 1));
    /// let text = sluicegate::render_prometheus(&[(labels.as_slice(), counts)])?;
    /// assert!(text.contains(r#"sluicegate_decisions_total{limit="api",outcome="allowed"} 1"#));
    /// # Ok::<(), sluicegate::Error>(())
    /// ```
    pub fn metrics(&self) -> Option<([(&'static str, &str); 1], Metrics)> {
        self.limiter
            .metrics()
            .map(|m| ([("limit", &*self.name)], m))
    }

    /// The state of `key`'s bucket, changing nothing (for admin tools): a request of no cost's
    /// view of it, so `allowed()` is true even of a spent bucket; read `remaining()` (what a
    /// request may still take now) and `retry_after()` (how long until one token is back).
    pub fn get(&self, key: &[u8]) -> Result<Decision, Error> {
        self.limiter.peek(key)
    }

    /// Forgets `key`'s bucket (it starts full again); whether it was held.
    pub fn reset(&self, key: &[u8]) -> Result<bool, Error> {
        self.limiter.remove(key)
    }
}
