//! The connection to a Redis deployment.
//!
//! * **One background thread per process** runs a tokio runtime that drives the link's
//!   connection and its reconnections. A call that is not driven by its caller (below) hands
//!   its request to it and waits on a channel (blocking) or awaits a oneshot channel (async,
//!   so that the async API works on any executor).
//! * **One multiplexed connection per deployment** (a cluster connection for Redis Cluster),
//!   shared by every limiter on the same URL in the process: concurrent callers' calls are
//!   written back to back and their replies read in order, many requests per round trip
//!   (automatic pipelining).
//! * **Blocking callers drive their own round trip** on one server (not TLS, not Cluster or
//!   Sentinel): a blocking call takes an idle connection of a small pool, writes
//!   its call and reads the reply on its own thread, with no hand-off to the runtime thread
//!   and back (two thread wake-ups a call, which on a busy host cost more than the round trip).
//!   The URL's `connections=N` bounds the pool (default 4; 0: none). When every pooled
//!   connection is in use, a call goes through the multiplexed connection,
//!   which pipelines the rest. Both follow one protocol (`Link::next_step`), one deadline, the
//!   same counters and the same link state: while the link is down every call fails at once.
//! * **Async callers on a tokio runtime drive their own round trip** on that runtime (same
//!   servers as above, unless `connections=0`): each runtime (by `runtime::Id`) has a
//!   multiplexed connection of its own, opened and driven there (a stream is registered with
//!   one runtime's IO driver, so it is never used from another), on which its concurrent
//!   callers are pipelined ([`RUNTIME_CONNECTIONS`]). The deadline is a timer of that
//!   runtime. A runtime without a time or an IO driver, another executor and a `panic=abort`
//!   build (where the driver probe cannot run) hand off. When a runtime ends, a task of ours
//!   on it is dropped with the others, and its entry with it. An I/O error on such a
//!   connection closes it alone (a runtime that ends fails its calls in flight so); a
//!   connection that cannot be opened marks the link down, as below.
//! * **A short timeout per call** (`timeout`, default 50 ms), FUNCTION LOAD (or EVAL) and
//!   the retry included.
//! * **No replay.** A call whose outcome is unknown (a timeout, a lost connection) is never
//!   sent again: it is reported as failed and the fail policy decides it. A timeout or an I/O
//!   error drops the connection; a new one is opened in the background (the first attempt
//!   at once), one attempt at a time with a backoff of 10 ms doubling to 1 s, and while
//!   there is none every call fails at once without a round trip (nothing queues up behind
//!   a dead or paused server). Not a Redis Cluster's connection: its client keeps one per
//!   master and reopens a node's itself, so a call's failure fails that call alone
//!   ([`Link::lost`]).
//! * **No call on a connection that may have idled out** (a server's idle `timeout`, a
//!   proxy's): the link's connection, and the blocking callers' pooled ones, are PINGed
//!   after [`KEEPALIVE`] without a call; a pooled one (a runtime's too) is checked after
//!   [`IDLE_CHECK`] idle before a call is sent on it.

use super::scripts::{scripts, Func};
use crate::error::{Error, StoreErrorKind};
use crate::store::fork::{self, Global};
use crate::store::spec::{redact, Topology};
use crate::store::StoreSpec;
use core::future::Future;
use redis::aio::ConnectionLike;
use redis::{Cmd, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Why a link cannot be used: it is another process's (a parent's, before a `fork()`). The
/// stores open their own link in each process (`store::fork`), so this is never a store's
/// answer; it guards a link held past a fork by anything else.
const FORKED: &str = "this Redis connection belongs to the process this one was forked from \
    (its replies would be read by both); a limiter opens its own connections in each process \
    at its first call there";

/// The runtime thread's handle, this process's (started on first use, and again in a child
/// made by `fork()`: the parent's thread is not there).
fn runtime() -> &'static tokio::runtime::Handle {
    static RT: Global<RuntimeThread> = Global::new();
    &RT.get(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("sluicegate: cannot start the Redis store's runtime");
        let handle = rt.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("sluicegate-redis".into())
            .spawn(move || {
                let _ = rt.block_on(stopped);
            })
            .expect("sluicegate: cannot start the Redis store's thread");
        RuntimeThread {
            handle,
            _stop: stop,
        }
    })
    .handle
}

/// The runtime thread of one process. Dropped only when two threads of a new process raced
/// to start it and this one lost: the sender's drop ends the thread, which drops its runtime
/// (outside any task, as a runtime must be).
struct RuntimeThread {
    handle: tokio::runtime::Handle,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Runs `fut` on the runtime thread and blocks this thread until it is done. Every future
/// given here ends by itself (each has a timeout).
pub(crate) fn block<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime().spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv()
        .expect("sluicegate: the Redis store's thread stopped")
}

/// Runs `fut` on the runtime thread, from now on; the caller awaits it on any executor.
/// Dropping the returned future does not cancel the call (a request sent is a request
/// decided). Not an `async fn`: the returned future does not carry `fut` (which the spawned
/// task holds), so that a caller's future stays small (a large one is copied whenever it
/// moves).
pub(crate) fn run<T: Send + 'static>(
    fut: impl Future<Output = T> + Send + 'static,
) -> impl Future<Output = T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    runtime().spawn(async move {
        let _ = tx.send(fut.await);
    });
    async move {
        rx.await
            .expect("sluicegate: the Redis store's thread stopped")
    }
}

/// A call of the scripts, as a store prepares it.
pub(crate) enum Request {
    /// A one-bucket function's call (`FCALL NAME_tb 1 key cost k p b i [test_clock]`),
    /// built whole by the store: the EVAL form has no such function, so it is never sent
    /// another way.
    One(Cmd),
    /// The general entry `NAME` with its keys and arguments: `FCALL`, or with `scripts=eval`
    /// `EVALSHA`, then `EVAL` after `NOSCRIPT`.
    Run {
        keys: Vec<String>,
        args: Vec<String>,
    },
}

impl Request {
    /// Whether this is a one-bucket function's call (whose replies are shorter: SCRIPTS.md,
    /// "Replies").
    pub(crate) fn is_one(&self) -> bool {
        matches!(self, Request::One(_))
    }
}

/// Why a call has no answer.
#[derive(Clone, Debug)]
pub(crate) enum Fail {
    /// No connection now (the server is down, or a reconnection is under way).
    Down(String),
    /// No reply within the timeout.
    Timeout,
    /// The connection failed during the call.
    Io(String),
    /// The server answered with an error.
    Server(String),
    /// The link is another process's (see [`Link::stale`]): this process was forked after
    /// it was opened, and its connections and runtime thread are the parent's. An error
    /// whatever the fail policy.
    Forked,
}

impl Fail {
    /// The error [`OnError::Error`](crate::OnError::Error) returns.
    pub(crate) fn error(&self, store: &str) -> Error {
        let (kind, reason) = match self {
            // A password the server refuses is a misconfiguration, not an outage.
            Fail::Down(why) if refused_login(why) => {
                (StoreErrorKind::Permission, format!("not connected: {why}"))
            }
            Fail::Down(why) => (StoreErrorKind::Unavailable, format!("not connected: {why}")),
            Fail::Timeout => (
                StoreErrorKind::Timeout,
                "no reply within the timeout".to_string(),
            ),
            Fail::Io(why) => (
                StoreErrorKind::Unavailable,
                format!("connection lost: {why}"),
            ),
            Fail::Server(why) => {
                let kind = if why.starts_with("NOPERM") || why.starts_with("NOAUTH") {
                    StoreErrorKind::Permission
                } else if why.contains("sluicegate:") || why.starts_with("WRONGTYPE") {
                    StoreErrorKind::Corrupt
                } else {
                    StoreErrorKind::Unavailable
                };
                (kind, format!("the server answered: {why}"))
            }
            Fail::Forked => (StoreErrorKind::Unsupported, FORKED.to_string()),
        };
        Error::store(kind, store, reason)
    }
}

/// Whether a connection's failure is the server refusing its login (no password given, or a
/// wrong one), as the client words it.
fn refused_login(why: &str) -> bool {
    [
        "NOAUTH",
        "WRONGPASS",
        "Password authentication failed",
        "AuthenticationFailed",
    ]
    .iter()
    .any(|w| why.contains(w))
}

