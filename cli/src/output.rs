//! The answer, once: a [`Summary`] built from a finished replay, rendered as a table, JSON or
//! CSV, and embedded in the HTML report.

use crate::error::printable;
use crate::json::Jv;
use crate::replay::Replay;
use crate::timefmt::format_rfc3339;
use std::borrow::Cow;
use std::fmt::Write as _;

const S: f64 = 1e9;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned text for people.
    Table,
    /// One JSON document (every figure).
    Json,
    /// One CSV table, chosen with --table.
    Csv,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Table {
    /// One row per policy.
    Summary,
    /// The top throttled keys of every policy.
    TopKeys,
    /// Offered and admitted requests per time bin.
    Timeline,
    /// Requests one policy rejected that another admitted.
    Disagreements,
}

/// What was replayed (for the header and the report).
#[derive(Clone, Debug, Default)]
pub struct Meta {
    pub command: String,
    pub inputs: Vec<InputMeta>,
    pub lines: u64,
    pub bad_lines: u64,
    pub bad_examples: Vec<String>,
    /// Where each of `bad_examples` is: its input's place in `bad_inputs` and its line
    /// number.
    pub bad_examples_at: Vec<(usize, u64)>,
    /// The inputs with an unusable line, in the order their first one was found.
    pub bad_inputs: Vec<String>,
    pub unkeyed: u64,
    pub key: String,
    pub elapsed_s: f64,
    /// Several inputs (always merged by time): those that start before the next request of
    /// an input open before them.
    pub overlapping: Vec<String>,
    /// Client identity behind proxies: the resolver's warnings (each kind once), or the hint
    /// that suggests `--trusted-proxies`; for stderr.
    pub client_notes: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub struct InputMeta {
    pub name: String,
    pub format: String,
    pub fields: Vec<(String, String)>,
    pub lines: u64,
    /// `--timezone` where it applies to this input (not UTC, not W3C): the zone of its dates
    /// written without an offset.
    pub zone: Option<String>,
    /// Dates written without an offset were read as UTC (no `--timezone`; never W3C's,
    /// which are UTC by definition).
    pub utc_without_offset: bool,
}

pub struct TopKey {
    pub key: String,
    pub offered: u64,
    pub rejected: u64,
}

pub struct PolicySummary {
    pub name: String,
    pub rules: Vec<String>,
    pub offered: u64,
    pub admitted: u64,
    pub rejected: u64,
    pub over_capacity: u64,
    pub unlimited: u64,
    pub delayed: u64,
    pub clients_affected: u64,
    pub only_rejected: u64,
    pub top: Vec<TopKey>,
    /// (p50, p90, p99, max, mean) of rejections' retry_after, ns.
    pub retry: Option<[u64; 5]>,
    pub delay: Option<[u64; 5]>,
    pub retry_ranges: Vec<(u64, u64, u64)>,
    pub peak_admitted_per_s: f64,
    pub keys_held: usize,
}

/// A traced key: (policy index, key, limit, level at each bin's end, lowest level in each
/// bin, rejections in each bin).
pub type TraceRow = (
    usize,
    String,
    u64,
    Vec<Option<u64>>,
    Vec<Option<u64>>,
    Vec<u32>,
);

pub struct Summary {
    pub meta: Meta,
    pub requests: u64,
    pub keys: usize,
    pub first_t: u64,
    pub last_t: u64,
    pub backwards: u64,
    pub peak_offered_per_s: f64,
    pub sustain_ns: u64,
    pub policies: Vec<PolicySummary>,
    pub cross: Vec<u64>,
    pub timeline_origin: u64,
    pub timeline_width: u64,
    pub offered: Vec<u64>,
    pub admitted: Vec<Vec<u64>>,
    pub traces: Vec<TraceRow>,
    /// Requests counted in the timeline's first or last bin, not their own (see
    /// `Timeline::clamped`).
    pub timeline_clamped: u64,
}

fn five(h: &crate::stats::Hist) -> Option<[u64; 5]> {
    Some([
        h.quantile(0.5)?,
        h.quantile(0.9)?,
        h.quantile(0.99)?,
        h.max,
        h.mean()?,
    ])
}

/// The heading of the top keys' column: the column is at least as wide.
const TOP_HEAD: &str = "top throttled";

/// `n` and its noun, singular for 1 (`1 key`, `2 keys`), `n` grouped by thousands.
pub(crate) fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{} {}", group(n), if n == 1 { one } else { many })
}

