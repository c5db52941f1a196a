//! The shared-memory store against the in-process one, and against its own bytes.
//!
//! Every input makes a fresh region (a file in the temporary directory) and runs the same
//! operations on a keyed limiter over it and on an in-process keyed limiter: while the region's
//! bytes are its own, every decision must be identical (the bound is far above the keys used,
//! so neither store evicts). An operation may then overwrite bytes of the region (its slots,
//! its insert locks, or its header before a reopen), as a buggy or hostile process of the same
//! user could: from then on only typed errors or decisions may come back, never a panic, a
//! hang or an out-of-bounds access. An input may also give a whole file of its own bytes at
//! the region's name (any length; its state field set to ready, so that the opener reads the
//! rest at once instead of waiting out a creator), or resize the region between opens: the
//! opener answers a region or a typed error.
#![no_main]

use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use sluicegate::{Algorithm, Error, KeyedLimiter, ManualClock, Quota, Refill, StoreSpec};
use std::io::{Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicU64, Ordering};

/// Layout version 4 (`core/src/store/shm/region.rs`): the locks follow the header page, the
/// slots follow the locks.
const LOCKS_AT: u64 = 4096;
const SLOTS_AT: u64 = 4096 + 4096 * 8;

#[derive(Arbitrary, Debug)]
enum Op {
    Acquire {
        key: u8,
        cost: u8,
        dt: u32,
    },
    Peek {
        key: u8,
    },
    Refund {
        key: u8,
        cost: u8,
    },
    Remove {
        key: u8,
    },
    Sweep,
    /// Overwrites bytes at `at` (modulo the slots' or locks' span, or in the header) and
    /// reopens the region.
    Scribble {
        area: u8,
        at: u32,
        bytes: Vec<u8>,
    },
    /// Truncates or extends the region's file (to `len` modulo twice its length) and reopens
    /// it.
    Resize {
        len: u32,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    count: u8,
    period_ms: u16,
    burst: u8,
    algorithm: u8,
    interval: bool,
    /// A file of these bytes (at most 64 KiB) at the region's name before the first open.
    raw: Option<Vec<u8>>,
    ops: Vec<Op>,
}

/// `state` (`core/src/store/shm/region.rs`): a u32 at byte 12; 2 is ready.
const STATE_AT: usize = 12;
const READY: u32 = 2;

/// Opens a file of `bytes` (a region's private file, mode 0600) as a region: a region or a
/// typed error, whatever the bytes.
fn open_raw(path: &std::path::Path, bytes: &[u8], q: Quota, clock: &ManualClock) {
    use std::os::unix::fs::OpenOptionsExt;
    let mut bytes = bytes[..bytes.len().min(1 << 16)].to_vec();
    // A file shorter than the header is waited for (its creator may still be sizing it): that
    // wait is the hostile tests' (`core/tests/hostile/shm.rs`), not worth seconds of every
    // input here. So the bytes are padded with zeros to the header's page.
    if bytes.len() < 4096 {
        bytes.resize(4096, 0);
    }
    bytes[STATE_AT..STATE_AT + 4].copy_from_slice(&READY.to_ne_bytes());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.write_all(&bytes).unwrap();
    drop(f);
    if let Err(e) = open(path, q, clock) {
        assert!(typed(&e), "{e}");
    }
}

type Keyed = KeyedLimiter<Vec<u8>, ManualClock>;

fn quota(input: &Input) -> Option<Quota> {
    let count = u64::from(input.count.max(1));
    let period = u64::from(input.period_ms.max(1)) * 1_000_000;
    let mut q = Quota::try_new(count, period, u64::from(input.burst.max(1))).ok()?;
    q = match input.algorithm % 5 {
        0 if input.interval => q.with_refill(Refill::Interval),
        0 => q,
        1 => q.with_algorithm(Algorithm::Gcra),
        2 => q.with_algorithm(Algorithm::FixedWindow),
        3 => q.with_algorithm(Algorithm::SlidingWindow),
        _ => q
            .with_algorithm(Algorithm::LeakyQueue)
            .with_max_delay(std::time::Duration::from_millis(u64::from(input.period_ms))),
    };
    q.validate().ok().map(|()| q)
}

fn open(path: &std::path::Path, q: Quota, clock: &ManualClock) -> Result<Keyed, Error> {
    KeyedLimiter::builder(q)
        .store(StoreSpec::shm(path.to_str().unwrap()))
        .max_keys(512)
        .clock(clock.clone())
        .build()
}

/// A store error, or a bound the scribbled bytes filled: what a damaged region may answer.
fn typed(e: &Error) -> bool {
    matches!(e, Error::Store { .. } | Error::KeyStoreFull { .. })
}

/// An operation's outcome, comparable across stores: the decision's fields, or the error's
/// code.
type Out = Result<Option<(bool, u64, u64, u64, u64)>, &'static str>;

fn out(r: Result<sluicegate::Decision, Error>) -> Out {
    r.map(|d| {
        Some((
            d.allowed(),
            d.limit(),
            d.remaining(),
            d.retry_after_nanos(),
            d.reset_after_nanos(),
        ))
    })
    .map_err(|e| e.code())
}

fn unit(r: Result<(), Error>) -> Out {
    r.map(|()| None).map_err(|e| e.code())
}

struct File(std::path::PathBuf);

impl Drop for File {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fuzz_target!(|input: Input| {
    let Some(q) = quota(&input) else { return };
    static N: AtomicU64 = AtomicU64::new(0);
    let file = File(std::env::temp_dir().join(format!(
        "sluicegate-fuzz-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )));
    let clock = ManualClock::new(0);
    if let Some(raw) = &input.raw {
        open_raw(&file.0, raw, q, &clock);
        return;
    }
    let mut shm = Some(open(&file.0, q, &clock).expect("a fresh region"));
    let mem: Keyed = KeyedLimiter::builder(q)
        .max_keys(512)
        .clock(clock.clone())
        .build()
        .unwrap();
    let len = std::fs::metadata(&file.0).unwrap().len();
    let mut damaged = false;
    let mut t = 0u64;
    for op in input.ops.iter().take(256) {
        if let Op::Resize { len: to } = op {
            let to = u64::from(*to) % (2 * len);
            drop(shm.take());
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&file.0)
                .unwrap();
            f.set_len(to).unwrap();
            drop(f);
            if to == len {
                shm = Some(open(&file.0, q, &clock).expect("the same length"));
                continue;
            }
            if to < 4096 {
                // Shorter than the header: waited for as a creator's, see `open_raw`.
                return;
            }
            let e = open(&file.0, q, &clock)
                .err()
                .expect("a resized region was opened");
            assert!(typed(&e), "{e}");
            return;
        }
        if let Op::Scribble { area, at, bytes } = op {
            let (start, span) = match area % 3 {
                0 => (SLOTS_AT, len - SLOTS_AT),
                1 => (LOCKS_AT, SLOTS_AT - LOCKS_AT),
                _ => (0, 512),
            };
            let bytes = &bytes[..bytes.len().min(64)];
            let at = start + u64::from(*at) % span;
            let n = bytes.len().min((len - at) as usize);
            drop(shm.take());
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(&file.0)
                .unwrap();
            f.seek(SeekFrom::Start(at)).unwrap();
            f.write_all(&bytes[..n]).unwrap();
            damaged |= n > 0;
            match open(&file.0, q, &clock) {
                Ok(l) => shm = Some(l),
                Err(e) => {
                    assert!(typed(&e), "{e}");
                    return; // a damaged header: refused, as it must be
                }
            }
            continue;
        }
        let l = shm.as_ref().unwrap();
        let (a, b): (Out, Out) = match op {
            Op::Acquire { key, cost, dt } => {
                t += u64::from(*dt) * 1000;
                clock.set(t);
                let (k, c) = ([*key], u64::from(*cost % 8));
                (
                    out(l.try_acquire(&k[..], c)),
                    out(mem.try_acquire(&k[..], c)),
                )
            }
            Op::Peek { key } => (out(l.peek(&[*key][..])), out(mem.peek(&[*key][..]))),
            Op::Refund { key, cost } => {
                let c = u64::from(*cost % 8);
                (
                    unit(l.refund(&[*key][..], c)),
                    unit(mem.refund(&[*key][..], c)),
                )
            }
            Op::Remove { key } => (
                unit(l.remove(&[*key][..]).map(drop)),
                unit(mem.remove(&[*key][..]).map(drop)),
            ),
            // Sweeps evict full buckets: lossless here (these quotas have no `initial`), so
            // the two stores may evict different sets without a decision changing.
            Op::Sweep => (unit(l.sweep().map(drop)), unit(mem.sweep().map(drop))),
            Op::Scribble { .. } | Op::Resize { .. } => unreachable!(),
        };
        match (&a, damaged) {
            (Err(e), true) => assert!(
                *e == "store_corrupt"
                    || *e == "store_timeout"
                    || *e == "key_store_full"
                    || *e == "insufficient_capacity",
                "{e}"
            ),
            (_, true) => {}
            (_, false) => assert_eq!(a, b, "{op:?} at {t}"),
        }
    }
});