/// What a store's calls came to, counted since the store was built (all limiters on one
/// URL share the counters). `KeyedLimiter::redis_stats`, `Limiter::redis_stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisStats {
    /// Requests the server decided (one per key of a batch; a composite counts once).
    pub decided: u64,
    /// Requests rejected by the negative cache, without a round trip.
    pub cached_rejections: u64,
    /// Requests admitted by `on_error=open`.
    pub failed_open: u64,
    /// Requests rejected by `on_error=closed`.
    pub failed_closed: u64,
    /// Requests decided by the in-process limiter of `on_error=local`.
    pub failed_local: u64,
    /// Failures returned to the caller (`on_error=error`, and peeks under every policy).
    pub failed_error: u64,
    /// Calls that got no reply within the timeout.
    pub timeouts: u64,
    /// Calls made while there was no connection, or that lost theirs.
    pub unavailable: u64,
    /// Calls the server answered with an error.
    pub server_errors: u64,
    /// Connections opened (the first included).
    pub connects: u64,
    /// Times the scripts were loaded (FUNCTION LOAD, or EVAL after NOSCRIPT).
    pub script_loads: u64,
    /// Calls sent again to the node a Redis Cluster's MOVED or ASK reply named (at most once
    /// a call: such a reply means the call did not run).
    pub redirects: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) decided: AtomicU64,
    pub(crate) cached_rejections: AtomicU64,
    pub(crate) failed_open: AtomicU64,
    pub(crate) failed_closed: AtomicU64,
    pub(crate) failed_local: AtomicU64,
    pub(crate) failed_error: AtomicU64,
    timeouts: AtomicU64,
    unavailable: AtomicU64,
    server_errors: AtomicU64,
    connects: AtomicU64,
    script_loads: AtomicU64,
    redirects: AtomicU64,
}

impl Counters {
    pub(crate) fn read(&self) -> RedisStats {
        RedisStats {
            decided: self.decided.load(Relaxed),
            cached_rejections: self.cached_rejections.load(Relaxed),
            failed_open: self.failed_open.load(Relaxed),
            failed_closed: self.failed_closed.load(Relaxed),
            failed_local: self.failed_local.load(Relaxed),
            failed_error: self.failed_error.load(Relaxed),
            timeouts: self.timeouts.load(Relaxed),
            unavailable: self.unavailable.load(Relaxed),
            server_errors: self.server_errors.load(Relaxed),
            connects: self.connects.load(Relaxed),
            script_loads: self.script_loads.load(Relaxed),
            redirects: self.redirects.load(Relaxed),
        }
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}

/// How to open a connection.
enum Target {
    Single(redis::Client),
    /// The cluster's client, and how to open a connection of our own to one node of it (see
    /// [`Link::send_aside`]).
    Cluster(redis::cluster::ClusterClient, NodeUrl),
    Sentinel(tokio::sync::Mutex<redis::sentinel::SentinelClient>),
}

/// A cluster node's URL, as the seeds' are written: the scheme (`redis`, `rediss`) and the
/// URL's credentials (`user:password@`, or none).
struct NodeUrl {
    scheme: String,
    credentials: String,
}

impl NodeUrl {
    /// The URL of the node at `addr` (`host:port`).
    fn of(&self, addr: &str) -> String {
        format!("{}://{}{addr}", self.scheme, self.credentials)
    }
}

/// An open connection (cheap to clone: a handle to the task that drives the socket).
#[derive(Clone)]
enum Conn {
    Single(redis::aio::MultiplexedConnection),
    Cluster(redis::cluster_async::ClusterConnection),
}

impl Conn {
    /// One command; an error reply is an `Err` (the client returns it as a value).
    async fn send(&mut self, cmd: &Cmd) -> redis::RedisResult<Value> {
        let v = match self {
            Conn::Single(c) => c.send_packed_command(cmd).await,
            Conn::Cluster(c) => c.req_packed_command(cmd).await,
        };
        v?.extract_error()
    }

    /// [`send`](Self::send), to the node of a cluster's redirection if there is one (after
    /// `ASKING` for an ASK).
    async fn send_to(&mut self, cmd: &Cmd, to: Option<&Redirect>) -> redis::RedisResult<Value> {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        let (Conn::Cluster(c), Some(r)) = (&mut *self, to) else {
            return self.send(cmd).await;
        };
        let node = SingleNodeRoutingInfo::ByAddress {
            host: r.host.clone(),
            port: r.port,
        };
        if !r.ask {
            return c
                .route_command(cmd.clone(), RoutingInfo::SingleNode(node))
                .await?
                .extract_error();
        }
        let mut p = redis::pipe();
        p.cmd("ASKING").add_command(cmd.clone());
        let replies = c.route_pipeline(p, 0, 2, node).await?;
        let last = replies.into_iter().last().ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Parse, "no reply after ASKING"))
        })?;
        last.extract_error()
    }
}

/// Where a cluster's MOVED or ASK reply sends a call.
struct Redirect {
    host: String,
    port: u16,
    ask: bool,
}

impl Redirect {
    /// `host:port` (`[host]:port` for an IPv6 address).
    fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

fn redirect(e: &redis::RedisError) -> Option<Redirect> {
    let (addr, _slot) = e.redirect_node()?;
    let (host, port) = addr.rsplit_once(':')?;
    Some(Redirect {
        host: host.to_string(),
        port: port.parse().ok()?,
        ask: e.code() == Some("ASK"),
    })
}

struct State {
    conn: Option<Conn>,
    /// Bumped at every new connection, so that a late failure of an old one does not drop
    /// its successor.
    generation: u64,
    connecting: bool,
    next_try: Instant,
    backoff: Duration,
    last_error: String,
}

/// A deployment, as one URL names it, shared by every store on that URL in the process.
pub(crate) struct Link {
    target: Target,
    /// The URL with its password redacted (for messages).
    pub(crate) name: String,
    pub(crate) topology: Topology,
    pub(crate) timeout: Duration,
    eval: bool,
    state: Mutex<State>,
    /// The state's generation while it has a connection, else 0 (the first connection's
    /// generation is 1); written under the state's lock.
    live: AtomicU64,
    /// When the link's connection was last written to (a call or the keepalive's PING), in
    /// milliseconds since `born`: the keepalive PINGs it once that is [`KEEPALIVE`] ago.
    written: AtomicU64,
    born: Instant,
    pub(crate) counters: Counters,
    /// The process generation that opened it (`store::fork`): in another process (a child
    /// forked since), every call is `Fail::Forked`.
    process: u64,
    /// Set when the opener's first connection attempt is over, with its verdict.
    opened: Opened,
    /// The registry's id of its URL and settings (the same in every process): stores whose
    /// links have it use one deployment the same way.
    id: String,
    /// The blocking callers' own connections (one plain server only).
    direct: Option<Mutex<Direct>>,
    /// Notified when the keepalive puts `direct`'s connections back (see `Direct::checking`).
    direct_back: std::sync::Condvar,
    /// The async callers' own connections, by the tokio runtime they run on (one plain
    /// server only).
    own: Option<Mutex<Own>>,
    /// Redis Cluster: the nodes that redirections named and the cluster's client had no
    /// connection to, by `host:port`: a connection of our own to each, or none if the last
    /// attempt failed, and when it was last used or tried ([`Link::send_aside`]).
    aside: Mutex<HashMap<String, Aside>>,
}

/// A connection of our own to a cluster node ([`Link::send_aside`]): `None` after a failed
/// attempt, retried once `at` is [`IDLE_CHECK`] ago.
struct Aside {
    conn: Option<redis::aio::MultiplexedConnection>,
    at: Instant,
}

/// The end of a link's first connection attempt, which every store opening the link waits
/// for, and its verdict (`Some`: the server refused the login, or has no such database).
#[derive(Default)]
struct Opened {
    done: Mutex<Option<Option<Error>>>,
    ended: std::sync::Condvar,
}

impl Opened {
    fn set(&self, verdict: Option<Error>) {
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = Some(verdict);
        self.ended.notify_all();
    }

    /// Waits for the first attempt's end (bounded by its own: at most max(timeout, 1 s) and
    /// a PING's timeout); its verdict.
    fn wait(&self) -> Result<(), Error> {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match &*done {
                Some(None) => return Ok(()),
                Some(Some(e)) => return Err(e.clone()),
                None => {
                    done = self
                        .ended
                        .wait(done)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            }
        }
    }
}

/// Runs `f` on the runtime thread every half [`KEEPALIVE`] while `link` lives (a tick that
/// comes while the last one's `f` runs is skipped).
fn every_tick<F, Fut>(link: &Arc<Link>, f: F)
where
    F: Fn(Arc<Link>) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let weak = Arc::downgrade(link);
    runtime().spawn(async move {
        let mut tick = tokio::time::interval(KEEPALIVE / 2);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(link) = weak.upgrade() else {
                return;
            };
            f(link).await;
        }
    });
}

/// Sets a link's `opened` to an error when dropped (its opener unwinding).
struct OpenedGuard<'a>(&'a Link);

impl Drop for OpenedGuard<'_> {
    fn drop(&mut self) {
        self.0.opened.set(Some(Error::store(
            StoreErrorKind::Unavailable,
            self.0.name.clone(),
            "the thread that opened this connection failed before its first attempt ended",
        )));
    }
}

