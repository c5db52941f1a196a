//! The forwarding headers, read from the right: `X-Forwarded-For` (comma-separated
//! addresses) and `Forwarded` (RFC 7239 elements of `name=value` pairs, values tokens or
//! quoted strings).
//!
//! Both are read hop by hop from the right-most one, and only as far as the walk needs: the
//! hops a client wrote itself lie to the left of those its proxies appended, so whatever a
//! client sends (an unterminated quote, a megabyte of junk) is never parsed unless the walk
//! reaches it. Reading `Forwarded` from the right needs its quoted strings to be found from
//! their closing quote: inside a quoted string every backslash starts a quoted pair, so a
//! quote preceded by an odd run of backslashes is escaped, and the first quote to the left
//! with an even run (none included) opens the string. `tests` checks this reverse reading
//! against a plain left-to-right parser.

use super::addr::{parse_node, trim, Node, MAX_NODE};

/// Header lines kept per header: the last ones (the right-most hops live there).
pub(crate) const MAX_LINES: usize = 8;

/// The forwarding headers of one request, collected from its header lines by
/// [`push`](Self::push) (or [`forwarded`](Self::forwarded) and
/// [`x_forwarded_for`](Self::x_forwarded_for)), in the order the lines came. Nothing is
/// copied: the values are borrowed from the request.
///
/// ```
/// use sluicegate::client::ForwardingHeaders;
/// let mut h = ForwardingHeaders::new();
/// h.push(b"X-Forwarded-For", b"198.51.100.9, 10.0.0.2");
/// h.push(b"content-type", b"text/plain"); // not a forwarding header: ignored
/// assert!(h.any());
/// ```
#[derive(Clone, Debug)]
pub struct ForwardingHeaders<'a> {
    pub(crate) forwarded: Lines<'a>,
    pub(crate) xff: Lines<'a>,
    /// Whether an `X-Real-IP` line came (never read: only the misconfiguration check looks).
    pub(crate) x_real_ip: bool,
}

/// The last [`MAX_LINES`] lines of one header, oldest first, and whether older ones were
/// dropped.
#[derive(Clone, Debug)]
pub(crate) struct Lines<'a> {
    kept: [&'a [u8]; MAX_LINES],
    n: usize,
    pub(crate) dropped: bool,
}

impl<'a> Lines<'a> {
    const fn new() -> Self {
        Self {
            kept: [&[]; MAX_LINES],
            n: 0,
            dropped: false,
        }
    }

    fn push(&mut self, v: &'a [u8]) {
        if self.n == MAX_LINES {
            self.kept.copy_within(1.., 0);
            self.kept[MAX_LINES - 1] = v;
            self.dropped = true;
        } else {
            self.kept[self.n] = v;
            self.n += 1;
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The lines, newest (right-most) first.
    fn newest_first(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        self.kept[..self.n].iter().rev().copied()
    }
}

/// No forwarding header, as a constant (nothing to initialise on each request).
pub(crate) static NONE: ForwardingHeaders<'static> = ForwardingHeaders::new();

impl Default for ForwardingHeaders<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl<'a> ForwardingHeaders<'a> {
    /// No header yet.
    pub const fn new() -> Self {
        Self {
            forwarded: Lines::new(),
            xff: Lines::new(),
            x_real_ip: false,
        }
    }

    /// Takes one header line: `Forwarded`, `X-Forwarded-For` and `X-Real-IP` (names in any
    /// case) are kept, every other name is ignored. Returns whether the line was kept.
    pub fn push(&mut self, name: &[u8], value: &'a [u8]) -> bool {
        if name.eq_ignore_ascii_case(b"x-forwarded-for") {
            self.xff.push(value);
        } else if name.eq_ignore_ascii_case(b"forwarded") {
            self.forwarded.push(value);
        } else if name.eq_ignore_ascii_case(b"x-real-ip") {
            self.x_real_ip = true;
        } else {
            return false;
        }
        true
    }

    /// Adds a `Forwarded` line.
    pub fn forwarded(&mut self, value: &'a [u8]) -> &mut Self {
        self.forwarded.push(value);
        self
    }

    /// Adds an `X-Forwarded-For` line.
    pub fn x_forwarded_for(&mut self, value: &'a [u8]) -> &mut Self {
        self.xff.push(value);
        self
    }

    /// Whether any forwarding header came.
    pub fn any(&self) -> bool {
        !self.forwarded.is_empty() || !self.xff.is_empty() || self.x_real_ip
    }

    /// The name of a forwarding header that came, for messages (`Forwarded` first).
    pub(crate) fn first_name(&self) -> Option<&'static str> {
        if !self.forwarded.is_empty() {
            Some("Forwarded")
        } else if !self.xff.is_empty() {
            Some("X-Forwarded-For")
        } else if self.x_real_ip {
            Some("X-Real-IP")
        } else {
            None
        }
    }
}

/// One hop read from the right: a node, or a syntax error at this hop (nothing to its left is
/// read after one).
pub(crate) type Hop<'a> = Result<Node<'a>, Malformed>;

/// A forwarding header that cannot be read at the hop the walk needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Malformed;

/// The hops of `X-Forwarded-For`, right-most first. Empty list elements (`a,,b`) are skipped,
/// as RFC 9110's list rule asks.
pub(crate) fn xff_hops<'l, 'a>(lines: &'l Lines<'a>) -> impl Iterator<Item = Hop<'a>> + 'l {
    lines.newest_first().flat_map(|line| {
        line.rsplit(|&c| c == b',')
            .filter(|e| !trim(e).is_empty())
            .map(|e| match parse_node(e) {
                Node::Invalid => Err(Malformed),
                n => Ok(n),
            })
    })
}

/// The `for=` hops of `Forwarded`, right-most first (an element without `for` is a hop of
/// [`Node::Unknown`]); after the first syntax error the iterator yields that error and ends.
pub(crate) fn forwarded_hops<'l, 'a>(lines: &'l Lines<'a>) -> ForwardedHops<'l, 'a> {
    ForwardedHops {
        lines: lines.kept[..lines.n].iter().rev(),
        line: &[],
        end: 0,
        done: false,
    }
}

pub(crate) struct ForwardedHops<'l, 'a> {
    lines: core::iter::Rev<core::slice::Iter<'l, &'a [u8]>>,
    line: &'a [u8],
    /// Where the unread part of `line` ends.
    end: usize,
    done: bool,
}

impl<'a> Iterator for ForwardedHops<'_, 'a> {
    type Item = Hop<'a>;

