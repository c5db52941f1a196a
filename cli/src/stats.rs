//! The figures a replay accumulates: a log-linear histogram (retry_after, queue delays), a
//! timeline of bins that coarsen as the replay grows, and the peak sustained rate.

/// Values below 2^SUB_BITS exactly; above, 2^SUB_BITS buckets per power of two (a bucket's
/// width is under 1/128 of its values: 0.8 % resolution).
const SUB_BITS: u32 = 7;
const SUB: usize = 1 << SUB_BITS;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * SUB;

#[derive(Clone)]
pub struct Hist {
    counts: Vec<u64>,
    pub n: u64,
    pub sum: u128,
    pub min: u64,
    pub max: u64,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            counts: Vec::new(),
            n: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

fn bucket_of(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = e - SUB_BITS;
    let sub = (v >> shift) as usize & (SUB - 1);
    (shift as usize + 1) * SUB + sub
}

/// The largest value of bucket `b`.
fn bucket_high(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let shift = (b / SUB - 1) as u32;
    let sub = (b % SUB) as u64;
    let low = (SUB as u64 + sub) << shift;
    low + ((1u64 << shift) - 1)
}

impl Hist {
    #[inline]
    pub fn add(&mut self, v: u64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS];
        }
        self.counts[bucket_of(v)] += 1;
        self.n += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// The `q`-quantile (0 < q <= 1), as the upper bound of its bucket (never below the
    /// true value, at most 0.8 % above it), capped at the exact maximum.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(bucket_high(b).min(self.max));
            }
        }
        Some(self.max)
    }

    pub fn mean(&self) -> Option<u64> {
        (self.n > 0).then(|| (self.sum / u128::from(self.n)) as u64)
    }

    /// Non-empty buckets as (low, high, count), merged into at most `max` ranges of about
    /// equal ratio, for the distribution chart.
    pub fn ranges(&self, max: usize) -> Vec<(u64, u64, u64)> {
        let filled: Vec<(usize, u64)> = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(b, &c)| (b, c))
            .collect();
        if filled.is_empty() {
            return Vec::new();
        }
        let low = |b: usize| if b == 0 { 0 } else { bucket_high(b - 1) + 1 };
        let (first, last) = (filled[0].0, filled[filled.len() - 1].0);
        let span = last - first + 1;
        let per = span.div_ceil(max.max(1));
        let mut out: Vec<(u64, u64, u64)> = Vec::new();
        for (b, c) in filled {
            let group = (b - first) / per;
            let (lo, hi) = (
                low(first + group * per),
                bucket_high((first + group * per + per - 1).min(last)),
            );
            match out.last_mut() {
                Some(r) if r.0 == lo => r.2 += c,
                _ => out.push((lo, hi.min(self.max), c)),
            }
        }
        out
    }
}

/// Bin widths a timeline moves through; each divides the next, so bins merge exactly.
const WIDTHS: [u64; 10] = [
    1_000_000,
    10_000_000,
    100_000_000,
    1_000_000_000,
    10_000_000_000,
    60_000_000_000,
    600_000_000_000,
    3_600_000_000_000,
    86_400_000_000_000,
    864_000_000_000_000,
];

/// Offered and admitted requests per time bin, per policy. Bins start at 1 ms and widen
/// (10 ms, 100 ms, 1 s, 10 s, 1 min, ...) whenever the replay would need more than `max`
/// of them, aligned to multiples of the width (UTC seconds, minutes, hours). A fixed
/// timeline (simulate's rows, a second pass) keeps its geometry.
#[derive(Clone)]
pub struct Timeline {
    pub origin: u64,
    pub width: u64,
    fixed: bool,
    max: usize,
    started: bool,
    pub offered: Vec<u64>,
    pub admitted: Vec<Vec<u64>>,
    cur: usize,
    cur_lo: u64,
    cur_hi: u64,
    /// Requests counted in a bin far from their own: over a minute earlier than the origin
    /// (the first request's bin) in bin 0, or past the last bin the timeline may have (the
    /// widest bins cover 32 years) in that bin. One timestamp far from the others puts the
    /// rest there.
    pub clamped: u64,
}

