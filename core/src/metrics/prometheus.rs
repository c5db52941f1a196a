//! The Prometheus text exposition format (version 0.0.4) of [`Metrics`]: one family per
//! counter, each with its `# HELP` and `# TYPE` lines and then one sample per limiter, labels
//! escaped as the format requires.

use super::Metrics;
use crate::Error;
use core::fmt::Write;

/// One metric family: its name, type, help text, and the value it takes from a snapshot
/// (`None`: no sample for that snapshot).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: fn(&Metrics) -> Samples,
}

/// A family's samples for one snapshot: `(the value of the label outcome, if any, value)`.
type Samples = Vec<(Option<&'static str>, u64)>;

const FAMILIES: &[Family] = &[
    Family {
        name: "sluicegate_decisions_total",
        kind: "counter",
        help: "Decisions made by a rate limiter, by outcome (allowed, rejected, or shadow_rejected: let through by shadow mode).",
        samples: |m| {
            vec![
                (Some("allowed"), m.allowed),
                (Some("rejected"), m.rejected),
                (Some("shadow_rejected"), m.shadow_rejected),
            ]
        },
    },
    Family {
        name: "sluicegate_keys_evicted_total",
        kind: "counter",
        help: "Keys evicted by a keyed rate limiter (full buckets, or the fullest at the key bound).",
        samples: |m| vec![(None, m.keys_evicted)],
    },
    Family {
        name: "sluicegate_key_store_full_total",
        kind: "counter",
        help: "New keys refused at the key bound of a keyed rate limiter.",
        samples: |m| vec![(None, m.key_store_full)],
    },
    Family {
        name: "sluicegate_store_errors_total",
        kind: "counter",
        help: "Calls of a rate limiter that failed with an error of its store.",
        samples: |m| vec![(None, m.store_errors)],
    },
    Family {
        name: "sluicegate_reconfigurations_total",
        kind: "counter",
        help: "Quotas set on a rate limiter by live reconfiguration.",
        samples: |m| vec![(None, m.reconfigurations)],
    },
    Family {
        name: "sluicegate_keys",
        kind: "gauge",
        help: "Keys held by a keyed rate limiter.",
        samples: |m| m.keys.map(|k| (None, k)).into_iter().collect(),
    },
    Family {
        name: "sluicegate_shadow_mode",
        kind: "gauge",
        help: "1 while a rate limiter is in shadow (dry-run) mode, else 0.",
        samples: |m| vec![(None, u64::from(m.shadow))],
    },
];

/// Renders snapshots in the Prometheus text exposition format (version 0.0.4), each with its
/// labels (e.g. `[("limiter", "api")]`): for every counter, a `# HELP` and a `# TYPE` line
/// and one sample per snapshot. Names and their meaning are in docs/OPERATIONS.md.
///
/// `Err(`[`Error::InvalidOption`]`)` for a label name that is not `[a-zA-Z_][a-zA-Z0-9_]*`,
/// starts with `__` (reserved by Prometheus) or is `outcome` (used by
/// `sluicegate_decisions_total`); for a name given twice in one label set; and for two
/// snapshots with the same label set (one series each).
///
/// ```
/// use sluicegate::{render_prometheus, Limiter, ManualClock};
///
/// let api = Limiter::builder("1/s".parse()?).clock(ManualClock::new(0)).metrics(true).build()?;
/// api.try_acquire(1)?;
/// api.try_acquire(1)?;
/// let text = render_prometheus(&[(&[("limiter", "api")], api.metrics().unwrap())])?;
/// assert!(text.contains("# TYPE sluicegate_decisions_total counter\n"));
/// assert!(text.contains("sluicegate_decisions_total{limiter=\"api\",outcome=\"rejected\"} 1\n"));
/// # Ok::<(), sluicegate::Error>(())
/// ```
pub fn render_prometheus(series: &[(&[(&str, &str)], Metrics)]) -> Result<String, Error> {
    let mut seen: Vec<Vec<(&str, &str)>> = Vec::with_capacity(series.len());
    for (labels, _) in series {
        for (i, (name, _)) in labels.iter().enumerate() {
            check_label_name(name)?;
            if labels[..i].iter().any(|(n, _)| n == name) {
                return Err(invalid(name, "a label name given once per label set"));
            }
        }
        let mut set: Vec<(&str, &str)> = labels.to_vec();
        set.sort_unstable();
        if seen.contains(&set) {
            return Err(Error::InvalidOption {
                option: "labels",
                // As the series shows them: `{limiter="api"}` (not Rust's tuple syntax).
                value: format!(
                    "{{{}}}",
                    labels
                        .iter()
                        .map(|(n, v)| format!("{n}=\"{}\"", escape_value(v)))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                expected: "a distinct label set for each snapshot (one series each)".into(),
            });
        }
        seen.push(set);
    }
    let mut out = String::new();
    for f in FAMILIES {
        let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(f.help));
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (labels, m) in series {
            for (outcome, value) in (f.samples)(m) {
                out.push_str(f.name);
                let mut pairs: Vec<(&str, &str)> = labels.to_vec();
                if let Some(o) = outcome {
                    pairs.push(("outcome", o));
                }
                if !pairs.is_empty() {
                    out.push('{');
                    for (i, (n, v)) in pairs.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{n}=\"{}\"", escape_value(v));
                    }
                    out.push('}');
                }
                let _ = writeln!(out, " {value}");
            }
        }
    }
    Ok(out)
}

fn invalid(name: &str, expected: &str) -> Error {
    Error::InvalidOption {
        option: "label",
        value: name.to_string(),
        expected: expected.to_string(),
    }
}

fn check_label_name(name: &str) -> Result<(), Error> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(invalid(
            name,
            "a Prometheus label name: [a-zA-Z_][a-zA-Z0-9_]*",
        ));
    }
    if name.starts_with("__") {
        return Err(invalid(
            name,
            "a label name not starting with __ (reserved)",
        ));
    }
    if name == "outcome" {
        return Err(invalid(
            name,
            "a label name other than outcome (sluicegate_decisions_total's own)",
        ));
    }
    Ok(())
}

/// A label value: backslash, double quote and line feed escaped.
fn escape_value(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A help text: backslash and line feed escaped.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}
