//! A process's memo of its keys' region fingerprints: a repeated key skips SipHash (a long
//! key) or the bijection of a short one (`table::exact_value`).
//!
//! A key's fingerprint in a region is a function, under the region's secret, of the bytes its
//! `Hash` writes (its *stream*: for a byte key its length, as eight bytes, then its bytes; for
//! a `u64` its eight bytes): a short stream's keyed bijection, a longer one's SipHash-1-3. The
//! secret is read once when the region is opened, so within one [`ShmStore`](super::ShmStore)
//! the fingerprint is a pure function of the stream. The memo maps streams to their
//! fingerprints (the `hash` of an entry), compared in full, and holds nothing else: no slot index, nothing
//! that the region's other processes can change. An entry is therefore never stale (an
//! eviction, a `clear`, a `remove` or a sweep change slots, not hashes), and the table's
//! protocol runs exactly as it does on a hash computed afresh.
//!
//! # Entries
//!
//! A direct-mapped array of [`ENTRIES_MAX`] entries at most (fewer for a region of fewer
//! keys), 128 bytes each, holding streams of up to [`STREAM_BYTES`] bytes (a byte key of up to
//! 88 bytes); a longer key is hashed every time. A stream's slot in the array comes from a
//! cheap multiply hash: a caller who makes keys collide there only makes them take the
//! uncached path. Each entry is a sequence lock: a reader loads its version, the stream and
//! the hash, then the version again, and uses the hash only if the version was even and did not
//! move; a writer takes the entry by one CAS of the version to odd (and skips the entry if
//! another writer holds it: nobody waits), writes, then publishes the next even version.
//!
//! Nothing here blocks, so a `fork()` while another thread writes an entry leaves the child
//! that one entry held for ever (it then never hits, and no writer takes it): the child's
//! decisions are unaffected, only that entry's keys are hashed afresh.

use crate::sync::{fence, AtomicU64, Ordering};
use core::hash::{Hash, Hasher};

/// The longest stream an entry holds (12 words: a byte key of up to 88 bytes).
pub(crate) const STREAM_BYTES: usize = 96;
const WORDS: usize = STREAM_BYTES / 8;

/// The most entries of one region's memo (a power of two): 512 KiB a process.
pub(crate) const ENTRIES_MAX: usize = 4096;

/// An entry's `len` when it holds no stream (no stream is this long).
const VACANT: u64 = u64::MAX;

/// One entry: two cache lines, the version, the length and the hash in the first with a
/// stream of up to 32 bytes.
#[repr(C, align(64))]
struct Entry {
    /// Even: stable; odd: a writer holds it.
    version: AtomicU64,
    len: AtomicU64,
    hash: [AtomicU64; 2],
    words: [AtomicU64; WORDS],
}

impl Entry {
    fn vacant() -> Self {
        Self {
            version: AtomicU64::new(0),
            len: AtomicU64::new(VACANT),
            hash: [AtomicU64::new(0), AtomicU64::new(0)],
            words: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// A key's stream, as the region's SipHash reads it, if it has at most `N` bytes. Each
/// integer is written as its little-endian bytes, as `siphasher` absorbs it, so that hashing
/// the stream in one piece gives the same hash as hashing the key.
pub(crate) struct KeyStream<const N: usize> {
    bytes: [u8; N],
    /// `usize::MAX` once the key wrote more than `N` bytes.
    len: usize,
}

/// A stream an entry of the memo holds.
pub(crate) type Stream = KeyStream<STREAM_BYTES>;

/// The longest stream a region compares in full ([`KeyStream::exact`]): a byte key of up to
/// 15 bytes (an IPv4 address's text), or any key whose stream has up to 15 bytes.
pub(crate) const SHORT_BYTES: usize = 23;

/// A stream short enough to be compared in full, if the key's is (a byte more than
/// [`SHORT_BYTES`]: `exact` reads whole words).
pub(crate) type ShortStream = KeyStream<24>;

impl<const N: usize> KeyStream<N> {
    /// The stream of `key`, or `None` when it is longer than `N` bytes.
    #[inline]
    pub(crate) fn of<Q: Hash + ?Sized>(key: &Q) -> Option<Self> {
        let mut s = Self {
            bytes: [0; N],
            len: 0,
        };
        key.hash(&mut crate::store::key::Canon::new(&mut s));
        (s.len <= N).then_some(s)
    }

    /// The stream as an integer below 2^125, one to one over the streams it is given for:
    /// those of a byte key of up to 15 bytes (its length as eight bytes, then its bytes: `[u8]`'s
    /// `Hash`) and any other of up to 15 bytes; `None` for a longer one. The low 5 bits say
    /// which form and how long (a byte key's length plus 16, or the stream's length), the
    /// bits above hold the bytes: two streams with one code are one stream.
    #[inline]
    pub(crate) fn exact(&self) -> Option<u128> {
        let n = self.len;
        // Bytes past the stream's end are zero: 16 bytes from where the key's bytes start are
        // those bytes, zero-padded.
        let (code, at) = if (8..=SHORT_BYTES).contains(&n)
            && N >= 24
            && self.bytes[..8] == ((n - 8) as u64).to_le_bytes()
        {
            (16 + n - 8, 8)
        } else if n <= 15 && N >= 16 {
            (n, 0)
        } else {
            return None;
        };
        let data: [u8; 16] = self.bytes[at..at + 16].try_into().ok()?;
        Some(code as u128 | (u128::from_le_bytes(data) << 5))
    }

    /// The stream's bytes.
    #[cfg(test)]
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Word `i` of the stream (zero past its end).
    #[inline]
    fn word(&self, i: usize) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.bytes[8 * i..8 * i + 8]);
        u64::from_le_bytes(w)
    }

    /// Words holding the stream.
    #[inline]
    fn words(&self) -> usize {
        self.len.div_ceil(8)
    }
}

impl<const N: usize> Hasher for KeyStream<N> {
    fn finish(&self) -> u64 {
        0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let end = self.len.saturating_add(bytes.len());
        if end <= N {
            self.bytes[self.len..end].copy_from_slice(bytes);
            self.len = end;
        } else {
            self.len = usize::MAX;
        }
    }

