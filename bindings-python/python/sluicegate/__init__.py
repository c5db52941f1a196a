"""sluicegate: lock-free, exact rate limiting at native speed.

Every decision comes from the Rust core (one atomic word per bucket, exact integer
arithmetic); this package converts arguments and maps errors. Framework integrations live in
``sluicegate.flask``, ``sluicegate.django``, ``sluicegate.starlette`` (Starlette and FastAPI)
and ``sluicegate.drf`` (Django REST framework) and import their framework lazily.
"""

from sluicegate._native import (
    CENTURY_NS,
    DEFAULT_MAX_KEYS,
    ClientResolver,
    ClockOutOfRange,
    Composite,
    Decision,
    Error,
    InsufficientCapacity,
    InvalidOptionError,
    InvalidQuotaError,
    KeyedLimiter,
    KeyStoreFull,
    Limiter,
    ManualClock,
    Metrics,
    Quota,
    RateLimited,
    Rejection,
    Reservation,
    StoreError,
    __version__,
    render_prometheus,
)

#: The base exception, under the name STYLE.md uses.
SluicegateError = Error

__all__ = [
    "CENTURY_NS",
    "ClientResolver",
    "ClockOutOfRange",
    "Composite",
    "DEFAULT_MAX_KEYS",
    "Decision",
    "Error",
    "InsufficientCapacity",
    "InvalidOptionError",
    "InvalidQuotaError",
    "KeyStoreFull",
    "KeyedLimiter",
    "Limiter",
    "ManualClock",
    "Metrics",
    "Quota",
    "RateLimited",
    "Rejection",
    "Reservation",
    "SluicegateError",
    "StoreError",
    "__version__",
    "render_prometheus",
]
