//! The `sluicegate` binary as a user runs it: every subcommand, format and error, and
//! replays checked against a plain sequential model of the token bucket.

use assert_cmd::Command;
use predicates::prelude::*;
use serde_json::{json, Value};
use std::io::Write;

fn bin() -> Command {
    Command::cargo_bin("sluicegate").unwrap()
}

/// `sluicegate replay LOG --policy POLICY EXTRA...`, run and asserted on.
fn replay(log: &str, policy: &str, extra: &[&str]) -> assert_cmd::assert::Assert {
    bin()
        .args(["replay", log, "--policy", policy])
        .args(extra)
        .assert()
}

/// `sluicegate replay LOG --policy POLICY --format json EXTRA...`, run to success: its report.
fn replay_json(log: &str, policy: &str, extra: &[&str]) -> Value {
    let out = replay(log, policy, &[&["--format", "json"], extra].concat())
        .success()
        .get_output()
        .stdout
        .clone();
    json(&out)
}

/// A combined-format line of 192.0.2.1 at `s` seconds past 2024-05-01T00:00:00Z.
fn clf_line(s: u64) -> String {
    format!(
        "192.0.2.1 - - [01/May/2024:{:02}:{:02}:{:02} +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"t\"\n",
        s / 3600,
        s % 3600 / 60,
        s % 60
    )
}

fn json(out: &[u8]) -> Value {
    serde_json::from_slice(out).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(out)))
}

fn policy<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["policies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no policy {name}"))
}

const T0: u64 = 1_714_521_600_000_000_000; // 2024-05-01T00:00:00Z

/// The seed's traffic, 60/s for 3 s: request j at j * 1e9 / 60 ns, as simulate spaces it.
fn seed_times() -> Vec<u64> {
    (0..180u64).map(|j| j * 1_000_000_000 / 60).collect()
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

#[test]
fn help_and_version() {
    for sub in ["replay", "simulate", "check", "sample", "completions"] {
        bin()
            .args([sub, "--help"])
            .assert()
            .success()
            .stdout(predicate::str::contains("Usage: sluicegate"));
    }
    bin()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("Exit codes"));
    bin()
        .arg("--version")
        .assert()
        .success()
        .stdout(predicate::str::starts_with("sluicegate "));
    bin()
        .args(["replay", "--help"])
        .assert()
        .stdout(predicate::str::contains("path:/tenants/{tenant}/*"));
}

#[test]
fn completions() {
    for shell in ["bash", "zsh", "fish"] {
        bin()
            .args(["completions", shell])
            .assert()
            .success()
            .stdout(predicate::str::contains("replay").and(predicate::str::contains("policy")));
    }
    bin().args(["completions", "tcsh"]).assert().code(2);
}

