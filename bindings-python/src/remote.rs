//! Limiters on a store outside the process (Redis): their calls wait on the network, so they
//! run detached from the interpreter (the GIL released), and their `*_async` methods are
//! awaited by asyncio without blocking its loop.
//!
//! * **Blocking calls** ([`Remote::call`]) run inside `Python::detach`: other threads run
//!   Python while one waits for the server (at most the store's `timeout`, then its
//!   `on_error` policy decides). In-process stores are called as they are: detaching costs more
//!   than their whole decision.
//! * **Async calls** are pyo3 `async fn`s (feature `experimental-async`): a coroutine that
//!   asyncio awaits, polling the core's executor-agnostic future. The core completes a call on
//!   its Redis thread, which drives every connection of the process, and pyo3's waker takes the
//!   GIL to call the loop's `call_soon_threadsafe`: on that thread it would stall every
//!   connection behind whatever Python thread holds the GIL (and deadlock against a thread
//!   that holds the GIL while it waits for that thread). So [`relayed`] never wakes pyo3's
//!   waker there. It gives the core a waker of its own that queues pyo3's and writes one byte
//!   to a socket pair whose other end the awaiting event loop watches (`add_reader`): the
//!   loop's own thread, woken straight from the Redis thread, wakes the queued wakers under
//!   the GIL it holds. (A loop that cannot watch a file descriptor, or a call polled outside
//!   a running loop, gets the wakes through one relay thread of this module instead, which
//!   takes the GIL once for all the wakes queued meanwhile: one more thread between the
//!   server's reply and the coroutine, as every call had before.)
//! * **Forks.** The core's Redis connections and its Redis thread belong to the process that
//!   opened them; a limiter opened before `fork()` opens its own in the child at its first
//!   call there (the core's `store::fork`), and this module starts its relay thread again in
//!   the child (the parent's is not there). So a Redis limiter made at import under gunicorn
//!   `--preload`, or in uwsgi's master, works in every worker.
//! * **Shared-memory regions** are opened detached too ([`build`]): an opener may wait for
//!   another process. Their decisions are not: a detach on every call would cost the hot path
//!   a hand-over of the GIL, and only a new key's insert can wait (on another process's
//!   insert lock, at most 2 s).

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
#[cfg(unix)]
use pyo3::types::PyWeakrefReference;
use pyo3::types::{PyCFunction, PyDict, PyTuple};
use sluicegate::{Error, StoreSpec};
#[cfg(unix)]
use std::cell::RefCell;
use std::future::Future;
#[cfg(unix)]
use std::io::{Read, Write};
#[cfg(unix)]
use std::os::fd::AsRawFd;
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

/// A limiter on a store outside the process: its calls run detached from the interpreter.
#[derive(Clone)]
pub(crate) struct Remote;

impl Remote {
    /// `Some` for a store outside the process.
    pub(crate) fn of(spec: &StoreSpec) -> Result<Option<Remote>, Error> {
        if !matches!(spec, StoreSpec::Redis { .. }) {
            return Ok(None);
        }
        Ok(Some(Remote))
    }

    /// Runs `f` (a call into the core that may wait on the server) detached from the
    /// interpreter.
    #[inline]
    pub(crate) fn call<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce() -> Result<T, Error> + Send,
    ) -> Result<T, Error> {
        py.detach(f)
    }
}

/// Runs `build` (the core's builder) for a limiter on `remote`, or on a shared-memory region
/// when `shm`: both detached from the interpreter. Opening a region may wait for another
/// process (up to 3 s for the creator of a region being initialised), which must not stop
/// every other thread of this one; a limiter in memory is built as is.
pub(crate) fn build<T: Send>(
    py: Python<'_>,
    remote: Option<&Remote>,
    shm: bool,
    build: impl FnOnce() -> Result<T, Error> + Send,
) -> Result<T, Error> {
    match remote {
        Some(r) => r.call(py, build),
        None if shm => py.detach(build),
        None => build(),
    }
}

/// Runs `f` for a limiter on `remote` (None: an in-process store, called as is).
#[inline]
pub(crate) fn call<T: Send>(
    py: Python<'_>,
    remote: Option<&Remote>,
    f: impl FnOnce() -> Result<T, Error> + Send,
) -> Result<T, Error> {
    match remote {
        None => f(),
        Some(r) => r.call(py, f),
    }
}

