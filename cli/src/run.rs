//! Drives a replay over inputs (two passes when bucket levels are traced) and a simulation
//! over synthetic segments.

use crate::engine::Refusal;
use crate::error::CliError;
use crate::fields::{Extractor, Names, Needs};
use crate::input::{is_blank, BlockLines, Chunk, Filled, LineReader, LogFormat, LongLine, Source};
use crate::netkey::{parse_ip, NetKey, Prefixes};
use crate::output::{InputMeta, Meta, Summary};
use crate::policy::{KeyPart, PolicySpec};
use crate::replay::{push_text, Replay};
use crate::sample::{Generator, SampleReader};
use crate::stats::Timeline;
use crate::timefmt::{EpochUnit, TimeParser, Zone};
use sluicegate::client::{
    Cidr, ClientResolver, ForwardingHeaders, Peer, ProxyHeader, TrustedProxies,
};
use std::rc::Rc;
use std::time::Instant;

/// Where the requests come from.
#[derive(Clone, Debug)]
pub enum Inputs {
    Files(Vec<String>),
    /// The embedded sample (`sluicegate sample`'s day), in a log format.
    Sample(LogFormat),
}

pub struct Config {
    pub policies: Vec<PolicySpec>,
    pub key: Vec<KeyPart>,
    pub prefixes: Prefixes,
    /// `--trusted-proxies`: the proxies whose forwarding header names the client of the `ip`
    /// key (none: the peer is the client).
    pub trusted: TrustedProxies,
    pub names: Names,
    pub format: LogFormat,
    pub unit: EpochUnit,
    /// `--timezone`: the zone of dates written without an offset (never W3C's: UTC).
    pub zone: Zone,
    /// Whether `--timezone` was given (UTC given says nothing of the dates read in it).
    pub zone_given: bool,
    pub cost: u64,
    pub max_keys: usize,
    pub strict: bool,
    pub top: usize,
    pub sustain: u64,
    /// Keys per policy whose bucket levels are traced (a second pass); 0 for none.
    pub trace: usize,
    pub progress: bool,
    pub max_bins: usize,
    /// Per-key rules on dense stores (arrays by key id), which start the replay over on keyed
    /// stores if they meet `max_keys`: only for inputs that can be read twice. False: keyed
    /// stores from the start (stdin read once).
    pub dense: bool,
    /// The temporary file holding a copy of stdin (for `--html`'s second pass), if any: the
    /// input named `<stdin>` in the outputs, which keeps its place among the inputs.
    pub stdin_copy: Option<String>,
    /// Copies of named pipes (and `<(...)`) for a second pass: (the copy, the pipe's name).
    pub copies: Vec<(String, String)>,
}

impl Config {
    /// The zone of `ex`'s dates written without an offset: `--timezone`, unless it is UTC or
    /// the format is W3C (whose dates its format defines as UTC).
    fn zone_of(&self, ex: &Extractor) -> Option<&Zone> {
        (ex.format != LogFormat::W3c && !self.zone.is_utc()).then_some(&self.zone)
    }

    /// A parser of `ex`'s timestamps, dates without an offset in [`Self::zone_of`].
    fn time_parser(&self, ex: &Extractor) -> TimeParser {
        let tp = TimeParser::new(self.unit);
        match self.zone_of(ex) {
            Some(z) => tp.with_zone(z),
            None => tp,
        }
    }

    fn needs(&self) -> Needs {
        let mut n = Needs::default();
        for k in &self.key {
            match k {
                KeyPart::Ip => {
                    n.ip = true;
                    n.forwarded = self.trusted != TrustedProxies::None;
                }
                KeyPart::Header(h) => n.key_fields.push((true, h.clone())),
                KeyPart::Field(f) => n.key_fields.push((false, f.clone())),
                KeyPart::Path | KeyPart::PathPattern(_) => n.path = true,
                KeyPart::Method => n.method = true,
                KeyPart::All => {}
            }
        }
        if self.policies.iter().any(PolicySpec::has_routes) {
            n.path = true;
        }
        if self.policies.iter().any(PolicySpec::needs_method) {
            n.method = true;
        }
        n
    }

    pub fn key_description(&self) -> String {
        let parts: Vec<String> = self
            .key
            .iter()
            .map(|k| match k {
                KeyPart::Ip if self.trusted != TrustedProxies::None => format!(
                    "ip (the client {} names behind {}; IPv4 /{}, IPv6 /{})",
                    self.names.forwarded_header.header_name(),
                    match &self.trusted {
                        TrustedProxies::Hops(1) => "1 trusted proxy".to_string(),
                        TrustedProxies::Hops(n) => format!("{n} trusted proxies"),
                        t => format!("trusted proxies {t}"),
                    },
                    self.prefixes.v4,
                    self.prefixes.v6
                ),
                KeyPart::Ip => format!(
                    "ip (IPv4 /{}, IPv6 /{})",
                    self.prefixes.v4, self.prefixes.v6
                ),
                KeyPart::Header(h) => format!("header {h}"),
                KeyPart::Field(f) => format!("field {f}"),
                KeyPart::Path => "path".into(),
                KeyPart::PathPattern(r) => format!("path {}", r.text),
                KeyPart::Method => "method".into(),
                KeyPart::All => "all".into(),
            })
            .collect();
        parts.join(" + ")
    }
}

/// A copy of stdin in a temporary file (a second pass needs to read it again), removed on
/// drop.
pub struct Spool(pub std::path::PathBuf);

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A copy of the stream `from` (a named pipe, `<(zcat ...)`; `None`: stdin) in a temporary
/// file, for a second pass.
pub fn spool(from: Option<&str>) -> Result<Spool, CliError> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let path = std::env::temp_dir().join(format!(
        "sluicegate-stdin-{}-{}-{}.log",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    // A new file only: never one (or a link) that another user put at this name.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| CliError::Output {
            path: path.display().to_string(),
            source: e,
        })?;
    let spool = Spool(path.clone());
    let copied = match from {
        None => std::io::copy(&mut std::io::stdin().lock(), &mut f),
        Some(p) => std::fs::File::open(p).and_then(|mut r| std::io::copy(&mut r, &mut f)),
    };
    copied.map_err(|e| CliError::Io {
        path: from.unwrap_or("<stdin>").into(),
        source: e,
    })?;
    Ok(spool)
}

/// The name an input is shown by: stdin's copy is `<stdin>`, a stream's copy its own name.
fn shown(cfg: &Config, f: &str) -> String {
    if cfg.stdin_copy.as_deref() == Some(f) || f == "-" {
        return "<stdin>".into();
    }
    match cfg.copies.iter().find(|(copy, _)| copy == f) {
        Some((_, name)) => name.clone(),
        None => f.to_string(),
    }
}

/// The embedded sample's name in the report.
const SAMPLE_NAME: &str = "(embedded sample: sluicegate sample)";

/// The earliest timestamp of the first usable lines of the file `path` (its format and
/// fields detected as the replay detects them; as many lines as a merge looks ahead, so that
/// a first line stamped ahead does not open the file late), `None` if it has none. Read as the replay reads it,
/// block by block: it holds no more than the replay does, and stops at that line.
fn first_time(cfg: &Config, needs: &Needs, path: &str) -> Result<Option<u64>, CliError> {
    let src = Source::open(path)?;
    let name = src.name.clone();
    let mut lr = LineReader::new(src);
    let head = lr.peek_lines(200)?;
    if head.is_empty() {
        return Ok(None);
    }
    let mut ex = Extractor::new(cfg.format, &head, needs, &cfg.names, &name)?;
    let mut tp = cfg.time_parser(&ex);
    let mut header = ex.skip_first;
    let (mut first, mut seen) = (None, 0);
    while let Some(chunk) = lr.next_block()? {
        let Chunk::Lines(block) = chunk else {
            continue;
        };
        for (_, line) in BlockLines::new(block) {
            if is_blank(line) {
                continue;
            }
            if ex.directive(line) {
                continue;
            }
            if header {
                header = false;
                continue;
            }
            if !ex.scan(line) {
                continue;
            }
            if let Some(t) = ex.time(line).and_then(|ts| tp.parse(ts)) {
                first = Some(first.map_or(t, |f: u64| f.min(t)));
                seen += 1;
                if seen > LOOKAHEAD {
                    return Ok(first);
                }
            }
        }
    }
    Ok(first)
}

