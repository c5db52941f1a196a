//! Layer: loom. Every interleaving (bounded preemptions) of 2-3 threads on the real code under
//! `--cfg sluicegate_loom`: the CAS cell, each algorithm, composite refunds, the keyed stores'
//! insert, evict and key bound. Run by `ci/loom.sh`; empty in an ordinary build.
#![cfg(sluicegate_loom)]

mod algorithms;
mod bound;
mod cell;
mod keyed;
mod keyed_log;
mod reconfigure;