    // As `siphasher` absorbs them (its `short_write`, little-endian on every target); the
    // other integers' default methods come down to these or to `write`, in both hashers.
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write(&[i]);
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.write(&i.to_le_bytes());
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write(&i.to_le_bytes());
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.write(&i.to_le_bytes());
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write(&i.to_le_bytes());
    }
}

/// A miss fills its entry once in this many, at random: a key decided again and again gets
/// in after about as many misses, while a stream of keys that never repeat (more keys than
/// entries, at random) pays the writer's CAS (a locked instruction, which waits for the
/// entry's cache line and holds back the slot's load behind it) on few of its decisions.
pub(crate) const FILL_ONE_IN: u32 = 16;

/// After this many misses in a row, a thread stops looking keys up for [`SKIP`] decisions:
/// where keys seldom repeat (more keys than entries, at random), a lookup is a cache miss
/// of its own and a copy of the key for nothing.
pub(crate) const MISS_RUN: u32 = 32;
/// See [`MISS_RUN`].
pub(crate) const SKIP: u32 = 8192;

/// This thread's draws and counts, shared by every memo (every region) it uses.
struct Local {
    rng: core::cell::Cell<u32>,
    /// Misses since the last hit.
    misses: core::cell::Cell<u32>,
    /// Decisions left that look nothing up.
    skip: core::cell::Cell<u32>,
}

std::thread_local! {
    static LOCAL: Local = const {
        Local {
            rng: core::cell::Cell::new(0x9e37_79b9),
            misses: core::cell::Cell::new(0),
            skip: core::cell::Cell::new(0),
        }
    };
}

/// Whether this decision looks its key up (no: a run of misses is being skipped).
#[inline]
pub(crate) fn looking() -> bool {
    LOCAL.with(|l| {
        let skip = l.skip.get();
        if skip == 0 {
            return true;
        }
        l.skip.set(skip - 1);
        false
    })
}

/// Forgets this thread's run of misses and skips (tests that must look keys up).
#[cfg(test)]
pub(crate) fn reset_thread() {
    LOCAL.with(|l| {
        l.misses.set(0);
        l.skip.set(0);
    });
}

/// A hit: the run of misses ends.
#[inline]
fn hit() {
    LOCAL.with(|l| l.misses.set(0));
}

/// A miss: whether it fills its entry (one in [`FILL_ONE_IN`], a xorshift of this thread's).
#[inline]
fn missed() -> bool {
    LOCAL.with(|l| {
        let m = l.misses.get() + 1;
        if m >= MISS_RUN {
            l.skip.set(SKIP);
            l.misses.set(0);
        } else {
            l.misses.set(m);
        }
        let mut x = l.rng.get();
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        l.rng.set(x);
        x % FILL_ONE_IN == 0
    })
}

/// The memo of one region's hashes in this process.
pub(crate) struct Memo {
    entries: Box<[Entry]>,
}