/// The files in the order of their first timestamps (a shell glob lists `access.log` before
/// the older `access.log.1`), and those timestamps: each file's first usable line is read
/// before the replay. Stdin (`-`, or `stdin`, its copy) and anything else that is not a
/// regular file (a named pipe, `<(zcat ...)`) cannot be read ahead, which would use up what
/// it holds: each keeps its place, the files are ordered around them, and its timestamp is
/// `None`. Files without a timestamp in any line keep their place among the others, after
/// those with one. Ties keep the order given.
pub fn order_inputs(
    cfg: &Config,
    inputs: &Inputs,
    stdin: Option<&str>,
) -> Result<(Inputs, Vec<Option<u64>>), CliError> {
    let Inputs::Files(files) = inputs else {
        return Ok((inputs.clone(), Vec::new()));
    };
    if files.len() < 2 {
        return Ok((inputs.clone(), Vec::new()));
    }
    let needs = cfg.needs();
    let is_stdin = |f: &str| {
        f == "-"
            || Some(f) == stdin
            || cfg.copies.iter().any(|(copy, _)| copy == f)
            || !std::fs::metadata(f).is_ok_and(|m| m.is_file())
    };
    let mut timed = Vec::new();
    for f in files.iter().filter(|f| !is_stdin(f)) {
        timed.push((first_time(cfg, &needs, f)?, f.clone()));
    }
    timed.sort_by_key(|(t, _)| (t.is_none(), *t));
    let mut sorted = timed.into_iter();
    let (ordered, first): (Vec<String>, Vec<Option<u64>>) = files
        .iter()
        .map(|f| {
            if is_stdin(f) {
                (f.clone(), None)
            } else {
                let (t, f) = sorted.next().expect("as many files");
                (f, t)
            }
        })
        .unzip();
    Ok((Inputs::Files(ordered), first))
}

struct Progress {
    bar: indicatif::ProgressBar,
    done_bytes: u64,
}

impl Progress {
    fn new(on: bool, total: Option<u64>) -> Progress {
        use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
        let target = if on {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = match total {
            Some(t) => ProgressBar::with_draw_target(Some(t), target).with_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta}) {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            ),
            None => ProgressBar::with_draw_target(None, target).with_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bytes} read {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            ),
        };
        Progress { bar, done_bytes: 0 }
    }
}

/// Requests decided per batch (see [`Batch`]): 16 to 64 measured alike at 10^6 keys
/// (BENCHMARKS.md, "CLI replay").
const BATCH: usize = 32;

/// Keys from which a batch is prefetched: below, the tables fit in the caches and the
/// prefetches would be pure overhead.
const PREFETCH_FROM: usize = 1 << 14;

/// A request parsed but not decided yet: its key, method and path are in its part's
/// [`Requests::bytes`], its line in the part's blocks ([`Part::line`]).
#[derive(Clone, Copy)]
struct Pending {
    /// The line's own time (its time in the replay is [`Part::due`]'s; a timestamp beyond
    /// what the policies cover makes the line bad).
    t: u64,
    cost: u64,
    line_no: u64,
    line: (usize, usize),
    key: (usize, usize),
    method: (usize, usize),
    path: Option<(usize, usize)>,
}

/// A block's requests, parsed: their keys, methods and paths in `bytes`.
#[derive(Default)]
struct Requests {
    reqs: Vec<Pending>,
    bytes: Vec<u8>,
}

impl Requests {
    /// Copies `b` in; its range.
    #[inline]
    fn keep(&mut self, b: &[u8]) -> (usize, usize) {
        let s = self.bytes.len();
        if !b.is_empty() {
            self.bytes.extend_from_slice(b);
        }
        (s, self.bytes.len())
    }
}

/// Requests taken but not decided yet, decided in the replay's order by
/// [`flush`](Batch::flush). They are not copied: each stays in its input's current block
/// ([`Feed::cur`]), and the batch is decided before any of those blocks is let go
/// ([`pass_merged`]).
///
/// A replay of 10^6 keys waits on memory: the interner's slots and the per-key arrays (counters,
/// buckets) are tens of MiB, and each request's key misses every cache there, twice in a row (its id,
/// then its bucket). A batch overlaps those misses: every key's interner slot is prefetched,
/// then every key is interned (its slot has arrived) and its buckets are prefetched, then
/// the requests are decided one by one. Nothing but the order of memory accesses changes:
/// keys are interned in the replay's order (so they get the ids they would get anyway), and
/// every request is decided in the replay's order.
struct Batch {
    /// Each request's input and its place in that input's current part.
    reqs: Vec<(usize, usize)>,
}

impl Batch {
    fn new() -> Self {
        Batch {
            reqs: Vec::with_capacity(BATCH),
        }
    }

    /// Decides every pending request, in order. `feeds` holds them.
    fn flush(
        &mut self,
        replay: &mut Replay,
        cx: &Decide,
        feeds: &[Option<Feed>],
        meta: &mut Meta,
    ) -> Result<(), CliError> {
        let Some(&(src, _)) = self.reqs.first() else {
            return Ok(());
        };
        // Each request's part (mostly one input's, found once) and its ids.
        let find = |src: usize| &feeds[src].as_ref().expect("an open input").cur;
        let mut parts = [find(src); BATCH];
        let mut last = src;
        for (k, &(src, _)) in self.reqs.iter().enumerate() {
            if src != last {
                (parts[k], last) = (find(src), src);
            } else {
                parts[k] = parts[k.saturating_sub(1)];
            }
        }
        let req = |k: usize| &parts[k].parsed.reqs[self.reqs[k].1];
        let get = |k: usize, (s, e): (usize, usize)| &parts[k].parsed.bytes[s..e];
        let n = self.reqs.len();
        let mut ids = [0u32; BATCH];
        if replay.interner.len() >= PREFETCH_FROM {
            let mut hashes = [0u64; BATCH];
            for (k, h) in hashes[..n].iter_mut().enumerate() {
                *h = replay.interner.hash(get(k, req(k).key));
                replay.interner.prefetch(*h);
            }
            for (k, id) in ids[..n].iter_mut().enumerate() {
                *id = replay.key_id_hashed(get(k, req(k).key), hashes[k]);
                replay.prefetch(*id);
            }
        } else {
            for (k, id) in ids[..n].iter_mut().enumerate() {
                *id = replay.key_id(get(k, req(k).key));
            }
        }
        for k in 0..n {
            let (p, t) = (req(k), parts[k].due[self.reqs[k].1]);
            let at = || {
                let name = cx.names[self.reqs[k].0].as_str();
                (name, parts[k].line(p.line))
            };
            let offered = if p.t > t && replay.beyond(p.t) {
                Err(Refusal::ClockOutOfRange { now: p.t })
            } else {
                let path = p.path.map(|r| get(k, r));
                replay.offer(t, ids[k], get(k, p.method), path, p.cost)
            };
            match offered {
                Ok(()) => {}
                Err(Refusal::ClockOutOfRange { .. }) => {
                    let reason = "timestamp beyond the range the policies cover exactly";
                    let (name, line) = at();
                    record_bad(cx.cfg, meta, name, p.line_no, line, reason.into())?;
                }
                Err(e) => {
                    let (name, line) = at();
                    return Err(CliError::data(name, p.line_no, line, e.to_string()));
                }
            }
        }
        self.reqs.clear();
        Ok(())
    }
}

/// What a decision needs besides the replay and its request: the configuration, and the
/// inputs' names (for messages; [`Batch::src`] indexes them).
struct Decide<'a> {
    cfg: &'a Config,
    names: &'a [String],
}

/// Counts an unusable line (or fails on it with `--strict`).
fn record_bad(
    cfg: &Config,
    meta: &mut Meta,
    name: &str,
    line_no: u64,
    line: &[u8],
    reason: String,
) -> Result<(), CliError> {
    if cfg.strict {
        return Err(CliError::data(name, line_no, line, reason));
    }
    meta.bad_lines += 1;
    // The first five of each input in its lines' order: most are found as the lines are
    // parsed, ahead of the decisions; one refused when decided comes later.
    let rank = match meta.bad_inputs.iter().position(|n| n == name) {
        Some(r) => r,
        None => {
            meta.bad_inputs.push(name.to_string());
            meta.bad_inputs.len() - 1
        }
    };
    let at = meta
        .bad_examples_at
        .partition_point(|&k| k <= (rank, line_no));
    if at < 5 {
        let example = format!("{name}:{line_no}: {reason}: {}", crate::error::clip(line));
        meta.bad_examples.insert(at, example);
        meta.bad_examples_at.insert(at, (rank, line_no));
        meta.bad_examples.truncate(5);
        meta.bad_examples_at.truncate(5);
    }
    Ok(())
}

/// Counts a line longer than [`MAX_LINE`](crate::input::MAX_LINE), read through without
/// being parsed (or fails on it with `--strict`).
fn record_long(
    cfg: &Config,
    meta: &mut Meta,
    name: &str,
    line_no: u64,
    long: &LongLine,
) -> Result<(), CliError> {
    let reason = format!(
        "line of {} bytes, over the {} MiB limit (skipped)",
        long.len,
        crate::input::MAX_LINE >> 20
    );
    record_bad(cfg, meta, name, line_no, &long.head, reason)
}

