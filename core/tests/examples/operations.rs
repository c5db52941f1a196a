//! Operating a limiter (docs/OPERATIONS.md): the counters and what each counts, the
//! rejection hook, the Prometheus text format (parsed back here by a strict reader of the
//! exposition format), and live reconfiguration driven by a signal of the caller's own (an
//! adaptive rate).

use sluicegate::composite::{self, Composite};
use sluicegate::{
    render_prometheus, Error, KeyedLimiter, Limiter, ManualClock, Metrics, OnFull, Quota,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const S: u64 = 1_000_000_000;

#[test]
fn counters_count_each_outcome_once() {
    let clock = ManualClock::new(0);
    let l = Limiter::builder("2/s".parse().unwrap())
        .clock(clock.clone())
        .metrics(true)
        .build()
        .unwrap();
    assert_eq!(l.metrics(), Some(Metrics::default()));
    for _ in 0..5 {
        l.try_acquire(1).unwrap();
    }
    l.peek().unwrap(); // a peek is not a request
    l.refund(1).unwrap(); // nor a refund
    assert!(l.try_acquire(3).is_err()); // an error is not a decision
                                        // An acquire counts its outcome once, not the rounds it waited through.
    clock.advance(Duration::from_secs(10));
    l.try_acquire(2).unwrap();
    let d = l.acquire(1, Duration::from_millis(10)).unwrap();
    assert!(
        !d.allowed(),
        "the clock does not move: the wait does not fit"
    );
    l.set_quota("3/s".parse().unwrap()).unwrap();
    let m = l.metrics().unwrap();
    assert_eq!(
        (m.allowed, m.rejected, m.shadow_rejected, m.reconfigurations),
        (3, 4, 0, 1)
    );
    assert_eq!(
        (m.keys, m.keys_evicted, m.key_store_full, m.store_errors),
        (None, 0, 0, 0)
    );
}

#[test]
fn keyed_counters_count_evictions_refused_keys_and_keys() {
    let clock = ManualClock::new(0);
    let kl = KeyedLimiter::<u64, _>::builder("1/s".parse().unwrap())
        .max_keys(2)
        .shards(1)
        .on_full(OnFull::RejectNewKeys)
        .clock(clock.clone())
        .metrics(true)
        .build()
        .unwrap();
    kl.try_acquire(&1, 1).unwrap();
    kl.try_acquire(&2, 1).unwrap();
    assert!(matches!(
        kl.try_acquire(&3, 1),
        Err(Error::KeyStoreFull { .. })
    ));
    clock.advance(Duration::from_secs(1));
    // Both buckets are full again: the new key evicts them (its shard's full ones).
    kl.try_acquire(&3, 1).unwrap();
    let m = kl.metrics().unwrap();
    assert_eq!(
        (m.allowed, m.key_store_full, m.keys, m.keys_evicted),
        (3, 1, Some(1), 2)
    );
    let evicted = m.keys_evicted;
    // Evictions counted before a reconfiguration are kept.
    kl.set_quota("2/s".parse().unwrap()).unwrap();
    clock.advance(Duration::from_secs(1));
    assert_eq!(kl.sweep().unwrap(), 1);
    let m = kl.metrics().unwrap();
    assert_eq!(
        (m.keys_evicted, m.keys, m.reconfigurations),
        (evicted + 1, Some(0), 1)
    );
}

/// Keys longer than the long-key limit live in a second table as digests: a reconfiguration
/// carries their buckets too (tokens kept, clamped; a log's admissions kept), they still count against `max_keys`, and
/// both tables move or neither does.
#[test]
fn reconfiguration_carries_long_keys() {
    // (old quota, new quota, what the long key may take at the change: a bucket keeps its 3
    // tokens; a log keeps its 7 admissions, judged by the new limit of 20).
    for (quota, new, left) in [
        ("10/s", "20/s", 3),
        (
            "10/s; algorithm=sliding_log",
            "20/s; algorithm=sliding_log",
            13,
        ),
    ] {
        let clock = ManualClock::new(0);
        let kl = KeyedLimiter::<Vec<u8>, _>::builder(quota.parse().unwrap())
            .max_keys(2)
            .on_full(OnFull::RejectNewKeys)
            .clock(clock.clone())
            .build()
            .unwrap();
        let long = vec![b'x'; 1000];
        let short = b"short".to_vec();
        assert!(kl.try_acquire(&long[..], 7).unwrap().allowed());
        assert!(kl.try_acquire(&short[..], 1).unwrap().allowed());
        assert_eq!(kl.len(), 2);
        kl.set_quota(new.parse().unwrap()).unwrap();
        assert!(
            kl.try_acquire(&long[..], left).unwrap().allowed(),
            "{quota}"
        );
        assert!(!kl.try_acquire(&long[..], 1).unwrap().allowed(), "{quota}");
        // Both keys still count: a third is refused at the bound.
        assert_eq!(kl.len(), 2);
        assert!(matches!(
            kl.try_acquire(&b"third"[..], 1),
            Err(Error::KeyStoreFull { .. })
        ));
        // A second later the long key's bucket (or log) has room again, at the new limit.
        clock.advance(Duration::from_secs(1));
        assert!(kl.try_acquire(&long[..], 20).unwrap().allowed(), "{quota}");
    }
}

#[test]
fn the_hook_sees_each_rejection_with_its_key() {
    type Seen = Vec<(String, u64, bool, Duration)>;
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let log = seen.clone();
    let clock = ManualClock::new(0);
    let kl = KeyedLimiter::<String, _>::builder("1/s".parse().unwrap())
        .clock(clock.clone())
        .on_reject(move |r| {
            let d = r.decision();
            let entry = (
                r.key().clone(),
                r.cost(),
                d.shadow_rejected(),
                d.retry_after(),
            );
            log.lock().unwrap().push(entry);
        })
        .build()
        .unwrap();
    assert!(kl.try_acquire("alice", 1).unwrap().allowed());
    assert!(!kl.try_acquire("alice", 1).unwrap().allowed());
    kl.set_shadow(true);
    assert!(kl.try_acquire("alice", 1).unwrap().allowed());
    assert!(kl.try_acquire("bob", 1).unwrap().allowed());
    let second = Duration::from_secs(1);
    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("alice".to_string(), 1, false, second),
            ("alice".to_string(), 1, true, second),
        ]
    );
}

