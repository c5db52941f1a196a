//! The replay: requests (from log lines or synthetic segments) offered, in order, to every
//! candidate policy at their own timestamps, on the core's engine; and what each policy did.
//!
//! The replay is open-loop: every policy sees the same requests, as they were logged. A real
//! client that was rejected might have retried or given up; the replay answers "which of these
//! requests would this policy have rejected", not "what would the clients have done next".

use crate::engine::{
    acquire_all, capacity, last_reading, peek_all, Bucket, Clock, DenseBucket, KeyedBucket, Part,
    Refusal, Verdict,
};
use crate::error::CliError;
use crate::intern::Interner;
use crate::netkey::NetKey;
use crate::policy::{PolicySpec, Scope};
use crate::stats::{Hist, Peak, Timeline};

/// One rule's buckets.
/// (The limiters are boxed: larger than the composite's vectors.)
enum Limit {
    /// A per-key rule's buckets by key id (the replay's default: see [`Replay::dense`]).
    Dense(Box<DenseBucket>),
    Keyed(Box<KeyedBucket>),
    Global(Box<Bucket>),
    /// Every part in a store of its own created at the replay's start, as a single rule's
    /// (a per-key part's in a dense or keyed store bounded by `max_keys`, a global part's in
    /// one bucket), consumed all-or-nothing ([`acquire_all`]).
    Composite {
        parts: Vec<Part>,
        /// Each part's capacity, checked before any part is touched.
        caps: Vec<u64>,
    },
}

