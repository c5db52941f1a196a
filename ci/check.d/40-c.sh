#!/usr/bin/env bash
# The C API (bindings-c): header drift, the C tests plain / under ASan+UBSan / under
# valgrind (test_shm: processes made with fork() on one shared-memory region; test_redis:
# the Redis store against a redis-server started here), the conformance vectors through
# Redis on the test clock (a second library, `make test-clock`), examples/prefork.c on a
# region and on Redis, the quickstart (shared and static), install + pkg-config, and the
# LuaJIT examples (the handler, and the handler in pre-forked workers on one region). Needs
# Rust, gcc and make; installs valgrind, luajit and redis-server with apt-get when they are
# missing and this runs as root, else skips those parts and says so (under CI=true a part
# that cannot run fails instead: a suite that quietly skips proves nothing). The redis-server
# runs on a free loopback port without persistence and is killed on exit.
# Last line: "c-tests: N passed, M failed" (one per program and mode).
set -uo pipefail
cd "$(dirname "$0")/../.."

passed=0
failed=0
not_run=()
ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }
missing() { # missing WHAT: a part that cannot run here
  if [ "${CI:-}" = true ]; then bad "$* (required under CI=true)"; else not_run+=("$*"); fi
}
run() { # run NAME CMD...: one counted test
  local name=$1
  shift
  if "$@"; then ok "$name"; else bad "$name"; fi
}

for tool in cc make; do
  if ! command -v "$tool" >/dev/null; then
    echo "40-c.sh: $tool is required (apt-get install build-essential)" >&2
    echo "c-tests: 0 passed, 1 failed"
    exit 1
  fi
done

apt_updated=0
# want TOOL PACKAGE: succeeds if TOOL is (or could be made) available.
want() {
  command -v "$1" >/dev/null && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing $2 with apt-get"
    if [ $apt_updated = 0 ]; then apt-get update -qq >/dev/null 2>&1 || true; apt_updated=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null 2>&1 || true
  fi
  command -v "$1" >/dev/null
}

cleanup=()
on_exit() { for c in "${cleanup[@]}"; do eval "$c"; done; }
trap on_exit EXIT

echo "== redis-server for the Redis tests (a free loopback port, no persistence)"
redis_pid=
redis_tmp=$(mktemp -d)
cleanup+=('[ -z "$redis_pid" ] || { kill -CONT "$redis_pid"; kill -KILL "$redis_pid"; wait "$redis_pid"; } 2>/dev/null; rm -rf "$redis_tmp"')
# start_redis: a server of ours on a random free port (a port another server holds is
# detected by the pid the server reports); every wait bounded.
start_redis() {
  local try port i
  for try in 1 2 3 4 5 6 7 8; do
    port=$((20000 + RANDOM % 40000))
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$redis_tmp" \
      >"$redis_tmp/log" 2>&1 &
    redis_pid=$!
    for i in $(seq 100); do
      kill -0 "$redis_pid" 2>/dev/null || break
      if redis-cli -p "$port" info server 2>/dev/null | grep -q "^process_id:$redis_pid"; then
        export SG_REDIS_URL="redis://127.0.0.1:$port/0" SG_REDIS_PID="$redis_pid"
        echo "redis-server $(redis-server --version | grep -o 'v=[^ ]*') on port $port (pid $redis_pid)"
        return 0
      fi
      sleep 0.05
    done
    kill -KILL "$redis_pid" 2>/dev/null
    wait "$redis_pid" 2>/dev/null
    redis_pid=
  done
  return 1
}
if want redis-server redis-server && command -v redis-cli >/dev/null; then
  # Debian's package starts a system service: stop it (the tests use their own server).
  if command -v systemctl >/dev/null; then systemctl stop redis-server >/dev/null 2>&1 || true; fi
  if command -v service >/dev/null; then service redis-server stop >/dev/null 2>&1 || true; fi
  start_redis || { missing "redis-server (it did not start: $(tail -n 3 "$redis_tmp/log"))"; }
else
  missing "redis-server (not installed, and cannot apt-get install it without root): test_redis checks only what needs no server"
fi

M="make --no-print-directory -s -C bindings-c"
OUT=target/c
VECTORS=conformance/vectors.json

echo "== header drift (pinned cbindgen)"
run "include/sluicegate.h matches its sources" bash ci/header.sh --check

echo "== the README's C quickstart is examples/quickstart.c"
readme_snippet() { awk '/^```c$/ { on = 1; next } on && /^```$/ { exit } on' bindings-c/README.md; }
run "README quickstart == examples/quickstart.c" \
  cmp -s <(readme_snippet) bindings-c/examples/quickstart.c
