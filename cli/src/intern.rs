//! Keys to dense ids `0, 1, 2, ...` in order of first appearance. The replay's per-key figures
//! are arrays indexed by id, and so are the core's per-key buckets (`DenseLimiter`).
//!
//! Open addressing over two `u64` per slot: the id with 32 bits of the hash (so that a probe
//! compares keys only on a likely match), and keys of up to 7 bytes themselves (an IPv4
//! client is 6), so that finding a short key touches one cache line; longer keys are compared
//! in one arena of key bytes. No allocation per key.
//!
//! The keys come from the logs, which clients write (paths, headers): the hash is seeded at
//! random per interner, from the OS's random source, so that no one can pick keys that
//! collide (with a fixed seed, keys whose last 16 bytes cancel the seed all hash alike and
//! every insert probes past all of them). Nothing the replay prints depends on the hash:
//! ids follow the keys' first appearance, and nothing iterates the slots but [`grow`]
//! (which re-inserts by id).
//!
//! [`grow`]: Interner::grow

use core::hash::{BuildHasher, Hash, Hasher};

pub struct Interner {
    /// `[tag << 32 | id + 1, inline key or LONG]`; `[0, _]` is empty.
    slots: Vec<[u64; 2]>,
    mask: usize,
    /// Key `i` is `arena[ends[i - 1]..ends[i]]` (`ends[-1]` = 0).
    ends: Vec<u64>,
    arena: Vec<u8>,
    /// The per-interner seed and the shared seeds of the hash, both random.
    seed: u64,
    shared: foldhash::SharedSeed,
    /// Slots probed by lookups so far (tests: collisions stay rare).
    #[cfg(test)]
    probes: u64,
}

const EMPTY: u64 = 0;
/// The inline word of a key longer than 7 bytes.
const LONG: u64 = u64::MAX;

/// A key of at most 7 bytes as one word (its length in the top byte), else `LONG`.
#[inline]
fn inline(key: &[u8]) -> u64 {
    if key.len() > 7 {
        return LONG;
    }
    crate::scan::load_short(key) | (key.len() as u64) << 56
}

/// `n` empty slots, written: `vec![[EMPTY, 0]; n]` would take zeroed pages from the system
/// untouched, and the first lookup on each page would map the shared zero page, to be
/// replaced by a page of its own at the first insert (two page faults a page where one is
/// needed; 10^6 keys take 16 000 pages of slots in the tables' lifetime).
fn empty_slots(n: usize) -> Vec<[u64; 2]> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, [EMPTY, 0]);
    v
}

impl Default for Interner {
    fn default() -> Self {
        Self::new()
    }
}

