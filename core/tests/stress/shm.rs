//! Processes sharing one region: the bound holds per key across processes and threads, a
//! region survives workers killed at random instants (no slot leaked, no key twice, the
//! bound still exact afterwards), and processes started seconds apart read one clock.
//!
//! The children are this very test binary, re-run with `--ignored --exact shm::child` and
//! their role in the environment.
#![cfg(target_os = "linux")]

use sluicegate::{Clock, KeyedLimiter, StoreSpec};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROLE: &str = "SLUICEGATE_SHM_ROLE";
const REGION: &str = "SLUICEGATE_SHM_REGION";
const QUOTA: &str = "SLUICEGATE_SHM_QUOTA";
const ARG: &str = "SLUICEGATE_SHM_ARG";

struct Region(PathBuf);

impl Region {
    fn new(what: &str) -> Self {
        Self(std::env::temp_dir().join(format!("sluicegate-stress-{what}-{}", std::process::id())))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn open(path: &Path, quota: &str, max_keys: usize) -> KeyedLimiter<Box<[u8]>> {
    KeyedLimiter::builder(quota.parse().unwrap())
        .store(StoreSpec::shm(path.to_str().unwrap()))
        .max_keys(max_keys)
        .build()
        .unwrap()
}

/// Opens an existing region with whatever capacity it has (what a worker does).
fn attach(path: &Path, quota: &str) -> KeyedLimiter<Box<[u8]>> {
    KeyedLimiter::builder(quota.parse().unwrap())
        .store(StoreSpec::shm(path.to_str().unwrap()))
        .build()
        .unwrap()
}

fn spawn(role: &str, path: &Path, quota: &str, arg: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "shm::child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(REGION, path)
        .env(QUOTA, quota)
        .env(ARG, arg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The lines a child printed that start with `tag`.
fn lines(child: Child, tag: &str) -> Vec<String> {
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "a child failed: {out:?}");
    BufReader::new(&out.stdout[..])
        .lines()
        .map_while(Result::ok)
        // The harness may print "test shm::child ... " on the same line first.
        .filter_map(|l| {
            let at = l.find(&format!("@{tag} "))?;
            Some(l[at + tag.len() + 2..].trim().to_string())
        })
        .collect()
}

/// A tiny generator (the children need no dependency).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn monotonic_ns() -> u64 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC (1 on Linux) always exists.
    unsafe { clock_gettime(1, &mut ts) };
    ts.sec as u64 * 1_000_000_000 + ts.nsec as u64
}

extern "C" {
    fn fork() -> i32;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn _exit(status: i32) -> !;
}

/// The entry point of every child (ignored when run as a test of its own).
#[test]
#[ignore = "a child process of the multi-process tests, run by them"]
fn child() {
    let (Ok(role), Ok(path), Ok(quota), Ok(arg)) = (
        std::env::var(ROLE),
        std::env::var(REGION),
        std::env::var(QUOTA),
        std::env::var(ARG),
    ) else {
        panic!("run by the multi-process tests only");
    };
    let path = PathBuf::from(path);
    match role.as_str() {
        // `threads keys millis max_cost`: hammer random keys with costs 1 to max_cost; print
        // each key's admitted cost.
        "hammer" => {
            let v: Vec<u64> = arg.split(' ').map(|x| x.parse().unwrap()).collect();
            let (threads, keys, millis, max_cost) = (v[0], v[1], v[2], v[3]);
            let l = attach(&path, &quota);
            let admitted: Vec<u64> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..threads)
                    .map(|t| {
                        let l = &l;
                        s.spawn(move || {
                            let mut got = vec![0u64; keys as usize];
                            let mut rng =
                                Rng(0x9e37_79b9 ^ ((t + 1) * 7919) ^ u64::from(std::process::id()));
                            let end = Instant::now() + Duration::from_millis(millis);
                            while Instant::now() < end {
                                let k = rng.below(keys);
                                let c = 1 + rng.below(max_cost);
                                if l.try_acquire(&k.to_le_bytes()[..], c).unwrap().allowed() {
                                    got[k as usize] += c;
                                }
                            }
                            got
                        })
                    })
                    .collect();
                let mut total = vec![0u64; keys as usize];
                for h in hs {
                    for (t, g) in total.iter_mut().zip(h.join().unwrap()) {
                        *t += g;
                    }
                }
                total
            });
            for (k, a) in admitted.iter().enumerate() {
                println!("@admitted {k} {a}");
            }
        }
        // `keys`: decide on random keys until killed.
        "forever" => {
            let keys: u64 = arg.parse().unwrap();
            let l = attach(&path, &quota);
            let mut rng = Rng(0x2545_f491 ^ u64::from(std::process::id()));
            println!("@ready ");
            loop {
                let k = rng.below(keys);
                // KeyStoreFull at the bound is an answer too.
                let _ = l.try_acquire(&k.to_le_bytes()[..], 1);
            }
        }
        // `children decisions`: warm this process's memo of hashes for one key (peeks take
        // nothing), fork `children`, each making `decisions` requests of that key through the
        // limiter opened before the fork; print what they admitted together.
        "fork" => {
            let v: Vec<i32> = arg.split(' ').map(|x| x.parse().unwrap()).collect();
            let (children, decisions) = (v[0], v[1]);
            let l = attach(&path, &quota);
            for _ in 0..256 {
                l.peek(b"client".as_slice()).unwrap();
            }
            let pids: Vec<i32> = (0..children)
                .map(|_| {
                    // SAFETY: this process runs one thread (`--test-threads=1`); the child only
                    // decides (no allocation on an existing key's path) and leaves by `_exit`.
                    let pid = unsafe { fork() };
                    assert!(pid >= 0, "fork failed");
                    if pid == 0 {
                        let admitted = (0..decisions)
                            .filter(|_| l.try_acquire(b"client".as_slice(), 1).unwrap().allowed())
                            .count();
                        // SAFETY: ends the child at once, with its count as the status.
                        unsafe { _exit(admitted as i32) };
                    }
                    pid
                })
                .collect();
            let mut total = 0;
            for pid in pids {
                let mut status = 0;
                // SAFETY: `pid` is a child of this process; `status` is a valid place to write.
                assert_eq!(unsafe { waitpid(pid, &mut status, 0) }, pid);
                assert_eq!(status & 0x7f, 0, "child {pid} was killed: {status}");
                total += (status >> 8) & 0xff;
            }
            println!("@admitted {total}");
        }
        // `at_ns tries`: at CLOCK_MONOTONIC `at_ns` (every racer starts at once), open the
        // region (creating it if nobody has yet) and ask for one token of one key `tries`
        // times; print what was admitted.
        "race" => {
            let v: Vec<u64> = arg.split(' ').map(|x| x.parse().unwrap()).collect();
            let (at, tries) = (v[0], v[1]);
            while monotonic_ns() < at {
                std::hint::spin_loop();
            }
            let l = open(&path, &quota, 8);
            let admitted = (0..tries)
                .filter(|_| l.try_acquire(b"k".as_slice(), 1).unwrap().allowed())
                .count();
            println!("@admitted {admitted}");
        }
        // Print the region's clock and CLOCK_MONOTONIC, read together.
        "clock" => {
            let l = attach(&path, &quota);
            // The tightest of a hundred brackets: a preemption between the readings (a busy
            // host, other tests running) would otherwise count as clock skew.
            let (a, m, b) = (0..100)
                .map(|_| (l.clock().now(), monotonic_ns(), l.clock().now()))
                .min_by_key(|(a, _, b)| b - a)
                .unwrap();
            println!("@clock {} {m}", (a + b) / 2);
        }
        other => panic!("unknown role {other}"),
    }
}

