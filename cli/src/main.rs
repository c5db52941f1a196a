//! `sluicegate`: what would a rate limit do to real traffic?
//!
//! * `replay` plays access logs (combined, JSON lines, CSV, ALB, W3C as IIS and CloudFront
//!   write it, HAProxy; plain, gzip or stdin) against one or several candidate policies side
//!   by side, on the core engine with a clock driven by the log's timestamps, and reports what
//!   each would have rejected, from whom, and how long clients would have waited; `--html`
//!   draws it.
//! * `simulate` does the same for synthetic traffic segments (`"60/s for 3s, idle 1s"`).
//! * `check` explains a rate string; `sample` writes the embedded sample traffic (or a
//!   benchmark log); `completions` prints shell completions.

mod engine;
mod error;
mod fields;
mod input;
mod intern;
mod json;
mod netkey;
mod output;
mod policy;
mod replay;
mod report;
mod run;
mod sample;
mod scan;
mod stats;
mod timefmt;

use clap::{CommandFactory, Parser, Subcommand};
use error::{exit, CliError};
use input::LogFormat;
use output::{Format, Table};
use sluicegate::client::{ProxyHeader, TrustedProxies};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

const S: u64 = 1_000_000_000;

const EXIT_CODES: &str = "\
Exit codes: 0 success; 1 an output could not be written; 2 usage (an unknown option, a value \
that does not parse: the message quotes it); 3 an input cannot be opened, read or decompressed; \
4 data (no usable line, a malformed line under --strict, fields not found, the key bound \
reached).";

