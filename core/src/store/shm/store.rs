//! [`ShmStore`]: the [`Store`] of a shared-memory region.

use super::memo::{Memo, ShortStream, Stream};
use super::region::{Region, Want};
use super::table::{exact_value, hashed_value, Fingerprint, Request, Table};
use crate::algorithm::Codec;
use crate::clock::{Clock, ClockBase, SharedTimeline, Timeline};
use crate::error::{Error, StoreErrorKind};
use crate::store::keyed::Ctx;
use crate::store::{OnFull, Store, StoreSpec};
use crate::{Algorithm, Decision, Quota};
use core::borrow::Borrow;
use core::hash::Hash;
use std::path::Path;

/// A keyed limiter's buckets in a shared-memory region.
///
/// The codec runs on readings relative to the region's creation (`base`): its 96-bit states
/// then cover a century of readings (`table::STATE`) whatever the clock's
/// absolute values (a manual clock far from 0 included), and every process agrees on them.
/// The decisions are the same: every algorithm is invariant under a shift of time, the
/// window counters under a shift by whole windows (so `base` is a multiple of the window for
/// them), and interval refill's grid is anchored at the region's creation.
pub(crate) struct ShmStore {
    region: Region,
    codec: Codec,
    base: u64,
    /// This process's memo of its keys' fingerprints under the region's secret (short keys'
    /// bijection and long keys' SipHash alike).
    memo: Memo,
    /// The key of short keys' fingerprints ([`exact_value`]), from the region's secret.
    exact_key: [u64; 3],
}

impl ShmStore {
    /// Opens (or creates) the region `spec` names for `quota`, and moves `clock` to its
    /// timeline: the default clock adopts the region's clock base, a clock of the caller's
    /// own (a manual one) is used as given, and a clock with a process-local origin that cannot
    /// move (`StdClock`, `CoarseClock`, a borrowed default clock) is refused. `asked`: the
    /// keys asked for (`None`: the region's own, or `default` for a new region; the spec's
    /// `capacity` wins over both).
    pub(crate) fn open_for<C: Clock>(
        spec: &StoreSpec,
        quota: Quota,
        asked: Option<u64>,
        default: u64,
        clock: &mut C,
    ) -> Result<Self, Error> {
        let StoreSpec::Shm { capacity, .. } = spec else {
            unreachable!("open_for is for shared-memory stores")
        };
        let path = spec.shm_path().unwrap_or_default();
        let timeline = clock.timeline();
        if timeline == Timeline::Fixed {
            return Err(Error::store(
                StoreErrorKind::Unsupported,
                path.display().to_string(),
                "this clock reads time from an origin of its own process, which other \
                 processes cannot compare: use the default clock (or a manual one in tests)",
            ));
        }
        let asked = capacity.or(asked);
        let origin = |base| match timeline {
            Timeline::Local => SharedTimeline(base).read(),
            _ => clock.now(),
        };
        let store = Self::open(&path, quota, asked, default, &origin)?;
        clock.adopt(&SharedTimeline(store.clock()));
        Ok(store)
    }

    /// Opens (or creates) the region at `path` for `quota`. `capacity`: the keys asked for
    /// (`None`: the region's own, or `default` for a new region); `origin(base)`: the limiter
    /// clock's reading through a new region's clock base.
    pub(crate) fn open(
        path: &Path,
        quota: Quota,
        capacity: Option<u64>,
        default: u64,
        origin: &dyn Fn(ClockBase) -> u64,
    ) -> Result<Self, Error> {
        let region = Region::open(&Want {
            path,
            quota,
            capacity,
            default_capacity: default,
            origin,
        })?;
        let codec = super::region::check_quota(path, &quota)?;
        let origin = region.meta.origin;
        let base = match quota.algorithm() {
            Algorithm::FixedWindow | Algorithm::SlidingWindow => {
                origin - origin % quota.period_ns()
            }
            _ => origin,
        };
        let memo = Memo::new(region.meta.capacity);
        let [k0, k1] = region.meta.secret;
        let sip = siphasher::sip128::SipHasher13::new_with_keys(k0, k1);
        let (a, b) = (
            sip.hash(b"sluicegate: short keys, 1").as_u128(),
            sip.hash(b"sluicegate: short keys, 2").as_u128(),
        );
        let exact_key = [a as u64, (a >> 64) as u64, b as u64];
        Ok(Self {
            region,
            codec,
            base,
            memo,
            exact_key,
        })
    }