impl Timeline {
    pub fn adaptive(policies: usize, max: usize) -> Self {
        Timeline {
            origin: 0,
            width: WIDTHS[0],
            fixed: false,
            max,
            started: false,
            offered: Vec::new(),
            admitted: vec![Vec::new(); policies],
            cur: 0,
            cur_lo: 1,
            cur_hi: 0,
            clamped: 0,
        }
    }

    pub fn fixed(policies: usize, origin: u64, width: u64, bins: usize) -> Self {
        Timeline {
            origin,
            width,
            fixed: true,
            max: bins,
            started: true,
            offered: vec![0; bins],
            admitted: vec![vec![0; bins]; policies],
            cur: 0,
            cur_lo: 1,
            cur_hi: 0,
            clamped: 0,
        }
    }

    /// The same geometry, counts zeroed (a second pass).
    pub fn same_bins(&self) -> Self {
        Timeline::fixed(
            self.admitted.len(),
            self.origin,
            self.width,
            self.offered.len(),
        )
    }

    pub fn len(&self) -> usize {
        self.offered.len()
    }

    /// The bin of `t` (created as needed), counting one offered request.
    #[inline]
    pub fn offer(&mut self, t: u64) -> usize {
        if t >= self.cur_lo && t < self.cur_hi {
            self.offered[self.cur] += 1;
            return self.cur;
        }
        let b = self.locate(t);
        self.offered[b] += 1;
        b
    }

    #[inline]
    pub fn admit(&mut self, policy: usize, bin: usize) {
        self.admitted[policy][bin] += 1;
    }

    fn locate(&mut self, t: u64) -> usize {
        if !self.started {
            self.started = true;
            self.origin = t - t % self.width;
        }
        let mut idx = t.saturating_sub(self.origin) / self.width;
        if !self.fixed {
            while idx as usize >= self.max && self.coarsen() {
                idx = t.saturating_sub(self.origin) / self.width;
            }
        }
        // (A request stamped less than a minute before the first, as the first lines of a
        // log written as responses end are, is in bin 0 where it nearly belongs.)
        if (t < self.origin && self.origin - t > crate::replay::CLAMP_NS)
            || idx >= self.max.max(1) as u64
        {
            self.clamped += 1;
        }
        let idx = (idx as usize).min(self.max.max(1) - 1);
        if idx >= self.offered.len() {
            self.offered.resize(idx + 1, 0);
            for a in &mut self.admitted {
                a.resize(idx + 1, 0);
            }
        }
        self.cur = idx;
        self.cur_lo = self.origin + idx as u64 * self.width;
        self.cur_hi = self.cur_lo.saturating_add(self.width);
        if t < self.cur_lo {
            // Before the origin (a timestamp going back past the first): bin 0's range is
            // not widened, so the next request recomputes.
            self.cur_hi = self.cur_lo;
        }
        idx
    }

    /// Moves to the next width; `false` at the widest.
    fn coarsen(&mut self) -> bool {
        let Some(&w) = WIDTHS.iter().find(|&&w| w > self.width) else {
            return false;
        };
        let origin = self.origin - self.origin % w;
        let n = self.offered.len();
        let new_len = if n == 0 {
            0
        } else {
            ((self.origin + (n as u64 - 1) * self.width - origin) / w + 1) as usize
        };
        let (old_origin, old_width) = (self.origin, self.width);
        let regroup = |v: &[u64]| -> Vec<u64> {
            let mut out = vec![0; new_len];
            for (i, c) in v.iter().enumerate() {
                out[((old_origin + i as u64 * old_width - origin) / w) as usize] += c;
            }
            out
        };
        let offered = regroup(&self.offered);
        self.offered = offered;
        self.admitted = self.admitted.iter().map(|a| regroup(a)).collect();
        self.origin = origin;
        self.width = w;
        self.cur_lo = 1;
        self.cur_hi = 0;
        true
    }
}

/// The highest count in any window of `window` ns, counted in ten steps of `window / 10`
/// (windows start on multiples of the step).
#[derive(Clone)]
pub struct Peak {
    step: u64,
    ring: [u64; 10],
    cur: Option<u64>,
    /// The end of the current step (`(cur + 1) * step`; 0 before the first request): an
    /// earlier instant counts in the current step with no division.
    cur_end: u64,
    pub best: u64,
}

