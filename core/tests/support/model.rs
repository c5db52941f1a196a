//! The sequential reference model: docs/SEMANTICS.md written out literally, in plain `i128`,
//! with no atomics, no gcd reduction, no narrow/wide words and no deferred division.
//! Shared by the property tests, the keyed tests and the fuzz targets (`#[path]`-included).
#![allow(dead_code)]

/// What a request returned, as plain numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Out {
    pub allowed: bool,
    pub limit: u64,
    pub remaining: u64,
    pub retry_after_ns: u64,
    pub reset_after_ns: u64,
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
}
