//! Traffic the project makes itself, deterministic for a seed, written as a log in any of the
//! three formats and streamed (never held whole in memory):
//!
//! * `day`, the embedded default: one day (2024-05-01 UTC) of a small site, with a diurnal
//!   shape (quietest at 04:00, busiest at 16:00), 200 steady users who load pages (a burst of
//!   a page and its assets, then a pause to read), a crawler that fetches 300 pages in a
//!   burst every ten minutes, one abuser who floods `POST /login` at 10 requests/s from 13:00
//!   to 15:00, and a phone whose IPv6 address changes within its /64.
//! * `uniform`: `lines` requests spread evenly over `keys` clients, for benchmarks.

use crate::input::LogFormat;
use crate::timefmt::{format_clf, format_rfc3339_ms};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Read};

/// 2024-05-01T00:00:00Z in ns.
pub const DAY_START: u64 = 1_714_521_600 * 1_000_000_000;
const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

/// splitmix64: small, fast, and the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Exponentially distributed with mean `mean_ns`.
    fn exp(&mut self, mean_ns: f64) -> u64 {
        (-(1.0 - self.unit()).ln() * mean_ns) as u64
    }
}

/// The diurnal factor at `t` (0.15 at 04:00 UTC to 1 at 16:00 UTC).
fn diurnal(t: u64) -> f64 {
    let h = ((t - DAY_START) % (86_400 * S)) as f64 / (3600 * S) as f64;
    0.15 + 0.85 * (1.0 - ((h - 4.0) / 24.0 * std::f64::consts::TAU).cos()) / 2.0
}

#[derive(Clone)]
struct Req {
    t: u64,
    ip: String,
    method: &'static str,
    path: String,
    status: u16,
    bytes: u32,
    ua: &'static str,
}

enum Actor {
    User {
        ip: String,
        burst_left: u32,
        page: u64,
    },
    Crawler {
        left: u32,
        page: u64,
    },
    Abuser,
    Phone {
        net: u64,
    },
    Uniform {
        keys: u64,
        left: u64,
        step: u64,
        i: u64,
    },
}

const BROWSER: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)";
const PHONE: &str = "Mozilla/5.0 (Linux; Android 14) Mobile";
const BOT: &str = "ExampleBot/2.1 (+https://example.com/bot)";
const SCRIPT: &str = "python-requests/2.31";

/// Generates requests in time order.
pub struct Generator {
    rng: Rng,
    actors: Vec<(u64, Actor)>,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    end: u64,
}

impl Generator {
    pub fn day(seed: u64) -> Self {
        let mut rng = Rng(seed);
        let mut actors = Vec::new();
        for u in 0..200u64 {
            let ip = match u % 10 {
                0..=5 => format!("198.51.100.{}", u + 1),
                6..=8 => format!("100.64.{}.{}", u / 100, u % 100 + 1),
                _ => format!(
                    "2001:db8:{:x}:{:x}::{:x}",
                    0x100 + u,
                    u % 7,
                    1 + rng.below(0xfff)
                ),
            };
            let first = DAY_START + rng.below(1800 * S);
            actors.push((
                first,
                Actor::User {
                    ip,
                    burst_left: 0,
                    page: 0,
                },
            ));
        }
        actors.push((DAY_START + 300 * S, Actor::Crawler { left: 0, page: 0 }));
        actors.push((DAY_START + 13 * 3600 * S, Actor::Abuser));
        actors.push((
            DAY_START + 7 * 3600 * S,
            Actor::Phone {
                net: 0x2001_0db8_00aa_0001,
            },
        ));
        Self::with(rng, actors, DAY_START + 86_400 * S)
    }

    pub fn uniform(seed: u64, keys: u64, lines: u64) -> Self {
        let rng = Rng(seed);
        // 10 000 requests per second of log time.
        let actors = vec![(
            DAY_START,
            Actor::Uniform {
                keys: keys.max(1),
                left: lines,
                step: 100_000,
                i: 0,
            },
        )];
        Self::with(rng, actors, u64::MAX)
    }

