//! Operating a limiter (docs/OPERATIONS.md): counters (`sg_metrics`), shadow mode, live
//! reconfiguration, the rejection hook (`sg_observe`) and the Prometheus text of the core's
//! `render_prometheus`. Conversion only.

use crate::decision::sg_decision;
use crate::error::{fail, from_core, null, sg_result, write_output};
use crate::handle::{self, Handle};
use crate::keyed::KeyedLimiter;
use crate::limiter::{new, Limiter};
use crate::{sg_keyed_limiter, sg_limiter, sg_manual_clock, sg_quota, store};
use core::ffi::{c_char, c_void, CStr};
use sluicegate::{Metrics, Quota};

/// Called after each rejection (shadow ones included), on the deciding thread, after the
/// decision and outside the limiter's locks (it may call the limiter, `sg_*_set_quota`
/// included). `key`/`key_len`: the key's bytes, valid during the call (NULL and 0 for a
/// single-bucket limiter); `decision`: the decision returned (`shadow_rejected` set in shadow
/// mode), valid during the call. It must not unwind (no C++ exception, no `longjmp` out).
pub type sg_reject_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        key: *const u8,
        key_len: usize,
        cost: u64,
        decision: *const sg_decision,
    ),
>;

/// What a limiter observes, for `sg_limiter_new_observed` and `sg_keyed_limiter_new_observed`.
/// A zeroed struct observes nothing.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sg_observe {
    /// Count decisions (`sg_*_metrics`).
    pub metrics: bool,
    /// Start in shadow (dry-run) mode: every request is admitted, `shadow_rejected` marks
    /// those enforcement would reject (see `sg_*_set_shadow`).
    pub shadow: bool,
    /// NULL, or the hook called for each rejection.
    pub on_reject: sg_reject_fn,
    /// Passed to `on_reject` as is; it must stay valid, and the hook callable from every
    /// thread that decides, until the limiter is freed.
    pub user_data: *mut c_void,
}

/// A snapshot of a limiter's counters (docs/OPERATIONS.md, "Metrics"): every decision is
/// counted once as `allowed`, `rejected` or `shadow_rejected`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sg_metrics {
    /// Requests admitted.
    pub allowed: u64,
    /// Requests rejected (enforced).
    pub rejected: u64,
    /// Requests enforcement would have rejected, let through by shadow mode.
    pub shadow_rejected: u64,
    /// Keys evicted (full buckets, or the fullest at the key bound).
    pub keys_evicted: u64,
    /// New keys refused at the key bound (`SG_ERR_KEY_STORE_FULL`).
    pub key_store_full: u64,
    /// Calls that failed with a store's error (`SG_ERR_STORE_*`).
    pub store_errors: u64,
    /// Quotas set by `sg_*_set_quota`.
    pub reconfigurations: u64,
    /// Keys held (when `has_keys`: a keyed limiter in memory or a region).
    pub keys: u64,
    /// Whether `keys` is given.
    pub has_keys: bool,
    /// Whether the limiter is in shadow mode.
    pub shadow: bool,
}

impl sg_metrics {
    fn new(m: &Metrics) -> Self {
        Self {
            allowed: m.allowed,
            rejected: m.rejected,
            shadow_rejected: m.shadow_rejected,
            keys_evicted: m.keys_evicted,
            key_store_full: m.key_store_full,
            store_errors: m.store_errors,
            reconfigurations: m.reconfigurations,
            keys: m.keys.unwrap_or(0),
            has_keys: m.keys.is_some(),
            shadow: m.shadow,
        }
    }

    fn to_core(self) -> Metrics {
        let mut m = Metrics::default();
        m.allowed = self.allowed;
        m.rejected = self.rejected;
        m.shadow_rejected = self.shadow_rejected;
        m.keys_evicted = self.keys_evicted;
        m.key_store_full = self.key_store_full;
        m.store_errors = self.store_errors;
        m.reconfigurations = self.reconfigurations;
        m.keys = self.has_keys.then_some(self.keys);
        m.shadow = self.shadow;
        m
    }
}

