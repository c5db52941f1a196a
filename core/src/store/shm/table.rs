//! The slot table of a shared-memory region: the protocol, written over borrowed atomics so
//! that the same code runs on a mapping (between processes) and on in-process memory (the
//! loom models, the unit tests under Miri).
//!
//! # Slots
//!
//! A slot is 32 bytes: one 128-bit word holding 32 bits of the key's fingerprint (its tag) and
//! the bucket's 96-bit state, a 64-bit word with 64 more bits of the fingerprint (`tag_hi`),
//! and a 64-bit `side` word with the last 32 bits of the fingerprint (above) and the reach of
//! the keys whose home is this slot (below). A word of 0 is an empty slot; a live slot's tag is
//! never 0. Every change of a bucket is one compare-and-swap of its word, so a process killed at
//! any instant leaves every bucket either as it was or as it became: never half-written.
//!
//! * **Decide** (no lock): hash the key, read its home's reach, look at the slots from home
//!   to home + reach for the whole 128-bit fingerprint, and run the codec's CAS loop on the
//!   word, checking that its tag is still the key's. A rejection writes nothing.
//! * **Insert** (a new key) holds the insert lock of the key's home (one of a few thousand,
//!   see [`super::lock`]), so a key is never in two slots. It looks again, takes a unit of the
//!   capacity, raises the home's reach, and claims the first empty slot from the home on in
//!   two CASes: 0 to `(tag, CLAIM | its process token)`, then, with `tag_hi` and the last 32
//!   bits written, `(tag, CLAIM | token)` to `(tag, state after the request)`: the bucket is
//!   created and the key's first request applied at once. Readers never match a claim in
//!   progress (they take the locked path and wait); a claim whose process died is found by
//!   its token and undone by whoever meets it (an insert, a sweep), so no slot is lost.
//! * **Evict** (no lock): a bucket full as of now is the same as no bucket, so it is dropped by
//!   one CAS from the very word found full to 0; a consume racing it either lands first (and
//!   the eviction's CAS fails) or finds the slot no longer the key's and looks again. Before
//!   the first eviction at `now`, the region's watermark is raised to `now`: a key re-created by
//!   a reading older than the eviction's starts as the evicted bucket did, never fuller.
//!   The slot is emptied through a vacating mark (see `Table::empty_slot`), so that a new key
//!   at the bound can tell room being made from no room.
//!
//! # Fingerprints and states
//!
//! Keys are compared by a 128-bit fingerprint split over the slot's three words, so keys of
//! any length fit a fixed slot and no allocator lives in shared memory that a crash could
//! leave half done. A short key (a byte key of up to 15 bytes, an IPv4 address's text, or a
//! key whose `Hash` writes up to 15 bytes) is compared in full: its fingerprint is its bytes,
//! encoded one to one ([`super::memo::KeyStream::exact`]) and put through a bijection keyed
//! by the region's secret ([`exact_value`]), so two short keys never share a bucket and no
//! hash is computed for them. A longer key's fingerprint is its SipHash-1-3 under the
//! region's random secret ([`hashed_value`]): two such keys share a bucket only if their 127
//! bits collide, which a caller who does not know the secret cannot arrange and chance does
//! about once in 2^63 pairs; bit 32 (the tag's lowest) tells the two kinds apart. Each
//! process memoises its keys' fingerprints, short and long ([`super::memo`]): the table sees
//! the same fingerprint either way. The tag in the word (32
//! bits) is what a decision's CAS checks: a consume that read a slot before it was evicted and
//! given to another key lands only if the new key's tag and state both equal the old ones.
//!
//! A state has 95 bits (bit 95 marks a claim): the codecs run on readings relative to the
//! region's creation with `Narrow { bits: 95, min: a century }`, which every quota with a
//! reduced rate below about 2^32 tokens a nanosecond fits exactly.

use super::lock::Lock;
use crate::algorithm::{Codec, Narrow, StateCodec, CENTURY_NS};
use crate::decision::Decision;
use crate::error::{Error, StoreErrorKind};
use crate::store::bound::Hint;
use crate::store::keyed::Ctx;
use crate::store::OnFull;
use crate::sync::{AtomicU128, AtomicU64, Ordering};

/// The states a region keeps: 95 bits, for a century of readings from its creation.
pub(crate) const STATE: Narrow = Narrow {
    bits: 95,
    min: CENTURY_NS,
};

/// The state field's claim mark: `CLAIM | token` is a claim in progress by the process of
/// `token` (no codec state reaches bit 95).
const CLAIM: u128 = 1 << 95;
/// With [`CLAIM`], the vacating mark: `CLAIM | VACATE | token` is a slot whose bucket (or dead
/// claim) the process of `token` has dropped and whose unit of capacity it is giving back;
/// the slot is emptied right after. See [`Table::empty_slot`].
const VACATE: u128 = 1 << 94;
const STATE_MASK: u128 = (1 << 96) - 1;

/// One slot (see the module documentation). `repr(C)` with its alignment: the layout of the
/// region's slot array.
#[repr(C, align(32))]
pub(crate) struct Slot {
    pub(crate) word: AtomicU128,
    pub(crate) tag_hi: AtomicU64,
    /// The last 32 bits of the occupant's fingerprint, above; this home's reach, below.
    pub(crate) side: AtomicU64,
}

impl Slot {
    /// An empty slot.
    #[cfg(test)]
    pub(crate) fn empty() -> Self {
        Self {
            word: AtomicU128::new(0),
            tag_hi: AtomicU64::new(0),
            side: AtomicU64::new(0),
        }
    }
}

/// A key's fingerprint: where its probe starts, and its 128 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    pub(crate) home: usize,
    /// In the word; never 0 (0 marks an empty slot).
    pub(crate) tag: u32,
    pub(crate) tag_hi: u64,
    /// In the side word.
    pub(crate) tag_lo: u32,
}

impl Fingerprint {
    /// The fingerprint `hash` ([`exact_value`] or [`hashed_value`]) in a table of `slots`
    /// slots.
    pub(crate) fn new(hash: u128, slots: usize) -> Self {
        let (hi, lo) = ((hash >> 64) as u64, hash as u64);
        Self {
            home: ((u128::from(hi) * slots as u128) >> 64) as usize,
            tag: ((lo >> 32) as u32).max(1),
            tag_hi: hi,
            tag_lo: lo as u32,
        }
    }
}

/// The fingerprint of a short key: `code` (its stream, [`super::memo::KeyStream::exact`]:
/// below 2^125) through a bijection of 126-bit integers keyed by `key` (three Feistel rounds
/// over 63-bit halves, each round's function a folded multiplication of the other half under
/// a word of the key), spread over the fingerprint with bit 32 set and bit 64 clear. One to one: two short
/// keys' fingerprints are equal only if their streams are. The rounds spread structured keys
/// (addresses of one network) over home slots and tags as a hash would; like the in-process
/// store's hash, keyed but not a cryptographic function.
#[inline]
pub(crate) fn exact_value(code: u128, key: [u64; 3]) -> u128 {
    const M: u64 = u64::MAX >> 1;
    let f = |half: u64, k: u64| {
        let p = u128::from(half ^ k) * 0x9e37_79b9_7f4a_7c15;
        ((p as u64) ^ ((p >> 64) as u64)) & M
    };
    let (mut a, mut b) = ((code >> 63) as u64 & M, code as u64 & M);
    a ^= f(b, key[0]);
    b ^= f(a, key[1]);
    a ^= f(b, key[2]);
    // `b`, done a round before `a`, makes the high word (the home slot: its top bits), so that
    // the slot's load need not wait for the last round; `a` the tag (with bit 32, the short
    // keys' mark) and the low word.
    (u128::from(b) << 65) | (u128::from(a >> 32) << 33) | (1 << 32) | u128::from(a as u32)
}

/// The fingerprint of a longer key: its 128-bit SipHash with bit 32 clear (so never a short
/// key's), its tag never 0.
#[inline]
pub(crate) fn hashed_value(sip: u128) -> u128 {
    let v = sip & !(1 << 32);
    if (v >> 32) as u32 == 0 {
        v | (1 << 33)
    } else {
        v
    }
}

#[inline]
fn pack(tag: u32, state: u128) -> u128 {
    (u128::from(tag) << 96) | state
}

#[inline]
fn unpack(word: u128) -> (u32, u128) {
    ((word >> 96) as u32, word & STATE_MASK)
}

