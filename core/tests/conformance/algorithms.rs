//! `conformance/algorithms.json` (GCRA, the window counters, the sliding log, the leaky queue,
//! interval refill, composite limits) through the Rust API. The expectations come from the
//! independent Python reference (`conformance/generate.py`, `conformance/reference.py`),
//! never from the engine.
//!
//! Same shape as `conformance/vectors.json` (`{"format": 1, "cases": [...]}`, refunds carry no
//! `expect`, errors expect `{"error": "insufficient_capacity"}`), plus `"composite_cases"`:
//! cases whose `"quotas"` is a list of rate strings consumed all-or-nothing (no `"quota"`).

use serde_json::{json, Value};
use sluicegate::composite::Composite;
use sluicegate::{Decision, Error, KeyedLimiter, Limiter, ManualClock, Quota};
use std::path::PathBuf;

fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance/algorithms.json")
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

#[test]
fn algorithm_vectors_match_the_limiter() {
    let text = std::fs::read_to_string(path()).expect("conformance/algorithms.json");
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        doc["format"], 1,
        "a vector format this runner does not know"
    );
    let mut per_algorithm = std::collections::BTreeMap::<String, usize>::new();
    for case in doc["cases"].as_array().unwrap() {
        let rate = case["quota"].as_str().unwrap();
        let q: Quota = rate.parse().unwrap();
        *per_algorithm.entry(q.algorithm().to_string()).or_default() += 1;
        let clock = ManualClock::new(case["start_ns"].as_u64().unwrap());
        if case["keyed"] == true {
            let k = KeyedLimiter::<String, _>::with_clock(q, clock.clone()).unwrap();
            for s in case["steps"].as_array().unwrap() {
                clock.set(s["t_ns"].as_u64().unwrap());
                let (key, c) = (s["key"].as_str().unwrap(), s["cost"].as_u64().unwrap());
                if s["op"] == "refund" {
                    k.refund(key, c).unwrap();
                } else {
                    assert_eq!(
                        got(k.try_acquire(key, c)),
                        s["expect"],
                        "{}: {s}",
                        case["name"]
                    );
                }
            }
            continue;
        }
        let l = Limiter::with_clock(q, clock.clone()).unwrap();
        for s in case["steps"].as_array().unwrap() {
            clock.set(s["t_ns"].as_u64().unwrap());
            let c = s["cost"].as_u64().unwrap();
            if s["op"] == "refund" {
                l.refund(c).unwrap();
            } else {
                assert_eq!(got(l.try_acquire(c)), s["expect"], "{}: {s}", case["name"]);
            }
        }
    }
    assert!(
        per_algorithm.values().all(|&n| n >= 10),
        "{per_algorithm:?}"
    );
    assert_eq!(per_algorithm.len(), 5);
    for case in doc["composite_cases"].as_array().unwrap() {
        let clock = ManualClock::new(case["start_ns"].as_u64().unwrap());
        let parts = case["quotas"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                Limiter::with_clock(r.as_str().unwrap().parse().unwrap(), clock.clone()).unwrap()
            })
            .collect();
        let all = Composite::new(parts);
        for s in case["steps"].as_array().unwrap() {
            let t = s["t_ns"].as_u64().unwrap();
            let c = s["cost"].as_u64().unwrap();
            if s["op"] == "refund" {
                all.refund_at(t, c).unwrap();
            } else {
                assert_eq!(
                    got(all.try_acquire_at(t, c)),
                    s["expect"],
                    "{}: {s}",
                    case["name"]
                );
            }
        }
    }
    assert!(doc["composite_cases"].as_array().unwrap().len() >= 10);
}
