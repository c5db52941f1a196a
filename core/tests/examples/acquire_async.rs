//! `Limiter::acquire_async` (feature `tokio`): the same decisions as the blocking `acquire`,
//! waiting on tokio's timer. Run with `cargo test -p sluicegate --features tokio`.
#![cfg(feature = "tokio")]

use sluicegate::{Clock, Limiter, MonotonicClock, Quota};
use std::time::Duration;

#[tokio::test(flavor = "current_thread")]
async fn waits_for_a_token_then_admits() {
    let clock = MonotonicClock::new();
    let l = Limiter::with_clock("20/s; burst=1".parse::<Quota>().unwrap(), clock.clone()).unwrap();
    // Read before the first admission: the next token is 50 ms after it, so at least 50 ms
    // after t0 however long the machine stalls in between.
    let t0 = clock.now();
    assert!(l.try_acquire(1).unwrap().allowed());
    let d = l.acquire_async(1, Duration::from_secs(1)).await.unwrap();
    assert!(d.allowed(), "admitted once the 50 ms token arrived");
    // The wait was the limiter's own retry_after (with slack for the timer's granularity).
    assert!(clock.now() - t0 >= 40_000_000, "{} ns", clock.now() - t0);
}

#[tokio::test(flavor = "current_thread")]
async fn gives_up_when_the_wait_exceeds_max_wait() {
    let l = Limiter::new("1/h; burst=1".parse().unwrap());
    assert!(l.try_acquire(1).unwrap().allowed());
    let d = l.acquire_async(1, Duration::from_millis(10)).await.unwrap();
    assert!(!d.allowed());
    assert!(d.retry_after() > Duration::from_secs(3000));
}

#[tokio::test(flavor = "current_thread")]
async fn a_leaky_queue_slot_is_waited_for() {
    let clock = MonotonicClock::new();
    let q: Quota = "10/s; algorithm=leaky_queue; max_delay=1s".parse().unwrap();
    let l = Limiter::with_clock(q, clock.clone()).unwrap();
    let t0 = clock.now(); // before the first slot: the second is 100 ms after it
    let first = l.acquire_async(1, Duration::from_secs(1)).await.unwrap();
    assert!(first.allowed());
    let second = l.acquire_async(1, Duration::from_secs(1)).await.unwrap();
    assert!(second.allowed());
    assert!(
        clock.now() - t0 >= 80_000_000,
        "the second slot is 100 ms after the first"
    );
    // A slot beyond max_wait is refused and leaves nothing behind.
    for _ in 0..8 {
        l.try_acquire(1).unwrap();
    }
    let late = l.acquire_async(1, Duration::from_millis(5)).await.unwrap();
    assert!(!late.allowed());
}

#[tokio::test(flavor = "current_thread")]
async fn errors_are_the_same_as_blocking() {
    let l = Limiter::new("1/s; burst=2".parse().unwrap());
    let e = l
        .acquire_async(3, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "insufficient_capacity");
}
