//! A layer's limits on Redis (feature `redis`; run by ci/check.d/45-redis.sh, which installs
//! redis-server): an outage that begins is said once to `on_error`, and the limit goes on,
//! decided by its store's `on_error` policy, then by the server again once it is back.

#[allow(dead_code)]
#[path = "../../core/tests/redis/server.rs"]
mod server;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use axum::Router;
use sluicegate_tower::{ErrorEvent, Limit, RateLimitLayer};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::ServiceExt;

async fn status(app: &Router) -> StatusCode {
    let mut r = Request::get("/").body(Body::empty()).unwrap();
    let peer: SocketAddr = "203.0.113.7:5000".parse().unwrap();
    r.extensions_mut().insert(ConnectInfo(peer));
    app.clone().oneshot(r).await.unwrap().status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_is_said_once_and_the_policy_decides_meanwhile() {
    let mut srv = server::Server::start();
    let store = format!(
        "redis://127.0.0.1:{}/0?prefix=tower&on_error=local&hosts=1&timeout=200ms",
        srv.port
    );
    let limit = Limit::per_client("api", "3/minute")
        .unwrap()
        .store(&store)
        .unwrap();
    let said = Arc::new(Mutex::new(Vec::new()));
    let seen = said.clone();
    let app = Router::new().route("/", get(|| async { "ok" })).layer(
        RateLimitLayer::new(limit.clone())
            .on_error(move |e| seen.lock().unwrap().push(e.to_string())),
    );
    assert_eq!(status(&app).await, StatusCode::OK);
    assert_eq!(limit.limiter().redis_stats().unwrap().decided, 1);
    srv.kill();
    // Decided by the policy (`local`: this process alone, its share of 3/minute), and the
    // outage said once, at the first look a second after the last.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..5 {
        let _ = status(&app).await;
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..5 {
        let _ = status(&app).await;
    }
    let stats = limit.limiter().redis_stats().unwrap();
    assert!(stats.failed_local >= 10, "{stats:?}");
    let said = said.lock().unwrap().clone();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("does not answer") && said[0].contains("on_error=local"),
        "{said:?}"
    );
}

/// `on_error_event` tells an outage's notice from a request answered 500: under `open` (every
/// request admitted while the server is down) only the notice comes, as `Outage`; under
/// `error` each request is also an `Answered(500)`. `on_error` got the notice as it got a
/// failed request's error (the same `store_unavailable`), so an error counter counted 500s
/// that no client got. When the server is back, one `Recovered` (the policy given in capitals
/// is read as the core reads it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_notice_is_told_from_a_request_answered_500() {
    for (policy, answered) in [
        ("OPEN", StatusCode::OK),
        ("error", StatusCode::INTERNAL_SERVER_ERROR),
    ] {
        let mut srv = server::Server::start();
        let store = format!(
            "redis://127.0.0.1:{}/0?prefix=towerev{policy}&on_error={policy}&timeout=200ms",
            srv.port
        );
        let limit = Limit::per_client("api", "100/minute")
            .unwrap()
            .store(&store)
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let seen = log.clone();
        let notices = Arc::new(Mutex::new(Vec::new()));
        let said = notices.clone();
        let app = Router::new().route("/", get(|| async { "ok" })).layer(
            RateLimitLayer::new(limit.clone()).on_error_event(move |e, event| {
                if event == ErrorEvent::Outage {
                    said.lock().unwrap().push(e.to_string());
                }
                seen.lock().unwrap().push((event, e.code()));
            }),
        );
        assert_eq!(status(&app).await, StatusCode::OK);
        srv.kill();
        // Two looks a second apart: the first also sees the call the server decided.
        let mut statuses = Vec::new();
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(1100)).await;
            for _ in 0..2 {
                statuses.push(status(&app).await);
            }
        }
        assert_eq!(statuses, [answered; 4], "{policy}");
        let events = log.lock().unwrap().clone();
        let outages = events
            .iter()
            .filter(|(e, _)| *e == ErrorEvent::Outage)
            .count();
        let failed = events
            .iter()
            .filter(|(e, _)| *e == ErrorEvent::Answered(StatusCode::INTERNAL_SERVER_ERROR))
            .count();
        assert_eq!(outages, 1, "{policy}: {events:?}");
        let expected_failed = if policy == "error" { 4 } else { 0 };
        assert_eq!(failed, expected_failed, "{policy}: {events:?}");
        assert_eq!(events.len(), 1 + expected_failed, "{policy}: {events:?}");
        assert!(
            events.iter().all(|(_, code)| *code == "store_unavailable"),
            "{events:?}"
        );
        let notice = notices.lock().unwrap().clone();
        assert_eq!(notice.len(), 1, "{notice:?}");
        let expected = if policy == "OPEN" {
            "on_error=open policy (every request admitted)"
        } else {
            "on_error=error policy (every request an error (500))"
        };
        assert!(notice[0].contains(expected), "{notice:?}");

        // Back: the next look that finds the server deciding says so, once.
        srv.restart();
        let mut back = Vec::new();
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_millis(1100)).await;
            for _ in 0..2 {
                back.push(status(&app).await);
            }
        }
        assert_eq!(back, [StatusCode::OK; 4], "{policy}");
        let events = log.lock().unwrap().clone();
        let recovered: Vec<_> = events
            .iter()
            .filter(|(e, _)| *e == ErrorEvent::Recovered)
            .collect();
        assert_eq!(recovered.len(), 1, "{policy}: {events:?}");
        assert_eq!(events.len(), 2 + expected_failed, "{policy}: {events:?}");
    }
}

