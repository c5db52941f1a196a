//! The layer, its service and the service's response future.

use crate::fields::{self, Fields, FixedCell};
use crate::limit::{Key, Limit};
use crate::request::RequestRef;
use bytes::Bytes;
use core::future::Future;
use core::pin::Pin;
use core::task::{ready, Context, Poll};
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Request, Response, StatusCode};
use sluicegate::client::{Cidr, ClientKey, ClientResolver, Warning};
use sluicegate::http::{policies_headers, HeaderStyle};
use sluicegate::{Decision, Error};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tower_layer::Layer;
use tower_service::Service;

/// A predicate on a request: `true` skips every limit for it.
pub type SkipFn = dyn Fn(&RequestRef<'_>) -> bool + Send + Sync;
/// A predicate on a response's status: `true` gives the request's cost back.
pub type RefundFn = dyn Fn(StatusCode) -> bool + Send + Sync;
/// Where the client-identity warnings go (each kind once per layer).
pub type WarnFn = dyn Fn(&Warning) + Send + Sync;
/// Where a limit's errors go: a store that could not decide (Redis down under
/// `on_error=error`, a region that cannot be read), a key store at its bound, a Redis
/// store's outage (a notice: see [`ErrorEvent`]).
pub type ErrorFn = dyn Fn(&Error) + Send + Sync;
/// [`ErrorFn`] told what the error did ([`RateLimitLayer::on_error_event`]).
pub type ErrorEventFn = dyn Fn(&Error, ErrorEvent) + Send + Sync;
/// The response to a request the layer answers itself ([`RateLimitLayer::respond_with`]).
pub type RespondFn = dyn Fn(&Refusal<'_>) -> Response<Bytes> + Send + Sync;

/// What a limit's error handed to [`RateLimitLayer::on_error_event`] did to requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorEvent {
    /// A request the limit could not decide, answered with this status by the layer: `500
    /// Internal Server Error` (a store that could not decide it: Redis unreachable under
    /// `on_error=error`, a region that cannot be read) or `429 Too Many Requests` (a key store
    /// at its bound). One event per request.
    Answered(StatusCode),
    /// A notice that answered no request (feature `redis`): a limit's Redis store stopped
    /// answering, and until it answers again that limit's requests are decided by the store
    /// URL's `on_error` policy, as the error's text says (`local`, the default: each process
    /// alone with its share of the quota; `open`: admitted; `closed`: refused with `429`;
    /// `error`: each request `500`, and an [`Answered`](Self::Answered) event of its own).
    /// Once an outage.
    Outage,
    /// A notice that answered no request (feature `redis`): the store of an
    /// [`Outage`](Self::Outage) decides again (the error is that outage's notice). Once an
    /// outage, when a request of the limit finds the server answering (a look at most once a
    /// second). Only [`on_error_event`](RateLimitLayer::on_error_event) gets it;
    /// without a handler it is one line on standard error.
    Recovered,
}

/// The settings and limits every clone of a layer, and every service it makes, share.
#[derive(Clone)]
struct Shared {
    limits: Vec<Limit>,
    resolver: Arc<ClientResolver>,
    style: HeaderStyle,
    skip: Option<Arc<SkipFn>>,
    allow: Vec<Cidr>,
    refund_when: Option<Arc<RefundFn>>,
    on_warning: Option<Arc<WarnFn>>,
    on_error: Option<Arc<ErrorEventFn>>,
    respond: Option<Arc<RespondFn>>,
    /// The default `on_error`'s last report (seconds since `Instant` 0 of the layer, plus 1;
    /// 0: none yet), so that it says something at most once a second.
    reported: Arc<AtomicU64>,
    born: Instant,
    message: Bytes,
    switch: Switch,
    /// Each limit's fields that depend on its quota alone (index = the limit's).
    fixed: Vec<Arc<FixedCell>>,
    /// The outages of the limits' Redis stores (index = the limit's).
    #[cfg(feature = "redis")]
    watches: Arc<crate::watch::Watches>,
    /// [`RateLimitLayer::block_in_place`].
    #[cfg(feature = "redis")]
    in_place: bool,
}

/// The layer's on/off switch: shared by every clone of the layer and every service it made.
/// Off, requests pass untouched (no limit, no header): for tests, or an operator's toggle.
#[derive(Clone, Debug)]
pub struct Switch(Arc<AtomicBool>);

impl Switch {
    /// Turns limiting on or off.
    pub fn set_enabled(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed);
    }

    /// Whether limiting is on.
    pub fn is_enabled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A [`tower_layer::Layer`] that limits requests by one or more [`Limit`]s.
///
/// Clones share everything: the limits' buckets, the settings, the switch. axum clones a
/// layer's service for every connection (and tower for every `Buffer`/`Steer` branch); a
/// layer whose clones kept their own state would not limit at all (axum#2634), so here the
/// state lives behind one `Arc`.
///
/// A request takes `cost` from every limit in order, all or nothing: the first limit that
/// refuses it refunds those before and answers `429 Too Many Requests` with `Retry-After`
/// and the rate-limit fields of [`HeaderStyle`]; an admitted request's response carries the
/// same fields. Stacked layers are all or nothing too: a layer gives back what it took when
/// the response carries [`Refused`], which every 429 of a layer within carries.
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
}

