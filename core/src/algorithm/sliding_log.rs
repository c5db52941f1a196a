//! The sliding log: the exact record of admitted cost in the last window.
//!
//! A request `(t, c)` is admitted iff the cost admitted in `(t_e - W, t_e]` plus `c` is at most
//! `N`, where `t_e = max(t, the newest admission or the creation instant)`. Requests at the same
//! instant each count (a log of runs `(timestamp, units)`, not a set of timestamps).
//!
//! # Why a short critical section and not a ring of atomic slots
//!
//! An admission must read one entry (the one whose expiry decides it) and write up to `c`
//! entries plus the head, atomically with respect to every other admission: that is a
//! multi-word transaction. Lock-free rings for it need per-slot sequence numbers, a helping
//! protocol for half-written batches, and a separate proof for refunds racing admissions. A
//! mutex held for a few dozen instructions (no allocation once the log has grown, no system
//! call on the uncontended path) is simpler to prove and is confined to this algorithm: every
//! other algorithm keeps its one-word CAS. The lock is `std::sync::Mutex` (a futex: one
//! uncontended CAS to lock, one swap to unlock), swapped for loom's under `sluicegate_loom`
//! so the loom models explore it too. The critical section never panics, so it is never
//! poisoned; a poisoned lock is still entered (the log is consistent after every statement).
//!
//! The uncontended lock costs no more than the CAS loop (measured in docs/DESIGN-NOTES.md,
//! note 4). Under heavy contention the lock serialises where the CAS loop retries; both are
//! bounded by one cache line's traffic per decision.
//!
//! The keyed store (`store/memory/log.rs`) runs the same [`Log`] under its shard's lock instead of a
//! per-bucket one.
//!
//! Memory: at most `N` runs of 16 bytes per bucket (`N <= 2^20`, see
//! [`MAX_SLIDING_LOG`](crate::quota::MAX_SLIDING_LOG)); consecutive units at the same instant
//! share one run, so a steady stream of cost-`c` requests keeps `N / c` runs.

use crate::quota::Quota;
use crate::Decision;
use std::collections::VecDeque;

/// The parameters: `N` units per window of `W` ns.
#[derive(Clone, Debug)]
pub(crate) struct SlidingLog {
    n: u64,
    w: u64,
    window_s: u64,
}

impl SlidingLog {
    pub(crate) fn new(q: &Quota) -> Self {
        Self {
            n: q.count(),
            w: q.period_ns(),
            window_s: q.window_secs(),
        }
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.n
    }
}

/// One bucket's log: the decision, refund and fullness logic, on a log the caller owns and
/// guards (a single bucket's lock in the cell layer, a shard's lock in the keyed store).
#[derive(Clone, Debug)]
pub(crate) struct Log {
    /// Admitted units, oldest first: `(timestamp, units)`, timestamps non-decreasing.
    runs: VecDeque<(u64, u64)>,
    /// Units in `runs`.
    total: u64,
    /// The newest admission (or the creation instant): earlier readings are clamped to it.
    last: u64,
}

impl Log {
    /// An empty log created at `now` (allocates nothing until the first admission).
    pub(crate) fn new(now: u64) -> Self {
        Self {
            runs: VecDeque::new(),
            total: 0,
            last: now,
        }
    }

    /// `(runs, units)` at the front that have left the window `(t_e - W, t_e]`. Only an
    /// admission (which moves the clamp `last` to `t_e`) drops them: a later reading may be
    /// clamped to an earlier instant at which they still count.
    fn expired(&self, te: u64, w: u64) -> (usize, u64) {
        let mut units = 0;
        for (i, &(ts, u)) in self.runs.iter().enumerate() {
            if u128::from(ts) + u128::from(w) > u128::from(te) {
                return (i, units);
            }
            units += u;
        }
        (self.runs.len(), units)
    }

    fn newest_expiry(&self, te: u64, w: u64) -> u64 {
        self.runs.back().map_or(0, |&(ts, _)| {
            (u128::from(ts) + u128::from(w)).saturating_sub(u128::from(te)) as u64
        })
    }

