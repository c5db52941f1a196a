//! The slot table of a shared-memory region: the protocol, written over borrowed atomics so
//! that the same code runs on a mapping (between processes) and on in-process memory (the
//! loom models, the unit tests under Miri).
//!
//! # Slots
//!
//! A slot is 32 bytes: one 128-bit word holding the key's 64-bit tag and the bucket's 64-bit
//! state, the other 64 bits of the key's 128-bit fingerprint (`tag_hi`), and the `reach` of
//! the keys whose home is this slot. A word of 0 is an empty slot; a live slot's tag is never 0.
//! Every change of a bucket is one compare-and-swap of the word, so a process killed at any
//! instant leaves every slot either as it was or as it became: never half-written.
//!
//! * **Decide** (no lock): hash the key, read the home slot's reach, look at the slots from
//!   home to home + reach for the tag and `tag_hi`, and run the codec's CAS loop on the word,
//!   checking that the tag is still the key's. A rejection writes nothing.
//! * **Insert** (a new key) holds the insert lock of the key's home (one of a few thousand,
//!   see [`super::lock`]): it looks again, then claims the first empty slot from the home on,
//!   with one CAS from 0 to `(tag, state after the request)`: the bucket is created and the
//!   key's first request applied at once. The home's reach is raised before the claim, and
//!   `tag_hi` written after it; a reader that meets the claimed word before `tag_hi` takes the
//!   locked path and waits. Two inserters of one key hold the same lock, so a key is never in
//!   two slots; inserters of other keys race for a slot only through the claim's CAS.
//! * **Evict** (no lock): a bucket full as of now is the same as no bucket, so it is dropped
//!   by one CAS from the very word found full to 0; a consume racing it either lands first (and
//!   the eviction's CAS fails) or finds the slot no longer the key's and looks again. Before
//!   the first eviction at `now`, the region's watermark is raised to `now`: a key re-created
//!   by a reading older than the eviction's starts as the evicted bucket did, never fuller.
//!
//! # Fingerprints
//!
//! Keys are compared by a keyed 128-bit fingerprint (SipHash-1-3 with a random secret of the
//! region): 64 bits in the word, 64 in `tag_hi`. Keys of any length fit a fixed slot, so a
//! claim is one CAS and no allocator lives in shared memory that a crash could leave half
//! done; two keys share a bucket only if their 128 bits collide, which a caller who does not
//! know the secret cannot arrange and chance does about once in 2^64 pairs.

use super::lock::Lock;
use crate::algorithm::Codec;
use crate::decision::Decision;
use crate::error::{Error, StoreErrorKind};
use crate::store::bound::Hint;
use crate::store::keyed::Ctx;
use crate::store::OnFull;
use crate::sync::{AtomicU128, AtomicU64, Ordering};

/// One slot (see the module documentation). `repr(C)` with its alignment: the layout of the
/// region's slot array.
#[repr(C, align(32))]
pub(crate) struct Slot {
    pub(crate) word: AtomicU128,
    pub(crate) tag_hi: AtomicU64,
    pub(crate) reach: AtomicU64,
}

impl Slot {
    /// An empty slot.
    #[cfg(test)]
    pub(crate) fn empty() -> Self {
        Self {
            word: AtomicU128::new(0),
            tag_hi: AtomicU64::new(0),
            reach: AtomicU64::new(0),
        }
    }
}

/// A key's fingerprint: where its probe starts, and its 128 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    pub(crate) home: usize,
    /// Never 0 (0 marks an empty slot).
    pub(crate) tag: u64,
    pub(crate) tag_hi: u64,
}

impl Fingerprint {
    /// The fingerprint of a 128-bit keyed hash in a table of `slots` slots (a power of two).
    pub(crate) fn new(hash: u128, slots: usize) -> Self {
        let (hi, lo) = ((hash >> 64) as u64, hash as u64);
        Self {
            home: ((u128::from(hi) * slots as u128) >> 64) as usize,
            tag: lo.max(1),
            tag_hi: hi,
        }
    }
}

#[inline]
fn pack(tag: u64, state: u64) -> u128 {
    (u128::from(tag) << 64) | u128::from(state)
}

#[inline]
fn unpack(word: u128) -> (u64, u64) {
    ((word >> 64) as u64, word as u64)
}

