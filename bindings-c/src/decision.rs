//! `sg_decision`: the answer to a request, the same figures as in every binding.

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
    /// The least wait in nanoseconds before the same request would be admitted; 0 when
    /// allowed, except for a leaky queue's admission, where it is the wait until the
    /// request's slot (the caller goes ahead only after it).
    pub retry_after_ns: u64,
    /// Nanoseconds until the bucket is full again; 0 when it is full.
    pub reset_after_ns: u64,
    /// The policy window in whole seconds (`w` of the IETF `RateLimit-Policy` field: the
    /// time an empty bucket takes to fill, at least 1). `sg_decision_headers` renders it.
    pub window_s: u64,
    /// Shadow mode let this request through although enforcement would reject it: `allowed`
    /// is true, the other figures are the rejection's (docs/OPERATIONS.md, "Shadow mode").
    pub shadow_rejected: bool,
}

impl sg_decision {
    /// The C form of a core decision.
    #[inline(always)]
    pub(crate) fn new(d: &Decision) -> Self {
        Self {
            allowed: d.allowed(),
            limit: d.limit(),
            remaining: d.remaining(),
            retry_after_ns: d.retry_after_nanos(),
            reset_after_ns: d.reset_after_nanos(),
            window_s: d.window_secs(),
            shadow_rejected: d.shadow_rejected(),
        }
    }

    /// The core decision with these figures (to render HTTP fields).
    pub(crate) fn to_core(self) -> Decision {
        Decision::from_figures(
            self.allowed,
            self.limit,
            self.remaining,
            self.retry_after_ns,
            self.reset_after_ns,
            self.window_s,
        )
    }
}
