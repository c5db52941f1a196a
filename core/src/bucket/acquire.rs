//! The acquire planner: the one wait policy of every blocking and async `acquire`, in every
//! language. A binding keeps only its sleep primitive (a thread sleep with the GIL released, a
//! timer, `nanosleep`); what to reserve, how long to wait and when to give up are decided
//! here.
//!
//! # The policy
//!
//! `acquire(cost, max_wait)` starts at the limiter's clock reading `s`; its deadline is
//! `s + max_wait` (saturating: a `max_wait` of [`Duration::MAX`] waits as long as needed). Each
//! round, at the clock's reading `t`, reserves `cost` admitted only with a wait of at most
//! `left = deadline - t` (a leaky queue's slot; every other algorithm admits now or not at
//! all), then:
//!
//! * admitted: [`Next::Admit`]. The caller waits the decision's `retry_after` (the queue
//!   slot's delay, zero for the other algorithms; zero as well for a request that shadow
//!   mode let through: [`Next::wait`]) and goes ahead. A caller whose wait is
//!   interrupted gives the cost back (`cancel`) before reporting the interruption.
//! * rejected, and the algorithm is a queue (waiting only brings its slot and the deadline
//!   closer together) or `retry_after > left`: [`Next::Reject`], the outcome (a value, not an
//!   error).
//! * rejected otherwise: [`Next::Retry`]: sleep `retry_after` and poll again.
//!
//! A round whose reading is not later than the previous round's (a clock that does not follow
//! real time, such as a [`ManualClock`](crate::ManualClock) that nobody advances while the
//! caller sleeps) gives the previous rejection as the outcome instead of sleeping forever.

use crate::{Decision, Error};
use std::time::Duration;

/// What an acquire does next (see the [module](self) documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Admitted: wait `retry_after()` (non-zero only for a leaky queue's slot), then go ahead.
    /// If that wait is interrupted, give the cost back (`cancel`).
    Admit(Decision),
    /// Not admitted within the deadline: this rejection is the outcome.
    Reject(Decision),
    /// Sleep `retry_after()`, then poll again.
    Retry(Decision),
}

impl Next {
    /// The decision this step carries.
    pub const fn decision(&self) -> Decision {
        match *self {
            Next::Admit(d) | Next::Reject(d) | Next::Retry(d) => d,
        }
    }

    /// How long the caller sleeps before its next step: an admission's `retry_after` (a leaky
    /// queue's slot), except one that shadow mode let through (which goes ahead at once); a
    /// retry's `retry_after`; zero for a rejection. What `acquire` sleeps, in every binding.
    pub const fn wait(&self) -> Duration {
        match *self {
            Next::Admit(d) if d.shadow_rejected() => Duration::ZERO,
            Next::Admit(d) | Next::Retry(d) => d.retry_after(),
            Next::Reject(_) => Duration::ZERO,
        }
    }
}

/// The state of one acquire between its rounds: made by a limiter's `start_acquire`, advanced
/// by its `poll_acquire`. `Copy`, so a binding can keep it wherever its waits live.
#[derive(Clone, Copy, Debug)]
pub struct AcquirePlan {
    cost: u64,
    deadline: u64,
    queue: bool,
    /// The previous round's reading and rejection, if any.
    last: Option<(u64, Decision)>,
}

impl AcquirePlan {
    /// A plan for `cost` starting at the reading `now`. `queue`: the algorithm is a leaky
    /// queue.
    pub(crate) fn new(now: u64, cost: u64, max_wait: Duration, queue: bool) -> Self {
        let max_wait = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        Self {
            cost,
            deadline: now.saturating_add(max_wait),
            queue,
            last: None,
        }
    }

    /// The cost being acquired.
    pub const fn cost(&self) -> u64 {
        self.cost
    }

    /// The deadline, as a reading of the limiter's clock (`u64::MAX`: none).
    pub const fn deadline(&self) -> u64 {
        self.deadline
    }

    /// One round at the reading `now`. `reserve(now, left)` reserves the plan's cost at `now`,
    /// admitted only with a wait of at most `left` nanoseconds (a limiter's `reserve_within`).
    pub(crate) fn poll(
        &mut self,
        now: u64,
        reserve: impl FnOnce(u64, u64) -> Result<Decision, Error>,
    ) -> Result<Next, Error> {
        if let Some((then, d)) = self.last {
            if now <= then {
                return Ok(Next::Reject(d));
            }
        }
        let left = self.deadline.saturating_sub(now);
        let d = reserve(now, left)?;
        if d.allowed() {
            return Ok(Next::Admit(d));
        }
        if self.queue || d.retry_after_nanos() > left {
            return Ok(Next::Reject(d));
        }
        self.last = Some((now, d));
        Ok(Next::Retry(d))
    }
}

/// Runs a plan to its outcome with a blocking sleep: what `acquire` does in Rust and C.
pub(crate) fn block_on(mut poll: impl FnMut() -> Result<Next, Error>) -> Result<Decision, Error> {
    loop {
        let next = poll()?;
        if !next.wait().is_zero() {
            std::thread::sleep(next.wait());
        }
        match next {
            Next::Admit(d) | Next::Reject(d) => return Ok(d),
            Next::Retry(_) => {}
        }
    }
}

/// Runs a plan to its outcome with tokio's timer. Dropping the future while a leaky queue's
/// slot is pending does not give the slot back (call `cancel` for that).
#[cfg(feature = "tokio")]
pub(crate) async fn sleep_on(
    mut poll: impl FnMut() -> Result<Next, Error>,
) -> Result<Decision, Error> {
    loop {
        let next = poll()?;
        if !next.wait().is_zero() {
            tokio::time::sleep(next.wait()).await;
        }
        match next {
            Next::Admit(d) | Next::Reject(d) => return Ok(d),
            Next::Retry(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rejected(retry: u64) -> Decision {
        Decision::from_figures(false, 1, 0, retry, retry, 1)
    }

    #[test]
    fn retries_while_the_wait_fits_and_gives_up_when_it_does_not() {
        let mut p = AcquirePlan::new(100, 1, Duration::from_nanos(50), false);
        let next = p.poll(100, |_, left| {
            assert_eq!(left, 50);
            Ok(rejected(30))
        });
        assert_eq!(next.unwrap(), Next::Retry(rejected(30)));
        let next = p.poll(130, |_, left| {
            assert_eq!(left, 20);
            Ok(rejected(30))
        });
        assert_eq!(next.unwrap(), Next::Reject(rejected(30)));
    }

    #[test]
    fn a_clock_that_did_not_move_gives_the_last_rejection() {
        let mut p = AcquirePlan::new(0, 1, Duration::MAX, false);
        assert!(matches!(
            p.poll(0, |_, _| Ok(rejected(5))),
            Ok(Next::Retry(_))
        ));
        let again = p.poll(0, |_, _| {
            unreachable!("no second reservation at the same reading")
        });
        assert_eq!(again.unwrap(), Next::Reject(rejected(5)));
    }

    #[test]
    fn a_queue_never_retries() {
        let mut p = AcquirePlan::new(0, 1, Duration::from_secs(1), true);
        assert_eq!(
            p.poll(0, |_, _| Ok(rejected(5))).unwrap(),
            Next::Reject(rejected(5))
        );
    }
}
