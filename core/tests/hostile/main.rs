//! Hostile input, one test each (issue 9): every case gets a clear typed error or a correct
//! decision, never a panic, a hang or unbounded memory.

use sluicegate::{Error, KeyedLimiter, Limiter, ManualClock, OnFull, Quota, CENTURY_NS};

#[cfg(unix)]
mod shm;

fn manual(rate: &str) -> (Limiter<ManualClock>, ManualClock) {
    let clock = ManualClock::new(0);
    (
        Limiter::with_clock(rate.parse().unwrap(), clock.clone()).unwrap(),
        clock,
    )
}

#[test]
fn zero_rates_and_bursts_are_invalid_quotas() {
    for bad in ["0/s", "10/s; burst=0", "10/0s", "5/s; burst=5; initial=6"] {
        let e = bad.parse::<Quota>().unwrap_err();
        assert_eq!(e.code(), "invalid_quota", "{bad}: {e}");
    }
    assert_eq!(Quota::try_new(0, 1, 1).unwrap_err().code(), "invalid_quota");
    assert_eq!(Quota::try_new(1, 0, 1).unwrap_err().code(), "invalid_quota");
    assert_eq!(Quota::try_new(1, 1, 0).unwrap_err().code(), "invalid_quota");
}

#[test]
fn negative_fractional_and_non_numeric_rates_are_parse_errors() {
    for bad in [
        "-1/s",
        "1.5/s",
        "NaN/s",
        "inf/s",
        "1e3/s",
        "ten/s",
        "10/s; burst=-1",
        "10/s; burst=1.5",
    ] {
        let e = bad.parse::<Quota>().unwrap_err();
        assert_eq!(e.code(), "parse_error", "{bad}: {e}");
    }
}

#[test]
fn huge_rates_and_bursts_are_exact_or_refused() {
    // The largest counts parse and stay exact.
    let q: Quota = format!("{}/ns; burst={}", u64::MAX, u64::MAX >> 1)
        .parse()
        .unwrap();
    let l = Limiter::with_clock(q, ManualClock::new(0)).unwrap();
    assert!(l.try_acquire(u64::MAX >> 1).unwrap().allowed());
    // Numbers beyond u64 are parse errors; fills beyond 292 years are invalid quotas.
    assert_eq!(
        "18446744073709551616/s"
            .parse::<Quota>()
            .unwrap_err()
            .code(),
        "parse_error"
    );
    assert_eq!(
        "1/d; burst=1000000000".parse::<Quota>().unwrap_err().code(),
        "invalid_quota"
    );
    assert!("1/d; burst=1000000000"
        .parse::<Quota>()
        .unwrap_err()
        .to_string()
        .contains("would take over 292 years to fill"));
    // A burst too large for the state's units that fills in a nanosecond is not called slow.
    let e = format!("{}/ns", u64::MAX).parse::<Quota>().unwrap_err();
    assert_eq!(e.code(), "invalid_quota");
    let text = e.to_string();
    assert!(
        !text.contains("years") && text.contains("give a burst of at most 9223372036854775807"),
        "{text}"
    );
    // A token of 2^63 units or more: no burst would do, and none is advised.
    let e = "7/9223372036854775809ns; burst=1"
        .parse::<Quota>()
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("no burst can be counted exactly") && !text.contains("at most 0"),
        "{text}"
    );
    assert_eq!(
        format!("1/{}d", u64::MAX)
            .parse::<Quota>()
            .unwrap_err()
            .code(),
        "parse_error"
    );
}

#[test]
fn huge_costs_are_insufficient_capacity_not_overflow() {
    let (l, _) = manual("10/s; burst=50");
    for cost in [51, u64::MAX / 2, u64::MAX] {
        let e = l.try_acquire(cost).unwrap_err();
        assert!(
            matches!(e, Error::InsufficientCapacity { capacity: 50, .. }),
            "{e}"
        );
    }
    // A huge refund is capped at the burst.
    l.try_acquire(50).unwrap();
    l.refund(u64::MAX).unwrap();
    assert_eq!(l.peek().unwrap().remaining(), 50);
}