/// What [`Table::audit`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    /// Slots holding a key.
    pub live: usize,
    /// Keys found in more than one slot (beyond their first).
    pub duplicates: usize,
    /// Live slots beyond their home's reach: keys no lookup finds.
    pub unreachable: usize,
    /// States outside their algorithm's range.
    pub corrupt: usize,
    /// The region's live count (repaired by a sweep after a crash).
    pub counted: u64,
}

/// A request, as the store's operations take it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Request {
    pub(crate) now: u64,
    pub(crate) cost: u64,
    /// A leaky queue admits only with a wait of at most this many ns (`u64::MAX`: its own
    /// bound).
    pub(crate) within: u64,
}

/// The region's table, as one process sees it.
pub(crate) struct Table<'a> {
    /// At least `capacity * 8 / 7` of them, so that a probe for an empty slot stays short.
    pub(crate) slots: &'a [Slot],
    pub(crate) locks: &'a [AtomicU64],
    pub(crate) hint: &'a Hint,
    /// Live keys, plus keys being inserted: reserved before a claim, so that `capacity` is
    /// never exceeded. A process killed between a claim (or an eviction) and this counter's
    /// update leaves it off by one; [`recount`](Self::recount) (run by every sweep) repairs it.
    pub(crate) live: &'a AtomicU64,
    /// The most keys the region holds.
    pub(crate) capacity: u64,
    /// The region, for errors.
    pub(crate) name: &'a str,
}

/// What the locked path found for a key.
enum Found {
    At(usize),
    Absent,
}