/// One label of a series: NUL-terminated UTF-8 name and value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sg_label {
    /// The label's name (`[a-zA-Z_][a-zA-Z0-9_]*`, not `outcome`, not starting with `__`).
    pub name: *const c_char,
    /// Its value (any UTF-8; escaped by the renderer).
    pub value: *const c_char,
}

/// One series of `sg_render_prometheus`: a snapshot and its labels.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct sg_series {
    /// `n_labels` labels (NULL only with 0).
    pub labels: *const sg_label,
    /// How many.
    pub n_labels: usize,
    /// The snapshot (from `sg_limiter_metrics` or `sg_keyed_limiter_metrics`).
    pub metrics: sg_metrics,
}

/// The caller's hook and its data, as the core's hook needs them.
#[derive(Clone, Copy)]
struct Hook {
    f: unsafe extern "C" fn(*mut c_void, *const u8, usize, u64, *const sg_decision),
    user_data: *mut c_void,
}

// SAFETY: `sg_observe` documents that `user_data` stays valid and the hook may be called from
// every thread that decides until the limiter is freed: the caller vouches for both.
unsafe impl Send for Hook {}
// SAFETY: as above; the hook only receives `user_data`, never dereferenced here.
unsafe impl Sync for Hook {}

impl Hook {
    fn call(self, key: &[u8], cost: u64, d: &sluicegate::Decision) {
        let d = sg_decision::new(d);
        let ptr = if key.is_empty() {
            core::ptr::null()
        } else {
            key.as_ptr()
        };
        // SAFETY: the caller's hook, with the contract of `sg_reject_fn`: `key` is valid for
        // `key.len()` bytes and `d` for one read during the call.
        unsafe { (self.f)(self.user_data, ptr, key.len(), cost, &d) };
    }
}

/// `(metrics, shadow, hook)` of a caller's `sg_observe` (NULL: none). The bools are read as
/// bytes (any non-zero byte is true), so no invalid `bool` is ever made.
///
/// # Safety
/// `observe` is NULL or valid for one read.
unsafe fn observe_of(observe: *const sg_observe) -> (bool, bool, Option<Hook>) {
    if observe.is_null() {
        return (false, false, None);
    }
    // SAFETY: non-NULL and valid for one read (caller contract); fields are read through raw
    // addresses, the bools as bytes.
    unsafe {
        let metrics = core::ptr::addr_of!((*observe).metrics).cast::<u8>().read() != 0;
        let shadow = core::ptr::addr_of!((*observe).shadow).cast::<u8>().read() != 0;
        let f = core::ptr::addr_of!((*observe).on_reject).read();
        let user_data = core::ptr::addr_of!((*observe).user_data).read();
        (metrics, shadow, f.map(|f| Hook { f, user_data }))
    }
}

/// Like `sg_limiter_new_in_store`, with what the limiter observes: `store` NULL is `"memory"`,
/// `clock` NULL the default clock, `observe` NULL nothing observed.
///
/// # Safety
/// `quota` and `clock` are NULL or live handles; `store` is NULL or a NUL-terminated string;
/// `observe` is NULL or valid for one read; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_new_observed(
    quota: *const sg_quota,
    store: *const c_char,
    clock: *const sg_manual_clock,
    observe: *const sg_observe,
    out: *mut *mut sg_limiter,
) -> sg_result {
    ffi!({
        const F: &str = "sg_limiter_new_observed";
        // SAFETY: forwarded caller contract.
        let (metrics, shadow, hook) = unsafe { observe_of(observe) };
        // SAFETY: forwarded caller contract (`clock` is NULL or a live handle).
        let clock = || unsafe { store::clock(clock, F) };
        // SAFETY: forwarded caller contract.
        unsafe {
            new(quota, clock, out, F, |quota, clock| {
                let spec = spec_or_memory(store, F)?;
                let mut b = sluicegate::Limiter::builder(quota)
                    .store(spec)
                    .clock(clock)
                    .metrics(metrics)
                    .shadow(shadow);
                if let Some(h) = hook {
                    b = b.on_reject(move |r| h.call(&[], r.cost(), r.decision()));
                }
                b.build().map_err(from_core)
            })
        }
    })
}