#[test]
fn usage_errors_quote_the_input_and_exit_2() {
    bin()
        .args(["simulate", "--help-me"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--help-me"));
    bin()
        .args([
            "simulate",
            "--policy",
            "10/fortnight",
            "--traffic",
            "1/s for 1s",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("fortnight"));
    bin()
        .args(["simulate", "--policy", "1/s", "--traffic", "lots"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("\"lots\""));
    bin()
        .args(["simulate", "--policy", "1/s"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--traffic"));
    replay("--sample", "/a => 1/s | 2/s", &[])
        .code(2)
        .stderr(predicate::str::contains("every rule needs a route"));
    replay("--sample", "1/s", &["--key", "cookie"])
        .code(2)
        .stderr(predicate::str::contains("\"cookie\""));
    replay("--sample", "1/s", &["--ipv6-prefix", "129"])
        .code(2)
        .stderr(predicate::str::contains("129"));
    bin()
        .args(["check", "--quota", "5/s; burst=0"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("burst"));
    bin().arg("frobnicate").assert().code(2);
    // A zero window or row has no rate to divide by.
    for zero in ["0s", "0ms", "0ns"] {
        replay("--sample", "1/s", &["--sustain", zero])
            .code(2)
            .stderr(predicate::str::contains("--sustain").and(predicate::str::contains(zero)));
        bin()
            .args(["simulate", "--policy", "1/s", "--traffic", "1/s for 2s"])
            .args(["--step", zero])
            .assert()
            .code(2)
            .stderr(predicate::str::contains("--step"));
    }
    // The sustain window is counted in ten equal steps.
    replay("--sample", "1/s", &["--sustain", "15ns"])
        .code(2)
        .stderr(predicate::str::contains("multiple of 10ns"));
    // A cost of 0 admits everything; a key bound of 0 holds nothing (it acted as 1).
    replay("--sample", "1/s", &["--cost", "0"])
        .code(2)
        .stderr(predicate::str::contains("--cost"));
    bin()
        .args([
            "simulate",
            "--policy",
            "1/s",
            "--traffic",
            "1/s for 2s",
            "--cost",
            "0",
        ])
        .assert()
        .code(2);
    replay("--sample", "1/s", &["--max-keys", "0"])
        .code(2)
        .stderr(predicate::str::contains("--max-keys"));
}

#[test]
fn input_and_data_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.log").display().to_string();
    bin()
        .args(["replay", "--policy", "1/s", &missing])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("missing.log"));
    let bad_gz = dir.path().join("bad.gz");
    std::fs::write(&bad_gz, b"\x1f\x8bnot gzip at all").unwrap();
    let bad_gz = bad_gz.display().to_string();
    bin()
        .args(["replay", "--policy", "1/s", &bad_gz])
        .assert()
        .code(3);
    let log = write(
        &dir,
        "a.jsonl",
        "{\"time\": 1714521600.5, \"ip\": \"192.0.2.1\"}\n{\"time\": \"soon\", \"ip\": \"192.0.2.1\"}\n",
    );
    // Skipped and counted by default...
    let out = bin()
        .args(["replay", "--policy", "1/s", "--format", "json", &log])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let v = json(&out);
    assert_eq!(v["bad_lines"], 1);
    assert!(v["bad_line_examples"][0]
        .as_str()
        .unwrap()
        .contains(":2: timestamp \"soon\""));
    // ... fatal with --strict, quoting the line and its number.
    bin()
        .args(["replay", "--policy", "1/s", "--strict", &log])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("a.jsonl:2:").and(predicate::str::contains("\"soon\"")));
    // A date read whole but outside the range (before 1970, after 2262-04-11) says so; it
    // was "not understood".
    let old = write(
        &dir,
        "old.log",
        &(clf_line(0)
            + &clf_line(1).replace("01/May/2024", "31/Dec/1969")
            + &clf_line(2).replace("2024", "2263")),
    );
    let v = replay_json(&old, "1/s", &[]);
    assert_eq!(v["bad_lines"], 2, "{v}");
    for (i, ex) in v["bad_line_examples"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let ex = ex.as_str().unwrap();
        assert!(
            ex.contains(&format!("old.log:{}: timestamp", i + 2))
                && ex.contains("is outside the dates a replay reads (1970-01-01T00:00:00Z to 2262-04-11T23:47:16Z)"),
            "{ex}"
        );
    }
    let nofield = write(&dir, "b.jsonl", "{\"when\": 1, \"ip\": \"192.0.2.1\"}\n");
    // A time or address field named that no line has: said once (each line was "no
    // timestamp"), as a CSV column is.
    for (opt, said) in [
        (
            "--time-field",
            "the time field \"nope\" (--time-field) is in none of the first lines",
        ),
        (
            "--ip-field",
            "the ip field \"nope\" (--ip-field) is in none of the first lines",
        ),
    ] {
        bin()
            .args(["replay", "--policy", "1/s", &nofield, opt, "nope"])
            .assert()
            .code(4)
            .stderr(predicate::str::contains(said));
    }
    bin()
        .args(["replay", "--policy", "1/s", &nofield])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("--time-field"));
    bin()
        .args([
            "replay",
            "--policy",
            "1/s",
            "--time-field",
            "when",
            "--time-unit",
            "s",
            &nofield,
        ])
        .assert()
        .success();
    let junk = write(&dir, "c.log", "hello\nworld\n");
    bin()
        .args([
            "replay",
            "--policy",
            "1/s",
            "--log-format",
            "combined",
            &junk,
        ])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("no usable request"));
    let badip = write(
        &dir,
        "d.jsonl",
        "{\"time\": 1714521600, \"ip\": \"not-an-ip\"}\n",
    );
    bin()
        .args(["replay", "--policy", "1/s", "--strict", &badip])
        .assert()
        .code(4)
        .stderr(predicate::str::contains(
            "\"not-an-ip\" is not an IP address",
        ));
    let twokeys = write(
        &dir,
        "e.jsonl",
        "{\"time\": 1714521600, \"ip\": \"192.0.2.1\"}\n{\"time\": 1714521600, \"ip\": \"192.0.2.2\"}\n",
    );
    bin()
        .args(["replay", "--policy", "1/s", "--max-keys", "1", &twokeys])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("--max-keys"));
}

fn sim_json(args: &[&str]) -> Value {
    let mut a = vec!["simulate", "--format", "json"];
    a.extend_from_slice(args);
    json(&bin().args(&a).assert().success().get_output().stdout)
}

#[test]
fn the_seed_example_through_simulate() {
    let out = bin()
        .args([
            "simulate",
            "--quota",
            "10/s; burst=50",
            "--traffic",
            "60/s for 3s",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("allowed   79 of 180"), "{out}");
    assert!(
        out.contains("    0.0ms        6       6       0      45"),
        "{out}"
    );
    assert!(out.contains("first rejection at 983.3ms"), "{out}");
    let v = sim_json(&["-q", "10/s; burst=50", "-t", "60/s for 3s"]);
    let p = policy(&v, "10/s; burst=50");
    assert_eq!(p["offered"], 180);
    assert_eq!(p["admitted"], 79);
    assert_eq!(p["rejected"], 101);
    let csv = bin()
        .args([
            "simulate",
            "-q",
            "10/s; burst=50",
            "-t",
            "60/s for 3s",
            "--format",
            "csv",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let csv = String::from_utf8(csv).unwrap();
    assert!(
        csv.starts_with("policy,offered,admitted,rejected,"),
        "{csv}"
    );
    assert!(csv.contains("\n10/s; burst=50,180,79,101,"), "{csv}");
}

#[test]
fn simulate_segments_and_several_policies() {
    let v = sim_json(&["-q", "1/s; burst=5", "-t", "burst 7, idle 2s, burst 3"]);
    let p = policy(&v, "1/s; burst=5");
    assert_eq!(
        (p["admitted"].as_u64(), p["rejected"].as_u64()),
        (Some(7), Some(3))
    );
    let v = sim_json(&[
        "-p",
        "a=10/s; burst=50",
        "-p",
        "b=10/s; burst=50; algorithm=gcra",
        "-p",
        "c=10/s; algorithm=fixed_window",
        "-t",
        "60/s for 3s",
    ]);
    // GCRA is the continuous token bucket under another name: the same decisions.
    assert_eq!(policy(&v, "a")["admitted"], 79);
    assert_eq!(policy(&v, "b")["admitted"], 79);
    let d = v["disagreements"].as_array().unwrap();
    let ab = d
        .iter()
        .find(|x| x["rejected_by"] == "a" && x["admitted_by"] == "b")
        .unwrap();
    assert_eq!(ab["requests"], 0);
    // fixed window: 10 per second, 3 windows
    assert_eq!(policy(&v, "c")["admitted"], 30);
}

/// The seed's traffic as a log in every format: the same 79 admissions as simulate.
#[test]
fn the_seed_example_through_replay_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let times = seed_times();
    let mut jsonl = String::new();
    let mut csv = String::from("ts;client;path\n");
    let mut combined = String::new();
    for &t in &times {
        let abs = T0 + t;
        jsonl += &format!("{{\"ts\":{abs},\"remote_addr\":\"192.0.2.7\",\"path\":\"/\"}}\n");
        csv += &format!(
            "2024-05-01T00:00:{:02}.{:09}Z;192.0.2.7;/\n",
            t / 1_000_000_000,
            t % 1_000_000_000
        );
        combined += &format!(
            "192.0.2.7 - - [01/May/2024:00:00:{:02}.{:09} +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"t\"\n",
            t / 1_000_000_000,
            t % 1_000_000_000
        );
    }
    let files = [
        write(&dir, "seed.jsonl", &jsonl),
        write(&dir, "seed.csv", &csv),
        write(&dir, "seed.log", &combined),
    ];
    let gz = dir.path().join("seed.log.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::default(),
    );
    enc.write_all(combined.as_bytes()).unwrap();
    enc.finish().unwrap();
    let gz = gz.display().to_string();
    for f in files.iter().chain([&gz]) {
        let mut args = vec![
            "replay",
            "--policy",
            "10/s; burst=50",
            "--format",
            "json",
            f.as_str(),
        ];
        if f.ends_with(".csv") {
            args.extend(["--csv-delimiter", ";"]);
        }
        let v = json(&bin().args(&args).assert().success().get_output().stdout);
        let p = policy(&v, "10/s; burst=50");
        assert_eq!(
            (p["offered"].as_u64(), p["admitted"].as_u64()),
            (Some(180), Some(79)),
            "{f}"
        );
        assert_eq!(v["keys"], 1, "{f}");
        assert_eq!(p["top_throttled"][0]["key"], "192.0.2.7", "{f}");
    }
    // stdin
    let v = json(
        &bin()
            .args([
                "replay",
                "-",
                "--policy",
                "10/s; burst=50",
                "--format",
                "json",
            ])
            .write_stdin(jsonl)
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(policy(&v, "10/s; burst=50")["admitted"], 79);
}

/// A plain sequential token bucket (continuous refill), `docs/SEMANTICS.md` written
/// literally in i128: the state is the instant the bucket is full, scaled by k.
struct Model {
    k: i128,
    p: i128,
    b: i128,
    full_at: std::collections::HashMap<u32, i128>,
}

impl Model {
    fn new(count: u64, period_ns: u64, burst: u64) -> Model {
        Model {
            k: count.into(),
            p: period_ns.into(),
            b: burst.into(),
            full_at: Default::default(),
        }
    }
    fn acquire(&mut self, key: u32, t: u64, cost: u64) -> bool {
        let tk = i128::from(t) * self.k;
        let (bp, need) = (self.b * self.p, i128::from(cost) * self.p);
        let f = *self.full_at.entry(key).or_insert(tk);
        let deficit = (f - tk).clamp(0, bp);
        if need <= bp - deficit {
            self.full_at.insert(key, f.max(tk) + need);
            true
        } else {
            false
        }
    }
}

/// splitmix64
fn rng(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Requests are decided in batches (their memory accesses overlapped), yet every message and
/// count comes in the log's order: an error of a request decided late is reported before an
/// unusable line after it, and unusable lines are listed in order whichever step found them.
#[test]
fn errors_and_unusable_lines_keep_the_logs_order() {
    let dir = tempfile::tempdir().unwrap();
    let line = |t: &str, ip: &str| format!("{{\"time\": \"{t}\", \"ip\": \"{ip}\"}}\n");
    let now = "2024-05-01T00:00:00Z";
    // Line 2 is a second key over --max-keys 1 (found when it is decided); line 3 has no
    // usable timestamp (found when it is parsed).
    let log = write(
        &dir,
        "keys.jsonl",
        &[
            line(now, "192.0.2.1"),
            line(now, "192.0.2.2"),
            line("soon", "192.0.2.1"),
        ]
        .concat(),
    );
    bin()
        .args([
            "replay",
            "--policy",
            "1/s",
            "--strict",
            "--max-keys",
            "1",
            &log,
        ])
        .assert()
        .code(4)
        .stderr(
            predicate::str::contains("keys.jsonl:2:").and(predicate::str::contains("--max-keys")),
        );
    // Line 101 is beyond the range the quota covers exactly (found before it is counted), line
    // 102 has no usable timestamp, line 103 is fine.
    let mut text = String::new();
    for i in 0..100 {
        text += &line(now, &format!("192.0.2.{i}"));
    }
    text += &line("2199-12-31T00:00:00Z", "192.0.2.1");
    text += &line("soon", "192.0.2.1");
    text += &line(now, "192.0.2.1");
    let log = write(&dir, "range.jsonl", &text);
    let v = json(
        &bin()
            .args([
                "replay",
                "--policy",
                "3/s; burst=7",
                "--format",
                "json",
                &log,
            ])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(v["bad_lines"], 2);
    // The request out of range is refused whole: not counted, not decided, and its time is
    // not the latest seen (line 103 does not go backwards).
    assert_eq!(v["requests"], 101);
    assert_eq!(v["timestamps_backwards"], 0);
    let ex = v["bad_line_examples"].as_array().unwrap();
    assert!(
        ex[0]
            .as_str()
            .unwrap()
            .contains("range.jsonl:101: timestamp beyond"),
        "{ex:?}"
    );
    assert!(
        ex[1]
            .as_str()
            .unwrap()
            .contains("range.jsonl:102: timestamp \"soon\""),
        "{ex:?}"
    );
    bin()
        .args(["replay", "--policy", "3/s; burst=7", "--strict", &log])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("range.jsonl:101:"));
}

#[test]
fn replay_of_a_generated_log_equals_the_reference_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 42u64;
    let policies = [
        (7u64, 1_000_000_000u64, 20u64),
        (100, 60_000_000_000, 30),
        (3, 2_000_000_000, 3),
    ];
    let mut models: Vec<Model> = policies
        .iter()
        .map(|&(k, p, b)| Model::new(k, p, b))
        .collect();
    let mut rejected: Vec<std::collections::HashMap<u32, u64>> = vec![Default::default(); 3];
    let mut admitted = [0u64; 3];
    let mut log = String::new();
    let mut t = T0;
    for _ in 0..60_000 {
        // Skewed keys (a few heavy hitters, 2000 regulars, and a long tail: over 20 000 keys
        // in all, so that the replay prefetches its tables as it does for large logs), gaps
        // from 0 (ties) to 200 ms, costs 1 to 3.
        let r = rng(&mut seed);
        let key = match r % 4 {
            0 => (r >> 8) % 5,
            1 => (r >> 8) % 2000,
            _ => 2000 + (r >> 8) % 40_000,
        } as u32;
        t += match rng(&mut seed) % 4 {
            0 => 0,
            _ => rng(&mut seed) % 200_000_000,
        };
        let cost = 1 + rng(&mut seed) % 3;
        log += &format!(
            "{{\"time\":{t},\"ip\":\"10.0.{}.{}\",\"cost\":{cost}}}\n",
            key / 256,
            key % 256
        );
        for (i, m) in models.iter_mut().enumerate() {
            if cost > policies[i].2 {
                *rejected[i].entry(key).or_default() += 1;
            } else if m.acquire(key, t, cost) {
                admitted[i] += 1;
            } else {
                *rejected[i].entry(key).or_default() += 1;
            }
        }
    }
    let f = write(&dir, "gen.jsonl", &log);
    let names = ["p0=7/s; burst=20", "p1=100/m; burst=30", "p2=3/2s"];
    let mut args = vec![
        "replay",
        f.as_str(),
        "--format",
        "json",
        "--cost-field",
        "cost",
        "--top",
        "100000",
    ];
    for n in &names {
        args.extend(["--policy", n]);
    }
    let v = json(&bin().args(&args).assert().success().get_output().stdout);
    assert_eq!(v["requests"], 60_000);
    assert!(v["keys"].as_u64().unwrap() > 20_000, "{}", v["keys"]);
    for (i, name) in ["p0", "p1", "p2"].iter().enumerate() {
        let p = policy(&v, name);
        assert_eq!(p["admitted"].as_u64(), Some(admitted[i]), "{name}");
        assert_eq!(
            p["clients_affected"].as_u64(),
            Some(rejected[i].len() as u64),
            "{name}"
        );
        for k in p["top_throttled"].as_array().unwrap() {
            let ip = k["key"].as_str().unwrap();
            let o: Vec<u32> = ip.split('.').map(|x| x.parse().unwrap()).collect();
            let key = o[2] * 256 + o[3];
            assert_eq!(
                k["rejected"].as_u64(),
                rejected[i].get(&key).copied(),
                "{name} {ip}"
            );
        }
        assert_eq!(
            p["top_throttled"].as_array().unwrap().len(),
            rejected[i].len()
        );
    }
    // p2's burst is 3: nothing over it here, so no request is over capacity.
    assert_eq!(policy(&v, "p2")["over_capacity"], 0);
}

/// The times a replay takes lines stamped `stamps` at: a line's own, or the second earliest
/// of the next 16 lines' when that is earlier (the next line's when only one follows).
fn looked_ahead(stamps: &[u64]) -> Vec<u64> {
    (0..stamps.len())
        .map(|i| {
            let mut after: Vec<u64> = stamps[i + 1..].iter().take(16).copied().collect();
            after.sort_unstable();
            let near = match after.len() {
                0 => u64::MAX,
                1 => after[0],
                _ => after[1],
            };
            stamps[i].min(near)
        })
        .collect()
}

/// A line stamped before an earlier line's time is counted, and decided at the latest time
/// seen (a limiter's clock never goes back): judged at its own time, a bucket drained since
/// would count a refill not yet earned against it (a fresh client's two requests logged 100
/// ms out of order: one rejected under a burst of two).
#[test]
fn timestamps_going_backwards_are_decided_at_the_latest_time_seen() {
    // One key (its bucket is never evicted), times jumping back and forth.
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 7u64;
    let mut model = Model::new(5, 1_000_000_000, 8);
    let mut log = String::new();
    let mut admitted = 0;
    let mut t = T0 + 10_000_000_000;
    let mut stamps = Vec::new();
    for _ in 0..5000 {
        let r = rng(&mut seed);
        if r % 5 == 0 {
            t -= rng(&mut seed) % 2_000_000_000;
        } else {
            t += rng(&mut seed) % 400_000_000;
        }
        stamps.push(t);
        log += &format!("{}.{:09},192.0.2.1\n", t / 1_000_000_000, t % 1_000_000_000);
    }
    // Each line is taken at its time, or at its next lines' when it is stamped ahead of
    // them, and decided at the latest time taken.
    let (mut back, mut max) = (0, 0);
    for t in looked_ahead(&stamps) {
        if t < max {
            back += 1;
        }
        max = max.max(t);
        admitted += u64::from(model.acquire(0, max, 1));
    }
    let f = write(&dir, "back.csv", &format!("time,ip\n{log}"));
    let v = replay_json(&f, "5/s; burst=8", &["--time-unit", "s"]);
    assert_eq!(v["timestamps_backwards"].as_u64(), Some(back));
    assert_eq!(
        policy(&v, "5/s; burst=8")["admitted"].as_u64(),
        Some(admitted)
    );
    // Two requests of a fresh client, logged 100 ms out of order, under a burst of two; a
    // line of another client stamped far back between them changes nothing for them.
    let f = write(
        &dir,
        "two.csv",
        "time,ip\n634.2,192.0.2.1\n4.0,192.0.2.9\n634.1,192.0.2.1\n",
    );
    let v = replay_json(&f, "1/s; burst=2", &["--time-unit", "s"]);
    assert_eq!(policy(&v, "1/s; burst=2")["rejected"], 0, "{v}");
}

#[test]
fn keys_ipv6_prefixes_headers_and_paths() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        ("2001:db8:1:2::1", "k1", "/t/acme/x"),
        ("2001:db8:1:2:ffff::9", "k1", "/t/acme/y"),
        ("::ffff:192.0.2.1", "k2", "/t/globex/x"),
        ("192.0.2.1", "k2", "/other"),
        ("2001:db8:1:3::1", "k3", "/t/acme/z"),
    ];
    let mut log = String::new();
    for (i, (ip, k, p)) in lines.iter().enumerate() {
        log += &format!(
            "{{\"time\":\"2024-05-01T00:00:0{i}Z\",\"ip\":\"{ip}\",\"http_x_api_key\":\"{k}\",\"uri\":\"GET {p} HTTP/1.1\"}}\n"
        );
    }
    let f = write(&dir, "k.jsonl", &log);
    let keys = |extra: &[&str]| -> u64 {
        let mut a = vec!["replay", f.as_str(), "--policy", "1/h", "--format", "json"];
        a.extend_from_slice(extra);
        json(&bin().args(&a).assert().success().get_output().stdout)["keys"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(keys(&[]), 3); // /64 twice, 192.0.2.1 twice (mapped), another /64
    assert_eq!(keys(&["--ipv6-prefix", "48"]), 2);
    assert_eq!(keys(&["--ipv6-prefix", "128"]), 4);
    assert_eq!(keys(&["--key", "header:X-Api-Key"]), 3);
    assert_eq!(keys(&["--key", "path:/t/{tenant}/*"]), 2); // /other has no key
    assert_eq!(keys(&["--key", "path"]), 5);
    assert_eq!(keys(&["--key", "ip", "--key", "method"]), 3);
    let v = replay_json(&f, "1/h", &["--key", "path:/t/{tenant}/*"]);
    assert_eq!(v["unkeyed"], 1);
    let p = &v["policies"][0];
    assert_eq!(p["top_throttled"][0]["key"], "acme");
    assert_eq!(p["top_throttled"][0]["rejected"], 2);
}

#[test]
fn routes_composites_and_every_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = String::new();
    // 3 clients, 20 requests each at the same instant: 10 to /login, 10 to /api.
    for c in 0..3 {
        for i in 0..20 {
            let (m, p) = if i % 2 == 0 {
                ("POST", "/login")
            } else {
                ("GET", "/api/x")
            };
            log += &format!("10.0.0.{c} - - [01/May/2024:00:00:00 +0000] \"{m} {p} HTTP/1.1\" 200 1 \"-\" \"ua\"\n");
        }
    }
    let f = write(&dir, "r.log", &log);
    let v = json(
        &bin()
            .args([
                "replay",
                &f,
                "--format",
                "json",
                "--policy",
                "routes=POST /login => 2/m | /api/* => 5/s",
                "--policy",
                "loginonly=/login => 3/m",
                "--policy",
                "comp=10/s & global 12/s",
                "--policy",
                "glob=global 7/s",
                "--policy",
                "gcra=4/s; algorithm=gcra",
                "--policy",
                "fw=4/s; algorithm=fixed_window",
                "--policy",
                "sw=4/s; algorithm=sliding_window",
                "--policy",
                "sl=4/s; algorithm=sliding_log",
                "--policy",
                "lq=4/s; algorithm=leaky_queue; max_delay=1s",
                "--policy",
                "iv=4/s; refill=interval",
            ])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    let adm = |n: &str| policy(&v, n)["admitted"].as_u64().unwrap();
    assert_eq!(adm("routes"), 3 * (2 + 5));
    // /login only: the 30 /api requests are not limited by it
    assert_eq!(adm("loginonly"), 30 + 3 * 3);
    assert_eq!(policy(&v, "loginonly")["unlimited"], 30);
    // per key 10 of 20, and the global 12 across all: 10 + 2 + 0
    assert_eq!(adm("comp"), 12);
    assert_eq!(adm("glob"), 7);
    for n in ["gcra", "fw", "sw", "sl", "iv"] {
        assert_eq!(adm(n), 3 * 4, "{n}");
    }
    // the queue: one now and 4 within the second's delay, per client
    assert_eq!(adm("lq"), 3 * 5);
    assert_eq!(policy(&v, "lq")["delayed"], 3 * 4);
    // one disagreement: glob rejected what routes admitted and vice versa, both non-zero
    let d = v["disagreements"].as_array().unwrap();
    let get = |a: &str, b: &str| {
        d.iter()
            .find(|x| x["rejected_by"] == a && x["admitted_by"] == b)
            .unwrap()["requests"]
            .as_u64()
            .unwrap()
    };
    assert!(get("glob", "routes") > 0 && get("routes", "glob") > 0);
    // cost above a capacity: rejected and counted, never an error
    let v = json(
        &bin()
            .args([
                "replay",
                &f,
                "--format",
                "json",
                "--policy",
                "1/s; burst=2",
                "--cost",
                "3",
            ])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(v["policies"][0]["over_capacity"], 60);
}

#[test]
fn every_output_format_and_table() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("u.csv").display().to_string();
    bin()
        .args([
            "sample",
            "--scenario",
            "uniform",
            "--keys",
            "40",
            "--lines",
            "20000",
        ])
        .args(["--log-format", "csv", "-o", &log])
        .assert()
        .success();
    let base = [
        "replay",
        &log,
        "--policy",
        "a=20/s; burst=100",
        "--policy",
        "b=5/s; burst=20",
        "--top",
        "3",
    ];
    let table = bin()
        .args(base)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let table = String::from_utf8(table).unwrap();
    assert!(
        table.contains("top throttled") && table.contains("10."),
        "{table}"
    );
    assert!(
        table.contains("requests rejected by the row's policy"),
        "{table}"
    );
    let v = json(
        &bin()
            .args(base)
            .args(["--format", "json"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(v["policies"].as_array().unwrap().len(), 2);
    assert_eq!(v["keys"], 40);
    let b = policy(&v, "b");
    assert!(
        b["retry_after_ns"]["p99"].as_u64().unwrap()
            >= b["retry_after_ns"]["p50"].as_u64().unwrap()
    );
    assert_eq!(b["top_throttled"].as_array().unwrap().len(), 3);
    let tl = &v["timeline"];
    let offered: u64 = tl["offered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .sum();
    assert_eq!(offered, v["requests"].as_u64().unwrap());
    for (t, head) in [
        ("summary", "policy,offered,admitted"),
        ("top-keys", "policy,rank,key,offered,rejected"),
        (
            "timeline",
            "start,start_ns,width_ns,offered,admitted a,admitted b",
        ),
        ("disagreements", "rejected_by,admitted_by,requests"),
    ] {
        let out = bin()
            .args(base)
            .args(["--format", "csv", "--table", t])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with(head), "{t}: {out}");
        assert!(out.lines().count() > 2, "{t}");
    }
    for f in ["table", "json", "csv"] {
        bin()
            .args(["check", "--quota", "10/s; burst=50", "--format", f])
            .assert()
            .success()
            .stdout(predicate::str::contains("10/s; burst=50").and(predicate::str::contains("50")));
    }
}

/// `check` says what each algorithm keeps, in the docs' words: a window counts requests per
/// window (it said "tokens/s"), a leaky queue's bound is a duration (it said
/// "2000000000 ns"), and the sliding log has no one-word state (it said "state word: 64
/// bits"; docs/SEMANTICS.md: its timestamps behind a lock).
#[test]
fn check_describes_each_algorithm_in_its_own_terms() {
    let check = |q: &str, f: &str| {
        let out = bin()
            .args(["check", "--quota", q, "--format", f])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        String::from_utf8(out).unwrap()
    };
    let log = check("7/1500ms; algorithm=sliding_log", "table");
    assert!(
        log.contains("7 requests per 1500ms window (4.667/s on average)"),
        "{log}"
    );
    assert!(
        log.contains("state: a log of up to 7 admission timestamps per bucket, behind a lock"),
        "{log}"
    );
    assert!(
        !log.contains("tokens") && !log.contains("state word"),
        "{log}"
    );
    assert_eq!(
        json(check("7/1500ms; algorithm=sliding_log", "json").as_bytes())["state_bits"],
        Value::Null
    );
    assert!(check("7/1500ms; algorithm=sliding_log", "csv").ends_with(",\n"));
    for algo in ["fixed_window", "sliding_window"] {
        let t = check(&format!("1/h; algorithm={algo}"), "table");
        assert!(
            t.contains(": 1 request per 1h window (0.000278/s on average)"),
            "{t}"
        );
        assert!(
            t.contains("state word: 64 bits") && !t.contains("tokens"),
            "{t}"
        );
    }
    let q = check("5/s; algorithm=leaky_queue; max_delay=2s", "table");
    assert!(
        q.contains("5.000 requests/s, queue bound 2s (limit 11 at once)"),
        "{q}"
    );
    let q = check("5/s; algorithm=leaky_queue; max_delay=1500ms", "table");
    assert!(q.contains("queue bound 1500ms"), "{q}");
    let b = check("10/s; burst=50", "table");
    assert!(
        b.contains("10.000 tokens/s, burst 50") && b.contains("state word: 64 bits"),
        "{b}"
    );
    assert_eq!(
        json(check("10/s; burst=50", "json").as_bytes())["state_bits"],
        64
    );
}

/// docs/CLI.md lists every log format `sample --help` offers (it left out w3c and haproxy),
/// and its simulate example runs with the options `simulate --help` lists (it used `--quota`,
/// a hidden alias).
#[test]
fn the_docs_list_what_the_help_offers() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/CLI.md")).unwrap();
    let row = doc
        .lines()
        .find(|l| l.starts_with("| `sample`"))
        .expect("the sample row");
    for f in ["jsonl", "combined", "csv", "alb", "w3c", "haproxy", "auto"] {
        assert!(row.contains(f), "docs/CLI.md's sample row lacks {f}: {row}");
        let help = bin().args(["sample", "--help"]).assert().success();
        let help = String::from_utf8(help.get_output().stdout.clone()).unwrap();
        assert!(help.contains(&format!("- {f}:")), "sample --help lacks {f}");
    }
    let help = bin().args(["simulate", "--help"]).assert().success();
    let help = String::from_utf8(help.get_output().stdout.clone()).unwrap();
    for l in doc
        .lines()
        .filter(|l| l.starts_with("sluicegate simulate "))
    {
        for opt in l.split_whitespace().filter(|w| w.starts_with("--")) {
            assert!(
                help.contains(opt),
                "{opt} (docs/CLI.md: {l}) is not in simulate --help"
            );
        }
    }
}

#[test]
fn sample_files_replay_like_the_embedded_sample() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let mut a = vec!["replay", "--policy", "5/s; burst=20", "--format", "json"];
        a.extend_from_slice(args);
        let v = json(&bin().args(&a).assert().success().get_output().stdout);
        (
            v["requests"].clone(),
            v["policies"][0]["admitted"].clone(),
            v["keys"].clone(),
        )
    };
    let embedded = run(&["--sample"]);
    for (fmt, name) in [
        ("jsonl", "s.jsonl.gz"),
        ("combined", "s.log"),
        ("csv", "s.csv"),
        ("alb", "s.alb"),
        ("w3c", "s.w3c.gz"),
        ("haproxy", "s.haproxy"),
    ] {
        let p = dir.path().join(name).display().to_string();
        bin()
            .args(["sample", "--log-format", fmt, "-o", &p, "--format", "json"])
            .assert()
            .success()
            .stdout(predicate::str::contains("\"scenario\":\"day\""));
        assert_eq!(run(&[&p]), embedded, "{fmt}");
    }
    // the uniform scenario: every key, in turn
    let out = bin()
        .args([
            "sample",
            "--scenario",
            "uniform",
            "--keys",
            "50",
            "--lines",
            "500",
            "--log-format",
            "csv",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(String::from_utf8(out).unwrap().lines().count(), 501);
}

#[test]
fn alb_logs_replay_as_the_load_balancer_saw_them() {
    let dir = tempfile::tempdir().unwrap();
    // The sample as an ALB log and as JSON lines: the same replay, a route included (the ALB's
    // request line holds an absolute URL).
    let both = |fmt: &str| {
        let p = dir.path().join(format!("s.{fmt}")).display().to_string();
        bin()
            .args(["sample", "--log-format", fmt, "-o", &p])
            .assert()
            .success();
        let out = replay(
            &p,
            "5/s; burst=20",
            &["--policy", "p=GET /products/* => 1/s", "--format", "json"],
        )
        .success()
        .get_output()
        .stdout
        .clone();
        let v = json(&out);
        (v["policies"].clone(), v["keys"].clone())
    };
    let (alb, jsonl) = (both("alb"), both("jsonl"));
    assert_eq!(alb, jsonl);
    assert!(alb.0[1]["rejected"].as_u64().unwrap() > 0, "{}", alb.0);

    // Written by hand: an IPv6 client, a port on every client, a line of the older format
    // (no request_creation_time), a request the ALB could not read.
    // (Its response 50 ms after the request came; a request the ALB could not read, at 12:00:09.)
    let line = |created: &str, client: &str, req: &str, ua: &str| {
        let sent = if created == "-" {
            "2024-05-01T12:00:09.000000Z".to_string()
        } else {
            created.replace(".000000Z", ".050000Z")
        };
        format!(
            "h2 {sent} app/lb/1 {client} 10.0.0.1:80 0.000 0.001 0.000 200 200 34 366 \"{req}\" \"{ua}\" ECDHE TLSv1.2 arn:tg \"Root=1\" \"api.example.com\" \"-\" 0 {created} \"forward\" \"-\" \"-\" \"10.0.0.1:80\" \"200\" \"-\" \"-\" TID_1\n"
        )
    };
    let mut text = String::new();
    for i in 0..4 {
        let created = format!("2024-05-01T12:00:0{i}.000000Z");
        text += &line(
            &created,
            "203.0.113.7:5000",
            "GET https://api.example.com:443/v1/a?x=1 HTTP/2.0",
            "curl/8",
        );
        text += &line(
            &created,
            &format!("2001:db8:1:2::{i}:6000"),
            "POST https://api.example.com:443/v1/b HTTP/2.0",
            "bot \\\"q\\\"",
        );
    }
    text += &line("-", "198.51.100.1:7000", "- - - ", "-");
    let log = write(&dir, "lb.log", &text);
    let run = |policy: &str, extra: &[&str]| {
        let mut a = vec!["--format", "json"];
        a.extend_from_slice(extra);
        json(&replay(&log, policy, &a).success().get_output().stdout)
    };
    let v = run("1/m", &[]);
    assert_eq!(v["inputs"][0]["format"], "alb", "{v}");
    // Timed by `time`, the response's, in whose order the ALB writes its lines.
    assert_eq!(v["inputs"][0]["fields"]["time"], "time");
    // Three clients: 203.0.113.7, the /64 of the IPv6 ones, and the unreadable request's.
    assert_eq!(v["keys"], 3, "{v}");
    assert_eq!(policy(&v, "1/m")["admitted"], 3);
    // Routes read the absolute URL's path; an unreadable request line matches none.
    let v = run("r=GET /v1/a => 1/m | POST /v1/b => 2/m", &[]);
    let r = policy(&v, "r");
    assert_eq!(
        (r["admitted"].clone(), r["unlimited"].clone()),
        ((1 + 2 + 1).into(), 1.into()),
        "{v}"
    );
    // The User-Agent is a header it logs (escaped quotes read); other headers are refused.
    let v = run("1/m", &["--key", "header:User-Agent"]);
    // The report names the field that made the key, as for the named formats.
    assert_eq!(v["inputs"][0]["fields"]["key"], "user_agent", "{v}");
    // (`-`, no User-Agent, is a request without a key.)
    assert_eq!(
        (v["keys"].clone(), v["unkeyed"].clone()),
        (2.into(), 1.into()),
        "{v}"
    );
    let keys = policy(&v, "1/m")["top_throttled"].to_string();
    assert!(
        keys.contains(r#"bot \"q\""#) && keys.contains("curl/8"),
        "{keys}"
    );
    replay(&log, "1/m", &["--key", "header:X-Api-Key"])
        .code(4)
        .stderr(predicate::str::contains("only User-Agent"));
    // The ALB logs no forwarding header: --trusted-proxies would key every line by nothing.
    replay(&log, "1/m", &["--trusted-proxies", "private"])
        .code(4)
        .stderr(predicate::str::contains("drop --trusted-proxies"));
    // By the request's arrival instead (a `-` there: the response's time); a field by its AWS
    // name; `client` by its address, as `ip` (not one bucket per connection).
    let v = run(
        "1/m",
        &[
            "--time-field",
            "request_creation_time",
            "--key",
            "field:domain_name",
        ],
    );
    assert_eq!(v["inputs"][0]["fields"]["time"], "request_creation_time");
    assert_eq!(v["inputs"][0]["fields"]["key"], "domain_name", "{v}");
    assert_eq!(
        (v["keys"].clone(), policy(&v, "1/m")["admitted"].clone()),
        (1.into(), 1.into())
    );
    assert_eq!(v["bad_lines"], 0, "{v}");
    let v = run("1/m", &["--key", "field:client"]);
    // (Each IPv6 address its own key: a field is keyed as written, `ip` by /64.)
    assert_eq!(v["keys"], 6, "{v}");
    assert_eq!(policy(&v, "1/m")["top_throttled"][0]["key"], "203.0.113.7");
    // An unreadable request has no path: no key by path.
    let v = run("1/m", &["--key", "path"]);
    assert_eq!(
        (v["keys"].clone(), v["unkeyed"].clone()),
        (2.into(), 1.into()),
        "{v}"
    );
    replay(&log, "1/m", &["--time-field", "nope"])
        .code(4)
        .stderr(predicate::str::contains("request_creation_time"));
    // A log without request_creation_time (the older format): timed by `time`.
    let old: String = text
        .lines()
        .map(|l| l.split(' ').take(13).collect::<Vec<_>>().join(" ") + " \"-\"\n")
        .collect();
    let old = write(&dir, "old.log", &old);
    let v = replay_json(&old, "1/m", &[]);
    assert_eq!(v["inputs"][0]["fields"]["time"], "time", "{v}");
}

#[test]
fn w3c_logs_replay_as_iis_and_cloudfront_wrote_them() {
    let dir = tempfile::tempdir().unwrap();
    // IIS: its directives, spaces in a header written `+`; a restart writes new directives
    // with other fields in another order (the client first, a time with a fraction); a line
    // cut short, a `-` client, and a day the month does not have are unusable.
    let iis = "#Software: Microsoft Internet Information Services 10.0\n\
               #Version: 1.0\n\
               #Date: 2024-05-01 12:00:00\n\
               #Fields: date time s-ip cs-method cs-uri-stem cs-uri-query s-port cs-username c-ip cs(User-Agent) cs(Referer) sc-status sc-substatus sc-win32-status time-taken\n\
               2024-05-01 12:00:00 10.0.0.1 GET /search q=a 443 - 203.0.113.7 Mozilla/5.0+(X11;+Linux) - 200 0 0 15\n\
               2024-05-01 12:00:01 10.0.0.1 GET /search q=b 443 bob 203.0.113.7 Mozilla/5.0+(X11;+Linux) - 200 0 0 15\n\
               2024-05-01 12:00:02 10.0.0.1 POST /login - 443 - 2001:db8::1 curl/8.0 - 200 0 0 15\n\
               2024-05-01 12:00:03 10.0.0.1 GET /search q=c 443 -\n\
               2024-05-01 12:00:03 10.0.0.1 GET /x - 443 - - curl/8.0 - 200 0 0 15\n\
               \n\
               #Software: Microsoft Internet Information Services 10.0\n\
               #Version: 1.0\n\
               #Date: 2024-05-01 12:00:04\n\
               #Fields: c-ip date time cs-method cs-uri-stem cs(User-Agent) sc-status\n\
               203.0.113.7 2024-05-01 12:00:04.250 GET /search Mozilla/5.0+(X11;+Linux) 200\n\
               198.51.100.2 2024-05-01 12:00:05 GET /about curl/8.0 200\n\
               198.51.100.2 2024-02-30 12:00:05 GET /about curl/8.0 200\n";
    let log = write(&dir, "u_ex240501.log", iis);
    let run = |policy: &str, extra: &[&str]| replay_json(&log, policy, extra);
    let v = run("1/m", &[]);
    assert_eq!(v["inputs"][0]["format"], "w3c", "{v}");
    assert_eq!(v["inputs"][0]["fields"]["time"], "date time", "{v}");
    assert_eq!(v["inputs"][0]["fields"]["ip"], "c-ip", "{v}");
    // Directives are neither lines nor unusable; the blank line counts, as in every format.
    assert_eq!(
        (v["lines"].clone(), v["bad_lines"].clone()),
        (9.into(), 3.into()),
        "{v}"
    );
    let bad = v["bad_line_examples"].to_string();
    assert!(
        bad.contains("#Fields") && bad.contains("no client address"),
        "{bad}"
    );
    assert!(bad.contains("2024-02-30"), "{bad}");
    // 203.0.113.7 (three requests), the IPv6 client, 198.51.100.2.
    assert_eq!(
        (v["requests"].clone(), v["keys"].clone()),
        (5.into(), 3.into()),
        "{v}"
    );
    assert_eq!(policy(&v, "1/m")["admitted"], 3);
    // The User-Agent, as the server received it (spaces), in either field order.
    let v = run("1/m", &["--key", "header:user-agent"]);
    assert_eq!(v["keys"], 2, "{v}");
    assert_eq!(
        policy(&v, "1/m")["top_throttled"][0]["key"],
        "Mozilla/5.0 (X11; Linux)",
        "{v}"
    );
    // The path holds the query (routes read it); a field by its W3C name (`-` is none, and
    // a #Fields without the field leaves its lines without a key).
    let v = run("1/m", &["--key", "path:/search?q={q}"]);
    // (q=a, q=b; the other paths, and /search without a query, have no key.)
    assert_eq!(
        (v["keys"].clone(), v["unkeyed"].clone()),
        (2.into(), 4.into()),
        "{v}"
    );
    let v = run("1/m", &["--key", "field:cs-username"]);
    // (bob; three `-` in the first block, two lines under a #Fields without it.)
    assert_eq!(
        (v["keys"].clone(), v["unkeyed"].clone()),
        (1.into(), 5.into()),
        "{v}"
    );
    // Fields named in any case; a field the #Fields lacks is an error naming its fields.
    let v = run("1/m", &["--ip-field", "S-IP"]);
    assert_eq!(v["inputs"][0]["fields"]["ip"], "s-ip", "{v}");
    replay(&log, "1/m", &["--key", "field:x-nope"])
        .code(4)
        .stderr(
            predicate::str::contains("names no x-nope")
                .and(predicate::str::contains("cs-uri-stem")),
        );
    replay(&log, "1/m", &["--key", "header:X-Api-Key"])
        .code(4)
        .stderr(predicate::str::contains("cs(x-api-key)"));
    // IIS logs no forwarding header unless configured to: --trusted-proxies says so.
    replay(&log, "1/m", &["--trusted-proxies", "private"])
        .code(4)
        .stderr(predicate::str::contains("--forwarded-field"));
    // A #Fields without a date and time, and a log without #Fields, are errors.
    let no_time = write(
        &dir,
        "no_time.log",
        "#Version: 1.0\n#Fields: c-ip cs-method cs-uri-stem\n203.0.113.7 GET /\n",
    );
    replay(&no_time, "1/m", &[])
        .code(4)
        .stderr(predicate::str::contains("no date and time fields"));
    let headless = write(
        &dir,
        "tail.log",
        "2024-05-01 12:00:00 10.0.0.1 GET / - 443 - 203.0.113.7 curl - 200 0 0 15\n",
    );
    replay(&headless, "1/m", &["--log-format", "w3c"])
        .code(4)
        .stderr(predicate::str::contains("no #Fields directive"));
    // Only directives: no line, no request.
    let empty = write(
        &dir,
        "empty.log",
        "#Version: 1.0\n#Fields: date time c-ip\n",
    );
    replay(&empty, "1/m", &[])
        .code(4)
        .stderr(predicate::str::contains("no usable request in 0 lines"));
    // Merged by time with their own #Fields (the second file's first line is the earliest).
    let m1 = write(
        &dir,
        "m1.log",
        "#Fields: date time c-ip\n2024-05-01 12:00:02 192.0.2.1\n2024-05-01 12:00:03 192.0.2.1\n",
    );
    let m2 = write(
        &dir,
        "m2.log",
        "#Fields: c-ip date time\n192.0.2.1 2024-05-01 12:00:00\n192.0.2.1 2024-05-01 12:00:04\n",
    );
    let out = replay(&m1, "1/m", &[&m2, "--format", "json"])
        .success()
        .get_output()
        .stdout
        .clone();
    let v = json(&out);
    assert_eq!(v["inputs"][0]["name"], m2.as_str(), "{v}");
    assert_eq!(
        (v["requests"].clone(), v["timestamps_backwards"].clone()),
        (4.into(), 0.into()),
        "{v}"
    );

    // CloudFront: tabs, percent-encoded headers, the viewer's Host in x-host-header, the
    // X-Forwarded-For it received.
    let fields = "date time x-edge-location sc-bytes c-ip cs-method cs(Host) cs-uri-stem sc-status cs(Referer) cs(User-Agent) cs-uri-query cs(Cookie) x-edge-result-type x-edge-request-id x-host-header cs-protocol cs-bytes time-taken x-forwarded-for ssl-protocol";
    let line = |s: u32, ip: &str, xff: &str, host: &str, ua: &str| {
        format!(
            "2024-05-01\t12:00:{s:02}\tIAD89-C3\t335\t{ip}\tGET\td111111abcdef8.cloudfront.net\t/api/items\t200\t-\t{ua}\tid=1\t-\tMiss\tr{s}==\t{host}\thttps\t123\t0.001\t{xff}\tTLSv1.3\n"
        )
    };
    let mut cf = format!("#Version: 1.0\n#Fields: {fields}\n");
    let ua = "Mozilla/5.0%20(Windows%20NT%2010.0;%20Win64;%20x64)";
    for s in 0..4 {
        // Behind a proxy of their own (10.0.0.5), two viewers; one viewer direct.
        cf += &line(
            s,
            "10.0.0.5",
            &format!("203.0.113.{}", s % 2),
            "api.example.com",
            ua,
        );
        cf += &line(s, "198.51.100.9", "-", "www.example.com", "curl/8.0");
    }
    let cf = write(&dir, "E2ABCDEF.2024-05-01-12.a1b2c3d4", &cf);
    let v = replay_json(&cf, "1/m", &[]);
    assert_eq!(v["inputs"][0]["format"], "w3c", "{v}");
    assert_eq!(
        (v["keys"].clone(), v["bad_lines"].clone()),
        (2.into(), 0.into()),
        "{v}"
    );
    let v = replay_json(&cf, "1/m", &["--trusted-proxies", "private"]);
    assert_eq!(v["keys"], 3, "{v}");
    assert_eq!(policy(&v, "1/m")["admitted"], 3, "{v}");
    assert_eq!(
        v["inputs"][0]["fields"]["forwarded"], "x-forwarded-for",
        "{v}"
    );
    let v = replay_json(&cf, "1/m", &["--key", "header:User-Agent"]);
    let keys = policy(&v, "1/m")["top_throttled"].to_string();
    assert!(
        keys.contains("Mozilla/5.0 (Windows NT 10.0; Win64; x64)"),
        "{keys}"
    );
    let v = replay_json(&cf, "1/m", &["--key", "header:Host"]);
    let keys = policy(&v, "1/m")["top_throttled"].to_string();
    assert!(
        keys.contains("api.example.com") && keys.contains("www.example.com"),
        "{keys}"
    );
    // The query joins the path.
    let v = replay_json(&cf, "r=GET /api/items?id={id} => 1/m", &[]);
    assert_eq!(policy(&v, "r")["unlimited"], 0, "{v}");
}

/// `--timezone`: HAProxy's local dates are read in the host's zone, through the night its
/// clock is set back (2024-10-27 in Berlin: 02:00-03:00 comes twice); a JSON log's dates with
/// their own offset, and W3C's (UTC by its format), keep their instants.
#[test]
fn dates_without_an_offset_are_read_in_the_timezone_given() {
    let dir = tempfile::tempdir().unwrap();
    let line = |date: &str| {
        format!(
            "Oct 27 00:00:00 lb1 haproxy[812]: 10.0.0.5:4000 [27/Oct/2024:{date}] www~ api/srv1 0/0/1/2/3 200 512 - - ---- 1/1/0/0/0 0/0 \"GET / HTTP/1.1\"\n"
        )
    };
    // 02:10 and 02:59 summer time, 02:10 and 02:50 winter time, then 03:20 (winter).
    let text: String = [
        "02:10:00.000",
        "02:59:00.000",
        "02:10:00.000",
        "02:50:00.000",
        "03:20:00.000",
    ]
    .iter()
    .map(|d| line(d))
    .collect();
    let log = write(&dir, "haproxy.log", &text);
    let berlin = replay_json(&log, "1/h", &["--timezone", "Europe/Berlin"]);
    assert_eq!(berlin["inputs"][0]["timezone"], "Europe/Berlin", "{berlin}");
    assert_eq!(berlin["first"], "2024-10-27T00:10:00Z", "{berlin}");
    assert_eq!(berlin["last"], "2024-10-27T02:20:00Z", "{berlin}");
    assert_eq!(berlin["timestamps_backwards"], 0, "{berlin}");
    // 00:10, 00:59, 01:10, 01:50 and 02:20 UTC: 00:10, 01:10 and 02:20 are admitted.
    assert_eq!(policy(&berlin, "1/h")["admitted"], 3, "{berlin}");
    // Read as UTC, the second 02:10 goes back in time: 02:10 and 03:20 only.
    let utc = replay_json(&log, "1/h", &[]);
    assert_eq!(utc["inputs"][0]["timezone"], "UTC", "{utc}");
    assert_eq!(policy(&utc, "1/h")["admitted"], 2, "{utc}");
    // A fixed offset: every date an hour and a half earlier in UTC.
    let fixed = replay_json(&log, "1/h", &["--timezone", "+01:30"]);
    assert_eq!(fixed["first"], "2024-10-27T00:40:00Z", "{fixed}");

    // Dates with their own offset, and W3C's, are not moved.
    let json = write(
        &dir,
        "a.jsonl",
        "{\"time\":\"2024-10-27T02:10:00+02:00\",\"ip\":\"10.0.0.5\"}\n\
         {\"time\":\"2024-10-27T02:10:00Z\",\"ip\":\"10.0.0.5\"}\n",
    );
    let v = replay_json(&json, "1/h", &["--timezone", "America/New_York"]);
    assert_eq!(
        (v["first"].clone(), v["last"].clone()),
        ("2024-10-27T00:10:00Z".into(), "2024-10-27T02:10:00Z".into()),
        "{v}"
    );
    let iis = write(
        &dir,
        "u_ex241027.log",
        "#Fields: date time c-ip cs-method cs-uri-stem sc-status\n\
         2024-10-27 02:10:00 203.0.113.7 GET / 200\n",
    );
    let v = replay_json(&iis, "1/h", &["--timezone", "Europe/Berlin"]);
    assert_eq!(v["inputs"][0]["timezone"], "UTC", "{v}");
    assert_eq!(v["first"], "2024-10-27T02:10:00Z", "{v}");

    // A zone that is none is a usage error that says what to give.
    replay(&log, "1/h", &["--timezone", "Europe/Atlantis"])
        .code(2)
        .stderr(predicates::str::contains("IANA name"));
}

/// Without `--timezone`, the text report's input line says that dates without an offset
/// (HAProxy's) were read as UTC, and where lines went back in time it suggests the option (a
/// user's HAProxy log across a daylight saving change had 2 525 lines back in time and no
/// word of why). Dates with their own offset, W3C's (UTC by definition) and a zone given say
/// nothing of it.
#[test]
fn dates_read_as_utc_without_a_timezone_are_said() {
    let dir = tempfile::tempdir().unwrap();
    let line = |date: &str| {
        format!(
            "Oct 27 00:00:00 lb1 haproxy[812]: 10.0.0.5:4000 [27/Oct/2024:{date}] www~ api/srv1 0/0/1/2/3 200 512 - - ---- 1/1/0/0/0 0/0 \"GET / HTTP/1.1\"\n"
        )
    };
    let text = |dates: &[&str]| dates.iter().map(|d| line(d)).collect::<String>();
    let dst = write(
        &dir,
        "dst.log",
        &text(&[
            "02:10:00.000",
            "02:59:00.000",
            "02:10:00.000",
            "03:20:00.000",
        ]),
    );
    let out = |log: &str, extra: &[&str]| {
        String::from_utf8(
            replay(log, "1/h", extra)
                .success()
                .get_output()
                .stdout
                .clone(),
        )
        .unwrap()
    };
    let said = "dates without an offset read as UTC: --timezone gives their zone";
    let hint = "the input's dates without an offset were read as UTC: if the clock that wrote them was set back (daylight saving), give its zone with --timezone";
    let t = out(&dst, &[]);
    assert!(t.lines().next().unwrap().contains(said), "{t}");
    assert!(
        t.contains("1 timestamps earlier than an earlier line's"),
        "{t}"
    );
    assert!(t.contains(hint), "{t}");
    // In order: the input line says it, and nothing is suggested for lines in order.
    let sorted = write(&dir, "sorted.log", &text(&["01:10:00.000", "02:10:00.000"]));
    let t = out(&sorted, &[]);
    assert!(t.contains(said) && !t.contains("skipped"), "{t}");
    // UTC given: chosen, so nothing said of it (the lines back in time are still counted).
    let t = out(&dst, &["--timezone", "UTC"]);
    assert!(!t.contains("read as UTC"), "{t}");
    // With a zone: read in it, in order.
    let t = out(&dst, &["--timezone", "Europe/Berlin"]);
    assert!(
        t.contains("dates without an offset in Europe/Berlin") && !t.contains("read as UTC"),
        "{t}"
    );
    // Dates with an offset, W3C's, out of order: no word of UTC.
    // (Forty lines an hour on, then forty in order: many go back in time.)
    let back: Vec<u64> = (3600..3640).chain(0..40).collect();
    let clf = write(
        &dir,
        "a.log",
        &back.iter().map(|&s| clf_line(s)).collect::<String>(),
    );
    let iis = write(
        &dir,
        "u_ex241027.log",
        &back.iter().fold(
            "#Fields: date time c-ip cs-method cs-uri-stem sc-status\n".to_string(),
            |t, s| {
                t + &format!(
                    "2024-10-27 {:02}:{:02}:{:02} 203.0.113.7 GET / 200\n",
                    s / 3600,
                    s % 3600 / 60,
                    s % 60
                )
            },
        ),
    );
    for log in [&clf, &iis] {
        let t = out(log, &[]);
        assert!(
            t.contains(" timestamps earlier")
                && !t.contains("skipped  0 unusable lines, 0 without a key; 0")
                && !t.contains("UTC:"),
            "{t}"
        );
    }
    // Several inputs: how many of them.
    let t = out(&dst, &[&clf]);
    assert!(
        t.contains("; 1 of the inputs' dates without an offset were read as UTC"),
        "{t}"
    );
}

#[test]
fn haproxy_logs_replay_as_haproxy_saw_them() {
    let dir = tempfile::tempdir().unwrap();
    // Two captured request headers (User-Agent, X-Forwarded-For); syslog prefixes and none;
    // an IPv6 client; a request HAProxy could not read; HAProxy's own message and a TCP
    // log line (unusable).
    let line = |ms: u32, client: &str, hdrs: &str, req: &str| {
        format!(
            "May  1 12:00:00 lb1 haproxy[812]: {client} [01/May/2024:12:00:{:02}.{:03}] www~ api/srv1 0/0/1/2/3 200 512 - - ---- 1/1/0/0/0 0/0 {{{hdrs}}} \"{req}\"\n",
            ms / 1000,
            ms % 1000
        )
    };
    let mut text = String::new();
    text += "May  1 12:00:00 lb1 haproxy[812]: Proxy www started.\n";
    for i in 0..4 {
        text += &line(
            i * 100,
            "10.0.0.5:4000",
            &format!("curl/8|203.0.113.{i}"),
            "GET /api/a?x=1 HTTP/1.1",
        );
        text += &line(
            i * 100 + 50,
            "2001:db8:1:2::7:6000",
            "bot #22q#22|",
            "POST /api/b HTTP/1.1",
        );
    }
    text += &line(900, "198.51.100.1:7000", "|", "<BADREQ>");
    // (stdout logging: no prefix; the line starts at the client.)
    text += "198.51.100.1:7001 [01/May/2024:12:00:01.000] www~ api/srv1 0/0/1/2/3 200 512 - - ---- 1/1/0/0/0 0/0 {curl/8|} \"GET /api/a HTTP/1.1\"\n";
    text += "May  1 12:00:02 lb1 haproxy[812]: 10.0.0.9:5000 [01/May/2024:12:00:02.000] tcp-in tcp/srv1 0/0/5007 212 -- 0/0/0/0/3 0/0\n";
    let log = write(&dir, "haproxy.log", &text);
    let run = |policy: &str, extra: &[&str]| replay_json(&log, policy, extra);
    let v = run("1/m", &[]);
    assert_eq!(v["inputs"][0]["format"], "haproxy", "{v}");
    assert_eq!(v["inputs"][0]["fields"]["time"], "request_date", "{v}");
    assert_eq!(
        (v["lines"].clone(), v["bad_lines"].clone()),
        (12.into(), 2.into()),
        "{v}"
    );
    assert!(
        v["bad_line_examples"]
            .to_string()
            .contains("not an HAProxy HTTP log line"),
        "{v}"
    );
    // 10.0.0.5, the IPv6 client's /64, 198.51.100.1 (its port dropped).
    assert_eq!(
        (v["requests"].clone(), v["keys"].clone()),
        (10.into(), 3.into()),
        "{v}"
    );
    assert_eq!(policy(&v, "1/m")["admitted"], 3);
    // Milliseconds: each client's requests are 100 ms apart (at whole seconds, they would
    // come at once); at 5/s every other one is rejected: 2 + 2 + 1.
    assert_eq!(
        policy(&run("10/s; burst=1", &[]), "10/s; burst=1")["rejected"],
        0
    );
    assert_eq!(
        policy(&run("5/s; burst=1", &[]), "5/s; burst=1")["rejected"],
        2 + 2 + 1
    );
    // Routes read the request line (10.0.0.5 and 198.51.100.1 GET, the IPv6 client POSTs);
    // <BADREQ> has no path, matches no route, and is admitted unlimited.
    let v = run("r=GET /api/a => 1/m | POST /api/b => 2/m", &[]);
    let r = policy(&v, "r");
    assert_eq!(
        (r["admitted"].clone(), r["unlimited"].clone()),
        ((1 + 1 + 2 + 1).into(), 1.into()),
        "{v}"
    );
    let v = run("1/m", &["--key", "path"]);
    assert_eq!(v["unkeyed"], 1, "{v}");
    // A captured header by its place; `#22` read as the quote it stands for; empty is none.
    let v = run("1/m", &["--key", "field:hdr0"]);
    assert_eq!(v["inputs"][0]["fields"]["key"], "hdr0", "{v}");
    assert_eq!(
        (v["keys"].clone(), v["unkeyed"].clone()),
        (2.into(), 1.into()),
        "{v}"
    );
    let keys = policy(&v, "1/m")["top_throttled"].to_string();
    assert!(keys.contains(r#"bot \"q\""#), "{keys}");
    replay(&log, "1/m", &["--key", "header:User-Agent"])
        .code(4)
        .stderr(predicate::str::contains("field:hdr0"));
    replay(&log, "1/m", &["--key", "field:hdr64"])
        .code(4)
        .stderr(predicate::str::contains("capture request header"));
    // The X-Forwarded-For capture behind a trusted proxy: the clients it names.
    replay(&log, "1/m", &["--trusted-proxies", "10.0.0.5"])
        .code(4)
        .stderr(predicate::str::contains("--forwarded-field hdrN"));
    let v = run(
        "1/m",
        &["--trusted-proxies", "10.0.0.5", "--forwarded-field", "hdr1"],
    );
    // 203.0.113.0-3, the IPv6 client, 198.51.100.1.
    assert_eq!(v["keys"], 6, "{v}");
    assert_eq!(v["inputs"][0]["fields"]["forwarded"], "hdr1", "{v}");
}

#[test]
fn html_report_is_self_contained() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("r.html");
    bin()
        .args([
            "replay",
            "--sample",
            "--policy",
            "a=20/s; burst=100",
            "--policy",
            "b=5/s; burst=20",
        ])
        .args(["--html", html.to_str().unwrap()])
        .assert()
        .success();
    let page = std::fs::read_to_string(&html).unwrap();
    // No network: no URL is loaded, and the policy forbids it.
    assert!(page.contains("default-src 'none'"));
    for bad in ["src=\"http", "href=\"http", "@import", "url("] {
        assert!(!page.contains(bad), "{bad}");
    }
    let start = page
        .find("<script id=\"data\" type=\"application/json\">")
        .unwrap();
    let rest = &page[start..];
    let data = &rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()];
    let v: Value = serde_json::from_str(data).unwrap();
    assert_eq!(v["policies"].as_array().unwrap().len(), 2);
    // The second pass traced the most throttled keys' levels on the timeline's bins.
    let traces = v["traces"].as_array().unwrap();
    assert!(!traces.is_empty());
    let bins = v["timeline"]["offered"].as_array().unwrap().len();
    for t in traces {
        assert_eq!(t["level_end"].as_array().unwrap().len(), bins);
        let limit = t["limit"].as_u64().unwrap();
        assert!(t["level_end"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l.is_null() || l.as_u64().unwrap() <= limit));
        let rejected: u64 = t["rejected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .sum();
        let key = t["key"].as_str().unwrap();
        let p = policy(&v, t["policy"].as_str().unwrap());
        let top = p["top_throttled"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["key"] == key)
            .unwrap();
        assert_eq!(top["rejected"].as_u64(), Some(rejected), "{key}");
    }
}

/// The HTML report says what the share of rejections leaves out, as the text report's notes
/// do: requests no route limited, those a leaky queue admitted with a wait, and those whose
/// cost is above the capacity (it showed none of them: "16.94% rejected" read as if every
/// request had been limited). The page draws them with its script (`ci/check.d/60-cli.sh`
/// renders it in Chromium); here, its data holds them and its script writes them.
#[test]
fn html_report_shows_unlimited_delayed_and_over_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let log: String = (0..6)
        .map(|s| {
            clf_line(s / 3).replace("GET / ", if s % 2 == 0 { "POST /login " } else { "GET / " })
        })
        .collect();
    let log = write(&dir, "a.log", &log);
    let html = dir.path().join("r.html");
    bin()
        .args(["replay", "-q", &log])
        .args(["--policy", "routes=POST /login => 1/s"])
        .args(["--policy", "queue=1/s; algorithm=leaky_queue; max_delay=5s"])
        .args(["--html", html.to_str().unwrap()])
        .assert()
        .success()
        .stdout(predicate::str::contains("3 matched no route (not limited)"))
        .stdout(predicate::str::contains("admitted with a wait"));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("\"unlimited\":3"), "{page}");
    for text in [
        "matched no route (not limited)",
        "admitted with a wait",
        "rejected for a cost above the capacity",
        "p.unlimited",
        "p.delayed",
        "p.over_capacity",
    ] {
        assert!(
            page.contains(text),
            "the page's script never writes {text:?}"
        );
    }
}

#[test]
fn simulate_outputs_a_report_too() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("s.html");
    bin()
        .args([
            "simulate",
            "-q",
            "10/s; burst=50",
            "-t",
            "60/s for 3s",
            "--html",
            html.to_str().unwrap(),
            "--format",
            "csv",
            "--table",
            "timeline",
        ])
        .assert()
        .success()
        .stdout(predicate::str::starts_with(
            "start,start_ns,width_ns,offered,admitted 10/s; burst=50",
        ));
    assert!(std::fs::read_to_string(html)
        .unwrap()
        .contains("\"admitted\":79"));
}

/// Key A twice at 0 s (the second rejected), key B at 10 s (A is full again), B again: with
/// `--max-keys 1`, B meets the bound.
fn evict_log() -> String {
    [(0, 1), (0, 1), (10, 2), (10, 2), (10, 2)]
        .iter()
        .map(|(t, ip)| {
            format!(
                "{{\"time\": {}, \"ip\": \"192.0.2.{ip}\"}}\n",
                1714521600 + t
            )
        })
        .collect()
}

/// A replay keeps per-key buckets in arrays by key id until a policy's `--max-keys` is met;
/// the keyed store it then starts over on evicts full buckets to make room, as it always did:
/// a key whose bucket is full again gives way to a new one, and the decisions are those of a
/// replay with room for every key.
#[test]
fn max_keys_evicts_full_buckets_first() {
    let dir = tempfile::tempdir().unwrap();
    let log = write(&dir, "evict.jsonl", &evict_log());
    let run = |max_keys: &str| {
        let out = bin()
            .args([
                "replay",
                "--policy",
                "1/s",
                "--format",
                "json",
                "--max-keys",
                max_keys,
            ])
            .args(["--html", &format!("{log}.{max_keys}.html"), &log])
            .assert()
            .success();
        json(&out.get_output().stdout)
    };
    let (bounded, roomy) = (run("1"), run("5"));
    for r in [&bounded, &roomy] {
        let p = &r["policies"][0];
        assert_eq!(
            (p["admitted"].as_u64(), p["rejected"].as_u64()),
            (Some(2), Some(3)),
            "{p}"
        );
    }
    assert_eq!(bounded["policies"][0]["keys_held"], 1);
    assert_eq!(roomy["policies"][0]["keys_held"], 2);
    let strip = |v: &Value| {
        let mut v = v["policies"][0].clone();
        v.as_object_mut().unwrap().remove("keys_held");
        v
    };
    assert_eq!(strip(&bounded), strip(&roomy));
    // The traced keys' second pass (for --html) runs on the stores the first one ended on.
    assert!(
        !bounded["traces"].as_array().unwrap().is_empty(),
        "{bounded}"
    );
    assert_eq!(bounded["traces"], roomy["traces"]);
}

/// The start-over on keyed stores when a dense store meets `--max-keys` reads the inputs a
/// second time: stdin too, which is spooled only for `--html`'s trace pass. Without `--html`
/// the second pass read stdin from where the first one stopped (nothing left here: an error;
/// in a log larger than the reader's buffer, its tail, summarised as the whole log).
#[test]
fn max_keys_start_over_reads_stdin_from_its_start() {
    let args = [
        "replay",
        "-p",
        "1/s",
        "--format",
        "json",
        "--max-keys",
        "1",
        "-",
    ];
    let out = bin().args(args).write_stdin(evict_log()).assert().success();
    let r = json(&out.get_output().stdout);
    assert_eq!(r["requests"], 5, "{r}");
    let p = &r["policies"][0];
    assert_eq!(
        (p["admitted"].as_u64(), p["rejected"].as_u64()),
        (Some(2), Some(3)),
        "{p}"
    );
}

#[test]
fn path_key_captures_after_the_query_mark() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = String::new();
    // Values as the application reads them: `%61bc` is `abc`, `a+b` and `a%20b` are `a b`; a
    // `%` without two hex digits stays.
    let qs = ["abc", "abc", "de", "%61bc", "a+b", "a%20b", "100%", "%zz"];
    for (i, q) in qs.iter().enumerate() {
        log += &format!(
            "192.0.2.1 - - [01/May/2024:00:00:0{i} +0000] \"GET /search?q={q} HTTP/1.1\" 200 5 \"-\" \"t\"\n"
        );
    }
    // In a path, `+` is itself; `%2F` stays encoded (the captures are joined with `/`).
    for (i, u) in ["bob", "%62ob", "a+b", "x%2Fy/z", "x/y%2fz"]
        .iter()
        .enumerate()
    {
        log += &format!(
            "192.0.2.1 - - [01/May/2024:00:00:1{i} +0000] \"GET /users/{u} HTTP/1.1\" 200 5 \"-\" \"t\"\n"
        );
    }
    let f = write(&dir, "q.log", &log);
    let v = json(
        &bin()
            .args([
                "replay",
                &f,
                "--key",
                "path:/search?q={q}",
                "--policy",
                "1/h; burst=1",
                "--format",
                "json",
            ])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(v["keys"], 5);
    assert_eq!(v["unkeyed"], 5);
    let p = &v["policies"][0];
    let top = |p: &Value| -> Vec<(String, u64)> {
        p["top_throttled"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["key"].as_str().unwrap().into(),
                    t["rejected"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(top(p), vec![("abc".into(), 2), ("a b".into(), 1)]);
    let keyed_by = |pattern: &str| {
        let key = format!("path:{pattern}");
        let args = ["--key", key.as_str(), "--format", "json"];
        json(
            &replay(&f, "1/h; burst=1", &args)
                .success()
                .get_output()
                .stdout,
        )
    };
    let v = keyed_by("/users/{u}");
    assert_eq!((&v["keys"], &v["unkeyed"]), (&json!(2), &json!(10)));
    assert_eq!(top(&v["policies"][0]), vec![("bob".into(), 1)]);
    let v = keyed_by("/users/{a}/{b}");
    assert_eq!((&v["keys"], &v["unkeyed"]), (&json!(2), &json!(11)));
    assert_eq!(v["policies"][0]["rejected"], 0);
}

#[test]
fn csv_columns_named_but_missing_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        &dir,
        "a.csv",
        "time,ip,path\n2024-05-01T00:00:00Z,192.0.2.1,/a\n2024-05-01T00:00:01Z,192.0.2.2,/b\n",
    );
    let cases: [(&[&str], &str); 6] = [
        (&["--time-field", "ts"], "\"ts\""),
        (&["--ip-field", "client"], "\"client\""),
        (&["--path-field", "uri", "--key", "path"], "\"uri\""),
        (&["--cost-field", "weight"], "\"weight\""),
        (&["--key", "field:tenant"], "\"tenant\""),
        (&["--key", "header:X-Api-Key"], "x_api_key"),
    ];
    for (extra, missing) in cases {
        let mut a = vec!["replay", f.as_str(), "--policy", "1/s"];
        a.extend_from_slice(extra);
        bin().args(&a).assert().code(4).stderr(
            predicate::str::contains(missing)
                .and(predicate::str::contains("columns: time, ip, path")),
        );
    }
    // A named column that is there still works.
    replay(&f, "1/s", &["--key", "field:path"]).success();
}

#[test]
fn policies_at_most_64_with_distinct_names() {
    let names: Vec<String> = (0..65).map(|i| format!("p{i}=1/s")).collect();
    let mut a = vec!["simulate", "--traffic", "1/s for 1s"];
    for n in &names[..64] {
        a.extend(["--policy", n.as_str()]);
    }
    bin().args(&a).assert().success();
    a.extend(["--policy", names[64].as_str()]);
    bin()
        .args(&a)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("at most 64 policies"));
    let mut a = vec!["replay", "--sample"];
    for n in &names {
        a.extend(["--policy", n.as_str()]);
    }
    bin()
        .args(&a)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("at most 64 policies"));
    for args in [
        ["--policy", "10/s", "--policy", "10/s"],
        ["--policy", "a=10/s", "--policy", "a=5/s"],
    ] {
        let mut a = vec!["replay", "--sample"];
        a.extend(args);
        bin()
            .args(&a)
            .assert()
            .code(2)
            .stderr(predicate::str::contains("two policies are named"));
    }
}

#[test]
fn peaks_of_a_log_shorter_than_the_sustain_window_agree() {
    let dir = tempfile::tempdir().unwrap();
    let peaks = |name: &str, step_ns: u64| -> (f64, f64, u64) {
        let mut log = String::new();
        for j in 0..500u64 {
            log += &format!("{{\"time\":{},\"ip\":\"192.0.2.1\"}}\n", T0 + j * step_ns);
        }
        let f = write(&dir, name, &log);
        let v = replay_json(&f, "1000/s", &[]);
        let p = policy(&v, "1000/s");
        assert_eq!(p["admitted"], 500);
        (
            v["peak_sustained_offered_per_s"].as_f64().unwrap(),
            p["peak_sustained_admitted_per_s"].as_f64().unwrap(),
            v["sustain_window_ns"].as_u64().unwrap(),
        )
    };
    // 5 s at 100/s, all admitted: one peak.
    let (offered, admitted, w) = peaks("short.jsonl", 10_000_000);
    assert_eq!(offered, admitted);
    assert!((offered - 100.0).abs() < 1.0, "{offered}");
    assert_eq!(w, 4_990_000_000);
    // Every timestamp equal: the count over the sustain window, not over 1 ns.
    let (offered, admitted, w) = peaks("same.jsonl", 0);
    assert_eq!((offered, admitted, w), (50.0, 50.0, 10_000_000_000));
}

/// A line over 16 MiB is read through without being held, counted as unusable with its
/// number and length, and the lines around it are replayed; a long first line that fits is
/// seen whole by the field detection; a first line over the limit is skipped by it.
#[test]
fn lines_over_16_mib_are_skipped_and_long_first_lines_detected() {
    let dir = tempfile::tempdir().unwrap();
    let line = |t: u64| format!("{{\"ts\":{t},\"ip\":\"192.0.2.1\"}}\n");
    let long = |pad: usize| {
        format!(
            "{{\"pad\":\"{}\",\"ts\":1714521601,\"ip\":\"192.0.2.1\"}}\n",
            "a".repeat(pad)
        )
    };
    let over = 17 << 20;
    let replay = |name: &str, text: String, stdin: bool| -> Value {
        let f = write(&dir, name, &text);
        let mut cmd = bin();
        cmd.args(["replay", "--policy", "100/s", "--format", "json"]);
        if stdin {
            cmd.arg("-").write_stdin(text);
        } else {
            cmd.arg(&f);
        }
        json(&cmd.assert().success().get_output().stdout)
    };
    for stdin in [false, true] {
        // Over the limit in the middle, and as the last line without a newline.
        let text = line(1714521600) + &long(over) + &line(1714521602) + long(over).trim_end();
        let v = replay("mid.jsonl", text, stdin);
        assert_eq!(
            (v["requests"].as_u64(), v["bad_lines"].as_u64()),
            (Some(2), Some(2))
        );
        assert_eq!(v["lines"], 4);
        let ex = v["bad_line_examples"][0].as_str().unwrap();
        let len = long(over).len() - 1;
        assert!(
            ex.contains(&format!(":2: line of {len} bytes, over the 16 MiB limit")),
            "{ex}"
        );
        assert!(v["bad_line_examples"][1]
            .as_str()
            .unwrap()
            .contains(":4: line of"));
        // A first line of 3 MiB: detection reads it whole.
        let v = replay("first.jsonl", long(3 << 20) + &line(1714521602), stdin);
        assert_eq!(
            (v["requests"].as_u64(), v["bad_lines"].as_u64()),
            (Some(2), Some(0))
        );
        assert_eq!(v["inputs"][0]["fields"]["time"], "ts");
        // A first line over the limit: detection reads the next ones.
        let v = replay(
            "firstover.jsonl",
            "\n".to_string() + &long(over) + &line(1714521602),
            stdin,
        );
        assert_eq!(
            (v["requests"].as_u64(), v["bad_lines"].as_u64()),
            (Some(1), Some(1))
        );
        assert!(v["bad_line_examples"][0]
            .as_str()
            .unwrap()
            .contains(":2: line of"));
        assert_eq!(v["lines"], 3);
    }
    // Only lines over the limit: no usable request (exit 4), each counted.
    let f = write(&dir, "allover.jsonl", &(long(over) + &long(over)));
    bin()
        .args(["replay", "--policy", "100/s", &f])
        .assert()
        .code(4)
        .stderr(predicate::str::contains(
            "no usable request in 2 lines (2 unusable",
        ));
    // --strict stops at it.
    let f = write(&dir, "strict.jsonl", &(line(1714521600) + &long(over)));
    bin()
        .args(["replay", "--policy", "100/s", "--strict", &f])
        .assert()
        .code(4)
        .stderr(predicate::str::contains(":2: line of"));
}

/// A CSV header after blank lines is the header (not a blank line skipped in its place).
#[test]
fn csv_header_after_blank_lines() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(
        &dir,
        "h.csv",
        "\n\ntime,ip\n2024-05-01T00:00:00Z,192.0.2.1\n2024-05-01T00:00:01Z,192.0.2.1\n",
    );
    let v = json(
        &bin()
            .args(["replay", "--policy", "100/s", "--format", "json", &f])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(
        (v["requests"].as_u64(), v["bad_lines"].as_u64()),
        (Some(2), Some(0))
    );
}

/// A CSV record whose quoted field holds a line break (RFC 4180; Python's csv module writes
/// them) is unusable, and so are the lines that continue it: text inside a field never
/// becomes a request, in whatever column, however many lines it takes.
#[test]
fn csv_records_over_several_lines_are_never_requests() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, text: &str| -> Value {
        let f = write(&dir, name, text);
        json(
            &bin()
                .args(["replay", "--policy", "100/s", "--format", "json", &f])
                .assert()
                .success()
                .get_output()
                .stdout,
        )
    };
    let ok = |s: u32| format!("2024-05-01T12:00:{s:02}Z,192.0.2.1,/ok,ua\n");
    // The path field, then a field after those read (the user agent), over 2 and 3 lines.
    let text = "time,ip,path,ua\n".to_string()
        + &ok(0)
        + "2024-05-01T12:00:09Z,192.0.2.1,\"/x\n2024-05-01T12:00:10Z,6.6.6.6,/admin\",ua\n"
        + &ok(11)
        + "2024-05-01T12:00:12Z,192.0.2.1,/p,\"Mozilla \"\"5\"\"\n\n2024-05-01T12:00:13Z,6.6.6.7,/admin,\"\n"
        + &ok(14);
    let v = run("nl.csv", &text);
    assert_eq!(v["requests"], 3);
    assert_eq!(v["keys"], 1, "{}", v["bad_line_examples"]);
    assert_eq!(v["bad_lines"], 5);
    let ex: Vec<&str> = v["bad_line_examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        ex[0].contains(":3: a quoted field goes on past the end of the line"),
        "{ex:?}"
    );
    assert!(
        ex[1].contains(":4: continues the CSV record of line 3"),
        "{ex:?}"
    );
    assert!(ex[2].contains(":6: a quoted field goes on"), "{ex:?}");
    assert!(
        ex[3].contains(":7: continues the CSV record of line 6"),
        "{ex:?}"
    );
    assert!(
        ex[4].contains(":8: continues the CSV record of line 6"),
        "{ex:?}"
    );
    // A line over 16 MiB inside the record: its quotes tell whether it closes the field.
    let long = |quotes: &str| "a".repeat(17 << 20) + quotes + "\n";
    let text = "time,ip,path\n".to_string()
        + &ok(0)
        + "2024-05-01T12:00:09Z,192.0.2.1,\"/x\n"
        + &long("\"\"")
        + "2024-05-01T12:00:10Z,6.6.6.6,/admin\"\n"
        + &ok(11)
        + "2024-05-01T12:00:12Z,192.0.2.1,\"/x\n"
        + &long("\"")
        + &ok(13);
    let v = run("long.csv", &text);
    assert_eq!(
        (v["requests"].as_u64(), v["bad_lines"].as_u64()),
        (Some(3), Some(5))
    );
    assert_eq!(v["keys"], 1);
}

/// Text from the logs reaches a terminal with its control characters escaped (C0, DEL,
/// C1): a User-Agent cannot retitle the terminal or clear the screen through the table, the
/// CSV or an error. JSON keeps the text exact (escaped as JSON).
#[test]
fn control_characters_from_logs_are_escaped_in_text_output() {
    let dir = tempfile::tempdir().unwrap();
    let ua = "\u{1b}]0;pwned\u{7}\u{1b}[2J\u{9b}31m\u{7f}FAKE";
    let mut log = String::new();
    for s in 0..5 {
        log += &format!(
            "198.51.100.7 - - [01/May/2024:12:00:0{s} +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"{ua}\"\n"
        );
    }
    log += "\u{1b}[2J\u{1b}]0;bad line\u{7}\n";
    let f = write(&dir, "esc.log", &log);
    let clean = |out: &[u8]| {
        let s = String::from_utf8(out.to_vec()).unwrap();
        assert!(!s.chars().any(|c| c.is_control() && c != '\n'), "{s:?}");
        s
    };
    let args = [
        "replay",
        &f,
        "-p",
        "1/m; burst=1",
        "--key",
        "header:User-Agent",
    ];
    let table = bin()
        .args(args)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let table = clean(&table);
    assert!(
        table.contains(r"\x1b]0;pwned\x07\x1b[2J\u{9b}31m\x7fFAKE"),
        "{table}"
    );
    assert!(
        table.contains(r":6: not a combined line: \x1b[2J\x1b]0;bad line\x07"),
        "{table}"
    );
    let csv = bin()
        .args(args)
        .args(["--format", "csv", "--table", "top-keys"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    assert!(clean(&csv).contains(r"\x1b]0;pwned\x07"));
    let err = bin()
        .args(args)
        .arg("--strict")
        .assert()
        .code(4)
        .get_output()
        .stderr
        .clone();
    assert!(clean(&err).contains(r"line: \x1b[2J\x1b]0;bad line\x07"));
    let v = json(
        &bin()
            .args(args)
            .args(["--format", "json"])
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(v["policies"][0]["top_throttled"][0]["key"], ua);
}

/// A timestamp far from the others (a first line in 1970, a last one in 2200) puts requests
/// in the timeline's first or last bin: a warning on stderr says so; a sound log has none,
/// nor one whose first line is stamped far ahead of the next ones (taken at their time).
#[test]
fn far_off_timestamps_warn_that_the_timeline_is_distorted() {
    let dir = tempfile::tempdir().unwrap();
    let line = |ts: &str| format!("{{\"ts\":{ts},\"ip\":\"203.0.113.66\"}}\n");
    let lines = |first: Option<&str>, last: Option<&str>| {
        let mut log = first.map(line).unwrap_or_default();
        for s in 0..50 {
            log += &format!("{{\"ts\":{},\"ip\":\"192.0.2.1\"}}\n", 1714564800 + s);
        }
        log + &last.map(line).unwrap_or_default()
    };
    for (name, log, warning) in [
        (
            "past.jsonl",
            lines(Some("\"1970-01-01T00:00:01Z\""), None),
            "warning: 50 of 51 requests are counted in the timeline's first or last bin",
        ),
        (
            "future.jsonl",
            lines(None, Some("\"2200-01-01T00:00:00Z\"")),
            "warning: 1 of 51 requests are counted in the timeline's first or last bin",
        ),
    ] {
        let f = write(&dir, name, &log);
        bin()
            .args(["replay", &f, "-p", "10/s", "--format", "json"])
            .assert()
            .success()
            .stderr(predicate::str::contains(warning));
    }
    let f = write(
        &dir,
        "ahead.jsonl",
        &lines(Some("\"2200-01-01T00:00:00Z\""), None),
    );
    let out = bin()
        .args(["replay", &f, "-p", "10/s", "--format", "json"])
        .assert()
        .success()
        .stderr(predicate::str::is_empty())
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["requests"], 51);
    assert_eq!(v["first"], "2024-05-01T12:00:01Z");
    let f = write(
        &dir,
        "sound.jsonl",
        &lines(Some("\"2024-05-01T11:59:59Z\""), None),
    );
    bin()
        .args(["replay", &f, "-p", "10/s"])
        .assert()
        .success()
        .stderr(predicate::str::is_empty());
}

/// A merge opens each input when it reaches the input's first timestamp and closes it at its
/// end: two load balancer nodes' five-minute files (150 each, the nodes' files overlapping
/// by half) replay with 64 open files allowed, as a day's 576 would.
#[test]
fn a_merge_opens_each_input_when_it_reaches_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for node in 0..2u64 {
        for i in 0..150u64 {
            let start = 1_714_521_600 + i * 300 + node * 150;
            let text: String = (0..3)
                .map(|k| format!("{{\"ts\":{},\"ip\":\"192.0.2.{node}\"}}\n", start + k * 100))
                .collect();
            files.push(write(&dir, &format!("node{node}-{i:03}.jsonl"), &text));
        }
    }
    let exe = assert_cmd::cargo::cargo_bin("sluicegate");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" \"$@\"")
        .arg(&exe)
        .args([
            "replay",
            "--policy",
            "1/s; burst=1",
            "--key",
            "all",
            "--format",
            "json",
        ])
        .args(&files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&out.stdout);
    // One request every 50 s, merged: all admitted, time never going back.
    assert_eq!(v["requests"], 900, "{v}");
    assert_eq!(v["policies"][0]["rejected"], 0, "{v}");
    assert_eq!(v["timestamps_backwards"], 0, "{v}");
    assert_eq!(v["inputs"].as_array().unwrap().len(), 300);
    assert_eq!(
        v["inputs_overlapping"].as_array().unwrap().len(),
        299,
        "{v}"
    );
}

/// In a merge, unusable lines and lines whose time no policy covers name their own input
/// and line; inputs of different formats merge.
#[test]
fn a_merge_names_each_inputs_own_lines() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(
        &dir,
        "a.log",
        &(0..6)
            .map(|s| format!("192.0.2.1 - - [01/May/2024:00:00:{:02} +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"t\"\n", s * 2))
            .collect::<String>(),
    );
    let b = write(
        &dir,
        "b.jsonl",
        "{\"time\":\"2024-05-01T00:00:01Z\",\"ip\":\"192.0.2.2\"}\n\
         not json\n\
         {\"time\":\"2024-05-01T00:00:03Z\",\"ip\":\"192.0.2.2\"}\n\
         {\"time\":\"2199-12-31T00:00:00Z\",\"ip\":\"192.0.2.2\"}\n\
         {\"time\":\"2024-05-01T00:00:07Z\",\"ip\":\"192.0.2.2\"}\n",
    );
    let out = bin()
        .args([
            "replay",
            "--policy",
            "3/s; burst=7",
            "--key",
            "all",
            "--format",
            "json",
            &a,
            &b,
        ])
        .assert()
        .success()
        .get_output()
        .clone();
    let v = json(&out.stdout);
    assert_eq!(v["requests"], 9, "{v}");
    assert_eq!(v["policies"][0]["rejected"], 0, "{v}");
    assert_eq!(v["timestamps_backwards"], 0, "{v}");
    assert_eq!(v["bad_lines"], 2, "{v}");
    let examples = v["bad_line_examples"].to_string();
    assert!(
        examples.contains("b.jsonl:2: not a jsonl line"),
        "{examples}"
    );
    assert!(
        examples.contains("b.jsonl:4: timestamp beyond the range the policies cover exactly"),
        "{examples}"
    );
    // --strict: the first unusable line, named.
    bin()
        .args(["replay", "--policy", "1/s", "--strict", &a, &b])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("b.jsonl:2"));
}

/// Several inputs are merged by time: files given out of time order (a shell glob lists
/// `access.log` before the older `access.log.1`) replay as one log, and the logs of two
/// servers, interleaved in time, as one server in front of both (a shared limit) sees them.
#[test]
fn inputs_are_merged_by_time() {
    let dir = tempfile::tempdir().unwrap();
    let line = |s: u64| {
        format!(
            "192.0.2.1 - - [01/May/2024:00:{:02}:{:02} +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"t\"\n",
            s / 60,
            s % 60
        )
    };
    let log = |secs: &[u64]| secs.iter().map(|&s| line(s)).collect::<String>();
    // One request a second for 40 s; a policy of 1/s with a burst of 1 admits them all, as
    // long as time never goes back.
    let all: Vec<u64> = (0..40).collect();
    let cur = write(&dir, "access.log", &log(&all[20..]));
    let old = write(&dir, "access.log.1", &log(&all[..20]));
    let run = |files: &[&str]| {
        let mut a = vec!["replay", "--policy", "1/s; burst=1", "--format", "json"];
        a.extend_from_slice(files);
        let out = bin().args(&a).assert().success().get_output().clone();
        (
            json(&out.stdout),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let text = |files: &[&str]| {
        let mut a = vec!["replay", "--policy", "1/s; burst=1"];
        a.extend_from_slice(files);
        let out = bin().args(&a).assert().success().get_output().clone();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let (v, err) = run(&[&cur, &old]);
    assert_eq!(v["policies"][0]["rejected"], 0, "{v}");
    assert_eq!(v["timestamps_backwards"], 0);
    assert_eq!(v["requests"], 40);
    assert_eq!(v["inputs"][0]["name"], old.as_str());
    assert_eq!(v["inputs_overlapping"], json!([]), "{v}");
    assert!(err.is_empty(), "{err}");
    assert!(
        text(&[&cur, &old]).contains("merged   the 2 inputs, by time (none overlaps another)"),
        "{}",
        text(&[&cur, &old])
    );
    // Two servers' logs, interleaved in time: merged, every second's request admitted (one
    // after the other, the second log would go back 40 s and its requests be clamped
    // together: 19 of them rejected).
    let even: Vec<u64> = (0..40).step_by(2).collect();
    let odd: Vec<u64> = (1..40).step_by(2).collect();
    let a = write(&dir, "a.log", &log(&even));
    let b = write(&dir, "b.log", &log(&odd));
    let (v, err) = run(&[&b, &a]);
    assert_eq!(v["policies"][0]["rejected"], 0, "{v}");
    assert_eq!(v["timestamps_backwards"], 0, "{v}");
    assert_eq!(v["requests"], 40);
    assert_eq!(v["inputs"][0]["name"], a.as_str());
    assert_eq!(v["inputs"][0]["lines"], 20);
    assert_eq!(v["inputs"][1]["lines"], 20);
    assert_eq!(v["inputs_overlapping"], json!([b.as_str()]), "{v}");
    assert!(err.is_empty(), "{err}");
    let t = text(&[&a, &b]);
    assert!(
        t.contains(&format!(
            "merged   the 2 inputs, by time; 1 overlapping the inputs before it: {b}"
        )),
        "{t}"
    );
    // Stdin is merged with the files.
    let out = bin()
        .args(["replay", "--policy", "1/s; burst=1", "--format", "json"])
        .args([&cur, "-"])
        .write_stdin(log(&all[..20]))
        .assert()
        .success()
        .get_output()
        .clone();
    let v = json(&out.stdout);
    // Listed by their first times, stdin's first.
    assert_eq!(v["inputs"][0]["name"], "<stdin>");
    assert_eq!(v["inputs_overlapping"], json!([]), "{v}");
    assert_eq!(v["policies"][0]["rejected"], 0, "{v}");
    assert_eq!(v["timestamps_backwards"], 0, "{v}");
    // A stream named twice: the second reading would wait for good.
    replay(&cur, "1/s", &["-", "-"])
        .code(2)
        .stderr(predicate::str::contains("named twice"));
    // A named pipe (as `<(zcat access.log.2.gz)` gives) is not read ahead either: a read
    // ahead used up its first lines, lost to the replay.
    let fifo = dir.path().join("pipe");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let writer = {
        let (fifo, text) = (fifo.clone(), log(&all[..20]));
        std::thread::spawn(move || std::fs::write(fifo, text).unwrap())
    };
    let (v, _) = run(&[&cur, fifo.to_str().unwrap()]);
    writer.join().unwrap();
    assert_eq!(v["requests"], 40, "{v}");
    assert_eq!(v["inputs"][0]["name"], fifo.to_str().unwrap());
    assert_eq!(v["policies"][0]["rejected"], 0, "{v}");
}

/// The same file named twice (`all.log all.log`) was replayed twice, every request counted
/// twice (the report said only "1 overlapping the inputs before it"): it is a usage error
/// naming it, as a stream named twice is, whether the paths are spelt alike, differently
/// (`./a.log`) or one is a link to the other. Two files with the same lines are two inputs.
#[cfg(unix)]
#[test]
fn the_same_file_named_twice_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(&dir, "a.log", &clf_line(0));
    let copy = write(&dir, "b.log", &clf_line(0));
    let link = dir.path().join("link.log");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let link = link.to_str().unwrap();
    let dotted = format!("{}/./a.log", dir.path().display());
    for (second, said) in [
        (
            a.as_str(),
            format!("invalid input {a:?}: named twice: a file is replayed once"),
        ),
        (
            dotted.as_str(),
            format!(
                "invalid input {dotted:?}: named twice (as {a:?} before): a file is replayed once"
            ),
        ),
        (
            link,
            format!(
                "invalid input {link:?}: named twice (as {a:?} before): a file is replayed once"
            ),
        ),
    ] {
        replay(&a, "1/s", &[second])
            .code(2)
            .stderr(predicate::str::contains(said));
    }
    // Relative to the working directory, too.
    bin()
        .current_dir(dir.path())
        .args(["replay", "a.log", "./a.log", "--policy", "1/s"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "invalid input \"./a.log\": named twice (as \"a.log\" before)",
        ));
    // stdin reading the file (`- a.log < a.log`) is the file too.
    let out = std::process::Command::new(assert_cmd::cargo::cargo_bin("sluicegate"))
        .args(["replay", "-", &a, "--policy", "1/s"])
        .stdin(std::fs::File::open(&a).unwrap())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "invalid input {a:?}: named twice (as \"-\" before): a file is replayed once"
        )),
        "{err}"
    );
    let v = replay_json(&a, "1/s", &[&copy]);
    assert_eq!(v["requests"], 2, "{v}");
}