# A block opened with "```c examples/FILE.c" (or tests/FILE.c) is a run of consecutive lines
# of that file (indentation aside), which the tests compile and run.
readme_fragments() {
  awk '
    function strip(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
    function found(file, n,   m, line, i, j) {
      m = 0
      while ((getline line < file) > 0) ex[++m] = strip(line)
      close(file)
      for (i = 0; i + n <= m; i++) {
        for (j = 1; j <= n && ex[i + j] == blk[j]; j++) {}
        if (j > n) return 1
      }
      return 0
    }
    /^```c (examples|tests)\/[a-z_]+\.c$/ { file = "bindings-c/" $2; n = 0; on = 1; next }
    on && /^```$/ {
      on = 0; checked++
      if (!found(file, n)) { print "README: a block is not in " file > "/dev/stderr"; bad++ }
      next
    }
    on { blk[++n] = strip($0) }
    END { print checked + 0 " README blocks checked against their examples"; exit (checked < 2 || bad) }
  ' bindings-c/README.md
}
run "README blocks marked with an example are in it" readme_fragments

echo "== the conformance vectors through Redis on the test clock (the test-clock library)"
# Built first: `make tests` below rebuilds the published library from the same cargo output.
if [ -n "$redis_pid" ]; then
  if $M test-clock; then
    run "test-clock test_conformance (memory, region and Redis, bit for bit)" \
      env SG_TEST_CLOCK_REDIS_URL="$SG_REDIS_URL" "$OUT/test-clock/test_conformance" "$VECTORS"
  else
    bad "test-clock build"
  fi
else
  missing "the conformance vectors through Redis (no redis-server)"
fi

echo "== build libsluicegate and the C tests (-std=c11 -Wall -Wextra -Wpedantic -Werror)"
if ! $M tests; then
  bad "build"
  echo "c-tests: $passed passed, $failed failed"
  exit 1
fi
tests=$(cd bindings-c/tests && ls test_*.c | sed 's/\.c$//')

echo "== C tests, plain"
for t in $tests quickstart; do run "plain $t" "$OUT/plain/$t" "$VECTORS"; done
run "plain prefork (4 workers forked on one region)" "$OUT/plain/prefork"
if [ -n "$redis_pid" ]; then
  run "plain prefork on Redis (4 workers forked, one key on the server)" \
    "$OUT/plain/prefork" "$SG_REDIS_URL?prefix=prefork-plain-$$&on_error=error"
fi
run "static quickstart (libsluicegate.a)" "$OUT/static/quickstart"

echo "== C tests, AddressSanitizer + UndefinedBehaviorSanitizer"
if $M asan; then
  for t in $tests quickstart; do run "asan $t" "$OUT/asan/$t" "$VECTORS"; done
  run "asan prefork" "$OUT/asan/prefork"
  [ -z "$redis_pid" ] || run "asan prefork on Redis" "$OUT/asan/prefork" "$SG_REDIS_URL?prefix=prefork-asan-$$&on_error=error"
else
  bad "asan build"
fi

echo "== C tests, valgrind (definite and indirect leaks fail)"
if want valgrind valgrind; then
  for t in $tests quickstart prefork; do
    # --fair-sched=yes: valgrind runs one thread at a time, and by default a thread spinning in
    # a decision loop could keep the main thread (asleep until it sets `stop`) waiting minutes
    # for its turn (test_stress: 3 s or 350 s from run to run).
    # --child-silent-after-fork=yes: a child made by fork() reports through the test's own
    # checks (test_redis's child finds the parent's Redis thread's memory unreachable).
    run "valgrind $t" valgrind --quiet --fair-sched=yes --child-silent-after-fork=yes --error-exitcode=1 --leak-check=full \
      --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect \
      "$OUT/plain/$t" $([ "$t" = prefork ] || echo "$VECTORS")
  done
else
  missing "valgrind (not installed, and cannot apt-get install it without root)"
fi

echo "== make install PREFIX=... and a program built with pkg-config"
prefix=$(mktemp -d)
cleanup+=('rm -rf "$prefix"')
install_check() {
  $M install PREFIX="$prefix" >/dev/null || return 1
  local cflags libs
  if command -v pkg-config >/dev/null; then
    cflags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags sluicegate) || return 1
    libs=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --libs sluicegate) || return 1
  else
    echo "(pkg-config missing: using the flags sluicegate.pc would give)"
    cflags="-I$prefix/include"
    libs="-L$prefix/lib -lsluicegate"
  fi
  # shellcheck disable=SC2086
  cc -std=c11 -Wall -Wextra -Wpedantic -Werror $cflags -o "$prefix/quickstart" \
    bindings-c/examples/quickstart.c $libs -Wl,-rpath,"$prefix/lib" &&
    "$prefix/quickstart" >/dev/null
}
run "install + pkg-config quickstart" install_check

echo "== LuaJIT examples (OpenResty-style handler through the FFI; pre-forked workers on one region)"
if want luajit luajit; then
  run "luajit handler" $M lua
  run "luajit pre-forked workers (shm store: the limit for all of them)" $M lua-workers
else
  missing "LuaJIT example (luajit not installed, and cannot apt-get install it without root)"
fi

for s in "${not_run[@]}"; do echo "NOT RUN (a failure under CI=true): $s"; done
echo "c-tests: $passed passed, $failed failed"
[ "$failed" = 0 ]
