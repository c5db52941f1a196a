//! The one place that names the atomics the lock-free protocols use.
//!
//! Under `--cfg sluicegate_loom` every type here is loom's model-checked equivalent, so the
//! models in `tests/loom.rs` explore every interleaving of the real code. A crate-specific cfg
//! (not `cfg(loom)`) keeps other crates in the build from switching to loom as well.

#[cfg(not(sluicegate_loom))]
mod imp {
    pub(crate) use core::sync::atomic::{AtomicU64, Ordering};
    pub(crate) use portable_atomic::AtomicU128;
    pub(crate) use std::sync::{Arc, Mutex};
}

#[cfg(sluicegate_loom)]
mod imp {
    pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
    pub(crate) use loom::sync::{Arc, Mutex};

    /// loom has no 128-bit atomic: model one as a loom mutex around the value. Each operation
    /// is atomic, which is exactly the contract the cell relies on, and loom still explores
    /// every interleaving of the operations.
    #[derive(Debug)]
    pub(crate) struct AtomicU128(loom::sync::Mutex<u128>);

    impl AtomicU128 {
        pub(crate) fn new(v: u128) -> Self {
            Self(loom::sync::Mutex::new(v))
        }
        pub(crate) fn load(&self, _order: Ordering) -> u128 {
            *self.0.lock().unwrap()
        }
        pub(crate) fn compare_exchange_weak(
            &self,
            current: u128,
            new: u128,
            _success: Ordering,
            _failure: Ordering,
        ) -> Result<u128, u128> {
            let mut guard = self.0.lock().unwrap();
            if *guard == current {
                *guard = new;
                Ok(current)
            } else {
                Err(*guard)
            }
        }
    }
}

pub(crate) use imp::*;

/// Atomics that must stay real even under loom: process-wide statics (the coarse clock's
/// cached reading) that no model exercises and loom cannot host outside a model.
pub(crate) mod real {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    pub(crate) use std::sync::OnceLock;
}
