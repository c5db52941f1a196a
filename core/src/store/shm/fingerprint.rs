//! The keys' fingerprints in a region: AES-128-CMAC (NIST SP 800-38B, RFC 4493) under the
//! region's 128-bit secret, over the bytes the key's `Hash` writes.
//!
//! CMAC is a pseudorandom function when AES is a pseudorandom permutation: to a caller who
//! does not know the secret, the 128 bits of two distinct keys are as good as independent
//! uniform values, so two keys share a bucket with a probability of about 2^-128 per pair
//! (plus CMAC's own bound, about σ²/2^128 for σ blocks hashed under one secret: below 2^-60
//! for 2^34 blocks). A region of 10^6 live keys that sees 10^12 new keys in its life runs a
//! chance of about 10^-15 of one collision. Hashing a `u64` or a byte key of up to 7 bytes
//! (8 bytes of length and the bytes) is one block: one AES encryption.

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::{Aes128Enc, Block};

/// The cipher and CMAC's two subkeys, made once when a region is opened.
pub(crate) struct Keys {
    /// Boxed: the round keys of both implementations (hardware and software) take most of a
    /// kilobyte, which would make every keyed limiter's store that large.
    aes: Box<Aes128Enc>,
    /// For a last block that is complete.
    k1: u128,
    /// For a last block that is padded.
    k2: u128,
}

/// Doubling in GF(2^128) as CMAC defines it (the block read big-endian).
fn dbl(x: u128) -> u128 {
    (x << 1) ^ if x >> 127 == 1 { 0x87 } else { 0 }
}

impl Keys {
    /// The keys of a region's secret (its two words, little-endian: the key's 16 bytes).
    pub(crate) fn new(secret: [u64; 2]) -> Self {
        let mut key = [0u8; 16];
        key[..8].copy_from_slice(&secret[0].to_le_bytes());
        key[8..].copy_from_slice(&secret[1].to_le_bytes());
        Self::from_key(key)
    }

    fn from_key(key: [u8; 16]) -> Self {
        let aes = Box::new(Aes128Enc::new(&key.into()));
        let l = u128::from_be_bytes(encrypt(&aes, [0; 16]));
        let k1 = dbl(l);
        Self {
            aes,
            k1,
            k2: dbl(k1),
        }
    }

    /// A hasher for one key.
    #[inline]
    pub(crate) fn hasher(&self) -> Cmac<'_> {
        Cmac {
            keys: self,
            x: 0,
            buf: [0; 16],
            n: 0,
        }
    }
}

#[inline]
fn encrypt(aes: &Aes128Enc, block: [u8; 16]) -> [u8; 16] {
    let mut b = Block::from(block);
    aes.encrypt_block(&mut b);
    b.into()
}

/// CMAC over the bytes written to it (a `Hasher`: a key's `Hash` writes them).
pub(crate) struct Cmac<'a> {
    keys: &'a Keys,
    /// The chaining value (big-endian, as the blocks are read).
    x: u128,
    /// The block being filled: `n` bytes. A full block is processed only when more bytes
    /// come (the last block, full or not, is CMAC's special one).
    buf: [u8; 16],
    n: usize,
}

impl Cmac<'_> {
    /// Processes the full block in `buf`.
    #[inline]
    fn flush(&mut self) {
        let m = self.x ^ u128::from_be_bytes(self.buf);
        self.x = u128::from_be_bytes(encrypt(&self.keys.aes, m.to_be_bytes()));
        self.n = 0;
    }

    /// The 128-bit tag.
    #[inline]
    pub(crate) fn finish128(mut self) -> u128 {
        let last = if self.n == 16 {
            u128::from_be_bytes(self.buf) ^ self.keys.k1
        } else {
            self.buf[self.n] = 0x80;
            self.buf[self.n + 1..].fill(0);
            u128::from_be_bytes(self.buf) ^ self.keys.k2
        };
        let m = self.x ^ last;
        u128::from_be_bytes(encrypt(&self.keys.aes, m.to_be_bytes()))
    }
}

impl core::hash::Hasher for Cmac<'_> {
    #[inline]
    fn write(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.n == 16 {
                self.flush();
            }
            let take = (16 - self.n).min(bytes.len());
            self.buf[self.n..self.n + take].copy_from_slice(&bytes[..take]);
            self.n += take;
            bytes = &bytes[take..];
        }
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        if self.n <= 8 {
            self.buf[self.n..self.n + 8].copy_from_slice(&v.to_ne_bytes());
            self.n += 8;
        } else {
            self.write(&v.to_ne_bytes());
        }
    }

    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    /// Not a `Hasher`'s 64-bit hash: the region takes [`finish128`](Cmac::finish128).
    fn finish(&self) -> u64 {
        let c = Cmac {
            keys: self.keys,
            x: self.x,
            buf: self.buf,
            n: self.n,
        };
        c.finish128() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::hash::Hasher;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 4493's test vectors (AES-128-CMAC), written in every split, so that the buffering
    /// is checked too.
    #[test]
    fn rfc_4493_vectors() {
        let key: [u8; 16] = hex("2b7e1516 28aed2a6 abf71588 09cf4f3c")
            .try_into()
            .unwrap();
        let keys = Keys::from_key(key);
        assert_eq!(
            keys.k1.to_be_bytes().to_vec(),
            hex("fbeed618 35713366 7c85e08f 7236a8de")
        );
        assert_eq!(
            keys.k2.to_be_bytes().to_vec(),
            hex("f7ddac30 6ae266cc f90bc11e e46d513b")
        );
        let msg = hex(
            "6bc1bee2 2e409f96 e93d7e11 7393172a ae2d8a57 1e03ac9c 9eb76fac 45af8e51
             30c81c46 a35ce411 e5fbc119 1a0a52ef f69f2445 df4f9b17 ad2b417b e66c3710",
        );
        for (len, tag) in [
            (0, "bb1d6929 e9593728 7fa37d12 9b756746"),
            (16, "070a16b4 6b4d4144 f79bdd9d d04a287c"),
            (40, "dfa66747 de9ae630 30ca3261 1497c827"),
            (64, "51f0bebf 7e3b9d92 fc497417 79363cfe"),
        ] {
            // Miri runs the software AES, slowly: a few splits there.
            for split in (0..=len).step_by(if cfg!(miri) { 13 } else { 1 }) {
                let mut h = keys.hasher();
                h.write(&msg[..split]);
                h.write(&msg[split..len]);
                assert_eq!(
                    h.finish128().to_be_bytes().to_vec(),
                    hex(tag),
                    "{len} bytes, split at {split}"
                );
            }
        }
    }

    /// `write_u64` (what a `u64` key and a byte key's length write) is `write` of its bytes.
    #[test]
    fn integers_are_their_bytes() {
        let keys = Keys::new([0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]);
        for lead in 0..20usize {
            let pre = vec![7u8; lead];
            let (mut a, mut b) = (keys.hasher(), keys.hasher());
            a.write(&pre);
            a.write_u64(0x1122_3344_5566_7788);
            a.write_usize(5);
            b.write(&pre);
            b.write(&0x1122_3344_5566_7788u64.to_ne_bytes());
            b.write(&5usize.to_ne_bytes());
            assert_eq!(a.finish128(), b.finish128(), "after {lead} bytes");
        }
    }
}
