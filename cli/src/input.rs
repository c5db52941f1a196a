//! Reading traffic: files, gzip files (detected by their magic bytes) and stdin, as a stream
//! of lines read in large blocks (no copy per line), and the three line formats' field
//! extractors, written by hand: a replay spends most of its time here.

use crate::error::CliError;
use std::cell::Cell;
use std::fs::File;
use std::io::{self, Read};
use std::rc::Rc;

/// The line format of a log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Detected from the first lines (most of the first 20 non-blank ones): `{` is JSON
    /// lines, `IP - USER [TIME] "REQUEST"` the combined format, an ALB's or HAProxy's line
    /// theirs, anything else CSV with a header line; a first line that is a W3C directive
    /// (`#Version:`, `#Fields:`, ...) decides alone.
    Auto,
    /// nginx/Apache combined (or common) log format.
    Combined,
    /// One JSON object per line.
    Jsonl,
    /// Comma- (or --csv-delimiter-) separated values with a header line.
    Csv,
    /// An AWS Application Load Balancer's access log (`http 2024-05-01T12:00:00.123456Z
    /// app/... 203.0.113.7:52100 ...`).
    Alb,
    /// The W3C extended log format, as IIS and CloudFront write it: `#Fields:` lines name the
    /// fields (`date time c-ip cs-method cs-uri-stem ...`), separated by spaces or tabs.
    W3c,
    /// HAProxy's `option httplog` (or `option httplog clf`) lines, a syslog prefix before
    /// them or not.
    Haproxy,
}

/// Counts the bytes read from the underlying file (compressed bytes for gzip), for progress.
struct Counting<R> {
    inner: R,
    count: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.set(self.count.get() + n as u64);
        Ok(n)
    }
}

/// The UTF-8 byte order mark.
const BOM: [u8; 3] = [0xef, 0xbb, 0xbf];

/// A reader that drops a UTF-8 byte order mark at the start of its input (a spreadsheet's
/// CSV export begins with one: it became part of the first column's name).
struct SkipBom<R> {
    inner: R,
    /// The first bytes (up to 3), read to look for the mark: `head[at..len]` are still to be
    /// returned (none if they were the mark).
    head: [u8; 3],
    len: usize,
    at: usize,
    checked: bool,
}

impl<R: Read> SkipBom<R> {
    fn new(inner: R) -> Self {
        SkipBom {
            inner,
            head: [0; 3],
            len: 0,
            at: 0,
            checked: false,
        }
    }
}

impl<R: Read> Read for SkipBom<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.checked {
            while self.len < 3 {
                let n = self.inner.read(&mut self.head[self.len..])?;
                if n == 0 {
                    break;
                }
                self.len += n;
            }
            self.checked = true;
            if self.head[..self.len] == BOM {
                self.len = 0;
            }
        }
        if self.at < self.len {
            let n = (self.len - self.at).min(buf.len());
            buf[..n].copy_from_slice(&self.head[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        self.inner.read(buf)
    }
}

/// One input: a file, a gzip file, stdin, or an in-memory text (the embedded sample).
pub struct Source {
    pub name: String,
    pub read_bytes: Rc<Cell<u64>>,
    reader: Box<dyn Read>,
}

/// What an input starting with `head` is, when it is a compression or a text encoding that
/// is not read (gzip and UTF-8 are).
fn unread_encoding(head: &[u8]) -> Option<&'static str> {
    const KNOWN: &[(&[u8], &str)] = &[
        (b"BZh", "compressed with bzip2"),
        (&[0xfd, b'7', b'z', b'X', b'Z', 0x00], "compressed with xz"),
        (&[0x28, 0xb5, 0x2f, 0xfd], "compressed with zstd"),
        (&[0x04, 0x22, 0x4d, 0x18], "compressed with lz4"),
        (b"PK\x03\x04", "a zip archive"),
        (&[0xff, 0xfe], "UTF-16 text (little-endian)"),
        (&[0xfe, 0xff], "UTF-16 text (big-endian)"),
    ];
    KNOWN
        .iter()
        .find(|(magic, _)| head.starts_with(magic))
        .map(|(_, what)| *what)
        // bzip2's magic goes on with a block size digit: "BZh" alone is text.
        .filter(|what| {
            *what != "compressed with bzip2"
                || head.get(3).is_some_and(|d| (b'1'..=b'9').contains(d))
        })
}

impl Source {
    /// Opens `path` (`-` is stdin). Gzip is recognised by its magic bytes, whatever the name.
    pub fn open(path: &str) -> Result<Source, CliError> {
        let count = Rc::new(Cell::new(0));
        let io_err = |e: io::Error| CliError::Io {
            path: path.to_string(),
            source: e,
        };
        let raw: Box<dyn Read> = if path == "-" {
            Box::new(io::stdin().lock())
        } else {
            Box::new(File::open(path).map_err(io_err)?)
        };
        let mut raw = io::BufReader::with_capacity(
            1 << 16,
            Counting {
                inner: raw,
                count: count.clone(),
            },
        );
        let head = io::BufRead::fill_buf(&mut raw).map_err(io_err)?;
        if let Some(what) = unread_encoding(head) {
            // Read as text, it failed far from the cause ("the CSV header has one column",
            // "no time field found").
            return Err(io_err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{what}: only plain text and gzip are read (decompress or convert it first, e.g. `xzcat FILE | sluicegate replay -`)"),
            )));
        }
        let reader: Box<dyn Read> = if head.starts_with(&[0x1f, 0x8b]) {
            Box::new(SkipBom::new(flate2::bufread::MultiGzDecoder::new(raw)))
        } else {
            Box::new(SkipBom::new(raw))
        };
        Ok(Source {
            name: if path == "-" {
                "<stdin>".into()
            } else {
                path.into()
            },
            read_bytes: count,
            reader,
        })
    }

    /// A source reading a stream of unknown length (the embedded sample).
    pub fn from_reader(name: &str, reader: Box<dyn Read>) -> Source {
        let count = Rc::new(Cell::new(0));
        Source {
            name: name.into(),
            read_bytes: count.clone(),
            reader: Box::new(Counting {
                inner: reader,
                count,
            }),
        }
    }

    /// A source reading `text`.
    #[cfg(test)]
    pub fn from_bytes(name: &str, text: Vec<u8>) -> Source {
        let count = Rc::new(Cell::new(0));
        Source {
            name: name.into(),
            read_bytes: count.clone(),
            reader: Box::new(Counting {
                inner: io::Cursor::new(text),
                count,
            }),
        }
    }
}

/// The longest line read, in bytes before its `\n` (a `\r` there counts): 16 MiB. A longer
/// line is never held in memory whole: it is read through to its `\n` and reported as a
/// [`LongLine`] (an unusable line), so that one line without a newline (a truncated or
/// hostile log, a decompression bomb) costs at most this much memory and linear time.
pub const MAX_LINE: usize = 16 << 20;

// A line's field offsets are `u32` (`Span`): every line read fits.
const _: () = assert!(MAX_LINE < u32::MAX as usize);

/// The bytes of a [`LongLine`] kept for messages.
const LONG_HEAD: usize = 256;

/// A line longer than [`MAX_LINE`], skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LongLine {
    /// Its length in bytes, its `\n` excluded.
    pub len: u64,
    /// Its first bytes (up to 256), for messages.
    pub head: Vec<u8>,
    /// The `"` it holds: whether it ends a CSV record open on the lines before, or opens
    /// one that goes on, is told by their parity (exact for RFC 4180 text).
    pub quotes: u64,
}

/// What [`LineReader::next_block`] returns.
#[derive(Debug, PartialEq, Eq)]
pub enum Chunk<'a> {
    /// Complete lines, each ending with `\n` (but for an input's last line, which may lack
    /// it).
    Lines(&'a [u8]),
    /// One line longer than [`MAX_LINE`], skipped.
    Long(LongLine),
}

/// Where [`LineReader::next_range`]'s block is.
enum Next {
    /// `buf[s..e]`.
    Lines(usize, usize),
    /// That many blank lines read through before.
    Blank(usize),
    Long(LongLine),
}

/// What [`LineReader::next_block_into`] put in its buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Filled {
    /// Complete lines, as [`Chunk::Lines`], in the buffer's first bytes (this many).
    Lines(usize),
    /// One line longer than [`MAX_LINE`], skipped.
    Long(LongLine),
}

/// Lines [`LineReader::peek_lines`] read through before the first usable line: reported
/// first, in order.
enum Front {
    /// This many blank lines.
    Blank(usize),
    Long(LongLine),
}

/// Blank lines, as [`Chunk::Lines`] returns those that [`LineReader::peek_lines`] read
/// through.
static NEWLINES: [u8; 1024] = [b'\n'; 1024];

/// Lines of a source, from blocks of 1 MiB: a line is a slice of the block (no copy), its
/// `\n` and a `\r` before it removed. A line longer than a block grows the block, up to
/// [`MAX_LINE`]; a longer one is skipped ([`Chunk::Long`]).
///
/// Every byte is searched for `\n` once (a partial line is not searched again after each
/// read) and moved at most once (a partial line to the block's front).
pub struct LineReader {
    src: Source,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// `buf[start..scanned]` holds no `\n`: the search for the end of the partial line
    /// resumes at `scanned`.
    scanned: usize,
    eof: bool,
    /// Lines peek_lines read through (blank ones and long ones), before `buf[start..]`.
    front: std::collections::VecDeque<Front>,
    /// [`MAX_LINE`] (smaller in tests); the block never grows past it plus one byte.
    max_line: usize,
    /// Bytes searched for `\n` so far (tests: each once).
    #[cfg(test)]
    searched: usize,
}

const BLOCK: usize = 1 << 20;

/// What [`LineReader::refill`] did.
enum Fill {
    Read,
    Eof,
    /// The block is at its largest and full.
    Full,
}

impl LineReader {
    pub fn new(src: Source) -> Self {
        Self::with_max_line(src, MAX_LINE)
    }

    /// A reader whose lines are at most `max_line` bytes (tests).
    fn with_max_line(src: Source, max_line: usize) -> Self {
        LineReader {
            src,
            buf: vec![0; BLOCK.min(max_line + 1)],
            start: 0,
            end: 0,
            scanned: 0,
            eof: false,
            front: std::collections::VecDeque::new(),
            max_line,
            #[cfg(test)]
            searched: 0,
        }
    }

    fn io_err(&self, e: io::Error) -> CliError {
        CliError::Io {
            path: self.src.name.clone(),
            source: e,
        }
    }

    /// Reads into `buf[at..]`: the bytes read, 0 at the end.
    fn read_at(&mut self, at: usize) -> Result<usize, CliError> {
        loop {
            match self.src.reader.read(&mut self.buf[at..]) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_err(e)),
            }
        }
    }

    /// Reads more: moves the partial line to the front and fills the rest of the block,
    /// growing it (doubling, up to `max_line + 1` bytes) if the partial line fills it.
    fn refill(&mut self) -> Result<Fill, CliError> {
        if self.eof {
            return Ok(Fill::Eof);
        }
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.scanned -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() > self.max_line {
                return Ok(Fill::Full);
            }
            let n = (self.buf.len() * 2).min(self.max_line + 1);
            self.buf.resize(n, 0);
        }
        let n = self.read_at(self.end)?;
        if n == 0 {
            self.eof = true;
            return Ok(Fill::Eof);
        }
        self.end += n;
        Ok(Fill::Read)
    }

    /// Reads through the line starting at `start`, which holds no `\n` in the block: only
    /// its first bytes are kept; the block then holds what follows its `\n`.
    fn skip_long(&mut self) -> Result<LongLine, CliError> {
        let head = self.buf[self.start..self.end.min(self.start + LONG_HEAD)].to_vec();
        let mut len = (self.end - self.start) as u64;
        let quotes = |b: &[u8]| memchr::memchr_iter(b'"', b).count() as u64;
        let mut q = quotes(&self.buf[self.start..self.end]);
        (self.start, self.end) = (0, 0);
        while !self.eof {
            let n = self.read_at(0)?;
            #[cfg(test)]
            {
                self.searched += n;
            }
            if n == 0 {
                self.eof = true;
            } else if let Some(i) = memchr::memchr(b'\n', &self.buf[..n]) {
                len += i as u64;
                q += quotes(&self.buf[..i]);
                (self.start, self.end) = (i + 1, n);
                break;
            } else {
                len += n as u64;
                q += quotes(&self.buf[..n]);
            }
        }
        self.scanned = self.start;
        Ok(LongLine {
            len,
            head,
            quotes: q,
        })
    }

    /// Every complete line the buffer holds, as one slice (each line ending with `\n`, but
    /// for an input's last line, which may lack it), consumed; or a line longer than
    /// [`MAX_LINE`], skipped; `None` at the end. It reads more only when the buffer holds
    /// no complete line, so a block is up to 1 MiB of lines (a longer line grows the
    /// buffer). [`BlockLines`] splits it.
    pub fn next_block(&mut self) -> Result<Option<Chunk<'_>>, CliError> {
        Ok(match self.next_range()? {
            None => None,
            Some(Next::Blank(n)) => Some(Chunk::Lines(&NEWLINES[..n])),
            Some(Next::Long(l)) => Some(Chunk::Long(l)),
            Some(Next::Lines(s, e)) => Some(Chunk::Lines(&self.buf[s..e])),
        })
    }

    /// [`next_block`](Self::next_block)'s block, in `out`'s first bytes (`out`'s other bytes
    /// are any): a block that starts the reader's buffer, as nearly every one does, is not
    /// copied, the two buffers are exchanged (the reader's next bytes, a line's start,
    /// copied to the front of `out`'s).
    pub fn next_block_into(&mut self, out: &mut Vec<u8>) -> Result<Option<Filled>, CliError> {
        let copy = |out: &mut Vec<u8>, b: &[u8]| {
            if out.len() < b.len() {
                out.resize(b.len(), 0);
            }
            out[..b.len()].copy_from_slice(b);
            Some(Filled::Lines(b.len()))
        };
        Ok(match self.next_range()? {
            None => None,
            Some(Next::Blank(n)) => copy(out, &NEWLINES[..n]),
            Some(Next::Long(l)) => Some(Filled::Long(l)),
            // (A buffer grown for a long line stays the reader's: a block is copied from it.)
            Some(Next::Lines(s, e)) if s > 0 || self.buf.len() > BLOCK.min(self.max_line + 1) => {
                copy(out, &self.buf[s..e])
            }
            Some(Next::Lines(_, e)) => {
                // The block is buf[..e], the bytes after it buf[e..end]: the buffers change
                // hands.
                if out.len() < self.buf.len() {
                    out.resize(self.buf.len(), 0);
                }
                let rest = self.end - e;
                out[..rest].copy_from_slice(&self.buf[e..self.end]);
                std::mem::swap(&mut self.buf, out);
                self.start = 0;
                self.end = rest;
                self.scanned -= e;
                Some(Filled::Lines(e))
            }
        })
    }

    /// What [`next_block`](Self::next_block) returns, as the place of its lines.
    fn next_range(&mut self) -> Result<Option<Next>, CliError> {
        match self.front.pop_front() {
            Some(Front::Long(l)) => return Ok(Some(Next::Long(l))),
            Some(Front::Blank(k)) => {
                let n = k.min(NEWLINES.len());
                if k > n {
                    self.front.push_front(Front::Blank(k - n));
                }
                return Ok(Some(Next::Blank(n)));
            }
            None => {}
        }
        loop {
            // Only the bytes not searched yet.
            #[cfg(test)]
            {
                self.searched += self.end - self.scanned;
            }
            if let Some(i) = memchr::memrchr(b'\n', &self.buf[self.scanned..self.end]) {
                let s = self.start;
                self.start = self.scanned + i + 1;
                self.scanned = self.end;
                return Ok(Some(Next::Lines(s, self.start)));
            }
            self.scanned = self.end;
            if self.end - self.start > self.max_line {
                return Ok(Some(Next::Long(self.skip_long()?)));
            }
            match self.refill()? {
                Fill::Read => {}
                Fill::Full => return Ok(Some(Next::Long(self.skip_long()?))),
                Fill::Eof => {
                    if self.start < self.end {
                        let s = self.start;
                        self.start = self.end;
                        return Ok(Some(Next::Lines(s, self.end)));
                    }
                    return Ok(None);
                }
            }
        }
    }

    /// Up to `n` of the next non-blank lines, without consuming them (format and field
    /// detection): whole lines, from the first block and what completes its first line
    /// (up to [`MAX_LINE`]). Blank lines and lines longer than [`MAX_LINE`] before the
    /// first usable one are read through (each long one in full), and
    /// [`next_block`](Self::next_block) returns them first. Empty only for an input
    /// without a usable line.
    pub fn peek_lines(&mut self, n: usize) -> Result<Vec<Vec<u8>>, CliError> {
        // Complete lines in buf[start..start + checked], `lines` of them not blank; no `\n`
        // in buf[start + checked..start + clean] (searched already).
        let (mut checked, mut clean) = (0, 0);
        let mut lines = 0;
        loop {
            while lines < n {
                let from = self.start + clean;
                #[cfg(test)]
                {
                    self.searched += self.end - from;
                }
                let Some(i) = memchr::memchr(b'\n', &self.buf[from..self.end]) else {
                    clean = self.end - self.start;
                    break;
                };
                let line = self.start + checked..from + i;
                (checked, clean) = (from + i + 1 - self.start, from + i + 1 - self.start);
                if !is_blank(&self.buf[line]) {
                    lines += 1;
                } else if lines == 0 {
                    // A blank line before the first usable one: read through.
                    match self.front.back_mut() {
                        Some(Front::Blank(k)) => *k += 1,
                        _ => self.front.push_back(Front::Blank(1)),
                    }
                    self.start += checked;
                    (checked, clean) = (0, 0);
                }
            }
            self.scanned = self.start;
            if lines == 0 && self.end - self.start > self.max_line {
                let long = self.skip_long()?;
                self.front.push_back(Front::Long(long));
                (checked, clean) = (0, 0);
                continue;
            }
            if lines >= n || self.eof || (lines > 0 && self.end - self.start >= BLOCK / 2) {
                break;
            }
            match self.refill()? {
                Fill::Read | Fill::Eof => {}
                Fill::Full if lines == 0 => {
                    let long = self.skip_long()?;
                    self.front.push_back(Front::Long(long));
                    (checked, clean) = (0, 0);
                }
                Fill::Full => break,
            }
        }
        // The last line counts without its `\n` at the end of the input.
        let upto = if self.eof {
            self.end
        } else {
            self.start + checked
        };
        Ok(self.buf[self.start..upto]
            .split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
            .filter(|l| !is_blank(l))
            .take(n)
            .map(<[u8]>::to_vec)
            .collect())
    }
}

