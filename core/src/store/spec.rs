//! [`StoreSpec`]: where a keyed limiter's buckets live, as configured, spelled the same in
//! every language (`store="shm:/api-limits"` in Python, `store: 'shm:/api-limits'` in Node, a
//! string in C).

use crate::error::Error;
use core::fmt;
use core::str::FromStr;
use std::path::PathBuf;
use std::time::Duration;

/// Where a keyed limiter's buckets live.
///
/// ```
/// use sluicegate::StoreSpec;
/// let s: StoreSpec = "shm:/api-limits?capacity=100000".parse()?;
/// assert_eq!(s.to_string(), "shm:/api-limits?capacity=100000");
/// assert_eq!("memory".parse::<StoreSpec>()?, StoreSpec::Memory);
/// # Ok::<(), sluicegate::Error>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreSpec {
    /// In this process (the default): `"memory"`.
    #[default]
    Memory,
    /// A shared-memory region every process of the host that opens it shares:
    /// `"shm:NAME"` (`shm:` in any case). A name with no `/` after an optional leading one (`/api-limits` or
    /// `api-limits`, as `shm_open` spells them) is a file in `/dev/shm`; anything else is a
    /// path (`/run/app/limits`, `./limits`); `shm://` is refused. `?capacity=N` sets the keys
    /// a new region holds (default: the limiter's `max_keys`).
    Shm {
        /// The name or path, as given.
        name: String,
        /// The keys a new region holds, if given.
        capacity: Option<u64>,
    },
    /// A Redis or Valkey server (cargo feature `redis`; without it, building a limiter on it
    /// fails with [`StoreErrorKind::Unsupported`](crate::StoreErrorKind::Unsupported)):
    ///
    /// * `redis://[user:password@]host[:port][/db]`, `rediss://...` (TLS, feature `redis-tls`),
    /// * `redis+unix:///path/to/redis.sock[?db=N]` (also `unix:///path`),
    /// * `redis+cluster://host:port[,host:port...]` (Redis Cluster, seed nodes),
    /// * `redis+sentinel://[user:password@]host:port[,host:port...]/MASTER[/db]` (the master
    ///   Sentinel names; the credentials are the master's, the sentinels' own are
    ///   `sentinel_user` and `sentinel_pass` in the query),
    ///
    /// with the store's options in the query ([`RedisOptions`]):
    /// `redis://cache:6379/0?prefix=api&timeout=50ms&on_error=local`. The scheme is read in
    /// any case (`REDIS://`, as RFC 3986 has it) and kept in lowercase.
    Redis {
        /// The server's URL as the client connects to it: the given URL without the store's
        /// options (the client's own, `db` and `protocol`, stay).
        url: String,
        /// The store's options.
        options: RedisOptions,
    },
}

/// As derived, but a Redis URL's password is `***`, as in `Display`: a builder's or a
/// limiter's `{:?}` is what ends up in logs and panic messages.
impl fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("Memory"),
            StoreSpec::Shm { name, capacity } => f
                .debug_struct("Shm")
                .field("name", name)
                .field("capacity", capacity)
                .finish(),
            StoreSpec::Redis { url, options } => f
                .debug_struct("Redis")
                .field("url", &redact(url))
                .field("options", options)
                .finish(),
        }
    }
}

/// What a Redis store does when the server is slow or down (a timeout, a lost connection,
/// an error reply such as `LOADING` or `CLUSTERDOWN`): the `on_error` option.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OnError {
    /// Admit the request (`on_error=open`): availability first.
    Open,
    /// Reject the request, `retry_after` one second (`on_error=closed`): the limit first.
    Closed,
    /// Decide with an in-process limiter of this host's share of the quota (`on_error=local`,
    /// the default): a token bucket of at most `rate / hosts` and `burst / hosts` (at least 1
    /// token), per key, so that `hosts` hosts in the same outage admit at most about the quota
    /// together (docs/REDIS.md, "The `local` insurance, exactly"). The share is set with `hosts=N` (default 1: each host alone may admit the
    /// whole quota while Redis is away).
    #[default]
    Local,
    /// Return the failure as [`Error::Store`] (`on_error=error`): the caller decides.
    Error,
}

impl OnError {
    const NAMES: &'static [(&'static str, OnError)] = &[
        ("local", OnError::Local),
        ("open", OnError::Open),
        ("closed", OnError::Closed),
        ("error", OnError::Error),
        ("raise", OnError::Error),
    ];

    /// The policy's name as the option spells it.
    pub fn name(self) -> &'static str {
        match self {
            OnError::Open => "open",
            OnError::Closed => "closed",
            OnError::Local => "local",
            OnError::Error => "error",
        }
    }
}

impl FromStr for OnError {
    type Err = Error;

