//! Which field of a line plays which role (timestamp, client address, path, method, cost,
//! key fields), resolved once per input from its format and its first lines, then extracted
//! per line by the format's scanner.

use crate::error::CliError;
use crate::input::{
    alb_field, combined_field, csv_open_after, decode_hex_escapes, detect, haproxy_clf,
    haproxy_field, join_json_array, scan_alb, scan_combined, scan_csv, scan_haproxy, scan_json,
    split_w3c, split_w3c_at, strip_port, unescape_clf, unescape_csv, unescape_json, w3c_fields,
    CsvLine, JsonPath, LogFormat, Span, ALB_CLIENT, ALB_CREATED, ALB_FIELDS, ALB_LEN, ALB_REQUEST,
    ALB_TARGET, ALB_TIME, ALB_USER_AGENT, COMBINED_FIELDS, COMBINED_LEN, COMBINED_MSEC,
    HAPROXY_CLIENT, HAPROXY_FIELDS, HAPROXY_HDR0, HAPROXY_LEN, HAPROXY_REQUEST,
    HAPROXY_REQ_HEADERS, HAPROXY_RES_HEADERS, HAPROXY_TIME,
};
use sluicegate::client::ProxyHeader;

/// What a replay needs from each line.
#[derive(Clone, Debug, Default)]
pub struct Needs {
    pub ip: bool,
    pub path: bool,
    pub method: bool,
    /// `header:NAME` and `field:NAME` key parts, in order: (is_header, name).
    pub key_fields: Vec<(bool, String)>,
    /// The forwarding header's field (`--trusted-proxies` with the `ip` key): read on each
    /// line, and an error when the first lines have none.
    pub forwarded: bool,
}

/// Field names given on the command line (`None`: detected).
#[derive(Clone, Debug, Default)]
pub struct Names {
    pub time: Option<String>,
    pub ip: Option<String>,
    pub path: Option<String>,
    pub method: Option<String>,
    pub cost: Option<String>,
    /// The field holding the forwarding header (`--forwarded-field`).
    pub forwarded: Option<String>,
    /// Which header that field holds (`--forwarded-header`): its detected names follow it.
    pub forwarded_header: ProxyHeader,
    pub delimiter: u8,
    /// `--time-unit`: a combined line's trailing `$msec` (seconds) is looked for only when
    /// epoch numbers are read as seconds (`auto`, `s`).
    pub time_unit: crate::timefmt::EpochUnit,
}

/// Time field names, in order of preference. nginx's `msec` (seconds with milliseconds) and
/// Traefik's `StartUTC` (nanoseconds) come first: a log holding one often holds a field of
/// whole seconds beside it (`time_iso8601`, `time_local`, an ELK shipper's `@timestamp`,
/// Traefik's `time`), and the finer one is taken.
const TIME: &[&str] = &[
    "msec",
    "StartUTC",
    "time",
    "timestamp",
    "ts",
    "@timestamp",
    "time_iso8601",
    "time_local",
    "date",
    "datetime",
];
const IP: &[&str] = &[
    "ip",
    "client_ip",
    "remote_addr",
    "clientip",
    "remote_ip",
    "client",
    "src_ip",
    "c-ip",
    // Caddy's access log: the client (behind Caddy's own trusted proxies) and the peer.
    "request.client_ip",
    "request.remote_ip",
    // Traefik's, and pino's.
    "ClientHost",
    "req.remoteAddress",
];
const PATH: &[&str] = &[
    "path",
    "uri",
    "request_uri",
    "url",
    "cs-uri-stem",
    "request",
    "request.uri",
    "RequestPath",
    "req.url",
];
const METHOD: &[&str] = &[
    "method",
    "request_method",
    "verb",
    "cs-method",
    "request.method",
    "RequestMethod",
    "req.method",
];

fn header_candidates(name: &str) -> Vec<String> {
    let lower = name.to_ascii_lowercase();
    let snake = lower.replace('-', "_");
    let mut v = vec![
        format!("http_{snake}"),
        lower.clone(),
        snake,
        format!("headers.{lower}"),
        format!("request.headers.{lower}"),
        // pino's request serializer.
        format!("req.headers.{lower}"),
    ];
    // JSON names are compared exactly, and a header's name is not case-sensitive: its
    // canonical form too (`X-Api-Key`, as Caddy, Traefik and Go's servers write headers), and
    // the name as given, after the lower-case ones.
    for n in [canonical_header(name), name.to_string()] {
        if n != lower {
            v.extend([
                n.clone(),
                format!("headers.{n}"),
                format!("request.headers.{n}"),
                format!("request_{n}"),
            ]);
        }
    }
    let mut seen = std::collections::HashSet::new();
    v.retain(|c| seen.insert(c.clone()));
    v
}