impl core::fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limits", &self.shared.limits)
            .field("style", &self.shared.style)
            .field("enabled", &self.shared.switch.is_enabled())
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// A layer enforcing `limit`, clients resolved by the peer address alone (no proxy
    /// trusted), IETF rate-limit fields.
    pub fn new(limit: Limit) -> Self {
        Self {
            shared: Arc::new(Shared {
                #[cfg(feature = "redis")]
                watches: Arc::new(crate::watch::Watches::of(core::slice::from_ref(&limit))),
                #[cfg(feature = "redis")]
                in_place: false,
                limits: vec![limit],
                resolver: Arc::new(ClientResolver::default()),
                style: HeaderStyle::Ietf,
                skip: None,
                allow: Vec::new(),
                refund_when: None,
                on_warning: None,
                on_error: None,
                respond: None,
                reported: Arc::new(AtomicU64::new(0)),
                born: Instant::now(),
                message: Bytes::from_static(b"Too Many Requests\n"),
                switch: Switch(Arc::new(AtomicBool::new(true))),
                fixed: vec![Arc::default()],
            }),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Shared)) -> Self {
        f(Arc::make_mut(&mut self.shared));
        self
    }

    /// Adds a limit, taken after the others (several limits on one route: per client and
    /// per API key, burst and sustained).
    pub fn limit(self, limit: Limit) -> Self {
        self.edit(|s| {
            s.limits.push(limit);
            s.fixed.push(Arc::default());
            #[cfg(feature = "redis")]
            {
                s.watches = Arc::new(crate::watch::Watches::of(&s.limits));
            }
        })
    }

    /// How clients are identified (default: the peer address, IPv6 by /64, no proxy
    /// trusted). See `docs/CLIENT-IDENTITY.md`.
    pub fn client_resolver(self, resolver: ClientResolver) -> Self {
        self.edit(|s| s.resolver = Arc::new(resolver))
    }

    /// Which rate-limit fields responses carry (default [`HeaderStyle::Ietf`];
    /// [`HeaderStyle::None`] for `Retry-After` only).
    pub fn headers(self, style: HeaderStyle) -> Self {
        self.edit(|s| {
            s.style = style;
            s.fixed = s.limits.iter().map(|_| Arc::default()).collect();
        })
    }

    /// Exempts the requests `f` says yes to (health checks, an internal caller).
    pub fn skip<F>(self, f: F) -> Self
    where
        F: Fn(&RequestRef<'_>) -> bool + Send + Sync + 'static,
    {
        self.edit(|s| s.skip = Some(Arc::new(f)))
    }

    /// Exempts clients whose address is in one of these ranges.
    pub fn allow(self, ranges: impl IntoIterator<Item = Cidr>) -> Self {
        self.edit(|s| s.allow.extend(ranges))
    }

    /// Gives a request's cost back when its response's status satisfies `f` (an inner
    /// service's error counts as 500): `|s| s.is_server_error()` counts only the requests
    /// that did not fail; `|s| s.is_success()` counts only the failures (a login limit).
    pub fn refund_when<F>(self, f: F) -> Self
    where
        F: Fn(StatusCode) -> bool + Send + Sync + 'static,
    {
        self.edit(|s| s.refund_when = Some(Arc::new(f)))
    }

    /// Where client-identity warnings go (a misconfigured proxy setup; each kind once).
    /// Default: one line on standard error.
    pub fn on_warning<F>(self, f: F) -> Self
    where
        F: Fn(&Warning) + Send + Sync + 'static,
    {
        self.edit(|s| s.on_warning = Some(Arc::new(f)))
    }

    /// Where a limit's errors go: a store that could not decide a request (Redis unreachable
    /// under `on_error=error`, a region that cannot be read: the request is answered `500`),
    /// a key store at its bound (answered `429`, `Retry-After: 1`), and, with the feature
    /// `redis`, the notice that a limit's Redis store stopped answering (once an outage; it
    /// answers no request: they are decided by the URL's `on_error` policy meanwhile, as the
    /// error's text says). Default: one line on standard error, a failed request's at most
    /// once a second. Every error reaches `f`. To tell a failed request from an outage's
    /// notice (an error counter that should count only the requests answered `500`), use
    /// [`on_error_event`](Self::on_error_event) instead; the later of the two calls is the
    /// one that holds.
    pub fn on_error<F>(self, f: F) -> Self
    where
        F: Fn(&Error) + Send + Sync + 'static,
    {
        // An outage's end is not an error: `f` gets what failed, and the notice of an outage.
        self.edit(|s| {
            s.on_error = Some(Arc::new(move |e: &Error, event| {
                if event != ErrorEvent::Recovered {
                    f(e);
                }
            }))
        })
    }

    /// [`on_error`](Self::on_error), with what each error did: [`ErrorEvent::Answered`] and
    /// the status the layer answered the request with, or [`ErrorEvent::Outage`] for the
    /// notice of a Redis store that stopped answering, which answered no request, and
    /// [`ErrorEvent::Recovered`] when it answers again (the outage's error with it).
    ///
    /// ```
    /// use sluicegate_tower::{ErrorEvent, Limit, RateLimitLayer};
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use std::sync::Arc;
    /// let failed = Arc::new(AtomicU64::new(0));
    /// let count = failed.clone();
    /// let layer = RateLimitLayer::new(Limit::per_client("api", "10/s")?).on_error_event(
    ///     move |e, event| match event {
    ///         ErrorEvent::Answered(status) if status.is_server_error() => {
    ///             count.fetch_add(1, Ordering::Relaxed);
    ///         }
    ///         ErrorEvent::Outage => eprintln!("rate limits degraded: {e}"),
    ///         _ => {}
    ///     },
    /// );
    /// # Ok::<(), sluicegate::Error>(())
    /// ```
    pub fn on_error_event<F>(self, f: F) -> Self
    where
        F: Fn(&Error, ErrorEvent) + Send + Sync + 'static,
    {
        self.edit(|s| s.on_error = Some(Arc::new(f)))
    }

    /// The body of a 429 (default `Too Many Requests`, as text/plain; empty: no body).
    /// [`respond_with`](Self::respond_with) makes the whole response instead.
    pub fn message(self, text: impl Into<Bytes>) -> Self {
        let text = text.into();
        self.edit(|s| s.message = text)
    }

    /// Makes the response to every request the layer answers itself (a JSON body for an
    /// API, a page for a browser): a refusal by a limit (`429`), a new client refused by a
    /// key store at its bound (`429`), or a request no limit could decide (`500`, a store that
    /// cannot answer under `on_error=error`), as [`Refusal`] tells. The layer completes what
    /// `f` returns: a status left at `200 OK` becomes the refusal's own, the rate-limit fields
    /// and `Retry-After` are added where the response has no field of that name, and a
    /// limit's refusal carries [`Refused`] whatever its status, so that the layers around it
    /// give back what they took. Without it (the default), a `429`'s body is
    /// [`message`](Self::message) and a `500`'s a plain-text line.
    ///
    /// ```
    /// use sluicegate_tower::{Limit, RateLimitLayer};
    /// let layer = RateLimitLayer::new(Limit::per_client("api", "10/s")?).respond_with(|r| {
    ///     let body = format!(
    ///         r#"{{"error":"too_many_requests","retry_after":{}}}"#,
    ///         r.retry_after_secs().unwrap_or(0)
    ///     );
    ///     http::Response::builder()
    ///         .header("content-type", "application/json")
    ///         .body(body.into())
    ///         .unwrap()
    /// });
    /// # Ok::<(), sluicegate::Error>(())
    /// ```
    pub fn respond_with<F>(self, f: F) -> Self
    where
        F: Fn(&Refusal<'_>) -> Response<Bytes> + Send + Sync + 'static,
    {
        self.edit(|s| s.respond = Some(Arc::new(f)))
    }

    /// Lets a decision that waits for a Redis server (a round trip; the URL's `timeout` while
    /// it does not answer) run in tokio's `block_in_place` (default off; feature `redis`),
    /// so that the worker's other tasks move to another thread meanwhile and a slow server
    /// holds up the requests that wait for it, not every task of their worker. Only for
    /// services run on tokio's multi-thread runtime's workers and never inside a `LocalSet`,
    /// where tokio's `block_in_place` panics (a `current_thread` runtime is recognised, and
    /// the decision there waits in place). Limits in memory or in a region never wait.
    #[cfg(feature = "redis")]
    pub fn block_in_place(self, on: bool) -> Self {
        self.edit(|s| s.in_place = on)
    }

    /// Starts off (see [`switch`](Self::switch)).
    pub fn enabled(self, on: bool) -> Self {
        self.shared.switch.set_enabled(on);
        self
    }

    /// The on/off switch, shared by every clone.
    pub fn switch(&self) -> Switch {
        self.shared.switch.clone()
    }

    /// The limits, in order.
    pub fn limits(&self) -> &[Limit] {
        &self.shared.limits
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service of a [`RateLimitLayer`]; clones share its state.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> core::fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RateLimit").finish_non_exhaustive()
    }
}

/// The marker in the extensions of every `429` a [`RateLimit`] service answers. A layer
/// around it (a router's layer around a route's) that sees it on the response gives back
/// what it took for the request: stacked layers are all or nothing, as one layer's limits
/// are. A handler may put it on a response of its own to the same end (the layers around it
/// then count the request as never served); a plain `429` without it counts, unless
/// [`RateLimitLayer::refund_when`] says otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Refused;

/// What an admitted request leaves for its response: its fields, and what it took (given
/// back when a layer within refuses the request, or when `refund_when` says so).
pub struct Admitted {
    headers: Fields,
    shared: Arc<Shared>,
    taken: Taken,
    /// The IETF fields are lists, one item per policy: another layer's items stand beside
    /// these. Every other style's fields (and `Retry-After`) hold one value: a field another
    /// layer (one nearer the handler) already wrote stands alone.
    lists: bool,
}

/// A request's key for one limit, kept for a refund once the response is known (a client's
/// key is kept as it is: an address's is inline, no allocation).
enum HeldKey {
    Client(ClientKey),
    Bytes(Box<[u8]>),
}

impl HeldKey {
    fn as_bytes(&self) -> &[u8] {
        match self {
            HeldKey::Client(c) => c.as_bytes(),
            HeldKey::Bytes(b) => b,
        }
    }
}

impl From<Key<'_>> for HeldKey {
    fn from(k: Key<'_>) -> Self {
        match k {
            Key::Client(c) => HeldKey::Client(c.clone()),
            Key::Bytes(b) => HeldKey::Bytes(b.into()),
            Key::Owned(v) => HeldKey::Bytes(v.into_boxed_slice()),
        }
    }
}

