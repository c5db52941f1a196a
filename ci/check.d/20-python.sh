#!/usr/bin/env bash
# Python bindings: build the extension into a private venv, check the stubs, run pytest.
# Needs the Rust toolchain, Python 3 (3.10+), Debian's redis-server (the Redis tests start
# their own servers) and the openssl command (a TLS server's certificates): installed here with
# apt-get when missing and this runs as root; the tests fail without them, never skip. The
# venv lives in target/ (ignored).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
VENV=target/venv-python
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
  echo "FAIL: the Python tests need redis-server, redis-cli and openssl (apt-get install redis-server openssl, as root)" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r bindings-python/requirements-dev.txt
# Builds with maturin (release profile) through pip, as a user's `pip install ./bindings-python`
# would, plus the cargo feature redis-test-clock: `?clock=test` lets the conformance vectors
# run bit for bit through a real server. The released wheel is built without it
# (pyproject.toml), so that no installed build sends client timestamps; tests/test_redis.py
# checks both.
MATURIN_PEP517_ARGS="--features redis-test-clock" \
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps ./bindings-python
cd bindings-python
# Run from the tests' own folder so `import sluicegate` is the installed package, not python/.
"../$VENV/bin/python" -m mypy.stubtest sluicegate._native sluicegate._aio
# The package's own sources, strict (pyproject.toml's [tool.mypy]).
"../$VENV/bin/python" -m mypy
set +e
"../$VENV/bin/python" -m pytest -q -p no:cacheprovider tests
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