impl Memo {
    /// A memo for a region of `capacity` keys: the largest power of two of entries at most
    /// `capacity` (at least one), and at most [`ENTRIES_MAX`].
    pub(crate) fn new(capacity: u64) -> Self {
        Self {
            entries: (0..Self::entries_for(capacity))
                .map(|_| Entry::vacant())
                .collect(),
        }
    }

    /// The entries of a memo for a region of `capacity` keys: the largest power of two not
    /// above it, at most [`ENTRIES_MAX`].
    fn entries_for(capacity: u64) -> usize {
        let cap = usize::try_from(capacity).unwrap_or(usize::MAX).max(1);
        (1usize << cap.ilog2()).min(ENTRIES_MAX)
    }

    /// Entries (each [`Self::ENTRY_BYTES`]).
    #[cfg(test)]
    pub(crate) fn entries(&self) -> usize {
        self.entries.len()
    }

    /// What one entry costs, its stream included.
    #[cfg(test)]
    pub(crate) const ENTRY_BYTES: usize = core::mem::size_of::<Entry>();

    /// The entry `s` maps to (a multiply hash of its words and length).
    #[inline]
    fn entry(&self, s: &Stream) -> &Entry {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut h = s.len as u64;
        for i in 0..s.words() {
            let p = u128::from(h ^ s.word(i)) * u128::from(K);
            h = (p as u64) ^ ((p >> 64) as u64);
        }
        // The top bits: the multiply mixes them best.
        let i = (h.wrapping_mul(K) >> 32) as usize;
        &self.entries[i & (self.entries.len() - 1)]
    }

    /// `s`'s hash, if its entry holds it.
    #[inline]
    pub(crate) fn get(&self, s: &Stream) -> Option<u128> {
        let e = self.entry(s);
        let v = e.version.load(Ordering::Acquire);
        if v & 1 != 0 || e.len.load(Ordering::Relaxed) != s.len as u64 {
            return None;
        }
        for i in 0..s.words() {
            if e.words[i].load(Ordering::Relaxed) != s.word(i) {
                return None;
            }
        }
        let hash = (u128::from(e.hash[0].load(Ordering::Relaxed)) << 64)
            | u128::from(e.hash[1].load(Ordering::Relaxed));
        // Orders the loads above before the version's second load: if any of them read a
        // writer's store, this load sees that writer's odd version or a later one.
        fence(Ordering::Acquire);
        if e.version.load(Ordering::Relaxed) != v {
            return None;
        }
        hit();
        Some(hash)
    }

    /// Records `hash` as `s`'s, on one miss in [`FILL_ONE_IN`] (and unless another writer holds
    /// its entry).
    #[inline]
    pub(crate) fn put(&self, s: &Stream, hash: u128) {
        if !missed() {
            return;
        }
        self.put_now(s, hash);
    }

    /// Records `hash` as `s`'s, unless another writer holds its entry.
    pub(crate) fn put_now(&self, s: &Stream, hash: u128) {
        let e = self.entry(s);
        let v = e.version.load(Ordering::Relaxed);
        // Acquire: the previous writer's stores (published by its even version) happen before
        // this one's, so they come first in each word's order of writes. Relaxed, a word
        // could keep the previous writer's value after this writer's: an even version over
        // two writers' halves (loom found it).
        if v & 1 != 0
            || e.version
                .compare_exchange(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // Orders the odd version before the stores below: a reader that loads any of them
        // (and then fences) sees the version moved.
        fence(Ordering::Release);
        e.len.store(s.len as u64, Ordering::Relaxed);
        for i in 0..s.words() {
            e.words[i].store(s.word(i), Ordering::Relaxed);
        }
        e.hash[0].store((hash >> 64) as u64, Ordering::Relaxed);
        e.hash[1].store(hash as u64, Ordering::Relaxed);
        e.version.store(v + 2, Ordering::Release);
    }
}

#[cfg(all(test, not(sluicegate_loom)))]
mod tests {
    use super::*;

    /// The key's SipHash, of its stream as the region reads it (`Canon`).
    fn sip(key: &(impl Hash + ?Sized)) -> u128 {
        let mut h = siphasher::sip128::SipHasher13::new_with_keys(3, 4);
        key.hash(&mut crate::store::key::Canon::new(&mut h));
        siphasher::sip128::Hasher128::finish128(&h).as_u128()
    }

    fn sip_stream(s: &Stream) -> u128 {
        siphasher::sip128::SipHasher13::new_with_keys(3, 4)
            .hash(s.bytes())
            .as_u128()
    }

