//! Time sources. Every decision takes `now` as integer nanoseconds of a monotonic clock.
//!
//! * [`MonotonicClock`] (the default): the CPU's time-stamp counter, calibrated by `quanta`,
//!   scaled to nanoseconds since the first use in this process (or since a shared region's
//!   creation, for the shared-memory store); cheaper than `std::time::Instant::now` (figures in
//!   docs/ARCHITECTURE.md).
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

    /// What a store whose buckets several processes share (a shared-memory region) does with
    /// this clock (see [`Timeline`]). A clock of your own is taken as it is: its readings must
    /// then be comparable between the processes that share the store.
    #[doc(hidden)]
    fn timeline(&self) -> Timeline {
        Timeline::Own
    }

    /// Reads time through a shared region's base from now on (for [`Timeline::Local`]).
    #[doc(hidden)]
    fn adopt(&mut self, shared: &SharedTimeline) {
        let _ = shared;
    }

    /// Whether a reading of this clock and one of `other` are on one timeline (the parts of
    /// a composite limit, which reads one clock for all). `true` unless the clocks know
    /// otherwise: two default clocks through different shared regions' bases, or one through
    /// a region's and one through the process's; a default and a manual clock (manual clocks
    /// are the caller's: the first part's reading is taken for all).
    #[doc(hidden)]
    fn same_timeline(&self, other: &Self) -> bool
    where
        Self: Sized,
    {
        let _ = other;
        true
    }
}

/// What a clock's readings mean to other processes (see [`Clock::timeline`]).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeline {
    /// Readings the caller controls (a manual clock): used as they are.
    Own,
    /// Readings from a process-local origin that the clock can move to a shared one (the
    /// default clock): it adopts the region's.
    Local,
    /// Readings from a process-local origin that cannot be shared (`StdClock`,
    /// `CoarseClock`): refused by a shared store.
    Fixed,
}

/// A shared region's clock base, as a clock adopts it.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct SharedTimeline(pub(crate) ClockBase);

impl SharedTimeline {
    /// A reading through the base.
    pub(crate) fn read(&self) -> u64 {
        self.0.read()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }

    fn timeline(&self) -> Timeline {
        // A borrowed clock cannot move to a shared base.
        match (**self).timeline() {
            Timeline::Local => Timeline::Fixed,
            t => t,
        }
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }

    fn timeline(&self) -> Timeline {
        // A shared clock cannot move to a shared base for one of its owners.
        match (**self).timeline() {
            Timeline::Local => Timeline::Fixed,
            t => t,
        }
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    #[inline]
    fn now(&self) -> u64 {
        (**self).now()
    }

    fn timeline(&self) -> Timeline {
        (**self).timeline()
    }

    fn adopt(&mut self, shared: &SharedTimeline) {
        (**self).adopt(shared);
    }
}

/// The clock a [`Limiter`](crate::Limiter) uses unless told otherwise.
pub type DefaultClock = MonotonicClock;

/// How a [`MonotonicClock`] turns a reading into nanoseconds: the x86-64 time-stamp counter
/// with one fixed-point multiplier, or the OS's `CLOCK_MONOTONIC`, each from an origin. A
/// value that processes can share: a shared-memory region stores the base its creator chose,
/// and every process that opens it reads time through that one base, so their readings are
/// comparable (see `store/shm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ClockBase {
    /// `((rdtsc - origin) * mult) >> 64` nanoseconds.
    Tsc {
        /// The raw counter at the origin.
        origin: u64,
        /// Nanoseconds per tick as a 64-bit fixed-point fraction (the counter is faster
        /// than 1 GHz).
        mult: u64,
    },
    /// `CLOCK_MONOTONIC - origin` nanoseconds.
    Os {
        /// `CLOCK_MONOTONIC` at the origin, in nanoseconds.
        origin: u64,
    },
}