impl Summary {
    pub fn new(r: &Replay, meta: Meta, top: usize) -> Summary {
        let n = r.specs.len();
        let span_ns = r.max_t.saturating_sub(r.first_t.unwrap_or(0));
        let window = r.sustain();
        // One rule for the offered and the admitted peak: over the sustain window, or over
        // the log's span when it is shorter. A log whose timestamps are all equal has no span
        // to divide by: its count is taken over the sustain window.
        let rate_window = if span_ns == 0 || span_ns >= window {
            window
        } else {
            span_ns
        };
        let per_s = |count: u64| count as f64 * S / rate_window as f64;
        let policies = (0..n)
            .map(|p| {
                let st = &r.stats[p];
                let mut keys: Vec<(u32, u32)> = st
                    .rejected_by_key
                    .iter()
                    .enumerate()
                    .filter(|(_, &c)| c > 0)
                    .map(|(i, &c)| (i as u32, c))
                    .collect();
                let affected = keys.len() as u64;
                keys.sort_unstable_by(|a, b| {
                    b.1.cmp(&a.1)
                        .then(r.offered_by_key[b.0 as usize].cmp(&r.offered_by_key[a.0 as usize]))
                        .then(a.0.cmp(&b.0))
                });
                let pk = st.peak_admitted.as_ref();
                PolicySummary {
                    name: r.specs[p].name.clone(),
                    rules: r.specs[p].describe(),
                    offered: st.offered,
                    admitted: st.admitted,
                    rejected: st.rejected,
                    over_capacity: st.over_capacity,
                    unlimited: st.unlimited,
                    delayed: st.delayed,
                    clients_affected: affected,
                    only_rejected: r.only[p],
                    top: keys
                        .iter()
                        .take(top)
                        .map(|&(id, c)| TopKey {
                            key: r.key_text(id),
                            offered: r.offered_by_key[id as usize].into(),
                            rejected: c.into(),
                        })
                        .collect(),
                    retry: five(&st.retry),
                    delay: five(&st.delay),
                    retry_ranges: st.retry.ranges(40),
                    peak_admitted_per_s: pk.map_or(0.0, |pk| per_s(pk.finish())),
                    keys_held: st.keys_held,
                }
            })
            .collect();
        Summary {
            requests: r.requests,
            keys: r.interner.len(),
            first_t: r.first_t.unwrap_or(0),
            last_t: r.max_t,
            backwards: r.backwards,
            peak_offered_per_s: per_s(r.peak_offered()),
            sustain_ns: rate_window,
            policies,
            cross: r.cross.clone(),
            timeline_origin: r.timeline.origin,
            timeline_width: r.timeline.width,
            offered: r.timeline.offered.clone(),
            admitted: r.timeline.admitted.clone(),
            traces: Vec::new(),
            timeline_clamped: r.timeline.clamped,
            meta,
        }
    }

    /// A warning for stderr when the timeline and the peaks do not show the traffic as it
    /// was: requests counted in a bin not their own, which one timestamp far from the
    /// others (a first line in 1970 or 2200) causes.
    pub fn timeline_warning(&self) -> Option<String> {
        (self.timeline_clamped > 0).then(|| {
            format!(
                "warning: {} of {} requests are counted in the timeline's first or last bin, \
                 not their own: they lie over a minute before the first request ({}) or over 32 \
                 years after it. The timeline and the peak rates are distorted: is a timestamp far from \
                 the others?",
                group(self.timeline_clamped),
                group(self.requests),
                format_rfc3339(self.first_t),
            )
        })
    }

    pub fn top_keys_to_trace(&self, r: &Replay, per_policy: usize) -> Vec<(usize, u32)> {
        let mut out = Vec::new();
        for (p, st) in r.stats.iter().enumerate() {
            let mut keys: Vec<(u32, u32)> = st
                .rejected_by_key
                .iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .map(|(i, &c)| (i as u32, c))
                .collect();
            keys.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            out.extend(keys.iter().take(per_policy).map(|&(id, _)| (p, id)));
        }
        out
    }