    fn next(&mut self) -> Option<Hop<'a>> {
        loop {
            if self.done {
                return None;
            }
            if self.end == 0 {
                self.line = *self.lines.next()?;
                self.end = self.line.len();
                if self.end == 0 {
                    continue;
                }
            }
            let line = self.line;
            let Some(start) = element_start(line, self.end) else {
                self.done = true;
                return Some(Err(Malformed));
            };
            let element = &line[start..self.end];
            // `start` is 0 or just after a comma.
            self.end = start.saturating_sub(1);
            if start == 0 {
                self.end = 0;
            }
            if trim(element).is_empty() {
                continue; // an empty list element
            }
            let hop = for_node(element);
            if hop.is_err() {
                self.done = true;
            }
            return Some(hop);
        }
    }
}

/// Where the element that ends at `end` starts: just after the nearest comma to its left
/// outside quoted strings, or 0. `None` on a quote that cannot close a string there.
fn element_start(s: &[u8], end: usize) -> Option<usize> {
    let mut i = end;
    while i > 0 {
        match s[i - 1] {
            b',' => return Some(i),
            b'"' => {
                // A closing quote: not itself escaped (an escaped quote outside a string is
                // a syntax error).
                if backslashes_before(s, i - 1) % 2 == 1 {
                    return None;
                }
                let mut j = i - 1;
                loop {
                    if j == 0 {
                        return None; // never opened
                    }
                    j -= 1;
                    if s[j] == b'"' && backslashes_before(s, j) % 2 == 0 {
                        break;
                    }
                }
                i = j;
            }
            _ => i -= 1,
        }
    }
    Some(0)
}

/// The run of backslashes just before `at`.
fn backslashes_before(s: &[u8], at: usize) -> usize {
    s[..at].iter().rev().take_while(|&&c| c == b'\\').count()
}

/// The `for` node of one element (`pair *( ";" pair )`, spaces allowed around pairs), read
/// left to right; [`Node::Unknown`] when the element has no `for`, a syntax error when any
/// pair is not `token=value` or the `for` value is not a node.
fn for_node(element: &[u8]) -> Hop<'_> {
    let mut found: Option<Node<'_>> = None;
    let mut rest = element;
    loop {
        let (pair, more) = split_pair(rest)?;
        let pair = trim(pair);
        if !pair.is_empty() {
            let eq = pair.iter().position(|&c| c == b'=').ok_or(Malformed)?;
            let (name, value) = (&pair[..eq], &pair[eq + 1..]);
            if name.is_empty() || !name.iter().all(|&c| is_tchar(c)) {
                return Err(Malformed);
            }
            let quoted = check_value(value)?;
            if name.eq_ignore_ascii_case(b"for") {
                if found.is_some() {
                    return Err(Malformed); // RFC 7239 5: at most once per element
                }
                found = Some(match value_node(value, quoted) {
                    Node::Invalid => return Err(Malformed),
                    n => n,
                });
            }
        }
        match more {
            Some(m) => rest = m,
            None => return Ok(found.unwrap_or(Node::Unknown)),
        }
    }
}

