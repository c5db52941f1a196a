//! The HTTP overhead subjects: one axum app (`GET /` answering `hello`) with no limiter, with
//! a layer that only passes requests on (the floor of any layer), with sluicegate-tower,
//! and with tower_governor, each limiter keyed by the peer address (axum's
//! `ConnectInfo`) and configured never to refuse, so that what is measured is the cost of the
//! layer on an admitted request. Shared by `benches/http.rs` (criterion over `oneshot`) and
//! `src/bin/httpbench.rs` (a real server under wrk).

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::routing::get;
use axum::Router;
use sluicegate::http::HeaderStyle;
use sluicegate_tower::{Limit, RateLimitLayer};
use std::net::SocketAddr;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

/// Every subject's name, in the order reports list them.
pub const SUBJECTS: &[&str] = &[
    "axum",
    "passthrough",
    "sluicegate",
    "sluicegate-noheaders",
    "tower_governor",
    "tower_governor-headers",
];

/// A quota that never runs dry: 10^9 a second, a burst of 10^9.
const NEVER_DRY: &str = "1000000000/s; burst=1000000000";

fn base() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

/// The app of subject `name` (one of [`SUBJECTS`]), its handlers made into routes up front
/// (`with_state`, as `into_make_service` does: otherwise every `oneshot` call would build
/// the route, and its layers, again).
pub fn app(name: &str) -> Router {
    subject(name).with_state(())
}

fn subject(name: &str) -> Router {
    let ours = |style| {
        let limit = Limit::per_client("bench", NEVER_DRY).expect("a valid quota");
        base().layer(RateLimitLayer::new(limit).headers(style))
    };
    match name {
        "axum" => base(),
        // The least any tower layer costs in axum: one that passes the request on.
        "passthrough" => base().layer(tower::util::MapRequestLayer::new(|r: Request<Body>| r)),
        "sluicegate" => ours(HeaderStyle::Ietf),
        "sluicegate-noheaders" => ours(HeaderStyle::None),
        "tower_governor" => {
            let conf = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(1_000_000_000)
                .finish()
                .expect("a valid governor config");
            base().layer(GovernorLayer::new(conf))
        }
        "tower_governor-headers" => {
            let conf = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(1_000_000_000)
                .use_headers()
                .finish()
                .expect("a valid governor config");
            base().layer(GovernorLayer::new(conf))
        }
        other => panic!("unknown subject {other:?} (known: {SUBJECTS:?})"),
    }
}

/// `GET /` from `peer`, as `into_make_service_with_connect_info` hands it to the app.
pub fn request(peer: SocketAddr) -> Request<Body> {
    let mut r = Request::get("/").body(Body::empty()).expect("a request");
    r.extensions_mut().insert(ConnectInfo(peer));
    r
}