#[test]
fn junk_rate_strings_are_parse_errors_that_quote_the_text() {
    let long = "9".repeat(100_000) + "/s";
    let cases = [
        "",
        "   ",
        "/s",
        "10",
        "10/",
        "10/s;",
        "10/s; burst",
        "10/s; burst=",
        "10/s junk",
        "10/s; burst=5; burst=6",
        "10\u{0}/s",
        "10/s\u{7}",
        "\u{661}\u{660}/s",
        &long,
    ];
    for bad in cases {
        let e = bad.parse::<Quota>().unwrap_err();
        assert_eq!(e.code(), "parse_error", "{bad:?}: {e}");
        let text = e.to_string();
        assert!(text.starts_with("invalid rate"), "{text}");
    }
}

#[test]
fn empty_enormous_and_non_utf8_keys() {
    let clock = ManualClock::new(0);
    let keyed: KeyedLimiter<Vec<u8>, ManualClock> =
        KeyedLimiter::with_clock("1/s; burst=1".parse().unwrap(), clock).unwrap();
    let huge = vec![0xAB; 1 << 20];
    let keys: [&[u8]; 4] = [b"", &huge, b"\xff\xfe\x00\x80", b"\x00"];
    for key in keys {
        assert!(
            keyed.try_acquire(key, 1).unwrap().allowed(),
            "first use of {} bytes",
            key.len()
        );
        assert!(!keyed.try_acquire(key, 1).unwrap().allowed());
    }
    assert_eq!(keyed.len(), 4, "distinct keys never share a bucket");
    // A 1 MiB key that differs only in its last byte is another key.
    let mut other = huge.clone();
    *other.last_mut().unwrap() ^= 1;
    assert!(keyed.try_acquire(&other[..], 1).unwrap().allowed());
}

#[test]
fn a_flood_of_distinct_keys_stays_at_the_bound() {
    let clock = ManualClock::new(0);
    let keyed: KeyedLimiter<u64, ManualClock> = KeyedLimiter::builder("5/s".parse().unwrap())
        .max_keys(10_000)
        .on_full(OnFull::EvictFullest)
        .clock(clock.clone())
        .build()
        .unwrap();
    let n: u64 = if cfg!(debug_assertions) {
        300_000
    } else {
        10_000_000
    };
    for k in 0..n {
        keyed.try_acquire(&k, 1).unwrap();
        if k % 10_000 == 0 {
            assert!(keyed.len() <= 10_000, "len {} at key {k}", keyed.len());
        }
    }
    assert!(keyed.len() <= 10_000);
    assert!(
        keyed.capacity() <= 4 * 10_000,
        "table grew to {}",
        keyed.capacity()
    );
    // Rejecting new keys instead is a distinct, typed outcome.
    let strict: KeyedLimiter<u64, ManualClock> = KeyedLimiter::builder("5/s".parse().unwrap())
        .max_keys(100)
        .on_full(OnFull::RejectNewKeys)
        .clock(clock)
        .build()
        .unwrap();
    for k in 0..100 {
        strict.try_acquire(&k, 1).unwrap();
    }
    let e = strict.try_acquire(&1_000, 1).unwrap_err();
    assert!(matches!(e, Error::KeyStoreFull { max_keys: 100 }), "{e}");
}

#[test]
fn clock_jumping_backwards_never_admits_more() {
    let (l, clock) = manual("10/s; burst=10");
    clock.set(100 * 1_000_000_000);
    assert!(l.try_acquire(10).unwrap().allowed());
    for back in [1, 1_000, 1_000_000_000, 100 * 1_000_000_000] {
        clock.set(100 * 1_000_000_000 - back);
        assert!(!l.try_acquire(1).unwrap().allowed(), "back {back} ns");
    }
    clock.set(0);
    assert_eq!(l.peek().unwrap().remaining(), 0);
}