    /// `"open"`, `"closed"`, `"local"` or `"error"` (ASCII case-insensitive).
    fn from_str(s: &str) -> Result<Self, Error> {
        crate::error::choose("on_error", s, Self::NAMES)
    }
}

/// The options of a Redis store ([`StoreSpec::Redis`]), each a query parameter of its URL.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisOptions {
    /// `prefix=NAME` (default `sluicegate`): the first part of every key name. A single
    /// limiter's bucket is named by it (limiters with the same URL and quota share one
    /// bucket); a keyed limiter's buckets are `PREFIX:QUOTA:{KEY}`. Letters, digits and
    /// `_ - . : /`.
    pub prefix: String,
    /// `tag=NAME`: the hash tag of a single limiter's key (default: the prefix), so that the
    /// parts of a composite limit on Redis Cluster share a slot: give them one tag.
    pub tag: Option<String>,
    /// `timeout=50ms` (default 50 ms; `us`, `ms` or `s`): the longest a decision waits for
    /// the server before the `on_error` policy decides it, and the longest a (re)connection
    /// attempt takes.
    pub timeout: Duration,
    /// `on_error=local|open|closed|error` (default `local`): see [`OnError`].
    pub on_error: OnError,
    /// `hosts=N` (default 1): how many processes share the limit (hosts × workers: each
    /// process keeps its own), which sizes the `local` policy's in-process limiter (the quota
    /// divided by `N`).
    pub hosts: u64,
    /// `negative_cache=on|off` (default on): a request rejected until an instant is rejected
    /// again in this process until then without a round trip (never an extra admission).
    pub negative_cache: bool,
    /// `scripts=function|eval` (default `function`): load the scripts with FUNCTION LOAD and
    /// call them with FCALL, or (for proxies and ACLs without FUNCTION) EVALSHA, falling
    /// back to EVAL on NOSCRIPT.
    pub eval: bool,
    /// `clock=test` (cargo feature `redis-test-clock` only): the scripts read the limiter's
    /// own clock, in nanoseconds, instead of the server's TIME. For conformance tests.
    pub test_clock: bool,
    /// `connections=N` (default 4, at most 64): how many connections of its own a process
    /// opens for blocking callers, each driven by the caller's thread (one server over TCP or
    /// a unix socket; async callers on a tokio runtime use one connection of that runtime:
    /// docs/REDIS.md, "Connections"). More concurrent blocking callers, async calls on other
    /// executors, and every call to TLS, Cluster or Sentinel deployments share the one
    /// multiplexed connection; `0` sends everything through it (one connection a process).
    pub connections: usize,
}

/// The default `connections` of a Redis store.
pub const REDIS_DEFAULT_CONNECTIONS: usize = 4;

/// The default `timeout` of a Redis store.
pub const REDIS_DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            prefix: "sluicegate".to_string(),
            tag: None,
            timeout: REDIS_DEFAULT_TIMEOUT,
            on_error: OnError::Local,
            hosts: 1,
            negative_cache: true,
            eval: false,
            test_clock: false,
            connections: REDIS_DEFAULT_CONNECTIONS,
        }
    }
}

/// What kind of deployment a Redis URL names.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Topology {
    /// One server (TCP, TLS or a unix socket).
    Single,
    /// Redis Cluster, from seed nodes.
    Cluster,
    /// A master found through Sentinel.
    Sentinel,
}

/// The URL schemes of a Redis store and what each names.
const REDIS_SCHEMES: &[(&str, Topology)] = &[
    ("redis://", Topology::Single),
    ("rediss://", Topology::Single),
    ("redis+unix://", Topology::Single),
    ("unix://", Topology::Single),
    ("redis+cluster://", Topology::Cluster),
    ("rediss+cluster://", Topology::Cluster),
    ("redis+sentinel://", Topology::Sentinel),
];

impl StoreSpec {
    /// A Redis store at `url` (see [`StoreSpec::Redis`]), its options in the URL's query.
    pub fn redis(url: &str) -> Result<Self, Error> {
        let spec: StoreSpec = url.parse()?;
        match spec {
            StoreSpec::Redis { .. } => Ok(spec),
            _ => Err(invalid(url, "not a Redis URL")),
        }
    }

    /// The kind of deployment a Redis URL names.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn redis_topology(url: &str) -> Topology {
        REDIS_SCHEMES
            .iter()
            .find(|(p, _)| url.starts_with(p))
            .map_or(Topology::Single, |&(_, t)| t)
    }
}

/// The URL with its password replaced by `***` (for messages and `Display`): the one of
/// `user:password@` and a unix socket's `pass=`.
pub(crate) fn redact(url: &str) -> String {
    let mut out = match secret(url) {
        Some(r) => format!("{}***{}", &url[..r.start], &url[r.end..]),
        None => url.to_string(),
    };
    if let Some(q) = out.find('?') {
        let query: Vec<String> = out[q + 1..]
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if name == "pass" || name == "sentinel_pass" => {
                    format!("{name}=***")
                }
                _ => pair.to_string(),
            })
            .collect();
        out = format!("{}?{}", &out[..q], query.join("&"));
    }
    out
}