    /// The codec the region runs (on readings relative to [`base`](Self::base)).
    pub(crate) fn codec(&self) -> &Codec {
        &self.codec
    }

    /// Where the codec's readings start on the limiter's clock.
    pub(crate) fn base(&self) -> u64 {
        self.base
    }

    /// A reading of the limiter's clock as the codec reads it. One before the region's
    /// creation reads as the creation (readings behind a state are clamped in any case).
    #[inline]
    pub(crate) fn rel(&self, now: u64) -> u64 {
        now.saturating_sub(self.base)
    }

    /// The clock base every process reads the region's time through.
    pub(crate) fn clock(&self) -> ClockBase {
        self.region.meta.clock
    }

    /// The most keys the region holds.
    pub(crate) fn key_capacity(&self) -> u64 {
        self.region.meta.capacity
    }

    pub(crate) fn table(&self) -> Table<'_> {
        let h = self.region.header();
        Table {
            slots: self.region.slots(),
            locks: self.region.locks(),
            hint: &h.hint,
            live: &h.live,
            capacity: self.region.meta.capacity,
            name: &self.region.name,
        }
    }

    /// The table's invariants, as [`Table::audit`] checks them.
    pub(crate) fn audit(&self, cx: &Ctx) -> super::table::Audit {
        self.table().audit(cx)
    }

    /// A request for `key` (the limiter's checks passed): the keyed limiter's path for a
    /// region, which enters no read section (see `KeyedLimiter::try_acquire_region`).
    #[inline(always)]
    pub(crate) fn acquire_at<Q: Hash + ?Sized>(
        &self,
        cx: &Ctx,
        key: &Q,
        now: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        let hash = self.hash_of(key);
        let r = Request {
            now: self.rel(now),
            cost,
            within: u64::MAX,
        };
        let fp = Fingerprint::new(hash, self.region.meta.slots as usize);
        match self.table().acquire_common(cx, &fp, r) {
            Some(d) => Ok(d),
            None => self.acquire_slow(cx, hash, r.now, cost),
        }
    }

    /// [`acquire_at`](Self::acquire_at) past the table's common case, from the key's hash
    /// and the reading the codec reads: scalars, so that the common case keeps its table,
    /// fingerprint and request in registers rather than in memory for this call.
    #[cold]
    #[inline(never)]
    fn acquire_slow(&self, cx: &Ctx, hash: u128, now: u64, cost: u64) -> Result<Decision, Error> {
        let fp = Fingerprint::new(hash, self.region.meta.slots as usize);
        let r = Request {
            now,
            cost,
            within: u64::MAX,
        };
        self.table().acquire_slow(cx, &fp, r, super::lock::token)
    }

    /// The key's 128-bit fingerprint, from the bytes its `Hash` writes (so byte keys
    /// fingerprint alike in every process and language): a short key's own bytes, keyed
    /// ([`exact_value`]); a longer key's SipHash-1-3 under the region's secret
    /// ([`hashed_value`]), looked up in this process's [`Memo`] first.
    #[inline]
    pub(crate) fn fingerprint<Q: Hash + ?Sized>(&self, key: &Q) -> Fingerprint {
        Fingerprint::new(self.hash_of(key), self.region.meta.slots as usize)
    }

    /// The key's 128-bit fingerprint value (see [`fingerprint`](Self::fingerprint)): this
    /// process's memo's, else computed (and offered to the memo). A memo hit is a shorter
    /// chain of steps than even a short key's bijection, which a key decided again and again
    /// (one client's burst) gains from; where keys seldom repeat the memo stops looking.
    #[inline]
    fn hash_of<Q: Hash + ?Sized>(&self, key: &Q) -> u128 {
        let stream = if super::memo::looking() {
            Stream::of(key)
        } else {
            None
        };
        let Some(s) = stream else {
            return self.fresh_value(key);
        };
        if let Some(value) = self.memo.get(&s) {
            return value;
        }
        let value = match s.exact() {
            Some(code) => exact_value(code, self.exact_key),
            None => hashed_value(self.hash(key)),
        };
        self.memo.put(&s, value);
        value
    }

    /// The key's fingerprint value, computed: a short key's keyed bijection, a longer key's
    /// SipHash (from the key: SipHash's word-sized writes of a short key cost less than its
    /// one-shot path over the stream's bytes).
    #[inline]
    fn fresh_value<Q: Hash + ?Sized>(&self, key: &Q) -> u128 {
        match ShortStream::of(key).and_then(|s| s.exact()) {
            Some(code) => exact_value(code, self.exact_key),
            None => hashed_value(self.hash(key)),
        }
    }

    /// The key's SipHash-1-3 under the region's secret (of its stream as the shared stores
    /// read it: `Canon`).
    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u128 {
        let mut h = self.sip();
        key.hash(&mut crate::store::key::Canon::new(&mut h));
        siphasher::sip128::Hasher128::finish128(&h).as_u128()
    }

    fn sip(&self) -> siphasher::sip128::SipHasher13 {
        let [k0, k1] = self.region.meta.secret;
        siphasher::sip128::SipHasher13::new_with_keys(k0, k1)
    }
}