/// An output that cannot be written (`-o /nonexistent/x.json`, `--html` in a missing
/// folder) is found before any input is read, with the message and exit code (1) the write
/// gives: it was found after the whole replay. The check leaves no new file behind when the
/// run then fails, and an existing report is not truncated before its run succeeds.
#[test]
fn outputs_are_checked_before_the_inputs_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let log = write(&dir, "a.log", &clf_line(0));
    let missing = dir.path().join("missing.log");
    let missing = missing.to_str().unwrap();
    let nowhere = dir.path().join("nonexistent");
    for opt in ["-o", "--html"] {
        let bad = nowhere.join("x.out");
        let bad = bad.to_str().unwrap();
        // The missing input is never opened: the output is refused first (it was exit 3,
        // "cannot read", after the inputs were read).
        for input in [log.as_str(), missing] {
            replay(input, "1/s", &[opt, bad])
                .code(1)
                .stderr(predicate::str::contains(format!(
                    "cannot write {bad}: No such file or directory"
                )));
        }
        // Stdin is not read either (with --html it was copied to a temporary file first).
        bin()
            .args(["replay", "-", "--policy", "1/s", opt, bad])
            .write_stdin(clf_line(0))
            .assert()
            .code(1)
            .stderr(predicate::str::contains("cannot write"));
        bin()
            .args(["simulate", "-p", "1/s", "-t", "2/s for 1s", opt, bad])
            .assert()
            .code(1)
            .stderr(predicate::str::contains(format!("cannot write {bad}")));
        // A folder is no file.
        let folder = dir.path().to_str().unwrap();
        replay(missing, "1/s", &[opt, folder])
            .code(1)
            .stderr(predicate::str::contains(format!("cannot write {folder}:")));
        // A new file: none is left when the run fails (the input is missing, exit 3), and the
        // run that succeeds writes it.
        let new = dir.path().join(format!("new{opt}"));
        let new_s = new.to_str().unwrap();
        replay(missing, "1/s", &[opt, new_s]).code(3);
        assert!(!new.exists(), "{opt}: an empty file left behind");
        replay(&log, "1/s", &[opt, new_s]).success();
        let report = std::fs::read_to_string(&new).unwrap();
        assert!(report.contains("1/s"), "{report}");
        // An existing report is kept whole when a run fails, and replaced when one succeeds.
        replay(missing, "1/s", &[opt, new_s]).code(3);
        assert_eq!(std::fs::read_to_string(&new).unwrap(), report, "{opt}");
        replay(&log, "2/s", &[opt, new_s]).success();
        assert!(
            std::fs::read_to_string(&new).unwrap().contains("2/s"),
            "{opt}"
        );
    }
}