impl Table<'_> {
    /// Slot `home + d`, wrapping (`home` and `d` are below the slot count).
    #[inline]
    fn at(&self, home: usize, d: usize) -> usize {
        let i = home + d;
        if i >= self.slots.len() {
            i - self.slots.len()
        } else {
            i
        }
    }

    /// A home's reach, capped below the slot count (the region's bytes are untrusted).
    #[inline]
    fn reach(&self, home: usize) -> usize {
        let r = self.slots[home].reach.load(Ordering::Acquire);
        usize::try_from(r)
            .unwrap_or(usize::MAX)
            .min(self.slots.len() - 1)
    }

    fn corrupt(&self, what: &str) -> Error {
        Error::store(StoreErrorKind::Corrupt, self.name, what.to_string())
    }

    /// The slot holding `fp`'s key, as of the loads; `None` when absent, or when a slot with
    /// the key's tag has not got its `tag_hi` yet (an insert in progress: the locked path
    /// waits for it).
    fn find(&self, fp: &Fingerprint) -> Option<usize> {
        (0..=self.reach(fp.home))
            .map(|d| self.at(fp.home, d))
            .find(|&i| {
                let (tag, _) = unpack(self.slots[i].word.load(Ordering::Acquire));
                tag == fp.tag && self.slots[i].tag_hi.load(Ordering::Acquire) == fp.tag_hi
            })
    }

    /// The codec's step on slot `i`'s bucket until its CAS succeeds or nothing is to be
    /// written. `Ok(None)` when the slot no longer holds the key (evicted, reused).
    fn step_at(
        &self,
        i: usize,
        fp: &Fingerprint,
        codec: &Codec,
        step: impl Fn(u64) -> (Decision, Option<u64>),
    ) -> Result<Option<Decision>, Error> {
        let word = &self.slots[i].word;
        let mut cur = word.load(Ordering::Acquire);
        loop {
            let (tag, state) = unpack(cur);
            if tag != fp.tag {
                return Ok(None);
            }
            if !codec.valid(u128::from(state)) {
                return Err(self.corrupt("a bucket's state is outside its algorithm's range"));
            }
            let (d, new) = step(state);
            let Some(new) = new else {
                return Ok(Some(d));
            };
            match word.compare_exchange_weak(
                cur,
                pack(fp.tag, new),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(Some(d)),
                Err(actual) => cur = actual,
            }
        }
    }

    /// The codec's request step on a narrow word (the store keeps one-word codecs only).
    fn request_step(codec: &Codec, r: Request) -> impl Fn(u64) -> (Decision, Option<u64>) + '_ {
        move |s| {
            let (d, new) = codec.decide_within(u128::from(s), r.now, r.cost, r.within);
            (d, new.map(|n| n as u64))
        }
    }

    /// Applies a request to `fp`'s bucket, creating it on the key's first request. `me`
    /// gives this process's lock token (asked only on the locked path).
    pub(crate) fn acquire(
        &self,
        cx: &Ctx,
        fp: &Fingerprint,
        r: Request,
        me: impl FnOnce() -> u64,
    ) -> Result<Decision, Error> {
        let step = Self::request_step(&cx.codec, r);
        // The lock-free path: the key's slot, if it has one.
        for _ in 0..4 {
            let Some(i) = self.find(fp) else { break };
            if let Some(d) = self.step_at(i, fp, &cx.codec, &step)? {
                return Ok(d);
            }
        }
        // The locked path: a new key (or one that kept moving under us).
        let lock = Lock::new(&self.locks[fp.home % self.locks.len()], self.name);
        let _held = lock.acquire(me())?;
        loop {
            match self.find_locked(fp) {
                Found::At(i) => {
                    if let Some(d) = self.step_at(i, fp, &cx.codec, &step)? {
                        return Ok(d);
                    }
                    // Evicted meanwhile (full): the key is absent again.
                }
                Found::Absent => {
                    if let Some(d) = self.insert(cx, fp, r, &step)? {
                        return Ok(d);
                    }
                }
            }
        }
    }

    /// `find`, by the holder of the key's insert lock: a slot with the key's tag but another
    /// `tag_hi` in the key's reach is an insert of this very key whose process died between
    /// its claim and its `tag_hi` (only holders of this lock claim with this key's home, and
    /// another key with the same 64-bit tag in this reach is a 2^-64 chance): it is completed.
    fn find_locked(&self, fp: &Fingerprint) -> Found {
        if let Some(i) = self.find(fp) {
            return Found::At(i);
        }
        for d in 0..=self.reach(fp.home) {
            let i = self.at(fp.home, d);
            let (tag, _) = unpack(self.slots[i].word.load(Ordering::Acquire));
            if tag == fp.tag {
                self.slots[i].tag_hi.store(fp.tag_hi, Ordering::Release);
                return Found::At(i);
            }
        }
        Found::Absent
    }

    /// Creates `fp`'s bucket (absent; the key's insert lock held) with the request applied.
    /// `Ok(None)`: a claim lost a race with another key's inserter; look again.
    fn insert(
        &self,
        cx: &Ctx,
        fp: &Fingerprint,
        r: Request,
        step: &impl Fn(u64) -> (Decision, Option<u64>),
    ) -> Result<Option<Decision>, Error> {
        self.reserve(cx, fp.home, r.now)?;
        let claimed = self.claim(cx, fp, r, step);
        if !matches!(claimed, Ok(Some(_))) {
            self.live.fetch_sub(1, Ordering::AcqRel);
        }
        claimed
    }

    /// Takes one unit of the capacity for a new key, making room when the region is full:
    /// full buckets are evicted (a complete scan that finds none records, in the hint, the
    /// earliest instant one can become full, so that new keys are refused in O(1) until then),
    /// then [`OnFull`] decides.
    fn reserve(&self, cx: &Ctx, home: usize, now: u64) -> Result<(), Error> {
        loop {
            let mut n = self.live.load(Ordering::Acquire);
            while n < self.capacity {
                match self
                    .live
                    .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => return Ok(()),
                    Err(actual) => n = actual,
                }
            }
            if let Some(scan) = self.hint.scan(now) {
                let (evicted, soonest) = self.evict_full(cx, now)?;
                if evicted > 0 {
                    continue;
                }
                self.hint.found_nothing(scan, soonest);
            }
            if cx.on_full == OnFull::EvictFullest && self.evict_fullest(cx, home, now)? {
                continue;
            }
            return Err(Error::KeyStoreFull {
                max_keys: usize::try_from(self.capacity).unwrap_or(usize::MAX),
            });
        }
    }

    /// Claims, for `fp` (a unit of capacity reserved), the first slot from its home on that is
    /// empty or holds a full bucket (evicted on the way: a bucket equal to a fresh one only
    /// lengthens probes), with the request applied.
    fn claim(
        &self,
        cx: &Ctx,
        fp: &Fingerprint,
        r: Request,
        step: &impl Fn(u64) -> (Decision, Option<u64>),
    ) -> Result<Option<Decision>, Error> {
        let n = self.slots.len();
        let Some(d) = (0..n).find(|&d| self.vacate(cx, self.at(fp.home, d), r.now)) else {
            return Ok(None); // every slot was live (a count off after a crash): look again
        };
        let i = self.at(fp.home, d);
        // Reach first, so that no reader that sees the key's slot misses it for its reach.
        self.slots[fp.home]
            .reach
            .fetch_max(d as u64, Ordering::AcqRel);
        let at = r.now.max(self.hint.watermark());
        let fresh = cx.codec.fresh(at) as u64;
        let (decision, new) = step(fresh);
        let state = new.unwrap_or(fresh);
        if self.slots[i]
            .word
            .compare_exchange(0, pack(fp.tag, state), Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Ok(None); // another key's inserter took it first
        }
        self.slots[i].tag_hi.store(fp.tag_hi, Ordering::Release);
        let full_at = r.now.saturating_add(decision.reset_after_nanos());
        self.hint.lowered(full_at);
        Ok(Some(decision))
    }

    /// Whether slot `i` is empty, after evicting its bucket if that is full at `now`.
    fn vacate(&self, cx: &Ctx, i: usize, now: u64) -> bool {
        let w = self.slots[i].word.load(Ordering::Acquire);
        let (tag, state) = unpack(w);
        if tag == 0 {
            return true;
        }
        if !cx.codec.valid(u128::from(state)) || !cx.codec.is_full(u128::from(state), now) {
            return false;
        }
        self.evict(i, w, now)
    }

    /// Drops slot `i`'s bucket if its word is still `w` (found full at `now`, or chosen by
    /// `EvictFullest`).
    fn evict(&self, i: usize, w: u128, now: u64) -> bool {
        // Raised before the bucket goes, so that whoever re-creates the key reads it.
        self.hint.raise_watermark(now);
        let gone = self.slots[i]
            .word
            .compare_exchange(w, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if gone {
            self.live.fetch_sub(1, Ordering::AcqRel);
        }
        gone
    }

    /// Counts the live keys into `live` (run by every sweep): repairs a count left off by a
    /// process killed between a claim or an eviction and its update. Exact when nothing else
    /// changes the region meanwhile.
    pub(crate) fn recount(&self) -> usize {
        let n = self.len();
        self.live.store(n as u64, Ordering::Release);
        n
    }

    /// Evicts every bucket full at `now`; how many, and the earliest instant a kept bucket
    /// becomes full (`u64::MAX` if none).
    pub(crate) fn evict_full(&self, cx: &Ctx, now: u64) -> Result<(usize, u64), Error> {
        let (mut evicted, mut soonest) = (0, u64::MAX);
        for i in 0..self.slots.len() {
            let mut w = self.slots[i].word.load(Ordering::Acquire);
            loop {
                let (tag, state) = unpack(w);
                if tag == 0 {
                    break;
                }
                if !cx.codec.valid(u128::from(state)) {
                    return Err(self.corrupt("a bucket's state is outside its algorithm's range"));
                }
                if !cx.codec.is_full(u128::from(state), now) {
                    let full_in = cx
                        .codec
                        .decide(u128::from(state), now, 0)
                        .0
                        .reset_after_nanos();
                    soonest = soonest.min(now.saturating_add(full_in));
                    break;
                }
                if self.evict(i, w, now) {
                    evicted += 1;
                    break;
                }
                w = self.slots[i].word.load(Ordering::Acquire);
            }
        }
        Ok((evicted, soonest))
    }

    /// [`OnFull::EvictFullest`]: evicts the bucket closest to full (the least `reset_after`)
    /// among up to 32 live slots from `home` on. Lossy, as in the in-process store.
    fn evict_fullest(&self, cx: &Ctx, home: usize, now: u64) -> Result<bool, Error> {
        const SAMPLE: usize = 32;
        for _ in 0..4 {
            let mut best: Option<(u64, usize, u128)> = None;
            for d in 0..SAMPLE.min(self.slots.len()) {
                let i = self.at(home, d);
                let w = self.slots[i].word.load(Ordering::Acquire);
                let (tag, state) = unpack(w);
                if tag == 0 {
                    continue;
                }
                if !cx.codec.valid(u128::from(state)) {
                    return Err(self.corrupt("a bucket's state is outside its algorithm's range"));
                }
                let reset = cx
                    .codec
                    .decide(u128::from(state), now, 0)
                    .0
                    .reset_after_nanos();
                if best.is_none_or(|b| reset < b.0) {
                    best = Some((reset, i, w));
                }
            }
            let Some((_, i, w)) = best else {
                return Ok(false);
            };
            // From the very word sampled: a consume that lands first keeps the bucket.
            if self.evict(i, w, now) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The decision a request of cost 0 would get, writing nothing; an absent key reads as a
    /// bucket created now.
    pub(crate) fn peek(&self, cx: &Ctx, fp: &Fingerprint, now: u64) -> Result<Decision, Error> {
        self.peek_cost(cx, fp, now, 0)
    }

    /// The decision a request of `cost` would get, writing nothing.
    pub(crate) fn peek_cost(
        &self,
        cx: &Ctx,
        fp: &Fingerprint,
        now: u64,
        cost: u64,
    ) -> Result<Decision, Error> {
        for _ in 0..4 {
            let Some(i) = self.find(fp) else { break };
            let (tag, state) = unpack(self.slots[i].word.load(Ordering::Acquire));
            if tag == fp.tag {
                if !cx.codec.valid(u128::from(state)) {
                    return Err(self.corrupt("a bucket's state is outside its algorithm's range"));
                }
                return Ok(cx.codec.decide(u128::from(state), now, cost).0);
            }
        }
        let at = now.max(self.hint.watermark());
        Ok(cx.codec.decide(cx.codec.fresh(at), now, cost).0)
    }

    /// Gives `cost` back to `fp`'s bucket (nothing for an absent key).
    pub(crate) fn refund(
        &self,
        cx: &Ctx,
        fp: &Fingerprint,
        now: u64,
        cost: u64,
    ) -> Result<(), Error> {
        for _ in 0..4 {
            let Some(i) = self.find(fp) else {
                return Ok(());
            };
            let word = &self.slots[i].word;
            let mut cur = word.load(Ordering::Acquire);
            loop {
                let (tag, state) = unpack(cur);
                if tag != fp.tag {
                    break; // evicted or reused: look again
                }
                if !cx.codec.valid(u128::from(state)) {
                    return Err(self.corrupt("a bucket's state is outside its algorithm's range"));
                }
                let Some(new) = cx.codec.refund(u128::from(state), now, cost) else {
                    return Ok(());
                };
                match word.compare_exchange_weak(
                    cur,
                    pack(fp.tag, new as u64),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        // A refund can make a bucket full sooner than the hint says.
                        self.hint.lowered(now);
                        return Ok(());
                    }
                    Err(actual) => cur = actual,
                }
            }
        }
        Ok(())
    }

    /// Forgets `fp`'s key; whether it was present.
    pub(crate) fn remove(&self, fp: &Fingerprint) -> bool {
        while let Some(i) = self.find(fp) {
            let word = &self.slots[i].word;
            let cur = word.load(Ordering::Acquire);
            if unpack(cur).0 != fp.tag {
                continue;
            }
            if word
                .compare_exchange(cur, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.live.fetch_sub(1, Ordering::AcqRel);
                return true;
            }
        }
        false
    }

    /// Forgets every key (the reaches stay: they only bound probes).
    pub(crate) fn clear(&self) {
        for slot in self.slots {
            if slot.word.swap(0, Ordering::AcqRel) != 0 {
                self.live.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Checks the table's invariants (a scan; exact only while nothing changes it): every live
    /// slot's key is findable (within its home's reach), no key is in two slots, every state
    /// is valid, and the live count matches.
    pub(crate) fn audit(&self, cx: &Ctx) -> Audit {
        let mut seen = std::collections::HashSet::new();
        let mut a = Audit {
            counted: self.live.load(Ordering::Acquire),
            ..Audit::default()
        };
        for (i, s) in self.slots.iter().enumerate() {
            let (tag, state) = unpack(s.word.load(Ordering::Acquire));
            if tag == 0 {
                continue;
            }
            a.live += 1;
            let hi = s.tag_hi.load(Ordering::Acquire);
            if !seen.insert((tag, hi)) {
                a.duplicates += 1;
            }
            if !cx.codec.valid(u128::from(state)) {
                a.corrupt += 1;
            }
            let home =
                Fingerprint::new(u128::from(hi) << 64 | u128::from(tag), self.slots.len()).home;
            let d = if i >= home {
                i - home
            } else {
                i + self.slots.len() - home
            };
            if d > self.reach(home) {
                a.unreachable += 1;
            }
        }
        a
    }

    /// Live keys (a scan: not an atomic snapshot).
    pub(crate) fn len(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| unpack(s.word.load(Ordering::Acquire)).0 != 0)
            .count()
    }
}

/// The table over in-process memory, as the loom models and the unit tests (Miri too) use it.
#[cfg(test)]
pub(crate) struct Owned {
    pub(crate) slots: Vec<Slot>,
    pub(crate) locks: Vec<AtomicU64>,
    pub(crate) hint: Hint,
    pub(crate) live: AtomicU64,
    pub(crate) capacity: u64,
}

#[cfg(test)]
impl Owned {
    /// A table for `capacity` keys in `slots` slots, with `locks` insert locks.
    pub(crate) fn new(capacity: u64, slots: usize, locks: usize) -> Self {
        Self {
            slots: (0..slots).map(|_| Slot::empty()).collect(),
            locks: (0..locks).map(|_| AtomicU64::new(0)).collect(),
            hint: Hint::new(),
            live: AtomicU64::new(0),
            capacity,
        }
    }

    pub(crate) fn table(&self) -> Table<'_> {
        Table {
            slots: &self.slots,
            locks: &self.locks,
            hint: &self.hint,
            live: &self.live,
            capacity: self.capacity,
            name: "test",
        }
    }
}

#[cfg(all(test, not(sluicegate_loom)))]
mod tests {
    use super::*;
    use crate::store::keyed::Ctx;
    use crate::{OnFull, Quota};

    fn cx(rate: &str, on_full: OnFull) -> Ctx {
        let q: Quota = rate.parse().unwrap();
        Ctx::for_tests(q, 0, on_full)
    }

    fn fp(k: u64, slots: usize) -> Fingerprint {
        // A deterministic "hash": distinct keys, homes spread (and colliding for k % slots).
        Fingerprint::new(
            (u128::from(k) << 64) | u128::from(k.wrapping_mul(0x9e37_79b9) | 1),
            slots,
        )
    }

    fn req(now: u64, cost: u64) -> Request {
        Request {
            now,
            cost,
            within: u64::MAX,
        }
    }

    #[test]
    fn a_key_gets_one_bucket_and_its_decisions() {
        let o = Owned::new(8, 10, 4);
        let (t, c) = (o.table(), cx("2/s", OnFull::RejectNewKeys));
        let k = fp(7, 10);
        assert!(t.acquire(&c, &k, req(0, 1), || 1).unwrap().allowed());
        assert!(t.acquire(&c, &k, req(0, 1), || 1).unwrap().allowed());
        let d = t.acquire(&c, &k, req(0, 1), || 1).unwrap();
        assert!(!d.allowed());
        assert_eq!(d.retry_after_nanos(), 500_000_000);
        assert_eq!(t.len(), 1);
        assert_eq!(t.peek(&c, &k, 0).unwrap().remaining(), 0);
        t.refund(&c, &k, 0, 1).unwrap();
        assert_eq!(t.peek(&c, &k, 0).unwrap().remaining(), 1);
        assert!(t.remove(&k));
        assert!(!t.remove(&k));
        assert_eq!((t.len(), o.live.load(Ordering::Relaxed)), (0, 0));
    }

    #[test]
    fn colliding_homes_probe_and_every_key_is_found() {
        let n = 16;
        let o = Owned::new(14, n, 4);
        let (t, c) = (o.table(), cx("1/s", OnFull::RejectNewKeys));
        // Keys 0, 16, 32, ... share a home.
        let keys: Vec<_> = (0..14).map(|i| fp(i * 16 + 3, n)).collect();
        for k in &keys {
            assert!(t.acquire(&c, k, req(0, 1), || 1).unwrap().allowed());
        }
        for k in &keys {
            assert!(
                !t.acquire(&c, k, req(0, 1), || 1).unwrap().allowed(),
                "{k:?}"
            );
        }
        // At the bound (14 keys), nothing is full: a 15th key is refused.
        let extra = fp(999, n);
        assert!(matches!(
            t.acquire(&c, &extra, req(0, 1), || 1),
            Err(Error::KeyStoreFull { max_keys: 14 })
        ));
        // A second later every bucket is full again: the new key evicts them and fits.
        assert!(t
            .acquire(&c, &extra, req(1_000_000_000, 1), || 1)
            .unwrap()
            .allowed());
        assert!(t.len() <= 14);
    }

    #[test]
    fn evict_fullest_makes_room_at_the_bound() {
        let o = Owned::new(2, 3, 2);
        let (t, c) = (o.table(), cx("10/s", OnFull::EvictFullest));
        assert!(t
            .acquire(&c, &fp(1, 3), req(0, 10), || 1)
            .unwrap()
            .allowed());
        assert!(t.acquire(&c, &fp(2, 3), req(0, 1), || 1).unwrap().allowed());
        // Full: the bucket with the least reset_after (key 2) goes.
        assert!(t.acquire(&c, &fp(3, 3), req(0, 1), || 1).unwrap().allowed());
        assert_eq!(t.peek(&c, &fp(1, 3), 0).unwrap().remaining(), 0);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn an_insert_whose_process_died_before_tag_hi_is_completed() {
        let o = Owned::new(4, 5, 2);
        let (t, c) = (o.table(), cx("5/s", OnFull::RejectNewKeys));
        let k = fp(42, 5);
        // The claim landed (with the first request applied), tag_hi did not.
        o.slots[k.home].word.store(
            pack(k.tag, c.codec.fresh(0) as u64 + 200_000_000),
            Ordering::Release,
        );
        o.live.store(1, Ordering::Release);
        assert!(t.find(&k).is_none(), "the lock-free path does not trust it");
        let d = t.acquire(&c, &k, req(0, 1), || 1).unwrap();
        assert_eq!(d.remaining(), 3, "the dead insert's request counted");
        assert_eq!(t.len(), 1, "one bucket, not two");
        assert_eq!(o.slots[k.home].tag_hi.load(Ordering::Acquire), k.tag_hi);
    }

    #[test]
    fn a_corrupt_state_is_a_typed_error() {
        let o = Owned::new(4, 5, 2);
        let (t, c) = (
            o.table(),
            cx("5/s; algorithm=fixed_window", OnFull::RejectNewKeys),
        );
        let k = fp(9, 5);
        assert!(t.acquire(&c, &k, req(0, 1), || 1).unwrap().allowed());
        let i = t.find(&k).unwrap();
        let (tag, _) = unpack(o.slots[i].word.load(Ordering::Acquire));
        o.slots[i]
            .word
            .store(pack(tag, u64::MAX), Ordering::Release);
        let e = t.acquire(&c, &k, req(0, 1), || 1).unwrap_err();
        assert_eq!(e.code(), "store_corrupt", "{e}");
        assert_eq!(t.peek(&c, &k, 0).unwrap_err().code(), "store_corrupt");
    }

    #[test]
    fn a_sweep_evicts_full_buckets_and_recounts() {
        let o = Owned::new(8, 10, 2);
        let (t, c) = (o.table(), cx("1/s", OnFull::RejectNewKeys));
        for k in 0..5 {
            t.acquire(&c, &fp(k, 10), req(0, 1), || 1).unwrap();
        }
        o.live.store(9, Ordering::Release); // as a killed process might leave it
        assert_eq!(t.evict_full(&c, 500_000_000).unwrap().0, 0);
        assert_eq!(t.evict_full(&c, 1_000_000_000).unwrap().0, 5);
        assert_eq!(t.recount(), 0);
        assert_eq!(o.live.load(Ordering::Acquire), 0);
        // An evicted key comes back fresh from the eviction's instant on: a reading older than
        // the eviction sees the bucket as it stood then (empty at 0), never fuller.
        assert_eq!(
            t.peek(&c, &fp(1, 10), 1_000_000_000).unwrap().remaining(),
            1
        );
        assert_eq!(t.peek(&c, &fp(1, 10), 0).unwrap().remaining(), 0);
    }
}

/// The protocol under loom, on in-process memory standing in for the mapping (`ci/loom.sh`).
#[cfg(all(test, sluicegate_loom))]
mod loom_models {
    use super::*;
    use crate::store::keyed::Ctx;
    use crate::{OnFull, Quota};
    use loom::sync::Arc;
    use loom::thread;

    const S: u64 = 1_000_000_000;

    fn cx(rate: &str) -> Ctx {
        let q: Quota = rate.parse().unwrap();
        Ctx::for_tests(q, 0, OnFull::RejectNewKeys)
    }

    fn fp(k: u64, home: usize, slots: usize) -> Fingerprint {
        let hi = ((home as u128) << 64).div_ceil(slots as u128) as u64;
        let f = Fingerprint::new((u128::from(hi) << 64) | u128::from(k), slots);
        assert_eq!(f.home, home);
        f
    }

    fn req(now: u64, cost: u64) -> Request {
        Request {
            now,
            cost,
            within: u64::MAX,
        }
    }

    /// Two first requests of one key, racing: one bucket, both requests in it.
    #[test]
    fn two_inserts_of_one_key_make_one_bucket() {
        loom::model(|| {
            let o = Arc::new(Owned::new(2, 3, 1));
            let c = Arc::new(cx("2/s"));
            let k = fp(7, 1, 3);
            let other = {
                let (o, c) = (o.clone(), c.clone());
                thread::spawn(move || o.table().acquire(&c, &k, req(0, 1), || 1).unwrap())
            };
            let mine = o.table().acquire(&c, &k, req(0, 1), || 1).unwrap();
            let theirs = other.join().unwrap();
            assert!(mine.allowed() && theirs.allowed());
            let t = o.table();
            assert_eq!(t.len(), 1);
            assert_eq!(t.peek(&c, &k, 0).unwrap().remaining(), 0);
            assert_eq!(o.live.load(Ordering::Acquire), 1);
        });
    }

    /// A consume racing the eviction of its (full) bucket is applied exactly once: to the old
    /// bucket before the eviction (which then keeps it), or to a new one after it.
    #[test]
    fn a_consume_racing_an_eviction_is_never_lost() {
        loom::model(|| {
            let o = Arc::new(Owned::new(2, 3, 1));
            let c = Arc::new(cx("1/s"));
            let k = fp(3, 0, 3);
            o.table().acquire(&c, &k, req(0, 1), || 1).unwrap(); // empty at 0, full at 1 s
            let evictor = {
                let (o, c) = (o.clone(), c.clone());
                thread::spawn(move || o.table().evict_full(&c, S).unwrap().0)
            };
            let d = o.table().acquire(&c, &k, req(S, 1), || 1).unwrap();
            let evicted = evictor.join().unwrap();
            assert!(d.allowed());
            assert!(evicted <= 1);
            let t = o.table();
            assert_eq!(
                t.peek(&c, &k, S).unwrap().remaining(),
                0,
                "the consume was lost"
            );
            assert_eq!(t.len(), 1);
        });
    }

    /// Inserts of two keys with one home race for the same slot: both land, in two slots.
    #[test]
    fn inserts_of_two_keys_share_a_home() {
        loom::model(|| {
            let o = Arc::new(Owned::new(2, 3, 2));
            let c = Arc::new(cx("5/s"));
            let (a, b) = (fp(1, 2, 3), fp(2, 2, 3));
            let other = {
                let (o, c) = (o.clone(), c.clone());
                thread::spawn(move || o.table().acquire(&c, &b, req(0, 2), || 1).unwrap())
            };
            assert!(o
                .table()
                .acquire(&c, &a, req(0, 1), || 1)
                .unwrap()
                .allowed());
            assert!(other.join().unwrap().allowed());
            let t = o.table();
            assert_eq!(t.len(), 2);
            assert_eq!(t.peek(&c, &a, 0).unwrap().remaining(), 4);
            assert_eq!(t.peek(&c, &b, 0).unwrap().remaining(), 3);
        });
    }

    /// A new key at the bound evicts the one full bucket while a consume of it races: the
    /// consume lands first (the bucket is not full any more: the new key is refused), or the
    /// eviction does (the consume then needs a new bucket, and the bound refuses it). Exactly
    /// one of the two is admitted, and the bound of one key holds.
    #[test]
    fn a_new_key_at_the_bound_races_a_consume() {
        loom::model(|| {
            let o = Arc::new(Owned::new(1, 2, 2));
            let c = Arc::new(cx("1/s"));
            let (old, new) = (fp(1, 0, 2), fp(2, 1, 2));
            o.table().acquire(&c, &old, req(0, 1), || 1).unwrap(); // full again at 1 s
            let consumer = {
                let (o, c) = (o.clone(), c.clone());
                thread::spawn(move || o.table().acquire(&c, &old, req(S, 1), || 1))
            };
            let inserted = o.table().acquire(&c, &new, req(S, 1), || 1);
            let consumed = consumer.join().unwrap();
            let ok = |r: &Result<Decision, Error>| match r {
                Ok(d) => d.allowed(),
                Err(e) => {
                    assert_eq!(e.code(), "key_store_full");
                    false
                }
            };
            assert!(ok(&inserted) ^ ok(&consumed), "{inserted:?} {consumed:?}");
            assert_eq!(o.table().len(), 1);
        });
    }
}