impl Peak {
    pub fn new(window: u64) -> Self {
        Peak {
            step: (window / 10).max(1),
            ring: [0; 10],
            cur: None,
            cur_end: 0,
            best: 0,
        }
    }

    #[inline]
    pub fn add(&mut self, t: u64) {
        if t < self.cur_end {
            // Within (or before) the current step: counted in it.
            if let Some(c) = self.cur {
                self.ring[(c % 10) as usize] += 1;
                return;
            }
        }
        self.add_step(t);
    }

    /// [`add`](Self::add) of a request past the current step (or the first).
    fn add_step(&mut self, t: u64) {
        let s = t / self.step;
        match self.cur {
            Some(c) if s <= c => {}
            Some(c) => self.advance(c, s),
            None => self.cur = Some(s),
        }
        let c = self.cur.unwrap_or(s);
        self.cur_end = c.saturating_add(1).saturating_mul(self.step);
        self.ring[(c % 10) as usize] += 1;
    }

    fn advance(&mut self, from: u64, to: u64) {
        // The window ending with step `from` is complete.
        self.close();
        for s in (from + 1)..=to.min(from + 10) {
            self.ring[(s % 10) as usize] = 0;
        }
        self.cur = Some(to);
    }

    fn close(&mut self) {
        let sum: u64 = self.ring.iter().sum();
        self.best = self.best.max(sum);
    }

    /// The best window so far, counting the one in progress.
    pub fn finish(&self) -> u64 {
        self.best.max(self.ring.iter().sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_bound_the_truth() {
        let mut h = Hist::default();
        let vals: Vec<u64> = (1..=10_000u64).map(|i| i * 1_000_003).collect();
        for &v in &vals {
            h.add(v);
        }
        for q in [0.5, 0.9, 0.99, 1.0] {
            let truth = vals[((q * vals.len() as f64).ceil() as usize) - 1];
            let got = h.quantile(q).unwrap();
            assert!(
                got >= truth && got as f64 <= truth as f64 * 1.008,
                "{q}: {got} vs {truth}"
            );
        }
        assert_eq!(h.quantile(1.0), Some(10_000 * 1_000_003));
        assert_eq!(h.min, 1_000_003);
        let mut small = Hist::default();
        for v in [0, 5, 5, 127] {
            small.add(v);
        }
        assert_eq!(small.quantile(0.5), Some(5));
        assert_eq!(small.quantile(1.0), Some(127));
        for v in [128u64, 255, 256, 1 << 40, u64::MAX] {
            assert!(bucket_high(bucket_of(v)) >= v);
            assert!(bucket_of(v) < BUCKETS);
        }
        let r = h.ranges(20);
        assert!(r.len() <= 20);
        assert_eq!(r.iter().map(|x| x.2).sum::<u64>(), 10_000);
    }

    #[test]
    fn timeline_coarsens_exactly() {
        let mut tl = Timeline::adaptive(1, 100);
        let s = 1_000_000_000u64;
        let t0 = 1_714_564_800 * s + 123;
        for i in 0..3600u64 {
            let b = tl.offer(t0 + i * s);
            if i % 2 == 0 {
                tl.admit(0, b);
            }
        }
        assert_eq!(tl.width, 60 * s);
        assert_eq!(tl.origin % (60 * s), 0);
        assert_eq!(tl.offered.iter().sum::<u64>(), 3600);
        assert_eq!(tl.admitted[0].iter().sum::<u64>(), 1800);
        assert!(tl.len() <= 100);
        // going back before the origin lands in bin 0
        let b = tl.offer(t0 - 3600 * s);
        assert_eq!(b, 0);
    }

    #[test]
    fn peak_window() {
        let s = 1_000_000_000u64;
        let mut p = Peak::new(10 * s);
        // 1/s for 100 s, then 5/s for 20 s
        for i in 0..100 {
            p.add(i * s);
        }
        for i in 0..100 {
            p.add(100 * s + i * s / 5);
        }
        p.add(200 * s);
        assert_eq!(p.best, 50);
    }
}
