//! The key rule every language shares (docs/SEMANTICS.md, "Keys"): a key is a byte string. A
//! text key is its UTF-8 bytes, a byte key its bytes, and an integer key its decimal digits, so
//! that `42`, `"42"` and `b"42"` name one bucket in Python, Node and C alike (and one unit of
//! `max_keys`). Rust callers choose their own key type; the bindings all key a
//! `KeyedLimiter<Box<[u8]>>` by these bytes, and the stores processes share read a Rust
//! `str` key as those bytes too ([`Canon`]).

use core::hash::{Hash, Hasher};

/// The longest key the in-process store holds as it is: a key whose content is longer is
/// held as its 16-byte digest (docs/KEYED.md, "Long keys").
///
/// A key's content is the bytes its `Hash` writes as byte strings: the bytes of a `[u8]`,
/// `Vec<u8>`, `Box<[u8]>`, `str` or `String` key, summed over the parts of a compound key
/// (integers and length prefixes count nothing). 64 bytes keep every key a person reads as
/// it is (an IPv6 network's text is at most 43 bytes, a UUID 36, a SHA-256 in hex 64), so
/// that [`KeyedLimiter::snapshot`](crate::KeyedLimiter::snapshot) lists them, and bound what a
/// key costs when request data chooses it: at most 64 bytes of key (plus the allocator's
/// rounding) beside its entry.
pub const LONG_KEY_BYTES: usize = 64;

/// The length of a key's content as [`LONG_KEY_BYTES`] counts it: the bytes its `Hash`
/// writes as byte strings. Reads no byte of the key, only the lengths of its parts.
pub(crate) fn content_len<Q: Hash + ?Sized>(key: &Q) -> usize {
    struct Measure(usize);
    impl Hasher for Measure {
        fn finish(&self) -> u64 {
            0
        }
        #[inline]
        fn write(&mut self, bytes: &[u8]) {
            self.0 = self.0.saturating_add(bytes.len());
        }
        // Integers (and the length prefixes of slices) are not content.
        #[inline]
        fn write_u8(&mut self, _: u8) {}
        #[inline]
        fn write_u16(&mut self, _: u16) {}
        #[inline]
        fn write_u32(&mut self, _: u32) {}
        #[inline]
        fn write_u64(&mut self, _: u64) {}
        #[inline]
        fn write_u128(&mut self, _: u128) {}
        #[inline]
        fn write_usize(&mut self, _: usize) {}
        #[inline]
        fn write_i8(&mut self, _: i8) {}
        #[inline]
        fn write_i16(&mut self, _: i16) {}
        #[inline]
        fn write_i32(&mut self, _: i32) {}
        #[inline]
        fn write_i64(&mut self, _: i64) {}
        #[inline]
        fn write_i128(&mut self, _: i128) {}
        #[inline]
        fn write_isize(&mut self, _: isize) {}
    }
    let mut m = Measure(0);
    key.hash(&mut m);
    m.0
}

/// A key's `Hash` as the shared stores (a shared-memory region, Redis) read it, so that a
/// `str` key and the byte key of its UTF-8 name one bucket there, as they do in every binding:
/// a key whose stream begins with bytes written as they are (a `str`'s, which std writes
/// without a length and ends with `0xff`) has their length put before them, as `[u8]`'s
/// `Hash` writes it, and a `0xff` right after them dropped. A byte key's stream (its length
/// first) and an integer's are read as they are.
pub(crate) struct Canon<'a, H: Hasher> {
    h: &'a mut H,
    at: CanonAt,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum CanonAt {
    /// Nothing written yet.
    Start,
    /// Only a first run of bytes written (a `str`'s, if a `0xff` comes next).
    FirstBytes,
    /// Anything else: passed on as it is.
    Rest,
}

impl<'a, H: Hasher> Canon<'a, H> {
    #[inline]
    pub(crate) fn new(h: &'a mut H) -> Self {
        Canon {
            h,
            at: CanonAt::Start,
        }
    }
}

impl<H: Hasher> Hasher for Canon<'_, H> {
    fn finish(&self) -> u64 {
        self.h.finish()
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        if self.at == CanonAt::Start {
            self.h.write_usize(bytes.len());
            self.at = CanonAt::FirstBytes;
        } else {
            self.at = CanonAt::Rest;
        }
        self.h.write(bytes);
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        let end_of_str = self.at == CanonAt::FirstBytes && i == 0xff;
        self.at = CanonAt::Rest;
        if !end_of_str {
            self.h.write_u8(i);
        }
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.at = CanonAt::Rest;
        self.h.write_u16(i);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.at = CanonAt::Rest;
        self.h.write_u32(i);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.at = CanonAt::Rest;
        self.h.write_u64(i);
    }
    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.at = CanonAt::Rest;
        self.h.write_u128(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.at = CanonAt::Rest;
        self.h.write_usize(i);
    }
    // The signed integers' default methods write through the unsigned ones above.
}

