//! [`DenseLimiter`]: one bucket per index `0..n`, in one array its single owner holds.
//!
//! A keyed limiter finds a key's bucket by hashing the key into a shared table, and links a
//! new key under a shard's lock, because any thread may ask for any key at any time. A caller
//! that already numbers its keys densely (a log replay interning each key to `0, 1, 2, ...`)
//! and decides on one thread needs none of that: here a bucket is the element at its index
//! of a plain array of state words (or of sliding logs), created on the index's first
//! request. The decisions are the codecs' own, stepped as the keyed store steps its atomic
//! words (`cell::step_owned`), so they are the decisions a [`KeyedLimiter`] on the same
//! quota, built at the same clock reading, makes for the same requests while its key bound
//! is not reached. Unlike it, this store never evicts: a new index past `max_keys` buckets is
//! refused ([`Error::KeyStoreFull`]), and memory is the largest index asked for, times the
//! state's size (8 or 16 bytes, or a sliding log).
//!
//! [`KeyedLimiter`]: crate::KeyedLimiter

use crate::algorithm::{Codec, Log};
use crate::bucket::cell::{self, Word};
use crate::{Decision, Error, Quota};

/// The buckets, by index; an absent bucket is the DEAD word (no codec state reaches it for
/// a reading below the horizon, which [`DenseLimiter::check`] enforces) or `None`.
enum Buckets {
    Narrow(Vec<u64>),
    Wide(Vec<u128>),
    Log(Vec<Option<Log>>),
}

/// One bucket per index `0..n`, owned by one thread (every change takes `&mut self`): no
/// hashing, no atomics, no locks, no eviction. For simulations and log replays that number
/// their keys densely; a service shared between threads wants a
/// [`KeyedLimiter`](crate::KeyedLimiter).
///
/// Its decisions are exactly those of a `KeyedLimiter` on the same quota built at the
/// clock reading `origin` (each bucket created with the quota's initial tokens at its
/// index's first request), until a new index would exceed `max_keys` buckets: it is then
/// refused, where a keyed limiter would first evict full buckets.
///
/// ```
/// use sluicegate::{DenseLimiter, Error};
///
/// let mut limiter = DenseLimiter::new("1/s; burst=2".parse()?, 0, 2)?;
/// assert!(limiter.try_acquire_at(0, 0, 2)?.allowed());
/// assert!(!limiter.try_acquire_at(0, 0, 1)?.allowed());
/// assert!(limiter.try_acquire_at(1, 0, 1)?.allowed()); // index 1: a bucket of its own
/// assert!(limiter.try_acquire_at(0, 1_000_000_000, 1)?.allowed()); // a second later
/// assert!(matches!(limiter.try_acquire_at(7, 0, 1), Err(Error::KeyStoreFull { max_keys: 2 })));
/// assert!(matches!(limiter.try_acquire_at(usize::MAX, 0, 1), Err(Error::KeyStoreFull { .. })));
/// assert_eq!(limiter.len(), 2);
/// # Ok::<(), sluicegate::Error>(())
/// ```
pub struct DenseLimiter {
    quota: Quota,
    codec: Codec,
    /// `codec.capacity()` and `codec.limit()` (the horizon, or a window codec's last window,
    /// whose full state may be the DEAD word): the checks of every request.
    capacity: u64,
    horizon: u64,
    buckets: Buckets,
    /// Buckets held.
    len: usize,
    max_keys: usize,
}

impl core::fmt::Debug for DenseLimiter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DenseLimiter")
            .field("quota", &self.quota)
            .field("len", &self.len)
            .field("max_keys", &self.max_keys)
            .finish_non_exhaustive()
    }
}

impl DenseLimiter {
    /// A limiter with no bucket, its codec compiled for the clock reading `origin` (as a
    /// keyed limiter built when its clock reads `origin`), holding at most `max_keys` buckets.
    /// `Err` for an invalid quota, an `origin` past its range, or `max_keys == 0`.
    pub fn new(quota: Quota, origin: u64, max_keys: usize) -> Result<Self, Error> {
        if max_keys == 0 {
            return Err(Error::InvalidOption {
                option: "max_keys",
                value: "0".into(),
                expected: "at least 1".into(),
            });
        }
        let codec = Codec::new(&quota, origin)?;
        codec.check(origin, 0)?;
        let buckets = match &codec {
            Codec::SlidingLog(_) => Buckets::Log(Vec::new()),
            c if c.wide() => Buckets::Wide(Vec::new()),
            _ => Buckets::Narrow(Vec::new()),
        };
        Ok(DenseLimiter {
            quota,
            capacity: codec.capacity(),
            horizon: codec.limit(),
            codec,
            buckets,
            len: 0,
            max_keys,
        })
    }

