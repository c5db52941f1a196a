//! The layer through axum's own machinery: a `Router` called with tower's `oneshot`, each
//! request carrying the `ConnectInfo` that `into_make_service_with_connect_info` would give it.

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response, StatusCode};
use axum::routing::get;
use axum::Router;
use http_body_util::BodyExt;
use sluicegate::client::{ClientResolver, Warning};
use sluicegate::http::HeaderStyle;
use sluicegate::{AnyClock, Error, KeyedLimiter, ManualClock};
use sluicegate_tower::{KeyBy, Limit, RateLimitLayer};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tower::{Layer, Service, ServiceExt};

fn limit(name: &str, quota: &str, key: KeyBy, clock: &ManualClock) -> Limit {
    let l = KeyedLimiter::builder(quota.parse().unwrap())
        .clock(AnyClock::Manual(clock.clone()))
        .build()
        .unwrap();
    Limit::new(name, l, key)
}

fn req(peer: &str, path: &str) -> Request<Body> {
    let mut r = Request::builder().uri(path).body(Body::empty()).unwrap();
    let addr: SocketAddr = peer.parse().unwrap();
    r.extensions_mut().insert(ConnectInfo(addr));
    r
}

fn with_xff(mut r: Request<Body>, xff: &str) -> Request<Body> {
    r.headers_mut()
        .insert("x-forwarded-for", xff.parse().unwrap());
    r
}

async fn send(app: &Router, r: Request<Body>) -> Response<Body> {
    app.clone().oneshot(r).await.unwrap()
}

async fn status(app: &Router, r: Request<Body>) -> StatusCode {
    send(app, r).await.status()
}

fn header<'a>(r: &'a Response<Body>, name: &str) -> Option<&'a str> {
    r.headers().get(name).map(|v| v.to_str().unwrap())
}

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/health", get(|| async { "ok" }))
        .route(
            "/fail",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
        )
        .layer(layer)
}

const PEER: &str = "203.0.113.7:52100";