/// Awaits `fut` (a core future), its wakes relayed off the thread that completes it.
pub(crate) async fn relayed<F: Future>(
    remote: Option<&Remote>,
    fut: F,
) -> Result<F::Output, Error> {
    if remote.is_none() {
        // An in-process store's future is ready at its first poll.
        return Ok(fut.await);
    }
    Ok(Relayed {
        fut: Box::pin(fut),
        waker: None,
    }
    .await)
}

/// A future whose waker hands its wakes to the awaiting loop's own thread (or the relay
/// thread).
struct Relayed<F> {
    fut: Pin<Box<F>>,
    /// The waker last given, and the relay waker that wakes it.
    waker: Option<(Waker, Waker)>,
}

impl<F: Future> Future for Relayed<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let relay = match &this.waker {
            Some((given, relay)) if given.will_wake(cx.waker()) => relay.clone(),
            _ => {
                let on = LoopWake::current();
                if on.is_none() {
                    Python::attach(RelayState::guard_exit);
                }
                let relay = Waker::from(Arc::new(Relay {
                    waker: cx.waker().clone(),
                    on,
                }));
                this.waker = Some((cx.waker().clone(), relay.clone()));
                relay
            }
        };
        this.fut.as_mut().poll(&mut Context::from_waker(&relay))
    }
}

/// Wakes the waker it holds on the loop's thread (or from the relay thread).
struct Relay {
    waker: Waker,
    /// The running loop's wake channel; None: the relay thread.
    on: Option<Arc<LoopWake>>,
}

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(on) = &self.on {
            return on.wake(self.waker.clone());
        }
        match relay_thread() {
            Some(tx) => {
                if let Err(mpsc::SendError(w)) = tx.send(self.waker.clone()) {
                    w.wake();
                }
            }
            // No relay thread could be started: wake here.
            None => self.waker.wake_by_ref(),
        }
    }
}

/// One event loop's wake channel: wakers queued by the threads that complete calls, and a
/// socket pair whose reading end the loop watches.
///
/// A waker queued while no byte is in flight writes one; the loop's reader drains the bytes,
/// then takes the queue and disarms under its lock. So every queued waker either finds the
/// channel armed (a byte is in flight, and the reader, which takes the queue after draining
/// it, takes this waker too) or arms it with a byte of its own: none is left queued with no
/// byte to come.
#[cfg(unix)]
struct LoopWake {
    tx: UnixStream,
    rx: UnixStream,
    queued: Mutex<(Vec<Waker>, bool)>,
}

#[cfg(unix)]
impl LoopWake {
    /// The wake channel of the loop running on this thread (made and watched at its first
    /// call); None outside a running loop, or if the loop cannot watch a file descriptor.
    fn current() -> Option<Arc<LoopWake>> {
        thread_local! {
            /// The last loop this thread ran calls on (weakly: a loop is never kept alive,
            /// and a new loop at a freed one's address is not taken for it) and its channel.
            static LAST: RefCell<Option<(Py<PyWeakrefReference>, Arc<LoopWake>)>> =
                const { RefCell::new(None) };
        }
        Python::attach(|py| {
            let running = running_loop(py)?;
            LAST.with_borrow_mut(|last| {
                if let Some((weak, wake)) = last {
                    if weak.bind(py).upgrade().is_some_and(|l| l.is(&running)) {
                        return Some(wake.clone());
                    }
                }
                let weak = PyWeakrefReference::new(&running).ok()?.unbind();
                let wake = LoopWake::of(&running).ok()?;
                *last = Some((weak, wake.clone()));
                Some(wake)
            })
        })
    }

