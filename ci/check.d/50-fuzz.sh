#!/usr/bin/env bash
# A short, bounded run of every cargo-fuzz target (FUZZ_SECONDS each, default 10). Needs the
# nightly toolchain and cargo-fuzz, which it installs (into target/tools) when missing, and
# fails when it cannot. The long run is documented in fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs="${FUZZ_SECONDS:-10}"
# shellcheck source=ci/nightly.sh
. ci/nightly.sh
need_nightly || { echo "fuzz: 0 passed, 1 failed"; exit 1; }

tools="$PWD/target/tools"
if [ ! -x "$tools/bin/cargo-fuzz" ]; then
  echo "fuzz: installing cargo-fuzz into target/tools"
  cargo install cargo-fuzz --locked --root "$tools" >/dev/null 2>&1 || {
    echo "fuzz: cargo-fuzz could not be installed (cargo install cargo-fuzz)" >&2
    echo "fuzz: 0 passed, 1 failed"
    exit 1
  }
fi
export PATH="$tools/bin:$PATH"

cd fuzz
# The committed lockfile must already be current: a run that rewrote it would leave the tree
# dirty (and build something other than what was committed).
cargo +nightly metadata --locked --format-version 1 >/dev/null
targets=$(cargo +nightly fuzz list)
passed=0
for t in $targets; do
  out=$(mktemp -d)
  echo "fuzz: $t for ${secs}s (seeds: fuzz/corpus/$t)"
  # The first directory collects new inputs; the committed corpus is only read. An input that
  # runs a minute is a hang (libFuzzer's default waits twenty), and fails the run at once.
  status=0
  seeds="corpus/$t"; [ -d "$seeds" ] || seeds=""
  # shellcheck disable=SC2086
  cargo +nightly fuzz run "$t" "$out" $seeds -- \
    -max_total_time="$secs" -timeout=60 -rss_limit_mb=2048 -print_final_stats=1 >"$out.log" 2>&1 || status=$?
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
