//! The seed documents' descriptions of each algorithm, as named tests with exact figures.

use sluicegate::composite::{try_acquire_all_at, Composite};
use sluicegate::{Algorithm, Limiter, ManualClock, Quota};
use std::time::{Duration, Instant};

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

fn limiter(rate: &str) -> (Limiter<ManualClock>, ManualClock) {
    let clock = ManualClock::new(0);
    let l = Limiter::with_clock(rate.parse::<Quota>().unwrap(), clock.clone()).unwrap();
    (l, clock)
}

fn admitted(l: &Limiter<ManualClock>, n: usize) -> usize {
    (0..n)
        .filter(|_| l.try_acquire(1).unwrap().allowed())
        .count()
}

#[test]
fn every_algorithm_is_selectable_by_name_and_builder() {
    for (name, algo) in [
        ("token_bucket", Algorithm::TokenBucket),
        ("gcra", Algorithm::Gcra),
        ("fixed_window", Algorithm::FixedWindow),
        ("sliding_window", Algorithm::SlidingWindow),
        ("sliding_log", Algorithm::SlidingLog),
        ("leaky_queue", Algorithm::LeakyQueue),
    ] {
        let q: Quota = format!("10/s; algorithm={name}").parse().unwrap();
        assert_eq!(q.algorithm(), algo);
        assert_eq!(q, "10/s".parse::<Quota>().unwrap().with_algorithm(algo));
        assert_eq!(q.to_string().parse::<Quota>().unwrap(), q);
        let (l, _) = limiter(&q.to_string());
        assert!(l.try_acquire(1).unwrap().allowed(), "{name}");
    }
    let q: Quota = "5/s; algorithm=leaky_queue; max_delay=250ms"
        .parse()
        .unwrap();
    assert_eq!(q.max_delay_ns(), 250 * MS);
    assert_eq!(q.to_string(), "5/s; algorithm=leaky_queue; max_delay=250ms");
}

#[test]
fn options_that_do_not_apply_are_errors() {
    for bad in [
        "10/s; burst=20; algorithm=fixed_window",
        "10/s; algorithm=sliding_window; initial=0",
        "10/s; algorithm=gcra; refill=interval",
        "10/s; max_delay=1s",
        "10/s; algorithm=sliding_log; burst=5",
        "2000000/s; algorithm=sliding_log",
    ] {
        let err = bad.parse::<Quota>().unwrap_err();
        assert_eq!(err.code(), "invalid_quota", "{bad}: {err}");
    }
    let err = "10/s; algorithm=bogus".parse::<Quota>().unwrap_err();
    assert_eq!(err.code(), "parse_error");
    assert!(err.to_string().contains("\"bogus\""), "{err}");
    let err = "10/s; algorithm=leaky_queue; max_delay=5"
        .parse::<Quota>()
        .unwrap_err();
    assert_eq!(err.code(), "parse_error");
}

// ---- GCRA ---------------------------------------------------------------------------------

/// The token bucket's worked example (capacity 5, 1/s, seven instant requests), run as GCRA.
#[test]
fn gcra_capacity_5_one_per_second_seven_instant_requests() {
    let (l, clock) = limiter("1/s; burst=5; algorithm=gcra");
    assert_eq!(admitted(&l, 7), 5);
    clock.advance(Duration::from_secs(2));
    assert_eq!(admitted(&l, 3), 2);
    let d = l.try_acquire(1).unwrap();
    assert_eq!(d.retry_after(), Duration::from_secs(1));
    assert_eq!(d.reset_after(), Duration::from_secs(5));
}

// ---- Fixed window -------------------------------------------------------------------------

/// The fixed window's known flaw: N at the end of one window and N at the start of the next
/// pass, 2N within a few milliseconds.
#[test]
fn fixed_window_admits_twice_the_limit_across_the_boundary() {
    let (l, clock) = limiter("10/s; algorithm=fixed_window");
    clock.set(999 * MS);
    assert_eq!(admitted(&l, 15), 10);
    let d = l.try_acquire(1).unwrap();
    assert_eq!(
        d.retry_after(),
        Duration::from_millis(1),
        "time to the next window"
    );
    assert_eq!(d.reset_after(), Duration::from_millis(1));
    clock.set(S);
    assert_eq!(admitted(&l, 15), 10, "10 more 1 ms later: 20 in 2 ms");
    assert_eq!(l.peek().unwrap().reset_after(), Duration::from_secs(1));
}

/// Windows are aligned to the clock's epoch, not to the limiter's creation.
#[test]
fn fixed_windows_are_aligned_to_the_clock_epoch() {
    let clock = ManualClock::new(2_500 * MS);
    let l = Limiter::with_clock(
        "3/s; algorithm=fixed_window".parse().unwrap(),
        clock.clone(),
    )
    .unwrap();
    assert_eq!(admitted(&l, 4), 3);
    assert_eq!(l.peek().unwrap().retry_after(), Duration::ZERO);
    assert_eq!(
        l.try_acquire(1).unwrap().retry_after(),
        Duration::from_millis(500)
    );
    clock.set(3 * S);
    assert_eq!(admitted(&l, 4), 3);
}

