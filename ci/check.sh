#!/usr/bin/env bash
# The whole test suite: what CI runs (.ci/run) and what a developer runs before pushing.
# Needs the Rust toolchain and Python 3; installs nothing system-wide.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export PROPTEST_CASES="${PROPTEST_CASES:-1024}"

# CI builds everything once, from nothing, on a disk it shares with other jobs (a run once
# failed there with "No space left on device"). So under CI=true: no incremental state (nothing
# is rebuilt), line tables only for debug info (backtraces keep their file:line), and each
# suite's own build directory goes once the suite is done (drop_after below). A developer's
# run keeps all of it: their incremental caches and full debug info are what make reruns fast.
ci_lean=false
if [ "${CI:-}" = true ]; then
  ci_lean=true
  export CARGO_INCREMENTAL=0
  export CARGO_PROFILE_DEV_DEBUG=line-tables-only
  export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
  export CARGO_PROFILE_BENCH_DEBUG=line-tables-only
fi
# drop_after STEP: under CI=true, the build directories no later step reads, and the space left.
drop_after() {
  "$ci_lean" || return 0
  local dirs=()
  case "$1" in
    loom) dirs=(target/loom) ;;
    *50-fuzz.sh) dirs=(fuzz/target) ;;
    *55-miri.sh) dirs=(target/miri) ;;
    *60-cli.sh) dirs=(target/release target/x86_64-unknown-linux-gnu) ;;
  esac
  [ "${#dirs[@]}" -eq 0 ] || rm -rf "${dirs[@]}"
  printf 'disk: build directories %s; %s free\n' "$(du -shc target fuzz/target 2>/dev/null | tail -1 | cut -f1)" \
    "$(df -h . | awk 'NR == 2 { print $4 }')"
}

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
cargo clippy -p sluicegate-tower --all-targets --features redis --locked -- -D warnings

step "conformance vectors are up to date with their reference (conformance/generate.py)"
python3 conformance/generate.py --check

step "loom models (bounded preemptions)"
bash ci/loom.sh 2>&1 | tee -a "$results"
drop_after loom

for extra in ci/check.d/*.sh; do
  [ -e "$extra" ] || continue
  step "$extra"
  bash "$extra" 2>&1 | tee -a "$results"
  drop_after "$extra"
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