/// The limits a request took from, each with its key (the first limit's alone without a
/// list: the common case of a layer of one limit).
enum Taken {
    One(HeldKey),
    Many(Vec<(usize, HeldKey)>),
}

impl Taken {
    fn for_each(&self, mut f: impl FnMut(usize, &HeldKey)) {
        match self {
            Taken::One(k) => f(0, k),
            Taken::Many(v) => v.iter().for_each(|(i, k)| f(*i, k)),
        }
    }
}

impl Admitted {
    /// Gives back what the request took when a layer within refused it (`refused`: its
    /// response carries [`Refused`]) or `refund_when` says so of `status`; after a refusal
    /// within, this layer's fields show what the refund left.
    fn settle(&mut self, status: StatusCode, refused: bool) {
        if !refused && !self.shared.refund_when.as_ref().is_some_and(|f| f(status)) {
            return;
        }
        let shared = self.shared.clone();
        shared.off_worker(|| {
            self.taken.for_each(|i, key| {
                let l = &shared.limits[i];
                let _ = l.limiter.refund(key.as_bytes(), l.cost);
            });
            if refused && !self.headers.is_empty() {
                if let Some(fields) = shared.fields_now(&self.taken) {
                    self.headers = fields;
                }
            }
        });
    }
}

/// A limiter's verdict on a request, before the inner service runs.
enum Verdict {
    Pass(Option<Admitted>),
    Refuse(Refusing),
}