/// Processes that all make one region at the same instant share it: exactly one creates and
/// initialises it, the others wait for it to be ready and open it (had any initialised it
/// again, or made a region of its own, the key would have admitted its burst more than once).
#[test]
fn processes_creating_one_region_at_once_share_it() {
    for round in 0..3 {
        let r = Region::new(&format!("race{round}"));
        let quota = "1/hour; burst=5";
        // Far enough ahead that every child has started and is spinning at the line.
        let at = monotonic_ns() + 400_000_000;
        let children: Vec<Child> = (0..6)
            .map(|_| spawn("race", &r.0, quota, &format!("{at} 3")))
            .collect();
        let admitted: u64 = children
            .into_iter()
            .map(|c| lines(c, "admitted")[0].parse::<u64>().unwrap())
            .sum();
        assert_eq!(admitted, 5, "round {round}: 6 processes x 3 requests");
        let l = attach(&r.0, quota);
        let audit = l.audit().unwrap();
        assert_eq!((audit.live, audit.counted), (1, 1), "{audit:?}");
    }
}

/// A limiter opened before `fork()` (with its process's memo of hashes warm) serves every
/// child: 4 children of one process admit together exactly the burst (no refill within the
/// test: 1 token an hour).
#[test]
fn a_region_opened_before_fork_serves_every_child() {
    let r = Region::new("fork");
    let quota = "1/hour; burst=25";
    let parent = open(&r.0, quota, 16);
    let got = lines(spawn("fork", &r.0, quota, "4 50"), "admitted");
    assert_eq!(got, ["25"]);
    assert_eq!(parent.peek(b"client".as_slice()).unwrap().remaining(), 0);
}

