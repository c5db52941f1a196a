#!/usr/bin/env bash
# Model-checks every atomic protocol with loom (bounded preemptions keep CI short): the loom
# layer of the tests (core/tests/loom/), and the models that live beside the code they check
# (the read sections of crate::sync::rcu, the shard's published view), unit tests of the
# library.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="${RUSTFLAGS:-} --cfg sluicegate_loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
cargo test -p sluicegate --release --test loom
cargo test -p sluicegate --release --lib loom_models
# The code that exists only under the loom cfg (its stand-ins, the models) is linted as the
# rest is.
cargo clippy -p sluicegate --release --lib --test loom --locked -- -D warnings
