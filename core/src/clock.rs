//! Time sources. Every decision takes `now` as integer nanoseconds of a monotonic clock.
//!
//! * [`MonotonicClock`] (the default): the CPU's time-stamp counter through `quanta`, scaled to
//!   nanoseconds since the first use in this process. About 10 ns a reading here, against about
//!   24 ns for `std::time::Instant::now` (see `BENCHMARKS.md`).
//! * [`StdClock`]: `std::time::Instant`, for platforms or policies that prefer the OS clock.
//! * [`CoarseClock`]: a cached reading refreshed by a background thread (default every
//!   millisecond); one atomic load a decision. Decisions are then exact with respect to that
//!   reading, which lags real time by at most the refresh interval.
//! * [`ManualClock`]: advanced by hand, for tests and simulations.
//!
//! A TSC may not be monotonic across cores, and a manual clock may be set back. The limiter
//! clamps an earlier reading (see `docs/SEMANTICS.md`), so such a reading costs at most a
//! spurious rejection, never an extra admission.

use crate::sync::{real, Arc, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A monotonic source of nanoseconds.
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's origin.
    fn now(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }
}

/// The clock a [`Limiter`](crate::Limiter) uses unless told otherwise.
pub type DefaultClock = MonotonicClock;

struct TscBase {
    clock: quanta::Clock,
    origin: u64,
    /// `quanta`'s tick-to-nanosecond scale as one 64-bit fixed-point multiplier (see
    /// [`tsc_multiplier`]); 0 when this process reads time through `quanta` itself.
    mult: u64,
}

fn tsc_base() -> &'static TscBase {
    static BASE: real::OnceLock<TscBase> = real::OnceLock::new();
    BASE.get_or_init(|| {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        let mult = tsc_multiplier(&clock);
        TscBase {
            clock,
            origin,
            mult,
        }
    })
}

/// The multiplier `m` with `delta_as_nanos(0, d) == (d * m) >> 64` for every tick count `d`,
/// when `clock` reads the x86-64 time-stamp counter; else 0.
///
/// `quanta` converts ticks as `(d * F) >> S` (a 128-bit product, `S <= 63`), with a variable
/// shift around the multiply, behind two matches on its clock kind: 24 instructions a reading
/// on the limiter's hot path. When `F < 2^S` (a counter faster than 1 GHz), `m = F << (64 - S)`
/// fits a `u64` and `(d * m) >> 64 == (d * F) >> S` exactly, so one `rdtsc` and one multiply
/// give the very same nanoseconds. `m` is read off `quanta`'s own conversion: `F < 2^S` iff
/// one tick converts to 0 ns, and then `2^63` ticks convert to exactly `F << (63 - S)`. The
/// monotonic fallback (no invariant TSC) converts one tick to 1 ns, and keeps `quanta`.
fn tsc_multiplier(clock: &quanta::Clock) -> u64 {
    if !cfg!(target_arch = "x86_64") || clock.delta_as_nanos(0, 1) != 0 {
        return 0;
    }
    let half = clock.delta_as_nanos(0, 1 << 63);
    if half == 0 || half >= 1 << 63 {
        return 0;
    }
    let m = half << 1;
    // The derivation above is exact; check it on a spread of tick counts anyway, and keep
    // `quanta` on any disagreement.
    let agrees = (0..64)
        .flat_map(|b| [1u64 << b, (1u64 << b) | 0x5555_5555_5555_5555 >> (63 - b)])
        .chain([0x1234_5678_9abc, 0x0fed_cba9_8765_4321, u64::MAX >> 1])
        .all(|d| clock.delta_as_nanos(0, d) == tsc_nanos(d, 0, m));
    if agrees {
        m
    } else {
        0
    }
}

/// Nanoseconds from `origin` to `raw` ticks with multiplier `m`; 0 for a reading at or behind
/// the origin (another core's TSC), as `quanta::Clock::delta_as_nanos` does.
#[inline(always)]
fn tsc_nanos(raw: u64, origin: u64, m: u64) -> u64 {
    if raw <= origin {
        return 0;
    }
    ((u128::from(raw - origin) * u128::from(m)) >> 64) as u64
}

/// The default clock: the time-stamp counter (via `quanta`), in nanoseconds since the first
/// clock of this kind was made in the process. All instances share one timeline.
///
/// `quanta` detects the counter and calibrates it; where it reads the x86-64 TSC, a reading
/// here is `rdtsc` and one multiply giving exactly `quanta`'s nanoseconds (see
/// [`tsc_multiplier`]), and `quanta`'s own path otherwise.
#[derive(Clone)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    origin: u64,
    mult: u64,
}

