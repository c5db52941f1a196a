"""Runs every ```python block of bindings-python/README.md and of the repository README
(settings-only Django blocks and
blocks that only show a layout are exec'd too; each runs in a fresh namespace). A block's
shared-memory regions (``"shm:/NAME"``, files of /dev/shm) are made in a private temporary
directory instead, removed afterwards; its Redis server (``redis://127.0.0.1:6379``) is the
one the tests start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
ROOT_README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
# The repository README's Python quickstart runs too.
REDIS = "redis://127.0.0.1:6379"
BLOCKS += re.findall(r"```python\n(.*?)```", ROOT_README.read_text(), flags=re.S)


def test_there_are_snippets() -> None:
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_snippet(index: int, capsys: pytest.CaptureFixture[str], regions: Path, request: pytest.FixtureRequest) -> None:
    code = BLOCKS[index]
    if "# settings.py" in code:
        # The Django block is a settings file plus views; check it compiles, and that its
        # decorators and middleware path exist.
        compile(code, f"README block {index}", "exec")
        import sluicegate.django as dj

        assert dj.RateLimitMiddleware and dj.ratelimit and dj.exempt
        return
    code = code.replace('"shm:/', f'"shm:{regions}/')
    if REDIS in code:
        code = code.replace(REDIS, request.getfixturevalue("redis_server").url)
    exec(compile(code, f"README block {index}", "exec"), {"__name__": f"readme_{index}"})
    out = capsys.readouterr().out
    # Printed values the README states in comments must match what the code printed.
    for line in code.splitlines():
        m = re.match(r"\s*print\(.*\)\s+#\s*(.+)$", line)
        if m and "..." not in m.group(1):
            assert m.group(1).strip() in out, (m.group(1), out)