/// The hook runs outside the limiter's locks and read sections: it may call the limiter back,
/// even to reconfigure it.
#[test]
fn the_hook_may_call_the_limiter_back() {
    let clock = ManualClock::new(0);
    type Shared = Option<Arc<KeyedLimiter<u64, ManualClock>>>;
    let cell: Arc<Mutex<Shared>> = Arc::default();
    let hook_cell = cell.clone();
    let kl = Arc::new(
        KeyedLimiter::<u64, _>::builder("1/s".parse().unwrap())
            .clock(clock.clone())
            .on_reject(move |r| {
                let kl = hook_cell.lock().unwrap().clone().unwrap();
                // Back off: halve nothing, double the burst once.
                if kl.quota().burst() == 1 {
                    kl.set_quota("1/s; burst=2".parse().unwrap()).unwrap();
                }
                assert_eq!(kl.peek(r.key()).unwrap().remaining(), 0);
            })
            .build()
            .unwrap(),
    );
    *cell.lock().unwrap() = Some(kl.clone());
    kl.try_acquire(&1, 1).unwrap();
    assert!(!kl.try_acquire(&1, 1).unwrap().allowed());
    assert_eq!(kl.quota().burst(), 2);
    *cell.lock().unwrap() = None; // no cycle left behind
}

/// A composite counting its decisions, of a part of `first` (counting its own) and one of
/// `5/s`, on `clock`, and the count of rejections its hook saw.
fn counted_composite(
    first: &str,
    clock: &ManualClock,
) -> (Composite<ManualClock>, Arc<Mutex<u32>>) {
    let parts = vec![
        Limiter::builder(first.parse().unwrap())
            .clock(clock.clone())
            .metrics(true)
            .build()
            .unwrap(),
        Limiter::with_clock("5/s".parse().unwrap(), clock.clone()).unwrap(),
    ];
    let rejected = Arc::new(Mutex::new(0));
    let r2 = rejected.clone();
    let c = Composite::new(parts)
        .with_metrics(true)
        .with_on_reject(move |_| *r2.lock().unwrap() += 1);
    (c, rejected)
}

