//! The C API (`bindings-c`, linked in-process as its rlib) fed arbitrary bytes and lengths:
//! rate strings (with an explicit length, or NUL-terminated), keys of any bytes and lengths
//! (NULL with a length, lengths past any object), costs, clock readings, and op sequences
//! across quota, limiter, keyed limiter and manual clock handles, handles of the wrong kind
//! included; stores by name (`"memory"`, arbitrary text, and a keyed limiter's shared-memory
//! region in the temporary directory, removed after every input). Every call must return a defined `sg_result` that is not `SG_ERR_PANIC` (a
//! caught panic is a bug too), every decision must be consistent, and an option value
//! outside its C enum must be `SG_ERR_INVALID_OPTION`. Handles are never used after being
//! freed: that is undefined behaviour by the API's contract.
#![no_main]

use core::ffi::c_char;
use core::ptr::{null, null_mut};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use sluicegate_c::*;

#[derive(Arbitrary, Debug)]
enum Key {
    Bytes(Vec<u8>),
    /// NULL with this length (0: the empty key; otherwise `SG_ERR_NULL_ARGUMENT`).
    Null(u8),
    /// A real pointer with a length larger than any object (`SG_ERR_INVALID_ARGUMENT`).
    Huge(u8),
}

/// The store of `sg_*_new_in_store`.
#[derive(Arbitrary, Debug)]
enum StoreArg {
    Memory,
    /// Any text up to its first NUL, except text that names a region (it is skipped: a
    /// fuzzer must not create files where it likes): `SG_ERR_INVALID_OPTION` unless it is
    /// "memory".
    Text(Vec<u8>),
    /// A region of `capacity + 1` keys in the temporary directory (keyed limiters only:
    /// the core's `Limiter::reserve_within_at` does not reach a single bucket in a region yet,
    /// and panics, which `sg_limiter_reserve` and `sg_limiter_acquire_timeout` would report).
    Region {
        capacity: u8,
    },
}

#[derive(Arbitrary, Debug)]
enum Op {
    ParseLen(Vec<u8>),
    ParseNul(Vec<u8>),
    QuotaNew {
        count: u64,
        period_ns: u64,
        burst: u64,
    },
    SetInitial(u8, u64),
    SetRefill(u8, u32),
    QuotaText(u8, u8),
    NewLimiter {
        quota: u8,
        manual: bool,
    },
    NewKeyed {
        quota: u8,
        max_keys: u16,
        on_full: u32,
        manual: bool,
    },
    NewInStore {
        quota: u8,
        store: StoreArg,
        /// 0: a region's own capacity (the default bound in memory).
        max_keys: u8,
        on_full: u32,
        manual: bool,
        keyed: bool,
    },
    ClockSet(u64),
    ClockAdvance(u64),
    Acquire {
        limiter: u8,
        cost: u64,
        at: Option<u64>,
    },
    Reserve {
        limiter: u8,
        cost: u64,
        max_wait: u64,
    },
    Refund {
        limiter: u8,
        cost: u64,
        at: Option<u64>,
        cancel: bool,
    },
    AcquireNoWait {
        limiter: u8,
        cost: u64,
    },
    Keyed {
        keyed: u8,
        key: Key,
        cost: u64,
        at: Option<u64>,
        what: u8,
    },
    KeyedStore {
        keyed: u8,
        what: u8,
    },
    Composite {
        parts: Vec<u8>,
        cost: u64,
        at: Option<u64>,
        refund: bool,
    },
    Headers {
        style: u32,
        policy: Vec<u8>,
        buf_len: u16,
    },
    /// A handle of the wrong kind (or one that is no handle) where another belongs.
    WrongKind {
        from: u8,
        to: u8,
        index: u8,
    },
    Free {
        kind: u8,
        index: u8,
    },
    Text {
        code: u32,
        buf_len: u8,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    start_ns: u64,
    ops: Vec<Op>,
}

/// Asserts that `rc` is a defined code and no panic was caught.
#[track_caller]
fn ok(rc: sg_result) -> bool {
    let code = rc as u32;
    // SAFETY: `sg_result_name` returns a static NUL-terminated string.
    let name = unsafe { core::ffi::CStr::from_ptr(sg_result_name(code)) };
    assert_ne!(name.to_bytes(), b"unknown", "undefined code {code}");
    if rc == sg_result::SG_ERR_PANIC {
        let mut buf = [0 as c_char; 512];
        // SAFETY: the buffer is valid for its length.
        unsafe { sg_last_error_message(buf.as_mut_ptr(), buf.len(), null_mut()) };
        // SAFETY: NUL-terminated by sg_last_error_message.
        let detail = unsafe { core::ffi::CStr::from_ptr(buf.as_ptr()) };
        panic!("a panic was caught in the library: {detail:?}");
    }
    rc == sg_result::SG_OK
}

#[track_caller]
fn sane(d: &sg_decision, cost: u64) {
    assert!(d.remaining <= d.limit, "{d:?}");
    assert!(d.window_s >= 1, "{d:?}");
    if d.allowed && cost > 0 {
        assert!(cost <= d.limit, "{d:?} for cost {cost}");
    }
}

fn pick<T: Copy>(v: &[T], i: u8) -> Option<T> {
    (!v.is_empty()).then(|| v[usize::from(i) % v.len()])
}

#[derive(Default)]
struct Handles {
    quotas: Vec<*mut sg_quota>,
    limiters: Vec<*mut sg_limiter>,
    keyed: Vec<*mut sg_keyed_limiter>,
    clock: Option<*mut sg_manual_clock>,
    last: Option<sg_decision>,
}

impl Handles {
    /// One live handle of kind `kind % 4`, or aligned memory that is no handle.
    fn any(&self, kind: u8, index: u8, garbage: &[u64; 4]) -> *const u8 {
        let p = match kind % 5 {
            0 => pick(&self.quotas, index).map(|p| p as *const u8),
            1 => pick(&self.limiters, index).map(|p| p as *const u8),
            2 => pick(&self.keyed, index).map(|p| p as *const u8),
            3 => self.clock.map(|p| p as *const u8),
            _ => None,
        };
        p.unwrap_or(garbage.as_ptr().cast())
    }
}

/// This process's region file (one per fuzzing process; removed after every input).
fn region_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("sluicegate-fuzz-c_api-{}", std::process::id()))
}