/// Where the password of a URL's `user:password@` is: from the first `:` after `scheme://` to
/// the last `@`, so that a password holding `/`, `?` or `#` (which a URL must percent-encode,
/// and which would otherwise be taken for the path or query) is still all of it.
fn secret(url: &str) -> Option<core::ops::Range<usize>> {
    let info = userinfo(url)?;
    let colon = info.start + url[info.clone()].find(':')?;
    Some(colon + 1..info.end)
}

/// A URL's `user:password` (before the last `@`), when it has a password.
fn userinfo(url: &str) -> Option<core::ops::Range<usize>> {
    let start = url.find("://")? + 3;
    let at = start + url[start..].rfind('@')?;
    url[start..at].contains(':').then_some(start..at)
}

fn redis_invalid(value: &str, why: &str) -> Error {
    Error::InvalidOption {
        option: "store",
        value: redact(value),
        expected: format!("a Redis URL (redis://, rediss://, redis+unix://, redis+cluster://, redis+sentinel://) with the options prefix, tag, timeout, on_error, hosts, negative_cache, scripts, connections ({why})"),
    }
}

/// A Redis store's `prefix` or `tag`: they become parts of key names.
pub(crate) fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 200
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.:/".contains(&b))
}

/// A whole number written in digits alone (`str::parse` also takes a leading `+`).
fn digits<T: FromStr>(v: &str) -> Option<T> {
    v.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| v.parse().ok())
        .flatten()
}

/// The longest `timeout`.
pub(crate) const TIMEOUT_MAX: Duration = Duration::from_secs(3600);

/// A `timeout`: a whole number of `us`, `ms` or `s`, above 0 and at most an hour; else what is
/// wrong with it.
fn parse_timeout(v: &str) -> Result<Duration, String> {
    const FORM: &str = "a whole number of us, ms or s, such as 50ms";
    let digits = v.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(format!("{FORM}, above 0 and at most 1 hour (3600s)"));
    }
    let unit = &v[digits..];
    let per: fn(u64) -> Duration = match unit {
        "us" => Duration::from_micros,
        "ms" => Duration::from_millis,
        "s" => Duration::from_secs,
        "" => return Err(format!("a unit after {v:?}: {FORM}")),
        _ => {
            return Err(format!(
                "the unit {unit:?} is not one of us, ms or s ({FORM})"
            ))
        }
    };
    let d = v[..digits].parse().ok().map(per);
    match d {
        Some(d) if d.is_zero() => Err(format!(
            "above 0: a timeout of 0 would fail every call ({FORM})"
        )),
        Some(d) if d <= TIMEOUT_MAX => Ok(d),
        _ => Err(format!("at most 1 hour (3600s), not {v}")),
    }
}

/// What a Redis database is.
const DATABASE: &str = "a database number, a whole number from 0 (as /0 or ?db=0)";

/// Whether `v` is a database number: digits alone, within what the client reads (an `i64`).
fn is_database(v: &str) -> bool {
    digits::<i64>(v).is_some()
}

/// Checks the port of each `host[:port]` of a URL's authority (after its `user:password@`;
/// several, comma-separated, for Cluster and Sentinel): a whole number from 1 to 65535. The
/// client refused any other only when the limiter was built.
fn check_ports(s: &str, authority: &str) -> Result<(), Error> {
    let hosts = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    for host in hosts.split(',') {
        let port = match host.strip_prefix('[') {
            // An IPv6 address: `[::1]:6379`.
            Some(v6) => v6.split_once(']').and_then(|(_, p)| p.strip_prefix(':')),
            None => host.rsplit_once(':').map(|(_, p)| p),
        };
        if let Some(p) = port.filter(|p| digits::<u16>(p).is_none_or(|n| n == 0)) {
            return Err(redis_invalid(
                s,
                &format!("the port {p:?} of {host:?}: a whole number from 1 to 65535"),
            ));
        }
    }
    Ok(())
}

