//! Resident memory per key of keyed limiters at scale.
//!
//! `mem [--list] [--keys N] [SUBJECT...]` builds each subject with N keys (default 1 000 000; subjects
//! default to all) and prints one JSON object per line: RSS before and after (from
//! `/proc/self/statm`), the delta, the peak (`VmHWM`) and bytes per key. Run one subject per
//! process (as `ci/bench.sh` does) so that one subject's freed memory and peak do not blur
//! the next one's.

use sluicegate_benches::mem::{peak_rss_bytes, rss_bytes};
use std::hint::black_box;
use std::process::ExitCode;

/// Builds a subject with `keys` keys and returns it boxed (alive until its RSS is read).
type Build = fn(u64) -> Box<dyn std::any::Any>;

/// Every subject, by name.
const SUBJECTS: &[(&str, Build)] = &[
    ("governor-keyed", governor_keyed),
    ("sluicegate-keyed", sluicegate_keyed),
    ("sluicegate-bytes16", |n| sluicegate_bytes(n, 16)),
    ("sluicegate-bytes64", |n| sluicegate_bytes(n, 64)),
    ("sluicegate-bytes1k", |n| sluicegate_bytes(n, 1024)),
];

/// Byte-string keys of `len` bytes (the bindings' key type, `Box<[u8]>`), otherwise as
/// [`sluicegate_keyed`]: keys longer than `LONG_KEY_BYTES` are held as 16-byte digests.
fn sluicegate_bytes(keys: u64, len: usize) -> Box<dyn std::any::Any> {
    let quota = sluicegate_benches::setup::keyed_allow_quota();
    let l = sluicegate::KeyedLimiter::<Box<[u8]>>::builder(quota)
        .max_keys(2 * keys as usize + 16)
        .build()
        .expect("keyed limiter");
    let mut key = vec![b'k'; len];
    for i in 0..keys {
        key[..8].copy_from_slice(&i.to_le_bytes());
        black_box(
            l.try_acquire(&key[..], quota.burst() / 2)
                .expect("cost")
                .allowed(),
        );
    }
    assert_eq!(l.len() as u64, keys);
    Box::new(l)
}

/// `keys` keys, each touched once, spending half its burst so that no bucket is full (a full
/// bucket would be dropped as indistinguishable from an absent key; see
/// `setup::keyed_allow_quota`), with the bound above the key count.
fn sluicegate_keyed(keys: u64) -> Box<dyn std::any::Any> {
    let quota = sluicegate_benches::setup::keyed_allow_quota();
    let l = sluicegate::KeyedLimiter::<u64>::builder(quota)
        .max_keys(2 * keys as usize + 16)
        .build()
        .expect("keyed limiter");
    for key in 0..keys {
        black_box(
            l.try_acquire(&key, quota.burst() / 2)
                .expect("cost")
                .allowed(),
        );
    }
    assert_eq!(l.len() as u64, keys);
    Box::new(l)
}

fn governor_keyed(keys: u64) -> Box<dyn std::any::Any> {
    let quota = sluicegate_benches::setup::governor_quota(sluicegate_benches::setup::Path::Allow);
    let l: sluicegate_benches::setup::GovernorKeyed = governor::RateLimiter::keyed(quota);
    for key in 0..keys {
        black_box(l.check_key(&key).is_ok());
    }
    assert_eq!(l.len() as u64, keys);
    Box::new(l)
}

fn main() -> ExitCode {
    let mut keys = 1_000_000u64;
    let mut names = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--list" {
            for (n, _) in SUBJECTS {
                println!("{n}");
            }
            return ExitCode::SUCCESS;
        } else if arg == "--keys" {
            match args.next().and_then(|v| v.replace('_', "").parse().ok()) {
                Some(n) if n > 0 => keys = n,
                _ => {
                    eprintln!("mem: --keys needs a positive integer");
                    return ExitCode::FAILURE;
                }
            }
        } else if SUBJECTS.iter().any(|(n, _)| *n == arg) {
            names.push(arg);
        } else {
            let known: Vec<_> = SUBJECTS.iter().map(|(n, _)| *n).collect();
            eprintln!("mem: unknown subject {arg:?} (known: {})", known.join(", "));
            return ExitCode::FAILURE;
        }
    }
    if names.is_empty() {
        names = SUBJECTS.iter().map(|(n, _)| n.to_string()).collect();
    }
    for name in names {
        let build = SUBJECTS.iter().find(|(n, _)| *n == name).expect("known").1;
        let (Some(before), Some(_)) = (rss_bytes(), peak_rss_bytes()) else {
            eprintln!("mem: /proc/self/statm or /proc/self/status is not readable");
            return ExitCode::FAILURE;
        };
        let subject = build(keys);
        let after = rss_bytes().expect("statm");
        let peak = peak_rss_bytes().expect("status");
        let delta = after.saturating_sub(before);
        println!(
            "{{\"subject\":\"{name}\",\"keys\":{keys},\"rss_before\":{before},\"rss_after\":{after},\
             \"rss_delta\":{delta},\"peak\":{peak},\"peak_delta\":{},\"bytes_per_key\":{:.1}}}",
            peak.saturating_sub(before),
            delta as f64 / keys as f64
        );
        drop(black_box(subject));
    }
    ExitCode::SUCCESS
}