/// A UTF-8 byte order mark at the start of an input (a spreadsheet's CSV export) is not part
/// of the first field: plain, gzip or stdin.
#[test]
fn a_byte_order_mark_at_the_start_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let csv = "\u{feff}timestamp,client_ip,path\n2024-05-01T00:00:00Z,192.0.2.1,/a\n";
    let f = write(&dir, "bom.csv", csv);
    let gz = dir.path().join("bom.csv.gz");
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(csv.as_bytes()).unwrap();
    std::fs::write(&gz, e.finish().unwrap()).unwrap();
    let gz = gz.display().to_string();
    let json_log = write(
        &dir,
        "bom.jsonl",
        "\u{feff}{\"time\": 1714521600, \"ip\": \"192.0.2.1\"}\n",
    );
    for input in [&f, &gz, &json_log] {
        let v = replay_json(input, "1/s", &[]);
        assert_eq!(v["requests"], 1, "{input}");
        assert_eq!(v["bad_lines"], 0, "{input}");
    }
    bin()
        .args([
            "replay",
            "-",
            "--policy",
            "1/s",
            "--time-field",
            "timestamp",
        ])
        .write_stdin(csv)
        .assert()
        .success();
}

/// Stdin read with `--html` (copied to a temporary file for the second pass) is named
/// `<stdin>` in every output, as without `--html`, never by its temporary copy.
#[test]
fn stdin_is_named_stdin_with_html_too() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("s.html");
    let html = html.to_str().unwrap();
    let log = "{\"time\": 1714521600, \"ip\": \"192.0.2.1\"}\n{\"time\": 1714521600, \"ip\": \"192.0.2.1\"}\n";
    for format in ["json", "table"] {
        let out = bin()
            .args(["replay", "-", "--policy", "1/s; burst=1", "--html", html])
            .args(["--format", format])
            .write_stdin(log)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        let text = String::from_utf8_lossy(&out);
        assert!(!text.contains("sluicegate-stdin"), "{text}");
        if format == "json" {
            assert_eq!(json(&out)["inputs"][0]["name"], "<stdin>");
        } else {
            assert!(text.contains("input    <stdin> ("), "{text}");
        }
        let page = std::fs::read_to_string(html).unwrap();
        let start = page
            .find("<script id=\"data\" type=\"application/json\">")
            .unwrap();
        let rest = &page[start..];
        let data = &rest[rest.find('>').unwrap() + 1..rest.find("</script>").unwrap()];
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["inputs"][0]["name"], "<stdin>");
        assert!(!page.contains("sluicegate-stdin"));
    }
}