/// Why a limit refused a request: its decision, or the status of what it could not do.
type Why = Result<Decision, (StatusCode, Error)>;

/// A request the layer answers itself: its status, its fields, and why.
struct Refusing {
    status: StatusCode,
    fields: Fields,
    /// The limit that refused it or could not decide it.
    limit: usize,
    /// The refusing limit's decision (a limit's refusal).
    decision: Option<Decision>,
    /// What the limit could not do (a key store at its bound, a store that cannot answer).
    error: Option<Box<Error>>,
}

impl Refusing {
    fn limited(limit: usize, decision: Decision, fields: Fields) -> Verdict {
        Verdict::Refuse(Refusing {
            status: StatusCode::TOO_MANY_REQUESTS,
            fields,
            limit,
            decision: Some(decision),
            error: None,
        })
    }

    fn failed(limit: usize, status: StatusCode, error: Error, fields: Fields) -> Verdict {
        Verdict::Refuse(Refusing {
            status,
            fields,
            limit,
            decision: None,
            error: Some(Box::new(error)),
        })
    }
}

/// A request the layer answers itself, as [`RateLimitLayer::respond_with`] sees it.
pub struct Refusal<'a> {
    request: &'a RequestRef<'a>,
    refusing: &'a Refusing,
    limit: &'a Limit,
}

impl<'a> Refusal<'a> {
    /// The request.
    pub fn request(&self) -> &'a RequestRef<'a> {
        self.request
    }

    /// The status the layer answers with: `429 Too Many Requests` (a limit's refusal, or a
    /// key store at its bound) or `500 Internal Server Error` (no decision could be made).
    pub fn status(&self) -> StatusCode {
        self.refusing.status
    }