#[test]
fn a_composite_counts_and_shadows_as_one_limiter() {
    let clock = ManualClock::new(0);
    let (c, rejected) = counted_composite("1/s", &clock);
    assert!(c.try_acquire(1).unwrap().allowed());
    assert!(!c.try_acquire(1).unwrap().allowed());
    c.set_shadow(true);
    let d = c.try_acquire(1).unwrap();
    assert!(d.allowed() && d.shadow_rejected());
    let m = c.metrics().unwrap();
    assert_eq!((m.allowed, m.rejected, m.shadow_rejected), (1, 1, 1));
    assert_eq!(*rejected.lock().unwrap(), 2);
    // The parts decided for the composite: their own counters saw nothing.
    assert_eq!(c.parts()[0].metrics(), Some(Metrics::default()));
    // A part's quota changes live, and the composite follows it.
    c.parts()[0]
        .set_quota("1/s; burst=3".parse().unwrap())
        .unwrap();
    clock.advance(Duration::from_secs(3));
    c.set_shadow(false);
    assert_eq!(c.try_acquire(3).unwrap().remaining(), 0);
}

/// A composite's peek is the parts' peeks combined: the figures a request of cost 0 gets,
/// changing nothing and counting nothing (neither the composite's counters nor a part's, nor
/// its rejection hook), as a single limiter's peek.
#[test]
fn a_composite_peek_is_not_counted() {
    let clock = ManualClock::new(0);
    let (c, rejected) = counted_composite("1/s; burst=3", &clock);
    assert!(c.try_acquire(2).unwrap().allowed());
    let (d, each) = c.peek_each().unwrap();
    assert_eq!(d.remaining(), 1);
    assert_eq!((each[0].remaining(), each[1].remaining()), (1, 3));
    assert_eq!(c.peek().unwrap(), d);
    assert_eq!(
        composite::peek_all(&[&c.parts()[0], &c.parts()[1]]).unwrap(),
        d
    );
    // The figures a request of cost 0 gets (which is counted).
    assert_eq!(c.try_acquire(0).unwrap(), d);
    let m = c.metrics().unwrap();
    assert_eq!(
        (m.allowed, m.rejected),
        (2, 0),
        "the peeks were not counted"
    );
    assert!(c.try_acquire(1).unwrap().allowed());
    assert!(!c.try_acquire(1).unwrap().allowed());
    let refused = c.peek().unwrap();
    assert!(refused.remaining() == 0 && refused.allowed());
    assert_eq!(c.metrics().unwrap().rejected, 1);
    assert_eq!(*rejected.lock().unwrap(), 1);
    assert_eq!(c.parts()[0].metrics(), Some(Metrics::default()));
}

// ---------------------------------------------------------------------------------------------
// The Prometheus text format, read back strictly.
// ---------------------------------------------------------------------------------------------

/// One sample: the metric name, its labels, its value.
type Sample = (String, BTreeMap<String, String>, u64);

