//! [`RedisStore`] (a keyed limiter's buckets) and [`RedisBucket`] (a single limiter's), over
//! one [`Link`]; composite limits of Redis limiters in one script call.
//!
//! **Key names.** `PREFIX:QUOTA:{TAG}`: `PREFIX` the `prefix` option; `QUOTA` 16 hex digits
//! of the SipHash-1-3 of the quota's spec (SCRIPTS.md), so that a changed quota starts fresh
//! buckets instead of reading old state with new parameters; `TAG` the Redis Cluster hash tag:
//! for a keyed limiter the key's 128-bit fingerprint in 32 hex digits (keys spread over the
//! slots), for a single limiter the `tag` option or else the prefix. Fingerprints are
//! SipHash-1-3 over the key's `Hash` under the fixed key `k0 = u64::from_le_bytes(*b"sluicega")`,
//! `k1 = u64::from_le_bytes(*b"te-redis")`, so that every process and binding names a key
//! alike (as the shared-memory store does, a `&str` key is read as the byte key of its UTF-8:
//! `Canon`).
//!
//! **Time.** Production: the server's TIME, in microsecond ticks since 2024-01-01 (SCRIPTS.md,
//! "Clock"); the reading given to each method is not sent. Figures come back in ticks and are
//! multiplied by 1000. With `clock=test` (feature `redis-test-clock`) the limiter's own
//! readings are sent, in nanosecond ticks: the decisions are then the in-process engine's, bit
//! for bit.

pub(crate) use super::link::RedisStats;
use super::link::{block, run, Fail, Link, Request};
use super::scripts::{self, Spec};
use crate::clock::{Clock, MonotonicClock};
use crate::error::{Error, StoreErrorKind};
use crate::store::fork::PerProcess;
use crate::store::keyed::Ctx;
use crate::store::spec::{OnError, RedisOptions, Topology};
use crate::store::{KeyedLimiter, OnFull, Store, StoreSpec};
use crate::{Decision, Quota};
use core::borrow::Borrow;
use core::hash::Hash;
use futures_util::future::Either;
use redis::{Cmd, RedisWrite, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SIP_K0: u64 = u64::from_le_bytes(*b"sluicega");
const SIP_K1: u64 = u64::from_le_bytes(*b"te-redis");

/// A name's 128-bit fingerprint (a quota's spec, a single limiter's tag).
pub(crate) fn name_fingerprint<Q: Hash + ?Sized>(name: &Q) -> u128 {
    let mut h = siphasher::sip128::SipHasher13::new_with_keys(SIP_K0, SIP_K1);
    name.hash(&mut h);
    siphasher::sip128::Hasher128::finish128(&h).as_u128()
}

/// A key's 128-bit fingerprint, of its stream as the shared stores read it (`Canon`: a `str`
/// key and the bytes of its UTF-8 are one key).
pub(crate) fn key_fingerprint<Q: Hash + ?Sized>(key: &Q) -> u128 {
    let mut h = siphasher::sip128::SipHasher13::new_with_keys(SIP_K0, SIP_K1);
    key.hash(&mut crate::store::key::Canon::new(&mut h));
    siphasher::sip128::Hasher128::finish128(&h).as_u128()
}

/// A bucket's key name: a keyed limiter's `HEAD{FP}` (its store's `PREFIX:QUOTA:` and the
/// key's fingerprint in 32 hex digits), or a name made already (a single limiter's).
#[derive(Clone, Copy)]
pub(super) enum Name<'a> {
    Keyed(&'a str, u128),
    Made(&'a str),
}

impl<'a> Name<'a> {
    /// The text before a keyed name's `{FP}`, and that tag.
    fn split(self) -> (&'a str, Option<[u8; 34]>) {
        match self {
            Name::Made(n) => (n, None),
            Name::Keyed(head, fp) => (head, Some(tag(fp))),
        }
    }

    pub(super) fn string(self) -> String {
        let (head, tag) = self.split();
        let mut s = String::with_capacity(head.len() + 34);
        s.push_str(head);
        s.extend(tag.iter().flatten().map(|&b| char::from(b)));
        s
    }

    /// The name as `cmd`'s next argument, written in place.
    fn write_arg(self, cmd: &mut Cmd) {
        use std::io::Write;
        let (head, tag) = self.split();
        let mut w = cmd.writer_for_next_arg();
        // Writes to the command's own buffer (a `Vec`), which cannot fail.
        let _ = w.write_all(head.as_bytes());
        if let Some(t) = tag {
            let _ = w.write_all(&t);
        }
    }
}

/// `{FP}`: a fingerprint in 32 lowercase hex digits, in braces (a Redis Cluster hash tag).
fn tag(fp: u128) -> [u8; 34] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut t = [b'{'; 34];
    for (i, d) in t[1..33].iter_mut().enumerate() {
        *d = HEX[((fp >> (124 - 4 * i)) & 0xf) as usize];
    }
    t[33] = b'}';
    t
}

/// `retry_after` of a rejection by `on_error=closed`.
const CLOSED_RETRY_NS: u64 = 1_000_000_000;

/// A request's operation, reading, cost and leaky-queue bound (`None`: no bound), and whether
/// it is a look (a caller's peek) rather than part of an admission.
#[derive(Clone, Copy)]
pub(super) struct Ask {
    pub(super) op: Op,
    pub(super) now: u64,
    pub(super) cost: u64,
    pub(super) bound: Option<u64>,
    /// A look at the bucket (`KeyedLimiter::peek`, `Limiter::peek`, `is_full`): no policy
    /// answers it when the server does not, since the policy's answer would be no bucket's
    /// state (`local`'s full bucket, `open`'s 0 remaining); the failure is the caller's
    /// `Error::Store`, whatever `on_error` says (docs/REDIS.md, "When Redis is slow or
    /// down"). A composite's peeks at its parts are part of its decision: not looks.
    pub(super) look: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Acquire,
    Peek,
    Refund,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Acquire => "acquire",
            Op::Peek => "peek",
            Op::Refund => "refund",
        }
    }
}

/// A rejection the negative cache holds: requests of at least `cost` are rejected until
/// `until` (on the cache's clock), or until `expires` ([`HOLD_MAX`] after the reply), when the
/// server is asked again.
#[derive(Clone, Copy)]
struct Hold {
    until: u64,
    expires: u64,
    cost: u64,
    at: u64,
    d: Decision,
}

/// How long a cached rejection is taken without asking the server again, whatever its
/// `retry_after`: a bucket another process reset (an admin's `reset`, a refund from another
/// host) is seen within this. One round trip a second per rejected key and process, against
/// one per request without the cache.
const HOLD_MAX: u64 = 1_000_000_000;

const CACHE_SHARDS: usize = 16;
const CACHE_PER_SHARD: usize = 4096;

/// The `local` policy's insurance limiter for quota `q` (see [`insurance`]).
fn insurance_limiter(q: Quota) -> Result<Box<KeyedLimiter<u128>>, Error> {
    Ok(Box::new(
        KeyedLimiter::<u128>::builder(q)
            .max_keys(100_000)
            .on_full(OnFull::EvictFullest)
            .build()?,
    ))
}

