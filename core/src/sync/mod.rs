//! The one place that names the atomics the lock-free protocols use.
//!
//! Under `--cfg sluicegate_loom` every type here is loom's model-checked equivalent, so the
//! models in `tests/loom.rs` explore every interleaving of the real code. A crate-specific cfg
//! (not `cfg(loom)`) keeps other crates in the build from switching to loom as well.

#[cfg(not(sluicegate_loom))]
mod imp {
    pub(crate) use super::wide::AtomicU128;
    pub(crate) use core::sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering,
    };
    pub(crate) use std::sync::{Arc, Mutex, MutexGuard};
    pub(crate) use std::thread::yield_now;
}

#[cfg(sluicegate_loom)]
mod imp {
    pub(crate) use loom::sync::atomic::{
        fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering,
    };
    pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
    pub(crate) use loom::thread::yield_now;

    /// loom has no 128-bit atomic: model one as a loom mutex around the value. Each operation
    /// is atomic, which is exactly the contract the cell relies on, and loom still explores
    /// every interleaving of the operations.
    #[derive(Debug)]
    pub(crate) struct AtomicU128(loom::sync::Mutex<u128>);

    impl AtomicU128 {
        pub(crate) fn new(v: u128) -> Self {
            Self(loom::sync::Mutex::new(v))
        }
        pub(crate) fn is_lock_free() -> bool {
            true
        }
        pub(crate) fn load(&self, _order: Ordering) -> u128 {
            *self.0.lock().unwrap()
        }
        pub(crate) fn store(&self, v: u128, _order: Ordering) {
            *self.0.lock().unwrap() = v;
        }
        pub(crate) fn swap(&self, v: u128, _order: Ordering) -> u128 {
            core::mem::replace(&mut *self.0.lock().unwrap(), v)
        }
        pub(crate) fn compare_exchange(
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

/// Locks `m`, ignoring poisoning: every critical section of the keyed store leaves its data
/// consistent at each step (a panic in a user's `Hash`/`Eq` cannot leave a half-made entry).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Tries to lock `m` without waiting (poisoning ignored as in [`lock`]).
pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// The 128-bit atomic, its load and compare-exchange inline on x86_64.
#[cfg(not(sluicegate_loom))]
mod wide;

/// Read sections for the stores' tables (user-space RCU, see the module).
pub(crate) mod rcu;

/// Atomics that must stay real even under loom: process-wide statics (the coarse clock's
/// cached reading) that no model exercises and loom cannot host outside a model.
pub(crate) mod real {
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
    pub(crate) use std::sync::{Mutex, OnceLock};
}