/// Connections blocking callers drive themselves, each used by one caller at a time.
struct Direct {
    /// Idle connections, with the link's generation when each was opened (one of an older
    /// generation, the link has lost its connection since, is dropped, not used) and when
    /// each was last used (one idle for [`IDLE_CHECK`] is checked before use).
    idle: Vec<(redis::Connection, u64, Instant)>,
    /// Connections open (idle or in use).
    open: usize,
    /// Of those, out for the keepalive's PING ([`Link::keep_direct`]): a caller that finds
    /// none idle while some are out waits for them (a round trip) rather than opening another.
    checking: usize,
    /// Callers waiting so (notified when a connection comes back to the pool).
    waiting: usize,
    /// At most this many (`connections=N`); more concurrent callers are pipelined on the
    /// multiplexed connection.
    max: usize,
}

/// A pooled connection (a blocking caller's, a runtime's) idle this long is checked (PING)
/// before a call is sent on it: a server's idle `timeout` (or a proxy's) may have closed it,
/// and a call written to a closed connection fails with its outcome unknown (it is not sent
/// again). A connection used within the last second is taken as it is, as connection pools
/// do (HikariCP skips its check within half a second). A server's idle timeout is a whole
/// number of seconds, one at least. (The link's own connection is kept alive instead:
/// [`KEEPALIVE`].)
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Connections async callers drive on their own tokio runtime, by runtime: a stream is
/// registered with one runtime's IO driver and is used from that runtime only.
struct Own {
    by_rt: HashMap<tokio::runtime::Id, RtPool>,
    /// The next connection's number (to find it again when its call ends).
    next_id: u64,
}

/// One runtime's connections.
struct RtPool {
    /// Whether the runtime can drive them (its time driver is on, and its IO driver: probed
    /// at its first call, and at its first connection); else its calls are handed off.
    usable: bool,
    conns: Vec<Pooled>,
    /// Connections being opened (they count toward [`RUNTIME_CONNECTIONS`]).
    opening: usize,
    /// Dropped with this entry: ends the task that watches for the runtime's end.
    _watch: tokio::sync::oneshot::Sender<()>,
}

/// A multiplexed connection opened on (and driven by) a caller's runtime.
struct Pooled {
    conn: redis::aio::MultiplexedConnection,
    /// The link's generation when it was opened: one of an older generation (the link has
    /// lost its connection since) is closed, not used.
    generation: u64,
    id: u64,
    /// Calls on it now: a caller takes an idle one, opens one while the runtime has fewer
    /// than [`RUNTIME_CONNECTIONS`], else shares the least busy (its calls are pipelined).
    in_flight: usize,
    /// When a call on it last completed, or a check found it open (one idle for
    /// [`IDLE_CHECK`] is checked before use).
    used: Instant,
}

/// Connections of its own a runtime opens at most. One: its callers pipeline on it, as on the
/// store's own connection, without handing their calls to another thread. More connections
/// cost more CPU a call and decided fewer calls a second (BENCHMARKS.md, "Redis store", run
/// 4: 4 connections a runtime against 1 at 50 pipelined callers).
const RUNTIME_CONNECTIONS: usize = 1;

/// How an async call goes.
enum Route {
    /// Through the runtime thread (the caller's runtime cannot drive a connection).
    HandOff,
    /// On connection `id` of the caller's runtime, checked first if `true` (it was idle for
    /// [`IDLE_CHECK`]).
    Use(redis::aio::MultiplexedConnection, u64, bool),
    /// On a new connection, which the caller opens.
    Open,
}

/// What a call does after an error reply (the one protocol of both kinds of connection).
enum Next {
    /// The call failed.
    Fail,
    /// The scripts are not loaded: EVAL the script (its reply is the call's).
    Eval,
    /// The function is not loaded: FUNCTION LOAD, then the call once more.
    Load,
}

/// The link's connection is PINGed once it has been quiet this long: its quiet spells stay
/// under a second (at most one and a half of this), and a Redis server's idle `timeout` is one
/// second at least. (Redis reads it in whole seconds: a connection last used at 10.999 s may
/// be closed at 12.0 s under `timeout 1`.)
const KEEPALIVE: Duration = Duration::from_millis(500);

const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

impl Link {
    /// Whether `other` is this link, or its copy in another process of this process's line
    /// (the same URL and settings): one deployment, used the same way.
    pub(crate) fn same_as(&self, other: &Link) -> bool {
        self.id == other.id
    }

    /// Whether this link is another process's (opened before this process was forked).
    #[inline]
    pub(crate) fn stale(&self) -> bool {
        self.process != fork::generation()
    }

