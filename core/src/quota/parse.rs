//! The rate-string grammar, both ways: [`FromStr`] parses
//! `COUNT (/|per) [N] UNIT (; option=value)*` (docs/SEMANTICS.md, "Rate strings") and
//! [`Display`](fmt::Display) prints the canonical string, which parses back to an equal quota.

use super::{
    Algorithm, Quota, Refill, NS_PER_D, NS_PER_H, NS_PER_MIN, NS_PER_MS, NS_PER_S, NS_PER_US,
};
use crate::error::Error;
use core::fmt;
use core::str::FromStr;

/// The largest unit that divides `ns` exactly (`ns` for zero).
fn best_unit(ns: u64) -> (u64, &'static str) {
    let units = [
        (NS_PER_D, "d"),
        (NS_PER_H, "h"),
        (NS_PER_MIN, "m"),
        (NS_PER_S, "s"),
        (NS_PER_MS, "ms"),
        (NS_PER_US, "us"),
    ];
    units
        .iter()
        .copied()
        .find(|(u, _)| ns != 0 && ns % u == 0)
        .unwrap_or((1, "ns"))
}

impl fmt::Display for Quota {
    /// The canonical rate string; [`FromStr`] parses it back to an equal quota.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (unit_ns, unit) = best_unit(self.period_ns);
        let n = self.period_ns / unit_ns;
        if n == 1 {
            write!(f, "{}/{}", self.count, unit)?;
        } else {
            write!(f, "{}/{}{}", self.count, n, unit)?;
        }
        if self.burst != self.count {
            write!(f, "; burst={}", self.burst)?;
        }
        if let Some(i) = self.initial {
            if i != self.burst {
                write!(f, "; initial={i}")?;
            }
        }
        if self.refill == Refill::Interval {
            write!(f, "; refill=interval")?;
        }
        if self.algorithm != Algorithm::TokenBucket {
            write!(f, "; algorithm={}", self.algorithm)?;
        }
        if let Some(d) = self.max_delay_ns {
            let (unit_ns, unit) = best_unit(d);
            write!(f, "; max_delay={}{}", d / unit_ns, unit)?;
        }
        Ok(())
    }
}

/// A tiny cursor over the (lower-cased) input that remembers byte offsets for errors.
struct Cursor<'a> {
    input: &'a str,
    lower: String,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(input: &'a str) -> Self {
        Self {
            input,
            lower: input.to_ascii_lowercase(),
            pos: 0,
        }
    }

    fn rest(&self) -> &str {
        &self.lower[self.pos..]
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn at_end(&mut self) -> bool {
        self.skip_ws();
        self.pos == self.lower.len()
    }

    fn error(&self, at: usize, len: usize, reason: impl Into<String>) -> Error {
        let end = (at + len).min(self.input.len());
        let fragment = if at >= self.input.len() {
            String::from("end of input")
        } else {
            self.input[at..end].to_string()
        };
        Error::Parse {
            input: self.input.to_string(),
            offset: at,
            fragment,
            reason: reason.into(),
        }
    }

    /// The next token: a run of ASCII digits, a run of letters, or one other character.
    fn peek_token(&mut self) -> (usize, usize) {
        self.skip_ws();
        let rest = self.rest();
        let mut chars = rest.char_indices();
        let len = match chars.next() {
            None => 0,
            Some((_, c)) if c.is_ascii_digit() => rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len()),
            Some((_, c)) if c.is_ascii_alphabetic() || c == '_' => rest
                .find(|c: char| !(c.is_ascii_alphabetic() || c == '_'))
                .unwrap_or(rest.len()),
            Some((_, c)) => c.len_utf8(),
        };
        (self.pos, len)
    }

    fn take_token(&mut self) -> (usize, String) {
        let (at, len) = self.peek_token();
        self.pos = at + len;
        (at, self.lower[at..at + len].to_string())
    }

    fn number(&mut self, what: &str) -> Result<u64, Error> {
        let (at, tok) = self.take_token();
        if tok.is_empty() {
            return Err(self.error(at, 0, format!("expected {what}")));
        }
        if !tok.bytes().all(|b| b.is_ascii_digit()) {
            return Err(self.error(at, tok.len(), format!("expected {what} (a whole number)")));
        }
        let len = tok.len();
        let value = tok
            .parse::<u64>()
            .map_err(|_| self.error(at, len, format!("{what} is too large")))?;
        if self.rest().starts_with('.') {
            return Err(self.error(at, len + 1, format!("{what} must be a whole number")));
        }
        Ok(value)
    }
}

fn unit_ns(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => 1,
        "us" => NS_PER_US,
        "ms" => NS_PER_MS,
        "s" | "sec" | "second" | "seconds" => NS_PER_S,
        "m" | "min" | "minute" | "minutes" => NS_PER_MIN,
        "h" | "hr" | "hour" | "hours" => NS_PER_H,
        "d" | "day" | "days" => NS_PER_D,
        "w" | "week" | "weeks" => 7 * NS_PER_D,
        _ => return None,
    })
}

