//! A real server on 127.0.0.1 (axum::serve with the peer address of each connection) and a
//! real HTTP/1.1 client (hyper's client connection): the limit, the fields and the client
//! keys as they are on the wire. Every wait is bounded; the server stops at the end.

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::{HeaderMap, Request, StatusCode};
use hyper_util::rt::TokioIo;
use sluicegate::client::ClientResolver;
use sluicegate_tower::{Limit, RateLimitLayer};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(10);

struct Server {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(app: Router) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        Server {
            addr,
            stop: Some(stop),
            task,
        }
    }

    /// One request on a new connection.
    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap, Bytes) {
        let stream = timeout(WAIT, TcpStream::connect(self.addr))
            .await
            .unwrap()
            .unwrap();
        let (mut sender, conn) = timeout(
            WAIT,
            hyper::client::conn::http1::handshake(TokioIo::new(stream)),
        )
        .await
        .unwrap()
        .unwrap();
        let driver = tokio::spawn(conn);
        let mut req = Request::get(path).header("host", self.addr.to_string());
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let resp = timeout(
            WAIT,
            sender.send_request(req.body(Empty::<Bytes>::new()).unwrap()),
        )
        .await
        .unwrap()
        .unwrap();
        let (parts, body) = resp.into_parts();
        let body = timeout(WAIT, body.collect())
            .await
            .unwrap()
            .unwrap()
            .to_bytes();
        drop(sender);
        let _ = timeout(WAIT, driver).await;
        (parts.status, parts.headers, body)
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        timeout(WAIT, self.task).await.unwrap().unwrap();
    }
}

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_on_the_wire() {
    let server = Server::start(app(RateLimitLayer::new(
        Limit::per_client("api", "1/minute; burst=3").unwrap(),
    )))
    .await;
    for left in (0..3).rev() {
        let (status, h, body) = server.get("/", &[]).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "hello");
        assert_eq!(h["ratelimit-policy"], "\"api\";q=3;w=180");
        assert!(h["ratelimit"]
            .to_str()
            .unwrap()
            .starts_with(&format!("\"api\";r={left};t=")));
    }
    let (status, h, body) = server.get("/", &[]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((59..=60).contains(&retry), "{retry}: a token a minute");
    assert_eq!(body, "Too Many Requests\n");
    // A forged X-Forwarded-For from this client (no trusted proxy) is still this client.
    let (status, _, _) = server
        .get("/", &[("x-forwarded-for", "198.51.100.77")])
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_local_proxy_on_the_wire() {
    let limit = Limit::per_client("api", "1/minute; burst=1").unwrap();
    let resolver = ClientResolver::builder()
        .trusted_proxies("loopback".parse().unwrap())
        .build()
        .unwrap();
    let server = Server::start(app(
        RateLimitLayer::new(limit.clone()).client_resolver(resolver)
    ))
    .await;
    // This test plays the proxy on 127.0.0.1: each X-Forwarded-For is a client.
    for client in ["198.51.100.1", "198.51.100.2", "2001:db8:1:2::1"] {
        let (status, _, _) = server.get("/", &[("x-forwarded-for", client)]).await;
        assert_eq!(status, StatusCode::OK, "{client}");
    }
    let (status, _, _) = server
        .get("/", &[("x-forwarded-for", "6.6.6.6, 198.51.100.1")])
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // The same /64, another address: the same client.
    let (status, _, _) = server
        .get("/", &[("x-forwarded-for", "2001:db8:1:2::ffff")])
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limit.get(b"2001:db8:1:2::/64").unwrap().remaining(), 0);
    server.stop().await;
}