    /// The link for `url` (shared with every live store on the same URL and settings), its
    /// first connection attempted before this returns (a failure leaves it to reconnect).
    pub(crate) fn open(
        url: &str,
        timeout: Duration,
        eval: bool,
        connections: usize,
    ) -> Result<Arc<Link>, Error> {
        fork::watch_forks();
        // This process's links (a forked child's lock may be held by a thread of its
        // parent's, and its links are the parent's).
        static LINKS: Global<Mutex<HashMap<String, Weak<Link>>>> = Global::new();
        let id = format!("{url}\n{}\n{eval}\n{connections}", timeout.as_nanos());
        let links = LINKS.get(Default::default);
        let mut map = links.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(link) = map.get(&id).and_then(Weak::upgrade) {
            drop(map);
            // Opened by another thread: its first connection attempt, and its verdict on the
            // server, are this store's too (a call made before it ended would find no
            // connection, and go to the fail policy, at every threaded worker's start).
            link.opened.wait()?;
            return Ok(link);
        }
        map.retain(|_, w| w.strong_count() > 0);
        let own_conns = connections > 0
            && matches!(StoreSpec::redis_topology(url), Topology::Single)
            && !url.starts_with("rediss");
        let link = Arc::new(Link {
            target: target(url, timeout)?,
            name: redact(url),
            topology: StoreSpec::redis_topology(url),
            timeout,
            eval,
            direct: own_conns.then(|| {
                Mutex::new(Direct {
                    idle: Vec::new(),
                    open: 0,
                    checking: 0,
                    waiting: 0,
                    max: connections,
                })
            }),
            direct_back: std::sync::Condvar::new(),
            own: own_conns.then(|| {
                Mutex::new(Own {
                    by_rt: HashMap::new(),
                    next_id: 0,
                })
            }),
            state: Mutex::new(State {
                conn: None,
                generation: 0,
                connecting: true,
                next_try: Instant::now(),
                backoff: BACKOFF_MIN,
                last_error: "not connected yet".into(),
            }),
            live: AtomicU64::new(0),
            written: AtomicU64::new(0),
            born: Instant::now(),
            counters: Counters::default(),
            process: fork::generation(),
            opened: Opened::default(),
            id: id.clone(),
            aside: Mutex::new(HashMap::new()),
        });
        map.insert(id, Arc::downgrade(&link));
        drop(map);
        // Should this thread panic before the verdict (no runtime thread could be started),
        // the stores waiting for it get an error rather than wait for ever.
        let unset = OpenedGuard(&link);
        let l = link.clone();
        block(async move { l.connect().await });
        let verdict = link.misconfigured();
        link.opened.set(verdict.clone());
        core::mem::forget(unset);
        if let Some(e) = verdict {
            // Not an outage that a fail policy rides out: the limiter is not made.
            let mut map = links.lock().unwrap_or_else(|e| e.into_inner());
            map.retain(|_, w| w.strong_count() > 0 && !core::ptr::eq(w.as_ptr(), &*link));
            return Err(e);
        }
        // The keepalive, on the runtime thread while the link lives (a tick of half of
        // KEEPALIVE: the connection is quiet for at most one and a half). The pooled
        // connections' on a task of their own: a PING that the server is slow to answer on
        // one kind does not hold the other's back.
        every_tick(&link, |link| async move {
            link.redial();
            let quiet = link.now_ms().saturating_sub(link.written.load(Relaxed));
            if quiet >= KEEPALIVE.as_millis() as u64 {
                link.wrote();
                link.keepalive().await;
            }
        });
        if link.direct.is_some() {
            every_tick(&link, |link| async move { link.keep_direct().await });
        }
        Ok(link)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// After the first connection attempt: the server refused the login (a wrong password,
    /// none where one is needed) or has no such database. Checked once, when the link is
    /// opened: such a store cannot decide anything, whatever its fail policy, and a limiter
    /// that fell back on it silently would limit each process alone. (A password changed
    /// while the limiter runs is an outage to its policy, and an error of kind `Permission`.)
    fn misconfigured(self: &Arc<Self>) -> Option<Error> {
        let (up, why) = {
            let st = self.state();
            (st.conn.is_some(), st.last_error.clone())
        };
        if !up {
            if refused_login(&why) {
                return Some(Error::store(
                    StoreErrorKind::Permission,
                    self.name.clone(),
                    format!("the server refused the login: {why} (the URL's user and password)"),
                ));
            }
            if why.contains("DB index is out of range") || why.contains("invalid DB index") {
                return Some(Error::InvalidOption {
                    option: "store",
                    value: self.name.clone(),
                    expected: format!("a database the server has ({why})"),
                });
            }
            return None;
        }
        // Connected: a server that wants a password and was given none answers the first
        // command with NOAUTH (a PING, which the keepalive sends anyway; an ACL user
        // without it is no such case).
        let l = self.clone();
        match block(async move { l.command(redis::cmd("PING")).await }) {
            Err(Fail::Server(why)) if why.starts_with("NOAUTH") => Some(Error::store(
                StoreErrorKind::Permission,
                self.name.clone(),
                format!("the server wants a password: {why} (give it in the URL)"),
            )),
            _ => None,
        }
    }

    /// One connection attempt (the caller has set `connecting`).
    async fn connect(self: Arc<Self>) {
        let limit = self.timeout.max(Duration::from_secs(1));
        let r = tokio::time::timeout(limit, self.target.connect(limit)).await;
        let mut st = self.state();
        st.connecting = false;
        match r {
            Ok(Ok(conn)) => {
                st.conn = Some(conn);
                st.generation += 1;
                self.live.store(st.generation, Relaxed);
                st.backoff = BACKOFF_MIN;
                bump(&self.counters.connects);
            }
            Ok(Err(e)) => self.backoff(&mut st, e.to_string()),
            Err(_) => self.backoff(&mut st, format!("no connection within {limit:?}")),
        }
    }

    fn backoff(&self, st: &mut State, why: String) {
        st.next_try = Instant::now() + st.backoff;
        st.backoff = (st.backoff * 2).min(BACKOFF_MAX);
        st.last_error = why;
    }

    /// The connection now, or why there is none (starting a reconnection when it is due).
    fn current(self: &Arc<Self>) -> Result<(Conn, u64), Fail> {
        let mut st = self.state();
        if let Some(c) = &st.conn {
            return Ok((c.clone(), st.generation));
        }
        if !st.connecting && Instant::now() >= st.next_try {
            st.connecting = true;
            runtime().spawn(self.clone().connect());
        }
        Err(Fail::Down(st.last_error.clone()))
    }

    /// Starts opening a connection when the link has none, none is being opened and the
    /// backoff has passed (the keepalive's tick): a server that comes back is connected to
    /// in the background, so that the first calls after an outage are decided by it, not
    /// failed to the fail policy while they start the reconnection.
    fn redial(self: &Arc<Self>) {
        let mut st = self.state();
        if st.conn.is_none() && !st.connecting && Instant::now() >= st.next_try {
            st.connecting = true;
            runtime().spawn(self.clone().connect());
        }
    }

    /// The link's generation while it has a connection (`current`, without the connection).
    /// Read without the state's lock (every call asks).
    fn up(&self) -> Option<u64> {
        match self.live.load(Relaxed) {
            0 => None,
            g => Some(g),
        }
    }

    /// Drops connection `generation` after a failure on it (a newer one stays), and starts
    /// opening another at once: a call that comes once it is open is decided, instead of
    /// failing and starting it. A server that is gone fails that attempt, and the backoff
    /// applies as after any failure.
    fn broken(self: &Arc<Self>, generation: u64, why: String) {
        let mut st = self.state();
        if st.generation == generation && st.conn.is_some() {
            st.conn = None;
            self.live.store(0, Relaxed);
            st.next_try = Instant::now();
            st.last_error = why;
            if !st.connecting {
                st.connecting = true;
                runtime().spawn(self.clone().connect());
            }
        }
    }

    /// After a call on connection `generation` timed out or lost its connection: that
    /// connection is dropped ([`broken`](Self::broken)), except a Redis Cluster's. A cluster
    /// connection is one per master, and its client reopens a node's connection itself (and
    /// refreshes its slot map, or reconnects from the seeds, when it finds no connection for
    /// a node): a master that is down or paused fails the calls of its own slots, and must
    /// not take the other masters' calls with it, as dropping the whole connection would
    /// (every call failing until the next one is open, which routes to the dead master
    /// again). The call itself goes to the fail policy either way. A cluster whose seeds
    /// cannot be reached at all is still down: its connection is never opened.
    fn lost(self: &Arc<Self>, generation: u64, why: String) {
        if self.topology != Topology::Cluster {
            self.broken(generation, why);
        }
    }

    /// Milliseconds since the link was made.
    fn now_ms(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    /// Notes a write on the link's connection (for the keepalive).
    fn wrote(&self) {
        self.written.store(self.now_ms(), Relaxed);
    }

    /// The link's connection after [`KEEPALIVE`] without a call on it: a PING. It keeps the
    /// connection from idling out (a server's idle `timeout`, a proxy's or a load balancer's,
    /// closes a quiet connection, and the next call written to it would fail with its
    /// outcome unknown). A connection that was closed all the same (its driving task read
    /// the end of its stream, or the PING's write or read failed) is dropped and a new one
    /// opened, before a call needs it; a server that is gone fails that attempt, and the
    /// backoff applies as after any failure. A PING without a reply within the timeout
    /// changes nothing (calls time out, and decide, as they would have).
    async fn keepalive(self: &Arc<Self>) {
        let (conn, generation) = {
            let st = self.state();
            match &st.conn {
                Some(c) => (c.clone(), st.generation),
                None => return,
            }
        };
        let ping = redis::cmd("PING");
        let limit = self.timeout.max(Duration::from_secs(1));
        let mut c = match conn {
            Conn::Single(c) => c,
            // Every master, to keep its connection open: a cluster's client reopens a node's
            // connection only when told of its close, which it is with RESP3 alone. Its
            // failure marks nothing down: a master that is down (its slots' calls fail) must
            // not take the others' calls with it.
            Conn::Cluster(mut c) => {
                use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
                let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let _ = tokio::time::timeout(limit, c.route_command(ping, all)).await;
                return;
            }
        };
        let Ok(Err(e)) = tokio::time::timeout(limit, c.send_packed_command(&ping)).await else {
            return;
        };
        if matches!(classify(&e), Fail::Io(_)) {
            self.broken(
                generation,
                format!("the server closed the connection ({e})"),
            );
        }
    }

    /// The blocking callers' pooled connections quiet for [`KEEPALIVE`]: PINGed, on tokio's
    /// blocking pool (off the runtime thread), and put back, so that the server does not
    /// close them and a caller seldom finds one idle for [`IDLE_CHECK`] (which it checks
    /// first, a round trip); one that does not answer within the timeout is closed. Each
    /// keeps its unit of `open` meanwhile, and is counted in `checking`: a caller that finds
    /// the pool empty waits for one (a round trip) rather than opening another, which a call
    /// landing during the PING did before.
    async fn keep_direct(self: &Arc<Self>) {
        let Some(direct) = &self.direct else {
            return;
        };
        let quiet: Vec<(redis::Connection, u64)> = {
            let mut d = direct.lock().unwrap_or_else(|e| e.into_inner());
            let mut quiet = Vec::new();
            let mut i = 0;
            while i < d.idle.len() {
                if d.idle[i].2.elapsed() >= KEEPALIVE {
                    let (c, g, _) = d.idle.swap_remove(i);
                    quiet.push((c, g));
                } else {
                    i += 1;
                }
            }
            d.checking += quiet.len();
            quiet
        };
        if quiet.is_empty() {
            return;
        }
        // Each on a blocking task of its own, back in the pool as soon as it answers (one that
        // does not answer holds up no other). The pool is updated by the blocking task
        // itself: it runs to its end even if this task is dropped.
        let deadline = Instant::now() + self.timeout;
        let tasks: Vec<_> = quiet
            .into_iter()
            .map(|(mut c, g)| {
                let link = self.clone();
                tokio::task::spawn_blocking(move || {
                    let alive = link.alive(&mut c, deadline).is_ok();
                    if let Some(direct) = &link.direct {
                        let mut d = direct.lock().unwrap_or_else(|e| e.into_inner());
                        d.checking -= 1;
                        if alive {
                            d.idle.push((c, g, Instant::now()));
                        } else {
                            d.open -= 1;
                        }
                        if d.waiting > 0 {
                            drop(d);
                            link.direct_back.notify_all();
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            let _ = t.await;
        }
    }

    /// Makes the scripts' call `req` (SCRIPTS.md, "Calling convention"): one round trip, two
    /// when the scripts must be loaded first. Runs on the runtime thread.
    pub(crate) async fn call(self: Arc<Self>, req: Request) -> Result<Value, Fail> {
        if self.stale() {
            return Err(Fail::Forked);
        }
        let deadline = tokio::time::Instant::now() + self.timeout;
        self.wrote();
        // The connection's generation is taken before the deadline can drop the call's
        // future: a call that times out drops its own connection, never a newer one opened
        // meanwhile (calls of a lost connection timing out one by one would otherwise drop
        // each of its successors in turn).
        let (mut conn, generation) = match self.current() {
            Ok(c) => c,
            Err(fail) => {
                self.failed(&fail, 0);
                return Err(fail);
            }
        };
        let r = tokio::time::timeout_at(deadline, self.exchange(&mut conn, &req)).await;
        let fail = match r {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(f)) => f,
            Err(_) => Fail::Timeout,
        };
        self.failed(&fail, generation);
        Err(fail)
    }

    /// [`call`](Self::call) for a blocking caller: on its own thread, over a pooled direct
    /// connection when the link has them and one is free, else through the runtime thread.
    pub(crate) fn call_blocking(self: &Arc<Self>, req: Request) -> Result<Value, Fail> {
        if self.stale() {
            return Err(Fail::Forked);
        }
        let (Some(direct), Target::Single(client)) = (&self.direct, &self.target) else {
            return block(self.clone().call(req));
        };
        let deadline = Instant::now() + self.timeout;
        // Down (or reconnecting): the runtime's path fails at once and schedules the
        // reconnection, as for every call.
        let Some(generation) = self.up() else {
            return block(self.clone().call(req));
        };
        let pooled = {
            let mut d = direct.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                match d.idle.pop() {
                    Some((c, g, used)) if g == generation => break Some((c, used)),
                    Some(_) => d.open -= 1, // of a lost generation: dropped
                    // None idle, some out for the keepalive's PING: one is back within a
                    // round trip. None back by the deadline: the server answers no PING, and
                    // the call times out as it would have on a connection.
                    None if d.checking > 0 => {
                        let left = deadline.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            drop(d);
                            self.failed(&Fail::Timeout, generation);
                            return Err(Fail::Timeout);
                        }
                        d.waiting += 1;
                        d = self
                            .direct_back
                            .wait_timeout(d, left)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                        d.waiting -= 1;
                    }
                    None if d.open < d.max => {
                        d.open += 1;
                        break None;
                    }
                    // Every direct connection is busy: pipelined with the others.
                    None => {
                        drop(d);
                        return block(self.clone().call(req));
                    }
                }
            }
        };
        // From here this caller holds one unit of `open`, given back when the connection is
        // dropped (`lease`), or kept with the connection when it goes back to the pool.
        let lease = Lease(direct);
        // A connection idle for a second is checked first; if the server closed it, nothing
        // of this call was sent on it, and a new one is opened, within the call's deadline.
        let pooled = match pooled {
            Some((mut c, used)) if used.elapsed() >= IDLE_CHECK => {
                match self.alive(&mut c, deadline) {
                    Ok(()) => Some(c),
                    Err(Fail::Io(_)) => None,
                    // No answer within the deadline: nothing of the call was sent either.
                    Err(fail) => {
                        drop((c, lease));
                        self.failed(&fail, generation);
                        return Err(fail);
                    }
                }
            }
            Some((c, _)) => Some(c),
            None => None,
        };
        let conn = match pooled {
            Some(c) => Ok(c),
            None => match deadline.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => client
                    .get_connection_with_timeout(left)
                    .inspect(|_| bump(&self.counters.connects)),
                _ => Err(redis::RedisError::from(std::io::Error::from(
                    std::io::ErrorKind::TimedOut,
                ))),
            },
        };
        // The call's result, and the connection if it is still usable: after an error reply
        // it is; after a timeout or an I/O error it is not (its state is unknown).
        let (r, conn) = match conn {
            Err(e) => (Err(classify(&e)), None),
            Ok(mut conn) => match self.direct_call(&mut conn, &req, deadline) {
                Ok(v) => (Ok(v), Some(conn)),
                Err(f @ Fail::Server(_)) => (Err(f), Some(conn)),
                Err(f) => (Err(f), None),
            },
        };
        // A usable connection goes back to the pool with its unit of `open`.
        if let Some(conn) = conn {
            let mut d = direct.lock().unwrap_or_else(|e| e.into_inner());
            d.idle.push((conn, generation, Instant::now()));
            if d.waiting > 0 {
                self.direct_back.notify_one();
            }
            drop(d);
            core::mem::forget(lease);
        } else {
            drop(lease);
        }
        r.inspect_err(|fail| self.failed(fail, generation))
    }

    /// [`call`](Self::call) for an async caller: on a tokio runtime whose connections it can
    /// drive (one server, not TLS), on a connection of that runtime, with no hand-off to the
    /// runtime thread; else handed to the runtime thread.
    pub(crate) async fn call_async(self: &Arc<Self>, req: Request) -> Result<Value, Fail> {
        if self.stale() {
            return Err(Fail::Forked);
        }
        // A timer made without a time driver panics: under `panic=abort` the probe
        // (`has_timers`) cannot run, and every async call is handed off.
        let (rt, client) = match (
            &self.own,
            &self.target,
            tokio::runtime::Handle::try_current(),
        ) {
            (Some(_), Target::Single(client), Ok(rt)) if cfg!(panic = "unwind") => (rt, client),
            _ => return run(self.clone().call(req)).await,
        };
        // Down (or reconnecting): fails at once, and schedules the reconnection. Such a call
        // awaits nothing else: it spends a unit of the task's budget, so that a task that
        // calls in a loop still lets the runtime's other tasks (and timers) run.
        let generation = match self.up().map_or_else(|| self.current().map(|(_, g)| g), Ok) {
            Ok(generation) => generation,
            Err(fail) => {
                self.failed(&fail, 0);
                tokio::task::consume_budget().await;
                return Err(fail);
            }
        };
        let (conn, id, check) = match self.route(&rt, generation) {
            Route::HandOff => return run(self.clone().call(req)).await,
            Route::Use(conn, id, check) => (Some(conn), Some(id), check),
            Route::Open => (None, None, false),
        };
        // The runtime's timer (`route` checked that it has one).
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut seat = Seat {
            link: self,
            rt: rt.id(),
            id,
            keep: true,
            done: false,
        };
        // Boxed: the exchange's future is about 2 KB, and the caller's futures (this one's
        // included) would carry it and copy it at every move. With whether the call got as
        // far as a connection of the runtime's own.
        let call = Box::pin(async {
            let conn = match conn {
                // Idle for a second: checked first. Closed meanwhile (nothing of this call
                // was sent on it), it is replaced by a new one.
                Some(conn) if !check => Some(conn),
                Some(conn) if answers(&conn).await => {
                    self.own_used(&seat);
                    Some(conn)
                }
                // Closed: this caller opens another, unless a caller that came with it is
                // opening one already (this call is then handed off).
                Some(_) if self.reopen_own(&mut seat) => None,
                Some(_) => return None,
                None => None,
            };
            let conn = match conn {
                Some(conn) => conn,
                None => match self.open_own(client, &mut seat, generation).await {
                    Some(Ok(conn)) => conn,
                    Some(Err(fail)) => return Some((Err(fail), false)),
                    None => return None,
                },
            };
            Some((self.exchange(&mut Conn::Single(conn), &req).await, true))
        });
        let (r, on_own) = match tokio::time::timeout_at(deadline, call).await {
            Ok(Some(r)) => r,
            // The runtime has no IO driver: nothing was sent.
            // The runtime has no IO driver (nothing was sent), or a caller that came with
            // this one replaces the closed connection.
            Ok(None) => {
                drop(seat);
                return run(self.clone().call(req)).await;
            }
            Err(_) => (Err(Fail::Timeout), false),
        };
        // After a timeout or an I/O error the connection's state is unknown: closed.
        seat.keep = matches!(r, Ok(_) | Err(Fail::Server(_)));
        seat.done = seat.keep;
        drop(seat);
        r.inspect_err(|fail| match fail {
            // An I/O error on a connection of the runtime's own closes that connection only
            // (above): the link's connection stands. Such an error is also what a runtime
            // that ends makes of its calls in flight (the task that drove the connection
            // dropped first), and one runtime's end must not take the link down for every
            // other caller. A server that is gone fails the next call's connection, which
            // marks the link down.
            Fail::Io(_) if on_own => bump(&self.counters.unavailable),
            _ => self.failed(fail, generation),
        })
    }

    /// Where an async call on runtime `rt` goes (the link is up, at `generation`).
    fn route(self: &Arc<Self>, rt: &tokio::runtime::Handle, generation: u64) -> Route {
        let Some(own) = &self.own else {
            return Route::HandOff;
        };
        let mut o = own.lock().unwrap_or_else(|e| e.into_inner());
        let mut watch = None;
        let p = o.by_rt.entry(rt.id()).or_insert_with(|| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            watch = Some(rx);
            RtPool {
                usable: has_timers(),
                conns: Vec::new(),
                opening: 0,
                _watch: tx,
            }
        });
        // Connections from before the link lost its connection: closed (after the lock).
        let stale: Vec<Pooled> = if p.conns.iter().any(|c| c.generation != generation) {
            let (keep, stale) = core::mem::take(&mut p.conns)
                .into_iter()
                .partition(|c| c.generation == generation);
            p.conns = keep;
            stale
        } else {
            Vec::new()
        };
        let least = (0..p.conns.len()).min_by_key(|&i| p.conns[i].in_flight);
        let room = p.conns.len() + p.opening < RUNTIME_CONNECTIONS;
        let route = match least {
            _ if !p.usable => Route::HandOff,
            Some(i) if p.conns[i].in_flight == 0 || !room => {
                let c = &mut p.conns[i];
                // Every caller checks it until one finds it open (callers that come together
                // after a quiet spell each send a PING, pipelined: none sends its call on a
                // connection that may be closed).
                let check = c.used.elapsed() >= IDLE_CHECK;
                c.in_flight += 1;
                Route::Use(c.conn.clone(), c.id, check)
            }
            _ if room => {
                p.opening += 1;
                Route::Open
            }
            // Every connection of the runtime is being opened: the runtime thread's.
            _ => Route::HandOff,
        };
        drop(o);
        drop(stale);
        if let Some(rx) = watch {
            // When the runtime ends, its tasks are dropped, this one with them: its entry
            // goes (its streams cannot be driven any more). The task ends by itself when the
            // entry goes first (the link dropped).
            let gone = RtGone {
                link: Arc::downgrade(self),
                rt: rt.id(),
            };
            drop(rt.spawn(async move {
                let _gone = gone;
                let _ = rx.await;
            }));
        }
        route
    }

    /// `seat`'s connection answered its check: marked used now.
    fn own_used(&self, seat: &Seat<'_>) {
        let Some(own) = &self.own else {
            return;
        };
        let mut o = own.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = o
            .by_rt
            .get_mut(&seat.rt)
            .and_then(|p| p.conns.iter_mut().find(|c| Some(c.id) == seat.id))
        {
            c.used = Instant::now();
        }
    }

    /// `seat`'s connection failed its check: closed and out of the runtime's pool, `seat`
    /// holding a unit of the runtime's `opening` instead. Whether this caller took it out
    /// (and opens another): `false` when a caller that checked it too did.
    fn reopen_own(&self, seat: &mut Seat<'_>) -> bool {
        let Some(own) = &self.own else {
            return false;
        };
        let mut o = own.lock().unwrap_or_else(|e| e.into_inner());
        let closed = o.by_rt.get_mut(&seat.rt).and_then(|p| {
            p.opening += 1;
            let i = p.conns.iter().position(|c| Some(c.id) == seat.id)?;
            Some(p.conns.swap_remove(i))
        });
        seat.id = None;
        drop(o);
        let took = closed.is_some();
        drop(closed);
        took
    }

    /// Opens a connection on the caller's runtime for `seat`'s call (which holds a unit of
    /// the runtime's `opening`): `None` when the runtime has no IO driver (it is marked so).
    async fn open_own(
        &self,
        client: &redis::Client,
        seat: &mut Seat<'_>,
        generation: u64,
    ) -> Option<Result<redis::aio::MultiplexedConnection, Fail>> {
        use futures_util::FutureExt;
        // No timers of the client's own: the call's deadline bounds the connection too.
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        let opened = core::panic::AssertUnwindSafe(
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .catch_unwind()
        .await;
        let own = self.own.as_ref()?;
        let mut o = own.lock().unwrap_or_else(|e| e.into_inner());
        let id = o.next_id;
        let p = o.by_rt.get_mut(&seat.rt);
        match opened {
            Err(_) => {
                // tokio's "IO is disabled" panic, before anything was sent.
                if let Some(p) = p {
                    p.usable = false;
                }
                None
            }
            Ok(Err(e)) => Some(Err(classify(&e))),
            Ok(Ok(conn)) => {
                bump(&self.counters.connects);
                if let Some(p) = p {
                    p.opening -= 1;
                    p.conns.push(Pooled {
                        conn: conn.clone(),
                        generation,
                        id,
                        in_flight: 1,
                        used: Instant::now(),
                    });
                    o.next_id += 1;
                    seat.id = Some(id);
                }
                Some(Ok(conn))
            }
        }
    }

    /// Whether direct connection `conn` answers a PING within `deadline` (any reply: it is
    /// open): else why not (`Fail::Io`: it is closed; `Fail::Timeout`: no answer in time).
    fn alive(&self, conn: &mut redis::Connection, deadline: Instant) -> Result<(), Fail> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Fail::Timeout);
        }
        let mut ping = || -> redis::RedisResult<Value> {
            conn.set_read_timeout(Some(left))?;
            conn.set_write_timeout(Some(left))?;
            redis::ConnectionLike::req_command(conn, &redis::cmd("PING"))
        };
        match ping() {
            Ok(_) => Ok(()),
            Err(e) => match classify(&e) {
                Fail::Timeout => Err(Fail::Timeout),
                // A reply that is an error still says the connection is open.
                Fail::Server(_) => Ok(()),
                _ => Err(Fail::Io(e.to_string())),
            },
        }
    }

