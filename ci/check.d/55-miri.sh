#!/usr/bin/env bash
# Miri over the unsafe code: the core's unit tests (the keyed table's key cells and published
# view, deferred frees through read sections, the cells; the TSC and membarrier paths have
# cfg(miri) fallbacks) and the C binding's handles. Miri reports undefined behaviour, data
# races and leaks. Last line: "miri: N passed, M failed" (one per crate run).
set -uo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=ci/nightly.sh
. ci/nightly.sh
need_nightly miri rust-src || { echo "miri: 0 passed, 1 failed"; exit 1; }
export MIRIFLAGS="${MIRIFLAGS:-} -Zmiri-strict-provenance"
passed=0
failed=0
# The core's client identity and metrics modules hold no unsafe code, and their tests (65 536
# addresses of one /64, 96 threads counting) would take Miri most of an hour: skipped here,
# run natively by cargo test.
skip_sluicegate="--skip client:: --skip metrics::"
for crate in sluicegate sluicegate-c; do
  echo "miri: $crate (unit tests)"
  skip=""
  [ "$crate" = sluicegate ] && skip=$skip_sluicegate
  # shellcheck disable=SC2086
  if cargo +nightly miri test -q -p "$crate" --lib -- $skip; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done
echo "miri: $passed passed, $failed failed"
[ "$failed" = 0 ]
