//! loom models of live reconfiguration racing decisions: every interleaving (up to the
//! preemption bound) of `set_quota` with acquires, refunds and new keys, on single buckets
//! (the seal and hand-over of `bucket/live.rs`: narrow and wide words, a sliding log) and on
//! keyed limiters (the pause and grace period of `store/live.rs`: an existing key, a new key,
//! a change of word width). Each outcome (every decision and the final state) must be the
//! sequential model's for some place of the reconfiguration among the other thread's
//! operations: old quota on the old state before it, new quota on the carried state after it
//! (`AnyModel::reconfigure`), never a mix.
#![cfg(sluicegate_loom)]

use loom::sync::Arc;
use loom::thread;
use sluicegate::{Algorithm, KeyedLimiter, Limiter, ManualClock, OnFull, Quota, Refill};
use sluicegate_model::{out, AnyModel, Kind, Out, Params};
use std::collections::BTreeMap;

const S: u64 = 1_000_000_000;

#[derive(Clone, Copy, Debug)]
enum Op {
    Acquire { key: u64, t: u64, cost: u64 },
    Refund { key: u64, t: u64, cost: u64 },
}

fn params(q: &Quota) -> Params {
    let kind = match (q.algorithm(), q.refill()) {
        (Algorithm::TokenBucket, Refill::Continuous) => Kind::TokenBucket,
        (Algorithm::TokenBucket, Refill::Interval) => Kind::TokenBucketInterval,
        (Algorithm::Gcra, _) => Kind::Gcra,
        (Algorithm::FixedWindow, _) => Kind::FixedWindow,
        (Algorithm::SlidingWindow, _) => Kind::SlidingWindow,
        (Algorithm::SlidingLog, _) => Kind::SlidingLog,
        (Algorithm::LeakyQueue, _) => Kind::LeakyQueue,
        other => unreachable!("{other:?}"),
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

/// The sequential model of a keyed limiter (a single bucket is key 0): buckets made on a
/// key's first acquire under the quota then in force.
struct Seq {
    origin: u64,
    quota: Params,
    keys: BTreeMap<u64, AnyModel>,
}

impl Seq {
    fn apply(&mut self, op: Op) -> Option<Out> {
        match op {
            Op::Acquire { key, t, cost } => {
                let (q, o) = (self.quota, self.origin);
                let m = self
                    .keys
                    .entry(key)
                    .or_insert_with(|| AnyModel::new_keyed(q, o, t));
                Some(m.acquire(t, cost).unwrap())
            }
            Op::Refund { key, t, cost } => {
                if let Some(m) = self.keys.get_mut(&key) {
                    m.refund(t, cost);
                }
                None
            }
        }
    }

    fn reconfigure(&mut self, q: Params, t: u64) {
        for m in self.keys.values_mut() {
            m.reconfigure(q, t, self.origin);
        }
        self.quota = q;
    }
}

type Outcome = (Vec<Option<Out>>, Vec<Out>);

/// Every outcome the sequential model allows: `before` applied first, then `racing` in
/// program order with the reconfiguration to `q2` at `t_r` at any place among them, then a
/// peek of each of `keys` at `t_end`.
#[allow(clippy::too_many_arguments)]
fn outcomes(
    q1: &str,
    q2: &str,
    t0: u64,
    before: &[Op],
    racing: &[Op],
    t_r: u64,
    keys: &[u64],
    t_end: u64,
) -> Vec<Outcome> {
    let (p1, p2) = (params(&q1.parse().unwrap()), params(&q2.parse().unwrap()));
    (0..=racing.len())
        .map(|at| {
            let mut m = Seq {
                origin: t0,
                quota: p1,
                keys: BTreeMap::new(),
            };
            for &op in before {
                m.apply(op);
            }
            let mut results = Vec::new();
            for (i, &op) in racing.iter().enumerate() {
                if i == at {
                    m.reconfigure(p2, t_r);
                }
                results.push(m.apply(op));
            }
            if at == racing.len() {
                m.reconfigure(p2, t_r);
            }
            let peeks = keys
                .iter()
                .map(|k| match m.keys.get(k) {
                    Some(b) => b.probe(t_end, 0).unwrap(),
                    None => AnyModel::new_keyed(m.quota, t0, t_end)
                        .probe(t_end, 0)
                        .unwrap(),
                })
                .collect();
            (results, peeks)
        })
        .collect()
}

/// A single bucket (key 0) whose clock reads `t0`: `racing` on a second thread while the main
/// thread sets `q2` at `t0`.
fn race_limiter(q1: &'static str, q2: &'static str, t0: u64, before: Vec<Op>, racing: Vec<Op>) {
    let allowed = outcomes(q1, q2, t0, &before, &racing, t0, &[0], t0);
    loom::model(move || {
        let l = Arc::new(Limiter::with_clock(q1.parse().unwrap(), ManualClock::new(t0)).unwrap());
        let apply = |l: &Limiter<ManualClock>, op: Op| match op {
            Op::Acquire { t, cost, .. } => Some(out(&l.try_acquire_at(t, cost).unwrap())),
            Op::Refund { t, cost, .. } => {
                l.refund_at(t, cost).unwrap();
                None
            }
        };
        for &op in &before {
            apply(&l, op);
        }
        let other = {
            let (l, racing) = (l.clone(), racing.clone());
            thread::spawn(move || racing.iter().map(|&op| apply(&l, op)).collect::<Vec<_>>())
        };
        l.set_quota_at(q2.parse().unwrap(), t0).unwrap();
        let results = other.join().unwrap();
        let outcome = (results, vec![out(&l.peek().unwrap())]);
        assert!(
            allowed.contains(&outcome),
            "outcome {outcome:?} is not one of the sequential outcomes {allowed:?}"
        );
        assert_eq!(l.quota(), q2.parse().unwrap());
    });
}

/// A keyed limiter of one shard: `racing` on a second thread while the main thread sets `q2`;
/// then a peek of each key.
fn race_keyed(
    q1: &'static str,
    q2: &'static str,
    before: Vec<Op>,
    racing: Vec<Op>,
    keys: &'static [u64],
) {
    let t0 = 0;
    let allowed = outcomes(q1, q2, t0, &before, &racing, t0, keys, t0);
    loom::model(move || {
        let kl = Arc::new(
            KeyedLimiter::<u64, _>::builder(q1.parse().unwrap())
                .shards(1)
                .clock(ManualClock::new(t0))
                .build()
                .unwrap(),
        );
        let apply = |kl: &KeyedLimiter<u64, ManualClock>, op: Op| match op {
            Op::Acquire { key, t, cost } => Some(out(&kl.try_acquire_at(&key, t, cost).unwrap())),
            Op::Refund { key, t, cost } => {
                kl.refund_at(&key, t, cost).unwrap();
                None
            }
        };
        for &op in &before {
            apply(&kl, op);
        }
        let other = {
            let (kl, racing) = (kl.clone(), racing.clone());
            thread::spawn(move || racing.iter().map(|&op| apply(&kl, op)).collect::<Vec<_>>())
        };
        kl.set_quota_at(q2.parse().unwrap(), t0).unwrap();
        let results = other.join().unwrap();
        let peeks = keys
            .iter()
            .map(|k| out(&kl.peek_at(k, t0).unwrap()))
            .collect();
        let outcome = (results, peeks);
        assert!(
            allowed.contains(&outcome),
            "outcome {outcome:?} is not one of the sequential outcomes {allowed:?}"
        );
    });
}

fn acquire(t: u64, cost: u64) -> Op {
    Op::Acquire { key: 0, t, cost }
}

/// An acquire and a refund race a reconfiguration that shrinks the burst (the carry clamps).
#[test]
fn reconfiguration_is_atomic() {
    race_limiter(
        "1/s; burst=3",
        "2/s; burst=2",
        S,
        vec![acquire(S, 1)],
        vec![
            acquire(S, 2),
            Op::Refund {
                key: 0,
                t: S,
                cost: 1,
            },
        ],
    );
}

/// A 128-bit word handed over to a 64-bit one.
#[test]
fn reconfiguration_from_a_wide_word() {
    race_limiter(
        "999/s; burst=2",
        "1/s; burst=2",
        S,
        vec![acquire(S, 1)],
        vec![acquire(S, 1)],
    );
}

/// A sliding log (a lock per bucket, no word) carried into a smaller limit.
#[test]
fn reconfiguration_of_a_sliding_log() {
    race_limiter(
        "3/s; algorithm=sliding_log",
        "2/s; algorithm=sliding_log",
        S,
        vec![acquire(S, 1)],
        vec![acquire(S, 1)],
    );
}

/// A keyed limiter: a consume of an existing key races the switch.
#[test]
fn keyed_reconfiguration_is_atomic() {
    race_keyed(
        "1/s; burst=3",
        "2/s; burst=2",
        vec![Op::Acquire {
            key: 1,
            t: 0,
            cost: 1,
        }],
        vec![Op::Acquire {
            key: 1,
            t: 0,
            cost: 2,
        }],
        &[1],
    );
}

/// A new key (the locked insert path) races the switch, into a 128-bit store.
#[test]
fn keyed_insert_races_a_reconfiguration_to_wide_words() {
    race_keyed(
        "1/s; burst=2",
        "999/s; burst=1",
        vec![Op::Acquire {
            key: 1,
            t: 0,
            cost: 1,
        }],
        vec![Op::Acquire {
            key: 2,
            t: 0,
            cost: 1,
        }],
        &[1, 2],
    );
}

/// A limiter's first reconfiguration whose carry fails (an instant past the new quota's
/// horizon) races an acquire: the seal is undone, and the acquire, which may have met it,
/// decides on the first generation as if nothing had happened. It spun for ever before, on a
/// generation nobody would publish.
#[test]
fn a_failed_first_reconfiguration_lets_a_racing_decision_go_on() {
    loom::model(|| {
        let q1: Quota = "1/s; burst=3".parse().unwrap();
        let l = Arc::new(Limiter::with_clock(q1, ManualClock::new(S)).unwrap());
        let other = {
            let l = l.clone();
            thread::spawn(move || l.try_acquire_at(S, 1).unwrap())
        };
        let past_the_horizon = u64::MAX - 1;
        assert!(l
            .set_quota_at("2/s; burst=2".parse().unwrap(), past_the_horizon)
            .is_err());
        let d = other.join().unwrap();
        assert!(d.allowed());
        assert_eq!(d.remaining(), 2);
        assert_eq!(l.peek().unwrap().remaining(), 2);
        assert_eq!(l.quota(), q1);
    });
}

/// `keys_evicted` across a reconfiguration: a `metrics()` racing `set_quota` reads every
/// generation's evictions exactly once, and so does one after an eviction racing it (a new key
/// at a bound of one evicts the full bucket there, in the old generation or in the new one).
/// The count kept beside the generations, added to after the new one was published, let a
/// reader that met the old generation and then the added count read its evictions twice, and
/// one that met the new generation before the add miss them.
#[test]
fn keyed_evictions_are_counted_once_across_a_reconfiguration() {
    loom::model(|| {
        let kl = Arc::new(
            KeyedLimiter::<u64, _>::builder("1/s; burst=2".parse().unwrap())
                .max_keys(1)
                .shards(1)
                .on_full(OnFull::RejectNewKeys)
                .clock(ManualClock::new(0))
                .metrics(true)
                .build()
                .unwrap(),
        );
        // Key 1's bucket is full again a second later, when key 2 evicts it.
        kl.try_acquire_at(&1, 0, 1).unwrap();
        kl.try_acquire_at(&2, S, 1).unwrap();
        assert_eq!(kl.metrics().unwrap().keys_evicted, 1);
        let other = {
            let kl = kl.clone();
            thread::spawn(move || {
                let seen = kl.metrics().unwrap().keys_evicted;
                // Key 2's bucket is full at 2 s, in either generation (a carry keeps a full
                // bucket full): key 3 evicts it.
                assert!(kl.try_acquire_at(&3, 2 * S, 1).unwrap().allowed());
                (seen, kl.metrics().unwrap().keys_evicted)
            })
        };
        kl.set_quota_at("2/s; burst=2".parse().unwrap(), 2 * S)
            .unwrap();
        let racing = kl.metrics().unwrap().keys_evicted;
        assert!((1..=2).contains(&racing), "{racing} evictions");
        assert_eq!(other.join().unwrap(), (1, 2));
        assert_eq!(kl.metrics().unwrap().keys_evicted, 2);
    });
}
