"""Formats the HTTP overhead measurements (httpbench JSON lines and callgrind counts) as the
Markdown fragment of BENCHMARKS.md: `python3 benches/http_report.py CALLGRIND.jsonl WRK.jsonl`."""
import json
import sys

NAMES = {
    "axum": "axum, no limiter",
    "passthrough": "axum + a layer that passes requests on (the floor of any layer)",
    "sluicegate": "axum + sluicegate-tower (IETF `RateLimit` fields)",
    "sluicegate-noheaders": "axum + sluicegate-tower (no fields on admitted responses)",
    "tower_governor": "axum + tower_governor 0.8 (no headers)",
    "tower_governor-headers": "axum + tower_governor 0.8 (`use_headers`)",
}


def rows(path, key):
    out = {}
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            e = json.loads(line)
            if key in e:
                out[e[key]] = e
    return out


cg = rows(sys.argv[1], "subject")
wrk = rows(sys.argv[2], "summary")
base_ir = cg["axum"]["ir_per_request"]
floor_ir = cg["passthrough"]["ir_per_request"]
print("## HTTP: sluicegate-tower against tower_governor (`benches/src/http.rs`)\n")
print("One axum app (`GET /` answering `hello`), the same route and peer for every subject; the "
      "limiters key by the peer address and never refuse, so what is measured is the cost of a "
      "layer on an admitted request. Instructions are counted by callgrind inside "
      "`httpbench --oneshot` (20 000 requests through the router with tower's `oneshot`, no "
      "network): exact and immune to the machine's load. Requests per second are wrk's "
      "(`-t1 -c32 -d2s`) against the real server on 127.0.0.1 (two tokio workers), subjects in "
      "rotating order, median of the rounds; the overhead is 1/rps - 1/rps(axum).\n")
print("| subject | instructions / request | over axum | over the pass-through layer | wrk rps (median, min-max) | overhead / request |")
print("|---|---|---|---|---|---|")
for k, name in NAMES.items():
    if k not in cg:
        continue
    ir = cg[k]["ir_per_request"]
    w = wrk.get(k)
    rps = f"{w['median_rps']:.0f} ({w['min_rps']:.0f}-{w['max_rps']:.0f})" if w else "—"
    ov = f"{w['overhead_us']:.2f} µs" if w else "—"
    print(f"| {name} | {ir} | {ir - base_ir:+d} | {ir - floor_ir:+d} | {rps} | {ov} |")
ours, gov = cg["sluicegate-noheaders"]["ir_per_request"], cg["tower_governor"]["ir_per_request"]
oursh, govh = cg["sluicegate"]["ir_per_request"], cg["tower_governor-headers"]["ir_per_request"]
print(f"\nTarget (overhead under one third of tower_governor's): **missed**. Over axum alone, "
      f"without fields {ours - base_ir} against {gov - base_ir} instructions "
      f"({(ours - base_ir) / (gov - base_ir):.2f}x), with fields {oursh - base_ir} against "
      f"{govh - base_ir} ({(oursh - base_ir) / (govh - base_ir):.2f}x). Any tower layer in an axum "
      f"router costs {floor_ir - base_ir} instructions before it does anything (the pass-through "
      f"row), more than a third of tower_governor's whole overhead.")