    #[test]
    fn a_stream_hashes_as_its_key_does() {
        for n in 0..=STREAM_BYTES {
            let key: Box<[u8]> = (0..n).map(|i| i as u8 ^ 0x5a).collect();
            match Stream::of(&key) {
                Some(s) => {
                    assert_eq!(s.bytes().len(), n + 8);
                    assert_eq!(sip_stream(&s), sip(&key), "{n} bytes");
                }
                None => assert!(n + 8 > STREAM_BYTES, "{n} bytes"),
            }
        }
        let s = Stream::of(&42u64).unwrap();
        assert_eq!(sip_stream(&s), sip(&42u64));
        let k = ("ab", 7u32, -3i16, 9u8, 1u128, 5usize, b"cde".to_vec());
        assert_eq!(sip_stream(&Stream::of(&k).unwrap()), sip(&k));
        assert_eq!(sip_stream(&Stream::of(&()).unwrap()), sip(&()));
        assert!(Stream::of(&vec![0u8; 89].into_boxed_slice()).is_none());
        assert!(Stream::of(&[7u64; 13][..]).is_none());
    }

    /// `exact` is one to one over the streams it takes: every short stream of many key types
    /// gets a code of its own, and a longer one gets none.
    #[test]
    fn short_streams_have_codes_of_their_own() {
        let mut seen: std::collections::HashMap<u128, Vec<u8>> = Default::default();
        let mut take = |s: ShortStream| {
            let code = s.exact().expect("a short stream");
            assert!(code < 1 << 125, "{code:x}");
            let bytes = s.bytes().to_vec();
            if let Some(other) = seen.insert(code, bytes.clone()) {
                assert_eq!(other, bytes, "two streams, one code {code:x}");
            }
        };
        for n in 0..=15usize {
            for fill in [0u8, 1, 0x5a, 0xff] {
                let key: Box<[u8]> = (0..n).map(|i| fill ^ i as u8).collect();
                take(ShortStream::of(&key).unwrap());
                // The same bytes written as they are (as a `str`'s): given their length
                // before them, the byte key's stream.
                let raw = ShortStream::of(&RawBytes(&key)).unwrap();
                assert_eq!(raw.bytes(), ShortStream::of(&key).unwrap().bytes());
                take(raw);
                // Bytes without a length after an integer: another stream.
                if n < 15 {
                    take(ShortStream::of(&(fill, RawBytes(&key))).unwrap());
                }
            }
        }
        for k in [0u64, 1, 8, 15, 16, u64::MAX, 0x0f00_0000_0000_0000] {
            take(ShortStream::of(&k).unwrap());
            take(ShortStream::of(&(k as u32)).unwrap());
            take(ShortStream::of(&(k as u8, k as u16)).unwrap());
        }
        take(ShortStream::of(&()).unwrap());
        take(ShortStream::of(&(1u8, "abc")).unwrap());
        // A `str` and the byte key of its UTF-8: one stream, one code (every binding keys by
        // those bytes).
        let as_str = ShortStream::of("abc").unwrap().exact();
        assert_eq!(as_str, ShortStream::of(&b"abc"[..]).unwrap().exact());
        assert_eq!(
            as_str,
            ShortStream::of(&String::from("abc")).unwrap().exact()
        );
        // A byte key of 7 bytes and the same stream written otherwise: one stream, one code.
        let as_key = ShortStream::of(&b"1234567"[..]).unwrap().exact();
        let as_parts = ShortStream::of(&(7usize, RawBytes(b"1234567")))
            .unwrap()
            .exact();
        assert_eq!(as_key, as_parts);
        // The longest byte key compared in full has 15 bytes; a stream of 16 bytes or more
        // that is not a byte key's is hashed.
        assert!(ShortStream::of(&[0u8; 15][..]).is_some_and(|s| s.exact().is_some()));
        assert!(ShortStream::of(&[0u8; 16][..]).is_some_and(|s| s.exact().is_none()));
        assert!(ShortStream::of(&[0u8; 17][..]).is_none());
        assert!(ShortStream::of(&(1u64, 2u64)).is_some_and(|s| s.exact().is_none()));
        assert!(
            ShortStream::of(&(9u64, 9u64, 9u32, 9u16, 9u8)).is_some_and(|s| s.exact().is_none())
        );
        assert!(seen.len() > 100, "{}", seen.len());
    }

    /// Bytes written as they are, without a length.
    struct RawBytes<'a>(&'a [u8]);