#[test]
fn clock_jumping_far_forwards_is_exact_or_a_typed_error() {
    let (l, clock) = manual("10/s; burst=10");
    clock.set(CENTURY_NS);
    assert_eq!(
        l.peek().unwrap().remaining(),
        10,
        "a century later the bucket is full"
    );
    clock.set(u64::MAX);
    assert!(matches!(
        l.try_acquire(1),
        Err(Error::ClockOutOfRange { .. })
    ));
    assert!(matches!(l.refund(1), Err(Error::ClockOutOfRange { .. })));
    // Every algorithm answers the same way at the end of the range.
    for rate in [
        "10/s; algorithm=gcra",
        "10/s; algorithm=fixed_window",
        "10/s; algorithm=sliding_window",
        "10/s; algorithm=sliding_log",
        "10/s; algorithm=leaky_queue",
        "10/s; refill=interval",
    ] {
        let (l, clock) = manual(rate);
        clock.set(CENTURY_NS);
        assert!(l.try_acquire(1).unwrap().allowed(), "{rate}");
        clock.set(u64::MAX);
        match l.try_acquire(1) {
            Ok(d) => assert!(d.limit() > 0, "{rate}"),
            Err(e) => assert_eq!(e.code(), "clock_out_of_range", "{rate}: {e}"),
        }
    }
}

#[test]
fn integer_edges_of_time_and_cost() {
    // Wide word: the whole u64 clock range is exact.
    let (w, clock) = manual("999/s; burst=3");
    assert!(w.is_wide());
    for t in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
        clock.set(t);
        let d = w.try_acquire(1).unwrap();
        assert!(d.remaining() <= 3);
    }
    // Cost 0 is a peek at every edge.
    let (l, clock) = manual("1/s; burst=1");
    clock.set(CENTURY_NS);
    assert!(l.try_acquire(0).unwrap().allowed());
    assert_eq!(l.peek().unwrap().remaining(), 1);
}

#[test]
fn error_messages_stay_short_for_enormous_input() {
    let junk = "x".repeat(1 << 20);
    let e = junk.parse::<Quota>().unwrap_err();
    let text = e.to_string();
    assert!(text.len() < 400, "{} bytes", text.len());
    assert!(text.contains("more bytes"), "{text}");
    // The whole input stays available to code that wants it.
    assert!(matches!(e, Error::Parse { ref input, .. } if input.len() == 1 << 20));
}

/// Bytes allocated and not yet freed by this thread (a global allocator that counts per
/// thread, so that tests running beside each other do not blur it).
mod live {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static LIVE: Cell<isize> = const { Cell::new(0) };
    }

    fn add(n: isize) {
        // A const thread-local without a destructor: usable at any point of a thread's life.
        let _ = LIVE.try_with(|c| c.set(c.get() + n));
    }

    pub fn bytes() -> isize {
        LIVE.with(Cell::get)
    }

    pub struct Counting;

    // SAFETY: every call is forwarded to the system allocator unchanged; only a thread-local
    // counter (no allocation) is updated beside it.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, l: Layout) -> *mut u8 {
            // SAFETY: the caller's contract for `alloc`, passed on.
            let p = unsafe { System.alloc(l) };
            if !p.is_null() {
                add(l.size() as isize);
            }
            p
        }

        unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
            // SAFETY: the caller's contract for `dealloc`, passed on.
            unsafe { System.dealloc(p, l) };
            add(-(l.size() as isize));
        }

        unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
            // SAFETY: the caller's contract for `realloc`, passed on.
            let q = unsafe { System.realloc(p, l, new) };
            if !q.is_null() {
                add(new as isize - l.size() as isize);
            }
            q
        }
    }
}

#[global_allocator]
static ALLOC: live::Counting = live::Counting;

/// A keyed limiter over one in-process store, named by its quota, and its clock.
type Subject = (
    &'static str,
    KeyedLimiter<Box<[u8]>, ManualClock>,
    ManualClock,
);

/// Keyed limiters over every in-process store: 64-bit words, 128-bit words, sliding logs.
fn every_memory_store(max_keys: usize) -> Vec<Subject> {
    [
        "1/s; burst=1",
        "999/s; burst=1",
        "1/s; algorithm=sliding_log",
    ]
    .into_iter()
    .map(|q| {
        let clock = ManualClock::new(0);
        let l = KeyedLimiter::builder(q.parse().unwrap())
            .max_keys(max_keys)
            .shards(4)
            .clock(clock.clone())
            .build()
            .unwrap();
        (q, l, clock)
    })
    .collect()
}