    /// One call on a direct connection, within `deadline` (the protocol of
    /// [`call`](Self::call); one server: no redirections).
    fn direct_call(
        &self,
        conn: &mut redis::Connection,
        req: &Request,
        deadline: Instant,
    ) -> Result<Value, Fail> {
        let send = |conn: &mut redis::Connection, cmd: &Cmd| -> redis::RedisResult<Value> {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into());
            }
            conn.set_read_timeout(Some(left))?;
            conn.set_write_timeout(Some(left))?;
            redis::ConnectionLike::req_command(conn, cmd)?.extract_error()
        };
        let main = self.script_cmd(req);
        let mut loaded = false;
        loop {
            let e = match send(conn, &main) {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            match self.next_step(&e, loaded) {
                Next::Fail => return Err(classify(&e)),
                Next::Eval => match eval_cmd(req) {
                    Some(eval) => return send(conn, &eval).map_err(|e| classify(&e)),
                    None => return Err(classify(&e)),
                },
                Next::Load => match send(conn, &load_cmd()) {
                    Err(e) if !e.to_string().contains("already exists") => {
                        return Err(classify(&e))
                    }
                    _ => loaded = true,
                },
            }
        }
    }

    /// The counters and the link's state after a call on connection `generation` failed.
    fn failed(self: &Arc<Self>, fail: &Fail, generation: u64) {
        match fail {
            Fail::Timeout => {
                bump(&self.counters.timeouts);
                self.lost(generation, "a call timed out".into());
            }
            Fail::Io(why) => {
                bump(&self.counters.unavailable);
                self.lost(generation, why.clone());
            }
            // A refused login is the server's answer, as a command's NOAUTH is.
            Fail::Down(why) if refused_login(why) => bump(&self.counters.server_errors),
            Fail::Down(_) | Fail::Forked => bump(&self.counters.unavailable),
            Fail::Server(why) => {
                bump(&self.counters.server_errors);
                // A replica promoted away from (READONLY) or a master gone (MASTERDOWN):
                // look the master up again.
                if why.starts_with("READONLY") || why.starts_with("MASTERDOWN") {
                    self.broken(generation, why.clone());
                }
            }
        }
    }

    /// After error reply `e` to a call (`loaded`: the scripts were loaded once already in
    /// this call): whether to load the scripts (counted) or fail.
    fn next_step(&self, e: &redis::RedisError, loaded: bool) -> Next {
        if loaded {
            return Next::Fail;
        }
        let next = if self.eval && is_noscript(e) {
            Next::Eval
        } else if !self.eval && is_no_function(e) {
            Next::Load
        } else {
            return Next::Fail;
        };
        bump(&self.counters.script_loads);
        next
    }

    /// The command of `req` (EVALSHA of the general entry with `scripts=eval`).
    fn script_cmd<'r>(&self, req: &'r Request) -> Cow<'r, Cmd> {
        match req {
            // The EVAL form has only the general entry (the store never builds another).
            Request::One(cmd) => {
                debug_assert!(!self.eval);
                Cow::Borrowed(cmd)
            }
            Request::Run { keys, args } if self.eval => {
                Cow::Owned(call_cmd("EVALSHA", &scripts().sha, keys, args))
            }
            Request::Run { keys, args } => {
                Cow::Owned(call_cmd("FCALL", scripts().function(Func::Run), keys, args))
            }
        }
    }

    /// One call on `conn` (the protocol of every async call; the caller applies the deadline).
    async fn exchange(&self, conn: &mut Conn, req: &Request) -> Result<Value, Fail> {
        let main = self.script_cmd(req);
        let fail = |e: redis::RedisError| classify(&e);
        // A MOVED or ASK reply means that the call did not run: it is sent once more, to the
        // node named (Redis Cluster during a resharding). Sending it again is no replay.
        let mut to: Option<Redirect> = None;
        let mut loaded = false;
        loop {
            let e = match self.send_to(conn, &main, to.as_ref()).await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            match redirect(&e) {
                Some(r) if to.is_none() => {
                    bump(&self.counters.redirects);
                    to = Some(r);
                    continue;
                }
                _ => {}
            }
            match self.next_step(&e, loaded) {
                Next::Fail => return Err(fail(e)),
                Next::Eval => match eval_cmd(req) {
                    Some(eval) => {
                        return self.send_to(conn, &eval, to.as_ref()).await.map_err(fail)
                    }
                    None => return Err(fail(e)),
                },
                Next::Load => match self.send_to(conn, &load_cmd(), to.as_ref()).await {
                    Err(e) if !e.to_string().contains("already exists") => return Err(fail(e)),
                    _ => loaded = true,
                },
            }
        }
    }

    /// [`Conn::send_to`]; a redirection to a node the cluster's client has no connection to
    /// (a master that had no slot when its slot map was read, a master added to the cluster
    /// since: the client looks up the connections it has, and finds none) is sent over a
    /// connection of our own to that node ([`send_aside`](Self::send_aside)). The client
    /// found no connection, so nothing was sent: sending it there is no replay. The client
    /// itself reads its slot map again on such an error (and on a MOVED reply), so that later
    /// calls find the node; it does so by reconnecting from the seeds, so for a second after
    /// it found none, redirections to that node go straight to our own connection (or fail at
    /// once, if that could not be opened: a master that is down), not once more through the
    /// client, which would reconnect every call.
    async fn send_to(
        &self,
        conn: &mut Conn,
        cmd: &Cmd,
        to: Option<&Redirect>,
    ) -> redis::RedisResult<Value> {
        if let Some(to) = to {
            let known = {
                let a = self.aside.lock().unwrap_or_else(|e| e.into_inner());
                a.get(&to.addr())
                    .is_some_and(|n| n.at.elapsed() < IDLE_CHECK)
            };
            if known {
                return self.send_aside(cmd, to).await;
            }
        }
        match (conn.send_to(cmd, to).await, to) {
            (Err(e), Some(to)) if e.kind() == redis::ErrorKind::ClusterConnectionNotFound => {
                self.send_aside(cmd, to).await
            }
            (r, _) => r,
        }
    }

    /// `cmd` (after `ASKING` for an ASK) over a connection of our own to the cluster node
    /// `to` names: the one opened for it before if it was used within [`IDLE_CHECK`] (a
    /// server's idle `timeout` may have closed an older one), else a new one (with the seeds'
    /// scheme and credentials), all within the call's deadline; none at once if an attempt
    /// failed within [`IDLE_CHECK`]. One that fails is dropped.
    async fn send_aside(&self, cmd: &Cmd, to: &Redirect) -> redis::RedisResult<Value> {
        let Target::Cluster(_, node) = &self.target else {
            return Err(redis::RedisError::from((
                redis::ErrorKind::ClusterConnectionNotFound,
                "a redirection outside a cluster",
            )));
        };
        let addr = to.addr();
        let aside = || self.aside.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = aside()
            .get(&addr)
            .filter(|n| n.at.elapsed() < IDLE_CHECK)
            .map(|n| n.conn.clone());
        let mut c = match fresh {
            Some(Some(c)) => c,
            Some(None) => {
                return Err(redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    format!("no connection to cluster node {addr} (the last attempt failed)"),
                )))
            }
            None => {
                // No timers of the client's own: the call's deadline bounds the connection.
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(None)
                    .set_response_timeout(None);
                let opened = match redis::Client::open(node.of(&addr)) {
                    Ok(client) => {
                        client
                            .get_multiplexed_async_connection_with_config(&config)
                            .await
                    }
                    Err(e) => Err(e),
                };
                let at = Instant::now();
                let conn = opened.as_ref().ok().cloned();
                if conn.is_some() {
                    bump(&self.counters.connects);
                }
                aside().insert(addr.clone(), Aside { conn, at });
                opened?
            }
        };
        let r = if to.ask {
            let mut p = redis::pipe();
            p.cmd("ASKING").add_command(cmd.clone());
            c.send_packed_commands(&p, 0, 2).await.and_then(|replies| {
                replies.into_iter().last().ok_or_else(|| {
                    redis::RedisError::from((redis::ErrorKind::Parse, "no reply after ASKING"))
                })
            })
        } else {
            c.send_packed_command(cmd).await
        };
        match &r {
            Err(e) if !matches!(classify(e), Fail::Server(_)) => {
                aside().remove(&addr);
            }
            _ => {
                if let Some(n) = aside().get_mut(&addr) {
                    n.at = Instant::now();
                }
            }
        }
        r?.extract_error()
    }

    /// A command other than the scripts (DEL, SCAN), with the same timeout and failures.
    pub(crate) async fn command(self: Arc<Self>, cmd: Cmd) -> Result<Value, Fail> {
        if self.stale() {
            return Err(Fail::Forked);
        }
        let (mut conn, generation) = self.current()?;
        self.wrote();
        match tokio::time::timeout(self.timeout, conn.send(&cmd)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                let f = classify(&e);
                if matches!(f, Fail::Io(_)) {
                    self.lost(generation, e.to_string());
                }
                Err(f)
            }
            Err(_) => {
                bump(&self.counters.timeouts);
                self.lost(generation, "a call timed out".into());
                Err(Fail::Timeout)
            }
        }
    }
}