    fn with(rng: Rng, actors: Vec<(u64, Actor)>, end: u64) -> Self {
        let heap = actors
            .iter()
            .enumerate()
            .map(|(i, (t, _))| Reverse((*t, i)))
            .collect();
        Generator {
            rng,
            actors,
            heap,
            end,
        }
    }

    /// The next request, in time order; `None` at the end.
    fn next_req(&mut self) -> Option<Req> {
        loop {
            let Reverse((t, i)) = self.heap.pop()?;
            if t >= self.end {
                return None;
            }
            let (req, next) = self.step(i, t);
            if let Some(n) = next {
                self.heap.push(Reverse((n, i)));
            }
            if let Some(r) = req {
                return Some(r);
            }
        }
    }

    /// Actor `i` acts at `t`: maybe a request, and when it acts next.
    fn step(&mut self, i: usize, t: u64) -> (Option<Req>, Option<u64>) {
        let rng = &mut self.rng;
        match &mut self.actors[i].1 {
            Actor::User {
                ip,
                burst_left,
                page,
            } => {
                if *burst_left == 0 {
                    // Thinning: a page view happens with the diurnal probability.
                    if rng.unit() > diurnal(t) {
                        return (None, Some(t + rng.exp(120.0 * S as f64)));
                    }
                    *burst_left = 1 + rng.below(12) as u32;
                    *page = rng.below(500);
                    let (method, path) = if rng.below(40) == 0 {
                        ("POST", "/login".to_string())
                    } else if rng.below(8) == 0 {
                        ("POST", "/api/cart".to_string())
                    } else {
                        ("GET", format!("/products/{}", page))
                    };
                    let req = Req {
                        t,
                        ip: ip.clone(),
                        method,
                        path,
                        status: 200,
                        bytes: 4000 + rng.below(20_000) as u32,
                        ua: BROWSER,
                    };
                    return (Some(req), Some(t + 5 * MS + rng.below(40 * MS)));
                }
                *burst_left -= 1;
                let asset = match rng.below(4) {
                    0 => "/static/app.js".to_string(),
                    1 => "/static/style.css".to_string(),
                    2 => format!("/img/{}.webp", rng.below(2000)),
                    _ => format!("/api/products/{}/reviews", page),
                };
                let next = if *burst_left == 0 {
                    // Reading the page.
                    t + rng.exp(300.0 * S as f64)
                } else {
                    t + 2 * MS + rng.below(60 * MS)
                };
                let req = Req {
                    t,
                    ip: ip.clone(),
                    method: "GET",
                    path: asset,
                    status: 200,
                    bytes: 500 + rng.below(50_000) as u32,
                    ua: BROWSER,
                };
                (Some(req), Some(next))
            }
            Actor::Crawler { left, page } => {
                if *left == 0 {
                    *left = 300;
                }
                *left -= 1;
                *page += 1;
                let next = if *left == 0 {
                    t + 600 * S - 300 * 20 * MS
                } else {
                    t + 20 * MS
                };
                let req = Req {
                    t,
                    ip: "192.0.2.10".into(),
                    method: "GET",
                    path: format!("/products/{}", *page % 5000),
                    status: 200,
                    bytes: 8000,
                    ua: BOT,
                };
                (Some(req), Some(next))
            }
            Actor::Abuser => {
                let next = t + 100 * MS;
                let req = Req {
                    t,
                    ip: "203.0.113.66".into(),
                    method: "POST",
                    path: "/login".into(),
                    status: 401,
                    bytes: 120,
                    ua: SCRIPT,
                };
                let until = DAY_START + 15 * 3600 * S;
                (Some(req), (next < until).then_some(next))
            }
            Actor::Phone { net } => {
                // A new interface id every request: the /64 stays.
                let iid = rng.next() | 1;
                let ip = std::net::Ipv6Addr::from((u128::from(*net) << 64) | u128::from(iid));
                let req = Req {
                    t,
                    ip: ip.to_string(),
                    method: "GET",
                    path: format!("/api/feed?page={}", rng.below(50)),
                    status: 200,
                    bytes: 2000,
                    ua: PHONE,
                };
                let next = t + 200 * MS + rng.exp(2.0 * S as f64);
                let until = DAY_START + 9 * 3600 * S;
                (Some(req), (next < until).then_some(next))
            }
            Actor::Uniform {
                keys,
                left,
                step,
                i,
            } => {
                if *left == 0 {
                    return (None, None);
                }
                *left -= 1;
                // Clients in turn; an odd multiplier modulo 2^24 scatters them over 10/8
                // one to one.
                let k = *i % *keys;
                *i += 1;
                let a = k.wrapping_mul(0x9E37_79B1) & 0xFF_FFFF;
                let ip = format!("10.{}.{}.{}", (a >> 16) & 255, (a >> 8) & 255, a & 255);
                let req = Req {
                    t,
                    ip,
                    method: "GET",
                    path: format!("/api/items/{}", k % 1000),
                    status: 200,
                    bytes: 1000,
                    ua: BROWSER,
                };
                (Some(req), Some(t + *step))
            }
        }
    }
}

