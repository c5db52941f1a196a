#!/usr/bin/env bash
# C vs Rust: ns per try_acquire (bench/bench.c and bench/bench_rust.rs), alternating the two
# programs ROUNDS times and keeping each row's best, then printing a Markdown fragment.
# Usage: bash bindings-c/bench/run.sh [ROUNDS] > bindings-c/bench/RESULTS.md
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
make --no-print-directory -s bench >/dev/null
cargo build --release --locked -q -p sluicegate-c --example bench_rust
c=../target/c/bench/bench_c
rust=../target/release/examples/bench_rust
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for _ in $(seq "$rounds"); do
  "$c" | sed 's/^/C /' >>"$tmp"
  "$rust" | sed 's/^/R /' >>"$tmp"
done
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
echo "### C API (\`libsluicegate.so\`) vs the same call in Rust"
echo
echo "ns per \`try_acquire\` (cost 1), every decision read in full; best of $rounds alternating"
echo "rounds x 5 runs x 4M calls each, default (TSC) clock, one thread. $cpu, $(nproc) cores,"
echo "shared with other jobs (load average $(cut -d' ' -f1 /proc/loadavg)). Produced by"
echo "\`bash bindings-c/bench/run.sh\`."
echo
echo "| call | case | C: \`sg_*_try_acquire\` | Rust: \`try_acquire\` | C / Rust |"
echo "|---|---|---:|---:|---:|"
awk '
  { key = $2 " " $3; v = $4 + 0
    if ($1 == "C") { if (!(key in c) || v < c[key]) c[key] = v }
    else           { if (!(key in r) || v < r[key]) r[key] = v }
    if (!(key in seen)) { seen[key] = 1; order[n++] = key } }
  END {
    names["limiter"] = "`sg_limiter` / `Limiter`"
    names["keyed-1"] = "`sg_keyed_limiter`, 1 key"
    names["keyed-100k"] = "`sg_keyed_limiter`, 100 000 keys round-robin"
    for (i = 0; i < n; i++) {
      split(order[i], p, " ")
      printf "| %s | %s | %.1f | %.1f | %.2fx |\n", names[p[1]], p[2], c[order[i]], r[order[i]], c[order[i]] / r[order[i]]
    }
  }' "$tmp"
