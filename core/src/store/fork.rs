//! The Redis store across `fork()`: each process gets its own connections, thread and caches.
//!
//! A child made by `fork()` has copies of its parent's memory and of its sockets, and only the
//! thread that forked: the Redis thread that drives the connections is not there, a pooled
//! socket it shares with the parent would read the parent's replies (a rejection taken for an
//! admission), and a lock another thread of the parent held at the fork stays held. So the
//! state a Redis store keeps in the process (its connections, the runtime thread, the registry
//! of connections by URL, the negative cache) is kept *per process generation*:
//!
//! * [`generation`] is 0 in a process that was not forked after it first opened a Redis store,
//!   and one more in each child forked after that (a `pthread_atfork` handler adds it: one
//!   atomic add, async-signal-safe).
//! * A [`PerProcess`] value belongs to the generation that made it. Read in another (a child),
//!   it is made again for that process, and the parent's copy is left as it is, never touched
//!   nor dropped: its locks may be held, and dropping its connections would deregister them
//!   from a driver that is the parent's.
//!
//! So a limiter opened before the fork (gunicorn's `--preload`, uwsgi without `lazy-apps`,
//! OpenResty's `init_by_lua`, a pre-forking C server) opens connections of its own in each
//! child at its first call there, as a new limiter would, and its decisions are the server's
//! as before: the buckets live on the server, not in the process.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// The process generation (see the module's documentation).
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// This process's generation: 0, or the number of forks since the first Redis store was
/// opened in its line of ancestors. One relaxed load.
#[inline]
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Relaxed)
}