impl<K: Hash + Eq + Send + 'static> Store<K> for ShmStore {
    fn acquire<Q>(&self, cx: &Ctx, key: &Q, now: u64, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.acquire_at(cx, key, now, cost)
    }

    fn reserve<Q>(
        &self,
        cx: &Ctx,
        key: &Q,
        now: u64,
        cost: u64,
        within: u64,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        let fp = self.fingerprint(key);
        let r = Request {
            now: self.rel(now),
            cost,
            within,
        };
        self.table().acquire(cx, &fp, r, super::lock::token)
    }

    fn peek<Q>(&self, cx: &Ctx, key: &Q, now: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.table().peek(cx, &self.fingerprint(key), self.rel(now))
    }

    fn refund<Q>(&self, cx: &Ctx, key: &Q, now: u64, cost: u64) -> Result<(), Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.table()
            .refund(cx, &self.fingerprint(key), self.rel(now), cost)
    }

    fn remove<Q>(&self, _cx: &Ctx, key: &Q) -> Result<bool, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.table().remove(&self.fingerprint(key))
    }

    fn sweep(&self, cx: &Ctx, now: u64) -> Result<usize, Error> {
        let t = self.table();
        let (evicted, _) = t.evict_full(cx, self.rel(now))?;
        t.recount()?;
        Ok(evicted)
    }

    fn clear(&self) -> Result<(), Error> {
        self.table().clear()
    }

    fn len(&self) -> usize {
        self.table().len()
    }

    fn capacity(&self) -> usize {
        self.region.meta.slots as usize
    }

    fn snapshot(&self, _cx: &Ctx, _now: u64) -> Result<Vec<(K, Decision)>, Error>
    where
        K: Clone,
    {
        Err(Error::store(
            StoreErrorKind::Unsupported,
            self.region.name.clone(),
            "a shared-memory region keeps a fingerprint of each key, not the key: it cannot \
             list them",
        ))
    }
}

/// A single limiter's bucket in a shared-memory region (a region of one key): what
/// `Limiter::builder(quota).store(..)` keeps.
pub(crate) struct ShmBucket {
    store: ShmStore,
    cx: Ctx,
}