impl Interner {
    pub fn new() -> Self {
        let random = random_seeds();
        Interner {
            slots: empty_slots(1024),
            mask: 1023,
            ends: Vec::new(),
            arena: Vec::new(),
            seed: random[0],
            shared: foldhash::SharedSeed::from_u64(random[1]),
            #[cfg(test)]
            probes: 0,
        }
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// The key with id `id`.
    pub fn get(&self, id: u32) -> &[u8] {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.arena[start..self.ends[i] as usize]
    }

    /// The id of `key`, and whether it is new. Ids are `u32`: at most 2^32 - 1 keys.
    #[cfg(test)]
    pub fn intern(&mut self, key: &[u8]) -> (u32, bool) {
        self.intern_hashed(key, self.hash(key))
    }

    /// The hash [`intern_hashed`](Self::intern_hashed) and [`prefetch`](Self::prefetch) take.
    #[inline]
    pub fn hash(&self, key: &[u8]) -> u64 {
        let mut h = foldhash::fast::FoldHasher::with_seed(self.seed, &self.shared);
        key.hash(&mut h);
        h.finish()
    }

    /// Asks the cache for the slot where a lookup of hash `h` starts, without waiting for it
    /// (a hint: nothing is read or changed). With 10^6 keys the slots are tens of MiB and a
    /// lookup's first load misses every cache: prefetching a batch of keys' slots before
    /// interning them overlaps those misses.
    #[inline]
    pub fn prefetch(&self, h: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let slot = self.slots.as_ptr().wrapping_add(h as usize & self.mask);
            // SAFETY: a prefetch never faults and reads nothing; the address is one of
            // `slots` (the mask is the slot count minus one).
            unsafe { _mm_prefetch(slot.cast::<i8>(), _MM_HINT_T0) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = h;
    }

    /// [`intern`](Self::intern) of a key whose [`hash`](Self::hash) is `h`.
    #[inline]
    pub fn intern_hashed(&mut self, key: &[u8], h: u64) -> (u32, bool) {
        debug_assert_eq!(h, self.hash(key));
        let tag = h >> 32;
        let word = inline(key);
        let mut i = h as usize & self.mask;
        loop {
            #[cfg(test)]
            {
                self.probes += 1;
            }
            let [s, w] = self.slots[i];
            if s == EMPTY {
                break;
            }
            if s >> 32 == tag && w == word {
                let id = (s as u32) - 1;
                if word != LONG || self.get(id) == key {
                    return (id, false);
                }
            }
            i = (i + 1) & self.mask;
        }
        let id = u32::try_from(self.ends.len()).expect("fewer than 2^32 - 1 keys");
        assert!(id < u32::MAX, "fewer than 2^32 - 1 keys");
        self.arena.extend_from_slice(key);
        self.ends.push(self.arena.len() as u64);
        self.slots[i] = [tag << 32 | u64::from(id + 1), word];
        // Load at most 1/2: short probes.
        if self.ends.len() * 2 > self.slots.len() {
            self.grow();
        }
        (id, true)
    }

    fn grow(&mut self) {
        let n = self.slots.len() * 2;
        self.slots = empty_slots(n);
        self.mask = n - 1;
        // Every key lands on a random slot of a table too large for the caches: the keys'
        // slots are prefetched AHEAD keys before they are written, so that the misses overlap.
        const AHEAD: u32 = 16;
        let keys = self.ends.len() as u32;
        let hash = |this: &Self, id: u32| this.hash(this.get(id));
        let mut ahead: [u64; AHEAD as usize] = [0; AHEAD as usize];
        for id in 0..keys.min(AHEAD) {
            ahead[id as usize] = hash(self, id);
            self.prefetch(ahead[id as usize]);
        }
        for id in 0..keys {
            let h = ahead[(id % AHEAD) as usize];
            if id + AHEAD < keys {
                let next = hash(self, id + AHEAD);
                self.prefetch(next);
                ahead[(id % AHEAD) as usize] = next;
            }
            let mut i = h as usize & self.mask;
            while self.slots[i][0] != EMPTY {
                i = (i + 1) & self.mask;
            }
            self.slots[i] = [(h >> 32) << 32 | u64::from(id + 1), inline(self.get(id))];
        }
    }
}

/// Two random words from the OS's random source (std's `RandomState` draws its keys from
/// it, and so hashes to words no one can predict).
fn random_seeds() -> [u64; 2] {
    let s = std::collections::hash_map::RandomState::new();
    [s.hash_one(0x51ce_u64), s.hash_one(0x5eed_u64)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_ids_in_order_of_appearance() {
        let mut it = Interner::new();
        assert_eq!(it.intern(b"alice"), (0, true));
        assert_eq!(it.intern(b"bob"), (1, true));
        assert_eq!(it.intern(b"alice"), (0, false));
        assert_eq!(it.intern(b""), (2, true));
        assert_eq!(it.get(1), b"bob");
        assert_eq!(it.get(2), b"");
        for i in 0..100_000u32 {
            let k = i.to_le_bytes();
            let (id, _) = it.intern(&k);
            assert_eq!(it.get(id), &k);
        }
        assert_eq!(it.len(), 3 + 100_000);
        // Long keys, and short keys that are prefixes of each other.
        for k in [
            &b"a"[..],
            b"a\0",
            b"abcdefg",
            b"abcdefgh",
            b"abcdefghijklmnop",
        ] {
            let (id, new) = it.intern(k);
            assert!(new);
            assert_eq!(it.get(id), k);
            assert_eq!(it.intern(k), (id, false));
        }
        for i in 0..100_000u32 {
            assert!(!it.intern(&i.to_le_bytes()).1);
        }
    }

    /// Keys chosen to collide under a fixed seed (foldhash's `fast` hash of 17 to 32 bytes
    /// multiplies the first 8 bytes by the last 8 xored with the shared seed: keys ending in
    /// that seed all hash alike) probe a few slots each, as any keys do.
    #[test]
    fn keys_crafted_against_a_fixed_seed_do_not_collide() {
        const FIXED_SHARED_SEED_0: u64 = 0xc0ac_29b7_c97c_50dd;
        let n = 20_000u64;
        let mut it = Interner::new();
        for i in 0..n {
            // As a replay's key bytes for a 26-byte User-Agent (`push_text`).
            let mut k = vec![b's'];
            k.extend_from_slice(&26u32.to_le_bytes());
            k.extend_from_slice(format!("{i:010}").as_bytes());
            k.extend_from_slice(&FIXED_SHARED_SEED_0.to_le_bytes());
            k.extend_from_slice(&FIXED_SHARED_SEED_0.to_le_bytes());
            assert_eq!(it.intern(&k), (i as u32, true));
        }
        // A fixed seed: n^2/2 = 2 * 10^8 probes. A random one: about 1.5 per key at a load
        // of at most 1/2.
        assert!(it.probes < 4 * n, "{} probes for {n} keys", it.probes);
        // Two interners hash apart (and so do two runs).
        assert_ne!(Interner::new().hash(b"k"), Interner::new().hash(b"k"));
    }
}