/// The pair before the first `;` outside quoted strings, and what follows that `;`.
fn split_pair(s: &[u8]) -> Result<(&[u8], Option<&[u8]>), Malformed> {
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b';' => return Ok((&s[..i], Some(&s[i + 1..]))),
            b'"' => i = quoted_end(s, i)?,
            _ => i += 1,
        }
    }
    Ok((s, None))
}

/// The index just past the quoted string that opens at `open`.
fn quoted_end(s: &[u8], open: usize) -> Result<usize, Malformed> {
    let mut i = open + 1;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return Ok(i + 1),
            _ => i += 1,
        }
    }
    Err(Malformed)
}

/// Checks a pair's value: a quoted string (`Ok(true)`), or a token (letters, digits and
/// ``!#$%&'*+-.^_`|~``; also `[`, `]` and `:`, which some proxies leave unquoted around
/// IPv6: `Ok(false)`).
fn check_value(v: &[u8]) -> Result<bool, Malformed> {
    match v.first() {
        Some(b'"') if quoted_end(v, 0)? == v.len() => Ok(true),
        Some(b'"') => Err(Malformed),
        Some(_)
            if v.iter()
                .all(|&c| is_tchar(c) || matches!(c, b'[' | b']' | b':')) =>
        {
            Ok(false)
        }
        _ => Err(Malformed),
    }
}

/// A checked value as a node (quoted pairs unescaped).
fn value_node(v: &[u8], quoted: bool) -> Node<'_> {
    if !quoted {
        return parse_node(v);
    }
    let inner = &v[1..v.len() - 1];
    if !inner.contains(&b'\\') {
        return parse_node(inner);
    }
    // Unescaped into a node-sized buffer: anything longer is not a node anyway. An
    // obfuscated identifier has no character that needs escaping, so a node read from the
    // buffer borrows nothing from it (`owned`).
    let mut buf = [0u8; MAX_NODE];
    let mut n = 0;
    let mut bytes = inner.iter();
    while let Some(&c) = bytes.next() {
        let c = if c == b'\\' {
            match bytes.next() {
                Some(&e) => e,
                None => return Node::Invalid,
            }
        } else {
            c
        };
        let Some(slot) = buf.get_mut(n) else {
            return Node::Invalid;
        };
        *slot = c;
        n += 1;
    }
    owned(parse_node(&buf[..n]))
}

/// A node that borrows nothing (every kind but an obfuscated identifier, which is refused).
fn owned<'b>(n: Node<'_>) -> Node<'b> {
    match n {
        Node::Ip(ip) => Node::Ip(ip),
        Node::Unknown => Node::Unknown,
        Node::Obfuscated(_) | Node::Invalid => Node::Invalid,
    }
}