/// Parses the text exposition format (version 0.0.4) as a scraper must, failing on anything
/// out of the grammar: `# HELP` then `# TYPE` before a family's samples, each family once and
/// contiguous, valid metric and label names, escaped label values, integer values, no
/// duplicate series, counters named `_total`.
fn parse_exposition(text: &str) -> Result<Vec<Sample>, String> {
    fn name_ok(n: &str, colon: bool) -> bool {
        let mut cs = n.chars();
        cs.next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':'))
            && cs.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
    }
    if !text.ends_with('\n') {
        return Err("no final line feed".into());
    }
    let mut samples = Vec::new();
    let mut families: BTreeSet<String> = BTreeSet::new();
    let mut current: Option<(String, Option<String>)> = None; // (name, type)
    let mut series: BTreeSet<(String, Vec<(String, String)>)> = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').ok_or("HELP without text")?;
            if !name_ok(name, true) || !families.insert(name.to_string()) {
                return Err(format!("bad or repeated family {name}"));
            }
            if help.contains('\n') || help.replace("\\\\", "").replace("\\n", "").contains('\\') {
                return Err(format!("bad escape in help {help:?}"));
            }
            current = Some((name.to_string(), None));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or("TYPE without type")?;
            match &mut current {
                Some((n, t @ None)) if n == name => *t = Some(kind.to_string()),
                _ => return Err(format!("TYPE of {name} not right after its HELP")),
            }
            if !["counter", "gauge"].contains(&kind) {
                return Err(format!("unexpected type {kind}"));
            }
            if kind == "counter" && !name.ends_with("_total") {
                return Err(format!("counter {name} without _total"));
            }
        } else if line.starts_with('#') || line.is_empty() {
            return Err(format!("unexpected line {line:?}"));
        } else {
            let (family, kind) = match &current {
                Some((n, Some(t))) => (n.clone(), t.clone()),
                _ => return Err(format!("sample before HELP and TYPE: {line:?}")),
            };
            let (name_and_labels, value) = line.rsplit_once(' ').ok_or("no value")?;
            let value: u64 = value.parse().map_err(|_| format!("value of {line:?}"))?;
            let (name, labels) = match name_and_labels.split_once('{') {
                None => (name_and_labels, BTreeMap::new()),
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').ok_or("unclosed labels")?;
                    (name, parse_labels(body)?)
                }
            };
            if name != family || !name_ok(name, true) {
                return Err(format!(
                    "sample {name} outside its family {family} ({kind})"
                ));
            }
            let key = (
                name.to_string(),
                labels.clone().into_iter().collect::<Vec<_>>(),
            );
            if !series.insert(key) {
                return Err(format!("duplicate series {line:?}"));
            }
            if labels
                .keys()
                .any(|k| !name_ok(k, false) || k.starts_with("__"))
            {
                return Err(format!("bad label name in {line:?}"));
            }
            samples.push((name.to_string(), labels, value));
        }
    }
    Ok(samples)
}

/// `name="value",...` with `\\`, `\"` and `\n` escapes.
fn parse_labels(body: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    let mut chars = body.chars().peekable();
    while chars.peek().is_some() {
        let name: String = chars.by_ref().take_while(|&c| c != '=').collect();
        if chars.next() != Some('"') {
            return Err(format!("label {name} without a quoted value"));
        }
        let mut value = String::new();
        loop {
            match chars.next().ok_or("unterminated value")? {
                '"' => break,
                '\\' => match chars.next().ok_or("dangling escape")? {
                    '\\' => value.push('\\'),
                    '"' => value.push('"'),
                    'n' => value.push('\n'),
                    c => return Err(format!("bad escape \\{c}")),
                },
                '\n' => return Err("raw line feed".into()),
                c => value.push(c),
            }
        }
        if out.insert(name.clone(), value).is_some() {
            return Err(format!("label {name} twice"));
        }
        match chars.next() {
            None => break,
            Some(',') => {}
            Some(c) => return Err(format!("unexpected {c:?} after a label")),
        }
    }
    Ok(out)
}

#[test]
fn prometheus_text_parses_back_to_the_snapshots() {
    let clock = ManualClock::new(0);
    let api = Limiter::builder("2/s".parse().unwrap())
        .clock(clock.clone())
        .metrics(true)
        .shadow(true)
        .build()
        .unwrap();
    let users = KeyedLimiter::<u64, _>::builder("1/s".parse().unwrap())
        .clock(clock.clone())
        .metrics(true)
        .build()
        .unwrap();
    for i in 0..5 {
        api.try_acquire(1).unwrap();
        users.try_acquire(&(i % 2), 1).unwrap();
    }
    let odd = "we\"ird\\name\nx";
    let series: [(&[(&str, &str)], Metrics); 2] = [
        (
            &[("limiter", "api"), ("route", "/v1")],
            api.metrics().unwrap(),
        ),
        (&[("limiter", odd)], users.metrics().unwrap()),
    ];
    let text = render_prometheus(&series).unwrap();
    let samples = parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let get = |name: &str, limiter: &str, outcome: Option<&str>| -> Option<u64> {
        samples
            .iter()
            .find(|(n, l, _)| {
                n == name
                    && l.get("limiter").map(String::as_str) == Some(limiter)
                    && l.get("outcome").map(String::as_str) == outcome
            })
            .map(|s| s.2)
    };
    let d = "sluicegate_decisions_total";
    assert_eq!(get(d, "api", Some("allowed")), Some(2));
    assert_eq!(get(d, "api", Some("rejected")), Some(0));
    assert_eq!(get(d, "api", Some("shadow_rejected")), Some(3));
    assert_eq!(get(d, odd, Some("allowed")), Some(2));
    assert_eq!(get(d, odd, Some("rejected")), Some(3));
    assert_eq!(get("sluicegate_shadow_mode", "api", None), Some(1));
    assert_eq!(get("sluicegate_shadow_mode", odd, None), Some(0));
    assert_eq!(get("sluicegate_keys", odd, None), Some(2));
    assert_eq!(
        get("sluicegate_keys", "api", None),
        None,
        "a single bucket has no keys"
    );
    assert_eq!(get("sluicegate_keys_evicted_total", odd, None), Some(0));
    let route = samples
        .iter()
        .find(|s| s.1.get("limiter").map(String::as_str) == Some("api"));
    assert_eq!(
        route.unwrap().1.get("route").map(String::as_str),
        Some("/v1")
    );
    // No labels at all is a valid series too.
    let bare = render_prometheus(&[(&[], Metrics::default())]).unwrap();
    assert!(
        bare.contains("\nsluicegate_store_errors_total 0\n"),
        "{bare}"
    );
    parse_exposition(&bare).unwrap();
}

