#!/usr/bin/env bash
# Model-checks every atomic protocol with loom (bounded preemptions keep CI short).
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="${RUSTFLAGS:-} --cfg sluicegate_loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
tests=$(cd core/tests && ls loom*.rs | sed 's/\.rs$//' | sed 's/^/--test /' | tr '\n' ' ')
# shellcheck disable=SC2086
cargo test -p sluicegate --release $tests
# The read-section protocol's own model (crate::reclaim), a unit test of the library.
cargo test -p sluicegate --release --lib loom_models