/// Why a CSV line whose quoted field goes on past its end is unusable.
const OPEN_RECORD: &str =
    "a quoted field goes on past the end of the line (CSV records over several lines are not read)";

/// Counts a line that continues a CSV record begun on line `from` (in a quoted field): text
/// inside a field, never a record of its own.
fn record_continuation(
    cfg: &Config,
    meta: &mut Meta,
    name: &str,
    line_no: u64,
    line: &[u8],
    from: u64,
) -> Result<(), CliError> {
    let reason = format!("continues the CSV record of line {from} (inside a quoted field)");
    record_bad(cfg, meta, name, line_no, line, reason)
}

/// The most distinct peers the hint that suggests `--trusted-proxies` allows: a log whose
/// every request came from so few private addresses, and that holds a forwarding header,
/// looks like a log written behind proxies.
const FEW_PEERS: usize = 4;

/// The client of the `ip` key: the peer (the address the line logs), or with
/// `--trusted-proxies` the client that the trusted proxies' forwarding header names, as the
/// core's [`ClientResolver`] (every adapter's) finds it. Either address is keyed by the one
/// rule of [`Prefixes`]. One per pass (the resolver reports each kind of warning once).
struct Clients {
    resolver: Option<ClientResolver>,
    header: ProxyHeader,
    /// The resolver's warnings, for stderr.
    notes: Vec<String>,
    /// Without `--trusted-proxies`: the distinct peers so far while they are few and private
    /// (`None` once one is not), for the hint.
    peers: Option<Vec<NetKey>>,
    /// The ranges that count as private for the hint (the core's `private, loopback,
    /// linklocal`).
    internal: Vec<Cidr>,
    /// A forwarding header's field seen with values in some input's first lines.
    forwarded_seen: Option<String>,
}

impl Clients {
    fn new(cfg: &Config) -> Result<Clients, CliError> {
        let resolver = match &cfg.trusted {
            TrustedProxies::None => None,
            t => Some(
                // Whole addresses: the prefixes are applied after, as to a peer.
                ClientResolver::builder()
                    .trusted_proxies(t.clone())
                    .header(cfg.names.forwarded_header)
                    .ipv4_prefix(32)
                    .ipv6_prefix(128)
                    .build()
                    .map_err(|e| {
                        CliError::usage("--trusted-proxies", &t.to_string(), e.to_string())
                    })?,
            ),
        };
        let internal = match "private, loopback, linklocal".parse::<TrustedProxies>() {
            Ok(TrustedProxies::Ranges(r)) => r,
            _ => Vec::new(),
        };
        Ok(Clients {
            peers: resolver.is_none().then(Vec::new),
            resolver,
            header: cfg.names.forwarded_header,
            notes: Vec::new(),
            internal,
            forwarded_seen: None,
        })
    }

    /// Writes the key of a request from `peer` (the logged address) whose forwarding header
    /// is `fwd`; `false` if `peer` is not an IP address.
    #[inline]
    fn write_key(
        &mut self,
        prefixes: &Prefixes,
        peer: &[u8],
        fwd: Option<&[u8]>,
        out: &mut Vec<u8>,
    ) -> bool {
        let Some(ip) = parse_ip(peer) else {
            return false;
        };
        let Some(r) = &self.resolver else {
            let k = prefixes.key(ip);
            self.watch(k, ip);
            k.write_bytes(out);
            return true;
        };
        let mut h = ForwardingHeaders::new();
        if let Some(v) = fwd {
            match self.header {
                ProxyHeader::Forwarded => h.forwarded(v),
                _ => h.x_forwarded_for(v),
            };
        }
        let res = r.resolve(Peer::Ip(ip), &h);
        if let Some(w) = res.warning() {
            self.notes
                .push(format!("warning: --trusted-proxies: {w} [{}]", w.code()));
        }
        match res.key().network() {
            Some((client, _)) => prefixes.key(client).write_bytes(out),
            // An RFC 7239 obfuscated identifier from a trusted proxy (`_hidden`).
            None => push_text(out, res.key().as_bytes()),
        }
        true
    }

    /// Notes the peer of a request for the hint: cheap while it is one already seen.
    #[inline]
    fn watch(&mut self, k: NetKey, ip: std::net::IpAddr) {
        let Some(peers) = &mut self.peers else {
            return;
        };
        if peers.last() == Some(&k) || peers.contains(&k) {
            return;
        }
        if peers.len() < FEW_PEERS && self.internal.iter().any(|c| c.contains(ip)) {
            peers.push(k);
        } else {
            self.peers = None;
        }
    }

    /// The notes for stderr: the resolver's warnings, or the hint.
    fn finish(self) -> Vec<String> {
        let mut notes = self.notes;
        if let (Some(peers), Some(field)) = (&self.peers, &self.forwarded_seen) {
            if !peers.is_empty() {
                let list: Vec<String> = peers.iter().map(NetKey::to_string).collect();
                notes.push(format!(
                    "hint: every request came from {} ({}), and the log names clients in a \
                     forwarding header ({field}): behind a proxy or load balancer, every client \
                     shares its key. --trusted-proxies {} (or `private`, or a hop count) keys \
                     each request by the client the proxies name",
                    if peers.len() == 1 {
                        "one private address".to_string()
                    } else {
                        format!("{} private addresses", peers.len())
                    },
                    list.join(", "),
                    list.join(",")
                ));
            }
        }
        notes
    }
}

/// What a line holds.
enum Parsed {
    /// A request (its key, method and path kept in the batch's bytes).
    Request(Pending),
    /// A request without the key's fields (not limited; counted).
    Unkeyed,
    /// An unusable line, and why.
    Bad(String),
}

/// Parses one line (the `line_no`th, at `at` in its block) of an input read by `ex`.
#[allow(clippy::too_many_arguments)]
#[inline(always)] // one caller: the line loop, whose registers it shares
fn parse_line(
    cfg: &Config,
    cl: &mut Clients,
    ex: &mut Extractor,
    tp: &mut TimeParser,
    caps: &mut Vec<(usize, usize)>,
    batch: &mut Requests,
    line: &[u8],
    at: usize,
    line_no: u64,
) -> Parsed {
    if !ex.scan(line) {
        if ex.csv_open {
            return Parsed::Bad(OPEN_RECORD.into());
        }
        return Parsed::Bad(match ex.format {
            LogFormat::Alb => "not an ALB line".to_string(),
            LogFormat::W3c => "not a W3C line: its fields are not those #Fields names".to_string(),
            LogFormat::Haproxy => "not an HAProxy HTTP log line".to_string(),
            f => format!("not a {f:?} line").to_lowercase(),
        });
    }
    let Some(ts) = ex.time(line) else {
        return Parsed::Bad("no timestamp".into());
    };
    let Some(t) = tp.parse(ts) else {
        let ts = String::from_utf8_lossy(ts);
        if tp.out_of_range() {
            return Parsed::Bad(format!(
                "timestamp {ts:?} is outside the dates a replay reads ({})",
                crate::timefmt::RANGE
            ));
        }
        return Parsed::Bad(format!("timestamp {ts:?} not understood"));
    };
    // Empty and `None` unless a key part or a route needs them (the extractor has their
    // fields only then).
    let (method, path) = ex.request(line);
    // The key, written after the batch's bytes (dropped if the line is not a request).
    let key_start = batch.bytes.len();
    let key = &mut batch.bytes;
    let mut keyed = true;
    let mut field_i = 0;
    let mut bad_reason = None;
    for part in &cfg.key {
        match part {
            KeyPart::Ip => match ex.ip(line) {
                Some(ip) => {
                    if !cl.write_key(&cfg.prefixes, ip, ex.forwarded(line), key) {
                        let list = if ip.contains(&b',') {
                            " (a list of forwarding hops? name the peer's field and pick \
                             the client with --trusted-proxies)"
                        } else {
                            ""
                        };
                        bad_reason = Some(format!(
                            "client address {:?} is not an IP address{list}",
                            String::from_utf8_lossy(ip)
                        ));
                    }
                }
                None => bad_reason = Some("no client address".into()),
            },
            KeyPart::Header(_) | KeyPart::Field(_) => {
                match ex.key_field(line, field_i) {
                    Some(v) if !v.is_empty() && v != b"-" => push_text(key, v),
                    _ => keyed = false,
                }
                field_i += 1;
            }
            KeyPart::Path => match path {
                Some(p) => push_text(key, memchr::memchr(b'?', p).map_or(p, |q| &p[..q])),
                None => keyed = false,
            },
            KeyPart::PathPattern(route) => match path {
                Some(p) if route.matches(method, p, caps) => {
                    if caps.is_empty() {
                        push_text(key, route.text.as_bytes());
                    } else {
                        // The captures index `p`, its query string included: values as
                        // the application reads them (percent-decoded, and a query's `+` a
                        // space), so that `%62ob` and `bob` are one key, as they are one
                        // user to the application.
                        let q = memchr::memchr(b'?', p).unwrap_or(p.len());
                        let mut text = Vec::with_capacity(p.len());
                        for (i, &(a, b)) in caps.iter().enumerate() {
                            if i > 0 {
                                text.push(b'/');
                            }
                            percent_decode(&p[a..b], a > q, &mut text);
                        }
                        push_text(key, &text);
                    }
                }
                _ => keyed = false,
            },
            // A request the server could not read (ALB `- - -`, nginx `-`) has no method.
            KeyPart::Method if method.is_empty() => keyed = false,
            KeyPart::Method => push_text(key, method),
            KeyPart::All => {}
        }
    }
    let key = (key_start, batch.bytes.len());
    let cost = match (&bad_reason, keyed, ex.cost(line)) {
        (Some(_), _, _) | (None, false, _) | (None, true, None) => cfg.cost,
        (None, true, Some(c)) => match std::str::from_utf8(c)
            .ok()
            .and_then(|c| c.trim().parse::<u64>().ok())
        {
            Some(c) => c,
            None => {
                let c = String::from_utf8_lossy(c);
                bad_reason = Some(format!("cost {c:?} is not a whole number"));
                0
            }
        },
    };
    if let Some(r) = bad_reason {
        batch.bytes.truncate(key_start);
        return Parsed::Bad(r);
    }
    if !keyed {
        batch.bytes.truncate(key_start);
        return Parsed::Unkeyed;
    }
    let method = batch.keep(method);
    let path = path.map(|p| batch.keep(p));
    Parsed::Request(Pending {
        t,
        cost,
        line_no,
        line: (at, at + line.len()),
        key,
        method,
        path,
    })
}