    impl Hash for RawBytes<'_> {
        fn hash<H: Hasher>(&self, h: &mut H) {
            h.write(self.0);
        }
    }

    #[test]
    fn a_key_gets_its_own_hash_back() {
        let m = Memo::new(1000);
        assert_eq!(m.entries(), 512);
        // More keys than entries (collisions); fewer under Miri, where each SipHash is slow.
        let n = if cfg!(miri) { 600 } else { 2000u32 };
        let keys: Vec<Box<[u8]>> = (0..n)
            .map(|i| format!("user:{i}").into_bytes().into())
            .collect();
        for k in &keys {
            let s = Stream::of(k).unwrap();
            assert_eq!(m.get(&s), None, "{k:?} before its put");
            m.put_now(&s, sip(k));
        }
        let mut hits = 0;
        for k in &keys {
            if let Some(h) = m.get(&Stream::of(k).unwrap()) {
                assert_eq!(h, sip(k), "{k:?}");
                hits += 1;
            }
        }
        assert!(hits > 0 && hits <= 512, "{hits}");
        // Streams that differ only in length (zero bytes past the shorter) are two keys.
        let (a, b) = (Stream::of(&[0u8; 0][..]).unwrap(), Stream::of(&()).unwrap());
        let one = Memo::new(1);
        one.put_now(&a, 1);
        assert_eq!((one.get(&a), one.get(&b)), (Some(1), None));
        one.put_now(&b, 2);
        assert_eq!((one.get(&a), one.get(&b)), (None, Some(2)));
    }

    #[test]
    fn sizes_follow_the_capacity() {
        assert_eq!(Memo::ENTRY_BYTES, 128);
        assert_eq!(Memo::new(0).entries(), 1);
        assert_eq!(Memo::new(1).entries(), 1);
        assert_eq!(Memo::new(18).entries(), 16);
        // The largest sizes by the rule alone: under Miri each entry's atomics take long.
        assert_eq!(Memo::entries_for(4096), 4096);
        assert_eq!(Memo::entries_for(5000), 4096);
        assert_eq!(Memo::entries_for(u64::MAX), ENTRIES_MAX);
        if !cfg!(miri) {
            assert_eq!(Memo::new(4096).entries(), 4096);
            assert_eq!(Memo::new(u64::MAX).entries(), ENTRIES_MAX);
        }
    }

    #[test]
    fn a_run_of_misses_skips_lookups_for_a_while() {
        let m = Memo::new(64);
        let hot = Stream::of(&0u64).unwrap();
        m.put_now(&hot, 7);
        let mut fills = 0;
        for k in 1..u64::from(MISS_RUN) {
            assert!(looking());
            assert_eq!(m.get(&Stream::of(&(k << 20)).unwrap()), None);
            m.put(&Stream::of(&(k << 20)).unwrap(), u128::from(k));
            fills += usize::from(m.get(&Stream::of(&(k << 20)).unwrap()).is_some());
        }
        assert!(fills < MISS_RUN as usize / 2, "{fills} fills");
        // A hit ends the run.
        assert!(looking());
        assert_eq!(m.get(&hot), Some(7));
        for k in 1..=u64::from(MISS_RUN) {
            assert!(looking());
            m.put(&Stream::of(&(k << 40)).unwrap(), 1);
        }
        for _ in 0..SKIP {
            assert!(!looking());
        }
        assert!(looking());
        assert_eq!(m.get(&hot), Some(7));
    }

    #[test]
    fn a_held_entry_is_skipped_not_waited_for() {
        let m = Memo::new(1);
        let s = Stream::of(&1u64).unwrap();
        m.put_now(&s, 10);
        // As a writer cut short by a fork would leave it.
        m.entries[0].version.fetch_add(1, Ordering::Relaxed);
        assert_eq!(m.get(&s), None);
        m.put_now(&s, 11);
        assert_eq!(m.get(&s), None);
    }
}

/// The sequence lock under loom: a reader never gets a hash that is not its key's.
#[cfg(all(test, sluicegate_loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// Two writers of two keys that share the one entry, and a reader of each: a reader gets
    /// its key's hash or nothing, never the other key's or a mix.
    #[test]
    fn readers_get_their_own_hash_or_none() {
        loom::model(|| {
            let m = Arc::new(Memo::new(1));
            let (a, b) = (1u64, 2u64);
            let ha = (1u128 << 64) | 0xa;
            let hb = (2u128 << 64) | 0xb;
            let w = {
                let m = m.clone();
                thread::spawn(move || {
                    m.put_now(&Stream::of(&b).unwrap(), hb);
                    m.get(&Stream::of(&a).unwrap())
                })
            };
            m.put_now(&Stream::of(&a).unwrap(), ha);
            let mine = m.get(&Stream::of(&b).unwrap());
            let theirs = w.join().unwrap();
            assert!(mine.is_none() || mine == Some(hb), "{mine:x?}");
            assert!(theirs.is_none() || theirs == Some(ha), "{theirs:x?}");
        });
    }
}