/// Like `sg_keyed_limiter_new_in_store`, with what the limiter observes (`store` NULL is
/// `"memory"`, `clock` NULL the default clock, `observe` NULL nothing observed). The hook gets
/// each rejected key's bytes.
///
/// # Safety
/// As `sg_limiter_new_observed`.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_new_observed(
    quota: *const sg_quota,
    store: *const c_char,
    max_keys: u64,
    on_full: u32,
    clock: *const sg_manual_clock,
    observe: *const sg_observe,
    out: *mut *mut sg_keyed_limiter,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_new_observed";
        // SAFETY: forwarded caller contract.
        let (metrics, shadow, hook) = unsafe { observe_of(observe) };
        // SAFETY: forwarded caller contract (`clock` is NULL or a live handle).
        let clock = || unsafe { store::clock(clock, F) };
        // SAFETY: forwarded caller contract.
        unsafe {
            new(quota, clock, out, F, |quota, clock| {
                let on_full = crate::options::on_full(on_full).map_err(from_core)?;
                let mut b = sluicegate::KeyedLimiter::<Box<[u8]>>::builder(quota)
                    .clock(clock)
                    .on_full(on_full)
                    .store(spec_or_memory(store, F)?)
                    .metrics(metrics)
                    .shadow(shadow);
                if max_keys != 0 {
                    b = b.max_keys(crate::keyed::max_keys(max_keys, F)?);
                }
                if let Some(h) = hook {
                    b = b.on_reject(move |r| h.call(r.key(), r.cost(), r.decision()));
                }
                b.build().map_err(from_core)
            })
        }
    })
}

/// The store a NULL-able string names (NULL: memory).
///
/// # Safety
/// `store` is NULL or a NUL-terminated string.
unsafe fn spec_or_memory(
    store: *const c_char,
    func: &str,
) -> Result<sluicegate::StoreSpec, sg_result> {
    if store.is_null() {
        return Ok(sluicegate::StoreSpec::Memory);
    }
    // SAFETY: forwarded caller contract.
    unsafe { store::spec(store, func) }
}

/// The operations both limiter kinds have, for the functions below.
trait Operated: Handle {
    fn set_quota_at(&self, quota: Quota, now: Option<u64>) -> Result<(), sluicegate::Error>;
    fn set_shadow(&self, on: bool);
    fn is_shadow(&self) -> bool;
    fn metrics(&self) -> Option<Metrics>;
}

impl Operated for Limiter {
    fn set_quota_at(&self, quota: Quota, now: Option<u64>) -> Result<(), sluicegate::Error> {
        match now {
            Some(t) => sluicegate::Limiter::set_quota_at(self, quota, t),
            None => self.set_quota(quota),
        }
    }
    fn set_shadow(&self, on: bool) {
        sluicegate::Limiter::set_shadow(self, on);
    }
    fn is_shadow(&self) -> bool {
        sluicegate::Limiter::is_shadow(self)
    }
    fn metrics(&self) -> Option<Metrics> {
        sluicegate::Limiter::metrics(self)
    }
}

impl Operated for KeyedLimiter {
    fn set_quota_at(&self, quota: Quota, now: Option<u64>) -> Result<(), sluicegate::Error> {
        match now {
            Some(t) => sluicegate::KeyedLimiter::set_quota_at(self, quota, t),
            None => self.set_quota(quota),
        }
    }
    fn set_shadow(&self, on: bool) {
        sluicegate::KeyedLimiter::set_shadow(self, on);
    }
    fn is_shadow(&self) -> bool {
        sluicegate::KeyedLimiter::is_shadow(self)
    }
    fn metrics(&self) -> Option<Metrics> {
        sluicegate::KeyedLimiter::metrics(self)
    }
}