/// Where an input stands in its lines: what its line loop keeps from one line to the next.
struct LineState {
    /// The header line (CSV) is still to come.
    header: bool,
    /// CSV: the line where a record began whose quoted field goes on past its line (RFC 4180
    /// allows line breaks there), while it lasts. It and the lines that continue it are
    /// unusable: never records (their text is the field's, which a client may have chosen).
    open_record: Option<u64>,
    line_no: u64,
}

impl LineState {
    fn new(ex: &Extractor) -> Self {
        // The header: the first line that is neither blank nor too long (`head[0]`).
        LineState {
            header: ex.skip_first,
            open_record: None,
            line_no: 0,
        }
    }

    /// A line longer than [`MAX_LINE`](crate::input::MAX_LINE), read through: counted and
    /// recorded. Not held: its quotes' parity tells whether it ends an open record, or opens
    /// one.
    fn long(
        &mut self,
        cfg: &Config,
        meta: &mut Meta,
        im: &mut InputMeta,
        ex: &Extractor,
        long: &LongLine,
    ) -> Result<(), CliError> {
        self.line_no += 1;
        im.lines += 1;
        let odd = ex.format == LogFormat::Csv && long.quotes % 2 == 1;
        match self.open_record {
            Some(from) => {
                if odd {
                    self.open_record = None;
                }
                record_continuation(cfg, meta, &im.name, self.line_no, &long.head, from)
            }
            None => {
                if odd {
                    self.open_record = Some(self.line_no);
                }
                record_long(cfg, meta, &im.name, self.line_no, long)
            }
        }
    }

    /// Counts the next line; whether it is to be parsed: not blank, not the header, not a W3C
    /// directive (taken, not counted), not text inside a CSV record (recorded).
    #[inline(always)]
    fn take(
        &mut self,
        cfg: &Config,
        meta: &mut Meta,
        im: &mut InputMeta,
        ex: &mut Extractor,
        line: &[u8],
    ) -> Result<bool, CliError> {
        self.line_no += 1;
        im.lines += 1;
        if let Some(from) = self.open_record {
            if !ex.continues_record(line) {
                self.open_record = None;
            }
            // (No request was parsed since the line that opened it.)
            record_continuation(cfg, meta, &im.name, self.line_no, line, from)?;
            return Ok(false);
        }
        if is_blank(line) {
            return Ok(false);
        }
        if ex.directive(line) {
            im.lines -= 1;
            return Ok(false);
        }
        if self.header {
            self.header = false;
            im.lines -= 1;
            return Ok(false);
        }
        Ok(true)
    }

    /// The line just taken is unusable, for `reason`: recorded.
    fn bad(
        &mut self,
        cfg: &Config,
        meta: &mut Meta,
        im: &InputMeta,
        ex: &Extractor,
        line: &[u8],
        reason: String,
    ) -> Result<(), CliError> {
        if ex.csv_open {
            self.open_record = Some(self.line_no);
        }
        record_bad(cfg, meta, &im.name, self.line_no, line, reason)
    }
}

/// An input without a usable line (blank lines only, or lines too long to read, which are
/// unusable): read through, counted.
fn read_empty(
    cfg: &Config,
    meta: &mut Meta,
    name: &str,
    lr: &mut LineReader,
) -> Result<InputMeta, CliError> {
    let mut im = InputMeta {
        name: name.to_string(),
        format: "empty".into(),
        ..Default::default()
    };
    let mut line_no = 0;
    while let Some(chunk) = lr.next_block()? {
        match chunk {
            Chunk::Lines(b) => {
                let n = BlockLines::new(b).count() as u64;
                line_no += n;
                im.lines += n;
            }
            Chunk::Long(long) => {
                line_no += 1;
                im.lines += 1;
                im.format = "unknown".into();
                record_long(cfg, meta, name, line_no, &long)?;
            }
        }
    }
    if im.format == "empty" {
        im.lines = 0;
    }
    Ok(im)
}

/// The extractor of an input whose first lines are `head` (its format and fields detected,
/// or as named), and its entry in the report.
fn start_input(
    cfg: &Config,
    needs: &Needs,
    clients: &mut Clients,
    name: &str,
    head: &[Vec<u8>],
) -> Result<(Extractor, InputMeta), CliError> {
    let ex = Extractor::new(cfg.format, head, needs, &cfg.names, name)?;
    if clients.forwarded_seen.is_none() {
        clients.forwarded_seen = ex.forwarded_seen.clone();
    }
    let im = InputMeta {
        name: name.to_string(),
        format: format!("{:?}", ex.format).to_lowercase(),
        fields: ex.chosen.clone(),
        lines: 0,
        zone: cfg.zone_of(&ex).map(|z| z.name().to_string()),
        utc_without_offset: false,
    };
    Ok((ex, im))
}

/// One pass over the inputs into `replay` ([`pass_merged`]: one input is a merge of one).
fn pass(
    cfg: &Config,
    inputs: &Inputs,
    first: &[Option<u64>],
    replay: &mut Replay,
    meta: &mut Meta,
) -> Result<(), CliError> {
    pass_merged(cfg, inputs, first, replay, meta)
}

/// How many requests after each a merge looks at for an earlier time ([`Feed::head`]): a
/// line stamped far ahead is taken at its neighbours' time.
const LOOKAHEAD: usize = 16;

/// The largest buffer a feed keeps for reuse: the reader's block (a buffer grown for a long
/// line goes).
const BLOCK_BYTES: usize = 1 << 20;

/// Requests an input parses at a time ([`Part`]): enough to look [`LOOKAHEAD`] ahead, few
/// enough that they are still in the cache when they are decided.
const CHUNK: usize = 64;

/// One input of a replay ([`pass_merged`]), read a block at a time and parsed a
/// [`CHUNK`] of requests at a time, ahead of the decisions, which take them one by one in
/// the input's order when the merge comes to their time.
struct Feed {
    lr: LineReader,
    ex: Extractor,
    tp: TimeParser,
    im: InputMeta,
    st: LineState,
    counter: std::rc::Rc<std::cell::Cell<u64>>,
    /// The block being parsed (its first `blk_len` bytes: the reader's buffer, taken over,
    /// [`LineReader::next_block_into`]; shared with the parts whose requests are in it), and
    /// how far.
    blk: Rc<Vec<u8>>,
    blk_len: usize,
    pos: usize,
    /// Blocks no part holds any more, for the next ones.
    spare: Vec<Vec<u8>>,
    /// The requests being taken.
    cur: Part,
    /// The requests after them, parsed once fewer than [`LOOKAHEAD`] of `cur` are left (so
    /// that the last ones look ahead past `cur`'s end); `ahead_ready` says so.
    ahead: Part,
    ahead_ready: bool,
    /// The input's end is reached (nothing after `ahead`, or after `cur`).
    eof: bool,
    /// The next request of `cur`.
    next: usize,
    /// What stopped the input's parsing (an unusable line with `--strict`, a read's
    /// failure): returned when the requests before it are taken, so that they are decided
    /// first, as a replay in the log's order would.
    failed: Option<CliError>,
}

