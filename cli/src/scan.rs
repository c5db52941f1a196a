//! Byte search over short distances: the fields of a log line are a few to a few dozen bytes
//! long, where a call into a vectorised search (`memchr`) costs more than the search itself.
//! These look at the first bytes eight at a time in a register (SWAR), and hand longer
//! distances to `memchr`. The results are exactly `memchr`'s (tested against it).

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;
/// Bytes searched word by word before handing over to `memchr`.
const SHORT: usize = 32;

/// The top bit of the lowest zero byte of `x` is set (and bits below it are clear): the
/// classic `(x - LO) & !x & HI`, whose false positives only ever lie above a true zero byte,
/// so the lowest set bit is exact.
#[inline(always)]
fn zero_byte(x: u64) -> u64 {
    x.wrapping_sub(LO) & !x & HI
}

#[inline(always)]
fn word(hay: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&hay[i..i + 8]);
    u64::from_le_bytes(b)
}

/// The bytes of `s` (at most 8) as a little-endian word, zero above: two loads that may
/// overlap rather than a copy of a variable length (a call to `memcpy`).
#[inline(always)]
pub fn load_short(s: &[u8]) -> u64 {
    let n = s.len();
    debug_assert!(n <= 8);
    if n >= 4 {
        let lo = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
        let hi = u32::from_le_bytes([s[n - 4], s[n - 3], s[n - 2], s[n - 1]]);
        u64::from(lo) | u64::from(hi) << ((n - 4) * 8)
    } else if n > 0 {
        u64::from(s[0]) | u64::from(s[n / 2]) << (n / 2 * 8) | u64::from(s[n - 1]) << ((n - 1) * 8)
    } else {
        0
    }
}

/// `a == b`, for short strings (JSON keys, timestamps): words compared in registers, the last
/// one overlapping, rather than a call to `memcmp`.
#[inline(always)]
pub fn eq_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return load_short(a) == load_short(b);
    }
    let mut i = 0;
    while i + 8 < n {
        if word(a, i) != word(b, i) {
            return false;
        }
        i += 8;
    }
    word(a, n - 8) == word(b, n - 8)
}

/// The index of the first `a` in `hay` (as `memchr::memchr`).
#[inline(always)]
pub fn find(a: u8, hay: &[u8]) -> Option<usize> {
    find2(a, a, hay)
}

/// The index of the first `a` or `b` in `hay` (as `memchr::memchr2`).
#[inline(always)]
pub fn find2(a: u8, b: u8, hay: &[u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        find2_sse2(a, b, hay)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        find2_swar(a, b, hay)
    }
}

/// [`find2`] sixteen bytes at a time in an SSE2 register (every x86-64 processor has SSE2).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn find2_sse2(a: u8, b: u8, hay: &[u8]) -> Option<usize> {
    use core::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    // SAFETY: SSE2 is part of the x86-64 baseline; these intrinsics only compute on registers.
    let (pa, pb) = unsafe { (_mm_set1_epi8(a as i8), _mm_set1_epi8(b as i8)) };
    let mut i = 0;
    while i + 16 <= hay.len() {
        if i >= SHORT {
            return memchr::memchr2(a, b, &hay[i..]).map(|k| i + k);
        }
        // SAFETY: `i + 16 <= hay.len()`: the unaligned load reads 16 bytes of `hay`.
        let m = unsafe {
            let w = _mm_loadu_si128(hay.as_ptr().add(i).cast::<__m128i>());
            _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(w, pa), _mm_cmpeq_epi8(w, pb)))
        };
        if m != 0 {
            return Some(i + m.trailing_zeros() as usize);
        }
        i += 16;
    }
    find2_swar(a, b, &hay[i..]).map(|k| i + k)
}

/// [`find2`] eight bytes at a time in a general register.
#[inline(always)]
fn find2_swar(a: u8, b: u8, hay: &[u8]) -> Option<usize> {
    let (pa, pb) = (LO * u64::from(a), LO * u64::from(b));
    let mut i = 0;
    while i + 8 <= hay.len() {
        if i >= SHORT {
            return memchr::memchr2(a, b, &hay[i..]).map(|k| i + k);
        }
        let w = word(hay, i);
        let m = zero_byte(w ^ pa) | zero_byte(w ^ pb);
        if m != 0 {
            return Some(i + (m.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    hay[i..]
        .iter()
        .position(|&c| c == a || c == b)
        .map(|k| i + k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_loads_and_compares() {
        let text: Vec<u8> = (0..40u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
        for n in 0..=8 {
            for at in 0..8 {
                let s = &text[at..at + n];
                let mut w = [0u8; 8];
                w[..n].copy_from_slice(s);
                assert_eq!(load_short(s), u64::from_le_bytes(w), "{n} {at}");
            }
        }
        let copy = text.clone();
        for n in 0..30 {
            let a = &text[..n];
            assert!(eq_bytes(a, &copy[..n]));
            for i in 0..n {
                let mut b = a.to_vec();
                b[i] ^= 0x80;
                assert!(!eq_bytes(a, &b), "{n} {i}");
                b[i] ^= 0x81;
                assert!(!eq_bytes(a, &b), "{n} {i}");
            }
            assert!(!eq_bytes(a, &text[..n + 1]));
        }
    }

    #[test]
    fn agrees_with_memchr() {
        // Every position of the needle (and none) in haystacks of every length up to 80,
        // over backgrounds that stress the borrow of the zero-byte test (0x00, 0x01, 0x80,
        // 0xff and bytes one off the needle).
        for len in 0..80 {
            for bg in [0u8, 1, 0x21, 0x23, 0x7f, 0x80, 0xff, b'a'] {
                for pos in (0..len).map(Some).chain([None]) {
                    let mut hay = vec![bg; len];
                    if let Some(p) = pos {
                        hay[p] = b'"';
                    }
                    assert_eq!(
                        find(b'"', &hay),
                        memchr::memchr(b'"', &hay),
                        "{len} {bg} {pos:?}"
                    );
                    for q in [None, Some(len / 3), Some(len.saturating_sub(1))] {
                        let mut h2 = hay.clone();
                        if let Some(q) = q.filter(|&q| q < len) {
                            h2[q] = b'\\';
                        }
                        let want = memchr::memchr2(b'"', b'\\', &h2);
                        assert_eq!(find2(b'"', b'\\', &h2), want, "{len} {bg} {pos:?} {q:?}");
                        assert_eq!(find2_swar(b'"', b'\\', &h2), want, "{len} {bg} {pos:?}");
                    }
                }
            }
        }
    }
}
