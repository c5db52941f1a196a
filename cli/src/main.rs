//! `sluicegate simulate --quota "10/s; burst=50" --traffic "60/s for 3s"`: plays a policy
//! against synthetic traffic on a simulated clock and prints a timeline and a summary.
//! `sluicegate check --quota "..."` explains a quota.

use sluicegate::{Limiter, ManualClock, Quota};
use std::fmt::Write as _;
use std::process::ExitCode;

const S: u64 = 1_000_000_000;

const USAGE: &str = "\
usage:
  sluicegate simulate --quota RATE --traffic TRAFFIC [--cost N] [--step DURATION]
  sluicegate check --quota RATE

RATE     a rate string: COUNT/[N]UNIT [; burst=B] [; initial=I] [; refill=interval]
         e.g. \"10/s; burst=50\", \"100 per minute\", \"5/2s\"
TRAFFIC  comma-separated segments, played one after the other:
           RATE for DURATION   evenly spaced requests, e.g. \"60/s for 3s\"
           idle DURATION       no requests, e.g. \"idle 2s\"
           burst N             N requests at the same instant
DURATION a whole number and a unit: ns, us, ms, s, m, h (e.g. 250ms, 3s)
--cost   tokens per request (default 1)
--step   timeline row width (default: about 30 rows)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<String, String> {
    let (cmd, rest) = args.split_first().ok_or("no command given")?;
    let opts = Options::parse(rest)?;
    match cmd.as_str() {
        "simulate" => simulate(&opts),
        "check" => check(&opts),
        "-h" | "--help" | "help" => Ok(format!("{USAGE}\n")),
        other => Err(format!("unknown command {other:?}")),
    }
}

#[derive(Default)]
struct Options {
    quota: Option<String>,
    traffic: Option<String>,
    cost: Option<String>,
    step: Option<String>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut o = Options::default();
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (flag.as_str(), None),
            };
            let slot = match name {
                "--quota" | "-q" => &mut o.quota,
                "--traffic" | "-t" => &mut o.traffic,
                "--cost" => &mut o.cost,
                "--step" => &mut o.step,
                _ => return Err(format!("unknown option {flag:?}")),
            };
            let value = match inline {
                Some(v) => v,
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))?,
            };
            *slot = Some(value);
        }
        Ok(o)
    }

    fn quota(&self) -> Result<Quota, String> {
        let text = self.quota.as_deref().ok_or("--quota is required")?;
        text.parse::<Quota>().map_err(|e| e.to_string())
    }
}

/// `N` + unit, in nanoseconds.
fn duration(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("duration {text:?} has no unit (e.g. 3s)"))?;
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("duration {text:?} needs a whole number"))?;
    let per = match unit.trim() {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => S,
        "m" | "min" => 60 * S,
        "h" => 3600 * S,
        u => return Err(format!("unknown unit {u:?} in duration {text:?}")),
    };
    n.checked_mul(per)
        .ok_or_else(|| format!("duration {text:?} is too long"))
}

/// Request instants (ns) for a traffic description.
fn traffic(text: &str) -> Result<(Vec<u64>, u64), String> {
    let mut times = Vec::new();
    let mut t = 0u64;
    for seg in text.split(',').map(str::trim) {
        if let Some(d) = seg.strip_prefix("idle") {
            t += duration(d)?;
        } else if let Some(n) = seg.strip_prefix("burst") {
            let n: u64 = n
                .trim()
                .parse()
                .map_err(|_| format!("burst needs a count: {seg:?}"))?;
            if n > 50_000_000 {
                return Err(format!(
                    "traffic segment {seg:?} has over 50 million requests"
                ));
            }
            times.extend(std::iter::repeat_n(t, n as usize));
        } else if let Some((rate, dur)) = seg.split_once(" for ") {
            let q: Quota = rate
                .parse()
                .map_err(|e| format!("traffic segment {seg:?}: {e}"))?;
            let d = duration(dur)?;
            // q.count() requests per q.period(): request j at j * period / count.
            let n = u128::from(q.count()) * u128::from(d) / u128::from(q.period_ns());
            if n > 50_000_000 {
                return Err(format!(
                    "traffic segment {seg:?} has over 50 million requests"
                ));
            }
            for j in 0..n {
                let dt = j * u128::from(q.period_ns()) / u128::from(q.count());
                times.push(t + dt as u64);
            }
            t += d;
        } else if !seg.is_empty() {
            return Err(format!(
                "traffic segment {seg:?}: expected \"RATE for DURATION\", \"idle DURATION\" or \"burst N\""
            ));
        }
    }
    if times.is_empty() {
        return Err("the traffic has no requests".into());
    }
    Ok((times, t))
}

fn secs(ns: u64) -> String {
    let s = ns as f64 / S as f64;
    if s >= 100.0 {
        format!("{s:.0}s")
    } else if s >= 1.0 {
        format!("{s:.2}s")
    } else {
        format!("{:.1}ms", ns as f64 / 1e6)
    }
}

fn describe(q: &Quota) -> String {
    let rate = q.count() as f64 * S as f64 / q.period_ns() as f64;
    format!(
        "{q}: {rate:.3} tokens/s, burst {}, starts with {}, {} refill; \
         RateLimit-Policy window {}s",
        q.burst(),
        q.initial(),
        match q.refill() {
            sluicegate::Refill::Continuous => "continuous",
            sluicegate::Refill::Interval => "interval",
        },
        q.window_secs()
    )
}

fn check(opts: &Options) -> Result<String, String> {
    let q = opts.quota()?;
    let l = Limiter::with_clock(q, ManualClock::new(0)).map_err(|e| e.to_string())?;
    Ok(format!(
        "{}\nstate word: {} bits\n",
        describe(&q),
        if l.is_wide() { 128 } else { 64 }
    ))
}

