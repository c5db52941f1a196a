#!/usr/bin/env bash
# Regenerates bindings-c/include/sluicegate.h with the pinned cbindgen (installed into
# target/tools on first use, from the crate registry with --locked). `--check`: exit 1 if the
# committed header differs from what the sources generate (CI's drift check).
set -euo pipefail
cd "$(dirname "$0")/.."

CBINDGEN_VERSION=0.29.0
root="target/tools"
bin="$root/bin/cbindgen"
if ! { [ -x "$bin" ] && "$bin" --version | grep -qx "cbindgen $CBINDGEN_VERSION"; }; then
  echo "installing cbindgen $CBINDGEN_VERSION into $root (once)" >&2
  cargo install --locked --quiet "cbindgen@$CBINDGEN_VERSION" --root "$root"
fi

out="bindings-c/include/sluicegate.h"
if [ "${1:-}" = "--check" ]; then
  tmp=$(mktemp)
  trap 'rm -f "$tmp"' EXIT
  "$bin" --quiet --config bindings-c/cbindgen.toml --crate sluicegate-c --output "$tmp" bindings-c
  if ! diff -u "$out" "$tmp"; then
    echo "error: $out is out of date: run bash ci/header.sh and commit the result" >&2
    exit 1
  fi
  echo "header: $out matches its sources"
else
  "$bin" --quiet --config bindings-c/cbindgen.toml --crate sluicegate-c --output "$out" bindings-c
  echo "header: wrote $out"
fi
