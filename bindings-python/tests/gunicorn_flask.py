"""A Flask app for test_servers.py, served by gunicorn: ``gunicorn -w 4 gunicorn_flask:app``.

The store comes from the environment (SLUICEGATE_TEST_STORE). Every response names the
worker that served it (X-Worker) and the process that imported this module (X-Imported-In:
the master under ``--preload``, the worker otherwise), where the limits' regions were opened.
Every request takes 20 ms (before the limit is asked), so that concurrent clients keep every
worker busy and gunicorn spreads the requests evenly.
"""

from __future__ import annotations

import os
import time

from flask import Flask, Response

from sluicegate import KeyedLimiter
from sluicegate.flask import Sluicegate

IMPORTED_IN = os.getpid()

app = Flask(__name__)


@app.before_request
def service_time() -> None:
    time.sleep(0.02)


app.config["SLUICEGATE_STORAGE"] = os.environ["SLUICEGATE_TEST_STORE"]
limiter = Sluicegate(app)


@app.get("/limited")
@limiter.limit("10/minute")
def limited() -> str:
    return "ok"


@app.get("/ready")
@limiter.exempt
def ready() -> str:
    return "ready"


#: A limiter of the plain API made at import, as a module-level global: under ``--preload`` in
#: the master, before the fork (on Redis, under a prefix of its own).
STORE = os.environ["SLUICEGATE_TEST_STORE"]
RAW = KeyedLimiter("10/minute", store=STORE.replace("prefix=", "prefix=raw")) if STORE.startswith("redis") else None


@app.get("/raw")
@limiter.exempt
def raw() -> tuple[str, int]:
    assert RAW is not None
    return ("ok", 200) if RAW.try_acquire("client") else ("limited", 429)


@app.after_request
def who(response: Response) -> Response:
    response.headers["X-Worker"] = str(os.getpid())
    response.headers["X-Imported-In"] = str(IMPORTED_IN)
    return response