#[test]
fn prometheus_label_errors_are_typed() {
    let m = Metrics::default();
    for bad in ["", "1x", "a-b", "__name", "outcome", "é"] {
        let e = render_prometheus(&[(&[(bad, "v")], m)]).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidOption {
                    option: "label",
                    ..
                }
            ),
            "{bad}: {e:?}"
        );
    }
    let e = render_prometheus(&[(&[("a", "1"), ("a", "2")], m)]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidOption {
                option: "label",
                ..
            }
        ),
        "{e:?}"
    );
    let e = render_prometheus(&[
        (&[("a", "1"), ("b", "2")], m),
        (&[("b", "2"), ("a", "1")], m),
    ])
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidOption {
                option: "labels",
                ..
            }
        ),
        "{e:?}"
    );
    // The labels as a series shows them (Rust's tuple syntax leaked into C and Node).
    assert!(e.to_string().contains(r#"not "{b=\"2\",a=\"1\"}""#), "{e}");
}

// ---------------------------------------------------------------------------------------------
// An adaptive rate: the caller's own signal drives set_quota.
// ---------------------------------------------------------------------------------------------

/// A downstream that slows down when it gets more than 50 requests a second, and an AIMD
/// controller that reads its latency every second: over the threshold it halves the rate,
/// under it adds 5/s. The limiter's rate follows the downstream's capacity (the classic
/// sawtooth around 50/s), and every request admitted fits the quota in force when it was.
#[test]
fn an_adaptive_rate_follows_a_signal_of_the_callers_own() {
    let clock = ManualClock::new(0);
    let limiter = Limiter::with_clock("100/s; burst=10".parse().unwrap(), clock.clone()).unwrap();
    let mut rate = 100u64;
    let mut rates = Vec::new();
    let mut admitted_this_second = 0u64;
    for ms in 1..=30_000u64 {
        clock.set(ms * 1_000_000);
        // The caller offers 200 requests a second (one every 5 ms).
        if ms % 5 == 0 && limiter.try_acquire(1).unwrap().allowed() {
            admitted_this_second += 1;
        }
        if ms % 1000 == 0 {
            // The signal: the downstream's latency, high above 50 requests a second.
            let latency_ms = if admitted_this_second > 50 { 400 } else { 40 };
            rate = if latency_ms > 200 {
                (rate / 2).max(1)
            } else {
                rate + 5
            };
            let q = Quota::try_new(rate, S, 10).unwrap();
            limiter.set_quota(q).unwrap();
            rates.push((rate, admitted_this_second));
            admitted_this_second = 0;
        }
    }
    let late = &rates[10..];
    // Admissions never exceed the rate set the second before (plus the burst).
    for w in rates.windows(2) {
        assert!(w[1].1 <= w[0].0 + 10, "{rates:?}");
    }
    // Once settled, the rate oscillates around the downstream's capacity.
    assert!(
        late.iter().all(|&(r, _)| (20..=70).contains(&r)),
        "{rates:?}"
    );
    let mean = late.iter().map(|&(_, a)| a).sum::<u64>() / late.len() as u64;
    assert!((30..=60).contains(&mean), "{mean} {rates:?}");
    assert_eq!(limiter.quota().count(), rate);
}