    pub fn to_json(&self) -> Jv {
        let n = self.policies.len();
        let stats5 = |x: &Option<[u64; 5]>| match x {
            None => Jv::Null,
            Some(v) => Jv::obj()
                .with("p50", v[0])
                .with("p90", v[1])
                .with("p99", v[2])
                .with("max", v[3])
                .with("mean", v[4]),
        };
        let policies: Vec<Jv> = self
            .policies
            .iter()
            .map(|p| {
                Jv::obj()
                    .with("name", p.name.as_str())
                    .with("rules", p.rules.clone())
                    .with("offered", p.offered)
                    .with("admitted", p.admitted)
                    .with("rejected", p.rejected)
                    .with("rejected_share", share(p.rejected, p.offered))
                    .with("over_capacity", p.over_capacity)
                    .with("unlimited", p.unlimited)
                    .with("delayed", p.delayed)
                    .with("clients_affected", p.clients_affected)
                    .with(
                        "clients_affected_share",
                        share(p.clients_affected, self.keys as u64),
                    )
                    .with("only_this_policy_rejected", p.only_rejected)
                    .with(
                        "top_throttled",
                        Jv::Arr(
                            p.top
                                .iter()
                                .map(|k| {
                                    Jv::obj()
                                        .with("key", k.key.as_str())
                                        .with("offered", k.offered)
                                        .with("rejected", k.rejected)
                                        .with("rejected_share", share(k.rejected, k.offered))
                                })
                                .collect(),
                        ),
                    )
                    .with("retry_after_ns", stats5(&p.retry))
                    .with("delay_ns", stats5(&p.delay))
                    .with(
                        "retry_after_histogram",
                        Jv::Arr(
                            p.retry_ranges
                                .iter()
                                .map(|&(lo, hi, c)| Jv::Arr(vec![lo.into(), hi.into(), c.into()]))
                                .collect(),
                        ),
                    )
                    .with("peak_sustained_admitted_per_s", p.peak_admitted_per_s)
                    .with("keys_held", p.keys_held)
            })
            .collect();
        let mut disagree = Vec::new();
        for a in 0..n {
            for b in 0..n {
                if a != b {
                    disagree.push(
                        Jv::obj()
                            .with("rejected_by", self.policies[a].name.as_str())
                            .with("admitted_by", self.policies[b].name.as_str())
                            .with("requests", self.cross[a * n + b]),
                    );
                }
            }
        }
        let inputs: Vec<Jv> = self
            .meta
            .inputs
            .iter()
            .map(|i| {
                Jv::obj()
                    .with("name", i.name.as_str())
                    .with("format", i.format.as_str())
                    .with("lines", i.lines)
                    .with("timezone", i.zone.as_deref().unwrap_or("UTC"))
                    .with(
                        "fields",
                        Jv::Obj(
                            i.fields
                                .iter()
                                .map(|(r, f)| (r.clone(), Jv::from(f.as_str())))
                                .collect(),
                        ),
                    )
            })
            .collect();
        let traces: Vec<Jv> = self
            .traces
            .iter()
            .map(|(p, key, limit, end, min, rej)| {
                Jv::obj()
                    .with("policy", self.policies[*p].name.as_str())
                    .with("key", key.as_str())
                    .with("limit", *limit)
                    .with("level_end", end.clone())
                    .with("level_min", min.clone())
                    .with("rejected", rej.clone())
            })
            .collect();
        Jv::obj()
            .with("command", self.meta.command.as_str())
            .with("inputs", Jv::Arr(inputs))
            .with("lines", self.meta.lines)
            .with("bad_lines", self.meta.bad_lines)
            .with("bad_line_examples", self.meta.bad_examples.clone())
            .with("unkeyed", self.meta.unkeyed)
            .with("key", self.meta.key.as_str())
            .with("requests", self.requests)
            .with("keys", self.keys)
            .with("first", format_rfc3339(self.first_t))
            .with("last", format_rfc3339(self.last_t))
            .with("first_ns", self.first_t)
            .with("last_ns", self.last_t)
            .with("timestamps_backwards", self.backwards)
            .with("inputs_overlapping", self.meta.overlapping.clone())
            .with("sustain_window_ns", self.sustain_ns)
            .with("peak_sustained_offered_per_s", self.peak_offered_per_s)
            .with("policies", Jv::Arr(policies))
            .with("disagreements", Jv::Arr(disagree))
            .with(
                "timeline",
                Jv::obj()
                    .with("origin_ns", self.timeline_origin)
                    .with("width_ns", self.timeline_width)
                    .with("offered", self.offered.clone())
                    .with(
                        "admitted",
                        Jv::Arr(self.admitted.iter().map(|a| Jv::from(a.clone())).collect()),
                    ),
            )
            .with("traces", Jv::Arr(traces))
            .with("elapsed_s", self.meta.elapsed_s)
    }

