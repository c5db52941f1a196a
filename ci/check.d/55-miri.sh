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
for crate in sluicegate sluicegate-c; do
  echo "miri: $crate (unit tests)"
  if cargo +nightly miri test -q -p "$crate" --lib; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
  fi
done
echo "miri: $passed passed, $failed failed"
[ "$failed" = 0 ]