/// Parsed requests of an input: at least [`CHUNK`] of them but at its end.
#[derive(Default)]
struct Part {
    /// The blocks their lines are in, one after the other: where each starts (a line's range
    /// counts from the first one's start), its bytes and its length.
    blocks: Vec<(usize, Rc<Vec<u8>>, usize)>,
    /// The requests (their keys, methods and paths in its bytes).
    parsed: Requests,
    /// Their times in the merge ([`Feed::head`]).
    due: Vec<u64>,
    /// Their own times (scratch).
    times: Vec<u64>,
}

impl Part {
    /// The line at `range`.
    fn line(&self, (s, e): (usize, usize)) -> &[u8] {
        let (base, block, _) = self
            .blocks
            .iter()
            .rev()
            .find(|(base, _, _)| *base <= s)
            .expect("a line of the part's blocks");
        &block[s - base..e - base]
    }
}

impl Feed {
    /// The input's entry in the report, once it is read through.
    fn finish(mut self, cfg: &Config) -> InputMeta {
        // W3C's dates have no offset and are UTC by definition, and a zone given (UTC too)
        // was chosen: nothing to say.
        self.im.utc_without_offset = !cfg.zone_given
            && self.ex.format != LogFormat::W3c
            && self.tp.read_utc_without_offset();
        self.im
    }

    fn new(
        lr: LineReader,
        ex: Extractor,
        im: InputMeta,
        counter: std::rc::Rc<std::cell::Cell<u64>>,
        cfg: &Config,
    ) -> Self {
        Feed {
            st: LineState::new(&ex),
            tp: cfg.time_parser(&ex),
            lr,
            ex,
            im,
            counter,
            blk: Rc::default(),
            blk_len: 0,
            pos: 0,
            spare: Vec::new(),
            cur: Part::default(),
            ahead: Part::default(),
            ahead_ready: false,
            eof: false,
            next: 0,
            failed: None,
        }
    }

    /// The next request's time in the merge (and the time it is decided at): its own, or the
    /// second earliest of the next [`LOOKAHEAD`] requests' times when that is earlier, so
    /// that a line stamped ahead of the lines after it (a clock's glitch, a request logged at
    /// its start and written at its end) does not hold its input back nor set the other
    /// inputs' clock forward, and one stamped far back does not pull the lines before it
    /// along.
    fn head(&self) -> u64 {
        self.cur.due[self.next]
    }

    /// Moves to `cur`'s `k`-th request, the ones before it taken; `false` at the input's end.
    /// (A new input's `cur` is empty: `seek(0)` parses its first requests.)
    fn seek(
        &mut self,
        k: usize,
        cfg: &Config,
        clients: &mut Clients,
        caps: &mut Vec<(usize, usize)>,
        meta: &mut Meta,
    ) -> Result<bool, CliError> {
        self.next = k;
        self.step(cfg, clients, caps, meta)
    }

    /// At the end of `cur`, takes the requests parsed ahead (`false` if there are none: the
    /// input's end); then looks ahead if it is time.
    fn step(
        &mut self,
        cfg: &Config,
        clients: &mut Clients,
        caps: &mut Vec<(usize, usize)>,
        meta: &mut Meta,
    ) -> Result<bool, CliError> {
        if self.next == self.cur.parsed.reqs.len() {
            // (Parsed ahead already, but for a new input's first requests.)
            self.look_ahead(cfg, clients, caps, meta)?;
            if !self.ahead_ready {
                return match self.failed.take() {
                    Some(e) => Err(e),
                    None => Ok(false),
                };
            }
            // `cur`'s requests are decided (the merge flushed the batch): it can go.
            std::mem::swap(&mut self.cur, &mut self.ahead);
            self.ahead_ready = false;
            self.next = 0;
        }
        self.look_ahead(cfg, clients, caps, meta)?;
        Ok(true)
    }

    /// Parses the next requests once `cur` has [`LOOKAHEAD`] left or fewer, and sets the
    /// times of those from both parts.
    fn look_ahead(
        &mut self,
        cfg: &Config,
        clients: &mut Clients,
        caps: &mut Vec<(usize, usize)>,
        meta: &mut Meta,
    ) -> Result<(), CliError> {
        let left = self.cur.parsed.reqs.len() - self.next;
        if self.eof || self.ahead_ready || left > LOOKAHEAD {
            return Ok(());
        }
        let mut ahead = std::mem::take(&mut self.ahead);
        self.ahead_ready = self.parse(&mut ahead, cfg, clients, caps, meta)?;
        self.ahead = ahead;
        self.eof = !self.ahead_ready;
        if self.ahead_ready {
            // The last requests of `cur`, again, with the next part's first ones after them.
            let (cur, ahead) = (&self.cur.parsed.reqs, &self.ahead.parsed.reqs);
            let from = cur.len().saturating_sub(LOOKAHEAD).max(self.next);
            let mut times = [0u64; 2 * LOOKAHEAD];
            let mut n = 0;
            for p in cur[from..].iter().chain(ahead).take(2 * LOOKAHEAD) {
                times[n] = p.t;
                n += 1;
            }
            let mut due = [0u64; LOOKAHEAD];
            set_due(&times[..n], &mut due[..cur.len() - from]);
            self.cur.due[from..].copy_from_slice(&due[..cur.len() - from]);
        }
        Ok(())
    }

    /// Parses requests into `part` until it holds [`CHUNK`] of them or the input ends
    /// (recording the unusable lines on the way); `false` if it holds none. A failure ends
    /// the input there ([`Feed::failed`]).
    fn parse(
        &mut self,
        part: &mut Part,
        cfg: &Config,
        clients: &mut Clients,
        caps: &mut Vec<(usize, usize)>,
        meta: &mut Meta,
    ) -> Result<bool, CliError> {
        if self.failed.is_some() {
            return Ok(false);
        }
        if let Err(e) = self.parse_into(part, cfg, clients, caps, meta) {
            self.failed = Some(e);
        }
        let n = part.parsed.reqs.len();
        part.times.clear();
        part.times.extend(part.parsed.reqs.iter().map(|p| p.t));
        part.due.resize(n, 0);
        set_due(&part.times, &mut part.due);
        Ok(n > 0)
    }

    /// [`parse`](Self::parse)'s reading and parsing.
    fn parse_into(
        &mut self,
        part: &mut Part,
        cfg: &Config,
        clients: &mut Clients,
        caps: &mut Vec<(usize, usize)>,
        meta: &mut Meta,
    ) -> Result<(), CliError> {
        part.parsed.reqs.clear();
        part.parsed.bytes.clear();
        // The part's blocks are let go: kept for reuse where no other part holds them (two
        // at most: a feed holds three blocks at a time, the one it parses among them).
        for (_, b, _) in part.blocks.drain(..) {
            if let Ok(b) = Rc::try_unwrap(b) {
                if self.spare.len() < 2 && b.len() <= BLOCK_BYTES {
                    self.spare.push(b);
                }
            }
        }
        // Where the next block starts in the part's lines' ranges.
        let mut base = 0;
        while part.parsed.reqs.len() < CHUNK {
            if self.pos == self.blk_len {
                if Rc::get_mut(&mut self.blk).is_none() {
                    self.blk = Rc::new(self.spare.pop().unwrap_or_default());
                }
                let v = Rc::get_mut(&mut self.blk).expect("a block of its own");
                match self.lr.next_block_into(v)? {
                    None => break,
                    Some(Filled::Long(long)) => {
                        self.blk_len = 0;
                        self.pos = 0;
                        self.st.long(cfg, meta, &mut self.im, &self.ex, &long)?;
                        continue;
                    }
                    Some(Filled::Lines(n)) => {
                        self.blk_len = n;
                        // A block much smaller than its buffer (a pipe's few lines) is kept
                        // in a buffer of its size: a part may hold many.
                        if n < v.len() / 4 {
                            let big = std::mem::replace(v, v[..n].to_vec());
                            if self.spare.len() < 2 && big.len() <= BLOCK_BYTES {
                                self.spare.push(big);
                            }
                        }
                    }
                }
                self.pos = 0;
            }
            let block = Rc::clone(&self.blk);
            let len = self.blk_len;
            let mut lines = BlockLines::at(&block[..len], self.pos);
            let mut failed = Ok(());
            let before = part.parsed.reqs.len();
            while part.parsed.reqs.len() < CHUNK {
                let Some((at, line)) = lines.next() else {
                    break;
                };
                match self.st.take(cfg, meta, &mut self.im, &mut self.ex, line) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        failed = Err(e);
                        break;
                    }
                }
                let parsed = parse_line(
                    cfg,
                    clients,
                    &mut self.ex,
                    &mut self.tp,
                    caps,
                    &mut part.parsed,
                    line,
                    base + at,
                    self.st.line_no,
                );
                match parsed {
                    Parsed::Request(req) => part.parsed.reqs.push(req),
                    Parsed::Unkeyed => meta.unkeyed += 1,
                    Parsed::Bad(reason) => {
                        failed = self.st.bad(cfg, meta, &self.im, &self.ex, line, reason);
                        if failed.is_err() {
                            break;
                        }
                    }
                }
            }
            self.pos = lines.pos();
            let reqs = &mut part.parsed.reqs[before..];
            let used: usize = reqs.iter().map(|p| p.line.1 - p.line.0).sum();
            if reqs.is_empty() {
                // No request's line is in it (unusable lines, lines without a key): not kept.
            } else if self.pos == len && used < len / 4 {
                // A block mostly of other lines: its requests' lines are kept, not the block,
                // so that a part of sparse requests does not hold a block for each.
                let mut own = Vec::with_capacity(used);
                for p in reqs.iter_mut() {
                    let at = base + own.len();
                    own.extend_from_slice(&block[p.line.0 - base..p.line.1 - base]);
                    p.line = (at, base + own.len());
                }
                part.blocks.push((base, Rc::new(own), used));
            } else {
                part.blocks.push((base, block, len));
            }
            base += len;
            failed?;
        }
        Ok(())
    }
}

