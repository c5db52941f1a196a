#!/usr/bin/env bash
# Python bindings: build the extension into a private venv, check the stubs, run pytest.
# Needs only the Rust toolchain and Python 3 (3.10+); the venv lives in target/ (ignored).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
VENV=target/venv-python
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r bindings-python/requirements-dev.txt
# Builds with maturin (release profile) through pip, as a user's `pip install ./bindings-python` would.
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps ./bindings-python
cd bindings-python
# Run from the tests' own folder so `import sluicegate` is the installed package, not python/.
"../$VENV/bin/python" -m mypy.stubtest sluicegate._native sluicegate._aio
set +e
"../$VENV/bin/python" -m pytest -q -p no:cacheprovider tests
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
