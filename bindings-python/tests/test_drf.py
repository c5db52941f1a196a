"""The DRF throttle classes, through DRF's APIClient and settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import drf_app  # noqa: F401  (DRF's views read the default throttle classes now: conftest.py's)
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from redis_server import RedisServer
from rest_framework.test import APIClient
from test_redis import url

from sluicegate import Quota
from sluicegate._web import region_suffix
from sluicegate.drf import AnonRateThrottle, SluicegateThrottle, _rules

RATES = {"anon": "1/minute; burst=2", "user": "1/minute; burst=3", "uploads": "1/h; burst=1", "contacts": "1/h; burst=2"}


def settings(store: str = "memory", **more: object) -> override_settings:
    return override_settings(
        ROOT_URLCONF="drf_app",
        MIDDLEWARE=[],
        REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": RATES, "UNAUTHENTICATED_USER": None, **more},
        SLUICEGATE={"STORAGE": store},
    )


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    """Each test starts with no limiter (the process-wide ones are made at first use)."""
    _rules.clear()
    yield
    _rules.clear()


def statuses(client: APIClient, path: str, n: int, **extra: str) -> list[int]:
    return [client.get(path, **extra).status_code for _ in range(n)]


def test_anon_throttle_with_retry_after() -> None:
    with settings():
        client = APIClient()
        assert statuses(client, "/anon", 2) == [200, 200]
        rejected = client.get("/anon")
        assert rejected.status_code == 429
        assert rejected["Retry-After"] == "60"
        assert rejected.json() == {"detail": "Request was throttled. Expected available in 60 seconds."}
        # Authenticated requests are not its business; another client has its own bucket.
        assert statuses(client, "/anon", 3, HTTP_X_USER="ann") == [200] * 3
        assert client.get("/anon", REMOTE_ADDR="10.0.0.2").status_code == 200


def test_a_forged_forwarded_for_does_not_change_the_key() -> None:
    """DRF's own get_ident keys by the whole X-Forwarded-For header when NUM_PROXIES is unset:
    a client picks a fresh key per request. Ours keys by the peer."""
    with settings():
        client = APIClient()
        # The test client's peer is 127.0.0.1: the header it carries is warned about, once.
        with pytest.warns(UserWarning, match="untrusted_proxy"):
            forged = [client.get("/anon", HTTP_X_FORWARDED_FOR=f"1.2.3.{i}").status_code for i in range(3)]
        assert forged == [200, 200, 429]


def test_user_throttle_by_user_and_by_client() -> None:
    with settings():
        client = APIClient()
        assert statuses(client, "/user", 4, HTTP_X_USER="ann") == [200, 200, 200, 429]
        assert statuses(client, "/user", 4, HTTP_X_USER="bob") == [200, 200, 200, 429]
        assert statuses(client, "/user", 4) == [200, 200, 200, 429]


def test_the_longest_wait_of_several_throttles() -> None:
    with settings():
        client = APIClient()
        # Anonymous: anon (burst 2) rejects the third; user (burst 3) the fourth.
        assert statuses(client, "/both", 4) == [200, 200, 429, 429]
        assert client.get("/both")["Retry-After"] == "60"


def test_scoped_throttle_counts_each_scope() -> None:
    with settings():
        client = APIClient()
        assert statuses(client, "/uploads", 2) == [200, 429]
        assert client.get("/uploads")["Retry-After"] == "3600"
        assert statuses(client, "/contacts", 3) == [200, 200, 429]
        assert statuses(client, "/unscoped", 5) == [200] * 5


def test_a_throttle_with_a_rate_and_a_key_of_its_own() -> None:
    with settings():
        client = APIClient()
        assert statuses(client, "/keyed", 3, HTTP_X_API_KEY="k") == [200, 200, 429]
        assert statuses(client, "/keyed", 3) == [200, 200, 200]  # no key: not throttled


def test_default_throttle_classes_and_the_off_switch() -> None:
    """The view without throttle_classes has conftest.py's DEFAULT_THROTTLE_CLASSES."""
    with settings():
        assert statuses(APIClient(), "/defaults", 3) == [200, 200, 429]
    _rules.clear()
    with settings(), override_settings(SLUICEGATE={"ENABLED": False}):
        assert statuses(APIClient(), "/defaults", 5) == [200] * 5


def test_one_limiter_per_scope_and_rate() -> None:
    with settings():
        client = APIClient()
        client.get("/anon")
        client.get("/both")
        client.get("/user")
        assert sorted((s, str(q)) for s, q in _rules) == [("anon", "1/m; burst=2"), ("user", "1/m; burst=3")]
        # A new rate for a scope is a new limiter.
    with settings() as _, override_settings(
        REST_FRAMEWORK={"DEFAULT_THROTTLE_RATES": {**RATES, "anon": "5/minute"}, "UNAUTHENTICATED_USER": None}
    ):
        assert statuses(APIClient(), "/anon", 6) == [200] * 5 + [429]


def test_misconfiguration() -> None:
    with settings():

        class NoScope(SluicegateThrottle):
            def get_cache_key(self, request: object, view: object) -> None:
                return None

        with pytest.raises(ImproperlyConfigured, match="scope"):
            NoScope()

        class Unknown(AnonRateThrottle):
            scope = "nope"

        with pytest.raises(ImproperlyConfigured, match="'nope'"):
            Unknown()


def test_the_shm_store(regions: Path) -> None:
    with settings(store=f"shm:{regions}/drf"):
        assert statuses(APIClient(), "/anon", 3) == [200, 200, 429]
    assert (regions / f"drf.{region_suffix(Quota(RATES['anon']), 'drf:anon')}").exists()


def test_the_redis_store(redis_server: RedisServer) -> None:
    with settings(store=url(redis_server, on_error="error")):
        client = APIClient()
        assert statuses(client, "/anon", 3) == [200, 200, 429]
        assert statuses(client, "/uploads", 2) == [200, 429]