/// One unit of a link's `open` direct connections, given back when dropped.
struct Lease<'a>(&'a Mutex<Direct>);

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).open -= 1;
    }
}

/// An async call's place on its runtime's connections: one call on connection `id`, or (no
/// `id`) one unit of the runtime's `opening`; given back when dropped (the call done, or its
/// future dropped), the connection closed unless `keep`.
struct Seat<'a> {
    link: &'a Link,
    rt: tokio::runtime::Id,
    id: Option<u64>,
    keep: bool,
    /// The call completed (a reply read): the connection is marked used now. A call dropped
    /// before (its caller's future dropped) says nothing of the connection.
    done: bool,
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        let Some(own) = &self.link.own else {
            return;
        };
        let mut o = own.lock().unwrap_or_else(|e| e.into_inner());
        // None: the runtime has ended (its entry went with it).
        let Some(p) = o.by_rt.get_mut(&self.rt) else {
            return;
        };
        let Some(id) = self.id else {
            p.opening -= 1;
            return;
        };
        let closed = match p.conns.iter().position(|c| c.id == id) {
            Some(i) if self.keep => {
                p.conns[i].in_flight -= 1;
                if self.done {
                    p.conns[i].used = Instant::now();
                }
                None
            }
            Some(i) => Some(p.conns.swap_remove(i)),
            None => None, // closed already (a lost generation)
        };
        drop(o);
        drop(closed);
    }
}

