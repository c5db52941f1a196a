#!/usr/bin/env bash
# Runs the benchmark suite (sluicegate and its peers, same run, same machine) and regenerates
# BENCHMARKS.md at the repo root. About 10 minutes on 2 cores, plus the first build.
#
#   ci/bench.sh                 # full run
#   BENCH_QUICK=1 ci/bench.sh   # smoke run: short measurements (about 3 minutes)
#   ci/bench.sh 'single/'       # only the groups matching a criterion filter; the report
#                               # then holds only what this run measured
#
# Criterion's HTML report stays in target/criterion/report/index.html.
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
mode=full
if [[ -n "${BENCH_QUICK:-}" && "${BENCH_QUICK}" != 0 ]]; then mode=quick; fi
since=$(date +%s)

cargo bench -p sluicegate-benches --bench engine -- "$@"

# Memory: one process per subject, so that peaks and freed memory do not blur.
cargo build --release -p sluicegate-benches --bin mem
mkdir -p "$target/bench"
: >"$target/bench/mem.jsonl"
for subject in $("$target/release/mem" --list); do
    "$target/release/mem" --keys 1000000 "$subject" | tee -a "$target/bench/mem.jsonl"
done

python3 benches/report.py --criterion "$target/criterion" --mem "$target/bench/mem.jsonl" \
    --extra "$target/bench/extra" --since "$since" --mode "$mode" --out BENCHMARKS.md