    /// The limit that refused the request, or could not decide it.
    pub fn limit(&self) -> &'a Limit {
        self.limit
    }

    /// The refusing limit's decision: what remains, when to retry (`None` when the limit
    /// could not decide: see [`error`](Self::error)).
    pub fn decision(&self) -> Option<&'a Decision> {
        self.refusing.decision.as_ref()
    }

    /// Why the limit could not decide: [`Error::KeyStoreFull`] (a `429`) or a store's error
    /// (a `500`); `None` for a limit's refusal.
    pub fn error(&self) -> Option<&'a Error> {
        self.refusing.error.as_deref()
    }

    /// The `Retry-After` the layer sends, in seconds: the decision's wait, or 1 for a key
    /// store at its bound; `None` with a `500`.
    pub fn retry_after_secs(&self) -> Option<u64> {
        match (&self.refusing.decision, self.refusing.status) {
            (Some(d), _) => d.retry_after_header(),
            (None, StatusCode::TOO_MANY_REQUESTS) => Some(1),
            _ => None,
        }
    }
}

impl core::fmt::Debug for Refusal<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Refusal")
            .field("status", &self.refusing.status)
            .field("limit", &self.limit.name())
            .field("decision", &self.refusing.decision)
            .field("error", &self.refusing.error)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Runs `f`, which calls the limits' stores: with [`RateLimitLayer::block_in_place`] and
    /// a limit on Redis, on tokio's multi-thread runtime, in `block_in_place`; else as it is.
    #[inline]
    fn off_worker<T>(&self, f: impl FnOnce() -> T) -> T {
        #[cfg(feature = "redis")]
        if self.in_place && self.watches.remote() {
            use tokio::runtime::{Handle, RuntimeFlavor};
            if Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread)
            {
                return tokio::task::block_in_place(f);
            }
        }
        f()
    }

    fn judge(self: &Arc<Self>, req: &RequestRef<'_>) -> Verdict {
        if let Some(skip) = &self.skip {
            if skip(req) {
                return Verdict::Pass(None);
            }
        }
        if !self.allow.is_empty() {
            let net = req.client().network();
            if net.is_some_and(|(ip, _)| self.allow.iter().any(|c| c.contains(ip))) {
                self.warn(req);
                return Verdict::Pass(None);
            }
        }
        if self.limits.len() == 1 {
            return self.judge_one(req);
        }
        // Keys are kept (copied) for the refunds: a later limit's refusal, or the response's
        // status.
        let mut parts: Vec<(usize, Decision)> = Vec::with_capacity(self.limits.len());
        let mut taken: Vec<(usize, HeldKey)> = Vec::new();
        // The refusing limit, and its decision or error.
        let mut refused: Option<(usize, Why)> = None;
        for (i, l) in self.limits.iter().enumerate() {
            let Some(key) = l.key.key(req) else {
                continue;
            };
            let bytes = key.as_bytes();
            let decided = over_capacity(l, l.limiter.try_acquire(bytes, l.cost));
            self.watch(i);
            match decided {
                Ok(d) => {
                    if let Some(wait) = queued(&d) {
                        // A queue slot with a wait: given back, and the request refused.
                        let _ = l.limiter.refund(bytes, l.cost);
                        parts.push((i, wait));
                        refused = Some((i, Ok(wait)));
                        break;
                    }
                    parts.push((i, d));
                    if !d.allowed() {
                        refused = Some((i, Ok(d)));
                        break;
                    }
                    taken.push((i, key.into()));
                }
                Err(e) => {
                    let status = status_of(&e);
                    self.report(&e, ErrorEvent::Answered(status));
                    refused = Some((i, Err((status, e))));
                    break;
                }
            }
        }
        self.warn(req);
        let Some((refusing, why)) = refused else {
            if taken.is_empty() {
                // No limit had a key for the request: nothing taken, no fields.
                return Verdict::Pass(None);
            }
            return Verdict::Pass(Some(Admitted {
                headers: self.render(&parts),
                shared: self.clone(),
                taken: Taken::Many(taken),
                lists: self.style == HeaderStyle::Ietf,
            }));
        };
        for (i, key) in &taken {
            let l = &self.limits[*i];
            let _ = l.limiter.refund(key.as_bytes(), l.cost);
            // The fields report what the refund left, not what the admission had.
            if let (Ok(now), Some(part)) = (
                l.limiter.peek(key.as_bytes()),
                parts.iter_mut().find(|(j, _)| j == i),
            ) {
                part.1 = now;
            }
        }
        match why {
            Ok(d) => {
                let fields = self.render(&parts);
                Refusing::limited(
                    refusing,
                    d,
                    self.refused_fields(StatusCode::TOO_MANY_REQUESTS, fields),
                )
            }
            Err((status, e)) => Refusing::failed(
                refusing,
                status,
                e,
                self.refused_fields(status, self.render(&parts)),
            ),
        }
    }

    /// [`judge`](Self::judge) with one limit: no list of decisions, and its fixed fields
    /// reused.
    fn judge_one(self: &Arc<Self>, req: &RequestRef<'_>) -> Verdict {
        let l = &self.limits[0];
        let Some(key) = l.key.key(req) else {
            self.warn(req);
            return Verdict::Pass(None);
        };
        let bytes = key.as_bytes();
        let decided = over_capacity(l, l.limiter.try_acquire(bytes, l.cost));
        self.watch(0);
        self.warn(req);
        let mut fields = Fields::default();
        match decided {
            Ok(d) => {
                if let Some(wait) = queued(&d) {
                    // A queue slot with a wait: given back, and the request refused.
                    let _ = l.limiter.refund(bytes, l.cost);
                    fields::write(&wait, self.style, &l.name, &self.fixed[0], &mut fields);
                    return Refusing::limited(0, wait, fields);
                }
                fields::write(&d, self.style, &l.name, &self.fixed[0], &mut fields);
                if !d.allowed() {
                    return Refusing::limited(0, d, fields);
                }
                Verdict::Pass(Some(Admitted {
                    headers: fields,
                    shared: self.clone(),
                    taken: Taken::One(key.into()),
                    lists: self.style == HeaderStyle::Ietf,
                }))
            }
            Err(e) => {
                let status = status_of(&e);
                self.report(&e, ErrorEvent::Answered(status));
                let fields = self.refused_fields(status, fields);
                Refusing::failed(0, status, e, fields)
            }
        }
    }

    /// A refusal's fields: a key store at its bound gave no decision to say when to retry,
    /// so in a second.
    fn refused_fields(&self, status: StatusCode, mut h: Fields) -> Fields {
        if status != StatusCode::TOO_MANY_REQUESTS {
            // A limit that could not decide: no rate-limit figures (the other limits' would
            // describe a refusal that is not one), as with one limit.
            return Fields::default();
        }
        if !h.has(&RETRY_AFTER) {
            h.push(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        h
    }

    /// The fields of the limits a request took from, as they stand now (after a refund);
    /// None if a store cannot say.
    fn fields_now(&self, taken: &Taken) -> Option<Fields> {
        match taken {
            Taken::One(key) => {
                let l = &self.limits[0];
                let d = l.limiter.peek(key.as_bytes()).ok()?;
                let mut fields = Fields::default();
                fields::write(&d, self.style, &l.name, &self.fixed[0], &mut fields);
                Some(fields)
            }
            Taken::Many(v) => {
                let mut parts = Vec::with_capacity(v.len());
                for (i, key) in v {
                    parts.push((*i, self.limits[*i].limiter.peek(key.as_bytes()).ok()?));
                }
                Some(self.render(&parts))
            }
        }
    }

    /// The rate-limit fields of several limits' decisions (the core's rendering: every
    /// policy listed in the IETF fields, the tightest in the single-policy styles).
    fn render(&self, parts: &[(usize, Decision)]) -> Fields {
        let mut out = Fields::default();
        let Some(combined) = parts
            .iter()
            .map(|p| p.1)
            .find(|d| !d.allowed())
            .or_else(|| parts.iter().map(|p| p.1).min_by_key(Decision::remaining))
        else {
            return out;
        };
        let named: Vec<(&str, Decision)> = parts
            .iter()
            .map(|(i, d)| (&*self.limits[*i].name, *d))
            .collect();
        for (n, v) in fields::from_core(policies_headers(&combined, &named, self.style)) {
            out.push(n, v);
        }
        out
    }

    /// Looks at limit `i`'s Redis store, at most once a second (feature `redis`): an outage
    /// that begins goes to `on_error`, its end to standard error.
    #[inline]
    fn watch(&self, _i: usize) {
        #[cfg(feature = "redis")]
        if let Some(event) = self.watches.tick(_i, &self.limits[_i]) {
            match event {
                crate::watch::Event::Failing(e) => self.report(&e, ErrorEvent::Outage),
                crate::watch::Event::Recovered(e) => self.report(&e, ErrorEvent::Recovered),
            }
        }
    }

    /// A limit's error, to `on_error` (default: standard error; a failed request's at most
    /// once a second, an outage's notices, which come once an outage, always).
    #[cold]
    fn report(&self, e: &Error, event: ErrorEvent) {
        if let Some(f) = &self.on_error {
            return f(e, event);
        }
        if let ErrorEvent::Answered(_) = event {
            let now = self.born.elapsed().as_secs() + 1;
            let last = self.reported.load(Ordering::Relaxed);
            if last == now
                || self
                    .reported
                    .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                return;
            }
        }
        crate::say!("{}", said(e, event));
    }

    fn warn(&self, req: &RequestRef<'_>) {
        let Some(w) = req.resolved().and_then(|r| r.warning()) else {
            return;
        };
        match &self.on_warning {
            Some(f) => f(w),
            None => crate::say!("sluicegate: warning [{}]: {w}", w.code()),
        }
    }
}