    /// The quota.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Buckets held (indices asked for at least once).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bound on [`len`](Self::len).
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The checks of a keyed limiter's request: a cost within capacity, a reading below the
    /// horizon (whose last instant is kept from every state: see `cell::Word::DEAD`).
    #[inline]
    fn check(&self, now: u64, cost: u64) -> Result<(), Error> {
        if cost <= self.capacity && now < self.horizon {
            return Ok(());
        }
        if cost > self.capacity {
            return Err(Error::InsufficientCapacity {
                cost,
                capacity: self.capacity,
            });
        }
        Err(Error::ClockOutOfRange {
            now,
            horizon: self.horizon - 1,
        })
    }

    /// Asks for `cost` tokens of bucket `index` at the clock reading `now`, creating the
    /// bucket (with the quota's initial tokens, at `now`) on the index's first request.
    /// Readings earlier than a bucket's latest are clamped, as everywhere. `Err` for a cost
    /// above the capacity, a reading out of range, or a new bucket past `max_keys`
    /// ([`Error::KeyStoreFull`]; an index of `max_keys` or more is one: indices are dense, so
    /// that the arrays, which hold every index up to the largest asked for, stay within
    /// `max_keys` states; so is an index whose array cannot be allocated).
    #[inline]
    pub fn try_acquire_at(&mut self, index: usize, now: u64, cost: u64) -> Result<Decision, Error> {
        self.check(now, cost)?;
        if index >= self.max_keys {
            return Err(Error::KeyStoreFull {
                max_keys: self.max_keys,
            });
        }
        match &mut self.buckets {
            Buckets::Narrow(v) => {
                let w = word(v, index, &mut self.len, self.max_keys, &self.codec, now)?;
                Ok(apply(w, &self.codec, now, cost))
            }
            Buckets::Wide(v) => {
                let w = word(v, index, &mut self.len, self.max_keys, &self.codec, now)?;
                Ok(apply(w, &self.codec, now, cost))
            }
            Buckets::Log(v) => {
                let Codec::SlidingLog(a) = &self.codec else {
                    unreachable!("logs are made for the sliding log")
                };
                if v.get(index).is_none_or(Option::is_none) {
                    grow(v, index, self.max_keys, || None)?;
                    admit(&mut self.len, self.max_keys)?;
                    v[index] = Some(Log::new(now));
                }
                let log = v[index]
                    .as_mut()
                    .unwrap_or_else(|| unreachable!("made above"));
                Ok(log.decide(a, now, cost, true))
            }
        }
    }

    /// The decision a request of cost 0 to bucket `index` would get at `now`, changing
    /// nothing; an absent bucket reports one created at `now`, without creating it.
    pub fn peek_at(&self, index: usize, now: u64) -> Result<Decision, Error> {
        self.check(now, 0)?;
        Ok(match &self.buckets {
            Buckets::Narrow(v) => peek(v.get(index).copied(), &self.codec, now),
            Buckets::Wide(v) => peek(v.get(index).copied(), &self.codec, now),
            Buckets::Log(v) => {
                let Codec::SlidingLog(a) = &self.codec else {
                    unreachable!("logs are made for the sliding log")
                };
                match v.get(index).and_then(Option::as_ref) {
                    // `decide` without commit changes nothing; it takes `&mut` for the
                    // clamp an admission moves.
                    Some(log) => log.clone().decide(a, now, 0, false),
                    None => Log::new(now).decide(a, now, 0, false),
                }
            }
        })
    }