/// The most cost `quota` (`count/s; burst=b`) admits per key from the region's creation to
/// the region-clock reading `end`: the burst plus the refill since creation.
fn bound(burst: u64, per_s: u64, end_ns: u64) -> u64 {
    burst + (u128::from(per_s) * u128::from(end_ns) / 1_000_000_000) as u64
}

#[test]
fn processes_and_threads_on_one_region_never_exceed_the_bound() {
    let r = Region::new("hammer");
    let quota = "200/s; burst=30";
    let parent = open(&r.0, quota, 10_000);
    let children: Vec<Child> = (0..4)
        .map(|_| spawn("hammer", &r.0, quota, "2 8 600 3"))
        .collect();
    let mut per_key = [0u64; 8];
    for c in children {
        for l in lines(c, "admitted") {
            let mut it = l.split(' ');
            let (k, a): (usize, u64) = (
                it.next().unwrap().parse().unwrap(),
                it.next().unwrap().parse().unwrap(),
            );
            per_key[k] += a;
        }
    }
    let end = parent.clock().now();
    let max = bound(30, 200, end);
    for (k, a) in per_key.iter().enumerate() {
        assert!(
            *a <= max,
            "key {k}: admitted {a}, the bound is {max} ({end} ns)"
        );
        assert!(*a > 0, "key {k} admitted nothing");
    }
    let audit = parent.audit().unwrap();
    assert_eq!(
        (
            audit.live,
            audit.duplicates,
            audit.unreachable,
            audit.corrupt
        ),
        (8, 0, 0, 0)
    );
}

