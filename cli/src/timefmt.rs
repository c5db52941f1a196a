//! Log timestamps to nanoseconds since the Unix epoch (UTC), parsed by hand: this runs once per
//! line. Accepted, detected per value:
//! * RFC 3339 / ISO 8601: `2024-05-01T12:00:00Z`, `2024-05-01 12:00:00.123+02:00`;
//! * the common log format: `01/May/2024:12:00:00 +0000` (brackets allowed, `.123` allowed);
//!   without its offset as HAProxy writes it;
//! * a number of seconds, milliseconds, microseconds or nanoseconds since the epoch, with an
//!   optional fraction (`1714564800.123`, nginx's `$msec`); the unit is [`EpochUnit`].
//!
//! A date written without an offset is in the parser's [`Zone`] (UTC unless given).

/// The unit of numeric timestamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum EpochUnit {
    /// By magnitude: below 10^11 seconds, below 10^14 milliseconds, below 10^17
    /// microseconds, else nanoseconds.
    #[default]
    Auto,
    /// Seconds.
    S,
    /// Milliseconds.
    Ms,
    /// Microseconds.
    Us,
    /// Nanoseconds.
    Ns,
}

/// A parser with a one-entry cache of the last whole second's text: consecutive lines of a
/// log share their date and time of day far more often than not.
#[derive(Default)]
pub struct TimeParser {
    unit: EpochUnit,
    last_text: [u8; 32],
    last_len: usize,
    last_secs: i64,
    /// The zone of dates without an offset; `None`: UTC.
    zone: Option<Box<Zoned>>,
    /// Whether a date without an offset was read as UTC (no zone): the report says so.
    utc_without_offset: bool,
    /// Whether the last date that did not parse was a date, outside the range read.
    out_of_range: bool,
}

/// The zone of dates written without an offset (`--timezone`): an IANA zone, its daylight
/// saving included, or a fixed offset.
#[derive(Clone, Debug)]
pub struct Zone {
    tz: jiff::tz::TimeZone,
    name: String,
}

impl Zone {
    /// `UTC`, a fixed offset (`+05:30`, `-0800`, `+02`) or an IANA name (`Europe/Berlin`).
    pub fn parse(text: &str) -> Result<Zone, String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("utc") || t.eq_ignore_ascii_case("z") {
            return Ok(Zone::utc());
        }
        if let Some(sign @ (b'+' | b'-')) = t.bytes().next() {
            let (h, m) = match t.as_bytes()[1..] {
                [h1, h2] => ([h1, h2], [b'0'; 2]),
                [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => ([h1, h2], [m1, m2]),
                _ => return Err(format!("{t:?} is no offset: write it +HH:MM, as +05:30")),
            };
            let secs = offset(sign, &h, &m).ok_or_else(|| {
                format!("{t:?} is no offset: write it +HH:MM (hours 00-23, minutes 00-59)")
            })?;
            let off = jiff::tz::Offset::from_seconds(secs as i32).map_err(|e| e.to_string())?;
            return Ok(Zone {
                tz: jiff::tz::TimeZone::fixed(off),
                name: t.to_string(),
            });
        }
        let tz = jiff::tz::TimeZone::get(t).map_err(|_| {
            format!(
                "{t:?} is no time zone: give an IANA name (Europe/Berlin, America/New_York), \
                 an offset (+05:30) or UTC"
            )
        })?;
        Ok(Zone {
            name: tz.iana_name().unwrap_or(t).to_string(),
            tz,
        })
    }

    /// UTC, the default.
    pub fn utc() -> Zone {
        Zone {
            tz: jiff::tz::TimeZone::UTC,
            name: "UTC".into(),
        }
    }

    /// Whether dates without an offset are read as UTC.
    pub fn is_utc(&self) -> bool {
        self.tz == jiff::tz::TimeZone::UTC
    }

