//! The insert lock of a shared-memory region: the one step of the store that is not a single
//! compare-and-swap (a new key's look-again-then-claim must not run twice at once for one
//! key), made safe against a process killed while holding it.
//!
//! A lock is one 64-bit word: 0 when free, else its holder's process token (`pid << 32` and
//! the low 32 bits of the process's start time, so that a pid the kernel has reused is not
//! mistaken for the holder). Threads of one process hold it in turn like any spin lock. A
//! waiter that has waited a while checks whether the holder's process still exists
//! (`kill(pid, 0)`, and its start time in `/proc`); if not, it takes the lock over with a
//! CAS from the dead token. Nothing needs repair after that: the critical section's only
//! writes are single CASes of slots and monotone raises of a reach, each of which either
//! happened or did not, and the next holder looks again before it claims.
//!
//! A holder that is alive but stopped (SIGSTOP, a debugger) keeps new keys of its locks'
//! homes waiting; a waiter gives up after [`WAIT`] with [`StoreErrorKind::Timeout`].

use crate::error::Error;
#[cfg(not(sluicegate_loom))]
use crate::error::StoreErrorKind;
use crate::sync::{AtomicU64, Ordering};
#[cfg(not(sluicegate_loom))]
use std::time::{Duration, Instant};

/// How long a waiter waits for a live holder before giving up.
#[cfg(not(sluicegate_loom))]
pub(crate) const WAIT: Duration = Duration::from_secs(2);
/// How long a waiter waits before it first checks whether the holder is alive.
#[cfg(not(sluicegate_loom))]
const CHECK_AFTER: Duration = Duration::from_micros(200);

/// One of a region's insert locks.
pub(crate) struct Lock<'a> {
    word: &'a AtomicU64,
    /// The region, for errors.
    name: &'a str,
}

/// A held lock: released when dropped.
pub(crate) struct Held<'a> {
    word: &'a AtomicU64,
    me: u64,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        // Only the holder releases; a CAS, not a store, in case a waiter wrongly judged this
        // process dead and took the lock over (it cannot, but a store would then free a lock
        // that is not ours).
        let _ = self
            .word
            .compare_exchange(self.me, 0, Ordering::AcqRel, Ordering::Relaxed);
    }
}

impl<'a> Lock<'a> {
    pub(crate) fn new(word: &'a AtomicU64, name: &'a str) -> Self {
        Self { word, name }
    }

    /// Takes the lock for the process whose token is `me`, taking it over from a dead holder.
    /// (Under loom, where there are no processes, a waiter only yields.)
    #[cfg(sluicegate_loom)]
    pub(crate) fn acquire(&self, me: u64) -> Result<Held<'a>, Error> {
        let _ = self.name;
        loop {
            match self
                .word
                .compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    return Ok(Held {
                        word: self.word,
                        me,
                    })
                }
                Err(_) => crate::sync::yield_now(),
            }
        }
    }

    /// Takes the lock for the process whose token is `me`, taking it over from a dead holder.
    #[cfg(not(sluicegate_loom))]
    pub(crate) fn acquire(&self, me: u64) -> Result<Held<'a>, Error> {
        let mut backoff = Backoff::new();
        loop {
            match self
                .word
                .compare_exchange_weak(0, me, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    return Ok(Held {
                        word: self.word,
                        me,
                    })
                }
                Err(0) => continue, // spurious failure
                Err(holder) => {
                    let waited = backoff.pause(|_| {
                        Error::store(
                            StoreErrorKind::Timeout,
                            self.name,
                            format!(
                                "a new key waited {WAIT:?} for process {} to finish inserting \
                                 (it is alive but not running: stopped or traced?)",
                                holder >> 32
                            ),
                        )
                    })?;
                    if waited >= CHECK_AFTER
                        && !alive(holder)
                        && self
                            .word
                            .compare_exchange(holder, me, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok()
                    {
                        return Ok(Held {
                            word: self.word,
                            me,
                        });
                    }
                }
            }
        }
    }
}

