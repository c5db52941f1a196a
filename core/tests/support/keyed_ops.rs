//! The operations the keyed property tests (keyed_props.rs, keyed_log.rs) draw: requests,
//! peeks, refunds and removes of a few keys, sweeps and clears, and the clock's steps.

use super::model::Out;
use proptest::prelude::*;
use sluicegate::Decision;

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

/// A decision's figures, as the models report them.
pub fn out(d: &Decision) -> Out {
    Out {
        allowed: d.allowed(),
        limit: d.limit(),
        remaining: d.remaining(),
        retry_after_ns: d.retry_after_nanos(),
        reset_after_ns: d.reset_after_nanos(),
    }
}
