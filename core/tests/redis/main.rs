//! Layer: the Redis store against real `redis-server` processes that these tests start (on
//! free loopback ports, no persistence) and stop: the conformance vectors bit for bit on the
//! test clock, expiry, rejections that write nothing, many processes on one key against the
//! server's clock, faults under load (a killed and restarted server, a paused one) with each
//! fail policy, a three-master Redis Cluster, batches, async calls and composites.
//!
//! Run by ci/check.d/45-redis.sh: `cargo test -p sluicegate --features redis,redis-test-clock
//! --test redis`. A missing redis-server is a failure, never a skip.

mod server;

use serde_json::{json, Value};
use server::{Certs, Cluster, Reply, Sentinel, Server};
use sluicegate::composite::Composite;
use sluicegate::{
    Decision, Error, KeyedLimiter, Limiter, ManualClock, OnError, Quota, RedisOptions,
    StoreErrorKind, StoreSpec,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn spec(s: &str) -> StoreSpec {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// A keyed limiter of `quota` on the store `url` names.
fn keyed(quota: &str, url: &str) -> Arc<KeyedLimiter<u64>> {
    Arc::new(
        KeyedLimiter::builder(quota.parse().unwrap())
            .store(spec(url))
            .build()
            .unwrap(),
    )
}

fn got(r: Result<Decision, Error>) -> Value {
    match r {
        Ok(d) => json!({
            "allowed": d.allowed(), "limit": d.limit(), "remaining": d.remaining(),
            "retry_after_ns": d.retry_after_nanos(), "reset_after_ns": d.reset_after_nanos(),
        }),
        Err(e) => json!({"error": e.code()}),
    }
}

fn cases(file: &str) -> Vec<Value> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../conformance")
        .join(file);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    assert_eq!(
        doc["format"], 1,
        "a vector format this runner does not know"
    );
    let mut all = doc["cases"].as_array().unwrap().clone();
    if let Some(c) = doc["composite_cases"].as_array() {
        all.extend(c.iter().cloned());
    }
    all
}

/// Every case of both vector files through Redis on the test clock (nanosecond ticks): the
/// same decisions as the in-process engine, field for field. A single limiter's (or a
/// composite part's) bucket is created when the limiter is built, at `start_ns`, as
/// in-process; a keyed bucket at its key's first request.
#[test]
fn conformance_vectors_bit_for_bit() {
    let srv = Server::start();
    let (mut played, mut steps, mut failures) = (0, 0, Vec::new());
    for (f, file) in ["vectors.json", "algorithms.json"].into_iter().enumerate() {
        for (n, case) in cases(file).iter().enumerate() {
            if case.get("quota_error").is_some() {
                continue;
            }
            let name = case["name"].as_str().unwrap();
            let url = |part: usize| {
                spec(&format!(
                    "{}?clock=test&negative_cache=off&on_error=error&timeout=2s&prefix=v{f}c{n}p{part}",
                    srv.url()
                ))
            };
            let clock = ManualClock::new(case["start_ns"].as_u64().unwrap());
            let quotas: Vec<Quota> = match case.get("quotas") {
                Some(qs) => qs
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|q| q.as_str().unwrap().parse().unwrap())
                    .collect(),
                None => vec![case["quota"].as_str().unwrap().parse().unwrap()],
            };
            played += 1;
            let mut check = |s: &Value, r: Result<Decision, Error>| {
                steps += 1;
                let g = got(r);
                if g != s["expect"] {
                    failures.push(format!("{name}: {s} gave {g}"));
                }
            };
            if case["keyed"] == true {
                let k = KeyedLimiter::<String, _>::builder(quotas[0])
                    .clock(clock.clone())
                    .store(url(0))
                    .build()
                    .unwrap();
                for s in case["steps"].as_array().unwrap() {
                    clock.set(s["t_ns"].as_u64().unwrap());
                    let (key, c) = (s["key"].as_str().unwrap(), s["cost"].as_u64().unwrap());
                    if s["op"] == "refund" {
                        k.refund(key, c).unwrap();
                    } else {
                        check(s, k.try_acquire(key, c));
                    }
                }
                continue;
            }
            let parts: Vec<Limiter<ManualClock>> = quotas
                .iter()
                .enumerate()
                .map(|(i, q)| {
                    Limiter::builder(*q)
                        .clock(clock.clone())
                        .store(url(i))
                        .build()
                        .unwrap()
                })
                .collect();
            let composite = Composite::new(parts);
            for s in case["steps"].as_array().unwrap() {
                clock.set(s["t_ns"].as_u64().unwrap());
                let c = s["cost"].as_u64().unwrap();
                if s["op"] == "refund" {
                    composite.refund(c).unwrap();
                } else if composite.parts().len() == 1 {
                    check(s, composite.parts()[0].try_acquire(c));
                } else {
                    check(s, composite.try_acquire(c));
                }
            }
        }
    }
    eprintln!("conformance through Redis: {played} cases, {steps} decisions compared");
    assert!(
        played >= 190 && steps >= 2600,
        "only {played} cases, {steps} steps"
    );
    assert!(
        failures.is_empty(),
        "{} of {steps} decisions differ, e.g.:\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
}

/// A Rust `str` key and the byte key of its UTF-8 (every binding's key) are one bucket on
/// Redis, as in a region.
#[test]
fn text_keys_share_buckets_with_the_bindings_byte_keys() {
    let srv = Server::start();
    let url = format!("{}?prefix=text&on_error=error&timeout=2s", srv.url());
    let text: KeyedLimiter<String> = KeyedLimiter::builder("5/hour".parse().unwrap())
        .store(spec(&url))
        .build()
        .unwrap();
    let bytes: KeyedLimiter<Box<[u8]>> = KeyedLimiter::builder("5/hour".parse().unwrap())
        .store(spec(&url))
        .build()
        .unwrap();
    for _ in 0..3 {
        assert!(text.try_acquire("alice", 1).unwrap().allowed());
    }
    assert_eq!(bytes.peek(b"alice".as_slice()).unwrap().remaining(), 2);
    assert!(bytes.try_acquire(b"alice".as_slice(), 2).unwrap().allowed());
    assert!(!text.try_acquire("alice", 1).unwrap().allowed());
    assert!(text.remove("alice").unwrap());
    assert_eq!(bytes.peek(b"alice".as_slice()).unwrap().remaining(), 5);
    // One key on the server, under the fingerprint of the bytes.
    assert!(text.try_acquire("bob", 1).unwrap().allowed());
    let keys: Vec<String> = srv
        .resp()
        .keys()
        .into_iter()
        .filter(|k| k.starts_with("text:"))
        .collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    // Batches and async calls name a text key's bucket as blocking calls do (they hashed the
    // `str` itself: another bucket, with the whole quota).
    assert!(text.try_acquire_many(&[("bob", 1), ("bob", 1)])[1]
        .as_ref()
        .unwrap()
        .allowed());
    let rt = runtime("current");
    rt.block_on(async {
        assert!(text.try_acquire_async("bob", 1).await.unwrap().allowed());
        assert_eq!(text.peek_async("bob").await.unwrap().remaining(), 1);
        text.refund_async("bob", 1).await.unwrap();
    });
    assert_eq!(bytes.peek(b"bob".as_slice()).unwrap().remaining(), 2);
}

/// Production clock: once every bucket is full again, no key of ours remains (DBSIZE 0), and
/// a caller that comes back gets a full bucket; with `initial < burst`, a keyed limiter's key
/// starts again with `initial` tokens, a single limiter's bucket (created when the limiter was
/// built) is full (SCRIPTS.md, "Absent keys").
#[test]
fn expiry_leaves_nothing_and_a_returning_caller_gets_a_full_bucket() {
    let srv = Server::start();
    let url = format!("{}?prefix=exp&on_error=error&timeout=2s", srv.url());
    let q: Quota = "20/s; burst=5".parse().unwrap();
    let keyed = KeyedLimiter::<u64>::builder(q)
        .store(spec(&url))
        .build()
        .unwrap();
    let single = Limiter::builder("3/s; algorithm=sliding_window".parse().unwrap())
        .store(spec(&format!(
            "{}?prefix=exp-single&on_error=error&timeout=2s",
            srv.url()
        )))
        .build()
        .unwrap();
    let slow_start: Quota = "2/s; burst=5; initial=2".parse().unwrap();
    let keyed_slow = KeyedLimiter::<u64>::builder(slow_start)
        .store(spec(&format!(
            "{}?prefix=exp-slow&on_error=error&timeout=2s",
            srv.url()
        )))
        .build()
        .unwrap();
    let single_slow = Limiter::builder(slow_start)
        .store(spec(&format!(
            "{}?prefix=exp-single-slow&on_error=error&timeout=2s",
            srv.url()
        )))
        .build()
        .unwrap();
    let mut r = srv.resp();
    assert!(
        r.keys().iter().any(|k| k.starts_with("exp-single-slow:")),
        "the slow-start single limiter's bucket, created at build"
    );
    // Created at build with 2 tokens: not full (a full bucket would leave 3), which it is only
    // 1.5 s after the build at 2/s: a margin for a loaded machine.
    assert!(single_slow.try_acquire(2).unwrap().remaining() < 3);
    assert_eq!(keyed_slow.try_acquire(&1, 1).unwrap().remaining(), 1);
    for k in 0..50u64 {
        assert!(keyed.try_acquire(&k, 3).unwrap().allowed());
    }
    assert!(single.try_acquire(2).unwrap().allowed());
    assert!(r.int(&["DBSIZE"]) >= 3);
    // Full 150 ms, 2.5 s (token buckets) and at most two windows, 2 s (sliding window), later.
    let deadline = Instant::now() + Duration::from_secs(10);
    while r.int(&["DBSIZE"]) > 0 {
        assert!(Instant::now() < deadline, "keys left: {:?}", r.keys());
        std::thread::sleep(Duration::from_millis(50));
    }
    for k in 0..50u64 {
        let d = keyed.try_acquire(&k, 1).unwrap();
        assert!(d.allowed() && d.remaining() == 4, "key {k}: {}", got(Ok(d)));
    }
    assert_eq!(single.try_acquire(1).unwrap().remaining(), 2);
    assert_eq!(
        keyed_slow.try_acquire(&1, 1).unwrap().remaining(),
        1,
        "initial again"
    );
    assert_eq!(
        single_slow.try_acquire(1).unwrap().remaining(),
        4,
        "full, as in-process"
    );
}

/// `initial < burst` with expiry (SCRIPTS.md, "Absent keys"), against the in-process engine
/// on one test clock, with Redis expiry simulated (a key is deleted as soon as its bucket is
/// full, which is when Redis expires it): a single limiter's bucket, once created, is full
/// when its key has gone, as an in-process limiter's stays full; a keyed limiter's key starts
/// again with `initial` tokens, as an in-process keyed limiter's after `sweep`.
#[test]
fn initial_below_burst_matches_in_process_across_expiry() {
    let srv = Server::start();
    let mut r = srv.resp();
    for (n, q) in [
        "10/s; burst=5; initial=1",
        "10/s; burst=5; initial=0; algorithm=gcra",
        "4/s; burst=6; initial=2; refill=interval",
    ]
    .into_iter()
    .enumerate()
    {
        let q: Quota = q.parse().unwrap();
        let clock = ManualClock::new(1_000_000_000);
        let url = |p: &str| {
            spec(&format!(
                "{}?clock=test&negative_cache=off&on_error=error&timeout=2s&prefix={p}{n}",
                srv.url()
            ))
        };
        let mem = Limiter::with_clock(q, clock.clone()).unwrap();
        let red = Limiter::builder(q)
            .clock(clock.clone())
            .store(url("one"))
            .build()
            .unwrap();
        let kmem = KeyedLimiter::<u64, _>::builder(q)
            .clock(clock.clone())
            .build()
            .unwrap();
        let kred = KeyedLimiter::<u64, _>::builder(q)
            .clock(clock.clone())
            .store(url("keyed"))
            .build()
            .unwrap();
        let mut expired = 0;
        // Steps of 50 ms to 1.5 s: the buckets fill, empty and fill again.
        for (i, step) in [50u64, 50, 1500, 0, 100, 900, 50, 1200, 300, 20, 2000]
            .into_iter()
            .enumerate()
        {
            clock.advance(Duration::from_millis(step));
            // Redis expiry: a full bucket's key is gone.
            if mem.peek().unwrap().reset_after_nanos() == 0 {
                expired += r.del_prefix(&format!("one{n}:"));
            }
            if kmem.peek(&7).unwrap().reset_after_nanos() == 0 {
                expired += r.del_prefix(&format!("keyed{n}:"));
                kmem.sweep().unwrap();
            }
            let cost = [1, 2, 1, 3][i % 4];
            let (a, b) = (got(mem.try_acquire(cost)), got(red.try_acquire(cost)));
            assert_eq!(a, b, "{q}, single, step {i}");
            let (a, b) = (
                got(kmem.try_acquire(&7, cost)),
                got(kred.try_acquire(&7, cost)),
            );
            assert_eq!(a, b, "{q}, keyed, step {i}");
        }
        assert!(expired >= 4, "{q}: only {expired} expiries simulated");
    }
}

/// A rejection leaves the key exactly as it was (value and expiry): no counter inflation.
/// With the negative cache on, a flood of rejections costs one round trip.
#[test]
fn rejections_write_nothing_and_the_negative_cache_saves_round_trips() {
    let srv = Server::start();
    let mut r = srv.resp();
    for algo in [
        "token_bucket",
        "gcra",
        "fixed_window",
        "sliding_window",
        "sliding_log",
        "leaky_queue",
    ] {
        let q: Quota = format!("2/m; algorithm={algo}").parse().unwrap();
        let url = format!(
            "{}?prefix=rej-{algo}&negative_cache=off&on_error=error&timeout=2s",
            srv.url()
        );
        let l = KeyedLimiter::<String>::builder(q)
            .store(spec(&url))
            .build()
            .unwrap();
        let mut admitted = 0;
        while l.try_acquire("k", 1).unwrap().allowed() {
            admitted += 1;
            assert!(admitted <= 3, "{algo}");
        }
        let keys = r.keys();
        let key = keys
            .iter()
            .find(|k| k.starts_with(&format!("rej-{algo}:")))
            .unwrap()
            .clone();
        let before = r.value(&key);
        for _ in 0..20 {
            assert!(!l.try_acquire("k", 1).unwrap().allowed());
        }
        assert_eq!(r.value(&key), before, "{algo}: a rejection wrote");
    }

    // The negative cache: 1000 rejected requests, one server call.
    let q: Quota = "1/m".parse().unwrap();
    let l = KeyedLimiter::<String>::builder(q)
        .store(spec(&format!(
            "{}?prefix=neg&on_error=error&timeout=2s",
            srv.url()
        )))
        .build()
        .unwrap();
    assert!(l.try_acquire("k", 1).unwrap().allowed());
    let s0 = l.redis_stats().unwrap();
    let t = Instant::now();
    for _ in 0..1000 {
        let d = l.try_acquire("k", 1).unwrap();
        assert!(!d.allowed() && d.retry_after() > Duration::from_secs(50));
    }
    let per = t.elapsed() / 1000;
    let s1 = l.redis_stats().unwrap();
    assert_eq!(s1.decided - s0.decided, 1, "one round trip for the flood");
    assert_eq!(s1.cached_rejections - s0.cached_rejections, 999);
    eprintln!("negative cache: 999 of 1000 rejections without a round trip, {per:?} each here (debug build)");
    // A refund from this process forgets the cached rejection.
    l.refund("k", 1).unwrap();
    assert!(l.try_acquire("k", 1).unwrap().allowed());

    // So does a composite's refund, for each of its parts.
    let part = |p: &str| {
        Limiter::builder("1/h".parse().unwrap())
            .store(spec(&format!(
                "{}?prefix={p}&on_error=error&timeout=2s",
                srv.url()
            )))
            .build()
            .unwrap()
    };
    let c = Composite::new(vec![part("neg-a"), part("neg-b")]);
    assert!(c.try_acquire(1).unwrap().allowed());
    for p in c.parts() {
        assert!(!p.try_acquire(1).unwrap().allowed());
        let s = p.redis_stats().unwrap();
        assert!(!p.try_acquire(1).unwrap().allowed());
        let cached = p.redis_stats().unwrap().cached_rejections - s.cached_rejections;
        assert_eq!(cached, 1, "the part's rejection is cached");
    }
    c.refund(1).unwrap();
    for p in c.parts() {
        assert!(
            p.try_acquire(1).unwrap().allowed(),
            "a stale cached rejection"
        );
    }

    // A reset by another process (here another limiter, with a cache of its own) is seen
    // within the cached rejection's second, not after the day's `retry_after`.
    let day = || {
        KeyedLimiter::<String>::builder("1/d".parse().unwrap())
            .store(spec(&format!(
                "{}?prefix=neg-reset&on_error=error&timeout=2s",
                srv.url()
            )))
            .build()
            .unwrap()
    };
    let (worker, admin) = (day(), day());
    assert!(worker.try_acquire("k", 1).unwrap().allowed());
    let d = worker.try_acquire("k", 1).unwrap();
    assert!(!d.allowed() && d.retry_after() > Duration::from_secs(23 * 3600));
    assert!(admin.remove("k").unwrap());
    let cached = worker.try_acquire("k", 1).unwrap();
    assert!(!cached.allowed(), "cached: no round trip yet");
    assert!(cached.retry_after() > Duration::from_secs(23 * 3600));
    std::thread::sleep(Duration::from_millis(1100));
    assert!(
        worker.try_acquire("k", 1).unwrap().allowed(),
        "the reset is seen after the cache's second"
    );
}

/// Child side of [`processes_on_one_key_stay_within_the_bound`].
/// Blocking callers drive their own connections (at most `connections=N`), and more of
/// them than that are pipelined on the shared one: under 12 threads at once each key still
/// admits exactly its quota, whichever connection its calls took, and the store opens at most
/// N + 1 connections (N = 0: one).
#[test]
fn blocking_callers_share_pooled_and_pipelined_connections() {
    let srv = Server::start();
    for (n, max) in [(None, 5), (Some(2), 3), (Some(0), 1)] {
        let opt = n.map_or(String::new(), |n| format!("&connections={n}"));
        let url = format!(
            "{}?prefix=pool{}&negative_cache=off&on_error=error&timeout=2s{opt}",
            srv.url(),
            n.map_or(-1, |n| n as i64)
        );
        let l = keyed("25/h", &url);
        let admitted: Vec<u64> = (0..12u64)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    let mut a = vec![0u64; 8];
                    for i in 0..80u64 {
                        a[(i % 8) as usize] +=
                            u64::from(l.try_acquire(&(i % 8), 1).unwrap().allowed());
                    }
                    a
                })
            })
            .map(|t| t.join().unwrap())
            .fold(vec![0u64; 8], |acc, a| {
                acc.iter().zip(&a).map(|(x, y)| x + y).collect()
            });
        assert_eq!(admitted, vec![25; 8], "connections={n:?}");
        let s = l.redis_stats().unwrap();
        assert_eq!(s.decided, 12 * 80, "{s:?}");
        // The first blocking call opens a connection of its own unless none are allowed.
        let min = if n == Some(0) { 1 } else { 2 };
        assert!(
            (min..=max).contains(&s.connects),
            "connections={n:?}: {s:?}"
        );
    }
}