/// The process token of a claim in progress, if `state` is one.
#[inline]
fn claim_of(state: u128) -> Option<u64> {
    (state & CLAIM != 0).then_some(state as u64)
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

/// What [`Table::audit`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    /// Slots holding a key (claims in progress included).
    pub live: usize,
    /// Keys found in more than one slot (beyond their first).
    pub duplicates: usize,
    /// Live slots beyond their home's reach: keys no lookup finds.
    pub unreachable: usize,
    /// States outside their algorithm's range.
    pub corrupt: usize,
    /// Claims whose process is gone (a sweep undoes them).
    pub stale_claims: usize,
    /// The region's live count (repaired by a sweep after a crash).
    pub counted: u64,
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

/// How a claim ended.
enum Claimed {
    /// The bucket is created, with the request's decision.
    Done(Decision),
    /// No slot was taken (another inserter got there first): the unit of capacity reserved
    /// for it is still the inserter's to give back.
    Lost,
    /// No slot was taken, and the key is refused with this error: every slot holds a key or a
    /// claim though the live count had room (`KeyStoreFull`), or a vacating mark stayed for
    /// [`super::lock::WAIT`] (`Timeout`). The unit of capacity reserved for it is still the
    /// inserter's to give back.
    Refused(Error),
    /// The claim was undone by another process that judged this one dead, and its unit given
    /// back with it.
    Undone,
}

/// What a sweep found.
struct Swept {
    /// Buckets evicted and dead claims undone.
    evicted: usize,
    /// The earliest instant a kept bucket becomes full (`u64::MAX` if none).
    soonest: u64,
    /// Whether it met a live process's vacating mark: a unit of the capacity on its way back.
    vacating: bool,
}

/// What the locked path found for a key.
enum Found {
    At(usize),
    /// Its bucket is being emptied by a live process ([`Table::wait_vacated`]).
    Vacating,
    Absent,
}

const BAD_STATE: &str = "a bucket's state is outside its algorithm's range";
const BAD_WATERMARK: &str =
    "the region's eviction watermark is past the last clock reading its quota keeps";

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
        let r = self.slots[home].side.load(Ordering::Acquire) as u32;
        (r as usize).min(self.slots.len() - 1)
    }

    /// Raises a home's reach to at least `d`, keeping the side word's fingerprint bits.
    fn raise_reach(&self, home: usize, d: usize) {
        let side = &self.slots[home].side;
        let d = d as u64;
        let mut cur = side.load(Ordering::Acquire);
        while cur & 0xffff_ffff < d {
            let new = (cur & !0xffff_ffff) | d;
            match side.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Writes the last 32 bits of a claimed slot's fingerprint, keeping its reach.
    fn set_tag_lo(&self, i: usize, tag_lo: u32) {
        let side = &self.slots[i].side;
        let mut cur = side.load(Ordering::Acquire);
        loop {
            let new = (u64::from(tag_lo) << 32) | (cur & 0xffff_ffff);
            match side.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Gives a unit of the capacity back. Never below 0: a count a crash or a writer of
    /// garbage left too low is repaired by the next sweep's recount, not wrapped around.
    fn give_back(&self) {
        let _ = self
            .live
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// Empties slot `i` if its word is still `w` (a bucket, or a claim whose process is gone)
    /// and gives its unit of the capacity back; whether it did. In three steps, so that the
    /// unit is never in flight unseen: the word goes to this process's vacating mark, the
    /// unit is given back, the slot is emptied. A new key at the bound that meets the mark
    /// knows that room is being made and waits for it (see [`reserve`](Self::reserve)) rather
    /// than being refused; a mark whose process died is emptied by whoever meets it, its unit
    /// left counted (too high: the safe way, until the next sweep's recount).
    fn empty_slot(&self, i: usize, w: u128) -> bool {
        let word = &self.slots[i].word;
        let mark = pack(
            unpack(w).0,
            CLAIM | VACATE | u128::from(super::lock::token()),
        );
        if word
            .compare_exchange(w, mark, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        self.give_back();
        // Fails only if someone took this process for dead and emptied the slot already.
        let _ = word.compare_exchange(mark, 0, Ordering::AcqRel, Ordering::Acquire);
        true
    }

    /// Takes one unit of the capacity, if one is free.
    fn take_unit(&self) -> bool {
        let mut n = self.live.load(Ordering::Acquire);
        while n < self.capacity {
            match self
                .live
                .compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(actual) => n = actual,
            }
        }
        false
    }

    /// The refusal of a new key at the capacity.
    fn full(&self) -> Error {
        Error::KeyStoreFull {
            max_keys: usize::try_from(self.capacity).unwrap_or(usize::MAX),
        }
    }

    fn corrupt(&self, what: &str) -> Error {
        Error::store(StoreErrorKind::Corrupt, self.name, what.to_string())
    }

    /// Where a re-created key starts at `now`: the later of `now` and the region's watermark
    /// (see [`evict`](Self::evict)). The watermark is the region's bytes, untrusted: one past
    /// the codec's horizon was never a reading (every eviction's `now` is one), and a bucket
    /// created there would not fit its 95 bits (it spilled into the claim and vacating bits).
    fn start_at(&self, cx: &Ctx, now: u64) -> Result<u64, Error> {
        let w = self.hint.watermark();
        if w > cx.codec.horizon() {
            return Err(self.corrupt(BAD_WATERMARK));
        }
        Ok(now.max(w))
    }

    /// The latest hint (nothing full before it) that a bucket of this region can have given by
    /// `now`, with room to spare: `now` plus twice the time a bucket emptied at `now` takes to
    /// be full again. A hint is a reading plus a bucket's time until full (a sweep's
    /// `soonest`, a new bucket's or a refund's `full_at`); one past this bound is taken for
    /// none (a scan then costs what it costs without a hint), so that a hint written over by
    /// someone else does not refuse every new key until that instant. A bound too low would
    /// only cost scans (readings from other processes a little behind this one's are such a
    /// case). Three steps of the codec, on the path of a new key at the bound only.
    fn hint_bound(&self, cx: &Ctx, now: u64) -> u64 {
        let c = &cx.codec;
        let fresh = c.fresh(now);
        let left = c.decide(fresh, now, 0).0.remaining();
        let empty = match left {
            0 => fresh,
            _ => c.decide(fresh, now, left).1.unwrap_or(fresh),
        };
        let refill = c.decide(empty, now, 0).0.reset_after_nanos();
        now.saturating_add(refill.saturating_mul(2))
    }

    /// The slot holding `fp`'s key, as of the loads; `None` when absent (or being inserted).
    #[inline(always)]
    fn find(&self, fp: &Fingerprint) -> Option<usize> {
        self.find_word(fp).map(|(i, _)| i)
    }

    /// [`find`](Self::find), with the slot's word as loaded.
    #[inline(always)]
    fn find_word(&self, fp: &Fingerprint) -> Option<(usize, u128)> {
        let reach = self.reach(fp.home);
        // The home first, out of the loop (where a key almost always is): no wrap, no count.
        if let Some(w) = self.word_of(fp.home, fp) {
            return Some((fp.home, w));
        }
        (1..=reach).find_map(|d| {
            let i = self.at(fp.home, d);
            self.word_of(i, fp).map(|w| (i, w))
        })
    }

    /// Slot `i`'s word as loaded, if the slot holds `fp`'s key (a live bucket, not a claim).
    #[inline(always)]
    fn word_of(&self, i: usize, fp: &Fingerprint) -> Option<u128> {
        let s = &self.slots[i];
        let w = s.word.load(Ordering::Acquire);
        let (tag, state) = unpack(w);
        (tag == fp.tag
            && claim_of(state).is_none()
            && s.tag_hi.load(Ordering::Acquire) == fp.tag_hi
            && (s.side.load(Ordering::Acquire) >> 32) as u32 == fp.tag_lo)
            .then_some(w)
    }

    /// The codec's step on slot `i`'s bucket until its CAS succeeds or nothing is to be
    /// written. `Ok(None)` when the slot no longer holds the key (evicted, reused).
    #[inline(always)]
    fn step_at(
        &self,
        i: usize,
        fp: &Fingerprint,
        codec: &Codec,
        step: impl Fn(u128) -> (Decision, Option<u128>),
    ) -> Result<Option<Decision>, Error> {
        let word = &self.slots[i].word;
        let mut cur = word.load(Ordering::Acquire);
        loop {
            let (tag, state) = unpack(cur);
            if tag != fp.tag || claim_of(state).is_some() {
                return Ok(None);
            }
            if !codec.valid(state) {
                return Err(self.corrupt(BAD_STATE));
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

    /// The codec's request step; the default algorithm's inlined into the caller (its result
    /// then stays in registers instead of coming back through memory).
    #[inline(always)]
    fn request_step(codec: &Codec, r: Request) -> impl Fn(u128) -> (Decision, Option<u128>) + '_ {
        move |s| match codec {
            Codec::Continuous(a) => a.acquire(s, r.now, r.cost),
            _ => codec.decide_within(s, r.now, r.cost, r.within),
        }
    }

    /// Applies a request to `fp`'s bucket, creating it on the key's first request. `me`
    /// gives this process's token (asked only on the locked path).
    pub(crate) fn acquire(
        &self,
        cx: &Ctx,
        fp: &Fingerprint,
        r: Request,
        me: impl FnOnce() -> u64,
    ) -> Result<Decision, Error> {
        match self.acquire_common(cx, fp, r) {
            Some(d) => Ok(d),
            None => self.acquire_slow(cx, fp, r, me),
        }
    }

    /// [`acquire`](Self::acquire)'s common case, straight (no loop for the compiler to keep
    /// values across): the key's slot, a valid state, and one CAS that lands (or a rejection,
    /// which writes nothing). `None` for anything else (absent, moved, a lost CAS, a corrupt
    /// state), which [`acquire_slow`](Self::acquire_slow) then takes from the start: nothing
    /// here has written to the region.
    #[inline(always)]
    pub(crate) fn acquire_common(
        &self,
        cx: &Ctx,
        fp: &Fingerprint,
        r: Request,
    ) -> Option<Decision> {
        let (i, cur) = self.find_word(fp)?;
        let state = unpack(cur).1;
        // The default algorithm's step apart, with its own CAS: its decision then stays in
        // registers up to the caller's, where a step shared with the other codecs' (out of
        // line, through memory) merged every decision through memory, three copies of it.
        if let Codec::Continuous(a) = &cx.codec {
            return a
                .valid(state)
                .then(|| a.acquire(state, r.now, r.cost))
                .and_then(|step| self.land(i, cur, fp.tag, step));
        }
        let codec = &cx.codec;
        codec
            .valid(state)
            .then(|| codec.decide_within(state, r.now, r.cost, r.within))
            .and_then(|step| self.land(i, cur, fp.tag, step))
    }

    /// A step's decision, once its new state (if any) is in slot `i` in place of `cur`;
    /// `None` when the CAS failed.
    #[inline(always)]
    fn land(
        &self,
        i: usize,
        cur: u128,
        tag: u32,
        (d, new): (Decision, Option<u128>),
    ) -> Option<Decision> {
        let landed = match new {
            None => true,
            Some(new) => self.slots[i]
                .word
                .compare_exchange_weak(cur, pack(tag, new), Ordering::AcqRel, Ordering::Acquire)
                .is_ok(),
        };
        landed.then_some(d)
    }

    /// [`acquire`](Self::acquire) past its common case: the lock-free path's retries, then
    /// the locked path.
    #[cold]
    #[inline(never)]
    pub(crate) fn acquire_slow(
        &self,
        cx: &Ctx,
        fp: &Fingerprint,
        r: Request,
        me: impl FnOnce() -> u64,
    ) -> Result<Decision, Error> {
        let step = Self::request_step(&cx.codec, r);
        // The lock-free path: the key's slot, if it has one. Written out (not `step_at`) so
        // that the decision goes straight to the caller: no nested `Result<Option<_>>` moves.
        'moved: for _ in 0..4 {
            let Some((i, mut cur)) = self.find_word(fp) else {
                break;
            };
            let word = &self.slots[i].word;
            loop {
                let (tag, state) = unpack(cur);
                if tag != fp.tag || claim_of(state).is_some() {
                    continue 'moved;
                }
                if !cx.codec.valid(state) {
                    return Err(self.corrupt(BAD_STATE));
                }
                let (d, new) = step(state);
                let Some(new) = new else {
                    return Ok(d);
                };
                match word.compare_exchange_weak(
                    cur,
                    pack(fp.tag, new),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Ok(d),
                    Err(actual) => cur = actual,
                }
            }
        }
        // The locked path: a new key (or one that kept moving under us).
        let me = me();
        let lock = Lock::new(&self.locks[fp.home % self.locks.len()], self.name);
        let _held = lock.acquire(me)?;
        loop {
            match self.find_locked(fp) {
                Found::At(i) => {
                    if let Some(d) = self.step_at(i, fp, &cx.codec, &step)? {
                        return Ok(d);
                    }
                    // Evicted meanwhile (full): the key is absent again.
                }
                // Being removed: gone once that is done, then looked for again.
                Found::Vacating => {
                    self.wait_vacated(fp)?;
                }
                Found::Absent => {
                    if let Some(d) = self.insert(cx, fp, r, me, &step)? {
                        return Ok(d);
                    }
                }
            }
        }
    }

    /// `find`, by the holder of the key's insert lock, which also undoes a claim in the key's
    /// reach whose process died (only holders of this lock claim this key, so such a claim is
    /// this key's insert cut short; a claim of another key with the same 32-bit tag is undone
    /// only if its process is gone too), and finds the key's own live vacating mark (see
    /// [`wait_vacated`](Self::wait_vacated)). One load of each slot's word: a new key's insert
    /// scans its whole reach.
    fn find_locked(&self, fp: &Fingerprint) -> Found {
        for d in 0..=self.reach(fp.home) {
            let i = self.at(fp.home, d);
            let (tag, state) = unpack(self.slots[i].word.load(Ordering::Acquire));
            if tag == 0 {
                continue;
            }
            if claim_of(state).is_none() {
                if tag == fp.tag && self.rest_is(i, fp) {
                    return Found::At(i);
                }
                continue;
            }
            if state & VACATE != 0
                && tag == fp.tag
                && self.rest_is(i, fp)
                && super::lock::alive(state as u64)
            {
                return Found::Vacating;
            }
            self.undo_dead_claim(i);
        }
        Found::Absent
    }

    /// Whether slot `i` holds the rest of `fp` beyond its tag (the word's part, compared by
    /// the caller).
    fn rest_is(&self, i: usize, fp: &Fingerprint) -> bool {
        let s = &self.slots[i];
        s.tag_hi.load(Ordering::Acquire) == fp.tag_hi
            && (s.side.load(Ordering::Acquire) >> 32) as u32 == fp.tag_lo
    }

    /// Undoes slot `i`'s claim (or vacating mark) if it is one whose process is gone; whether
    /// it emptied the slot.
    fn undo_dead_claim(&self, i: usize) -> bool {
        let w = self.slots[i].word.load(Ordering::Acquire);
        let (tag, state) = unpack(w);
        let Some(owner) = claim_of(state).filter(|_| tag != 0) else {
            return false;
        };
        if super::lock::alive(owner) {
            return false;
        }
        if state & VACATE != 0 {
            // Its process died emptying the slot, maybe before giving the unit back: empty
            // it, and leave the count to the next recount (never given back twice).
            return self.slots[i]
                .word
                .compare_exchange(w, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        }
        // The dead inserter's unit of capacity goes back with its slot.
        self.empty_slot(i, w)
    }

    /// Slot `i`'s vacating mark, if its word is one: the tag of the bucket being emptied and
    /// the process token of whoever empties it.
    fn mark(&self, i: usize) -> Option<(u32, u64)> {
        let (tag, state) = unpack(self.slots[i].word.load(Ordering::Acquire));
        (state & (CLAIM | VACATE) == CLAIM | VACATE).then_some((tag, state as u64))
    }

    /// Whether slot `i` holds a vacating mark of a live process: a unit of the capacity on
    /// its way back.
    fn vacating(&self, i: usize) -> bool {
        self.mark(i)
            .is_some_and(|(tag, by)| tag != 0 && super::lock::alive(by))
    }

    /// Whether slot `i` holds a live process's vacating mark of `fp`'s own key: its bucket
    /// being removed or evicted, the unit of the capacity not back yet.
    fn vacating_of(&self, i: usize, fp: &Fingerprint) -> bool {
        // A mark keeps the bucket's tag, and the slot the rest of its fingerprint (compared
        // before the process is looked up, the dearer check).
        self.mark(i)
            .is_some_and(|(tag, by)| tag == fp.tag && self.rest_is(i, fp) && super::lock::alive(by))
    }

    /// Waits while `fp`'s key is being emptied out of its slot by a live process (a `remove`,
    /// an eviction); whether it waited. A key's removal takes effect when its unit of the
    /// capacity is back, not when its mark goes up: until then the key's own requests, peeks
    /// and removes wait here rather than take it for gone, so that nothing sees the room
    /// before the count does (a request of the key that took it for gone was refused as a
    /// new key at the bound, by a hint recorded before: the refusal of a key the region had
    /// room for). The process is a few instructions from done; one stopped there ends the
    /// wait after [`super::lock::WAIT`] with [`StoreErrorKind::Timeout`], and one that died
    /// there is not waited for (its mark is emptied by whoever meets it).
    fn wait_vacated(&self, fp: &Fingerprint) -> Result<bool, Error> {
        let mut backoff = super::lock::Backoff::new();
        let mut waited = false;
        'look: loop {
            for d in 0..=self.reach(fp.home) {
                if self.vacating_of(self.at(fp.home, d), fp) {
                    waited = true;
                    backoff.pause(|spent| {
                        Error::store(
                            StoreErrorKind::Timeout,
                            self.name,
                            format!(
                                "a request waited {spent:?} for another process to finish \
                                 removing its key's bucket (it is alive but not running: \
                                 stopped or traced?)"
                            ),
                        )
                    })?;
                    continue 'look;
                }
            }
            return Ok(waited);
        }
    }

    /// Creates `fp`'s bucket (absent; the key's insert lock held) with the request applied.
    /// `Ok(None)`: a claim lost a race with another key's inserter; look again.
    fn insert(
        &self,
        cx: &Ctx,
        fp: &Fingerprint,
        r: Request,
        me: u64,
        step: &impl Fn(u128) -> (Decision, Option<u128>),
    ) -> Result<Option<Decision>, Error> {
        self.reserve(cx, fp.home, r.now)?;
        match self.claim(cx, fp, r, me, step) {
            Claimed::Done(d) => Ok(Some(d)),
            Claimed::Lost => {
                self.give_back();
                Ok(None)
            }
            Claimed::Refused(e) => {
                // The count is left as it is: a scan of the slots is no count to raise it to
                // (a slot it saw taken may have been given back since, and a vacating mark's
                // unit may be back already: a count raised over them refused every later new
                // key until a sweep). A count that a writer of garbage left too low is the
                // next sweep's recount's to repair.
                self.give_back();
                Err(e)
            }
            // Whoever undid the claim gave its unit back.
            Claimed::Undone => Ok(None),
        }
    }

    /// Takes one unit of the capacity for a new key, making room when the region is full:
    /// full buckets are evicted (a complete scan that finds none records, in the hint, the
    /// earliest instant one can become full, so that new keys are refused in O(1) until then),
    /// then [`OnFull`] decides.
    ///
    /// Room being made by someone else is room: a slot emptied by another process (an
    /// eviction, a removal, a dead claim undone) gives its unit back a moment after the slot
    /// is gone, so a new key can find the count full and nothing left to evict. It is not
    /// refused then: a scan that meets a vacating mark (see [`empty_slot`](Self::empty_slot))
    /// records no hint and waits for the unit, and the count is read again before a refusal
    /// (the mark may be gone, the unit with it, by the time the scan passed). The wait is on a
    /// live process a few instructions from done; one that dies there has its mark emptied by
    /// the next scan, and the key is then refused (its unit stays counted until a recount),
    /// and one stopped there ends the wait after [`super::lock::WAIT`] with
    /// [`StoreErrorKind::Timeout`], as a new key waiting for an insert lock does. (Rounds that
    /// only found the count with room, each unit taken by another new key first, end in the
    /// refusal after as long.)
    fn reserve(&self, cx: &Ctx, home: usize, now: u64) -> Result<(), Error> {
        let mut backoff = super::lock::Backoff::new();
        loop {
            if self.take_unit() {
                return Ok(());
            }
            let mut vacating = false;
            let bound = self.hint_bound(cx, now);
            if let Some(scan) = self.hint.scan_below(now, bound) {
                let swept = self.sweep(cx, now)?;
                if swept.evicted > 0 {
                    continue;
                }
                vacating = swept.vacating;
                if !vacating {
                    // A scan that kept no bucket (`u64::MAX`: none is full before a new one is
                    // made, which lowers the hint) records the bound, which is believed.
                    self.hint.found_nothing(scan, swept.soonest.min(bound));
                }
            }
            if cx.on_full == OnFull::EvictFullest
                && self.evict_fullest(cx, home, now, &mut vacating)?
            {
                continue;
            }
            if vacating || self.live.load(Ordering::Acquire) < self.capacity {
                // Given up on: a mark that stayed (its process stopped), or units that other
                // new keys kept taking first (then the region is as full as it gets).
                backoff.pause(|waited| {
                    if !vacating {
                        return self.full();
                    }
                    Error::store(
                        StoreErrorKind::Timeout,
                        self.name,
                        format!(
                            "a new key waited {waited:?} for another process to give back the \
                             unit of a key it dropped (it is alive but not running: stopped or \
                             traced?)"
                        ),
                    )
                })?;
                continue;
            }
            return Err(self.full());
        }
    }

    /// Claims, for `fp` (a unit of capacity reserved), the first slot from its home on that is
    /// empty or holds a dead claim, and creates the bucket with the request applied. Full
    /// buckets on the way stay: they are evicted only at the bound and by sweeps, as in the
    /// in-process store, so that eviction (which moves the watermark) happens at moments the
    /// caller chooses, not wherever a probe happens to pass (the region's random secret decides
    /// that: it made a region's decisions on a backward clock differ from run to run).
    ///
    /// A scan that found no slot but met a live process's vacating mark waits and scans again,
    /// as [`reserve`](Self::reserve) does: the mark's slot is a few instructions from empty,
    /// and its unit may be the very one this key holds (two removals in flight in a region of
    /// one key and two slots, their units back and their slots not yet emptied, left a new key
    /// no slot, and it was refused though the region was empty).
    fn claim(
        &self,
        cx: &Ctx,
        fp: &Fingerprint,
        r: Request,
        me: u64,
        step: &impl Fn(u128) -> (Decision, Option<u128>),
    ) -> Claimed {
        // The bucket this claim creates, before any write: the watermark is checked here.
        let at = match self.start_at(cx, r.now) {
            Ok(at) => at,
            Err(e) => return Claimed::Refused(e),
        };
        let fresh = cx.codec.fresh(at);
        let (decision, new) = step(fresh);
        let state = new.unwrap_or(fresh);
        if state >= CLAIM {
            // No codec makes one from a reading up to its horizon; written, it would read as a
            // claim or a vacating mark (emptied, its unit never given back).
            return Claimed::Refused(self.corrupt(BAD_STATE));
        }
        let n = self.slots.len();
        let mut backoff = super::lock::Backoff::new();
        let (d, empty) = loop {
            let mut vacating = false;
            let found = (0..n).find_map(|d| {
                let i = self.at(fp.home, d);
                let w = self.vacate(i);
                // One mark seen is enough to look again: no need to ask about the others.
                vacating = vacating || (w.is_none() && self.vacating(i));
                w.map(|w| (d, w))
            });
            match found {
                Some(found) => break found,
                None if vacating => {
                    if let Err(e) = backoff.pause(|waited| {
                        Error::store(
                            StoreErrorKind::Timeout,
                            self.name,
                            format!(
                                "a new key waited {waited:?} for another process to empty a \
                                 slot it is giving back (it is alive but not running: stopped \
                                 or traced?)"
                            ),
                        )
                    }) {
                        return Claimed::Refused(e);
                    }
                }
                None => return Claimed::Refused(self.full()),
            }
        };
        let i = self.at(fp.home, d);
        // Reach first, so that no reader that sees the key's slot misses it for its reach.
        self.raise_reach(fp.home, d);
        let mark = pack(fp.tag, CLAIM | u128::from(me));
        let word = &self.slots[i].word;
        if word
            .compare_exchange(empty, mark, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Claimed::Lost; // another key's inserter took it first
        }
        // The rest of the fingerprint, published by the CAS below (release).
        self.slots[i].tag_hi.store(fp.tag_hi, Ordering::Relaxed);
        self.set_tag_lo(i, fp.tag_lo);
        // The hint is lowered before the bucket is made as well as after (the protocol's step,
        // which a scan meanwhile needs): a process killed between the two left a hint that
        // refused new keys with `RejectNewKeys` until its instant, though this bucket could be
        // evicted before it. A CAS that then fails has cost a scan at most.
        let full_at = r.now.saturating_add(decision.reset_after_nanos());
        self.hint.lowered(full_at);
        if word
            .compare_exchange(
                mark,
                pack(fp.tag, state),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // Undone by someone who took this process for dead (it cannot be, but the slot is
            // theirs now, and they gave its unit back): start again.
            return Claimed::Undone;
        }
        self.hint.lowered(full_at);
        Claimed::Done(decision)
    }

    /// Slot `i`'s word if the slot is empty, after undoing its claim if that process is gone.
    ///
    /// Empty is tag 0, whatever the state bits: no key's tag is 0, and every reader skips such
    /// a slot. Bits there were written by someone else (the region's bytes are untrusted), and
    /// the claim replaces them as loaded: a claim that expected zeroes failed on them, and the
    /// insert was retried for ever.
    fn vacate(&self, i: usize) -> Option<u128> {
        let w = self.slots[i].word.load(Ordering::Acquire);
        let (tag, state) = unpack(w);
        if tag == 0 {
            return Some(w);
        }
        (claim_of(state).is_some() && self.undo_dead_claim(i)).then_some(0)
    }

    /// Drops slot `i`'s bucket if its word is still `w` (found full at `now`, or chosen by
    /// `EvictFullest`).
    fn evict(&self, i: usize, w: u128, now: u64) -> bool {
        // Raised before the bucket goes, so that whoever re-creates the key reads it.
        self.hint.raise_watermark(now);
        self.empty_slot(i, w)
    }

    /// Counts the live keys into `live` (run by every sweep, and by `clear`): repairs a count
    /// left too high by a process killed between taking a unit and claiming its slot, or
    /// between emptying a slot and giving its unit back.
    ///
    /// It holds every insert lock meanwhile, and so never stores a count below the units in
    /// use: a new key takes its unit and claims its slot under its home's lock, so no unit is
    /// taken and not yet visible in a slot while the slots are counted; and a slot being
    /// emptied is counted while its vacating mark stands, its unit coming back after the store
    /// (exact) or before it (one too many: refusing, never over-admitting, until the next
    /// recount). A recount without the locks stored the slots it saw over a new key's unit
    /// taken meanwhile: a count too low (a key past the capacity) or, over a slot emptied and
    /// given back meanwhile, too high (a new key refused beside a sweep). New keys wait for the
    /// scan of the slots; decisions on existing keys never do. A lock held by a stopped process
    /// ends the recount with [`StoreErrorKind::Timeout`], as it would a new key's insert.
    pub(crate) fn recount(&self) -> Result<usize, Error> {
        let me = super::lock::token();
        let _held = self
            .locks
            .iter()
            .map(|w| Lock::new(w, self.name).acquire(me))
            .collect::<Result<Vec<_>, _>>()?;
        let n = self.len();
        self.live.store(n as u64, Ordering::Release);
        Ok(n)
    }

    /// Evicts every bucket full at `now`, and undoes the claims of dead processes; how many
    /// buckets went, and the earliest instant a kept bucket becomes full (`u64::MAX` if none).
    pub(crate) fn evict_full(&self, cx: &Ctx, now: u64) -> Result<(usize, u64), Error> {
        self.sweep(cx, now).map(|s| (s.evicted, s.soonest))
    }

    /// [`evict_full`](Self::evict_full), telling also whether it met a live vacating mark.
    fn sweep(&self, cx: &Ctx, now: u64) -> Result<Swept, Error> {
        let (mut evicted, mut soonest, mut vacating) = (0, u64::MAX, false);
        for i in 0..self.slots.len() {
            let mut w = self.slots[i].word.load(Ordering::Acquire);
            loop {
                let (tag, state) = unpack(w);
                if tag == 0 {
                    break;
                }
                if claim_of(state).is_some() {
                    if self.undo_dead_claim(i) {
                        evicted += 1;
                    } else {
                        vacating |= self.vacating(i);
                    }
                    break;
                }
                if !cx.codec.valid(state) {
                    return Err(self.corrupt(BAD_STATE));
                }
                if !cx.codec.is_full(state, now) {
                    let full_in = cx.codec.decide(state, now, 0).0.reset_after_nanos();
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
        Ok(Swept {
            evicted,
            soonest,
            vacating,
        })
    }

    /// [`OnFull::EvictFullest`]: evicts the bucket closest to full (the least `reset_after`)
    /// among up to 32 live slots from `home` on. Lossy, as in the in-process store. Sets
    /// `vacating` when it meets a live vacating mark.
    fn evict_fullest(
        &self,
        cx: &Ctx,
        home: usize,
        now: u64,
        vacating: &mut bool,
    ) -> Result<bool, Error> {
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
                if claim_of(state).is_some() {
                    *vacating |= self.vacating(i);
                    continue;
                }
                if !cx.codec.valid(state) {
                    return Err(self.corrupt(BAD_STATE));
                }
                let reset = cx.codec.decide(state, now, 0).0.reset_after_nanos();
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
        loop {
            for _ in 0..4 {
                let Some(i) = self.find(fp) else { break };
                let (tag, state) = unpack(self.slots[i].word.load(Ordering::Acquire));
                if tag == fp.tag && claim_of(state).is_none() {
                    if !cx.codec.valid(state) {
                        return Err(self.corrupt(BAD_STATE));
                    }
                    return Ok(cx.codec.decide(state, now, cost).0);
                }
            }
            // Absent, unless it is being removed: then it is absent once that is done.
            if !self.wait_vacated(fp)? {
                break;
            }
        }
        let at = self.start_at(cx, now)?;
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
                if tag != fp.tag || claim_of(state).is_some() {
                    break; // evicted or reused: look again
                }
                if !cx.codec.valid(state) {
                    return Err(self.corrupt(BAD_STATE));
                }
                let Some(new) = cx.codec.refund(state, now, cost) else {
                    return Ok(());
                };
                // Before the refund as well as after it, as a new bucket's (see `claim`).
                self.hint.lowered(now);
                match word.compare_exchange_weak(
                    cur,
                    pack(fp.tag, new),
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

    /// Forgets `fp`'s key; whether it was present (a removal by another process in progress
    /// is waited for: the key was present, and that one removed it).
    pub(crate) fn remove(&self, fp: &Fingerprint) -> Result<bool, Error> {
        loop {
            while let Some(i) = self.find(fp) {
                let word = &self.slots[i].word;
                let cur = word.load(Ordering::Acquire);
                let (tag, state) = unpack(cur);
                if tag != fp.tag || claim_of(state).is_some() {
                    continue;
                }
                if self.empty_slot(i, cur) {
                    return Ok(true);
                }
            }
            if !self.wait_vacated(fp)? {
                return Ok(false);
            }
        }
    }

    /// Forgets every key (claims in progress stay: their inserters finish them, and a dead
    /// process's are undone; reaches stay: they only bound probes), then recounts.
    pub(crate) fn clear(&self) -> Result<(), Error> {
        for (i, slot) in self.slots.iter().enumerate() {
            if self.undo_dead_claim(i) {
                continue;
            }
            let w = slot.word.load(Ordering::Acquire);
            let (tag, state) = unpack(w);
            if tag == 0 {
                // Empty, or stray bits another writer left (no unit was ever taken for them):
                // zeroed, nothing given back.
                if w != 0 {
                    let _ = slot
                        .word
                        .compare_exchange(w, 0, Ordering::AcqRel, Ordering::Acquire);
                }
            } else if claim_of(state).is_none() {
                self.empty_slot(i, w);
            }
        }
        self.recount().map(drop)
    }

    /// Checks the table's invariants (a scan; exact only while nothing changes it): every live
    /// slot's key is findable (within its home's reach), no key is in two slots, every state
    /// is valid, no claim is left by a dead process, and the live count matches.
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
            if let Some(owner) = claim_of(state) {
                a.stale_claims += usize::from(!super::lock::alive(owner));
                continue;
            }
            let hi = s.tag_hi.load(Ordering::Acquire);
            let lo = (s.side.load(Ordering::Acquire) >> 32) as u32;
            if !seen.insert((tag, hi, lo)) {
                a.duplicates += 1;
            }
            if !cx.codec.valid(state) {
                a.corrupt += 1;
            }
            let home = ((u128::from(hi) * self.slots.len() as u128) >> 64) as usize;
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

    /// Live keys (a scan: not an atomic snapshot; claims in progress count).
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

    /// `exact_value` undone, step by step: it is one to one.
    fn exact_code(v: u128, key: [u64; 3]) -> u128 {
        const M: u64 = u64::MAX >> 1;
        let f = |half: u64, k: u64| {
            let p = u128::from(half ^ k) * 0x9e37_79b9_7f4a_7c15;
            ((p as u64) ^ ((p >> 64) as u64)) & M
        };
        assert_eq!(v >> 32 & 1, 1, "a short key's bit");
        assert_eq!(v >> 64 & 1, 0, "a spare bit");
        let (mut b, mut a) = (
            (v >> 65) as u64,
            ((v >> 33) as u64 & 0x7fff_ffff) << 32 | v as u32 as u64,
        );
        a ^= f(b, key[2]);
        b ^= f(a, key[1]);
        a ^= f(b, key[0]);
        (u128::from(a) << 63) | u128::from(b)
    }

    #[test]
    fn short_keys_fingerprints_are_one_to_one_and_apart_from_hashed_ones() {
        let mut r = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            r
        };
        for _ in 0..100_000 {
            let key = [next(), next(), next()];
            let code = ((u128::from(next()) << 64) | u128::from(next())) >> 3;
            let v = exact_value(code, key);
            assert_eq!(exact_code(v, key), code);
            assert_ne!((v >> 32) as u32, 0, "a tag is never 0");
            let h = hashed_value((u128::from(next()) << 64) | u128::from(next()));
            assert_eq!(h >> 32 & 1, 0, "a hashed key's bit");
            assert_ne!((h >> 32) as u32, 0);
        }
        assert_ne!((hashed_value(0) >> 32) as u32, 0);
    }
    use crate::store::keyed::Ctx;
    use crate::{OnFull, Quota};

    const S: u64 = 1_000_000_000;

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

    /// This process's token (a live one).
    fn me() -> u64 {
        super::super::lock::token()
    }

    #[test]
    fn a_key_gets_one_bucket_and_its_decisions() {
        let o = Owned::new(8, 10, 4);
        let (t, c) = (o.table(), cx("2/s", OnFull::RejectNewKeys));
        let k = fp(7, 10);
        assert!(t.acquire(&c, &k, req(0, 1), me).unwrap().allowed());
        assert!(t.acquire(&c, &k, req(0, 1), me).unwrap().allowed());
        let d = t.acquire(&c, &k, req(0, 1), me).unwrap();
        assert!(!d.allowed());
        assert_eq!(d.retry_after_nanos(), 500_000_000);
        assert_eq!(t.len(), 1);
        assert_eq!(t.peek(&c, &k, 0).unwrap().remaining(), 0);
        t.refund(&c, &k, 0, 1).unwrap();
        assert_eq!(t.peek(&c, &k, 0).unwrap().remaining(), 1);
        assert!(t.remove(&k).unwrap());
        assert!(!t.remove(&k).unwrap());
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
            assert!(t.acquire(&c, k, req(0, 1), me).unwrap().allowed());
        }
        for k in &keys {
            assert!(!t.acquire(&c, k, req(0, 1), me).unwrap().allowed(), "{k:?}");
        }
        // At the bound (14 keys), nothing is full: a 15th key is refused.
        let extra = fp(999, n);
        assert!(matches!(
            t.acquire(&c, &extra, req(0, 1), me),
            Err(Error::KeyStoreFull { max_keys: 14 })
        ));
        // A second later every bucket is full again: the new key evicts them and fits.
        assert!(t
            .acquire(&c, &extra, req(1_000_000_000, 1), me)
            .unwrap()
            .allowed());
        assert!(t.len() <= 14);
    }

    #[test]
    fn evict_fullest_makes_room_at_the_bound() {
        let o = Owned::new(2, 3, 2);
        let (t, c) = (o.table(), cx("10/s", OnFull::EvictFullest));
        assert!(t.acquire(&c, &fp(1, 3), req(0, 10), me).unwrap().allowed());
        assert!(t.acquire(&c, &fp(2, 3), req(0, 1), me).unwrap().allowed());
        // Full: the bucket with the least reset_after (key 2) goes.
        assert!(t.acquire(&c, &fp(3, 3), req(0, 1), me).unwrap().allowed());
        assert_eq!(t.peek(&c, &fp(1, 3), 0).unwrap().remaining(), 0);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_claim_whose_process_died_is_undone_and_the_key_inserted() {
        let o = Owned::new(4, 5, 2);
        let (t, c) = (o.table(), cx("5/s", OnFull::RejectNewKeys));
        let k = fp(42, 5);
        // An inserter claimed the key's home and died (pid 0: no process) before creating the
        // bucket; its unit of capacity is still counted.
        let dead = 5;
        o.slots[k.home]
            .word
            .store(pack(k.tag, CLAIM | dead), Ordering::Release);
        o.slots[k.home].tag_hi.store(k.tag_hi, Ordering::Release);
        o.live.store(1, Ordering::Release);
        assert!(
            t.find(&k).is_none(),
            "the lock-free path never matches a claim"
        );
        assert_eq!(t.audit(&c).stale_claims, 1);
        let d = t.acquire(&c, &k, req(0, 1), me).unwrap();
        assert!(d.allowed());
        assert_eq!(d.remaining(), 4, "the dead claim's request never happened");
        assert_eq!(t.len(), 1, "one bucket, not two");
        assert_eq!(o.live.load(Ordering::Acquire), 1, "its unit given back");
        let a = t.audit(&c);
        assert_eq!((a.stale_claims, a.duplicates, a.unreachable), (0, 0, 0));
    }

    #[test]
    fn a_live_claim_is_left_alone() {
        let o = Owned::new(4, 5, 2);
        let (t, c) = (o.table(), cx("5/s", OnFull::RejectNewKeys));
        let (k, other) = (fp(42, 5), fp(43, 5));
        // Another key's insert in progress, by a live process (this one), in k's home.
        o.slots[k.home]
            .word
            .store(pack(other.tag, CLAIM | lock_token()), Ordering::Release);
        o.live.store(1, Ordering::Release);
        assert!(t.acquire(&c, &k, req(0, 1), me).unwrap().allowed());
        assert_ne!(t.find(&k), Some(k.home), "k went past the claimed slot");
        assert_eq!(
            unpack(o.slots[k.home].word.load(Ordering::Acquire)).1 & CLAIM,
            CLAIM
        );
        assert_eq!(
            t.evict_full(&c, u64::MAX / 2).unwrap().0,
            1,
            "only k's bucket"
        );
        assert_eq!(t.audit(&c).stale_claims, 0);
    }

    /// A process killed between dropping a bucket and giving its unit back leaves its vacating
    /// mark: whoever meets it empties the slot without giving the unit back a second time, so
    /// the count stays high (a new key is refused, never admitted past the bound) until a
    /// sweep's recount repairs it.
    #[test]
    fn a_vacating_mark_whose_process_died_is_emptied_and_counted_once() {
        let o = Owned::new(1, 2, 2);
        let (t, c) = (o.table(), cx("1/s", OnFull::RejectNewKeys));
        let (gone, new) = (fp(1, 2), fp(2, 2));
        let dead = 5; // pid 0: no process
        o.slots[gone.home]
            .word
            .store(pack(gone.tag, CLAIM | VACATE | dead), Ordering::Release);
        o.live.store(1, Ordering::Release);
        assert_eq!(t.audit(&c).stale_claims, 1);
        assert!(matches!(
            t.acquire(&c, &new, req(0, 1), me),
            Err(Error::KeyStoreFull { max_keys: 1 })
        ));
        assert_eq!(t.len(), 0, "the mark is emptied");
        assert_eq!(
            o.live.load(Ordering::Acquire),
            1,
            "its unit not given back twice"
        );
        assert_eq!(t.evict_full(&c, 0).unwrap().0, 0);
        assert_eq!(t.recount().unwrap(), 0);
        assert!(t.acquire(&c, &new, req(0, 1), me).unwrap().allowed());
        assert_eq!((t.len(), o.live.load(Ordering::Acquire)), (1, 1));
    }

    /// A process alive but stopped between dropping a bucket and giving its unit back keeps a
    /// new key at the bound waiting, for a bounded time: then a timeout, as for an insert lock.
    #[test]
    #[cfg_attr(miri, ignore = "waits two seconds")]
    fn a_new_key_waits_a_bounded_time_for_a_unit_on_its_way_back() {
        let o = Owned::new(1, 2, 2);
        let (t, c) = (o.table(), cx("1/s", OnFull::RejectNewKeys));
        let (gone, new) = (fp(1, 2), fp(2, 2));
        o.slots[gone.home].word.store(
            pack(gone.tag, CLAIM | VACATE | lock_token()),
            Ordering::Release,
        );
        o.live.store(1, Ordering::Release);
        let e = t.acquire(&c, &new, req(0, 1), me).unwrap_err();
        assert_eq!(e.code(), "store_timeout", "{e}");
        assert_eq!(t.len(), 1, "a live process's mark is left alone");
    }

    /// Two vacating marks in flight (their units given back, the slots not zeroed yet) fill
    /// every slot of a region for one key: a new key's claim that meets them waits for a slot
    /// rather than refusing the key, and the live count is never raised over the marks (it
    /// was raised to 2, and every later new key refused until a sweep).
    #[test]
    #[cfg_attr(miri, ignore = "sleeps")]
    fn a_claim_waits_for_vacating_marks_instead_of_refusing() {
        let o = Owned::new(1, 2, 2);
        let (t, c) = (o.table(), cx("1/s", OnFull::RejectNewKeys));
        let (a, b, new) = (fp(1, 2), fp(2, 2), fp(3, 2));
        let marks = [
            pack(a.tag, CLAIM | VACATE | lock_token()),
            pack(b.tag, CLAIM | VACATE | lock_token()),
        ];
        for (slot, mark) in o.slots.iter().zip(marks) {
            slot.word.store(mark, Ordering::Release);
        }
        o.live.store(0, Ordering::Release); // both units given back already
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                for (slot, mark) in o.slots.iter().zip(marks) {
                    slot.word
                        .compare_exchange(mark, 0, Ordering::AcqRel, Ordering::Acquire)
                        .unwrap();
                }
            });
            let d = t.acquire(&c, &new, req(0, 1), me);
            assert!(d.as_ref().is_ok_and(Decision::allowed), "{d:?}");
        });
        assert_eq!((t.len(), o.live.load(Ordering::Acquire)), (1, 1));
        // And the next new key is refused by the bound (one key), not by a count left high.
        assert!(t.remove(&new).unwrap());
        assert!(t.acquire(&c, &a, req(0, 1), me).unwrap().allowed());
        assert_eq!((t.len(), o.live.load(Ordering::Acquire)), (1, 1));
    }

    /// A region whose watermark (where re-created keys start) is past the last reading its
    /// quota keeps was written by someone else: a typed `Corrupt`, with nothing written and no
    /// unit of the capacity taken. With the 95-bit codec of `4294967291/s` and a watermark of
    /// `u64::MAX - 1`, a new bucket's state spilled into the claim and vacating bits: the
    /// bucket read as a dead process's vacating mark, was emptied without its unit given back,
    /// and every request leaked a unit until the empty region refused every new key.
    #[test]
    fn a_watermark_past_the_horizon_is_a_typed_error() {
        let q: Quota = "4294967291/s".parse().unwrap();
        let codec = Codec::narrow(&q, 0, STATE).unwrap().unwrap();
        let c = Ctx::new(&q, codec, 0, 4, OnFull::RejectNewKeys);
        let o = Owned::new(4, 5, 2);
        let t = o.table();
        assert!(t.acquire(&c, &fp(9, 5), req(0, 1), me).unwrap().allowed());
        o.hint.raise_watermark(u64::MAX - 1);
        for k in 0..8 {
            let e = t.acquire(&c, &fp(k, 5), req(0, 1), me).unwrap_err();
            assert_eq!(e.code(), "store_corrupt", "{e}");
            assert_eq!(
                t.peek(&c, &fp(k, 5), 0).unwrap_err().code(),
                "store_corrupt"
            );
        }
        assert_eq!((t.len(), o.live.load(Ordering::Acquire)), (1, 1));
        // The existing key's decisions do not read the watermark.
        assert!(t.acquire(&c, &fp(9, 5), req(0, 1), me).unwrap().allowed());
        let a = t.audit(&c);
        assert_eq!((a.live, a.stale_claims, a.corrupt), (1, 0, 0), "{a:?}");
        // At the horizon itself it is a reading like any other.
        let o = Owned::new(4, 5, 2);
        let t = o.table();
        let h = c.codec.horizon();
        o.hint.raise_watermark(h);
        assert!(t.acquire(&c, &fp(1, 5), req(h, 1), me).unwrap().allowed());
        assert_eq!(t.audit(&c).stale_claims, 0);
    }

    /// A hint (nothing full before it) that no bucket can have given, far past the time a
    /// bucket takes to be full, is someone else's bytes: a new key at the bound scans anyway
    /// and evicts the full bucket, rather than being refused until that instant.
    #[test]
    fn a_hint_no_bucket_could_give_is_not_believed() {
        let o = Owned::new(1, 2, 2);
        let (t, c) = (o.table(), cx("1/s", OnFull::RejectNewKeys));
        assert!(t.acquire(&c, &fp(1, 2), req(0, 1), me).unwrap().allowed()); // full at 1 s
        let scan = o.hint.scan(0).unwrap();
        o.hint.found_nothing(scan, u64::MAX / 2);
        assert!(t.acquire(&c, &fp(2, 2), req(S, 1), me).unwrap().allowed());
        assert_eq!((t.len(), o.live.load(Ordering::Acquire)), (1, 1));
        // A hint a bucket gave is believed: the new key is refused in O(1) until then.
        assert!(matches!(
            t.acquire(&c, &fp(3, 2), req(S, 1), me),
            Err(Error::KeyStoreFull { max_keys: 1 })
        ));
        assert!(o.hint.scan(S).is_none());
        assert!(t
            .acquire(&c, &fp(3, 2), req(2 * S, 1), me)
            .unwrap()
            .allowed());
    }

    /// The bound on a believed hint is one: every bucket a run of requests and refunds leaves
    /// becomes full by it, for each algorithm (else a true hint would be ignored: a scan for
    /// nothing).
    #[test]
    fn every_bucket_is_full_by_the_hint_bound() {
        let o = Owned::new(1, 2, 2);
        let t = o.table();
        let mut r = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: u64| {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            r % n
        };
        for rate in [
            "10/s",
            "1/s; burst=4; initial=1",
            "1/s; burst=4; initial=1; refill=interval",
            "1/s; burst=10; algorithm=gcra",
            "7/s; algorithm=fixed_window",
            "7/s; algorithm=sliding_window",
            "7/s; algorithm=leaky_queue",
        ] {
            let c = cx(rate, OnFull::RejectNewKeys);
            let mut state = c.codec.fresh(0);
            let mut now = 0;
            for _ in 0..2000 {
                now += next(S / 3);
                if next(4) == 0 {
                    state = c.codec.refund(state, now, 1).unwrap_or(state);
                } else {
                    state = c.codec.decide(state, now, 1 + next(3)).1.unwrap_or(state);
                }
                let full_at = now + c.codec.decide(state, now, 0).0.reset_after_nanos();
                assert!(full_at <= t.hint_bound(&c, now), "{rate} at {now}");
            }
        }
    }

    fn lock_token() -> u128 {
        u128::from(super::super::lock::token())
    }

    #[test]
    fn a_corrupt_state_is_a_typed_error() {
        let o = Owned::new(4, 5, 2);
        let (t, c) = (
            o.table(),
            cx("5/s; algorithm=fixed_window", OnFull::RejectNewKeys),
        );
        let k = fp(9, 5);
        assert!(t.acquire(&c, &k, req(0, 1), me).unwrap().allowed());
        let i = t.find(&k).unwrap();
        let (tag, _) = unpack(o.slots[i].word.load(Ordering::Acquire));
        // Every bit of the state set but the claim mark: no fixed window counts that high.
        let bad = STATE_MASK & !CLAIM;
        assert!(!c.codec.valid(bad));
        o.slots[i].word.store(pack(tag, bad), Ordering::Release);
        let e = t.acquire(&c, &k, req(0, 1), me).unwrap_err();
        assert_eq!(e.code(), "store_corrupt", "{e}");
        assert_eq!(t.peek(&c, &k, 0).unwrap_err().code(), "store_corrupt");
        assert_eq!(t.audit(&c).corrupt, 1);
    }

    #[test]
    fn garbage_in_an_empty_slot_is_overwritten_by_a_new_key() {
        // An empty slot (tag 0) whose state bits another writer set: the first slot from the
        // key's home on. It is empty (no key has tag 0), and a claim takes it as it is; a
        // claim that expected all zeroes failed there and was retried for ever.
        let o = Owned::new(4, 5, 2);
        let (t, c) = (o.table(), cx("5/s", OnFull::RejectNewKeys));
        let k = fp(9, 5);
        o.slots[k.home].word.store(38, Ordering::Release);
        assert!(t.acquire(&c, &k, req(0, 1), me).unwrap().allowed());
        assert_eq!(t.find(&k), Some(k.home));
        let a = t.audit(&c);
        assert_eq!((a.live, a.corrupt), (1, 0), "{a:?}");
    }

    #[test]
    fn a_sweep_evicts_full_buckets_and_recounts() {
        let o = Owned::new(8, 10, 2);
        let (t, c) = (o.table(), cx("1/s", OnFull::RejectNewKeys));
        for k in 0..5 {
            t.acquire(&c, &fp(k, 10), req(0, 1), me).unwrap();
        }
        o.live.store(9, Ordering::Release); // as a killed process might leave it
        assert_eq!(t.evict_full(&c, 500_000_000).unwrap().0, 0);
        assert_eq!(t.evict_full(&c, 1_000_000_000).unwrap().0, 5);
        assert_eq!(t.recount().unwrap(), 0);
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

    /// A live process's token (pid 1; under loom every process with a pid is alive).
    fn me() -> u64 {
        1 << 32
    }

    /// Whether a request at the bound was admitted (refused as the bound says, or rejected:
    /// not).
    fn admitted(r: &Result<Decision, Error>) -> bool {
        match r {
            Ok(d) => d.allowed(),
            Err(e) => {
                assert_eq!(e.code(), "key_store_full");
                false
            }
        }
    }

    /// A request of cost 1 at 0 for `k` on this thread and one on another, racing: their
    /// decisions.
    fn two_requests(o: &Arc<Owned>, c: &Arc<Ctx>, k: Fingerprint) -> (Decision, Decision) {
        let other = {
            let (o, c) = (o.clone(), c.clone());
            thread::spawn(move || o.table().acquire(&c, &k, req(0, 1), me).unwrap())
        };
        let mine = o.table().acquire(c, &k, req(0, 1), me).unwrap();
        (mine, other.join().unwrap())
    }

    /// Two first requests of one key, racing: one bucket, both requests in it.
    #[test]
    fn two_inserts_of_one_key_make_one_bucket() {
        loom::model(|| {
            let o = Arc::new(Owned::new(2, 3, 1));
            let c = Arc::new(cx("2/s"));
            let k = fp(7, 1, 3);
            let (mine, theirs) = two_requests(&o, &c, k);
            assert!(mine.allowed() && theirs.allowed());
            let t = o.table();
            assert_eq!(t.len(), 1);
            assert_eq!(t.peek(&c, &k, 0).unwrap().remaining(), 0);
            assert_eq!(o.live.load(Ordering::Acquire), 1);
        });
    }

    /// Two consumes of an existing key race on the common case's one CAS: the loser starts
    /// over on the general path, and both land, once each.
    #[test]
    fn two_consumes_of_one_key_land_once_each() {
        loom::model(|| {
            let o = Arc::new(Owned::new(2, 3, 1));
            let c = Arc::new(cx("3/s"));
            let k = fp(5, 2, 3);
            o.table().acquire(&c, &k, req(0, 1), me).unwrap();
            let (mine, theirs) = two_requests(&o, &c, k);
            assert!(mine.allowed() && theirs.allowed());
            let mut left = [mine.remaining(), theirs.remaining()];
            left.sort_unstable();
            assert_eq!(left, [0, 1], "each saw the other's consume or none");
            let t = o.table();
            assert_eq!(t.peek(&c, &k, 0).unwrap().remaining(), 0);
            assert_eq!(t.len(), 1);
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
            o.table().acquire(&c, &k, req(0, 1), me).unwrap(); // empty at 0, full at 1 s
            let evictor = {
                let (o, c) = (o.clone(), c.clone());
                thread::spawn(move || o.table().evict_full(&c, S).unwrap().0)
            };
            let d = o.table().acquire(&c, &k, req(S, 1), me).unwrap();
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
                thread::spawn(move || o.table().acquire(&c, &b, req(0, 2), me).unwrap())
            };
            assert!(o.table().acquire(&c, &a, req(0, 1), me).unwrap().allowed());
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
            o.table().acquire(&c, &old, req(0, 1), me).unwrap(); // full again at 1 s
            let consumer = {
                let (o, c) = (o.clone(), c.clone());
                thread::spawn(move || o.table().acquire(&c, &old, req(S, 1), me))
            };
            let inserted = o.table().acquire(&c, &new, req(S, 1), me);
            let consumed = consumer.join().unwrap();
            assert!(
                admitted(&inserted) ^ admitted(&consumed),
                "{inserted:?} {consumed:?}"
            );
            assert_eq!(o.table().len(), 1);
        });
    }

    /// A consume of `a` that read its slot races another key with the same home, which at the
    /// bound evicts `a`'s full bucket and claims that very slot: the consume's CAS (whose word
    /// carries `a`'s tag and old state) never lands on `b`'s bucket. Exactly one of the two
    /// is admitted, and the one bucket left is the winner's, with its request in it. A
    /// memoised fingerprint takes this same path (`memo`: it is the fingerprint afresh).
    #[test]
    fn a_consume_racing_its_slots_reuse_by_another_key_is_never_misapplied() {
        loom::model(|| {
            let o = Arc::new(Owned::new(1, 2, 1));
            let c = Arc::new(cx("1/s"));
            let (a, b) = (fp(1, 0, 2), fp(2, 0, 2));
            o.table().acquire(&c, &a, req(0, 1), me).unwrap(); // full again at 1 s
            let other = {
                let (o, c) = (o.clone(), c.clone());
                thread::spawn(move || o.table().acquire(&c, &b, req(S, 1), me))
            };
            let mine = o.table().acquire(&c, &a, req(S, 1), me);
            let theirs = other.join().unwrap();
            assert!(admitted(&mine) ^ admitted(&theirs), "{mine:?} {theirs:?}");
            let t = o.table();
            assert_eq!(t.len(), 1);
            let (won, lost) = if admitted(&mine) { (a, b) } else { (b, a) };
            assert_eq!(t.peek(&c, &won, S).unwrap().remaining(), 0);
            assert!(t.find(&lost).is_none());
        });
    }

    /// A consume of a full bucket races a sweep that evicts it and a request of the same key
    /// that re-creates it in the same slot: the consume's CAS, from the word it read before the
    /// eviction, fails on the re-created bucket (same tag, another state), and the consume
    /// starts over on it. With one token, exactly one of the two requests is admitted. At a
    /// bound of one key: a re-creation that meets the count before the eviction gives its unit
    /// back waits for it, and is never refused.
    #[test]
    fn a_consume_racing_its_keys_eviction_and_re_creation_lands_once() {
        loom::model(|| {
            let o = Arc::new(Owned::new(1, 3, 1));
            let c = Arc::new(cx("1/s"));
            let a = fp(1, 0, 3);
            o.table().acquire(&c, &a, req(0, 1), me).unwrap(); // full again at 1 s
            let other = {
                let (o, c) = (o.clone(), c.clone());
                thread::spawn(move || {
                    o.table().evict_full(&c, S).unwrap();
                    o.table().acquire(&c, &a, req(S, 1), me).unwrap()
                })
            };
            let mine = o.table().acquire(&c, &a, req(S, 1), me).unwrap();
            let theirs = other.join().unwrap();
            assert!(mine.allowed() ^ theirs.allowed(), "{mine:?} {theirs:?}");
            let t = o.table();
            assert_eq!(t.len(), 1);
            assert_eq!(t.peek(&c, &a, S).unwrap().remaining(), 0);
        });
    }

    /// An insert whose process a sweep takes for dead (a token of pid 0: what a waiter sees of
    /// a process that is gone) while it claims: whichever way the race goes, the live count
    /// stays the number of live slots (a unit is given back once, by the sweep or the
    /// inserter, never by both) and the request is applied at most once.
    #[test]
    fn a_claim_undone_by_a_sweep_is_counted_once() {
        loom::model(|| {
            let o = Arc::new(Owned::new(2, 3, 1));
            let c = Arc::new(cx("2/s"));
            let k = fp(7, 1, 3);
            let sweeper = {
                let (o, c) = (o.clone(), c.clone());
                thread::spawn(move || o.table().evict_full(&c, 0).unwrap().0)
            };
            let d = o.table().acquire(&c, &k, req(0, 1), || 5).unwrap();
            sweeper.join().unwrap();
            assert!(d.allowed());
            let t = o.table();
            assert_eq!(o.live.load(Ordering::Acquire), t.len() as u64);
            assert_eq!(t.len(), 1);
            assert_eq!(t.peek(&c, &k, 0).unwrap().remaining(), 1);
        });
    }

    /// What a store's sweep does: evict the full buckets, then recount.
    fn sweep(t: &Table<'_>, c: &Ctx, now: u64) {
        t.evict_full(c, now).unwrap();
        t.recount().unwrap();
    }

    /// A new key's first request (cost 1 at `now`) at a bound of one key (`o`), racing `other`
    /// on another thread: it is admitted, whichever way they interleave, and the region ends
    /// with that one key, counted once.
    fn admitted_beside(
        o: Owned,
        c: Ctx,
        now: u64,
        other: impl FnOnce(&Table<'_>, &Ctx) + Send + 'static,
    ) {
        let (o, c, new) = (Arc::new(o), Arc::new(c), fp(2, 1, 2));
        let other = {
            let (o, c) = (o.clone(), c.clone());
            thread::spawn(move || other(&o.table(), &c))
        };
        let inserted = o.table().acquire(&c, &new, req(now, 1), me);
        other.join().unwrap();
        assert!(admitted(&inserted), "{inserted:?}");
        let t = o.table();
        assert_eq!(t.len(), 1);
        assert!(t.find(&new).is_some());
        assert_eq!(o.live.load(Ordering::Acquire), 1);
    }

    /// At a bound of one key, a sweep evicts the one (full) bucket and recounts while a new key
    /// is inserted: whichever way they interleave (the insert meeting the count before the
    /// eviction gives its unit back, the recount counting the slots around the insert), the
    /// region has room for the new key, which is admitted, and the count ends right.
    #[test]
    fn a_new_key_at_the_bound_races_a_sweep_that_makes_room() {
        loom::model(|| {
            let (o, c) = (Owned::new(1, 2, 2), cx("1/s"));
            o.table().acquire(&c, &fp(1, 0, 2), req(0, 1), me).unwrap(); // full again at 1 s
            admitted_beside(o, c, S, |t, c| sweep(t, c, S));
        });
    }

    /// At a bound of one key held by a dead inserter's claim, a sweep undoes the claim while a
    /// new key is inserted: the new key is admitted, and the count ends right.
    #[test]
    fn a_new_key_at_the_bound_races_a_sweep_undoing_a_dead_claim() {
        loom::model(|| {
            let (o, c) = (Owned::new(1, 2, 2), cx("1/s"));
            // An inserter (pid 0: gone) claimed slot 0 and died.
            let dead = fp(1, 0, 2);
            o.slots[0]
                .word
                .store(pack(dead.tag, CLAIM | 5), Ordering::Release);
            o.live.store(1, Ordering::Release);
            admitted_beside(o, c, 0, |t, c| sweep(t, c, 0));
        });
    }

    /// At a bound of one key, with [`OnFull::EvictFullest`] and nothing full (so the new key
    /// makes room by sampling, once its scan found nothing), the one key is removed while a new
    /// key is inserted: the new key is admitted, whichever goes first.
    #[test]
    fn a_new_key_at_the_bound_races_a_remove_with_evict_fullest() {
        loom::model(|| {
            let q: Quota = "2/s".parse().unwrap();
            let (o, c) = (
                Owned::new(1, 2, 2),
                Ctx::for_tests(q, 0, OnFull::EvictFullest),
            );
            let old = fp(1, 0, 2);
            o.table().acquire(&c, &old, req(0, 1), me).unwrap(); // not full
            admitted_beside(o, c, 0, move |t, _| {
                t.remove(&old).unwrap();
            });
        });
    }

    /// At a bound of one key, with [`OnFull::RejectNewKeys`] and a hint recorded (a new key
    /// was refused: nothing is full before 1 s), the one key's own request races its
    /// `remove`: it is admitted, on the old bucket or a new one, never refused for a bound
    /// that the remove is emptying (the key's request once met the remove's vacating mark,
    /// took the key for gone, and the hint refused it as a new key, the unit not back yet).
    #[test]
    fn a_keys_request_racing_its_remove_at_the_bound_is_admitted() {
        loom::model(|| {
            let o = Arc::new(Owned::new(1, 2, 2));
            let c = Arc::new(cx("2/s"));
            let (k, other) = (fp(1, 0, 2), fp(2, 1, 2));
            o.table().acquire(&c, &k, req(0, 1), me).unwrap(); // 1 left, full at 0.5 s
            let refused = o.table().acquire(&c, &other, req(0, 1), me);
            assert!(!admitted(&refused), "{refused:?}");
            let remover = {
                let o = o.clone();
                thread::spawn(move || o.table().remove(&k).unwrap())
            };
            let d = o.table().acquire(&c, &k, req(0, 1), me);
            assert!(remover.join().unwrap());
            assert!(admitted(&d), "{d:?}");
            let t = o.table();
            assert_eq!(o.live.load(Ordering::Acquire), t.len() as u64);
        });
    }

    /// The same bound and hint: a peek that finds the key gone while it is being removed
    /// finds its room too (a new key is admitted after it), whichever way they interleave: a
    /// peek that took the mark for gone, and a new key refused after it, saw the key gone
    /// and the region full at once.
    #[test]
    fn a_peek_that_sees_a_removed_key_gone_sees_its_room() {
        loom::model(|| {
            let o = Arc::new(Owned::new(1, 2, 2));
            let c = Arc::new(cx("2/s"));
            let (k, other) = (fp(1, 0, 2), fp(2, 1, 2));
            o.table().acquire(&c, &k, req(0, 1), me).unwrap(); // 1 left
            let refused = o.table().acquire(&c, &other, req(0, 1), me);
            assert!(!admitted(&refused), "{refused:?}");
            let remover = {
                let o = o.clone();
                thread::spawn(move || o.table().remove(&k).unwrap())
            };
            let seen = o.table().peek(&c, &k, 0).unwrap().remaining();
            let new = o.table().acquire(&c, &other, req(0, 1), me);
            assert!(remover.join().unwrap());
            if seen == 2 {
                assert!(admitted(&new), "the key was gone, and {new:?}");
            } else {
                assert_eq!(seen, 1);
            }
        });
    }

    /// At a bound of one key, both slots hold a live process's vacating mark whose unit is
    /// back already (two removals a few instructions from done), and a new key's insert races
    /// their last step (the slots emptied): its claim, which may meet both marks, waits for a
    /// slot rather than refusing the key (it returned `NoSlot`: a `KeyStoreFull` with the
    /// region empty, and the live count raised over the marks, so that every later new key
    /// was refused too). The key is admitted, and counted once.
    #[test]
    fn a_claim_racing_vacating_marks_waits_for_a_slot() {
        loom::model(|| {
            let o = Arc::new(Owned::new(1, 2, 2));
            let c = Arc::new(cx("2/s"));
            let (a, b, new) = (fp(1, 0, 2), fp(2, 1, 2), fp(3, 1, 2));
            let marks = [
                pack(a.tag, CLAIM | VACATE | u128::from(me())),
                pack(b.tag, CLAIM | VACATE | u128::from(me())),
            ];
            for (slot, mark) in o.slots.iter().zip(marks) {
                slot.word.store(mark, Ordering::Release);
            }
            let remover = {
                let o = o.clone();
                thread::spawn(move || {
                    for (slot, mark) in o.slots.iter().zip(marks) {
                        slot.word
                            .compare_exchange(mark, 0, Ordering::AcqRel, Ordering::Acquire)
                            .unwrap();
                    }
                })
            };
            let inserted = o.table().acquire(&c, &new, req(0, 1), me);
            remover.join().unwrap();
            assert!(admitted(&inserted), "{inserted:?}");
            let t = o.table();
            assert_eq!(t.len(), 1);
            assert_eq!(o.live.load(Ordering::Acquire), 1);
        });
    }

    /// A recount racing the inserts of two keys at a bound of one: the second is refused
    /// whatever the recount saw (a recount that counted the slots around the first key's
    /// taken but not yet claimed unit, and stored 0 over it, let the second key in).
    #[test]
    fn a_recount_racing_an_insert_never_lets_a_key_past_the_capacity() {
        loom::model(|| {
            let o = Arc::new(Owned::new(1, 2, 2));
            let c = Arc::new(cx("2/s"));
            let (a, b) = (fp(1, 0, 2), fp(2, 1, 2));
            let recounter = {
                let o = o.clone();
                thread::spawn(move || o.table().recount().unwrap())
            };
            assert!(o.table().acquire(&c, &a, req(0, 1), me).unwrap().allowed());
            recounter.join().unwrap();
            let second = o.table().acquire(&c, &b, req(0, 1), me);
            assert!(!admitted(&second), "{second:?}");
            assert_eq!(o.table().len(), 1);
            assert_eq!(o.live.load(Ordering::Acquire), 1);
        });
    }
}