/// A header name as Go writes it (`x-api-key` → `X-Api-Key`): each word's first letter upper
/// case, the others lower case.
fn canonical_header(name: &str) -> String {
    let mut up = true;
    name.chars()
        .map(|c| {
            let out = if up {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            up = c == '-';
            out
        })
        .collect()
}

/// Whether a detected field of this name must hold a single value (a time, an address, a
/// path, a method): an object or an array there is another field of that name (Caddy's
/// `request` is an object holding `uri`).
fn scalar_role(name: &str) -> bool {
    [TIME, IP, PATH, METHOD].iter().any(|c| c.contains(&name))
}

/// The names a forwarding header's field is looked for by: the given one, or the header's
/// (`http_x_forwarded_for`, `x-forwarded-for`, `x_forwarded_for`, `headers.x-forwarded-for`,
/// ...).
fn forwarded_candidates(names: &Names) -> Vec<String> {
    match &names.forwarded {
        Some(n) => vec![n.clone()],
        None => header_candidates(names.forwarded_header.header_name()),
    }
}

/// Combined lines: whether a first line has field `i` at all, and whether one has a value
/// there (not `-`).
fn combined_forwarded(head: &[Vec<u8>], i: usize) -> (bool, bool) {
    let mut out = [None; COMBINED_LEN];
    let (mut present, mut seen) = (false, false);
    for l in head {
        out[i] = None;
        if !scan_combined(l, i, &mut out) {
            continue;
        }
        if let Some(s) = out[i] {
            present = true;
            seen |= !matches!(&l[s.start as usize..s.end as usize], b"" | b"-");
        }
    }
    (present, seen)
}

/// Whether `v` reads as nginx's `$msec`: epoch seconds (9 to 11 digits), a dot, a fraction.
fn msec_shaped(v: &[u8]) -> bool {
    let digits = |d: &[u8]| !d.is_empty() && d.iter().all(u8::is_ascii_digit);
    match memchr::memchr(b'.', v) {
        Some(dot) => (9..=11).contains(&dot) && digits(&v[..dot]) && digits(&v[dot + 1..]),
        None => false,
    }
}

/// Combined lines: whether the first lines end with nginx's `$msec` appended to the format
/// (seconds with a fraction, within a second of the line's `[$time_local]`): nine in ten of
/// the lines in the format at least. Its time is then theirs: `$time_local` has whole
/// seconds. (A trailing `$request_time`, `0.004`, is no time of day.)
fn combined_msec(head: &[Vec<u8>]) -> bool {
    let mut out = [None; COMBINED_LEN];
    let mut tp = crate::timefmt::TimeParser::new(crate::timefmt::EpochUnit::S);
    let (mut lines, mut msec) = (0usize, 0usize);
    for l in head {
        if !scan_combined(l, COMBINED_MSEC, &mut out) {
            continue;
        }
        lines += 1;
        let (Some(local), Some(m)) = (out[3], out[COMBINED_MSEC]) else {
            continue;
        };
        let m = &l[m.start as usize..m.end as usize];
        if !msec_shaped(m) {
            continue;
        }
        let (Some(at), Some(local)) = (
            tp.parse(m),
            tp.parse(&l[local.start as usize..local.end as usize]),
        ) else {
            continue;
        };
        if (at / 1_000_000_000).abs_diff(local / 1_000_000_000) <= 1 {
            msec += 1;
        }
    }
    msec > 0 && msec * 10 >= lines * 9
}

/// A role's place in the scanner's output.
type Slot = Option<usize>;

pub struct Extractor {
    pub format: LogFormat,
    time: usize,
    ip: Slot,
    path: Slot,
    method: Slot,
    cost: Slot,
    /// The forwarding header (only when [`Needs::forwarded`]).
    fwd: Slot,
    keys: Vec<usize>,
    json_paths: Vec<JsonPath>,
    delimiter: u8,
    /// CSV: the header line is skipped.
    pub skip_first: bool,
    /// CSV: the last line scanned ends inside a quoted field (its record goes on over the
    /// next lines: see [`continues_record`](Self::continues_record)).
    pub csv_open: bool,
    combined_last: usize,
    spans: Vec<Option<Span>>,
    combined: [Option<Span>; COMBINED_LEN],
    scratch: Vec<Vec<u8>>,
    decoded: Vec<bool>,
    /// What was chosen, for the report ("time <- time_iso8601").
    pub chosen: Vec<(String, String)>,
    /// Combined lines timed by a trailing `$msec` found in the first lines: a line without
    /// it is timed by its `[$time_local]`.
    msec_detected: bool,
    /// The forwarding header's field, when the client address is needed and a first line
    /// holds a value in it (JSON, combined) or the CSV header names it: whether or not it is
    /// read on each line, for the hint that suggests `--trusted-proxies`.
    pub forwarded_seen: Option<String>,
    /// W3C: where each slot's field is under the current `#Fields:` directive.
    w3c: Option<Box<W3c>>,
}

/// A W3C log's fields: each slot (a role, a key part) is a field by name, whose place is
/// given by the last `#Fields:` directive (IIS writes a new one after each restart, and its
/// fields may change then).
struct W3c {
    /// Each slot's field names, in lower case: the first one `#Fields:` names is taken.
    slots: Vec<Vec<String>>,
    /// Each slot's column under the current `#Fields:`.
    cols: Vec<Option<usize>>,
    /// Each slot: a header's field (`cs(User-Agent)`), decoded (see [`W3c::apply`]).
    header: Vec<bool>,
    /// Each slot: read as a request header (`--key header:NAME`, the forwarding header),
    /// whatever its field's name (an IIS custom field is named as the header it logs).
    header_slot: Vec<bool>,
    /// The current `#Fields:`.
    fields: Vec<String>,
    /// The `date` slot, when the time is `date` and `time` (the time's slot is `time`'s).
    date: Option<usize>,
    /// The `cs-uri-query` slot, when the path is `cs-uri-stem` (its query joins it).
    query: Option<usize>,
    /// The columns of the line scanned.
    colspans: Vec<Span>,
    /// The current `#Fields:` names CloudFront's fields (`x-edge-*`, `x-host-header`).
    cloudfront_fields: bool,
    /// The current `#Fields:` block's separator: chosen by its first data line (see
    /// [`Extractor::scan_w3c`]), then kept.
    sep: Option<u8>,
}

impl W3c {
    /// The current block is CloudFront's: it names CloudFront's fields, or its lines are
    /// separated by tabs (IIS never writes tabs). Its headers are percent-decoded, else a
    /// `+` in one is a space.
    fn cloudfront(&self) -> bool {
        self.cloudfront_fields || self.sep == Some(b'\t')
    }
}

impl W3c {
    /// Takes a `#Fields:` directive's names. A CloudFront log (its `x-edge-*` fields)
    /// percent-encodes the headers it logs (`Mozilla/5.0%20(X11;...`) and its
    /// `x-forwarded-for`; IIS writes a space in a header as `+`: both are decoded, so that a
    /// key is the header the server received. A header's field is `cs(NAME)`, IIS's
    /// `cs-host`, `x-forwarded-for`, or any field read as a header (an IIS custom field,
    /// named as the header it logs).
    fn apply(&mut self, fields: Vec<String>) {
        let cloudfront = fields
            .iter()
            .any(|f| f.starts_with("x-edge-") || f == "x-host-header");
        for (i, cands) in self.slots.iter().enumerate() {
            let col = cands
                .iter()
                .find_map(|c| fields.iter().position(|f| f == c));
            self.cols[i] = col;
            self.header[i] = col.is_some_and(|c| {
                let f = &fields[c];
                self.header_slot[i]
                    || f.starts_with("cs(")
                    || f == "cs-host"
                    || f == "x-forwarded-for"
            });
        }
        self.fields = fields;
        self.cloudfront_fields = cloudfront;
        self.sep = None;
    }

    /// The first name of `cands` that the current `#Fields:` has.
    fn find(&self, cands: &[String]) -> Option<String> {
        cands.iter().find(|c| self.fields.contains(c)).cloned()
    }
}

fn lower(s: &str) -> String {
    s.to_ascii_lowercase()
}

impl Extractor {
    /// Resolves the roles for an input whose first lines are `head`.
    pub fn new(
        format: LogFormat,
        head: &[Vec<u8>],
        needs: &Needs,
        names: &Names,
        path: &str,
    ) -> Result<Extractor, CliError> {
        let first = head.first().ok_or_else(|| CliError::Data {
            path: path.into(),
            line: 0,
            text: String::new(),
            reason: "the input is empty".into(),
        })?;
        let format = match format {
            LogFormat::Auto => detect(head),
            f => f,
        };
        let fail = |reason: String| CliError::Data {
            path: path.into(),
            line: 0,
            text: String::new(),
            reason,
        };
        let mut ex = Extractor {
            format,
            time: 0,
            ip: None,
            path: None,
            method: None,
            cost: None,
            fwd: None,
            keys: Vec::new(),
            json_paths: Vec::new(),
            delimiter: names.delimiter,
            skip_first: false,
            csv_open: false,
            combined_last: 0,
            spans: Vec::new(),
            combined: [None; COMBINED_LEN],
            scratch: Vec::new(),
            decoded: Vec::new(),
            chosen: Vec::new(),
            forwarded_seen: None,
            msec_detected: false,
            w3c: None,
        };
        match format {
            LogFormat::Combined | LogFormat::Auto => {
                let pick = |role: &str, given: &Option<String>, default: &str| {
                    let name = given.as_deref().unwrap_or(default);
                    combined_field(name).ok_or_else(|| {
                        fail(format!(
                            "the combined format has no field {name:?} for the {role} (fields: {})",
                            COMBINED_FIELDS.join(", ")
                        ))
                    })
                };
                ex.time = pick("timestamp", &names.time, "time")?;
                let seconds = matches!(
                    names.time_unit,
                    crate::timefmt::EpochUnit::Auto | crate::timefmt::EpochUnit::S
                );
                if names.time.is_none() && seconds && combined_msec(head) {
                    ex.time = COMBINED_MSEC;
                    ex.msec_detected = true;
                }
                if needs.ip {
                    ex.ip = Some(pick("client address", &names.ip, "ip")?);
                }
                if needs.path {
                    ex.path = Some(pick("path", &names.path, "path")?);
                }
                if needs.method {
                    ex.method = Some(pick("method", &names.method, "method")?);
                }
                if let Some(c) = &names.cost {
                    ex.cost = Some(pick("cost", &Some(c.clone()), "")?);
                }
                // The field is used with --trusted-proxies (and must then be there), else only
                // looked at for the hint (a field named in vain is then no error).
                let picked = pick("forwarding header", &names.forwarded, "x_forwarded_for");
                let picked = if needs.forwarded {
                    Some(picked?)
                } else {
                    picked.ok().filter(|_| needs.ip)
                };
                if let Some(i) = picked {
                    let (present, seen) = combined_forwarded(head, i);
                    if seen {
                        ex.forwarded_seen = Some(COMBINED_FIELDS[i].to_string());
                    }
                    if needs.forwarded {
                        if !present {
                            return Err(fail(format!(
                                "--trusted-proxies needs the {} header, and no first line has it \
                                 (nginx's `main` format logs it as a quoted field after the \
                                 User-Agent: \"$http_x_forwarded_for\"){}",
                                names.forwarded_header.header_name(),
                                if names.forwarded.is_some() {
                                    ""
                                } else {
                                    "; name its field with --forwarded-field"
                                }
                            )));
                        }
                        ex.fwd = Some(i);
                    }
                }
                for (header, name) in &needs.key_fields {
                    let i = if *header {
                        match lower(name).as_str() {
                            "user-agent" | "user_agent" => 11,
                            "referer" | "referrer" => 10,
                            "x-forwarded-for" | "x_forwarded_for" | "forwarded" => {
                                return Err(fail(format!(
                                    "the combined format logs no header {name:?} as a key, only \
                                     Referer and User-Agent; to key requests by the client that \
                                     proxies name in it, use --trusted-proxies (with --key ip)"
                                )))
                            }
                            _ => {
                                return Err(fail(format!(
                                    "the combined format logs no header {name:?}, only Referer and User-Agent"
                                )))
                            }
                        }
                    } else {
                        pick("key", &Some(name.clone()), "")?
                    };
                    ex.keys.push(i);
                }
                let all = [Some(ex.time), ex.ip, ex.path, ex.method, ex.cost, ex.fwd];
                ex.combined_last = all
                    .iter()
                    .flatten()
                    .chain(ex.keys.iter())
                    .copied()
                    .max()
                    .unwrap_or(3);
                // The method and path come from the request: scanning it is scanning to 7.
                for c in ex.chosen_combined() {
                    ex.chosen.push(c);
                }
            }
            LogFormat::Alb => ex.resolve_alb(needs, names, &fail)?,
            LogFormat::Haproxy => ex.resolve_haproxy(head, needs, names, &fail)?,
            LogFormat::W3c => ex.resolve_w3c(head, needs, names, &fail)?,
            LogFormat::Jsonl => {
                // Every name detection may look for, looked for in one scan of each first
                // line (a line may be up to 16 MiB: not one scan per name).
                let mut cands: Vec<String> = [TIME, IP, PATH, METHOD]
                    .iter()
                    .flat_map(|c| c.iter().map(|s| s.to_string()))
                    .collect();
                // The time, address, method, path and cost fields named: looked for too (see
                // `resolve`).
                cands.extend(names.time.iter().cloned());
                cands.extend(names.ip.iter().cloned());
                cands.extend(names.method.iter().cloned());
                cands.extend(names.path.iter().cloned());
                cands.extend(names.cost.iter().cloned());
                let fwd = forwarded_candidates(names);
                if needs.ip || needs.forwarded {
                    cands.extend(fwd.iter().cloned());
                }
                for (header, name) in &needs.key_fields {
                    if *header {
                        cands.extend(header_candidates(name));
                    }
                }
                cands.sort_unstable();
                cands.dedup();
                let paths: Vec<JsonPath> = cands
                    .iter()
                    .map(|p| p.split('.').map(|s| s.as_bytes().to_vec()).collect())
                    .collect();
                let mut found = vec![false; paths.len()];
                // Found with a value (not empty, not `-`).
                let mut valued = vec![false; paths.len()];
                // Found as a string, number or boolean (not an object or array).
                let mut scalar = vec![false; paths.len()];
                let mut out = vec![None; paths.len()];
                for l in head {
                    // A value found before a line turns out malformed counts, as it did when
                    // each name was looked for alone (the scan stopped there).
                    scan_json(l, &paths, &mut out);
                    for (i, o) in out.iter().enumerate() {
                        let Some(s) = o else { continue };
                        let (a, b) = (s.start as usize, s.end as usize);
                        found[i] = true;
                        valued[i] |= !matches!(&l[a..b], b"" | b"-");
                        // A string's span starts after its quote; an object's at its brace.
                        let composite =
                            matches!(l.get(a), Some(b'{' | b'[')) && (a == 0 || l[a - 1] != b'"');
                        scalar[i] |= !composite;
                    }
                }
                let at = |p: &str| cands.binary_search_by(|c| c.as_str().cmp(p)).ok();
                let present = |p: &str| -> bool {
                    at(p).is_some_and(|i| if scalar_role(p) { scalar[i] } else { found[i] })
                };
                ex.resolve(needs, names, present, &fail)?;
                if needs.ip || needs.forwarded {
                    ex.forwarded_seen = fwd
                        .iter()
                        .find(|c| at(c).is_some_and(|i| valued[i]))
                        .cloned();
                }
            }
            LogFormat::Csv => {
                // The header's names as written (for messages), and compared in lower case.
                let written: Vec<String> = {
                    let mut out = vec![None; 4096];
                    if scan_csv(first, names.delimiter, &mut out) != CsvLine::Record {
                        return Err(fail("the CSV header line does not parse".into()));
                    }
                    out.iter()
                        .flatten()
                        .map(|s| {
                            let raw = &first[s.start as usize..s.end as usize];
                            let mut v = Vec::new();
                            unescape_csv(raw, &mut v);
                            String::from_utf8_lossy(&v).trim().to_string()
                        })
                        .collect()
                };
                if written.len() < 2 {
                    return Err(fail(format!(
                        "the CSV header has one column ({:?}): is the delimiter {:?} right? (--csv-delimiter)",
                        written.first().map(String::as_str).unwrap_or(""),
                        names.delimiter as char
                    )));
                }
                let header: Vec<String> = written.iter().map(|h| lower(h)).collect();
                ex.skip_first = true;
                let col = |p: &str| header.iter().position(|h| *h == lower(p));
                ex.resolve(needs, names, |p| col(p).is_some(), &fail)?;
                if needs.ip || needs.forwarded {
                    ex.forwarded_seen = forwarded_candidates(names)
                        .into_iter()
                        .find(|c| col(c).is_some());
                }
                // The scanner fills columns; a role's slot is its column. A named column the
                // header lacks is an error: reading some other column instead would be silent.
                let cols: Vec<usize> = ex
                    .json_paths
                    .iter()
                    .zip(&ex.chosen)
                    .map(|(p, (role, name))| {
                        col(&String::from_utf8_lossy(&p.join(&b'.'))).ok_or_else(|| {
                            fail(format!(
                                "the CSV header has no column {name:?} for the {role} (columns: {})",
                                header.join(", ")
                            ))
                        })
                    })
                    .collect::<Result<_, _>>()?;
                let remap = |s: &mut usize| *s = cols[*s];
                remap(&mut ex.time);
                for s in [
                    &mut ex.ip,
                    &mut ex.path,
                    &mut ex.method,
                    &mut ex.cost,
                    &mut ex.fwd,
                ]
                .into_iter()
                .flatten()
                {
                    remap(s);
                }
                for s in ex.keys.iter_mut() {
                    remap(s);
                }
                let width = cols.iter().max().map_or(1, |m| m + 1);
                ex.spans = vec![None; width];
                ex.json_paths.clear();
            }
        }
        let n = ex.spans.len().max(COMBINED_LEN);
        ex.scratch = vec![Vec::new(); n];
        ex.decoded = vec![false; n];
        // (The combined, ALB and HAProxy formats hold a request line by definition: a line
        // whose request the server could not read has none, and no method; a W3C log's
        // method field was checked.)
        if needs.method
            && ex.method.is_none()
            && !matches!(
                ex.format,
                LogFormat::Combined | LogFormat::Alb | LogFormat::Haproxy | LogFormat::W3c
            )
        {
            ex.method_from_request_line(head, path)?;
        }
        Ok(ex)
    }

    /// JSON and CSV without a method field, when a route or a key needs the method: it must
    /// come from a path field holding request lines (`GET /x HTTP/1.1`), seen in the first
    /// lines. Else every request would have an empty method, and a route naming one would
    /// silently match nothing.
    fn method_from_request_line(&mut self, head: &[Vec<u8>], path: &str) -> Result<(), CliError> {
        let lines = head.iter().skip(usize::from(self.skip_first));
        let mut found = false;
        for l in lines {
            if self.scan(l) && !self.request(l).0.is_empty() {
                found = true;
                break;
            }
        }
        if found {
            return Ok(());
        }
        let from_path = match self.chosen.iter().find(|(r, _)| r == "path") {
            Some((_, p)) => {
                format!(", and the path field {p:?} holds no request line (\"GET /x HTTP/1.1\")")
            }
            None => String::new(),
        };
        Err(CliError::Data {
            path: path.into(),
            line: 0,
            text: String::new(),
            reason: format!(
                "no method field found in the first lines (looked for {}){from_path}; a route \
                 with a method or --key method needs it: name it with --method-field (nested \
                 JSON fields with dots, e.g. req.method)",
                METHOD.join(", ")
            ),
        })
    }

    /// Each role given a field, and the field.
    fn roles(&self) -> impl Iterator<Item = (&'static str, usize)> {
        [
            ("time", Some(self.time)),
            ("ip", self.ip),
            ("path", self.path),
            ("method", self.method),
            ("cost", self.cost),
            ("forwarded", self.fwd),
        ]
        .into_iter()
        .filter_map(|(role, slot)| slot.map(|i| (role, i)))
    }

    fn chosen_combined(&self) -> Vec<(String, String)> {
        self.roles()
            .chain(self.keys.iter().map(|&i| ("key", i)))
            .map(|(role, i)| (role.into(), COMBINED_FIELDS[i].into()))
            .collect()
    }

    /// The roles of a format whose fields are at fixed places (ALB, HAProxy): each field
    /// named for one by `pick`, else the format's `(time, client, request line)`; a method or
    /// cost only when named.
    fn place(
        &mut self,
        needs: &Needs,
        names: &Names,
        pick: &dyn Fn(&str, &str) -> Result<usize, CliError>,
        (time, client, request): (usize, usize, usize),
    ) -> Result<(), CliError> {
        self.time = match &names.time {
            Some(n) => pick("timestamp", n)?,
            None => time,
        };
        if needs.ip {
            self.ip = Some(match &names.ip {
                Some(n) => pick("client address", n)?,
                None => client,
            });
        }
        if needs.path || needs.method {
            self.path = Some(match &names.path {
                Some(n) => pick("path", n)?,
                None => request,
            });
        }
        if let Some(m) = &names.method {
            self.method = Some(pick("method", m)?);
        }
        if let Some(c) = &names.cost {
            self.cost = Some(pick("cost", c)?);
        }
        Ok(())
    }

    /// After [`place`](Self::place) and the keys: the report's names of the roles' fields
    /// (`name`), the last field a line is read to, and room for the format's `len` fields.
    fn placed(&mut self, name: &dyn Fn(usize) -> String, len: usize) {
        // The key's fields too, as the named formats' reports say them (`key=user_agent`).
        let named: Vec<_> = self
            .roles()
            .chain(self.keys.iter().map(|&i| ("key", i)))
            .map(|(role, i)| (role.into(), name(i)))
            .collect();
        self.chosen.extend(named);
        let last = self
            .roles()
            .map(|(_, i)| i)
            .chain(self.keys.iter().copied());
        self.combined_last = last.max().unwrap_or(self.time);
        self.spans = vec![None; len];
    }

    /// An ALB log: each role's field by its place. The time is when the response went
    /// (`time`, the lines' order), or `--time-field request_creation_time` on a log sorted by
    /// it; the client the address that connected to the load balancer; the method and path the
    /// request line's (its URL's path).
    fn resolve_alb(
        &mut self,
        needs: &Needs,
        names: &Names,
        fail: &dyn Fn(String) -> CliError,
    ) -> Result<(), CliError> {
        let pick = |role: &str, name: &str| {
            alb_field(name).ok_or_else(|| {
                fail(format!(
                    "the ALB format has no field {name:?} for the {role} (fields: {})",
                    ALB_FIELDS.join(", ")
                ))
            })
        };
        // `time` (the response's), in whose order the load balancer writes its lines: timed by
        // the request's arrival (`request_creation_time`), every line after a slower request
        // goes back in time and is clamped forward, bunching the requests (a trial: 7.4 %
        // rejected against 0.66 % for the same lines sorted; by `time`, 0.33 %).
        self.place(needs, names, &pick, (ALB_TIME, ALB_CLIENT, ALB_REQUEST))?;
        if needs.forwarded {
            return Err(fail(
                "an ALB log holds no X-Forwarded-For or Forwarded header: its client field is \
                 the address that connected to the load balancer, the client itself unless a \
                 proxy or CDN stands before it (whose forwarding header the ALB does not log); \
                 drop --trusted-proxies"
                    .into(),
            ));
        }
        for (header, name) in &needs.key_fields {
            let i = if *header {
                match lower(name).as_str() {
                    "user-agent" | "user_agent" => ALB_USER_AGENT,
                    _ => {
                        return Err(fail(format!(
                            "an ALB log holds no header {name:?}, only User-Agent (its other \
                             fields: --key field:NAME, one of {})",
                            ALB_FIELDS.join(", ")
                        )))
                    }
                }
            } else {
                pick("key", name)?
            };
            self.keys.push(i);
        }
        self.placed(&|i| ALB_FIELDS[i].into(), ALB_LEN);
        Ok(())
    }

    /// An HAProxy log: each role's field by its place. The time is the bracketed date, the
    /// request's (`%tr`; the accept date, `%t`, in older versions' format), written
    /// in the host's local time without its offset: read in `--timezone`; the client the
    /// address of `address:port`; the method and path the request line's. HAProxy logs a
    /// header only where the frontend captures it, without its name: `hdrN`, the Nth
    /// `capture request header` (from 0).
    fn resolve_haproxy(
        &mut self,
        head: &[Vec<u8>],
        needs: &Needs,
        names: &Names,
        fail: &dyn Fn(String) -> CliError,
    ) -> Result<(), CliError> {
        let pick = |role: &str, name: &str| {
            haproxy_field(name).ok_or_else(|| {
                fail(format!(
                    "the HAProxy format has no field {name:?} for the {role} (fields: {}, and \
                     hdr0, hdr1, ...: the captured request headers, in the order of the \
                     frontend's `capture request header` lines)",
                    HAPROXY_FIELDS.join(", ")
                ))
            })
        };
        self.place(
            needs,
            names,
            &pick,
            (HAPROXY_TIME, HAPROXY_CLIENT, HAPROXY_REQUEST),
        )?;
        if needs.forwarded {
            let Some(f) = &names.forwarded else {
                return Err(fail(format!(
                    "--trusted-proxies needs the {} header, and HAProxy logs a header only \
                     where the frontend captures it (`capture request header {} len 64`), \
                     without its name: name its field with --forwarded-field hdrN (N its place \
                     among the `capture request header` lines, from 0)",
                    names.forwarded_header.header_name(),
                    names.forwarded_header.header_name(),
                )));
            };
            self.fwd = Some(pick("forwarding header", f)?);
        }
        for (header, name) in &needs.key_fields {
            let i = if *header {
                return Err(fail(format!(
                    "HAProxy logs no header names: a header captured by the frontend (`capture \
                     request header {name} len 64`) is the field hdrN, N its place among the \
                     `capture request header` lines (from 0): --key field:hdr0"
                )));
            } else {
                pick("key", name)?
            };
            self.keys.push(i);
        }
        let name = |i: usize| match HAPROXY_FIELDS.get(i) {
            Some(n) => n.to_string(),
            None => format!("hdr{}", i - HAPROXY_HDR0),
        };
        // `option httplog clf` lines write each captured header in a quoted column of its
        // own: no `{...}` block, which would be empty on every line.
        if head.iter().any(|l| haproxy_clf(l)) {
            let all = [
                Some(self.time),
                self.ip,
                self.path,
                self.method,
                self.cost,
                self.fwd,
            ];
            let used = all.into_iter().flatten().chain(self.keys.iter().copied());
            if let Some(i) = used
                .into_iter()
                .find(|&i| i == HAPROXY_REQ_HEADERS || i == HAPROXY_RES_HEADERS)
            {
                return Err(fail(format!(
                    "option httplog clf lines hold no {} block ({{...}}): each captured header \
                     is a quoted column of its own, after the cookies, the request headers' \
                     first, then the response headers': name one with hdrN (N its place \
                     among them, from 0)",
                    name(i)
                )));
            }
        }
        self.placed(&name, HAPROXY_LEN);
        Ok(())
    }

    /// A W3C log (IIS, CloudFront): each role's field by its W3C name, under the `#Fields:`
    /// directive in force at the first data line (and each later one from its line on). The
    /// time is `date` and `time` (UTC), the client `c-ip`, the method `cs-method`, the path
    /// `cs-uri-stem` and its `cs-uri-query`; a header `cs(NAME)` or a field named NAME (Host:
    /// `x-host-header`, `cs(host)`, `cs-host`).
    fn resolve_w3c(
        &mut self,
        head: &[Vec<u8>],
        needs: &Needs,
        names: &Names,
        fail: &dyn Fn(String) -> CliError,
    ) -> Result<(), CliError> {
        // The directive in force at the first data line (lines before any are read by the
        // first one that comes): an empty `#Fields:` names nothing, and is skipped.
        let mut in_force = None;
        let mut data_seen = false;
        for l in head {
            match w3c_fields(l) {
                Some(f) if f.is_empty() => {}
                Some(f) => {
                    in_force = Some(f);
                    if data_seen {
                        break;
                    }
                }
                None if l.first() == Some(&b'#') || l.trim_ascii().is_empty() => {}
                None if in_force.is_some() => break,
                None => data_seen = true,
            }
        }
        let Some(fields) = in_force else {
            return Err(fail(
                "no #Fields directive naming fields in the first lines: a W3C log names its fields in a \
                 `#Fields: date time ...` line (IIS and CloudFront write one at the start of \
                 each file); a log cut from the middle of a file needs its file's directives \
                 before it"
                    .into(),
            ));
        };
        let mut w = W3c {
            slots: Vec::new(),
            cols: Vec::new(),
            header: Vec::new(),
            header_slot: Vec::new(),
            fields: fields.clone(),
            date: None,
            query: None,
            colspans: Vec::new(),
            cloudfront_fields: false,
            sep: None,
        };
        let list = fields.join(" ");
        let mut chosen = Vec::new();
        // A slot for one of `cands` (lower case), which the #Fields must name if `required`.
        let mut add = |w: &mut W3c,
                       role: &str,
                       cands: Vec<String>,
                       required: Option<&str>|
         -> Result<usize, CliError> {
            let found = w.find(&cands);
            match (&found, required) {
                (Some(f), _) => chosen.push((role.to_string(), f.clone())),
                (None, Some(what)) => {
                    return Err(fail(format!(
                        "the W3C #Fields directive names no {} for the {what} (fields: {list})",
                        cands.join(" or ")
                    )))
                }
                (None, None) => {}
            }
            w.slots.push(cands);
            Ok(w.slots.len() - 1)
        };
        let given = |n: &Option<String>| n.as_ref().map(|n| vec![lower(n)]);
        self.time = match given(&names.time) {
            Some(c) => add(&mut w, "time", c, Some("timestamp (--time-field)"))?,
            None => {
                if !(fields.iter().any(|f| f == "date") && fields.iter().any(|f| f == "time")) {
                    return Err(fail(format!(
                        "the W3C #Fields directive names no date and time fields (fields: \
                         {list}); name a field holding the whole time with --time-field"
                    )));
                }
                w.date = Some(add(&mut w, "date", vec!["date".into()], None)?);
                add(&mut w, "time", vec!["time".into()], None)?
            }
        };
        if needs.ip {
            let c = given(&names.ip).unwrap_or_else(|| vec!["c-ip".into()]);
            self.ip = Some(add(&mut w, "ip", c, Some("client address (--ip-field)"))?);
        }
        if needs.path {
            let c = given(&names.path).unwrap_or_else(|| vec!["cs-uri-stem".into()]);
            self.path = Some(add(&mut w, "path", c, Some("path (--path-field)"))?);
            if names.path.is_none() {
                w.query = Some(add(&mut w, "query", vec!["cs-uri-query".into()], None)?);
            }
        }
        if needs.method {
            let c = given(&names.method).unwrap_or_else(|| vec!["cs-method".into()]);
            self.method = Some(add(&mut w, "method", c, Some("method (--method-field)"))?);
        }
        if let Some(c) = given(&names.cost) {
            self.cost = Some(add(&mut w, "cost", c, Some("cost (--cost-field)"))?);
        }
        // The slots read as request headers (decoded as headers are).
        let mut header_slots = Vec::new();
        let fwd = given(&names.forwarded).unwrap_or_else(|| {
            let h = names.forwarded_header.header_name().to_ascii_lowercase();
            vec![h.clone(), format!("cs({h})")]
        });
        if needs.forwarded {
            if w.find(&fwd).is_none() {
                return Err(fail(format!(
                    "--trusted-proxies needs the {} header, and the W3C #Fields directive names \
                     no {} (fields: {list}); CloudFront logs it as x-forwarded-for, IIS as a \
                     custom field: name it with --forwarded-field",
                    names.forwarded_header.header_name(),
                    fwd.join(" or ")
                )));
            }
            let i = add(&mut w, "forwarded", fwd, None)?;
            header_slots.push(i);
            self.fwd = Some(i);
        } else if needs.ip {
            // For the hint that suggests --trusted-proxies: a first line with a value there.
            if let Some(f) = w.find(&fwd) {
                let col = fields.iter().position(|x| *x == f);
                let mut cols = Vec::new();
                let seen = head.iter().filter(|l| !l.starts_with(b"#")).any(|l| {
                    split_w3c(l, &mut cols)
                        && cols.len() == fields.len()
                        && col.and_then(|c| cols.get(c)).is_some_and(|s| {
                            !matches!(&l[s.start as usize..s.end as usize], b"" | b"-")
                        })
                });
                if seen {
                    self.forwarded_seen = Some(f);
                }
            }
        }
        for (header, name) in &needs.key_fields {
            let n = lower(name);
            let (cands, what) = if *header {
                let c = match n.as_str() {
                    // CloudFront's cs(Host) is the distribution's domain; the Host header the
                    // viewer sent is x-host-header. IIS names it cs-host (its only header
                    // field written without parentheses).
                    "host" => vec![
                        "x-host-header".into(),
                        "cs(host)".into(),
                        "cs-host".into(),
                        "host".into(),
                    ],
                    _ => vec![format!("cs({n})"), n.clone()],
                };
                (c, format!("header {name:?}"))
            } else {
                (vec![n.clone()], "key".to_string())
            };
            let i = add(&mut w, "key", cands, Some(&what))?;
            if *header {
                header_slots.push(i);
            }
            self.keys.push(i);
        }
        w.cols = vec![None; w.slots.len()];
        w.header = vec![false; w.slots.len()];
        w.header_slot = vec![false; w.slots.len()];
        for i in header_slots {
            w.header_slot[i] = true;
        }
        w.apply(fields);
        // The report names the fields chosen (the time as `date time`).
        for (role, f) in chosen {
            match role.as_str() {
                "date" => self.chosen.push(("time".into(), "date time".into())),
                "time" if w.date.is_some() => {}
                "query" => {}
                _ => self.chosen.push((role, f)),
            }
        }
        self.spans = vec![None; w.slots.len()];
        self.w3c = Some(Box::new(w));
        Ok(())
    }

    /// A W3C directive line (`#Fields: ...`, `#Version: 1.0`, a `#` comment): a new
    /// `#Fields:` applies from here on (an empty one, naming nothing, is skipped). Not a
    /// request, nor an unusable line. `false` for any other line, and in any other format.
    #[inline]
    pub fn directive(&mut self, line: &[u8]) -> bool {
        if self.format != LogFormat::W3c || line.first() != Some(&b'#') {
            return false;
        }
        if let (Some(f), Some(w)) = (
            w3c_fields(line).filter(|f| !f.is_empty()),
            self.w3c.as_mut(),
        ) {
            w.apply(f);
        }
        true
    }

    /// Scans a W3C data line: its fields must be as many as the current `#Fields:` names;
    /// `-` is an empty value (none). The block's first line whose fields are as many, split
    /// at tabs if it holds one (CloudFront), else at spaces (IIS), chooses the separator of
    /// the lines after it: a tab inside an IIS value is not a separator.
    fn scan_w3c(&mut self, line: &[u8]) -> bool {
        let Some(w) = self.w3c.as_mut() else {
            return false;
        };
        if line.first() == Some(&b'#') {
            return false;
        }
        match w.sep {
            Some(sep) => {
                if !split_w3c_at(line, sep, &mut w.colspans) || w.colspans.len() != w.fields.len() {
                    return false;
                }
            }
            None => {
                let tab = memchr::memchr(b'\t', line).is_some();
                let fits = |sep: u8, cols: &mut Vec<Span>| {
                    split_w3c_at(line, sep, cols) && cols.len() == w.fields.len()
                };
                if tab && fits(b'\t', &mut w.colspans) {
                    w.sep = Some(b'\t');
                } else if fits(b' ', &mut w.colspans) {
                    w.sep = Some(b' ');
                } else {
                    return false;
                }
            }
        }
        let cloudfront = w.cloudfront();
        for i in 0..w.slots.len() {
            self.decoded[i] = false;
            let s = w.cols[i]
                .map(|c| w.colspans[c])
                .filter(|s| &line[s.start as usize..s.end as usize] != b"-");
            self.spans[i] = s;
            if let (Some(s), true) = (s, w.header[i]) {
                let v = &line[s.start as usize..s.end as usize];
                let out = &mut self.scratch[i];
                if cloudfront && memchr::memchr(b'%', v).is_some() {
                    decode_hex_escapes(v, b'%', out);
                    self.decoded[i] = true;
                } else if !cloudfront && memchr::memchr(b'+', v).is_some() {
                    // (IIS writes a `%` as it came: only the `+` is decoded.)
                    out.clear();
                    out.extend(v.iter().map(|&b| if b == b'+' { b' ' } else { b }));
                    self.decoded[i] = true;
                }
            }
        }
        if let Some(d) = w.date {
            let t = self.time;
            match (self.spans[d], self.spans[t]) {
                (Some(ds), Some(ts)) => {
                    let out = &mut self.scratch[t];
                    out.clear();
                    out.extend_from_slice(&line[ds.start as usize..ds.end as usize]);
                    out.push(b' ');
                    out.extend_from_slice(&line[ts.start as usize..ts.end as usize]);
                    self.decoded[t] = true;
                }
                _ => self.spans[t] = None,
            }
        }
        if let (Some(p), Some(q)) = (self.path, w.query) {
            if let (Some(ps), Some(qs)) = (self.spans[p], self.spans[q]) {
                let out = &mut self.scratch[p];
                out.clear();
                out.extend_from_slice(&line[ps.start as usize..ps.end as usize]);
                out.push(b'?');
                out.extend_from_slice(&line[qs.start as usize..qs.end as usize]);
                self.decoded[p] = true;
            }
        }
        true
    }

    /// JSON and CSV: picks each role's field by name, given or detected.
    fn resolve(
        &mut self,
        needs: &Needs,
        names: &Names,
        present: impl Fn(&str) -> bool,
        fail: &dyn Fn(String) -> CliError,
    ) -> Result<(), CliError> {
        let add = |ex: &mut Extractor,
                   role: &str,
                   given: &Option<String>,
                   cands: Vec<String>|
         -> Result<usize, CliError> {
            let name = match given {
                Some(n) => n.clone(),
                None => cands.iter().find(|c| present(c)).cloned().ok_or_else(|| {
                    fail(format!(
                        "no {role} field found in the first lines (looked for {}); name it with --{role}-field",
                        cands.join(", ")
                    ))
                })?,
            };
            ex.chosen.push((role.to_string(), name.clone()));
            let path: JsonPath = name.split('.').map(|s| s.as_bytes().to_vec()).collect();
            ex.json_paths.push(path);
            Ok(ex.json_paths.len() - 1)
        };
        let v = |c: &[&str]| c.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // A JSON field named for the time or the address that no first line has: every line
        // would be bad for it, one by one ("no timestamp"); said once, as a CSV column is.
        if matches!(self.format, LogFormat::Jsonl) {
            let ip = names.ip.as_ref().filter(|_| needs.ip);
            for (role, given) in [("time", names.time.as_ref()), ("ip", ip)] {
                if let Some(f) = given.filter(|f| !present(f)) {
                    return Err(fail(format!(
                        "the {role} field {f:?} (--{role}-field) is in none of the first lines \
                         (nested JSON fields with dots, e.g. request.time)"
                    )));
                }
            }
        }
        self.time = add(self, "time", &names.time, v(TIME))?;
        if needs.ip {
            self.ip = Some(add(self, "ip", &names.ip, v(IP))?);
        }
        if needs.path {
            // (A CSV column named but missing is refused below, naming the columns.)
            let json = matches!(self.format, LogFormat::Jsonl);
            if let Some(p) = names.path.as_ref().filter(|p| json && !present(p)) {
                // Every request's path would be empty: it matches no route, and the policy
                // looks harmless.
                return Err(fail(format!(
                    "the path field {p:?} (--path-field) is in none of the first lines; routes \
                     and path: keys need it (nested JSON fields with dots, e.g. request.uri)"
                )));
            }
            self.path = Some(add(self, "path", &names.path, v(PATH))?);
        }
        if needs.method {
            if let Some(m) = names.method.as_ref().filter(|m| !present(m)) {
                // Every request's method would be empty: a route naming one matches nothing.
                return Err(fail(format!(
                    "the method field {m:?} (--method-field) is in none of the first lines; a \
                     route with a method or --key method needs it (nested JSON fields with \
                     dots, e.g. req.method)"
                )));
            }
            // A missing method field is fine when the path field holds the request line.
            let m = names
                .method
                .clone()
                .or_else(|| METHOD.iter().find(|c| present(c)).map(|s| s.to_string()));
            if let Some(m) = m {
                self.method = Some(add(self, "method", &Some(m), vec![])?);
            } else if self.path.is_none() {
                // (`--key method` alone: the request line is the method's only source.)
                let p = names
                    .path
                    .clone()
                    .or_else(|| PATH.iter().find(|c| present(c)).map(|s| s.to_string()));
                if let Some(p) = p {
                    self.path = Some(add(self, "path", &Some(p), vec![])?);
                }
            }
        }
        if let Some(c) = &names.cost {
            if matches!(self.format, LogFormat::Jsonl) && !present(c) {
                // Every request would cost 1, silently.
                return Err(fail(format!(
                    "the cost field {c:?} (--cost-field) is in none of the first lines \
                     (nested JSON fields with dots, e.g. req.weight)"
                )));
            }
            self.cost = Some(add(self, "cost", &Some(c.clone()), vec![])?);
        }
        if needs.forwarded {
            if let Some(f) = names.forwarded.as_ref().filter(|f| !present(f)) {
                // Every line would have no header, and be keyed by its proxy: silently.
                return Err(fail(format!(
                    "the forwarding header's field {f:?} (--forwarded-field) is in none of the \
                     first lines; --trusted-proxies needs it (nested JSON fields with dots, e.g. \
                     req.headers.x-forwarded-for)"
                )));
            }
            let cands = forwarded_candidates(names);
            self.fwd = Some(add(self, "forwarded", &names.forwarded, cands)?);
        }
        for (header, name) in &needs.key_fields {
            let cands = if *header {
                header_candidates(name)
            } else {
                vec![name.clone()]
            };
            let given = (!*header).then(|| name.clone());
            let i = match add(self, "key", &given, cands.clone()) {
                Ok(i) => i,
                // A header absent from the first lines may appear later: take nginx's name.
                Err(_) if *header => add(self, "key", &Some(cands[0].clone()), vec![])?,
                Err(e) => return Err(e),
            };
            self.keys.push(i);
        }
        self.spans = vec![None; self.json_paths.len()];
        Ok(())
    }

    /// Scans a line; `false` if it is not in the input's format.
    #[inline]
    pub fn scan(&mut self, line: &[u8]) -> bool {
        let ok = match self.format {
            LogFormat::Jsonl => scan_json(line, &self.json_paths, &mut self.spans),
            LogFormat::Csv => {
                let r = scan_csv(line, self.delimiter, &mut self.spans);
                self.csv_open = r == CsvLine::Open;
                r == CsvLine::Record
            }
            LogFormat::Alb => scan_alb(line, self.combined_last, &mut self.spans),
            LogFormat::Haproxy => scan_haproxy(line, self.combined_last, &mut self.spans),
            LogFormat::W3c => return self.scan_w3c(line),
            _ => {
                self.combined = [None; COMBINED_LEN];
                scan_combined(line, self.combined_last, &mut self.combined)
            }
        };
        if !ok {
            return false;
        }
        let spans: &[Option<Span>] = match self.format {
            LogFormat::Combined | LogFormat::Auto => &self.combined,
            _ => &self.spans,
        };
        let json = self.format == LogFormat::Jsonl;
        for (i, s) in spans.iter().enumerate() {
            self.decoded[i] = false;
            if let Some(s) = s {
                let (a, b) = (s.start as usize, s.end as usize);
                // An array (a string's span starts after its quote): a header logged as the
                // list of its lines, taken as their values joined (an array of anything else
                // stays its text).
                if json && line.get(a) == Some(&b'[') && (a == 0 || line[a - 1] != b'"') {
                    self.decoded[i] = join_json_array(&line[a..b], &mut self.scratch[i]);
                    continue;
                }
                if s.escaped {
                    let raw = &line[s.start as usize..s.end as usize];
                    let out = &mut self.scratch[i];
                    match self.format {
                        LogFormat::Jsonl => {
                            if !unescape_json(raw, out) {
                                return false;
                            }
                        }
                        LogFormat::Csv => unescape_csv(raw, out),
                        LogFormat::Haproxy => decode_hex_escapes(raw, b'#', out),
                        _ => unescape_clf(raw, out),
                    }
                    self.decoded[i] = true;
                }
            }
        }
        true
    }

    /// CSV: whether a line that continues a record open on the lines before it (in a quoted
    /// field) leaves it open at its end.
    pub fn continues_record(&self, line: &[u8]) -> bool {
        csv_open_after(line, 0, self.delimiter, true)
    }

    #[inline]
    fn get<'a>(&'a self, line: &'a [u8], slot: usize) -> Option<&'a [u8]> {
        let spans: &[Option<Span>] = match self.format {
            LogFormat::Combined | LogFormat::Auto => &self.combined,
            _ => &self.spans,
        };
        let s = spans.get(slot).copied().flatten()?;
        if self.decoded[slot] {
            return Some(&self.scratch[slot]);
        }
        Some(&line[s.start as usize..s.end as usize])
    }

    #[inline]
    pub fn time<'a>(&'a self, line: &'a [u8]) -> Option<&'a [u8]> {
        let t = self.get(line, self.time);
        // A combined line without the trailing `$msec` its first lines had (the format
        // changed, a line written otherwise): its `[$time_local]`.
        if self.msec_detected && !t.is_some_and(msec_shaped) {
            return self.get(line, 3);
        }
        // An ALB line without the request's arrival (`-`): the response's time.
        if self.format == LogFormat::Alb && self.time == ALB_CREATED && t == Some(b"-") {
            return self.get(line, ALB_TIME);
        }
        t
    }
    #[inline]
    pub fn ip<'a>(&'a self, line: &'a [u8]) -> Option<&'a [u8]> {
        let slot = self.ip?;
        let v = self.get(line, slot)?;
        if self.port_field(slot) {
            return Some(strip_port(v));
        }
        Some(v)
    }
    /// Whether the field in `slot` is an `address:port` (ALB's `client` and `target`,
    /// HAProxy's `client`).
    #[inline]
    fn port_field(&self, slot: usize) -> bool {
        match self.format {
            LogFormat::Alb => matches!(slot, ALB_CLIENT | ALB_TARGET),
            LogFormat::Haproxy => slot == HAPROXY_CLIENT,
            _ => false,
        }
    }
    #[inline]
    pub fn cost<'a>(&'a self, line: &'a [u8]) -> Option<&'a [u8]> {
        self.get(line, self.cost?)
    }
    /// The forwarding header's value, `None` when the line has none (absent, empty, or
    /// nginx's `-` for a header that did not come).
    #[inline]
    pub fn forwarded<'a>(&'a self, line: &'a [u8]) -> Option<&'a [u8]> {
        self.get(line, self.fwd?)
            .filter(|v| !matches!(v.trim_ascii(), b"" | b"-"))
    }
    #[inline]
    pub fn key_field<'a>(&'a self, line: &'a [u8], i: usize) -> Option<&'a [u8]> {
        let slot = self.keys[i];
        let v = self.get(line, slot)?;
        // An ALB's `client` or `target` field (HAProxy's `client`) keys by the address, as
        // `ip` does: by `address:port`, every connection would have a bucket of its own.
        if self.port_field(slot) {
            return Some(strip_port(v));
        }
        Some(v)
    }

    /// The method and the path. A path field holding a request line (`GET /x HTTP/1.1`)
    /// gives both.
    #[inline]
    pub fn request<'a>(&'a self, line: &'a [u8]) -> (&'a [u8], Option<&'a [u8]>) {
        let method = self.method.and_then(|m| self.get(line, m));
        let Some(path) = self
            .path
            .and_then(|p| self.get(line, p))
            // A request the server could not read (the ALB logs `- - - `, nginx `-`, HAProxy
            // `<BADREQ>`): none.
            .filter(|p| !matches!(p.trim_ascii(), b"-" | b"- - -" | b"<BADREQ>"))
        else {
            return (method.unwrap_or(b""), None);
        };
        if path.first().is_some_and(u8::is_ascii_uppercase) {
            if let Some(sp) = memchr::memchr(b' ', path) {
                let rest = &path[sp + 1..];
                let end = memchr::memchr(b' ', rest).unwrap_or(rest.len());
                return (
                    method.unwrap_or(&path[..sp]),
                    Some(origin_form(&rest[..end])),
                );
            }
        }
        (method.unwrap_or(b""), Some(origin_form(path)))
    }
}