/// A tokio runtime of `flavor` ("multi": two workers, or "current"), its drivers all on.
fn runtime(flavor: &str) -> tokio::runtime::Runtime {
    let mut b = if flavor == "multi" {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    b.enable_all().build().unwrap()
}

/// Async callers on a tokio runtime drive a connection of that runtime themselves (one a
/// runtime, concurrent callers pipelined on it), with no hand-off to the store's thread: 12
/// tasks at once on a multi-thread and on a current_thread runtime, each key admits exactly
/// its quota, and the store opens one connection of the runtime's own besides its multiplexed
/// one (`connections=0`: none, every call handed off). A runtime without timers or without
/// IO cannot drive them: its calls are handed off, as exact, and the link stays up.
#[test]
fn async_callers_drive_connections_on_their_own_runtime() {
    let srv = Server::start();
    let limiter = |prefix: String, opt: &str| {
        let url = format!(
            "{}?prefix={prefix}&negative_cache=off&on_error=error&timeout=2s{opt}",
            srv.url()
        );
        keyed("25/h", &url)
    };
    for flavor in ["multi", "current"] {
        for (n, max) in [(None, 1), (Some(2), 1), (Some(0), 0)] {
            let opt = n.map_or(String::new(), |n| format!("&connections={n}"));
            let l = limiter(
                format!("apool-{flavor}{}", n.map_or(-1, |n| n as i64)),
                &opt,
            );
            let admitted = runtime(flavor).block_on(async {
                let tasks: Vec<_> = (0..12u64)
                    .map(|_| {
                        let l = l.clone();
                        tokio::spawn(async move {
                            let mut a = vec![0u64; 8];
                            for i in 0..80u64 {
                                let d = l.try_acquire_async(&(i % 8), 1).await.unwrap();
                                a[(i % 8) as usize] += u64::from(d.allowed());
                            }
                            a
                        })
                    })
                    .collect();
                let mut sum = vec![0u64; 8];
                for t in tasks {
                    for (s, a) in sum.iter_mut().zip(t.await.unwrap()) {
                        *s += a;
                    }
                }
                sum
            });
            assert_eq!(admitted, vec![25; 8], "{flavor}, connections={n:?}");
            let s = l.redis_stats().unwrap();
            assert_eq!(s.decided, 12 * 80, "{s:?}");
            assert_eq!(s.unavailable + s.timeouts, 0, "{s:?}");
            // The link's own connection, then the runtime's.
            let own = s.connects - 1;
            let min = max.min(1);
            assert!(
                (min..=max).contains(&own),
                "{flavor}, connections={n:?}: {own} connections of the runtime's own: {s:?}"
            );
        }
    }
    for (what, rt) in [
        (
            "no timers",
            tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build(),
        ),
        (
            "no IO",
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build(),
        ),
    ] {
        let l = limiter(format!("apool-{}", what.replace(' ', "-")), "");
        let admitted = rt.unwrap().block_on(async {
            let mut a = 0;
            for _ in 0..30 {
                a += u64::from(l.try_acquire_async(&7, 1).await.unwrap().allowed());
            }
            a
        });
        assert_eq!(admitted, 25, "{what}");
        let s = l.redis_stats().unwrap();
        assert_eq!(
            (s.decided, s.connects, s.unavailable),
            (30, 1, 0),
            "{what}: {s:?}"
        );
    }
}

/// A runtime that ends while its connections are pooled (some of its calls in flight) takes
/// them with it: the server sees them close, and later calls (another runtime's, a blocking
/// caller's) are decided at once, none failed; a runtime left idle, never polled again, does
/// not hold up another's calls either.
#[test]
fn a_runtime_dropped_with_pooled_connections_breaks_nothing() {
    let srv = Server::start();
    let url = format!(
        "{}?prefix=gone&negative_cache=off&on_error=error&timeout=2s",
        srv.url()
    );
    let l = keyed("1000000/s", &url);
    let mut r = srv.resp();
    let clients =
        |r: &mut server::Resp| -> u64 { info(r, "clients", "connected_clients").parse().unwrap() };
    let base = clients(&mut r);
    let load = |l: &Arc<KeyedLimiter<u64>>, calls: u64| {
        let tasks: Vec<_> = (0..8u64)
            .map(|t| {
                let l = l.clone();
                tokio::spawn(async move {
                    for i in 0..calls {
                        assert!(l
                            .try_acquire_async(&(t * 100 + i), 1)
                            .await
                            .unwrap()
                            .allowed());
                    }
                })
            })
            .collect();
        async move {
            for t in tasks {
                t.await.unwrap();
            }
        }
    };
    // Left idle: a current_thread runtime with pooled connections, never polled again.
    let idle = runtime("current");
    idle.block_on(async { load(&l, 20).await });
    assert!(
        clients(&mut r) > base,
        "the idle runtime has connections of its own"
    );
    let with_idle = clients(&mut r);
    for flavor in ["current", "multi"] {
        let rt = runtime(flavor);
        rt.block_on(async { load(&l, 20).await });
        // Calls in flight when the runtime ends.
        rt.block_on(async {
            let l = l.clone();
            drop(tokio::spawn(async move {
                loop {
                    let _ = l.try_acquire_async(&1, 1).await;
                }
            }));
            tokio::time::sleep(Duration::from_millis(30)).await;
        });
        drop(rt);
        wait_for(10, "the ended runtime's connections to close", || {
            clients(&mut r) <= with_idle
        });
    }
    let before = l.redis_stats().unwrap();
    let t0 = Instant::now();
    runtime("current").block_on(async { load(&l, 50).await });
    for i in 0..50 {
        assert!(l.try_acquire(&(10_000 + i), 1).unwrap().allowed());
    }
    let after = l.redis_stats().unwrap();
    eprintln!(
        "after the ended runtimes: {after:?}, 450 calls in {:?}",
        t0.elapsed()
    );
    assert_eq!(after.decided - before.decided, 450, "{after:?}");
    // None of the later calls failed. (Calls of the loop above may fail while its runtime
    // shuts down: a multi-thread runtime can poll the loop's task again after the task that
    // drove its connection was dropped. Those are counted before `before`.)
    assert_eq!(
        (
            after.timeouts - before.timeouts,
            after.unavailable - before.unavailable,
            after.failed_error - before.failed_error
        ),
        (0, 0, 0),
        "{before:?} then {after:?}"
    );
    drop(idle);
}

/// An I/O error on a connection of a runtime's own (here the server closed it: CLIENT KILL)
/// fails that call and closes that connection only: the link's connection stays up, so a
/// blocking caller's next call and the runtime's next (on a new connection of its own) are
/// decided. (A runtime that ends fails its calls in flight so; before, one such error took
/// the link down, and the next calls of every caller failed until it reconnected.)
#[test]
fn a_lost_connection_of_a_runtime_takes_only_itself() {
    let srv = Server::start();
    let url = format!(
        "{}?prefix=lost&negative_cache=off&on_error=error&timeout=2s",
        srv.url()
    );
    let l = keyed("1000000/s", &url);
    let mut r = srv.resp();
    let ids = |r: &mut server::Resp| -> Vec<u64> {
        let Reply::Bulk(list) = r.cmd(&["CLIENT", "LIST"]).unwrap() else {
            panic!("CLIENT LIST")
        };
        list.lines()
            .filter_map(|line| line.strip_prefix("id="))
            .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
            .collect()
    };
    let before = ids(&mut r);
    let rt = runtime("current");
    assert!(rt.block_on(l.try_acquire_async(&1, 1)).unwrap().allowed());
    // The connection the runtime opened: the one id not there before.
    let own: Vec<u64> = ids(&mut r)
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    assert_eq!(own.len(), 1, "one connection of the runtime's own: {own:?}");
    assert_eq!(
        r.int(&["CLIENT", "KILL", "ID", &own[0].to_string()]),
        1,
        "CLIENT KILL"
    );
    let s0 = l.redis_stats().unwrap();
    match rt.block_on(l.try_acquire_async(&2, 1)) {
        Err(Error::Store {
            kind: StoreErrorKind::Unavailable,
            ..
        }) => {}
        other => panic!("a call on the closed connection: {other:?}"),
    }
    assert!(
        l.try_acquire(&3, 1).unwrap().allowed(),
        "a blocking caller after the runtime's connection was lost"
    );
    for i in 0..5 {
        assert!(rt
            .block_on(l.try_acquire_async(&(10 + i), 1))
            .unwrap()
            .allowed());
    }
    let s1 = l.redis_stats().unwrap();
    assert_eq!(
        (s1.unavailable - s0.unavailable, s1.timeouts - s0.timeouts),
        (1, 0),
        "{s0:?} then {s1:?}"
    );
}

/// A call that fails on a lost connection starts the next connection at once: a call that
/// comes once it is open is decided (before, the next call failed, `not connected`, and only
/// then started one).
#[test]
fn a_lost_connection_is_replaced_before_the_next_call() {
    let srv = Server::start();
    let url = format!(
        "{}?prefix=lost1&negative_cache=off&on_error=error&timeout=2s&connections=0",
        srv.url()
    );
    let l = keyed("1000000/s", &url);
    assert!(l.try_acquire(&1, 1).unwrap().allowed());
    let before = l.redis_stats().unwrap();
    srv.resp()
        .cmd(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"])
        .unwrap();
    // On the killed connection: fails (unless the keepalive found it closed first).
    let first = l.try_acquire(&2, 1);
    std::thread::sleep(Duration::from_millis(200));
    let next = l.try_acquire(&3, 1);
    assert!(
        next.as_ref().is_ok_and(Decision::allowed),
        "after {first:?}: {next:?}"
    );
    let s = l.redis_stats().unwrap();
    assert_eq!(s.connects, before.connects + 1, "{s:?}");
}

/// A server that comes back after an outage is connected to in the background: the first call
/// after it has been back for a while is decided by it. Before, reconnection was started by a
/// call only, so after an outage with no call due at its backoff, the first calls (a burst's,
/// with `on_error=local`: each process's own buckets, more than the limit across them) failed
/// to the fail policy while they started it.
#[test]
fn a_server_back_after_an_outage_is_reconnected_without_a_call() {
    let mut srv = Server::start();
    let url = format!(
        "{}?prefix=back1&negative_cache=off&on_error=error&timeout=200ms&connections=0",
        srv.url()
    );
    let l = keyed("1000000/s", &url);
    assert!(l.try_acquire(&1, 1).unwrap().allowed());
    srv.kill();
    // Calls during the outage fail, and each failed attempt backs off further (up to 1 s).
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        assert!(l.try_acquire(&2, 1).is_err());
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = l.redis_stats().unwrap();
    srv.restart();
    // Back for longer than the longest backoff and a keepalive tick; no call meanwhile.
    let deadline = Instant::now() + Duration::from_secs(20);
    while l.redis_stats().unwrap().connects == before.connects && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let d = l.try_acquire(&3, 1);
    assert!(d.as_ref().is_ok_and(Decision::allowed), "{d:?}");
    let s = l.redis_stats().unwrap();
    assert_eq!(s.connects, before.connects + 1, "{s:?}");
    assert_eq!(s.unavailable, before.unavailable, "{s:?}");
}

/// No call of `s` failed: none unavailable, timed out or left to `on_error` (`what`: the case).
fn none_failed(s: &sluicegate::RedisStats, what: &str) {
    assert_eq!(
        (s.unavailable, s.timeouts, s.failed_error),
        (0, 0, 0),
        "{what:?}: {s:?}"
    );
}

/// A server whose idle `timeout` closes quiet connections (redis.conf's `timeout`; a proxy or
/// a load balancer does the same): after a quiet spell longer than that, every caller's next
/// calls are decided, none failed. The store's own connection is kept alive (a PING when it
/// had no call for half a second), and opened again as soon as it is found closed all the
/// same; a pooled connection (a blocking caller's, a runtime's) idle for a second is checked
/// (PING) before a call is sent on it, and replaced if it was closed. Before, the first calls
/// after the spell failed (`connection lost: unexpected end of file`, then `not connected`)
/// and went to the fail policy.
#[test]
fn connections_an_idle_server_closed_fail_no_call() {
    let srv = Server::start_with(&["--timeout", "1"]);
    // Default: blocking callers on pooled connections, async ones on the runtime's own;
    // `connections=0`: every call on the store's own connection.
    for (n, opt) in ["", "&connections=0"].into_iter().enumerate() {
        let url = format!(
            "{}?prefix=idle{n}&negative_cache=off&on_error=error&timeout=2s{opt}",
            srv.url()
        );
        let l = keyed("1000000/s", &url);
        let rt = runtime("current");
        let calls = |round: u64| {
            for i in 0..3 {
                let key = round * 10 + i;
                let d = l.try_acquire(&key, 1);
                assert!(
                    d.as_ref().is_ok_and(Decision::allowed),
                    "{opt:?}, round {round}: {d:?}"
                );
                let d = rt.block_on(l.try_acquire_async(&(key + 100), 1));
                assert!(
                    d.as_ref().is_ok_and(Decision::allowed),
                    "{opt:?}, round {round}: {d:?}"
                );
            }
        };
        calls(0);
        let before = l.redis_stats().unwrap();
        std::thread::sleep(Duration::from_millis(2600));
        calls(1);
        calls(2);
        let quiet = l.redis_stats().unwrap();
        if opt.is_empty() {
            // The server closed the runtime's connection (its runtime was idle meanwhile,
            // nothing of ours ran there): replaced. The store's own and the pooled blocking
            // one were kept open (PINGed).
            assert!(
                quiet.connects > before.connects,
                "{before:?} then {quiet:?}"
            );
        }
        // The store's own connection killed while quiet (as a proxy's restart would): found
        // closed and replaced before the next call.
        // (A connection of the test's own: the server closes a quiet one.)
        srv.resp()
            .cmd(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"])
            .unwrap();
        std::thread::sleep(Duration::from_millis(1600));
        // Eight async callers at once first: each checks the runtime's closed connection.
        let together = rt.block_on(async {
            let tasks: Vec<_> = (0..8u64)
                .map(|i| {
                    let l = l.clone();
                    tokio::spawn(async move { l.try_acquire_async(&(1000 + i), 1).await })
                })
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap());
            }
            out
        });
        assert!(
            together
                .iter()
                .all(|d| d.as_ref().is_ok_and(Decision::allowed)),
            "{opt:?}: {together:?}"
        );
        calls(3);
        let s = l.redis_stats().unwrap();
        assert!(s.connects > quiet.connects, "{opt:?}: {quiet:?} then {s:?}");
        assert_eq!(s.decided, 32, "{opt:?}: {s:?}");
        none_failed(&s, opt);
    }
}

/// A blocking caller's pooled connection is kept open through a quiet spell longer than the
/// server's idle `timeout` (PINGed from the store's thread once quiet for half a second): the
/// next call finds it open, with nothing reopened and no check on the call's path.
#[test]
fn quiet_pooled_connections_are_kept_open() {
    let srv = Server::start_with(&["--timeout", "2"]);
    let url = format!(
        "{}?prefix=keep&negative_cache=off&on_error=error&timeout=2s",
        srv.url()
    );
    let l = keyed("1000000/s", &url);
    assert!(l.try_acquire(&1, 1).unwrap().allowed());
    let before = l.redis_stats().unwrap();
    std::thread::sleep(Duration::from_millis(4500));
    assert!(l.try_acquire(&2, 1).unwrap().allowed());
    let s = l.redis_stats().unwrap();
    assert_eq!(s.connects, before.connects, "{before:?} then {s:?}");
    none_failed(&s, "");
}

/// A blocking call that lands while the keepalive's PING has the pool's only connection out
/// waits for it to come back (a round trip) rather than opening another. The server is
/// paused meanwhile (`CLIENT PAUSE`), so the PING is in flight when the call comes.
#[test]
fn a_call_during_the_keepalive_ping_waits_for_its_connection() {
    let srv = Server::start();
    let url = format!(
        "{}?prefix=pinged&negative_cache=off&on_error=error&timeout=5s",
        srv.url()
    );
    let l = keyed("1000000/s", &url);
    assert!(l.try_acquire(&1, 1).unwrap().allowed());
    let before = l.redis_stats().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let paused = Instant::now();
    assert_eq!(
        srv.resp().cmd(&["CLIENT", "PAUSE", "1500", "ALL"]).unwrap(),
        Reply::Status("OK".into())
    );
    // The connection, quiet for half a second, is taken for its PING within 750 ms.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(l.try_acquire(&2, 1).unwrap().allowed());
    assert!(paused.elapsed() >= Duration::from_millis(1400));
    let s = l.redis_stats().unwrap();
    assert_eq!(s.connects, before.connects, "{before:?} then {s:?}");
    none_failed(&s, "");
}

/// A Redis Cluster whose nodes close quiet connections (`timeout 1`): after a quiet spell,
/// calls on keys of every node are decided, none failed. (The cluster's client reopens a
/// node's connection only when told of its close, which it is with RESP3 alone; the store's
/// keepalive PINGs every master.)
#[test]
fn a_cluster_that_closes_quiet_connections_fails_no_call() {
    let cluster = Cluster::start();
    let url = format!(
        "{}?prefix=clidle&on_error=error&timeout=2s&negative_cache=off",
        cluster.url()
    );
    let l = keyed("1000000/s", &url);
    for n in &cluster.nodes {
        assert_eq!(
            n.resp().cmd(&["CONFIG", "SET", "timeout", "1"]).unwrap(),
            Reply::Status("OK".into())
        );
    }
    let calls = |round: u64| {
        // 30 keys: some on each node.
        for k in 0..30 {
            let d = l.try_acquire(&(round * 100 + k), 1);
            assert!(
                d.as_ref().is_ok_and(Decision::allowed),
                "round {round}, key {k}: {d:?}"
            );
        }
    };
    calls(0);
    std::thread::sleep(Duration::from_millis(2600));
    calls(1);
    let s = l.redis_stats().unwrap();
    assert_eq!(s.decided, 60, "{s:?}");
    none_failed(&s, "");
}

#[test]
fn stress_child() {
    let Ok(url) = std::env::var("SG_STRESS_URL") else {
        return;
    };
    let until = Instant::now() + Duration::from_millis(1500);
    let l = Arc::new(
        Limiter::builder("200/s; burst=20".parse().unwrap())
            .store(spec(&url))
            .build()
            .unwrap(),
    );
    let admitted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (l, a) = (l.clone(), admitted.clone());
            std::thread::spawn(move || {
                while Instant::now() < until {
                    if l.try_acquire(1).unwrap().allowed() {
                        a.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    println!("ADMITTED {}", admitted.load(Ordering::Relaxed));
}

/// Four processes of four threads on one key, against the server's clock: admitted <= burst
/// + rate * elapsed, with elapsed read from the server's TIME around the run.
#[test]
fn processes_on_one_key_stay_within_the_bound() {
    let srv = Server::start();
    let url = format!("{}?prefix=stress&on_error=error&timeout=2s", srv.url());
    let mut r = srv.resp();
    let t0 = r.time_us();
    let kids: Vec<_> = (0..4)
        .map(|_| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "stress_child", "--nocapture", "--test-threads=1"])
                .env("SG_STRESS_URL", &url)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut admitted = 0u64;
    for k in kids {
        let out = k.wait_with_output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let n: u64 = text
            .split("ADMITTED ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("child said {text}"))
            .trim()
            .parse()
            .unwrap();
        admitted += n;
    }
    let elapsed_us = r.time_us() - t0;
    let bound = 20 + 200 * elapsed_us / 1_000_000;
    eprintln!("4 processes x 4 threads: {admitted} admitted in {elapsed_us} us of server time, bound {bound}");
    assert!(admitted <= bound, "{admitted} > {bound}");
    assert!(
        admitted >= bound / 3,
        "suspiciously few admitted: {admitted} of {bound}"
    );
}

/// What a call under faults may come to: an error only under the policy `error`, and then a
/// timeout or an unavailable store (counted in `errors`).
fn fault_check(policy: OnError, r: Result<Decision, Error>, errors: &AtomicU64) {
    if let Err(e) = r {
        assert_eq!(policy, OnError::Error, "an error under {policy:?}: {e}");
        assert!(
            matches!(
                e,
                Error::Store {
                    kind: StoreErrorKind::Timeout | StoreErrorKind::Unavailable,
                    ..
                }
            ),
            "{e}"
        );
        errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Load from 4 threads (blocking callers) and 8 async tasks (4 on a multi-thread runtime, 4
/// on a current_thread runtime: each drives connections of its own) while the server is
/// paused past the timeout (SIGSTOP), then killed and restarted empty: every call comes back
/// within about the timeout, the policy decides every failure (no error reaches the caller
/// unless the policy is `error`), and after recovery the server decides again, within the
/// bound, for blocking and async callers alike (no connection from before is used again).
fn fault_run(policy: OnError) {
    let mut srv = Server::start();
    let name = policy.name();
    let url = format!(
        "{}?prefix=fault-{name}&on_error={name}&timeout=200ms&negative_cache=off",
        srv.url()
    );
    let l = keyed("1000/s; burst=100", &url);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worst = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let load: Vec<_> = (0..4u64)
        .map(|t| {
            let (l, stop, worst, errors) = (l.clone(), stop.clone(), worst.clone(), errors.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    fault_check(policy, l.try_acquire(&(t * 1000 + i % 50), 1), &errors);
                    worst.fetch_max(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    let tasks = |first: u64| {
        let (l, stop, worst, errors) = (l.clone(), stop.clone(), worst.clone(), errors.clone());
        async move {
            let tasks: Vec<_> = (first..first + 4)
                .map(|t| {
                    let (l, stop) = (l.clone(), stop.clone());
                    let (worst, errors) = (worst.clone(), errors.clone());
                    tokio::spawn(async move {
                        let mut i = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            let t0 = Instant::now();
                            let r = l.try_acquire_async(&(t * 1000 + i % 50), 1).await;
                            fault_check(policy, r, &errors);
                            worst.fetch_max(t0.elapsed().as_micros() as u64, Ordering::Relaxed);
                            i += 1;
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        }
    };
    let multi = runtime("multi");
    let multi_load = multi.spawn(tasks(4));
    let current_load = std::thread::spawn({
        let tasks = tasks(8);
        move || runtime("current").block_on(tasks)
    });
    std::thread::sleep(Duration::from_millis(200));
    // Paused for 3 s: a call that waited for the server instead of its 200 ms timeout would
    // take about that long, far beyond what a loaded 2-core machine adds to a timely one.
    srv.pause();
    std::thread::sleep(Duration::from_millis(3000));
    srv.resume();
    std::thread::sleep(Duration::from_millis(300));
    srv.kill();
    std::thread::sleep(Duration::from_millis(300));
    let decided = l.redis_stats().unwrap().decided;
    srv.restart();
    // Recovery: reconnection within the backoff (at most 1 s), then the server decides: the
    // load runs on for 1.5 s, and until the server has decided some of it (a loaded machine
    // may take longer to get there; 20 s at most).
    std::thread::sleep(Duration::from_millis(1500));
    let deadline = Instant::now() + Duration::from_secs(20);
    while l.redis_stats().unwrap().decided == decided && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    load.into_iter().for_each(|t| t.join().unwrap());
    multi.block_on(multi_load).unwrap();
    current_load.join().unwrap();
    let s = l.redis_stats().unwrap();
    let worst = Duration::from_micros(worst.load(Ordering::Relaxed));
    eprintln!("{name}: {s:?}, slowest call {worst:?}");
    assert!(
        worst < Duration::from_millis(2000),
        "{name}: a call took {worst:?}"
    );
    assert!(s.timeouts > 0 && s.unavailable > 0, "{name}: {s:?}");
    assert!(
        s.connects >= 2 && s.script_loads >= 1,
        "{name}: no reconnection: {s:?}"
    );
    let failed = match policy {
        OnError::Open => s.failed_open,
        OnError::Closed => s.failed_closed,
        OnError::Local => s.failed_local,
        _ => s.failed_error,
    };
    assert!(failed > 0, "{name}: the policy never decided");
    if policy == OnError::Error {
        assert_eq!(errors.load(Ordering::Relaxed), s.failed_error);
    }
    // After recovery the server decides, and the bound holds on a fresh key: 300 blocking
    // calls, then 300 async calls on the multi-thread runtime (whose connections from before
    // the restart are closed, not used).
    for (what, key) in [("blocking", u64::MAX), ("async", u64::MAX - 1)] {
        let before = l.redis_stats().unwrap();
        let t0 = Instant::now();
        let admitted = if what == "async" {
            multi.block_on(async {
                let mut a = 0;
                for _ in 0..300 {
                    a += u64::from(l.try_acquire_async(&key, 1).await.unwrap().allowed());
                }
                a
            })
        } else {
            (0..300)
                .map(|_| u64::from(l.try_acquire(&key, 1).unwrap().allowed()))
                .sum()
        };
        let elapsed = t0.elapsed().as_micros() as u64;
        let after = l.redis_stats().unwrap();
        assert_eq!(
            after.decided - before.decided,
            300,
            "{name}, {what}: not decided by the server: {after:?}"
        );
        assert!(
            admitted <= 100 + elapsed / 1000 + 1,
            "{name}, {what}: {admitted} admitted in {elapsed} us"
        );
    }
}

#[test]
fn faults_fail_open() {
    fault_run(OnError::Open);
}

#[test]
fn faults_fail_closed() {
    fault_run(OnError::Closed);
}

#[test]
fn faults_local_insurance() {
    fault_run(OnError::Local);
}

#[test]
fn faults_error_policy() {
    fault_run(OnError::Error);
}

/// The local insurance limiter is sized as documented: the quota divided by `hosts`.
#[test]
fn local_insurance_is_the_hosts_share() {
    // Nothing listens on this port: every call fails at once and the policy decides.
    let port = server::free_port();
    let url = format!("redis://127.0.0.1:{port}?on_error=local&hosts=4&timeout=20ms");
    let l = KeyedLimiter::<String>::builder("10/m; burst=40".parse().unwrap())
        .store(spec(&url))
        .build()
        .unwrap();
    let admitted = (0..50)
        .filter(|_| l.try_acquire("k", 1).unwrap().allowed())
        .count();
    assert_eq!(admitted, 10, "burst 40 over 4 hosts");
    let s = l.redis_stats().unwrap();
    assert_eq!(s.failed_local, 50);
    // Quotas whose share a token bucket holds only rounded down (docs/REDIS.md) build, and
    // their insurance admits the burst's share. Each share refills a token in a minute or
    // more, so that the rejection after the burst holds however slow the machine (a share of
    // a token each 1.2 ms made this test flaky).
    for (rate, hosts, burst) in [
        ("1000003/day; algorithm=fixed_window", 1600, 625),
        ("13001/10d; algorithm=fixed_window", 1, 13_001),
        ("13001/10d; algorithm=sliding_window", 1, 13_001),
        ("3000001/hour; algorithm=sliding_window", 100_000, 30),
    ] {
        let q: Quota = rate.parse().unwrap();
        let ns_a_token = u128::from(q.period_ns()) * hosts / u128::from(q.count());
        assert!(
            ns_a_token >= 60_000_000_000,
            "{rate}: a share refilled too fast"
        );
        let share_ns = u128::from(q.period_ns()) * hosts;
        assert!(
            u128::from(burst) * share_ns > (1 << 63),
            "{rate}: not rounded down"
        );
        let url = format!("redis://127.0.0.1:{port}?hosts={hosts}&timeout=20ms");
        let single = Limiter::builder(rate.parse().unwrap())
            .store(spec(&url))
            .build()
            .err();
        assert!(single.is_none(), "{rate}: {single:?}");
        let l = KeyedLimiter::<String>::builder(rate.parse().unwrap())
            .store(spec(&url))
            .build()
            .unwrap_or_else(|e| panic!("{rate}: {e}"));
        assert!(l.try_acquire("k", burst).unwrap().allowed(), "{rate}");
        assert!(!l.try_acquire("k", 1).unwrap().allowed(), "{rate}");
    }
}

/// Options built as a struct get the URL parser's checks when the limiter is built: a typed
/// error, never a division by zero or a malformed key name.
#[test]
fn options_built_as_a_struct_are_checked() {
    let port = server::free_port();
    let set = |f: fn(&mut RedisOptions)| {
        let mut o = RedisOptions::default();
        f(&mut o);
        o
    };
    let cases = [
        ("hosts", set(|o| o.hosts = 0)),
        ("prefix", set(|o| o.prefix = "a{b}".into())),
        ("prefix", set(|o| o.prefix = String::new())),
        ("tag", set(|o| o.tag = Some("t t".into()))),
        ("timeout", set(|o| o.timeout = Duration::ZERO)),
        ("timeout", set(|o| o.timeout = Duration::MAX)),
        ("connections", set(|o| o.connections = 65)),
    ];
    for (name, options) in cases {
        let store = StoreSpec::Redis {
            url: format!("redis://127.0.0.1:{port}"),
            options,
        };
        let q: Quota = "10/m".parse().unwrap();
        let keyed = KeyedLimiter::<u64>::builder(q)
            .store(store.clone())
            .build()
            .err();
        let single = Limiter::builder(q).store(store).build().err();
        for e in [keyed, single] {
            assert!(
                matches!(e, Some(Error::InvalidOption { option, .. }) if option == name),
                "{name}: {e:?}"
            );
        }
    }
}

/// A three-master cluster: keys spread over the slots, every decision exact; composites
/// whose parts share a tag run in one call; parts in different slots are refused before any
/// call with an error that says what to do.
#[test]
fn cluster_of_three_masters() {
    let cluster = Cluster::start();
    let url = format!(
        "{}?prefix=cl&on_error=error&timeout=2s&negative_cache=off",
        cluster.url()
    );
    let l = KeyedLimiter::<u64>::builder("5/m".parse().unwrap())
        .store(spec(&url))
        .build()
        .unwrap();
    for k in 0..200u64 {
        let n = (0..7)
            .filter(|_| l.try_acquire(&k, 1).unwrap().allowed())
            .count();
        assert_eq!(n, 5, "key {k}");
    }
    let spread: Vec<i64> = cluster
        .nodes
        .iter()
        .map(|n| n.resp().int(&["DBSIZE"]))
        .collect();
    assert!(spread.iter().all(|&n| n > 20), "keys per node: {spread:?}");
    assert_eq!(cluster.dbsize(), 200);

    let part = |prefix: &str, tag: &str, q: &str| {
        Limiter::builder(q.parse().unwrap())
            .store(spec(&format!(
                "{}?prefix={prefix}&tag={tag}&on_error=error&timeout=2s",
                cluster.url()
            )))
            .build()
            .unwrap()
    };
    let c = Composite::new(vec![part("u7", "t1", "2/m"), part("global", "t1", "3/m")]);
    let calls = c.parts()[0].redis_stats().unwrap().decided;
    assert!(c.try_acquire(1).unwrap().allowed());
    assert!(c.try_acquire(1).unwrap().allowed());
    let d = c.try_acquire(1).unwrap();
    assert!(!d.allowed());
    assert_eq!(
        c.parts()[0].redis_stats().unwrap().decided - calls,
        3,
        "one call each"
    );
    // The refunded global part still has one.
    assert_eq!(c.parts()[1].peek().unwrap().remaining(), 1);

    // "a" and "b" hash to different slots.
    let bad = Composite::new(vec![part("x", "a", "2/m"), part("y", "b", "2/m")]);
    match bad.try_acquire(1) {
        Err(Error::Store {
            kind: StoreErrorKind::Unsupported,
            reason,
            ..
        }) => {
            assert!(
                reason.contains("hash slot") && reason.contains("tag"),
                "{reason}"
            )
        }
        r => panic!("a cross-slot composite gave {r:?}"),
    }
}

/// A slot moved to another master under a limiter's bucket (a resharding, in its two halves):
/// while it migrates the old master answers ASK, then MOVED; each call is sent once more to
/// the node named (the reply means it did not run), which loads the scripts if it lacks them,
/// and the bucket's state moves with its key: every decision stays exact, none fails.
#[test]
fn cluster_resharding_redirects_once() {
    let cluster = Cluster::start();
    let url = format!(
        "{}?prefix=rs&on_error=error&timeout=2s&negative_cache=off",
        cluster.url()
    );
    let l = KeyedLimiter::<u64>::builder("5/m".parse().unwrap())
        .store(spec(&url))
        .build()
        .unwrap();
    assert_eq!(l.try_acquire(&1, 2).unwrap().remaining(), 3);
    let (from, name) = cluster
        .nodes
        .iter()
        .enumerate()
        .find_map(|(i, n)| n.resp().keys().into_iter().next().map(|k| (i, k)))
        .unwrap();
    let slot = match cluster.nodes[from]
        .resp()
        .cmd(&["CLUSTER", "KEYSLOT", &name])
        .unwrap()
    {
        Reply::Int(s) => s as u16,
        r => panic!("{r:?}"),
    };
    assert_eq!(cluster.owner(slot), from);
    let to = (from + 1) % 3;
    cluster.start_migration(slot, from, to);
    let d = l.try_acquire(&1, 1).unwrap();
    assert!(
        d.allowed() && d.remaining() == 2,
        "after ASK: {}",
        got(Ok(d))
    );
    let asked = l.redis_stats().unwrap();
    assert_eq!(asked.redirects, 1, "{asked:?}");
    cluster.finish_migration(slot, to);
    let d = l.try_acquire(&1, 1).unwrap();
    assert!(
        d.allowed() && d.remaining() == 1,
        "after MOVED: {}",
        got(Ok(d))
    );
    let s = l.redis_stats().unwrap();
    assert!(s.redirects >= 2 && s.failed_error == 0, "{s:?}");
    assert_eq!(cluster.owner(slot), to);
    let count = |n: usize| {
        let slot = slot.to_string();
        cluster.nodes[n]
            .resp()
            .int(&["CLUSTER", "COUNTKEYSINSLOT", &slot])
    };
    assert_eq!(
        (count(from), count(to)),
        (0, 1),
        "the bucket moved with its slot"
    );
    // The slot map is up to date again: no more redirects.
    let before = l.redis_stats().unwrap().redirects;
    assert!(!l.try_acquire(&1, 2).unwrap().allowed());
    assert_eq!(l.redis_stats().unwrap().redirects, before);
}

/// The node each of keys `0..n` of `l` lives on, and its bucket's name: each key's first
/// call, and the name that appeared on a node.
fn cluster_homes(cluster: &Cluster, l: &KeyedLimiter<u64>, n: u64) -> Vec<(usize, String)> {
    let names = || -> Vec<Vec<String>> {
        (0..cluster.nodes.len())
            .map(|i| cluster.resp(i).keys())
            .collect()
    };
    let mut before = names();
    (0..n)
        .map(|k| {
            let d = l.try_acquire(&k, 1);
            assert!(d.as_ref().is_ok_and(Decision::allowed), "key {k}: {d:?}");
            let after = names();
            let home = (0..after.len())
                .find_map(|i| {
                    let new = after[i].iter().find(|n| !before[i].contains(n))?;
                    Some((i, new.clone()))
                })
                .unwrap_or_else(|| panic!("key {k}'s bucket is on no node"));
            before = after;
            home
        })
        .collect()
}

/// A master of a three-master cluster killed: calls for its slots fail (to the fail policy),
/// and calls for the other masters' slots keep being decided by them, every one. Before, the
/// first failed call dropped the whole cluster connection, so that calls for every slot failed
/// ("not connected") until the next one was open, which routed to the dead master again and
/// dropped it again: 166 of 180 calls failed where a third of the keys live on the dead master.
/// (`cluster-require-full-coverage no`: the live masters serve their slots once the cluster
/// has marked the dead one failed.) Nor does each such call make the cluster's client
/// reconnect to every master.
#[test]
fn a_dead_cluster_master_fails_only_its_own_slots() {
    let mut cluster = Cluster::start();
    for n in 0..3 {
        cluster
            .resp(n)
            .cmd(&["CONFIG", "SET", "cluster-require-full-coverage", "no"])
            .unwrap();
    }
    let url = format!(
        "{}?prefix=cldead&on_error=error&timeout=1s&negative_cache=off",
        cluster.url()
    );
    // Buckets that stay on their masters through the test (a token a 8.64 s).
    let l = keyed("10000/d", &url);
    let homes: Vec<usize> = cluster_homes(&cluster, &l, 60)
        .into_iter()
        .map(|(h, _)| h)
        .collect();
    let dead = 2;
    let on_dead = homes.iter().filter(|&&h| h == dead).count();
    assert!(
        on_dead > 5 && on_dead < 55,
        "keys on the dead master: {on_dead}"
    );
    // Connections a live master accepted (each look opens one).
    let live = homes
        .iter()
        .position(|&h| h != dead)
        .map(|k| homes[k])
        .unwrap();
    let accepted = |cluster: &Cluster| -> i64 {
        info(
            &mut cluster.resp(live),
            "stats",
            "total_connections_received",
        )
        .parse()
        .unwrap()
    };
    let accepted_before = accepted(&cluster);
    cluster.nodes[dead].kill();
    let before = l.redis_stats().unwrap();
    let mut failed_live = Vec::new();
    for round in 0..3 {
        for (k, &home) in homes.iter().enumerate() {
            let d = l.try_acquire(&(k as u64), 1);
            if home == dead {
                assert!(
                    d.is_err(),
                    "round {round}, key {k} of the dead master: {d:?}"
                );
            } else if !d.as_ref().is_ok_and(Decision::allowed) {
                failed_live.push((round, k, format!("{d:?}")));
            }
        }
    }
    let s = l.redis_stats().unwrap();
    assert!(
        failed_live.is_empty(),
        "{} calls of the live masters failed: {failed_live:?}; {s:?}",
        failed_live.len()
    );
    assert_eq!(
        s.decided - before.decided,
        3 * (60 - on_dead) as u64,
        "{s:?}"
    );
    assert_eq!(
        s.failed_error - before.failed_error,
        3 * on_dead as u64,
        "{s:?}"
    );
    // The calls for the dead master's slots did not make the cluster's client reconnect
    // from its seeds at each (a redirection to a node it has no connection to does): a
    // handful of connections, not one a call.
    let opened = accepted(&cluster) - accepted_before;
    assert!(opened <= 10, "a live master accepted {opened} connections");
}

/// A slot moved to a master the limiter's cluster client has no connection to (a fourth
/// master, met with CLUSTER MEET, that had no slot): the ASK and MOVED replies name a node
/// the client does not know. The call is sent to that node all the same (a connection of
/// its own), and decided; the calls of the other slots are decided throughout. Before, the
/// redirected call failed with "connection to node in cluster not found", which dropped the
/// whole cluster connection, and the next call for a healthy slot failed too.
#[test]
fn cluster_redirect_to_a_new_master() {
    let mut cluster = Cluster::start();
    let url = format!(
        "{}?prefix=clnew&on_error=error&timeout=2s&negative_cache=off",
        cluster.url()
    );
    let l = keyed("5/m", &url);
    let homes = cluster_homes(&cluster, &l, 30);
    // Key 0 moves; key `other` lives on another master and stays.
    let (from, name) = homes[0].clone();
    let other = homes.iter().position(|(h, _)| *h != from).unwrap() as u64;
    let slot = match cluster
        .resp(from)
        .cmd(&["CLUSTER", "KEYSLOT", &name])
        .unwrap()
    {
        Reply::Int(s) => s as u16,
        r => panic!("{r:?}"),
    };
    let to = cluster.add_master();
    let left = |key: u64| {
        let d = l.try_acquire(&key, 1);
        assert!(
            d.as_ref().is_ok_and(Decision::allowed),
            "key {key}: {d:?}; {:?}",
            l.redis_stats()
        );
        d.unwrap().remaining()
    };
    // Each key took one of 5 in `cluster_homes`.
    assert_eq!(left(other), 3);
    cluster.start_migration(slot, from, to);
    // Every key of the slot moved, key 0's bucket with them.
    assert_eq!(left(0), 3, "after ASK to the new master");
    assert_eq!(left(other), 2, "a healthy slot after the ASK");
    cluster.finish_migration(slot, to);
    assert_eq!(left(0), 2, "after MOVED to the new master");
    assert_eq!(left(other), 1, "a healthy slot after the MOVED");
    let s = l.redis_stats().unwrap();
    assert!(s.redirects >= 2, "{s:?}");
    none_failed(&s, "");
    assert_eq!(cluster.owner(slot), to);
}

/// A cluster whose nodes ask for a password, named once in a URL of three seeds
/// (`redis+cluster://:PASSWORD@h1,h2,h3`): every seed is given it. Before, the first seed
/// alone had it, and the client refused to build ("Cannot use different password among
/// initial nodes").
#[test]
fn cluster_with_a_password_and_several_seeds() {
    let cluster = Cluster::start_with_password(Some("hunter2"));
    let url = format!(
        "{}?prefix=clpw&on_error=error&timeout=2s&negative_cache=off",
        cluster.url()
    );
    assert!(
        url.contains(":hunter2@") && url.matches(',').count() == 2,
        "{url}"
    );
    let l = keyed("5/m", &url);
    for k in 0..30u64 {
        assert_eq!(l.try_acquire(&k, 1).unwrap().remaining(), 4, "key {k}");
    }
    let s = l.redis_stats().unwrap();
    assert_eq!(s.decided, 30, "{s:?}");
    none_failed(&s, "");
    assert_eq!(cluster.dbsize(), 30);
}

/// The value of `field` in INFO `section` of a server.
fn info(r: &mut server::Resp, section: &str, field: &str) -> String {
    match r.cmd(&["INFO", section]).unwrap() {
        Reply::Bulk(text) => text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or("")
            .trim()
            .to_string(),
        other => panic!("INFO {section}: {other:?}"),
    }
}

/// Waits (at most `secs`) for `ready`.
fn wait_for(secs: u64, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !ready() {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `redis+sentinel://`: the store asks the sentinel for the master, decides there, and after
/// a failover (the replica promoted, the old master turned into its replica) finds the new
/// master by itself: the call that meets the old one fails (READONLY: it did not run) and the
/// policy decides it, later calls are decided by the new master, on the state replication
/// carried over.
#[test]
fn sentinel_finds_the_master_and_follows_a_failover() {
    let master = Server::start();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    wait_for(10, "replication", || {
        info(&mut replica.resp(), "replication", "master_link_status") == "up"
    });
    let sentinel = Sentinel::start(master.port);
    let url = format!(
        "redis+sentinel://127.0.0.1:{}/mymaster?prefix=sen&on_error=error&timeout=2s&negative_cache=off",
        sentinel.port
    );
    let l = KeyedLimiter::<u64>::builder("5/h".parse().unwrap())
        .store(spec(&url))
        .build()
        .unwrap();
    assert_eq!(l.try_acquire(&1, 2).unwrap().remaining(), 3);
    assert_eq!(master.resp().keys().len(), 1, "decided on the master");
    assert_eq!(master.resp().int(&["WAIT", "1", "5000"]), 1, "replicated");
    // The sentinel learns of the replica from the master's INFO (every 10 s at first).
    wait_for(30, "a replica the sentinel can promote", || {
        let r = sentinel.resp().cmd(&["SENTINEL", "FAILOVER", "mymaster"]);
        r.unwrap() == Reply::Status("OK".into())
    });
    wait_for(30, "the failover", || {
        sentinel.master_port() == Some(replica.port)
            && info(&mut master.resp(), "replication", "role") == "slave"
            && info(&mut master.resp(), "replication", "master_link_status") == "up"
    });
    let mut failed = 0;
    let d = loop {
        match l.try_acquire(&1, 1) {
            Ok(d) => break d,
            Err(e) => {
                assert!(matches!(e, Error::Store { .. }), "{e}");
                failed += 1;
                assert!(failed < 200, "no decision after the failover: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    assert!(d.allowed() && d.remaining() == 2, "{}", got(Ok(d)));
    let s = l.redis_stats().unwrap();
    assert!(s.connects >= 2, "{s:?}");
    assert_eq!(s.failed_error, failed);
    assert_eq!(replica.resp().keys().len(), 1, "decided on the new master");
}

/// A master asking for a password, behind a sentinel asking for one of its own: the URL's
/// `user:password@` reach the master, `sentinel_pass` the sentinel, and `db` (in the query or
/// the path) chooses the master's database. The query's `db` was dropped, and no password
/// could reach the master.
#[test]
fn sentinel_with_passwords_and_a_database() {
    let master = Server::start_with(&["--requirepass", "m4ster"]);
    let sentinel = Sentinel::start_with_auth(master.port, Some("m4ster"), Some("s3ntinel"));
    let on = |auth: &str, path: &str, query: &str| {
        let url = format!(
            "redis+sentinel://{auth}127.0.0.1:{}/mymaster{path}?on_error=error&timeout=2s{query}",
            sentinel.port
        );
        // A login refused fails the build (the test's error is either's).
        KeyedLimiter::<u64>::builder("5/h".parse().unwrap())
            .store(spec(&url))
            .build()
            .and_then(|l| l.try_acquire(&1, 1))
    };
    let keys_in = |db: &str| {
        let mut r = master.resp();
        r.cmd(&["AUTH", "m4ster"]).unwrap();
        r.cmd(&["SELECT", db]).unwrap();
        r.keys()
    };
    let d = on(":m4ster@", "", "&db=3&sentinel_pass=s3ntinel&prefix=q").unwrap();
    assert_eq!(d.remaining(), 4);
    assert!(
        keys_in("3").iter().any(|k| k.starts_with("q:")),
        "{:?}",
        keys_in("3")
    );
    assert!(keys_in("0").is_empty(), "{:?}", keys_in("0"));
    on(":m4ster@", "/5", "&sentinel_pass=s3ntinel&prefix=p").unwrap();
    assert!(keys_in("5").iter().any(|k| k.starts_with("p:")));
    // Without the master's password, or the sentinel's: errors, never a decision.
    for (auth, query) in [("", "&sentinel_pass=s3ntinel"), (":m4ster@", "")] {
        let e = on(auth, "", query).unwrap_err();
        assert!(matches!(e, Error::Store { .. }), "{e}");
        // A login refused is a misconfiguration to fix, not an outage to ride out.
        assert!(
            matches!(
                e,
                Error::Store {
                    kind: StoreErrorKind::Permission,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            !e.to_string().contains("m4ster") && !e.to_string().contains("s3ntinel"),
            "{e}"
        );
    }
    // The sentinel's password is a secret too.
    let printed = spec(&format!(
        "redis+sentinel://u:m4ster@127.0.0.1:{}/mymaster?sentinel_user=s&sentinel_pass=s3ntinel",
        sentinel.port
    ))
    .to_string();
    assert!(
        !printed.contains("m4ster") && !printed.contains("s3ntinel"),
        "{printed}"
    );
}

/// Child side of [`rediss_urls`]: one limiter on `$SG_TLS_URL`, with the certificate
/// authorities of `$SSL_CERT_FILE` (the variable rustls-native-certs reads).
#[test]
fn tls_child() {
    let Ok(url) = std::env::var("SG_TLS_URL") else {
        return;
    };
    let l = KeyedLimiter::<u64>::builder("3/m".parse().unwrap())
        .store(spec(&url))
        .build()
        .unwrap();
    let mut admitted = 0;
    for _ in 0..5 {
        match l.try_acquire(&1, 1) {
            Ok(d) => admitted += u32::from(d.allowed()),
            Err(e) => {
                println!("ERROR {}", e.code());
                return;
            }
        }
    }
    println!("ADMITTED {admitted}");
}

/// `rediss://` (feature `redis-tls`): a server with TLS only on the port the URL names,
/// its certificate signed by a private authority that the client trusts through
/// `SSL_CERT_FILE`: exact decisions; with no authority that signed it, no connection (the
/// policy decides). Without the feature, a clear error when the limiter is built.
#[test]
fn rediss_urls() {
    #[cfg(feature = "redis-tls")]
    {
        let certs = Certs::make();
        let tls_port = server::free_port().to_string();
        let srv = Server::start_with(&[
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            &certs.path("server.crt"),
            "--tls-key-file",
            &certs.path("server.key"),
            "--tls-ca-cert-file",
            &certs.path("ca.crt"),
            "--tls-auth-clients",
            "no",
        ]);
        let url = format!("rediss://127.0.0.1:{tls_port}?prefix=tls&on_error=error&timeout=2s");
        let child = |ca: &str| {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "tls_child", "--nocapture", "--test-threads=1"])
                .env("SG_TLS_URL", &url)
                .env("SSL_CERT_FILE", ca)
                .output()
                .unwrap();
            assert!(out.status.success());
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let at = text
                .find("ADMITTED ")
                .or_else(|| text.find("ERROR "))
                .unwrap_or_else(|| panic!("the child said {text}"));
            text[at..].lines().next().unwrap_or("").to_string()
        };
        assert_eq!(child(&certs.path("ca.crt")), "ADMITTED 3");
        assert!(srv.resp().keys().iter().any(|k| k.starts_with("tls:")));
        let untrusted = certs.path("nothing.pem");
        std::fs::write(&untrusted, "").unwrap();
        assert_eq!(child(&untrusted), "ERROR store_unavailable");
    }
    #[cfg(not(feature = "redis-tls"))]
    {
        let _ = (Certs::make, Certs::path);
        let r = KeyedLimiter::<u64>::builder("3/m".parse().unwrap())
            .store(spec("rediss://127.0.0.1:1"))
            .build();
        match r {
            Err(Error::Store {
                kind: StoreErrorKind::Unsupported,
                reason,
                ..
            }) => assert!(reason.contains("redis-tls"), "{reason}"),
            r => panic!("rediss:// without redis-tls: {r:?}"),
        }
    }
}

/// Batches and async calls decide exactly as single blocking calls do.
#[test]
fn batches_async_and_composites_on_one_server() {
    let srv = Server::start();
    let url = format!(
        "{}?prefix=batch&on_error=error&timeout=2s&negative_cache=off",
        srv.url()
    );
    let q: Quota = "3/m".parse().unwrap();
    let l = KeyedLimiter::<String>::builder(q)
        .store(spec(&url))
        .build()
        .unwrap();
    let keys = ["a", "b", "a", "c", "a", "a", "b"];
    let reqs: Vec<(&str, u64)> = keys.iter().map(|k| (*k, 1)).collect();
    let allowed: Vec<bool> = l
        .try_acquire_many(&reqs)
        .into_iter()
        .map(|r| r.unwrap().allowed())
        .collect();
    assert_eq!(allowed, [true, true, true, true, true, false, true]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        assert!(!l.try_acquire_async("a", 1).await.unwrap().allowed());
        assert_eq!(l.peek_async("b").await.unwrap().remaining(), 1);
        l.refund_async("a", 2).await.unwrap();
        assert!(l.try_acquire_async("a", 2).await.unwrap().allowed());
        let many = l
            .try_acquire_many_async(&[("c", 2), ("c", 1), ("d", 4)])
            .await;
        assert!(many[0].as_ref().unwrap().allowed());
        assert!(!many[1].as_ref().unwrap().allowed());
        assert!(matches!(many[2], Err(Error::InsufficientCapacity { .. })));
        let part = |p: &str, q: &str| {
            Limiter::builder(q.parse().unwrap())
                .store(spec(&format!(
                    "{}?prefix={p}&on_error=error&timeout=2s",
                    srv.url()
                )))
                .build()
                .unwrap()
        };
        let c = Composite::new(vec![
            part("ca", "1/m"),
            part("cb", "5/m; algorithm=fixed_window"),
        ]);
        let (d, each) = c.try_acquire_each_async(1).await.unwrap();
        assert!(d.allowed() && each.len() == 2 && each[1].remaining() == 4);
        let (d, each) = c.try_acquire_each_async(1).await.unwrap();
        // The part after the rejecting one reads as the decision the request would get.
        assert!(!d.allowed() && !each[0].allowed() && each[1].remaining() == 3);
    });
    // remove, clear, len, snapshot.
    assert_eq!(l.len(), 3, "a, b and c (d's request was an error)");
    assert!(l.remove("a").unwrap());
    assert!(!l.remove("a").unwrap());
    l.clear().unwrap();
    assert_eq!(l.len(), 0);
    assert!(matches!(
        l.snapshot(),
        Err(Error::Store {
            kind: StoreErrorKind::Unsupported,
            ..
        })
    ));
}

/// Replaces the scripts' library on the server by one whose every function answers `reply`
/// (a Lua table): a server, proxy or script that answers what the call did not ask for.
fn hijack(r: &mut server::Resp, reply: &str) {
    let libs = r.cmd(&["FUNCTION", "LIST"]).unwrap();
    let Reply::Array(libs) = libs else {
        panic!("{libs:?}")
    };
    let lib = libs
        .iter()
        .find_map(|l| match l {
            Reply::Array(f) => match (&f[0], &f[1]) {
                (Reply::Bulk(k), Reply::Bulk(n)) if k == "library_name" => Some(n.clone()),
                _ => None,
            },
            _ => None,
        })
        .expect("the scripts are loaded");
    let mut body = format!("#!lua name={lib}\nlocal function answer() return {reply} end\n");
    for f in ["", "_tb", "_gcra"] {
        body += &format!("redis.register_function('{lib}{f}', answer)\n");
    }
    body += &format!(
        "redis.register_function{{function_name = '{lib}_ro', callback = answer, \
         flags = {{'no-writes'}}}}\n"
    );
    let loaded = r.cmd(&["FUNCTION", "LOAD", "REPLACE", &body]).unwrap();
    assert_eq!(loaded, Reply::Bulk(lib), "{body}");
}

/// A reply of another shape than the call's (another length for the parts, a refund's reply
/// to an acquisition) is corrupt: the fail policy decides it, never a panic or an admission.
#[test]
fn replies_of_the_wrong_shape_go_to_the_policy() {
    let srv = Server::start();
    let mut r = srv.resp();
    let part = |p: &str, q: &str, policy: &str| {
        Limiter::builder(q.parse().unwrap())
            .store(spec(&format!(
                "{}?prefix={p}&on_error={policy}&timeout=2s&negative_cache=off",
                srv.url()
            )))
            .build()
            .unwrap()
    };
    let q = "5/m; algorithm=fixed_window";
    let strict = Composite::new(vec![part("wa", q, "error"), part("wb", q, "error")]);
    let closed = Composite::new(vec![part("wc", q, "closed"), part("wd", q, "closed")]);
    let single = part("we", q, "error");
    let keyed = keyed(
        q,
        &format!("{}?prefix=wf&on_error=error&timeout=2s", srv.url()),
    );
    assert!(strict.try_acquire_each(1).unwrap().0.allowed());
    fn corrupt<T: std::fmt::Debug>(r: Result<T, Error>) {
        assert!(
            matches!(
                r,
                Err(Error::Store {
                    kind: StoreErrorKind::Corrupt,
                    ..
                })
            ),
            "{r:?}"
        );
    }
    // One bucket's decision to a call on two.
    hijack(&mut r, "{0, 1, 1, 5, 4, 0, 0}");
    corrupt(strict.try_acquire_each(1).map(|(d, _)| d));
    corrupt(strict.try_acquire(1));
    let (d, each) = closed.try_acquire_each(1).unwrap();
    assert!(!d.allowed() && each.len() == 2 && each.iter().all(|d| !d.allowed()));
    // A refund's reply to a request, a request's to a refund.
    hijack(&mut r, "{0, 1}");
    corrupt(strict.try_acquire(1));
    corrupt(single.try_acquire(1));
    corrupt(single.peek());
    corrupt(keyed.try_acquire(&1, 1));
    assert!(!closed.try_acquire(1).unwrap().allowed());
    hijack(&mut r, "{0, 1, 1, 5, 4, 0, 0}");
    corrupt(single.refund(1));
    corrupt(keyed.refund(&1, 1));
    corrupt(strict.refund(1));
}

/// Quotas the store cannot hold in microsecond ticks are refused when the limiter is built,
/// and so is the test clock's opposite mistake, an unknown option.
#[test]
fn refused_quotas_and_options() {
    let srv = Server::start();
    let r = KeyedLimiter::<u64>::builder("3/ns; algorithm=fixed_window".parse().unwrap())
        .store(spec(&srv.url()))
        .build();
    assert!(matches!(r, Err(Error::InvalidQuota { .. })), "{r:?}");
    assert!(format!("{}?nonsense=1", srv.url())
        .parse::<StoreSpec>()
        .is_err());
    // A URL the client cannot read is a wrong store string, as the core's own checks say,
    // not an unsupported store.
    // (A port or database out of range is refused sooner, when the URL is parsed.)
    for url in ["redis://127.0.0.1:99999/0", "redis://127.0.0.1:6379/abc"] {
        let e = url.parse::<StoreSpec>().unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidOption {
                    option: "store",
                    ..
                }
            ),
            "{url}: {e:?}"
        );
    }
    for url in ["redis://:@", "redis+sentinel://127.0.0.1:1/"] {
        let r = KeyedLimiter::<u64>::builder("3/s".parse().unwrap())
            .store(spec(url))
            .build();
        assert!(
            matches!(
                r,
                Err(Error::InvalidOption {
                    option: "store",
                    ..
                })
            ),
            "{url}: {r:?}"
        );
    }
    // `?db=` on a TCP URL chooses the database (the client read only the path's: db 0).
    // 3/h: the key must still be there for the KEYS below (a bucket of 3/s filled, and its key
    // expired, 333 ms later).
    let l = KeyedLimiter::<u64>::builder("3/h".parse().unwrap())
        .store(spec(&format!(
            "redis://127.0.0.1:{}?db=7&prefix=qdb&on_error=error&timeout=2s",
            srv.port
        )))
        .build()
        .unwrap();
    assert!(l.try_acquire(&1, 1).unwrap().allowed());
    let mut in7 = srv.resp();
    in7.cmd(&["SELECT", "7"]).unwrap();
    assert!(in7.keys().iter().any(|k| k.starts_with("qdb:")));
    assert!(!srv.resp().keys().iter().any(|k| k.starts_with("qdb:")));
    // The server's clock: a reading given by the limiter's clock is not what decides.
    let clock = ManualClock::new(0);
    let l = Limiter::builder("1/h".parse().unwrap())
        .clock(clock.clone())
        .store(spec(&format!(
            "{}?prefix=srvclock&on_error=error&timeout=2s",
            srv.url()
        )))
        .build()
        .unwrap();
    assert!(l.try_acquire(1).unwrap().allowed());
    clock.advance(Duration::from_secs(7200));
    assert!(
        !l.try_acquire(1).unwrap().allowed(),
        "only the server's clock counts"
    );
    let mut resp = srv.resp();
    let keys = resp.keys();
    let key = keys
        .iter()
        .find(|k| k.starts_with("srvclock:"))
        .unwrap_or_else(|| panic!("{keys:?}"));
    assert!(key.ends_with("{srvclock}"), "{key}");
    let (v, exp) = resp.value(key);
    assert!(matches!(v, Reply::Bulk(_)) && exp > 0);
}

/// Live reconfiguration is refused on Redis (the keys embed a hash of the quota, and every
/// host decides with its own; docs/OPERATIONS.md), with a typed error; nothing changes.
#[test]
fn live_reconfiguration_is_refused() {
    let srv = Server::start();
    let url = format!("{}?prefix=reconf", srv.url());
    let kl = KeyedLimiter::<u64>::builder("5/s".parse().unwrap())
        .store(spec(&url))
        .build()
        .unwrap();
    let single = Limiter::builder("5/s".parse().unwrap())
        .store(spec(&format!("{}?prefix=reconf-single", srv.url())))
        .build()
        .unwrap();
    for r in [
        kl.set_quota("6/s".parse().unwrap()),
        single.set_quota("6/s".parse().unwrap()),
    ] {
        assert!(
            matches!(
                &r,
                Err(Error::Store {
                    kind: sluicegate::StoreErrorKind::Unsupported,
                    ..
                })
            ),
            "{r:?}"
        );
    }
    assert_eq!(kl.quota().to_string(), "5/s");
    assert!(kl.try_acquire(&1, 1).unwrap().allowed());
    assert!(single.try_acquire(1).unwrap().allowed());
}

/// A composite whose parts are not all on one deployment is decided part by part: when a part
/// rejects, every part taken before it gets its cost back even after one of those refunds
/// failed (the first error is returned once all were tried), and so does
/// `Composite::refund`. Both stopped at the first failed refund, leaving the parts after it
/// consumed.
#[test]
fn a_failed_part_refund_does_not_stop_the_others() {
    let srv = Server::start();
    let mut r = srv.resp();
    let redis = Limiter::builder("5/h".parse().unwrap())
        .store(spec(&format!(
            "{}?prefix=rf&on_error=error&timeout=2s&negative_cache=off",
            srv.url()
        )))
        .build()
        .unwrap();
    let mem = |q: &str| Limiter::builder(q.parse().unwrap()).build().unwrap();
    let c = Composite::new(vec![redis, mem("5/h"), mem("1/h")]);
    assert!(c.parts()[2].try_acquire(1).unwrap().allowed()); // the last part rejects now
                                                             // Every call on the server answers a one-bucket admission: the Redis part's acquisitions
                                                             // are admitted, and its refunds get a corrupt reply.
    hijack(&mut r, "{4, 0}");
    assert!(c.parts()[0].try_acquire(1).unwrap().allowed());
    let corrupt = |r: Result<(), Error>| {
        assert!(
            matches!(
                r,
                Err(Error::Store {
                    kind: StoreErrorKind::Corrupt,
                    ..
                })
            ),
            "{r:?}"
        )
    };
    corrupt(c.parts()[0].refund(1));
    let full = |c: &Composite<_>| c.parts()[1].peek().unwrap().remaining();
    // Parts 0 and 1 taken, part 2 rejects: part 0's refund fails, part 1's must happen.
    corrupt(c.try_acquire(1).map(drop));
    assert_eq!(
        full(&c),
        5,
        "the part after the failed refund kept the cost"
    );
    corrupt(c.try_acquire_each(1).map(drop));
    assert_eq!(full(&c), 5);
    // A refund of the composite.
    assert!(c.parts()[1].try_acquire(2).unwrap().allowed());
    corrupt(c.refund(2));
    assert_eq!(
        full(&c),
        5,
        "the part after the failed refund was not refunded"
    );
}

/// The SCAN commands the server has run so far (INFO commandstats).
fn scans(r: &mut server::Resp) -> u64 {
    let Reply::Bulk(info) = r.cmd(&["INFO", "commandstats"]).unwrap() else {
        panic!("INFO commandstats")
    };
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_scan:calls="))
        .map_or(0, |rest| {
            let n = rest.split(',').next().unwrap();
            n.parse().unwrap()
        })
}

/// `metrics()` of a keyed limiter on Redis counts no keys (`keys` is `None`: they live on the
/// server) and so sends no SCAN of the keyspace, which it did for every snapshot before
/// throwing the count away.
#[test]
fn keyed_metrics_on_redis_scan_nothing() {
    let srv = Server::start();
    let mut r = srv.resp();
    let kl = KeyedLimiter::<u64>::builder("5/h".parse().unwrap())
        .store(spec(&format!(
            "{}?prefix=msc&on_error=error&timeout=2s",
            srv.url()
        )))
        .metrics(true)
        .build()
        .unwrap();
    for k in 0..10 {
        assert!(kl.try_acquire(&k, 1).unwrap().allowed());
    }
    let before = scans(&mut r);
    for _ in 0..3 {
        let m = kl.metrics().unwrap();
        assert_eq!((m.allowed, m.keys, m.keys_evicted), (10, None, 0));
    }
    assert_eq!(scans(&mut r), before, "metrics() scanned the keyspace");
    // Nor does `{:?}`; it names the store (its password ***).
    let shown = format!("{kl:?}");
    assert_eq!(scans(&mut r), before, "Debug scanned the keyspace: {shown}");
    assert!(
        shown.contains("store: \"redis://") && !shown.contains("len"),
        "{shown}"
    );
    assert_eq!(kl.try_len().unwrap(), 10);
}

/// A count the server cannot give is an error from `try_len` (`len` says 0, as documented).
#[test]
fn try_len_reports_a_server_that_is_down() {
    let srv = Server::start();
    let kl = keyed(
        "5/h",
        &format!("{}?prefix=tl&on_error=error&timeout=200ms", srv.url()),
    );
    assert!(kl.try_acquire(&1, 1).unwrap().allowed());
    assert_eq!((kl.len(), kl.try_len().unwrap()), (1, 1));
    drop(srv);
    assert!(matches!(kl.try_len(), Err(Error::Store { .. })));
    assert_eq!(kl.len(), 0);
}

/// A bucket whose stored value is not decimal digits (a corrupt or foreign key: '1e15',
/// '0x1F', ' 42 ', '42.0', which Lua's tonumber reads as integers) is refused by the one-bucket
/// function as by the general call, never decided.
#[test]
fn a_stored_value_that_is_not_digits_is_refused_on_the_fast_path() {
    let srv = Server::start();
    let url = format!("{}?prefix=digits&on_error=error&timeout=2s", srv.url());
    // 10/h: the key stays while the test reads it (at 10/s it expired 100 ms after).
    let kl = keyed("10/h; burst=5", &url);
    assert!(kl.try_acquire(&1, 1).unwrap().allowed());
    let mut r = srv.resp();
    let key = r
        .keys()
        .into_iter()
        .find(|k| k.starts_with("digits:"))
        .expect("the bucket's key");
    for bad in ["1e15", "0x1F", " 42 ", "42.0"] {
        r.cmd(&["SET", &key, bad]).unwrap();
        let e = kl.try_acquire(&1, 1).unwrap_err();
        assert!(matches!(e, Error::Store { .. }), "{bad:?}: {e:?}");
    }
}

/// A server that refuses the login (a wrong password, none where one is needed) or has no
/// such database: the limiter is not made, whatever `on_error` says (a limiter that fell back
/// on its policy would limit each process alone, without a word). The password is never
/// printed.
#[test]
fn a_refused_login_or_a_missing_database_is_an_error_when_made() {
    let srv = Server::start_with(&["--requirepass", "pa55word"]);
    let host = srv.url().replacen("redis://", "", 1);
    let make = |auth: &str, db: &str| {
        KeyedLimiter::<u64>::builder("5/h".parse().unwrap())
            .store(spec(&format!(
                "redis://{auth}{host}/{db}?prefix=auth&on_error=local&timeout=2s"
            )))
            .build()
    };
    for (auth, kind) in [
        (":wrong@", "refused the login"),
        ("", "NOAUTH"),
        ("someone:pa55word@", "refused the login"),
    ] {
        let e = make(auth, "0").unwrap_err();
        assert!(
            matches!(
                e,
                Error::Store {
                    kind: StoreErrorKind::Permission,
                    ..
                }
            ),
            "{auth}: {e:?}"
        );
        let text = e.to_string();
        assert!(text.contains(kind) && !text.contains("pa55word"), "{text}");
    }
    let e = make(":pa55word@", "99").unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidOption {
                option: "store",
                ..
            }
        ) && e.to_string().contains("DB"),
        "{e:?}"
    );
    // The right password and database: made, and decided by the server.
    let l = make(":pa55word@", "1").unwrap();
    assert!(l.try_acquire(&7, 1).unwrap().allowed());
    assert_eq!(l.redis_stats().unwrap().decided, 1);
}

/// A request's error names its store with the prefix, so that the limits on one server tell
/// which failed (it named the URL alone: `store unavailable "redis://127.0.0.1:6392/0": not
/// connected`), never with its password.
#[test]
fn a_failed_request_names_the_prefix() {
    let port = server::free_port(); // nothing listens there
    let url = |prefix: &str| {
        format!("redis://u:hunter2@127.0.0.1:{port}/0?prefix={prefix}&on_error=error&timeout=100ms")
    };
    let a = keyed("5/h", &url("api-a"));
    let b = Limiter::builder("5/h".parse().unwrap())
        .store(spec(&url("api-b")))
        .build()
        .unwrap();
    let plain = keyed(
        "5/h",
        &format!("redis://127.0.0.1:{port}/0?on_error=error&timeout=100ms"),
    );
    fn named<T: std::fmt::Debug>(r: Result<T, Error>, want: &str) {
        let e = r.unwrap_err();
        let Error::Store { kind, store, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(*kind, StoreErrorKind::Unavailable, "{e}");
        assert_eq!(store, want, "{e}");
        assert!(!format!("{e} {e:?}").contains("hunter2"), "{e}");
    }
    let want = |prefix: &str| format!("redis://u:***@127.0.0.1:{port}/0?prefix={prefix}");
    named(a.try_acquire(&1, 1), &want("api-a"));
    named(b.try_acquire(1), &want("api-b"));
    // Not only a decision's: a removal's and a count's too.
    named(a.remove(&1), &want("api-a"));
    named(a.try_len(), &want("api-a"));
    let e = plain.try_acquire(&1, 1).unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("\"redis://127.0.0.1:{port}/0?prefix=sluicegate\"")),
        "{e}"
    );
}

/// A peek (an admin's `get(key)`) on a server that does not answer is `Error::Store`
/// whatever `on_error` says, as `remove` and `try_len` are: the policy's answer (`local`: a
/// full bucket; `open`: allowed, 0 remaining; `closed`: not allowed) is no bucket's state.
/// Admissions are still the policy's, a composite's included (its looks at its parts are part
/// of its decision).
#[test]
fn a_peek_is_an_error_when_the_server_does_not_answer_whatever_the_policy() {
    let port = server::free_port(); // nothing listens there
    let rt = runtime("current");
    for policy in ["local", "open", "closed", "error"] {
        let url = format!("redis://127.0.0.1:{port}/0?prefix=look&on_error={policy}&timeout=100ms");
        let unavailable = |r: Result<Decision, Error>, what: &str| {
            let e = r.expect_err(&format!("{policy}: {what} answered"));
            assert!(
                matches!(
                    e,
                    Error::Store {
                        kind: StoreErrorKind::Unavailable,
                        ..
                    }
                ),
                "{policy}: {what}: {e:?}"
            );
            assert!(e.to_string().contains("prefix=look"), "{e}");
        };
        let kl = keyed("5/h", &url);
        unavailable(kl.peek(&1), "KeyedLimiter::peek");
        unavailable(rt.block_on(kl.peek_async(&1)), "KeyedLimiter::peek_async");
        let l = Limiter::builder("5/h".parse().unwrap())
            .store(spec(&url))
            .build()
            .unwrap();
        unavailable(l.peek(), "Limiter::peek");
        unavailable(rt.block_on(l.peek_async()), "Limiter::peek_async");
        assert!(l.is_full().is_err(), "{policy}: Limiter::is_full answered");
        // Decisions are still the policy's.
        let d = kl.try_acquire(&1, 1);
        let single = l.try_acquire(1);
        match policy {
            "error" => {
                unavailable(d, "KeyedLimiter::try_acquire");
                unavailable(single, "Limiter::try_acquire");
            }
            "closed" => assert!(!d.unwrap().allowed() && !single.unwrap().allowed()),
            _ => assert!(d.unwrap().allowed() && single.unwrap().allowed()),
        }
        if policy == "error" {
            continue;
        }
        // A composite over an in-process part and a part on the dead server: the in-process
        // protocol peeks at the Redis part after the other part's rejection, and that look is
        // the policy's, not an error.
        let mem = Limiter::new("1/h".parse().unwrap());
        assert!(mem.try_acquire(1).unwrap().allowed());
        let far = Limiter::builder("5/h".parse().unwrap())
            .store(spec(&url))
            .build()
            .unwrap();
        let both = Composite::new(vec![far, mem]);
        let (d, each) = both.try_acquire_each(1).unwrap();
        assert!(!d.allowed() && each.len() == 2, "{policy}: {d:?}");
        // Its peek, though, is a look at each part: the dead server's is an error.
        unavailable(both.peek(), "Composite::peek");
        unavailable(rt.block_on(both.peek_async()), "Composite::peek_async");
    }
}
