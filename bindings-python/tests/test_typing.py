"""The package's types as a user's ``mypy --strict`` sees them: typing_user.py, a small app of
every integration, type-checks with the package's own mypy settings (pyproject.toml: strict,
Django and DRF untyped). The sources' own strict check is CI's ``mypy`` step; this is the
user's side (the stubs of the native module, the decorators' signatures, what must not
type-check, by ``type: ignore`` comments that strict mypy reports when unused)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_a_users_app_type_checks_strictly(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable, "-m", "mypy", "--config-file", str(HERE.parent / "pyproject.toml"),
            "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", str(HERE / "typing_user.py"),
        ],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
