"""Django settings for test_django.py (configured once, only if Django is installed), a
private directory for shared-memory regions, and redis-server processes (tests/redis_server.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_server import RedisServer

try:
    import django
    from django.conf import settings
except ImportError:  # pragma: no cover - Django is in requirements-dev.txt
    django = None

if django is not None and not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="tests",
        ALLOWED_HOSTS=["testserver"],
        ROOT_URLCONF="django_app",
        MIDDLEWARE=[
            "django_app.FakeAuthMiddleware",
            "sluicegate.django.RateLimitMiddleware",
        ],
        INSTALLED_APPS=[],
        DATABASES={},
        SLUICEGATE={"DEFAULT_LIMITS": ["2/minute"]},
        # For test_drf.py (DRF reads a view's default throttle classes when it defines it).
        REST_FRAMEWORK={"DEFAULT_THROTTLE_CLASSES": ["sluicegate.drf.AnonRateThrottle"]},
    )
    django.setup()


@pytest.fixture
def regions() -> Iterator[Path]:
    """A private temporary directory (mode 0700) for shared-memory regions: ``shm:`` and a
    path in it is a region there. Removed afterwards, with every region made in it."""
    path = Path(tempfile.mkdtemp(prefix="sluicegate-regions-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def start_redis() -> RedisServer:
    """A new redis-server, or a test failure (never a skip) when there is none."""
    try:
        return RedisServer()
    except RuntimeError as e:
        pytest.fail(f"{e}: ci/check.d/20-python.sh installs Debian's redis-server")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One redis-server for the whole session (tests keep apart by key prefix); stopped at
    its end."""
    server = start_redis()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of the test's own, which it may pause, kill and restart; stopped after
    it."""
    server = start_redis()
    try:
        yield server
    finally:
        server.stop()