#[derive(Parser)]
#[command(
    name = "sluicegate",
    version,
    about = "What would a rate limit do to real traffic? Replays access logs (or synthetic \
             traffic) against candidate policies, exactly, on the sluicegate engine.",
    after_help = EXIT_CODES,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Replay access logs against one or several policies, side by side.
    #[command(after_long_help = REPLAY_HELP)]
    Replay(Box<ReplayArgs>),
    /// Play policies against synthetic traffic segments on a simulated clock.
    Simulate(SimulateArgs),
    /// Explain a rate string: rate, burst, refill, algorithm, state (word or log).
    Check(CheckArgs),
    /// Write the embedded sample traffic (or a benchmark log) as a log.
    Sample(SampleArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

const REPLAY_HELP: &str = "\
Policies (--policy, repeatable; each is replayed on the same traffic):
  10/s; burst=50                      a bucket per key (the rate string of the core)
  strict=5/s; burst=10                the same, named
  both=10/s; burst=20 & global 500/s  a composite: every part must admit (global: one bucket)
  api=/search* => 2/s | POST /login => 5/m | * => 50/s
                                      per route: the first rule whose route matches
  any algorithm: 100/m; algorithm=sliding_window (gcra, fixed_window, sliding_log, leaky_queue)

Keys (--key, repeatable: the key is all of them; default ip):
  ip  header:NAME  field:NAME  path  path:/tenants/{tenant}/*  method  all

Behind proxies (a load balancer logged as every request's address): --trusted-proxies 1
(hops), or 10.0.0.0/8 or private (ranges), keys ip by the right-most address the trusted
proxies did not write in X-Forwarded-For (nginx main's last quoted field; JSON/CSV
http_x_forwarded_for, x_forwarded_for, headers.x-forwarded-for; or --forwarded-field).

Unusable lines are counted and skipped (the first five quoted; --strict stops at the first):
lines not in the log's format, without a timestamp or a client address, lines over 16 MiB
(read through, never held in memory), and CSV records over several lines (a quoted field
with a line break): the line it starts on and every line that continues it.

Examples:
  sluicegate replay --sample --policy 'lenient=20/s; burst=100' --policy 'strict=5/s; burst=20'
  sluicegate replay access.log access.log.1.gz --policy '10/s; burst=50' --html report.html
  zcat big.log.gz | sluicegate replay - --policy '10/s' --format json
  sluicegate replay app.jsonl --key header:X-Api-Key --time-field ts --policy '100/m'";

#[derive(clap::Args)]
struct OutputArgs {
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// The table --format csv writes.
    #[arg(long, value_enum, default_value_t = Table::Summary)]
    table: Table,
    /// Write a self-contained HTML report (charts; no network needed) to this file.
    #[arg(long, value_name = "FILE")]
    html: Option<String>,
    /// Write the answer to this file instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<String>,
    /// Top throttled keys listed per policy.
    #[arg(long, default_value_t = 10)]
    top: usize,
}

#[derive(clap::Args)]
struct ReplayArgs {
    /// Log files (plain or gzip, detected); `-` for stdin, which is also read when no file is
    /// named and stdin is not a terminal (`zcat access.log.gz | sluicegate replay ...`).
    /// Several are merged by time (the logs of several servers, a load balancer's nodes,
    /// rotated files in any order).
    #[arg(value_name = "FILE")]
    files: Vec<String>,
    /// Replay the embedded sample day (see `sluicegate sample`) instead of files.
    #[arg(long, conflicts_with = "files")]
    sample: bool,
    /// A candidate policy (repeatable); see below.
    #[arg(long, short = 'p', required = true, value_name = "POLICY", value_parser = parse_policy)]
    policy: Vec<policy::PolicySpec>,
    /// What a key is (repeatable; default ip); see below.
    #[arg(long, short = 'k', value_name = "KEY", value_parser = parse_key)]
    key: Vec<policy::KeyPart>,
    /// Leading bits of an IPv4 address that make a key.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u8).range(0..=32))]
    ipv4_prefix: u8,
    /// Leading bits of an IPv6 address that make a key (IPv4-mapped addresses are IPv4).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u8).range(0..=128))]
    ipv6_prefix: u8,
    /// Proxies whose forwarding header names the client: a hop count (1 to 64), or
    /// comma-separated addresses, CIDR ranges and names (private, loopback, linklocal). The
    /// ip key is then the right-most hop they did not write (default none: the logged address;
    /// `none` or `0` say the same, as in every sluicegate binding).
    #[arg(long, value_name = "SPEC", value_parser = parse_trusted)]
    trusted_proxies: Option<TrustedProxies>,
    /// The field holding the forwarding header (default: detected among
    /// http_x_forwarded_for, x-forwarded-for, x_forwarded_for, headers.x-forwarded-for, ...;
    /// combined: the quoted field after the User-Agent, as nginx's main format logs it; w3c:
    /// x-forwarded-for, cs(X-Forwarded-For); haproxy: none, name its capture, hdrN).
    #[arg(long, value_name = "NAME")]
    forwarded_field: Option<String>,
    /// The forwarding header the proxies write: x-forwarded-for, or forwarded (RFC 7239).
    #[arg(long, value_name = "HEADER", default_value = "x-forwarded-for", value_parser = parse_proxy_header)]
    forwarded_header: ProxyHeader,
    /// The log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Auto)]
    log_format: LogFormat,
    /// The timestamp field (JSON lines, CSV; default: detected among time, timestamp, ts,
    /// @timestamp, msec, time_iso8601, time_local, ...; alb: time; w3c: date and time;
    /// haproxy: request_date).
    #[arg(long, value_name = "NAME")]
    time_field: Option<String>,
    /// The client address field (default: detected among ip, client_ip, remote_addr, ...).
    #[arg(long, value_name = "NAME")]
    ip_field: Option<String>,
    /// The path field (default: detected among path, uri, request_uri, url, request).
    #[arg(long, value_name = "NAME")]
    path_field: Option<String>,
    /// The method field (default: detected among method, request_method, verb).
    #[arg(long, value_name = "NAME")]
    method_field: Option<String>,
    /// A field holding each request's cost (a whole number; default: --cost).
    #[arg(long, value_name = "NAME")]
    cost_field: Option<String>,
    /// The unit of numeric timestamps.
    #[arg(long, value_enum, default_value_t = timefmt::EpochUnit::Auto)]
    time_unit: timefmt::EpochUnit,
    /// The zone of dates written without an offset (HAProxy's local time, RFC 3339 without
    /// `Z`): an IANA name, daylight saving included (`Europe/Berlin`), a fixed offset
    /// (`+05:30`) or `UTC` (the default). A date with its own offset keeps it; W3C's are UTC.
    #[arg(long, value_name = "ZONE", value_parser = timefmt::Zone::parse)]
    timezone: Option<timefmt::Zone>,
    /// The CSV delimiter (one byte; `tab` for a tab).
    #[arg(long, default_value = ",", value_parser = parse_delim)]
    csv_delimiter: u8,
    /// Tokens per request (at least 1: a cost of 0 takes nothing and admits everything).
    #[arg(long, default_value_t = 1, value_parser = parse_cost)]
    cost: u64,
    /// The most distinct keys held per policy: full buckets are evicted first, losslessly when
    /// each quota's initial tokens equal its burst (an evicted key comes back with `initial`).
    #[arg(long, default_value_t = 1 << 24, value_parser = parse_max_keys)]
    max_keys: usize,
    /// Fail (exit 4) on the first unusable line instead of counting and skipping it.
    #[arg(long)]
    strict: bool,
    /// The window of the peak sustained rates (a multiple of 10ns).
    #[arg(long, default_value = "10s", value_parser = parse_sustain)]
    sustain: u64,
    /// Keys per policy whose bucket levels the HTML report charts (a second pass).
    #[arg(long, default_value_t = 3)]
    trace: usize,
    /// No progress bar (it is drawn only when stderr is a terminal anyway).
    #[arg(long, short = 'q')]
    quiet: bool,
    #[command(flatten)]
    out: OutputArgs,
}

#[derive(clap::Args)]
struct SimulateArgs {
    /// A policy (repeatable), as for replay.
    #[arg(long, short = 'p', alias = "quota", short_alias = 'q', required = true, value_name = "POLICY", value_parser = parse_policy)]
    policy: Vec<policy::PolicySpec>,
    /// Comma-separated segments, played one after the other: "RATE for DURATION" (evenly
    /// spaced requests, e.g. "60/s for 3s"), "idle DURATION", "burst N" (N at one instant).
    #[arg(long, short = 't', value_name = "TRAFFIC")]
    traffic: String,
    /// Tokens per request (at least 1: a cost of 0 takes nothing and admits everything).
    #[arg(long, default_value_t = 1, value_parser = parse_cost)]
    cost: u64,
    /// Timeline row width (default: about 30 rows), e.g. 100ms.
    #[arg(long, value_parser = parse_duration)]
    step: Option<u64>,
    #[command(flatten)]
    out: OutputArgs,
}

#[derive(clap::Args)]
struct CheckArgs {
    /// A rate string, e.g. "10/s; burst=50".
    #[arg(long, short = 'q', alias = "policy", value_name = "RATE", value_parser = parse_rate)]
    quota: engine::Rate,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Scenario {
    /// One day of a small site: steady users, a bursty crawler, an abuser, a diurnal shape.
    Day,
    /// Evenly spaced requests from --keys clients in turn (benchmarks).
    Uniform,
}

#[derive(clap::Args)]
struct SampleArgs {
    #[arg(long, value_enum, default_value_t = Scenario::Day)]
    scenario: Scenario,
    /// The log format written.
    #[arg(long, value_enum, default_value_t = LogFormat::Jsonl)]
    log_format: LogFormat,
    /// The seed (the same seed, the same log).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Distinct clients (uniform).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1 << 24))]
    keys: u64,
    /// Requests (uniform).
    #[arg(long, default_value_t = 1_000_000)]
    lines: u64,
    /// Write the log to this file (gzip-compressed if it ends in .gz) instead of stdout.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<String>,
    /// With --output: how the summary of what was written is printed.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

fn parse_policy(s: &str) -> Result<policy::PolicySpec, String> {
    policy::PolicySpec::parse(s).map_err(|e| e.to_string())
}
fn parse_key(s: &str) -> Result<policy::KeyPart, String> {
    policy::KeyPart::parse(s).map_err(|e| e.to_string())
}
fn parse_trusted(s: &str) -> Result<TrustedProxies, String> {
    s.parse().map_err(|e: sluicegate::Error| e.to_string())
}
fn parse_proxy_header(s: &str) -> Result<ProxyHeader, String> {
    s.parse().map_err(|e: sluicegate::Error| e.to_string())
}
fn parse_rate(s: &str) -> Result<engine::Rate, String> {
    engine::Rate::parse(s)
}
/// A duration longer than zero (a window, a row: zero has no rate to divide by).
fn parse_duration(s: &str) -> Result<u64, String> {
    match duration(s)? {
        0 => Err(format!("duration {s:?} must be longer than zero")),
        d => Ok(d),
    }
}
/// The sustain window: counted in ten equal steps, so a whole number of ten nanoseconds
/// (15ns would be counted over 10ns and reported as 15ns).
fn parse_sustain(s: &str) -> Result<u64, String> {
    match parse_duration(s)? {
        d if d % 10 != 0 => Err(format!(
            "the window {s:?} is counted in ten equal steps: give a multiple of 10ns"
        )),
        d => Ok(d),
    }
}
fn parse_cost(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err(
            "a cost of 0 takes nothing: every request would be admitted; give at least 1".into(),
        ),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
fn parse_max_keys(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("a key bound of 0 holds no key: give at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}
fn parse_delim(s: &str) -> Result<u8, String> {
    match s {
        "tab" | "\\t" => Ok(b'\t'),
        s if s.len() == 1 => Ok(s.as_bytes()[0]),
        s => Err(format!("a delimiter is one byte (or `tab`), not {s:?}")),
    }
}

/// `N` + unit (ns, us, ms, s, m, h), in nanoseconds.
pub fn duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("duration {text:?} has no unit (e.g. 3s)"))?;
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("duration {text:?} needs a whole number"))?;
    let per = match unit.trim() {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => S,
        "m" | "min" => 60 * S,
        "h" => 3600 * S,
        u => return Err(format!("unknown unit {u:?} in duration {text:?}")),
    };
    n.checked_mul(per)
        .ok_or_else(|| format!("duration {text:?} is too long"))
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            });
        }
    };
    match dispatch(cli.cmd) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// What makes a file the same file, however its path is spelt (`a.log`, `./a.log`, a link
/// to it): its device and inode.
#[cfg(unix)]
type FileId = (u64, u64);
#[cfg(not(unix))]
type FileId = std::path::PathBuf;

/// The file that stdin reads, for [`file_id`].
#[cfg(unix)]
const STDIN: &str = "/dev/stdin";
#[cfg(not(unix))]
const STDIN: &str = "";

/// The identity of the file at `path` (links followed), or `None` if it cannot be read (the
/// replay then says why).
#[cfg(unix)]
fn file_id(path: &str) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}
#[cfg(not(unix))]
fn file_id(path: &str) -> Option<FileId> {
    std::fs::canonicalize(path).ok()
}

/// Checks, before any input is read, that each output file (`--html`, `-o`) can be written,
/// so that a run does not end, after a long replay, on a path it cannot write: an existing
/// file (or folder) is opened for writing without truncating it (a report is replaced only
/// when its run succeeds), a new file is created and removed at once (a run that fails leaves
/// none behind). The error is the one the write would give. Anything else (a pipe, a device,
/// a dangling link) is left to the write: opening a pipe would wait for its reader.
fn check_outputs(out: &OutputArgs) -> Result<(), CliError> {
    for path in [&out.html, &out.output].into_iter().flatten() {
        let err = |e| CliError::Output {
            path: path.clone(),
            source: e,
        };
        match std::fs::metadata(path) {
            Ok(m) if m.is_file() || m.is_dir() => {
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(path)
                    .map_err(err)?;
            }
            Ok(_) => {}
            Err(_) if std::fs::symlink_metadata(path).is_ok() => {}
            Err(_) => {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .map_err(err)?;
                let _ = std::fs::remove_file(path);
            }
        }
    }
    Ok(())
}

/// Writes `text` to the file or stdout (a closed stdout pipe ends quietly).
fn emit(text: &str, to: &Option<String>) -> Result<(), CliError> {
    match to {
        Some(path) => std::fs::write(path, text).map_err(|e| CliError::Output {
            path: path.clone(),
            source: e,
        }),
        None => {
            let mut out = std::io::stdout().lock();
            match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::Output {
                    path: "<stdout>".into(),
                    source: e,
                }),
                _ => Ok(()),
            }
        }
    }
}

fn render(
    summary: &output::Summary,
    out: &OutputArgs,
    table: impl FnOnce() -> String,
) -> Result<(), CliError> {
    if let Some(path) = &out.html {
        let html = report::html(summary);
        std::fs::write(path, html).map_err(|e| CliError::Output {
            path: path.clone(),
            source: e,
        })?;
    }
    let text = match out.format {
        Format::Table => table(),
        Format::Json => {
            let mut s = summary.to_json().to_string_compact();
            s.push('\n');
            s
        }
        Format::Csv => summary.to_csv(out.table),
    };
    emit(&text, &out.output)
}

fn dispatch(cmd: Cmd) -> Result<(), CliError> {
    match cmd {
        Cmd::Replay(a) => {
            policy::check_policies(&a.policy)?;
            let mut files = a.files.clone();
            let inputs = if a.sample {
                run::Inputs::Sample(LogFormat::Jsonl)
            } else {
                if files.is_empty() {
                    if std::io::stdin().is_terminal() {
                        return Err(CliError::usage(
                            "input",
                            "",
                            "no log given: name files, `-` for stdin, or --sample for the embedded sample",
                        ));
                    }
                    files.push("-".into());
                }
                run::Inputs::Files(files.clone())
            };
            let trace = if a.out.html.is_some() { a.trace } else { 0 };
            // A second pass must read stdin again: keep a copy (--html's trace pass). Without
            // one, stdin streams once: its replay takes the keyed stores from the start, since
            // the dense ones may have to start over (at --max-keys), which needs the input
            // twice, and a copy of a piped log would take the disk its length.
            // (A named pipe, `<(zcat ...)`, streams once too: copied as stdin is.)
            let mut _spools = Vec::new();
            let mut stdin_copy = None;
            let mut copies = Vec::new();
            let stream = |x: &str| x == "-" || !std::fs::metadata(x).is_ok_and(|m| m.is_file());
            // A stream reads once: named twice, the second reading would wait for a writer
            // for good (a fifo) or find it used up.
            // A file named twice (`a.log a.log`, `./a.log a.log`, a link to it) would be
            // counted twice: the same file is the same device and inode, however spelt.
            if let run::Inputs::Files(f) = &inputs {
                let mut seen: Vec<(FileId, &str)> = Vec::new();
                for (i, x) in f.iter().enumerate() {
                    if stream(x) && f[..i].contains(x) {
                        return Err(CliError::usage(
                            "input",
                            x,
                            "named twice: stdin and pipes can be read once",
                        ));
                    }
                    // stdin is what it reads (`- a.log < a.log`: one file twice).
                    let Some(id) = file_id(if x == "-" { STDIN } else { x }) else {
                        continue;
                    };
                    if let Some((_, before)) = seen.iter().find(|(s, _)| *s == id) {
                        return Err(CliError::usage(
                            "input",
                            x,
                            if stream(x) {
                                format!("named twice (as {before:?} before): stdin and pipes can be read once")
                            } else if *before == x.as_str() {
                                "named twice: a file is replayed once".to_string()
                            } else {
                                format!(
                                    "named twice (as {before:?} before): a file is replayed once"
                                )
                            },
                        ));
                    }
                    seen.push((id, x));
                }
            }
            // Before any input is read (stdin's copy included).
            check_outputs(&a.out)?;
            let streamed = trace == 0
                && matches!(&inputs, run::Inputs::Files(f) if f.iter().any(|x| stream(x)));
            let inputs = match inputs {
                run::Inputs::Files(f) if trace > 0 && f.iter().any(|x| stream(x)) => {
                    let mut spooled = Vec::with_capacity(f.len());
                    for x in f {
                        if !stream(&x) {
                            spooled.push(x);
                            continue;
                        }
                        let sp = run::spool((x != "-").then_some(x.as_str()))?;
                        let path = sp.0.display().to_string();
                        _spools.push(sp);
                        if x == "-" {
                            stdin_copy = Some(path.clone());
                        } else {
                            copies.push((path.clone(), x));
                        }
                        spooled.push(path);
                    }
                    run::Inputs::Files(spooled)
                }
                i => i,
            };
            let key = if a.key.is_empty() {
                vec![policy::KeyPart::Ip]
            } else {
                a.key.clone()
            };
            if let Some(t) = a
                .trusted_proxies
                .as_ref()
                .filter(|t| **t != TrustedProxies::None)
            {
                if !key.iter().any(|k| matches!(k, policy::KeyPart::Ip)) {
                    // It changes the ip key alone: given with another key, it does nothing.
                    return Err(CliError::usage(
                        "--trusted-proxies",
                        &t.to_string(),
                        "it finds the client for the ip key, and --key has no ip part",
                    ));
                }
            }
            let cfg = run::Config {
                policies: a.policy.clone(),
                key,
                prefixes: netkey::Prefixes {
                    v4: a.ipv4_prefix,
                    v6: a.ipv6_prefix,
                },
                trusted: a.trusted_proxies.clone().unwrap_or_default(),
                names: fields::Names {
                    time: a.time_field.clone(),
                    ip: a.ip_field.clone(),
                    path: a.path_field.clone(),
                    method: a.method_field.clone(),
                    cost: a.cost_field.clone(),
                    forwarded: a.forwarded_field.clone(),
                    forwarded_header: a.forwarded_header,
                    delimiter: a.csv_delimiter,
                    time_unit: a.time_unit,
                },
                format: a.log_format,
                unit: a.time_unit,
                zone: a.timezone.clone().unwrap_or_else(timefmt::Zone::utc),
                zone_given: a.timezone.is_some(),
                cost: a.cost,
                max_keys: a.max_keys.max(1),
                strict: a.strict,
                top: a.out.top,
                sustain: a.sustain,
                trace,
                progress: !a.quiet && std::io::stderr().is_terminal(),
                max_bins: 1200,
                dense: !streamed,
                stdin_copy,
                copies,
            };
            let summary = run::replay(&cfg, &inputs)?;
            for n in &summary.meta.client_notes {
                eprintln!("{n}");
            }
            if let Some(w) = summary.timeline_warning() {
                eprintln!("{w}");
            }
            render(&summary, &a.out, || summary.to_table())
        }
        Cmd::Simulate(a) => {
            policy::check_policies(&a.policy)?;
            check_outputs(&a.out)?;
            let (times, end) = run::traffic(&a.traffic)?;
            let n = times.len();
            let (summary, first_rejects) =
                run::simulate(a.policy.clone(), &times, end, a.cost, a.step, a.out.top)?;
            render(&summary, &a.out, || {
                report::simulate_table(&summary, &a.policy, n, a.cost, &first_rejects)
            })
        }
        Cmd::Check(a) => {
            let usage = |e| CliError::usage("--quota", &a.quota.to_string(), e);
            let bits = a.quota.state_bits().map_err(usage)?;
            let text = match a.format {
                Format::Table => format!(
                    "{}\n{}\n",
                    a.quota.describe(),
                    a.quota.state().map_err(usage)?
                ),
                Format::Json => {
                    let j = json::Jv::obj()
                        .with("rate", a.quota.to_string())
                        .with("count", a.quota.count())
                        .with("period_ns", a.quota.period_ns())
                        .with("burst", a.quota.burst())
                        .with("algorithm", a.quota.algorithm())
                        .with("tokens_per_s", a.quota.per_second())
                        .with("state_bits", bits.map_or(json::Jv::Null, json::Jv::from))
                        .with("description", a.quota.describe());
                    j.to_string_compact() + "\n"
                }
                Format::Csv => format!(
                    "rate,count,period_ns,burst,algorithm,tokens_per_s,state_bits\n{},{},{},{},{},{},{}\n",
                    output::csv(&a.quota.to_string()),
                    a.quota.count(),
                    a.quota.period_ns(),
                    a.quota.burst(),
                    a.quota.algorithm(),
                    a.quota.per_second(),
                    bits.map_or(String::new(), |b| b.to_string())
                ),
            };
            emit(&text, &None)
        }
        Cmd::Sample(a) => {
            let gen = match a.scenario {
                Scenario::Day => sample::Generator::day(a.seed),
                Scenario::Uniform => sample::Generator::uniform(a.seed, a.keys, a.lines),
            };
            let fmt = match a.log_format {
                LogFormat::Auto => LogFormat::Jsonl,
                f => f,
            };
            let mut reader = sample::SampleReader::new(gen, fmt);
            match &a.output {
                None => {
                    let mut out = std::io::stdout().lock();
                    match std::io::copy(&mut reader, &mut out) {
                        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                            Err(CliError::Output {
                                path: "<stdout>".into(),
                                source: e,
                            })
                        }
                        _ => Ok(()),
                    }
                }
                Some(path) => {
                    let oerr = |e: std::io::Error| CliError::Output {
                        path: path.clone(),
                        source: e,
                    };
                    let f = std::fs::File::create(path).map_err(oerr)?;
                    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
                    let bytes = if path.ends_with(".gz") {
                        let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::fast());
                        let n = std::io::copy(&mut reader, &mut gz).map_err(oerr)?;
                        gz.finish().map_err(oerr)?.flush().map_err(oerr)?;
                        n
                    } else {
                        let n = std::io::copy(&mut reader, &mut w).map_err(oerr)?;
                        w.flush().map_err(oerr)?;
                        n
                    };
                    let scenario = match a.scenario {
                        Scenario::Day => "day",
                        Scenario::Uniform => "uniform",
                    };
                    let fmt_name = format!("{fmt:?}").to_lowercase();
                    let text = match a.format {
                        Format::Table => format!("wrote {path}: {scenario} traffic, {fmt_name}, {bytes} bytes uncompressed\n"),
                        Format::Json => json::Jv::obj()
                            .with("path", path.as_str())
                            .with("scenario", scenario)
                            .with("log_format", fmt_name)
                            .with("bytes", bytes)
                            .to_string_compact() + "\n",
                        Format::Csv => format!("path,scenario,log_format,bytes\n{},{scenario},{fmt_name},{bytes}\n", output::csv(path)),
                    };
                    emit(&text, &None)
                }
            }
        }
        Cmd::Completions { shell } => {
            let mut cmd = Cli::command();
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cmd, "sluicegate", &mut buf);
            emit(&String::from_utf8_lossy(&buf), &None)
        }
    }
}
