//! Layer: examples. The documented behaviour, case by case: the seed documents' worked
//! examples, each algorithm's rules at their edges, keyed limiters' eviction and key bound,
//! and the acquire policy, all on a manual clock so that every figure is exact.

#[cfg(feature = "tokio")]
mod acquire_async;
mod algorithms;
mod keyed;
mod operations;
mod shm;
mod token_bucket;