impl Limit {
    fn new(
        rule: &crate::policy::Rule,
        clock: &Clock,
        origin: u64,
        max_keys: usize,
        dense: bool,
    ) -> Result<Limit, String> {
        if let [p] = rule.parts.as_slice() {
            return Ok(match p.scope {
                Scope::PerKey if dense => {
                    Limit::Dense(Box::new(DenseBucket::new(&p.rate, clock, max_keys)?))
                }
                Scope::PerKey => {
                    Limit::Keyed(Box::new(KeyedBucket::new(&p.rate, clock, max_keys)?))
                }
                Scope::Global => Limit::Global(Box::new(Bucket::new(&p.rate, clock)?)),
            });
        }
        if rule.parts.is_empty() {
            return Err("a composite without parts".into());
        }
        let parts = rule
            .parts
            .iter()
            .map(|p| {
                Ok(match p.scope {
                    Scope::Global => Part::Global(Box::new(Bucket::new(&p.rate, clock)?)),
                    Scope::PerKey if dense => {
                        Part::Dense(DenseBucket::new(&p.rate, clock, max_keys)?)
                    }
                    Scope::PerKey => {
                        Part::Keyed(Box::new(KeyedBucket::new(&p.rate, clock, max_keys)?))
                    }
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(Limit::Composite {
            parts,
            caps: rule
                .parts
                .iter()
                .map(|p| capacity(&p.rate, origin))
                .collect(),
        })
    }

    /// The decision for `cost` of `key` at `t` (the clock reads `t`).
    #[inline]
    fn decide(&mut self, key: u32, t: u64, cost: u64) -> Result<Verdict, Refusal> {
        match self {
            Limit::Dense(d) => d.acquire(key, t, cost),
            Limit::Keyed(k) => k.acquire(key, t, cost),
            Limit::Global(b) => b.acquire(t, cost),
            Limit::Composite { parts, caps } => acquire_all(parts, caps, key, t, cost),
        }
    }

    /// The bucket level of `key` at `t`, changing nothing.
    fn peek(&self, key: u32, t: u64) -> Result<Verdict, Refusal> {
        match self {
            Limit::Dense(d) => d.peek(key, t),
            Limit::Keyed(k) => k.peek(key, t),
            Limit::Global(b) => b.peek(t),
            Limit::Composite { parts, .. } => peek_all(parts, key, t),
        }
    }

    fn keys(&self) -> usize {
        match self {
            Limit::Dense(d) => d.len(),
            Limit::Keyed(k) => k.len(),
            Limit::Global(_) => 1,
            Limit::Composite { parts, .. } => parts.iter().map(Part::len).max().unwrap_or(0),
        }
    }
}

/// What one policy did.
#[derive(Clone, Default)]
pub struct PolicyStats {
    pub offered: u64,
    pub admitted: u64,
    pub rejected: u64,
    /// Rejections whose cost exceeds the capacity (they can never be admitted).
    pub over_capacity: u64,
    /// Requests no route of the policy matched (admitted: not limited by it).
    pub unlimited: u64,
    /// Admissions with a wait (leaky queue).
    pub delayed: u64,
    pub delay: Hist,
    pub retry: Hist,
    /// Rejections per key id. Per-key counts are `u32` and saturate at `u32::MAX`: four bytes
    /// per key and policy keep millions of keys cheap, and a count past 4e9 for one key only
    /// ranks the top keys (the totals above are `u64`).
    pub rejected_by_key: Vec<u32>,
    pub peak_admitted: Option<Peak>,
    /// Keys held by the policy's stores at the end.
    pub keys_held: usize,
    /// The first rejection's timestamp.
    pub first_reject: Option<u64>,
}

/// A traced (policy, key): its bucket level per timeline bin (second pass).
#[derive(Clone)]
pub struct Trace {
    pub policy: usize,
    pub key: u32,
    /// Level at each bin's end (a peek), `None` before the key's first request.
    pub level_end: Vec<Option<u64>>,
    /// Lowest level after a decision in the bin.
    pub level_min: Vec<Option<u64>>,
    /// Rejections per bin (saturating, as the per-key counts).
    pub rejected: Vec<u32>,
    pub limit: u64,
    rule: Option<usize>,
    seen: bool,
    next_bin: usize,
}

/// How far back a line's time may step from the engine's clock and still be decided at the
/// clock's time (see [`Replay::offer`]): a minute, more than a request's latency.
pub const CLAMP_NS: u64 = 60_000_000_000;

pub struct Replay {
    pub specs: Vec<PolicySpec>,
    rules: Vec<Vec<Limit>>,
    clock: Option<Clock>,
    /// The last reading every rule of every policy covers exactly (set at the start): a
    /// request past it is refused whole ([`offer`](Self::offer)).
    horizon: u64,
    pub origin: Option<u64>,
    max_keys: usize,
    pub stats: Vec<PolicyStats>,
    pub interner: Interner,
    /// Requests per key id: `u32`, saturating (see `PolicyStats::rejected_by_key`).
    pub offered_by_key: Vec<u32>,
    pub timeline: Timeline,
    peak_offered: Peak,
    sustain: u64,
    /// `cross[a * n + b]`: requests policy `a` rejected and policy `b` admitted.
    pub cross: Vec<u64>,
    /// Requests only this policy rejected.
    pub only: Vec<u64>,
    pub requests: u64,
    pub first_t: Option<u64>,
    pub last_t: u64,
    pub max_t: u64,
    /// Requests whose timestamp is earlier than an earlier request's.
    pub backwards: u64,
    pub traces: Vec<Trace>,
    caps: Vec<(usize, usize)>,
    needs_route: bool,
    /// Per-key rules keep their buckets in arrays by key id ([`DenseBucket`]), not in hash
    /// tables ([`KeyedBucket`]): the same decisions, with a cache miss less per request and no
    /// locked insert per new key, until a rule's `max_keys` is met (see `bound_met`).
    dense: bool,
    /// A dense rule refused a new key at `max_keys`. A keyed store would first evict full
    /// buckets there, which a dense one never does: the replay starts over on keyed stores
    /// ([`keyed_stores`](Self::keyed_stores)), and this one's figures are void.
    pub bound_met: bool,
}

impl Replay {
    pub fn new(specs: Vec<PolicySpec>, max_keys: usize, sustain: u64, timeline: Timeline) -> Self {
        let n = specs.len();
        let needs_route = specs.iter().any(PolicySpec::has_routes);
        Replay {
            rules: Vec::new(),
            clock: None,
            horizon: u64::MAX,
            origin: None,
            max_keys,
            stats: (0..n)
                .map(|_| PolicyStats {
                    peak_admitted: Some(Peak::new(sustain)),
                    ..Default::default()
                })
                .collect(),
            interner: Interner::new(),
            offered_by_key: Vec::new(),
            timeline,
            peak_offered: Peak::new(sustain),
            sustain,
            cross: vec![0; n * n],
            only: vec![0; n],
            requests: 0,
            first_t: None,
            last_t: 0,
            max_t: 0,
            backwards: 0,
            traces: Vec::new(),
            caps: Vec::new(),
            needs_route,
            dense: true,
            bound_met: false,
            specs,
        }
    }

    /// The same replay on keyed stores (hash tables that evict full buckets at `max_keys`):
    /// for a replay whose dense stores met the bound, or whose input is read only once.
    pub fn keyed_stores(mut self) -> Self {
        self.dense = false;
        self
    }

    /// A second pass over the same requests with fresh buckets, tracing `keys`' levels on
    /// `self`'s final bins; the interner (and so the ids) is kept.
    pub fn second_pass(&self, traced: &[(usize, u32)]) -> Replay {
        let mut r = Replay::new(
            self.specs.clone(),
            self.max_keys,
            self.sustain,
            self.timeline.same_bins(),
        );
        r.interner = Interner::new();
        r.dense = self.dense;
        r.traces = traced
            .iter()
            .map(|&(policy, key)| Trace {
                policy,
                key,
                level_end: vec![None; self.timeline.len()],
                level_min: vec![None; self.timeline.len()],
                rejected: vec![0; self.timeline.len()],
                limit: 0,
                rule: None,
                seen: false,
                next_bin: 0,
            })
            .collect();
        r
    }

    pub fn sustain(&self) -> u64 {
        self.sustain
    }

    fn start(&mut self, t: u64) -> Result<(), CliError> {
        let clock = Clock::new(t);
        let mut rules = Vec::new();
        for s in &self.specs {
            let mut v = Vec::new();
            for r in &s.rules {
                v.push(
                    Limit::new(r, &clock, t, self.max_keys, self.dense)
                        .map_err(|e| CliError::usage("--policy", &s.name, e))?,
                );
            }
            rules.push(v);
        }
        self.rules = rules;
        self.horizon = self
            .specs
            .iter()
            .flat_map(|s| s.rules.iter())
            .flat_map(|r| r.parts.iter())
            .map(|p| last_reading(&p.rate, t))
            .min()
            .unwrap_or(u64::MAX);
        self.clock = Some(clock);
        self.origin = Some(t);
        Ok(())
    }

    /// The id of a key (new keys get the next id).
    #[inline]
    pub fn key_id(&mut self, key: &[u8]) -> u32 {
        self.key_id_hashed(key, self.interner.hash(key))
    }

    /// [`key_id`](Self::key_id) of a key whose interner hash is `h`.
    #[inline]
    pub fn key_id_hashed(&mut self, key: &[u8], h: u64) -> u32 {
        let (id, new) = self.interner.intern_hashed(key, h);
        if new {
            self.offered_by_key.push(0);
        }
        id
    }

    /// Asks the cache for what [`offer`](Self::offer) will read for key `id` (its counter,
    /// and its bucket in every policy of one keyed rule), without waiting: a hint that
    /// changes nothing, so that the memory accesses of a batch of requests overlap.
    #[inline]
    pub fn prefetch(&self, id: u32) {
        if let Some(c) = self.offered_by_key.get(id as usize) {
            prefetch_line(c);
        }
        for rules in &self.rules {
            match rules.as_slice() {
                [Limit::Dense(d)] => d.prefetch(id),
                [Limit::Keyed(k)] => k.prefetch(id),
                _ => {}
            }
        }
    }

    /// Whether `t` is past what the policies cover exactly (once the replay has started).
    pub fn beyond(&self, t: u64) -> bool {
        self.clock.is_some() && t > self.horizon
    }

    /// Offers one request of `cost` from key `id` at `t` to every policy. `Err` only for the
    /// key bound (`--max-keys`) or a timestamp past the exact range of any rule of any policy
    /// (`ClockOutOfRange`): such a request is refused before anything is counted or decided,
    /// so it changes nothing (no policy's buckets, no figure, not the latest time seen).
    #[inline]
    pub fn offer(
        &mut self,
        t: u64,
        id: u32,
        method: &[u8],
        path: Option<&[u8]>,
        cost: u64,
    ) -> Result<(), Refusal> {
        if self.clock.is_none() {
            self.start(t).map_err(|e| Refusal::Other(e.to_string()))?;
            self.first_t = Some(t);
            self.max_t = t;
        }
        if t > self.horizon {
            return Err(Refusal::ClockOutOfRange { now: t });
        }
        // A line stamped a little (up to CLAMP_NS) before the latest time seen (a log
        // written as responses end) is decided at that time, as a limiter's clock, which
        // never goes back, would take it: so that no bucket is judged at a time before its
        // last change (which drained it backwards: a refill not yet earned counted against
        // the request). A line stamped further back (a clock's glitch, the latest time being
        // one) is decided at its own time: after a line stamped far ahead, the lines that
        // follow are not all bunched at the glitch's time.
        let at = if t < self.max_t && self.max_t - t <= CLAMP_NS {
            self.max_t
        } else {
            t
        };
        self.clock.as_ref().expect("started").set(at);
        if t < self.max_t {
            self.backwards += 1;
        }
        self.max_t = self.max_t.max(t);
        self.last_t = t;
        self.requests += 1;
        let bin = self.timeline.offer(t);
        if !self.traces.is_empty() {
            self.trace_bins(bin);
        }
        self.peak_offered.add(t);
        let c = &mut self.offered_by_key[id as usize];
        *c = c.saturating_add(1);
        let n = self.specs.len();
        let mut rejected_mask = 0u64;
        for p in 0..n {
            let rule = if self.needs_route && self.specs[p].has_routes() {
                match self.specs[p].rule_for(method, path.unwrap_or(b""), &mut self.caps) {
                    Some(r) => r,
                    None => {
                        let st = &mut self.stats[p];
                        st.offered += 1;
                        st.admitted += 1;
                        st.unlimited += 1;
                        self.timeline.admit(p, bin);
                        if let Some(pk) = st.peak_admitted.as_mut() {
                            pk.add(t);
                        }
                        continue;
                    }
                }
            } else {
                0
            };
            let v = self.rules[p][rule].decide(id, at, cost);
            let st = &mut self.stats[p];
            st.offered += 1;
            let rejected = match v {
                Ok(v) if v.allowed() => {
                    st.admitted += 1;
                    self.timeline.admit(p, bin);
                    if let Some(pk) = st.peak_admitted.as_mut() {
                        pk.add(t);
                    }
                    let w = v.retry_ns();
                    if w > 0 {
                        st.delayed += 1;
                        st.delay.add(w);
                    }
                    false
                }
                Ok(v) => {
                    st.rejected += 1;
                    st.retry.add(v.retry_ns());
                    st.first_reject.get_or_insert(t);
                    true
                }
                Err(Refusal::OverCapacity { .. }) => {
                    st.rejected += 1;
                    st.over_capacity += 1;
                    true
                }
                Err(e) => {
                    self.bound_met |= self.dense && matches!(e, Refusal::KeyStoreFull { .. });
                    return Err(e);
                }
            };
            if rejected {
                rejected_mask |= 1 << p;
                let by_key = &mut st.rejected_by_key;
                if by_key.len() <= id as usize {
                    by_key.resize(self.offered_by_key.len().max(id as usize + 1), 0);
                }
                let c = &mut by_key[id as usize];
                *c = c.saturating_add(1);
            }
            if !self.traces.is_empty() {
                for tr in self
                    .traces
                    .iter_mut()
                    .filter(|tr| tr.policy == p && tr.key == id)
                {
                    tr.rule = Some(rule);
                    tr.seen = true;
                    if let Ok(v) = &v {
                        tr.limit = v.limit();
                        let lvl = v.remaining();
                        let m = &mut tr.level_min[bin];
                        *m = Some(m.map_or(lvl, |x| x.min(lvl)));
                    }
                    if rejected {
                        tr.rejected[bin] = tr.rejected[bin].saturating_add(1);
                    }
                }
            }
        }
        if rejected_mask != 0 && n > 1 {
            let all = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
            let admitted_mask = all & !rejected_mask;
            for a in 0..n {
                if rejected_mask & (1 << a) == 0 {
                    continue;
                }
                for b in 0..n {
                    if admitted_mask & (1 << b) != 0 {
                        self.cross[a * n + b] += 1;
                    }
                }
                if rejected_mask == 1 << a {
                    self.only[a] += 1;
                }
            }
        }
        Ok(())
    }

    /// Second pass: when a request lands in a later bin, read every traced key's level at the
    /// end of each bin passed.
    fn trace_bins(&mut self, bin: usize) {
        for tr in self.traces.iter_mut() {
            // `level_end[b]` is filled once bin b is over.
            let mut b = tr.next_bin;
            while b < bin {
                if let (true, Some(rule)) = (tr.seen, tr.rule) {
                    // The instant bin b ends (before any request of the next bin is decided).
                    let end = self.timeline.origin + (b as u64 + 1) * self.timeline.width;
                    if let Ok(v) = self.rules[tr.policy][rule].peek(tr.key, end) {
                        tr.level_end[b] = Some(v.remaining());
                    }
                } else {
                    // Before the key's first request: no level (but mark the bin done).
                    tr.level_end[b] = Some(u64::MAX);
                }
                b += 1;
            }
            tr.next_bin = tr.next_bin.max(bin);
        }
    }

    /// Ends the replay: the last bins' levels, the peaks, the stores' sizes.
    pub fn finish(&mut self) {
        if !self.traces.is_empty() {
            let n = self.timeline.len();
            self.trace_bins(n);
            for tr in &mut self.traces {
                for l in tr.level_end.iter_mut() {
                    if *l == Some(u64::MAX) {
                        *l = None;
                    }
                }
            }
        }
        for (p, rules) in self.rules.iter().enumerate() {
            self.stats[p].keys_held = rules.iter().map(Limit::keys).sum();
        }
    }

    /// The busiest window of offered requests.
    pub fn peak_offered(&self) -> u64 {
        self.peak_offered.finish()
    }

    /// A key's text: IP networks as addresses, other parts as their text, joined with spaces.
    pub fn key_text(&self, id: u32) -> String {
        key_text(self.interner.get(id))
    }
}

/// Asks the cache for the line holding `v`, without waiting for it (a hint).
#[inline]
fn prefetch_line<T>(v: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch never faults and reads nothing; the address is a live reference.
        unsafe { _mm_prefetch((v as *const T).cast::<i8>(), _MM_HINT_T0) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

/// Key bytes are parts, each a tag byte and its payload: 4 or 6 (an IP network, see
/// `NetKey::write_bytes`) or `s` (a u32 length and the bytes).
pub fn key_text(mut b: &[u8]) -> String {
    let mut parts = Vec::new();
    while let Some(&tag) = b.first() {
        match tag {
            4 | 6 => match NetKey::read_bytes(b) {
                Some((k, n)) => {
                    parts.push(k.to_string());
                    b = &b[n..];
                }
                None => break,
            },
            b's' if b.len() >= 5 => {
                let n = u32::from_le_bytes([b[1], b[2], b[3], b[4]]) as usize;
                let end = (5 + n).min(b.len());
                parts.push(String::from_utf8_lossy(&b[5..end]).into_owned());
                b = &b[end..];
            }
            _ => break,
        }
    }
    if parts.is_empty() {
        "(all)".into()
    } else {
        parts.join(" ")
    }
}

/// Appends a text part to key bytes.
#[inline]
pub fn push_text(key: &mut Vec<u8>, text: &[u8]) {
    key.push(b's');
    key.extend_from_slice(&(text.len() as u32).to_le_bytes());
    key.extend_from_slice(text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_key_counts_saturate_instead_of_wrapping() {
        let spec = PolicySpec::parse("1/h; burst=1").unwrap();
        let mut r = Replay::new(
            vec![spec],
            16,
            10_000_000_000,
            Timeline::fixed(1, 0, 1_000_000_000, 4),
        );
        let id = r.key_id(b"k");
        r.offer(0, id, b"GET", Some(b"/"), 1).unwrap();
        r.offer(1, id, b"GET", Some(b"/"), 1).unwrap();
        assert_eq!(r.offered_by_key[id as usize], 2);
        assert_eq!(r.stats[0].rejected_by_key[id as usize], 1);
        // As after 2^32 - 1 requests (and rejections) for the key.
        r.offered_by_key[id as usize] = u32::MAX;
        r.stats[0].rejected_by_key[id as usize] = u32::MAX;
        r.offer(2, id, b"GET", Some(b"/"), 1).unwrap();
        assert_eq!(r.offered_by_key[id as usize], u32::MAX);
        assert_eq!(r.stats[0].rejected_by_key[id as usize], u32::MAX);
        assert_eq!(r.requests, 3);
        assert_eq!(r.stats[0].rejected, 2);
    }

    const S: u64 = 1_000_000_000;

    fn replay(policies: &[&str], max_keys: usize) -> Replay {
        let specs = policies
            .iter()
            .map(|p| PolicySpec::parse(p).unwrap())
            .collect::<Vec<_>>();
        let n = specs.len();
        Replay::new(specs, max_keys, 10 * S, Timeline::fixed(n, 0, S, 600))
    }

    /// A line past one policy's exact range but within another's changes nothing: not the
    /// counts, not the latest time (later lines are not "backwards"), not any bucket.
    #[test]
    fn a_line_out_of_one_policys_range_changes_nothing() {
        let t0: u64 = 1_714_521_600 * S; // 2024-05-01
        let wide = "a=1000000000/s; algorithm=sliding_window";
        let narrow = "b=1000000000/s; algorithm=fixed_window";
        let bad = 17_500_000_000 * S; // 2524: past b's range, within a's
        let (ra, rb) = (
            crate::engine::Rate::parse("1000000000/s; algorithm=sliding_window").unwrap(),
            crate::engine::Rate::parse("1000000000/s; algorithm=fixed_window").unwrap(),
        );
        assert!(last_reading(&ra, t0) >= bad && last_reading(&rb, t0) < bad);
        let mut r = replay(&[wide, narrow], 16);
        let id = r.key_id(b"k");
        r.offer(t0, id, b"GET", None, 1).unwrap();
        assert!(matches!(
            r.offer(bad, id, b"GET", None, 1),
            Err(Refusal::ClockOutOfRange { .. })
        ));
        assert_eq!((r.requests, r.max_t, r.last_t), (1, t0, t0));
        assert_eq!(r.offered_by_key[id as usize], 1);
        assert_eq!((r.stats[0].offered, r.stats[1].offered), (1, 1));
        r.offer(t0 + 1, id, b"GET", None, 1).unwrap();
        assert_eq!((r.requests, r.backwards, r.max_t), (2, 0, t0 + 1));
        assert_eq!((r.stats[0].admitted, r.stats[1].admitted), (2, 2));
    }

    /// A composite's per-key interval refill runs on the replay's grid, as the single rule's.
    #[test]
    fn composite_interval_refill_on_the_single_rules_grid() {
        for keyed in [false, true] {
            let mut r = replay(
                &[
                    "plain=10/m; refill=interval",
                    "both=10/m; refill=interval & global 1000000/s",
                ],
                16,
            );
            if keyed {
                r = r.keyed_stores();
            }
            let a = r.key_id(b"a");
            let b = r.key_id(b"b");
            r.offer(0, a, b"GET", None, 1).unwrap();
            for i in 0..10 {
                r.offer(30 * S + i, b, b"GET", None, 1).unwrap();
            }
            r.offer(30 * S + 10, b, b"GET", None, 1).unwrap();
            assert_eq!((r.stats[0].rejected, r.stats[1].rejected), (1, 1));
            // The replay's period boundary: both refill b.
            r.offer(61 * S, b, b"GET", None, 1).unwrap();
            assert_eq!(
                (r.stats[0].rejected, r.stats[1].rejected),
                (1, 1),
                "{keyed}"
            );
            assert_eq!(r.stats[0].admitted, r.stats[1].admitted);
        }
    }

    /// A composite's per-key buckets are bounded by `max_keys` as a single rule's, and a
    /// request over the capacity creates none.
    #[test]
    fn composite_per_key_buckets_are_bounded_and_over_capacity_creates_none() {
        let both = "both=10/m & global 1000/s";
        let mut r = replay(&[both], 2);
        let ids: Vec<u32> = [b"a", b"b", b"c"].iter().map(|k| r.key_id(*k)).collect();
        r.offer(0, ids[0], b"GET", None, 11).unwrap();
        r.finish();
        assert_eq!((r.stats[0].over_capacity, r.stats[0].keys_held), (1, 0));
        r.offer(1, ids[0], b"GET", None, 1).unwrap();
        r.offer(2, ids[1], b"GET", None, 1).unwrap();
        assert!(matches!(
            r.offer(3, ids[2], b"GET", None, 1),
            Err(Refusal::KeyStoreFull { .. })
        ));
        assert!(r.bound_met);
        // On keyed stores, full buckets are evicted at the bound.
        let mut r = replay(&[both], 2).keyed_stores();
        for (i, k) in [b"a", b"b", b"c"].iter().enumerate() {
            let id = r.key_id(*k);
            r.offer(i as u64 * 60 * S, id, b"GET", None, 1).unwrap();
        }
        r.finish();
        assert!(r.stats[0].keys_held <= 2, "{}", r.stats[0].keys_held);
        assert_eq!(r.stats[0].admitted, 3);
    }
}