// ---- Sliding window counter ---------------------------------------------------------------

/// 25% into the current window the previous window weighs 75%: with 42 in the previous
/// minute and 18 in this one, the estimate at 15 s is 42 * 0.75 + 18 = 49.5 of 50.
#[test]
fn sliding_window_weighs_the_previous_window_75_percent_at_25_percent_in() {
    let (l, clock) = limiter("50/m; algorithm=sliding_window");
    clock.set(10 * S);
    assert!(l.try_acquire(42).unwrap().allowed());
    clock.set(75 * S);
    let d = l.try_acquire(18).unwrap();
    assert!(d.allowed(), "42 * 0.75 + 18 = 49.5 <= 50");
    assert_eq!(d.remaining(), 0, "floor(50 - 49.5)");
    let d = l.try_acquire(1).unwrap();
    assert!(!d.allowed(), "49.5 + 1 > 50");
    // 42 * (60 - e) / 60 + 19 <= 50  <=>  e >= 15.714285714... s
    assert_eq!(d.retry_after_nanos(), 714_285_715);
    clock.set(75 * S + 714_285_714);
    assert!(!l.try_acquire(1).unwrap().allowed(), "one ns early");
    clock.set(75 * S + 714_285_715);
    assert!(l.try_acquire(1).unwrap().allowed());
    // The current window's 19 weigh until the end of the next window.
    assert_eq!(
        l.peek().unwrap().reset_after_nanos(),
        180 * S - (75 * S + 714_285_715)
    );
}

/// Exact rational arithmetic: a third of the previous window's 3 requests is exactly 1.
#[test]
fn sliding_window_has_no_rounding() {
    let (l, clock) = limiter("3/3s; algorithm=sliding_window");
    assert!(l.try_acquire(3).unwrap().allowed());
    clock.set(5 * S); // 2/3 into the next window: 3 * 1/3 = 1 still counts
    assert_eq!(l.peek().unwrap().remaining(), 2);
    assert!(l.try_acquire(2).unwrap().allowed());
    assert!(!l.try_acquire(1).unwrap().allowed());
}

// ---- Sliding log --------------------------------------------------------------------------

/// The classic set-of-timestamps log loses requests made at the same instant; here each
/// one counts.
#[test]
fn sliding_log_counts_every_request_at_the_same_instant() {
    let (l, clock) = limiter("3/s; algorithm=sliding_log");
    clock.set(5 * MS);
    assert_eq!(
        admitted(&l, 5),
        3,
        "three at the same nanosecond, then full"
    );
    let d = l.try_acquire(1).unwrap();
    assert_eq!(d.retry_after(), Duration::from_secs(1));
    clock.set(S + 5 * MS - 1);
    assert!(!l.try_acquire(1).unwrap().allowed());
    clock.set(S + 5 * MS);
    assert_eq!(admitted(&l, 5), 3, "all three left the window together");
}

/// No boundary burst: the log admits N in any window of length W, wherever it lies.
#[test]
fn sliding_log_has_no_boundary_burst() {
    let (l, clock) = limiter("10/s; algorithm=sliding_log");
    clock.set(999 * MS);
    assert_eq!(admitted(&l, 15), 10);
    clock.set(S);
    assert_eq!(admitted(&l, 15), 0, "unlike the fixed window");
    clock.set(S + 999 * MS);
    assert_eq!(admitted(&l, 15), 10);
}

// ---- Leaky queue --------------------------------------------------------------------------

/// A burst is spread out: requests leave the queue at exactly the configured rate, and the
/// queue holds at most max_delay of work.
#[test]
fn leaky_queue_drains_at_a_constant_rate() {
    let (l, clock) = limiter("10/s; algorithm=leaky_queue; max_delay=1s");
    assert_eq!(l.peek().unwrap().limit(), 11, "1 now + 10 within a second");
    let mut slots = Vec::new();
    for _ in 0..15 {
        let d = l.reserve(1).unwrap();
        if d.allowed() {
            slots.push(d.retry_after_nanos());
        }
    }
    let expected: Vec<u64> = (0..=10).map(|i| i * 100 * MS).collect();
    assert_eq!(slots, expected, "one every 100 ms, 11 admitted");
    // Half a second later five have left: five more slots, still 100 ms apart.
    clock.set(500 * MS);
    let more: Vec<u64> = (0..7)
        .map(|_| l.reserve(1).unwrap())
        .filter(|d| d.allowed())
        .map(|d| 500 * MS + d.retry_after_nanos())
        .collect();
    let expected: Vec<u64> = (11..=15).map(|i| i * 100 * MS).collect();
    assert_eq!(more, expected);
    // A steady stream at twice the rate is shaped to the rate exactly.
    let (l, clock) = limiter("10/s; algorithm=leaky_queue; max_delay=10s");
    let mut last = 0;
    for j in 0..200u64 {
        clock.set(j * 50 * MS);
        let d = l.reserve(1).unwrap();
        assert!(d.allowed());
        let slot = j * 50 * MS + d.retry_after_nanos();
        if j > 0 {
            assert_eq!(slot - last, 100 * MS, "departures 100 ms apart");
        }
        last = slot;
    }
}

