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
//!   that holds the GIL while it waits for that thread). [`relayed`] hands each wake to one
//!   thread of this module instead, which takes the GIL once for all the wakes queued
//!   meanwhile.
//! * **Forks.** The core's Redis connections and its Redis thread belong to the process that
//!   opened them: a child made by `fork()` after that has the connections' sockets but no
//!   thread to drive them. Every call of a Redis limiter made in another process than the one
//!   where this module first opened a Redis store is refused with a `StoreError`
//!   (`kind == "unsupported"`) instead of hanging; the web integrations open Redis limiters in
//!   the worker processes, at their first request.

use pyo3::prelude::*;
use sluicegate::{Error, StoreErrorKind, StoreSpec};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};

/// The process that opened the first Redis store (0: none yet).
static OWNER: AtomicU32 = AtomicU32::new(0);

/// What a limiter on Redis keeps: the store's name (its URL, password redacted), for errors.
#[derive(Clone)]
pub(crate) struct Remote {
    name: String,
}

impl Remote {
    /// `Some` for a store outside the process. Claims this process as the owner of the core's
    /// Redis connections (a process forked from the owner is refused).
    pub(crate) fn of(spec: &StoreSpec) -> Result<Option<Remote>, Error> {
        if !matches!(spec, StoreSpec::Redis { .. }) {
            return Ok(None);
        }
        let remote = Remote {
            name: spec.to_string(),
        };
        let pid = std::process::id();
        if let Err(owner) = OWNER.compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire) {
            if owner != pid {
                return Err(remote.forked());
            }
        }
        Ok(Some(remote))
    }

    /// Ok in the process that owns the core's Redis connections.
    #[inline]
    pub(crate) fn check(&self) -> Result<(), Error> {
        if OWNER.load(Ordering::Acquire) == std::process::id() {
            Ok(())
        } else {
            Err(self.forked())
        }
    }

    #[cold]
    fn forked(&self) -> Error {
        Error::Store {
            kind: StoreErrorKind::Unsupported,
            store: self.name.clone(),
            reason: "this process was forked after the Redis store was opened in its parent; \
                     open Redis limiters in the process that uses them (after the fork)"
                .to_string(),
        }
    }

    /// Runs `f` (a call into the core that may wait on the server) detached from the
    /// interpreter.
    #[inline]
    pub(crate) fn call<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce() -> Result<T, Error> + Send,
    ) -> Result<T, Error> {
        self.check()?;
        py.detach(f)
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
    let Some(r) = remote else {
        // An in-process store's future is ready at its first poll.
        return Ok(fut.await);
    };
    r.check()?;
    Ok(Relayed {
        fut: Box::pin(fut),
        waker: None,
    }
    .await)
}

/// A future whose waker hands its wakes to the relay thread.
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
                let relay = Waker::from(Arc::new(Relay(cx.waker().clone())));
                this.waker = Some((cx.waker().clone(), relay.clone()));
                relay
            }
        };
        this.fut.as_mut().poll(&mut Context::from_waker(&relay))
    }
}

/// Wakes the waker it holds from the relay thread.
struct Relay(Waker);

impl Wake for Relay {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        match relay_thread() {
            Some(tx) => {
                if let Err(mpsc::SendError(w)) = tx.send(self.0.clone()) {
                    w.wake();
                }
            }
            // No relay thread could be started: wake here.
            None => self.0.wake_by_ref(),
        }
    }
}

/// The relay thread's queue (started on the first wake; None if it cannot be started).
fn relay_thread() -> Option<&'static mpsc::Sender<Waker>> {
    static TX: OnceLock<Option<mpsc::Sender<Waker>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Waker>();
        std::thread::Builder::new()
            .name("sluicegate-aio".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter());
                    // None: the interpreter is shutting down, and nothing awaits any more.
                    let _ = Python::try_attach(|_| batch.drain(..).for_each(Waker::wake));
                }
            })
            .ok()
            .map(|_| tx)
    })
    .as_ref()
}
