#!/usr/bin/env bash
# The Redis store against real servers: the core's Redis tests (core/tests/redis: the
# conformance vectors bit for bit on the test clock, expiry, rejections that write nothing,
# processes sharing one key on the server's clock, a killed, restarted and paused server under
# each fail policy, a three-master Redis Cluster made with redis-cli --cluster create, batches,
# async calls, composites), then the scripts' own proof (conformance/redis_check.py).
# The tests start their redis-server processes themselves, on free loopback ports with no
# persistence, and keep their files (pid files included) under one temporary folder; the trap
# stops any of them still running, by pid. Installs redis-server (Debian's package, which
# brings redis-cli) with apt-get when missing and this runs as root; it FAILS when it cannot
# run, never skips. Last line: "redis: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }
finish() { echo "redis: $passed passed, $failed failed"; [ "$failed" = 0 ]; exit $?; }

tmp=$(mktemp -d)
stop_servers() {
  local f pid
  for f in "$tmp"/*/*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null) || continue
    kill -CONT "$pid" 2>/dev/null
    kill -KILL "$pid" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap stop_servers EXIT

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing redis-server with apt-get"
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null 2>&1 || true
    # The package starts a system service: stop it (the tests start their own servers).
    if command -v systemctl >/dev/null; then systemctl stop redis-server >/dev/null 2>&1 || true; fi
    if command -v service >/dev/null; then service redis-server stop >/dev/null 2>&1 || true; fi
  fi
fi
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  bad "redis-server and redis-cli are needed (apt-get install redis-server, as root)"
  finish
fi
echo "redis-server: $(redis-server --version)"

echo "== cargo test -p sluicegate --features redis,redis-test-clock --test redis"
if SLUICEGATE_REDIS_TMP="$tmp" cargo test -p sluicegate --locked --features redis,redis-test-clock \
  --test redis -- --test-threads=2 2>&1 | tee "$tmp/cargo.log"; then
  ok "core/tests/redis"
else
  bad "core/tests/redis"
fi
# The Redis store's unit tests (URLs, specs, slots) need the feature too.
if cargo test -p sluicegate --locked --features redis --lib -q -- store::redis store::spec 2>&1 | tail -3; then
  ok "the Redis store's unit tests"
else
  bad "the Redis store's unit tests"
fi

echo "== python3 conformance/redis_check.py"
if python3 conformance/redis_check.py; then
  ok "conformance/redis_check.py"
else
  bad "conformance/redis_check.py"
fi
finish