    /// Its name (an IANA zone's as the database spells it) or offset, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The instant (seconds since the epoch) of a local date, `local` being its seconds read
    /// as UTC, `last` the instant read before it. A date in a gap (the hour a clock set
    /// forward skips) is read with the offset before it, as by a clock not moved yet. A date
    /// in a fold (the hour a clock set back repeats) has two instants: the later once `last`
    /// is past the change, else the one nearer `last`, so that a log in time order crosses
    /// the fold in order.
    ///
    /// The second value: whether the date was in a fold (whose instant depends on `last`).
    fn instant(&self, local: i64, last: i64) -> Option<(i64, bool)> {
        use jiff::tz::AmbiguousOffset;
        let ts = jiff::Timestamp::from_second(local).ok()?;
        let dt = jiff::tz::TimeZone::UTC.to_datetime(ts);
        let at = |o: jiff::tz::Offset| local - i64::from(o.seconds());
        Some(match self.tz.to_ambiguous_timestamp(dt).offset() {
            AmbiguousOffset::Unambiguous { offset } => (at(offset), false),
            AmbiguousOffset::Gap { before, .. } => (at(before), false),
            AmbiguousOffset::Fold { before, after } => {
                let (early, late) = (at(before), at(after));
                let past = last >= early
                    && jiff::Timestamp::from_second(last)
                        .is_ok_and(|t| self.tz.to_offset(t) == after);
                if past || late.abs_diff(last) < early.abs_diff(last) {
                    (late, true)
                } else {
                    (early, true)
                }
            }
        })
    }
}

/// A [`Zone`] and what the parser last read in it.
struct Zoned {
    zone: Zone,
    /// The last local second converted, and its instant (not a fold's, which depends on
    /// the instant before it).
    memo: Option<(i64, i64)>,
    /// The last instant (seconds) this parser returned (see [`Zone::instant`]).
    last: i64,
}

impl Zoned {
    fn resolve(&mut self, local: i64) -> Option<i64> {
        if let Some((l, at)) = self.memo {
            if l == local {
                return Some(at);
            }
        }
        let (at, fold) = self.zone.instant(local, self.last)?;
        self.memo = (!fold).then_some((local, at));
        Some(at)
    }
}

const NS: i64 = 1_000_000_000;

impl TimeParser {
    /// A parser reading numbers in `unit`.
    pub fn new(unit: EpochUnit) -> Self {
        TimeParser {
            unit,
            ..Default::default()
        }
    }

    /// A parser reading dates without an offset in `zone` (UTC when it is).
    pub fn with_zone(mut self, zone: &Zone) -> Self {
        self.zone = (!zone.is_utc()).then(|| {
            Box::new(Zoned {
                zone: zone.clone(),
                memo: None,
                last: 0,
            })
        });
        self
    }

    /// Nanoseconds since the epoch, or `None` if `text` is no timestamp (or before 1970).
    #[inline]
    pub fn parse(&mut self, text: &[u8]) -> Option<u64> {
        self.out_of_range = false;
        let t = self.parse_inner(text)?;
        if let Some(z) = self.zone.as_mut() {
            z.last = (t / NS as u64) as i64;
        }
        Some(t)
    }

    #[inline]
    fn parse_inner(&mut self, text: &[u8]) -> Option<u64> {
        let t = trim(text);
        let t = t.strip_prefix(b"[").unwrap_or(t);
        let t = t.strip_suffix(b"]").unwrap_or(t);
        let first = *t.first()?;
        if t.len() >= 19 && t[4] == b'-' {
            return self.rfc3339(t);
        }
        if t.len() >= 20 && t[2] == b'/' {
            return self.clf(t);
        }
        if first.is_ascii_digit() {
            return self.epoch(t);
        }
        None
    }