/// The times in the merge ([`due_of`]) of the first `due.len()` requests of requests at
/// `times`: each looks at the [`LOOKAHEAD`] after it, or at those `times` has.
fn set_due(times: &[u64], due: &mut [u64]) {
    let n = times.len();
    // How many requests from the i-th on are in time order (most logs are: their times are
    // their own, without looking at the next ones').
    let mut run = 0;
    for i in (0..n).rev() {
        run = if i + 1 < n && times[i] <= times[i + 1] {
            run + 1
        } else {
            1
        };
        if let Some(d) = due.get_mut(i) {
            let end = n.min(i + 1 + LOOKAHEAD);
            *d = if run >= end - i {
                times[i]
            } else {
                due_of(times[i], times[i + 1..end].iter().copied())
            };
        }
    }
}

/// The time in the merge of a request at `own` followed by requests at `after` (up to
/// [`LOOKAHEAD`] of them): its own, or the second earliest of those when that is earlier
/// (the earliest when there is one): one line stamped far back does not pull the lines
/// before it along.
fn due_of(own: u64, after: impl Iterator<Item = u64>) -> u64 {
    let (mut a, mut b, mut n) = (u64::MAX, u64::MAX, 0);
    for t in after {
        n += 1;
        if t < a {
            (a, b) = (t, a);
        } else if t < b {
            b = t;
        }
    }
    own.min(if n > 1 { b } else { a })
}

/// One pass over the inputs (one, or the logs of several servers, of a load balancer's
/// nodes, or rotated files of one server), merged by time: the request decided next is always the
/// earliest of the inputs' next requests (ties in the inputs' order), each input's requests
/// in its own order (a request stamped ahead of the requests logged after it is taken, and
/// decided, by their time: [`Feed::head`]). Inputs in time order that follow each other are
/// replayed exactly as one after the other; inputs that overlap are interleaved as one
/// server in front of them all (a limit on a shared store) would have seen their requests.
///
/// An input is opened when the merge reaches its first timestamp (`first`, read ahead by
/// [`order_inputs`]; at once for stdin, a pipe, or a file without one), and closed at its
/// end: a day of a load balancer's five-minute files holds a few open at a time, not
/// hundreds. Unusable lines are recorded as each input's requests are parsed, a little ahead
/// of the decisions ([`CHUNK`] at a time); a failure of one, after its requests before it.
///
/// Every replay is one (a single input is a merge of one): its requests are decided from
/// their input's parsed block, not copied, and an input's run of requests before the other
/// inputs' next ones (for one input, all of them) is taken without the heap.
fn pass_merged(
    cfg: &Config,
    inputs: &Inputs,
    first: &[Option<u64>],
    replay: &mut Replay,
    meta: &mut Meta,
) -> Result<(), CliError> {
    use std::cmp::Reverse;
    let needs = cfg.needs();
    let files: &[String] = match inputs {
        Inputs::Files(files) => files,
        Inputs::Sample(_) => &[String::new()],
    };
    let names: Vec<String> = match inputs {
        Inputs::Files(files) => files.iter().map(|f| shown(cfg, f)).collect(),
        Inputs::Sample(_) => vec![SAMPLE_NAME.to_string()],
    };
    let total: Option<u64> = match inputs {
        Inputs::Files(files) => files
            .iter()
            .map(|f| match f.as_str() {
                "-" => None,
                f => std::fs::metadata(f).ok().map(|m| m.len()),
            })
            .sum(),
        Inputs::Sample(_) => None,
    };
    let mut prog = Progress::new(cfg.progress, total);
    let mut caps = Vec::new();
    let mut batch = Batch::new();
    let mut clients = Clients::new(cfg)?;
    let cx = Decide { cfg, names: &names };
    // The inputs to open: at once those without a first timestamp, the others when the
    // merge reaches it (latest first: popped from the end).
    let mut waiting: Vec<(u64, usize)> = Vec::new();
    let mut now: Vec<usize> = Vec::new();
    for i in 0..files.len() {
        match first.get(i).copied().flatten() {
            Some(t) => waiting.push((t, i)),
            None => now.push(i),
        }
    }
    waiting.sort_by_key(|&(t, i)| Reverse((t, i)));
    // (Popped from the end: the first listed is opened first, as a pipe's writer expects.)
    now.reverse();
    let mut feeds: Vec<Option<Feed>> = (0..files.len()).map(|_| None).collect();
    let mut metas: Vec<Option<InputMeta>> = vec![None; files.len()];
    // Each input's first and last times in the merge, for the report.
    let mut spans: Vec<Option<(u64, u64)>> = vec![None; files.len()];
    // The open inputs' next requests: (time, input).
    let mut heads: std::collections::BinaryHeap<Reverse<(u64, usize)>> = Default::default();
    let mut since = 0usize;
    loop {
        // Open every input whose first timestamp the merge has reached.
        loop {
            let next = heads.peek().map(|Reverse((t, _))| *t);
            let open = match (now.pop(), waiting.last()) {
                (Some(i), _) => i,
                (None, Some(&(t, i))) if next.is_none_or(|n| t <= n) => {
                    waiting.pop();
                    i
                }
                _ => break,
            };
            // The requests taken before it are decided first (an input's first lines may
            // end the replay: an unusable one with --strict, a file that cannot be read).
            batch.flush(replay, &cx, &feeds, meta)?;
            let mut src = match inputs {
                Inputs::Files(_) => Source::open(&files[open])?,
                Inputs::Sample(format) => Source::from_reader(
                    SAMPLE_NAME,
                    Box::new(SampleReader::new(Generator::day(1), *format)),
                ),
            };
            src.name = names[open].clone();
            let counter = src.read_bytes.clone();
            let mut lr = LineReader::new(src);
            let head = lr.peek_lines(200)?;
            if head.is_empty() {
                let im = read_empty(cfg, meta, &names[open], &mut lr)?;
                prog.done_bytes += counter.get();
                metas[open] = Some(im);
                continue;
            }
            let (ex, im) = start_input(cfg, &needs, &mut clients, &names[open], &head)?;
            let mut feed = Feed::new(lr, ex, im, counter, cfg);
            if feed.seek(0, cfg, &mut clients, &mut caps, meta)? {
                heads.push(Reverse((feed.head(), open)));
                feeds[open] = Some(feed);
            } else {
                prog.done_bytes += feed.counter.get();
                metas[open] = Some(feed.finish(cfg));
            }
        }
        let Some(Reverse((_, i))) = heads.pop() else {
            break;
        };
        // Input i's requests are taken until another open input's next one comes first or
        // an input is to be opened: for inputs that follow one another, or one input, a run
        // as long as the input.
        let other = heads.peek().map(|Reverse(o)| *o);
        let opens = waiting.last().map(|&(t, _)| t);
        loop {
            let feed = feeds[i].as_ref().expect("an open input");
            let (reqs, due) = (&feed.cur.parsed.reqs, &feed.cur.due);
            // The times of `cur`'s last requests are final once the next ones are parsed.
            let end = if feed.ahead_ready || feed.eof {
                reqs.len()
            } else {
                reqs.len() - LOOKAHEAD
            };
            let mut k = feed.next;
            let (mut lo, mut hi) = spans[i].unwrap_or((u64::MAX, 0));
            while k < end {
                let t = due[k];
                (lo, hi) = (lo.min(t), hi.max(t));
                batch.reqs.push((i, k));
                k += 1;
                // Decided before `cur` is let go: the batch's requests are in it.
                if batch.reqs.len() == BATCH || k == reqs.len() {
                    batch.flush(replay, &cx, &feeds, meta)?;
                }
                if k < end
                    && (other.is_some_and(|o| (due[k], i) > o)
                        || opens.is_some_and(|t| t <= due[k]))
                {
                    break;
                }
            }
            spans[i] = Some((lo, hi));
            since += k - feed.next;
            if since >= 1 << 16 {
                since = 0;
                let reading: u64 = feeds.iter().flatten().map(|f| f.counter.get()).sum();
                prog.bar.set_position(prog.done_bytes + reading);
            }
            let feed = feeds[i].as_mut().expect("an open input");
            if !feed.seek(k, cfg, &mut clients, &mut caps, meta)? {
                if let Some(feed) = feeds[i].take() {
                    prog.done_bytes += feed.counter.get();
                    metas[i] = Some(feed.finish(cfg));
                }
                break;
            }
            let next = (feed.head(), i);
            if other.is_some_and(|o| next > o) || opens.is_some_and(|t| t <= next.0) {
                heads.push(Reverse(next));
                break;
            }
        }
    }
    batch.flush(replay, &cx, &feeds, meta)?;
    prog.bar.set_position(prog.done_bytes);
    prog.bar.finish_and_clear();
    // The report lists the inputs by their first times (those without a request last, in
    // the order given), and names those that start before the inputs listed before them
    // end: replayed one after the other, they would have gone back in time.
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by_key(|&i| (spans[i].is_none(), spans[i].map(|(a, _)| a), i));
    let mut end: Option<u64> = None;
    for i in order {
        if let Some((first, last)) = spans[i] {
            if end.is_some_and(|e| first < e) {
                meta.overlapping.push(names[i].clone());
            }
            end = Some(end.map_or(last, |e| e.max(last)));
        }
        if let Some(im) = metas[i].take() {
            meta.lines += im.lines;
            meta.inputs.push(im);
        }
    }
    meta.client_notes = clients.finish();
    Ok(())
}