/// The table's words agree with their counts (`1 key`, `1 client`), and the top throttled
/// keys' columns line up under their headings however short the keys are.
#[test]
fn table_counts_are_singular_for_one_and_top_keys_line_up() {
    let dir = tempfile::tempdir().unwrap();
    let log = (0..3)
        .map(|i| format!("{{\"time\": {}, \"ip\": \"1.2.3.4\"}}\n", 1_714_521_600 + i))
        .collect::<String>();
    let f = write(&dir, "one.jsonl", &log);
    let out = replay(&f, "1/h; burst=1", &[])
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("3 requests from 1 key ("), "{text}");
    assert!(text.contains("1 of 1 client throttled"), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let head = lines
        .iter()
        .position(|l| l.trim_start().starts_with("top throttled"))
        .unwrap();
    let (h, row) = (lines[head], lines[head + 1]);
    assert!(row.trim_start().starts_with("1.2.3.4"), "{row}");
    // Each heading ends where its column's figures end.
    for (heading, figure) in [("offered", " 3 "), ("rejected", " 2 "), ("share", "%")] {
        let end = h.find(heading).unwrap() + heading.len();
        let fig_end = row.find(figure).unwrap() + figure.trim_end().len();
        assert_eq!(end, fig_end, "{heading}:\n{h}\n{row}");
    }
}