/// A command other than the scripts (SCAN, DEL) on `c`'s connection, this process's,
/// blocking.
fn block_command(c: &Common, cmd: redis::Cmd) -> Result<redis::Value, Fail> {
    let link = Arc::clone(c.live_link()?);
    block(link.command(cmd))
}

/// The negative cache: by key fingerprint, the latest rejection still in force.
struct NegCache {
    shards: Box<[Mutex<std::collections::HashMap<u128, Hold>>]>,
}

impl NegCache {
    fn new() -> Self {
        NegCache {
            shards: (0..CACHE_SHARDS).map(|_| Mutex::default()).collect(),
        }
    }

    fn shard(&self, fp: u128) -> std::sync::MutexGuard<'_, std::collections::HashMap<u128, Hold>> {
        self.shards[(fp as usize) % CACHE_SHARDS]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The cached rejection of a request of `cost` at `now`, if one is in force.
    fn get(&self, fp: u128, now: u64, cost: u64, window_s: u64) -> Option<Decision> {
        let h = *self.shard(fp).get(&fp)?;
        if now >= h.until || now >= h.expires || cost < h.cost || now < h.at {
            return None;
        }
        Some(Decision::from_figures(
            false,
            h.d.limit(),
            h.d.remaining(),
            h.until - now,
            h.d.reset_after_nanos().saturating_sub(now - h.at),
            window_s,
        ))
    }

    fn put(&self, fp: u128, now: u64, cost: u64, d: Decision) {
        let hold = Hold {
            until: now.saturating_add(d.retry_after_nanos()),
            expires: now.saturating_add(HOLD_MAX),
            cost,
            at: now,
            d,
        };
        let mut s = self.shard(fp);
        if s.len() >= CACHE_PER_SHARD {
            s.retain(|_, h| h.until.min(h.expires) > now);
            if s.len() >= CACHE_PER_SHARD {
                s.clear();
            }
        }
        s.insert(fp, hold);
    }

    fn forget(&self, fp: u128) {
        self.shard(fp).remove(&fp);
    }
}

/// What a forked child makes again of a store: its connection (the URL, password included;
/// the timeout, `eval`, connections) and its `local` insurance (the insurance's quota).
struct Again {
    conn: Dial,
    local: Option<Quota>,
    /// After a failed reopen, the monotonic reading before which no other is tried (calls
    /// meanwhile are an outage to the policy at once).
    retry_at: AtomicU64,
}

/// What opens a store's connection: the URL (password included), the timeout, `eval`, the
/// connections.
#[derive(Clone)]
struct Dial {
    url: String,
    timeout: Duration,
    eval: bool,
    connections: usize,
}

impl Dial {
    fn open(&self) -> Result<Arc<Link>, Error> {
        Link::open(&self.url, self.timeout, self.eval, self.connections)
    }
}

/// How long a child waits after a failed reopen of its connection before it tries again.
const REOPEN_BACKOFF_NS: u64 = 1_000_000_000;

/// What every bucket of one quota on one deployment shares.
pub(crate) struct Common {
    /// The connection, this process's (`store::fork`): a child forked since opens its own at
    /// its first call.
    link: PerProcess<Arc<Link>>,
    /// What a forked child makes again (boxed: a keyed limiter holds a store, which holds
    /// this).
    again: Box<Again>,
    /// The quota in the scripts' terms (SCRIPTS.md).
    spec: Spec,
    /// A single limiter's quota once its bucket exists, when that differs (`initial <
    /// burst`): an absent key is then a full bucket, as in-process (SCRIPTS.md, "Absent
    /// keys"). Never for a keyed limiter's buckets.
    refilled: Option<Spec>,
    /// Whether an acquisition (or the creation at construction) has reached the server, so
    /// that the bucket exists or has existed: `refilled` applies from then on.
    created: AtomicBool,
    /// Nanoseconds a tick: 1000, or 1 on the test clock.
    pub(super) tick: u64,
    /// The store as its errors name it: the URL (its password `***`) and the prefix, which
    /// tells apart the limits that share one server (and one connection).
    pub(super) name: String,
    /// `PREFIX:QUOTA:`.
    pub(super) head: String,
    pub(super) tag: String,
    limit: u64,
    window_s: u64,
    on_error: OnError,
    /// The insurance of `on_error=local` ([`insurance`]); `None` under another policy, or
    /// when no token bucket is slow enough (the policy then rejects every acquisition).
    /// Boxed: a keyed limiter holds a store, which holds this.
    /// This process's (a child forked since makes its own: the parent's may hold a lock).
    local: Option<PerProcess<Option<Box<KeyedLimiter<u128>>>>>,
    /// This process's (a child forked since starts with an empty one: the parent's locks may
    /// be held).
    cache: Option<PerProcess<NegCache>>,
    mono: MonotonicClock,
    /// The test clock's `base` (the Unix millisecond of tick 0), if on.
    test_base_ms: Option<u64>,
}

/// A store's name in its errors: `url` with its password `***`, and `?prefix=P` (`&prefix=P`
/// after the client's own query, a unix socket's `db`), the default prefix included.
fn store_name(url: &str, o: &RedisOptions) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!(
        "{}{sep}prefix={}",
        crate::store::spec::redact(url),
        o.prefix
    )
}

/// The clock reading a store's requests use: the limiter's (test clock), or none.
fn redis_parts(spec: &StoreSpec) -> (&str, &RedisOptions) {
    match spec {
        StoreSpec::Redis { url, options } => (url, options),
        _ => unreachable!("a Redis store is built from a Redis spec"),
    }
}