    /// `event_loop`'s channel, made and watched at its first call. One a loop, whichever
    /// thread runs it and whatever other loops that thread ran since: the channels are kept
    /// by loop (weakly), not only the thread's last, so that a thread running loops in turn
    /// does not make (and leave watched) a channel at every switch.
    fn of(event_loop: &Bound<'_, PyAny>) -> PyResult<Arc<LoopWake>> {
        static CHANNELS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let py = event_loop.py();
        let channels = CHANNELS
            .get_or_try_init(py, || {
                py.import("weakref")?
                    .getattr("WeakKeyDictionary")?
                    .call0()
                    .map(Bound::unbind)
            })?
            .bind(py);
        if let Ok(found) = channels.get_item(event_loop) {
            if let Some(wake) = found.cast::<WakeChannel>()?.get().0.upgrade() {
                return Ok(wake);
            }
        }
        // Hashable and weakly referable before the loop watches anything: a loop that is
        // not gets no channel (the relay thread), rather than a new watched one each call.
        event_loop.hash()?;
        let wake = LoopWake::watched_by(event_loop)?;
        channels.set_item(event_loop, WakeChannel(Arc::downgrade(&wake)))?;
        Ok(wake)
    }

    /// A new channel, its reading end watched by `event_loop`.
    fn watched_by(event_loop: &Bound<'_, PyAny>) -> PyResult<Arc<LoopWake>> {
        let (tx, rx) = UnixStream::pair()?;
        tx.set_nonblocking(true)?;
        rx.set_nonblocking(true)?;
        let fd = rx.as_raw_fd();
        let wake = Arc::new(LoopWake {
            tx,
            rx,
            queued: Mutex::new((Vec::new(), false)),
        });
        let reader = wake.clone();
        let callback = PyCFunction::new_closure(
            event_loop.py(),
            Some(c"sluicegate_wake"),
            None,
            move |_: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| reader.drain(),
        )?;
        // The loop holds the callback, and so the channel, until it stops watching (closed).
        event_loop.call_method1("add_reader", (fd, callback))?;
        Ok(wake)
    }

    /// Queues `waker` (any thread), writing a byte unless one is in flight.
    fn wake(&self, waker: Waker) {
        let arm = {
            let mut q = lock(&self.queued);
            q.0.push(waker);
            !std::mem::replace(&mut q.1, true)
        };
        if arm {
            // WouldBlock: the pair's buffer holds bytes, and so the loop will run the reader.
            let _ = (&self.tx).write(&[1]);
        }
    }

    /// The loop's reader (its thread, the GIL held): wakes every queued waker.
    fn drain(&self) {
        let mut buf = [0u8; 64];
        while matches!((&self.rx).read(&mut buf), Ok(n) if n > 0) {}
        let wakers = {
            let mut q = lock(&self.queued);
            q.1 = false;
            std::mem::take(&mut q.0)
        };
        wakers.into_iter().for_each(Waker::wake);
    }
}

/// A loop's wake channel, as the table of channels by loop holds it: weakly (the loop's
/// selector holds it until the loop closes, and a closed loop's descriptors are not kept open
/// for as long as something references the loop).
#[cfg(unix)]
#[pyclass(frozen)]
struct WakeChannel(std::sync::Weak<LoopWake>);

/// Where no socket pair exists, every wake goes through the relay thread.
#[cfg(not(unix))]
struct LoopWake;

#[cfg(not(unix))]
impl LoopWake {
    fn current() -> Option<Arc<LoopWake>> {
        None
    }

    fn wake(&self, waker: Waker) {
        waker.wake();
    }
}

/// A lock that a panic elsewhere left poisoned still holds what it held (no invariant here
/// that a panic can break).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The event loop running on this thread, if any.
#[cfg(unix)]
fn running_loop(py: Python<'_>) -> Option<Bound<'_, PyAny>> {
    static GET: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let get = GET
        .get_or_try_init(py, || {
            py.import("asyncio")?
                .getattr("get_running_loop")
                .map(Bound::unbind)
        })
        .ok()?;
    get.call0(py).ok().map(|l| l.into_bound(py))
}

/// This process's relay: the thread that wakes coroutines for the core, its queue, and its
/// state for the interpreter's exit. Started on the first wake, and again in a child made by
/// `fork()` (the core's process generation tells it), which has none of its parent's threads
/// and may find the parent's state locked: the parent's relay is left as it is, never
/// touched.
struct ProcessRelay {
    generation: u64,
    /// None if the thread cannot be started.
    tx: Option<mpsc::Sender<Waker>>,
    state: &'static RelayState,
}

/// This process's relay (null, or a `Box<ProcessRelay>` leaked by [`relay`], never freed).
static RELAY: AtomicPtr<ProcessRelay> = AtomicPtr::new(std::ptr::null_mut());

/// This process's relay, if it has started one.
fn relay_now() -> Option<&'static ProcessRelay> {
    let p = RELAY.load(Ordering::Acquire);
    // SAFETY: a non-null pointer here is a `Box<ProcessRelay>` leaked by `relay`, never freed.
    let r = unsafe { p.as_ref() }?;
    (r.generation == sluicegate::__process_generation()).then_some(r)
}

