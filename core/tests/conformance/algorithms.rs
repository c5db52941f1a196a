//! Conformance vectors for the algorithms besides the token bucket: `conformance/algorithms.json`.
//!
//! The expectations are computed by the plain reference models (tests/support/model.rs), never
//! by the limiter; `algorithm_vectors_match_the_limiter` then runs every case through the
//! limiter. Regenerate with
//! `cargo test -p sluicegate --test conformance_algos -- --ignored generate_algorithm_vectors`.
//!
//! Same shape as `conformance/vectors.json` (`{"format": 1, "cases": [...]}`, refunds carry no
//! `expect`, errors expect `{"error": "insufficient_capacity"}`), plus `"composite_cases"`:
//! cases whose `"quotas"` is a list of rate strings consumed all-or-nothing (no `"quota"`).

use sluicegate_model as model;

use model::{AnyModel, Composite as CompositeModel, Kind, ModelError, Out, Params};
use serde_json::{json, Value};
use sluicegate::composite::Composite;
use sluicegate::{Algorithm, Decision, Error, KeyedLimiter, Limiter, ManualClock, Quota};
use std::path::PathBuf;

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../conformance/algorithms.json")
}

fn params(rate: &str) -> Params {
    let q: Quota = rate.parse().unwrap();
    let kind = match q.algorithm() {
        Algorithm::TokenBucket if q.refill() == sluicegate::Refill::Interval => {
            Kind::TokenBucketInterval
        }
        Algorithm::TokenBucket => Kind::TokenBucket,
        Algorithm::Gcra => Kind::Gcra,
        Algorithm::FixedWindow => Kind::FixedWindow,
        Algorithm::SlidingWindow => Kind::SlidingWindow,
        Algorithm::SlidingLog => Kind::SlidingLog,
        Algorithm::LeakyQueue => Kind::LeakyQueue,
        other => panic!("no model for {other}"),
    };
    Params {
        kind,
        count: q.count(),
        period_ns: q.period_ns(),
        burst: q.burst(),
        initial: q.initial(),
        max_delay_ns: q.max_delay_ns(),
    }
}

fn expect(r: Result<Out, ModelError>) -> Value {
    match r {
        Ok(o) => json!({
            "allowed": o.allowed, "limit": o.limit, "remaining": o.remaining,
            "retry_after_ns": o.retry_after_ns, "reset_after_ns": o.reset_after_ns,
        }),
        Err(ModelError::InsufficientCapacity) => json!({"error": "insufficient_capacity"}),
    }
}

/// (t_ns, op, cost) with op 'a' (acquire) or 'r' (refund).
type Steps = Vec<(u64, char, u64)>;

fn steps_json(steps: &Steps, mut apply: impl FnMut(u64, char, u64) -> Option<Value>) -> Value {
    Value::Array(
        steps
            .iter()
            .map(|&(t, op, c)| {
                let mut s = json!({"t_ns": t, "op": if op == 'a' { "acquire" } else { "refund" }, "cost": c});
                if let Some(e) = apply(t, op, c) {
                    s["expect"] = e;
                }
                s
            })
            .collect(),
    )
}

fn case(name: &str, desc: &str, rate: &str, start: u64, steps: Steps) -> Value {
    let mut m = AnyModel::new(params(rate), start);
    let steps = steps_json(&steps, |t, op, c| {
        if op == 'a' {
            Some(expect(m.acquire(t, c)))
        } else {
            m.refund(t, c);
            None
        }
    });
    json!({"name": name, "description": desc, "quota": rate, "start_ns": start,
           "keyed": false, "steps": steps})
}

fn composite_case(name: &str, desc: &str, rates: &[&str], start: u64, steps: Steps) -> Value {
    let mut m = CompositeModel {
        parts: rates
            .iter()
            .map(|r| AnyModel::new(params(r), start))
            .collect(),
    };
    let steps = steps_json(&steps, |t, op, c| {
        if op == 'a' {
            Some(expect(m.acquire(t, c)))
        } else {
            m.refund(t, c);
            None
        }
    });
    json!({"name": name, "description": desc, "quotas": rates, "start_ns": start,
           "keyed": false, "steps": steps})
}

