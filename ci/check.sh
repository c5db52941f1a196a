#!/usr/bin/env bash
# The whole test suite: what CI runs (.ci/run) and what a developer runs before pushing.
# Needs the Rust toolchain and Python 3; installs nothing system-wide.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export PROPTEST_CASES="${PROPTEST_CASES:-1024}"

started=$(date +%s)
# Each step with the seconds since the start, so a slow suite shows.
step() { printf '\n==> %s (at %ds)\n' "$*" "$(($(date +%s) - started))"; }
# Every test runner's output is also collected here, so the last line can total them.
results=$(mktemp)
trap 'rm -f "$results"' EXIT
set -o pipefail

step "rustfmt"
cargo fmt --all --check

step "clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy -p sluicegate --all-targets --features tokio --locked -- -D warnings
# The redis crate's API differs with and without its TLS feature (the workspace build unifies
# features, so the bindings' redis-tls hides the plain build): lint both.
cargo clippy -p sluicegate --all-targets --features redis,redis-test-clock --locked -- -D warnings
cargo clippy -p sluicegate --all-targets --features redis-tls,redis-test-clock --locked -- -D warnings

step "conformance vectors are up to date with their reference (conformance/generate.py)"
python3 conformance/generate.py --check

step "loom models (bounded preemptions)"
bash ci/loom.sh 2>&1 | tee -a "$results"

for extra in ci/check.d/*.sh; do
  [ -e "$extra" ] || continue
  step "$extra"
  bash "$extra" 2>&1 | tee -a "$results"
done

step "cargo test (unit, property, conformance, stress, doc tests)"
cargo test --workspace --locked 2>&1 | tee -a "$results"
cargo test -p sluicegate --features tokio --locked --test examples acquire_async 2>&1 | tee -a "$results"

# cargo: "test result: ok. N passed; M failed"; pytest: "N passed"; node --test: "# pass N".
totals=$(awk '
  function add(line,   i, n) { n = split(line, w, /[ ;,]+/)
    for (i = 1; i < n; i++) { if (w[i+1] ~ /^passed/) p += w[i]; if (w[i+1] ~ /^failed/) f += w[i] } }
  /test result:/                      { add($0) }   # cargo
  /^=* *[0-9]+ (passed|failed)/       { add($0) }   # pytest
  /^[a-z][a-z0-9 -]*: [0-9]+ passed, [0-9]+ failed/ { add($0) }   # c-tests:, fuzz:, luajit ...:
  /^# pass /                          { p += $3 }   # node --test
  /^# fail /                          { f += $3 }
  END { printf "%d passed, %d failed", p, f }' "$results")
printf '\nci/check.sh finished in %ss\n' "$(( $(date +%s) - started ))"
echo "$totals"