/// How a process waits for another to finish a step of a few instructions (release an insert
/// lock, give a unit of the capacity back): spins, then yields, then short sleeps, and gives
/// up after [`WAIT`], the other process being alive but not running.
pub(crate) struct Backoff {
    #[cfg(not(sluicegate_loom))]
    spins: u32,
    #[cfg(not(sluicegate_loom))]
    since: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Self {
            #[cfg(not(sluicegate_loom))]
            spins: 0,
            #[cfg(not(sluicegate_loom))]
            since: None,
        }
    }

    /// Waits a little; how long it has waited so far (zero while it only spins), or
    /// `give_up(waited)` once that is more than [`WAIT`].
    #[cfg(not(sluicegate_loom))]
    pub(crate) fn pause(
        &mut self,
        give_up: impl FnOnce(Duration) -> Error,
    ) -> Result<Duration, Error> {
        if self.spins < 64 {
            self.spins += 1;
            core::hint::spin_loop();
            return Ok(Duration::ZERO);
        }
        crate::sync::yield_now();
        let waited = self.since.get_or_insert_with(Instant::now).elapsed();
        if waited > WAIT {
            return Err(give_up(waited));
        }
        if waited >= CHECK_AFTER {
            std::thread::sleep(Duration::from_micros(50));
        }
        Ok(waited)
    }

    /// Under loom, where no process stops, a waiter only yields.
    #[cfg(sluicegate_loom)]
    pub(crate) fn pause(
        &mut self,
        _give_up: impl FnOnce(core::time::Duration) -> Error,
    ) -> Result<core::time::Duration, Error> {
        crate::sync::yield_now();
        Ok(core::time::Duration::ZERO)
    }
}

/// This process's token: its pid and the low 32 bits of its start time. Cached, and made
/// again when the pid changes (a child made by `fork` has its own).
pub(crate) fn token() -> u64 {
    use core::sync::atomic::{AtomicU64 as StdU64, Ordering as O};
    static CACHED: StdU64 = StdU64::new(0);
    let pid = std::process::id();
    let t = CACHED.load(O::Relaxed);
    if t >> 32 == u64::from(pid) && t != 0 {
        return t;
    }
    let t = (u64::from(pid) << 32) | u64::from(start_time(pid).unwrap_or(0));
    CACHED.store(t, O::Relaxed);
    t
}

/// Whether the process of `token` still exists (the same process: its start time matches).
pub(crate) fn alive(token: u64) -> bool {
    let pid = (token >> 32) as u32;
    if pid == 0 {
        return false;
    }
    #[cfg(all(unix, not(miri), not(sluicegate_loom)))]
    {
        let Ok(p) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists.
        let r = unsafe { libc::kill(p, 0) };
        if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
            return false;
        }
        // It exists (or is another user's: EPERM). The same process, unless its pid was reused.
        match start_time(pid) {
            Some(start) => start == token as u32,
            None => true,
        }
    }
    #[cfg(not(all(unix, not(miri), not(sluicegate_loom))))]
    {
        true
    }
}

/// The low 32 bits of a process's start time (clock ticks since boot, field 22 of
/// `/proc/PID/stat`), where `/proc` has it.
fn start_time(pid: u32) -> Option<u32> {
    #[cfg(all(target_os = "linux", not(miri), not(sluicegate_loom)))]
    {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name (field 2) is in parentheses and may hold spaces: count fields from
        // the last ')'.
        let rest = &stat[stat.rfind(')')? + 1..];
        let ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
        Some(ticks as u32)
    }
    #[cfg(not(all(target_os = "linux", not(miri), not(sluicegate_loom))))]
    {
        let _ = pid;
        None
    }
}

#[cfg(all(test, target_os = "linux", not(miri), not(sluicegate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_dead_one_is_not() {
        assert!(alive(token()));
        // A child that has exited (and been reaped) is dead.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let dead = (u64::from(pid) << 32) | u64::from(start_time(pid).unwrap_or(7));
        assert!(!alive(dead));
        // The same pid with another start time is another process (a reused pid).
        let me = token();
        assert!(!alive(me ^ 1));
    }

    #[test]
    fn a_dead_holder_is_taken_over() {
        let word = AtomicU64::new(0);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        word.store((u64::from(pid) << 32) | 1, Ordering::Relaxed);
        let lock = Lock::new(&word, "test");
        let held = lock.acquire(token()).unwrap();
        assert_eq!(word.load(Ordering::Relaxed), token());
        drop(held);
        assert_eq!(word.load(Ordering::Relaxed), 0);
    }
}