/// Whether a line is empty or ASCII whitespace only.
#[inline]
pub fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// The lines of a block from [`LineReader::next_block`], each with its offset in the block,
/// their `\n` and a `\r` before it removed.
pub struct BlockLines<'a> {
    block: &'a [u8],
    pos: usize,
}

impl<'a> BlockLines<'a> {
    pub fn new(block: &'a [u8]) -> Self {
        BlockLines { block, pos: 0 }
    }

    /// The lines of `block` from offset `pos` (a line's start) on.
    pub fn at(block: &'a [u8], pos: usize) -> Self {
        BlockLines { block, pos }
    }

    /// Where the next line starts (the block's length after the last).
    pub fn pos(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for BlockLines<'a> {
    type Item = (usize, &'a [u8]);

    #[inline]
    fn next(&mut self) -> Option<(usize, &'a [u8])> {
        let s = self.pos;
        let rest = self.block.get(s..).filter(|r| !r.is_empty())?;
        let (mut line, next) = match memchr::memchr(b'\n', rest) {
            Some(i) => (&rest[..i], s + i + 1),
            None => (rest, self.block.len()),
        };
        self.pos = next;
        if let [head @ .., b'\r'] = line {
            line = head;
        }
        Some((s, line))
    }
}

/// Lines [`detect`] looks at.
pub const DETECT_LINES: usize = 20;

/// The format of a log from its first non-blank lines: the format most of the first
/// [`DETECT_LINES`] look like ([`sniff`]), ties going to the earliest line's, so that one
/// malformed first line (a truncated line of a rotated log) does not decide alone. A first
/// line that reads as a CSV header (column names) decides alone: the records under it may
/// hold anything, a combined log line in a `message` column included.
pub fn detect(head: &[Vec<u8>]) -> LogFormat {
    // A W3C log's directives come first (IIS and CloudFront write them at each file's start):
    // its data lines, which hold no field names, would read as CSV.
    if head.first().is_some_and(|l| w3c_directive(l)) {
        return LogFormat::W3c;
    }
    if head
        .first()
        .is_some_and(|l| sniff(l) == LogFormat::Csv && csv_header_like(l))
    {
        return LogFormat::Csv;
    }
    let formats: Vec<LogFormat> = head.iter().take(DETECT_LINES).map(|l| sniff(l)).collect();
    let count = |f: LogFormat| formats.iter().filter(|&&g| g == f).count();
    let mut best = formats.first().copied().unwrap_or(LogFormat::Csv);
    for &f in &formats {
        if count(f) > count(best) {
            best = f;
        }
    }
    best
}

/// Whether `line` reads as a CSV header: two or more fields (split at `,`, `;` or a tab), each
/// a column name (letters, digits, `_ - .` and spaces, a letter among them, optionally
/// quoted). A log line (a truncated combined line, a record) has a `/`, `[`, `:` or a bare
/// number somewhere.
fn csv_header_like(line: &[u8]) -> bool {
    let fields: Vec<&[u8]> = line.split(|&b| matches!(b, b',' | b';' | b'\t')).collect();
    fields.len() >= 2
        && fields.iter().all(|f| {
            let f = f.trim_ascii();
            let f = f
                .strip_prefix(b"\"")
                .and_then(|f| f.strip_suffix(b"\""))
                .unwrap_or(f);
            (1..=64).contains(&f.len())
                && f.iter().any(u8::is_ascii_alphabetic)
                && f.iter()
                    .all(|&b| b.is_ascii_alphanumeric() || b"_-. ".contains(&b))
        })
}

/// The format of one line.
pub fn sniff(line: &[u8]) -> LogFormat {
    let t = line.trim_ascii_start();
    if t.starts_with(b"{") {
        return LogFormat::Jsonl;
    }
    if alb_like(t) {
        return LogFormat::Alb;
    }
    if w3c_directive(t) {
        return LogFormat::W3c;
    }
    // (Before the combined format: the clf variant behind a syslog prefix has its `[`.)
    if haproxy_like(t) {
        return LogFormat::Haproxy;
    }
    let has = |pat: &[u8]| memchr::memmem::find(t, pat).is_some();
    if has(b" [") && has(b"] \"") {
        return LogFormat::Combined;
    }
    LogFormat::Csv
}

/// Where a field's value lies in the line: `start..end`, and whether it holds escapes
/// (JSON backslashes, doubled CSV quotes) to be decoded before use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub start: u32,
    pub end: u32,
    pub escaped: bool,
}

impl Span {
    /// Offsets in a line of at most [`MAX_LINE`] bytes (which the scanners check), so
    /// lossless (`MAX_LINE < u32::MAX`, checked when compiling).
    #[inline(always)]
    fn new(start: usize, end: usize, escaped: bool) -> Span {
        Span {
            start: start as u32,
            end: end as u32,
            escaped,
        }
    }
}

/// An ALB log line: a request type, then an RFC 3339 time (`http 2024-05-01T12:`).
fn alb_like(t: &[u8]) -> bool {
    let Some(sp) = memchr::memchr(b' ', t) else {
        return false;
    };
    let time = &t[sp + 1..];
    matches!(
        &t[..sp],
        b"http" | b"https" | b"h2" | b"grpcs" | b"ws" | b"wss"
    ) && time.len() > 11
        && time[..4].iter().all(u8::is_ascii_digit)
        && time[4] == b'-'
        && time[10] == b'T'
}

/// An AWS Application Load Balancer's access log fields, in order (the AWS documentation's
/// names; `client` and `target` hold `address:port`). Fields added after these are ignored.
pub const ALB_FIELDS: [&str; ALB_LEN] = [
    "type",
    "time",
    "elb",
    "client",
    "target",
    "request_processing_time",
    "target_processing_time",
    "response_processing_time",
    "elb_status_code",
    "target_status_code",
    "received_bytes",
    "sent_bytes",
    "request",
    "user_agent",
    "ssl_cipher",
    "ssl_protocol",
    "target_group_arn",
    "trace_id",
    "domain_name",
    "chosen_cert_arn",
    "matched_rule_priority",
    "request_creation_time",
    "actions_executed",
    "redirect_url",
    "error_reason",
    "target_port_list",
    "target_status_code_list",
    "classification",
    "classification_reason",
    "conn_trace_id",
];

/// The number of ALB fields read.
pub const ALB_LEN: usize = 30;
/// The ALB fields the replay gives a role by default.
pub const ALB_TIME: usize = 1;
pub const ALB_CLIENT: usize = 3;
pub const ALB_TARGET: usize = 4;
pub const ALB_REQUEST: usize = 12;
pub const ALB_USER_AGENT: usize = 13;
pub const ALB_CREATED: usize = 21;

/// The index of the ALB field `name` (the AWS names, `client:port` as written there, and a
/// few aliases: `ip` is the client, `status` the load balancer's status).
pub fn alb_field(name: &str) -> Option<usize> {
    let n = name.to_ascii_lowercase().replace('-', "_");
    let n = match n.as_str() {
        "ip" | "client_ip" | "client:port" | "client_port" | "remote_addr" => "client",
        "target:port" | "target_port" => "target",
        "status" => "elb_status_code",
        "http_user_agent" | "ua" => "user_agent",
        "target:port_list" => "target_port_list",
        other => other,
    }
    .to_string();
    ALB_FIELDS.iter().position(|f| *f == n)
}

/// Splits an ALB line into its fields, up to field `last`: tokens separated by spaces, a
/// quoted one (`"GET https://... HTTP/1.1"`) holding spaces, with backslash escapes. `false`
/// for a line that is not one (fewer than two fields, or a quote not closed).
pub fn scan_alb(line: &[u8], last: usize, out: &mut [Option<Span>]) -> bool {
    for o in out.iter_mut() {
        *o = None;
    }
    if line.len() > MAX_LINE {
        return false; // (its offsets would not fit a Span)
    }
    let n = line.len();
    let mut i = skip_ws(line, 0);
    let mut f = 0;
    while i < n && f <= last && f < out.len() {
        if line[i] == b'"' {
            let Some((e, esc)) = quoted_end(line, i + 1) else {
                return false;
            };
            out[f] = Some(Span::new(i + 1, e, esc));
            i = e + 1;
        } else {
            let e = memchr::memchr(b' ', &line[i..]).map_or(n, |k| i + k);
            out[f] = Some(Span::new(i, e, false));
            i = e;
        }
        f += 1;
        while i < n && line[i] == b' ' {
            i += 1;
        }
    }
    f >= 2 && out[ALB_TIME].is_some_and(|s| line[s.start as usize].is_ascii_digit())
}

/// An `address:port` field's address (`203.0.113.7:52100`, `2001:db8::1:52100`,
/// `[2001:db8::1]:52100`); the field as it is when it has no port.
pub fn strip_port(v: &[u8]) -> &[u8] {
    if let Some(rest) = v.strip_prefix(b"[") {
        return memchr::memchr(b']', rest).map_or(v, |e| &rest[..e]);
    }
    match memchr::memrchr(b':', v) {
        // The part before the last colon is the address when it reads as one (an IPv6
        // address is followed by a port there too: the ALB always logs one).
        Some(c)
            if c + 1 < v.len()
                && v[c + 1..].iter().all(u8::is_ascii_digit)
                && std::str::from_utf8(&v[..c])
                    .is_ok_and(|h| h.parse::<std::net::IpAddr>().is_ok()) =>
        {
            &v[..c]
        }
        _ => v,
    }
}

/// The W3C extended log format's directives (IIS, CloudFront): `#Version: 1.0`, `#Fields:
/// date time ...`, ... A line starting with one of them.
pub fn w3c_directive(line: &[u8]) -> bool {
    const NAMES: [&[u8]; 7] = [
        b"#Version:",
        b"#Fields:",
        b"#Software:",
        b"#Date:",
        b"#Remark:",
        b"#Start-Date:",
        b"#End-Date:",
    ];
    let t = line.trim_ascii_start();
    NAMES
        .iter()
        .any(|n| t.len() >= n.len() && t[..n.len()].eq_ignore_ascii_case(n))
}

/// The field names of a W3C `#Fields:` directive, in lower case (`cs(User-Agent)` is
/// `cs(user-agent)`); `None` for another line.
pub fn w3c_fields(line: &[u8]) -> Option<Vec<String>> {
    let t = line.trim_ascii_start();
    let rest = t
        .get(..8)
        .filter(|p| p.eq_ignore_ascii_case(b"#Fields:"))
        .map(|_| &t[8..])?;
    Some(
        rest.split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty())
            .map(|f| String::from_utf8_lossy(f).to_ascii_lowercase())
            .collect(),
    )
}

/// Splits a W3C data line into its fields: at each tab if it holds one (CloudFront writes
/// tabs), else at each space (IIS: a space in a value is written `+`). `false` for a line
/// longer than [`MAX_LINE`].
pub fn split_w3c(line: &[u8], cols: &mut Vec<Span>) -> bool {
    let sep = if memchr::memchr(b'\t', line).is_some() {
        b'\t'
    } else {
        b' '
    };
    split_w3c_at(line, sep, cols)
}