/// RFC 9110 `tchar`.
fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::IpAddr;

    fn lines<'a>(vs: &[&'a str]) -> Lines<'a> {
        let mut l = Lines::new();
        for v in vs {
            l.push(v.as_bytes());
        }
        l
    }

    fn ip(s: &str) -> Node<'static> {
        Node::Ip(s.parse::<IpAddr>().unwrap())
    }

    #[test]
    fn xff_right_to_left() {
        let l = lines(&["198.51.100.9, 10.0.0.1", " ,10.0.0.2 ,"]);
        let got: Vec<_> = xff_hops(&l).collect();
        assert_eq!(
            got,
            vec![
                Ok(ip("10.0.0.2")),
                Ok(ip("10.0.0.1")),
                Ok(ip("198.51.100.9"))
            ]
        );
        let l = lines(&["junk, 10.0.0.1"]);
        let mut it = xff_hops(&l);
        assert_eq!(it.next(), Some(Ok(ip("10.0.0.1"))));
        assert_eq!(it.next(), Some(Err(Malformed)));
    }

    #[test]
    fn forwarded_rfc7239_examples() {
        let l = lines(&[
            "for=\"_gazonk\"",
            "For=\"[2001:db8:cafe::17]:4711\"",
            "for=192.0.2.60;proto=http;by=203.0.113.43",
            "for=192.0.2.43, for=198.51.100.17",
        ]);
        let got: Vec<_> = forwarded_hops(&l).collect();
        assert_eq!(
            got,
            vec![
                Ok(ip("198.51.100.17")),
                Ok(ip("192.0.2.43")),
                Ok(ip("192.0.2.60")),
                Ok(ip("2001:db8:cafe::17")),
                Ok(Node::Obfuscated("_gazonk")),
            ]
        );
    }

    #[test]
    fn forwarded_quoting() {
        fn one(s: &str) -> Vec<Hop<'_>> {
            let l = lines(&[s]);
            forwarded_hops(&l).collect()
        }
        // Commas and semicolons inside quoted strings do not split.
        assert_eq!(
            one(r#"for=1.2.3.4;x="a,b;c", for=5.6.7.8"#),
            vec![Ok(ip("5.6.7.8")), Ok(ip("1.2.3.4"))]
        );
        // Escaped quotes and backslashes.
        assert_eq!(
            one(r#"for="1.2.3.4";x="q\"u,o\\", for="[::1]""#),
            vec![Ok(ip("::1")), Ok(ip("1.2.3.4"))]
        );
        // Quoted pairs in the node itself are unescaped.
        assert_eq!(one(r#"for="\1\.2.3.4""#), vec![Ok(ip("1.2.3.4"))]);
        // Unquoted IPv6 in brackets (common, though not RFC 7239).
        assert_eq!(one("for=[2001:db8::1]:80"), vec![Ok(ip("2001:db8::1"))]);
        // An element without for=, and unknown.
        assert_eq!(
            one("proto=https, for=unknown"),
            vec![Ok(Node::Unknown), Ok(Node::Unknown)]
        );
        // A client's unterminated quote to the left is never read.
        assert_eq!(
            one(r#"for="1.2.3.4, for=9.9.9.9"#),
            vec![Ok(ip("9.9.9.9")), Err(Malformed)]
        );
        for bad in [
            r#"for="1.2.3.4"#,
            r#"for=1.2.3.4""#,
            "for=1.2.3.4;for=5.6.7.8",
            "for",
            "=1.2.3.4",
            "f r=1.2.3.4",
            "for=1.2.3.4 5",
            "for=a\"b\"",
            r#"for="1.2.3.4"x"#,
            r#"for=\"1.2.3.4\""#,
        ] {
            let got = one(bad);
            assert_eq!(got.last(), Some(&Err(Malformed)), "{bad:?}: {got:?}");
        }
    }

    /// A plain left-to-right reader of a whole line: split at commas outside quoted
    /// strings, each element read by `for_node`, right-most first.
    fn forward(line: &[u8]) -> Option<Vec<Hop<'_>>> {
        let mut out = Vec::new();
        let (mut i, mut start) = (0, 0);
        while i <= line.len() {
            if i == line.len() || line[i] == b',' {
                let e = &line[start..i];
                if !trim(e).is_empty() {
                    out.push(for_node(e));
                }
                start = i + 1;
                i += 1;
            } else if line[i] == b'"' {
                i = quoted_end(line, i).ok()?;
            } else {
                i += 1;
            }
        }
        out.reverse();
        Some(out)
    }

    #[test]
    fn right_to_left_agrees_with_left_to_right() {
        let parts = [
            "for=1.2.3.4",
            "for=\"[::1]:80\"",
            "x=\"a,b\"",
            "x=\"q\\\"\"",
            "x=\"\\\\\"",
            "for=_h;by=x",
            "",
            " ",
            "\"",
            "\\",
            "for=\"1,2\"",
            "by=\"\\\\\\\"\"",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            let mut line = String::new();
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let mut s = seed;
            for k in 0..(s % 5) {
                if k > 0 {
                    line.push_str(if s & 8 == 0 { ", " } else { ";" });
                }
                line.push_str(parts[(s >> 4) as usize % parts.len()]);
                s >>= 7;
            }
            let l = lines(&[line.as_str()]);
            let back: Vec<_> = forwarded_hops(&l).collect();
            match forward(line.as_bytes()) {
                // A valid line: both readers find the same hops.
                Some(fwd) if fwd.iter().all(Result::is_ok) => assert_eq!(back, fwd, "{line:?}"),
                // An invalid one: reading from the right ends on an error (reading it whole
                // without one would make every element, and so the line, valid).
                _ => assert!(
                    matches!(back.last(), Some(Err(Malformed))),
                    "{line:?}: {back:?}"
                ),
            }
        }
    }

    #[test]
    fn lines_keep_the_newest() {
        let mut h = ForwardingHeaders::new();
        for i in 0..(MAX_LINES + 3) {
            let v: &'static str = Box::leak(format!("10.0.0.{i}").into_boxed_str());
            h.push(b"X-Forwarded-For", v.as_bytes());
        }
        assert!(h.xff.dropped);
        let first = xff_hops(&h.xff).next();
        assert_eq!(first, Some(Ok(ip(&format!("10.0.0.{}", MAX_LINES + 2)))));
        assert_eq!(xff_hops(&h.xff).count(), MAX_LINES);
    }
}
