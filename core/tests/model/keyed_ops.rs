//! The operations the keyed property tests (keyed_props.rs, keyed_log.rs) draw: requests,
//! peeks, refunds and removes of a few keys, sweeps and clears, and the clock's steps.

use proptest::prelude::*;
use sluicegate::Decision;
use sluicegate_model::{out, Out};

#[derive(Clone, Debug)]
pub enum Op {
    Acquire(u8, u64),
    Peek(u8),
    Refund(u8, u64),
    Remove(u8),
    Sweep,
    Clear,
}

/// Ops on keys `0..keys`, costs up to `max_cost + 1` (one above a capacity of `max_cost`),
/// with refunds weighted `refunds` against 12 requests.
pub fn op(keys: u8, max_cost: u64, refunds: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0..keys, 0..=max_cost + 1).prop_map(|(k, c)| Op::Acquire(k, c)),
        2 => (0..keys).prop_map(Op::Peek),
        refunds => (0..keys, 0..=max_cost).prop_map(|(k, c)| Op::Refund(k, c)),
        2 => (0..keys).prop_map(Op::Remove),
        2 => Just(Op::Sweep),
        1 => Just(Op::Clear),
    ]
}

/// Time steps: `back` allows readings earlier than the previous one.
pub fn step(back: bool) -> impl Strategy<Value = i64> {
    let back_max = if back { 3_000_000_000i64 } else { 0 };
    prop_oneof![
        3 => 0i64..2_000_000_000,
        2 => 0i64..2_000_000,
        2 => Just(0i64),
        1 => -back_max..=0,
    ]
}

/// Key `k` as bytes: keys of different lengths, some sharing prefixes.
pub fn key_bytes(k: u8) -> Vec<u8> {
    vec![k; usize::from(k % 3) + 1]
}

/// Checks that `snap` (a keyed limiter's snapshot) holds every key the models hold, each
/// with the figures its model reports (`want`: the model's answer to a peek).
pub fn check_snapshot(
    snap: &[(Box<[u8]>, Decision)],
    want: impl IntoIterator<Item = (u8, Out)>,
) -> Result<(), TestCaseError> {
    for (k, want) in want {
        let key = key_bytes(k).into_boxed_slice();
        let entry = snap.iter().find(|e| e.0 == key);
        prop_assert!(entry.is_some(), "key {k} missing from the snapshot");
        prop_assert_eq!(out(&entry.unwrap().1), want);
    }
    Ok(())
}

/// Proptest cases per property: `PROPTEST_CASES`, else 256.
pub fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}
