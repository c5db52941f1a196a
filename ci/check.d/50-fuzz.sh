#!/usr/bin/env bash
# A short, bounded run of every cargo-fuzz target (FUZZ_SECONDS each, default 20), plus Miri
# over the core's tests. Both need the nightly toolchain; each part says clearly when it is
# skipped. The long run is documented in fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs="${FUZZ_SECONDS:-20}"

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: SKIPPED (no nightly toolchain on this machine)"
  exit 0
fi

tools="$PWD/target/tools"
if [ ! -x "$tools/bin/cargo-fuzz" ]; then
  echo "fuzz: installing cargo-fuzz into target/tools"
  cargo install cargo-fuzz --locked --root "$tools" >/dev/null 2>&1 || {
    echo "fuzz: SKIPPED (cargo-fuzz could not be installed)"; exit 0; }
fi
export PATH="$tools/bin:$PATH"

cd fuzz
targets=$(cargo +nightly fuzz list)
passed=0
for t in $targets; do
  out=$(mktemp -d)
  echo "fuzz: $t for ${secs}s (seeds: fuzz/corpus/$t)"
  # The first directory collects new inputs; the committed corpus is only read.
  status=0
  seeds="corpus/$t"; [ -d "$seeds" ] || seeds=""
  # shellcheck disable=SC2086
  cargo +nightly fuzz run "$t" "$out" $seeds -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=1 >"$out.log" 2>&1 || status=$?
  grep -E "stat::number_of_executed_units|Done [0-9]+ runs|ERROR|panicked|SUMMARY" "$out.log" || true
  [ "$status" -eq 0 ] || tail -40 "$out.log"
  rm -rf "$out" "$out.log"
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $t FAILED (crash input saved under fuzz/artifacts/$t)"
    exit 1
  fi
  passed=$((passed + 1))
done
echo "fuzz: $passed passed, 0 failed"

cd ..
if rustup +nightly component list --installed 2>/dev/null | grep -q '^miri'; then
  echo "miri: core unit and example tests"
  cargo +nightly miri test -p sluicegate --lib --test examples
else
  echo "miri: SKIPPED (the nightly toolchain on this machine has no miri component)"
fi