    /// Gives `cost` tokens back to bucket `index`, capped at capacity; an absent bucket is
    /// left absent (it is as full as a fresh one).
    pub fn refund_at(&mut self, index: usize, now: u64, cost: u64) -> Result<(), Error> {
        self.check(now, 0)?;
        match &mut self.buckets {
            Buckets::Narrow(v) => refund(v.get_mut(index), &self.codec, now, cost),
            Buckets::Wide(v) => refund(v.get_mut(index), &self.codec, now, cost),
            Buckets::Log(v) => {
                let Codec::SlidingLog(a) = &self.codec else {
                    unreachable!("logs are made for the sliding log")
                };
                if let Some(log) = v.get_mut(index).and_then(Option::as_mut) {
                    log.refund(a, now, cost);
                }
            }
        }
        Ok(())
    }

    /// Asks the CPU's cache for bucket `index`'s state, without waiting for it; changes
    /// nothing. A caller deciding a batch of many indices prefetches them all first, so that
    /// their cache misses overlap. Nothing for sliding logs or an index not held yet.
    #[inline]
    pub fn prefetch(&self, index: usize) {
        match &self.buckets {
            Buckets::Narrow(v) => prefetch(v.get(index)),
            Buckets::Wide(v) => prefetch(v.get(index)),
            Buckets::Log(_) => {}
        }
    }
}

/// Takes one unit of the bound for a new bucket.
#[inline]
fn admit(len: &mut usize, max_keys: usize) -> Result<(), Error> {
    if *len >= max_keys {
        return Err(Error::KeyStoreFull { max_keys });
    }
    *len += 1;
    Ok(())
}

/// Makes `v` hold `index` (below `max_keys`; new elements are `empty()`, written now: a
/// vector of zeroed pages would fault each page twice, at its first read and again at its
/// first write). An array that cannot grow so far (its size past `isize::MAX` bytes, or the
/// allocation refused) is the store full at `max_keys`: an error, never an abort.
#[inline]
fn grow<T>(
    v: &mut Vec<T>,
    index: usize,
    max_keys: usize,
    empty: impl FnMut() -> T,
) -> Result<(), Error> {
    if index >= v.len() {
        v.try_reserve_exact(index + 1 - v.len())
            .map_err(|_| Error::KeyStoreFull { max_keys })?;
        v.resize_with(index + 1, empty);
    }
    Ok(())
}

/// Bucket `index`'s word, created at `now` if absent.
#[inline(always)]
fn word<'a, W: Word>(
    v: &'a mut Vec<W>,
    index: usize,
    len: &mut usize,
    max_keys: usize,
    codec: &Codec,
    now: u64,
) -> Result<&'a mut W, Error> {
    if v.get(index).is_none_or(|w| *w == W::DEAD) {
        grow(v, index, max_keys, || W::DEAD)?;
        admit(len, max_keys)?;
        v[index] = W::narrow(codec.fresh(now));
    }
    Ok(&mut v[index])
}

/// One decision on an owned word.
#[inline(always)]
fn apply<W: Word>(w: &mut W, codec: &Codec, now: u64, cost: u64) -> Decision {
    let (d, new) = cell::step_owned(*w, codec, now, cost);
    if let Some(new) = new {
        *w = new;
    }
    d
}

/// As the keyed store peeks: a held word through its step, an absent one as a fresh state.
fn peek<W: Word>(w: Option<W>, codec: &Codec, now: u64) -> Decision {
    match w {
        Some(w) if w != W::DEAD => cell::step_owned(w, codec, now, 0).0,
        _ => codec.decide(codec.fresh(now), now, 0).0,
    }
}

fn refund<W: Word>(w: Option<&mut W>, codec: &Codec, now: u64, cost: u64) {
    if let Some(w) = w.filter(|w| **w != W::DEAD) {
        if let Some(new) = codec.refund(w.widen(), now, cost) {
            *w = W::narrow(new);
        }
    }
}

/// A hint to the cache (as the in-process table's, none under Miri or loom, which model no
/// cache).
#[inline]
fn prefetch<T>(v: Option<&T>) {
    #[cfg(all(target_arch = "x86_64", not(sluicegate_loom), not(miri)))]
    if let Some(v) = v {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch never faults and reads nothing; the address is a live reference.
        unsafe { _mm_prefetch((v as *const T).cast::<i8>(), _MM_HINT_T0) };
    }
    #[cfg(not(all(target_arch = "x86_64", not(sluicegate_loom), not(miri))))]
    let _ = v;
}