/// The status of a request the limiter could not decide: a key store at its bound refuses
/// new keys (429, retry in a second); anything else is a misconfigured limit (500).
/// A request whose cost no bucket of `l`'s quota holds (its quota lowered live below the
/// limit's fixed cost, which [`Limit::cost`] checked when it was set): a refusal that says to
/// come back after the policy's window, as the other adapters answer, not a server error.
fn over_capacity(l: &Limit, r: Result<Decision, Error>) -> Result<Decision, Error> {
    match r {
        Err(Error::InsufficientCapacity { capacity, .. }) => {
            let window = l.limiter.quota().window_secs();
            Ok(Decision::from_figures(
                false,
                capacity,
                0,
                window.saturating_mul(1_000_000_000),
                0,
                window,
            ))
        }
        r => r,
    }
}

/// The default `on_error`'s line for `e`: what it did to requests, which an outage's notice
/// leaves to the store's policy (its text says which); "answered" only of a request that was.
fn said(e: &Error, event: ErrorEvent) -> String {
    match event {
        ErrorEvent::Answered(status) => format!(
            "sluicegate: a limit could not decide a request, answered {}: {e} (said at most \
             once a second; RateLimitLayer::on_error to handle it)",
            status.as_u16()
        ),
        ErrorEvent::Outage => {
            format!("sluicegate: {e} (said once an outage; RateLimitLayer::on_error to handle it)")
        }
        ErrorEvent::Recovered => match e {
            Error::Store { store, .. } => {
                format!("sluicegate: the Redis store {store} decides again")
            }
            e => format!("sluicegate: the store decides again after: {e}"),
        },
    }
}