/// A replay of `inputs` against `cfg.policies`, and its summary.
pub fn replay(cfg: &Config, inputs: &Inputs) -> Result<Summary, CliError> {
    let started = Instant::now();
    let (ordered, first) = order_inputs(cfg, inputs, cfg.stdin_copy.as_deref())?;
    let inputs = &ordered;
    let fresh = || {
        let r = Replay::new(
            cfg.policies.clone(),
            cfg.max_keys,
            cfg.sustain,
            Timeline::adaptive(cfg.policies.len(), cfg.max_bins),
        );
        let r = if cfg.dense { r } else { r.keyed_stores() };
        let meta = Meta {
            command: "replay".into(),
            key: cfg.key_description(),
            ..Default::default()
        };
        (r, meta)
    };
    let (mut r, mut meta) = fresh();
    if let Err(e) = pass(cfg, inputs, &first, &mut r, &mut meta) {
        if !r.bound_met {
            return Err(e);
        }
        // A dense store met --max-keys, where a keyed store evicts full buckets first: the
        // whole replay again on keyed stores (the inputs are files, or stdin spooled to one:
        // stdin read once never takes dense stores).
        let (r2, meta2) = fresh();
        (r, meta) = (r2.keyed_stores(), meta2);
        pass(cfg, inputs, &first, &mut r, &mut meta)?;
    }
    r.finish();
    if r.requests == 0 {
        let first = meta.bad_examples.first().cloned().unwrap_or_default();
        return Err(CliError::Data {
            path: meta
                .inputs
                .first()
                .map_or("input".into(), |i| i.name.clone()),
            line: 0,
            text: String::new(),
            reason: format!(
                "no usable request in {} ({} unusable, {} without a key){}",
                crate::output::counted(meta.lines, "line", "lines"),
                meta.bad_lines,
                meta.unkeyed,
                if first.is_empty() {
                    String::new()
                } else {
                    format!("; first: {first}")
                }
            ),
        });
    }
    let mut summary = Summary::new(&r, meta.clone(), cfg.top);
    if cfg.trace > 0 {
        let traced = summary.top_keys_to_trace(&r, cfg.trace);
        if !traced.is_empty() {
            let mut r2 = r.second_pass(&traced);
            let mut meta2 = Meta::default();
            pass(cfg, inputs, &first, &mut r2, &mut meta2)?;
            r2.finish();
            summary.traces = r2
                .traces
                .iter()
                .map(|tr| {
                    (
                        tr.policy,
                        r.key_text(tr.key),
                        tr.limit,
                        tr.level_end.clone(),
                        tr.level_min.clone(),
                        tr.rejected.clone(),
                    )
                })
                .collect();
        }
    }
    summary.meta.elapsed_s = started.elapsed().as_secs_f64();
    Ok(summary)
}

/// Request instants (ns) of a traffic description, and its end.
pub fn traffic(text: &str) -> Result<(Vec<u64>, u64), CliError> {
    let err = |r: String| CliError::usage("--traffic", text, r);
    let mut times = Vec::new();
    let mut t = 0u64;
    for seg in text.split(',').map(str::trim) {
        if let Some(d) = seg.strip_prefix("idle") {
            t += crate::duration(d).map_err(err)?;
        } else if let Some(n) = seg.strip_prefix("burst") {
            let n: u64 = n
                .trim()
                .parse()
                .map_err(|_| err(format!("burst needs a count: {seg:?}")))?;
            if n > 50_000_000 {
                return Err(err(format!("segment {seg:?} has over 50 million requests")));
            }
            times.extend(std::iter::repeat_n(t, n as usize));
        } else if let Some((rate, dur)) = seg.split_once(" for ") {
            let q = crate::engine::Rate::parse(rate)
                .map_err(|e| err(format!("segment {seg:?}: {e}")))?;
            let d = crate::duration(dur).map_err(err)?;
            // count requests per period: request j at j * period / count.
            let n = u128::from(q.count()) * u128::from(d) / u128::from(q.period_ns());
            if n > 50_000_000 {
                return Err(err(format!("segment {seg:?} has over 50 million requests")));
            }
            for j in 0..n {
                let dt = j * u128::from(q.period_ns()) / u128::from(q.count());
                times.push(t + dt as u64);
            }
            t += d;
        } else if !seg.is_empty() {
            return Err(err(format!(
                "segment {seg:?}: expected \"RATE for DURATION\", \"idle DURATION\" or \"burst N\""
            )));
        }
    }
    if times.is_empty() {
        return Err(err("the traffic has no requests".into()));
    }
    Ok((times, t))
}

/// A simulation: one client's synthetic traffic against the policies, on rows of `step`.
pub fn simulate(
    policies: Vec<PolicySpec>,
    times: &[u64],
    end: u64,
    cost: u64,
    step: Option<u64>,
    top: usize,
) -> Result<(Summary, Vec<Option<u64>>), CliError> {
    let started = Instant::now();
    let end = end.max(times.last().copied().unwrap_or(0) + 1);
    let step = match step {
        Some(s) => s.max(1),
        None => {
            let nice = [1, 10, 50, 100, 250, 500, 1000, 5000, 10_000, 60_000];
            nice.iter()
                .map(|ms| ms * 1_000_000)
                .find(|ns| end / ns <= 40)
                .unwrap_or(end / 30 + 1)
        }
    };
    let rows = end.div_ceil(step) as usize;
    let n = policies.len();
    let run = |r: &mut Replay| -> Result<(), CliError> {
        let id = r.key_id(b"");
        for &t in times {
            r.offer(t, id, b"GET", Some(b"/"), cost)
                .map_err(|e| CliError::usage("--traffic", "", e.to_string()))?;
        }
        r.finish();
        Ok(())
    };
    let mut r = Replay::new(
        policies,
        usize::MAX >> 1,
        end.max(1),
        Timeline::fixed(n, 0, step, rows),
    );
    run(&mut r)?;
    let meta = Meta {
        command: "simulate".into(),
        key: "one client".into(),
        lines: times.len() as u64,
        ..Default::default()
    };
    let mut summary = Summary::new(&r, meta, top);
    let traced: Vec<(usize, u32)> = (0..n).map(|p| (p, 0)).collect();
    let mut r2 = r.second_pass(&traced);
    run(&mut r2)?;
    summary.traces = r2
        .traces
        .iter()
        .map(|tr| {
            (
                tr.policy,
                "client".to_string(),
                tr.limit,
                tr.level_end.clone(),
                tr.level_min.clone(),
                tr.rejected.clone(),
            )
        })
        .collect();
    let first_rejects = r.stats.iter().map(|s| s.first_reject).collect();
    summary.last_t = end;
    summary.meta.elapsed_s = started.elapsed().as_secs_f64();
    Ok((summary, first_rejects))
}

