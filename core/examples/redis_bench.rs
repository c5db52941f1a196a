//! The Redis store's throughput and latency, side by side with a redis_rate-style GCRA script
//! (floats, EVALSHA; written here from that library's idea), on one redis-server this program
//! starts on a free loopback port (`redis-server` from PATH or `$REDIS_SERVER`) and stops:
//!
//!     cargo run --release -p sluicegate --features redis --example redis_bench [SECONDS] [ROUNDS] [ONLY]
//!
//! Quota `1000000/s` (never rejects: every call writes), keys drawn from 10 000. Subjects:
//!
//! * `sluicegate API`: `KeyedLimiter::try_acquire_async` on the store, what an application
//!   gets: the benchmark's tasks run on a tokio runtime, so each call is driven on that
//!   runtime, on its connection (concurrent callers pipelined on it).
//! * `sluicegate API, hand-off`: the same with `connections=0`: every call handed to the
//!   store's background thread and pipelined on its one connection (what callers on another
//!   executor get).
//! * `sluicegate script` and `GCRA script`: the one-bucket function `NAME_tb` with the
//!   arguments the store sends, and the GCRA script by EVALSHA, both called by the same code
//!   (the redis crate's multiplexed connection, driven by the benchmark's own thread): the
//!   ratio of these two compares the scripts, not the clients.
//!
//! Concurrency: `1 caller`; `50 callers, pipelined`: 50 tasks share one connection, so that
//! concurrent requests travel together (many per round trip); `50 callers, unpipelined`: the
//! same 50 tasks and connection, one request per round trip (a caller holds the connection
//! until its reply is in); `50 callers, 50 connections`: a connection each, one request in
//! flight on each. Every row runs `ROUNDS` times (default 3), the subjects of one row one
//! after the other in each round; decisions/s is the median round (the range in brackets),
//! p50/p99 over all rounds; `server us` is the server's own time a call (INFO commandstats),
//! `client us` this process's CPU time a call (all its threads, the store's included; from
//! /proc/self/stat, median round): less noisy than wall time on a shared machine.
//! The async rows run on a current_thread runtime; then `1 caller` and `50 callers, pipelined`
//! again on a multi-thread runtime of 2 workers (the API, its hand-off and the GCRA script).
//! Then blocking callers (threads): pooled connections against `connections=0`.
//! Then the negative cache: a rejected key asked again and again. `ONLY`: run only the rows
//! whose name contains it (e.g. `"API, 1 caller"`, for a profiler), and the negative cache.

use redis::aio::MultiplexedConnection;
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

const QUOTA: &str = "1000000/s";
/// `QUOTA` in the one-bucket function's terms (SCRIPTS.md): k' = 1, p' = 1 tick, b = i = 10^6.
const TB_ARGS: [&str; 4] = ["1", "1", "1000000", "1000000"];