impl FromStr for Quota {
    type Err = Error;

    /// Parses `COUNT (/|per) [N] UNIT (; burst=B | ; initial=I | ; refill=continuous|interval)*`.
    fn from_str(input: &str) -> Result<Self, Error> {
        let mut c = Cursor::new(input);
        if c.at_end() {
            return Err(c.error(0, 0, "empty rate: expected COUNT/UNIT, e.g. \"10/s\""));
        }
        let count = c.number("a count")?;
        let (at, sep) = c.take_token();
        if sep != "/" && sep != "per" {
            let len = sep.len();
            return Err(c.error(at, len, "expected \"/\" or \"per\""));
        }
        let (at, len) = c.peek_token();
        let mut multiple = 1u64;
        if c.lower[at..at + len]
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_digit())
        {
            multiple = c.number("a period multiple")?;
        }
        let (uat, unit) = c.take_token();
        let Some(per) = unit_ns(&unit) else {
            let len = unit.len().max(1);
            let calendar = ["mo", "mon", "month", "months", "y", "yr", "year", "years"];
            if calendar.contains(&unit.as_str()) {
                return Err(c.error(
                    uat,
                    len,
                    "a month or a year has no fixed length: give days (30d, 365d; \
                     flask-limiter's month is 30 days, its year 360)",
                ));
            }
            return Err(c.error(
                uat,
                len,
                "unknown time unit (ns, us, ms, s, sec, second(s), m, min, minute(s), h, hr, \
                 hour(s), d, day(s), w, week(s))",
            ));
        };
        let Some(period_ns) = multiple.checked_mul(per) else {
            return Err(c.error(
                at,
                uat + unit.len() - at,
                "the period is too long (at most 2^64 - 1 ns, about 584 years)",
            ));
        };
        let mut q = Quota {
            count,
            period_ns,
            burst: count,
            initial: None,
            refill: Refill::Continuous,
            algorithm: Algorithm::TokenBucket,
            max_delay_ns: None,
        };
        let mut seen = [false; 5];
        while !c.at_end() {
            let (at, sep) = c.take_token();
            if sep != ";" && sep != "," {
                let len = c.rest().len() + sep.len();
                return Err(c.error(at, len, "unexpected text; options follow \";\""));
            }
            let (kat, key) = c.take_token();
            if key.is_empty() || key == ";" || key == "," {
                // "10/minute;": the grammar has an option after every separator (the
                // conformance vector `trailing_semicolon`), so this is refused, but as what
                // it is rather than as a missing "=" after nothing.
                return Err(c.error(
                    at,
                    sep.len(),
                    format!(
                        "an empty option after {sep:?} (remove the {sep:?}, or name an option: \
                         burst, initial, refill, algorithm, max_delay)"
                    ),
                ));
            }
            if key.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
                // "10/minute;100/hour", as flask-limiter writes several limits.
                return Err(c.error(
                    kat,
                    c.rest().len() + key.len(),
                    "a second rate: a quota is one rate, with options after \";\"; give \
                     several limits as a list of rates",
                ));
            }
            if !key
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            {
                return Err(c.error(
                    kat,
                    key.len(),
                    format!(
                        "expected an option name after {sep:?} (burst, initial, refill, \
                         algorithm, max_delay)"
                    ),
                ));
            }
            let (eat, eq) = c.take_token();
            if eq != "=" {
                let len = eq.len();
                return Err(c.error(eat, len, format!("expected \"=\" after {key:?}")));
            }
            let idx = match key.as_str() {
                "burst" => 0,
                "initial" => 1,
                "refill" => 2,
                "algorithm" | "codec" => 3,
                "max_delay" => 4,
                _ => {
                    return Err(c.error(
                        kat,
                        key.len().max(1),
                        "unknown option (burst, initial, refill, algorithm, max_delay)",
                    ))
                }
            };
            if seen[idx] {
                return Err(c.error(kat, key.len(), "option given twice"));
            }
            seen[idx] = true;
            match idx {
                0 => q.burst = c.number("a burst")?,
                1 => q.initial = Some(c.number("an initial token count")?),
                3 => {
                    let (vat, v) = c.take_token();
                    q.algorithm = v.parse::<Algorithm>().map_err(|_| {
                        c.error(
                            vat,
                            v.len().max(1),
                            "unknown algorithm (token_bucket, gcra, fixed_window, \
                             sliding_window, sliding_log, leaky_queue)",
                        )
                    })?;
                }
                4 => {
                    let (nat, _) = c.peek_token();
                    let n = c.number("a delay")?;
                    let (uat, unit) = c.take_token();
                    let Some(per) = unit_ns(&unit) else {
                        let len = unit.len().max(1);
                        return Err(c.error(
                            uat,
                            len,
                            "expected a time unit (ns, us, ms, s, m, h, d, w)",
                        ));
                    };
                    let ns = n.checked_mul(per).ok_or_else(|| {
                        c.error(
                            nat,
                            uat + unit.len() - nat,
                            "the delay is too long (at most 2^64 - 1 ns, about 584 years)",
                        )
                    })?;
                    q.max_delay_ns = Some(ns);
                }
                _ => {
                    let (vat, v) = c.take_token();
                    q.refill = v.parse::<Refill>().map_err(|_| {
                        c.error(vat, v.len().max(1), "expected continuous or interval")
                    })?;
                }
            }
        }
        q.validate().map_err(|e| match e {
            Error::InvalidQuota { reason } => Error::InvalidQuota {
                reason: format!("{reason} (in {input:?})"),
            },
            other => other,
        })?;
        Ok(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_initial_equal_to_burst_is_the_same_quota() {
        let a: Quota = "10/s; initial=10".parse().unwrap();
        let b: Quota = "10/s".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "10/s");
        assert_ne!(a, "10/s; initial=9".parse::<Quota>().unwrap());
    }

    #[test]
    fn errors_quote_the_offending_text() {
        let e = "10/fortnight".parse::<Quota>().unwrap_err();
        assert_eq!(e.code(), "parse_error");
        assert!(e.to_string().contains("\"fortnight\""), "{e}");
        assert!(e.to_string().contains("byte 3"), "{e}");
        // A week is 7 days; a month or a year has no fixed length, and the error says so.
        for week in ["2/week", "2/1w", "2 per weeks"] {
            assert_eq!(week.parse::<Quota>().unwrap().to_string(), "2/7d", "{week}");
        }
        for calendar in ["1000/month", "1000 per Month", "1/y", "5/2years"] {
            let e = calendar.parse::<Quota>().unwrap_err();
            assert_eq!(e.code(), "parse_error");
            assert!(e.to_string().contains("no fixed length: give days"), "{e}");
        }
        let e = "10/s; burst=0".parse::<Quota>().unwrap_err();
        assert_eq!(e.code(), "invalid_quota");
        let e = "1.5/s".parse::<Quota>().unwrap_err();
        assert!(e.to_string().contains("whole number"), "{e}");
        let e = "1/d; burst=1000000000".parse::<Quota>().unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
        // Several limits in one string, as flask-limiter takes them: a list is asked for.
        for several in ["10/minute;100/hour", "10 per minute, 100 per hour"] {
            let e = several.parse::<Quota>().unwrap_err();
            assert_eq!(e.code(), "parse_error");
            assert!(e.to_string().contains("a list of rates"), "{e}");
            assert!(e.to_string().contains("\"100"), "{e}");
        }
    }

    #[test]
    fn a_duration_out_of_range_says_the_range() {
        for (q, says) in [
            (
                "10/99999999999d",
                "the period is too long (at most 2^64 - 1 ns",
            ),
            (
                "10/s; algorithm=leaky_queue; max_delay=999999999999d",
                "the delay is too long (at most 2^64 - 1 ns",
            ),
            // It said only "max_delay x rate is too large to compute exactly".
            (
                "1000003/hour; algorithm=leaky_queue; max_delay=2h",
                "at this rate max_delay is at most 4611s",
            ),
        ] {
            let e = q.parse::<Quota>().unwrap_err();
            assert!(e.to_string().contains(says), "{q}: {e}");
        }
        // The bound it names is the bound.
        let at_most = "1000003/hour; algorithm=leaky_queue; max_delay=4611s";
        assert!(at_most.parse::<Quota>().is_ok());
        assert!("1000003/hour; algorithm=leaky_queue; max_delay=4612s"
            .parse::<Quota>()
            .is_err());
    }

    #[test]
    fn an_empty_option_is_named_as_such() {
        // It said `expected "=" after "" at byte 10 ("end of input")`.
        for (input, at, sep) in [
            ("10/minute;", 9, ";"),
            ("10/minute; ", 9, ";"),
            ("10/s,", 4, ","),
            ("10/s;;burst=1", 4, ";"),
            ("10/s; burst=2;", 13, ";"),
            ("10/s; , burst=2", 4, ";"),
        ] {
            let e = input.parse::<Quota>().unwrap_err();
            assert_eq!(e.code(), "parse_error", "{input}");
            let text = e.to_string();
            assert!(
                text.contains(&format!("an empty option after \"{sep}\""))
                    && text.contains(&format!("remove the \"{sep}\""))
                    && text.contains(&format!("at byte {at} (\"{sep}\")")),
                "{input}: {text}"
            );
        }
        let e = "10/s; =5".parse::<Quota>().unwrap_err();
        assert!(e.to_string().contains("expected an option name"), "{e}");
        assert!(e.to_string().contains("byte 6"), "{e}");
    }
}