fn write_line(format: LogFormat, r: &Req, out: &mut Vec<u8>) {
    use std::io::Write;
    let _ = match format {
        LogFormat::Combined | LogFormat::Auto => {
            let clf = format_clf(r.t);
            // Apache: %{%d/%b/%Y:%H:%M:%S}t.%{msec_frac}t %{%z}t
            let (date, zone) = clf.split_at(20);
            writeln!(
                out,
                "{} - - [{date}.{:03}{zone}] \"{} {} HTTP/1.1\" {} {} \"-\" \"{}\"",
                r.ip,
                r.t % S / MS,
                r.method,
                r.path,
                r.status,
                r.bytes,
                r.ua
            )
        }
        LogFormat::Jsonl => writeln!(
            out,
            "{{\"time\":\"{}\",\"ip\":\"{}\",\"method\":\"{}\",\"path\":\"{}\",\"status\":{},\"bytes\":{},\"ua\":\"{}\"}}",
            format_rfc3339_ms(r.t),
            r.ip,
            r.method,
            r.path,
            r.status,
            r.bytes,
            r.ua
        ),
        LogFormat::Alb => {
            // The request came at `t` (request_creation_time) and its response went 1 ms
            // later (time), through a target at 10.0.0.1.
            let us = |t: u64| {
                let ms = format_rfc3339_ms(t);
                format!("{}000Z", &ms[..ms.len() - 1])
            };
            writeln!(
                out,
                "https {} app/sample/50dc6c495c0c9188 {}:{} 10.0.0.1:80 0.000 0.001 0.000 {} {} 120 {} \"{} https://api.example.com:443{} HTTP/1.1\" \"{}\" ECDHE-RSA-AES128-GCM-SHA256 TLSv1.2 arn:aws:elasticloadbalancing:us-east-2:123456789012:targetgroup/api/73e2d6bc24d8a067 \"Root=1-58337262-36d228ad5d99923122bbe354\" \"api.example.com\" \"-\" 0 {} \"forward\" \"-\" \"-\" \"10.0.0.1:80\" \"{}\" \"-\" \"-\" TID_1",
                us(r.t + MS),
                r.ip,
                1024 + r.t / MS % 60_000,
                r.status,
                r.status,
                r.bytes,
                r.method,
                r.path,
                r.ua,
                us(r.t),
                r.status
            )
        }
        LogFormat::W3c => {
            // IIS's default fields, its spaces in a value written `+`; the time with its
            // milliseconds (IIS writes whole seconds: the sample keeps its sub-second times).
            let ms = format_rfc3339_ms(r.t);
            let (stem, query) = r.path.split_once('?').unwrap_or((&r.path, "-"));
            writeln!(
                out,
                "{} {} 10.0.0.1 {} {stem} {query} 443 - {} {} - {} 0 0 1",
                &ms[..10],
                &ms[11..ms.len() - 1],
                r.method,
                r.ip,
                r.ua.replace(' ', "+"),
                r.status
            )
        }
        LogFormat::Haproxy => {
            // `option httplog` behind a syslog prefix, the User-Agent captured (`capture
            // request header User-Agent len 128`), accepted at `t`.
            let clf = format_clf(r.t);
            let syslog_day = clf[..2].trim_start_matches('0');
            writeln!(
                out,
                "{} {syslog_day:>2} {} lb1 haproxy[812]: {}:{} [{}.{:03}] www~ api/srv1 0/0/1/2/3 {} {} - - ---- 1/1/0/0/0 0/0 {{{}}} \"{} {} HTTP/1.1\"",
                &clf[3..6],
                &clf[12..20],
                r.ip,
                1024 + r.t / MS % 60_000,
                &clf[..20],
                r.t % S / MS,
                r.status,
                r.bytes,
                r.ua,
                r.method,
                r.path
            )
        }
        LogFormat::Csv => writeln!(
            out,
            "{},{},{},{},{},{},\"{}\"",
            format_rfc3339_ms(r.t),
            r.ip,
            r.method,
            r.path,
            r.status,
            r.bytes,
            r.ua
        ),
    };
}

