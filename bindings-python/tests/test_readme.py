"""Runs every ```python block of bindings-python/README.md and of the repository README
(blocks that only show a layout are exec'd too; each runs in a fresh namespace). A block's
shared-memory regions (``"shm:/NAME"``, files of /dev/shm) are made in a private temporary
directory instead, removed afterwards; its Redis server (``redis://127.0.0.1:6379``) is the
one the tests start.

A Django or DRF block is a project in two files, ``# settings.py`` then ``# views.py``: its
settings are applied over the tests' (every ``sluicegate.*`` dotted path in them must
import), its views are served by a URLconf of their own (one path per view, by its name),
and requests through Django's or DRF's test client must get what the block promises, a 429
once a limit is spent."""

from __future__ import annotations

import inspect
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from django.urls import path
from django.utils.module_loading import import_string

README = Path(__file__).resolve().parents[1] / "README.md"
ROOT_README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
# The repository README's Python quickstart runs too.
REDIS = "redis://127.0.0.1:6379"
BLOCKS += re.findall(r"```python\n(.*?)```", ROOT_README.read_text(), flags=re.S)


def test_there_are_snippets() -> None:
    assert len(BLOCKS) >= 6
    # The Django and the DRF block are run as projects.
    assert sum("# settings.py" in b and "# views.py" in b for b in BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_snippet(index: int, capsys: pytest.CaptureFixture[str], regions: Path, request: pytest.FixtureRequest) -> None:
    code = BLOCKS[index]
    code = code.replace('"shm:/', f'"shm:{regions}/')
    if REDIS in code:
        code = code.replace(REDIS, request.getfixturevalue("redis_server").url)
    if "# settings.py" in code:
        run_django_project(code, index)
        return
    exec(compile(code, f"README block {index}", "exec"), {"__name__": f"readme_{index}"})
    out = capsys.readouterr().out
    # Printed values the README states in comments must match what the code printed.
    for line in code.splitlines():
        m = re.match(r"\s*print\(.*\)\s+#\s*(.+)$", line)
        if m and "..." not in m.group(1):
            assert m.group(1).strip() in out, (m.group(1), out)


def run_django_project(code: str, index: int) -> None:
    settings_part, marker, views_part = code.partition("# views.py")
    assert marker, f"README block {index}: a settings block goes with its views (# views.py)"
    conf: dict[str, Any] = {}
    exec(compile(settings_part, f"README block {index} (settings.py)", "exec"), conf)
    overrides = {name: value for name, value in conf.items() if name.isupper()}
    dotted = list(sluicegate_paths(overrides))
    assert dotted, "the block names sluicegate's middleware or throttle classes"
    for name in dotted:
        import_string(name)
    drf = "REST_FRAMEWORK" in overrides
    if drf:
        # The tests' Django has no auth app: anonymous requests have no user, as in test_drf.py.
        overrides["REST_FRAMEWORK"] = {**overrides["REST_FRAMEWORK"], "UNAUTHENTICATED_USER": None}
    with views_module(views_part, index) as views, override_settings(ROOT_URLCONF=views.__name__, **overrides):
        if drf:
            drive_drf(views, overrides["REST_FRAMEWORK"])
        else:
            drive_django()


def sluicegate_paths(value: Any) -> Iterator[str]:
    """The ``sluicegate.*`` dotted paths among the settings' values."""
    if isinstance(value, str):
        if value.startswith("sluicegate."):
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from sluicegate_paths(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from sluicegate_paths(v)


class views_module:  # noqa: N801  (used as a context manager, like a function)
    """The views part as an importable module, with a URLconf: a path per view function and
    per DRF view class, by name."""

    def __init__(self, code: str, index: int) -> None:
        self.module = types.ModuleType(f"readme_{index}_views")
        self.code = compile(code, f"README block {index} (views.py)", "exec")

    def __enter__(self) -> types.ModuleType:
        sys.modules[self.module.__name__] = self.module
        exec(self.code, self.module.__dict__)
        from rest_framework.views import APIView

        patterns = []
        for name, value in list(vars(self.module).items()):
            if getattr(value, "__module__", None) != self.module.__name__:
                continue
            if inspect.isclass(value) and issubclass(value, APIView):
                patterns.append(path(name, value.as_view()))
            elif inspect.isfunction(value):
                patterns.append(path(name, value))
        self.module.urlpatterns = patterns  # type: ignore[attr-defined]
        return self.module

    def __exit__(self, *exc: object) -> None:
        del sys.modules[self.module.__name__]


def until_rejected(send: Any, most: int = 60) -> list[int]:
    """The statuses of up to `most` requests, up to the first 429."""
    statuses: list[int] = []
    while len(statuses) < most and 429 not in statuses:
        statuses.append(send())
    return statuses


def drive_django() -> None:
    from django.test import Client

    client = Client()
    first = client.get("/search")
    assert first.status_code == 200 and first["RateLimit"].startswith('"default";r=19;')
    # "10/s; burst=20": the burst, then a 429 (10 requests a second are far slower than these).
    statuses = [first.status_code, *until_rejected(lambda: client.get("/search").status_code)]
    assert statuses[:20] == [200] * 20 and statuses[-1] == 429, statuses
    # The exempt view: no limit, not even the middleware's default one.
    health = [client.get("/health") for _ in range(120)]
    assert {r.status_code for r in health} == {200} and not health[-1].has_header("RateLimit")


def drive_drf(views: types.ModuleType, rest_framework: dict[str, Any]) -> None:
    from rest_framework.response import Response
    from rest_framework.test import APIClient
    from rest_framework.views import APIView

    # DRF binds DEFAULT_THROTTLE_CLASSES when rest_framework.views is imported (the tests' own
    # settings did that): a view with the block's defaults, as DRF would have made it.
    class Plain(APIView):  # type: ignore[misc]
        throttle_classes = [import_string(name) for name in rest_framework["DEFAULT_THROTTLE_CLASSES"]]

        def get(self, request: Any) -> Response:
            return Response("ok")

    views.urlpatterns.append(path("plain", Plain.as_view()))  # type: ignore[attr-defined]

    client = APIClient()
    # "uploads": "5/minute", failed uploads free: ten failures, then five uploads, then 429s.
    assert [client.post("/Upload", {}).status_code for _ in range(10)] == [400] * 10
    assert [client.post("/Upload", {"name": f"f{i}"}).status_code for i in range(5)] == [201] * 5
    assert client.post("/Upload", {"name": "f5"}).status_code == 429
    assert client.post("/Upload", {}).status_code == 429
    # An anonymous client counts in "anon" (100/day) and "user" (10/s; burst=20, by client):
    # the user throttle's burst, then a 429.
    statuses = until_rejected(lambda: client.get("/plain").status_code)
    assert statuses[:20] == [200] * 20 and statuses[-1] == 429, statuses
