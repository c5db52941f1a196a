//! The shared-memory store: the buckets of a keyed limiter in a memory-mapped file, so that
//! the worker processes of one host (gunicorn, uwsgi, Node cluster, pm2, nginx workers)
//! enforce one limit without a server.
//!
//! * [`region`]: the file, its mapping, and the header every opener validates (the region's
//!   bytes are untrusted input).
//! * [`table`]: the slots and the protocol: lock-free decisions and evictions, each one CAS of
//!   a 128-bit word, so a process killed at any instant leaves no half-written bucket.
//! * [`lock`]: the one lock (a new key's insert), which a waiter takes over from a holder
//!   whose process died.
//! * [`memo`]: this process's memo of its keys' fingerprints, so that a repeated key skips
//!   SipHash (a long key) or the bijection (a short one).
//!
//! Every process reads time through the clock base the region's creator stored (see
//! `MonotonicClock`), so that their readings are comparable; a manual clock (tests) is used
//! as given. docs/SHM.md has the design, the figures and the failure modes.

// Under loom only the models use the table and its lock (no file, no mapping).
#[cfg(any(not(sluicegate_loom), test))]
pub(crate) mod lock;
#[cfg(any(not(sluicegate_loom), test))]
pub(crate) mod memo;
#[cfg(not(sluicegate_loom))]
pub(crate) mod region;
#[cfg(any(not(sluicegate_loom), test))]
pub(crate) mod table;

#[cfg(not(sluicegate_loom))]
mod store;
#[cfg(not(sluicegate_loom))]
pub(crate) use store::{ShmBucket, ShmStore};

#[cfg(any(not(sluicegate_loom), test))]
pub use table::Audit;
