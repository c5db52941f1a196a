#!/usr/bin/env bash
# Sourced by the steps that need the nightly toolchain (fuzzing, Miri): makes sure it and the
# components they use are installed, and fails (never skips) when they cannot be.
need_nightly() { # need_nightly COMPONENT...
  if ! cargo +nightly --version >/dev/null 2>&1; then
    echo "installing the nightly toolchain (minimal profile)"
    rustup toolchain install nightly --profile minimal >/dev/null 2>&1 || {
      echo "the nightly toolchain is needed and could not be installed (rustup toolchain install nightly)" >&2
      return 1
    }
  fi
  local c missing=()
  for c in "$@"; do
    rustup +nightly component list --installed 2>/dev/null | grep -q "^$c" || missing+=("$c")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing nightly components: ${missing[*]}"
    rustup component add "${missing[@]}" --toolchain nightly >/dev/null 2>&1 || {
      echo "nightly components ${missing[*]} are needed and could not be installed" >&2
      return 1
    }
  fi
}
