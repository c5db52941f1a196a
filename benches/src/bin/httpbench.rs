//! HTTP overhead on a real server: `httpbench [--rounds R] [--secs S] [--connections C]
//! [SUBJECT...]` serves every subject of `sluicegate_benches::http` on its own 127.0.0.1
//! port (axum::serve with each connection's peer address, one process, two tokio workers)
//! and loads them in turn with wrk (`wrk -t1 -cC -dS`), R rounds in rotating order, so that
//! every subject is measured at the same moments of the machine's load. Without wrk on the
//! PATH, a client loop of C keep-alive hyper connections takes its place.
//!
//! `httpbench --oneshot N SUBJECT` instead sends N requests through the subject's router
//! with tower's `oneshot` (no server): the loop callgrind counts instructions in.
//!
//! Prints one JSON line per measurement, then a summary line per subject: the median
//! requests per second and the overhead per request against axum alone, in microseconds of
//! the saturated machine (1/rps - 1/rps_axum).

use axum::body::Body;
use sluicegate_benches::http::{app, SUBJECTS};
use std::net::SocketAddr;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

struct Args {
    rounds: usize,
    secs: u64,
    connections: usize,
    subjects: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        rounds: 5,
        secs: 3,
        connections: 32,
        subjects: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |what: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .ok_or(format!("{what} needs a positive integer"))
        };
        match arg.as_str() {
            "--rounds" => a.rounds = num("--rounds")? as usize,
            "--secs" => a.secs = num("--secs")?,
            "--connections" => a.connections = num("--connections")? as usize,
            s if SUBJECTS.contains(&s) => a.subjects.push(s.to_string()),
            s => return Err(format!("unknown argument {s:?} (subjects: {SUBJECTS:?})")),
        }
    }
    if a.subjects.is_empty() {
        a.subjects = SUBJECTS.iter().map(|s| s.to_string()).collect();
    }
    if !a.subjects.iter().any(|s| s == "axum") {
        a.subjects.insert(0, "axum".to_string());
    }
    Ok(a)
}

/// Requests per second and median latency (µs) from wrk's report.
fn run_wrk(addr: SocketAddr, secs: u64, connections: usize) -> Option<(f64, f64)> {
    let out = Command::new("wrk")
        .args([
            "-t1",
            &format!("-c{connections}"),
            &format!("-d{secs}s"),
            "--latency",
            &format!("http://{addr}/"),
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rps = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))?
        .trim()
        .parse()
        .ok()?;
    let p50 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("50%"))
        .and_then(|v| duration_us(v.trim()))
        .unwrap_or(f64::NAN);
    Some((rps, p50))
}

/// wrk's durations: `123.45us`, `1.23ms`, `1.00s`.
fn duration_us(v: &str) -> Option<f64> {
    let (n, mul) = if let Some(n) = v.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e3)
    } else {
        (v.strip_suffix('s')?, 1e6)
    };
    n.parse::<f64>().ok().map(|x| x * mul)
}

/// Without wrk: `connections` keep-alive connections sending `GET /` back to back.
async fn client_loop(addr: SocketAddr, secs: u64, connections: usize) -> (f64, f64) {
    use http_body_util::BodyExt;
    let until = Instant::now() + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..connections)
        .map(|_| {
            tokio::spawn(async move {
                let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
                let io = hyper_util::rt::TokioIo::new(stream);
                let (mut tx, conn) = hyper::client::conn::http1::handshake(io)
                    .await
                    .expect("handshake");
                tokio::spawn(conn);
                let mut n = 0u64;
                while Instant::now() < until {
                    let req = axum::http::Request::get("/")
                        .header("host", "bench")
                        .body(Body::empty())
                        .expect("request");
                    let resp = tx.send_request(req).await.expect("response");
                    let _ = resp.into_body().collect().await;
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap_or(0);
    }
    (total as f64 / secs as f64, f64::NAN)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `n` requests through `router` with tower's `oneshot` on a current-thread runtime: the
/// loop that `valgrind --tool=callgrind --toggle-collect='httpbench::oneshot_loop*'` counts.
#[inline(never)]
fn oneshot_loop(rt: &tokio::runtime::Runtime, router: &axum::Router, n: u64) -> u64 {
    use tower::ServiceExt;
    let peer: SocketAddr = "203.0.113.7:52100".parse().expect("an address");
    (0..n)
        .map(|_| {
            let resp = rt
                .block_on(
                    router
                        .clone()
                        .oneshot(sluicegate_benches::http::request(peer)),
                )
                .expect("infallible");
            u64::from(resp.status().as_u16())
        })
        .sum()
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("--oneshot") {
        // httpbench --oneshot N SUBJECT: no server, no network (for callgrind).
        let n: u64 = argv.get(2).and_then(|v| v.parse().ok()).unwrap_or(10_000);
        let name = argv.get(3).map_or("sluicegate", String::as_str);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let router = app(name);
        let statuses = oneshot_loop(&rt, &router, n);
        println!("{name}: {n} requests, status sum {statuses}");
        return ExitCode::SUCCESS;
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("httpbench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let servers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let addrs: Vec<(String, SocketAddr)> = args
        .subjects
        .iter()
        .map(|name| {
            let router = app(name);
            let listener = servers
                .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
                .expect("bind");
            let addr = listener.local_addr().expect("address");
            servers.spawn(async move {
                axum::serve(
                    listener,
                    router.into_make_service_with_connect_info::<SocketAddr>(),
                )
                .await
                .expect("serve");
            });
            (name.clone(), addr)
        })
        .collect();
    let wrk = Command::new("wrk").arg("--version").output().is_ok();
    let client = (!wrk).then(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime")
    });
    let driver = if wrk { "wrk" } else { "client-loop" };
    let mut rps: Vec<Vec<f64>> = vec![Vec::new(); addrs.len()];
    let mut p50: Vec<Vec<f64>> = vec![Vec::new(); addrs.len()];
    for round in 0..args.rounds {
        for k in 0..addrs.len() {
            let i = (k + round) % addrs.len();
            let (name, addr) = &addrs[i];
            let (r, lat) = match &client {
                None => match run_wrk(*addr, args.secs, args.connections) {
                    Some(x) => x,
                    None => {
                        eprintln!("httpbench: wrk gave no result for {name}");
                        return ExitCode::FAILURE;
                    }
                },
                Some(rt) => rt.block_on(client_loop(*addr, args.secs, args.connections)),
            };
            println!(
                "{{\"subject\":\"{name}\",\"round\":{round},\"driver\":\"{driver}\",\"rps\":{r:.1},\"p50_us\":{lat:.1}}}"
            );
            rps[i].push(r);
            p50[i].push(lat);
        }
    }
    let base = median(rps[0].clone());
    for (i, (name, _)) in addrs.iter().enumerate() {
        let m = median(rps[i].clone());
        let overhead = 1e6 / m - 1e6 / base;
        println!(
            "{{\"summary\":\"{name}\",\"driver\":\"{driver}\",\"rounds\":{},\"connections\":{},\"secs\":{},\"median_rps\":{m:.1},\"min_rps\":{:.1},\"max_rps\":{:.1},\"median_p50_us\":{:.1},\"overhead_us\":{overhead:.3}}}",
            args.rounds,
            args.connections,
            args.secs,
            rps[i].iter().copied().fold(f64::INFINITY, f64::min),
            rps[i].iter().copied().fold(0.0, f64::max),
            median(p50[i].clone()),
        );
    }
    ExitCode::SUCCESS
}