fn status_of(e: &Error) -> StatusCode {
    match e {
        Error::KeyStoreFull { .. } => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: From<Bytes>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        if !self.shared.switch.is_enabled() {
            return ResponseFuture::Passed {
                inner: self.inner.call(req),
                after: None,
            };
        }
        let shared = &self.shared;
        let request = RequestRef::new(&req, &shared.resolver);
        let verdict = shared.off_worker(|| shared.judge(&request));
        match verdict {
            Verdict::Pass(after) => {
                drop(request);
                ResponseFuture::Passed {
                    inner: self.inner.call(req),
                    after,
                }
            }
            Verdict::Refuse(refusing) => ResponseFuture::Refused {
                response: Some(Box::new(shared.refusal(&request, refusing))),
            },
        }
    }
}

impl Shared {
    /// The response to a request the layer answers itself: [`RateLimitLayer::respond_with`]'s,
    /// completed, or the default one.
    #[cold]
    fn refusal<B: From<Bytes>>(&self, request: &RequestRef<'_>, refusing: Refusing) -> Response<B> {
        let status = refusing.status;
        let mut resp = match &self.respond {
            Some(f) => {
                let made = f(&Refusal {
                    request,
                    refusing: &refusing,
                    limit: &self.limits[refusing.limit],
                });
                let mut resp = made.map(B::from);
                if resp.status() == StatusCode::OK {
                    *resp.status_mut() = status;
                }
                resp
            }
            None => {
                // A limit that could not decide is the server's error, not the client's limit.
                let body = if status == StatusCode::TOO_MANY_REQUESTS {
                    self.message.clone()
                } else {
                    Bytes::from_static(b"Internal Server Error\n")
                };
                let texts = !body.is_empty();
                let mut resp = Response::new(B::from(body));
                *resp.status_mut() = status;
                if texts {
                    resp.headers_mut().insert(
                        CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; charset=utf-8"),
                    );
                }
                resp
            }
        };
        if status == StatusCode::TOO_MANY_REQUESTS {
            resp.extensions_mut().insert(Refused);
        }
        // A field the response has already stands; the layer's several of one name (the IETF
        // fields of several limits) all go.
        let h = resp.headers_mut();
        for (n, v) in refusing.fields.absent_from(h) {
            h.append(n, v);
        }
        resp
    }
}