impl Common {
    /// The store for `quota` at `spec`; `origin`: the limiter clock's reading now (the test
    /// clock's interval grid starts there).
    /// `single`: a single limiter's bucket (else a keyed limiter's).
    pub(super) fn open(
        spec: &StoreSpec,
        quota: &Quota,
        origin: u64,
        single: bool,
    ) -> Result<Self, Error> {
        let (url, o) = redis_parts(spec);
        check_options(o)?;
        if o.test_clock && !cfg!(feature = "redis-test-clock") {
            return Err(Error::store(
                StoreErrorKind::Unsupported,
                spec.to_string(),
                "clock=test needs the cargo feature redis-test-clock (tests only)",
            ));
        }
        let tick = if o.test_clock { 1 } else { 1000 };
        let spec_text = scripts::spec(quota, tick, if o.test_clock { origin } else { 0 })?;
        let qfp = name_fingerprint(spec_text.as_str()) as u64;
        let dial = Dial {
            url: url.to_string(),
            timeout: o.timeout,
            eval: o.eval,
            connections: o.connections,
        };
        let link = dial.open()?;
        let limit = crate::algorithm::Codec::new(quota, origin)?.capacity();
        let local_quota = insurance(quota, limit, o.hosts).filter(|_| o.on_error == OnError::Local);
        let local = match &local_quota {
            Some(q) => Some(PerProcess::new(Some(insurance_limiter(*q)?))),
            None => None,
        };
        let test_base_ms = o.test_clock.then(|| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            u64::try_from(now.as_millis()).unwrap_or(u64::MAX / 2) + 86_400_000
        });
        let spec = Spec::new(spec_text, o.eval);
        Ok(Common {
            link: PerProcess::new(link),
            again: Box::new(Again {
                conn: dial,
                local: local_quota,
                retry_at: AtomicU64::new(0),
            }),
            refilled: single.then(|| spec.refilled(o.eval)).flatten(),
            spec,
            created: AtomicBool::new(false),
            tick,
            name: store_name(url, o),
            head: format!("{}:{qfp:016x}:", o.prefix),
            tag: o.tag.clone().unwrap_or_else(|| o.prefix.clone()),
            limit,
            window_s: quota.window_secs(),
            on_error: o.on_error,
            local,
            cache: o.negative_cache.then(|| PerProcess::new(NegCache::new())),
            mono: MonotonicClock::new(),
            test_base_ms,
        })
    }

    /// The connection to read a name, a topology or counters of: this process's, or before a
    /// forked child opens its own, its parent's (whose atomics it reads and bumps, never its
    /// locks).
    pub(super) fn link(&self) -> &Arc<Link> {
        self.link.current().unwrap_or_else(|| self.link.any())
    }

    /// The connection to call on, this process's: in a child forked since the store was
    /// opened, one of its own, opened now (waiting for its first connection attempt, as the
    /// store's creation did). One that cannot be opened is an outage to the fail policy (the
    /// URL opened in the parent: its login refused now is a password changed meanwhile), and
    /// the next call tries again.
    pub(super) fn live_link(&self) -> Result<&Arc<Link>, Fail> {
        if let Some(l) = self.link.current() {
            return Ok(l);
        }
        self.reopen_due()?;
        let fresh = self.again.conn.open().map_err(|e| self.reopen_failed(&e))?;
        Ok(self.link.get(move |_| fresh))
    }

    /// `Err` while a failed reopen's backoff runs.
    fn reopen_due(&self) -> Result<(), Fail> {
        if self.mono.now() < self.again.retry_at.load(Relaxed) {
            return Err(Fail::Down(
                "this process's connection could not be opened; tried again within a second".into(),
            ));
        }
        Ok(())
    }

    fn reopen_failed(&self, e: &Error) -> Fail {
        self.again
            .retry_at
            .store(self.mono.now().saturating_add(REOPEN_BACKOFF_NS), Relaxed);
        Fail::Down(format!("cannot open this process's connection: {e}"))
    }

    /// [`live_link`](Self::live_link) for async callers: a connection opened on a thread of
    /// its own, so that the caller's executor (a Python coroutine holding the GIL, a tokio
    /// worker) does not wait on the connection's first attempt.
    pub(super) async fn live_link_async(&self) -> Result<&Arc<Link>, Fail> {
        if let Some(l) = self.link.current() {
            return Ok(l);
        }
        self.reopen_due()?;
        let dial = self.again.conn.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("sluicegate-redis-open".into())
            .spawn(move || {
                let _ = tx.send(dial.open());
            })
            .map_err(|e| Fail::Down(format!("cannot start a thread to connect: {e}")))?;
        let fresh = rx
            .await
            .map_err(|_| Fail::Down("the connecting thread stopped".into()))?
            .map_err(|e| self.reopen_failed(&e))?;
        Ok(self.link.get(move |_| fresh))
    }

    /// The `local` insurance, this process's (a forked child starts with full buckets of its
    /// own: the insurance is each process's share anyway).
    fn local(&self) -> Option<&KeyedLimiter<u128>> {
        let (cell, q) = (self.local.as_ref()?, self.again.local?);
        // (A quota that built once builds again: `None` is the policy without insurance.)
        cell.get(|_| insurance_limiter(q).ok()).as_deref()
    }

    /// The negative cache, this process's.
    fn cache(&self) -> Option<&NegCache> {
        self.cache.as_ref().map(|c| c.get(|_| NegCache::new()))
    }

    /// The negative cache's clock: the request's own reading on the test clock, else this
    /// process's monotonic clock.
    fn cache_now(&self, now: u64) -> u64 {
        if self.test_base_ms.is_some() {
            now
        } else {
            self.mono.now()
        }
    }

    fn test_clock(&self, now: u64) -> String {
        match self.test_base_ms {
            Some(base) => format!("{now} 1000000 {base}"),
            None => String::new(),
        }
    }

    /// The quota as the next request states it.
    pub(super) fn spec(&self) -> &Spec {
        match &self.refilled {
            Some(r) if self.created.load(Relaxed) => r,
            _ => &self.spec,
        }
    }

    /// The arguments after the keys but the specs (SCRIPTS.md, "Calling convention").
    pub(super) fn args(&self, ask: Ask) -> Vec<String> {
        let bound = match ask.bound {
            Some(ns) => (ns / self.tick).to_string(),
            None => String::new(),
        };
        vec![
            ask.op.name().to_string(),
            ask.cost.to_string(),
            bound,
            self.test_clock(ask.now),
        ]
    }

    /// The policy's answer to a request on `parts` (each bucket's store and fingerprint; the
    /// first part's policy decides) that the server did not decide.
    fn failed(&self, fail: &Fail, parts: &[(&Common, u128)], ask: Ask) -> Result<Decision, Error> {
        let (op, cost) = (ask.op, ask.cost);
        let c = &self.link().counters;
        let admit = |allowed: bool| {
            let retry = if allowed { 0 } else { CLOSED_RETRY_NS };
            Decision::from_figures(allowed, self.limit, 0, retry, 0, self.window_s)
        };
        if matches!(fail, Fail::Forked) {
            // Not an outage a policy rides out: this process can never reach the server.
            return Err(fail.error(&self.name));
        }
        if ask.look {
            // A look is not an admission: the policy's answer would be no bucket's state.
            c.failed_error.fetch_add(1, Relaxed);
            return Err(fail.error(&self.name));
        }
        match self.on_error {
            OnError::Open => {
                c.failed_open.fetch_add(1, Relaxed);
                Ok(admit(true))
            }
            OnError::Closed => {
                c.failed_closed.fetch_add(1, Relaxed);
                Ok(admit(op == Op::Refund))
            }
            OnError::Error => {
                c.failed_error.fetch_add(1, Relaxed);
                Err(fail.error(&self.name))
            }
            OnError::Local => {
                c.failed_local.fetch_add(1, Relaxed);
                let ask = |c: &Common, fp: &u128| {
                    let Some(local) = c.local() else {
                        return Ok(admit(op != Op::Acquire));
                    };
                    match op {
                        Op::Acquire => local.try_acquire(fp, cost),
                        Op::Peek => local.peek(fp),
                        Op::Refund => local.refund(fp, cost).map(|()| admit(true)),
                    }
                };
                // All or nothing over the parts' local buckets.
                let mut taken = 0;
                let mut worst: Option<Decision> = None;
                for (c, fp) in parts {
                    let d = ask(c, fp).unwrap_or_else(|_| admit(false));
                    if worst.is_none_or(|w| d.remaining() < w.remaining() || !d.allowed()) {
                        worst = Some(d);
                    }
                    if !d.allowed() {
                        break;
                    }
                    taken += 1;
                }
                let d = worst.unwrap_or_else(|| admit(true));
                if op == Op::Acquire && !d.allowed() {
                    for (c, fp) in &parts[..taken] {
                        if let Some(local) = c.local() {
                            let _ = local.refund(fp, cost);
                        }
                    }
                }
                Ok(Decision::from_figures(
                    d.allowed(),
                    self.limit,
                    d.remaining().min(self.limit),
                    d.retry_after_nanos(),
                    d.reset_after_nanos(),
                    self.window_s,
                ))
            }
        }
    }
}