    /// Seconds of the first `n` bytes, through the cache.
    #[inline]
    fn cached(&mut self, key: &[u8], f: impl FnOnce(&[u8]) -> Option<i64>) -> Option<i64> {
        if key.len() == self.last_len && crate::scan::eq_bytes(key, &self.last_text[..key.len()]) {
            return Some(self.last_secs);
        }
        let s = f(key)?;
        if key.len() <= self.last_text.len() {
            self.last_text[..key.len()].copy_from_slice(key);
            self.last_len = key.len();
            self.last_secs = s;
        }
        Some(s)
    }

    fn rfc3339(&mut self, t: &[u8]) -> Option<u64> {
        // YYYY-MM-DD?HH:MM:SS
        let secs = self.cached(&t[..19], |k| {
            if k[7] != b'-'
                || !matches!(k[10], b'T' | b't' | b' ')
                || k[13] != b':'
                || k[16] != b':'
            {
                return None;
            }
            let (y, mo, d) = (num(&k[0..4])?, num(&k[5..7])?, num(&k[8..10])?);
            let (h, mi, s) = (num(&k[11..13])?, num(&k[14..16])?, num(&k[17..19])?);
            civil_secs(y, mo, d, h, mi, s)
        })?;
        let (frac, rest) = fraction(&t[19..])?;
        let frac = if &t[17..19] == b"60" { LEAP_FRAC } else { frac };
        let off = match rest {
            [] => return self.local(secs, frac),
            [b'Z'] | [b'z'] => 0,
            [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2]
            | [sign @ (b'+' | b'-'), h1, h2, m1, m2] => offset(*sign, &[*h1, *h2], &[*m1, *m2])?,
            _ => return None,
        };
        self.ns(secs - off, frac)
    }

    fn clf(&mut self, t: &[u8]) -> Option<u64> {
        // DD/Mon/YYYY:HH:MM:SS[.frac] +hhmm
        let secs = self.cached(&t[..20], |k| {
            if k[2] != b'/' || k[6] != b'/' || k[11] != b':' || k[14] != b':' || k[17] != b':' {
                return None;
            }
            let mo = month(&k[3..6])?;
            let (d, y) = (num(&k[0..2])?, num(&k[7..11])?);
            let (h, mi, s) = (num(&k[12..14])?, num(&k[15..17])?, num(&k[18..20])?);
            civil_secs(y, mo, d, h, mi, s)
        })?;
        let (frac, rest) = fraction(&t[20..])?;
        let frac = if &t[18..20] == b"60" { LEAP_FRAC } else { frac };
        let rest = trim(rest);
        let off = match rest {
            [] => return self.local(secs, frac),
            [sign @ (b'+' | b'-'), h1, h2, m1, m2] => offset(*sign, &[*h1, *h2], &[*m1, *m2])?,
            _ => return None,
        };
        self.ns(secs - off, frac)
    }

    /// A date written without an offset: in the zone.
    #[inline]
    fn local(&mut self, secs: i64, frac: i64) -> Option<u64> {
        match self.zone.as_mut() {
            None => {
                self.utc_without_offset = true;
                self.ns(secs, frac)
            }
            Some(z) => {
                let secs = z.resolve(secs)?;
                self.ns(secs, frac)
            }
        }
    }

    /// [`to_ns`] of a date read whole: `None` is a date outside the range ([`RANGE`]).
    #[inline]
    fn ns(&mut self, secs: i64, frac: i64) -> Option<u64> {
        let t = to_ns(secs, frac);
        self.out_of_range = t.is_none();
        t
    }

    /// Whether the last timestamp that did not parse was a date outside [`RANGE`].
    pub fn out_of_range(&self) -> bool {
        self.out_of_range
    }

    /// Whether a date written without an offset was read (as UTC: the parser has no zone).
    pub fn read_utc_without_offset(&self) -> bool {
        self.utc_without_offset
    }