#[test]
fn workers_killed_at_random_leave_a_valid_region_and_an_exact_bound() {
    let r = Region::new("crash");
    // Buckets full 1 ms after use, many keys, a small capacity: inserts and evictions all
    // the time, so that kills land inside them too.
    let quota = "1000/s; burst=1";
    let parent = open(&r.0, quota, 1000);
    let mut rng = Rng(0x1234_5678);
    let mut workers: Vec<Child> = (0..3)
        .map(|_| spawn("forever", &r.0, quota, "5000"))
        .collect();
    for w in &mut workers {
        let mut out = BufReader::new(w.stdout.as_mut().unwrap());
        let mut line = String::new();
        while !line.contains("@ready") {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "a worker ended early"
            );
        }
    }
    for _ in 0..24 {
        std::thread::sleep(Duration::from_millis(10 + rng.below(60)));
        let i = rng.below(workers.len() as u64) as usize;
        workers[i].kill().unwrap(); // SIGKILL
        workers[i].wait().unwrap();
        workers[i] = spawn("forever", &r.0, quota, "5000");
    }
    for w in &mut workers {
        w.kill().unwrap();
        w.wait().unwrap();
    }
    // A fresh opener validates the region; no key is in two slots, every slot is reachable,
    // and after a sweep (which recounts) the live count is exact.
    let fresh = open(&r.0, quota, 1000);
    let audit = fresh.audit().unwrap();
    assert_eq!(
        (audit.duplicates, audit.unreachable, audit.corrupt),
        (0, 0, 0),
        "{audit:?}"
    );
    assert!(audit.live <= 1000);
    fresh.sweep().unwrap();
    let audit = fresh.audit().unwrap();
    assert_eq!(audit.live as u64, audit.counted, "{audit:?}");
    // The claims of killed workers are undone: no slot is held by a process that is gone.
    assert_eq!(audit.stale_claims, 0, "{audit:?}");
    // The bound still holds exactly: from here, every key admits its burst plus its refill.
    let start = parent.clock().now();
    let children: Vec<Child> = (0..2)
        .map(|_| spawn("hammer", &r.0, "1000/s; burst=1", "2 4 300 1"))
        .collect();
    let mut per_key = [0u64; 4];
    for c in children {
        for l in lines(c, "admitted") {
            let mut it = l.split(' ');
            let k: usize = it.next().unwrap().parse().unwrap();
            per_key[k] += it.next().unwrap().parse::<u64>().unwrap();
        }
    }
    let end = parent.clock().now();
    // Keys 0..4 (little-endian bytes) were among the workers' keys: each had at most its
    // burst at `start`.
    let max = 1 + (u128::from(end - start) * 1000 / 1_000_000_000) as u64;
    for (k, a) in per_key.iter().enumerate() {
        assert!(*a <= max, "key {k}: admitted {a}, the bound is {max}");
    }
}

#[test]
fn processes_started_seconds_apart_read_one_clock() {
    let r = Region::new("clock");
    let _creator = open(&r.0, "5/s", 10);
    let read = || {
        let l = lines(spawn("clock", &r.0, "5/s", ""), "clock");
        let mut it = l[0].split(' ');
        let shared: u64 = it.next().unwrap().parse().unwrap();
        let mono: u64 = it.next().unwrap().parse().unwrap();
        (shared, mono)
    };
    let (s1, m1) = read();
    std::thread::sleep(Duration::from_millis(2500));
    let (s2, m2) = read();
    let (ds, dm) = ((s2 - s1) as i128, (m2 - m1) as i128);
    assert!(dm >= 2_500_000_000, "{dm}");
    // The region's clock runs with CLOCK_MONOTONIC: the two processes, 2.5 s apart, agree
    // within 1 ms plus a hundredth (the TSC's calibration, quanta's: a CI run on a busy 2-core
    // VM saw it 1.9 thousandths off). A clock of each process's own would be 2.5 s off.
    let slack = 1_000_000 + dm / 100;
    assert!(
        (ds - dm).abs() <= slack,
        "region clock moved {ds} ns, CLOCK_MONOTONIC {dm} ns"
    );
}

/// The region's table at a bound of one key, a sweep running beside new keys: see
/// `keyed::new_keys_beside_a_sweeper` (the same table code runs between processes).
#[test]
fn a_new_key_at_a_bound_of_one_is_admitted_beside_a_sweeper() {
    let r = Region::new("sweeper");
    let kl = open(&r.0, "1/s", 1);
    let base = kl.clock().now();
    crate::keyed::new_keys_beside_a_sweeper(
        base,
        20_000,
        |i, t| kl.try_acquire_at(i.to_string().as_bytes(), t, 1),
        |t| {
            kl.sweep_at(t).unwrap();
        },
    );
    let audit = kl.audit().unwrap();
    assert_eq!((audit.live, audit.counted), (1, 1));
}