/// Splits a W3C data line into its fields at each `sep` (a tab or a space). `false` for a
/// line longer than [`MAX_LINE`].
pub fn split_w3c_at(line: &[u8], sep: u8, cols: &mut Vec<Span>) -> bool {
    cols.clear();
    if line.len() > MAX_LINE {
        return false; // (its offsets would not fit a Span)
    }
    // (A byte loop: the fields are short, and memchr's set-up for each costs more.)
    let mut s = 0;
    for (e, &b) in line.iter().enumerate() {
        if b == sep {
            cols.push(Span::new(s, e, false));
            s = e + 1;
        }
    }
    cols.push(Span::new(s, line.len(), false));
    true
}

/// Decodes `%XX` (`marker` `%`) or HAProxy's `#XX` (`marker` `#`) escapes into `out`
/// (cleared); a marker not followed by two hex digits is kept as it is.
pub fn decode_hex_escapes(s: &[u8], marker: u8, out: &mut Vec<u8>) {
    out.clear();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if b == marker {
            if let (Some(h), Some(l)) = (
                s.get(i + 1).and_then(|&b| hex(b)),
                s.get(i + 2).and_then(|&b| hex(b)),
            ) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
}

/// An HAProxy `option httplog` line's fields, by name, in order (`client` holds
/// `address:port`; `request_headers` and `response_headers` the captured headers' blocks,
/// `{...}`), then `client_port`, the client's port alone. After them, `hdr0`, `hdr1`, ...:
/// the captured request headers, in the order of the frontend's `capture request header`
/// lines.
pub const HAPROXY_FIELDS: [&str; HAPROXY_NAMED] = [
    "client",
    "request_date",
    "frontend",
    "backend",
    "server",
    "timers",
    "status",
    "bytes",
    "request_cookie",
    "response_cookie",
    "termination_state",
    "connections",
    "queues",
    "request_headers",
    "response_headers",
    "request",
    "client_port",
];

/// The number of named HAProxy fields.
pub const HAPROXY_NAMED: usize = 17;
/// Captured request headers read (`hdr0` to `hdr63`).
pub const HAPROXY_HDRS: usize = 64;
/// The number of HAProxy fields: the named ones, then the captured request headers.
pub const HAPROXY_LEN: usize = HAPROXY_NAMED + HAPROXY_HDRS;
/// The HAProxy fields the replay gives a role by default.
pub const HAPROXY_CLIENT: usize = 0;
pub const HAPROXY_TIME: usize = 1;
pub const HAPROXY_STATUS: usize = 6;
pub const HAPROXY_BYTES: usize = 7;
pub const HAPROXY_REQ_HEADERS: usize = 13;
pub const HAPROXY_RES_HEADERS: usize = 14;
pub const HAPROXY_REQUEST: usize = 15;
pub const HAPROXY_CLIENT_PORT: usize = 16;
pub const HAPROXY_HDR0: usize = HAPROXY_NAMED;

/// The index of the HAProxy field `name` (the names of [`HAPROXY_FIELDS`], `hdrN`, and a few
/// aliases: `ip` is the client; `time`, and `accept_date` (the bracketed date's name in older
/// versions' documentation, `%t`), the request date).
pub fn haproxy_field(name: &str) -> Option<usize> {
    let n = name.to_ascii_lowercase().replace('-', "_");
    if let Some(i) = n.strip_prefix("hdr").and_then(|d| d.parse::<usize>().ok()) {
        return (i < HAPROXY_HDRS && n == format!("hdr{i}")).then_some(HAPROXY_HDR0 + i);
    }
    let n = match n.as_str() {
        "ip" | "client_ip" | "src" => "client",
        "time" | "date" | "timestamp" | "accept_date" => "request_date",
        "status_code" => "status",
        "bytes_read" => "bytes",
        "http_request" => "request",
        "captured_request_headers" => "request_headers",
        "captured_response_headers" => "response_headers",
        "captured_request_cookie" => "request_cookie",
        "captured_response_cookie" => "response_cookie",
        other => other,
    };
    HAPROXY_FIELDS.iter().position(|f| *f == n)
}

/// Where an HAProxy log's message starts (after any syslog prefix: `Feb  6 12:14:14 host
/// haproxy[14389]: `, RFC 5424's `<134>1 2024-... - haproxy 266980 - - `, a bare priority
/// glued to it, `<134>`, as `log stdout format short` writes, none on stdout),
/// and whether it is `option httplog clf`'s: the client address, and the `[` of the date
/// that follows it (`[06/Feb/2009:` after one token, or after `- - ` in the clf variant).
fn haproxy_start(line: &[u8]) -> Option<(usize, usize, bool)> {
    let date = |d: &[u8]| {
        d.len() >= 12
            && d[..2].iter().all(u8::is_ascii_digit)
            && d[2] == b'/'
            && d[3..6].iter().all(u8::is_ascii_alphabetic)
            && d[6] == b'/'
            && d[7..11].iter().all(u8::is_ascii_digit)
            && d[11] == b':'
    };
    for b in memchr::memchr_iter(b'[', line) {
        if b < 2 || line[b - 1] != b' ' || !date(&line[b + 1..]) {
            continue;
        }
        // The token before `end`, after a bare syslog priority glued to it (`<134>10.0.1.2:`:
        // `log stdout format short` or `priority`).
        let token_start = |end: usize| {
            let s = memchr::memrchr(b' ', &line[..end]).map_or(0, |i| i + 1);
            let t = &line[s..end];
            match (t.first(), memchr::memchr(b'>', t)) {
                (Some(b'<'), Some(k))
                    if (2..=4).contains(&k) && t[1..k].iter().all(u8::is_ascii_digit) =>
                {
                    s + k + 1
                }
                _ => s,
            }
        };
        // `ADDR - - [` (clf) or `ADDR:PORT [`.
        if line[..b].ends_with(b" - - ") {
            let s = token_start(b - 5);
            return (s < b - 5).then_some((s, b, true));
        }
        let s = token_start(b - 1);
        return (s < b - 1).then_some((s, b, false));
    }
    None
}

/// An HAProxy HTTP log line (a syslog prefix before it or not). An `option httplog clf`
/// line is one only behind a syslog prefix naming haproxy, or a bare syslog priority
/// (`<134>`, HAProxy's `log stdout format short`): alone, or another program's, it is a
/// combined line.
fn haproxy_like(line: &[u8]) -> bool {
    let mut out = [None; HAPROXY_NAMED];
    let bare_priority = |p: &[u8]| {
        p.len() >= 3
            && p[0] == b'<'
            && p[p.len() - 1] == b'>'
            && p[1..p.len() - 1].iter().all(u8::is_ascii_digit)
    };
    match haproxy_start(line) {
        Some((s, _, true))
            if memchr::memmem::find(&line[..s], b"haproxy").is_none()
                && !bare_priority(&line[..s]) =>
        {
            false
        }
        Some(_) => scan_haproxy(line, HAPROXY_REQUEST, &mut out),
        None => false,
    }
}

/// Scans an HAProxy `option httplog` line (`10.0.1.2:33317 [06/Feb/2009:12:14:14.655]
/// http-in static/srv1 10/0/30/69/109 200 2750 - - ---- 1/1/1/1/0 0/0 {1wt.eu} {}
/// "GET /index.html HTTP/1.1"`, after any syslog prefix) or an `option httplog clf` one,
/// filling the fields of [`HAPROXY_FIELDS`] up to `last` (`hdrN` split from the first
/// `{...}` block when wanted). A span holding `#` is marked escaped (HAProxy writes `"`,
/// `#`, non-printable bytes and, in captured headers, `{|}` as `#XX`). `false` for a line
/// that is not one (a TCP log line, HAProxy's own messages).
pub fn scan_haproxy(line: &[u8], last: usize, out: &mut [Option<Span>]) -> bool {
    // (Only the slots up to `last` are read; the captured headers' are set up to it.)
    let read = out.len().min(last.max(HAPROXY_REQ_HEADERS) + 1);
    for o in out[..read].iter_mut() {
        *o = None;
    }
    if line.len() > MAX_LINE {
        return false; // (its offsets would not fit a Span)
    }
    let Some((s, b, clf)) = haproxy_start(line) else {
        return false;
    };
    // A field HAProxy may escape (`#XX`: the captured headers, the request line), and one
    // it writes as it is (names, numbers, flags).
    let span = |a: usize, e: usize| {
        let esc = memchr::memchr(b'#', &line[a..e]).is_some();
        Some(Span::new(a, e, esc))
    };
    let plain = |a: usize, e: usize| Some(Span::new(a, e, false));
    let set = |out: &mut [Option<Span>], i: usize, v: Option<Span>| {
        if let Some(o) = out.get_mut(i) {
            *o = v;
        }
    };
    if clf {
        // `%{+Q}o %{-Q}ci - - [%trg] %r %ST %B "" "" %cp %ms %ft %b %s %TR %Tw %Tc %Tr %Ta
        // %tsc %ac %fc %bc %sc %rc %sq %bq %CC %CS %hrl %hsl`: the combined format's fields,
        // then HAProxy's, a column each (strings quoted).
        let mut c = [None; COMBINED_LEN];
        if !scan_combined(&line[s..], 11, &mut c) {
            return false;
        }
        let at = |v: Option<Span>| v.and_then(|v| span(s + v.start as usize, s + v.end as usize));
        set(out, HAPROXY_CLIENT, at(c[0]));
        set(out, HAPROXY_TIME, at(c[3]));
        set(out, HAPROXY_REQUEST, at(c[4]));
        set(out, HAPROXY_STATUS, at(c[8]));
        set(out, HAPROXY_BYTES, at(c[9]));
        if let Some(ua) = c[11] {
            haproxy_clf_columns(line, s + ua.end as usize + 1, last, out);
        }
        return true;
    }
    let n = line.len();
    // `address:port` (`unix:1` for a UNIX socket).
    let client = &line[s..b - 1];
    match memchr::memrchr(b':', client) {
        Some(c) if c + 1 < client.len() && client[c + 1..].iter().all(u8::is_ascii_digit) => {
            set(out, HAPROXY_CLIENT_PORT, plain(s + c + 1, b - 1));
        }
        _ => return false,
    }
    set(out, HAPROXY_CLIENT, plain(s, b - 1));
    let Some(close) = memchr::memchr(b']', &line[b..]).map(|k| b + k) else {
        return false;
    };
    set(out, HAPROXY_TIME, plain(b + 1, close));
    // frontend backend/server timers status bytes cookie cookie state conns queues: one
    // token each, single spaces between.
    let mut i = close + 1;
    let mut f = 2;
    while f <= 12 {
        if line.get(i) != Some(&b' ') {
            return false;
        }
        i += 1;
        // (Short tokens: a loop, not memchr's set-up for each.)
        let e = line[i..]
            .iter()
            .position(|&c| c == b' ')
            .map_or(n, |k| i + k);
        let slash = || line[i..e].iter().position(|&c| c == b'/').map(|k| i + k);
        // (Not a quoted field: a combined line's request after its date.)
        if e == i || line[i] == b'"' || (f == 5 && slash().is_none()) {
            return false;
        }
        if f == 3 {
            // backend/server
            let Some(sl) = slash() else {
                return false;
            };
            set(out, 3, plain(i, sl));
            set(out, 4, plain(sl + 1, e));
            f = 5;
        } else {
            set(out, f, plain(i, e));
            f += 1;
        }
        i = e;
    }
    // The captured headers' blocks (request, then response), if any, then the quoted
    // request (its `"` written `#22`: it ends at the next quote).
    let mut block = HAPROXY_REQ_HEADERS;
    loop {
        if line.get(i) != Some(&b' ') {
            return false;
        }
        i += 1;
        match line.get(i) {
            Some(b'{') if block <= HAPROXY_RES_HEADERS => {
                let Some(e) = memchr::memchr(b'}', &line[i..]).map(|k| i + k) else {
                    return false;
                };
                set(out, block, span(i + 1, e));
                block += 1;
                i = e + 1;
            }
            Some(b'"') => {
                let Some(e) = memchr::memchr(b'"', &line[i + 1..]).map(|k| i + 1 + k) else {
                    return false;
                };
                set(out, HAPROXY_REQUEST, span(i + 1, e));
                break;
            }
            _ => return false,
        }
    }
    // One captured request header block only: taken as the request's (HAProxy writes the
    // response's alone, as `{...}` too, when only response headers are captured).
    if last >= HAPROXY_HDR0 {
        if let Some(h) = out[HAPROXY_REQ_HEADERS] {
            let (a, e) = (h.start as usize, h.end as usize);
            let mut from = a;
            let ends = memchr::memchr_iter(b'|', &line[a..e])
                .map(|p| a + p)
                .chain(std::iter::once(e));
            for (slot, sep) in (HAPROXY_HDR0..=last).zip(ends) {
                set(out, slot, span(from, sep));
                from = sep + 1;
            }
        }
    }
    true
}

/// The columns of HAProxy's clf variant, from %cp to %CS, before the captured headers.
const CLF_COLUMNS: usize = 20;

/// An `option httplog clf` line's HAProxy columns, from `i` (after the combined format's
/// `"" ""`): `%cp %ms %ft %b %s %TR %Tw %Tc %Tr %Ta %tsc %ac %fc %bc %sc %rc %sq %bq %CC %CS`,
/// then each captured header, quoted, the request's then the response's (`%hrl %hsl`).
/// The timers, connections and queues are their columns, the spaces between them kept; a
/// column cut off (a syslog line's length limit) and those after it are none.
fn haproxy_clf_columns(line: &[u8], mut i: usize, last: usize, out: &mut [Option<Span>]) {
    let n = line.len();
    let hdrs = (last + 1).saturating_sub(HAPROXY_HDR0);
    let mut cols = [None; CLF_COLUMNS];
    let mut k = 0;
    while k < CLF_COLUMNS + hdrs {
        while line.get(i) == Some(&b' ') {
            i += 1;
        }
        if i >= n {
            break;
        }
        let (a, e, next) = if line[i] == b'"' {
            let Some(q) = memchr::memchr(b'"', &line[i + 1..]) else {
                break;
            };
            (i + 1, i + 1 + q, i + 2 + q)
        } else {
            let e = memchr::memchr(b' ', &line[i..]).map_or(n, |q| i + q);
            (i, e, e)
        };
        let v = Span::new(a, e, memchr::memchr(b'#', &line[a..e]).is_some());
        if k < CLF_COLUMNS {
            cols[k] = Some(v);
        } else if let Some(o) = out.get_mut(HAPROXY_HDR0 + k - CLF_COLUMNS) {
            *o = Some(v);
        }
        k += 1;
        i = next;
    }
    // Columns `a..=b` as one field.
    let range = |a: usize, b: usize| match (cols[a], cols[b]) {
        (Some(x), Some(y)) => Some(Span::new(x.start as usize, y.end as usize, false)),
        _ => None,
    };
    for (field, v) in [
        (HAPROXY_CLIENT_PORT, cols[0]),
        (2, cols[2]),
        (3, cols[3]),
        (4, cols[4]),
        (5, range(5, 9)),
        (10, cols[10]),
        (11, range(11, 15)),
        (12, range(16, 17)),
        (8, cols[18]),
        (9, cols[19]),
    ] {
        if let Some(o) = out.get_mut(field) {
            *o = v;
        }
    }
}

/// Whether `line` is an `option httplog clf` line (its client, `- - [`, its date).
pub fn haproxy_clf(line: &[u8]) -> bool {
    matches!(haproxy_start(line), Some((_, _, true)))
}

/// The combined format's fields, by name (nginx variable names are aliases). The last,
/// `x_forwarded_for`, is the quoted field nginx's stock `main` format writes after the
/// User-Agent (`"$http_x_forwarded_for"`); a line without it is a combined line all the same.
pub const COMBINED_FIELDS: [&str; COMBINED_LEN] = [
    "ip",
    "ident",
    "user",
    "time",
    "request",
    "method",
    "path",
    "protocol",
    "status",
    "bytes",
    "referer",
    "user_agent",
    "x_forwarded_for",
    "msec",
];

/// The number of combined-format fields.
pub const COMBINED_LEN: usize = 14;

/// The index of the combined format's `x_forwarded_for` field.
pub const COMBINED_XFF: usize = 12;

/// The index of the combined format's `msec`: the line's last space-separated field, where
/// nginx users append `$msec` (the time with milliseconds) to a combined format.
pub const COMBINED_MSEC: usize = 13;

/// The index of a combined-format field name.
pub fn combined_field(name: &str) -> Option<usize> {
    let n = name.to_ascii_lowercase().replace('-', "_");
    let n = match n.as_str() {
        "remote_addr" | "client" | "client_ip" | "host" => "ip",
        "remote_user" => "user",
        "time_local" | "timestamp" => "time",
        "request_method" => "method",
        "uri" | "request_uri" | "url" => "path",
        "server_protocol" => "protocol",
        "body_bytes_sent" | "size" => "bytes",
        "http_referer" | "referrer" => "referer",
        "http_user_agent" | "agent" | "ua" => "user_agent",
        "http_x_forwarded_for" | "xff" | "forwarded_for" | "forwarded" | "http_forwarded" => {
            "x_forwarded_for"
        }
        other => other,
    };
    COMBINED_FIELDS.iter().position(|f| *f == n)
}

/// Scans one combined-format line, filling `out[i]` for the field indices of `COMBINED_FIELDS`
/// up to `last` (the largest index wanted). `false` if the line is not in the format.
/// [`COMBINED_MSEC`] is the line's last field after the others (none when the line ends with
/// a quoted field).
#[inline]
pub fn scan_combined(line: &[u8], last: usize, out: &mut [Option<Span>; COMBINED_LEN]) -> bool {
    if last < COMBINED_MSEC {
        return scan_combined_fields(line, last, out);
    }
    if !scan_combined_fields(line, COMBINED_XFF, out) {
        return false;
    }
    let end = line.len()
        - line
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_whitespace())
            .count();
    let start = memchr::memrchr(b' ', &line[..end]).map_or(0, |i| i + 1);
    out[COMBINED_MSEC] = (start < end && line[end - 1] != b'"' && line[start] != b'"')
        .then(|| Span::new(start, end, false));
    true
}