/// Behind a load balancer (10.0.0.5, every request's logged address): `--trusted-proxies`
/// keys each request by the client its X-Forwarded-For names, through the core's resolver;
/// without it nothing changes. Policy 1/m, burst 2, over 10 s: each key is admitted twice.
#[test]
fn clients_behind_trusted_proxies() {
    let dir = tempfile::tempdir().unwrap();
    // (peer, X-Forwarded-For): a client, the same client with forged left-most hops, a client
    // behind a second (internal) proxy, two addresses of one IPv6 /64, no header, and a
    // direct client that sends a header of its own.
    let reqs = [
        ("10.0.0.5", "192.0.2.1"),
        ("10.0.0.5", "6.6.6.6, 192.0.2.1"),
        ("10.0.0.5", "7.7.7.7, 192.0.2.1"),
        ("10.0.0.5", "192.0.2.2, 10.0.0.9"),
        ("10.0.0.5", "192.0.2.2, 10.0.0.9"),
        ("10.0.0.5", "192.0.2.2, 10.0.0.9"),
        ("10.0.0.5", "2001:db8:1:2::1"),
        ("10.0.0.5", "2001:db8:1:2::2"),
        ("10.0.0.5", "-"),
        ("203.0.113.7", "1.1.1.1"),
    ];
    // nginx's stock `main` format: combined, then "$http_x_forwarded_for".
    let mut log = String::new();
    for (i, (peer, xff)) in reqs.iter().enumerate() {
        log += &format!(
            "{peer} - - [01/May/2024:00:00:0{i} +0000] \"GET /x HTTP/1.1\" 200 5 \"-\" \"curl/8\" \"{xff}\"\n"
        );
    }
    let f = write(&dir, "main.log", &log);
    let run = |f: &str, extra: &[&str]| -> (Value, String) {
        let mut a = vec!["replay", f, "--policy", "1/m; burst=2", "--format", "json"];
        a.extend_from_slice(extra);
        let out = bin().args(&a).assert().success().get_output().clone();
        (json(&out.stdout), String::from_utf8(out.stderr).unwrap())
    };
    let counts = |v: &Value| {
        let p = &v["policies"][0];
        // (Ties in any order.)
        let mut top: Vec<(String, u64)> = p["top_throttled"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["key"].as_str().unwrap().to_string(),
                    t["rejected"].as_u64().unwrap(),
                )
            })
            .collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        (
            v["keys"].as_u64().unwrap(),
            p["admitted"].as_u64().unwrap(),
            p["rejected"].as_u64().unwrap(),
            top,
        )
    };
    let s = |k: &str, n: u64| (k.to_string(), n);
    // As before: every proxied request is the balancer's (2 of 9 admitted), plus the direct one.
    let (v, err) = run(&f, &[]);
    assert_eq!(v["bad_lines"], 0); // the trailing field is nginx's main format, not junk
    assert_eq!(counts(&v), (2, 3, 7, vec![s("10.0.0.5", 7)]));
    // One peer is public: no hint.
    assert!(!err.contains("hint"), "{err}");
    // Only the balancer trusted: the hop it appended. Forged hops change nothing; behind the
    // second proxy, the client is that proxy (10.0.0.9).
    let (v, err) = run(&f, &["--trusted-proxies", "10.0.0.5"]);
    assert_eq!(v["bad_lines"], 0);
    assert_eq!(
        counts(&v),
        (5, 8, 2, vec![s("10.0.0.9", 1), s("192.0.2.1", 1)])
    );
    assert_eq!(v["inputs"][0]["fields"]["forwarded"], "x_forwarded_for");
    assert!(err.is_empty(), "{err}");
    // Every private address a proxy: the client behind both.
    let (v, _) = run(&f, &["--trusted-proxies", "private"]);
    assert_eq!(
        counts(&v),
        (5, 8, 2, vec![s("192.0.2.1", 1), s("192.0.2.2", 1)])
    );
    // The prefixes apply to the resolved client as to a peer.
    let (v, _) = run(
        &f,
        &["--trusted-proxies", "private", "--ipv6-prefix", "128"],
    );
    assert_eq!(counts(&v).0, 6);
    let (v, _) = run(&f, &["--trusted-proxies", "private", "--ipv4-prefix", "16"]);
    // 192.0.2.0/16 holds both clients: 6 requests, 2 admitted.
    assert_eq!(counts(&v), (4, 6, 4, vec![s("192.0.0.0/16", 4)]));
    // A hop count of 2 on this log: short chains are warned of (the core's warning).
    let (_, err) = run(&f, &["--trusted-proxies", "2"]);
    assert!(err.contains("short_chain"), "{err}");

    // JSON lines (nginx's names), every request through the balancer.
    let mut log = String::new();
    for (i, (_, xff)) in reqs.iter().enumerate() {
        let xff = match (i, *xff) {
            (9, _) => "198.51.100.4, 10.0.0.9",
            (_, "-") => "",
            (_, x) => x,
        };
        log += &format!(
            "{{\"msec\":\"{}.000\",\"remote_addr\":\"10.0.0.5\",\"request\":\"GET /x HTTP/1.1\",\"http_x_forwarded_for\":\"{xff}\"}}\n",
            1_714_521_600 + i
        );
    }
    let j = write(&dir, "lb.jsonl", &log);
    // Without --trusted-proxies: one key, and a hint.
    let (v, err) = run(&j, &[]);
    assert_eq!(counts(&v), (1, 2, 8, vec![s("10.0.0.5", 8)]));
    assert!(
        err.contains("hint: every request came from one private address (10.0.0.5)")
            && err.contains("--trusted-proxies 10.0.0.5"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let (v, err) = run(&j, &["--trusted-proxies", "10.0.0.5"]);
    assert_eq!(
        counts(&v),
        (4, 7, 3, vec![s("10.0.0.9", 2), s("192.0.2.1", 1)])
    );
    assert_eq!(
        v["inputs"][0]["fields"]["forwarded"],
        "http_x_forwarded_for"
    );
    assert!(err.is_empty(), "{err}");
    let (v, _) = run(&j, &["--trusted-proxies", "private"]);
    assert_eq!(
        counts(&v),
        (5, 8, 2, vec![s("192.0.2.1", 1), s("192.0.2.2", 1)])
    );
    // Named: the same field.
    let (v, _) = run(
        &j,
        &[
            "--trusted-proxies",
            "private",
            "--forwarded-field",
            "http_x_forwarded_for",
        ],
    );
    assert_eq!(counts(&v).1, 8);

    // `0` hops (or `none`) is no proxy, as the core and every binding read the spec: the
    // logged address, as without the option, and --help says so (it said "a hop count (1 to
    // 64)" while 0 was taken without a word).
    for none in ["0", "none"] {
        let (v, _) = run(&j, &["--trusted-proxies", none]);
        assert_eq!(counts(&v), (1, 2, 8, vec![s("10.0.0.5", 8)]), "{none}");
    }
    bin()
        .args(["replay", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("`none` or `0` say the same"));
    replay(&j, "1/s", &["--trusted-proxies", "65"])
        .code(2)
        .stderr(predicate::str::contains("from 1 to 64"));
    // Errors: a spec that does not parse (exit 2, quoted), a log without the header (exit 4).
    replay(&f, "1/s", &["--trusted-proxies", "10.0.0.1/8"])
        .code(2)
        .stderr(predicate::str::contains("'10.0.0.1/8'"));
    let plain = write(
        &dir,
        "plain.log",
        "10.0.0.5 - - [01/May/2024:00:00:00 +0000] \"GET /x HTTP/1.1\" 200 5 \"-\" \"curl/8\"\n",
    );
    replay(&plain, "1/s", &["--trusted-proxies", "1"])
        .code(4)
        .stderr(predicate::str::contains("--forwarded-field"));
    // A --forwarded-field in none of the first lines: exit 4 on JSON as on combined lines (it
    // keyed every request by the balancer, silently).
    for log in [&j, &f] {
        let args = [
            "--trusted-proxies",
            "private",
            "--forwarded-field",
            "http_x_forwarded_fro",
        ];
        replay(log, "1/s", &args)
            .code(predicate::in_iter([2, 4]))
            .stderr(predicate::str::contains("http_x_forwarded_fro"));
    }
    // Named but not used (no --trusted-proxies): no error.
    let (v, _) = run(&f, &["--forwarded-field", "bogus"]);
    assert_eq!(counts(&v).0, 2);
    // --trusted-proxies finds the client of the ip key: with no ip key it would do nothing.
    replay(
        &f,
        "1/s",
        &["--key", "path", "--trusted-proxies", "private"],
    )
    .code(2)
    .stderr(predicate::str::contains("no ip part"));
    // Keying by the raw header on combined lines points at --trusted-proxies.
    replay(&f, "1/s", &["--key", "header:X-Forwarded-For"])
        .code(4)
        .stderr(predicate::str::contains("--trusted-proxies"));
}

/// From a user trial: field names that were accepted though absent, detection that took an
/// object or a whole-second time, header names compared in lower case only, and compressed
/// inputs reported as bad text.
#[test]
fn json_fields_as_a_user_names_and_logs_them() {
    let dir = tempfile::tempdir().unwrap();
    let api = write(
        &dir,
        "api.jsonl",
        &(0..6)
            .map(|i| {
                format!(
                    "{{\"ts\":{},\"ip\":\"1.1.1.1\",\"path\":\"/v1/x\"}}\n",
                    1714564800 + i
                )
            })
            .collect::<String>(),
    );
    // A --path-field or --cost-field in none of the lines: an error, not a harmless policy.
    replay(&api, "/v1/* => 1/s", &["--path-field", "nope"])
        .code(4)
        .stderr(predicate::str::contains("--path-field"));
    replay(&api, "1/s", &["--cost-field", "weight"])
        .code(4)
        .stderr(predicate::str::contains("--cost-field"));

    // Caddy: `request` is an object (holding `client_ip`, `uri`, `method`), headers keep their
    // case and are logged as arrays of their lines.
    let caddy = write(
        &dir,
        "caddy.jsonl",
        &(0..6)
            .map(|i| {
                format!(
                    "{{\"ts\":{}.5,\"request\":{{\"remote_ip\":\"10.0.0.5\",\"client_ip\":\"10.0.0.5\",\"method\":\"GET\",\"uri\":\"/api\",\"headers\":{{\"X-Api-Key\":[\"k{}\"],\"X-Forwarded-For\":[\"198.51.100.9, 203.0.113.{}\"]}}}},\"status\":200}}\n",
                    1714564800 + i,
                    i % 3,
                    i % 2
                )
            })
            .collect::<String>(),
    );
    // The nested fields are found: one client (the proxy's address), limited on its path.
    let out = replay(&caddy, "x=GET /api => 1/m; burst=1", &["--format", "json"])
        .success()
        .get_output()
        .stdout
        .clone();
    let j = json(&out);
    assert_eq!(policy(&j, "x")["admitted"], 1, "{j}");
    let input = j["inputs"][0]["fields"].to_string();
    for f in ["request.client_ip", "request.uri", "request.method"] {
        assert!(input.contains(f), "{f} in {input}");
    }
    // Behind the proxy, the array's last hop is the client: two clients.
    let out = replay(
        &caddy,
        "1/m; burst=1",
        &["--trusted-proxies", "private", "--format", "json"],
    )
    .success()
    .get_output()
    .stdout
    .clone();
    assert_eq!(policy(&json(&out), "1/m")["admitted"], 2, "two clients");
    // A header's array is its value: the keys are k0, k1 and k2.
    let out = replay(&caddy, "1/m; burst=1", &["--key", "header:X-Api-Key"])
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.contains("\nk0 ") || text.contains("  k0 "),
        "keys shown as their values: {text}"
    );
    assert!(!text.contains("[\"k"), "no array text in the keys: {text}");
    // A header's name in any case (Caddy writes `X-Api-Key`).
    let out = replay(
        &caddy,
        "1/m; burst=1",
        &["--key", "header:x-api-key", "--format", "json"],
    )
    .success()
    .get_output()
    .stdout
    .clone();
    assert_eq!(json(&out)["keys"], 3);

    // Traefik's JSON access log: its client, path and method found by their names.
    let traefik = write(
        &dir,
        "traefik.jsonl",
        &(0..4)
            .map(|i| {
                format!(
                    "{{\"ClientHost\":\"203.0.113.{}\",\"RequestMethod\":\"GET\",\"RequestPath\":\"/api/{i}\",\"StartUTC\":\"2024-05-01T12:00:0{i}.5Z\",\"request_User-Agent\":\"ua{}\"}}\n",
                    i % 2,
                    i % 2
                )
            })
            .collect::<String>(),
    );
    let out = replay(&traefik, "r=GET /api/* => 1/m", &["--format", "json"])
        .success()
        .get_output()
        .stdout
        .clone();
    let j = json(&out);
    assert_eq!(policy(&j, "r")["admitted"], 2, "{j}");
    let out = replay(
        &traefik,
        "1/m",
        &["--key", "header:user-agent", "--format", "json"],
    )
    .success()
    .get_output()
    .stdout
    .clone();
    assert_eq!(json(&out)["keys"], 2);

    // A key a spreadsheet would run as a formula is written to CSV as text.
    let evil = write(
        &dir,
        "evil.jsonl",
        "{\"ts\":1714564800,\"ip\":\"1.1.1.1\",\"ua\":\"=cmd|' /C calc'!A0\"}\n\
         {\"ts\":1714564800,\"ip\":\"1.1.1.1\",\"ua\":\"=cmd|' /C calc'!A0\"}\n",
    );
    let out = replay(
        &evil,
        "1/m; burst=1",
        &[
            "--key", "field:ua", "--format", "csv", "--table", "top-keys",
        ],
    )
    .success()
    .get_output()
    .stdout
    .clone();
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains(",'=cmd|' /C calc'!A0,"), "{text}");

    // nginx's msec beside an ELK shipper's whole-second @timestamp: msec decides.
    let ngx = write(
        &dir,
        "ngx.jsonl",
        &(0..10)
            .map(|i| {
                format!(
                    "{{\"@timestamp\":\"2024-05-01T12:00:00+00:00\",\"remote_addr\":\"1.2.3.4\",\"msec\":\"1714564800.{}00\"}}\n",
                    i
                )
            })
            .collect::<String>(),
    );
    let out = replay(&ngx, "2/s; burst=2", &["--format", "json"])
        .success()
        .get_output()
        .stdout
        .clone();
    assert_eq!(
        policy(&json(&out), "2/s")["admitted"],
        3,
        "two, and one refilled in 0.9 s"
    );

    // Compressions that are not read: exit 3, named.
    for (name, head, what) in [
        ("a.log.bz2", &b"BZh91AY&SY"[..], "bzip2"),
        ("a.log.xz", &[0xfd, b'7', b'z', b'X', b'Z', 0, 0][..], "xz"),
        ("a.log.zst", &[0x28, 0xb5, 0x2f, 0xfd, 0][..], "zstd"),
        ("a.csv", &[0xff, 0xfe, b't', 0][..], "UTF-16"),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, head).unwrap();
        replay(&p.display().to_string(), "1/s", &[])
            .code(3)
            .stderr(predicate::str::contains(what));
    }
}