/// (t_ns, op, key, cost): a keyed step.
type KeyedSteps = Vec<(u64, char, &'static str, u64)>;

/// A keyed case: one model per key, created at the key's first admitted-or-rejected request
/// (a request whose cost exceeds the capacity is an error and creates nothing; a refund of an
/// absent key does nothing), as docs/SEMANTICS.md "Keyed limiters" says.
fn keyed_case(name: &str, desc: &str, rate: &str, start: u64, steps: KeyedSteps) -> Value {
    let mut models = std::collections::HashMap::<&str, AnyModel>::new();
    let steps = steps
        .iter()
        .map(|&(t, op, key, c)| {
            let mut s = json!({"t_ns": t, "op": if op == 'a' { "acquire" } else { "refund" },
                               "key": key, "cost": c});
            if op == 'a' {
                let r = match models.get_mut(key) {
                    Some(m) => m.acquire(t, c),
                    None => {
                        let mut m = AnyModel::new(params(rate), t);
                        let r = m.acquire(t, c);
                        if r.is_ok() {
                            models.insert(key, m);
                        }
                        r
                    }
                };
                s["expect"] = expect(r);
            } else if let Some(m) = models.get_mut(key) {
                m.refund(t, c);
            }
            s
        })
        .collect();
    json!({"name": name, "description": desc, "quota": rate, "start_ns": start,
           "keyed": true, "steps": Value::Array(steps)})
}

/// A keyed walk: times only move forward (a keyed store may drop a full bucket, and a key
/// re-created later starts no earlier than the drop), keys drawn from `keys`, costs
/// 0..=max+1, one step in eight a refund.
fn keyed_walk(seed: u64, keys: &[&'static str], span: u64, max: u64, n: usize) -> KeyedSteps {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut t = 0;
    (0..n)
        .map(|_| {
            if next() % 3 != 0 {
                t += next() % span;
            }
            let key = keys[(next() % keys.len() as u64) as usize];
            if next() % 8 == 0 {
                (t, 'r', key, 1 + next() % max)
            } else {
                (t, 'a', key, next() % (max + 2))
            }
        })
        .collect()
}

/// A deterministic pseudo-random walk (xorshift): times move forward by 0..span (sometimes
/// back, never before start), costs 0..=max+1, one step in eight a refund.
fn walk(seed: u64, start: u64, span: u64, max: u64, n: usize) -> Steps {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut t = start;
    (0..n)
        .map(|_| {
            let r = next();
            t = match r % 6 {
                0 => t,
                1 => t.saturating_sub(next() % span).max(start),
                _ => t + next() % span,
            };
            if next() % 8 == 0 {
                (t, 'r', 1 + next() % max)
            } else {
                (t, 'a', next() % (max + 2))
            }
        })
        .collect()
}

fn at(t: u64, n: usize, c: u64) -> Steps {
    vec![(t, 'a', c); n]
}

fn cat(parts: Vec<Steps>) -> Steps {
    parts.into_iter().flatten().collect()
}

#[allow(clippy::vec_init_then_push)] // one push per case reads as a list
fn all_cases() -> (Vec<Value>, Vec<Value>) {
    let mut v = Vec::new();
    // ---- GCRA
    v.push(case(
        "gcra_worked_burst_then_idle",
        "GCRA, capacity 5 at 1/s: 7 instant requests give 5 allowed; after 2 s idle 2 more.",
        "1/s; burst=5; algorithm=gcra",
        0,
        cat(vec![at(0, 7, 1), at(2 * S, 3, 1)]),
    ));
    v.push(case(
        "gcra_fractional_accrual_2ps",
        "GCRA at 2/s from empty: 0.5 token after 250 ms is not enough; 1 at 500 ms is.",
        "2/s; burst=1; initial=0; algorithm=gcra",
        0,
        vec![(250 * MS, 'a', 1), (500 * MS, 'a', 1), (500 * MS, 'a', 1)],
    ));
    v.push(case(
        "gcra_nondivisible_7_per_ms",
        "GCRA at 7/ms: emission interval 142857.14 ns, waits rounded up to the ns.",
        "7/ms; burst=2; algorithm=gcra",
        0,
        vec![
            (0, 'a', 2),
            (1, 'a', 1),
            (142_858, 'a', 1),
            (200_000, 'a', 2),
        ],
    ));
    v.push(case(
        "gcra_backwards_clock",
        "GCRA: a reading earlier than the state proves is clamped, never a refund.",
        "1/s; burst=2; algorithm=gcra",
        10 * S,
        vec![
            (10 * S, 'a', 2),
            (10 * S, 'a', 1),
            (10 * S + S / 2, 'a', 1),
            (11 * S, 'a', 1),
        ],
    ));
    v.push(case(
        "gcra_refund_capped",
        "GCRA: refunds give tokens back, capped at the burst.",
        "1/s; burst=3; algorithm=gcra",
        0,
        vec![
            (0, 'a', 2),
            (0, 'a', 2),
            (0, 'r', 3),
            (0, 'a', 0),
            (0, 'a', 3),
        ],
    ));
    v.push(case(
        "gcra_cost_above_capacity",
        "GCRA: a cost above the burst is an error, not a rejection.",
        "10/s; burst=5; algorithm=gcra",
        0,
        vec![(0, 'a', 6), (0, 'a', 5), (0, 'a', 1)],
    ));
    for i in 0..5 {
        v.push(case(
            &format!("gcra_walk_{i}"),
            "GCRA: a pseudo-random walk of weighted requests and refunds.",
            [
                "3/s; burst=7; algorithm=gcra",
                "100/m; burst=10; algorithm=gcra",
                "5/2s; burst=3; initial=1; algorithm=gcra",
                "7/ms; burst=20; algorithm=gcra",
                "1/h; burst=4; algorithm=gcra",
            ][i],
            0,
            walk(
                i as u64 + 1,
                0,
                [S, 3 * S, S, 2 * MS, 900 * S][i],
                [7, 10, 3, 20, 4][i],
                40,
            ),
        ));
    }
    // ---- fixed window
    v.push(case("fixed_boundary_burst", "Fixed window 10/s: 10 at 999 ms and 10 more at 1 s pass (2x the limit across the boundary).",
        "10/s; algorithm=fixed_window", 0, cat(vec![at(999 * MS, 11, 1), at(S, 11, 1)])));
    v.push(case("fixed_epoch_aligned", "Fixed window 3/s created at 2.5 s: windows stay on the clock's epoch, the first ends at 3 s.",
        "3/s; algorithm=fixed_window", 2500 * MS, cat(vec![at(2500 * MS, 4, 1), at(3 * S, 4, 1)])));
    v.push(case(
        "fixed_weighted",
        "Fixed window 10/m with weighted costs: retry_after is the time to the next window.",
        "10/m; algorithm=fixed_window",
        0,
        vec![
            (5 * S, 'a', 6),
            (10 * S, 'a', 5),
            (10 * S, 'a', 4),
            (59 * S, 'a', 1),
            (60 * S, 'a', 10),
        ],
    ));
    v.push(case(
        "fixed_refund",
        "Fixed window: a refund returns cost to the current window, never below zero.",
        "5/s; algorithm=fixed_window",
        0,
        vec![
            (0, 'a', 5),
            (0, 'r', 2),
            (0, 'a', 3),
            (MS, 'r', 9),
            (MS, 'a', 0),
            (S, 'r', 1),
            (S, 'a', 5),
        ],
    ));
    v.push(case(
        "fixed_backwards_clock",
        "Fixed window: a reading in an earlier window is seen at the start of the state's window.",
        "2/s; algorithm=fixed_window",
        0,
        vec![
            (5 * S + 10, 'a', 2),
            (4 * S, 'a', 1),
            (4 * S, 'a', 0),
            (6 * S, 'a', 2),
        ],
    ));
    v.push(case(
        "fixed_cost_above_limit",
        "Fixed window: a cost above the limit is an error.",
        "4/s; algorithm=fixed_window",
        0,
        vec![(0, 'a', 5), (0, 'a', 4)],
    ));
    for i in 0..5 {
        v.push(case(
            &format!("fixed_walk_{i}"),
            "Fixed window: a pseudo-random walk of weighted requests and refunds.",
            [
                "3/s; algorithm=fixed_window",
                "100/m; algorithm=fixed_window",
                "5/2s; algorithm=fixed_window",
                "7/ms; algorithm=fixed_window",
                "1/h; algorithm=fixed_window",
            ][i],
            0,
            walk(
                i as u64 + 11,
                0,
                [S, 30 * S, S, MS, 900 * S][i],
                [3, 100, 5, 7, 1][i],
                40,
            ),
        ));
    }
    // ---- sliding window counter
    v.push(case("sliding_window_75_percent_at_25_percent", "Sliding window 50/m: 42 in the previous minute, 18 in this one; 18 arrive 15 s in, when the previous weighs 75%: 49.5, so 1 more is rejected until 15.714 s (18 at 1 s in would be rejected).",
        "50/m; algorithm=sliding_window", 0, vec![(10 * S, 'a', 42), (61 * S, 'a', 18), (75 * S, 'a', 18), (75 * S, 'a', 0), (75 * S, 'a', 1), (75 * S + 714_285_714, 'a', 1), (75 * S + 714_285_715, 'a', 1)]));
    v.push(case(
        "sliding_window_exact_thirds",
        "Sliding window 3/3s: two thirds into the next window, a third of 3 is exactly 1.",
        "3/3s; algorithm=sliding_window",
        0,
        vec![
            (0, 'a', 3),
            (5 * S, 'a', 0),
            (5 * S, 'a', 2),
            (5 * S, 'a', 1),
        ],
    ));
    v.push(case("sliding_window_retry_next_window", "Sliding window: when the current window alone is too full, the wait reaches into the next window.",
        "10/s; algorithm=sliding_window", 0, vec![(100 * MS, 'a', 9), (200 * MS, 'a', 2), (1100 * MS, 'a', 5), (1600 * MS, 'a', 5)]));
    v.push(case(
        "sliding_window_skips_windows",
        "Sliding window: after two idle windows nothing weighs.",
        "4/s; algorithm=sliding_window",
        0,
        vec![(0, 'a', 4), (2500 * MS, 'a', 4), (2500 * MS, 'a', 1)],
    ));
    v.push(case(
        "sliding_window_refund",
        "Sliding window: a refund returns cost to the current window's count.",
        "5/s; algorithm=sliding_window",
        0,
        vec![
            (0, 'a', 5),
            (S / 2, 'r', 2),
            (S / 2, 'a', 2),
            (S + S / 2, 'r', 1),
            (S + S / 2, 'a', 3),
        ],
    ));
    v.push(case("sliding_window_backwards_clock", "Sliding window: a reading in an earlier window is seen at the start of the state's window.",
        "3/s; algorithm=sliding_window", 0, vec![(2 * S + 5, 'a', 3), (S, 'a', 1), (3 * S + S / 2, 'a', 2), (3 * S, 'a', 0)]));
    v.push(case(
        "sliding_window_cost_above_limit",
        "Sliding window: a cost above the limit is an error.",
        "3/s; algorithm=sliding_window",
        0,
        vec![(0, 'a', 4), (0, 'a', 3)],
    ));
    for i in 0..5 {
        v.push(case(
            &format!("sliding_window_walk_{i}"),
            "Sliding window: a pseudo-random walk of weighted requests and refunds.",
            [
                "3/s; algorithm=sliding_window",
                "100/m; algorithm=sliding_window",
                "5/2s; algorithm=sliding_window",
                "7/ms; algorithm=sliding_window",
                "2/h; algorithm=sliding_window",
            ][i],
            0,
            walk(
                i as u64 + 21,
                0,
                [S / 2, 20 * S, S, MS / 2, 1200 * S][i],
                [3, 100, 5, 7, 2][i],
                40,
            ),
        ));
    }
    // ---- sliding log
    v.push(case("sliding_log_same_instant", "Sliding log 3/s: three requests at the same nanosecond each count; all leave together 1 s later.",
        "3/s; algorithm=sliding_log", 0, cat(vec![at(5 * MS, 4, 1), vec![(S + 5 * MS - 1, 'a', 1)], at(S + 5 * MS, 4, 1)])));
    v.push(case(
        "sliding_log_no_boundary_burst",
        "Sliding log 10/s: 10 at 999 ms; none at 1 s (unlike the fixed window); 10 at 1.999 s.",
        "10/s; algorithm=sliding_log",
        0,
        cat(vec![at(999 * MS, 11, 1), at(S, 2, 1), at(1999 * MS, 11, 1)]),
    ));
    v.push(case(
        "sliding_log_weighted_retry",
        "Sliding log 5/s: the wait is until the m-th oldest unit leaves.",
        "5/s; algorithm=sliding_log",
        0,
        vec![
            (0, 'a', 2),
            (300 * MS, 'a', 2),
            (600 * MS, 'a', 1),
            (700 * MS, 'a', 3),
            (S, 'a', 3),
            (1300 * MS, 'a', 3),
        ],
    ));
    v.push(case(
        "sliding_log_refund_newest",
        "Sliding log: a refund removes the newest units in the window.",
        "3/s; algorithm=sliding_log",
        0,
        vec![
            (0, 'a', 1),
            (500 * MS, 'a', 2),
            (600 * MS, 'r', 1),
            (600 * MS, 'a', 0),
            (S, 'a', 2),
            (S, 'a', 1),
        ],
    ));
    v.push(case(
        "sliding_log_backwards_clock",
        "Sliding log: a reading before the newest admission is clamped to it.",
        "2/s; algorithm=sliding_log",
        0,
        vec![
            (5 * S, 'a', 2),
            (5 * S + 10, 'a', 0),
            (4 * S, 'a', 1),
            (6 * S, 'a', 2),
        ],
    ));
    v.push(case(
        "sliding_log_cost_above_limit",
        "Sliding log: a cost above the limit is an error.",
        "2/s; algorithm=sliding_log",
        0,
        vec![(0, 'a', 3), (0, 'a', 2)],
    ));
    for i in 0..5 {
        v.push(case(
            &format!("sliding_log_walk_{i}"),
            "Sliding log: a pseudo-random walk of weighted requests and refunds.",
            [
                "3/s; algorithm=sliding_log",
                "20/m; algorithm=sliding_log",
                "5/2s; algorithm=sliding_log",
                "7/ms; algorithm=sliding_log",
                "2/h; algorithm=sliding_log",
            ][i],
            0,
            walk(
                i as u64 + 31,
                0,
                [S / 2, 10 * S, S, MS / 3, 1200 * S][i],
                [3, 20, 5, 7, 2][i],
                40,
            ),
        ));
    }
    // ---- leaky queue
    v.push(case("leaky_queue_constant_drain", "Leaky queue 10/s, max_delay 1 s: a burst of 13 gets slots 100 ms apart, 11 admitted; 500 ms later 5 more.",
        "10/s; algorithm=leaky_queue; max_delay=1s", 0, cat(vec![at(0, 13, 1), at(500 * MS, 7, 1)])));
    v.push(case("leaky_queue_cancel", "Leaky queue 4/s, max_delay 500 ms: waits 0, 250, 500 ms; the 4th is rejected; a cancel gives a slot back.",
        "4/s; algorithm=leaky_queue; max_delay=500ms", 0, vec![(0, 'a', 1), (0, 'a', 1), (0, 'a', 1), (0, 'a', 1), (0, 'r', 1), (0, 'a', 1), (0, 'a', 0)]));
    v.push(case(
        "leaky_queue_weighted",
        "Leaky queue: a request of cost c waits c/r after the previous slot.",
        "10/s; algorithm=leaky_queue; max_delay=1s",
        0,
        vec![
            (0, 'a', 5),
            (0, 'a', 5),
            (0, 'a', 3),
            (0, 'a', 6),
            (200 * MS, 'a', 2),
            (2 * S, 'a', 11),
        ],
    ));
    v.push(case(
        "leaky_queue_no_delay",
        "Leaky queue with max_delay 0: a strict meter spacing requests 1/r apart.",
        "5/s; algorithm=leaky_queue; max_delay=0ns",
        0,
        vec![
            (0, 'a', 1),
            (0, 'a', 1),
            (100 * MS, 'a', 1),
            (200 * MS, 'a', 1),
            (400 * MS, 'a', 1),
        ],
    ));
    v.push(case(
        "leaky_queue_backwards_clock",
        "Leaky queue: a reading earlier than the state proves is clamped to L - D.",
        "10/s; algorithm=leaky_queue; max_delay=300ms",
        0,
        vec![
            (5 * S, 'a', 3),
            (5 * S, 'a', 1),
            (S, 'a', 1),
            (S, 'r', 1),
            (5 * S + 50 * MS, 'a', 1),
        ],
    ));
    v.push(case(
        "leaky_queue_nondivisible",
        "Leaky queue 3/s: slots 333333333.3 ns apart, waits rounded up.",
        "3/s; algorithm=leaky_queue; max_delay=1s",
        0,
        vec![
            (0, 'a', 1),
            (0, 'a', 1),
            (0, 'a', 1),
            (1, 'a', 1),
            (0, 'a', 1),
        ],
    ));
    v.push(case(
        "leaky_queue_cost_above_limit",
        "Leaky queue: a cost above 1 + floor(D r) is an error.",
        "2/s; algorithm=leaky_queue; max_delay=1s",
        0,
        vec![(0, 'a', 4), (0, 'a', 3)],
    ));
    for i in 0..4 {
        v.push(case(
            &format!("leaky_queue_walk_{i}"),
            "Leaky queue: a pseudo-random walk of weighted reservations and cancellations.",
            [
                "3/s; algorithm=leaky_queue; max_delay=2s",
                "100/m; algorithm=leaky_queue; max_delay=10s",
                "5/2s; algorithm=leaky_queue; max_delay=700ms",
                "7/ms; algorithm=leaky_queue; max_delay=1ms",
            ][i],
            0,
            walk(i as u64 + 41, 0, [S, 5 * S, S, MS][i], [7, 17, 2, 8][i], 40),
        ));
    }
    // ---- keyed: several keys of one KeyedLimiter, each deciding as its own bucket (the token
    // bucket's keyed cases are in vectors.json; an interval grid is anchored at the limiter's
    // origin, not at a key's creation, which these per-key models do not express)
    for (i, (rate, span, max)) in [
        ("4/s; algorithm=sliding_log", 300 * MS, 4),
        ("5/s; algorithm=sliding_window", 300 * MS, 5),
        ("2/s; burst=4; algorithm=gcra", 400 * MS, 4),
        ("3/s; algorithm=fixed_window", 400 * MS, 3),
        ("2/s; algorithm=leaky_queue; max_delay=1s", 300 * MS, 3),
    ]
    .into_iter()
    .enumerate()
    {
        let algo = rate.parse::<Quota>().unwrap();
        v.push(keyed_case(
            &format!("keyed_walk_{}", i + 1),
            &format!(
                "Keyed {}: three keys interleaved, each bucket created at its key's first request.",
                algo.algorithm()
            ),
            rate,
            0,
            keyed_walk(i as u64 + 61, &["alice", "bob", "carol"], span, max, 45),
        ));
    }
    // ---- composite
    let mut c = Vec::new();
    c.push(composite_case("composite_refund_partial", "User 5/s, tenant 3/s fixed window, global 100/s sliding log: the second request of 2 is rejected by the tenant and refunded to the user.",
        &["5/s", "3/s; algorithm=fixed_window", "100/s; algorithm=sliding_log"], 0, vec![(0, 'a', 2), (0, 'a', 2), (0, 'a', 0), (0, 'a', 1), (S, 'a', 2)]));
    c.push(composite_case(
        "composite_error_consumes_nothing",
        "A cost above any part's capacity is an error.",
        &["10/s", "3/s; algorithm=sliding_window"],
        0,
        vec![(0, 'a', 4), (0, 'a', 3)],
    ));
    c.push(composite_case(
        "composite_longest_retry",
        "The rejection reports the longest retry_after among the parts that cannot admit.",
        &["1/s; burst=2", "2/m; algorithm=fixed_window"],
        0,
        vec![
            (0, 'a', 2),
            (10 * MS, 'a', 1),
            (S, 'a', 1),
            (60 * S, 'a', 1),
        ],
    ));
    for i in 0..8u64 {
        let sets: [&[&str]; 4] = [
            &["3/s", "5/2s; algorithm=sliding_window"],
            &[
                "4/s; algorithm=gcra",
                "10/m; algorithm=fixed_window",
                "6/s; algorithm=sliding_log",
            ],
            &[
                "5/s; burst=5; refill=interval",
                "2/s; algorithm=leaky_queue; max_delay=1s",
            ],
            &["10/s; algorithm=sliding_log", "3/s"],
        ];
        c.push(composite_case(
            &format!("composite_walk_{i}"),
            "Composite: a pseudo-random walk.",
            sets[i as usize % 4],
            0,
            walk(i + 51, 0, S, 3, 40),
        ));
    }
    (v, c)
}

#[test]
#[ignore = "writes conformance/algorithms.json"]
fn generate_algorithm_vectors() {
    let (cases, composite) = all_cases();
    let doc = json!({"format": 1, "cases": cases, "composite_cases": composite});
    std::fs::create_dir_all(path().parent().unwrap()).unwrap();
    std::fs::write(path(), serde_json::to_string_pretty(&doc).unwrap() + "\n").unwrap();
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
    let (cases, composite) = all_cases();
    assert_eq!(doc["cases"], Value::Array(cases), "regenerate the vectors");
    assert_eq!(
        doc["composite_cases"],
        Value::Array(composite),
        "regenerate the vectors"
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
