//! The shared conformance vectors through `KeyedLimiter`: every keyed case of
//! conformance/vectors.json, and every single-bucket case of both vector files played on one
//! key of a keyed limiter (each word algorithm through the keyed store's own CAS loops, the
//! sliding log through the keyed store of logs). Each case is played on a `DenseLimiter` too
//! (keys numbered in order of first appearance), which must agree with both.
//!
//! A keyed bucket is created at its key's first request (SEMANTICS, "Keyed limiters"), a
//! single bucket at `start_ns`; the two agree when the first step is at `start_ns`, or the
//! bucket starts full and no step reads the clock before the first one. Other single cases
//! are skipped here (they run in tests/conformance.rs).

use serde_json::Value;
use sluicegate::{Decision, DenseLimiter, Error, KeyedLimiter, ManualClock, Quota};
use std::collections::HashMap;

fn load(file: &str) -> Value {
    let path = format!("{}/../conformance/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap()
}

/// Runs one case; returns the number of steps played, or `None` when it does not apply.
fn play(case: &Value) -> Option<usize> {
    let name = case["name"].as_str().unwrap();
    let quota: Quota = case.get("quota")?.as_str()?.parse().ok()?;
    let keyed = case["keyed"].as_bool().unwrap_or(false);
    let steps = case["steps"].as_array()?;
    let start = u(&case["start_ns"]);
    let first = u(&steps[0]["t_ns"]);
    let reads_before_first = steps.iter().any(|s| u(&s["t_ns"]) < first);
    if !keyed && first != start && (quota.initial() != quota.burst() || reads_before_first) {
        return None;
    }
    let clock = ManualClock::new(start);
    let limiter: KeyedLimiter<Vec<u8>, ManualClock> =
        KeyedLimiter::with_clock(quota, clock.clone()).expect(name);
    let mut dense = DenseLimiter::new(quota, start, usize::MAX).expect(name);
    let mut index = HashMap::new();
    for (i, step) in steps.iter().enumerate() {
        let key = step["key"].as_str().unwrap_or("single").as_bytes();
        let n = index.len();
        let at = *index.entry(key).or_insert(n);
        let now = u(&step["t_ns"]);
        let cost = u(&step["cost"]);
        clock.set(now);
        match step["op"].as_str().unwrap() {
            "refund" => {
                limiter.refund(key, cost).unwrap();
                dense.refund_at(at, now, cost).unwrap();
            }
            "acquire" => {
                let want = &step["expect"];
                let check = |r: Result<Decision, Error>, store: &str| match r {
                    Ok(d) => assert_eq!(
                        serde_json::json!({
                            "allowed": d.allowed(), "limit": d.limit(),
                            "remaining": d.remaining(),
                            "retry_after_ns": d.retry_after_nanos(),
                            "reset_after_ns": d.reset_after_nanos(),
                        }),
                        *want,
                        "{name} step {i} ({store})"
                    ),
                    Err(e) => assert_eq!(e.code(), want["error"], "{name} step {i}: {e} ({store})"),
                };
                check(limiter.try_acquire(key, cost), "keyed");
                check(dense.try_acquire_at(at, now, cost), "dense");
            }
            op => panic!("{name}: unknown op {op}"),
        }
    }
    Some(steps.len())
}

#[test]
fn token_bucket_vectors_through_the_keyed_store() {
    let doc = load("vectors.json");
    let (mut keyed, mut single) = (0, 0);
    for case in doc["cases"].as_array().unwrap() {
        if play(case).is_some() {
            if case["keyed"].as_bool().unwrap_or(false) {
                keyed += 1;
            } else {
                single += 1;
            }
        }
    }
    assert!(keyed >= 6, "only {keyed} keyed cases");
    assert!(single >= 50, "only {single} single cases played on one key");
}

#[test]
fn algorithm_vectors_through_the_keyed_store() {
    let doc = load("algorithms.json");
    let mut played = std::collections::BTreeMap::<String, usize>::new();
    for case in doc["cases"].as_array().unwrap() {
        if play(case).is_some() {
            let q: Quota = case["quota"].as_str().unwrap().parse().unwrap();
            *played.entry(q.algorithm().to_string()).or_default() += 1;
        }
    }
    for algo in [
        "gcra",
        "fixed_window",
        "sliding_window",
        "sliding_log",
        "leaky_queue",
    ] {
        assert!(
            played.get(algo).copied().unwrap_or(0) >= 8,
            "{algo}: {played:?}"
        );
    }
}
