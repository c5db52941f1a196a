//! The sequential reference model of sluicegate: `docs/SEMANTICS.md` written out literally,
//! in plain `i128`, with no atomics, no gcd reduction, no narrow/wide words and no deferred
//! division. One model for every check that compares the engine with its meaning: the core's
//! property, keyed, loom and conformance tests, the fuzz targets and the CLI's replay checks.
//!
//! Not published: it is test code, and its API is whatever those checks need.
#![allow(missing_docs, clippy::missing_panics_doc)]

/// What a request returned, as plain numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Out {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub retry_after_ns: u64,
    pub reset_after_ns: u64,
}

/// An engine decision's figures, as the models report them.
pub fn out(d: &sluicegate::Decision) -> Out {
    Out {
        allowed: d.allowed(),
        limit: d.limit(),
        remaining: d.remaining(),
        retry_after_ns: d.retry_after_nanos(),
        reset_after_ns: d.reset_after_nanos(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelError {
    InsufficientCapacity,
}

fn ceil_div(a: i128, b: i128) -> i128 {
    assert!(a >= 0 && b > 0);
    (a + b - 1) / b
}

#[derive(Clone, Debug)]
pub enum Model {
    /// `full_at` is F * k: the instant the bucket is full, in nanoseconds times k.
    Continuous {
        b: i128,
        k: i128,
        p: i128,
        full_at: i128,
    },
    /// `(n, tau)`: tau tokens as of period n of the grid origin + j * p.
    Interval {
        b: i128,
        k: i128,
        p: i128,
        origin: i128,
        n: i128,
        tau: i128,
    },
}

impl Model {
    /// A bucket created at `t0` (also the interval grid's origin).
    pub fn new(
        count: u64,
        period_ns: u64,
        burst: u64,
        initial: u64,
        interval: bool,
        t0: u64,
    ) -> Self {
        Self::new_keyed(count, period_ns, burst, initial, interval, t0, t0)
    }

    /// A bucket created at `t0` on a grid anchored at `origin` (keyed limiters).
    pub fn new_keyed(
        count: u64,
        period_ns: u64,
        burst: u64,
        initial: u64,
        interval: bool,
        origin: u64,
        t0: u64,
    ) -> Self {
        let (b, k, p) = (burst as i128, count as i128, period_ns as i128);
        let (origin, t0, i) = (origin as i128, t0 as i128, initial as i128);
        if interval {
            let n = (t0 - origin).max(0) / p;
            Model::Interval {
                b,
                k,
                p,
                origin,
                n,
                tau: i,
            }
        } else {
            // F = t0 + (b - i) / r, r = k / p  =>  F * k = t0 * k + (b - i) * p
            Model::Continuous {
                b,
                k,
                p,
                full_at: t0 * k + (b - i) * p,
            }
        }
    }

    pub fn acquire(&mut self, t: u64, c: u64) -> Result<Out, ModelError> {
        let t = t as i128;
        let c = c as i128;
        match self {
            Model::Continuous { b, k, p, full_at } => {
                let (b, k, p) = (*b, *k, *p);
                if c > b {
                    return Err(ModelError::InsufficientCapacity);
                }
                // Work in "scaled" units: time * k; one token = p units.
                let f = *full_at;
                let t_e = (t * k).max(f - b * p); // 1. the clamp
                let avail = b * p - (f - t_e).max(0); // 2. tokens * p
                let allowed = avail >= c * p; // 3.
                let f_after = if allowed && c > 0 {
                    f.max(t_e) + c * p
                } else {
                    f
                };
                *full_at = f_after;
                let left = if allowed { avail - c * p } else { avail };
                Ok(Out {
                    allowed,
                    limit: b as u64,
                    remaining: (left / p) as u64, // 4.
                    retry_after_ns: if allowed {
                        0
                    } else {
                        ceil_div(c * p - avail, k) as u64
                    }, // 5.
                    reset_after_ns: ceil_div((f_after - t_e).max(0), k) as u64, // 6.
                })
            }
            Model::Interval {
                b,
                k,
                p,
                origin,
                n,
                tau,
            } => {
                let (b, k, p, o) = (*b, *k, *p, *origin);
                if c > b {
                    return Err(ModelError::InsufficientCapacity);
                }
                let p_now = (t - o).max(0) / p;
                let p_e = p_now.max(*n);
                let t_e = t.max(o + *n * p);
                let tokens = b.min(*tau + k * (p_e - *n));
                let allowed = tokens >= c;
                if allowed && c > 0 {
                    *n = p_e;
                    *tau = tokens - c;
                }
                let remaining = if allowed { tokens - c } else { tokens };
                let wait = |need: i128| -> i128 {
                    if need <= 0 {
                        0
                    } else {
                        o + (p_e + ceil_div(need, k)) * p - t_e
                    }
                };
                Ok(Out {
                    allowed,
                    limit: b as u64,
                    remaining: remaining as u64,
                    retry_after_ns: if allowed { 0 } else { wait(c - tokens) as u64 },
                    reset_after_ns: wait(b - remaining) as u64,
                })
            }
        }
    }

    pub fn refund(&mut self, t: u64, c: u64) {
        let t = t as i128;
        let c = c as i128;
        match self {
            Model::Continuous { b, k, p, full_at } => {
                let f = *full_at;
                if c > 0 && f > t * *k {
                    *full_at = (f - c.min(*b) * *p).max(t * *k);
                }
            }
            Model::Interval {
                b,
                k,
                p,
                origin,
                n,
                tau,
            } => {
                let p_e = ((t - *origin).max(0) / *p).max(*n);
                let tokens = (*b).min(*tau + *k * (p_e - *n));
                if (*b).min(tokens + c) != tokens {
                    *n = p_e;
                    *tau = (*b).min(tokens + c);
                }
            }
        }
    }

    /// Whether the bucket is full at `t` (docs/SEMANTICS.md, "When a bucket is full"): it
    /// has `b` tokens and `t` is no earlier than what its state proves (a continuous bucket's
    /// full instant, an interval bucket's period), so a bucket made at `t` decides alike.
    pub fn is_full(&self, t: u64) -> bool {
        let full = self.clone().acquire(t, 0).unwrap().reset_after_ns == 0;
        match self {
            Model::Continuous { .. } => full,
            Model::Interval { origin, n, p, .. } => full && t as i128 >= *origin + *n * *p,
        }
    }
}

// ---------------------------------------------------------------------------------------
// The other algorithms (docs/SEMANTICS.md, "Other algorithms"), each written plainly.
// ---------------------------------------------------------------------------------------

fn floor_div(a: i128, b: i128) -> i128 {
    assert!(b > 0);
    a.div_euclid(b)
}

/// `ceil(a / b)` for any sign of `a`.
fn ceil_div_signed(a: i128, b: i128) -> i128 {
    -floor_div(-a, b)
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

// ---------------------------------------------------------------------------------------
// Live reconfiguration: the carry rule (docs/OPERATIONS.md, "The carry rule"), written
// plainly. Rounding follows the engine's grain: a continuous bucket's new state is an instant
// on the grid of 1/k' ns (k'/p' the new rate in lowest terms), so its tokens are rounded down
// to 1/p' of a token, and a queue's last slot up to 1/k' ns.
// ---------------------------------------------------------------------------------------

/// A token bucket (continuous) or GCRA state `full_at` (the instant it is full, times `k`)
/// carried at `t` into a bucket of `b2` tokens, `k2` per `p2` ns: the new `full_at`.
fn carry_continuous(
    b: i128,
    k: i128,
    p: i128,
    full_at: i128,
    t: i128,
    q2: (i128, i128, i128),
) -> i128 {
    let (b2, k2, p2) = q2;
    // The instant: the reading, or the one the state proves (F - b/r), if later.
    let at = t.max(ceil_div_signed(full_at - b * p, k));
    let avail = b * p - (full_at - at * k).max(0); // tokens * p at `at`
    let g2 = gcd(k2, p2);
    let pr = p2 / g2;
    let avail2 = (b2 * pr).min(floor_div(avail * pr, p)); // tokens * p2/g2, rounded down
    at * k2 + (b2 * pr - avail2) * g2
}

/// Which algorithm a model runs (the model's own names, independent of the crate's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    TokenBucket,
    TokenBucketInterval,
    Gcra,
    FixedWindow,
    SlidingWindow,
    SlidingLog,
    LeakyQueue,
}

/// GCRA in its own terms: theoretical arrival time `tat`, emission interval `T = P/k`,
/// tolerance `tau = b*T`. Times are kept multiplied by `k` so that `T = P` is an integer.
#[derive(Clone, Debug)]
pub struct Gcra {
    k: i128,
    t: i128,
    b: i128,
    tat: i128,
}

impl Gcra {
    pub fn new(count: u64, period_ns: u64, burst: u64, initial: u64, t0: u64) -> Self {
        let (k, t, b) = (count as i128, period_ns as i128, burst as i128);
        Gcra {
            k,
            t,
            b,
            tat: t0 as i128 * k + (b - initial as i128) * t,
        }
    }

    pub fn acquire(&mut self, now: u64, c: u64) -> Result<Out, ModelError> {
        let (k, t, b, c) = (self.k, self.t, self.b, c as i128);
        if c > b {
            return Err(ModelError::InsufficientCapacity);
        }
        let tau = b * t;
        let arrival = (now as i128 * k).max(self.tat - tau);
        let start = self.tat.max(arrival);
        let new_tat = start + c * t;
        if new_tat - arrival <= tau {
            if c > 0 {
                self.tat = new_tat;
            }
            Ok(Out {
                allowed: true,
                limit: b as u64,
                remaining: floor_div(tau - (new_tat - arrival), t) as u64,
                retry_after_ns: 0,
                reset_after_ns: ceil_div(new_tat - arrival, k) as u64,
            })
        } else {
            Ok(Out {
                allowed: false,
                limit: b as u64,
                remaining: floor_div(tau - (start - arrival), t) as u64,
                retry_after_ns: ceil_div(new_tat - arrival - tau, k) as u64,
                reset_after_ns: ceil_div(start - arrival, k) as u64,
            })
        }
    }

    pub fn refund(&mut self, now: u64, c: u64) {
        let now = now as i128 * self.k;
        if c > 0 && self.tat > now {
            self.tat = (self.tat - (c as i128).min(self.b) * self.t).max(now);
        }
    }
}

/// Fixed window: at most `n` per window `[j*w, (j+1)*w)` of the clock's epoch.
#[derive(Clone, Debug)]
pub struct FixedWindow {
    n: i128,
    w: i128,
    index: i128,
    used: i128,
}

impl FixedWindow {
    pub fn new(count: u64, period_ns: u64, t0: u64) -> Self {
        FixedWindow {
            n: count as i128,
            w: period_ns as i128,
            index: t0 as i128 / period_ns as i128,
            used: 0,
        }
    }

    /// The clamp: an earlier window's reading is seen at the start of the state's window.
    fn at(&self, t: i128) -> (i128, i128, i128) {
        let t_e = t.max(self.index * self.w);
        let index = t_e / self.w;
        let used = if index == self.index { self.used } else { 0 };
        (index, used, t_e)
    }

    pub fn acquire(&mut self, t: u64, c: u64) -> Result<Out, ModelError> {
        let (n, w, c) = (self.n, self.w, c as i128);
        if c > n {
            return Err(ModelError::InsufficientCapacity);
        }
        let (index, used, t_e) = self.at(t as i128);
        let to_next = (index + 1) * w - t_e;
        let allowed = used + c <= n;
        let after = if allowed { used + c } else { used };
        if allowed && c > 0 {
            self.index = index;
            self.used = after;
        }
        Ok(Out {
            allowed,
            limit: n as u64,
            remaining: (n - after) as u64,
            retry_after_ns: if allowed { 0 } else { to_next as u64 },
            reset_after_ns: if after == 0 { 0 } else { to_next as u64 },
        })
    }

    pub fn refund(&mut self, t: u64, c: u64) {
        let (index, used, _) = self.at(t as i128);
        let left = (used - c as i128).max(0);
        if left != used {
            self.index = index;
            self.used = left;
        }
    }
}

/// Sliding window counter: admit iff prev * (w - e) / w + curr + c <= n, e = t - index * w.
#[derive(Clone, Debug)]
pub struct SlidingWindow {
    n: i128,
    w: i128,
    index: i128,
    prev: i128,
    curr: i128,
}

impl SlidingWindow {
    pub fn new(count: u64, period_ns: u64, t0: u64) -> Self {
        SlidingWindow {
            n: count as i128,
            w: period_ns as i128,
            index: t0 as i128 / period_ns as i128,
            prev: 0,
            curr: 0,
        }
    }

    /// `(index, prev, curr, e, t_e)` as of `t`.
    fn at(&self, t: i128) -> (i128, i128, i128, i128, i128) {
        let t_e = t.max(self.index * self.w);
        let index = t_e / self.w;
        let (prev, curr) = if index == self.index {
            (self.prev, self.curr)
        } else if index == self.index + 1 {
            (self.curr, 0)
        } else {
            (0, 0)
        };
        (index, prev, curr, t_e - index * self.w, t_e)
    }

    /// Whether `c` more fits with counts (prev, curr) at offset e (all multiplied by w).
    fn fits(&self, prev: i128, curr: i128, e: i128, c: i128) -> bool {
        prev * (self.w - e) + (curr + c) * self.w <= self.n * self.w
    }

    pub fn acquire(&mut self, t: u64, c: u64) -> Result<Out, ModelError> {
        let (n, w, c) = (self.n, self.w, c as i128);
        if c > n {
            return Err(ModelError::InsufficientCapacity);
        }
        let (index, prev, curr, e, t_e) = self.at(t as i128);
        let allowed = self.fits(prev, curr, e, c);
        let after = if allowed { curr + c } else { curr };
        if allowed && c > 0 {
            (self.index, self.prev, self.curr) = (index, prev, after);
        }
        // remaining = floor(n - after - prev * (w - e) / w)
        let remaining = floor_div(n * w - after * w - prev * (w - e), w).max(0);
        let retry = if allowed {
            0
        } else if curr + c <= n {
            // Least e2 in this window with prev * (w - e2) <= (n - curr - c) * w.
            let e2 = ceil_div(prev * w - (n - curr - c) * w, prev).max(0);
            index * w + e2 - t_e
        } else {
            // Next window: prev := curr, curr := 0.
            let e2 = ceil_div((curr * w - (n - c) * w).max(0), curr);
            (index + 1) * w + e2 - t_e
        };
        let reset = if after > 0 {
            (index + 2) * w - t_e
        } else if prev > 0 {
            (index + 1) * w - t_e
        } else {
            0
        };
        Ok(Out {
            allowed,
            limit: n as u64,
            remaining: remaining as u64,
            retry_after_ns: retry as u64,
            reset_after_ns: reset as u64,
        })
    }

    pub fn refund(&mut self, t: u64, c: u64) {
        let (index, prev, curr, _, _) = self.at(t as i128);
        let left = (curr - c as i128).max(0);
        if left != curr {
            (self.index, self.prev, self.curr) = (index, prev, left);
        }
    }
}

/// Sliding log, literally: one timestamp per admitted unit.
#[derive(Clone, Debug)]
pub struct SlidingLog {
    n: i128,
    w: i128,
    log: Vec<i128>,
    last: i128,
}

impl SlidingLog {
    pub fn new(count: u64, period_ns: u64, t0: u64) -> Self {
        SlidingLog {
            n: count as i128,
            w: period_ns as i128,
            log: Vec::new(),
            last: t0 as i128,
        }
    }

    /// Timestamps in the window (t_e - w, t_e], oldest first.
    fn window(&self, t_e: i128) -> Vec<i128> {
        let mut v: Vec<i128> = self
            .log
            .iter()
            .copied()
            .filter(|&ts| ts > t_e - self.w)
            .collect();
        v.sort();
        v
    }

    pub fn acquire(&mut self, t: u64, c: u64) -> Result<Out, ModelError> {
        let (n, w, c) = (self.n, self.w, c as i128);
        if c > n {
            return Err(ModelError::InsufficientCapacity);
        }
        let t_e = (t as i128).max(self.last);
        let inside = self.window(t_e);
        let count = inside.len() as i128;
        let allowed = count + c <= n;
        if allowed && c > 0 {
            self.log.retain(|&ts| ts > t_e - w);
            self.log.extend(std::iter::repeat_n(t_e, c as usize));
            self.last = t_e;
        }
        let after = self.window(t_e);
        let (count_after, newest) = if allowed && c > 0 {
            (count + c, Some(t_e))
        } else {
            (count, after.last().copied())
        };
        let retry = if allowed {
            0
        } else {
            inside[(count + c - n - 1) as usize] + w - t_e
        };
        Ok(Out {
            allowed,
            limit: n as u64,
            // A log carried into a smaller limit may hold more than n: nothing remains.
            remaining: (n - count_after).max(0) as u64,
            retry_after_ns: retry as u64,
            reset_after_ns: newest.map_or(0, |ts| ts + w - t_e) as u64,
        })
    }

    /// Whether the log is indistinguishable from a new one for readings from `t` on: nothing
    /// in the window at `t`, and `t` not before `last` (the keyed store evicts only then).
    pub fn is_full(&self, t: u64) -> bool {
        let t = t as i128;
        t >= self.last && self.window(t).is_empty()
    }

    /// Removes up to `c` of the newest timestamps still in the window.
    pub fn refund(&mut self, t: u64, c: u64) {
        let t_e = (t as i128).max(self.last);
        let inside = self.window(t_e).len();
        self.log.sort();
        let keep = self.log.len() - inside.min(c as usize);
        self.log.truncate(keep);
    }
}

/// Leaky bucket as a queue: slot = max(t, L + c/r), admitted iff slot - t <= d. Times are
/// kept multiplied by k (one token = p units); `q = 1 + floor(d * r)` is the limit.
#[derive(Clone, Debug)]
pub struct LeakyQueue {
    k: i128,
    p: i128,
    d: i128,
    q: i128,
    /// The last slot L, times k.
    last: i128,
}

impl LeakyQueue {
    pub fn new(count: u64, period_ns: u64, max_delay_ns: u64, t0: u64) -> Self {
        let (k, p, d) = (count as i128, period_ns as i128, max_delay_ns as i128);
        let q = 1 + floor_div(d * k, p);
        LeakyQueue {
            k,
            p,
            d,
            q,
            last: t0 as i128 * k - q * p, // idle: L = t0 - q/r
        }
    }

    pub fn acquire(&mut self, t: u64, c: u64) -> Result<Out, ModelError> {
        self.reserve(t, c, u64::MAX)
    }

    /// A reservation admitted only if its wait is at most min(d, bound_ns).
    pub fn reserve(&mut self, t: u64, c: u64, bound_ns: u64) -> Result<Out, ModelError> {
        let (k, p, q, c) = (self.k, self.p, self.q, c as i128);
        if c > q {
            return Err(ModelError::InsufficientCapacity);
        }
        let bound = (self.d * k).min(bound_ns as i128 * k);
        let t_e = (t as i128 * k).max(self.last - self.d * k); // the clamp
        let l_e = self.last.max(t_e - q * p);
        let slot = t_e.max(l_e + c * p);
        let wait = slot - t_e;
        let allowed = c == 0 || wait <= bound;
        if allowed && c > 0 {
            self.last = slot;
        }
        let l = self.last;
        let remaining = floor_div((t_e + self.d * k - l.max(t_e - p)).max(0), p);
        Ok(Out {
            allowed,
            limit: q as u64,
            remaining: remaining as u64,
            retry_after_ns: if c == 0 {
                0
            } else if allowed {
                ceil_div(wait, k) as u64
            } else {
                ceil_div(wait - bound, k) as u64
            },
            reset_after_ns: ceil_div((l + q * p - t_e).max(0), k) as u64,
        })
    }

    /// Cancel: L := max(L - c/r, t - q/r) unless the queue is idle.
    pub fn refund(&mut self, t: u64, c: u64) {
        let t = t as i128 * self.k;
        let idle_at = t - self.q * self.p;
        if c > 0 && self.last > idle_at {
            self.last = (self.last - (c as i128).min(self.q) * self.p).max(idle_at);
        }
    }
}

/// Any algorithm's model behind one interface.
#[derive(Clone, Debug)]
pub enum AnyModel {
    Bucket(Model),
    Gcra(Gcra),
    FixedWindow(FixedWindow),
    SlidingWindow(SlidingWindow),
    SlidingLog(SlidingLog),
    LeakyQueue(LeakyQueue),
}

/// The plain parameters of a quota, as the model sees them.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub kind: Kind,
    pub count: u64,
    pub period_ns: u64,
    pub burst: u64,
    pub initial: u64,
    pub max_delay_ns: u64,
}

impl AnyModel {
    pub fn new(p: Params, t0: u64) -> Self {
        let Params {
            kind,
            count,
            period_ns,
            burst,
            initial,
            max_delay_ns,
        } = p;
        match kind {
            Kind::TokenBucket => {
                AnyModel::Bucket(Model::new(count, period_ns, burst, initial, false, t0))
            }
            Kind::TokenBucketInterval => {
                AnyModel::Bucket(Model::new(count, period_ns, burst, initial, true, t0))
            }
            Kind::Gcra => AnyModel::Gcra(Gcra::new(count, period_ns, burst, initial, t0)),
            Kind::FixedWindow => AnyModel::FixedWindow(FixedWindow::new(count, period_ns, t0)),
            Kind::SlidingWindow => {
                AnyModel::SlidingWindow(SlidingWindow::new(count, period_ns, t0))
            }
            Kind::SlidingLog => AnyModel::SlidingLog(SlidingLog::new(count, period_ns, t0)),
            Kind::LeakyQueue => {
                AnyModel::LeakyQueue(LeakyQueue::new(count, period_ns, max_delay_ns, t0))
            }
        }
    }

    /// A bucket created at `t0` by a keyed limiter whose clock origin (the interval grid's
    /// anchor) is `origin`.
    pub fn new_keyed(p: Params, origin: u64, t0: u64) -> Self {
        if p.kind == Kind::TokenBucketInterval {
            let q = Model::new_keyed(p.count, p.period_ns, p.burst, p.initial, true, origin, t0);
            return AnyModel::Bucket(q);
        }
        Self::new(p, t0)
    }

    pub fn acquire(&mut self, t: u64, c: u64) -> Result<Out, ModelError> {
        match self {
            AnyModel::Bucket(m) => m.acquire(t, c),
            AnyModel::Gcra(m) => m.acquire(t, c),
            AnyModel::FixedWindow(m) => m.acquire(t, c),
            AnyModel::SlidingWindow(m) => m.acquire(t, c),
            AnyModel::SlidingLog(m) => m.acquire(t, c),
            AnyModel::LeakyQueue(m) => m.acquire(t, c),
        }
    }

    /// The decision `acquire` would give, changing nothing.
    pub fn probe(&self, t: u64, c: u64) -> Result<Out, ModelError> {
        self.clone().acquire(t, c)
    }

    /// Live reconfiguration at the reading `t`: the state is carried into `p` (of the same
    /// kind) by the carry rule; `origin` is the limiter's clock origin (the interval grid's
    /// anchor, which the new quota keeps).
    pub fn reconfigure(&mut self, p: Params, t: u64, origin: u64) {
        let (k2, p2, b2, n2) = (
            p.count as i128,
            p.period_ns as i128,
            p.burst as i128,
            p.count as i128,
        );
        let ti = t as i128;
        match self {
            AnyModel::Bucket(Model::Continuous {
                b,
                k,
                p: per,
                full_at,
            }) => {
                assert_eq!(p.kind, Kind::TokenBucket);
                let f = carry_continuous(*b, *k, *per, *full_at, ti, (b2, k2, p2));
                *self = AnyModel::Bucket(Model::Continuous {
                    b: b2,
                    k: k2,
                    p: p2,
                    full_at: f,
                });
            }
            AnyModel::Bucket(Model::Interval {
                b,
                k,
                p: per,
                origin: o,
                n,
                tau,
            }) => {
                assert_eq!(p.kind, Kind::TokenBucketInterval);
                assert_eq!(*o, origin as i128);
                let p_now = (ti - *o).max(0) / *per;
                let p_e = p_now.max(*n);
                let t_e = ti.max(*o + *n * *per);
                let tokens = (*b).min(*tau + *k * (p_e - *n));
                *self = AnyModel::Bucket(Model::Interval {
                    b: b2,
                    k: k2,
                    p: p2,
                    origin: *o,
                    n: (t_e - *o).max(0) / p2,
                    tau: tokens.min(b2),
                });
            }
            AnyModel::Gcra(g) => {
                assert_eq!(p.kind, Kind::Gcra);
                let tat = carry_continuous(g.b, g.k, g.t, g.tat, ti, (b2, k2, p2));
                *g = Gcra {
                    k: k2,
                    t: p2,
                    b: b2,
                    tat,
                };
            }
            AnyModel::FixedWindow(f) => {
                assert_eq!(p.kind, Kind::FixedWindow);
                let (index, used, t_e) = f.at(ti);
                let index = if p2 == f.w { index } else { t_e / p2 };
                *f = FixedWindow {
                    n: n2,
                    w: p2,
                    index,
                    used: used.min(n2),
                };
            }
            AnyModel::SlidingWindow(sw) => {
                assert_eq!(p.kind, Kind::SlidingWindow);
                let (index, prev, curr, e, t_e) = sw.at(ti);
                *sw = if p2 == sw.w {
                    SlidingWindow {
                        n: n2,
                        w: p2,
                        index,
                        prev: prev.min(n2),
                        curr: curr.min(n2),
                    }
                } else {
                    let weighted = ceil_div(prev * (sw.w - e), sw.w) + curr;
                    SlidingWindow {
                        n: n2,
                        w: p2,
                        index: t_e / p2,
                        prev: 0,
                        curr: weighted.min(n2),
                    }
                };
            }
            AnyModel::SlidingLog(l) => {
                assert_eq!(p.kind, Kind::SlidingLog);
                l.n = n2;
                l.w = p2;
            }
            AnyModel::LeakyQueue(q) => {
                assert_eq!(p.kind, Kind::LeakyQueue);
                let d2 = p.max_delay_ns as i128;
                let q2 = 1 + floor_div(d2 * k2, p2);
                // The instant: the reading, or the one the state proves (L - D), if later.
                let at = ti.max(ceil_div_signed(q.last - q.d * q.k, q.k));
                // The effective last slot: an idle queue's is at - Q/r.
                let l_e = q.last.max(at * q.k - q.q * q.p);
                let g2 = gcd(k2, p2);
                let last = ceil_div_signed(l_e * (k2 / g2), q.k) * g2;
                let last = last.clamp(at * k2 - q2 * p2, at * k2 + d2 * k2);
                *q = LeakyQueue {
                    k: k2,
                    p: p2,
                    d: d2,
                    q: q2,
                    last,
                };
            }
        }
    }

    pub fn refund(&mut self, t: u64, c: u64) {
        match self {
            AnyModel::Bucket(m) => m.refund(t, c),
            AnyModel::Gcra(m) => m.refund(t, c),
            AnyModel::FixedWindow(m) => m.refund(t, c),
            AnyModel::SlidingWindow(m) => m.refund(t, c),
            AnyModel::SlidingLog(m) => m.refund(t, c),
            AnyModel::LeakyQueue(m) => m.refund(t, c),
        }
    }
}

/// Composite limits: all-or-nothing over several models, in order, at one instant.
#[derive(Clone, Debug)]
pub struct Composite {
    pub parts: Vec<AnyModel>,
}

impl Composite {
    pub fn acquire(&mut self, t: u64, c: u64) -> Result<Out, ModelError> {
        for m in &self.parts {
            m.probe(t, c)?; // a cost above any part's capacity: error, nothing changes
        }
        let mut seen = Vec::new();
        for j in 0..self.parts.len() {
            let d = self.parts[j].acquire(t, c)?;
            if d.allowed {
                seen.push(d);
                continue;
            }
            for m in &mut self.parts[..j] {
                m.refund(t, c);
            }
            let mut all: Vec<Out> = self.parts[..j]
                .iter()
                .map(|m| m.probe(t, 0).unwrap())
                .collect();
            all.push(d);
            all.extend(self.parts[j + 1..].iter().map(|m| m.probe(t, c).unwrap()));
            return Ok(Self::combine(false, &all));
        }
        Ok(Self::combine(true, &seen))
    }

    /// The tightest part (least remaining, first on ties) and the longest waits.
    fn combine(allowed: bool, all: &[Out]) -> Out {
        let mut tightest = all[0];
        for d in all {
            if d.remaining < tightest.remaining {
                tightest = *d;
            }
        }
        Out {
            allowed,
            limit: tightest.limit,
            remaining: tightest.remaining,
            retry_after_ns: all.iter().map(|d| d.retry_after_ns).max().unwrap(),
            reset_after_ns: all.iter().map(|d| d.reset_after_ns).max().unwrap(),
        }
    }

    pub fn refund(&mut self, t: u64, c: u64) {
        for m in &mut self.parts {
            m.refund(t, c);
        }
    }
}
