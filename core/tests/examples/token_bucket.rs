//! The worked examples of the seed documents, as named tests with exact figures.

use sluicegate::{Limiter, ManualClock, Quota};
use std::time::Duration;

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn limiter(rate: &str) -> (Limiter<ManualClock>, ManualClock) {
    let clock = ManualClock::new(0);
    let l = Limiter::with_clock(rate.parse::<Quota>().unwrap(), clock.clone()).unwrap();
    (l, clock)
}

#[test]
fn capacity_5_one_per_second_seven_instant_requests() {
    let (l, clock) = limiter("1/s; burst=5");
    let got: Vec<bool> = (0..7)
        .map(|_| l.try_acquire(1).unwrap().allowed())
        .collect();
    assert_eq!(got, [true, true, true, true, true, false, false]);
    // After 2 s idle: 2 allowed, the third rejected.
    clock.advance(Duration::from_secs(2));
    let got: Vec<bool> = (0..3)
        .map(|_| l.try_acquire(1).unwrap().allowed())
        .collect();
    assert_eq!(got, [true, true, false]);
    assert_eq!(
        l.try_acquire(1).unwrap().retry_after(),
        Duration::from_secs(1)
    );
}

#[test]
fn empty_bucket_waits_two_seconds_then_four_requests() {
    let (l, clock) = limiter("1/s; burst=5; initial=0");
    clock.set(2 * S);
    let got: Vec<bool> = (0..4)
        .map(|_| l.try_acquire(1).unwrap().allowed())
        .collect();
    assert_eq!(got, [true, true, false, false]);
}

/// r = 10/s, b = 50, full, 60 requests/s from t = 0 (request j at floor(j * 10^9 / 60) ns).
///
/// The seed document's table says 50 are admitted and then nothing until the bucket
/// refills, because it forgets that tokens keep arriving during the burst. The exact
/// model: after j requests at t_j = j/60 s the bucket has 50 + 10 t_j - j = 50 - 5j/6
/// tokens, so requests 1..59 pass, the 60th (t = 59/60 s = 0.9833 s) finds 0.83 tokens and
/// is rejected, the 61st (t = 1 s) passes, and from then on exactly one in six passes:
/// 79 of the first 180.
#[test]
fn ten_per_second_burst_50_under_60_per_second() {
    let (l, clock) = limiter("10/s; burst=50");
    let mut allowed = Vec::new();
    for j in 0..180u64 {
        clock.set(j * S / 60);
        allowed.push(l.try_acquire(1).unwrap().allowed());
    }
    assert!(allowed[..59].iter().all(|&a| a), "the first 59 pass");
    assert!(!allowed[59], "the 60th (t = 0.9833 s) is rejected");
    assert!(allowed[60], "the 61st (t = 1 s) passes");
    // Requests 62..=175 in blocks of six: one each (at j = 66, 72, ..., 174).
    for w in allowed[61..175].chunks_exact(6) {
        assert_eq!(w, [false, false, false, false, false, true], "one in six");
    }
    assert!(
        allowed[175..].iter().all(|&a| !a),
        "the next token is due at j = 180"
    );
    assert_eq!(allowed.iter().filter(|&&a| a).count(), 79);
}

#[test]
fn interval_refill_one_per_second_capacity_4_starting_with_1() {
    let (l, clock) = limiter("1/s; burst=4; initial=1; refill=interval");
    assert!(l.try_acquire(1).unwrap().allowed());
    clock.set(MS);
    let d = l.try_acquire(1).unwrap();
    assert!(!d.allowed());
    assert_eq!(d.retry_after(), Duration::from_millis(999));
    let mut got = Vec::new();
    for t in 4001..=4005 {
        clock.set(t * MS);
        got.push(l.try_acquire(1).unwrap().allowed());
    }
    assert_eq!(got, [true, true, true, true, false]);
    // The anchor moved by whole periods (to 4 s), so the next token is due at 5 s.
    assert_eq!(l.peek().unwrap().retry_after(), Duration::ZERO);
    assert_eq!(
        l.try_acquire(1).unwrap().retry_after(),
        Duration::from_millis(995)
    );
}

#[test]
fn fractional_accrual_two_per_second() {
    let (l, clock) = limiter("2/s; burst=1; initial=0");
    clock.set(250 * MS);
    let d = l.try_acquire(1).unwrap();
    assert!(!d.allowed(), "0.5 token after 250 ms");
    assert_eq!(d.retry_after(), Duration::from_millis(250));
    clock.set(500 * MS);
    assert!(l.try_acquire(1).unwrap().allowed());
}

#[test]
fn cost_above_capacity_is_an_error_not_a_rejection() {
    let (l, _) = limiter("10/s; burst=5");
    let err = l.try_acquire(6).unwrap_err();
    assert_eq!(err.code(), "insufficient_capacity");
    assert_eq!(
        err.to_string(),
        "cost 6 exceeds the capacity 5: the request can never be admitted"
    );
    assert_eq!(
        l.peek().unwrap().remaining(),
        5,
        "an error consumes nothing"
    );
}

#[test]
fn rejection_consumes_nothing_and_refund_is_capped() {
    let (l, _) = limiter("1/s; burst=3");
    assert!(l.try_acquire(2).unwrap().allowed());
    assert!(!l.try_acquire(2).unwrap().allowed());
    assert_eq!(l.peek().unwrap().remaining(), 1);
    l.refund(100).unwrap();
    assert_eq!(l.peek().unwrap().remaining(), 3);
    assert_eq!(l.peek().unwrap().reset_after(), Duration::ZERO);
}

#[test]
fn clock_going_backwards_never_refunds() {
    let (l, clock) = limiter("1/s; burst=2");
    clock.set(10 * S);
    assert!(l.try_acquire(2).unwrap().allowed());
    clock.set(5 * S); // backwards
    let d = l.try_acquire(1).unwrap();
    assert!(!d.allowed());
    assert_eq!(d.remaining(), 0);
    clock.set(10 * S + S / 2);
    assert!(!l.try_acquire(1).unwrap().allowed());
    clock.set(11 * S);
    assert!(l.try_acquire(1).unwrap().allowed());
}

#[test]
fn far_future_clock_is_a_typed_error_on_narrow_words() {
    let (l, clock) = limiter("10/s; burst=50");
    assert!(!l.is_wide());
    clock.set(u64::MAX);
    let err = l.try_acquire(1).unwrap_err();
    assert_eq!(err.code(), "clock_out_of_range");
    clock.set(sluicegate::CENTURY_NS);
    assert!(l.try_acquire(1).unwrap().allowed(), "a century is covered");
    // A wide word covers the whole u64 range.
    let (w, wclock) = limiter("999/s");
    assert!(w.is_wide());
    wclock.set(u64::MAX);
    assert!(w.try_acquire(1).unwrap().allowed());
}