/// # Safety
/// `limiter` and `quota` are NULL or live handles.
unsafe fn set_quota<L: Operated>(
    limiter: *const L::Opaque,
    quota: *const sg_quota,
    now: Option<u64>,
    func: &str,
) -> Result<(), sg_result> {
    // SAFETY: forwarded caller contract.
    let l = unsafe { handle::borrow::<L>(limiter, func, "limiter")? };
    // SAFETY: forwarded caller contract.
    let q = unsafe { handle::borrow::<Quota>(quota, func, "quota")? };
    l.set_quota_at(*q, now).map_err(from_core)
}

/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or valid for one write.
unsafe fn is_shadow<L: Operated>(
    limiter: *const L::Opaque,
    out: *mut bool,
    func: &str,
) -> Result<(), sg_result> {
    // SAFETY: forwarded caller contract.
    let l = unsafe { handle::borrow::<L>(limiter, func, "limiter")? };
    if out.is_null() {
        return Err(null(func, "out"));
    }
    // SAFETY: non-NULL and valid for one write (caller contract).
    unsafe { out.write(l.is_shadow()) };
    Ok(())
}

/// # Safety
/// `limiter` is NULL or a live handle; `out` and `counting` are NULL or valid for one write.
unsafe fn metrics<L: Operated>(
    limiter: *const L::Opaque,
    out: *mut sg_metrics,
    counting: *mut bool,
    func: &str,
) -> Result<(), sg_result> {
    // SAFETY: forwarded caller contract.
    let l = unsafe { handle::borrow::<L>(limiter, func, "limiter")? };
    if out.is_null() {
        return Err(null(func, "out"));
    }
    if counting.is_null() {
        return Err(null(func, "counting"));
    }
    let m = l.metrics();
    // SAFETY: both non-NULL and valid for one write (caller contract).
    unsafe {
        out.write(m.as_ref().map(sg_metrics::new).unwrap_or_default());
        counting.write(m.is_some());
    }
    Ok(())
}

/// Changes the limiter's quota live (`quota` is copied; same algorithm): the bucket keeps its
/// tokens, clamped to the new burst, and refills at the new rate (docs/OPERATIONS.md, "The
/// carry rule"). Errors: `SG_ERR_INVALID_OPTION` (another algorithm or refill mode),
/// `SG_ERR_STORE_UNSUPPORTED` (a shared-memory region or Redis); the limiter is then unchanged.
///
/// # Safety
/// `limiter` and `quota` are NULL or live handles.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_set_quota(
    limiter: *const sg_limiter,
    quota: *const sg_quota,
) -> sg_result {
    // SAFETY: forwarded caller contract.
    ffi!({ unsafe { set_quota::<Limiter>(limiter, quota, None, "sg_limiter_set_quota") } })
}

/// `sg_limiter_set_quota` at the clock reading `now_ns`.
///
/// # Safety
/// `limiter` and `quota` are NULL or live handles.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_set_quota_at(
    limiter: *const sg_limiter,
    quota: *const sg_quota,
    now_ns: u64,
) -> sg_result {
    const F: &str = "sg_limiter_set_quota_at";
    // SAFETY: forwarded caller contract.
    ffi!({ unsafe { set_quota::<Limiter>(limiter, quota, Some(now_ns), F) } })
}

/// Turns shadow (dry-run) mode on or off: every request is then admitted, and
/// `sg_decision.shadow_rejected` marks those enforcement would reject.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_set_shadow(limiter: *const sg_limiter, on: bool) -> sg_result {
    ffi!({
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<Limiter>(limiter, "sg_limiter_set_shadow", "limiter")? };
        Operated::set_shadow(l, on);
        Ok(())
    })
}

/// Writes whether the limiter is in shadow mode to `*out`.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_is_shadow(
    limiter: *const sg_limiter,
    out: *mut bool,
) -> sg_result {
    // SAFETY: forwarded caller contract.
    ffi!({ unsafe { is_shadow::<Limiter>(limiter, out, "sg_limiter_is_shadow") } })
}