#[test]
fn a_ten_megabyte_key_costs_a_digest_not_ten_megabytes() {
    let huge = vec![0x5a; 10 << 20];
    for (q, l, _) in every_memory_store(1000) {
        l.try_acquire(b"warm".as_slice(), 1).unwrap();
        let before = live::bytes();
        assert!(l.try_acquire(&huge[..], 1).unwrap().allowed(), "{q}");
        assert!(
            !l.try_acquire(&huge[..], 1).unwrap().allowed(),
            "{q}: one bucket"
        );
        let cost = live::bytes() - before;
        // The digests' store (its shards and first table) and one 16-byte key.
        assert!(cost < 64 << 10, "{q}: a 10 MiB key cost {cost} bytes");
        assert_eq!(l.len(), 2, "{q}");
        // Listed keys are the keys as given; a digest is not one.
        let listed: Vec<Box<[u8]>> = l.snapshot().unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(listed, vec![b"warm".to_vec().into_boxed_slice()], "{q}");
        // Every operation finds the long key's bucket.
        assert_eq!(l.peek(&huge[..]).unwrap().remaining(), 0, "{q}");
        l.refund(&huge[..], 1).unwrap();
        assert_eq!(l.peek(&huge[..]).unwrap().remaining(), 1, "{q}");
        assert!(l.try_acquire(&huge[..], 1).unwrap().allowed(), "{q}");
        assert!(l.remove(&huge[..]).unwrap(), "{q}");
        assert!(!l.remove(&huge[..]).unwrap(), "{q}");
        assert_eq!(l.len(), 1, "{q}");
    }
}

#[test]
fn distinct_long_keys_are_distinct_buckets() {
    for (q, l, _) in every_memory_store(10_000) {
        let mut key = vec![7u8; 1000];
        for i in 0..1000u32 {
            key[996..].copy_from_slice(&i.to_le_bytes());
            assert!(
                l.try_acquire(&key[..], 1).unwrap().allowed(),
                "{q}: key {i}"
            );
            assert!(
                !l.try_acquire(&key[..], 1).unwrap().allowed(),
                "{q}: key {i}"
            );
        }
        assert_eq!(l.len(), 1000, "{q}");
        // The threshold: 64 bytes are kept as they are, 65 are digested.
        let at = [1u8; sluicegate::LONG_KEY_BYTES];
        let past = [1u8; sluicegate::LONG_KEY_BYTES + 1];
        l.try_acquire(&at[..], 1).unwrap();
        l.try_acquire(&past[..], 1).unwrap();
        let listed: Vec<usize> = l.snapshot().unwrap().iter().map(|(k, _)| k.len()).collect();
        assert_eq!(listed, vec![sluicegate::LONG_KEY_BYTES], "{q}");
        l.clear().unwrap();
        assert!(l.is_empty(), "{q}");
        assert!(
            l.try_acquire(&past[..], 1).unwrap().allowed(),
            "{q}: cleared"
        );
    }
}

#[test]
fn long_and_short_keys_share_the_key_bound() {
    let long = |i: u8| vec![i; 100];
    for (q, l, clock) in every_memory_store(4) {
        for i in 0..2u8 {
            l.try_acquire(&[i][..], 1).unwrap();
            l.try_acquire(&long(i)[..], 1).unwrap();
        }
        assert_eq!(l.len(), 4, "{q}");
        for refused in [vec![9u8], long(9)] {
            let e = l.try_acquire(&refused[..], 1).unwrap_err();
            assert!(matches!(e, Error::KeyStoreFull { max_keys: 4 }), "{q}: {e}");
        }
        // Every bucket full again: four new long keys (the digests' store evicts its own
        // full buckets first, then the short keys' store), then four short ones, then four
        // long ones, each time taking the other store's places.
        for (round, first) in [(0, 10u8), (1, 20), (2, 30)] {
            clock.advance_nanos(3_000_000_000);
            let key = |k: u8| if round == 1 { vec![k] } else { long(k) };
            for k in first..first + 4 {
                let d = l.try_acquire(&key(k)[..], 1).unwrap();
                assert!(d.allowed(), "{q}: {k}");
                assert!(l.len() <= 4, "{q}");
            }
            assert_eq!(l.len(), 4, "{q}");
            let listed = l.snapshot().unwrap().len();
            assert_eq!(listed, if round == 1 { 4 } else { 0 }, "{q}: round {round}");
        }
        clock.advance_nanos(3_000_000_000);
        assert_eq!(l.sweep().unwrap(), 4, "{q}");
        assert!(l.is_empty(), "{q}");
    }
}