fn key(i: u64) -> u64 {
    // A cheap mix: callers walk different keys.
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 10_000
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    One,
    Pipelined,
    Unpipelined,
    Connections,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::One => "1 caller",
            Mode::Pipelined => "50 callers, pipelined",
            Mode::Unpipelined => "50 callers, unpipelined",
            Mode::Connections => "50 callers, 50 connections",
        }
    }

    fn callers(self) -> usize {
        if self == Mode::One {
            1
        } else {
            50
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Subject {
    Api,
    ApiHandOff,
    Script,
    Gcra,
}

impl Subject {
    fn name(self) -> &'static str {
        match self {
            Subject::Api => "sluicegate API",
            Subject::ApiHandOff => "sluicegate API, hand-off",
            Subject::Script => "sluicegate script",
            Subject::Gcra => "GCRA script",
        }
    }
}

/// What one caller calls.
#[derive(Clone)]
enum Target {
    Api(Arc<KeyedLimiter<u64>>),
    Script(MultiplexedConnection, Arc<str>),
    Gcra(MultiplexedConnection, Arc<str>),
}

impl Target {
    async fn once(&mut self, i: u64) {
        match self {
            Target::Api(l) => {
                l.try_acquire_async(&key(i), 1).await.unwrap();
            }
            Target::Script(conn, name) => {
                let _: redis::Value = redis::cmd("FCALL")
                    .arg(&**name)
                    .arg(1)
                    .arg(format!("bs:{}", key(i)))
                    .arg(1)
                    .arg(&TB_ARGS[..])
                    .query_async(conn)
                    .await
                    .unwrap();
            }
            Target::Gcra(conn, sha) => {
                let _: redis::Value = redis::cmd("EVALSHA")
                    .arg(&**sha)
                    .arg(1)
                    .arg(format!("gcra:{}", key(i)))
                    .arg(1_000_000)
                    .arg(1_000_000)
                    .arg(1)
                    .arg(1)
                    .query_async(conn)
                    .await
                    .unwrap();
            }
        }
    }
}

struct Bench {
    spec: String,
    client: redis::Client,
    function: Arc<str>,
    sha: Arc<str>,
    admin: MultiplexedConnection,
    /// Only the rows whose name contains this.
    only: String,
}

impl Bench {
    /// The targets of `callers` callers: one shared, or one each (`Mode::Connections`).
    async fn targets(
        &self,
        s: Subject,
        mode: Mode,
        shared_api: &[Arc<KeyedLimiter<u64>>; 2],
    ) -> Vec<Target> {
        let q: Quota = QUOTA.parse().unwrap();
        let mut out = Vec::new();
        let shared = self
            .client
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for c in 0..mode.callers() {
            let conn = if mode == Mode::Connections {
                self.client
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap()
            } else {
                shared.clone()
            };
            out.push(match s {
                Subject::Api | Subject::ApiHandOff if mode == Mode::Connections => {
                    // A limiter on a URL of its own (another timeout) has a connection of its own.
                    let extra = if s == Subject::Api {
                        ""
                    } else {
                        "&connections=0"
                    };
                    let spec: StoreSpec =
                        format!("{}&timeout={}us{extra}", self.spec, 2_000_000 + c)
                            .parse()
                            .unwrap();
                    Target::Api(Arc::new(
                        KeyedLimiter::builder(q).store(spec).build().unwrap(),
                    ))
                }
                Subject::Api => Target::Api(shared_api[0].clone()),
                Subject::ApiHandOff => Target::Api(shared_api[1].clone()),
                Subject::Script => Target::Script(conn, self.function.clone()),
                Subject::Gcra => Target::Gcra(conn, self.sha.clone()),
            });
        }
        out
    }

    /// One run: (decisions/s, latencies, server microseconds a call).
    async fn run(
        &self,
        s: Subject,
        mode: Mode,
        secs: f64,
        shared_api: &[Arc<KeyedLimiter<u64>>; 2],
    ) -> (f64, Vec<Duration>, f64, f64) {
        let targets = self.targets(s, mode, shared_api).await;
        let mut admin = self.admin.clone();
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut admin)
            .await
            .unwrap();
        // Unpipelined: a caller holds this until its reply is in.
        let turn = Arc::new(tokio::sync::Mutex::new(()));
        let start = Instant::now();
        let cpu0 = cpu_secs();
        let mut tasks = Vec::new();
        for (c, mut t) in targets.into_iter().enumerate() {
            let turn = turn.clone();
            tasks.push(tokio::spawn(async move {
                let end = Instant::now() + Duration::from_secs_f64(secs);
                let mut lat = Vec::new();
                let mut i = c as u64 * 1_000_003;
                while Instant::now() < end {
                    let t0 = Instant::now();
                    if mode == Mode::Unpipelined {
                        let _g = turn.lock().await;
                        t.once(i).await;
                    } else {
                        t.once(i).await;
                    }
                    lat.push(t0.elapsed());
                    i += 1;
                }
                lat
            }));
        }
        let mut lat = Vec::new();
        for t in tasks {
            lat.extend(t.await.unwrap());
        }
        let per_s = lat.len() as f64 / start.elapsed().as_secs_f64();
        let client_us = (cpu_secs() - cpu0) * 1e6 / lat.len() as f64;
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut admin)
            .await
            .unwrap();
        let cmd = if s == Subject::Gcra {
            "evalsha"
        } else {
            "fcall"
        };
        let us = stats
            .lines()
            .find(|l| l.starts_with(&format!("cmdstat_{cmd}:")))
            .and_then(|l| l.split("usec_per_call=").nth(1))
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN);
        (per_s, lat, us, client_us)
    }
}