pin_project_lite::pin_project! {
    /// The future of a [`RateLimit`] service's response.
    #[project = FutProj]
    pub enum ResponseFuture<F, B> {
        /// Refused before the inner service ran (boxed: the future of an admitted request,
        /// which is moved on every request, stays small).
        Refused { response: Option<Box<Response<B>>> },
        /// The inner service's response, to which the fields are added.
        Passed { #[pin] inner: F, after: Option<Admitted> },
    }
}

impl<F, B, E> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            FutProj::Refused { response } => {
                Poll::Ready(Ok(*response.take().expect("polled after completion")))
            }
            FutProj::Passed { inner, after } => {
                let mut out = ready!(inner.poll(cx));
                if let Some(mut after) = after.take() {
                    let (status, refused) = match &out {
                        Ok(r) => (r.status(), r.extensions().get::<Refused>().is_some()),
                        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, false),
                    };
                    after.settle(status, refused);
                    if let Ok(resp) = &mut out {
                        let h = resp.headers_mut();
                        for (n, v) in after.headers {
                            if after.lists && n != RETRY_AFTER {
                                h.append(n, v);
                            } else if !h.contains_key(&n) {
                                h.insert(n, v);
                            }
                        }
                    }
                }
                Poll::Ready(out)
            }
        }
    }
}

/// A leaky queue's admission with a wait, as the refusal this layer answers instead. The
/// queue admits a request for later (the caller waits first, as `acquire` does); a layer has
/// no timer to wait with, so it gives the slot back and answers 429 with `Retry-After` the
/// wait. Every other admission carries no wait (a shadow rejection's is not one). Its
/// remaining count is 0: the queue's own (the requests it would still take for later, each
/// with a wait) counts requests this layer refuses, and a client that read `r=2` on a 429
/// would retry at once and be refused again; what it can use now is nothing until the wait
/// has passed, which `Retry-After` and the fields' reset say.
fn queued(d: &Decision) -> Option<Decision> {
    (d.allowed() && !d.shadow_rejected() && d.retry_after_nanos() > 0).then(|| {
        Decision::from_figures(
            false,
            d.limit(),
            0,
            d.retry_after_nanos(),
            d.reset_after_nanos(),
            d.window_secs(),
        )
    })
}

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::*;

    /// The default line for a Redis outage's notice said "answered 500" of requests its
    /// store's policy decided (every one a 200 under `local` or `open`): it now says what the
    /// policy does, and "answered" only of a request that was answered so.
    #[test]
    fn an_outage_notice_says_what_the_policy_does_not_a_status() {
        for (url, does) in [
            (
                "redis://cache:6379/0",
                "on_error=local, the default policy (each process alone",
            ),
            (
                "redis://cache:6379/0?on_error=open",
                "on_error=open policy (every request admitted",
            ),
            (
                "redis://cache:6379/0?on_error=closed",
                "on_error=closed policy (every request refused",
            ),
        ] {
            let line = said(&crate::watch::outage(url), ErrorEvent::Outage);
            assert!(!line.contains("answered"), "{line}");
            assert!(!line.contains("500"), "{line}");
            assert!(
                line.contains("does not answer") && line.contains(does),
                "{line}"
            );
        }
        let e = crate::watch::outage("redis://cache:6379/0?on_error=error");
        let line = said(&e, ErrorEvent::Outage);
        assert!(
            line.contains("every request an error (500)") && !line.contains("answered"),
            "{line}"
        );
        // A request that really failed says so.
        let line = said(&e, ErrorEvent::Answered(StatusCode::INTERNAL_SERVER_ERROR));
        assert!(
            line.contains("could not decide a request, answered 500"),
            "{line}"
        );
        // The end of an outage names the store, and no error.
        let line = said(&e, ErrorEvent::Recovered);
        assert_eq!(
            line,
            "sluicegate: the Redis store redis://cache:6379/0?on_error=error decides again"
        );
        // The policy in any case, as the core reads it.
        let line = said(
            &crate::watch::outage("redis://cache:6379/0?on_error=Closed"),
            ErrorEvent::Outage,
        );
        assert!(
            line.contains("on_error=closed policy (every request refused"),
            "{line}"
        );
    }

    /// `on_error` (errors only) is not told of an outage's end; `on_error_event` is.
    #[test]
    fn only_on_error_event_hears_of_a_recovery() {
        use std::sync::Mutex;
        let e = crate::watch::outage("redis://cache:6379/0");
        let heard = Arc::new(Mutex::new(Vec::new()));
        let h = heard.clone();
        let layer = RateLimitLayer::new(Limit::per_client("api", "10/s").unwrap())
            .on_error(move |e| h.lock().unwrap().push(e.code()));
        let f = layer.shared.on_error.clone().unwrap();
        f(&e, ErrorEvent::Outage);
        f(&e, ErrorEvent::Recovered);
        assert_eq!(*heard.lock().unwrap(), ["store_unavailable"]);
        let h = heard.clone();
        let layer = layer.on_error_event(move |_, ev| {
            h.lock().unwrap().push(if ev == ErrorEvent::Recovered {
                "recovered"
            } else {
                "other"
            })
        });
        let f = layer.shared.on_error.clone().unwrap();
        f(&e, ErrorEvent::Recovered);
        assert_eq!(*heard.lock().unwrap(), ["store_unavailable", "recovered"]);
    }
}
