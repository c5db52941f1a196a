//! The handles driven through the extern functions, as a C caller drives them: made, used
//! and freed; NULL where a pointer belongs; handles of the wrong kind, pointers that are no
//! handle, misaligned pointers; out-parameters left alone on every error. `ci/check.d/55-miri.sh`
//! runs these under Miri (undefined behaviour, data races, leaks). The shared-memory store
//! maps a file, which Miri cannot run: its test is `cfg(not(miri))` (the C tests cover it in
//! full: tests/test_shm.c).

use crate::*;
use core::ffi::{c_char, CStr};
use core::ptr::{null, null_mut};

const S: u64 = 1_000_000_000;

/// A decision filled with a pattern that no call writes.
fn poisoned() -> sg_decision {
    sg_decision {
        allowed: true,
        limit: 0xA5A5,
        remaining: 0xA5A5,
        retry_after_ns: 0xA5A5,
        reset_after_ns: 0xA5A5,
        window_s: 0xA5A5,
        shadow_rejected: true,
    }
}

/// This thread's last-error detail.
fn detail() -> String {
    let mut buf = [0 as c_char; 512];
    // SAFETY: the buffer is valid for its length; the written count may be NULL.
    let rc = unsafe { sg_last_error_message(buf.as_mut_ptr(), buf.len(), null_mut()) };
    assert_eq!(rc, sg_result::SG_OK);
    // SAFETY: sg_last_error_message NUL-terminates what it writes.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Asserts that `rc` is `want` and, for an error, that the detail contains `needle`.
#[track_caller]
fn expect(rc: sg_result, want: sg_result, needle: &str) {
    assert_eq!(rc, want, "detail: {}", detail());
    if want != sg_result::SG_OK {
        let d = detail();
        assert!(d.contains(needle), "{d:?} lacks {needle:?}");
    }
}

fn quota(rate: &CStr) -> *mut sg_quota {
    let mut q = null_mut();
    // SAFETY: a NUL-terminated string and a valid out-pointer.
    expect(
        unsafe { sg_quota_parse(rate.as_ptr(), &mut q) },
        sg_result::SG_OK,
        "",
    );
    q
}

fn manual_clock(start_ns: u64) -> *mut sg_manual_clock {
    let mut c = null_mut();
    // SAFETY: a valid out-pointer.
    expect(
        unsafe { sg_manual_clock_new(start_ns, &mut c) },
        sg_result::SG_OK,
        "",
    );
    c
}

#[test]
fn quota_handles() {
    let q = quota(c"2/s; burst=4");
    let mut info = sg_quota_info {
        count: 0,
        period_ns: 0,
        burst: 0,
        initial: 0,
        refill: sg_refill::SG_REFILL_CONTINUOUS,
    };
    let mut text = [0 as c_char; 64];
    let mut small = [0 as c_char; 4];
    let mut n = 0;
    let mut out = null_mut();
    // SAFETY: every pointer is NULL, a live handle of this test or a local valid for its
    // length; each handle is freed once, after its last use.
    unsafe {
        expect(sg_quota_get_info(q, &mut info), sg_result::SG_OK, "");
        assert_eq!((info.count, info.period_ns, info.burst), (2, S, 4));
        expect(sg_quota_set_initial(q, 1), sg_result::SG_OK, "");
        expect(
            sg_quota_set_initial(q, 5),
            sg_result::SG_ERR_INVALID_QUOTA,
            "",
        );
        expect(
            sg_quota_set_refill(q, 7),
            sg_result::SG_ERR_INVALID_OPTION,
            "refill",
        );
        expect(sg_quota_set_refill(q, 1), sg_result::SG_OK, "");
        expect(
            sg_quota_to_string(q, text.as_mut_ptr(), text.len(), &mut n),
            sg_result::SG_OK,
            "",
        );
        let canonical = CStr::from_ptr(text.as_ptr()).to_str().unwrap().to_owned();
        assert_eq!(n, canonical.len());
        expect(
            sg_quota_to_string(q, small.as_mut_ptr(), small.len(), &mut n),
            sg_result::SG_ERR_BUFFER_TOO_SMALL,
            "",
        );
        assert_eq!(n, 3);
        // The canonical text parses back to the same quota.
        let again = quota(CStr::from_ptr(text.as_ptr()));
        let mut info2 = info;
        expect(sg_quota_get_info(again, &mut info2), sg_result::SG_OK, "");
        assert_eq!(
            (info2.initial, info2.refill),
            (1, sg_refill::SG_REFILL_INTERVAL)
        );
        sg_quota_free(again);

        expect(
            sg_quota_parse(c"10/fortnight".as_ptr(), &mut out),
            sg_result::SG_ERR_PARSE,
            "fortnight",
        );
        expect(
            sg_quota_parse_len(b"5/s\0x".as_ptr(), 5, &mut out),
            sg_result::SG_ERR_PARSE,
            "",
        );
        expect(
            sg_quota_parse_len(b"\xff".as_ptr(), 1, &mut out),
            sg_result::SG_ERR_PARSE,
            "not UTF-8",
        );
        expect(
            sg_quota_parse_len(null(), 3, &mut out),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "`rate` is NULL",
        );
        expect(
            sg_quota_parse(null(), &mut out),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "",
        );
        expect(
            sg_quota_new(0, S, 1, &mut out),
            sg_result::SG_ERR_INVALID_QUOTA,
            "",
        );
        assert!(out.is_null(), "no error writes the out-parameter");
        expect(
            sg_quota_parse_len(b"5/s".as_ptr(), 3, &mut out),
            sg_result::SG_OK,
            "",
        );
        sg_quota_free(out);
        expect(sg_quota_new(3, S, 3, &mut out), sg_result::SG_OK, "");
        sg_quota_free(out);
        expect(
            sg_quota_get_info(null(), &mut info),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "",
        );
        sg_quota_free(null_mut());
        sg_quota_free(q);
    }
}

#[test]
fn clock_handles() {
    let c = manual_clock(5);
    let mut now = 0;
    // SAFETY: NULL, the live clock of this test, or locals; the clock is freed last.
    unsafe {
        expect(sg_manual_clock_advance(c, 10), sg_result::SG_OK, "");
        expect(sg_manual_clock_now(c, &mut now), sg_result::SG_OK, "");
        assert_eq!(now, 15);
        expect(sg_manual_clock_set(c, 3), sg_result::SG_OK, "");
        expect(sg_manual_clock_advance(c, u64::MAX), sg_result::SG_OK, "");
        expect(sg_manual_clock_now(c, &mut now), sg_result::SG_OK, "");
        assert_eq!(now, u64::MAX, "advance saturates");
        expect(
            sg_manual_clock_now(c, null_mut()),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "out_ns",
        );
        expect(
            sg_manual_clock_set(null(), 1),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "clock",
        );
        expect(
            sg_manual_clock_new(0, null_mut()),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "",
        );
        sg_manual_clock_free(null_mut());
        sg_manual_clock_free(c);
    }
}

#[test]
fn limiter_handles() {
    let q = quota(c"2/s");
    let c = manual_clock(0);
    let (mut l, mut d, mut now) = (null_mut(), poisoned(), 0);
    // SAFETY: NULL, live handles of this test, or locals; every handle is freed once.
    unsafe {
        expect(
            sg_limiter_new_with_clock(q, c, &mut l),
            sg_result::SG_OK,
            "",
        );
        expect(sg_limiter_try_acquire(l, 2, &mut d), sg_result::SG_OK, "");
        assert!(d.allowed && d.remaining == 0 && d.limit == 2);
        expect(sg_limiter_try_acquire(l, 1, &mut d), sg_result::SG_OK, "");
        assert!(!d.allowed && d.retry_after_ns == S / 2);
        expect(
            sg_limiter_try_acquire_at(l, S / 2, 1, &mut d),
            sg_result::SG_OK,
            "",
        );
        assert!(d.allowed);
        expect(sg_manual_clock_set(c, S / 2), sg_result::SG_OK, "");
        expect(sg_limiter_refund(l, 1), sg_result::SG_OK, "");
        expect(sg_limiter_refund_at(l, S / 2, 1), sg_result::SG_OK, "");
        expect(sg_limiter_peek(l, &mut d), sg_result::SG_OK, "");
        assert_eq!(d.remaining, 2);
        expect(sg_limiter_reserve(l, 1, 0, &mut d), sg_result::SG_OK, "");
        expect(sg_limiter_cancel(l, 1), sg_result::SG_OK, "");
        expect(
            sg_limiter_acquire_timeout(l, 1, 0, &mut d),
            sg_result::SG_OK,
            "",
        );
        assert!(d.allowed);
        expect(sg_limiter_now(l, &mut now), sg_result::SG_OK, "");
        assert_eq!(now, S / 2);

        // Errors leave the decision alone.
        let mut kept = poisoned();
        expect(
            sg_limiter_try_acquire(l, 3, &mut kept),
            sg_result::SG_ERR_INSUFFICIENT_CAPACITY,
            "",
        );
        expect(
            sg_limiter_try_acquire(null(), 1, &mut kept),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "sg_limiter_try_acquire: `limiter` is NULL",
        );
        expect(
            sg_limiter_try_acquire(l, 1, null_mut()),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "`out` is NULL",
        );
        expect(
            sg_limiter_peek(l, null_mut()),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "",
        );
        expect(
            sg_limiter_now(l, null_mut()),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "",
        );
        assert_eq!(kept, poisoned());
        sg_limiter_free(l);

        // The default clock, and the memory store by name.
        let mut m = null_mut();
        expect(sg_limiter_new(q, &mut m), sg_result::SG_OK, "");
        expect(sg_limiter_try_acquire(m, 1, &mut d), sg_result::SG_OK, "");
        assert!(d.allowed);
        sg_limiter_free(m);
        expect(
            sg_limiter_new_in_store(q, c"memory".as_ptr(), null(), &mut m),
            sg_result::SG_OK,
            "",
        );
        expect(sg_limiter_try_acquire(m, 2, &mut d), sg_result::SG_OK, "");
        assert!(d.allowed);
        sg_limiter_free(m);
        sg_limiter_free(null_mut());
        sg_manual_clock_free(c);
        sg_quota_free(q);
    }
}

#[test]
fn store_strings_are_checked_before_anything_is_made() {
    let q = quota(c"1/s");
    let c = manual_clock(0);
    let sentinel = core::ptr::NonNull::<sg_limiter>::dangling().as_ptr();
    let (mut l, mut k) = (sentinel, null_mut());
    // SAFETY: NULL, live handles of this test, NUL-terminated strings or locals; no handle
    // is made (every call fails), the two made are freed once.
    unsafe {
        for bad in [
            c"redis",
            c"",
            c"shm:",
            c"shm:/x?capacity=0",
            c"shm:/x?size=1",
        ] {
            expect(
                sg_limiter_new_in_store(q, bad.as_ptr(), c, &mut l),
                sg_result::SG_ERR_INVALID_OPTION,
                "store",
            );
            expect(
                sg_keyed_limiter_new_in_store(q, bad.as_ptr(), 4, 0, null(), &mut k),
                sg_result::SG_ERR_INVALID_OPTION,
                "\"memory\", \"shm:NAME[?capacity=N]\" or a Redis URL",
            );
        }
        expect(
            sg_limiter_new_in_store(q, c"\xffmemory".as_ptr(), null(), &mut l),
            sg_result::SG_ERR_INVALID_OPTION,
            "not UTF-8 at byte 0",
        );
        expect(
            sg_limiter_new_in_store(q, null(), null(), &mut l),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "sg_limiter_new_in_store: `store` is NULL",
        );
        expect(
            sg_keyed_limiter_new_in_store(q, null(), 4, 0, null(), &mut k),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "`store` is NULL",
        );
        expect(
            sg_keyed_limiter_new_in_store(q, c"memory".as_ptr(), 4, 2, null(), &mut k),
            sg_result::SG_ERR_INVALID_OPTION,
            "on_full",
        );
        expect(
            sg_limiter_new_in_store(null(), c"memory".as_ptr(), null(), &mut l),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "`quota` is NULL",
        );
        expect(
            sg_limiter_new_in_store(q, c"memory".as_ptr(), null(), null_mut()),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "`out` is NULL",
        );
        assert_eq!((l, k), (sentinel, null_mut()));
        // A manual clock is taken as given; max_keys 0 in memory is the default bound.
        expect(
            sg_limiter_new_in_store(q, c" Memory ".as_ptr(), c, &mut l),
            sg_result::SG_OK,
            "",
        );
        expect(
            sg_keyed_limiter_new_in_store(q, c"memory".as_ptr(), 0, 1, c, &mut k),
            sg_result::SG_OK,
            "",
        );
        let mut d = poisoned();
        expect(
            sg_keyed_limiter_try_acquire(k, b"k".as_ptr(), 1, 1, &mut d),
            sg_result::SG_OK,
            "",
        );
        assert!(d.allowed);
        sg_keyed_limiter_free(k);
        sg_limiter_free(l);
        sg_manual_clock_free(c);
        sg_quota_free(q);
    }
}

#[test]
fn keyed_handles() {
    let q = quota(c"1/s; burst=2");
    let c = manual_clock(0);
    let (mut k, mut d, mut n, mut removed) = (null_mut(), poisoned(), 0u64, false);
    let alice = b"alice";
    // SAFETY: NULL, live handles of this test, or locals valid for the lengths passed with
    // them (the huge length is refused before the key is read); each handle freed once.
    unsafe {
        expect(
            sg_keyed_limiter_new_with_clock(q, 2, 0, c, &mut k),
            sg_result::SG_OK,
            "",
        );
        let (kp, kn) = (alice.as_ptr(), alice.len());
        expect(
            sg_keyed_limiter_try_acquire(k, kp, kn, 2, &mut d),
            sg_result::SG_OK,
            "",
        );
        assert!(d.allowed);
        expect(
            sg_keyed_limiter_try_acquire_at(k, kp, kn, S, 1, &mut d),
            sg_result::SG_OK,
            "",
        );
        assert!(d.allowed);
        expect(sg_manual_clock_set(c, S), sg_result::SG_OK, "");
        expect(sg_keyed_limiter_refund(k, kp, kn, 1), sg_result::SG_OK, "");
        expect(
            sg_keyed_limiter_refund_at(k, kp, kn, S, 1),
            sg_result::SG_OK,
            "",
        );
        expect(
            sg_keyed_limiter_peek(k, kp, kn, &mut d),
            sg_result::SG_OK,
            "",
        );
        assert_eq!(d.remaining, 2);
        expect(
            sg_keyed_limiter_acquire_timeout(k, kp, kn, 2, 0, &mut d),
            sg_result::SG_OK,
            "",
        );
        assert!(d.allowed);
        // The empty key may be NULL.
        expect(
            sg_keyed_limiter_try_acquire(k, null(), 0, 1, &mut d),
            sg_result::SG_OK,
            "",
        );
        expect(sg_keyed_limiter_len(k, &mut n), sg_result::SG_OK, "");
        assert_eq!(n, 2);
        // At the bound of 2 keys, a third is refused (no bucket is full).
        let mut kept = poisoned();
        expect(
            sg_keyed_limiter_try_acquire(k, b"bob".as_ptr(), 3, 1, &mut kept),
            sg_result::SG_ERR_KEY_STORE_FULL,
            "",
        );
        expect(
            sg_keyed_limiter_try_acquire(k, null(), 3, 1, &mut kept),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "`key` is NULL but `key_len` is 3",
        );
        expect(
            sg_keyed_limiter_try_acquire(k, kp, usize::MAX, 1, &mut kept),
            sg_result::SG_ERR_INVALID_ARGUMENT,
            "larger than any object",
        );
        expect(
            sg_keyed_limiter_try_acquire(k, kp, kn, 1, null_mut()),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "`out` is NULL",
        );
        assert_eq!(kept, poisoned());
        expect(
            sg_keyed_limiter_remove(k, kp, kn, &mut removed),
            sg_result::SG_OK,
            "",
        );
        assert!(removed);
        expect(
            sg_keyed_limiter_remove(k, kp, kn, null_mut()),
            sg_result::SG_OK,
            "",
        );
        expect(sg_manual_clock_advance(c, 10 * S), sg_result::SG_OK, "");
        expect(sg_keyed_limiter_sweep(k, &mut n), sg_result::SG_OK, "");
        assert_eq!(n, 1);
        expect(sg_keyed_limiter_sweep(k, null_mut()), sg_result::SG_OK, "");
        expect(sg_keyed_limiter_clear(k), sg_result::SG_OK, "");
        expect(sg_keyed_limiter_now(k, &mut n), sg_result::SG_OK, "");
        assert_eq!(n, 11 * S);
        expect(
            sg_keyed_limiter_len(k, null_mut()),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "",
        );
        sg_keyed_limiter_free(k);

        // The default clock; a zero bound and a bad policy are refused.
        expect(sg_keyed_limiter_new(q, 8, 1, &mut k), sg_result::SG_OK, "");
        expect(
            sg_keyed_limiter_try_acquire(k, kp, kn, 1, &mut d),
            sg_result::SG_OK,
            "",
        );
        sg_keyed_limiter_free(k);
        k = null_mut();
        expect(
            sg_keyed_limiter_new(q, 0, 0, &mut k),
            sg_result::SG_ERR_INVALID_OPTION,
            "max_keys",
        );
        expect(
            sg_keyed_limiter_new(q, 8, 9, &mut k),
            sg_result::SG_ERR_INVALID_OPTION,
            "on_full",
        );
        assert!(k.is_null());
        sg_keyed_limiter_free(null_mut());
        sg_manual_clock_free(c);
        sg_quota_free(q);
    }
}

#[test]
fn handles_of_the_wrong_kind_are_refused_and_left_alone() {
    let q = quota(c"1/s");
    let c = manual_clock(0);
    let mut l = null_mut();
    let mut k = null_mut();
    // Aligned memory that is no handle, and a misaligned pointer into it.
    let garbage = [0x3c3c_3c3c_3c3c_3c3c_u64; 4];
    let not_a_handle = garbage.as_ptr().cast::<u8>();
    // SAFETY: `not_a_handle` points into `garbage`, 32 bytes; one byte in stays inside it.
    let misaligned = unsafe { not_a_handle.add(1) };
    let mut d = poisoned();
    // SAFETY: every pointer is NULL, a live handle of this test (of some kind), or points
    // into `garbage` (aligned: its first word is read as a tag; misaligned: refused before
    // any read); the handles are freed once, after the wrong-kind frees left them alone.
    unsafe {
        expect(
            sg_limiter_new_with_clock(q, c, &mut l),
            sg_result::SG_OK,
            "",
        );
        expect(
            sg_keyed_limiter_new_with_clock(q, 4, 0, c, &mut k),
            sg_result::SG_OK,
            "",
        );
        expect(
            sg_limiter_try_acquire(q.cast(), 1, &mut d),
            sg_result::SG_ERR_WRONG_HANDLE,
            "`limiter` should be an sg_limiter, but is sg_quota",
        );
        expect(
            sg_keyed_limiter_try_acquire(l.cast(), null(), 0, 1, &mut d),
            sg_result::SG_ERR_WRONG_HANDLE,
            "but is sg_limiter",
        );
        expect(
            sg_manual_clock_set(k.cast(), 1),
            sg_result::SG_ERR_WRONG_HANDLE,
            "but is sg_keyed_limiter",
        );
        expect(
            sg_quota_set_initial(c.cast(), 1),
            sg_result::SG_ERR_WRONG_HANDLE,
            "but is sg_manual_clock",
        );
        expect(
            sg_limiter_new_with_clock(q, q.cast(), &mut l),
            sg_result::SG_ERR_WRONG_HANDLE,
            "`clock` should be an sg_manual_clock",
        );
        expect(
            sg_limiter_new_in_store(c.cast(), c"memory".as_ptr(), null(), &mut l),
            sg_result::SG_ERR_WRONG_HANDLE,
            "`quota` should be an sg_quota",
        );
        expect(
            sg_keyed_limiter_new_in_store(q, c"memory".as_ptr(), 4, 0, l.cast(), &mut k),
            sg_result::SG_ERR_WRONG_HANDLE,
            "`clock` should be an sg_manual_clock",
        );
        expect(
            sg_limiter_peek(not_a_handle.cast(), &mut d),
            sg_result::SG_ERR_WRONG_HANDLE,
            "not a sluicegate handle",
        );
        expect(
            sg_limiter_peek(misaligned.cast(), &mut d),
            sg_result::SG_ERR_WRONG_HANDLE,
            "misaligned",
        );
        assert_eq!(d, poisoned());
        // A free of the wrong kind leaves the handle alone: it still works afterwards.
        sg_limiter_free(k.cast());
        sg_keyed_limiter_free(l.cast());
        sg_quota_free(c.cast());
        sg_manual_clock_free(q.cast());
        sg_limiter_free(not_a_handle.cast_mut().cast());
        sg_limiter_free(misaligned.cast_mut().cast());
        expect(sg_limiter_try_acquire(l, 1, &mut d), sg_result::SG_OK, "");
        expect(
            sg_keyed_limiter_try_acquire(k, null(), 0, 1, &mut d),
            sg_result::SG_OK,
            "",
        );
        expect(sg_manual_clock_set(c, 2), sg_result::SG_OK, "");
        expect(sg_quota_set_initial(q, 0), sg_result::SG_OK, "");
        sg_limiter_free(l);
        sg_keyed_limiter_free(k);
        sg_manual_clock_free(c);
        sg_quota_free(q);
    }
}

#[test]
fn composite_limits_and_header_fields() {
    let (q1, q2) = (quota(c"2/s"), quota(c"5/minute"));
    let c = manual_clock(0);
    let (mut a, mut b) = (null_mut(), null_mut());
    let mut d = poisoned();
    let mut buf = [0 as c_char; 256];
    let mut n = 0;
    // SAFETY: the arrays hold live limiters of this test (or NULL, or a quota for the
    // wrong-kind case) and are valid for the lengths passed; the buffers likewise.
    unsafe {
        expect(
            sg_limiter_new_with_clock(q1, c, &mut a),
            sg_result::SG_OK,
            "",
        );
        expect(
            sg_limiter_new_with_clock(q2, c, &mut b),
            sg_result::SG_OK,
            "",
        );
        let parts: [*const sg_limiter; 2] = [a, b];
        expect(
            sg_composite_try_acquire(parts.as_ptr(), 2, 2, &mut d),
            sg_result::SG_OK,
            "",
        );
        assert!(d.allowed && d.remaining == 0 && d.limit == 2);
        expect(
            sg_composite_try_acquire_at(parts.as_ptr(), 2, S, 1, &mut d),
            sg_result::SG_OK,
            "",
        );
        expect(
            sg_composite_refund(parts.as_ptr(), 2, 1),
            sg_result::SG_OK,
            "",
        );
        expect(
            sg_composite_refund_at(parts.as_ptr(), 2, S, 1),
            sg_result::SG_OK,
            "",
        );
        let mut kept = poisoned();
        expect(
            sg_composite_try_acquire(parts.as_ptr(), 0, 1, &mut kept),
            sg_result::SG_ERR_INVALID_ARGUMENT,
            "",
        );
        expect(
            sg_composite_try_acquire(null(), 2, 1, &mut kept),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "",
        );
        let with_null: [*const sg_limiter; 2] = [a, null()];
        expect(
            sg_composite_try_acquire(with_null.as_ptr(), 2, 1, &mut kept),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "",
        );
        let with_quota: [*const sg_limiter; 2] = [a, q1.cast()];
        expect(
            sg_composite_try_acquire(with_quota.as_ptr(), 2, 1, &mut kept),
            sg_result::SG_ERR_WRONG_HANDLE,
            "",
        );
        assert_eq!(kept, poisoned());

        expect(
            sg_decision_headers(
                &d,
                sg_header_style::SG_HEADERS_IETF as u32,
                b"p".as_ptr(),
                1,
                buf.as_mut_ptr(),
                buf.len(),
                &mut n,
            ),
            sg_result::SG_OK,
            "",
        );
        let text = CStr::from_ptr(buf.as_ptr()).to_str().unwrap();
        assert!(
            text.contains("RateLimit-Policy: \"p\";q=2;w=1\r\n"),
            "{text}"
        );
        assert_eq!(n, text.len());
        expect(
            sg_decision_headers(&d, 9, null(), 0, buf.as_mut_ptr(), buf.len(), &mut n),
            sg_result::SG_ERR_INVALID_OPTION,
            "style",
        );
        expect(
            sg_decision_headers(null(), 0, null(), 0, buf.as_mut_ptr(), buf.len(), &mut n),
            sg_result::SG_ERR_NULL_ARGUMENT,
            "",
        );
        sg_limiter_free(a);
        sg_limiter_free(b);
        sg_manual_clock_free(c);
        sg_quota_free(q1);
        sg_quota_free(q2);
    }
}

#[test]
fn codes_messages_and_version() {
    let mut buf = [0 as c_char; 128];
    let mut n = 0;
    // SAFETY: static strings from the library; a local buffer valid for its length.
    unsafe {
        let name = |code: sg_result| CStr::from_ptr(sg_result_name(code as u32));
        assert_eq!(name(sg_result::SG_OK), c"ok");
        assert_eq!(name(sg_result::SG_ERR_STORE_MISMATCH), c"store_mismatch");
        assert_eq!(CStr::from_ptr(sg_result_name(4242)), c"unknown");
        expect(
            sg_result_message(
                sg_result::SG_ERR_STORE_PERMISSION as u32,
                buf.as_mut_ptr(),
                buf.len(),
                &mut n,
            ),
            sg_result::SG_OK,
            "",
        );
        assert!(n > 0);
        expect(
            sg_result_message(4242, buf.as_mut_ptr(), buf.len(), &mut n),
            sg_result::SG_OK,
            "",
        );
        assert_eq!(CStr::from_ptr(buf.as_ptr()), c"unknown sg_result 4242");
        assert_eq!(
            sg_result_message(1, null_mut(), 0, &mut n),
            sg_result::SG_ERR_BUFFER_TOO_SMALL
        );
        assert_eq!(n, 0);
        assert_eq!(
            CStr::from_ptr(sg_version()).to_str(),
            Ok(env!("CARGO_PKG_VERSION"))
        );
    }
}

/// One limiter used by several threads at once (Miri checks the accesses for data races):
/// on a frozen manual clock, they admit exactly the burst between them.
#[test]
fn threads_share_a_limiter() {
    let q = quota(c"1/h; burst=5");
    let c = manual_clock(0);
    let mut l = null_mut();
    // SAFETY: live handles of this test and a valid out-pointer.
    expect(
        unsafe { sg_limiter_new_with_clock(q, c, &mut l) },
        sg_result::SG_OK,
        "",
    );
    /// A limiter handle that may cross threads: `const sg_limiter *` is thread-safe.
    #[derive(Clone, Copy)]
    struct Shared(*const sg_limiter);
    // SAFETY: the C API's contract: every function taking a const handle may be called from
    // any number of threads at once.
    unsafe impl Send for Shared {}
    let shared = Shared(l);
    let admitted: u64 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(move || {
                    let shared = shared;
                    let mut d = poisoned();
                    (0..4)
                        .filter(|_| {
                            // SAFETY: a live handle (freed after the scope) and a local.
                            let rc = unsafe { sg_limiter_try_acquire(shared.0, 1, &mut d) };
                            rc == sg_result::SG_OK && d.allowed
                        })
                        .count() as u64
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert_eq!(admitted, 5);
    // SAFETY: no thread uses the handles any more; each is freed once.
    unsafe {
        sg_limiter_free(l);
        sg_manual_clock_free(c);
        sg_quota_free(q);
    }
}

/// Two limiters of this process on one region share its buckets (the C tests run processes
/// on regions). Not under Miri, which cannot map a file.
#[cfg(not(miri))]
#[test]
fn a_region_through_the_c_api() {
    let path = std::env::temp_dir().join(format!("sluicegate-c-unit-{}", std::process::id()));
    let store = std::ffi::CString::new(format!("shm:{}", path.display())).unwrap();
    let q = quota(c"3/h");
    let (mut a, mut b, mut l) = (null_mut(), null_mut(), null_mut());
    let mut d = poisoned();
    // SAFETY: live handles of this test, a NUL-terminated store string, locals; each handle
    // freed once.
    unsafe {
        expect(
            sg_keyed_limiter_new_in_store(q, store.as_ptr(), 8, 0, null(), &mut a),
            sg_result::SG_OK,
            "",
        );
        expect(
            sg_keyed_limiter_new_in_store(q, store.as_ptr(), 0, 0, null(), &mut b),
            sg_result::SG_OK,
            "",
        );
        expect(
            sg_keyed_limiter_try_acquire(a, b"k".as_ptr(), 1, 3, &mut d),
            sg_result::SG_OK,
            "",
        );
        expect(
            sg_keyed_limiter_try_acquire(b, b"k".as_ptr(), 1, 1, &mut d),
            sg_result::SG_OK,
            "",
        );
        assert!(!d.allowed);
        expect(
            sg_limiter_new_in_store(q, store.as_ptr(), null(), &mut l),
            sg_result::SG_ERR_STORE_MISMATCH,
            "",
        );
        let log = quota(c"3/h; algorithm=sliding_log");
        expect(
            sg_limiter_new_in_store(log, store.as_ptr(), null(), &mut l),
            sg_result::SG_ERR_STORE_UNSUPPORTED,
            "sliding",
        );
        assert!(l.is_null());
        sg_quota_free(log);
        sg_keyed_limiter_free(a);
        sg_keyed_limiter_free(b);
        sg_quota_free(q);
    }
    std::fs::remove_file(&path).unwrap();
}
