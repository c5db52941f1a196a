//! Layer: stress. Real threads on shared limiters: admitted cost never exceeds
//! `initial + k*d/P` (and every accrued token is admitted or still in the bucket), keyed
//! stores under floods of keys; plus rough per-algorithm timings (ignored, release only).

mod keyed;
mod operations;
mod shm;
mod threads;
mod timing;
