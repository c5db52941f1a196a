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

/// The default clock: the time-stamp counter (via `quanta`, which detects and calibrates it,
/// and falls back to the OS's monotonic clock where there is no usable counter), in
/// nanoseconds since the first clock of this kind was made in the process. All instances share
/// one timeline. Under Miri, which cannot run `rdtsc`, it reads [`std::time::Instant`].
#[derive(Clone)]
pub struct MonotonicClock {
    #[cfg(not(miri))]
    clock: quanta::Clock,
    #[cfg(not(miri))]
    origin: u64,
    #[cfg(miri)]
    std: StdClock,
}

#[cfg(not(miri))]
fn tsc_base() -> &'static (quanta::Clock, u64) {
    static BASE: real::OnceLock<(quanta::Clock, u64)> = real::OnceLock::new();
    BASE.get_or_init(|| {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        (clock, origin)
    })
}

impl MonotonicClock {
    /// A handle on the process-wide timeline (calibrated once, on first use).
    pub fn new() -> Self {
        #[cfg(not(miri))]
        {
            let (clock, origin) = tsc_base();
            Self {
                clock: clock.clone(),
                origin: *origin,
            }
        }
        #[cfg(miri)]
        Self {
            std: StdClock::new(),
        }
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
        // A raw reading behind the origin (another core's counter) saturates to 0.
        #[cfg(not(miri))]
        return self.clock.delta_as_nanos(self.origin, self.clock.raw());
        #[cfg(miri)]
        return self.std.now();
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
    fn readings_follow_real_time() {
        let c = MonotonicClock::new();
        let (a, t) = (c.now(), Instant::now());
        std::thread::sleep(Duration::from_millis(20));
        let (b, elapsed) = (c.now(), t.elapsed());
        // The counter may run a little off the OS clock's calibration; a tenth is plenty.
        let d = b.saturating_sub(a);
        let e = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        assert!(d >= e - e / 10 && d <= e + e / 10, "{d} ns against {e} ns");
    }

    #[test]
    fn every_instance_shares_one_timeline() {
        let (a, b) = (MonotonicClock::new(), MonotonicClock::new());
        // Counting, not asserting each pair: a thread moved between cores mid-pair may see
        // another core's counter, which the invariant TSC keeps synchronised on real hardware
        // but a virtual machine may not.
        let ordered = (0..10_000).filter(|_| a.now() <= b.now()).count();
        assert!(ordered >= 9_000, "{ordered} of 10 000 pairs in order");
    }

    #[test]
    fn any_clock_reads_the_clock_it_holds() {
        let m = ManualClock::new(7);
        let c = AnyClock::new(Some(&m));
        m.advance_nanos(3);
        assert_eq!(c.now(), 10);
        assert!(c.manual().is_some() && AnyClock::default().manual().is_none());
    }
}