/// The in-process limiter of `on_error=local` (docs/REDIS.md, "When Redis is slow or down"):
/// a token bucket of burst `b = max(1, limit / hosts)` that refills at this host's share of
/// the quota's rate, `count / (period × hosts)` in lowest terms, when a bucket of `b` tokens
/// holds that rate exactly (`b × period < 2^63` ns, as [`Quota::validate`] requires); else at
/// the share rounded down to whole tokens per `d = (2^63 - 1) / b` ns; else, when that is
/// none, at one token per `⌈period × hosts / count⌉` ns with the burst lowered to fit. Never
/// faster than the share, never a larger burst than `b`. `None` (every acquisition rejected)
/// when even one token per `2^63 - 1` ns is faster than the share.
fn insurance(quota: &Quota, limit: u64, hosts: u64) -> Option<Quota> {
    const MAX: u128 = (1 << 63) - 1;
    // Every algorithm's long-run rate is count per period (the windows' N per W included).
    let (k, p) = (
        u128::from(quota.count()),
        u128::from(quota.period_ns()) * u128::from(hosts.max(1)),
    );
    let g = scripts::gcd(k, p);
    let (k, p) = (k / g, p / g);
    let b = u128::from((limit / hosts.max(1)).max(1)).min(MAX);
    let (count, period, burst) = if b.checked_mul(p).is_some_and(|x| x <= MAX) {
        (k, p, b)
    } else if k * (MAX / b) >= p {
        // Here p > MAX / b: fewer than k tokens a period of MAX / b ns.
        (k * (MAX / b) / p, MAX / b, b)
    } else {
        let d = p.div_ceil(k);
        if d > MAX {
            return None;
        }
        (1, d, b.min(MAX / d))
    };
    let n = |x: u128| u64::try_from(x).ok();
    Quota::try_new(n(count)?, n(period)?, n(burst)?).ok()
}

/// The checks the URL parser makes of the options (spec.rs), for options built as a struct:
/// `InvalidOption` naming the first one out of range.
fn check_options(o: &RedisOptions) -> Result<(), Error> {
    let name = crate::store::spec::valid_name;
    let bad = |option: &'static str, value: String, expected: &str| {
        Err(Error::InvalidOption {
            option,
            value,
            expected: expected.to_string(),
        })
    };
    const NAME: &str = "1 to 200 letters, digits and _-.:/";
    if !name(&o.prefix) {
        return bad("prefix", o.prefix.clone(), NAME);
    }
    if let Some(tag) = o.tag.as_ref().filter(|t| !name(t)) {
        return bad("tag", tag.clone(), NAME);
    }
    if o.hosts == 0 {
        return bad("hosts", "0".into(), "a whole number of hosts, at least 1");
    }
    if o.timeout.is_zero() || o.timeout > crate::store::spec::TIMEOUT_MAX {
        let t = format!("{:?}", o.timeout);
        return bad("timeout", t, "a duration above 0, at most 1 hour");
    }
    if o.connections > 64 {
        let c = o.connections.to_string();
        return bad("connections", c, "a whole number from 0 to 64");
    }
    Ok(())
}