/// Writes a snapshot of the counters to `*out` and whether the limiter counts to `*counting`
/// (false, and a zeroed `*out`, when built without `metrics`).
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` and `counting` are NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_limiter_metrics(
    limiter: *const sg_limiter,
    out: *mut sg_metrics,
    counting: *mut bool,
) -> sg_result {
    // SAFETY: forwarded caller contract.
    ffi!({ unsafe { metrics::<Limiter>(limiter, out, counting, "sg_limiter_metrics") } })
}

/// `sg_limiter_set_quota` for every key of a keyed limiter (keys first seen afterwards start
/// fresh under the new quota).
///
/// # Safety
/// `limiter` and `quota` are NULL or live handles.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_set_quota(
    limiter: *const sg_keyed_limiter,
    quota: *const sg_quota,
) -> sg_result {
    const F: &str = "sg_keyed_limiter_set_quota";
    // SAFETY: forwarded caller contract.
    ffi!({ unsafe { set_quota::<KeyedLimiter>(limiter, quota, None, F) } })
}

/// `sg_keyed_limiter_set_quota` at the clock reading `now_ns`.
///
/// # Safety
/// `limiter` and `quota` are NULL or live handles.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_set_quota_at(
    limiter: *const sg_keyed_limiter,
    quota: *const sg_quota,
    now_ns: u64,
) -> sg_result {
    const F: &str = "sg_keyed_limiter_set_quota_at";
    // SAFETY: forwarded caller contract.
    ffi!({ unsafe { set_quota::<KeyedLimiter>(limiter, quota, Some(now_ns), F) } })
}

/// `sg_limiter_set_shadow` for a keyed limiter.
///
/// # Safety
/// `limiter` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_set_shadow(
    limiter: *const sg_keyed_limiter,
    on: bool,
) -> sg_result {
    ffi!({
        const F: &str = "sg_keyed_limiter_set_shadow";
        // SAFETY: forwarded caller contract.
        let l = unsafe { handle::borrow::<KeyedLimiter>(limiter, F, "limiter")? };
        Operated::set_shadow(l, on);
        Ok(())
    })
}

/// `sg_limiter_is_shadow` for a keyed limiter.
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_is_shadow(
    limiter: *const sg_keyed_limiter,
    out: *mut bool,
) -> sg_result {
    const F: &str = "sg_keyed_limiter_is_shadow";
    // SAFETY: forwarded caller contract.
    ffi!({ unsafe { is_shadow::<KeyedLimiter>(limiter, out, F) } })
}

/// `sg_limiter_metrics` for a keyed limiter (`keys`: the keys held, for memory and regions).
///
/// # Safety
/// `limiter` is NULL or a live handle; `out` and `counting` are NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_keyed_limiter_metrics(
    limiter: *const sg_keyed_limiter,
    out: *mut sg_metrics,
    counting: *mut bool,
) -> sg_result {
    const F: &str = "sg_keyed_limiter_metrics";
    // SAFETY: forwarded caller contract.
    ffi!({ unsafe { metrics::<KeyedLimiter>(limiter, out, counting, F) } })
}

/// A caller's NUL-terminated UTF-8 string.
///
/// # Safety
/// `s` is NULL or a NUL-terminated string, alive during the call.
unsafe fn text<'a>(s: *const c_char, func: &str, what: &str) -> Result<&'a str, sg_result> {
    if s.is_null() {
        return Err(null(func, what));
    }
    // SAFETY: non-NULL and NUL-terminated (caller contract).
    let bytes = unsafe { CStr::from_ptr(s) }.to_bytes();
    core::str::from_utf8(bytes).map_err(|_| {
        fail(
            sg_result::SG_ERR_INVALID_ARGUMENT,
            format_args!("{func}: a label's {what} is not UTF-8"),
        )
    })
}

/// Renders `n` series in the Prometheus text format (0.0.4) by the core's `render_prometheus`
/// into `buf` (NUL-terminated; `*out_written` gets the bytes written, NUL excluded), like
/// `sg_result_message`: `SG_ERR_BUFFER_TOO_SMALL` when truncated (about 1.6 KiB plus 600
/// bytes per series, more with long labels). Errors: `SG_ERR_INVALID_OPTION` (a bad label
/// name, a repeated name, two series with one label set), `SG_ERR_INVALID_ARGUMENT` (text
/// that is not UTF-8), `SG_ERR_NULL_ARGUMENT`.
///
/// # Safety
/// `series` is NULL (only with `n == 0`) or valid for `n` reads, each with `n_labels` labels
/// of NUL-terminated strings; `buf` is NULL (only with `len == 0`) or valid for `len` bytes of
/// writes; `out_written` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn sg_render_prometheus(
    series: *const sg_series,
    n: usize,
    buf: *mut c_char,
    len: usize,
    out_written: *mut usize,
) -> sg_result {
    ffi!({
        const F: &str = "sg_render_prometheus";
        if series.is_null() && n > 0 {
            return Err(null(F, "series"));
        }
        if n > isize::MAX as usize / core::mem::size_of::<sg_series>() {
            return Err(too_many(F, "n", n));
        }
        // Grown as the series are read, not sized by the counts: a garbage count is an error
        // or the caller's broken contract, never an allocation that aborts the process.
        let mut labels: Vec<Vec<(&str, &str)>> = Vec::new();
        let mut snapshots = Vec::new();
        for i in 0..n {
            // SAFETY: `series` is valid for `n` reads (caller contract) and `i < n`; the
            // fields are read through raw addresses (the snapshot's bools below as bytes).
            let p = unsafe { series.add(i) };
            // SAFETY: as above.
            let (ls, nl) = unsafe {
                (
                    core::ptr::addr_of!((*p).labels).read(),
                    core::ptr::addr_of!((*p).n_labels).read(),
                )
            };
            if ls.is_null() && nl > 0 {
                return Err(null(F, "labels"));
            }
            if nl > isize::MAX as usize / core::mem::size_of::<sg_label>() {
                return Err(too_many(F, "n_labels", nl));
            }
            let mut set = Vec::new();
            for j in 0..nl {
                // SAFETY: `labels` is valid for `n_labels` reads (caller contract).
                let l = unsafe { ls.add(j).read() };
                // SAFETY: NUL-terminated strings (caller contract).
                set.push(unsafe { (text(l.name, F, "name")?, text(l.value, F, "value")?) });
            }
            labels.push(set);
            // SAFETY: `p` is valid for one read (above).
            let m = unsafe { read_metrics(core::ptr::addr_of!((*p).metrics)) };
            snapshots.push(m.to_core());
        }
        let input: Vec<(&[(&str, &str)], Metrics)> = labels
            .iter()
            .zip(snapshots)
            .map(|(l, m)| (l.as_slice(), m))
            .collect();
        let text = sluicegate::render_prometheus(&input).map_err(from_core)?;
        // SAFETY: forwarded caller contract.
        unsafe { write_output(F, &text, buf, len, out_written) }
    })
}

/// Reads a caller's snapshot without assuming that its bools are 0 or 1.
///
/// # Safety
/// `p` is non-NULL, aligned and valid for one read of an `sg_metrics`.
unsafe fn read_metrics(p: *const sg_metrics) -> sg_metrics {
    // SAFETY: forwarded caller contract; fields read through raw addresses, bools as bytes.
    unsafe {
        use core::ptr::addr_of;
        sg_metrics {
            allowed: addr_of!((*p).allowed).read(),
            rejected: addr_of!((*p).rejected).read(),
            shadow_rejected: addr_of!((*p).shadow_rejected).read(),
            keys_evicted: addr_of!((*p).keys_evicted).read(),
            key_store_full: addr_of!((*p).key_store_full).read(),
            store_errors: addr_of!((*p).store_errors).read(),
            reconfigurations: addr_of!((*p).reconfigurations).read(),
            keys: addr_of!((*p).keys).read(),
            has_keys: addr_of!((*p).has_keys).cast::<u8>().read() != 0,
            shadow: addr_of!((*p).shadow).cast::<u8>().read() != 0,
        }
    }
}

/// A count no array in memory can have.
#[cold]
#[inline(never)]
fn too_many(func: &str, arg: &str, n: usize) -> sg_result {
    fail(
        sg_result::SG_ERR_INVALID_ARGUMENT,
        format_args!("{func}: `{arg}` is {n}: more elements than fit in memory"),
    )
}