/// nginx's `$msec` appended to a combined format (`log_format main '... "$http_user_agent"
/// $msec'`) is the lines' time: `[$time_local]` has whole seconds, which would replay a
/// second's requests at one instant.
#[test]
fn combined_lines_ending_with_msec_are_timed_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let line = |ms: u64, tail: &str| {
        format!(
            "192.0.2.1 - - [01/May/2024:00:00:{:02} +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"t\"{tail} {}.{:03}\n",
            ms / 1000,
            1_714_521_600 + ms / 1000,
            ms % 1000
        )
    };
    // 2/s with a burst of 1: a request every half second. At 0.1, 0.4 and 0.7 s: the second
    // comes too soon; in whole seconds all three come at once, two rejected.
    for tail in ["", " \"10.0.0.9\""] {
        let text: String = [100, 400, 700].iter().map(|&ms| line(ms, tail)).collect();
        let log = write(&dir, "msec.log", &text);
        let v = replay_json(&log, "2/s; burst=1", &[]);
        assert_eq!(v["inputs"][0]["fields"]["time"], "msec", "{v}");
        assert_eq!(v["policies"][0]["rejected"], 1, "{v}");
        assert_eq!(v["first"], "2024-05-01T00:00:00.1Z", "{v}");
        // Named, the whole-second time is read.
        let v = replay_json(&log, "2/s; burst=1", &["--time-field", "time_local"]);
        assert_eq!(v["policies"][0]["rejected"], 2, "{v}");
    }
    // A line without it (the format changed) is timed by its `[$time_local]`, not unusable;
    // with epoch numbers read as milliseconds, it is not looked for.
    let mut text: String = [100, 400, 700].iter().map(|&ms| line(ms, "")).collect();
    text += "192.0.2.1 - - [01/May/2024:00:00:05 +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"t\"\n";
    let log = write(&dir, "changed.log", &text);
    let v = replay_json(&log, "2/s; burst=1", &[]);
    assert_eq!(
        (&v["requests"], &v["bad_lines"]),
        (&json!(4), &json!(0)),
        "{v}"
    );
    assert_eq!(v["last"], "2024-05-01T00:00:05Z", "{v}");
    let v = replay_json(&log, "2/s; burst=1", &["--time-unit", "ms"]);
    assert_eq!(v["inputs"][0]["fields"]["time"], "time", "{v}");
    // A line ending with another number (`$request_time`) is timed by its `[$time_local]`.
    let mut text: String = [100, 400, 700].iter().map(|&ms| line(ms, "")).collect();
    text +=
        "192.0.2.1 - - [01/May/2024:00:00:05 +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"t\" 0.004\n";
    let log = write(&dir, "rt-after.log", &text);
    let v = replay_json(&log, "2/s; burst=1", &[]);
    assert_eq!(v["last"], "2024-05-01T00:00:05Z", "{v}");
    assert_eq!(v["timestamps_backwards"], 0, "{v}");
    // A trailing `$request_time` is no time of day.
    let text: String = (0..3)
        .map(|s| {
            format!(
                "192.0.2.1 - - [01/May/2024:00:00:0{s} +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"t\" 0.004\n"
            )
        })
        .collect();
    let log = write(&dir, "rt.log", &text);
    let v = replay_json(&log, "2/s; burst=1", &[]);
    assert_eq!(v["inputs"][0]["fields"]["time"], "time", "{v}");
    assert_eq!(v["requests"], 3, "{v}");
}