#[inline]
#[allow(clippy::needless_range_loop)] // indices are the format's field positions
fn scan_combined_fields(line: &[u8], last: usize, out: &mut [Option<Span>; COMBINED_LEN]) -> bool {
    if line.len() > MAX_LINE {
        return false; // (its offsets would not fit a Span)
    }
    let mut i = 0usize;
    let n = line.len();
    let span = |s: usize, e: usize, esc: bool| Some(Span::new(s, e, esc));
    // ip, ident, user: space-separated tokens
    for f in 0..3 {
        let s = i;
        match crate::scan::find(b' ', &line[i..]) {
            Some(k) => i += k,
            None => return false,
        }
        out[f] = span(s, i, false);
        i += 1;
        if f == last {
            return true;
        }
    }
    // [time]
    if line.get(i) != Some(&b'[') {
        return false;
    }
    let s = i + 1;
    match crate::scan::find(b']', &line[s..]) {
        Some(k) => i = s + k,
        None => return false,
    }
    out[3] = span(s, i, false);
    i += 1;
    if last == 3 {
        return true;
    }
    // "request"
    if line.get(i) != Some(&b' ') || line.get(i + 1) != Some(&b'"') {
        return false;
    }
    i += 2;
    let s = i;
    let Some((e, esc)) = quoted_end(line, i) else {
        return false;
    };
    out[4] = span(s, e, esc);
    // method path protocol inside the request
    let req = &line[s..e];
    let (mut m, mut p, mut pr) = (None, None, None);
    if let Some(a) = crate::scan::find(b' ', req) {
        m = span(s, s + a, false);
        let rest = &req[a + 1..];
        match memchr::memrchr(b' ', rest) {
            Some(b) if rest[b + 1..].starts_with(b"HTTP/") => {
                p = span(s + a + 1, s + a + 1 + b, esc);
                pr = span(s + a + 2 + b, e, false);
            }
            _ => p = span(s + a + 1, e, esc),
        }
    }
    out[5] = m;
    out[6] = p;
    out[7] = pr;
    i = e + 1;
    if last <= 7 {
        return true;
    }
    // status bytes
    for f in 8..10 {
        if line.get(i) != Some(&b' ') {
            return false;
        }
        i += 1;
        let s = i;
        let k = crate::scan::find(b' ', &line[i..]).unwrap_or(n - i);
        i += k;
        out[f] = span(s, i, false);
        if f == last {
            return true;
        }
    }
    // "referer" "user agent" (absent in the common format), and nginx `main`'s
    // "x-forwarded-for" when it is wanted (else whatever follows the agent is not read)
    for f in 10..=last.clamp(11, COMBINED_XFF) {
        out[f] = None;
        if line.get(i) != Some(&b' ') || line.get(i + 1) != Some(&b'"') {
            return true;
        }
        i += 2;
        let Some((e, esc)) = quoted_end(line, i) else {
            return false;
        };
        out[f] = span(i, e, esc);
        i = e + 1;
    }
    true
}

/// The index of the quote closing a quoted string whose content starts at `i` (backslash
/// escapes skipped), and whether it contains escapes.
#[inline(always)]
fn quoted_end(line: &[u8], mut i: usize) -> Option<(usize, bool)> {
    let mut esc = false;
    loop {
        let k = crate::scan::find2(b'"', b'\\', &line[i..])?;
        i += k;
        if line[i] == b'"' {
            return Some((i, esc));
        }
        esc = true;
        i += 2;
        if i > line.len() {
            return None;
        }
    }
}

/// A field path in a JSON object: `a` or `a.b.c` (nested objects).
pub type JsonPath = Vec<Vec<u8>>;

/// Scans a JSON object for `paths`, filling `out[i]` with path `i`'s value (strings without
/// their quotes; numbers, `true`, `false` as written; `null` as absent; objects and arrays as
/// written). Stops as soon as every top-level path is found. `false` for a malformed object.
pub fn scan_json(line: &[u8], paths: &[JsonPath], out: &mut [Option<Span>]) -> bool {
    for o in out.iter_mut() {
        *o = None;
    }
    if line.len() > MAX_LINE {
        return false; // (its offsets would not fit a Span)
    }
    if paths.len() <= 64 && paths.iter().all(|p| p.len() == 1) {
        return scan_flat(line, paths, out);
    }
    let mut left = paths.len();
    scan_object(line, skip_ws(line, 0), paths, &[], out, &mut left).is_some()
}

/// [`scan_json`] when every path is a top-level name (the usual case): one loop over the
/// object's members, which stops once each path's name has been met (its first occurrence
/// decides, `null` included). The members before that point are checked as
/// [`scan_object`] checks them.
#[inline]
fn scan_flat(l: &[u8], paths: &[JsonPath], out: &mut [Option<Span>]) -> bool {
    let mut i = skip_ws(l, 0);
    if l.get(i) != Some(&b'{') {
        return false;
    }
    i = skip_ws(l, i + 1);
    if l.get(i) == Some(&b'}') {
        return true;
    }
    let all = if paths.len() == 64 {
        u64::MAX
    } else {
        (1u64 << paths.len()) - 1
    };
    let mut found = 0u64;
    loop {
        if l.get(i) != Some(&b'"') {
            return false;
        }
        let Some((kend, _)) = quoted_end(l, i + 1) else {
            return false;
        };
        let key = &l[i + 1..kend];
        i = skip_ws(l, kend + 1);
        if l.get(i) != Some(&b':') {
            return false;
        }
        i = skip_ws(l, i + 1);
        let Some(&c) = l.get(i) else {
            return false;
        };
        let (vend, span) = match c {
            b'"' => {
                let Some((e, esc)) = quoted_end(l, i + 1) else {
                    return false;
                };
                (e + 1, Some(Span::new(i + 1, e, esc)))
            }
            b'{' | b'[' => {
                let Some(e) = skip_nested(l, i) else {
                    return false;
                };
                (e, Some(Span::new(i, e, false)))
            }
            _ => {
                let e = literal_end(l, i);
                if e == i {
                    return false;
                }
                (e, (&l[i..e] != b"null").then(|| Span::new(i, e, false)))
            }
        };
        for (pi, p) in paths.iter().enumerate() {
            if found & 1 << pi == 0 && crate::scan::eq_bytes(&p[0], key) {
                found |= 1 << pi;
                out[pi] = span;
            }
        }
        if found == all {
            return true;
        }
        i = skip_ws(l, vend);
        match l.get(i) {
            Some(b',') => i = skip_ws(l, i + 1),
            Some(b'}') => return true,
            _ => return false,
        }
    }
}

/// The end of a literal (number, `true`, `false`, `null`) starting at `i`.
#[inline(always)]
fn literal_end(l: &[u8], i: usize) -> usize {
    let mut e = i;
    while e < l.len() && !matches!(l[e], b',' | b'}' | b']' | b' ' | b'\t' | b'\r') {
        e += 1;
    }
    e
}

#[inline]
fn skip_ws(l: &[u8], mut i: usize) -> usize {
    while i < l.len() && matches!(l[i], b' ' | b'\t' | b'\r' | b'\n') {
        i += 1;
    }
    i
}

/// Scans the object starting at `i` (`{`); returns the index after its `}`, or the index
/// where scanning stopped because nothing more is wanted (`left == 0`).
fn scan_object(
    l: &[u8],
    mut i: usize,
    paths: &[JsonPath],
    prefix: &[&[u8]],
    out: &mut [Option<Span>],
    left: &mut usize,
) -> Option<usize> {
    let depth = prefix.len();
    // Whether path `p` goes through this object: its names before it are the keys on the
    // way here (`request.method` is not looked for in `req`).
    let through = |p: &JsonPath| {
        p.len() > depth
            && p[..depth]
                .iter()
                .zip(prefix)
                .all(|(a, b)| crate::scan::eq_bytes(a, b))
    };
    if l.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(l, i + 1);
    if l.get(i) == Some(&b'}') {
        return Some(i + 1);
    }
    loop {
        if l.get(i) != Some(&b'"') {
            return None;
        }
        let (kend, _) = quoted_end(l, i + 1)?;
        let key = &l[i + 1..kend];
        i = skip_ws(l, kend + 1);
        if l.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(l, i + 1);
        // Which wanted paths continue through this key?
        let mut leaf = None;
        let mut nested = false;
        for (pi, p) in paths.iter().enumerate() {
            if out[pi].is_none()
                && p.len() > depth
                && crate::scan::eq_bytes(&p[depth], key)
                && through(p)
            {
                if p.len() == depth + 1 {
                    leaf = Some(pi);
                } else {
                    nested = true;
                }
            }
        }
        let vstart = i;
        let c = *l.get(i)?;
        let (vend, span) = match c {
            b'"' => {
                let (e, esc) = quoted_end(l, i + 1)?;
                (e + 1, Some(Span::new(i + 1, e, esc)))
            }
            b'{' if nested => {
                let mut inner = prefix.to_vec();
                inner.push(key);
                let e = scan_object(l, i, paths, &inner, out, left)?;
                if *left == 0 {
                    return Some(e);
                }
                (e, None)
            }
            b'{' | b'[' => (skip_nested(l, i)?, None),
            _ => {
                let e = literal_end(l, i);
                if e == i {
                    return None;
                }
                let lit = &l[i..e];
                let span = (lit != b"null").then_some(Span::new(i, e, false));
                (e, span)
            }
        };
        if let Some(pi) = leaf {
            out[pi] = span.or(if matches!(c, b'{' | b'[') {
                Some(Span::new(vstart, vend, false))
            } else {
                None
            });
            // Every path that ends here (duplicates of one name) counts once.
            *left -= 1;
            for (pj, p) in paths.iter().enumerate() {
                if pj != pi
                    && out[pj].is_none()
                    && p.len() == depth + 1
                    && crate::scan::eq_bytes(&p[depth], key)
                    && through(p)
                {
                    out[pj] = out[pi];
                    *left -= 1;
                }
            }
            if *left == 0 {
                return Some(vend);
            }
        }
        i = skip_ws(l, vend);
        match l.get(i)? {
            b',' => i = skip_ws(l, i + 1),
            b'}' => return Some(i + 1),
            _ => return None,
        }
    }
}

/// The index after the object or array starting at `i`. Linear in its length: the next
/// `"`, `{` or `}` and the next `[` or `]` are each searched for once and kept until the scan
/// passes them (a string is skipped whole, escapes included).
fn skip_nested(l: &[u8], mut i: usize) -> Option<usize> {
    let search = |i: usize, three: bool| {
        let found = if three {
            memchr::memchr3(b'"', b'{', b'}', &l[i..])
        } else {
            memchr::memchr2(b'[', b']', &l[i..])
        };
        count_searched(found.map_or(l.len() - i, |k| k + 1));
        found.map(|k| i + k)
    };
    // The next `"`, `{` or `}`, and the next `[` or `]`, at or after `i` (`None`: none left).
    let (mut quote_or_brace, mut bracket) = (search(i, true), search(i, false));
    let mut depth = 0usize;
    loop {
        let j = match (quote_or_brace, bracket) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        match l[j] {
            b'"' => i = quoted_end(l, j + 1)?.0 + 1,
            b'{' | b'[' => {
                depth += 1;
                i = j + 1;
            }
            _ => {
                depth = depth.checked_sub(1)?;
                i = j + 1;
                if depth == 0 {
                    return Some(i);
                }
            }
        }
        if quote_or_brace.is_some_and(|p| p < i) {
            quote_or_brace = search(i, true);
        }
        if bracket.is_some_and(|p| p < i) {
            bracket = search(i, false);
        }
    }
}