/// A request target's path and query: an absolute URL's (`https://api.example.com:443/v1?x`,
/// as a load balancer or a forward proxy logs it) without its scheme and host, `/` for a URL
/// of a host alone; any other target as it is.
#[inline]
fn origin_form(t: &[u8]) -> &[u8] {
    let Some(after) = t
        .get(..8)
        .filter(|p| p.eq_ignore_ascii_case(b"https://"))
        .map(|_| &t[8..])
        .or_else(|| {
            t.get(..7)
                .filter(|p| p.eq_ignore_ascii_case(b"http://"))
                .map(|_| &t[7..])
        })
    else {
        return t;
    };
    match memchr::memchr2(b'/', b'?', after) {
        Some(i) if after[i] == b'/' => &after[i..],
        // `http://host?x`: the path is `/`, the query stays (a `path:/?q={q}` pattern reads it).
        Some(_) | None => b"/",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Detection scans each first line once for every name it may look for, not once per
    /// name: a line of 100 000 array items is searched about once.
    #[test]
    fn detection_scans_each_line_once() {
        let items = vec![&b"\"a\""[..]; 100_000].join(&b","[..]);
        let line = [
            &br#"{"x":["#[..],
            &items,
            br#"],"ts":17,"ip":"192.0.2.1","verb":"GET"}"#,
        ]
        .concat();
        let needs = Needs {
            ip: true,
            path: false,
            method: true,
            key_fields: vec![(true, "User-Agent".into())],
            forwarded: false,
        };
        let names = Names {
            delimiter: b',',
            ..Default::default()
        };
        crate::input::SEARCHED.with(|c| c.set(0));
        let ex = Extractor::new(
            LogFormat::Jsonl,
            std::slice::from_ref(&line),
            &needs,
            &names,
            "t",
        )
        .unwrap();
        let searched = crate::input::SEARCHED.with(std::cell::Cell::get);
        assert!(
            searched <= 3 * line.len(),
            "{searched} bytes searched of {}",
            line.len()
        );
        let chosen: Vec<String> = ex.chosen.iter().map(|(r, n)| format!("{r}={n}")).collect();
        assert_eq!(
            chosen,
            ["time=ts", "ip=ip", "method=verb", "key=http_user_agent"]
        );
    }

    fn names() -> Names {
        Names {
            delimiter: b',',
            ..Default::default()
        }
    }

    fn lines(text: &str) -> Vec<Vec<u8>> {
        text.lines().map(|l| l.as_bytes().to_vec()).collect()
    }

    /// nginx's `msec` (milliseconds) is preferred to its whole-second `time_iso8601` and
    /// `time_local`, in whatever order the line holds them.
    #[test]
    fn the_finer_nginx_timestamp_is_preferred() {
        let needs = Needs::default();
        let json = lines(
            r#"{"time_iso8601":"2024-05-01T00:00:00+00:00","time_local":"01/May/2024:00:00:00 +0000","msec":"1714521600.123"}"#,
        );
        let ex = Extractor::new(LogFormat::Jsonl, &json, &needs, &names(), "n.jsonl").unwrap();
        assert_eq!(ex.chosen[0], ("time".to_string(), "msec".to_string()));
        let csv = lines("time_local,msec,ip\n01/May/2024:00:00:00 +0000,1714521600.123,1.2.3.4\n");
        let ex = Extractor::new(LogFormat::Csv, &csv, &needs, &names(), "n.csv").unwrap();
        assert_eq!(ex.chosen[0], ("time".to_string(), "msec".to_string()));
    }

    /// A route or key that needs the method, on a log without a method field the CLI can
    /// find (pino's nested `req.method`, a CSV without the column): an error naming
    /// --method-field, not an empty method that matches no route. A path field holding
    /// request lines gives the method.
    #[test]
    fn a_method_needed_but_not_found_is_an_error() {
        let needs = Needs {
            ip: true,
            path: true,
            method: true,
            key_fields: vec![],
            forwarded: false,
        };
        let mut n = names();
        n.ip = Some("req.remoteAddress".into());
        n.path = Some("req.url".into());
        let pino = lines(
            r#"{"time":1714521600000,"req":{"method":"POST","url":"/login","remoteAddress":"192.0.2.1"}}"#,
        );
        // pino's `req.method` is found; a log with no method anywhere is the error.
        let mut ex = Extractor::new(LogFormat::Jsonl, &pino, &needs, &n, "p.jsonl").unwrap();
        assert!(ex.scan(&pino[0]));
        assert_eq!(ex.request(&pino[0]), (&b"POST"[..], Some(&b"/login"[..])));
        let none =
            lines(r#"{"time":1714521600000,"req":{"url":"/login","remoteAddress":"192.0.2.1"}}"#);
        let e = Extractor::new(LogFormat::Jsonl, &none, &needs, &n, "p.jsonl")
            .err()
            .expect("an error");
        let e = e.to_string();
        assert!(e.contains("--method-field") && e.contains("req.url"), "{e}");
        // A method field named but in no line: an error too (every method was empty).
        n.method = Some("req.verb".into());
        let e = Extractor::new(LogFormat::Jsonl, &pino, &needs, &n, "p.jsonl")
            .err()
            .expect("an error")
            .to_string();
        assert!(e.contains("\"req.verb\" (--method-field)"), "{e}");
        n.method = Some("req.method".into());
        let mut ex = Extractor::new(LogFormat::Jsonl, &pino, &needs, &n, "p.jsonl").unwrap();
        assert!(ex.scan(&pino[0]));
        assert_eq!(ex.request(&pino[0]), (&b"POST"[..], Some(&b"/login"[..])));
        // CSV: no method column.
        let csv = lines("time,ip,path\n2024-05-01T00:00:00Z,192.0.2.1,/login\n");
        let e = Extractor::new(LogFormat::Csv, &csv, &needs, &names(), "a.csv")
            .err()
            .expect("an error")
            .to_string();
        assert!(e.contains("--method-field"), "{e}");
        // A request line in the path column gives it.
        let csv = lines("time,ip,request\n2024-05-01T00:00:00Z,192.0.2.1,POST /login HTTP/1.1\n");
        let mut ex = Extractor::new(LogFormat::Csv, &csv, &needs, &names(), "a.csv").unwrap();
        assert!(ex.scan(&csv[1]));
        assert_eq!(ex.request(&csv[1]), (&b"POST"[..], Some(&b"/login"[..])));
        // Not needed: no error.
        let needs = Needs {
            method: false,
            ..needs
        };
        let csv = lines("time,ip,path\n2024-05-01T00:00:00Z,192.0.2.1,/login\n");
        assert!(Extractor::new(LogFormat::Csv, &csv, &needs, &names(), "a.csv").is_ok());
    }

    /// The forwarding header's field: nginx `main`'s last quoted field in combined lines,
    /// detected names in JSON and CSV, or named; read only with --trusted-proxies, seen (for
    /// the hint) whenever the client address is needed.
    #[test]
    fn the_forwarding_header_field() {
        let fwd = Needs {
            ip: true,
            forwarded: true,
            ..Default::default()
        };
        let ip_only = Needs {
            ip: true,
            ..Default::default()
        };
        let main = lines(concat!(
            r#"10.0.0.5 - - [01/May/2024:00:00:00 +0000] "GET /a HTTP/1.1" 200 5 "-" "curl" "192.0.2.3, 10.0.0.9""#,
            "\n",
            r#"10.0.0.5 - - [01/May/2024:00:00:01 +0000] "GET /a HTTP/1.1" 200 5 "-" "curl" "-""#,
        ));
        let mut ex = Extractor::new(LogFormat::Auto, &main, &fwd, &names(), "m.log").unwrap();
        assert_eq!(ex.format, LogFormat::Combined);
        assert!(ex
            .chosen
            .contains(&("forwarded".into(), "x_forwarded_for".into())));
        assert!(ex.scan(&main[0]));
        assert_eq!(ex.ip(&main[0]), Some(&b"10.0.0.5"[..]));
        assert_eq!(ex.forwarded(&main[0]), Some(&b"192.0.2.3, 10.0.0.9"[..]));
        assert!(ex.scan(&main[1]));
        assert_eq!(ex.forwarded(&main[1]), None); // nginx's "-": no header
        assert_eq!(ex.forwarded_seen.as_deref(), Some("x_forwarded_for"));
        // Not read without --trusted-proxies, but seen.
        let mut ex = Extractor::new(LogFormat::Auto, &main, &ip_only, &names(), "m.log").unwrap();
        assert!(ex.scan(&main[0]));
        assert_eq!(ex.forwarded(&main[0]), None);
        assert_eq!(ex.forwarded_seen.as_deref(), Some("x_forwarded_for"));
        // Plain combined: an error with --trusted-proxies, nothing seen without.
        let plain = lines(
            r#"10.0.0.5 - - [01/May/2024:00:00:00 +0000] "GET /a HTTP/1.1" 200 5 "-" "curl""#,
        );
        let e = Extractor::new(LogFormat::Auto, &plain, &fwd, &names(), "c.log")
            .err()
            .expect("an error")
            .to_string();
        assert!(e.contains("--forwarded-field"), "{e}");
        let ex = Extractor::new(LogFormat::Auto, &plain, &ip_only, &names(), "c.log").unwrap();
        assert_eq!(ex.forwarded_seen, None);
        // JSON: nginx's name, a nested header, or a named field; empty values are none.
        for (line, name) in [
            (
                r#"{"ts":1,"remote_addr":"10.0.0.5","http_x_forwarded_for":"192.0.2.3"}"#,
                "http_x_forwarded_for",
            ),
            (
                r#"{"ts":1,"ip":"10.0.0.5","headers":{"x-forwarded-for":"192.0.2.3"}}"#,
                "headers.x-forwarded-for",
            ),
        ] {
            let l = lines(line);
            let mut ex = Extractor::new(LogFormat::Auto, &l, &fwd, &names(), "j").unwrap();
            assert!(
                ex.chosen.contains(&("forwarded".into(), name.into())),
                "{name}"
            );
            assert!(ex.scan(&l[0]));
            assert_eq!(ex.forwarded(&l[0]), Some(&b"192.0.2.3"[..]));
            assert_eq!(ex.forwarded_seen.as_deref(), Some(name));
        }
        let l = lines(r#"{"ts":1,"ip":"10.0.0.5","http_x_forwarded_for":"","xf":"192.0.2.3"}"#);
        let mut ex = Extractor::new(LogFormat::Auto, &l, &fwd, &names(), "j").unwrap();
        assert!(ex.scan(&l[0]));
        assert_eq!(ex.forwarded(&l[0]), None);
        assert_eq!(ex.forwarded_seen, None);
        let mut n = names();
        n.forwarded = Some("xf".into());
        let mut ex = Extractor::new(LogFormat::Auto, &l, &fwd, &n, "j").unwrap();
        assert!(ex.scan(&l[0]));
        assert_eq!(ex.forwarded(&l[0]), Some(&b"192.0.2.3"[..]));
        let l = lines(r#"{"ts":1,"ip":"10.0.0.5"}"#);
        let e = Extractor::new(LogFormat::Auto, &l, &fwd, &names(), "j")
            .err()
            .expect("an error")
            .to_string();
        assert!(
            e.contains("http_x_forwarded_for") && e.contains("--forwarded-field"),
            "{e}"
        );
        // CSV: a column.
        let csv = lines(
            "time,ip,X-Forwarded-For\n2024-05-01T00:00:00Z,10.0.0.5,\"192.0.2.3, 10.0.0.9\"\n",
        );
        let mut ex = Extractor::new(LogFormat::Csv, &csv, &fwd, &names(), "a.csv").unwrap();
        assert!(ex.scan(&csv[1]));
        assert_eq!(ex.forwarded(&csv[1]), Some(&b"192.0.2.3, 10.0.0.9"[..]));
        // RFC 7239 Forwarded: its own names.
        let mut n = names();
        n.forwarded_header = "forwarded".parse().unwrap();
        let l = lines(r#"{"ts":1,"ip":"10.0.0.5","http_forwarded":"for=192.0.2.3"}"#);
        let mut ex = Extractor::new(LogFormat::Auto, &l, &fwd, &n, "j").unwrap();
        assert!(ex.scan(&l[0]));
        assert_eq!(ex.forwarded(&l[0]), Some(&b"for=192.0.2.3"[..]));
    }

    /// Reads `text` as a W3C log the way a replay does: directives applied, each other line
    /// scanned; each data line's client address (`None`: unusable).
    fn w3c_ips(text: &str, needs: &Needs, names: &Names) -> Vec<Option<String>> {
        let head = lines(text);
        let mut ex = Extractor::new(LogFormat::W3c, &head, needs, names, "w.log").unwrap();
        let mut out = Vec::new();
        for l in &head {
            if ex.directive(l) {
                continue;
            }
            out.push(
                ex.scan(l)
                    .then(|| ex.ip(l).map(|v| String::from_utf8_lossy(v).into_owned()))
                    .flatten(),
            );
        }
        out
    }

    /// An empty `#Fields:` directive names no fields: it is skipped, at the start (the
    /// directive in force at the first data line is taken) and later on (the fields before
    /// it stay).
    #[test]
    fn an_empty_w3c_fields_directive_is_skipped() {
        let needs = Needs {
            ip: true,
            ..Default::default()
        };
        let got = w3c_ips(
            "#Version: 1.0\n#Fields:   \t \n#Fields: date time c-ip\n2024-05-01 12:00:00 192.0.2.1\n#Fields:\n2024-05-01 12:00:01 192.0.2.2\n",
            &needs,
            &names(),
        );
        assert_eq!(
            got,
            [Some("192.0.2.1".to_string()), Some("192.0.2.2".to_string())]
        );
        // Two directives before the first data line: the second is in force there.
        let got = w3c_ips(
            "#Fields: date time s-ip\n#Fields: date time c-ip\n2024-05-01 12:00:00 192.0.2.1\n",
            &needs,
            &names(),
        );
        assert_eq!(got, [Some("192.0.2.1".to_string())]);
    }

    /// Reads `text` as a W3C log the way a replay does: each data line's first key part and
    /// forwarding header (`None` for none).
    fn w3c_values(
        text: &str,
        needs: &Needs,
        names: &Names,
    ) -> Vec<(Option<String>, Option<String>)> {
        let head = lines(text);
        let mut ex = Extractor::new(LogFormat::W3c, &head, needs, names, "w.log").unwrap();
        let s = |v: Option<&[u8]>| v.map(|v| String::from_utf8_lossy(v).into_owned());
        let mut out = Vec::new();
        for l in &head {
            if ex.directive(l) {
                continue;
            }
            assert!(ex.scan(l), "{}", String::from_utf8_lossy(l));
            let key = if needs.key_fields.is_empty() {
                None
            } else {
                s(ex.key_field(l, 0))
            };
            out.push((key, s(ex.forwarded(l))));
        }
        out
    }

    const IIS_HEAD: &str =
        "#Software: Microsoft Internet Information Services 10.0\n#Version: 1.0\n";

    /// `header:Host` on IIS is its `cs-host` field (IIS's name for the Host header).
    #[test]
    fn the_host_header_of_iis_is_cs_host() {
        let needs = Needs {
            key_fields: vec![(true, "Host".into())],
            ..Default::default()
        };
        let text = format!(
            "{IIS_HEAD}#Fields: date time s-ip cs-method cs-uri-stem c-ip cs(User-Agent) cs-host sc-status\n\
             2024-05-01 12:00:00 10.0.0.5 GET / 203.0.113.7 curl/8 www.example.com 200\n"
        );
        let got = w3c_values(&text, &needs, &names());
        assert_eq!(got, [(Some("www.example.com".to_string()), None)]);
    }

    /// An IIS custom field naming a request header (IIS 8.5+ custom logging), read as a
    /// header or as the forwarding header: IIS writes its spaces as `+`, as in `cs(...)`.
    /// The same field taken with `field:` is read as written.
    #[test]
    fn iis_custom_header_fields_read_plus_as_space() {
        let text = format!(
            "{IIS_HEAD}#Fields: date time cs-method cs-uri-stem c-ip X-Api-Key X-Forwarded-For\n\
             2024-05-01 12:00:00 GET / 10.0.0.2 a+b 198.51.100.1,+203.0.113.7\n"
        );
        let needs = Needs {
            ip: true,
            forwarded: true,
            key_fields: vec![(true, "X-Api-Key".into())],
            ..Default::default()
        };
        let got = w3c_values(&text, &needs, &names());
        assert_eq!(
            got,
            [(
                Some("a b".to_string()),
                Some("198.51.100.1, 203.0.113.7".to_string())
            )]
        );
        let needs = Needs {
            key_fields: vec![(false, "X-Api-Key".into())],
            ..Default::default()
        };
        let got = w3c_values(&text, &needs, &names());
        assert_eq!(got, [(Some("a+b".to_string()), None)]);
    }

    /// A `#Fields:` block's separator is chosen once, by its first data line: a tab inside
    /// an IIS value (IIS separates by spaces) is not a separator. Tab-separated lines are
    /// CloudFront's (IIS never writes tabs): their headers are percent-decoded, even
    /// without an `x-edge-` field (standard logging v2 lets one leave them out).
    #[test]
    fn a_w3c_blocks_separator_is_chosen_once() {
        let needs = Needs {
            key_fields: vec![(true, "User-Agent".into())],
            ..Default::default()
        };
        let text = format!(
            "{IIS_HEAD}#Fields: date time cs-method cs-uri-stem c-ip cs(User-Agent)\n\
             2024-05-01 12:00:00 GET / 203.0.113.7 a\tb+c\n\
             2024-05-01 12:00:01 GET / 203.0.113.7 curl/8\n\
             2024-05-01 12:00:02 GET / 203.0.113.7 x\ty%20z\n"
        );
        let got: Vec<_> = w3c_values(&text, &needs, &names())
            .into_iter()
            .map(|(k, _)| k.unwrap())
            .collect();
        assert_eq!(got, ["a\tb c", "curl/8", "x\ty%20z"]);
        let text = "#Version: 1.0\n#Fields: date time c-ip cs(User-Agent)\n\
                    2024-05-01\t12:00:00\t203.0.113.7\tMozilla/5.0%20(X11)\n";
        let got = w3c_values(text, &needs, &names());
        assert_eq!(got, [(Some("Mozilla/5.0 (X11)".to_string()), None)]);
    }

    /// `option httplog clf` lines give HAProxy's fields from their columns; the captured
    /// headers' blocks (`{...}`), which they have not, are refused up front.
    #[test]
    fn haproxy_clf_fields() {
        let clf = lines(
            r#"Feb  6 12:14:14 localhost haproxy[14389]: 10.0.1.2 - - [06/Feb/2009:12:14:14 +0000] "GET / HTTP/1.1" 200 2750 "" "" 33317 655 "http-in" "static" "srv1" 10 0 30 69 109 "----" 1 1 1 1 0 0 0 "" "" "bot #22q#22" """#,
        );
        let key = |name: &str| Needs {
            key_fields: vec![(false, name.into())],
            ..Default::default()
        };
        for (name, want) in [
            ("frontend", "http-in"),
            ("server", "srv1"),
            ("termination_state", "----"),
            ("client_port", "33317"),
            ("hdr0", "bot \"q\""),
        ] {
            let mut ex =
                Extractor::new(LogFormat::Haproxy, &clf, &key(name), &names(), "h.log").unwrap();
            assert!(ex.scan(&clf[0]));
            assert_eq!(ex.key_field(&clf[0], 0), Some(want.as_bytes()), "{name}");
        }
        for name in ["request_headers", "captured_response_headers"] {
            let e = Extractor::new(LogFormat::Haproxy, &clf, &key(name), &names(), "h.log")
                .err()
                .expect("an error")
                .to_string();
            assert!(e.contains("clf") && e.contains("hdrN"), "{e}");
        }
    }
}
