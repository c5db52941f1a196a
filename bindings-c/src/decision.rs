//! `sg_decision`: the answer to a request, the same five figures as in every binding.

use sluicegate::Decision;

/// The outcome of a request. A rejection is a decision with `allowed == false`, not an
/// error. Functions write it only when they return `SG_OK`; on an error it is untouched.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct sg_decision {
    /// Whether the request was admitted.
    pub allowed: bool,
    /// The bucket's capacity (burst).
    pub limit: u64,
    /// Whole tokens left after this decision.
    pub remaining: u64,
    /// The least wait in nanoseconds before the same request would be admitted; 0 when allowed.
    pub retry_after_ns: u64,
    /// Nanoseconds until the bucket is full again; 0 when it is full.
    pub reset_after_ns: u64,
}

impl From<Decision> for sg_decision {
    #[inline]
    fn from(d: Decision) -> Self {
        Self {
            allowed: d.allowed(),
            limit: d.limit(),
            remaining: d.remaining(),
            retry_after_ns: d.retry_after_nanos(),
            reset_after_ns: d.reset_after_nanos(),
        }
    }
}