    pub fn to_csv(&self, table: Table) -> String {
        let mut out = String::new();
        let n = self.policies.len();
        match table {
            Table::Summary => {
                out.push_str("policy,offered,admitted,rejected,rejected_share,over_capacity,unlimited,delayed,clients_affected,only_this_policy_rejected,retry_p50_ns,retry_p90_ns,retry_p99_ns,retry_max_ns,peak_sustained_admitted_per_s\n");
                for p in &self.policies {
                    let r = |i: usize| p.retry.map_or(String::new(), |v| v[i].to_string());
                    let _ = writeln!(
                        out,
                        "{},{},{},{},{:.6},{},{},{},{},{},{},{},{},{},{:.3}",
                        csv(&printable(&p.name)),
                        p.offered,
                        p.admitted,
                        p.rejected,
                        share(p.rejected, p.offered),
                        p.over_capacity,
                        p.unlimited,
                        p.delayed,
                        p.clients_affected,
                        p.only_rejected,
                        r(0),
                        r(1),
                        r(2),
                        r(3),
                        p.peak_admitted_per_s
                    );
                }
            }
            Table::TopKeys => {
                out.push_str("policy,rank,key,offered,rejected,rejected_share\n");
                for p in &self.policies {
                    for (i, k) in p.top.iter().enumerate() {
                        let _ = writeln!(
                            out,
                            "{},{},{},{},{},{:.6}",
                            csv(&printable(&p.name)),
                            i + 1,
                            csv(&printable(&k.key)),
                            k.offered,
                            k.rejected,
                            share(k.rejected, k.offered)
                        );
                    }
                }
            }
            Table::Timeline => {
                out.push_str("start,start_ns,width_ns,offered");
                for p in &self.policies {
                    let _ = write!(out, ",{}", csv(&format!("admitted {}", printable(&p.name))));
                }
                out.push('\n');
                for (b, o) in self.offered.iter().enumerate() {
                    let t = self.timeline_origin + b as u64 * self.timeline_width;
                    let _ = write!(out, "{},{t},{},{o}", format_rfc3339(t), self.timeline_width);
                    for a in &self.admitted {
                        let _ = write!(out, ",{}", a[b]);
                    }
                    out.push('\n');
                }
            }
            Table::Disagreements => {
                out.push_str("rejected_by,admitted_by,requests\n");
                for a in 0..n {
                    for b in 0..n {
                        if a != b {
                            let _ = writeln!(
                                out,
                                "{},{},{}",
                                csv(&printable(&self.policies[a].name)),
                                csv(&printable(&self.policies[b].name)),
                                self.cross[a * n + b]
                            );
                        }
                    }
                }
            }
        }
        out
    }

