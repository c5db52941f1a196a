//! The key rule every language shares (docs/SEMANTICS.md, "Keys"): a key is a byte string. A
//! text key is its UTF-8 bytes, a byte key its bytes, and an integer key its decimal digits, so
//! that `42`, `"42"` and `b"42"` name one bucket in Python, Node and C alike (and one unit of
//! `max_keys`). Rust callers choose their own key type; the bindings all key a
//! `KeyedLimiter<Box<[u8]>>` by these bytes.

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
    use super::IntKey;

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
            i128::MIN,
            i128::MAX,
        ] {
            assert_eq!(IntKey::new(n).as_bytes(), n.to_string().as_bytes());
        }
    }
}
