//! Per-environment state (a slab of handles and the decision scratch buffer) and the
//! process-wide registry of named shared limiters.
//!
//! JavaScript holds a limiter as a small integer: its slot in the slab of the environment
//! (main thread or worker) that created it. A number crosses the Node-API boundary faster
//! than an `External` (whose type must be checked on every call to be safe), and a forged or
//! stale number can only name another live limiter of the same environment or none: never
//! memory that is not a limiter.

use crate::errors::{from_core, invalid_arg, JsErr};
use sluicegate::http::HeaderStyle;
use sluicegate::{composite, AnyClock, Decision, KeyedLimiter, Limiter, Quota};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// A keyed limiter over byte keys, by the core's key rule: strings are keyed by their UTF-8
/// bytes, Buffers and Uint8Arrays by their bytes, integers (numbers and BigInts) by their
/// decimal digits (see `keys.rs`).
pub type Keyed = KeyedLimiter<Box<[u8]>, AnyClock>;

/// What a handle names.
// Entries live behind an `Arc` already; boxing the larger variant would add a second pointer
// chase to every decision for no memory saved.
#[allow(clippy::large_enum_variant)]
pub enum Entry {
    /// One bucket.
    Single(Limiter<AnyClock>),
    /// One bucket per key.
    Keyed(Keyed),
    /// Several single limiters consumed all-or-nothing (`sluicegate::composite`); every part
    /// is an `Entry::Single` or a remote one, checked when the composite is made.
    Composite(Vec<Arc<Entry>>),
    /// A limiter, keyed limiter or composite with a bucket on a Redis store (the entry
    /// inside): decided only through Promises (`remote.rs`), never by the synchronous calls,
    /// which would block the event loop for a round trip. Every synchronous accessor below
    /// refuses it with `ERR_SLUICEGATE_STORE_UNSUPPORTED`.
    Remote(Box<Entry>),
}