impl ClockBase {
    /// A base whose origin is now: the TSC with `quanta`'s calibration where `quanta` reads
    /// the x86-64 counter (and, when `shared`, where the kernel itself keeps time with it, so
    /// that the counters of every CPU agree), else the OS clock.
    pub(crate) fn now_base(shared: bool) -> Self {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            let mult = tsc_calibration();
            if mult != 0 && (!shared || kernel_keeps_time_with_tsc()) {
                return ClockBase::Tsc {
                    origin: raw_tsc(),
                    mult,
                };
            }
        }
        let _ = shared;
        ClockBase::Os {
            origin: os_monotonic_ns(),
        }
    }

    /// Nanoseconds since the origin (0 for a reading behind it: another core's counter).
    #[inline(always)]
    pub(crate) fn read(&self) -> u64 {
        match *self {
            ClockBase::Tsc { origin, mult } => tsc_nanos(raw_tsc(), origin, mult),
            ClockBase::Os { origin } => os_monotonic_ns().saturating_sub(origin),
        }
    }
}

/// The raw time-stamp counter (0 where there is none; a `Tsc` base is only made where there
/// is one). Under Miri, which cannot run `rdtsc`, nanoseconds of `Instant` stand in.
#[inline(always)]
fn raw_tsc() -> u64 {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        // SAFETY: `rdtsc` exists on every x86-64 CPU, reads no memory and has no
        // precondition (the intrinsic is `unsafe` only as a `core::arch` function).
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    {
        0
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds (`std::time::Instant` hides its value, which processes
/// must share). Under Miri and off Unix, `Instant` since a process-wide origin stands in.
fn os_monotonic_ns() -> u64 {
    #[cfg(all(unix, not(miri)))]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on the
        // Unix systems Rust supports, so the call cannot fail.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        (ts.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec as u64)
    }
    #[cfg(not(all(unix, not(miri))))]
    {
        u64::try_from(std_origin().elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Whether the kernel keeps time with the TSC (it checked that every CPU's counter agrees).
#[cfg(all(target_arch = "x86_64", not(miri)))]
fn kernel_keeps_time_with_tsc() -> bool {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .is_ok_and(|s| s.trim() == "tsc")
}

/// `quanta`'s calibration of the TSC as the multiplier `m` with
/// `delta_as_nanos(0, d) == (d * m) >> 64` for every tick count `d`; 0 where `quanta` does not
/// read the x86-64 counter. Calibrated once per process.
///
/// `quanta` converts ticks as `(d * F) >> S` (`S <= 63`). When `F < 2^S` (a counter faster
/// than 1 GHz), `m = F << (64 - S)` fits a `u64` and `(d * m) >> 64 == (d * F) >> S` exactly.
/// `m` is read off `quanta`'s own conversion: `F < 2^S` iff one tick converts to 0 ns, and then
/// `2^63` ticks convert to exactly `F << (63 - S)`. The OS-clock fallback converts one tick
/// to 1 ns, and gives 0.
#[cfg(all(target_arch = "x86_64", not(miri)))]
fn tsc_calibration() -> u64 {
    static MULT: real::OnceLock<u64> = real::OnceLock::new();
    *MULT.get_or_init(|| tsc_multiplier(&quanta::Clock::new()))
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
fn tsc_multiplier(clock: &quanta::Clock) -> u64 {
    if clock.delta_as_nanos(0, 1) != 0 {
        return 0;
    }
    let half = clock.delta_as_nanos(0, 1 << 63);
    if half == 0 || half >= 1 << 63 {
        return 0;
    }
    let m = half << 1;
    // The derivation above is exact; check it on a spread of tick counts anyway, and fall
    // back to the OS clock on any disagreement.
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
/// the origin (another core's TSC).
#[inline(always)]
fn tsc_nanos(raw: u64, origin: u64, m: u64) -> u64 {
    if raw <= origin {
        return 0;
    }
    ((u128::from(raw - origin) * u128::from(m)) >> 64) as u64
}

/// The default clock: the time-stamp counter, calibrated once per process by `quanta`, read
/// with `rdtsc` and one multiply, in nanoseconds since the first clock of this kind was made
/// in the process (all instances share that timeline); `CLOCK_MONOTONIC` where there is no
/// usable counter. A keyed limiter on a shared-memory store reads the region's clock instead:
/// the same kind of reading through the base its creator stored, so that every process sees
/// one timeline.
///
/// Reading the counter directly, rather than through `quanta`'s own conversion, costs the same
/// (docs/ARCHITECTURE.md has the side-by-side figures); what it buys is a calibration that can
/// be written down and shared between processes, which `quanta` keeps private.
#[derive(Clone)]
pub struct MonotonicClock {
    base: ClockBase,
}

impl MonotonicClock {
    /// A handle on the process-wide timeline (calibrated once, on first use).
    pub fn new() -> Self {
        static BASE: real::OnceLock<ClockBase> = real::OnceLock::new();
        Self {
            base: *BASE.get_or_init(|| ClockBase::now_base(false)),
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
        let kind = match self.base {
            ClockBase::Tsc { .. } => "tsc",
            ClockBase::Os { .. } => "os",
        };
        f.debug_struct("MonotonicClock")
            .field("source", &kind)
            .finish_non_exhaustive()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> u64 {
        self.base.read()
    }

    fn timeline(&self) -> Timeline {
        Timeline::Local
    }

    fn adopt(&mut self, shared: &SharedTimeline) {
        self.base = shared.0;
    }

    fn same_timeline(&self, other: &Self) -> bool {
        self.base == other.base
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

    fn timeline(&self) -> Timeline {
        Timeline::Fixed
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

    fn timeline(&self) -> Timeline {
        Timeline::Fixed
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

    fn timeline(&self) -> Timeline {
        match self {
            AnyClock::Monotonic(c) => c.timeline(),
            AnyClock::Manual(c) => c.timeline(),
        }
    }

    fn adopt(&mut self, shared: &SharedTimeline) {
        if let AnyClock::Monotonic(c) = self {
            c.adopt(shared);
        }
    }

    fn same_timeline(&self, other: &Self) -> bool {
        match (self, other) {
            (AnyClock::Monotonic(a), AnyClock::Monotonic(b)) => a.same_timeline(b),
            // Readings the caller sets: a composite takes the first part's for all.
            (AnyClock::Manual(_), AnyClock::Manual(_)) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_follow_real_time() {
        let c = MonotonicClock::new();
        // Each reading bracketed by the OS clock's: a thread preempted between the two clocks
        // widens the bracket instead of failing the test.
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let (t0, a, t1) = (Instant::now(), c.now(), Instant::now());
        std::thread::sleep(Duration::from_millis(100));
        let (t2, b, t3) = (Instant::now(), c.now(), Instant::now());
        // The counter may run a little off the OS clock's calibration; a tenth is plenty.
        let d = b.saturating_sub(a);
        let (inner, outer) = (ns(t2 - t1), ns(t3 - t0));
        assert!(
            d >= inner - inner / 10 && d <= outer + outer / 10,
            "{d} ns against {inner}..{outer} ns"
        );
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
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    fn a_clock_that_is_not_the_tsc_is_not_multiplied() {
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

    #[test]
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    fn the_tsc_reading_converts_exactly_as_quanta_does() {
        let q = quanta::Clock::new();
        let m = tsc_calibration();
        if m == 0 {
            return; // quanta reads the OS clock on this machine: nothing to compare
        }
        let origin = q.raw();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            for raw in [x, origin.wrapping_add(x >> 1), origin.wrapping_add(x >> 30)] {
                assert_eq!(
                    tsc_nanos(raw, origin, m),
                    q.delta_as_nanos(origin, raw),
                    "raw {raw:#x}"
                );
            }
        }
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
