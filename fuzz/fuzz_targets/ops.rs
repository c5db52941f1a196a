//! Random op sequences (times jumping forwards and backwards, costs, refunds, peeks) against
//! the sequential reference model, for random quotas of both refill modes and both widths.
#![no_main]

use sluicegate_model as model;

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use model::{Model, ModelError};
use sluicegate::{Error, Limiter, ManualClock, Quota, Refill};

#[derive(Arbitrary, Debug)]
enum Jump {
    Forward(u32),
    ForwardFar(u64),
    Back(u32),
    Stay,
}

#[derive(Arbitrary, Debug)]
struct Op {
    jump: Jump,
    refund: bool,
    cost: u16,
}

#[derive(Arbitrary, Debug)]
struct Input {
    count: u32,
    period_ns: u64,
    burst: u16,
    initial: u16,
    interval: bool,
    start: u64,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    let count = u64::from(input.count.max(1));
    let period = input.period_ns.max(1);
    let burst = u64::from(input.burst.max(1));
    let initial = u64::from(input.initial) % (burst + 1);
    let Ok(q) = Quota::try_new(count, period, burst) else {
        return; // out of the exact range: refused at construction, which is the contract
    };
    let mut q = q.with_initial(initial);
    if input.interval {
        q = q.with_refill(Refill::Interval);
    }
    if q.validate().is_err() {
        return;
    }
    let start = input.start % (4 * sluicegate::CENTURY_NS);
    let clock = ManualClock::new(start);
    let limiter = match Limiter::with_clock(q, clock.clone()) {
        Ok(l) => l,
        Err(Error::ClockOutOfRange { .. }) => return,
        Err(e) => panic!("{e}"),
    };
    let mut m = Model::new(count, period, burst, initial, input.interval, start);
    let mut t = start;
    for op in input.ops.iter().take(256) {
        t = match op.jump {
            Jump::Forward(d) => t.saturating_add(u64::from(d)),
            Jump::ForwardFar(d) => t.saturating_add(d % sluicegate::CENTURY_NS),
            Jump::Back(d) => t.saturating_sub(u64::from(d)),
            Jump::Stay => t,
        };
        clock.set(t);
        let cost = u64::from(op.cost);
        if op.refund {
            match limiter.refund(cost) {
                Ok(()) => m.refund(t, cost),
                Err(Error::ClockOutOfRange { .. }) => return,
                Err(e) => panic!("refund: {e}"),
            }
            continue;
        }
        match (limiter.try_acquire(cost), m.acquire(t, cost)) {
            (Ok(d), Ok(w)) => {
                assert_eq!(
                    (
                        d.allowed(),
                        d.limit(),
                        d.remaining(),
                        d.retry_after_nanos(),
                        d.reset_after_nanos()
                    ),
                    (
                        w.allowed,
                        w.limit,
                        w.remaining,
                        w.retry_after_ns,
                        w.reset_after_ns
                    ),
                    "t={t} cost={cost} quota={q}"
                );
            }
            (Err(Error::InsufficientCapacity { .. }), Err(ModelError::InsufficientCapacity)) => {}
            // Past the narrow word's horizon (over a century) the limiter answers with a typed
            // error; the model has no horizon. Nothing more to compare on this timeline.
            (Err(Error::ClockOutOfRange { horizon, .. }), _) => {
                assert!(t > horizon && horizon >= sluicegate::CENTURY_NS);
                return;
            }
            (got, want) => panic!("t={t} cost={cost} quota={q}: limiter {got:?} vs model {want:?}"),
        }
    }
});