    fn epoch(&mut self, t: &[u8]) -> Option<u64> {
        let (int, frac) = match memchr::memchr(b'.', t) {
            Some(i) => (&t[..i], &t[i + 1..]),
            None => (t, &t[t.len()..]),
        };
        if int.is_empty() || int.len() > 20 || !frac.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n: u128 = std::str::from_utf8(int).ok()?.parse().ok()?;
        let unit_ns: u128 = match self.unit {
            EpochUnit::S => 1_000_000_000,
            EpochUnit::Ms => 1_000_000,
            EpochUnit::Us => 1_000,
            EpochUnit::Ns => 1,
            EpochUnit::Auto => match n {
                n if n < 100_000_000_000 => 1_000_000_000,
                n if n < 100_000_000_000_000 => 1_000_000,
                n if n < 100_000_000_000_000_000 => 1_000,
                _ => 1,
            },
        };
        // The fraction, in units of unit_ns, to whole nanoseconds (truncated).
        let mut f: u128 = 0;
        let mut scale = unit_ns;
        for &d in frac.iter() {
            if scale < 10 {
                break;
            }
            scale /= 10;
            f += u128::from(d - b'0') * scale;
        }
        u64::try_from(n * unit_ns + f).ok()
    }
}

#[inline]
fn trim(t: &[u8]) -> &[u8] {
    let start = t
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(t.len());
    let end = t
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &t[start..end]
}

#[inline]
fn num(d: &[u8]) -> Option<i64> {
    let mut v = 0i64;
    for &b in d {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(b - b'0');
    }
    Some(v)
}

/// `.ddd` (any number of digits) at the start of `t`: nanoseconds, and the rest.
#[inline]
fn fraction(t: &[u8]) -> Option<(i64, &[u8])> {
    match t.first() {
        Some(b'.') | Some(b',') => {
            let digits = t[1..].iter().take_while(|b| b.is_ascii_digit()).count();
            if digits == 0 {
                return None;
            }
            let mut ns = 0i64;
            for (i, &b) in t[1..1 + digits].iter().enumerate() {
                if i < 9 {
                    ns = ns * 10 + i64::from(b - b'0');
                }
            }
            for _ in digits..9 {
                ns *= 10;
            }
            Some((ns, &t[1 + digits..]))
        }
        _ => Some((0, t)),
    }
}

fn offset(sign: u8, h: &[u8], m: &[u8]) -> Option<i64> {
    let (h, m) = (num(h)?, num(m)?);
    if h > 23 || m > 59 {
        return None;
    }
    let o = h * 3600 + m * 60;
    Some(if sign == b'-' { -o } else { o })
}

fn month(m: &[u8]) -> Option<i64> {
    const NAMES: [&[u8; 3]; 12] = [
        b"jan", b"feb", b"mar", b"apr", b"may", b"jun", b"jul", b"aug", b"sep", b"oct", b"nov",
        b"dec",
    ];
    let lower = [
        m[0].to_ascii_lowercase(),
        m[1].to_ascii_lowercase(),
        m[2].to_ascii_lowercase(),
    ];
    NAMES
        .iter()
        .position(|n| **n == lower)
        .map(|i| i as i64 + 1)
}

