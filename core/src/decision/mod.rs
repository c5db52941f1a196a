//! The answer to a request, identical in every binding, and ([`http`]) its HTTP fields.

pub mod http;

use core::fmt;
use std::time::Duration;

/// The outcome of a request: allowed or not, and the numbers a client needs.
///
/// Every figure is exact (see `docs/SEMANTICS.md`). The hot path stores the integer numerators
/// the algorithm already has and divides only when a figure is read, so a caller that only asks
/// [`allowed`](Self::allowed) pays for no division.
#[derive(Clone, Copy)]
pub struct Decision {
    allowed: bool,
    shadow: bool,
    limit: u64,
    rem_num: u64,
    rem_den: u64,
    retry_num: u64,
    reset_num: u64,
    time_den: u64,
    window_s: u64,
}

impl Decision {
    /// Assembles a decision from an algorithm's exact quantities: `remaining =
    /// floor(rem_num / rem_den)`, `retry_after = ceil(retry_num / time_den)` ns and
    /// `reset_after = ceil(reset_num / time_den)` ns. Denominators must be non-zero.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) const fn from_parts(
        allowed: bool,
        limit: u64,
        rem_num: u64,
        rem_den: u64,
        retry_num: u64,
        reset_num: u64,
        time_den: u64,
        window_s: u64,
    ) -> Self {
        Self {
            allowed,
            shadow: false,
            limit,
            rem_num,
            rem_den,
            retry_num,
            reset_num,
            time_den,
            window_s,
        }
    }

    /// A decision from its exact figures (nanoseconds), e.g. to render HTTP fields for figures
    /// that crossed a language boundary. `window_s` is the policy window in whole seconds.
    pub const fn from_figures(
        allowed: bool,
        limit: u64,
        remaining: u64,
        retry_after_ns: u64,
        reset_after_ns: u64,
        window_s: u64,
    ) -> Self {
        Self::from_parts(
            allowed,
            limit,
            remaining,
            1,
            retry_after_ns,
            reset_after_ns,
            1,
            window_s,
        )
    }

    /// Whether the request was admitted (or, in shadow mode, let through: see
    /// [`shadow_rejected`](Self::shadow_rejected)).
    #[inline]
    pub const fn allowed(&self) -> bool {
        self.allowed
    }

    /// Whether the limiter, in shadow (dry-run) mode, let through a request it would have
    /// rejected: `allowed()` is then true, and the other figures are the rejection's
    /// (`remaining`, and `retry_after`, the wait enforcement would have asked for). Shadow
    /// mode decides and records exactly as enforcement does: an admitted request consumes,
    /// a would-be rejection writes nothing.
    ///
    /// ```
    /// use sluicegate::{Limiter, ManualClock};
    /// use std::time::Duration;
    ///
    /// let limiter = Limiter::builder("1/s".parse()?).clock(ManualClock::new(0)).shadow(true).build()?;
    /// assert!(!limiter.try_acquire(1)?.shadow_rejected());
    /// let d = limiter.try_acquire(1)?;
    /// assert!(d.allowed() && d.shadow_rejected());
    /// assert_eq!(d.retry_after(), Duration::from_secs(1));
    /// # Ok::<(), sluicegate::Error>(())
    /// ```
    #[inline]
    pub const fn shadow_rejected(&self) -> bool {
        self.shadow
    }

    /// This rejection as shadow mode returns it: let through, flagged.
    #[inline]
    pub(crate) const fn into_shadow(self) -> Self {
        self.shadow_if(true)
    }

    /// This decision as a shadow limiter returns a rejection: allowed, flagged
    /// [`shadow_rejected`](Self::shadow_rejected), its figures unchanged. With
    /// [`from_figures`](Self::from_figures) of a rejection, rebuilds a shadow decision whose
    /// figures crossed a language boundary. (Of an admission it makes a decision no limiter
    /// returns: one flagged as a would-be rejection with an admission's figures.)
    ///
    /// ```
    /// use sluicegate::Decision;
    ///
    /// let d = Decision::from_figures(false, 10, 0, 1_000, 5_000, 60).shadowed();
    /// assert!(d.allowed() && d.shadow_rejected() && d.retry_after_nanos() == 1_000);
    /// ```
    #[inline]
    #[must_use]
    pub const fn shadowed(self) -> Self {
        self.shadow_if(true)
    }

    /// This rejection as shadow mode returns it when `on` (branch-free), else unchanged.
    #[inline(always)]
    pub(crate) const fn shadow_if(mut self, on: bool) -> Self {
        self.allowed |= on;
        self.shadow = on;
        self
    }

    /// The bucket's capacity.
    #[inline]
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// Whole tokens left after this decision.
    #[inline]
    pub const fn remaining(&self) -> u64 {
        self.rem_num / self.rem_den
    }

    /// The least wait before the same request would be admitted; zero when allowed, except
    /// for a [`LeakyQueue`](crate::Algorithm::LeakyQueue) admission, where it is the delay
    /// until the request's slot (the caller goes ahead only after it).
    #[inline]
    pub const fn retry_after_nanos(&self) -> u64 {
        // After the gcd reduction the denominator is usually 1: skip the division then.
        if self.time_den == 1 {
            self.retry_num
        } else {
            self.retry_num.div_ceil(self.time_den)
        }
    }

    /// [`retry_after_nanos`](Self::retry_after_nanos) as a `Duration`.
    #[inline]
    pub const fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.retry_after_nanos())
    }

    /// Time until the bucket is full again (zero when it is full).
    #[inline]
    pub const fn reset_after_nanos(&self) -> u64 {
        if self.time_den == 1 {
            self.reset_num
        } else {
            self.reset_num.div_ceil(self.time_den)
        }
    }

    /// [`reset_after_nanos`](Self::reset_after_nanos) as a `Duration`.
    #[inline]
    pub const fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_nanos())
    }

    /// The policy window in whole seconds (`w` of the IETF `RateLimit-Policy` field).
    #[inline]
    pub const fn window_secs(&self) -> u64 {
        self.window_s
    }
}

impl PartialEq for Decision {
    fn eq(&self, other: &Self) -> bool {
        self.allowed == other.allowed
            && self.shadow == other.shadow
            && self.limit == other.limit
            && self.remaining() == other.remaining()
            && self.retry_after_nanos() == other.retry_after_nanos()
            && self.reset_after_nanos() == other.reset_after_nanos()
    }
}

impl Eq for Decision {}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("shadow_rejected", &self.shadow)
            .field("limit", &self.limit)
            .field("remaining", &self.remaining())
            .field("retry_after", &self.retry_after())
            .field("reset_after", &self.reset_after())
            .finish()
    }
}
