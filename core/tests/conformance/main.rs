//! Layer: conformance. The shared vector files (`conformance/*.json`, one generator:
//! `conformance/generate.py`) through the Rust API: every language and every store runs the
//! same files and must agree bit for bit.

mod algorithms;
mod keyed;
mod shm;
mod token_bucket;