#[tokio::test]
async fn admits_then_refuses_with_the_rate_limit_fields() {
    let clock = ManualClock::new(0);
    let app = app(RateLimitLayer::new(limit(
        "api",
        "1/s; burst=2",
        KeyBy::Client,
        &clock,
    )));
    let first = send(&app, req(PEER, "/")).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(header(&first, "ratelimit-policy"), Some("\"api\";q=2;w=2"));
    assert_eq!(header(&first, "ratelimit"), Some("\"api\";r=1;t=1"));
    assert_eq!(header(&first, "retry-after"), None);
    assert_eq!(
        first.into_body().collect().await.unwrap().to_bytes(),
        "hello"
    );
    assert_eq!(status(&app, req(PEER, "/")).await, StatusCode::OK);
    let refused = send(&app, req(PEER, "/")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after"), Some("1"));
    assert_eq!(header(&refused, "ratelimit"), Some("\"api\";r=0;t=1"));
    assert_eq!(
        header(&refused, "content-type"),
        Some("text/plain; charset=utf-8")
    );
    let body = refused.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "Too Many Requests\n");
    // Another client has its own bucket; time refills this one.
    assert_eq!(
        status(&app, req("198.51.100.1:1", "/")).await,
        StatusCode::OK
    );
    clock.advance_nanos(1_000_000_000);
    assert_eq!(status(&app, req(PEER, "/")).await, StatusCode::OK);
    assert_eq!(
        status(&app, req(PEER, "/")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn every_clone_shares_the_buckets() {
    let clock = ManualClock::new(0);
    let layer = RateLimitLayer::new(limit("api", "1/s; burst=3", KeyBy::Client, &clock));
    // Three routers from clones of the layer, and clones of one service: one limit.
    let a = app(layer.clone());
    let b = app(layer.clone());
    let mut svc = layer.layer(tower::service_fn(|_r: Request<Body>| async {
        Ok::<_, std::convert::Infallible>(Response::new(Body::empty()))
    }));
    let mut svc2 = svc.clone();
    assert_eq!(status(&a, req(PEER, "/")).await, StatusCode::OK);
    assert_eq!(status(&b, req(PEER, "/")).await, StatusCode::OK);
    let r = svc
        .ready()
        .await
        .unwrap()
        .call(req(PEER, "/"))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = svc2
        .ready()
        .await
        .unwrap()
        .call(req(PEER, "/"))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        status(&a, req(PEER, "/")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn several_limits_are_all_or_nothing() {
    let clock = ManualClock::new(0);
    let per_client = limit("client", "1/s; burst=5", KeyBy::Client, &clock);
    let global = limit("global", "1/s; burst=2", KeyBy::Global, &clock);
    let app = app(RateLimitLayer::new(per_client.clone()).limit(global.clone()));
    let ok = send(&app, req(PEER, "/")).await;
    assert_eq!(
        header(&ok, "ratelimit-policy"),
        Some("\"client\";q=5;w=5, \"global\";q=2;w=2")
    );
    assert_eq!(
        header(&ok, "ratelimit"),
        Some("\"client\";r=4;t=1, \"global\";r=1;t=1")
    );
    assert_eq!(
        status(&app, req("198.51.100.1:1", "/")).await,
        StatusCode::OK
    );
    // The global bucket refuses a third client: its per-client cost is given back.
    let refused = send(&app, req("198.51.100.2:1", "/")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(header(&refused, "retry-after").is_some());
    // The per-client limit is reported as its refund left it: full again.
    assert_eq!(
        header(&refused, "ratelimit"),
        Some("\"client\";r=5;t=0, \"global\";r=0;t=1")
    );
    assert_eq!(per_client.get(b"198.51.100.2").unwrap().remaining(), 5);
    assert_eq!(per_client.get(b"203.0.113.7").unwrap().remaining(), 4);
    // Single-policy styles render the tightest limit.
    let legacy = app_with_style(&clock, HeaderStyle::Legacy);
    let r = send(&legacy, req(PEER, "/")).await;
    assert_eq!(header(&r, "x-ratelimit-limit"), Some("2"));
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("1"));
}

fn app_with_style(clock: &ManualClock, style: HeaderStyle) -> Router {
    let per_client = limit("client", "1/s; burst=5", KeyBy::Client, clock);
    let global = limit("global", "1/s; burst=2", KeyBy::Global, clock);
    app(RateLimitLayer::new(per_client).limit(global).headers(style))
}

#[tokio::test]
async fn a_limit_shared_across_routes_and_a_quota_per_route() {
    let clock = ManualClock::new(0);
    let shared = limit("shared", "1/s; burst=2", KeyBy::Client, &clock);
    let own = limit("search", "1/s; burst=1", KeyBy::Client, &clock);
    let app = Router::new()
        .route(
            "/a",
            get(|| async { "a" }).layer(RateLimitLayer::new(shared.clone())),
        )
        .route(
            "/b",
            get(|| async { "b" }).layer(RateLimitLayer::new(shared.clone())),
        )
        .route(
            "/search",
            get(|| async { "s" }).layer(RateLimitLayer::new(own)),
        )
        .route("/free", get(|| async { "f" }));
    assert_eq!(status(&app, req(PEER, "/a")).await, StatusCode::OK);
    assert_eq!(status(&app, req(PEER, "/b")).await, StatusCode::OK);
    assert_eq!(
        status(&app, req(PEER, "/a")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        status(&app, req(PEER, "/b")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status(&app, req(PEER, "/search")).await, StatusCode::OK);
    assert_eq!(
        status(&app, req(PEER, "/search")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    for _ in 0..5 {
        assert_eq!(status(&app, req(PEER, "/free")).await, StatusCode::OK);
    }
    // Admin: reset a client's bucket.
    assert!(shared.reset(b"203.0.113.7").unwrap());
    assert_eq!(status(&app, req(PEER, "/a")).await, StatusCode::OK);
}

#[tokio::test]
async fn skip_allowlist_and_the_off_switch() {
    let clock = ManualClock::new(0);
    let layer = RateLimitLayer::new(limit("api", "1/s; burst=1", KeyBy::Client, &clock))
        .skip(|r| r.uri().path() == "/health")
        .allow(["10.0.0.0/8".parse().unwrap()]);
    let app = app(layer.clone());
    for _ in 0..3 {
        let r = send(&app, req(PEER, "/health")).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(header(&r, "ratelimit"), None, "skipped: no fields");
        assert_eq!(status(&app, req("10.1.2.3:9", "/")).await, StatusCode::OK);
    }
    assert_eq!(status(&app, req(PEER, "/")).await, StatusCode::OK);
    assert_eq!(
        status(&app, req(PEER, "/")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Off through any clone's switch: everything passes, untouched.
    layer.switch().set_enabled(false);
    for _ in 0..3 {
        let r = send(&app, req(PEER, "/")).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(header(&r, "ratelimit"), None);
    }
    app_switch_back(&layer, &app).await;
    let off =
        RateLimitLayer::new(limit("api", "1/s; burst=1", KeyBy::Client, &clock)).enabled(false);
    assert!(!off.switch().is_enabled());
}

async fn app_switch_back(layer: &RateLimitLayer, app: &Router) {
    layer.clone().switch().set_enabled(true);
    assert_eq!(
        status(app, req(PEER, "/")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn refunds_by_response_status() {
    let clock = ManualClock::new(0);
    let l = limit("api", "1/s; burst=2", KeyBy::Client, &clock);
    let app = app(RateLimitLayer::new(l.clone()).refund_when(|s| s.is_server_error()));
    for _ in 0..10 {
        assert_eq!(
            status(&app, req(PEER, "/fail")).await,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
    assert_eq!(l.get(b"203.0.113.7").unwrap().remaining(), 2);
    assert_eq!(status(&app, req(PEER, "/")).await, StatusCode::OK);
    assert_eq!(status(&app, req(PEER, "/")).await, StatusCode::OK);
    assert_eq!(
        status(&app, req(PEER, "/fail")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn header_and_custom_keys() {
    let clock = ManualClock::new(0);
    let by_key = limit(
        "key",
        "1/s; burst=1",
        KeyBy::Header("x-api-key".parse().unwrap()),
        &clock,
    );
    let by_path = Limit::new(
        "path",
        KeyedLimiter::builder("1/s; burst=2".parse().unwrap())
            .clock(AnyClock::Manual(clock.clone()))
            .build()
            .unwrap(),
        KeyBy::Custom(Arc::new(|r| {
            (r.uri().path() != "/health").then(|| r.uri().path().as_bytes().to_vec())
        })),
    );
    let app = app(RateLimitLayer::new(by_key).limit(by_path));
    let keyed = |k: &str| {
        let mut r = req(PEER, "/");
        r.headers_mut().insert("x-api-key", k.parse().unwrap());
        r
    };
    assert_eq!(status(&app, keyed("alpha")).await, StatusCode::OK);
    assert_eq!(
        status(&app, keyed("alpha")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The path's bucket (burst 2) paid only for the admitted request: one left.
    assert_eq!(status(&app, keyed("beta")).await, StatusCode::OK);
    assert_eq!(
        status(&app, keyed("gamma")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Without the header and on a path the function exempts: no limit applies.
    assert_eq!(status(&app, req(PEER, "/health")).await, StatusCode::OK);
    assert_eq!(status(&app, req(PEER, "/health")).await, StatusCode::OK);
}

#[tokio::test]
async fn forged_forwarding_headers_without_a_trusted_proxy_change_nothing() {
    let clock = ManualClock::new(0);
    let app = app(RateLimitLayer::new(limit(
        "api",
        "1/s; burst=2",
        KeyBy::Client,
        &clock,
    )));
    for forged in ["1.1.1.1", "2.2.2.2, 3.3.3.3"] {
        assert_eq!(
            status(&app, with_xff(req(PEER, "/"), forged)).await,
            StatusCode::OK
        );
    }
    for forged in ["4.4.4.4", "5.5.5.5"] {
        let r = with_xff(req(PEER, "/"), forged);
        assert_eq!(
            status(&app, r).await,
            StatusCode::TOO_MANY_REQUESTS,
            "{forged}"
        );
    }
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_right_hop_is_the_client() {
    let clock = ManualClock::new(0);
    let l = limit("api", "1/s; burst=1", KeyBy::Client, &clock);
    let resolver = ClientResolver::builder()
        .trusted_proxies("10.0.0.0/8".parse().unwrap())
        .build()
        .unwrap();
    let app = app(RateLimitLayer::new(l.clone()).client_resolver(resolver));
    let proxy = "10.0.0.2:40000";
    // Two clients behind the proxy: two buckets.
    assert_eq!(
        status(&app, with_xff(req(proxy, "/"), "198.51.100.1")).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, with_xff(req(proxy, "/"), "198.51.100.2")).await,
        StatusCode::OK
    );
    // The first client forges a hop to its left: its proxy appended the real one.
    let forged = with_xff(req(proxy, "/"), "6.6.6.6, 198.51.100.1");
    assert_eq!(status(&app, forged).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(l.get(b"6.6.6.6").unwrap().remaining(), 1, "never charged");
    // A client reaching the app directly cannot use the header at all.
    let direct = with_xff(req("198.51.100.9:1", "/"), "198.51.100.3");
    assert_eq!(status(&app, direct).await, StatusCode::OK);
    assert_eq!(l.get(b"198.51.100.3").unwrap().remaining(), 1);
}

#[tokio::test]
async fn one_ipv6_block_is_one_client_and_mapped_ipv4_is_ipv4() {
    let clock = ManualClock::new(0);
    let app = app(RateLimitLayer::new(limit(
        "api",
        "1/s; burst=3",
        KeyBy::Client,
        &clock,
    )));
    let mut admitted = 0;
    for i in 0..(1u32 << 16) {
        let peer = format!("[2001:db8:1:2:{:x}:{:x}::1]:443", i >> 8, i & 0xff);
        if status(&app, req(&peer, "/")).await == StatusCode::OK {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 3, "2^16 addresses of one /64 share one bucket");
    assert_eq!(
        status(&app, req("[2001:db8:1:3::1]:1", "/")).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, req("[::ffff:192.0.2.1]:1", "/")).await,
        StatusCode::OK
    );
    assert_eq!(status(&app, req("192.0.2.1:2", "/")).await, StatusCode::OK);
    assert_eq!(
        status(&app, req("[::ffff:192.0.2.1]:3", "/")).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&app, req("192.0.2.1:4", "/")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn misconfigurations_are_warned_about_once() {
    let clock = ManualClock::new(0);
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let app = app(
        RateLimitLayer::new(limit("api", "1/s; burst=100", KeyBy::Client, &clock))
            .on_warning(move |w: &Warning| log.lock().unwrap().push(w.code().to_string())),
    );
    // No ConnectInfo (served without into_make_service_with_connect_info).
    for _ in 0..3 {
        let r = Request::builder().uri("/").body(Body::empty()).unwrap();
        assert_eq!(status(&app, r).await, StatusCode::OK);
    }
    // A private proxy forwarding headers that nobody trusts.
    for _ in 0..3 {
        let r = with_xff(req("10.0.0.2:1", "/"), "198.51.100.1");
        assert_eq!(status(&app, r).await, StatusCode::OK);
    }
    assert_eq!(
        *seen.lock().unwrap(),
        vec!["missing_peer", "untrusted_proxy"]
    );
}

#[tokio::test]
async fn a_full_key_store_refuses_new_clients_and_a_cost_above_the_burst_is_an_error() {
    let clock = ManualClock::new(0);
    let l = KeyedLimiter::builder("1/s; burst=5".parse().unwrap())
        .max_keys(1)
        .clock(AnyClock::Manual(clock.clone()))
        .build()
        .unwrap();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let seen = errors.clone();
    let app = app(RateLimitLayer::new(Limit::new("api", l, KeyBy::Client))
        .on_error(move |e| seen.lock().unwrap().push(e.code())));
    assert_eq!(status(&app, req(PEER, "/")).await, StatusCode::OK);
    let r = send(&app, req("198.51.100.1:1", "/")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "retry-after"), Some("1"));
    assert_eq!(*errors.lock().unwrap(), vec!["key_store_full"]);
    // A cost of 0 would limit nothing: refused.
    assert!(matches!(
        limit("api", "1/s", KeyBy::Client, &clock).cost(0),
        Err(Error::InvalidOption { option: "cost", .. })
    ));
    // A cost no bucket of the quota holds would refuse every request: refused where it is set.
    assert!(matches!(
        limit("api", "1/s; burst=1", KeyBy::Client, &clock).cost(2),
        Err(Error::InsufficientCapacity {
            cost: 2,
            capacity: 1
        })
    ));
    // A quota changed live below a fixed cost: refused, told to come back after the
    // policy's window (it was a 500), as the other adapters answer.
    let costly = limit("api", "1/10s; burst=2", KeyBy::Client, &clock)
        .cost(2)
        .unwrap();
    costly
        .limiter()
        .set_quota("1/10s; burst=1".parse().unwrap())
        .unwrap();
    let r = send(&app_of(costly), req(PEER, "/")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "retry-after"), Some("10"));
}

fn app_of(limit: Limit) -> Router {
    app(RateLimitLayer::new(limit))
}

#[tokio::test]
async fn a_header_key_is_named_in_any_case_and_a_bad_name_is_an_error() {
    let per_key = Limit::by_header("key", "X-Api-Key", "1/minute").unwrap();
    let app = app(RateLimitLayer::new(per_key));
    let with_key = |k: &str| {
        let mut r = req(PEER, "/");
        r.headers_mut().insert("x-api-key", k.parse().unwrap());
        r
    };
    assert_eq!(status(&app, with_key("a")).await, StatusCode::OK);
    assert_eq!(
        status(&app, with_key("a")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(status(&app, with_key("b")).await, StatusCode::OK);
    let err = Limit::by_header("key", "x api key", "1/minute").unwrap_err();
    assert_eq!(err.code(), "invalid_option", "{err}");
}

/// A leaky queue admits a request for later, with a wait the caller lets pass first; the
/// layer, which has no timer to wait with, went on at once (a `1/s` queue with
/// `max_delay=5s` served six requests at once). It now gives the slot back and answers 429
/// with the wait as `Retry-After`; a request the queue takes now passes. The 429's fields say
/// nothing remains (they said `r=5`, the queue's room for requests that wait, which the layer
/// refuses: a client that read it retried at once and was refused again).
#[tokio::test]
async fn a_leaky_queue_slot_with_a_wait_is_refused_and_given_back() {
    let clock = ManualClock::new(0);
    let app = app(RateLimitLayer::new(limit(
        "q",
        "1/s; algorithm=leaky_queue; max_delay=5s",
        KeyBy::Client,
        &clock,
    )));
    assert_eq!(status(&app, req(PEER, "/")).await, StatusCode::OK);
    for _ in 0..3 {
        let refused = send(&app, req(PEER, "/")).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        // The same wait each time: the slots were given back. Nothing remains now: the
        // queue's room is for requests that wait, which the layer refuses.
        assert_eq!(header(&refused, "retry-after"), Some("1"));
        assert_eq!(header(&refused, "ratelimit"), Some("\"q\";r=0;t=1"));
    }
    // The same in a style of one value per field.
    let legacy = crate::app(
        RateLimitLayer::new(limit(
            "q",
            "1/s; algorithm=leaky_queue; max_delay=5s",
            KeyBy::Client,
            &clock,
        ))
        .headers(HeaderStyle::Legacy),
    );
    assert_eq!(status(&legacy, req(PEER, "/")).await, StatusCode::OK);
    let refused = send(&legacy, req(PEER, "/")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "x-ratelimit-remaining"), Some("0"));
    assert_eq!(header(&refused, "x-ratelimit-reset"), Some("1"));
    clock.advance_nanos(1_000_000_000);
    assert_eq!(status(&app, req(PEER, "/")).await, StatusCode::OK);
    // Two limits: the queue's refusal gives back what the first limit took, and its fields
    // say that nothing of the queue remains.
    let two = app_two(&clock);
    assert_eq!(status(&two, req(PEER, "/")).await, StatusCode::OK);
    let refused = send(&two, req(PEER, "/")).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&refused, "ratelimit"),
        Some("\"plain\";r=2;t=360, \"q\";r=0;t=1")
    );
    clock.advance_nanos(1_000_000_000);
    assert_eq!(status(&two, req(PEER, "/")).await, StatusCode::OK);
    assert_eq!(
        status(&two, req(PEER, "/")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

fn app_two(clock: &ManualClock) -> Router {
    app(
        RateLimitLayer::new(limit("plain", "10/h; burst=3", KeyBy::Client, clock)).limit(limit(
            "q",
            "1/s; algorithm=leaky_queue; max_delay=5s",
            KeyBy::Client,
            clock,
        )),
    )
}

/// A layer on a route inside a router with a layer of its own: in the styles whose fields hold
/// one value (draft-6, draft-7, legacy) each layer appended its own, so a client read
/// `ratelimit-limit: 1, 10`; the layer nearer the handler's fields now stand alone. The IETF
/// fields are lists, one item per policy: both layers' items stand.
#[tokio::test]
async fn stacked_layers_keep_single_valued_fields_single() {
    let clock = ManualClock::new(0);
    for (style, single) in [
        (HeaderStyle::Draft6, "ratelimit-limit"),
        (HeaderStyle::Legacy, "x-ratelimit-limit"),
        (HeaderStyle::Draft7, "ratelimit"),
    ] {
        let route = RateLimitLayer::new(limit("route", "1/s; burst=1", KeyBy::Client, &clock))
            .headers(style);
        let global = RateLimitLayer::new(limit("global", "10/s; burst=10", KeyBy::Client, &clock))
            .headers(style);
        let app = Router::new()
            .route("/", get(|| async { "hello" }).layer(route))
            .layer(global);
        let r = send(&app, req(PEER, "/")).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers().get_all(single).iter().count(), 1, "{style:?}");
        let refused = send(&app, req(PEER, "/")).await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            refused.headers().get_all("retry-after").iter().count(),
            1,
            "{style:?}"
        );
        assert_eq!(
            refused.headers().get_all(single).iter().count(),
            1,
            "{style:?}"
        );
    }
    let both = Router::new()
        .route(
            "/",
            get(|| async { "hello" }).layer(RateLimitLayer::new(limit(
                "route",
                "1/s; burst=1",
                KeyBy::Client,
                &clock,
            ))),
        )
        .layer(RateLimitLayer::new(limit(
            "global",
            "10/s; burst=10",
            KeyBy::Client,
            &clock,
        )));
    let r = send(&both, req("198.51.100.9:1", "/")).await;
    assert_eq!(r.headers().get_all("ratelimit").iter().count(), 2);
}

/// A route's layer inside a router's: a request the route's layer refuses gives the router's
/// layer back what it took (it kept it: a client over the route's limit used up the router's
/// too), and the router's field shows what the refund left. A handler's own 429 counts,
/// unless it carries `Refused`; with `refund_when` of 429 too, the cost comes back once.
#[tokio::test]
async fn stacked_layers_are_all_or_nothing() {
    let clock = ManualClock::new(0);
    for by_status in [false, true] {
        let global = limit("global", "1/h; burst=3", KeyBy::Client, &clock);
        let per_route = limit("route", "1/h; burst=1", KeyBy::Client, &clock);
        let mut outer = RateLimitLayer::new(global.clone());
        if by_status {
            outer = outer.refund_when(|s| s == StatusCode::TOO_MANY_REQUESTS);
        }
        let app = Router::new()
            .route(
                "/",
                get(|| async { "hello" }).layer(RateLimitLayer::new(per_route.clone())),
            )
            .route(
                "/own-429",
                get(|| async { (StatusCode::TOO_MANY_REQUESTS, "busy") }),
            )
            .route(
                "/marked-429",
                get(|| async {
                    let mut r = Response::new(Body::from("busy"));
                    *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                    r.extensions_mut().insert(sluicegate_tower::Refused);
                    r
                }),
            )
            .layer(outer);
        let peer = if by_status { "198.51.100.4:1" } else { PEER };
        let key = peer.split(':').next().unwrap().as_bytes();
        assert_eq!(status(&app, req(peer, "/")).await, StatusCode::OK);
        for _ in 0..5 {
            let refused = send(&app, req(peer, "/")).await;
            assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
            assert!(refused
                .extensions()
                .get::<sluicegate_tower::Refused>()
                .is_some());
            let items: Vec<&str> = refused
                .headers()
                .get_all("ratelimit")
                .iter()
                .map(|v| v.to_str().unwrap())
                .collect();
            assert_eq!(
                items,
                ["\"route\";r=0;t=3600", "\"global\";r=2;t=3600"],
                "{by_status}"
            );
        }
        assert_eq!(global.get(key).unwrap().remaining(), 2, "{by_status}");
        assert_eq!(per_route.get(key).unwrap().remaining(), 0);
        // A handler's 429 with the marker is given back; a plain one counts (unless the
        // outer layer's refund_when says so).
        assert_eq!(
            status(&app, req(peer, "/marked-429")).await,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(global.get(key).unwrap().remaining(), 2, "{by_status}");
        assert_eq!(
            status(&app, req(peer, "/own-429")).await,
            StatusCode::TOO_MANY_REQUESTS
        );
        let left = if by_status { 2 } else { 1 };
        assert_eq!(global.get(key).unwrap().remaining(), left, "{by_status}");
    }
}

/// A limit whose store cannot decide (Redis unreachable under `on_error=error`): a `500` that
/// says so in its body (it said "Too Many Requests"), without the `Refused` marker, and the
/// error handed to `on_error` (it was dropped without a word).
#[tokio::test]
async fn a_store_that_cannot_decide_is_a_server_error_and_reported() {
    let down = "redis://127.0.0.1:1/0?on_error=error&timeout=20ms";
    let l = Limit::per_client("api", "10/minute")
        .unwrap()
        .store(down)
        .unwrap();
    let errors = Arc::new(Mutex::new(Vec::new()));
    let seen = errors.clone();
    let app = app(RateLimitLayer::new(l).on_error(move |e| seen.lock().unwrap().push(e.code())));
    let r = send(&app, req(PEER, "/")).await;
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.extensions().get::<sluicegate_tower::Refused>().is_none());
    let body = r.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"Internal Server Error\n");
    assert_eq!(*errors.lock().unwrap(), vec!["store_unavailable"]);
    // A store string that does not parse: an error where the limit is made.
    assert!(matches!(
        Limit::per_client("api", "10/minute")
            .unwrap()
            .store("nope:x"),
        Err(Error::InvalidOption { .. })
    ));
}

/// `Limit::store`: the same limit on a shared-memory region, which every process of a host
/// opens (here two limits standing for two processes): one budget.
#[cfg(unix)]
#[tokio::test]
async fn a_limit_on_a_region_is_one_budget_for_every_opener() {
    let dir = std::env::temp_dir().join(format!("tower-shm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let store = format!("shm:{}/api", dir.display());
    let make = || {
        Limit::per_client("api", "3/minute")
            .unwrap()
            .store(&store)
            .unwrap()
    };
    let (one, two) = (app_of(make()), app_of(make()));
    let mut admitted = 0;
    for i in 0..10 {
        let app = if i % 2 == 0 { &one } else { &two };
        admitted += usize::from(status(app, req(PEER, "/")).await == StatusCode::OK);
    }
    assert_eq!(admitted, 3);
    // Another quota on the same region: refused, naming both.
    let e = Limit::per_client("api", "5/minute")
        .unwrap()
        .store(&store)
        .unwrap_err();
    assert_eq!(e.code(), "store_mismatch", "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A global limit has one key, but its region was sized for the default key bound (2^20
/// keys, about 37 MB, allocated whole when it is made): two of them filled a container's
/// 64 MB `/dev/shm`. A new region for it now holds one key; `?capacity=N` still wins, and a
/// region made with another capacity (by an earlier version) opens at its own.
#[cfg(unix)]
#[tokio::test]
async fn a_global_limits_region_holds_one_key() {
    let dir = std::env::temp_dir().join(format!("tower-shm-global-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let len = |name: &str| std::fs::metadata(dir.join(name)).unwrap().len();
    let global = |name: &str| {
        Limit::global("all", "2/minute")
            .unwrap()
            .store(&format!("shm:{}/{name}", dir.display()))
            .unwrap()
    };
    let g = global("g");
    assert_eq!(g.limiter().max_keys(), 1);
    assert!(len("g") < 1 << 20, "{} bytes", len("g"));
    // One budget for every client, in both openers.
    let (one, two) = (app_of(g), app_of(global("g")));
    assert_eq!(status(&one, req(PEER, "/")).await, StatusCode::OK);
    assert_eq!(
        status(&two, req("198.51.100.1:1", "/")).await,
        StatusCode::OK
    );
    assert_eq!(
        status(&one, req("198.51.100.2:1", "/")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The store string's capacity wins.
    assert_eq!(global("c?capacity=50").limiter().max_keys(), 50);
    // A region of another capacity (one made by an earlier version) opens at its own: asking
    // for one key would refuse it as a mismatch.
    assert_eq!(global("c").limiter().max_keys(), 50);
    // A keyed limit of the same quota on a global limit's region (a limit changed from global
    // to per client, its region kept) is refused when it is made, not opened at one key.
    let keyed = Limit::per_client("all", "2/minute")
        .unwrap()
        .store(&format!("shm:{}/g", dir.display()));
    match keyed {
        Err(sluicegate::Error::Store { kind, reason, .. }) => {
            assert_eq!(kind, sluicegate::StoreErrorKind::Mismatch);
            assert!(reason.contains("holds one key"), "{reason}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `respond_with`: the response to a request the layer answers itself is the app's (a JSON
/// body here), completed by the layer: the refusal's status where it left `200`, the
/// rate-limit fields and `Retry-After` where it set none, and the `Refused` marker, so that
/// a layer around it still gives back what it took. It is told why: a limit's decision, a
/// key store at its bound, a store that could not decide.
#[tokio::test]
async fn respond_with_makes_the_refusal_and_the_layer_completes_it() {
    use bytes::Bytes;
    let clock = ManualClock::new(0);
    let json = |r: &sluicegate_tower::Refusal<'_>| {
        let body = format!(
            r#"{{"status":{},"limit":"{}","path":"{}","retry_after":{},"remaining":{},"error":"{}"}}"#,
            r.status().as_u16(),
            r.limit().name(),
            r.request().uri().path(),
            r.retry_after_secs().map_or(-1, |s| s as i64),
            r.decision().map_or(-1, |d| d.remaining() as i64),
            r.error().map_or("", |e| e.code()),
        );
        Response::builder()
            .header("content-type", "application/json")
            .body(Bytes::from(body))
            .unwrap()
    };
    let global = limit("global", "1/h; burst=5", KeyBy::Client, &clock);
    let route = limit("route", "1/30s; burst=1", KeyBy::Client, &clock);
    let outer = Router::new()
        .route(
            "/",
            get(|| async { "hello" }).layer(RateLimitLayer::new(route.clone()).respond_with(json)),
        )
        .layer(RateLimitLayer::new(global.clone()));
    assert_eq!(status(&outer, req(PEER, "/")).await, StatusCode::OK);
    let r = send(&outer, req(PEER, "/")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "content-type"), Some("application/json"));
    assert_eq!(header(&r, "retry-after"), Some("30"));
    let items: Vec<&str> = r
        .headers()
        .get_all("ratelimit")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(items, ["\"route\";r=0;t=30", "\"global\";r=4;t=3600"]);
    assert!(r.extensions().get::<sluicegate_tower::Refused>().is_some());
    let body = r.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        &body[..],
        br#"{"status":429,"limit":"route","path":"/","retry_after":30,"remaining":0,"error":""}"#
    );
    // The outer layer gave back what it took for the refused request.
    assert_eq!(
        global
            .get(PEER.split(':').next().unwrap().as_bytes())
            .unwrap()
            .remaining(),
        4
    );

    // A status and a field of the app's own stand; a limit's refusal is marked all the same.
    let own = |_: &sluicegate_tower::Refusal<'_>| {
        Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .header("retry-after", "120")
            .body(Bytes::from_static(b"later"))
            .unwrap()
    };
    let app2 = app(
        RateLimitLayer::new(limit("api", "1/s; burst=1", KeyBy::Client, &clock)).respond_with(own),
    );
    assert_eq!(status(&app2, req(PEER, "/")).await, StatusCode::OK);
    let r = send(&app2, req(PEER, "/")).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        r.headers()
            .get_all("retry-after")
            .iter()
            .collect::<Vec<_>>(),
        ["120"]
    );
    assert_eq!(header(&r, "ratelimit"), Some("\"api\";r=0;t=1"));
    assert!(r.extensions().get::<sluicegate_tower::Refused>().is_some());

    // A key store at its bound: a 429 without a decision, retry in a second.
    let full = KeyedLimiter::builder("1/s; burst=5".parse().unwrap())
        .max_keys(1)
        .clock(AnyClock::Manual(clock.clone()))
        .build()
        .unwrap();
    let app3 = app(RateLimitLayer::new(Limit::new("api", full, KeyBy::Client))
        .on_error(|_| {})
        .respond_with(json));
    assert_eq!(status(&app3, req(PEER, "/")).await, StatusCode::OK);
    let r = send(&app3, req("198.51.100.1:1", "/health")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&r, "retry-after"), Some("1"));
    let body = r.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        &body[..],
        br#"{"status":429,"limit":"api","path":"/health","retry_after":1,"remaining":-1,"error":"key_store_full"}"#
    );

    // A store that could not decide: a 500, no rate-limit fields, no marker.
    let down = Limit::per_client("api", "10/minute")
        .unwrap()
        .store("redis://127.0.0.1:1/0?on_error=error&timeout=20ms")
        .unwrap();
    let app4 = app(RateLimitLayer::new(down)
        .on_error(|_| {})
        .respond_with(json));
    let r = send(&app4, req(PEER, "/")).await;
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.extensions().get::<sluicegate_tower::Refused>().is_none());
    assert_eq!(header(&r, "retry-after"), None);
    let body = r.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        &body[..],
        br#"{"status":500,"limit":"api","path":"/","retry_after":-1,"remaining":-1,"error":"store_unavailable"}"#
    );
}
