//! The rate-string parser never panics, and every accepted string round-trips through its
//! canonical form to an equal quota.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluicegate::Quota;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match text.parse::<Quota>() {
        Ok(q) => {
            q.validate().expect("a parsed quota is valid");
            let canonical = q.to_string();
            let again: Quota = canonical
                .parse()
                .unwrap_or_else(|e| panic!("{canonical:?} (from {text:?}) does not parse: {e}"));
            assert_eq!(q, again, "{text:?} -> {canonical:?}");
        }
        Err(e) => {
            // Errors are typed and render without panicking.
            let code = e.code();
            assert!(code == "parse_error" || code == "invalid_quota", "{code}");
            let _ = e.to_string();
        }
    }
});