impl MonotonicClock {
    /// A handle on the process-wide TSC timeline (calibrated once, on first use).
    pub fn new() -> Self {
        let base = tsc_base();
        Self {
            clock: base.clock.clone(),
            origin: base.origin,
            mult: base.mult,
        }
    }

    /// Whether readings take the direct `rdtsc` path (else `quanta`'s).
    #[cfg(test)]
    fn direct(&self) -> bool {
        self.mult != 0
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl core::fmt::Debug for MonotonicClock {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MonotonicClock").finish_non_exhaustive()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if self.mult != 0 {
            // `mult` is non-zero only where `quanta` reads this very counter (`_rdtsc`).
            // SAFETY: `rdtsc` exists on every x86-64 CPU, reads no memory and has no
            // precondition (the intrinsic is `unsafe` only as a `core::arch` function).
            let raw = unsafe { core::arch::x86_64::_rdtsc() };
            return tsc_nanos(raw, self.origin, self.mult);
        }
        // Elsewhere `mult` is always 0 (see `tsc_multiplier`).
        #[cfg(not(target_arch = "x86_64"))]
        let _ = self.mult;
        // A raw reading behind the origin (another core's TSC) saturates to 0.
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }
}

fn std_origin() -> Instant {
    static ORIGIN: real::OnceLock<Instant> = real::OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// `std::time::Instant`, in nanoseconds since the first `StdClock` of the process.
#[derive(Clone, Copy, Debug)]
pub struct StdClock {
    origin: Instant,
}

impl StdClock {
    /// A handle on the process-wide `Instant` timeline.
    pub fn new() -> Self {
        Self {
            origin: std_origin(),
        }
    }
}

impl Default for StdClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for StdClock {
    #[inline]
    fn now(&self) -> u64 {
        let d = Instant::now().saturating_duration_since(self.origin);
        u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
    }
}

static COARSE_NOW: real::AtomicU64 = real::AtomicU64::new(0);
static COARSE_STARTED: real::AtomicBool = real::AtomicBool::new(false);

/// A cached reading of [`MonotonicClock`], refreshed by one background thread per process.
///
/// A reading is one atomic load. It lags real time by at most the refresh interval, so a
/// decision may report a `retry_after` up to one interval early or late; it never admits more
/// than the quota allows against the clock it reads.
#[derive(Clone, Copy, Debug)]
pub struct CoarseClock {
    _private: (),
}

impl CoarseClock {
    /// Starts (once per process) the refresh thread with a 1 ms interval.
    pub fn new() -> Self {
        Self::with_interval(Duration::from_millis(1))
    }

    /// Starts (once per process) the refresh thread with the given interval. The interval of
    /// the first call wins.
    pub fn with_interval(interval: Duration) -> Self {
        if !COARSE_STARTED.swap(true, real::Ordering::AcqRel) {
            let mono = MonotonicClock::new();
            COARSE_NOW.store(mono.now(), real::Ordering::Release);
            std::thread::Builder::new()
                .name("sluicegate-coarse-clock".into())
                .spawn(move || loop {
                    COARSE_NOW.fetch_max(mono.now(), real::Ordering::AcqRel);
                    std::thread::sleep(interval);
                })
                .expect("spawn the coarse clock thread");
        }
        Self { _private: () }
    }
}

impl Default for CoarseClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> u64 {
        COARSE_NOW.load(real::Ordering::Acquire)
    }
}

/// A clock that only moves when told to. Clones share one reading.
///
/// ```
/// use sluicegate::{Clock, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new(0);
/// clock.advance(Duration::from_millis(250));
/// assert_eq!(clock.now(), 250_000_000);
/// ```
#[derive(Clone, Debug)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `start` nanoseconds.
    pub fn new(start: u64) -> Self {
        Self {
            nanos: Arc::new(AtomicU64::new(start)),
        }
    }

    /// Sets the reading (it may go backwards: the limiter clamps).
    pub fn set(&self, nanos: u64) {
        self.nanos.store(nanos, Ordering::Release);
    }

    /// Moves the reading forward, saturating at `u64::MAX`.
    pub fn advance(&self, by: Duration) {
        self.advance_nanos(u64::try_from(by.as_nanos()).unwrap_or(u64::MAX));
    }

    /// Moves the reading forward by `nanos`, saturating at `u64::MAX`.
    pub fn advance_nanos(&self, nanos: u64) {
        let mut cur = self.nanos.load(Ordering::Acquire);
        loop {
            let new = cur.saturating_add(nanos);
            match self
                .nanos
                .compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new(0)
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        self.nanos.load(Ordering::Acquire)
    }
}

