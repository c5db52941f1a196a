#!/usr/bin/env bash
# The CLI's HTML report in a real headless browser (Debian's Chromium): a replay of the
# embedded sample and a simulation write reports; Chromium loads each from a file:// URL
# with no network, runs its script, and the DOM it dumps must hold every chart: one
# admitted-rate path per policy, the offered area, a bucket-level chart per traced key, a
# retry_after chart per policy, and no script error. A screenshot must not be blank.
# Installs chromium with apt-get when missing (as root); it FAILS when it cannot run.
# Last line: "cli-report: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }
finish() { echo "cli-report: $passed passed, $failed failed"; [ "$failed" = 0 ]; exit $?; }

browser=""
for b in chromium chromium-browser; do
  command -v "$b" >/dev/null && browser=$(command -v "$b") && break
done
if [ -z "$browser" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing chromium with apt-get"
  apt-get update -qq >/dev/null 2>&1 || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || true
  command -v chromium >/dev/null && browser=$(command -v chromium)
fi
if [ -z "$browser" ]; then
  bad "chromium is needed for the report check (apt-get install chromium, as root)"
  finish
fi

echo "== build the CLI (release)"
if ! cargo build --release --locked -p sluicegate-cli -q; then
  bad "build"
  finish
fi
BIN=target/release/sluicegate
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

chrome() { # chrome ARGS...: headless, no network, a fresh profile
  local profile
  profile=$(mktemp -d -p "$work")
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --disable-dev-shm-usage --user-data-dir="$profile" "$@" 2>"$work/chrome.err"
}

count() { grep -o "$1" "$2" | wc -l; }

check_report() { # check_report NAME HTML POLICIES
  local name=$1 html=$2 policies=$3 dom="$work/$1.dom.html" png="$work/$1.png"
  if ! chrome --virtual-time-budget=5000 --dump-dom "file://$html" >"$dom" || [ ! -s "$dom" ]; then
    bad "$name: chromium could not load the report ($(tail -1 "$work/chrome.err"))"
    return
  fi
  if grep -q 'data-rendered="ok"' "$dom" && ! grep -q 'data-error=' "$dom"; then
    ok "$name: the page's script ran without error"
  else
    bad "$name: the page's script did not finish ($(grep -o 'data-error="[^"]*"' "$dom" | head -1))"
  fi
  local n
  n=$(count 'class="series admitted"' "$dom")
  if [ "$n" = "$policies" ]; then ok "$name: one admitted-rate path per policy ($n)"; else bad "$name: $n admitted paths for $policies policies"; fi
  if grep -q 'class="series offered"' "$dom" && grep -q 'class="area"' "$dom"; then ok "$name: the offered series"; else bad "$name: no offered series"; fi
  n=$(count 'class="chart retry"' "$dom")
  if [ "$n" = "$policies" ]; then ok "$name: a retry_after chart per policy"; else bad "$name: $n retry_after charts for $policies policies"; fi
  n=$(count 'class="chart level"' "$dom")
  if [ "$n" -ge 1 ]; then ok "$name: $n bucket-level charts"; else bad "$name: no bucket-level chart"; fi
  # Every admitted path is drawn through points (not the empty placeholder).
  n=$(grep -o '<path d="[^"]*"[^>]*class="series admitted"' "$dom" | grep -c 'd="M[0-9.]* [0-9.]*L')
  if [ "$n" = "$policies" ]; then ok "$name: admitted paths have points"; else bad "$name: $n of $policies admitted paths have points"; fi
  if chrome --virtual-time-budget=5000 --window-size=1200,1800 --screenshot="$png" "file://$html" >/dev/null && [ -s "$png" ]; then
    # A blank page compresses to a few KiB; charts and tables do not.
    local size
    size=$(stat -c %s "$png")
    if [ "$size" -gt 30000 ]; then ok "$name: screenshot ($size bytes)"; else bad "$name: screenshot looks blank ($size bytes)"; fi
  else
    bad "$name: no screenshot"
  fi
}

echo "== replay of the embedded sample, three policies"
if $BIN replay --sample -q --policy 'lenient=20/s; burst=100' --policy 'strict=5/s; burst=20' \
  --policy 'login=POST /login => 5/m; burst=10 | * => 20/s; burst=100' --html "$work/replay.html" >/dev/null; then
  ok "replay writes the report"
  check_report replay "$work/replay.html" 3
else
  bad "replay --html"
fi

echo "== simulate, two policies"
if $BIN simulate -q '10/s; burst=50' -p '10/s; algorithm=sliding_window' -t '60/s for 3s, idle 2s, burst 40' \
  --html "$work/simulate.html" >/dev/null; then
  ok "simulate writes the report"
  check_report simulate "$work/simulate.html" 2
else
  bad "simulate --html"
fi

finish