#[test]
fn leaky_queue_rejects_beyond_max_delay_and_cancel_gives_the_slot_back() {
    let (l, _) = limiter("4/s; algorithm=leaky_queue; max_delay=500ms");
    let waits: Vec<u64> = (0..3)
        .map(|_| l.reserve(1).unwrap().retry_after_nanos())
        .collect();
    assert_eq!(waits, [0, 250 * MS, 500 * MS]);
    let d = l.reserve(1).unwrap();
    assert!(!d.allowed());
    assert_eq!(
        d.retry_after(),
        Duration::from_millis(250),
        "until 750 ms fits the bound"
    );
    assert_eq!(d.remaining(), 0);
    l.cancel(1).unwrap();
    assert_eq!(l.reserve(1).unwrap().retry_after_nanos(), 500 * MS);
    let bounded = l.reserve_within(1, Duration::from_millis(100)).unwrap();
    assert!(!bounded.allowed(), "a bound below the queue's wait");
    assert_eq!(l.peek().unwrap().limit(), 3, "1 + floor(0.5 s * 4/s)");
    let err = l.reserve_within(4, Duration::ZERO).unwrap_err();
    assert_eq!(err.code(), "insufficient_capacity");
}

#[test]
fn blocking_acquire_waits_for_its_slot_within_max_wait() {
    let l = Limiter::new(
        "100/s; algorithm=leaky_queue; max_delay=50ms"
            .parse()
            .unwrap(),
    );
    let start = Instant::now();
    for _ in 0..3 {
        assert!(l.acquire(1, Duration::from_millis(50)).unwrap().allowed());
    }
    assert!(
        start.elapsed() >= Duration::from_millis(19),
        "{:?}",
        start.elapsed()
    );
    // A meter waits for tokens instead.
    let m = Limiter::new("100/s; burst=1".parse().unwrap());
    let start = Instant::now();
    assert!(m.acquire(1, Duration::from_millis(50)).unwrap().allowed());
    assert!(m.acquire(1, Duration::from_millis(50)).unwrap().allowed());
    assert!(start.elapsed() >= Duration::from_millis(9));
    // No wait allowed: refused where a token is due later (a minute later: a loaded machine
    // never lets it arrive meanwhile, as it could a token due 10 ms later).
    let m = Limiter::new("1/minute; burst=1".parse().unwrap());
    assert!(m.acquire(1, Duration::ZERO).unwrap().allowed());
    let d = m.acquire(1, Duration::ZERO).unwrap();
    assert!(!d.allowed(), "no wait allowed");
}

// ---- Composite ----------------------------------------------------------------------------

/// Per user, per tenant, global: consumed all-or-nothing; a partial success is refunded; the
/// decision reports the tightest remaining and the longest retry_after.
#[test]
fn composite_is_all_or_nothing_and_reports_the_tightest() {
    let clock = ManualClock::new(0);
    let make = |r: &str| Limiter::with_clock(r.parse().unwrap(), clock.clone()).unwrap();
    let user = make("5/s");
    let tenant = make("3/s; algorithm=fixed_window");
    let global = make("100/s; algorithm=sliding_log");
    let parts = [&user, &tenant, &global];
    let d = try_acquire_all_at(&parts, 0, 2).unwrap();
    assert!(d.allowed());
    assert_eq!((d.limit(), d.remaining()), (3, 1), "the tenant is tightest");
    assert_eq!(d.reset_after(), Duration::from_secs(1));
    let d = try_acquire_all_at(&parts, 0, 2).unwrap();
    assert!(!d.allowed(), "the tenant has 1 left");
    assert_eq!(
        d.retry_after(),
        Duration::from_secs(1),
        "the tenant's next window"
    );
    assert_eq!(
        user.peek().unwrap().remaining(),
        3,
        "the user's 2 were refunded"
    );
    assert_eq!(
        global.peek().unwrap().remaining(),
        98,
        "the global limit was not touched"
    );
    // A cost above any part's capacity is an error and consumes nothing.
    let err = try_acquire_all_at(&parts, 0, 4).unwrap_err();
    assert_eq!(err.code(), "insufficient_capacity");
    assert_eq!(user.peek().unwrap().remaining(), 3);
    let owned = Composite::new(vec![make("1/s"), make("1/s")]);
    assert!(owned.try_acquire(1).unwrap().allowed());
    assert!(!owned.try_acquire(1).unwrap().allowed());
}