fn simulate(opts: &Options) -> Result<String, String> {
    let quota = opts.quota()?;
    let (times, end) = traffic(opts.traffic.as_deref().ok_or("--traffic is required")?)?;
    let cost: u64 = match &opts.cost {
        Some(c) => c
            .parse()
            .map_err(|_| format!("--cost {c:?} is not a whole number"))?,
        None => 1,
    };
    let end = end.max(times.last().copied().unwrap_or(0) + 1);
    let step = match &opts.step {
        Some(s) => duration(s)?.max(1),
        None => {
            let nice = [1, 10, 50, 100, 250, 500, 1000, 5000, 10_000, 60_000];
            nice.iter()
                .map(|ms| ms * 1_000_000)
                .find(|ns| end / ns <= 40)
                .unwrap_or(end / 30 + 1)
        }
    };
    let clock = ManualClock::new(0);
    let limiter = Limiter::with_clock(quota, clock.clone()).map_err(|e| e.to_string())?;

    let rows = end.div_ceil(step) as usize;
    let mut offered = vec![0u64; rows];
    let mut allowed = vec![0u64; rows];
    let mut left = vec![0u64; rows];
    let (mut total_ok, mut first_reject, mut retry_sum) = (0u64, None, 0u128);
    let mut next = times.iter().copied().peekable();
    for row in 0..rows {
        let row_end = ((row as u64 + 1) * step).min(end);
        while let Some(t) = next.next_if(|&t| t < row_end || row + 1 == rows) {
            clock.set(t);
            let d = limiter.try_acquire(cost).map_err(|e| e.to_string())?;
            offered[row] += 1;
            if d.allowed() {
                allowed[row] += 1;
                total_ok += 1;
            } else {
                first_reject.get_or_insert(t);
                retry_sum += u128::from(d.retry_after_nanos());
            }
        }
        // Tokens left at the end of the row (a peek changes nothing).
        left[row] = limiter
            .try_acquire_at(row_end, 0)
            .map_err(|e| e.to_string())?
            .remaining();
    }

    let mut out = String::new();
    let _ = writeln!(out, "policy   {}", describe(&quota));
    let _ = writeln!(
        out,
        "traffic  {} requests of cost {cost} over {}\n",
        times.len(),
        secs(end)
    );
    let _ = writeln!(
        out,
        "{:>9}  {:>7} {:>7} {:>7} {:>7}  (# allowed, . rejected)",
        "from", "offered", "allowed", "reject", "tokens"
    );
    let widest = offered.iter().copied().max().unwrap_or(1).max(1);
    for row in 0..rows {
        let (o, a) = (offered[row], allowed[row]);
        let width = 40u64;
        let bar_a = (a * width).div_ceil(widest) as usize;
        let bar_r = ((o * width).div_ceil(widest) as usize).saturating_sub(bar_a);
        let _ = writeln!(
            out,
            "{:>9}  {:>7} {:>7} {:>7} {:>7}  {}{}",
            secs(row as u64 * step),
            o,
            a,
            o - a,
            left[row],
            "#".repeat(bar_a),
            ".".repeat(bar_r)
        );
    }
    let n = times.len() as u64;
    let rejected = n - total_ok;
    let _ = writeln!(out, "\nsummary");
    let _ = writeln!(
        out,
        "  allowed   {total_ok} of {n} ({:.1}%)",
        100.0 * total_ok as f64 / n as f64
    );
    let _ = writeln!(out, "  rejected  {rejected}");
    let _ = writeln!(
        out,
        "  offered rate    {:.2}/s",
        n as f64 * S as f64 / end as f64
    );
    let _ = writeln!(
        out,
        "  effective rate  {:.2}/s (allowed requests over the run)",
        total_ok as f64 * S as f64 / end as f64
    );
    if let Some(t) = first_reject {
        let _ = writeln!(out, "  first rejection at {}", secs(t));
        let mean = (retry_sum / u128::from(rejected)) as u64;
        let _ = writeln!(out, "  mean retry_after of rejections {}", secs(mean));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim(q: &str, t: &str) -> String {
        let args: Vec<String> = ["simulate", "--quota", q, "--traffic", t]
            .iter()
            .map(|s| s.to_string())
            .collect();
        run(&args).unwrap()
    }

    #[test]
    fn the_readme_simulation() {
        let out = sim("10/s; burst=50", "60/s for 3s");
        // 180 requests; the exact model admits the first 59, rejects the 60th, admits the
        // 61st (t = 1 s), then one in six: 79 (see core/tests/examples.rs).
        assert!(out.contains("allowed   79 of 180"), "{out}");
        assert!(
            out.contains("    0.0ms        6       6       0      45"),
            "{out}"
        );
        assert!(out.contains("first rejection at 983.3ms"), "{out}");
    }

    #[test]
    fn segments_and_bursts() {
        let out = sim("1/s; burst=5", "burst 7, idle 2s, burst 3");
        assert!(out.contains("allowed   7 of 10"), "{out}");
        assert!(out.contains("rejected  3"), "{out}");
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = run(&args(&[
            "simulate",
            "--quota",
            "10/fortnight",
            "--traffic",
            "1/s for 1s",
        ]))
        .unwrap_err();
        assert!(e.contains("fortnight"), "{e}");
        let e = run(&args(&["simulate", "--quota", "1/s", "--traffic", "lots"])).unwrap_err();
        assert!(e.contains("lots"), "{e}");
        let e = run(&args(&["simulate", "--quota", "1/s"])).unwrap_err();
        assert!(e.contains("--traffic"), "{e}");
        assert!(run(&args(&["frobnicate"])).is_err());
    }
}