/// A long key's stand-in: its 128-bit SipHash-1-3 under a secret of the limiter's (a keyed
/// PRF: a caller who does not know the secret cannot make two keys share a digest, and
/// chance does once in about 2^64 pairs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Digest([u64; 2]);

impl Digest {
    pub(crate) fn of<Q: Hash + ?Sized>(secret: [u64; 2], key: &Q) -> Self {
        let mut h = siphasher::sip128::SipHasher13::new_with_keys(secret[0], secret[1]);
        key.hash(&mut h);
        let d = siphasher::sip128::Hasher128::finish128(&h);
        Digest([d.h1, d.h2])
    }
}

/// A fixed secret: loom replays executions and needs every one to place a digest alike.
#[cfg(sluicegate_loom)]
pub(crate) fn random_secret() -> [u64; 2] {
    [0x243f_6a88_85a3_08d3, 0x1319_8a2e_0370_7344]
}

/// 128 bits from the OS's random source (a secret of fingerprints and digests).
#[cfg(not(sluicegate_loom))]
pub(crate) fn random_secret() -> [u64; 2] {
    let mut b = [0u8; 16];
    let mut filled = false;
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        filled = f.read_exact(&mut b).is_ok();
    }
    if !filled {
        // std's hasher is seeded from the OS's random source too.
        use core::hash::BuildHasher;
        let s = std::collections::hash_map::RandomState::new();
        b[..8].copy_from_slice(&s.hash_one(1u8).to_le_bytes());
        b[8..].copy_from_slice(&s.hash_one(2u8).to_le_bytes());
    }
    [
        u64::from_le_bytes(b[..8].try_into().unwrap_or_default()),
        u64::from_le_bytes(b[8..].try_into().unwrap_or_default()),
    ]
}

/// An integer key's bytes: its decimal digits (a `-` first when negative), rendered on the
/// stack.
///
/// ```
/// use sluicegate::IntKey;
/// assert_eq!(IntKey::new(42).as_bytes(), b"42");
/// assert_eq!(IntKey::new(-7).as_bytes(), b"-7");
/// assert_eq!(IntKey::new(u64::MAX.into()).as_bytes(), b"18446744073709551615");
/// ```
#[derive(Clone, Copy)]
pub struct IntKey {
    buf: [u8; 40],
    start: u8,
}

impl IntKey {
    /// The key of the integer `n`.
    pub fn new(n: i128) -> Self {
        let mut buf = [0u8; 40];
        let mut i = buf.len();
        let mut m = n.unsigned_abs();
        // A u128 division is a library call: only the digits above 2^64 take it.
        while m > u128::from(u64::MAX) {
            i -= 1;
            buf[i] = b'0' + (m % 10) as u8;
            m /= 10;
        }
        let mut m = m as u64; // at most u64::MAX, and at least 1 if the loop above ran
        loop {
            i -= 1;
            buf[i] = b'0' + (m % 10) as u8;
            m /= 10;
            if m == 0 {
                break;
            }
        }
        if n < 0 {
            i -= 1;
            buf[i] = b'-';
        }
        Self {
            buf,
            start: i as u8,
        }
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[usize::from(self.start)..]
    }
}

impl AsRef<[u8]> for IntKey {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl core::fmt::Debug for IntKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Decimal digits are ASCII.
        f.write_str(core::str::from_utf8(self.as_bytes()).unwrap_or("?"))
    }
}

#[cfg(test)]
mod tests {
    use super::{content_len, Digest, IntKey};

    #[test]
    fn content_is_the_byte_strings() {
        assert_eq!(content_len(b"abc".as_slice()), 3);
        assert_eq!(content_len("abc"), 3);
        assert_eq!(content_len(&String::from("abcd")), 4);
        assert_eq!(content_len(&vec![0u8; 100].into_boxed_slice()), 100);
        assert_eq!(content_len(&42u64), 0);
        assert_eq!(content_len(&("ab", 7u32, b"cde".to_vec())), 5);
        assert_eq!(content_len(&[1u64, 2, 3][..]), 24);
    }

    #[test]
    fn digests_depend_on_the_secret_and_the_key() {
        let a = Digest::of([1, 2], b"key".as_slice());
        assert_eq!(a, Digest::of([1, 2], b"key".as_slice()));
        assert_ne!(a, Digest::of([1, 3], b"key".as_slice()));
        assert_ne!(a, Digest::of([1, 2], b"kez".as_slice()));
    }

    #[test]
    fn integers_are_their_decimal_digits() {
        for n in [
            0i128,
            1,
            -1,
            9,
            10,
            -10,
            i64::MIN.into(),
            u64::MAX.into(),
            i128::from(u64::MAX) + 1,
            -i128::from(u64::MAX) - 1,
            i128::MIN,
            i128::MAX,
        ] {
            assert_eq!(IntKey::new(n).as_bytes(), n.to_string().as_bytes());
        }
    }
}