    /// The text for people. Every text that comes from the logs (keys, quoted lines) or the
    /// command line (names) is [`printable`]: no control character reaches the terminal.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let m = &self.meta;
        // Many inputs (a load balancer's files): the first and last few, and a count.
        const SHOWN: usize = 4;
        let many = m.inputs.len() > 3 * SHOWN;
        for (n, i) in m.inputs.iter().enumerate() {
            if many && n >= SHOWN && n < m.inputs.len() - SHOWN {
                if n == SHOWN {
                    let hidden = &m.inputs[SHOWN..m.inputs.len() - SHOWN];
                    let _ = writeln!(
                        out,
                        "input    ... {} more ({}; --format json lists them all)",
                        hidden.len(),
                        counted(hidden.iter().map(|i| i.lines).sum(), "line", "lines"),
                    );
                }
                continue;
            }
            let fields: Vec<String> = i.fields.iter().map(|(r, f)| format!("{r}={f}")).collect();
            let mut fields = if fields.is_empty() {
                String::new()
            } else {
                format!("; {}", printable(&fields.join(" ")))
            };
            if let Some(z) = &i.zone {
                fields.push_str(&format!("; dates without an offset in {}", printable(z)));
            } else if i.utc_without_offset {
                fields
                    .push_str("; dates without an offset read as UTC: --timezone gives their zone");
            }
            let _ = writeln!(
                out,
                "input    {} ({}, {}{fields})",
                printable(&i.name),
                i.format,
                counted(i.lines, "line", "lines"),
            );
        }
        if m.inputs.len() > 1 {
            let _ = writeln!(
                out,
                "merged   the {} inputs, by time{}",
                m.inputs.len(),
                if m.overlapping.is_empty() {
                    " (none overlaps another)".to_string()
                } else {
                    let names: Vec<String> = m
                        .overlapping
                        .iter()
                        .take(SHOWN)
                        .map(|n| printable(n).into_owned())
                        .collect();
                    let more = m.overlapping.len() - names.len();
                    format!(
                        "; {} overlapping the inputs before {}: {}{}",
                        m.overlapping.len(),
                        if m.overlapping.len() == 1 {
                            "it"
                        } else {
                            "them"
                        },
                        names.join(", "),
                        if more > 0 {
                            format!(" and {more} more")
                        } else {
                            String::new()
                        }
                    )
                }
            );
        }
        let _ = writeln!(
            out,
            "traffic  {} from {} ({}) over {}, {} to {}; peak {:.1}/s over {}",
            counted(self.requests, "request", "requests"),
            counted(self.keys as u64, "key", "keys"),
            printable(&m.key),
            dur(self.last_t.saturating_sub(self.first_t)),
            format_rfc3339(self.first_t),
            format_rfc3339(self.last_t),
            self.peak_offered_per_s,
            dur(self.sustain_ns)
        );
        if m.bad_lines + m.unkeyed + self.backwards > 0 {
            // Dates without an offset read as UTC go back an hour where the clock was set
            // back (daylight saving): the zone reads them in order.
            let utc = m.inputs.iter().filter(|i| i.utc_without_offset).count();
            let _ = writeln!(
                out,
                "skipped  {} unusable lines, {} without a key; {} timestamps earlier than an earlier line's (replayed as logged: the engine clamps){}",
                group(m.bad_lines),
                group(m.unkeyed),
                group(self.backwards),
                if self.backwards > 0 && utc > 0 {
                    format!(
                        "; {} dates without an offset were read as UTC: if the clock that wrote them was set back (daylight saving), give its zone with --timezone",
                        if utc == m.inputs.len() && utc == 1 {
                            "the input's".to_string()
                        } else if utc == m.inputs.len() {
                            "the inputs'".to_string()
                        } else {
                            format!("{} of the inputs'", utc)
                        }
                    )
                } else {
                    String::new()
                }
            );
            for e in &m.bad_examples {
                let _ = writeln!(out, "         {}", printable(e));
            }
        }
        out.push('\n');
        let names: Vec<String> = self
            .policies
            .iter()
            .map(|p| printable(&p.name).into_owned())
            .collect();
        let name_w = names
            .iter()
            .map(|n| n.chars().count())
            .max()
            .unwrap_or(6)
            .clamp(6, 40);
        let _ = writeln!(
            out,
            "{:<name_w$}  {:>10} {:>10} {:>10} {:>7} {:>9}  {:>8} {:>8} {:>8} {:>8}  {:>10}",
            "policy",
            "offered",
            "admitted",
            "rejected",
            "share",
            "clients",
            "retry50",
            "retry90",
            "retry99",
            "retrymax",
            "peak adm/s"
        );
        for (p, name) in self.policies.iter().zip(&names) {
            let r = |i: usize| p.retry.map_or("-".to_string(), |v| dur(v[i]));
            let _ = writeln!(
                out,
                "{:<name_w$}  {:>10} {:>10} {:>10} {:>6.2}% {:>9}  {:>8} {:>8} {:>8} {:>8}  {:>10.2}",
                clip(name, name_w),
                group(p.offered),
                group(p.admitted),
                group(p.rejected),
                100.0 * share(p.rejected, p.offered),
                group(p.clients_affected),
                r(0),
                r(1),
                r(2),
                r(3),
                p.peak_admitted_per_s
            );
        }
        for (p, name) in self.policies.iter().zip(&names) {
            let _ = writeln!(out, "\n{name}");
            for r in &p.rules {
                let _ = writeln!(out, "  {}", printable(r));
            }
            let mut notes = Vec::new();
            if p.over_capacity > 0 {
                notes.push(format!(
                    "{} rejected for a cost above the capacity",
                    group(p.over_capacity)
                ));
            }
            if p.unlimited > 0 {
                notes.push(format!(
                    "{} matched no route (not limited)",
                    group(p.unlimited)
                ));
            }
            if let Some(d) = p.delay {
                notes.push(format!(
                    "{} admitted with a wait: p50 {}, p99 {}, max {}",
                    group(p.delayed),
                    dur(d[0]),
                    dur(d[2]),
                    dur(d[3])
                ));
            }
            if self.policies.len() > 1 {
                notes.push(format!(
                    "{} rejected by this policy alone",
                    group(p.only_rejected)
                ));
            }
            let pct = 100.0 * share(p.clients_affected, self.keys as u64);
            notes.push(format!(
                "{} of {} throttled ({})",
                group(p.clients_affected),
                counted(self.keys as u64, "client", "clients"),
                // Some clients, however few, are never "0.00%".
                if p.clients_affected > 0 && pct < 0.01 {
                    "under 0.01%".to_string()
                } else {
                    format!("{pct:.2}%")
                }
            ));
            for note in notes {
                let _ = writeln!(out, "  {note}");
            }
            if !p.top.is_empty() {
                let keys: Vec<Cow<str>> = p.top.iter().map(|k| printable(&k.key)).collect();
                let kw = keys
                    .iter()
                    .map(|k| k.chars().count())
                    .max()
                    .unwrap_or(0)
                    .clamp(TOP_HEAD.len(), 48);
                let _ = writeln!(
                    out,
                    "  {:<kw$}  {:>10} {:>10} {:>7}",
                    TOP_HEAD, "offered", "rejected", "share"
                );
                for (k, key) in p.top.iter().zip(&keys) {
                    let _ = writeln!(
                        out,
                        "  {:<kw$}  {:>10} {:>10} {:>6.2}%",
                        clip(key, kw),
                        group(k.offered),
                        group(k.rejected),
                        100.0 * share(k.rejected, k.offered)
                    );
                }
            }
        }
        let n = self.policies.len();
        if n > 1 {
            let _ = writeln!(
                out,
                "\nrequests rejected by the row's policy and admitted by the column's"
            );
            let w = 12usize;
            let name_w = name_w + 4;
            let _ = write!(out, "{:<name_w$}", "");
            for (i, _) in self.policies.iter().enumerate() {
                let _ = write!(out, " {:>w$}", format!("[{}]", i + 1));
            }
            out.push('\n');
            for (a, name) in names.iter().enumerate() {
                let _ = write!(
                    out,
                    "{:<name_w$}",
                    clip(&format!("[{}] {name}", a + 1), name_w)
                );
                for b in 0..n {
                    if a == b {
                        let _ = write!(out, " {:>w$}", "-");
                    } else {
                        let _ = write!(out, " {:>w$}", group(self.cross[a * n + b]));
                    }
                }
                out.push('\n');
            }
        }
        out
    }
}

pub fn share(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// `1 234 567`.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// A duration for people: `350ns`, `12.5ms`, `1.25s`, `3m20s`, `2h05m`.
pub fn dur(ns: u64) -> String {
    let s = ns as f64 / S;
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{:.1}us", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.1}ms", ns as f64 / 1e6)
    } else if s < 100.0 {
        format!("{s:.2}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

fn clip(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(w.saturating_sub(3)).collect();
        t.push_str("...");
        t
    }
}

/// A CSV text field, quoted when it must be. A text a spreadsheet would run as a formula
/// (starting with `=`, `+`, `-`, `@`, a tab or a carriage return: a key from a User-Agent or a
/// path can be `=cmd|' /C calc'!A0`) starts with `'` (OWASP's advice for CSV injection).
pub fn csv(s: &str) -> String {
    let s: Cow<str> = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        Cow::Owned(format!("'{s}"))
    } else {
        Cow::Borrowed(s)
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.into_owned()
    }
}
