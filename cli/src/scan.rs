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

/// The index of the first `a` in `hay` (as `memchr::memchr`).
#[inline(always)]
pub fn find(a: u8, hay: &[u8]) -> Option<usize> {
    let pa = LO * u64::from(a);
    let mut i = 0;
    while i + 8 <= hay.len() {
        if i >= SHORT {
            return memchr::memchr(a, &hay[i..]).map(|k| i + k);
        }
        let m = zero_byte(word(hay, i) ^ pa);
        if m != 0 {
            return Some(i + (m.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    hay[i..].iter().position(|&c| c == a).map(|k| i + k)
}

/// The index of the first `a` or `b` in `hay` (as `memchr::memchr2`).
#[inline(always)]
pub fn find2(a: u8, b: u8, hay: &[u8]) -> Option<usize> {
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
                        assert_eq!(
                            find2(b'"', b'\\', &h2),
                            memchr::memchr2(b'"', b'\\', &h2),
                            "{len} {bg} {pos:?} {q:?}"
                        );
                    }
                }
            }
        }
    }
}