impl Entry {
    fn kind(&self) -> &'static str {
        match self {
            Entry::Single(_) => "a Limiter's",
            Entry::Keyed(_) => "a KeyedLimiter's",
            Entry::Composite(_) => "a Composite's",
            Entry::Remote(_) => "a Redis-backed limiter's",
        }
    }

    /// An entry for `inner`, remote when a bucket of it is on a Redis store.
    pub fn new(inner: Entry) -> Entry {
        let remote = match &inner {
            Entry::Single(l) => l.redis_stats().is_some(),
            Entry::Keyed(l) => l.redis_stats().is_some(),
            Entry::Composite(parts) => parts.iter().any(|p| matches!(**p, Entry::Remote(_))),
            Entry::Remote(_) => false,
        };
        if remote {
            Entry::Remote(Box::new(inner))
        } else {
            inner
        }
    }

    /// The entry of a remote limiter, or an `ERR_SLUICEGATE_INVALID_ARG` error.
    pub fn remote(&self) -> Result<&Entry, JsErr> {
        match self {
            Entry::Remote(inner) => Ok(inner),
            other => Err(invalid_arg(format!(
                "expected a Redis-backed handle, got {}",
                other.kind()
            ))),
        }
    }

    /// The error of a synchronous call on a remote entry, else of a handle of the wrong kind.
    #[cold]
    fn wrong(&self, expected: &str) -> JsErr {
        match self {
            Entry::Remote(_) => remote_sync(),
            other => invalid_arg(format!("expected {expected} handle, got {}", other.kind())),
        }
    }

    /// The single limiter, or an `ERR_SLUICEGATE_INVALID_ARG` error.
    #[inline]
    pub fn single(&self) -> Result<&Limiter<AnyClock>, JsErr> {
        match self {
            Entry::Single(l) => Ok(l),
            other => Err(other.wrong("a Limiter")),
        }
    }

    /// The keyed limiter, or an `ERR_SLUICEGATE_INVALID_ARG` error.
    #[inline]
    pub fn keyed(&self) -> Result<&Keyed, JsErr> {
        match self {
            Entry::Keyed(l) => Ok(l),
            other => Err(other.wrong("a KeyedLimiter")),
        }
    }

    /// The parts of a composite, or an `ERR_SLUICEGATE_INVALID_ARG` error.
    pub fn composite(&self) -> Result<&[Arc<Entry>], JsErr> {
        match self {
            Entry::Composite(parts) => Ok(parts),
            other => Err(other.wrong("a Composite")),
        }
    }

    /// The parts of a composite as limiters (every part is single, or a remote single, by
    /// construction).
    pub fn parts(parts: &[Arc<Entry>]) -> Vec<&Limiter<AnyClock>> {
        parts
            .iter()
            .filter_map(|p| match &**p {
                Entry::Single(l) => Some(l),
                Entry::Remote(inner) => match &**inner {
                    Entry::Single(l) => Some(l),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    /// A request of `cost` now: a single limiter's, or a composite's (all-or-nothing).
    #[inline]
    pub fn try_acquire(&self, cost: u64) -> Result<Decision, JsErr> {
        match self {
            Entry::Single(l) => l.try_acquire(cost).map_err(from_core),
            Entry::Composite(parts) => {
                composite::try_acquire_all(&Self::parts(parts), cost).map_err(from_core)
            }
            other => Err(other.wrong("a Limiter or Composite")),
        }
    }

    /// The current state, changing nothing and counting nothing: a single limiter's `peek`, or
    /// a composite's parts' (the core's `peek_all`; on Redis a server that does not answer is
    /// a store error whatever `on_error` says).
    pub fn peek(&self) -> Result<Decision, JsErr> {
        match self {
            Entry::Single(l) => l.peek().map_err(from_core),
            Entry::Composite(parts) => composite::peek_all(&Self::parts(parts)).map_err(from_core),
            other => Err(other.wrong("a Limiter or Composite")),
        }
    }

    /// Gives `cost` back: to a single limiter, or to every part of a composite at its reading
    /// (the core's `refund_all`).
    pub fn refund(&self, cost: u64) -> Result<(), JsErr> {
        match self {
            Entry::Single(l) => l.refund(cost).map_err(from_core),
            Entry::Composite(parts) => {
                composite::refund_all(&Self::parts(parts), cost).map_err(from_core)
            }
            other => Err(other.wrong("a Limiter or Composite")),
        }
    }

    /// The quota a single or keyed limiter enforces.
    pub fn quota(&self) -> Result<Quota, JsErr> {
        match self {
            Entry::Single(l) => Ok(l.quota()),
            Entry::Keyed(l) => Ok(l.quota()),
            Entry::Composite(_) => Err(invalid_arg("a Composite has one quota per part")),
            Entry::Remote(inner) => inner.quota(),
        }
    }
}

/// `ERR_SLUICEGATE_STORE_UNSUPPORTED`: a synchronous call on a Redis-backed limiter.
pub fn remote_sync() -> JsErr {
    crate::errors::store_error(
        sluicegate::StoreErrorKind::Unsupported,
        "a limiter on a Redis store decides through Promises (tryAcquireAsync, peekAsync, \
         refundAsync, tryAcquireMany, ...): a synchronous call would block the event loop",
    )
}

/// Words in the scratch buffer: see `SCRATCH_*` and `index.js`'s reader.
pub const SCRATCH_WORDS: usize = 24;

/// The most (style, policy) pairs `headerRenderer` registers in one environment.
pub const MAX_RENDERERS: usize = 256;

/// One environment's state, owned by Node-API instance data (freed when the env is torn down).
pub struct EnvState {
    slab: RefCell<Slab>,
    /// Decision fields written by the hot calls, read by JavaScript through a `Float64Array`
    /// and a `BigUint64Array` over the same memory (an external `ArrayBuffer`).
    pub scratch: Box<[u64; SCRATCH_WORDS]>,
    /// The (style, policy) pairs `renderFields` renders, by id (`headerRenderer`).
    renderers: RefCell<Vec<(HeaderStyle, String)>>,
}

#[derive(Default)]
struct Slab {
    slots: Vec<Option<Arc<Entry>>>,
    free: Vec<u32>,
}

impl EnvState {
    /// An empty slab and a zeroed scratch buffer.
    pub fn new() -> Self {
        Self {
            slab: RefCell::new(Slab::default()),
            scratch: Box::new([0; SCRATCH_WORDS]),
            renderers: RefCell::new(Vec::new()),
        }
    }

    /// The id of the renderer of `style` and `policy` (the same pair, the same id), or `None`
    /// when [`MAX_RENDERERS`] other pairs are registered.
    pub fn renderer(&self, style: HeaderStyle, policy: &str) -> Option<u32> {
        let mut r = self.renderers.borrow_mut();
        if let Some(i) = r.iter().position(|(s, p)| *s == style && p == policy) {
            return Some(i as u32);
        }
        if r.len() >= MAX_RENDERERS {
            return None;
        }
        r.push((style, policy.to_owned()));
        Some(r.len() as u32 - 1)
    }

    /// Runs `f` with renderer `id`'s style and policy.
    pub fn with_renderer<R>(&self, id: u32, f: impl FnOnce(HeaderStyle, &str) -> R) -> Option<R> {
        let r = self.renderers.borrow();
        r.get(id as usize).map(|(s, p)| f(*s, p))
    }

    /// Stores `entry` and returns its handle.
    pub fn insert(&self, entry: Arc<Entry>) -> Result<u32, JsErr> {
        let mut slab = self.slab.borrow_mut();
        if let Some(h) = slab.free.pop() {
            slab.slots[h as usize] = Some(entry);
            return Ok(h);
        }
        let h = u32::try_from(slab.slots.len())
            .map_err(|_| invalid_arg("too many live limiters in this thread"))?;
        slab.slots.push(Some(entry));
        Ok(h)
    }

    /// Runs `f` on the entry `h` names.
    #[inline]
    pub fn with<R>(&self, h: u32, f: impl FnOnce(&Entry) -> R) -> Result<R, JsErr> {
        let slab = self.slab.borrow();
        match slab.slots.get(h as usize) {
            Some(Some(e)) => Ok(f(e)),
            _ => Err(invalid_arg("not a live sluicegate handle")),
        }
    }

    /// The entry `h` names, shared (for a composite's parts).
    pub fn get(&self, h: u32) -> Result<Arc<Entry>, JsErr> {
        match self.slab.borrow().slots.get(h as usize) {
            Some(Some(e)) => Ok(e.clone()),
            _ => Err(invalid_arg("not a live sluicegate handle")),
        }
    }

    /// Frees the slot `h` (called by the JavaScript wrapper's `FinalizationRegistry`).
    pub fn release(&self, h: u32) {
        let mut slab = self.slab.borrow_mut();
        if let Some(slot) = slab.slots.get_mut(h as usize) {
            if slot.take().is_some() {
                slab.free.push(h);
            }
        }
    }
}

impl Default for EnvState {
    fn default() -> Self {
        Self::new()
    }
}

/// Named limiters shared by every environment (main thread and workers) of the process:
/// `make` builds the entry on the name's first use; `signature` (the quota and options)
/// must match on every later use. Limiters and keyed limiters have separate namespaces.
pub fn shared(
    name: &str,
    signature: String,
    make: impl FnOnce() -> Result<Entry, JsErr>,
) -> Result<Arc<Entry>, JsErr> {
    /// name -> (signature, entry)
    type Registry = Mutex<HashMap<String, (String, Arc<Entry>)>>;
    static SHARED: OnceLock<Registry> = OnceLock::new();
    let map = SHARED.get_or_init(Default::default);
    // A panic while the lock is held cannot leave the map half-written (one insert), so a
    // poisoned lock is still consistent.
    let mut map = map.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((sig, e)) = map.get(name) {
        if *sig != signature {
            return Err(invalid_arg(format!(
                "shared {name:?} already exists as {sig}, not {signature}"
            )));
        }
        return Ok(e.clone());
    }
    let e = Arc::new(make()?);
    map.insert(name.to_owned(), (signature, e.clone()));
    Ok(e)
}
