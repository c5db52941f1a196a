#!/usr/bin/env bash
# Runs the benchmark suite (sluicegate and its peers, same run, same machine) and regenerates
# BENCHMARKS.md at the repo root. About 6 minutes on 2 cores, plus the first build.
#
#   ci/bench.sh                 # full run
#   BENCH_QUICK=1 ci/bench.sh   # smoke run: short measurements (about 2 minutes)
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
load_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')

cargo bench -p sluicegate-benches --bench engine -- "$@"

# Memory: one process per subject, so that peaks and freed memory do not blur.
cargo build --release -p sluicegate-benches --bin mem
mkdir -p "$target/bench"
: >"$target/bench/mem.jsonl"
for subject in $("$target/release/mem" --list); do
    "$target/release/mem" --keys 1000000 "$subject" | tee -a "$target/bench/mem.jsonl"
done

# Single-bucket subjects again, interleaved: round-robin blocks, so that every subject is
# measured at the same moments and the ratios survive the machine's changing load.
cargo build --release -p sluicegate-benches --bin hotpath
rounds=1000
if [[ $mode == quick ]]; then rounds=200; fi
"$target/release/hotpath" --interleave "$rounds" >"$target/bench/interleaved.jsonl"

# Instructions per decision (callgrind counts only inside the hot loops): exact and immune
# to the noise of other jobs on the machine. Skipped where valgrind is not installed.
: >"$target/bench/callgrind.jsonl"
if command -v valgrind >/dev/null; then
    iters=100000
    for subject in ours-mono ours-std ours-coarse governor floor-quanta floor-std floor-coarse; do
        for path in allow reject; do
            n=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
                    '--toggle-collect=hotpath::*_loop*' \
                    "$target/release/hotpath" "$subject" "$path" "$iters" 2>&1 |
                sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
            printf '{"subject":"%s","path":"%s","iters":%s,"instructions":%s}\n' \
                "$subject" "$path" "$iters" "${n:-null}" | tee -a "$target/bench/callgrind.jsonl"
        done
    done
fi

python3 benches/report.py --criterion "$target/criterion" --mem "$target/bench/mem.jsonl" \
    --callgrind "$target/bench/callgrind.jsonl" --interleaved "$target/bench/interleaved.jsonl" \
    --extra "$target/bench/extra" --since "$since" --mode "$mode" --load-start "$load_start" --out BENCHMARKS.md