fn parse_redis(s: &str, t: &str) -> Result<StoreSpec, Error> {
    if let Some(info) = userinfo(t) {
        if t[info].contains(['/', '?', '#']) {
            return Err(redis_invalid(
                s,
                "the user name or password holds '/', '?' or '#': percent-encode them (%2F, %3F, \
                 %23)",
            ));
        }
    }
    let (base, query) = match t.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (t, None),
    };
    let scheme_len = REDIS_SCHEMES
        .iter()
        .find(|(p, _)| base.starts_with(p))
        .map_or(0, |(p, _)| p.len());
    if base.len() == scheme_len || base.contains(char::is_whitespace) {
        return Err(redis_invalid(s, "no host or path"));
    }
    // A unix socket's URL: a path, no host or port; its credentials in the query.
    let unix = base.starts_with("redis+unix://") || base.starts_with("unix://");
    let mut o = RedisOptions::default();
    let mut passed: Vec<&str> = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        if pair.is_empty() {
            continue;
        }
        let (name, v) = pair.split_once('=').unwrap_or((pair, ""));
        if seen.contains(&name) {
            return Err(redis_invalid(s, &format!("{name} given twice")));
        }
        seen.push(name);
        let bad = |what: &str| redis_invalid(s, &format!("{name}: {what}"));
        match name {
            "prefix" if valid_name(v) => o.prefix = v.to_string(),
            "prefix" => return Err(bad("letters, digits and _-.:/ only")),
            "tag" if valid_name(v) => o.tag = Some(v.to_string()),
            "tag" => return Err(bad("letters, digits and _-.:/ only")),
            "timeout" => {
                o.timeout = parse_timeout(v).map_err(|why| bad(&why))?;
            }
            "on_error" => o.on_error = v.parse()?,
            "hosts" => {
                o.hosts = digits(v)
                    .filter(|&n| n >= 1)
                    .ok_or_else(|| bad("a whole number of hosts, at least 1"))?;
            }
            "negative_cache" => {
                o.negative_cache = match v {
                    "on" | "true" | "1" => true,
                    "off" | "false" | "0" => false,
                    _ => return Err(bad("on or off")),
                }
            }
            "scripts" => {
                o.eval = match v {
                    "function" => false,
                    "eval" => true,
                    _ => return Err(bad("function or eval")),
                }
            }
            "connections" => {
                o.connections = digits(v)
                    .filter(|&n| n <= 64)
                    .ok_or_else(|| bad("a whole number from 0 to 64"))?;
            }
            "clock" if v == "test" => o.test_clock = true,
            "clock" => return Err(bad("only clock=test (tests) exists")),
            // The client's own options stay in its URL (the client read a bad database only
            // when the limiter was built).
            "db" if !is_database(v) => return Err(bad(DATABASE)),
            "db" | "protocol" => passed.push(pair),
            // A unix socket's credentials (a TCP URL has them before the host).
            "user" | "pass" if unix => {
                passed.push(pair);
            }
            // The sentinels' own credentials (the URL's `user:password@` are the master's).
            "sentinel_user" | "sentinel_pass" if base.starts_with("redis+sentinel://") => {
                passed.push(pair);
            }
            "sentinel_user" | "sentinel_pass" => {
                return Err(bad("only a redis+sentinel:// URL takes them"))
            }
            "user" | "pass" => {
                return Err(bad(
                    "only a unix socket's URL takes them; write redis://user:password@host",
                ))
            }
            _ => return Err(redis_invalid(s, &format!("unknown option {name:?}"))),
        }
    }
    let given = |option: &str| passed.iter().any(|p| p.split('=').next() == Some(option));
    let path_db = match StoreSpec::redis_topology(base) {
        // `host[,host...]/MASTER/DB`
        Topology::Sentinel => base[scheme_len..].splitn(3, '/').nth(2),
        _ if base.starts_with("redis://") || base.starts_with("rediss://") => {
            base[scheme_len..].split_once('/').map(|(_, db)| db)
        }
        _ => None,
    };
    if !unix {
        // `[user:password@]host[:port][,host[:port]...]`, before the path.
        let authority = base[scheme_len..].split('/').next().unwrap_or("");
        check_ports(s, authority)?;
    }
    if let Some(db) = path_db.filter(|db| !db.is_empty() && !is_database(db)) {
        return Err(redis_invalid(
            s,
            &format!("the database {db:?} in the path: {DATABASE}"),
        ));
    }
    if given("db") && path_db.is_some_and(|db| !db.is_empty()) {
        return Err(redis_invalid(
            s,
            "db given twice, in the path and in the query",
        ));
    }
    if StoreSpec::redis_topology(base) == Topology::Cluster && (given("db") || given("protocol")) {
        return Err(redis_invalid(
            s,
            "a cluster URL takes neither db (Redis Cluster has one database) nor protocol",
        ));
    }
    let mut url = base.to_string();
    let tcp = base.starts_with("redis://") || base.starts_with("rediss://");
    if tcp && given("db") {
        // The client reads a TCP URL's database from its path only (a `?db=` was dropped,
        // the buckets landing in database 0): moved there.
        let db = passed
            .iter()
            .find_map(|p| p.strip_prefix("db="))
            .unwrap_or("");
        url = format!("{}/{db}", url.trim_end_matches('/'));
        passed.retain(|p| p.split('=').next() != Some("db"));
    }
    if !passed.is_empty() {
        url.push('?');
        url.push_str(&passed.join("&"));
    }
    Ok(StoreSpec::Redis { url, options: o })
}