/// The generator as a byte stream of log lines (a CSV header, W3C directives first).
pub struct SampleReader {
    gen: Generator,
    format: LogFormat,
    buf: Vec<u8>,
    pos: usize,
    done: bool,
}

impl SampleReader {
    pub fn new(gen: Generator, format: LogFormat) -> Self {
        let mut buf = Vec::new();
        if format == LogFormat::Csv {
            buf.extend_from_slice(b"time,ip,method,path,status,bytes,user_agent\n");
        }
        if format == LogFormat::W3c {
            buf.extend_from_slice(
                b"#Software: Microsoft Internet Information Services 10.0\n#Version: 1.0\n#Date: 2024-05-01 00:00:00\n#Fields: date time s-ip cs-method cs-uri-stem cs-uri-query s-port cs-username c-ip cs(User-Agent) cs(Referer) sc-status sc-substatus sc-win32-status time-taken\n",
            );
        }
        SampleReader {
            gen,
            format,
            buf,
            pos: 0,
            done: false,
        }
    }
}

impl Read for SampleReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.buf.len() && !self.done {
            self.buf.clear();
            self.pos = 0;
            for _ in 0..1024 {
                match self.gen.next_req() {
                    Some(r) => write_line(self.format, &r, &mut self.buf),
                    None => {
                        self.done = true;
                        break;
                    }
                }
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_ordered() {
        let read = |seed| {
            let mut s = String::new();
            SampleReader::new(Generator::day(seed), LogFormat::Jsonl)
                .read_to_string(&mut s)
                .unwrap();
            s
        };
        let a = read(1);
        assert_eq!(a, read(1));
        assert_ne!(a, read(2));
        let lines: Vec<&str> = a.lines().collect();
        assert!(lines.len() > 50_000, "{}", lines.len());
        let mut tp = crate::timefmt::TimeParser::new(crate::timefmt::EpochUnit::Auto);
        let times: Vec<u64> = lines
            .iter()
            .map(|l| tp.parse(&l.as_bytes()[9..33]).unwrap())
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        assert!(times[0] >= DAY_START && *times.last().unwrap() < DAY_START + 86_400 * S);
        assert!(lines.iter().any(|l| l.contains("203.0.113.66")));
        assert!(lines.iter().any(|l| l.contains("ExampleBot")));
        assert!(lines.iter().any(|l| l.contains("2001:db8:aa:1:")));
    }

    #[test]
    fn uniform_counts() {
        let mut s = String::new();
        SampleReader::new(Generator::uniform(7, 100, 1000), LogFormat::Csv)
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s.lines().count(), 1001);
        let keys: std::collections::HashSet<&str> = s
            .lines()
            .skip(1)
            .map(|l| l.split(',').nth(1).unwrap())
            .collect();
        assert_eq!(keys.len(), 100);
    }
}