    /// The decision for `cost` at `now`; admitted cost is recorded when `commit`.
    pub(crate) fn decide(&mut self, a: &SlidingLog, now: u64, cost: u64, commit: bool) -> Decision {
        let te = now.max(self.last);
        let (gone_runs, gone) = self.expired(te, a.w);
        let live = self.total - gone;
        if live + cost <= a.n {
            let after = live + cost;
            let reset = if after == 0 {
                0
            } else if cost > 0 {
                a.w // the newest admission is this one, at t_e
            } else {
                self.newest_expiry(te, a.w)
            };
            if commit && cost > 0 {
                self.runs.drain(..gone_runs);
                match self.runs.back_mut() {
                    Some((ts, units)) if *ts == te => *units += cost,
                    _ => self.runs.push_back((te, cost)),
                }
                self.total = after;
                self.last = te;
            }
            Decision::from_parts(true, a.n, a.n - after, 1, 0, reset, 1, a.window_s)
        } else {
            // The (live + c - N)-th oldest live unit must leave the window first.
            let mut need = live + cost - a.n;
            let mut expiry = te;
            for &(ts, units) in self.runs.iter().skip(gone_runs) {
                if units >= need {
                    expiry = ts;
                    break;
                }
                need -= units;
            }
            let retry = (u128::from(expiry) + u128::from(a.w) - u128::from(te)) as u64;
            let reset = self.newest_expiry(te, a.w);
            // A log carried into a smaller limit by a live reconfiguration may hold more than
            // `n` units until they leave the window: nothing remains then.
            let rem = a.n.saturating_sub(live);
            Decision::from_parts(false, a.n, rem, 1, retry, reset, 1, a.window_s)
        }
    }

    /// Removes up to `cost` units still in the window, newest first.
    pub(crate) fn refund(&mut self, a: &SlidingLog, now: u64, cost: u64) {
        let te = now.max(self.last);
        let live = self.total - self.expired(te, a.w).1;
        let mut left = cost.min(live);
        self.total -= left;
        while left > 0 {
            let Some(back) = self.runs.back_mut() else {
                break;
            };
            if back.1 > left {
                back.1 -= left;
                break;
            }
            left -= back.1;
            self.runs.pop_back();
        }
    }

    /// Whether the window holds nothing at `now`, and `now` is not before the newest
    /// admission (an earlier reading is clamped by this log but not by a new one).
    pub(crate) fn is_full(&self, a: &SlidingLog, now: u64) -> bool {
        now >= self.last && self.newest_expiry(now, a.w) == 0
    }

    /// The first instant from which the log is full: `is_full(now) == (now >= full_at())`
    /// for every `now < u64::MAX` (an admission only moves it later, a refund earlier).
    pub(crate) fn full_at(&self, a: &SlidingLog) -> u64 {
        let newest = self.runs.back().map_or(0, |&(ts, _)| {
            u64::try_from(u128::from(ts) + u128::from(a.w)).unwrap_or(u64::MAX)
        });
        self.last.max(newest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `full_at` is exactly the instant from which `is_full` holds, through admissions,
    /// refunds and backward readings (the keyed store's key-bound hint relies on it).
    #[test]
    fn full_at_is_where_is_full_starts() {
        let a = SlidingLog::new(&"4/s".parse().unwrap());
        let mut log = Log::new(1_000);
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let mut t = 1_000u64;
        for _ in 0..5_000 {
            t = (t + rnd(600_000_000)).saturating_sub(rnd(400_000_000));
            match rnd(3) {
                0 => log.refund(&a, t, rnd(3)),
                _ => {
                    log.decide(&a, t, rnd(5), true);
                }
            }
            let f = log.full_at(&a);
            for probe in [
                t,
                f.saturating_sub(1),
                f,
                f + 1,
                t.saturating_add(2_000_000_000),
            ] {
                assert_eq!(
                    log.is_full(&a, probe),
                    probe >= f,
                    "t={t} full_at={f} probe={probe}"
                );
            }
        }
    }
}
