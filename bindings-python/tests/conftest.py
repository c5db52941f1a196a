"""Django settings for test_django.py (configured once, only if Django is installed)."""

from __future__ import annotations

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
