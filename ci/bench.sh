#!/usr/bin/env bash
# Runs the benchmark suite (sluicegate and its peers, same run, same machine) and regenerates
# BENCHMARKS.md at the repo root. About 20 minutes on 2 cores with the bindings, plus the
# first build.
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

# The keyed groups twice more (full suite only), each pass saved under its own baseline: a
# subject is measured for seconds at a time, one after another, and on a shared machine a
# burst of load that lands on one subject moves a keyed ratio by a third. The report takes
# each keyed row's median over the three passes.
# Criterion rewrites a benchmark's `new` estimates on every run, saved baseline or not, so the
# first pass is copied to `pass1` before the others run.
if [[ $# -eq 0 ]]; then
    for d in "$target"/criterion/keyed*/*/*/new; do
        rm -rf "${d%/new}/pass1" && cp -r "$d" "${d%/new}/pass1"
    done
    for pass in 2 3; do
        cargo bench -p sluicegate-benches --bench engine -- --save-baseline "pass$pass" '^keyed'
    done
fi

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
# The operations subjects (counters, shadow mode, a reconfigured limiter; docs/OPERATIONS.md)
# interleaved the same way, and the time set_quota takes.
"$target/release/hotpath" --operations "$rounds" >"$target/bench/operations.jsonl"

# Keyed subjects interleaved (keyedpath): ours, governor and the keyed floor in round-robin
# blocks, at 100 000 keys on one and two threads and at 1 000 000 keys.
cargo build --release -p sluicegate-benches --bin keyedpath
krounds=150
if [[ $mode == quick ]]; then krounds=30; fi
{
    "$target/release/keyedpath" 100000 "$krounds"
    "$target/release/keyedpath" 100000 --threads 2 "$((krounds / 2))"
    "$target/release/keyedpath" 1000000 "$((krounds / 2))"
} >"$target/bench/keyed-interleaved.jsonl"

# Instructions per decision (callgrind counts only inside the hot loops): exact and immune
# to the noise of other jobs on the machine. Skipped where valgrind is not installed.
: >"$target/bench/callgrind.jsonl"
if command -v valgrind >/dev/null; then
    iters=100000
    for subject in ours-mono ours-std ours-coarse governor floor-quanta floor-std floor-coarse \
        ops-{limiter,keyed}-{plain,metrics,shadow,reconfigured}; do
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

# The bindings' rows (issue 5: "through the same command"), each a Markdown fragment appended
# to the report. Skip them with BENCH_BINDINGS=0. Each builds what it needs: the Python venv
# of ci/check.d/20-python.sh plus the peers in requirements-bench.txt, npm ci in bindings-node,
# and the C bench programs.
rm -rf "$target/bench/extra" && mkdir -p "$target/bench/extra"

# The shared-memory store against the in-process one (shmpath: its own Markdown section).
cargo build --release -p sluicegate-benches --bin shmpath
"$target/release/shmpath" $([[ $mode == quick ]] && echo 20 || echo 100) >"$target/bench/extra/10-shm.md"

if [[ "${BENCH_BINDINGS:-1}" != 0 ]]; then
    venv="$target/venv-python"
    if [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"; then
        "$venv/bin/pip" install -q -r bindings-python/requirements-dev.txt \
            -r bindings-python/requirements-bench.txt ./bindings-python &&
        "$venv/bin/python" bindings-python/bench/bench.py --out "$target/bench/extra/20-python.md" \
            $([[ $mode == quick ]] && echo --rounds 3) ||
            echo "bench: the Python rows failed (see above)" >&2
        # Against a redis-server it starts itself (Debian's package: ci/check.d/20-python.sh).
        "$venv/bin/python" bindings-python/bench/redis_bench.py --out "$target/bench/extra/21-python-redis.md" \
            $([[ $mode == quick ]] && echo --rounds 2 --calls 1000) ||
            echo "bench: the Python Redis rows failed (see above)" >&2
    fi
    if command -v npm >/dev/null; then
        (cd bindings-node && npm ci --ignore-scripts --no-audit --no-fund >/dev/null &&
            npm run -s build >/dev/null &&
            QUICK=$([[ $mode == quick ]] && echo 1 || echo 0) node bench/bench.mjs >/dev/null &&
            cp bench/RESULTS.md "../$target/bench/extra/30-node.md") ||
            echo "bench: the Node rows failed (see above)" >&2
    fi
    bash bindings-c/bench/run.sh $([[ $mode == quick ]] && echo 3) >"$target/bench/extra/40-c.md" ||
        echo "bench: the C rows failed (see above)" >&2
fi

# The tower layer against tower_governor (issue 19): instructions per request under callgrind
# (httpbench --oneshot) and requests per second under wrk against a real server.
if [[ "${BENCH_BINDINGS:-1}" != 0 ]]; then
    cargo build --release -p sluicegate-benches --bin httpbench
    : >"$target/bench/http-callgrind.jsonl"
    if command -v valgrind >/dev/null; then
        for subject in axum passthrough sluicegate sluicegate-noheaders tower_governor tower_governor-headers; do
            n=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null \
                    '--toggle-collect=httpbench::oneshot_loop*' \
                    "$target/release/httpbench" --oneshot 20000 "$subject" 2>&1 |
                sed -n 's/.*Collected : \([0-9]*\).*/\1/p')
            printf '{"subject":"%s","ir_per_request":%s}\n' "$subject" "$(( ${n:-0} / 20000 ))" \
                >>"$target/bench/http-callgrind.jsonl"
        done
    fi
    "$target/release/httpbench" --rounds "$([[ $mode == quick ]] && echo 2 || echo 7)" --secs 2 \
        >"$target/bench/http-wrk.jsonl" &&
        python3 benches/http_report.py "$target/bench/http-callgrind.jsonl" \
            "$target/bench/http-wrk.jsonl" >"$target/bench/extra/50-tower.md" ||
        echo "bench: the HTTP rows failed (see above)" >&2
fi

python3 benches/report.py --criterion "$target/criterion" --mem "$target/bench/mem.jsonl" \
    --callgrind "$target/bench/callgrind.jsonl" --interleaved "$target/bench/interleaved.jsonl" \
    --keyed-interleaved "$target/bench/keyed-interleaved.jsonl" \
    --operations "$target/bench/operations.jsonl" \
    --extra "$target/bench/extra" --since "$since" --mode "$mode" --load-start "$load_start" --out BENCHMARKS.md