/// Drops a runtime's entry from its link's pools when the runtime ends (its tasks, the one
/// that holds this among them, are dropped then).
struct RtGone {
    link: Weak<Link>,
    rt: tokio::runtime::Id,
}

impl Drop for RtGone {
    fn drop(&mut self) {
        let Some(link) = self.link.upgrade() else {
            return;
        };
        let Some(own) = &link.own else {
            return;
        };
        let gone = own
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_rt
            .remove(&self.rt);
        drop(gone);
    }
}

/// Whether a runtime's connection answers a PING (any reply: it is open).
async fn answers(conn: &redis::aio::MultiplexedConnection) -> bool {
    let ping = redis::cmd("PING");
    conn.clone().send_packed_command(&ping).await.is_ok()
}

/// Whether the current tokio runtime has its time driver on (tokio has no query for it: a
/// timer made without one panics, with its message on stderr, once per such runtime).
fn has_timers() -> bool {
    std::panic::catch_unwind(|| drop(tokio::time::sleep(Duration::ZERO))).is_ok()
}

/// `NAME WHAT numkeys keys... args...` (FCALL, EVALSHA, EVAL).
fn call_cmd(name: &str, what: &str, keys: &[String], args: &[String]) -> Cmd {
    let mut c = redis::cmd(name);
    c.arg(what).arg(keys.len()).arg(keys).arg(args);
    c
}

/// The call by EVAL of the scripts' text (after NOSCRIPT), for a request of the general entry.
fn eval_cmd(req: &Request) -> Option<Cmd> {
    match req {
        Request::Run { keys, args } => {
            Some(call_cmd("EVAL", super::scripts::EVAL_FORM, keys, args))
        }
        Request::One(_) => None,
    }
}