/// An ALB's request it could not read (`"- - - "`) has no method: without a key for `--key
/// method` (a file of nothing else says so), never an error about a method field.
#[test]
fn alb_requests_without_a_request_line_have_no_method() {
    let dir = tempfile::tempdir().unwrap();
    let out = bin()
        .args(["sample", "--log-format", "alb"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let sample: Vec<&str> = std::str::from_utf8(&out).unwrap().lines().take(4).collect();
    let unread = |l: &str| {
        let (a, rest) = l.split_once(" \"").unwrap();
        let (_, b) = rest.split_once('"').unwrap();
        format!("{a} \"- - - \"{b}\n")
    };
    let only: String = sample.iter().map(|l| unread(l)).collect();
    let log = write(&dir, "unread.log", &only);
    replay(&log, "10/s", &["--key", "method"])
        .code(4)
        .stderr(predicate::str::contains(
            "no usable request in 4 lines (0 unusable, 4 without a key)",
        ));
    let mixed: String = sample
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if i % 2 == 0 {
                unread(l)
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let log = write(&dir, "mixed.log", &mixed);
    let v = json(
        &replay(&log, "10/s", &["--key", "method", "--format", "json"])
            .success()
            .get_output()
            .stdout,
    );
    assert_eq!(
        (&v["requests"], &v["unkeyed"]),
        (&json!(2), &json!(2)),
        "{v}"
    );
}

/// In a merge, one line stamped an hour ahead (a clock's glitch) or an hour back changes
/// nothing for the other lines: a limit on all the traffic (one key) admits what it admits
/// without them, and the inputs are not held back nor pulled ahead. The overlap of two
/// servers' logs that start in the same second is reported.
#[test]
fn a_merge_takes_a_glitched_line_at_its_neighbours_time() {
    let dir = tempfile::tempdir().unwrap();
    let line = clf_line;
    // One request a second between the two servers (even and odd seconds), from 00:10.
    let start = 600;
    let mut a: Vec<u64> = (0..100).map(|i| start + 2 * i).collect();
    let mut b: Vec<u64> = (0..100).map(|i| start + 2 * i + 1).collect();
    let run = |a: &[u64], b: &[u64]| {
        let fa = write(
            &dir,
            "a.log",
            &a.iter().map(|&s| line(s)).collect::<String>(),
        );
        let fb = write(
            &dir,
            "b.log",
            &b.iter().map(|&s| line(s)).collect::<String>(),
        );
        json(
            &bin()
                .args(["replay", "--policy", "1/s; burst=2", "--key", "all"])
                .args(["--format", "json", &fa, &fb])
                .assert()
                .success()
                .get_output()
                .stdout,
        )
    };
    let v = run(&a, &b);
    assert_eq!(v["policies"][0]["rejected"], 0, "{v}");
    assert_eq!(v["inputs_overlapping"].as_array().unwrap().len(), 1, "{v}");
    // Ahead: taken at its neighbours' time (two requests in a second: the burst holds them).
    b.insert(40, start + 3600);
    // Back (more than a minute): the line alone goes back, judged where it is stamped; the
    // lines before it keep their times.
    a.insert(60, start - 550);
    // The first line of a file stamped ahead: the file is not opened late.
    let mut c = b.clone();
    c[0] = start + 7200;
    for (a, b, glitches) in [(&a, &b, 2), (&a, &c, 3)] {
        let v = run(a, b);
        assert_eq!(v["requests"], 202, "{v}");
        // At most one a glitch: the line stamped back (judged where it is stamped, the
        // bucket spent since), and for a line ahead one of the three requests within the
        // second it is taken in.
        assert!(
            v["policies"][0]["rejected"].as_u64().unwrap() <= glitches,
            "{v}"
        );
        assert!(v["timestamps_backwards"].as_u64().unwrap() <= 3, "{v}");
        assert_eq!(v["last"], "2024-05-01T00:13:19Z", "{v}");
    }
}

/// A named pipe (`<(zcat ...)`) streams once, as stdin does: copied for `--html`'s second
/// pass (it waited for a second writer for good), named as given in the report.
#[test]
fn a_named_pipe_is_copied_for_the_html_reports_second_pass() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..200)
        .map(|i| {
            format!(
                "192.0.2.{} - - [01/May/2024:00:00:{:02} +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"t\"\n",
                i % 3,
                i % 60
            )
        })
        .collect();
    let fifo = dir.path().join("pipe");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::write(fifo, text).unwrap())
    };
    let html = dir.path().join("r.html");
    let out = bin()
        .timeout(std::time::Duration::from_secs(60))
        .args([
            "replay",
            "--policy",
            "1/s; burst=5",
            "--format",
            "json",
            "--html",
        ])
        .arg(&html)
        .arg(&fifo)
        .assert()
        .success()
        .get_output()
        .clone();
    writer.join().unwrap();
    let v = json(&out.stdout);
    assert_eq!(v["requests"], 200, "{v}");
    assert_eq!(v["inputs"][0]["name"], fifo.to_str().unwrap());
    assert!(!v["traces"].as_array().unwrap().is_empty(), "{v}");
    assert!(std::fs::read_to_string(&html).unwrap().contains("192.0.2."));
}

/// A merge looks ahead across its reads: a line stamped an hour ahead that ends what a pipe
/// had written so far (its block) is taken at its neighbours' time all the same.
#[test]
fn a_merge_looks_ahead_across_a_pipes_reads() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let line = clf_line;
    let start = 600;
    let a: String = (0..400).map(|i| line(start + 2 * i)).collect();
    let fa = write(&dir, "a.log", &a);
    // The pipe: 250 lines (more than the first lines read to detect the format) and the
    // glitch, written at once, a pause, then the rest.
    let first: String = (0..250)
        .map(|i| line(start + 2 * i + 1))
        .chain([line(start + 3 * 3600)])
        .collect();
    let rest: String = (250..400).map(|i| line(start + 2 * i + 1)).collect();
    let fifo = dir.path().join("pipe");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let writer = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut w = std::fs::OpenOptions::new().write(true).open(fifo).unwrap();
            w.write_all(first.as_bytes()).unwrap();
            w.flush().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(700));
            w.write_all(rest.as_bytes()).unwrap();
        })
    };
    let v = json(
        &bin()
            .args(["replay", "--policy", "1/s; burst=2", "--key", "all"])
            .args(["--format", "json", &fa])
            .arg(&fifo)
            .assert()
            .success()
            .get_output()
            .stdout,
    );
    writer.join().unwrap();
    assert_eq!(v["requests"], 801, "{v}");
    assert!(v["policies"][0]["rejected"].as_u64().unwrap() <= 1, "{v}");
    assert_eq!(v["last"], "2024-05-01T00:23:19Z", "{v}");
}

/// One input is replayed as a merge of one: a line stamped far ahead of the next ones is
/// taken at their time, so the same lines decide alike in one file and cut into consecutive
/// files where no line within 16 of the cut is out of time order (each input looks ahead
/// within itself). Glitches ahead and back, lines out of order by a little; over 1 MiB, so
/// the reads' and the parses' seams fall between glitches and their neighbours.
#[test]
fn one_input_and_its_lines_cut_into_files_replay_alike() {
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 11u64;
    let mut t = T0;
    let mut lines = Vec::new();
    let mut in_order = Vec::new();
    for i in 0..12_000u64 {
        t += rng(&mut seed) % 40_000_000;
        let stamp = match rng(&mut seed) % 97 {
            0 => t + 3_600_000_000_000,
            1 => t.saturating_sub(900_000_000_000),
            2 | 3 => t.saturating_sub(rng(&mut seed) % 2_000_000_000),
            _ => t,
        };
        in_order.push(stamp == t);
        lines.push(format!(
            "{{\"ts\":{}.{:09},\"ip\":\"198.51.100.{}\",\"path\":\"/p/{}{}\"}}\n",
            stamp / 1_000_000_000,
            stamp % 1_000_000_000,
            rng(&mut seed) % 5,
            i,
            "x".repeat(40)
        ));
    }
    let replay = |files: &[String]| {
        let mut v = json(
            &bin()
                .args([
                    "replay",
                    "-p",
                    "20/s; burst=30",
                    "-p",
                    "both=20/s; burst=30 & global 100/s; burst=50",
                ])
                .args(["--key", "ip", "--format", "json"])
                .args(files)
                .assert()
                .success()
                .get_output()
                .stdout,
        );
        (v["policies"].take(), v["timestamps_backwards"].take())
    };
    let whole = write(&dir, "whole.jsonl", &lines.concat());
    let (policies, backwards) = replay(std::slice::from_ref(&whole));
    assert!(std::fs::metadata(&whole).unwrap().len() > 1 << 20);
    let rejected: u64 = policies
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["rejected"].as_u64().unwrap())
        .sum();
    assert!(rejected > 0, "{policies}");
    // Cuts at the first places from these where the 16 lines each side are in time order.
    let clean = |from: usize| {
        (from.max(16)..lines.len() - 16)
            .find(|&p| in_order[p - 16..p + 16].iter().all(|&o| o))
            .unwrap()
    };
    let glitch = lines
        .iter()
        .position(|l| l.contains("\"ts\":17145252"))
        .unwrap();
    for cuts in [
        vec![clean(glitch)],
        vec![clean(256), clean(5000), clean(9001)],
        vec![clean(16), clean(clean(16) + 1), clean(11_000)],
    ] {
        let mut files = Vec::new();
        let mut from = 0;
        for (k, &to) in cuts.iter().chain([&lines.len()]).enumerate() {
            files.push(write(
                &dir,
                &format!("part{k}.jsonl"),
                &lines[from..to].concat(),
            ));
            from = to;
        }
        assert_eq!(
            replay(&files),
            (policies.clone(), backwards.clone()),
            "{cuts:?}"
        );
    }
}

/// With --strict, the requests taken before an input opens are decided before that input's
/// first lines can end the replay: the error is the earliest in the merge.
#[test]
fn strict_errors_come_in_the_merges_order_when_an_input_opens() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = 1_714_564_900u64;
    let mut a = String::from("time,ip\n");
    a += &format!("{t0}.0,10.0.0.1\n{t0}.0,10.0.0.2\n");
    for s in 1..12 {
        a += &format!("{}.0,10.0.0.1\n", t0 + s);
    }
    let mut b = String::from("time,ip\nnotatime,10.0.0.1\n");
    for s in 5..10 {
        b += &format!("{}.5,10.0.0.1\n", t0 + s);
    }
    let (a, b) = (write(&dir, "sa.csv", &a), write(&dir, "sb.csv", &b));
    for files in [vec![&a], vec![&a, &b]] {
        bin()
            .args(["replay", "--strict", "--max-keys", "1", "-p", "1/s"])
            .args(files)
            .assert()
            .code(4)
            .stderr(
                predicate::str::contains("sa.csv:3:").and(predicate::str::contains("--max-keys")),
            );
    }
}