#[cfg(unix)]
extern "C" fn child_after_fork() {
    // Async-signal-safe, as a child's handler must be: one atomic add.
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Registers the fork handler, once per process (before any per-process value exists: a
/// fork before this one can leave nothing stale). Lock-free: a `Once` that a thread of the
/// parent was running at the fork would block the child for good.
pub(crate) fn watch_forks() {
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    if REGISTERED.swap(true, Ordering::AcqRel) {
        return;
    }
    #[cfg(unix)]
    // SAFETY: registers a handler that only adds to an atomic, which is async-signal-safe as
    // a child's handler must be; it is registered once (the flag above) and never
    // unregistered (the function is 'static).
    unsafe {
        libc::pthread_atfork(None, None, Some(child_after_fork));
    }
}

/// A value of one process generation, made again in a forked child at its first use there.
pub(crate) struct PerProcess<T> {
    /// Never null. Points to a `Box<Stamped<T>>` leaked by [`PerProcess::new`] or
    /// [`PerProcess::get`], freed only by `Drop` (and only when it is this process's).
    cur: AtomicPtr<Stamped<T>>,
}

struct Stamped<T> {
    generation: u64,
    value: T,
}

// SAFETY: a `PerProcess<T>` hands out `&T` to any thread (`get`) and drops a `T` on the
// thread that drops it, as an `Arc<T>` does: both need `T: Send + Sync`.
unsafe impl<T: Send + Sync> Send for PerProcess<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for PerProcess<T> {}

impl<T> PerProcess<T> {
    /// `value`, this process's.
    pub(crate) fn new(value: T) -> Self {
        let stamped = Box::new(Stamped {
            generation: generation(),
            value,
        });
        PerProcess {
            cur: AtomicPtr::new(Box::into_raw(stamped)),
        }
    }

    /// This process's value, if it has one yet (none in a child forked since it was made,
    /// until [`get`](Self::get) makes it).
    pub(crate) fn current(&self) -> Option<&T> {
        let p = self.cur.load(Ordering::Acquire);
        // SAFETY: as in `get`.
        let cur = unsafe { &*p };
        (cur.generation == generation()).then_some(&cur.value)
    }

    /// The value stored, this process's or (in a child that has not made its own yet) its
    /// parent's: only to read what the parent's value says of itself (a name, counters), never
    /// to lock or drop anything of it.
    pub(crate) fn any(&self) -> &T {
        // SAFETY: as in `get`.
        unsafe { &(*self.cur.load(Ordering::Acquire)).value }
    }

    /// This process's value: the current one, or, in a child forked since it was made, one
    /// `make` makes now (`make` gets the stale value; it must not lock or drop anything of
    /// it). Two threads of the child that race here each make one; one is kept, and the
    /// other dropped before this returns.
    pub(crate) fn get(&self, make: impl FnOnce(&T) -> T) -> &T {
        let g = generation();
        let p = self.cur.load(Ordering::Acquire);
        // SAFETY: `cur` is never null and points to a live `Stamped<T>`: the pointers stored
        // in it are `Box::into_raw`'s, and one is freed only by `drop`, which has `&mut self`
        // (no `&T` handed out by `get` outlives `&self`, so none is left then). A pointer
        // replaced by a child's value is never freed (it is the parent's).
        let cur = unsafe { &*p };
        if cur.generation == g {
            return &cur.value;
        }
        let fresh = Stamped {
            generation: g,
            value: make(&cur.value),
        };
        // SAFETY: every pointer stored in `cur` is a leaked box, freed only by `drop` (which
        // has `&mut self`, so it outlives this `&self`). A third generation cannot come
        // meanwhile in this process.
        unsafe { publish(&self.cur, p, fresh) }
    }
}

/// Stores `fresh` in `cur` in place of `expected`; the value stored: `fresh`'s, or, when
/// another thread stored one first, that one (`fresh` then dropped before this returns).
///
/// # Safety
///
/// Every pointer ever stored in `cur` must be a `Box<Stamped<T>>` leaked into it and not freed
/// while `cur` is borrowed.
unsafe fn publish<T>(
    cur: &AtomicPtr<Stamped<T>>,
    expected: *mut Stamped<T>,
    fresh: Stamped<T>,
) -> &T {
    let fresh = Box::into_raw(Box::new(fresh));
    match cur.compare_exchange(expected, fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: `fresh` is stored, and lives as long as `cur`'s borrow (the caller's promise).
        Ok(_) => unsafe { &(*fresh).value },
        Err(won) => {
            // SAFETY: `fresh` was never shared (the exchange failed): this thread owns it.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: `won` was stored in `cur` by another thread: the caller's promise.
            unsafe { &(*won).value }
        }
    }
}

impl<T> Drop for PerProcess<T> {
    fn drop(&mut self) {
        let p = *self.cur.get_mut();
        // SAFETY: `cur` is never null and points to a live `Stamped<T>` (see `get`); with
        // `&mut self`, no reference from `get` is alive.
        if unsafe { (*p).generation } == generation() {
            // SAFETY: this process made it (`new` or `get`), and nothing else holds it.
            drop(unsafe { Box::from_raw(p) });
        }
        // Else the parent's: left as it is (its locks may be held, its connections are the
        // parent's driver's), a leak of one value per fork.
    }
}

/// A `static`'s [`PerProcess`]: empty until first used, then made again in each forked child
/// at its first use there.
pub(crate) struct Global<T> {
    /// Null, or a `Box<Stamped<T>>` leaked by [`Global::get`] and never freed (a `static`'s).
    cur: AtomicPtr<Stamped<T>>,
}

// SAFETY: as `PerProcess`: `get` hands out `&T` to any thread, and a `T` made by one thread
// may be dropped by it.
unsafe impl<T: Send + Sync> Sync for Global<T> {}

impl<T> Global<T> {
    pub(crate) const fn new() -> Self {
        Global {
            cur: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// This process's value, made by `make` at its first use in this process. Threads that
    /// race to make it each make one; one is kept, the others dropped before this returns.
    pub(crate) fn get(&'static self, make: impl FnOnce() -> T) -> &'static T {
        let g = generation();
        let p = self.cur.load(Ordering::Acquire);
        // SAFETY: a non-null `cur` points to a `Stamped<T>` leaked by this function and never
        // freed (this is a `static`'s).
        if let Some(cur) = unsafe { p.as_ref() } {
            if cur.generation == g {
                return &cur.value;
            }
        }
        let fresh = Stamped {
            generation: g,
            value: make(),
        };
        // SAFETY: every pointer stored in a `Global`'s `cur` is a leaked box, never freed
        // (a `static`'s).
        unsafe { publish(&self.cur, p, fresh) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_value_of_this_process_is_kept_and_dropped() {
        let dropped = Arc::new(());
        let p = PerProcess::new(Arc::clone(&dropped));
        for _ in 0..3 {
            assert!(Arc::ptr_eq(
                p.get(|_| unreachable!("this process's")),
                &dropped
            ));
        }
        assert_eq!(Arc::strong_count(&dropped), 2);
        drop(p);
        assert_eq!(Arc::strong_count(&dropped), 1);
    }

    #[test]
    fn a_global_is_made_once_per_process() {
        static G: Global<Vec<u8>> = Global::new();
        let a = G.get(|| vec![1]);
        let b = G.get(|| unreachable!("made once"));
        assert!(core::ptr::eq(a, b));
        // A static's value is never freed: Miri's leak check ignores memory a static reaches.
        assert_eq!(a, &[1]);
    }

    /// A stale value (its generation is not this process's) is made again, and the stale one
    /// is neither dropped nor read past `make`.
    #[test]
    fn a_stale_value_is_made_again_and_left_alone() {
        let parent = Arc::new(1);
        let child = Arc::new(2);
        let p = PerProcess::new(Arc::clone(&parent));
        // As a fork leaves it: the value's generation is not the process's.
        let stale = p.cur.load(Ordering::Acquire);
        // SAFETY: `cur` points to the live value `new` made; nothing else reads it here.
        unsafe { (*stale).generation = u64::MAX };
        let got = p.get(|stale| {
            assert_eq!(**stale, 1);
            Arc::clone(&child)
        });
        assert!(Arc::ptr_eq(got, &child));
        assert!(Arc::ptr_eq(p.get(|_| unreachable!("made")), &child));
        drop(p);
        // The child's value is dropped with it; the parent's is left (leaked, as after a fork).
        assert_eq!(
            (Arc::strong_count(&child), Arc::strong_count(&parent)),
            (1, 2)
        );
        // SAFETY: `stale` is `new`'s box, which nothing frees or reads any more (the test
        // frees it, for Miri's leak check).
        drop(unsafe { Box::from_raw(stale) });
        assert_eq!(Arc::strong_count(&parent), 1);
    }
}