/// A row of the table: subject, decisions/s (median round), its range, p50, p99, server µs.
type Row = (String, f64, (f64, f64), Duration, Duration, f64, f64);

/// This process's CPU time so far (user and system, all threads), in seconds.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime are the 12th and
    // 13th of them, in clock ticks (100 a second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(f64::NAN))
        .collect();
    f.get(11)
        .zip(f.get(12))
        .map_or(f64::NAN, |(u, s)| (u + s) / 100.0)
}

impl Bench {
    /// `rounds` rounds of every mode, the subjects taking turns within a round.
    async fn rows(
        &self,
        subjects: &[Subject],
        modes: &[Mode],
        rounds: usize,
        secs: f64,
        apis: &[Arc<KeyedLimiter<u64>>; 2],
        label: &str,
    ) -> Vec<Row> {
        let mut rows: Vec<Row> = Vec::new();
        for &mode in modes {
            #[allow(clippy::type_complexity)]
            let mut per: Vec<(Vec<f64>, Vec<Duration>, Vec<f64>, Vec<f64>)> =
                vec![Default::default(); subjects.len()];
            let name = |s: Subject| format!("{}, {}{label}", s.name(), mode.name());
            for _ in 0..rounds {
                for (j, s) in subjects.iter().enumerate() {
                    if !name(*s).contains(&self.only) {
                        continue;
                    }
                    let (r, lat, us, cpu) = self.run(*s, mode, secs, apis).await;
                    per[j].0.push(r);
                    per[j].1.extend(lat);
                    per[j].2.push(us);
                    per[j].3.push(cpu);
                }
            }
            for (j, (mut r, mut lat, mut us, mut cpu)) in per.into_iter().enumerate() {
                if r.is_empty() {
                    continue;
                }
                let lo = r.iter().cloned().fold(f64::INFINITY, f64::min);
                let hi = r.iter().cloned().fold(0.0, f64::max);
                rows.push((
                    name(subjects[j]),
                    median(&mut r),
                    (lo, hi),
                    quantile(&mut lat, 0.5),
                    quantile(&mut lat, 0.99),
                    median(&mut us),
                    median(&mut cpu),
                ));
            }
        }
        rows
    }
}

