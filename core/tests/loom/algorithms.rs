//! Loom models of the protocols the algorithms add beyond the shared CAS loop: leaky-queue
//! reservations racing cancellations, composite limits refunding a partial success, and the
//! sliding log's critical section. Run with
//! `RUSTFLAGS="--cfg sluicegate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p sluicegate --release --test loom_algos`.
#![cfg(sluicegate_loom)]

use loom::sync::Arc;
use loom::thread;
use sluicegate::composite::Composite;
use sluicegate::{Limiter, ManualClock};
use std::time::Duration;

const MS: u64 = 1_000_000;

fn limiter(rate: &str, clock: &ManualClock) -> Limiter<ManualClock> {
    Limiter::with_clock(rate.parse().unwrap(), clock.clone()).unwrap()
}

/// Two reservations on a queue with room for two (Q = 1 + 10 ms * 100/s = 2) get the two
/// distinct slots 0 and 10 ms, in either order; a third is rejected.
#[test]
fn queue_reservations_get_distinct_slots() {
    loom::model(|| {
        let clock = ManualClock::new(0);
        let q = Arc::new(limiter(
            "100/s; algorithm=leaky_queue; max_delay=10ms",
            &clock,
        ));
        let q2 = q.clone();
        let t = thread::spawn(move || q2.reserve(1).unwrap());
        let a = q.reserve(1).unwrap();
        let b = t.join().unwrap();
        assert!(a.allowed() && b.allowed());
        let mut waits = [a.retry_after(), b.retry_after()];
        waits.sort();
        assert_eq!(waits, [Duration::ZERO, Duration::from_millis(10)]);
        assert!(!q.reserve(1).unwrap().allowed());
    });
}

/// A cancellation racing a reservation: whatever the interleaving, the reservation waits
/// either 10 ms (it went first) or 0 (the cancellation went first), and afterwards the queue
/// holds exactly one slot: the next reservation waits 10 ms.
#[test]
fn queue_cancel_racing_reserve_is_linearizable() {
    loom::model(|| {
        let clock = ManualClock::new(0);
        let q = Arc::new(limiter(
            "100/s; algorithm=leaky_queue; max_delay=20ms",
            &clock,
        ));
        assert_eq!(q.reserve(1).unwrap().retry_after(), Duration::ZERO);
        let q2 = q.clone();
        let t = thread::spawn(move || q2.cancel(1).unwrap());
        let d = q.reserve(1).unwrap();
        t.join().unwrap();
        assert!(d.allowed());
        let w = d.retry_after();
        assert!(
            w == Duration::ZERO || w == Duration::from_millis(10),
            "{w:?}"
        );
        assert_eq!(
            q.reserve(1).unwrap().retry_after(),
            Duration::from_millis(10)
        );
    });
}

/// Two composite requests over a per-user limit (2 tokens) and a global limit (1 token):
/// exactly one is admitted, the other's partial success on the per-user limit is refunded,
/// so afterwards the per-user limit holds exactly one token and the global none.
#[test]
fn composite_refund_is_all_or_nothing() {
    loom::model(|| {
        let clock = ManualClock::new(0);
        let parts = vec![
            limiter("2/s; burst=2", &clock),
            limiter("1/s; algorithm=fixed_window", &clock),
        ];
        let both = Arc::new(Composite::new(parts));
        let b2 = both.clone();
        let t = thread::spawn(move || b2.try_acquire_at(0, 1).unwrap().allowed());
        let mine = both.try_acquire_at(0, 1).unwrap().allowed();
        let theirs = t.join().unwrap();
        assert!(mine ^ theirs, "exactly one is admitted");
        assert_eq!(both.parts()[0].try_acquire_at(0, 0).unwrap().remaining(), 1);
        assert_eq!(both.parts()[1].try_acquire_at(0, 0).unwrap().remaining(), 0);
    });
}

/// The sliding log under contention: two threads ask for 2 units of a log of 3; one is
/// admitted, and a refund racing the other admission never loses or invents a unit.
#[test]
fn sliding_log_admits_within_the_limit() {
    loom::model(|| {
        let clock = ManualClock::new(0);
        let log = Arc::new(limiter("3/s; algorithm=sliding_log", &clock));
        let l2 = log.clone();
        let t = thread::spawn(move || l2.try_acquire_at(MS, 2).unwrap().allowed());
        let mine = log.try_acquire_at(MS, 2).unwrap().allowed();
        let theirs = t.join().unwrap();
        assert!(mine ^ theirs);
        let l3 = log.clone();
        let t = thread::spawn(move || l3.refund_at(MS, 1).unwrap());
        let one = log.try_acquire_at(MS, 1).unwrap().allowed();
        t.join().unwrap();
        assert!(one, "2 + 1 <= 3 whatever the order");
        // 2 + 1 admitted, 1 refunded: exactly 2 units in the window.
        assert_eq!(log.try_acquire_at(MS, 0).unwrap().remaining(), 1);
    });
}
