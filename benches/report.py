#!/usr/bin/env python3
"""Regenerates BENCHMARKS.md from criterion's estimates and the memory benchmark.

Standard library only. Called by ci/bench.sh; can be re-run alone on existing results:

    python3 benches/report.py --criterion target/criterion --mem target/bench/mem.jsonl \
        --out BENCHMARKS.md [--since EPOCH_SECONDS] [--mode quick|full]

Reads every `new/benchmark.json` + `new/estimates.json` pair under --criterion (written after
--since, so that results of benchmarks no longer in the suite are ignored) and uses the median.
Where ci/bench.sh measured a benchmark in passes saved as baselines `pass1`, `pass2`, ... (the
keyed groups), a row is the median of those passes' medians.
Binding suites (Python, Node, C) can add their own sections: every `*.md` file in
`target/bench/extra/` is appended verbatim, in name order.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

OURS = "sluicegate/mono"
FLOOR = {"sluicegate/mono": "floor/quanta", "sluicegate/std": "floor/std",
         "sluicegate/coarse": "floor/coarse"}
FLOOR_READ = {"sluicegate/mono": "floor-read/quanta", "sluicegate/std": "floor-read/std",
              "sluicegate/coarse": "floor-read/coarse"}
SINGLE_ORDER = ["sluicegate/mono", "sluicegate/std", "sluicegate/coarse", "governor",
                "ratelimit", "mutex/std", "mutex/parking_lot", "floor/quanta", "floor/std",
                "floor/coarse", "floor-read/quanta", "floor-read/std",
                "floor-read/coarse"]
DESCRIPTIONS = {
    "sluicegate/mono": "sluicegate, MonotonicClock (TSC via quanta; the default)",
    "sluicegate/std": "sluicegate, StdClock (std::time::Instant)",
    "sluicegate/coarse": "sluicegate, CoarseClock (cached reading, 1 ms refresh)",
    "governor": "governor 0.10 direct (GCRA, quanta clock); wait read with a 2nd clock read",
    "ratelimit": "ratelimit 2 (lock-free tokens + last-refill, std Instant)",
    "mutex/std": "textbook Mutex<(f64 tokens, Instant)>, std::sync::Mutex",
    "mutex/parking_lot": "textbook Mutex<(f64 tokens, Instant)>, parking_lot::Mutex",
    "floor/quanta": "floor: quanta clock read + one 64-bit CAS",
    "floor/std": "floor: Instant::now + one 64-bit CAS",
    "floor/coarse": "floor: CoarseClock read (one load) + one 64-bit CAS",
    "floor-read/quanta": "read floor: quanta clock read + one load (a rejection writes nothing)",
    "floor-read/std": "read floor: Instant::now + one load",
    "floor-read/coarse": "read floor: CoarseClock read + one load",
}


def load(criterion_dir, since):
    """({(group, function, value): median_ns}, passes): criterion's median, or for a benchmark
    measured in several passes (baselines `pass1`, `pass2`, ...) the median of their medians,
    and the most passes any benchmark had. Criterion rewrites `new` on every run, so where
    passes exist `new` repeats the last one and is skipped."""
    runs = {}
    for bench in Path(criterion_dir).rglob("benchmark.json"):
        name = bench.parent.name
        if name != "new" and not name.startswith("pass"):
            continue
        est = bench.with_name("estimates.json")
        if not est.exists() or est.stat().st_mtime < since:
            continue
        meta = json.loads(bench.read_text())
        median = json.loads(est.read_text())["median"]["point_estimate"]
        key = (meta["group_id"], meta["function_id"], meta.get("value_str"))
        runs.setdefault(key, {})[name] = median
    out, most = {}, 0
    for key, by in runs.items():
        passes = [v for n, v in by.items() if n.startswith("pass")]
        out[key] = statistics.median(passes) if passes else by["new"]
        most = max(most, len(passes))
    return out, most


def fmt_ns(ns):
    if ns is None:
        return "—"
    if ns >= 1000:
        return f"{ns / 1000:.2f} µs"
    if ns >= 100:
        return f"{ns:.0f} ns"
    if ns >= 10:
        return f"{ns:.1f} ns"
    return f"{ns:.2f} ns"


def fmt_ratio(a, b):
    if a is None or b is None or b == 0:
        return "—"
    return f"{a / b:.2f}×"


def fmt_rate(per_second):
    if per_second is None:
        return "—"
    if per_second >= 1e9:
        return f"{per_second / 1e9:.2f} G/s"
    return f"{per_second / 1e6:.1f} M/s"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine():
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "kernel": platform.release(),
        "rustc": sh(["rustc", "-V"]),
        "commit": sh(["git", "rev-parse", "--short", "HEAD"]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def loadavg():
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def ordered(names, order):
    known = [n for n in order if n in names]
    return known + sorted(n for n in names if n not in order)


def read_jsonl(path):
    """The JSON lines of `path`, or none when it is missing."""
    if not os.path.exists(path):
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


OPS_MODES = ["plain", "metrics", "shadow", "reconfigured"]
OPS_DESCRIPTIONS = {
    "plain": "as built by default",
    "metrics": "counters on (`metrics(true)`)",
    "shadow": "shadow mode (`shadow(true)`): the reject path is let through",
    "reconfigured": "after one `set_quota` (decisions on the published generation)",
}
OPS_KINDS = [("limiter", "limiter", "one bucket (`Limiter`)"),
             ("keyed", "keyed-8", "keyed limiter, 8 keys")]


def operations_section(r, callgrind, ops):
    """docs/OPERATIONS.md's costs: counters on, shadow mode and a reconfigured limiter against
    the plain one, from criterion (group operations/PATH), the interleaved run (`hotpath
    --operations`) and callgrind (the ops-* subjects). Empty when none was measured."""
    crit = {(g.split("/", 1)[1], fn): t for (g, fn, _), t in r.items()
            if g.startswith("operations/")}
    il = {(e["path"], e["subject"]): e for e in ops if "path" in e}
    timings = {e["subject"]: e["median_ns"] for e in ops if "path" not in e}
    cg = {(e["subject"], e["path"]): e["instructions"] / e["iters"]
          for e in callgrind if e.get("instructions") and e["subject"].startswith("ops-")}
    if not (crit or il or cg):
        return []
    md = ["\n## Operations: counters, shadow mode, reconfiguration\n",
          "docs/OPERATIONS.md's features on the hot path, each against the same limiter as "
          "built by default (allow path: never runs dry; reject path: drained, the wait read "
          "on every call). Targets: counters on within 1.1× of the plain limiter; shadow mode "
          "and a limiter never reconfigured as fast as the plain one.\n"]

    def rows(get, fmt):
        out = []
        for kind, cname, desc in OPS_KINDS:
            for mode in OPS_MODES:
                row = [f"{desc}, {OPS_DESCRIPTIONS[mode]}"]
                for path in ("allow", "reject"):
                    v, base = get(kind, cname, mode, path), get(kind, cname, "plain", path)
                    row += ["—", "—"] if v is None else [fmt(kind, cname, mode, path, v),
                                                         fmt_ratio(v, base) if base else "—"]
                out.append(row)
        return out

    header = ["subject", "allow", "allow: / plain", "reject", "reject: / plain"]
    if crit:
        md.append("Criterion medians (group `operations`):\n")
        md.append(table(header, rows(lambda k, c, m, p: crit.get((p, f"{c}/{m}")),
                                     lambda k, c, m, p, v: fmt_ns(v))))
        fa, fr = crit.get(("allow", "floor/quanta")), crit.get(("reject", "floor/quanta"))
        if fa and fr:
            md.append(f"\nThe quanta floor (clock read + CAS) in the same run: {fmt_ns(fa)} "
                      f"(allow group), {fmt_ns(fr)} (reject group).\n")
    if il:
        md.append("\nInterleaved (`hotpath --operations`: every subject in round-robin blocks, "
                  "so all see the same moments of the machine's load); median per decision, "
                  "p25–p75 in brackets:\n")
        name = lambda k, m: f"ops-{k}-{m}"
        md.append(table(header, rows(
            lambda k, c, m, p: (il.get((p, name(k, m))) or {}).get("median_ns"),
            lambda k, c, m, p, v: f"{fmt_ns(v)} ({fmt_ns(il[(p, name(k, m))]['p25_ns'])}–"
                                  f"{fmt_ns(il[(p, name(k, m))]['p75_ns'])})")))
    if cg:
        md.append("\nInstructions per decision (callgrind, inside the hot loop; exact):\n")
        md.append(table(header, rows(lambda k, c, m, p: cg.get((f"ops-{k}-{m}", p)),
                                     lambda k, c, m, p, v: f"{v:.1f}")))
        deltas = []
        for kind, _, desc in OPS_KINDS:
            for mode in OPS_MODES[1:]:
                d = [cg.get((f"ops-{kind}-{mode}", p), 0) - cg.get((f"ops-{kind}-plain", p), 0)
                     for p in ("allow", "reject")]
                deltas.append(f"{desc}, {mode}: {d[0]:+.0f} / {d[1]:+.0f}")
        md.append("\nInstructions over the plain limiter (allow / reject): "
                  + "; ".join(deltas) + ".\n")
    if timings:
        md.append("\n`set_quota` itself (median of its calls in `hotpath --operations`): "
                  + ", ".join(f"`{k}` {fmt_ns(v)}" for k, v in sorted(timings.items()))
                  + ". A keyed limiter's operations wait while its keys are carried.\n")
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--criterion", default="target/criterion")
    ap.add_argument("--mem", default="target/bench/mem.jsonl")
    ap.add_argument("--callgrind", default="target/bench/callgrind.jsonl")
    ap.add_argument("--interleaved", default="target/bench/interleaved.jsonl")
    ap.add_argument("--keyed-interleaved", default="target/bench/keyed-interleaved.jsonl")
    ap.add_argument("--operations", default="target/bench/operations.jsonl")
    ap.add_argument("--only-operations", action="store_true",
                    help="print the operations section alone (from what is there), write nothing")
    ap.add_argument("--extra", default="target/bench/extra")
    ap.add_argument("--out", default="BENCHMARKS.md")
    ap.add_argument("--since", type=float, default=0.0)
    ap.add_argument("--mode", default="full")
    ap.add_argument("--load-start", default=None, help="/proc/loadavg when the run started")
    args = ap.parse_args()

    r, passes = load(args.criterion, args.since)
    if args.only_operations:
        print("\n".join(operations_section(r, read_jsonl(args.callgrind),
                                          read_jsonl(args.operations))))
        return
    if not r:
        sys.exit(f"report.py: no criterion results under {args.criterion}")

    def get(group, fn, value=None):
        return r.get((group, fn, value))

    m = machine()
    md = []
    md.append("# Benchmarks\n")
    md.append("Generated by `ci/bench.sh` (criterion medians; regenerate, do not edit). "
              "Every row was measured in the same run on the same machine. "
              "Criterion's plots are in `target/criterion/report/index.html` after a run.\n")
    md.append(table(["", ""], [
        ["CPU", m["cpu"]],
        ["cores", f"{m['cores']} ({m['usable']} usable by this run)"],
        ["kernel", m["kernel"]],
        ["rustc", m["rustc"]],
        ["commit", m["commit"]],
        ["date", m["date"]],
        ["load average (1/5/15 min)", f"{args.load_start or '?'} at the start, {loadavg()} at the end"
         " (other jobs on the machine add noise; compare ratios, not absolute times)"],
        ["mode", args.mode + (" (BENCH_QUICK=1: short measurements, read the ratios loosely)"
                              if args.mode == "quick" else "")],
    ]))
    md.append("\nRatios: a *peer / ours* ratio above 1 means sluicegate is faster; "
              "*ours / floor* is how far sluicegate is from one clock read plus one CAS.\n")

    # ---- targets
    allow_ours, allow_floor = get("single/allow", OURS), get("single/allow", "floor/quanta")
    rej_ours, rej_floor = get("single/reject", OURS), get("single/reject", "floor/quanta")
    coarse_a, coarse_r = get("single/allow", "sluicegate/coarse"), get("single/reject", "sluicegate/coarse")
    sh_ours2, sh_gov2 = get("shared/allow", OURS, "2"), get("shared/allow", "governor", "2")
    rej1, rej2 = get("shared/reject", OURS, "1"), get("shared/reject", OURS, "2")

    il = {}
    if os.path.exists(args.interleaved):
        for line in Path(args.interleaved).read_text().splitlines():
            if line.strip():
                e = json.loads(line)
                il[(e["path"], e["subject"])] = e

    def il_get(path, subject):
        e = il.get((path, subject))
        return None if e is None else e["median_ns"]

    def target(name, value, ok, inter=None, inter_ok=None):
        def verdict(v):
            return "—" if v is None else ("met" if v else "**missed**")
        return [name, value, verdict(ok), inter or "—", verdict(inter_ok)]

    def ratio(a, b):
        return None if a is None or b is None else a / b

    # The floor of both paths is clock + CAS (the allow-path floor subject).
    il_floor = il_get("allow", "floor/quanta")
    rows = []
    x = ratio(allow_ours, allow_floor)
    xi = ratio(il_get("allow", OURS), il_floor)
    rows.append(target("allow, 1 thread: ours ≤ 1.1× floor", fmt_ratio(allow_ours, allow_floor),
                       None if x is None else x <= 1.1,
                       fmt_ratio(il_get("allow", OURS), il_floor), None if xi is None else xi <= 1.1))
    x = ratio(rej_ours, rej_floor)
    xi = ratio(il_get("reject", OURS), il_floor)
    rows.append(target("reject + retry_after, 1 thread: ours ≤ 1.1× floor",
                       fmt_ratio(rej_ours, rej_floor), None if x is None else x <= 1.1,
                       fmt_ratio(il_get("reject", OURS), il_floor),
                       None if xi is None else xi <= 1.1))
    x, y = ratio(coarse_a, allow_floor), ratio(coarse_r, rej_floor)
    xi = ratio(il_get("allow", "sluicegate/coarse"), il_floor)
    yi = ratio(il_get("reject", "sluicegate/coarse"), il_floor)
    rows.append(target("coarse clock: ours < 0.4× floor (allow / reject)",
                       f"{fmt_ratio(coarse_a, allow_floor)} / {fmt_ratio(coarse_r, rej_floor)}",
                       None if x is None or y is None else x < 0.4 and y < 0.4,
                       f"{fmt_ratio(il_get('allow', 'sluicegate/coarse'), il_floor)} / "
                       f"{fmt_ratio(il_get('reject', 'sluicegate/coarse'), il_floor)}",
                       None if xi is None or yi is None else xi < 0.4 and yi < 0.4))
    x = ratio(sh_gov2, sh_ours2)
    rows.append(target("2 threads, allow: aggregate ≥ 1.4× governor's",
                       fmt_ratio(sh_gov2, sh_ours2), None if x is None else x >= 1.4))
    x = None if rej1 is None or rej2 is None else (2 / rej2) / (1 / rej1)
    rows.append(target("2 threads, reject: rejections scale (2-thread / 1-thread aggregate ≥ 1.6×)",
                       "—" if x is None else f"{x:.2f}×", None if x is None else x >= 1.6))
    # Keyed: ours / governor per key count and path (allow and reject both count), from
    # criterion and from the interleaved keyed run (keyedpath), which holds up better.
    kil = {}
    if os.path.exists(args.keyed_interleaved):
        for line in Path(args.keyed_interleaved).read_text().splitlines():
            if line.strip():
                e = json.loads(line)
                kil[(e["path"], e["subject"], e["keys"], e["threads"])] = e

    def kil_get(path, who, n, threads=1):
        e = kil.get((path, who, n, threads))
        return None if e is None else e["median_ns"]

    def keyed(path, who, n):
        return r.get((f"keyed/{path}", who, str(n)))

    def keyed_verdict(get):
        parts, ok = [], True
        for n, limit in ((1, 1.0), (100_000, 0.6), (1_000_000, 1.0)):
            for path in ("allow", "reject"):
                x = ratio(get(path, "sluicegate", n), get(path, "governor", n))
                if x is None:
                    continue
                parts.append(f"{n:,} {path} {x:.2f}×")
                ok = ok and (x <= limit if limit < 1 else x < limit)
        return (", ".join(parts) if parts else "not measured"), (ok if parts else None)

    crit_txt, crit_ok = keyed_verdict(keyed)
    il_txt, il_ok = keyed_verdict(kil_get)
    rows.append(target("keyed: ≤ 0.6× governor at 100 000 keys, faster at 1 and 10⁶ (ours / governor)",
                       crit_txt, crit_ok, il_txt if kil else None, il_ok))
    # Two threads on disjoint keys: per-thread time at 2 threads over 1 thread (1.00× is
    # perfect scaling), ours next to the floor's (which bounds what the machine allows).
    def scaling(get1, get2, who, n):
        a, b = get1("allow", who, n), get2("allow", who, n)
        return None if a is None or b is None else 2 * a / b

    parts, ok = [], None
    for n in (100_000, 1_000_000):
        o = scaling(keyed, lambda p, w, k: r.get((f"keyed-2t/{p}", w, str(k))), "sluicegate", n)
        f = scaling(keyed, lambda p, w, k: r.get((f"keyed-2t/{p}", w, str(k))), "floor", n)
        g = scaling(keyed, lambda p, w, k: r.get((f"keyed-2t/{p}", w, str(k))), "governor", n)
        if o is None:
            continue
        parts.append(f"{n:,} keys: ours {o:.2f}×, floor {'—' if f is None else f'{f:.2f}×'}, "
                     f"governor {'—' if g is None else f'{g:.2f}×'}")
        good = o >= 1.8 or (f is not None and o >= 0.9 * f)
        ok = good if ok is None else ok and good
    rows.append(target("keyed, 2 threads on disjoint keys: close to 2× one thread (allow, "
                       "aggregate; met at ≥ 1.8× or ≥ 0.9× the floor's own scaling)",
                       "; ".join(parts) if parts else "not measured", ok))
    md.append("## Targets\n")
    md.append("Two measurements of the single-bucket targets: criterion's medians (one subject "
              "after another) and the interleaved run (all subjects in round-robin blocks, "
              "see below), which holds up better when the machine's load moves.\n")
    md.append(table(["target", "criterion", "", "interleaved", ""], rows))

    # ---- clocks
    clocks = {fn: v for (g, fn, _), v in r.items() if g == "clocks"}
    if clocks:
        md.append("\n## Clocks: one reading\n")
        base = clocks.get("std/Instant::now")
        md.append(table(["clock", "median", "vs Instant::now"],
                        [[f"`{n}`", fmt_ns(v), fmt_ratio(v, base)] for n, v in
                         sorted(clocks.items(), key=lambda kv: kv[1])]))

    # ---- single bucket
    names = {fn for (g, fn, _) in r if g in ("single/allow", "single/reject")}
    if names:
        md.append("\n## One bucket, one thread\n")
        md.append("Allow path: 10⁹ tokens/s, burst 10⁹ (never runs dry). Reject path: 1 token/hour, "
                  "drained; every call reads the wait (`retry_after`). Time per decision.\n")
        rows = []
        for n in ordered(names, SINGLE_ORDER):
            a, j = get("single/allow", n), get("single/reject", n)
            rows.append([DESCRIPTIONS.get(n, n), fmt_ns(a), fmt_ratio(a, allow_ours),
                         fmt_ns(j), fmt_ratio(j, rej_ours)])
        md.append(table(["subject", "allow", "allow: / ours", "reject", "reject: / ours"], rows))
        md.append("\nsluicegate against the floor of the same clock:\n")
        rows = []
        for n in ("sluicegate/mono", "sluicegate/std", "sluicegate/coarse"):
            rows.append([f"`{n}`",
                         fmt_ratio(get("single/allow", n), get("single/allow", FLOOR[n])),
                         fmt_ratio(get("single/reject", n), get("single/reject", FLOOR[n])),
                         fmt_ratio(get("single/reject", n), get("single/reject", FLOOR_READ[n]))])
        md.append(table(["ours", "allow / floor (clock+CAS)", "reject / floor (clock+CAS)",
                         "reject / read floor (clock+load)"], rows))
        md.append("\n(The coarse row is against its own clock's floor here; the target above "
                  "compares it with the quanta floor, the least a caller reading a real clock pays.)")

    # ---- shared
    for path in ("allow", "reject"):
        group = f"shared/{path}"
        cells = {(fn, v): t for (g, fn, v), t in r.items() if g == group}
        if not cells:
            continue
        threads = sorted({int(v) for (_, v) in cells})
        names = ordered({fn for (fn, _) in cells}, SINGLE_ORDER)
        if path == "allow":
            md.append("\n## One bucket shared by N threads\n")
            md.append("Each thread makes decisions back to back on the same bucket; a criterion "
                      "iteration is one decision on every thread. Aggregate decisions per second "
                      "(higher is better) and *ours / peer* throughput.\n")
        md.append(f"\n### {path}\n")
        header = ["subject"]
        for t in threads:
            header += [f"{t} thr", f"{t} thr: ours / peer"]
        rows = []
        for n in names:
            row = [f"`{n}`"]
            for t in threads:
                v, o = cells.get((n, str(t))), cells.get((OURS, str(t)))
                rate = None if v is None else t / v * 1e9
                row += [fmt_rate(rate), fmt_ratio(v, o)]
            rows.append(row)
        md.append(table(header, rows))

    # ---- algorithms
    for path in ("allow", "reject"):
        group = f"algorithms/{path}"
        cells = {fn: t for (g, fn, _), t in r.items() if g == group}
        if not cells:
            continue
        if path == "allow":
            md.append("\n## Algorithms (one bucket, one thread, MonotonicClock)\n")
        md.append(f"\n### {path}\n")
        floor = get(f"single/{path}", "floor/quanta")
        md.append(table(["algorithm", "median", "/ floor"],
                        [[f"`{n}`", fmt_ns(v), fmt_ratio(v, floor)] for n, v in sorted(cells.items())]))

    # ---- algorithms, two threads on one limiter
    for path in ("allow", "reject"):
        cells = {fn: t for (g, fn, v), t in r.items() if g == f"algorithms-2t/{path}"}
        if not cells:
            continue
        if path == "allow":
            md.append("\n## Algorithms, one limiter shared by 2 threads\n")
            md.append("A criterion iteration is one decision on each of the two threads; "
                      "aggregate decisions per second, and against the same algorithm on one "
                      "thread.\n")
        md.append(f"\n### {path}\n")
        one = {fn: t for (g, fn, v), t in r.items() if g == f"algorithms/{path}"}
        rows = []
        for n, t in sorted(cells.items()):
            agg = 2e9 / t
            single = one.get(n)
            rows.append([f"`{n}`", f"{agg / 1e6:.1f} M/s",
                         "—" if single is None else f"{agg / (1e9 / single):.2f}×"])
        md.append(table(["algorithm", "2 threads, aggregate", "/ 1 thread"], rows))

    for group_name, path in [(g, p) for g in ("keyed", "keyed-2t") for p in ("allow", "reject")]:
        group = f"{group_name}/{path}"
        cells = {(fn, v): t for (g, fn, v), t in r.items() if g == group}
        if not cells:
            continue
        if path == "allow" and group_name == "keyed":
            md.append("\n## Keyed: random access over K keys (all present before measuring)\n")
            md.append("`floor` is `KeyedFloor`: a read-only std `HashMap` of atomic words "
                      "(foldhash), a clock read and one CAS (a load on the reject path): what any "
                      "keyed limiter must at least do.\n")
            if passes > 1:
                md.append(f"Each keyed row (here and in the two-thread tables) is the median of "
                          f"{passes} criterion passes over the keyed groups, one after another, "
                          "so that a burst of load during one subject's few seconds does not "
                          "decide a ratio.\n")
        if path == "allow" and group_name == "keyed-2t":
            md.append("\n## Keyed: two threads at once, each on its own half of the keys\n")
            md.append("Time per decision of each thread; equal to the one-thread row above means "
                      "perfect scaling. The floor's own scaling is what this machine allows.\n")
        md.append(f"\n### {path}{' (2 threads)' if group_name == 'keyed-2t' else ''}\n")
        keys = sorted({int(v) for (_, v) in cells})
        rows = []
        for n in sorted({fn for (fn, _) in cells}):
            row = [f"`{n}`"]
            for k in keys:
                v, o = cells.get((n, str(k))), cells.get(("sluicegate", str(k)))
                row += [fmt_ns(v), fmt_ratio(v, o)]
            rows.append(row)
        header = ["subject"]
        for k in keys:
            header += [f"{k:,} keys", "/ ours"]
        md.append(table(header, rows))
        if not any(fn == "sluicegate" for (fn, _) in cells):
            md.append("\nsluicegate's keyed rows are added when `KeyedLimiter` lands.")

    if kil:
        md.append("\n## Keyed, interleaved\n")
        md.append("`keyedpath`: sluicegate, governor and the keyed floor in round-robin blocks "
                  "of 20 000 decisions (a new key sequence every block), so that all three see "
                  "the same moments of the machine's load. Median ns per decision (per thread), "
                  "p25–p75 in brackets.\n")
        rows = []
        for (path, who, n, threads), e in sorted(kil.items(), key=lambda kv: (kv[0][3], kv[0][2], kv[0][0], kv[0][1] != "sluicegate", kv[0][1])):
            ours = kil_get(path, "sluicegate", n, threads)
            rows.append([f"{n:,}", str(threads), path, f"`{who}`",
                         f"{fmt_ns(e['median_ns'])} ({fmt_ns(e['p25_ns'])}–{fmt_ns(e['p75_ns'])})",
                         fmt_ratio(e["median_ns"], ours)])
        md.append(table(["keys", "threads", "path", "subject", "median", "/ ours"], rows))

    # ---- memory
    mem = []
    if os.path.exists(args.mem):
        mem = [json.loads(line) for line in Path(args.mem).read_text().splitlines() if line.strip()]
    if mem:
        md.append("\n## Memory: keyed limiters\n")
        md.append("Each subject in its own process: RSS from `/proc/self/statm` before and after "
                  "creating K keys (one decision each), peak from `VmHWM`.\n")
        md.append(table(["subject", "keys", "RSS delta", "bytes / key", "peak delta"],
                        [[f"`{e['subject']}`", f"{e['keys']:,}", f"{e['rss_delta'] / 2**20:.1f} MiB",
                          f"{e['bytes_per_key']:.1f}", f"{e['peak_delta'] / 2**20:.1f} MiB"]
                         for e in mem]))
        if not any(e["subject"].startswith("sluicegate") for e in mem):
            md.append("\nsluicegate's keyed row is added when `KeyedLimiter` lands.")

    # ---- interleaved
    if il:
        md.append("\n## One bucket, one thread, interleaved\n")
        md.append("`hotpath --interleave`: every subject runs blocks of decisions in turn "
                  "(a rotated order each round), so all of them see the same moments of the "
                  "machine's load. Median time per decision over the blocks (p25–p75 in "
                  "brackets). The `/ floor` columns divide by the quanta floor (clock read + CAS) on both "
                  "paths, as the targets do.\n")
        names = ordered({s for (_, s) in il}, SINGLE_ORDER)
        rows = []
        for n in names:
            row = [DESCRIPTIONS.get(n, n)]
            for path in ("allow", "reject"):
                e = il.get((path, n))
                if e is None:
                    row += ["—", "—", "—"]
                    continue
                row += [f"{fmt_ns(e['median_ns'])} ({fmt_ns(e['p25_ns'])}–{fmt_ns(e['p75_ns'])})",
                        fmt_ratio(e["median_ns"], il_get(path, OURS)),
                        fmt_ratio(e["median_ns"], il_floor)]
            rows.append(row)
        md.append(table(["subject", "allow", "/ ours", "/ floor", "reject", "/ ours", "/ floor"],
                        rows))

    # ---- operations (docs/OPERATIONS.md)
    md += operations_section(r, read_jsonl(args.callgrind), read_jsonl(args.operations))

    # ---- callgrind
    cg = {(e["subject"], e["path"]): e["instructions"] / e["iters"]
          for e in read_jsonl(args.callgrind)
          if e.get("instructions") and not e["subject"].startswith("ops-")}
    if cg:
        md.append("\n## Instructions per decision (callgrind)\n")
        md.append("Counted by `valgrind --tool=callgrind` inside the hot loop of "
                  "`benches/src/bin/hotpath.rs` only: exact, and immune to the machine's load. "
                  "The floors' reject column is the read floor (clock + load).\n")
        subjects = sorted({s for (s, _) in cg}, key=lambda s: (not s.startswith("ours"),
                                                                 s.startswith("floor"), s))
        floor_of = {"ours-mono": "floor-quanta", "ours-std": "floor-std",
                    "ours-coarse": "floor-coarse", "governor": "floor-quanta"}
        rows = []
        for s in subjects:
            a, j = cg.get((s, "allow")), cg.get((s, "reject"))
            fl = floor_of.get(s)
            fa, fj = cg.get((fl, "allow")), cg.get((fl, "reject"))
            rows.append([f"`{s}`", "—" if a is None else f"{a:.1f}",
                         "—" if fl is None else f"{a - fa:+.1f}" if a and fa else "—",
                         "—" if j is None else f"{j:.1f}",
                         "—" if fl is None else f"{j - fj:+.1f}" if j and fj else "—"])
        md.append(table(["subject", "allow", "allow: over its floor", "reject",
                         "reject: over its read floor"], rows))

    extra = Path(args.extra)
    if extra.is_dir():
        for f in sorted(extra.glob("*.md")):
            md.append("\n" + f.read_text().strip())

    md.append("\n## Reproduce\n")
    md.append("```sh\nci/bench.sh              # full suite with the bindings' rows (about 12 minutes on 2 cores)\n"
              "BENCH_QUICK=1 ci/bench.sh  # smoke run (short measurements)\n```")
    Path(args.out).write_text("\n".join(md) + "\n")
    print(f"report.py: wrote {args.out} ({len(r)} results)")


if __name__ == "__main__":
    main()