/// FUNCTION LOAD of the scripts' library.
fn load_cmd() -> Cmd {
    let mut load = redis::cmd("FUNCTION");
    load.arg("LOAD").arg(&scripts().library);
    load
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.code() == Some("NOSCRIPT") || e.to_string().contains("NOSCRIPT")
}

fn is_no_function(e: &redis::RedisError) -> bool {
    e.to_string().contains("Function not found")
}

fn classify(e: &redis::RedisError) -> Fail {
    if e.is_timeout() {
        Fail::Timeout
    } else if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
        Fail::Io(e.to_string())
    } else {
        let msg = match (e.code(), e.detail()) {
            (Some(c), Some(d)) => format!("{c} {d}"),
            _ => e.to_string(),
        };
        Fail::Server(msg)
    }
}

/// A URL query's value as a URL's user name or password: what a user name or password may
/// not hold unencoded, percent-encoded (an encoded `%XX` stays as it is).
fn userinfo_part(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The seed nodes' URLs of a cluster URL, `redis+cluster://[user:password@]h1:p1,h2:p2...`
/// (or `rediss+cluster://`): `redis://[user:password@]h1:p1`, ..., and how to name another
/// node so. The credentials are every node's (the client refuses seeds with different
/// passwords), as a Sentinel URL's are the master's and its replicas'.
fn cluster_nodes(url: &str) -> (NodeUrl, Vec<String>) {
    let (scheme, rest) = url.split_once("+cluster://").unwrap_or(("redis", url));
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let (credentials, authority) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let node = NodeUrl {
        scheme: scheme.to_string(),
        credentials: credentials.to_string(),
    };
    let seeds = authority
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|h| node.of(h))
        .collect();
    (node, seeds)
}

/// The client for `url` (nothing is connected yet).
fn target(url: &str, timeout: Duration) -> Result<Target, Error> {
    let bad = |why: String| Error::store(StoreErrorKind::Unsupported, redact(url), why);
    // A URL the client cannot read: the store string is wrong, as for the core's own checks.
    let invalid = |why: String| Error::InvalidOption {
        option: "store",
        value: redact(url),
        expected: format!("a Redis URL the client reads ({why})"),
    };
    if url.starts_with("rediss") && !cfg!(feature = "redis-tls") {
        return Err(bad(
            "rediss:// needs sluicegate built with the cargo feature redis-tls".into(),
        ));
    }
    let hosts = |rest: &str| -> Vec<String> {
        rest.split(',')
            .filter(|h| !h.is_empty())
            .map(str::to_string)
            .collect()
    };
    match StoreSpec::redis_topology(url) {
        Topology::Single => redis::Client::open(url)
            .map(Target::Single)
            .map_err(|e| invalid(e.to_string())),
        Topology::Cluster => {
            let (node, nodes) = cluster_nodes(url);
            if nodes.is_empty() {
                return Err(invalid("a cluster URL names at least one node".into()));
            }
            redis::cluster::ClusterClient::builder(nodes)
                .connection_timeout(timeout.max(Duration::from_secs(1)))
                .response_timeout(Duration::from_secs(3600))
                // No retries: a call whose outcome is unknown is never sent again.
                .retries(0)
                .build()
                .map(|c| Target::Cluster(c, node))
                .map_err(|e| invalid(e.to_string()))
        }
        Topology::Sentinel => {
            let rest = url.trim_start_matches("redis+sentinel://");
            let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
            let mut parts = rest.splitn(3, '/');
            // `user:password@` before the hosts are the master's (and its replicas'); the
            // sentinels' own, if they ask for any, are `sentinel_user` and `sentinel_pass`.
            let authority = parts.next().unwrap_or("");
            let (credentials, authority) = match authority.rfind('@') {
                Some(at) => (&authority[..=at], &authority[at + 1..]),
                None => ("", authority),
            };
            let option = |name: &str| {
                query
                    .split('&')
                    .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
            };
            let sentinel_credentials = match (option("sentinel_user"), option("sentinel_pass")) {
                (None, None) => String::new(),
                (user, pass) => format!(
                    "{}:{}@",
                    userinfo_part(user.unwrap_or("")),
                    userinfo_part(pass.unwrap_or(""))
                ),
            };
            let nodes: Vec<String> = hosts(authority)
                .into_iter()
                .map(|h| format!("redis://{sentinel_credentials}{h}"))
                .collect();
            let master = parts.next().filter(|m| !m.is_empty()).ok_or_else(|| {
                invalid("a sentinel URL is redis+sentinel://[USER:PASSWORD@]HOST:PORT[,...]/MASTER[/DB]".into())
            })?;
            let db = parts.next().filter(|d| !d.is_empty()).or(option("db"));
            let db: i64 = match db {
                Some(d) => d
                    .parse()
                    .map_err(|_| invalid(format!("bad database {d:?}")))?,
                None => 0,
            };
            // The master's handshake as the client reads it from a URL of its own (the user
            // name and password percent-decoded, `protocol`), for the host Sentinel names.
            let protocol = option("protocol").map_or(String::new(), |p| format!("?protocol={p}"));
            let first = nodes
                .first()
                .map_or("", |n| n.rsplit('@').next().unwrap_or(n));
            let first = first.trim_start_matches("redis://");
            let handshake = redis::IntoConnectionInfo::into_connection_info(format!(
                "redis://{credentials}{first}/{db}{protocol}"
            ))
            .map_err(|e| invalid(e.to_string()))?;
            let info = redis::sentinel::SentinelNodeConnectionInfo::default()
                .set_redis_connection_info(handshake.redis_settings().clone());
            redis::sentinel::SentinelClient::build(
                nodes,
                String::from(master), // `String` without TLS, `impl AsRef<str>` with it
                Some(info),
                redis::sentinel::SentinelServerType::Master,
            )
            .map(|c| Target::Sentinel(tokio::sync::Mutex::new(c)))
            .map_err(|e| invalid(e.to_string()))
        }
    }
}

impl Target {
    async fn connect(&self, limit: Duration) -> redis::RedisResult<Conn> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(limit))
            .set_response_timeout(None);
        match self {
            Target::Single(c) => c
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map(Conn::Single),
            Target::Cluster(c, _) => c.get_async_connection().await.map(Conn::Cluster),
            Target::Sentinel(s) => s
                .lock()
                .await
                .get_async_connection_with_config(&config)
                .await
                .map(Conn::Single),
        }
    }
}

/// The Redis Cluster slot of a key (CRC16/XMODEM of its hash tag, or of the whole key).
pub(crate) fn slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tagged = b.iter().position(|&c| c == b'{').and_then(|open| {
        let close = b[open + 1..].iter().position(|&c| c == b'}')?;
        (close > 0).then(|| &b[open + 1..open + 1 + close])
    });
    let mut crc: u16 = 0;
    for &byte in tagged.unwrap_or(b) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    #[test]
    fn slots_are_redis_cluster_slots() {
        // Values from the Redis Cluster specification and CLUSTER KEYSLOT.
        assert_eq!(super::slot("123456789"), 0x31C3);
        assert_eq!(super::slot("{user1000}.following"), super::slot("user1000"));
        assert_eq!(super::slot("foo{}{bar}"), super::slot("foo{}{bar}"));
        assert_eq!(super::slot("foo"), 12182);
    }

    /// A cluster URL's credentials go to every seed node, not the first alone (the client
    /// refuses seeds with different passwords, so such a URL could not be built).
    #[test]
    fn cluster_credentials_go_to_every_seed() {
        assert_eq!(
            super::cluster_nodes("redis+cluster://:hunter2@h1:7000,h2:7001?prefix=x").1,
            ["redis://:hunter2@h1:7000", "redis://:hunter2@h2:7001"]
        );
        assert_eq!(
            super::cluster_nodes("rediss+cluster://u:p%40w@h1:7000,h2:7001,h3:7002").1,
            [
                "rediss://u:p%40w@h1:7000",
                "rediss://u:p%40w@h2:7001",
                "rediss://u:p%40w@h3:7002"
            ]
        );
        assert_eq!(
            super::cluster_nodes("redis+cluster://h1:7000,h2:7001").1,
            ["redis://h1:7000", "redis://h2:7001"]
        );
        let timeout = std::time::Duration::from_millis(50);
        for url in [
            "redis+cluster://:hunter2@127.0.0.1:7000,127.0.0.1:7001",
            "redis+cluster://user:hunter2@127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
        ] {
            assert!(super::target(url, timeout).is_ok(), "{url}");
        }
        #[cfg(feature = "redis-tls")]
        assert!(super::target(
            "rediss+cluster://:hunter2@127.0.0.1:7000,127.0.0.1:7001",
            timeout
        )
        .is_ok());
    }
}
