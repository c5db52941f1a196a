//! Both vector files through the shared-memory store, on a fresh region per case (a
//! `Limiter` for single-bucket cases, a `KeyedLimiter` for keyed ones, a `Composite` of
//! region limiters for composite ones), on a manual clock: the decisions must be the
//! in-process ones, bit for bit.
//!
//! A region keeps a 95-bit state per key, exact for a century of readings from its creation: it
//! refuses only the sliding log (whose state is a log of timestamps) and quotas whose exact
//! state would outgrow 95 bits within a century (one extreme case in the vectors). Refused
//! cases are counted and each must be one of those.
#![cfg(unix)]

use serde_json::{json, Value};
use sluicegate::composite::Composite;
use sluicegate::{
    Decision, Error, KeyedLimiter, Limiter, ManualClock, Quota, StoreErrorKind, StoreSpec,
};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

fn load(file: &str) -> Value {
    let path = format!("{}/../conformance/{file}", env!("CARGO_MANIFEST_DIR"));
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(
        doc["format"], 1,
        "a vector format this runner does not know"
    );
    doc
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

/// A fresh region path, removed when dropped.
struct Region(PathBuf);

impl Region {
    fn new() -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        Self(std::env::temp_dir().join(format!(
            "sluicegate-conformance-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )))
    }

    fn spec(&self) -> StoreSpec {
        StoreSpec::shm(self.0.to_str().unwrap())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
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

fn unsupported(e: &Error) -> bool {
    matches!(
        e,
        Error::Store {
            kind: StoreErrorKind::Unsupported,
            ..
        }
    )
}

/// What happened to a case.
enum Ran {
    Steps(usize),
    /// A region refused the quota.
    Refused(String),
    /// A reading beyond the span a region guarantees (a century from its creation), where the
    /// in-process limiter's 128-bit word goes on: the region answered `ClockOutOfRange`.
    Beyond,
}

/// A century: the span of readings a region guarantees from its creation.
const SPAN: u64 = sluicegate::CENTURY_NS;

/// Checks a step's answer; `Some(Ran::Beyond)` when the region stopped at its span.
fn check(
    name: &str,
    i: usize,
    start: u64,
    t: u64,
    r: Result<Decision, Error>,
    want: &Value,
) -> Option<Ran> {
    if let Err(Error::ClockOutOfRange { .. }) = &r {
        if want.get("error").is_none() && t.saturating_sub(start) > SPAN {
            return Some(Ran::Beyond);
        }
    }
    assert_eq!(got(r), *want, "{name} step {i}");
    None
}

fn single(case: &Value) -> Ran {
    let name = case["name"].as_str().unwrap();
    let q: Quota = case["quota"].as_str().unwrap().parse().unwrap();
    let clock = ManualClock::new(u(&case["start_ns"]));
    let region = Region::new();
    let l = match Limiter::builder(q)
        .store(region.spec())
        .clock(clock.clone())
        .build()
    {
        Ok(l) => l,
        Err(e) if unsupported(&e) => return Ran::Refused(q.to_string()),
        Err(e) => panic!("{name}: {e}"),
    };
    let steps = case["steps"].as_array().unwrap();
    let start = u(&case["start_ns"]);
    for (i, s) in steps.iter().enumerate() {
        let t = u(&s["t_ns"]);
        clock.set(t);
        let c = u(&s["cost"]);
        if s["op"] == "refund" {
            if l.refund(c).is_err() && t - start.min(t) > SPAN {
                return Ran::Beyond;
            }
        } else if let Some(r) = check(name, i, start, t, l.try_acquire(c), &s["expect"]) {
            return r;
        }
    }
    Ran::Steps(steps.len())
}

fn keyed(case: &Value) -> Ran {
    let name = case["name"].as_str().unwrap();
    let q: Quota = case["quota"].as_str().unwrap().parse().unwrap();
    let clock = ManualClock::new(u(&case["start_ns"]));
    let region = Region::new();
    let l = match KeyedLimiter::<Box<[u8]>, _>::builder(q)
        .store(region.spec())
        .max_keys(64)
        .clock(clock.clone())
        .build()
    {
        Ok(l) => l,
        Err(e) if unsupported(&e) => return Ran::Refused(q.to_string()),
        Err(e) => panic!("{name}: {e}"),
    };
    let steps = case["steps"].as_array().unwrap();
    let start = u(&case["start_ns"]);
    for (i, s) in steps.iter().enumerate() {
        let t = u(&s["t_ns"]);
        clock.set(t);
        let (k, c) = (s["key"].as_str().unwrap().as_bytes(), u(&s["cost"]));
        if s["op"] == "refund" {
            if l.refund(k, c).is_err() && t - start.min(t) > SPAN {
                return Ran::Beyond;
            }
        } else if let Some(r) = check(name, i, start, t, l.try_acquire(k, c), &s["expect"]) {
            return r;
        }
    }
    Ran::Steps(steps.len())
}

fn composite(case: &Value) -> Ran {
    let name = case["name"].as_str().unwrap();
    let clock = ManualClock::new(u(&case["start_ns"]));
    let mut regions = Vec::new();
    let mut parts = Vec::new();
    for rate in case["quotas"].as_array().unwrap() {
        let q: Quota = rate.as_str().unwrap().parse().unwrap();
        let region = Region::new();
        match Limiter::builder(q)
            .store(region.spec())
            .clock(clock.clone())
            .build()
        {
            Ok(l) => parts.push(l),
            Err(e) if unsupported(&e) => return Ran::Refused(q.to_string()),
            Err(e) => panic!("{name}: {e}"),
        }
        regions.push(region);
    }
    let all = Composite::new(parts);
    let steps = case["steps"].as_array().unwrap();
    let start = u(&case["start_ns"]);
    for (i, s) in steps.iter().enumerate() {
        let (t, c) = (u(&s["t_ns"]), u(&s["cost"]));
        if s["op"] == "refund" {
            if all.refund_at(t, c).is_err() && t - start.min(t) > SPAN {
                return Ran::Beyond;
            }
        } else if let Some(r) = check(name, i, start, t, all.try_acquire_at(t, c), &s["expect"]) {
            return r;
        }
    }
    Ran::Steps(steps.len())
}

#[test]
fn every_vector_through_shared_memory_matches_in_process() {
    let (mut cases, mut steps, mut beyond) = (0usize, 0usize, 0usize);
    let mut refused: Vec<String> = Vec::new();
    let mut tally = |r: Ran| match r {
        Ran::Steps(n) => {
            cases += 1;
            steps += n;
        }
        Ran::Refused(q) => refused.push(q),
        Ran::Beyond => beyond += 1,
    };
    for file in ["vectors.json", "algorithms.json"] {
        let doc = load(file);
        for case in doc["cases"].as_array().unwrap() {
            if case.get("quota_error").is_some() {
                continue;
            }
            tally(if case["keyed"] == true {
                keyed(case)
            } else {
                single(case)
            });
        }
        for case in doc["composite_cases"].as_array().into_iter().flatten() {
            tally(composite(case));
        }
    }
    let total = cases + refused.len() + beyond;
    refused.sort();
    refused.dedup();
    eprintln!(
        "{cases} of {total} cases ({steps} steps) through shared memory, identical; {beyond} \
         stopped at readings beyond a region's century; quotas a region refuses: \
         {refused:?}"
    );
    // The sliding log keeps timestamps, not a counter; a sliding window counting to 2^48 - 1
    // needs two 48-bit counts, which leave a 95-bit state no room for its window's index.
    // Anything else a region refuses is a regression.
    let expected = |q: &String| {
        q.contains("sliding_log") || q == "281474976710655/s; algorithm=sliding_window"
    };
    assert!(refused.iter().all(expected), "a region refused {refused:?}");
    assert!(
        cases * 100 >= total * 85,
        "only {cases} of {total} cases ran"
    );
}