/// The days in month `m` of year `y`.
fn month_days(y: i64, m: i64) -> i64 {
    match m {
        2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Seconds since the epoch of a UTC civil time (Howard Hinnant's days_from_civil); `None`
/// for a day the month does not have (31 February is no date, not 2 March). A leap second
/// (`:60`) is read as `:59` (the callers add the fraction that makes it the last instant of
/// that second: [`LEAP_FRAC`]).
fn civil_secs(y: i64, m: i64, d: i64, h: i64, mi: i64, s: i64) -> Option<i64> {
    if !(1..=12).contains(&m) || !(1..=month_days(y, m)).contains(&d) || h > 23 || mi > 59 || s > 60
    {
        return None;
    }
    let s = s.min(59);
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3600 + mi * 60 + s)
}

/// A leap second's (`:60`) time past `:59`, whatever fraction it is written with: the
/// last nanosecond of `:59`, so that it stays between `:59` and the next minute.
const LEAP_FRAC: i64 = NS - 1;

/// The dates a replay reads: nanoseconds since the epoch in 63 bits.
pub const RANGE: &str = "1970-01-01T00:00:00Z to 2262-04-11T23:47:16Z";

fn to_ns(secs: i64, frac: i64) -> Option<u64> {
    u64::try_from(secs.checked_mul(NS)?.checked_add(frac)?).ok()
}

/// RFC 3339 text (UTC, nanoseconds when not whole) of `ns` since the epoch.
pub fn format_rfc3339(ns: u64) -> String {
    let secs = (ns / NS as u64) as i64;
    let frac = ns % NS as u64;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // civil_from_days
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let mut s = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    );
    if frac != 0 {
        let f = format!("{frac:09}");
        s.push('.');
        s.push_str(f.trim_end_matches('0'));
    }
    s.push('Z');
    s
}

/// RFC 3339 text with milliseconds (`2024-05-01T12:00:00.250Z`), truncated: as logs write it.
pub fn format_rfc3339_ms(ns: u64) -> String {
    let whole = format_rfc3339(ns - ns % NS as u64);
    format!("{}.{:03}Z", &whole[..19], ns % NS as u64 / 1_000_000)
}

/// The common log format's text of `ns` (UTC), as `sluicegate sample` writes it.
pub fn format_clf(ns: u64) -> String {
    let iso = format_rfc3339(ns - ns % NS as u64);
    const M: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month: usize = iso[5..7].parse().unwrap_or(1);
    format!(
        "{}/{}/{}:{} +0000",
        &iso[8..10],
        M[month - 1],
        &iso[0..4],
        &iso[11..19]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Option<u64> {
        TimeParser::new(EpochUnit::Auto).parse(s.as_bytes())
    }

    const T: u64 = 1_714_564_800 * 1_000_000_000; // 2024-05-01T12:00:00Z

    #[test]
    fn formats() {
        assert_eq!(p("2024-05-01T12:00:00Z"), Some(T));
        assert_eq!(p("2024-05-01 12:00:00"), Some(T));
        assert_eq!(p("2024-05-01T14:00:00+02:00"), Some(T));
        assert_eq!(p("2024-05-01T11:30:00-0030"), Some(T));
        assert_eq!(p("2024-05-01T12:00:00.25Z"), Some(T + 250_000_000));
        assert_eq!(
            p("2024-05-01T12:00:00.123456789123Z"),
            Some(T + 123_456_789)
        );
        assert_eq!(p("[01/May/2024:12:00:00 +0000]"), Some(T));
        assert_eq!(p("01/May/2024:14:00:00 +0200"), Some(T));
        assert_eq!(p("01/may/2024:12:00:00.5 +0000"), Some(T + 500_000_000));
        assert_eq!(p("1714564800"), Some(T));
        assert_eq!(p("1714564800.125"), Some(T + 125_000_000));
        assert_eq!(p("1714564800125"), Some(T + 125_000_000));
        assert_eq!(p("1714564800125000"), Some(T + 125_000_000));
        assert_eq!(p("1714564800125000001"), Some(T + 125_000_001));
        assert_eq!(p("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(p("2000-02-29T00:00:00Z"), Some(951_782_400 * 1_000_000_000));
    }

    #[test]
    fn units() {
        let mut ms = TimeParser::new(EpochUnit::Ms);
        assert_eq!(ms.parse(b"1500"), Some(1_500_000_000));
        let mut s = TimeParser::new(EpochUnit::S);
        assert_eq!(s.parse(b"2.5"), Some(2_500_000_000));
        let mut ns = TimeParser::new(EpochUnit::Ns);
        assert_eq!(ns.parse(b"7"), Some(7));
    }

    #[test]
    fn garbage() {
        for bad in [
            "",
            "-",
            "yesterday",
            "2024-13-01T00:00:00Z",
            "2024-05-01T12:00:00+2",
            "1.2.3",
            "32/May/2024:12:00:00 +0000",
            "01/Foo/2024:12:00:00 +0000",
            "1969-12-31T23:59:59Z",
            "2024-05-01T12:00:00.Z",
        ] {
            assert_eq!(p(bad), None, "{bad}");
        }
    }

    /// `--timezone`: dates without an offset are in the zone, daylight saving included; a
    /// date in the hour a clock set back repeats is the instant nearer the last one read (a
    /// log in time order crosses it in order); a date in the hour skipped is read with the
    /// offset before it; a date with its own offset, or a number, keeps its instant.
    #[test]
    fn dates_without_an_offset_are_read_in_the_zone() {
        let berlin = Zone::parse("Europe/Berlin").unwrap();
        assert_eq!(berlin.name(), "Europe/Berlin");
        let mut tp = TimeParser::new(EpochUnit::Auto).with_zone(&berlin);
        let mut at = |s: &str| tp.parse(s.as_bytes()).map(format_rfc3339);
        // Winter (+01:00) and summer (+02:00); CLF without its offset, as HAProxy writes it.
        assert_eq!(
            at("15/Jan/2024:12:00:00.250").as_deref(),
            Some("2024-01-15T11:00:00.25Z")
        );
        assert_eq!(
            at("2024-07-15T12:00:00").as_deref(),
            Some("2024-07-15T10:00:00Z")
        );
        // Their own offsets, and numbers, are kept.
        assert_eq!(
            at("2024-07-15T12:00:00Z").as_deref(),
            Some("2024-07-15T12:00:00Z")
        );
        assert_eq!(
            at("15/Jul/2024:12:00:00 +0000").as_deref(),
            Some("2024-07-15T12:00:00Z")
        );
        assert_eq!(at("1721044800").as_deref(), Some("2024-07-15T12:00:00Z"));
        // 2024-10-27: 03:00 CEST is set back to 02:00 CET. In log order, through the fold.
        let fold = [
            ("27/Oct/2024:01:59:59", "2024-10-26T23:59:59Z"),
            ("27/Oct/2024:02:00:00", "2024-10-27T00:00:00Z"),
            ("27/Oct/2024:02:59:59", "2024-10-27T00:59:59Z"),
            // The same second again: the same instant (two requests in it).
            ("27/Oct/2024:02:59:59", "2024-10-27T00:59:59Z"),
            ("27/Oct/2024:02:00:00", "2024-10-27T01:00:00Z"),
            ("27/Oct/2024:02:00:00.5", "2024-10-27T01:00:00.5Z"),
            ("27/Oct/2024:02:00:00.5", "2024-10-27T01:00:00.5Z"),
            // Past the change: an hour on, not a second back.
            ("27/Oct/2024:02:59:59", "2024-10-27T01:59:59Z"),
            ("27/Oct/2024:02:59:58", "2024-10-27T01:59:58Z"),
            ("27/Oct/2024:03:00:00", "2024-10-27T02:00:00Z"),
        ];
        for (local, utc) in fold {
            assert_eq!(at(local).as_deref(), Some(utc), "{local}");
        }
        // 2024-03-31: 02:00 CET is set forward to 03:00 CEST; 02:30 never showed.
        assert_eq!(
            at("2024-03-31 01:59:59").as_deref(),
            Some("2024-03-31T00:59:59Z")
        );
        assert_eq!(
            at("2024-03-31 02:30:00").as_deref(),
            Some("2024-03-31T01:30:00Z")
        );
        assert_eq!(
            at("2024-03-31 03:00:00").as_deref(),
            Some("2024-03-31T01:00:00Z")
        );
        // A fixed offset; UTC spelled as a zone reads as the default does.
        let mut tp = TimeParser::new(EpochUnit::Auto).with_zone(&Zone::parse("-03:30").unwrap());
        let ns = tp.parse(b"2024-07-15T12:00:00").unwrap();
        assert_eq!(format_rfc3339(ns), "2024-07-15T15:30:00Z");
        for utc in ["UTC", "utc", "Z", "z", "Etc/UTC"] {
            let z = Zone::parse(utc).unwrap();
            let mut tp = TimeParser::new(EpochUnit::Auto).with_zone(&z);
            assert_eq!(
                tp.parse(b"2024-07-15T12:00:00"),
                p("2024-07-15T12:00:00Z"),
                "{utc}"
            );
        }
        for bad in ["Mars/Olympus", "+25:00", "+1:2", "+5:30", "+12:60", "", "+"] {
            let e = Zone::parse(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        assert_eq!(Zone::parse("+0530").unwrap().name(), "+0530");
    }

    /// A day the month does not have is no date (it was rolled over into the next month);
    /// a leap second is the last instant of the second before.
    #[test]
    fn impossible_days_are_refused_and_leap_seconds_kept_in_order() {
        for bad in [
            "31/Feb/2024:00:00:00 +0000",
            "30/Feb/2024:00:00:00 +0000",
            "29/Feb/2023:00:00:00 +0000",
            "2024-04-31T23:59:60Z",
            "2024-02-31T00:00:00Z",
            "1900-02-29T00:00:00Z",
            "2024-06-31T00:00:00Z",
            "2024-05-00T00:00:00Z",
        ] {
            assert_eq!(p(bad), None, "{bad}");
        }
        assert!(p("2024-02-29T00:00:00Z").is_some());
        assert!(p("29/Feb/2000:00:00:00 +0000").is_some());
        assert!(p("2024-04-30T00:00:00Z").is_some());
        let end = T - 12 * 3600 * 1_000_000_000 - 1_000_000_000; // 2024-04-30T23:59:59Z
        assert_eq!(p("2024-04-30T23:59:59Z"), Some(end));
        assert_eq!(p("2024-04-30T23:59:60Z"), Some(end + 999_999_999));
        assert_eq!(p("2024-04-30T23:59:60.5Z"), Some(end + 999_999_999));
        assert_eq!(p("30/Apr/2024:23:59:60 +0000"), Some(end + 999_999_999));
        assert_eq!(p("2024-05-01T00:00:00Z"), Some(end + 1_000_000_000));
        // Through the cache: a :60 after its :59.
        let mut tp = TimeParser::new(EpochUnit::Auto);
        assert_eq!(tp.parse(b"2024-04-30T23:59:59Z"), Some(end));
        assert_eq!(tp.parse(b"2024-04-30T23:59:60Z"), Some(end + 999_999_999));
        assert_eq!(tp.parse(b"2024-04-30T23:59:60Z"), Some(end + 999_999_999));
    }

    #[test]
    fn cache_does_not_leak_between_values() {
        let mut tp = TimeParser::new(EpochUnit::Auto);
        assert_eq!(tp.parse(b"2024-05-01T12:00:00Z"), Some(T));
        assert_eq!(tp.parse(b"2024-05-01T12:00:00.5Z"), Some(T + 500_000_000));
        assert_eq!(tp.parse(b"2024-05-01T12:00:01Z"), Some(T + 1_000_000_000));
        assert_eq!(tp.parse(b"01/May/2024:12:00:00 +0000"), Some(T));
    }

    #[test]
    fn formatting_round_trips() {
        for ns in [0, T, T + 250_000_000, 951_782_400 * 1_000_000_000 + 1] {
            assert_eq!(p(&format_rfc3339(ns)), Some(ns));
        }
        assert_eq!(format_clf(T + 7), "01/May/2024:12:00:00 +0000");
        assert_eq!(p(&format_clf(T)), Some(T));
    }
}