/// An app of one per-client limit of `quota` on `srv` under `prefix`, with `block_in_place`.
fn in_place_app(srv: &server::Server, prefix: &str, quota: &str) -> Router {
    let store = format!(
        "redis://127.0.0.1:{}/0?prefix={prefix}&on_error=error&timeout=5s",
        srv.port
    );
    let limit = Limit::per_client("api", quota)
        .unwrap()
        .store(&store)
        .unwrap();
    Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(limit).block_in_place(true))
}

/// With `block_in_place`, a decision that waits for a slow server (paused) leaves its
/// worker's other tasks running: on a runtime of one worker, a timer set while a limited
/// request waits fires before the request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_slow_server_does_not_stall_the_workers_other_tasks() {
    let srv = server::Server::start();
    let app = in_place_app(&srv, "towerslow", "100/minute");
    assert_eq!(status(&app).await, StatusCode::OK);
    assert_eq!(
        srv.resp().cmd(&["CLIENT", "PAUSE", "1500", "ALL"]).unwrap(),
        server::Reply::Status("OK".into())
    );
    let order = Arc::new(Mutex::new(Vec::new()));
    let (o1, o2) = (order.clone(), order.clone());
    let request = tokio::spawn(async move {
        let s = status(&app).await;
        o1.lock().unwrap().push("request");
        s
    });
    // The request is on its way (waiting for the server) before the timer is set.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let timer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        o2.lock().unwrap().push("timer");
    });
    timer.await.unwrap();
    assert_eq!(request.await.unwrap(), StatusCode::OK);
    assert_eq!(*order.lock().unwrap(), ["timer", "request"]);
}

/// `block_in_place` on a `current_thread` runtime (where tokio's panics): the decision waits
/// in place.
#[tokio::test(flavor = "current_thread")]
async fn block_in_place_on_a_current_thread_runtime_decides_in_place() {
    let srv = server::Server::start();
    let app = in_place_app(&srv, "towerct", "2/minute");
    assert_eq!(status(&app).await, StatusCode::OK);
    assert_eq!(status(&app).await, StatusCode::OK);
    assert_eq!(status(&app).await, StatusCode::TOO_MANY_REQUESTS);
}
