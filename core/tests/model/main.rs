//! Layer: model. Property tests: the engine against the sequential reference model
//! (`sluicegate-model`) for random quotas, clock readings (backwards too), costs, refunds,
//! peeks, removes, sweeps and clears, single buckets and keyed ones.

mod algorithms;
mod dense;
mod keyed;
mod keyed_log;
mod keyed_ops;
mod reconfigure;
mod shadow;
mod token_bucket;
