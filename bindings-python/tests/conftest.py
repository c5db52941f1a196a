"""Django settings for test_django.py (configured once, only if Django is installed), and a
private directory for shared-memory regions."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

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