fn quantile(lat: &mut [Duration], q: f64) -> Duration {
    lat.sort();
    lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)]
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let mut argv = std::env::args().skip(1);
    let secs: f64 = argv.next().map_or(3.0, |s| s.parse().expect("SECONDS"));
    let rounds: usize = argv.next().map_or(3, |s| s.parse().expect("ROUNDS"));
    let only = argv.next().unwrap_or_default();
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
    let url = format!("redis://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let spec = format!("{url}?prefix=bench&negative_cache=off&on_error=error");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let api = Arc::new(
        KeyedLimiter::<u64>::builder(QUOTA.parse().unwrap())
            .store(format!("{spec}&timeout=2s").parse().unwrap())
            .build()
            .unwrap(),
    );
    let api0 = Arc::new(
        KeyedLimiter::<u64>::builder(QUOTA.parse().unwrap())
            .store(format!("{spec}&timeout=2s&connections=0").parse().unwrap())
            .build()
            .unwrap(),
    );
    // The async subjects' shared limiters: the default, and every call handed off.
    let apis = [api.clone(), api0.clone()];
    let mut rows = Vec::new();
    let version = {
        let (bench, version) = rt.block_on(async {
            let client = redis::Client::open(url.as_str()).unwrap();
            let mut admin = client.get_multiplexed_async_connection().await.unwrap();
            // The store loads its library on its first call; the script subject calls it.
            api.try_acquire_async(&0, 1).await.unwrap();
            let libs: redis::Value = redis::cmd("FUNCTION")
                .arg("LIST")
                .query_async(&mut admin)
                .await
                .unwrap();
            let text = format!("{libs:?}");
            let at = text
                .find("sluicegate_")
                .expect("the store's library is loaded");
            let lib: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(GCRA)
                .query_async(&mut admin)
                .await
                .unwrap();
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query_async(&mut admin)
                .await
                .unwrap();
            let version = info
                .lines()
                .find_map(|l| l.strip_prefix("redis_version:"))
                .unwrap_or("?")
                .trim()
                .to_string();
            let bench = Bench {
                spec: spec.clone(),
                client,
                function: format!("{lib}_tb").into(),
                sha: sha.into(),
                admin,
                only: only.clone(),
            };
            (bench, version)
        });
        let subjects = [
            Subject::Api,
            Subject::ApiHandOff,
            Subject::Script,
            Subject::Gcra,
        ];
        rt.block_on(async {
            // Warm up: fill the keys.
            for s in subjects {
                bench.run(s, Mode::Pipelined, 0.5, &apis).await;
            }
            let modes = [
                Mode::One,
                Mode::Pipelined,
                Mode::Unpipelined,
                Mode::Connections,
            ];
            rows.extend(bench.rows(&subjects, &modes, rounds, secs, &apis, "").await);
        });
        // The same callers on a multi-thread runtime (2 workers): the API's connections are
        // that runtime's, driven by its workers. The admin connection is that runtime's too.
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        multi.block_on(async {
            let bench = Bench {
                admin: bench
                    .client
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap(),
                ..bench
            };
            let subjects = [Subject::Api, Subject::ApiHandOff, Subject::Gcra];
            let modes = [Mode::One, Mode::Pipelined];
            let label = ", multi-thread runtime";
            rows.extend(
                bench
                    .rows(&subjects, &modes, rounds, secs, &apis, label)
                    .await,
            );
        });
        version
    };
    // Blocking callers (threads), 1 and 50: the store's default (callers drive pooled
    // connections of their own) against `connections=0` (every call handed to the runtime
    // thread and pipelined on the multiplexed connection), in alternating rounds.
    for threads in [1u64, 50] {
        let name = |s: &str| format!("sluicegate API, {threads} blocking caller(s), {s}");
        let subjects: Vec<_> = [("pooled connections", &api), ("connections=0", &api0)]
            .into_iter()
            .filter(|(s, _)| name(s).contains(&only))
            .collect();
        if subjects.is_empty() {
            continue;
        }
        let mut per_s = [Vec::new(), Vec::new()];
        let mut lat = [Vec::new(), Vec::new()];
        let mut cpu = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            for (j, (_, l)) in subjects.iter().enumerate() {
                let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let start = Instant::now();
                let cpu0 = cpu_secs();
                let workers: Vec<_> = (0..threads)
                    .map(|t| {
                        let (l, stop) = (Arc::clone(l), stop.clone());
                        std::thread::spawn(move || {
                            let mut lat = Vec::new();
                            let mut i = (round as u64 * 50 + t) * 1_000_003;
                            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                                let t0 = Instant::now();
                                l.try_acquire(&key(i), 1).unwrap();
                                lat.push(t0.elapsed());
                                i += 1;
                            }
                            lat
                        })
                    })
                    .collect();
                std::thread::sleep(Duration::from_secs_f64(secs));
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                let done: Vec<Duration> = workers
                    .into_iter()
                    .flat_map(|w| w.join().unwrap())
                    .collect();
                per_s[j].push(done.len() as f64 / start.elapsed().as_secs_f64());
                cpu[j].push((cpu_secs() - cpu0) * 1e6 / done.len() as f64);
                lat[j].extend(done);
            }
        }
        for (j, (s, _)) in subjects.iter().enumerate() {
            let r = &mut per_s[j];
            let (lo, hi) = (
                r.iter().copied().fold(f64::INFINITY, f64::min),
                r.iter().copied().fold(0.0, f64::max),
            );
            rows.push((
                name(s),
                median(r),
                (lo, hi),
                quantile(&mut lat[j], 0.5),
                quantile(&mut lat[j], 0.99),
                f64::NAN,
                median(&mut cpu[j]),
            ));
        }
    }

    println!("redis-server {version}, {rounds} rounds of {secs} s");
    println!(
        "{:<56} {:>12} {:>19} {:>9} {:>9} {:>10} {:>10}",
        "subject", "decisions/s", "(range)", "p50", "p99", "server us", "client us"
    );
    for (name, r, (lo, hi), p50, p99, us, cpu) in &rows {
        println!(
            "{name:<56} {r:>12.0} {:>19} {:>9.1?} {:>9.1?} {us:>10.2} {cpu:>10.2}",
            format!("({lo:.0}-{hi:.0})"),
            p50,
            p99
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