fuzz_target!(|input: Input| {
    let mut h = Handles::default();
    let mut clock = null_mut();
    // SAFETY: `clock` is valid for one write.
    assert!(ok(unsafe {
        sg_manual_clock_new(input.start_ns, &mut clock)
    }));
    h.clock = Some(clock);
    let garbage = [0x3c3c_3c3c_3c3c_3c3c_u64; 4];
    let mut d = sg_decision {
        allowed: false,
        limit: 0,
        remaining: 0,
        retry_after_ns: 0,
        reset_after_ns: 0,
        window_s: 0,
        shadow_rejected: false,
    };
    for op in input.ops.iter().take(256) {
        // SAFETY: (the whole block) every pointer passed is NULL, a live handle of this
        // input (never one already freed), aligned memory the test owns, or a buffer valid
        // for the length passed with it; the documented preconditions of each function.
        unsafe {
            match op {
                Op::ParseLen(bytes) => {
                    let mut q = null_mut();
                    if ok(sg_quota_parse_len(bytes.as_ptr(), bytes.len(), &mut q)) {
                        h.quotas.push(q);
                    } else {
                        assert!(q.is_null());
                    }
                }
                Op::ParseNul(bytes) => {
                    let mut text = bytes.clone();
                    text.push(0);
                    let mut q = null_mut();
                    if ok(sg_quota_parse(text.as_ptr().cast(), &mut q)) {
                        h.quotas.push(q);
                    }
                }
                Op::QuotaNew {
                    count,
                    period_ns,
                    burst,
                } => {
                    let mut q = null_mut();
                    if ok(sg_quota_new(*count, *period_ns, *burst, &mut q)) {
                        h.quotas.push(q);
                    }
                }
                Op::SetInitial(i, v) => {
                    if let Some(q) = pick(&h.quotas, *i) {
                        ok(sg_quota_set_initial(q, *v));
                    }
                }
                Op::SetRefill(i, v) => {
                    if let Some(q) = pick(&h.quotas, *i) {
                        let rc = sg_quota_set_refill(q, *v);
                        ok(rc);
                        if *v > sg_refill::SG_REFILL_INTERVAL as u32 {
                            assert_eq!(rc, sg_result::SG_ERR_INVALID_OPTION);
                        }
                    }
                }
                Op::QuotaText(i, len) => {
                    if let Some(q) = pick(&h.quotas, *i) {
                        let mut buf = vec![0 as c_char; usize::from(*len)];
                        let mut n = usize::MAX;
                        let rc = sg_quota_to_string(q, buf.as_mut_ptr(), buf.len(), &mut n);
                        ok(rc);
                        assert!(n < buf.len().max(1));
                        let mut info = core::mem::MaybeUninit::<sg_quota_info>::uninit();
                        assert!(ok(sg_quota_get_info(q, info.as_mut_ptr())));
                        // A quota's canonical text parses back (when it was not truncated).
                        if rc == sg_result::SG_OK {
                            let mut again = null_mut();
                            assert!(ok(sg_quota_parse(buf.as_ptr(), &mut again)));
                            sg_quota_free(again);
                        }
                    }
                }
                Op::NewLimiter { quota, manual } => {
                    if let Some(q) = pick(&h.quotas, *quota) {
                        let mut l = null_mut();
                        let rc = if *manual {
                            sg_limiter_new_with_clock(q, clock, &mut l)
                        } else {
                            sg_limiter_new(q, &mut l)
                        };
                        if ok(rc) {
                            h.limiters.push(l);
                        }
                    }
                }
                Op::NewKeyed {
                    quota,
                    max_keys,
                    on_full,
                    manual,
                } => {
                    if let Some(q) = pick(&h.quotas, *quota) {
                        let mut k = null_mut();
                        let (max, of) = (u64::from(*max_keys), *on_full);
                        let rc = if *manual {
                            sg_keyed_limiter_new_with_clock(q, max, of, clock, &mut k)
                        } else {
                            sg_keyed_limiter_new(q, max, of, &mut k)
                        };
                        if ok(rc) {
                            h.keyed.push(k);
                        } else if of > sg_on_full::SG_ON_FULL_EVICT_FULLEST as u32 {
                            // The policy is checked before the limiter is made.
                            assert_eq!(rc, sg_result::SG_ERR_INVALID_OPTION);
                        }
                    }
                }
                Op::NewInStore {
                    quota,
                    store,
                    max_keys,
                    on_full,
                    manual,
                    keyed,
                } => {
                    let Some(q) = pick(&h.quotas, *quota) else {
                        continue;
                    };
                    let (text, region) = match store {
                        StoreArg::Memory => (b"memory".to_vec(), false),
                        StoreArg::Text(t) => {
                            let t: Vec<u8> = t.iter().copied().take_while(|&b| b != 0).collect();
                            if t.windows(4).any(|w| w.eq_ignore_ascii_case(b"shm:")) {
                                continue;
                            }
                            (t, false)
                        }
                        StoreArg::Region { capacity } => {
                            if !keyed {
                                continue;
                            }
                            let spec = format!(
                                "shm:{}?capacity={}",
                                region_path().display(),
                                u16::from(*capacity) + 1
                            );
                            (spec.into_bytes(), true)
                        }
                    };
                    let memory = core::str::from_utf8(&text)
                        .is_ok_and(|t| t.trim().eq_ignore_ascii_case("memory"));
                    let text = std::ffi::CString::new(text).expect("no NUL");
                    let c = if *manual { clock.cast_const() } else { null() };
                    let rc = if *keyed {
                        let mut k = null_mut();
                        let (n, of) = (u64::from(*max_keys), *on_full);
                        let rc = sg_keyed_limiter_new_in_store(q, text.as_ptr(), n, of, c, &mut k);
                        if ok(rc) {
                            h.keyed.push(k);
                        } else {
                            assert!(k.is_null());
                        }
                        rc
                    } else {
                        let mut l = null_mut();
                        let rc = sg_limiter_new_in_store(q, text.as_ptr(), c, &mut l);
                        if ok(rc) {
                            h.limiters.push(l);
                        } else {
                            assert!(l.is_null());
                        }
                        rc
                    };
                    let bad_policy =
                        *keyed && *on_full > sg_on_full::SG_ON_FULL_EVICT_FULLEST as u32;
                    if !region && (!memory || bad_policy) {
                        assert_eq!(rc, sg_result::SG_ERR_INVALID_OPTION, "{text:?}");
                    }
                }
                Op::ClockSet(t) => assert!(ok(sg_manual_clock_set(clock, *t))),
                Op::ClockAdvance(t) => assert!(ok(sg_manual_clock_advance(clock, *t))),
                Op::Acquire { limiter, cost, at } => {
                    if let Some(l) = pick(&h.limiters, *limiter) {
                        let rc = match at {
                            Some(t) => sg_limiter_try_acquire_at(l, *t, *cost, &mut d),
                            None => sg_limiter_try_acquire(l, *cost, &mut d),
                        };
                        if ok(rc) {
                            sane(&d, *cost);
                            h.last = Some(d);
                        }
                    }
                }
                Op::Reserve {
                    limiter,
                    cost,
                    max_wait,
                } => {
                    if let Some(l) = pick(&h.limiters, *limiter) {
                        if ok(sg_limiter_reserve(l, *cost, *max_wait, &mut d)) {
                            sane(&d, *cost);
                            if d.allowed {
                                assert!(d.retry_after_ns <= *max_wait, "{d:?}");
                            }
                            h.last = Some(d);
                        }
                    }
                }
                Op::Refund {
                    limiter,
                    cost,
                    at,
                    cancel,
                } => {
                    if let Some(l) = pick(&h.limiters, *limiter) {
                        ok(match (at, cancel) {
                            (Some(t), _) => sg_limiter_refund_at(l, *t, *cost),
                            (None, true) => sg_limiter_cancel(l, *cost),
                            (None, false) => sg_limiter_refund(l, *cost),
                        });
                    }
                }
                Op::AcquireNoWait { limiter, cost } => {
                    // Timeout 0: never sleeps on a rejection; a leaky queue admits no wait.
                    if let Some(l) = pick(&h.limiters, *limiter) {
                        if ok(sg_limiter_acquire_timeout(l, *cost, 0, &mut d)) {
                            sane(&d, *cost);
                        }
                        let mut now = 0;
                        assert!(ok(sg_limiter_now(l, &mut now)));
                    }
                }
                Op::Keyed {
                    keyed,
                    key,
                    cost,
                    at,
                    what,
                } => {
                    let Some(k) = pick(&h.keyed, *keyed) else {
                        continue;
                    };
                    let (kp, kn): (*const u8, usize) = match key {
                        Key::Bytes(b) => (b.as_ptr(), b.len()),
                        Key::Null(n) => (null(), usize::from(*n)),
                        Key::Huge(n) => (b"k".as_ptr(), usize::MAX - usize::from(*n)),
                    };
                    let bad_key = matches!(key, Key::Huge(_)) || (kp.is_null() && kn > 0);
                    let rc = match what % 5 {
                        0 => match at {
                            Some(t) => {
                                sg_keyed_limiter_try_acquire_at(k, kp, kn, *t, *cost, &mut d)
                            }
                            None => sg_keyed_limiter_try_acquire(k, kp, kn, *cost, &mut d),
                        },
                        1 => sg_keyed_limiter_peek(k, kp, kn, &mut d),
                        2 => match at {
                            Some(t) => sg_keyed_limiter_refund_at(k, kp, kn, *t, *cost),
                            None => sg_keyed_limiter_refund(k, kp, kn, *cost),
                        },
                        3 => sg_keyed_limiter_acquire_timeout(k, kp, kn, *cost, 0, &mut d),
                        _ => {
                            let mut removed = false;
                            sg_keyed_limiter_remove(k, kp, kn, &mut removed)
                        }
                    };
                    if bad_key {
                        assert!(matches!(
                            rc,
                            sg_result::SG_ERR_NULL_ARGUMENT | sg_result::SG_ERR_INVALID_ARGUMENT
                        ));
                    } else if ok(rc) && matches!(what % 5, 0 | 1 | 3) {
                        sane(&d, if what % 5 == 1 { 0 } else { *cost });
                        h.last = Some(d);
                    }
                }
                Op::KeyedStore { keyed, what } => {
                    let Some(k) = pick(&h.keyed, *keyed) else {
                        continue;
                    };
                    let mut n = 0;
                    match what % 4 {
                        0 => assert!(ok(sg_keyed_limiter_sweep(k, &mut n))),
                        1 => assert!(ok(sg_keyed_limiter_clear(k))),
                        2 => assert!(ok(sg_keyed_limiter_now(k, &mut n))),
                        _ => assert!(ok(sg_keyed_limiter_len(k, &mut n))),
                    }
                }
                Op::Composite {
                    parts,
                    cost,
                    at,
                    refund,
                } => {
                    let ls: Vec<*const sg_limiter> = parts
                        .iter()
                        .take(16)
                        .filter_map(|&i| pick(&h.limiters, i).map(|p| p as *const _))
                        .collect();
                    let ptr = if parts.is_empty() {
                        null()
                    } else {
                        ls.as_ptr()
                    };
                    let rc = match (refund, at) {
                        (false, Some(t)) => {
                            sg_composite_try_acquire_at(ptr, ls.len(), *t, *cost, &mut d)
                        }
                        (false, None) => sg_composite_try_acquire(ptr, ls.len(), *cost, &mut d),
                        (true, Some(t)) => sg_composite_refund_at(ptr, ls.len(), *t, *cost),
                        (true, None) => sg_composite_refund(ptr, ls.len(), *cost),
                    };
                    if ok(rc) && !refund {
                        sane(&d, *cost);
                        h.last = Some(d);
                    }
                }
                Op::Headers {
                    style,
                    policy,
                    buf_len,
                } => {
                    let d = h.last.unwrap_or(d);
                    let mut buf = vec![0 as c_char; usize::from(*buf_len)];
                    let mut n = usize::MAX;
                    let rc = sg_decision_headers(
                        &d,
                        *style,
                        policy.as_ptr(),
                        policy.len(),
                        buf.as_mut_ptr(),
                        buf.len(),
                        &mut n,
                    );
                    ok(rc);
                    if *style > sg_header_style::SG_HEADERS_NONE as u32 {
                        assert_eq!(rc, sg_result::SG_ERR_INVALID_OPTION);
                    } else {
                        assert!(matches!(
                            rc,
                            sg_result::SG_OK | sg_result::SG_ERR_BUFFER_TOO_SMALL
                        ));
                        assert!(n < buf.len().max(1));
                        if buf.len() >= 4 * policy.len() + 256 {
                            assert_eq!(rc, sg_result::SG_OK);
                        }
                    }
                }
                Op::WrongKind { from, to, index } => {
                    let p = h.any(*from, *index, &garbage);
                    // Only a mismatch is tested here (a match is an ordinary call).
                    let rc = match to % 4 {
                        0 if from % 5 != 0 => sg_quota_set_initial(p as *mut sg_quota, 1),
                        1 if from % 5 != 1 => sg_limiter_try_acquire(p.cast(), 1, &mut d),
                        2 if from % 5 != 2 => {
                            sg_keyed_limiter_try_acquire(p.cast(), null(), 0, 1, &mut d)
                        }
                        3 if from % 5 != 3 => sg_manual_clock_set(p.cast(), 1),
                        _ => continue,
                    };
                    assert_eq!(rc, sg_result::SG_ERR_WRONG_HANDLE);
                    // A free of the wrong kind is refused and leaves the handle alone.
                    match to % 4 {
                        0 => sg_quota_free(p as *mut sg_quota),
                        1 => sg_limiter_free(p as *mut sg_limiter),
                        2 => sg_keyed_limiter_free(p as *mut sg_keyed_limiter),
                        _ => sg_manual_clock_free(p as *mut sg_manual_clock),
                    }
                }
                Op::Free { kind, index } => {
                    let i = usize::from(*index);
                    match kind % 3 {
                        0 if !h.quotas.is_empty() => {
                            sg_quota_free(h.quotas.swap_remove(i % h.quotas.len()))
                        }
                        1 if !h.limiters.is_empty() => {
                            sg_limiter_free(h.limiters.swap_remove(i % h.limiters.len()))
                        }
                        2 if !h.keyed.is_empty() => {
                            sg_keyed_limiter_free(h.keyed.swap_remove(i % h.keyed.len()))
                        }
                        _ => {}
                    }
                }
                Op::Text { code, buf_len } => {
                    let mut buf = vec![0 as c_char; usize::from(*buf_len)];
                    let mut n = usize::MAX;
                    ok(sg_result_message(
                        *code,
                        buf.as_mut_ptr(),
                        buf.len(),
                        &mut n,
                    ));
                    assert!(n < buf.len().max(1));
                    ok(sg_last_error_message(buf.as_mut_ptr(), buf.len(), &mut n));
                    assert!(n < buf.len().max(1));
                }
            }
        }
    }
    // SAFETY: every handle left is live and used by nothing else.
    unsafe {
        h.quotas.drain(..).for_each(|p| sg_quota_free(p));
        h.limiters.drain(..).for_each(|p| sg_limiter_free(p));
        h.keyed.drain(..).for_each(|p| sg_keyed_limiter_free(p));
        sg_manual_clock_free(clock);
    }
    // The next input starts without a region.
    let _ = std::fs::remove_file(region_path());
});
