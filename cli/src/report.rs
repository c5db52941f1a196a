//! The HTML report (one self-contained file: the data as JSON in the page, drawn as SVG by
//! the page's own script; no network, no external file) and simulate's text table.

use crate::output::{dur, Summary};
use crate::policy::PolicySpec;
use std::fmt::Write as _;

const TEMPLATE: &str = include_str!("report.html");

/// The report page for `summary`.
pub fn html(summary: &Summary) -> String {
    // The JSON writer escapes `<`, `>` and `&`, so the data cannot close its script element.
    TEMPLATE.replacen("__DATA__", &summary.to_json().to_string_compact(), 1)
}

/// simulate's table: per policy, a timeline of rows (offered, allowed, rejected, tokens left
/// at the row's end) with bars, and a summary.
#[allow(clippy::needless_range_loop)] // a matrix indexed by policy pairs
pub fn simulate_table(
    s: &Summary,
    policies: &[PolicySpec],
    requests: usize,
    cost: u64,
    first_rejects: &[Option<u64>],
) -> String {
    let mut out = String::new();
    let secs = |ns: u64| {
        let x = ns as f64 / 1e9;
        if x >= 100.0 {
            format!("{x:.0}s")
        } else if x >= 1.0 {
            format!("{x:.2}s")
        } else {
            format!("{:.1}ms", ns as f64 / 1e6)
        }
    };
    let end = s.last_t.max(1);
    for (p, spec) in policies.iter().enumerate() {
        if p > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "policy   {}", spec.name);
        for r in spec.describe() {
            let _ = writeln!(out, "         {r}");
        }
        let _ = writeln!(
            out,
            "traffic  {requests} requests of cost {cost} over {}\n",
            secs(end)
        );
        let _ = writeln!(
            out,
            "{:>9}  {:>7} {:>7} {:>7} {:>7}  (# allowed, . rejected)",
            "from", "offered", "allowed", "reject", "tokens"
        );
        let widest = s.offered.iter().copied().max().unwrap_or(1).max(1);
        let trace = s.traces.iter().find(|t| t.0 == p);
        for (row, &o) in s.offered.iter().enumerate() {
            let a = s.admitted[p][row];
            let width = 40u64;
            let bar_a = (a * width).div_ceil(widest) as usize;
            let bar_r = ((o * width).div_ceil(widest) as usize).saturating_sub(bar_a);
            let tokens = trace
                .and_then(|t| t.3.get(row).copied().flatten())
                .map_or("-".to_string(), |v| v.to_string());
            let _ = writeln!(
                out,
                "{:>9}  {:>7} {:>7} {:>7} {:>7}  {}{}",
                secs(s.timeline_origin + row as u64 * s.timeline_width),
                o,
                a,
                o - a,
                tokens,
                "#".repeat(bar_a),
                ".".repeat(bar_r)
            );
        }
        let ps = &s.policies[p];
        let n = requests as u64;
        let _ = writeln!(out, "\nsummary");
        let _ = writeln!(
            out,
            "  allowed   {} of {n} ({:.1}%)",
            ps.admitted,
            100.0 * ps.admitted as f64 / n as f64
        );
        let _ = writeln!(out, "  rejected  {}", ps.rejected);
        let _ = writeln!(
            out,
            "  offered rate    {:.2}/s",
            n as f64 * 1e9 / end as f64
        );
        let _ = writeln!(
            out,
            "  effective rate  {:.2}/s (allowed requests over the run)",
            ps.admitted as f64 * 1e9 / end as f64
        );
        if let Some(t) = first_rejects.get(p).copied().flatten() {
            let _ = writeln!(out, "  first rejection at {}", secs(t));
        }
        if let Some(r) = ps.retry {
            let _ = writeln!(
                out,
                "  retry_after of rejections: mean {}, p50 {}, p99 {}, max {}",
                dur(r[4]),
                dur(r[0]),
                dur(r[2]),
                dur(r[3])
            );
        }
        if ps.over_capacity > 0 {
            let _ = writeln!(
                out,
                "  {} requests cost more than the capacity: never admitted",
                ps.over_capacity
            );
        }
        if let Some(d) = ps.delay {
            let _ = writeln!(
                out,
                "  {} admitted with a wait: mean {}, max {}",
                ps.delayed,
                dur(d[4]),
                dur(d[3])
            );
        }
    }
    let n = policies.len();
    if n > 1 {
        let _ = writeln!(
            out,
            "\nrequests rejected by the row's policy and admitted by the column's"
        );
        for a in 0..n {
            let row: Vec<String> = (0..n)
                .map(|b| {
                    if a == b {
                        "-".to_string()
                    } else {
                        s.cross[a * n + b].to_string()
                    }
                })
                .collect();
            let _ = writeln!(
                out,
                "  [{}] {:<30} {}",
                a + 1,
                policies[a].name,
                row.join("  ")
            );
        }
    }
    out
}