impl ShmBucket {
    /// The bucket of `store` (a region of one key), created, if it does not exist yet, as of
    /// the region's creation: a single limiter's bucket exists from its creation on (with the
    /// quota's initial tokens), not from its first request as a key's does.
    pub(crate) fn new(store: ShmStore, quota: &Quota) -> Result<Self, Error> {
        let cx = Ctx::new(
            quota,
            store.codec().clone(),
            store.base(),
            1,
            OnFull::RejectNewKeys,
        );
        let bucket = Self { store, cx };
        // A request of cost 0 creates an absent bucket and changes an existing one in nothing.
        bucket.reserve(bucket.store.region.meta.origin, 0, u64::MAX)?;
        Ok(bucket)
    }

    /// The codec (on readings relative to the region's creation).
    pub(crate) fn codec(&self) -> &Codec {
        self.store.codec()
    }

    /// The request checks, at a reading of the limiter's clock.
    pub(crate) fn check(&self, now: u64, cost: u64) -> Result<(), Error> {
        let base = self.store.base();
        self.cx
            .codec
            .check(self.store.rel(now), cost)
            .map_err(|e| match e {
                // The horizon on the limiter's clock, not the codec's.
                Error::ClockOutOfRange { horizon, .. } => Error::ClockOutOfRange {
                    now,
                    horizon: horizon.saturating_add(base),
                },
                e => e,
            })
    }

    /// A request (a leaky queue admits only with a wait of at most `within` ns).
    pub(crate) fn reserve(&self, now: u64, cost: u64, within: u64) -> Result<Decision, Error> {
        self.check(now, cost)?;
        Store::<()>::reserve(&self.store, &self.cx, &(), now, cost, within)
    }

    /// The decision a request of `cost` would get, writing nothing.
    pub(crate) fn peek(&self, now: u64, cost: u64) -> Result<Decision, Error> {
        self.check(now, cost)?;
        self.store.table().peek_cost(
            &self.cx,
            &self.store.fingerprint(&()),
            self.store.rel(now),
            cost,
        )
    }

    pub(crate) fn refund(&self, now: u64, cost: u64) -> Result<(), Error> {
        self.check(now, 0)?;
        Store::<()>::refund(&self.store, &self.cx, &(), now, cost)
    }

    pub(crate) fn is_full(&self, now: u64) -> Result<bool, Error> {
        let d = self.peek(now, 0)?;
        Ok(d.reset_after_nanos() == 0)
    }
}

impl ShmBucket {
    /// The store, as errors name it (`shm:PATH`).
    pub(crate) fn store_name(&self) -> String {
        self.store.store_name()
    }
}

impl ShmStore {
    /// The store, as errors name it (`shm:PATH`).
    pub(crate) fn store_name(&self) -> String {
        format!("shm:{}", self.region.name)
    }
}

impl core::fmt::Debug for ShmBucket {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ShmBucket")
            .field("region", &self.store.region.name)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::OnFull;
    use std::path::PathBuf;

    /// A region file in the temporary directory, removed when dropped.
    struct File(PathBuf);

    impl File {
        fn new(what: &str) -> Self {
            let n = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let p = std::env::temp_dir()
                .join(format!("sluicegate-unit-{what}-{}-{n}", std::process::id()));
            Self(p)
        }
    }

    impl Drop for File {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn open(f: &File, quota: &Quota, capacity: u64) -> (ShmStore, Ctx) {
        let s = ShmStore::open(&f.0, *quota, Some(capacity), capacity, &|_| 0).unwrap();
        let cx = Ctx::new(
            quota,
            s.codec().clone(),
            s.base(),
            capacity as usize,
            OnFull::RejectNewKeys,
        );
        (s, cx)
    }

    /// A key's fingerprint computed afresh, without the memo.
    fn fresh(s: &ShmStore, key: &[u8]) -> Fingerprint {
        Fingerprint::new(s.fresh_value(key), s.region.meta.slots as usize)
    }