/// A figure of a reply: an integer, or a decimal string (above 2^53).
fn figure(x: &Value) -> Option<u128> {
    match x {
        Value::Int(i) => u128::try_from(*i).ok(),
        Value::BulkString(b) => core::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// What one request (on one bucket or several) comes to: the decision, and each part's when
/// there are several parts.
enum Outcome {
    Decided(Decision, Option<Vec<Decision>>),
    Capacity(u64),
    Refunded,
}

/// A one-bucket function's reply, read.
#[derive(Debug, PartialEq)]
enum Short {
    /// A decision's figures: allowed (1 or 0), limit, remaining, retry_after, reset_after.
    Decided([u128; 5]),
    /// The cost exceeds the capacity.
    Capacity,
}

/// A one-bucket function's reply on a bucket of capacity `limit` (SCRIPTS.md, "Replies"):
/// `[capacity]`, `[remaining, reset_after]` (admitted) or `[remaining, retry_after,
/// reset_after]` (rejected). `None` for anything else: another length, a figure that is not a
/// non-negative integer, a capacity other than `limit`, more remaining than `limit`.
fn short(items: &[Value], limit: u64) -> Option<Short> {
    let limit = u128::from(limit);
    let (allowed, rem, retry, reset) = match items {
        [cap] => return (figure(cap)? == limit).then_some(Short::Capacity),
        [rem, reset] => (1, figure(rem)?, 0, figure(reset)?),
        [rem, retry, reset] => (0, figure(rem)?, figure(retry)?, figure(reset)?),
        _ => return None,
    };
    (rem <= limit).then_some(Short::Decided([allowed, limit, rem, retry, reset]))
}

/// The decision of a reply's five figures `allowed, limit, remaining, retry_after,
/// reset_after` (ticks of `tick` ns), or `None` if they cannot be one (a corrupt reply). A wait
/// past u64 nanoseconds saturates, as the in-process codecs' do ("never", in effect); a count
/// past u64, more remaining than the limit, or an `allowed` other than 0 or 1 is refused.
fn decision(f: &[u128], tick: u64, window_s: u64) -> Option<Decision> {
    let wait = |x: u128| u64::try_from(x.saturating_mul(u128::from(tick))).unwrap_or(u64::MAX);
    let (limit, remaining) = (u64::try_from(f[1]).ok()?, u64::try_from(f[2]).ok()?);
    if f[0] > 1 || remaining > limit {
        return None;
    }
    Some(Decision::from_figures(
        f[0] == 1,
        limit,
        remaining,
        wait(f[3]),
        wait(f[4]),
        window_s,
    ))
}

/// The figures of the longest reply read without a heap allocation (a one-bucket decision by
/// the general entry).
const FEW: usize = 7;

/// What reply `v` to a call of `op` on `parts` buckets says (SCRIPTS.md, "Replies"): the
/// shape the call asked for, or a corrupt reply (`Fail::Server`, which the fail policy
/// decides). `one`: the call was a one-bucket function's (an acquisition), whose replies are
/// shorter, on a bucket of capacity `limit`; figures in ticks of `tick` ns.
fn outcome(
    v: &Value,
    op: Op,
    parts: usize,
    one: bool,
    limit: u64,
    tick: u64,
    window_s: u64,
) -> Result<Outcome, Fail> {
    let bad = || Fail::Server(format!("sluicegate: unexpected reply {v:?}"));
    let decision = |f: &[u128]| decision(f, tick, window_s).ok_or_else(bad);
    let Value::Array(items) = v else {
        return Err(bad());
    };
    if one {
        return match short(items, limit) {
            Some(Short::Decided(f)) if op == Op::Acquire => {
                Ok(Outcome::Decided(decision(&f)?, None))
            }
            Some(Short::Capacity) if op == Op::Acquire => Ok(Outcome::Capacity(limit)),
            _ => Err(bad()),
        };
    }
    let mut few = [0u128; FEW];
    let many: Vec<u128>;
    let f: &[u128] = if items.len() <= FEW {
        for (x, item) in few.iter_mut().zip(items) {
            *x = figure(item).ok_or_else(bad)?;
        }
        &few[..items.len()]
    } else {
        many = items
            .iter()
            .map(|x| figure(x).ok_or_else(bad))
            .collect::<Result<_, _>>()?;
        &many
    };
    // A decision: the combined figures, then each part's when there are several.
    let figures = if parts == 1 { 5 } else { 5 + 5 * parts };
    let decides = op != Op::Refund;
    match f {
        [1, _, i, cap] if decides && (1..=parts as u128).contains(i) => {
            Ok(Outcome::Capacity(u64::try_from(*cap).map_err(|_| bad())?))
        }
        [0, _] if op == Op::Refund => Ok(Outcome::Refunded),
        [0, _, rest @ ..] if decides && rest.len() == figures => {
            let d = decision(&rest[..5])?;
            let each = match parts {
                1 => None,
                _ => Some(
                    rest[5..]
                        .chunks(5)
                        .map(decision)
                        .collect::<Result<_, _>>()?,
                ),
            };
            Ok(Outcome::Decided(d, each))
        }
        _ => Err(bad()),
    }
}

impl Common {
    /// [`outcome`] of reply `v` to a call of `op` on `parts` buckets of this store's.
    fn outcome(&self, v: &Value, op: Op, parts: usize, one: bool) -> Result<Outcome, Fail> {
        outcome(v, op, parts, one, self.limit, self.tick, self.window_s)
    }

    /// The result of a call on the buckets `fps` (their order is the call's): the decision,
    /// and each part's.
    pub(super) fn finish(
        &self,
        r: Result<Value, Fail>,
        parts: &[(&Common, u128)],
        ask: Ask,
    ) -> Result<(Decision, Vec<Decision>), Error> {
        let (d, each) = self.settle(r, parts, ask, false)?;
        Ok((d, each.unwrap_or_else(|| vec![d])))
    }

    /// [`finish`](Self::finish) without each part's decision when there is one part; `one`:
    /// the call was a one-bucket function's.
    fn settle(
        &self,
        r: Result<Value, Fail>,
        parts: &[(&Common, u128)],
        ask: Ask,
        one: bool,
    ) -> Result<(Decision, Option<Vec<Decision>>), Error> {
        let n = parts.len();
        let each = |d: Decision| (n != 1).then(|| vec![d; n]);
        let out = r.and_then(|v| self.outcome(&v, ask.op, n, one));
        let (op, cost) = (ask.op, ask.cost);
        match out {
            Ok(Outcome::Decided(d, each)) => {
                self.link().counters.decided.fetch_add(1, Relaxed);
                if op == Op::Acquire {
                    // The server has created every absent part. (Written once: every call
                    // reads the flag, from every thread.)
                    parts
                        .iter()
                        .filter(|(c, _)| !c.created.load(Relaxed))
                        .for_each(|(c, _)| c.created.store(true, Relaxed));
                }
                if let (Some(cache), [(_, fp)], Op::Acquire, None) =
                    (self.cache(), parts, op, ask.bound)
                {
                    if !d.allowed() && d.retry_after_nanos() > 0 {
                        cache.put(*fp, self.cache_now(ask.now), cost, d);
                    }
                }
                Ok((d, each))
            }
            Ok(Outcome::Capacity(capacity)) => Err(Error::InsufficientCapacity { cost, capacity }),
            Ok(Outcome::Refunded) => {
                self.link().counters.decided.fetch_add(1, Relaxed);
                let d = Decision::from_figures(true, self.limit, 0, 0, 0, self.window_s);
                Ok((d, each(d)))
            }
            Err(fail) => {
                let d = self.failed(&fail, parts, ask)?;
                Ok((d, each(d)))
            }
        }
    }

    /// Creates bucket `name` (fingerprint `fp`) at `now` if it does not exist: a cost-0
    /// acquisition whose failure is nobody's request (no policy decides it, no counter but
    /// the link's own counts it).
    pub(super) fn create(&self, name: Name<'_>, fp: u128, now: u64) {
        let ask = Ask {
            op: Op::Acquire,
            now,
            cost: 0,
            bound: None,
            look: false,
        };
        if let Ok(req) = self.prepare(name, fp, ask) {
            let one = req.is_one();
            let r = self.live_link().and_then(|l| l.call_blocking(req));
            if let Ok(Outcome::Decided(..)) = r.and_then(|v| self.outcome(&v, ask.op, 1, one)) {
                self.created.store(true, Relaxed);
            }
        }
    }

    /// A cached rejection, or the call to make, for a request on one bucket.
    fn prepare(&self, name: Name<'_>, fp: u128, ask: Ask) -> Result<Request, Decision> {
        let op = ask.op;
        if let (Some(cache), Op::Acquire, None) = (self.cache(), op, ask.bound) {
            if let Some(d) = cache.get(fp, self.cache_now(ask.now), ask.cost, self.window_s) {
                self.link().counters.cached_rejections.fetch_add(1, Relaxed);
                return Err(d);
            }
        }
        if op == Op::Refund {
            self.forget(fp);
        }
        let spec = self.spec();
        if let (Some((func, quota)), Op::Acquire, None) = (&spec.one, op, ask.bound) {
            // FCALL NAME_tb 1 key cost k p b i [test_clock], written into one buffer.
            let function = scripts::scripts().function(*func);
            let (head, _) = name.split();
            let size =
                64 + function.len() + head.len() + quota.iter().map(String::len).sum::<usize>();
            let mut cmd = Cmd::with_capacity(10, size);
            cmd.arg("FCALL").arg(function).arg("1");
            name.write_arg(&mut cmd);
            cmd.arg(ask.cost).arg(&quota[..]);
            if self.test_base_ms.is_some() {
                cmd.arg(self.test_clock(ask.now));
            }
            return Ok(Request::One(cmd));
        }
        let mut args = self.args(ask);
        args.push(spec.text.clone());
        Ok(Request::Run {
            keys: vec![name.string()],
            args,
        })
    }

    /// Clears bucket `fp`'s cached rejection (a refund is on its way to the bucket).
    pub(super) fn forget(&self, fp: u128) {
        if let Some(cache) = self.cache() {
            cache.forget(fp);
        }
    }

    /// A request on one bucket.
    pub(super) fn request(&self, name: Name<'_>, fp: u128, ask: Ask) -> Result<Decision, Error> {
        match self.prepare(name, fp, ask) {
            Err(d) => Ok(d),
            Ok(req) => {
                let one = req.is_one();
                let r = self.live_link().and_then(|l| l.call_blocking(req));
                Ok(self.settle(r, &[(self, fp)], ask, one)?.0)
            }
        }
    }

    /// [`request`](Self::request) for async callers.
    pub(super) async fn request_async(
        &self,
        name: Name<'_>,
        fp: u128,
        ask: Ask,
    ) -> Result<Decision, Error> {
        match self.prepare(name, fp, ask) {
            Err(d) => Ok(d),
            Ok(req) => {
                let one = req.is_one();
                let r = match self.live_link_async().await {
                    Ok(l) => l.call_async(req).await,
                    Err(f) => Err(f),
                };
                Ok(self.settle(r, &[(self, fp)], ask, one)?.0)
            }
        }
    }

    pub(super) fn bound(within: u64) -> Option<u64> {
        (within < u64::MAX - 1).then_some(within)
    }

    pub(super) fn stats(&self) -> RedisStats {
        self.link().counters.read()
    }
}

/// A keyed limiter's buckets on Redis.
pub(crate) struct RedisStore {
    c: Common,
}

/// A batch's requests as the store sends them: a key's fingerprint and cost, or the error its
/// check gave.
type Batch = Vec<Result<(u128, u64), Error>>;

impl RedisStore {
    /// The store as printed (its password `***`).
    pub(crate) fn printed(&self) -> &str {
        &self.c.name
    }

    /// The store `spec` names, for `quota`, on a limiter whose clock reads `origin` now.
    pub(crate) fn open(spec: &StoreSpec, quota: &Quota, origin: u64) -> Result<Self, Error> {
        Ok(RedisStore {
            c: Common::open(spec, quota, origin, false)?,
        })
    }

    fn name(&self, fp: u128) -> Name<'_> {
        Name::Keyed(&self.c.head, fp)
    }

    pub(crate) fn stats(&self) -> RedisStats {
        self.c.stats()
    }

    /// A request; an [`Op::Peek`] is a look (a caller's peek, see [`Ask::look`]).
    fn ask(op: Op, now: u64, cost: u64, within: u64) -> Ask {
        Ask {
            op,
            now,
            cost,
            bound: Common::bound(within),
            look: op == Op::Peek,
        }
    }

    /// A request on `key`'s bucket.
    pub(crate) fn decide<Q: Hash + ?Sized>(
        &self,
        key: &Q,
        now: u64,
        cost: u64,
        within: u64,
        peek: bool,
    ) -> Result<Decision, Error> {
        let fp = key_fingerprint(key);
        let op = if peek { Op::Peek } else { Op::Acquire };
        let ask = Self::ask(op, now, cost, within);
        self.c.request(self.name(fp), fp, ask)
    }

    /// [`decide`](Self::decide) for async callers, on a key's fingerprint.
    pub(crate) async fn decide_fp_async(
        &self,
        fp: u128,
        now: u64,
        cost: u64,
        within: u64,
        peek: bool,
    ) -> Result<Decision, Error> {
        let op = if peek { Op::Peek } else { Op::Acquire };
        let ask = Self::ask(op, now, cost, within);
        self.c.request_async(self.name(fp), fp, ask).await
    }

    /// A refund for async callers, on a key's fingerprint.
    pub(crate) async fn refund_fp_async(&self, fp: u128, now: u64, cost: u64) -> Result<(), Error> {
        let ask = Self::ask(Op::Refund, now, cost, u64::MAX);
        self.c.request_async(self.name(fp), fp, ask).await.map(drop)
    }

    /// A batch's answers known without a round trip (errors, cached rejections), and the
    /// calls to make for the others, by index (with whether the call is a one-bucket
    /// function's).
    #[allow(clippy::type_complexity)]
    fn batch_calls(
        &self,
        reqs: &Batch,
        now: u64,
        link: Result<&Arc<Link>, Fail>,
    ) -> (
        Vec<Option<Result<Decision, Error>>>,
        Vec<(
            (usize, bool),
            impl core::future::Future<Output = Result<Value, Fail>> + Send + 'static,
        )>,
    ) {
        let mut out = Vec::with_capacity(reqs.len());
        let mut calls = Vec::new();
        for (i, r) in reqs.iter().enumerate() {
            out.push(None);
            match r {
                Err(e) => out[i] = Some(Err(e.clone())),
                Ok((fp, cost)) => {
                    let ask = Self::ask(Op::Acquire, now, *cost, u64::MAX);
                    match self.c.prepare(self.name(*fp), *fp, ask) {
                        Err(d) => out[i] = Some(Ok(d)),
                        Ok(req) => {
                            let one = req.is_one();
                            let call = match &link {
                                Ok(l) => Either::Left(Arc::clone(l).call(req)),
                                Err(f) => Either::Right(core::future::ready(Err(f.clone()))),
                            };
                            calls.push(((i, one), call));
                        }
                    }
                }
            }
        }
        (out, calls)
    }

    /// The batch's answers, with the replies of its calls (in the order of `idx`).
    fn batch_finish(
        &self,
        reqs: &Batch,
        now: u64,
        mut out: Vec<Option<Result<Decision, Error>>>,
        idx: Vec<(usize, bool)>,
        replies: Vec<Result<Value, Fail>>,
    ) -> Vec<Result<Decision, Error>> {
        for ((i, one), r) in idx.into_iter().zip(replies) {
            let Ok((fp, cost)) = reqs[i] else {
                unreachable!("only checked requests are sent")
            };
            let ask = Self::ask(Op::Acquire, now, cost, u64::MAX);
            out[i] = Some(self.c.settle(r, &[(&self.c, fp)], ask, one).map(|(d, _)| d));
        }
        out.into_iter()
            .map(|r| r.expect("every request answered"))
            .collect()
    }

    /// Requests on many keys: every call is handed to the connection before any reply is
    /// read, so that they travel together (one round trip for the batch on one connection).
    pub(crate) async fn many_async(&self, reqs: Batch, now: u64) -> Vec<Result<Decision, Error>> {
        let link = self.c.live_link_async().await;
        let (out, calls) = self.batch_calls(&reqs, now, link);
        let (idx, calls): (Vec<_>, Vec<_>) = calls.into_iter().unzip();
        let replies = run(futures_util::future::join_all(calls)).await;
        self.batch_finish(&reqs, now, out, idx, replies)
    }

    /// [`many_async`](Self::many_async), blocking.
    pub(crate) fn many_blocking(&self, reqs: Batch, now: u64) -> Vec<Result<Decision, Error>> {
        let (out, calls) = self.batch_calls(&reqs, now, self.c.live_link());
        let (idx, calls): (Vec<_>, Vec<_>) = calls.into_iter().unzip();
        let replies = block(futures_util::future::join_all(calls));
        self.batch_finish(&reqs, now, out, idx, replies)
    }

    /// Keys of this store's quota on the server (standalone and Sentinel deployments).
    fn scan(&self) -> Result<Vec<String>, Error> {
        if self.c.link().topology == Topology::Cluster {
            return Err(Error::store(
                StoreErrorKind::Unsupported,
                self.c.name.clone(),
                "listing keys is not supported on Redis Cluster",
            ));
        }
        let pattern = format!("{}*", self.c.head);
        let mut cursor = 0u64;
        let mut keys = Vec::new();
        loop {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000);
            let v = block_command(&self.c, cmd).map_err(|f| f.error(&self.c.name))?;
            let parsed: Option<(u64, Vec<String>)> = redis::from_redis_value(v).ok();
            let (next, batch) = parsed
                .ok_or_else(|| Fail::Server("unexpected SCAN reply".into()).error(&self.c.name))?;
            keys.extend(batch);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }
}

impl<K: Hash + Eq + Send + 'static> Store<K> for RedisStore {
    fn acquire<Q>(&self, _cx: &Ctx, key: &Q, now: u64, cost: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.decide(key, now, cost, u64::MAX, false)
    }

    fn reserve<Q>(
        &self,
        _cx: &Ctx,
        key: &Q,
        now: u64,
        cost: u64,
        within: u64,
    ) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned + ?Sized,
        Q::Owned: Into<K>,
    {
        self.decide(key, now, cost, within, false)
    }

    fn peek<Q>(&self, _cx: &Ctx, key: &Q, now: u64) -> Result<Decision, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.decide(key, now, 0, u64::MAX, true)
    }

    fn refund<Q>(&self, _cx: &Ctx, key: &Q, now: u64, cost: u64) -> Result<(), Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let fp = key_fingerprint(key);
        let ask = Self::ask(Op::Refund, now, cost, u64::MAX);
        self.c.request(self.name(fp), fp, ask).map(drop)
    }

    fn remove<Q>(&self, _cx: &Ctx, key: &Q) -> Result<bool, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let fp = key_fingerprint(key);
        self.c.forget(fp);
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.name(fp).string());
        let v = block_command(&self.c, cmd).map_err(|f| f.error(&self.c.name))?;
        Ok(matches!(v, Value::Int(n) if n > 0))
    }

    fn sweep(&self, _cx: &Ctx, _now: u64) -> Result<usize, Error> {
        // Every key expires by itself the moment its bucket is full (SCRIPTS.md, "Expiry").
        Ok(0)
    }

    fn clear(&self) -> Result<(), Error> {
        for chunk in self.scan()?.chunks(500) {
            let mut cmd = redis::cmd("UNLINK");
            cmd.arg(chunk);
            block_command(&self.c, cmd).map_err(|f| f.error(&self.c.name))?;
        }
        if let Some(cache) = self.c.cache() {
            for s in cache.shards.iter() {
                s.lock().unwrap_or_else(|e| e.into_inner()).clear();
            }
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.scan().map_or(0, |k| k.len())
    }

    fn try_len(&self) -> Result<usize, Error> {
        self.scan().map(|k| k.len())
    }

    fn capacity(&self) -> usize {
        usize::MAX
    }

    fn snapshot(&self, _cx: &Ctx, _now: u64) -> Result<Vec<(K, Decision)>, Error>
    where
        K: Clone,
    {
        Err(Error::store(
            StoreErrorKind::Unsupported,
            self.c.name.clone(),
            "a Redis store keeps a fingerprint of each key, not the key: it cannot list them",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::{decision, insurance, outcome, short, Name, Op, Outcome, Short};
    use crate::error::{Error, StoreErrorKind};
    use crate::{Algorithm, KeyedLimiter, Quota};
    use redis::Value;

    /// The insurance of `quota` over `hosts` hosts, checked against the documented bounds
    /// (docs/REDIS.md): its long-run rate times `hosts` at most the quota's, its burst times
    /// `hosts` at most the quota's limit (or 1 token); `None` only when no token bucket is
    /// that slow. Exact integer arithmetic throughout.
    fn insured(quota: &Quota, hosts: u64) -> Option<Quota> {
        let limit = crate::algorithm::Codec::new(quota, 0).unwrap().capacity();
        insured_at(quota, limit, hosts)
    }

    /// [`insured`] with a limit of `limit`.
    fn insured_at(quota: &Quota, limit: u64, hosts: u64) -> Option<Quota> {
        let (k, p) = (u128::from(quota.count()), u128::from(quota.period_ns()));
        let ph = p * u128::from(hosts);
        let Some(ins) = insurance(quota, limit, hosts) else {
            assert!(
                k * ((1 << 63) - 1) < ph,
                "{quota} over {hosts}: no insurance"
            );
            return None;
        };
        let (ki, pi) = (u128::from(ins.count()), u128::from(ins.period_ns()));
        // ki / pi <= k / (p * hosts), cross-multiplied (an overflow is a failure: the left
        // side is at most k * pi < 2^127 when the bound holds).
        assert!(
            ki.checked_mul(ph).is_some_and(|l| l <= k * pi),
            "{quota} over {hosts}: {ins} is faster than the share"
        );
        let b = u128::from(ins.burst());
        assert!(
            b == 1 || b * u128::from(hosts) <= u128::from(limit),
            "{quota} over {hosts}: {ins} bursts past the share"
        );
        assert!(KeyedLimiter::<u128>::builder(ins).build().is_ok(), "{ins}");
        Some(ins)
    }

    #[test]
    fn the_insurance_never_exceeds_the_hosts_share() {
        // Exact when it can be: 10 per 4 minutes, burst 40 / 4.
        let q: Quota = "10/m; burst=40".parse().unwrap();
        let ins = insured(&q, 4).unwrap();
        assert_eq!(
            (ins.count(), ins.period_ns(), ins.burst()),
            (1, 24e9 as u64, 10)
        );
        // Were the full rate on each host (16x), or refused when the store accepts them.
        for (rate, hosts) in [
            ("1000003/day; algorithm=fixed_window", 16),
            ("120001/day; algorithm=fixed_window", 1),
            ("120001/day; algorithm=sliding_window", 1),
            ("3000001/hour; algorithm=fixed_window", 1),
            ("3000001/hour; algorithm=sliding_window", 1),
        ] {
            let q: Quota = rate.parse().unwrap();
            assert!(super::scripts::spec(&q, 1000, 0).is_ok(), "{rate}");
            let ins = insured(&q, hosts).unwrap_or_else(|| panic!("{rate}"));
            // Rounded down by less than a token a period: (ki + 1) / pi > k / (p * hosts).
            let (ki, pi) = (u128::from(ins.count()), u128::from(ins.period_ns()));
            let ph = u128::from(q.period_ns()) * u128::from(hosts);
            assert!((ki + 1) * ph > u128::from(q.count()) * pi, "{rate}: {ins}");
            assert!(ki > 100_000, "{rate}: {ins}");
        }
        // Many quotas, hosts and algorithms, down to shares slower than any token bucket.
        let periods = [
            1,
            1_000_000_007,
            3_600e9 as u64,
            86_400e9 as u64,
            (1 << 61) + 1,
            u64::MAX,
        ];
        let counts = [1, 7, 1000, 120_001, 1_000_003, (1 << 40) + 1, (1 << 61) - 1];
        let algorithms = [
            Algorithm::TokenBucket,
            Algorithm::Gcra,
            Algorithm::FixedWindow,
            Algorithm::SlidingWindow,
            Algorithm::LeakyQueue,
            Algorithm::SlidingLog,
        ];
        let (mut checked, mut none) = (0, 0);
        for (&p, &k, &a) in periods
            .iter()
            .flat_map(|p| counts.iter().map(move |k| (p, k)))
            .flat_map(|(p, k)| algorithms.iter().map(move |a| (p, k, a)))
        {
            let nz = |x| core::num::NonZeroU64::new(x).unwrap();
            let q = Quota::new(nz(k), nz(p)).with_algorithm(a);
            if q.validate().is_err() || crate::algorithm::Codec::new(&q, 0).is_err() {
                continue;
            }
            for hosts in [1, 2, 3, 16, 1000, 1 << 40, u64::MAX] {
                none += usize::from(insured(&q, hosts).is_none());
                checked += 1;
            }
        }
        assert!(checked > 300 && none > 0, "{checked} {none}");
        // A burst that would take over 292 years to refill is lowered: a token a day, 106751
        // (292 years) of them at most.
        let q: Quota = "1/day".parse().unwrap();
        let ins = insured_at(&q, 1_000_000, 1).unwrap();
        assert_eq!(
            (ins.count(), ins.period_ns(), ins.burst()),
            (1, 86_400e9 as u64, 106_751)
        );
        // One a day over 2^40 hosts is a token per 3 billion years, slower than any bucket;
        // over 2^16 hosts, one per 179 years.
        let q: Quota = "1/day; algorithm=fixed_window".parse().unwrap();
        assert!(insured(&q, 1 << 40).is_none());
        assert!(insured(&q, 1 << 16).is_some());
    }

    #[test]
    fn replies_have_the_shape_of_the_call() {
        let arr = |v: &[i64]| Value::Array(v.iter().map(|&x| Value::Int(x)).collect());
        let read = |v: &[i64], op, parts| outcome(&arr(v), op, parts, false, 10, 1000, 60);
        let one = [0, 5, 1, 10, 9, 0, 7];
        let part = [1, 10, 9, 0, 7];
        let two: Vec<i64> = one.iter().chain(&part).chain(&part).copied().collect();
        for op in [Op::Acquire, Op::Peek] {
            assert!(matches!(
                read(&one, op, 1),
                Ok(Outcome::Decided(d, None)) if d.allowed() && d.remaining() == 9
            ));
            assert!(matches!(
                read(&two, op, 2),
                Ok(Outcome::Decided(_, Some(each))) if each.len() == 2
            ));
            assert!(matches!(
                read(&[1, 5, 2, 4], op, 2),
                Ok(Outcome::Capacity(4))
            ));
        }
        assert!(matches!(
            read(&[0, 5], Op::Refund, 2),
            Ok(Outcome::Refunded)
        ));
        let three: Vec<i64> = two.iter().chain(&part).copied().collect();
        let corrupt: [(&[i64], Op, usize); 14] = [
            // A decision of the wrong length for the parts (one part's figures, or none).
            (&one, Op::Acquire, 2),
            (&one, Op::Acquire, 3),
            (&two[..12], Op::Acquire, 2),
            (&two, Op::Acquire, 1),
            (&two, Op::Acquire, 3),
            (&three, Op::Peek, 2),
            (&two[..16], Op::Acquire, 2),
            // A refund's reply to a request, a request's to a refund.
            (&[0, 123], Op::Acquire, 1),
            (&[0, 123], Op::Peek, 2),
            (&one, Op::Refund, 1),
            (&two, Op::Refund, 2),
            (&[1, 5, 1, 4], Op::Refund, 1),
            // Insufficient capacity of a part that is not there.
            (&[1, 5, 0, 4], Op::Acquire, 1),
            (&[1, 5, 3, 4], Op::Acquire, 2),
        ];
        for (v, op, parts) in corrupt {
            let fail = read(v, op, parts).err().unwrap_or_else(|| panic!("{v:?}"));
            assert!(matches!(
                fail.error("s"),
                Error::Store {
                    kind: StoreErrorKind::Corrupt,
                    ..
                }
            ));
        }
        // A one-bucket function's reply answers an acquisition only.
        let short = |v: &[i64], op| outcome(&arr(v), op, 1, true, 10, 1000, 60);
        assert!(matches!(
            short(&[9, 7], Op::Acquire),
            Ok(Outcome::Decided(..))
        ));
        assert!(short(&[9, 7], Op::Refund).is_err());
        assert!(short(&[10], Op::Peek).is_err());
    }

    #[test]
    fn corrupt_figures_are_refused_and_waits_saturate() {
        let d = decision(&[1, 10, 9, 2, 3], 1000, 60).unwrap();
        assert_eq!(
            (
                d.allowed(),
                d.limit(),
                d.remaining(),
                d.retry_after_nanos(),
                d.reset_after_nanos()
            ),
            (true, 10, 9, 2000, 3000)
        );
        let big = u128::from(u64::MAX) + 1;
        assert!(
            decision(&[1, big, 0, 0, 0], 1000, 60).is_none(),
            "a limit past u64"
        );
        assert!(
            decision(&[0, 10, big, 0, 0], 1000, 60).is_none(),
            "remaining past u64"
        );
        assert!(
            decision(&[0, 10, 11, 0, 0], 1000, 60).is_none(),
            "more than the limit"
        );
        assert!(
            decision(&[2, 10, 1, 0, 0], 1000, 60).is_none(),
            "allowed is 0 or 1"
        );
        // A wait past u64 ns (or past u128 once in ns) is "never", as in-process.
        let never = decision(&[0, 10, 0, u128::MAX, big], 1000, 60).unwrap();
        assert_eq!(never.retry_after_nanos(), u64::MAX);
        assert_eq!(never.reset_after_nanos(), u64::MAX);
    }

    #[test]
    fn short_replies() {
        let int = Value::Int;
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let read = |v: &[Value]| short(v, 10);
        assert_eq!(read(&[int(10)]), Some(Short::Capacity));
        assert_eq!(
            read(&[int(9), int(7)]),
            Some(Short::Decided([1, 10, 9, 0, 7]))
        );
        assert_eq!(
            read(&[int(0), text("9007199254740993"), int(4)]),
            Some(Short::Decided([0, 10, 0, 9_007_199_254_740_993, 4]))
        );
        assert_eq!(
            short(&[text("18446744073709551616"), int(0)], u64::MAX),
            None,
            "more remaining than the limit"
        );
        let bad: [&[Value]; 10] = [
            &[],
            &[int(9)],
            &[int(11), int(0)],
            &[int(-1), int(0)],
            &[int(1), Value::Nil],
            &[int(1), text("1.5")],
            &[int(1), text("")],
            &[int(1), Value::Array(vec![int(1)])],
            &[int(1), int(2), int(3), int(4)],
            &[int(0), int(1), int(10), int(1), int(1), int(1), int(1)],
        ];
        for v in bad {
            assert_eq!(read(v), None, "{v:?}");
        }
    }

    #[test]
    fn key_names() {
        for fp in [0, 1, 0xfedc_ba98_7654_3210, u128::MAX, 0x0123 << 100] {
            assert_eq!(
                Name::Keyed("p:0123456789abcdef:", fp).string(),
                format!("p:0123456789abcdef:{{{fp:032x}}}")
            );
        }
        assert_eq!(Name::Made("p:q:{t}").string(), "p:q:{t}");
        let mut cmd = redis::Cmd::new();
        Name::Keyed("h:", 0xab).write_arg(&mut cmd);
        Name::Made("m").write_arg(&mut cmd);
        let args: Vec<_> = cmd.args_iter().collect();
        assert_eq!(args.len(), 2);
        assert!(
            matches!(args[0], redis::Arg::Simple(a) if a == format!("h:{{{:032x}}}", 0xab).as_bytes())
        );
        assert!(matches!(args[1], redis::Arg::Simple(b"m")));
    }
}