/// A clock chosen at run time: the default clock, or a manual one (what the bindings offer,
/// where a limiter's clock is an argument rather than a type). An enum rather than
/// `Box<dyn Clock>`: one predictable branch, no call through a pointer on the hot path.
#[derive(Clone, Debug)]
pub enum AnyClock {
    /// The default clock ([`MonotonicClock`]).
    Monotonic(MonotonicClock),
    /// A clock set by hand.
    Manual(ManualClock),
}

impl AnyClock {
    /// The default clock, or `manual` when given.
    pub fn new(manual: Option<&ManualClock>) -> Self {
        match manual {
            Some(m) => AnyClock::Manual(m.clone()),
            None => AnyClock::Monotonic(MonotonicClock::new()),
        }
    }

    /// The manual clock, if that is what this is.
    pub fn manual(&self) -> Option<&ManualClock> {
        match self {
            AnyClock::Manual(m) => Some(m),
            AnyClock::Monotonic(_) => None,
        }
    }
}

impl Default for AnyClock {
    fn default() -> Self {
        AnyClock::Monotonic(MonotonicClock::new())
    }
}

impl Clock for AnyClock {
    #[inline]
    fn now(&self) -> u64 {
        match self {
            AnyClock::Monotonic(c) => c.now(),
            AnyClock::Manual(c) => c.now(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_direct_reading_converts_exactly_as_quanta_does() {
        let base = tsc_base();
        if base.mult == 0 {
            // quanta reads the OS clock here (or a counter at 1 GHz or slower): nothing to
            // compare, and `now` goes through quanta.
            assert!(!cfg!(target_arch = "x86_64") || base.clock.delta_as_nanos(0, 1) != 0);
            return;
        }
        assert!(MonotonicClock::new().direct());
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Raw readings around the origin, near it, and far past it (up to 2^63 ticks).
            for raw in [
                x,
                base.origin.wrapping_add(x >> 1),
                base.origin.wrapping_add(x >> 30),
                base.origin.wrapping_sub(x >> 40),
            ] {
                assert_eq!(
                    tsc_nanos(raw, base.origin, base.mult),
                    base.clock.delta_as_nanos(base.origin, raw),
                    "raw {raw:#x}"
                );
            }
        }
    }

    #[test]
    fn a_reading_lies_between_quanta_readings_taken_around_it() {
        let c = MonotonicClock::new();
        let base = tsc_base();
        let q = || base.clock.delta_as_nanos(base.origin, base.clock.raw());
        // On one core the three readings are ordered. Counting, not asserting each: a thread
        // moved between cores mid-triple may see another core's TSC, which the invariant TSC
        // keeps synchronised on real hardware but a virtual machine may not.
        let within = (0..10_000)
            .filter(|_| {
                let (a, n, b) = (q(), c.now(), q());
                a <= n && n <= b
            })
            .count();
        assert!(
            within >= 9_000,
            "{within} of 10 000 readings between quanta's"
        );
    }

    #[test]
    fn a_clock_that_is_not_the_tsc_keeps_quanta() {
        // quanta's mock converts ticks one to one, as its OS-clock fallback does.
        let (mock, _) = quanta::Clock::mock();
        assert_eq!(tsc_multiplier(&mock), 0);
    }

    #[test]
    fn the_multiplier_is_exact_for_every_shift_of_a_fast_counter() {
        // `(d * F) >> S` with F < 2^S, as quanta computes it, against `(d * m) >> 64`.
        for s in 1..=63u32 {
            for f in [1u64, 3, (1 << s) / 3 + 1, (1u64 << s) - 1] {
                if f >= 1 << s {
                    continue;
                }
                let quanta = |d: u64| ((u128::from(d) * u128::from(f)) >> s) as u64;
                let half = quanta(1 << 63);
                assert!(half < 1 << 63 && quanta(1) == 0);
                let m = half << 1;
                for d in [1u64, 2, 0x1234_5678, 1 << 40, u64::MAX >> 1, u64::MAX] {
                    assert_eq!(tsc_nanos(d, 0, m), quanta(d), "s {s} f {f} d {d:#x}");
                }
            }
        }
    }
}