/// `s` percent-decoded onto `out` (`%XX` a byte; a `%` without two hex digits after it is
/// kept as it is), with `+` a space in a query string (`query`), as form-encoded values are.
/// `%2F` stays as it is: the captures are joined with `/`, and a decoded one would make
/// `/t/x%2Fy/z` and `/t/x/y%2Fz` one key under `/t/{a}/{b}`.
fn percent_decode(s: &[u8], query: bool, out: &mut Vec<u8>) {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut i = 0;
    while i < s.len() {
        let byte = match s[i] {
            b'%' => match (
                s.get(i + 1).and_then(|&b| hex(b)),
                s.get(i + 2).and_then(|&b| hex(b)),
            ) {
                (Some(2), Some(15)) => b'%',
                (Some(h), Some(l)) => {
                    i += 2;
                    (h * 16 + l) as u8
                }
                _ => b'%',
            },
            b'+' if query => b' ',
            b => b,
        };
        out.push(byte);
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::key_text;
    use sluicegate::client::ClientKey;

    fn config(trusted: &str, header: &str, v4: u8, v6: u8) -> Config {
        Config {
            policies: Vec::new(),
            key: vec![KeyPart::Ip],
            prefixes: Prefixes { v4, v6 },
            trusted: trusted.parse().unwrap(),
            names: Names {
                forwarded_header: header.parse().unwrap(),
                delimiter: b',',
                ..Default::default()
            },
            format: LogFormat::Auto,
            unit: EpochUnit::Auto,
            zone: Zone::utc(),
            zone_given: false,
            cost: 1,
            max_keys: 1 << 20,
            strict: false,
            top: 10,
            sustain: 10,
            trace: 0,
            progress: false,
            max_bins: 100,
            dense: true,
            stdin_copy: None,
            copies: Vec::new(),
        }
    }

    /// The key text of a request from `peer` with the forwarding header `fwd`.
    fn key(cl: &mut Clients, cfg: &Config, peer: &str, fwd: Option<&str>) -> Option<String> {
        let mut out = Vec::new();
        cl.write_key(
            &cfg.prefixes,
            peer.as_bytes(),
            fwd.map(str::as_bytes),
            &mut out,
        )
        .then(|| key_text(&out))
    }

    #[test]
    fn the_client_behind_trusted_proxies() {
        let balancer = "10.0.0.5";
        // No trusted proxy: the peer, whatever the header says (as before).
        let cfg = config("none", "xff", 32, 64);
        let mut cl = Clients::new(&cfg).unwrap();
        assert!(cl.resolver.is_none());
        let k = key(&mut cl, &cfg, balancer, Some("192.0.2.3, 10.0.0.9"));
        assert_eq!(k.as_deref(), Some("10.0.0.5"));
        assert_eq!(key(&mut cl, &cfg, "not an address", None), None);
        // Private ranges: the right-most hop outside them; a forged left-most hop changes
        // nothing; a line without the header (or nginx's `-`, read as none) is the peer's.
        let cfg = config("private", "xff", 32, 64);
        let mut cl = Clients::new(&cfg).unwrap();
        for (fwd, want) in [
            (Some("192.0.2.3, 10.0.0.9"), "192.0.2.3"),
            (Some("6.6.6.6, 192.0.2.3, 10.0.0.9"), "192.0.2.3"),
            (Some("192.0.2.3"), "192.0.2.3"),
            (None, "10.0.0.5"),
        ] {
            assert_eq!(key(&mut cl, &cfg, balancer, fwd).as_deref(), Some(want));
        }
        // A public peer is not a proxy: its own header is not believed.
        let k = key(&mut cl, &cfg, "198.51.100.1", Some("192.0.2.3"));
        assert_eq!(k.as_deref(), Some("198.51.100.1"));
        assert!(cl.notes.is_empty(), "{:?}", cl.notes);
        // A hop count: the n-th hop from the right; fewer hops warn once (the core's warning).
        let cfg = config("2", "xff", 32, 64);
        let mut cl = Clients::new(&cfg).unwrap();
        let k = key(
            &mut cl,
            &cfg,
            balancer,
            Some("6.6.6.6, 192.0.2.3, 10.0.0.9"),
        );
        assert_eq!(k.as_deref(), Some("192.0.2.3"));
        let k = key(&mut cl, &cfg, balancer, Some("10.0.0.9"));
        assert_eq!(k.as_deref(), Some("10.0.0.9"));
        let k = key(&mut cl, &cfg, balancer, Some("10.0.0.8"));
        assert_eq!(k.as_deref(), Some("10.0.0.8"));
        assert_eq!(cl.notes.len(), 1, "{:?}", cl.notes);
        assert!(cl.notes[0].contains("short_chain"), "{:?}", cl.notes);
        // A malformed hop where the client should be: the peer's key, warned once.
        let cfg = config("1", "xff", 32, 64);
        let mut cl = Clients::new(&cfg).unwrap();
        let k = key(&mut cl, &cfg, balancer, Some("1.2.3.4, not-an-ip"));
        assert_eq!(k.as_deref(), Some("10.0.0.5"));
        assert!(cl.notes[0].contains("malformed_header"), "{:?}", cl.notes);
        // RFC 7239 Forwarded, when named; an obfuscated identifier keys as written.
        let cfg = config("1", "forwarded", 32, 64);
        let mut cl = Clients::new(&cfg).unwrap();
        let k = key(
            &mut cl,
            &cfg,
            balancer,
            Some(r#"for=6.6.6.6, for="[2001:db8::1]:443""#),
        );
        assert_eq!(k.as_deref(), Some("2001:db8::/64"));
        let k = key(&mut cl, &cfg, balancer, Some("for=_hidden"));
        assert_eq!(k.as_deref(), Some("_hidden"));
    }

    /// The prefixes key a resolved client as they key a peer: one rule (the CLI's), which is
    /// the core's `ClientKey` for every prefix the core takes, IPv4-mapped IPv6 as IPv4.
    #[test]
    fn prefixes_apply_to_the_resolved_client_as_to_a_peer() {
        let cfg = config("private", "xff", 24, 48);
        let mut cl = Clients::new(&cfg).unwrap();
        let fwd = Some("2001:db8:1:2::7, 10.0.0.9");
        let k = key(&mut cl, &cfg, "10.0.0.5", fwd);
        assert_eq!(k.as_deref(), Some("2001:db8:1::/48"));
        let k = key(&mut cl, &cfg, "10.0.0.5", Some("::ffff:192.0.2.3"));
        assert_eq!(k.as_deref(), Some("192.0.2.0/24"));
        // As a peer.
        let k = key(&mut cl, &cfg, "2001:db8:1:2::7", None);
        assert_eq!(k.as_deref(), Some("2001:db8:1::/48"));
        for ip in [
            "192.0.2.7",
            "2001:db8:1:2:3:4:5:6",
            "::ffff:198.51.100.9",
            "::1",
        ] {
            let ip: std::net::IpAddr = ip.parse().unwrap();
            for (v4, v6) in [(32, 64), (24, 48), (1, 1), (32, 128), (8, 127)] {
                let p = Prefixes { v4, v6 };
                assert_eq!(
                    p.key(ip).to_string(),
                    ClientKey::from_ip(ip, v4, v6).as_str(),
                    "{ip} /{v4} /{v6}"
                );
            }
        }
        // Prefix 0 (one key for all), which the CLI takes and the core does not.
        let cfg = config("private", "xff", 0, 0);
        let mut cl = Clients::new(&cfg).unwrap();
        let k = key(&mut cl, &cfg, "10.0.0.5", Some("192.0.2.3"));
        assert_eq!(k.as_deref(), Some("0.0.0.0/0"));
    }

    /// Without --trusted-proxies: a hint when every peer is one of a few private addresses
    /// and a forwarding header was seen; none otherwise.
    #[test]
    fn the_hint_suggests_trusted_proxies() {
        let cfg = config("none", "xff", 32, 64);
        let run = |peers: &[&str], seen: bool| {
            let mut cl = Clients::new(&cfg).unwrap();
            cl.forwarded_seen = seen.then(|| "http_x_forwarded_for".to_string());
            for p in peers {
                key(&mut cl, &cfg, p, None).unwrap();
            }
            cl.finish()
        };
        let notes = run(&["10.0.0.5", "10.0.0.5", "10.0.0.6", "10.0.0.5"], true);
        assert_eq!(notes.len(), 1);
        assert!(
            notes[0].contains("2 private addresses (10.0.0.5, 10.0.0.6)")
                && notes[0].contains("--trusted-proxies 10.0.0.5,10.0.0.6"),
            "{}",
            notes[0]
        );
        assert!(run(&["10.0.0.5", "10.0.0.5"], false).is_empty());
        assert!(run(&["10.0.0.5", "192.0.2.1"], true).is_empty());
        let many = ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"];
        assert!(run(&many, true).is_empty());
        assert_eq!(run(&many[..4], true).len(), 1);
    }
}
