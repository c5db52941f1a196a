//! The Redis store's throughput and latency, side by side with a redis_rate-style GCRA script
//! (floats, EVALSHA; written here from that library's idea), on one redis-server this program
//! starts on a free loopback port (`redis-server` from PATH or `$REDIS_SERVER`) and stops:
//!
//!     cargo run --release -p sluicegate --features redis --example redis_bench [SECONDS]
//!
//! Decisions per second and p50/p99 latency at 1 and 50 concurrent callers (tokio tasks on a
//! one-thread runtime), each caller on keys drawn from 10 000, quota `1000000/s`:
//! "pipelined" callers share one connection (the store's automatic pipelining; for the GCRA
//! script one multiplexed connection), "unpipelined" ones have a connection each, so one
//! request per round trip. Then the negative cache: a rejected key asked again and again.

use sluicegate::{KeyedLimiter, Quota, StoreSpec};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const GCRA: &str = r#"
redis.replicate_commands()
local rate_limit_key = KEYS[1]
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local emission_interval = period / rate
local increment = emission_interval * cost
local burst_offset = emission_interval * burst
local jan_1_2017 = 1483228800
local now = redis.call("TIME")
now = (now[1] - jan_1_2017) + (now[2] / 1000000)
local tat = redis.call("GET", rate_limit_key)
if not tat then tat = now else tat = tonumber(tat) end
tat = math.max(tat, now)
local new_tat = tat + increment
local allow_at = new_tat - burst_offset
local diff = now - allow_at
local remaining = diff / emission_interval
if remaining < 0 then
  return {0, 0, tostring(diff * -1), tostring(tat - now)}
end
local reset_after = new_tat - now
if reset_after > 0 then
  redis.call("SET", rate_limit_key, new_tat, "EX", math.ceil(reset_after))
end
return {cost, remaining, tostring(-1), tostring(reset_after)}
"#;

struct Row {
    name: String,
    per_s: f64,
    p50: Duration,
    p99: Duration,
}

fn row(name: &str, mut lat: Vec<Duration>, secs: f64) -> Row {
    lat.sort();
    let at = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    Row {
        name: name.to_string(),
        per_s: lat.len() as f64 / secs,
        p50: at(0.5),
        p99: at(0.99),
    }
}

fn key(i: u64) -> u64 {
    // A cheap mix: callers walk different keys.
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 10_000
}

async fn ours(spec: &str, callers: usize, own_connection: bool, secs: f64) -> Vec<Duration> {
    let q: Quota = "1000000/s".parse().unwrap();
    let shared = Arc::new(
        KeyedLimiter::<u64>::builder(q)
            .store(spec.parse().unwrap())
            .build()
            .unwrap(),
    );
    let mut tasks = Vec::new();
    for c in 0..callers {
        // A limiter of its own on a URL of its own (another timeout) is a connection of its own.
        let l = if own_connection {
            let s: StoreSpec = format!(
                "{}&timeout={}us",
                spec.replace("&timeout=2s", ""),
                2_000_000 + c
            )
            .parse()
            .unwrap();
            Arc::new(KeyedLimiter::<u64>::builder(q).store(s).build().unwrap())
        } else {
            shared.clone()
        };
        tasks.push(tokio::spawn(async move {
            let end = Instant::now() + Duration::from_secs_f64(secs);
            let mut lat = Vec::new();
            let mut i = c as u64 * 1_000_003;
            while Instant::now() < end {
                let t = Instant::now();
                l.try_acquire_async(&key(i), 1).await.unwrap();
                lat.push(t.elapsed());
                i += 1;
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

async fn gcra(url: &str, callers: usize, own_connection: bool, secs: f64) -> Vec<Duration> {
    let client = redis::Client::open(url).unwrap();
    let script = redis::Script::new(GCRA);
    let shared = client.get_multiplexed_async_connection().await.unwrap();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let mut conn = if own_connection {
            client.get_multiplexed_async_connection().await.unwrap()
        } else {
            shared.clone()
        };
        let script = script.clone();
        tasks.push(tokio::spawn(async move {
            let end = Instant::now() + Duration::from_secs_f64(secs);
            let mut lat = Vec::new();
            let mut i = c as u64 * 1_000_003;
            while Instant::now() < end {
                let t = Instant::now();
                let _: redis::Value = script
                    .key(format!("gcra:{}", key(i)))
                    .arg(1_000_000)
                    .arg(1_000_000)
                    .arg(1)
                    .arg(1)
                    .invoke_async(&mut conn)
                    .await
                    .unwrap();
                lat.push(t.elapsed());
                i += 1;
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .map_or(3.0, |s| s.parse().expect("SECONDS"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let exe = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _server = Stop(
        Command::new(exe)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--loglevel", "warning"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server"),
    );
    std::thread::sleep(Duration::from_millis(300));
    let url = format!("redis://127.0.0.1:{port}");
    let spec = format!("{url}?prefix=bench&negative_cache=off&on_error=error&timeout=2s");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    rt.block_on(async {
        // Warm up: load the scripts, fill the keys.
        ours(&spec, 4, false, 0.5).await;
        gcra(&url, 4, false, 0.5).await;
        for (callers, own) in [(1, false), (50, false), (50, true)] {
            let how = if callers == 1 {
                "1 caller".to_string()
            } else if own {
                format!("{callers} callers, unpipelined")
            } else {
                format!("{callers} callers, pipelined")
            };
            let lat = ours(&spec, callers, own, secs).await;
            rows.push(row(&format!("sluicegate, {how}"), lat, secs));
            let lat = gcra(&url, callers, own, secs).await;
            rows.push(row(&format!("GCRA script, {how}"), lat, secs));
        }
    });
    // One caller, blocking.
    let l = KeyedLimiter::<u64>::builder("1000000/s".parse().unwrap())
        .store(spec.parse().unwrap())
        .build()
        .unwrap();
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let (mut lat, mut i) = (Vec::new(), 0u64);
    while Instant::now() < end {
        let t = Instant::now();
        l.try_acquire(&key(i), 1).unwrap();
        lat.push(t.elapsed());
        i += 1;
    }
    rows.push(row("sluicegate, 1 caller, blocking API", lat, secs));

    println!(
        "{:<44} {:>12} {:>10} {:>10}",
        "subject", "decisions/s", "p50", "p99"
    );
    for r in &rows {
        println!(
            "{:<44} {:>12.0} {:>10.1?} {:>10.1?}",
            r.name, r.per_s, r.p50, r.p99
        );
    }

    // The negative cache: one rejected key, asked a million times.
    let neg = KeyedLimiter::<u64>::builder("1/h".parse().unwrap())
        .store(format!("{url}?prefix=neg").parse().unwrap())
        .build()
        .unwrap();
    assert!(neg.try_acquire(&7, 1).unwrap().allowed());
    assert!(!neg.try_acquire(&7, 1).unwrap().allowed());
    let n = 1_000_000;
    let t = Instant::now();
    for _ in 0..n {
        assert!(!neg.try_acquire(&7, 1).unwrap().allowed());
    }
    let per = t.elapsed() / n;
    let s = neg.redis_stats().unwrap();
    println!(
        "negative cache: {n} rejections of a cached key, {per:?} each, {} round trips in all",
        s.decided
    );
}
