//! loom models of the cell's CAS protocol. Run with
//! `RUSTFLAGS="--cfg sluicegate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p sluicegate --release --test loom`
//! (ci/loom.sh). Each model races real limiter operations on threads and checks that the
//! outcome — every decision and the final state — is exactly what the sequential reference
//! model gives for one of the possible orders (invariant 1: no over-admission, no lost write).
#![cfg(sluicegate_loom)]

use sluicegate_model as model;

use loom::sync::Arc;
use loom::thread;
use model::{out, Model, Out};
use sluicegate::{Limiter, ManualClock, Quota};

#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire { t: u64, cost: u64 },
    Refund { t: u64, cost: u64 },
}

fn apply(l: &Limiter<ManualClock>, op: Op) -> Option<Out> {
    match op {
        Op::Acquire { t, cost } => Some(out(&l.try_acquire_at(t, cost).unwrap())),
        Op::Refund { t, cost } => {
            l.refund_at(t, cost).unwrap();
            None
        }
    }
}

fn apply_model(m: &mut Model, op: Op) -> Option<Out> {
    match op {
        Op::Acquire { t, cost } => Some(m.acquire(t, cost).unwrap()),
        Op::Refund { t, cost } => {
            m.refund(t, cost);
            None
        }
    }
}

type Outcome = (Vec<Option<Out>>, Out);

/// Every outcome the sequential model allows: each permutation of `ops`, then a peek at `t_end`.
fn sequential_outcomes(rate: &str, t0: u64, ops: &[Op], t_end: u64) -> Vec<Outcome> {
    let q: Quota = rate.parse().unwrap();
    let interval = q.refill() == sluicegate::Refill::Interval;
    let fresh = || {
        Model::new(
            q.count(),
            q.period_ns(),
            q.burst(),
            q.initial(),
            interval,
            t0,
        )
    };
    let mut orders: Vec<Vec<usize>> = vec![vec![]];
    for _ in 0..ops.len() {
        orders = orders
            .into_iter()
            .flat_map(|o| {
                (0..ops.len())
                    .filter(|i| !o.contains(i))
                    .map(|i| {
                        let mut o2 = o.clone();
                        o2.push(i);
                        o2
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
    }
    orders
        .into_iter()
        .map(|order| {
            let mut m = fresh();
            let mut results = vec![None; ops.len()];
            for &i in &order {
                results[i] = apply_model(&mut m, ops[i]);
            }
            (results, m.acquire(t_end, 0).unwrap())
        })
        .collect()
}

/// Races `ops` on one thread each (the first on the model's main thread).
fn race(rate: &'static str, t0: u64, ops: Vec<Op>, t_end: u64) {
    let allowed = sequential_outcomes(rate, t0, &ops, t_end);
    loom::model(move || {
        let q: Quota = rate.parse().unwrap();
        let limiter = Arc::new(Limiter::with_clock(q, ManualClock::new(t0)).unwrap());
        let handles: Vec<_> = ops[1..]
            .iter()
            .map(|&op| {
                let l = limiter.clone();
                thread::spawn(move || apply(&l, op))
            })
            .collect();
        let mut results = vec![apply(&limiter, ops[0])];
        results.extend(handles.into_iter().map(|h| h.join().unwrap()));
        let end = out(&limiter.try_acquire_at(t_end, 0).unwrap());
        let outcome = (results, end);
        assert!(
            allowed.contains(&outcome),
            "outcome {outcome:?} is not one of the sequential outcomes {allowed:?}"
        );
    });
}

const S: u64 = 1_000_000_000;

#[test]
fn two_threads_race_for_the_last_token() {
    let a = Op::Acquire { t: 0, cost: 1 };
    race("1/s; burst=1", 0, vec![a, a], 0);
}

#[test]
fn two_threads_race_for_the_last_token_wide_word() {
    // k = 999 after gcd reduction: the state needs the 128-bit word.
    let a = Op::Acquire { t: 0, cost: 1 };
    race("999/s; burst=1", 0, vec![a, a], 0);
}

#[test]
fn three_threads_weighted_costs() {
    let ops = vec![
        Op::Acquire { t: 0, cost: 2 },
        Op::Acquire { t: 0, cost: 2 },
        Op::Acquire { t: 0, cost: 1 },
    ];
    race("1/s; burst=3", 0, ops, 0);
}

#[test]
fn consume_vs_refund() {
    let ops = vec![Op::Acquire { t: S, cost: 2 }, Op::Refund { t: S, cost: 1 }];
    race("1/s; burst=2; initial=1", S, ops, S);
}

#[test]
fn consume_vs_refund_interval() {
    let ops = vec![Op::Acquire { t: S, cost: 2 }, Op::Refund { t: S, cost: 1 }];
    race("1/s; burst=2; initial=1; refill=interval", S, ops, S);
}

#[test]
fn consume_vs_clock_going_backwards() {
    // One thread reads 11 s, the other a stale 9.5 s (a TSC behind on another core).
    let ops = vec![
        Op::Acquire { t: 11 * S, cost: 1 },
        Op::Acquire {
            t: 9 * S + S / 2,
            cost: 1,
        },
    ];
    race("1/s; burst=2; initial=0", 9 * S, ops, 11 * S);
}

#[test]
fn consume_vs_clock_going_backwards_interval() {
    let ops = vec![
        Op::Acquire { t: 11 * S, cost: 2 },
        Op::Acquire {
            t: 9 * S + S / 2,
            cost: 1,
        },
    ];
    race(
        "1/s; burst=2; initial=1; refill=interval",
        9 * S,
        ops,
        11 * S,
    );
}