/// This process's relay, started now if it has none.
fn relay() -> &'static ProcessRelay {
    if let Some(r) = relay_now() {
        return r;
    }
    let p = RELAY.load(Ordering::Acquire);
    let state: &'static RelayState = Box::leak(Box::new(RelayState {
        state: Mutex::new((false, false)),
        ended: std::sync::Condvar::new(),
    }));
    let (tx, rx) = mpsc::channel::<Waker>();
    let started = std::thread::Builder::new()
        .name("sluicegate-aio".into())
        .spawn(move || {
            while let Ok(first) = rx.recv() {
                let mut batch = vec![first];
                batch.extend(rx.try_iter());
                if !state.begin() {
                    continue; // the interpreter is exiting: nothing awaits any more
                }
                // None: the interpreter is gone.
                let _ = Python::try_attach(|_| batch.drain(..).for_each(Waker::wake));
                state.end();
            }
        })
        .is_ok();
    let fresh = Box::into_raw(Box::new(ProcessRelay {
        generation: sluicegate::__process_generation(),
        tx: started.then_some(tx),
        state,
    }));
    match RELAY.compare_exchange(p, fresh, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: `fresh` is stored and never freed.
        Ok(_) => unsafe { &*fresh },
        Err(won) => {
            // Another thread of this process started one first: this one's sender is dropped,
            // and its thread ends (its state, a few bytes, stays leaked).
            // SAFETY: `fresh` was never shared (the exchange failed): this thread owns it.
            drop(unsafe { Box::from_raw(fresh) });
            // SAFETY: `won` is a `Box<ProcessRelay>` leaked by this function, never freed.
            unsafe { &*won }
        }
    }
}

/// The relay thread's queue (None if it cannot be started).
fn relay_thread() -> Option<&'static mpsc::Sender<Waker>> {
    relay().tx.as_ref()
}

/// The relay thread's state, for the interpreter's exit.
///
/// A wake calls into Python (the loop's `call_soon_threadsafe`, which writes to a socket with
/// the GIL released). If the interpreter has begun to finalize when such a thread asks for
/// the GIL back, CPython ends the thread with `pthread_exit`, whose forced unwind through Rust
/// frames aborts the process: a program that had awaited calls on Redis died with SIGABRT at
/// exit, about one run in three. So an `atexit` hook, registered before the relay's first
/// wake, marks the relay closed and waits (the GIL released) for a batch under way to end;
/// later batches are dropped unwoken.
struct RelayState {
    /// (closed, a batch under way).
    state: Mutex<(bool, bool)>,
    ended: std::sync::Condvar,
}

impl RelayState {
    /// A batch begins; false once closed.
    fn begin(&self) -> bool {
        let mut s = lock(&self.state);
        s.1 = !s.0;
        s.1
    }

    fn end(&self) {
        lock(&self.state).1 = false;
        self.ended.notify_all();
    }

    /// The `atexit` hook's work: closed, and no batch under way.
    fn close(&self) {
        let mut s = lock(&self.state);
        s.0 = true;
        while s.1 {
            s = self
                .ended
                .wait(s)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Registers the `atexit` hook (once; the GIL held). A failure leaves the relay as it
    /// was before the hook existed.
    fn guard_exit(py: Python<'_>) {
        static HOOKED: PyOnceLock<()> = PyOnceLock::new();
        let _ = HOOKED.get_or_try_init(py, || -> PyResult<()> {
            let hook = PyCFunction::new_closure(
                py,
                Some(c"sluicegate_relay_close"),
                None,
                |args: &Bound<'_, PyTuple>, _: Option<&Bound<'_, PyDict>>| {
                    // This process's relay, if it has one (a parent's is not this one's).
                    args.py()
                        .detach(|| relay_now().map_or((), |r| r.state.close()))
                },
            )?;
            py.import("atexit")?.call_method1("register", (hook,))?;
            Ok(())
        });
    }
}