impl StoreSpec {
    /// A shared-memory region at `name` (see [`StoreSpec::Shm`]).
    pub fn shm(name: impl Into<String>) -> Self {
        StoreSpec::Shm {
            name: name.into(),
            capacity: None,
        }
    }

    /// The region's file, for a [`StoreSpec::Shm`]: a name of one component (`/api-limits`,
    /// or `api-limits`, as `shm_open` names them) is a file in `/dev/shm`; a path with a `/`
    /// in it past its start (`/run/app/limits`, `./limits`) is that path.
    pub fn shm_path(&self) -> Option<PathBuf> {
        match self {
            StoreSpec::Shm { name, .. } => {
                let file = name.strip_prefix('/').unwrap_or(name);
                Some(if file.contains('/') {
                    PathBuf::from(name)
                } else {
                    PathBuf::from("/dev/shm").join(file)
                })
            }
            _ => None,
        }
    }
}

/// The most keys a shared-memory region holds (its slots, `capacity * 8 / 7`, at most 2^29).
pub(crate) const SHM_MAX_CAPACITY: u64 = (1 << 29) / 8 * 7;

/// Whether `t` starts with `scheme` (lowercase), in any case.
fn has_scheme(t: &str, scheme: &str) -> bool {
    t.get(..scheme.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
}

fn invalid(value: &str, why: &str) -> Error {
    Error::InvalidOption {
        option: "store",
        value: value.to_string(),
        expected: format!("\"memory\", \"shm:NAME[?capacity=N]\" or a Redis URL ({why})"),
    }
}

impl FromStr for StoreSpec {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("memory") {
            return Ok(StoreSpec::Memory);
        }
        // A URL's scheme is case-insensitive (RFC 3986, 3.1): `REDIS://`, `Redis+Sentinel://`
        // and `SHM:` are read as their lowercase selves, which the URL keeps from here on.
        if let Some((scheme, _)) = REDIS_SCHEMES.iter().find(|(p, _)| has_scheme(t, p)) {
            return parse_redis(s, &format!("{scheme}{}", &t[scheme.len()..]));
        }
        let Some(rest) = has_scheme(t, "shm:").then(|| &t["shm:".len()..]) else {
            return Err(invalid(s, "an unknown store"));
        };
        let (name, query) = match rest.split_once('?') {
            Some((n, q)) => (n, Some(q)),
            None => (rest, None),
        };
        if name.is_empty() || name.contains('\0') || name == "/" {
            return Err(invalid(s, "a region needs a name or path"));
        }
        if name.starts_with("//") {
            // `shm://NAME` read as a path is a file at the root of the disk's file system.
            return Err(invalid(
                s,
                "write shm:NAME or shm:/NAME for a file in /dev/shm, shm:/path/to/file or \
                 shm:./file for a path, not shm://",
            ));
        }
        let mut capacity = None;
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("capacity", v)) if capacity.is_none() => {
                    let n: u64 = digits(v)
                        .filter(|n| (1..=SHM_MAX_CAPACITY).contains(n))
                        .ok_or_else(|| {
                            invalid(
                                s,
                                &format!(
                                    "capacity is a whole number of keys, from 1 to \
                                     {SHM_MAX_CAPACITY}"
                                ),
                            )
                        })?;
                    capacity = Some(n);
                }
                _ => return Err(invalid(s, "the only option is capacity=N, given once")),
            }
        }
        Ok(StoreSpec::Shm {
            name: name.to_string(),
            capacity,
        })
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Shm { name, capacity } => {
                write!(f, "shm:{name}")?;
                if let Some(c) = capacity {
                    write!(f, "?capacity={c}")?;
                }
                Ok(())
            }
            StoreSpec::Redis { url, options: o } => {
                f.write_str(&redact(url))?;
                let d = RedisOptions::default();
                let mut sep = if url.contains('?') { '&' } else { '?' };
                let mut opt = |f: &mut fmt::Formatter<'_>, name: &str, v: &dyn fmt::Display| {
                    let r = write!(f, "{sep}{name}={v}");
                    sep = '&';
                    r
                };
                if o.prefix != d.prefix {
                    opt(f, "prefix", &o.prefix)?;
                }
                if let Some(t) = &o.tag {
                    opt(f, "tag", t)?;
                }
                if o.timeout != d.timeout {
                    opt(f, "timeout", &format_args!("{}us", o.timeout.as_micros()))?;
                }
                if o.on_error != d.on_error {
                    opt(f, "on_error", &o.on_error.name())?;
                }
                if o.hosts != d.hosts {
                    opt(f, "hosts", &o.hosts)?;
                }
                if !o.negative_cache {
                    opt(f, "negative_cache", &"off")?;
                }
                if o.eval {
                    opt(f, "scripts", &"eval")?;
                }
                if o.test_clock {
                    opt(f, "clock", &"test")?;
                }
                if o.connections != d.connections {
                    opt(f, "connections", &o.connections)?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_urls_parse_and_print() {
        let s: StoreSpec = "redis://cache:6379/0?prefix=api&timeout=20ms&on_error=open"
            .parse()
            .unwrap();
        let StoreSpec::Redis { url, options } = &s else {
            panic!("{s:?}")
        };
        assert_eq!(url, "redis://cache:6379/0");
        assert_eq!(options.prefix, "api");
        assert_eq!(options.timeout, Duration::from_millis(20));
        assert_eq!(options.on_error, OnError::Open);
        assert_eq!(
            s.to_string(),
            "redis://cache:6379/0?prefix=api&timeout=20000us&on_error=open"
        );
        assert_eq!(s.to_string().parse::<StoreSpec>().unwrap(), s);
        for ok in [
            "rediss://h:6380",
            "redis+unix:///run/redis.sock?db=2",
            "unix:///tmp/r.sock",
            "redis+cluster://a:7000,b:7001",
            "redis+sentinel://s1:26379,s2:26379/mymaster/0",
        ] {
            assert!(matches!(ok.parse(), Ok(StoreSpec::Redis { .. })), "{ok}");
        }
        // A TCP URL's client reads the database from the path alone: `?db=` is moved there.
        for (given, url) in [
            ("redis://h?db=7&prefix=p", "redis://h/7"),
            ("redis://h:6379/?db=5", "redis://h:6379/5"),
            (
                "rediss://u:pw@h?db=3&protocol=resp3",
                "rediss://u:pw@h/3?protocol=resp3",
            ),
        ] {
            let Ok(StoreSpec::Redis { url: got, .. }) = given.parse::<StoreSpec>() else {
                panic!("{given}")
            };
            assert_eq!(got, url, "{given}");
        }
        for bad in ["redis://h/0?db=7", "redis://h?db=x", "redis://h?db=-1"] {
            assert!(bad.parse::<StoreSpec>().is_err(), "{bad}");
        }
        let p: StoreSpec = "redis+unix:///run/redis.sock?db=2&hosts=4".parse().unwrap();
        let StoreSpec::Redis { url, options } = p else {
            unreachable!()
        };
        assert_eq!(
            (url.as_str(), options.hosts),
            ("redis+unix:///run/redis.sock?db=2", 4)
        );
        for (text, n) in [
            ("redis://h", 4),
            ("redis://h?connections=0", 0),
            ("redis://h?connections=64", 64),
        ] {
            let s: StoreSpec = text.parse().unwrap();
            let StoreSpec::Redis { options, .. } = &s else {
                unreachable!()
            };
            assert_eq!(options.connections, n, "{text}");
            assert_eq!(s.to_string(), text);
        }
        for bad in [
            "redis://h?connections=65",
            "redis://h?connections=-1",
            "redis://h?connections=",
            "redis://",
            "redis://h?prefix=a{b}",
            "redis://h?timeout=5",
            "redis://h?on_error=maybe",
            "redis://h?hosts=0",
            "redis://h?bogus=1",
            "redis://h?prefix=a&prefix=b",
            "redis://h?hosts=+3",
            "redis://h?connections=+3",
            "shm:/x?capacity=+10",
        ] {
            assert!(bad.parse::<StoreSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bad_timeout_says_what_is_wrong() {
        // Each said only "a duration such as 50ms".
        for (v, says) in [
            ("2h", "the unit \"h\" is not one of us, ms or s"),
            ("0ms", "above 0"),
            ("0s", "above 0"),
            ("3601s", "at most 1 hour (3600s), not 3601s"),
            ("3600001ms", "at most 1 hour"),
            ("99999999999999999999999s", "at most 1 hour"),
            ("50", "a unit after \"50\""),
            ("", "a whole number of us, ms or s"),
            ("ms", "a whole number of us, ms or s"),
            ("-5ms", "a whole number of us, ms or s"),
            ("1.5s", "the unit \".5s\""),
            ("50MS", "the unit \"MS\""),
        ] {
            let url = format!("redis://h?timeout={v}");
            let e = url.parse::<StoreSpec>().unwrap_err();
            assert_eq!(e.code(), "invalid_option", "{url}");
            let text = e.to_string();
            assert!(text.contains(&format!("timeout: {says}")), "{url}: {text}");
        }
        for (v, d) in [
            ("1us", Duration::from_micros(1)),
            ("3600s", TIMEOUT_MAX),
            ("3600000ms", TIMEOUT_MAX),
        ] {
            let StoreSpec::Redis { options, .. } =
                format!("redis://h?timeout={v}").parse().unwrap()
            else {
                unreachable!()
            };
            assert_eq!(options.timeout, d, "{v}");
        }
    }

    #[test]
    fn ports_and_databases_are_checked_when_parsed() {
        // These parsed, and failed only when the limiter was built, though docs/REDIS.md says a
        // bad value fails when the URL is parsed.
        for (bad, says) in [
            ("redis://127.0.0.1:notaport/0", "the port \"notaport\""),
            ("redis://127.0.0.1:99999", "the port \"99999\""),
            ("redis://127.0.0.1:0/0", "the port \"0\""),
            ("redis://127.0.0.1:/0", "the port \"\""),
            ("redis://127.0.0.1:-1", "the port \"-1\""),
            ("redis://u:pw@h:+80", "the port \"+80\""),
            ("redis://[::1]:70000/0", "the port \"70000\""),
            ("rediss://h:6380x", "the port \"6380x\""),
            ("redis+cluster://a:7000,b:x", "the port \"x\" of \"b:x\""),
            ("redis+sentinel://s1:26379,s2:9e9/m/0", "the port \"9e9\""),
            (
                "redis://127.0.0.1:6379/abc",
                "the database \"abc\" in the path",
            ),
            ("redis://h/-1", "the database \"-1\""),
            ("redis://h/0/1", "the database \"0/1\""),
            ("redis://h/99999999999999999999", "the database"),
            ("redis+sentinel://s:26379/m/x", "the database \"x\""),
            ("redis+unix:///run/r.sock?db=x", "db: a database number"),
            ("redis+sentinel://s:26379/m?db=+1", "db: a database number"),
            ("redis://h?db=", "db: a database number"),
        ] {
            let e = bad.parse::<StoreSpec>().unwrap_err();
            assert_eq!(e.code(), "invalid_option", "{bad}");
            let text = e.to_string();
            assert!(text.contains(says), "{bad}: {text}");
            assert!(
                text.contains("from 1 to 65535") || text.contains("a whole number from 0"),
                "{bad}: {text}"
            );
        }
        let e = "redis://u:hunter2@h:x/0".parse::<StoreSpec>().unwrap_err();
        assert!(!format!("{e} {e:?}").contains("hunter2"), "{e}");
        for ok in [
            "redis://h:1/0",
            "redis://h:65535",
            "redis://h/",
            "redis://u:p@h:6379/15",
            "redis://[::1]:6379/2",
            "redis://[::1]/2",
            "redis+cluster://a:7000,b",
            "redis+sentinel://s1:26379,s2/m",
            "redis+sentinel://s1:26379/m/3",
            "redis+unix:///run/r:1.sock?db=3",
            "unix:///tmp/x:y.sock",
        ] {
            assert!(ok.parse::<StoreSpec>().is_ok(), "{ok}");
        }
    }

    #[test]
    fn schemes_are_case_insensitive() {
        // `MEMORY` was accepted, `SHM:/x` and `REDIS://...` were "an unknown store", though a
        // URL's scheme is case-insensitive (RFC 3986).
        for (given, printed) in [
            ("SHM:/x", "shm:/x"),
            ("Shm:/Api-Limits?capacity=9", "shm:/Api-Limits?capacity=9"),
            ("Redis://127.0.0.1:6391", "redis://127.0.0.1:6391"),
            (
                "REDIS://U:secret@H:6379/0?prefix=P",
                "redis://U:***@H:6379/0?prefix=P",
            ),
            ("REDISS://h:6380/1", "rediss://h:6380/1"),
            (
                "Redis+Unix:///run/redis.sock?db=2",
                "redis+unix:///run/redis.sock?db=2",
            ),
            ("UNIX:///tmp/r.sock", "unix:///tmp/r.sock"),
            (
                "Redis+Cluster://a:7000,b:7001",
                "redis+cluster://a:7000,b:7001",
            ),
            ("REDISS+CLUSTER://a:7000", "rediss+cluster://a:7000"),
            (
                "Redis+Sentinel://s1:26379,s2:26379/mymaster/0",
                "redis+sentinel://s1:26379,s2:26379/mymaster/0",
            ),
        ] {
            let spec: StoreSpec = given.parse().unwrap_or_else(|e| panic!("{given}: {e}"));
            assert_eq!(spec.to_string(), printed, "{given}");
            if !printed.contains("***") {
                assert_eq!(spec, printed.parse().unwrap(), "{given}");
            }
        }
        let StoreSpec::Redis { url, .. } = "REDIS://h:1/0".parse().unwrap() else {
            unreachable!()
        };
        assert_eq!(url, "redis://h:1/0");
        assert_eq!(
            StoreSpec::redis_topology("redis+sentinel://h:1/m"),
            Topology::Sentinel
        );
        for bad in [
            "SHM://x",
            "REDIS://",
            "Redis://h?Prefix=p",
            "mem",
            "shmx:/a",
            "RED",
        ] {
            assert!(bad.parse::<StoreSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn redis_passwords_are_redacted() {
        let s: StoreSpec = "redis://user:secret@h:6379/1".parse().unwrap();
        assert_eq!(s.to_string(), "redis://user:***@h:6379/1");
        let e = "redis://u:secret@h?bogus=1"
            .parse::<StoreSpec>()
            .unwrap_err();
        assert!(!e.to_string().contains("secret"), "{e}");
        // A password holding '/', '?' or '#' (a URL must percent-encode them) was cut at the
        // first of them: the rest was shown, as a path, a query or an unknown option's name.
        for url in [
            "redis://admin:s3cr/t@127.0.0.1:1/0?prefx=a",
            "redis://admin:s3cr/t@127.0.0.1:1/0",
            "redis://admin:s3cr?t@127.0.0.1:1/0",
            "redis://admin:s3cr#t@127.0.0.1:1/0",
            "redis://:s3cr/t?x@h/0?timeout=1s",
        ] {
            let e = url.parse::<StoreSpec>().unwrap_err();
            let text = format!("{e} {e:?}");
            assert!(!text.contains("s3cr") && !text.contains("t@"), "{text}");
            assert!(text.contains("percent-encode"), "{text}");
        }
        assert_eq!(
            redact("redis://u:a/b?c@h/0?prefix=p"),
            "redis://u:***@h/0?prefix=p"
        );
        assert_eq!(
            redact("redis+unix:///run/a@b.sock"),
            "redis+unix:///run/a@b.sock"
        );
        // A unix socket's credentials are the client's own options, and never shown.
        let s: StoreSpec = "redis+unix:///run/redis.sock?db=0&user=u&pass=hunter2&prefix=p"
            .parse()
            .unwrap();
        assert_eq!(
            s.to_string(),
            "redis+unix:///run/redis.sock?db=0&user=u&pass=***&prefix=p"
        );
        for url in [
            "redis+unix:///run/redis.sock?db=0&pass=hunter2&bogus=1",
            "redis://h/0?pass=hunter2",
        ] {
            let e = url.parse::<StoreSpec>().unwrap_err();
            assert!(!format!("{e} {e:?}").contains("hunter2"), "{e}");
        }
        // Encoded, it is a password.
        let s: StoreSpec = "redis://u:s3cr%2Ft@h/0".parse().unwrap();
        assert_eq!(s.to_string(), "redis://u:***@h/0");
    }

    #[test]
    fn region_names_and_paths() {
        let path = |s: &str| s.parse::<StoreSpec>().unwrap().shm_path().unwrap();
        assert_eq!(path("shm:/api"), PathBuf::from("/dev/shm/api"));
        // A bare name was a file in the working directory, on its (disk) file system.
        assert_eq!(path("shm:api"), PathBuf::from("/dev/shm/api"));
        assert_eq!(path("shm:./api"), PathBuf::from("./api"));
        assert_eq!(path("shm:run/api"), PathBuf::from("run/api"));
        assert_eq!(
            path("shm:/run/app/api?capacity=9"),
            PathBuf::from("/run/app/api")
        );
        // `shm://api` was the file /api, at the root of the disk.
        for bad in ["shm://api", "shm:/", "shm:", "shm:?capacity=3"] {
            assert!(bad.parse::<StoreSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn debug_redacts_redis_passwords_as_display_does() {
        // A builder's or a limiter's `{:?}` printed the URL as given.
        for url in [
            "redis://user:hunter2@127.0.0.1:1/0",
            "redis+unix:///tmp/x.sock?pass=hunter2",
            "redis+cluster://:hunter2@h1:7000,h2:7001",
            "redis+sentinel://:hunter2@h:26379/m",
        ] {
            let s: StoreSpec = url.parse().unwrap();
            let debug = format!("{s:?} {s:#?}");
            assert!(!debug.contains("hunter2"), "{debug}");
            assert!(debug.contains("***") && debug.contains("Redis"), "{debug}");
        }
        let shm: StoreSpec = "shm:/api?capacity=9".parse().unwrap();
        assert_eq!(
            format!("{shm:?}"),
            r#"Shm { name: "/api", capacity: Some(9) }"#
        );
        assert_eq!(format!("{:?}", StoreSpec::Memory), "Memory");
        let b = crate::KeyedLimiter::<String>::builder("1/s".parse().unwrap())
            .store("redis://u:hunter2@h/0".parse().unwrap());
        assert!(!format!("{b:?}").contains("hunter2"));
    }
}