    /// Every key in `s`'s memo (each written over whatever its entry held).
    fn memoise(s: &ShmStore, keys: &[Vec<u8>]) {
        for k in keys {
            let stream = Stream::of(k.as_slice()).unwrap();
            s.memo.put_now(&stream, s.fresh_value(k.as_slice()));
        }
    }

    /// Two openers of one region (`a` with its memo filled before every operation), and a
    /// second region whose opener's memo is emptied before every operation, take the same
    /// random operations: requests at the bound (evictions, slots taken by other keys),
    /// removes, clears and sweeps. Every fingerprint through a memo is the one computed
    /// afresh, the two regions decide alike, and both stay audited clean.
    #[test]
    #[cfg_attr(miri, ignore = "maps a file")]
    fn memoised_fingerprints_are_never_stale() {
        let q: Quota = "2/s".parse().unwrap();
        let (f1, f2) = (File::new("memo-a"), File::new("memo-b"));
        let (a, cx) = open(&f1, &q, 4);
        let (b, _) = open(&f1, &q, 4);
        let (mut c, cxc) = open(&f2, &q, 4);
        // Short keys (compared in full) and long ones (hashed), both through the memo.
        let keys: Vec<Vec<u8>> = (0..7u8)
            .map(|k| match k % 2 {
                0 => vec![b'k', k, k],
                _ => [&b"a long key, hashed: "[..], &[k, k]].concat(),
            })
            .collect();
        let mut rng = 0x2545_f491_4f6c_dd1d_u64;
        let mut now = 0u64;
        let mut hits = 0;
        for step in 0..3000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let k = keys[(rng % 7) as usize].as_slice();
            now += (rng >> 8) % 150_000_000;
            memoise(&a, &keys);
            c.memo = Memo::new(4);
            // `a`'s decision looks its key up (a run of `c`'s misses may have stopped this
            // thread's lookups for a while).
            super::super::memo::reset_thread();
            let via = if step % 2 == 0 { &a } else { &b };
            let (r1, r2) = match (rng >> 40) % 16 {
                0 => (
                    Store::<Box<[u8]>>::remove(via, &cx, k).map(|x| x.to_string()),
                    Store::<Box<[u8]>>::remove(&c, &cxc, k).map(|x| x.to_string()),
                ),
                1 => (
                    Store::<Box<[u8]>>::clear(via).map(|()| String::new()),
                    Store::<Box<[u8]>>::clear(&c).map(|()| String::new()),
                ),
                2 | 3 => (
                    Store::<Box<[u8]>>::sweep(via, &cx, now).map(|n| n.to_string()),
                    Store::<Box<[u8]>>::sweep(&c, &cxc, now).map(|n| n.to_string()),
                ),
                _ => (
                    Store::<Box<[u8]>>::acquire(via, &cx, k, now, 1).map(|d| format!("{d:?}")),
                    Store::<Box<[u8]>>::acquire(&c, &cxc, k, now, 1).map(|d| format!("{d:?}")),
                ),
            };
            assert_eq!(
                r1.map_err(|e| e.code()),
                r2.map_err(|e| e.code()),
                "step {step}"
            );
            super::super::memo::reset_thread();
            for k in &keys {
                if let Some(hash) = a.memo.get(&Stream::of(k.as_slice()).unwrap()) {
                    assert_eq!(hash, a.fresh_value(k.as_slice()), "step {step}");
                    hits += 1;
                }
                for s in [&a, &b, &c] {
                    assert_eq!(s.fingerprint(k.as_slice()), fresh(s, k), "step {step}");
                }
            }
            for (s, cx) in [(&a, &cx), (&c, &cxc)] {
                let audit = s.audit(cx);
                assert_eq!(
                    (audit.duplicates, audit.unreachable, audit.corrupt),
                    (0, 0, 0),
                    "step {step}"
                );
            }
        }
        assert!(hits >= 3000, "{hits} hits");
    }
}