#[cfg(test)]
thread_local! {
    /// Bytes [`skip_nested`] searched (tests: each at most twice, once per kind).
    pub static SEARCHED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts bytes searched (tests), nothing otherwise.
#[inline(always)]
fn count_searched(_n: usize) {
    #[cfg(test)]
    SEARCHED.with(|c| c.set(c.get() + _n));
}

/// Decodes a JSON string's escapes into `out`.
pub fn unescape_json(s: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    let mut i = 0;
    while i < s.len() {
        let b = s[i];
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let Some(&e) = s.get(i + 1) else {
            return false;
        };
        i += 2;
        match e {
            b'"' | b'\\' | b'/' => out.push(e),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'u' => {
                let hex = |at: usize| -> Option<u32> {
                    let h = s.get(at..at + 4)?;
                    u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
                };
                let Some(mut c) = hex(i) else { return false };
                i += 4;
                if (0xD800..0xDC00).contains(&c) && s.get(i..i + 2) == Some(b"\\u") {
                    if let Some(lo) = hex(i + 2).filter(|lo| (0xDC00..0xE000).contains(lo)) {
                        c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
                        i += 6;
                    }
                }
                let ch = char::from_u32(c).unwrap_or('\u{FFFD}');
                let mut tmp = [0u8; 4];
                out.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
            }
            _ => return false,
        }
    }
    true
}

/// A JSON array of strings (and numbers or literals) as one value: its items joined by `, `,
/// as HTTP joins the lines of a repeated field (RFC 9110, 5.3). Caddy and Go servers log each
/// header as such an array (`"X-Forwarded-For":["203.0.113.7"]`): the header's value is
/// `203.0.113.7`, not the array's text. `false` (and `out` unspecified) for anything else: an
/// array holding an object or an array, or one that does not parse.
pub fn join_json_array(s: &[u8], out: &mut Vec<u8>) -> bool {
    out.clear();
    if s.first() != Some(&b'[') {
        return false;
    }
    let mut i = skip_ws(s, 1);
    if s.get(i) == Some(&b']') {
        return skip_ws(s, i + 1) == s.len();
    }
    let mut item = Vec::new();
    let mut first = true;
    loop {
        if !first {
            out.extend_from_slice(b", ");
        }
        first = false;
        match s.get(i) {
            Some(b'"') => {
                let Some((e, esc)) = quoted_end(s, i + 1) else {
                    return false;
                };
                if esc {
                    if !unescape_json(&s[i + 1..e], &mut item) {
                        return false;
                    }
                    out.extend_from_slice(&item);
                } else {
                    out.extend_from_slice(&s[i + 1..e]);
                }
                i = e + 1;
            }
            Some(b'{' | b'[') | None => return false,
            Some(_) => {
                let e = literal_end(s, i);
                if e == i {
                    return false;
                }
                if &s[i..e] != b"null" {
                    out.extend_from_slice(&s[i..e]);
                }
                i = e;
            }
        }
        i = skip_ws(s, i);
        match s.get(i) {
            Some(b',') => i = skip_ws(s, i + 1),
            Some(b']') => return skip_ws(s, i + 1) == s.len(),
            _ => return false,
        }
    }
}

/// Decodes a combined-log string's backslash escapes (`\"`, `\\`, nginx's `\xHH`) into `out`.
pub fn unescape_clf(s: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'\\' && i + 1 < s.len() {
            if s[i + 1] == b'x' && i + 3 < s.len() {
                if let Ok(v) =
                    u8::from_str_radix(std::str::from_utf8(&s[i + 2..i + 4]).unwrap_or("zz"), 16)
                {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
            out.push(s[i + 1]);
            i += 2;
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
}

/// What [`scan_csv`] found in a line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CsvLine {
    /// A record: the columns wanted are filled.
    Record,
    /// Not a record: a quoted field followed by something else than the delimiter.
    Malformed,
    /// A quoted field goes on past the end of the line: RFC 4180 allows line breaks in
    /// quoted fields, and the record goes on over the next lines (read as its continuation,
    /// never as records: see [`csv_open_after`]).
    Open,
}

/// Splits one CSV record, filling `out[c]` for every column `c < out.len()`. Quoted fields
/// (RFC 4180, `""` for a quote) are handled; a record must fit on one line: one whose quoted
/// field goes on past the end of the line, in any column, is [`CsvLine::Open`].
#[inline]
pub fn scan_csv(line: &[u8], delim: u8, out: &mut [Option<Span>]) -> CsvLine {
    let n = line.len();
    if n > MAX_LINE {
        return CsvLine::Malformed; // (its offsets would not fit a Span)
    }
    // The start of the next field, or None once the record has ended.
    let mut pos = Some(0usize);
    for slot in out.iter_mut() {
        let Some(i) = pos else {
            *slot = None;
            continue;
        };
        if line.get(i) == Some(&b'"') {
            let s = i + 1;
            let mut j = s;
            let mut esc = false;
            loop {
                let Some(k) = crate::scan::find(b'"', &line[j..]) else {
                    return CsvLine::Open;
                };
                j += k;
                if line.get(j + 1) == Some(&b'"') {
                    esc = true;
                    j += 2;
                    continue;
                }
                break;
            }
            *slot = Some(Span::new(s, j, esc));
            pos = match line.get(j + 1) {
                None => None,
                Some(&d) if d == delim => Some(j + 2),
                Some(_) => return CsvLine::Malformed,
            };
        } else {
            let k = crate::scan::find(delim, &line[i..]);
            let e = k.map_or(n, |k| i + k);
            *slot = Some(Span::new(i, e, false));
            pos = k.map(|_| e + 1);
        }
    }
    // The columns after those wanted: does one open a quoted field that the line does not
    // close? (Its next line would be read as a record: text a client chose.)
    match pos {
        Some(i) if csv_open_after(line, i, delim, false) => CsvLine::Open,
        _ => CsvLine::Record,
    }
}

/// Whether a CSV line ends inside a quoted field, read from `i`: the start of a field, or a
/// point inside a quoted field if `quoted` (a line that continues a record). One search per
/// quote: only quotes matter (a quote opens a field only at its start; inside an unquoted
/// field it is text). A quoted field followed by something else than the delimiter ends
/// the record there (it is malformed).
pub fn csv_open_after(line: &[u8], mut i: usize, delim: u8, mut quoted: bool) -> bool {
    loop {
        if quoted {
            // To the quote that closes the field (`""` is a quote in it).
            loop {
                let Some(k) = crate::scan::find(b'"', &line[i..]) else {
                    return true;
                };
                i += k + 1;
                if line.get(i) != Some(&b'"') {
                    break;
                }
                i += 1;
            }
            match line.get(i) {
                Some(&d) if d == delim => i += 1,
                _ => return false,
            }
        }
        // `i` is a field's start, and no quote lies between it and the next quote, so every
        // delimiter before that quote separates fields.
        let field = i;
        loop {
            let Some(k) = crate::scan::find(b'"', &line[i..]) else {
                return false;
            };
            let q = i + k;
            i = q + 1;
            if q == field || line[q - 1] == delim {
                quoted = true;
                break;
            }
        }
    }
}

/// Decodes a quoted CSV field's doubled quotes into `out`.
pub fn unescape_csv(s: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let mut i = 0;
    while i < s.len() {
        out.push(s[i]);
        i += if s[i] == b'"' && s.get(i + 1) == Some(&b'"') {
            2
        } else {
            1
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(line: &[u8], s: Option<Span>) -> Option<&[u8]> {
        s.map(|s| &line[s.start as usize..s.end as usize])
    }

    /// A nested path is found only under its own names: `request.method` is not `req`'s
    /// `method`, nor a top-level `method` inside another object.
    #[test]
    fn nested_paths_follow_their_names() {
        let l = br#"{"req":{"method":"POST","url":"/login"},"x":{"y":{"method":"GET"}},"request":{"q":1}}"#;
        let paths: Vec<JsonPath> = ["request.method", "req.url", "req.method", "y.method"]
            .iter()
            .map(|p| p.split('.').map(|s| s.as_bytes().to_vec()).collect())
            .collect();
        let mut out = vec![None; paths.len()];
        assert!(scan_json(l, &paths, &mut out));
        assert_eq!(get(l, out[0]), None);
        assert_eq!(get(l, out[1]), Some(&b"/login"[..]));
        assert_eq!(get(l, out[2]), Some(&b"POST"[..]));
        assert_eq!(get(l, out[3]), None);
    }

    #[test]
    fn alb_lines() {
        let l = br#"http 2018-07-02T22:23:00.186641Z app/my-loadbalancer/50dc6c495c0c9188 192.168.131.39:2817 10.0.0.1:80 0.000 0.001 0.000 200 200 34 366 "GET http://www.example.com:80/ HTTP/1.1" "curl/7.46.0" - - arn:aws:elasticloadbalancing:us-east-2:123456789012:targetgroup/my-targets/73e2d6bc24d8a067 "Root=1-58337262-36d228ad5d99923122bbe354" "-" "-" 0 2018-07-02T22:22:48.364000Z "forward" "-" "-" "10.0.0.1:80" "200" "-" "-" TID_1234"#;
        assert_eq!(sniff(l), LogFormat::Alb);
        assert_eq!(detect(&[l.to_vec()]), LogFormat::Alb);
        let mut out = vec![None; ALB_LEN];
        assert!(scan_alb(l, ALB_LEN - 1, &mut out));
        let f = |i: usize| get(l, out[i]).unwrap();
        assert_eq!(f(ALB_TIME), b"2018-07-02T22:23:00.186641Z");
        assert_eq!(f(ALB_CLIENT), b"192.168.131.39:2817");
        assert_eq!(f(ALB_REQUEST), b"GET http://www.example.com:80/ HTTP/1.1");
        assert_eq!(f(ALB_USER_AGENT), b"curl/7.46.0");
        assert_eq!(f(ALB_CREATED), b"2018-07-02T22:22:48.364000Z");
        assert_eq!(f(29), b"TID_1234");
        // Up to a field only; a line that is not one.
        assert!(scan_alb(l, ALB_CLIENT, &mut out));
        assert!(out[ALB_CLIENT].is_some() && out[ALB_REQUEST].is_none());
        assert!(!scan_alb(b"http", 3, &mut out));
        assert!(!scan_alb(
            br#"http 2018-07-02T22:23:00Z x "open"#,
            5,
            &mut out
        ));
        for other in [
            &b"https x y"[..],
            b"http 2018-07-02 22:23",
            b"GET / HTTP/1.1",
        ] {
            assert_ne!(
                sniff(other),
                LogFormat::Alb,
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        assert_eq!(alb_field("client:port"), Some(ALB_CLIENT));
        assert_eq!(alb_field("Request_Creation_Time"), Some(ALB_CREATED));
        assert_eq!(alb_field("x"), None);
        for (v, want) in [
            ("203.0.113.7:52100", "203.0.113.7"),
            ("2001:db8::1:52100", "2001:db8::1"),
            ("[2001:db8::1]:52100", "2001:db8::1"),
            ("203.0.113.7", "203.0.113.7"),
            ("-", "-"),
            ("host:80", "host:80"),
        ] {
            assert_eq!(strip_port(v.as_bytes()), want.as_bytes(), "{v}");
        }
    }

    #[test]
    fn json_arrays_join_as_repeated_fields() {
        let join = |s: &str| {
            let mut out = Vec::new();
            join_json_array(s.as_bytes(), &mut out).then(|| String::from_utf8(out).unwrap())
        };
        assert_eq!(join(r#"["203.0.113.7"]"#).as_deref(), Some("203.0.113.7"));
        assert_eq!(
            join(r#"[ "198.51.100.9, 10.0.0.1" , "203.0.113.7" ]"#).as_deref(),
            Some("198.51.100.9, 10.0.0.1, 203.0.113.7")
        );
        assert_eq!(join(r#"["a\"b\u00e9"]"#).as_deref(), Some("a\"bé"));
        assert_eq!(join("[1, true, null]").as_deref(), Some("1, true, "));
        assert_eq!(join("[]").as_deref(), Some(""));
        for bad in [
            r#"[{"a":1}]"#,
            "[[1]]",
            r#"["a""#,
            r#"["a" "b"]"#,
            "[1,]",
            "x",
            r#"["a"] x"#,
        ] {
            assert_eq!(join(bad), None, "{bad}");
        }
    }

    #[test]
    fn combined_lines() {
        let l = br#"203.0.113.9 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif?x=1 HTTP/1.0" 200 2326 "http://example.com/" "Mozilla/4.08 [en] (Win98; I ;Nav)""#;
        let mut out = [None; COMBINED_LEN];
        assert!(scan_combined(l, 11, &mut out));
        let f = |i: usize| {
            std::str::from_utf8(get(l, out[i]).unwrap())
                .unwrap()
                .to_string()
        };
        assert_eq!(f(0), "203.0.113.9");
        assert_eq!(f(2), "frank");
        assert_eq!(f(3), "10/Oct/2000:13:55:36 -0700");
        assert_eq!(f(5), "GET");
        assert_eq!(f(6), "/apache_pb.gif?x=1");
        assert_eq!(f(7), "HTTP/1.0");
        assert_eq!(f(8), "200");
        assert_eq!(f(9), "2326");
        assert_eq!(f(10), "http://example.com/");
        assert_eq!(f(11), "Mozilla/4.08 [en] (Win98; I ;Nav)");
        // common format (no referer, agent), escaped quote in the request
        let l = br#"::1 - - [10/Oct/2000:13:55:36 +0000] "GET /a\"b HTTP/1.1" 404 -"#;
        assert!(scan_combined(l, 11, &mut out));
        assert_eq!(get(l, out[6]), Some(&br#"/a\"b"#[..]));
        assert!(out[6].unwrap().escaped);
        assert_eq!(out[10].map(|_| ()), None);
        assert!(!scan_combined(b"garbage", 11, &mut out));
        assert!(!scan_combined(b"1.2.3.4 - - 10/Oct/2000", 11, &mut out));
        let mut v = Vec::new();
        unescape_clf(br#"/a\"b\x41"#, &mut v);
        assert_eq!(v, br#"/a"bA"#);
    }

    /// `$msec` appended to a combined format: the line's last field.
    #[test]
    fn combined_lines_with_msec() {
        let mut out = [None; COMBINED_LEN];
        let l = br#"10.0.0.5 - - [01/May/2024:00:00:00 +0000] "GET /a HTTP/1.1" 200 512 "-" "curl/8" 1714521600.123"#;
        assert!(scan_combined(l, COMBINED_MSEC, &mut out));
        assert_eq!(get(l, out[COMBINED_MSEC]), Some(&b"1714521600.123"[..]));
        assert_eq!(get(l, out[11]), Some(&b"curl/8"[..]));
        let l = br#"10.0.0.5 - - [01/May/2024:00:00:00 +0000] "GET /a HTTP/1.1" 200 512 "-" "curl/8" "10.0.0.9" 1714521600.123 "#;
        assert!(scan_combined(l, COMBINED_MSEC, &mut out));
        assert_eq!(get(l, out[COMBINED_MSEC]), Some(&b"1714521600.123"[..]));
        assert_eq!(get(l, out[COMBINED_XFF]), Some(&b"10.0.0.9"[..]));
        // None after a quoted field.
        let l =
            br#"10.0.0.5 - - [01/May/2024:00:00:00 +0000] "GET /a HTTP/1.1" 200 512 "-" "curl 8""#;
        assert!(scan_combined(l, COMBINED_MSEC, &mut out));
        assert_eq!(out[COMBINED_MSEC], None);
        assert_eq!(combined_field("msec"), Some(COMBINED_MSEC));
    }

    /// nginx's stock `main` format: combined, then `"$http_x_forwarded_for"`. The line is a
    /// combined line whether the field is read or not, and the field is there when wanted.
    #[test]
    fn nginx_main_lines() {
        let l = br#"10.0.0.5 - - [01/May/2024:00:00:00 +0000] "GET /a HTTP/1.1" 200 512 "-" "curl/8" "192.0.2.3, 10.0.0.9""#;
        let mut out = [None; COMBINED_LEN];
        for last in [3, 7, 11] {
            assert!(scan_combined(l, last, &mut out), "{last}");
        }
        assert_eq!(get(l, out[11]), Some(&b"curl/8"[..]));
        out = [None; COMBINED_LEN];
        assert!(scan_combined(l, COMBINED_XFF, &mut out));
        assert_eq!(get(l, out[0]), Some(&b"10.0.0.5"[..]));
        assert_eq!(get(l, out[COMBINED_XFF]), Some(&b"192.0.2.3, 10.0.0.9"[..]));
        // nginx writes "-" for no header; a combined line without the field has none.
        let l = br#"10.0.0.5 - - [01/May/2024:00:00:00 +0000] "GET /a HTTP/1.1" 200 512 "-" "curl/8" "-""#;
        assert!(scan_combined(l, COMBINED_XFF, &mut out));
        assert_eq!(get(l, out[COMBINED_XFF]), Some(&b"-"[..]));
        let l =
            br#"10.0.0.5 - - [01/May/2024:00:00:00 +0000] "GET /a HTTP/1.1" 200 512 "-" "curl/8""#;
        assert!(scan_combined(l, COMBINED_XFF, &mut out));
        assert_eq!(out[COMBINED_XFF], None);
        let l = br#"10.0.0.5 - - [01/May/2024:00:00:00 +0000] "GET /a HTTP/1.1" 200 512"#;
        assert!(scan_combined(l, COMBINED_XFF, &mut out));
        assert_eq!(out[COMBINED_XFF], None);
        // An unterminated third field is not a line of the format (as for the first two).
        let l = br#"10.0.0.5 - - [01/May/2024:00:00:00 +0000] "GET /a HTTP/1.1" 200 512 "-" "curl/8" "1.2.3.4"#;
        assert!(!scan_combined(l, COMBINED_XFF, &mut out));
        for (name, i) in [
            ("http_x_forwarded_for", 12),
            ("X-Forwarded-For", 12),
            ("xff", 12),
        ] {
            assert_eq!(combined_field(name), Some(i), "{name}");
        }
    }

    fn paths(p: &[&str]) -> Vec<JsonPath> {
        p.iter()
            .map(|s| s.split('.').map(|x| x.as_bytes().to_vec()).collect())
            .collect()
    }

    #[test]
    fn json_fields() {
        let l = br#"{"ts": 1.5, "skip": {"a": [1, {"b": "}"}]}, "ip":"192.0.2.1", "h": {"x-key": "k\"1"}, "n": null, "last": true}"#;
        let p = paths(&["ip", "ts", "h.x-key", "n", "last", "missing", "skip"]);
        let mut out = vec![None; p.len()];
        assert!(scan_json(l, &p, &mut out));
        assert_eq!(get(l, out[0]), Some(&b"192.0.2.1"[..]));
        assert_eq!(get(l, out[1]), Some(&b"1.5"[..]));
        assert_eq!(get(l, out[2]), Some(&br#"k\"1"#[..]));
        assert!(out[2].unwrap().escaped);
        assert_eq!(get(l, out[3]), None);
        assert_eq!(get(l, out[4]), Some(&b"true"[..]));
        assert_eq!(get(l, out[5]), None);
        assert_eq!(get(l, out[6]), Some(&br#"{"a": [1, {"b": "}"}]}"#[..]));
        let mut v = Vec::new();
        assert!(unescape_json(br#"a\"b\u00e9\ud83d\ude00\n"#, &mut v));
        assert_eq!(v, "a\"bé😀\n".as_bytes());
        for bad in [
            &b"{"[..],
            b"[1]",
            b"{\"a\" 1}",
            b"{\"a\": }",
            b"not json",
            b"{\"a\": 1",
        ] {
            let p = paths(&["zz"]);
            let mut out = vec![None];
            assert!(
                !scan_json(bad, &p, &mut out),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        // Stops early once everything is found: trailing garbage after it is not read.
        let p = paths(&["a"]);
        let mut out = vec![None];
        assert!(scan_json(br#"{"a": 1, "b": ...."#, &p, &mut out));
    }

    #[test]
    fn json_flat_fields_agree_with_the_general_scanner() {
        let lines: [&[u8]; 5] = [
            br#"{"ts": 1.5, "skip": {"a": [1, {"b": "}"}]}, "ip":"192.0.2.1", "n": null, "last": true}"#,
            br#"  { "ip" : "2001:db8::1" , "ts":"2024-05-01T00:00:00Z","e":"a\"b" }  "#,
            br#"{}"#,
            br#"{"a":[1,2,{"c":"]"}],"ts":17}"#,
            br#"{"ts": 1, "ip": }"#,
        ];
        for l in lines {
            for names in [
                &["ip", "ts"][..],
                &["ts"],
                &["n", "last", "skip", "e"],
                &["zz", "ts"],
            ] {
                let p = paths(names);
                let (mut flat, mut general) = (vec![None; p.len()], vec![None; p.len()]);
                let ok = scan_flat(l, &p, &mut flat);
                let mut left = p.len();
                let ok2 = scan_object(l, skip_ws(l, 0), &p, &[], &mut general, &mut left).is_some();
                assert_eq!(ok, ok2, "{} {names:?}", String::from_utf8_lossy(l));
                if ok {
                    assert_eq!(flat, general, "{} {names:?}", String::from_utf8_lossy(l));
                }
            }
        }
        // A name met twice: its first occurrence decides, null included, and the scan goes on
        // to the other names.
        let l = br#"{"ip": null, "ip": "192.0.2.1", "ts": 5}"#;
        let p = paths(&["ts", "ip"]);
        let mut out = vec![None; 2];
        assert!(scan_json(l, &p, &mut out));
        assert_eq!(get(l, out[0]), Some(&b"5"[..]));
        assert_eq!(get(l, out[1]), None);
    }

    /// Skipping a nested value searches each byte at most once per delimiter kind, whatever
    /// the nesting: `["a","a",...]` searched the rest of the line for `]` at every string.
    #[test]
    fn nested_values_are_skipped_in_linear_time() {
        let n = 100_000;
        let values: [Vec<u8>; 4] = [
            [&b"["[..], &vec![&b"\"a\""[..]; n].join(&b","[..]), b"]"].concat(),
            [
                &b"{"[..],
                &vec![&b"\"a\":\"a\""[..]; n].join(&b","[..]),
                b"}",
            ]
            .concat(),
            [vec![b'['; n], vec![b']'; n]].concat(),
            [b"{\"a\":".repeat(n), b"1".to_vec(), vec![b'}'; n]].concat(),
        ];
        for v in values {
            let l = [&b"{\"x\":"[..], &v, br#","ts":17,"ip":"192.0.2.1"}"#].concat();
            for names in [&["ts", "ip"][..], &["h.k", "ts", "ip"]] {
                let p = paths(names);
                let mut out = vec![None; p.len()];
                SEARCHED.with(|c| c.set(0));
                assert!(scan_json(&l, &p, &mut out));
                let searched = SEARCHED.with(std::cell::Cell::get);
                assert!(
                    searched <= 2 * l.len(),
                    "{searched} bytes searched of {}",
                    l.len()
                );
                assert_eq!(get(&l, out[p.len() - 2]), Some(&b"17"[..]));
                assert_eq!(get(&l, out[p.len() - 1]), Some(&b"192.0.2.1"[..]));
            }
        }
    }

    /// A quoted field that goes on past its line, in any column, is told; so is where the
    /// record it opened ends, in the lines after.
    #[test]
    fn csv_records_over_several_lines_are_told() {
        let mut out = [None; 2];
        let mut scan = |l: &[u8]| scan_csv(l, b',', &mut out);
        // Beyond the columns wanted, too.
        assert_eq!(scan(br#"t,1.2.3.4,"/x"#), CsvLine::Open);
        assert_eq!(scan(br#"t,1.2.3.4,"a,""b"#), CsvLine::Open);
        assert_eq!(scan(br#"t,1.2.3.4,"/x""y",z"#), CsvLine::Record);
        assert_eq!(scan(br#"t,1.2.3.4,"",z"#), CsvLine::Record);
        // A quote inside an unquoted field is text.
        assert_eq!(scan(br#"t,1.2.3.4,/a"b,z"#), CsvLine::Record);
        assert_eq!(scan(br#"t,1.2.3.4,/a"b,"z"#), CsvLine::Open);
        // Lines continuing a record start inside a quoted field.
        let cont = |l: &[u8]| csv_open_after(l, 0, b',', true);
        assert!(!cont(br#"2024-05-01T12:00:10Z,6.6.6.6,/admin""#));
        assert!(cont(b"2024-05-01T12:00:10Z,6.6.6.6,/admin"));
        assert!(cont(b""));
        assert!(cont(br#"a""b"#));
        assert!(!cont(br#"a""b",c"#));
        assert!(!cont(b"\""));
        assert!(cont(br#"a",c,"d"#));
        assert!(!cont(br#"a",c,"d""e""#));
        // Malformed: the record ends there.
        assert!(!cont(br#"a"x,"d"#));
    }

    #[test]
    fn csv_fields() {
        let l = br#"2024-05-01T12:00:00Z,192.0.2.1,"GET ""x"", y",,last"#;
        let mut out = [None; 6];
        assert_eq!(scan_csv(l, b',', &mut out), CsvLine::Record);
        assert_eq!(get(l, out[0]), Some(&b"2024-05-01T12:00:00Z"[..]));
        assert_eq!(get(l, out[1]), Some(&b"192.0.2.1"[..]));
        assert_eq!(get(l, out[2]), Some(&br#"GET ""x"", y"#[..]));
        assert!(out[2].unwrap().escaped);
        assert_eq!(get(l, out[3]), Some(&b""[..]));
        assert_eq!(get(l, out[4]), Some(&b"last"[..]));
        assert_eq!(get(l, out[5]), None);
        let mut v = Vec::new();
        unescape_csv(br#"GET ""x"", y"#, &mut v);
        assert_eq!(v, br#"GET "x", y"#);
        let mut out = [None; 3];
        assert_eq!(scan_csv(b"a\tb", b'\t', &mut out), CsvLine::Record);
        assert_eq!(get(b"a\tb", out[1]), Some(&b"b"[..]));
        assert_eq!(scan_csv(br#""open,b"#, b',', &mut out), CsvLine::Open);
        assert_eq!(scan_csv(br#""a"b,c"#, b',', &mut out), CsvLine::Malformed);
        assert_eq!(scan_csv(b"a,", b',', &mut out), CsvLine::Record);
        assert_eq!(get(b"a,", out[1]), Some(&b""[..]));
    }

    /// Every line a reader returns, a long one as `LONG <len> <head>`.
    fn all_lines(r: &mut LineReader) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        while let Some(c) = r.next_block().unwrap() {
            match c {
                Chunk::Lines(b) => {
                    for (at, l) in BlockLines::new(b) {
                        assert_eq!(&b[at..at + l.len()], l);
                        got.push(l.to_vec());
                    }
                }
                Chunk::Long(l) => {
                    let mut v = format!("LONG {} ", l.len).into_bytes();
                    v.extend_from_slice(&l.head);
                    got.push(v);
                }
            }
        }
        got
    }

    /// [`all_lines`] by [`LineReader::next_block_into`], into buffers taken in turn from a
    /// pool of `pool` (each block's bytes checked to stay as they were until its buffer is
    /// used again).
    fn all_lines_into(r: &mut LineReader, pool: usize) -> Vec<Vec<u8>> {
        let mut bufs: Vec<(Vec<u8>, usize)> = (0..pool).map(|_| (Vec::new(), 0)).collect();
        let mut kept: Vec<Vec<u8>> = vec![Vec::new(); pool];
        let mut got = Vec::new();
        for k in 0.. {
            let i = k % pool;
            assert_eq!(&bufs[i].0[..bufs[i].1], &kept[i][..], "a block changed");
            match r.next_block_into(&mut bufs[i].0).unwrap() {
                None => break,
                Some(Filled::Lines(n)) => {
                    bufs[i].1 = n;
                    let b = &bufs[i].0[..n];
                    kept[i] = b.to_vec();
                    for (_, l) in BlockLines::new(b) {
                        got.push(l.to_vec());
                    }
                }
                Some(Filled::Long(l)) => {
                    bufs[i].1 = 0;
                    kept[i].clear();
                    let mut v = format!("LONG {} ", l.len).into_bytes();
                    v.extend_from_slice(&l.head);
                    got.push(v);
                }
            }
        }
        got
    }

    /// Blocks taken into the caller's buffers (the reader's exchanged for them) are the
    /// blocks read in place, line for line, however the reads split them, with blank and
    /// long lines before the first usable one, and a last line without its newline.
    #[test]
    fn blocks_taken_into_buffers_are_the_blocks_read() {
        let max = 1000;
        let mut text = b"\n\n".to_vec();
        text.extend_from_slice(&vec![b'x'; 3 * max]);
        text.push(b'\n');
        for i in 0..5000 {
            text.extend_from_slice(format!("line {i} {}\n", "y".repeat(i % 300)).as_bytes());
        }
        text.extend_from_slice(b"last");
        for step in [usize::MAX, 4096, 1001, 13] {
            for pool in [1, 2, 3] {
                let mut a = LineReader::with_max_line(trickle(text.clone(), step), max);
                let mut b = LineReader::with_max_line(trickle(text.clone(), step), max);
                assert_eq!(a.peek_lines(3).unwrap(), b.peek_lines(3).unwrap());
                let (want, got) = (all_lines(&mut a), all_lines_into(&mut b, pool));
                assert_eq!(got.len(), 5004, "{step} {pool}");
                assert_eq!(got, want, "{step} {pool}");
            }
        }
    }

    /// A source that returns at most `step` bytes per read (as a pipe does).
    struct Trickle(io::Cursor<Vec<u8>>, usize);

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.1);
            self.0.read(&mut buf[..n])
        }
    }

    fn trickle(text: Vec<u8>, step: usize) -> Source {
        Source::from_reader("t", Box::new(Trickle(io::Cursor::new(text), step)))
    }

    #[test]
    fn lines_across_blocks() {
        let mut text = Vec::new();
        for i in 0..300_000 {
            text.extend_from_slice(format!("line {i}\r\n").as_bytes());
        }
        text.extend_from_slice(b"no newline at the end");
        let mut r = LineReader::new(Source::from_bytes("t", text));
        assert_eq!(
            r.peek_lines(2).unwrap(),
            vec![b"line 0".to_vec(), b"line 1".to_vec()]
        );
        let got = all_lines(&mut r);
        assert_eq!(got.len(), 300_001);
        for (n, l) in got.iter().enumerate() {
            if n < 300_000 {
                assert_eq!(l, format!("line {n}").as_bytes());
            } else {
                assert_eq!(l, b"no newline at the end");
            }
        }
    }

    #[test]
    fn blocks_split_as_lines() {
        let mut text = Vec::new();
        for i in 0..300_000 {
            let end = if i % 3 == 0 { "\r\n" } else { "\n" };
            text.extend_from_slice(format!("line {i}{end}").as_bytes());
        }
        text.extend_from_slice(b"\n\r\nno newline at the end\r");
        let want: Vec<Vec<u8>> = text
            .split(|&b| b == b'\n')
            .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec())
            .collect();
        for step in [usize::MAX, 4096, 7] {
            let mut r = LineReader::new(trickle(text.clone(), step));
            let mut blocks = 0;
            let mut got = Vec::new();
            while let Some(c) = r.next_block().unwrap() {
                let Chunk::Lines(b) = c else { panic!() };
                blocks += 1;
                got.extend(BlockLines::new(b).map(|(_, l)| l.to_vec()));
            }
            assert!(blocks > 1, "{blocks} blocks");
            assert_eq!(got.len(), 300_003);
            assert_eq!(got, want);
        }
    }

    /// A line longer than the limit is read through, not held: the reader's block never
    /// grows past the limit, and the lines around it are read as usual, however the reads
    /// split them.
    #[test]
    fn lines_over_the_limit_are_skipped() {
        let max = 1000;
        let long = |c: u8, n: usize| vec![c; n];
        let mut text = Vec::new();
        for l in [
            b"first".to_vec(),
            long(b'a', max),     // at the limit: read
            long(b'b', max + 1), // one over
            b"".to_vec(),
            long(b'c', 50 * max + 7),
            b"after".to_vec(),
        ] {
            text.extend_from_slice(&l);
            text.push(b'\n');
        }
        text.extend_from_slice(&long(b'd', 3 * max)); // the last line, without a newline
        for step in [usize::MAX, 4096, 999, 1000, 1001, 13, 1] {
            let mut r = LineReader::with_max_line(trickle(text.clone(), step), max);
            // (The second line does not fit in the block beside the first.)
            assert_eq!(r.peek_lines(2).unwrap(), vec![b"first".to_vec()]);
            let got = all_lines(&mut r);
            let head = |c: u8, n: usize| {
                let mut v = format!("LONG {n} ").into_bytes();
                v.extend_from_slice(&vec![c; LONG_HEAD]);
                v
            };
            assert_eq!(
                got,
                vec![
                    b"first".to_vec(),
                    long(b'a', max),
                    head(b'b', max + 1),
                    b"".to_vec(),
                    head(b'c', 50 * max + 7),
                    b"after".to_vec(),
                    head(b'd', 3 * max),
                ],
                "step {step}"
            );
            assert!(r.buf.len() <= max + 1, "{}", r.buf.len());
        }
    }

    /// A long line arriving in small reads (a pipe gives 64 KiB at most) is searched for
    /// its end once, not again after every read.
    #[test]
    fn each_byte_is_searched_once() {
        let mut text = Vec::new();
        for n in [2 << 20, 1, 4 << 20, 10, 3 << 20, 5] {
            text.extend_from_slice(&vec![b'x'; n]);
            text.push(b'\n');
        }
        // The last one over a limit of 1 MiB, read through.
        text.extend_from_slice(&vec![b'y'; 3 << 20]);
        let total = text.len();
        for max in [MAX_LINE, 1 << 20] {
            let mut r = LineReader::with_max_line(trickle(text.clone(), 4096), max);
            // The first line (or, over the limit, the next).
            let peeked: Vec<usize> = r.peek_lines(1).unwrap().iter().map(Vec::len).collect();
            assert_eq!(peeked, [if max == MAX_LINE { 2 << 20 } else { 1 }]);
            let got: Vec<usize> = all_lines(&mut r).iter().map(Vec::len).collect();
            assert_eq!(got.len(), 7);
            // Once, and what peek_lines read again (the first line, a little more).
            assert!(
                r.searched <= total + (2 << 20) + BLOCK,
                "{} bytes searched of {total}",
                r.searched
            );
        }
    }

    /// Format and field detection see whole lines, however long (up to the limit); blank
    /// and overlong lines before the first usable one are read through and returned first.
    #[test]
    fn peeked_lines_are_whole() {
        let big = vec![b'x'; 3 * BLOCK];
        let mut text = b"\n \r\n".to_vec();
        text.extend_from_slice(&big);
        text.extend_from_slice(b"\nsecond\n");
        for step in [usize::MAX, 65536] {
            let mut r = LineReader::new(trickle(text.clone(), step));
            assert_eq!(
                r.peek_lines(5).unwrap(),
                vec![big.clone(), b"second".to_vec()]
            );
            let got = all_lines(&mut r);
            assert_eq!(
                got,
                vec![b"".to_vec(), b"".to_vec(), big.clone(), b"second".to_vec()]
            );
        }
        // Blank and long lines first, in order; nothing usable at all.
        let max = 100;
        let mut text = b"\n".to_vec();
        text.extend_from_slice(&[b'L'; 300]);
        text.extend_from_slice(b"\n\n\n");
        text.extend_from_slice(&[b'M'; 101]);
        text.extend_from_slice(b"\nok\n");
        let mut r = LineReader::with_max_line(trickle(text.clone(), 7), max);
        assert_eq!(r.peek_lines(5).unwrap(), vec![b"ok".to_vec()]);
        let got: Vec<String> = all_lines(&mut r)
            .iter()
            .map(|l| String::from_utf8_lossy(&l[..l.len().min(8)]).into_owned())
            .collect();
        assert_eq!(got, ["", "LONG 300", "", "", "LONG 101", "ok"]);
        let mut r = LineReader::with_max_line(trickle(text[..text.len() - 4].to_vec(), 7), max);
        assert!(r.peek_lines(5).unwrap().is_empty());
        assert_eq!(all_lines(&mut r).len(), 5);
    }

    fn text(l: &[u8], s: Option<Span>) -> Option<String> {
        s.map(|s| String::from_utf8_lossy(&l[s.start as usize..s.end as usize]).into_owned())
    }

    const CLOUDFRONT_FIELDS: &[u8] = b"#Fields: date time x-edge-location sc-bytes c-ip cs-method cs(Host) cs-uri-stem sc-status cs(Referer) cs(User-Agent) cs-uri-query cs(Cookie) x-edge-result-type x-edge-request-id x-host-header cs-protocol cs-bytes time-taken x-forwarded-for";

    #[test]
    fn w3c_directives_fields_and_columns() {
        assert!(w3c_directive(b"#Version: 1.0"));
        assert!(w3c_directive(
            b"#Software: Microsoft Internet Information Services 10.0"
        ));
        assert!(w3c_directive(b"#fields: date time"));
        assert!(!w3c_directive(b"# a comment"));
        assert!(!w3c_directive(b"2024-05-01 12:00:00 GET"));
        assert_eq!(
            w3c_fields(b"#Fields: date time  cs(User-Agent)\tc-ip ").unwrap(),
            ["date", "time", "cs(user-agent)", "c-ip"]
        );
        assert_eq!(w3c_fields(b"#Fields:").unwrap(), Vec::<String>::new());
        assert!(w3c_fields(b"#Version: 1.0").is_none());
        // IIS: spaces; CloudFront: tabs (a space inside a value then stays).
        let mut cols = Vec::new();
        let l = b"2024-05-01 12:00:00 GET /a - 203.0.113.7 Mozilla/5.0+(X11)";
        assert!(split_w3c(l, &mut cols));
        let got: Vec<_> = cols.iter().map(|&s| text(l, Some(s)).unwrap()).collect();
        assert_eq!(
            got,
            [
                "2024-05-01",
                "12:00:00",
                "GET",
                "/a",
                "-",
                "203.0.113.7",
                "Mozilla/5.0+(X11)"
            ]
        );
        let l = b"2024-05-01\t12:00:00\ta b\t\t-";
        assert!(split_w3c(l, &mut cols));
        let got: Vec<_> = cols.iter().map(|&s| text(l, Some(s)).unwrap()).collect();
        assert_eq!(got, ["2024-05-01", "12:00:00", "a b", "", "-"]);
        let mut v = Vec::new();
        decode_hex_escapes(b"Mozilla/5.0%20(X11;%20Linux)%2", b'%', &mut v);
        assert_eq!(v, b"Mozilla/5.0 (X11; Linux)%2");
        decode_hex_escapes(b"a#22b#7C#zz#", b'#', &mut v);
        assert_eq!(v, b"a\"b|#zz#");
    }

    #[test]
    fn w3c_logs_are_detected_by_their_directives() {
        let iis = [
            b"#Software: Microsoft Internet Information Services 10.0".to_vec(),
            b"#Version: 1.0".to_vec(),
            b"#Date: 2024-05-01 00:00:00".to_vec(),
            b"#Fields: date time s-ip cs-method cs-uri-stem cs-uri-query s-port cs-username c-ip cs(User-Agent) cs(Referer) sc-status sc-substatus sc-win32-status time-taken".to_vec(),
            b"2024-05-01 12:00:00 10.0.0.1 GET /a - 443 - 203.0.113.7 curl/8 - 200 0 0 1".to_vec(),
            b"2024-05-01 12:00:01 10.0.0.1 GET /b - 443 - 203.0.113.7 curl/8 - 200 0 0 1".to_vec(),
            b"2024-05-01 12:00:02 10.0.0.1 GET /c - 443 - 203.0.113.7 curl/8 - 200 0 0 1".to_vec(),
            b"2024-05-01 12:00:03 10.0.0.1 GET /d - 443 - 203.0.113.7 curl/8 - 200 0 0 1".to_vec(),
            b"2024-05-01 12:00:04 10.0.0.1 GET /e - 443 - 203.0.113.7 curl/8 - 200 0 0 1".to_vec(),
        ];
        // The data lines alone would vote CSV: the directives decide.
        assert_eq!(detect(&iis), LogFormat::W3c);
        assert_eq!(detect(&iis[4..]), LogFormat::Csv);
        let cf = [b"#Version: 1.0".to_vec(), CLOUDFRONT_FIELDS.to_vec()];
        assert_eq!(detect(&cf), LogFormat::W3c);
        assert_eq!(detect(&cf[1..]), LogFormat::W3c);
    }

    const HAPROXY_DOC: &[u8] = b"Feb  6 12:14:14 localhost haproxy[14389]: 10.0.1.2:33317 [06/Feb/2009:12:14:14.655] http-in static/srv1 10/0/30/69/109 200 2750 - - ---- 1/1/1/1/0 0/0 {1wt.eu} {} \"GET /index.html HTTP/1.1\"";

    fn haproxy(l: &[u8], last: usize) -> Option<Vec<Option<String>>> {
        let mut out = vec![None; HAPROXY_LEN];
        scan_haproxy(l, last, &mut out).then(|| out.iter().map(|&s| text(l, s)).collect())
    }

    #[test]
    fn haproxy_httplog_lines() {
        let f = haproxy(HAPROXY_DOC, HAPROXY_HDR0 + 1).unwrap();
        let get = |f: &[Option<String>], name: &str| f[haproxy_field(name).unwrap()].clone();
        for (name, want) in [
            ("client", "10.0.1.2:33317"),
            ("request_date", "06/Feb/2009:12:14:14.655"),
            ("frontend", "http-in"),
            ("backend", "static"),
            ("server", "srv1"),
            ("timers", "10/0/30/69/109"),
            ("status", "200"),
            ("bytes", "2750"),
            ("termination_state", "----"),
            ("connections", "1/1/1/1/0"),
            ("queues", "0/0"),
            ("request_headers", "1wt.eu"),
            ("response_headers", ""),
            ("request", "GET /index.html HTTP/1.1"),
            ("hdr0", "1wt.eu"),
        ] {
            assert_eq!(get(&f, name).as_deref(), Some(want), "{name}");
        }
        // (Only the headers up to the last wanted are split.)
        assert_eq!(get(&f, "hdr1"), None);
        let f = haproxy(HAPROXY_DOC, HAPROXY_REQUEST).unwrap();
        assert_eq!(get(&f, "hdr0"), None);
        // No syslog prefix (stdout), RFC 5424's, no captures, an IPv6 client, several
        // captured headers (spaces and escapes in them), a request HAProxy could not read,
        // and what HAProxy's httpslog appends.
        let msg = &HAPROXY_DOC[42..];
        assert!(msg.starts_with(b"10.0.1.2:"));
        assert_eq!(
            get(&haproxy(msg, 0).unwrap(), "client").unwrap(),
            "10.0.1.2:33317"
        );
        let l = b"<134>1 2024-06-20T11:47:56.817934+02:00 - haproxy 266980 - - 127.0.0.1:50516 [20/Jun/2024:11:47:56.766] mybackend mybackend/s1 0/0/24/27/51 404 379 - - ---- 1/1/0/0/0 0/0 \"GET /index.html HTTP/1.1\"";
        let f = haproxy(l, HAPROXY_HDR0 + 3).unwrap();
        assert_eq!(get(&f, "client").unwrap(), "127.0.0.1:50516");
        assert_eq!(get(&f, "request_headers"), None);
        assert_eq!(get(&f, "hdr0"), None);
        let l = b"::1:40964 [01/May/2024:12:00:00.001] fe~ be/<NOSRV> -1/-1/-1/-1/0 400 0 - - PR-- 1/1/0/0/0 0/0 {Mozilla/5.0 (X11)|a#7Cb||} {text/html} \"<BADREQ>\" 0/0/0/0/0 -/-/-";
        let f = haproxy(l, HAPROXY_HDR0 + 9).unwrap();
        assert_eq!(strip_port(get(&f, "client").unwrap().as_bytes()), b"::1");
        assert_eq!(get(&f, "server").unwrap(), "<NOSRV>");
        assert_eq!(get(&f, "hdr0").unwrap(), "Mozilla/5.0 (X11)");
        assert_eq!(get(&f, "hdr1").unwrap(), "a#7Cb");
        assert_eq!(get(&f, "hdr2").unwrap(), "");
        assert_eq!(get(&f, "hdr3").unwrap(), "");
        assert_eq!(get(&f, "hdr4"), None);
        assert_eq!(get(&f, "response_headers").unwrap(), "text/html");
        assert_eq!(get(&f, "request").unwrap(), "<BADREQ>");
        let mut out = vec![None; HAPROXY_LEN];
        assert!(scan_haproxy(l, HAPROXY_HDR0 + 1, &mut out));
        assert!(out[HAPROXY_HDR0 + 1].unwrap().escaped && !out[HAPROXY_HDR0].unwrap().escaped);
        let l = b"2001:db8::7:5000 [01/May/2024:12:00:00.001] fe be/s 0/0/0/1/1 200 1 - - ---- 1/1/0/0/0 0/0 \"GET https://x.example/a#22b HTTP/2.0\"";
        let f = haproxy(l, HAPROXY_REQUEST).unwrap();
        assert_eq!(
            strip_port(get(&f, "client").unwrap().as_bytes()),
            b"2001:db8::7"
        );
        assert_eq!(
            get(&f, "request").unwrap(),
            "GET https://x.example/a#22b HTTP/2.0"
        );
        // The clf variant, behind a syslog prefix.
        let l = b"May  1 12:00:00 lb haproxy[1]: 10.0.1.2 - - [06/Feb/2009:12:14:14 +0000] \"GET /index.html HTTP/1.1\" 200 2750 \"\" \"\" 33317 655 http-in static srv1 10 0 30 69 109 ---- 1 1 1 1 0 0 0 \"\" \"\" \"1wt.eu\" \"\"";
        let f = haproxy(l, HAPROXY_HDR0).unwrap();
        assert_eq!(get(&f, "client").unwrap(), "10.0.1.2");
        assert_eq!(
            get(&f, "request_date").unwrap(),
            "06/Feb/2009:12:14:14 +0000"
        );
        assert_eq!(get(&f, "request").unwrap(), "GET /index.html HTTP/1.1");
        assert_eq!(get(&f, "status").unwrap(), "200");
        // (Its columns: see haproxy_clf_columns.)
        assert_eq!(get(&f, "hdr0").unwrap(), "1wt.eu");
        // Not HTTP log lines: a TCP log line, HAProxy's own messages, a combined line.
        for l in [
            &b"Feb  6 12:12:56 localhost haproxy[14387]: 10.0.1.2:33313 [06/Feb/2009:12:12:51.443] fnt bck/srv1 0/0/5007 212 -- 0/0/0/0/3 0/0"[..],
            b"Feb  6 12:12:09 localhost haproxy[14385]: Proxy http-in started.",
            b"Feb  6 12:12:09 localhost haproxy[14385]: Server static/srv1 is DOWN, reason: Layer4 timeout.",
            br#"1.2.3.4 - frank [10/Oct/2000:13:55:36 -0700] "GET /a/b.gif HTTP/1.0" 200 2326 "-" "x/1""#,
        ] {
            assert!(haproxy(l, HAPROXY_LEN - 1).is_none(), "{}", String::from_utf8_lossy(l));
        }
        assert_eq!(haproxy_field("hdr63"), Some(HAPROXY_LEN - 1));
        assert_eq!(haproxy_field("hdr64"), None);
        assert_eq!(haproxy_field("hdr01"), None);
        assert_eq!(haproxy_field("IP"), Some(HAPROXY_CLIENT));
        assert_eq!(haproxy_field("status_code"), Some(HAPROXY_STATUS));
    }

    #[test]
    fn haproxy_lines_are_detected() {
        assert_eq!(sniff(HAPROXY_DOC), LogFormat::Haproxy);
        assert_eq!(sniff(&HAPROXY_DOC[42..]), LogFormat::Haproxy);
        let clf =
            br#"10.0.1.2 - - [06/Feb/2009:12:14:14 +0000] "GET / HTTP/1.1" 200 2750 "" "" 33317"#;
        // A clf line alone is a combined line (and read as one); behind HAProxy's syslog
        // prefix, HAProxy's; behind another program's, not HAProxy's.
        assert_eq!(sniff(clf), LogFormat::Combined);
        let tagged = [&b"May  1 12:00:00 lb haproxy[1]: "[..], clf].concat();
        assert_eq!(sniff(&tagged), LogFormat::Haproxy);
        let other = [&b"May  1 12:00:00 web nginx: "[..], clf].concat();
        assert_ne!(sniff(&other), LogFormat::Haproxy);
        let mut head = vec![HAPROXY_DOC.to_vec(); 5];
        head.insert(
            0,
            b"Feb  6 12:12:09 localhost haproxy[14385]: Proxy http-in started.".to_vec(),
        );
        assert_eq!(detect(&head), LogFormat::Haproxy);
    }

    /// Truncated and mangled lines are unusable, never a panic: every prefix and every line
    /// with a byte removed, of lines of each new format.
    #[test]
    fn truncated_w3c_and_haproxy_lines_do_not_panic() {
        let with_hdrs = [
            &HAPROXY_DOC[..HAPROXY_DOC.len() - 31],
            b"{a|b|c} {} \"GET / HTTP/1.1\"",
        ]
        .concat();
        let lines: [&[u8]; 4] = [
            HAPROXY_DOC,
            &with_hdrs,
            b"May  1 12:00:00 lb haproxy[1]: 10.0.1.2 - - [06/Feb/2009:12:14:14 +0000] \"GET / HTTP/1.1\" 200 2",
            b"2024-05-01\t12:00:00\tIAD89\t335\t203.0.113.7\tGET\td1.cloudfront.net\t/a\t200\t-\tcurl/8\t-\t-\tMiss\tid==\tx.example\thttps\t123\t0.1\t-",
        ];
        let mut out = vec![None; HAPROXY_LEN];
        let mut cols = Vec::new();
        for l in lines {
            for cut in 0..l.len() {
                let a = &l[..cut];
                let b = [&l[..cut], &l[cut + 1..]].concat();
                for v in [a, &b[..]] {
                    scan_haproxy(v, HAPROXY_LEN - 1, &mut out);
                    let _ = sniff(v);
                    split_w3c(v, &mut cols);
                }
            }
        }
        // A request line cut (a syslog line's length limit) is unusable.
        for l in [HAPROXY_DOC, &with_hdrs] {
            assert!(scan_haproxy(l, HAPROXY_LEN - 1, &mut out));
            assert!(!scan_haproxy(&l[..l.len() - 1], HAPROXY_LEN - 1, &mut out));
        }
    }

    #[test]
    fn sniffing() {
        assert_eq!(sniff(br#" {"a":1}"#), LogFormat::Jsonl);
        assert_eq!(
            sniff(br#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1"#),
            LogFormat::Combined
        );
        assert_eq!(sniff(b"time,ip,path"), LogFormat::Csv);
    }

    /// A UTF-8 byte order mark at the start is dropped, however the reads split it; one
    /// elsewhere, or a text shorter than it, is kept.
    #[test]
    fn a_byte_order_mark_at_the_start_is_dropped() {
        let read = |text: &[u8], step: usize| {
            let mut r = SkipBom::new(Trickle(io::Cursor::new(text.to_vec()), step));
            let mut out = Vec::new();
            r.read_to_end(&mut out).unwrap();
            out
        };
        for step in [1, 2, 3, 4, 1 << 16] {
            assert_eq!(read(b"\xef\xbb\xbftime,ip\n", step), b"time,ip\n");
            assert_eq!(read(b"time,ip\n", step), b"time,ip\n");
            assert_eq!(read(b"a\xef\xbb\xbf", step), b"a\xef\xbb\xbf");
            assert_eq!(read(b"\xef\xbb\xbf", step), b"");
            assert_eq!(read(b"\xef\xbb", step), b"\xef\xbb");
            assert_eq!(read(b"ab", step), b"ab");
            assert_eq!(read(b"", step), b"");
        }
    }

    /// One malformed first line does not decide the format: most of the first lines do.
    #[test]
    fn detection_goes_by_most_of_the_first_lines() {
        let clf = br#"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1"#.to_vec();
        let mut head = vec![br#"GET / HTTP/1.1" 200 12 "-" "curl""#.to_vec()];
        head.extend(std::iter::repeat_n(clf.clone(), 5));
        assert_eq!(detect(&head), LogFormat::Combined);
        let mut head = vec![b"garbage".to_vec()];
        head.extend(std::iter::repeat_n(br#"{"a":1}"#.to_vec(), 3));
        assert_eq!(detect(&head), LogFormat::Jsonl);
        // A CSV: its header and records all look like CSV.
        let csv = vec![
            b"time,ip".to_vec(),
            b"2024-05-01T00:00:00Z,1.2.3.4".to_vec(),
        ];
        assert_eq!(detect(&csv), LogFormat::Csv);
        // A tie goes to the first line's format.
        assert_eq!(detect(&[clf.clone(), b"x".to_vec()]), LogFormat::Combined);
        assert_eq!(detect(&[b"x".to_vec(), clf.clone()]), LogFormat::Csv);
        // A CSV header decides alone: its records may hold combined lines (a message column).
        let quoted = br#"2024-05-01T00:00:00Z,1.2.3.4,/a,"1.2.3.4 - - [01/May/2024:00:00:00 +0000] ""GET /a HTTP/1.1"" 200 1""#;
        let mut head = vec![b"time,ip,path,message".to_vec()];
        head.extend(std::iter::repeat_n(quoted.to_vec(), 3));
        assert_eq!(detect(&head), LogFormat::Csv);
        assert_eq!(
            detect(&[b"\"time\";\"client ip\"".to_vec(), clf.clone(), clf.clone()]),
            LogFormat::Csv
        );
        // A truncated log line is no header.
        let mut head = vec![br#"0/Oct/2000:13:55:36 -0700] "GET / HTTP/1.0" 200 1, x"#.to_vec()];
        head.extend(std::iter::repeat_n(clf, 3));
        assert_eq!(detect(&head), LogFormat::Combined);
    }

    /// `log stdout format short` (or `priority`) writes a bare syslog `<PRI>` glued to the
    /// message: it is not part of the client.
    #[test]
    fn haproxy_lines_after_a_bare_priority() {
        let short = [&b"<134>"[..], &HAPROXY_DOC[42..]].concat();
        let f = haproxy(&short, HAPROXY_REQUEST).unwrap();
        assert_eq!(f[HAPROXY_CLIENT].as_deref(), Some("10.0.1.2:33317"));
        assert_eq!(sniff(&short), LogFormat::Haproxy);
        let clf = br#"<6>10.0.1.2 - - [06/Feb/2009:12:14:14 +0000] "GET / HTTP/1.1" 200 2750 "" "" 33317 655 "http-in" "static" "srv1" 10 0 30 69 109 "----" 1 1 1 1 0 0 0 "" """#;
        let f = haproxy(clf, HAPROXY_REQUEST).unwrap();
        assert_eq!(f[HAPROXY_CLIENT].as_deref(), Some("10.0.1.2"));
        assert_eq!(sniff(clf), LogFormat::Haproxy);
    }

    /// The bracketed date is HAProxy's `%tr`, which its documentation calls `request_date`
    /// (older versions' `%t` the `accept_date`): both names are it.
    #[test]
    fn haproxy_date_names() {
        assert_eq!(HAPROXY_FIELDS[HAPROXY_TIME], "request_date");
        for n in ["request_date", "accept_date", "time", "Request-Date"] {
            assert_eq!(haproxy_field(n), Some(HAPROXY_TIME), "{n}");
        }
    }

    /// `client_port` is the client's port, a field of its own (`client` keys by the address).
    #[test]
    fn haproxy_client_port() {
        assert_eq!(haproxy_field("client_port"), Some(HAPROXY_CLIENT_PORT));
        let f = haproxy(HAPROXY_DOC, HAPROXY_REQUEST).unwrap();
        assert_eq!(f[HAPROXY_CLIENT_PORT].as_deref(), Some("33317"));
        let l = b"2001:db8::7:5000 [01/May/2024:12:00:00.001] fe be/s 0/0/0/1/1 200 1 - - ---- 1/1/0/0/0 0/0 \"GET / HTTP/1.1\"";
        let f = haproxy(l, HAPROXY_REQUEST).unwrap();
        assert_eq!(f[HAPROXY_CLIENT_PORT].as_deref(), Some("5000"));
    }

    /// `option httplog clf` writes HAProxy's fields after the combined ones, each in a
    /// column of its own (strings quoted): `%cp %ms %ft %b %s %TR %Tw %Tc %Tr %Ta %tsc %ac
    /// %fc %bc %sc %rc %sq %bq %CC %CS %hrl %hsl`. They fill the same fields; the timers,
    /// connections and queues are their columns, spaces between; each captured header is a
    /// quoted column, `hdrN` the Nth (the request's first); no `{...}` blocks.
    #[test]
    fn haproxy_clf_columns() {
        let l = br#"May  1 12:00:00 lb haproxy[1]: 10.0.1.2 - - [06/Feb/2009:12:14:14 +0000] "GET /index.html HTTP/1.1" 200 2750 "" "" 33317 655 "http-in" "static" "srv1" 10 0 30 69 109 "----" 1 1 1 1 0 0 0 "" "" "1wt.eu" "Mozilla/5.0 (X11)" "text/html""#;
        let f = haproxy(l, HAPROXY_HDR0 + 3).unwrap();
        let get = |name: &str| f[haproxy_field(name).unwrap()].clone();
        for (name, want) in [
            ("client", Some("10.0.1.2")),
            ("client_port", Some("33317")),
            ("request_date", Some("06/Feb/2009:12:14:14 +0000")),
            ("frontend", Some("http-in")),
            ("backend", Some("static")),
            ("server", Some("srv1")),
            ("timers", Some("10 0 30 69 109")),
            ("status", Some("200")),
            ("bytes", Some("2750")),
            ("request_cookie", Some("")),
            ("response_cookie", Some("")),
            ("termination_state", Some("----")),
            ("connections", Some("1 1 1 1 0")),
            ("queues", Some("0 0")),
            ("request_headers", None),
            ("response_headers", None),
            ("request", Some("GET /index.html HTTP/1.1")),
            ("hdr0", Some("1wt.eu")),
            ("hdr1", Some("Mozilla/5.0 (X11)")),
            ("hdr2", Some("text/html")),
            ("hdr3", None),
        ] {
            assert_eq!(get(name).as_deref(), want, "{name}");
        }
        // Unquoted strings (a log-format without +Q), and a line cut in its columns: what
        // is whole is read.
        let l = b"10.0.1.2 - - [06/Feb/2009:12:14:14 +0000] \"GET / HTTP/1.1\" 200 2750 \"\" \"\" 33317 655 http-in static srv1 10 0 30";
        let f = haproxy(l, HAPROXY_HDR0).unwrap();
        assert_eq!(f[HAPROXY_CLIENT_PORT].as_deref(), Some("33317"));
        assert_eq!(f[4].as_deref(), Some("srv1"));
        assert_eq!(f[5], None);
        assert!(haproxy_clf(l));
        assert!(!haproxy_clf(HAPROXY_DOC));
    }
}
