"""The Flask extension, through the test client and through a real server on 127.0.0.1."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

flask = pytest.importorskip("flask")
from werkzeug.serving import make_server  # noqa: E402

import sluicegate  # noqa: E402
from sluicegate.flask import Sluicegate, header, key_func, remote_address, user  # noqa: E402


def make_app(**config: object) -> tuple[flask.Flask, Sluicegate]:
    app = flask.Flask(__name__)
    app.config.update(config)
    limiter = Sluicegate()

    @app.get("/default")
    def default() -> str:
        return "default"

    @app.get("/other")
    def other() -> str:
        return "other"

    @app.get("/limited")
    @limiter.limit("1/minute; burst=2", key=header("X-Api-Key"))
    def limited() -> str:
        return "limited"

    @app.get("/two")
    @limiter.limit(["100/s; burst=5", "1/minute; burst=3"], policy="two")
    def two() -> str:
        return "two"

    @app.get("/heavy")
    @limiter.limit("10/minute", cost=lambda req: int(req.args.get("n", "1")))
    def heavy() -> str:
        return "heavy"

    @app.get("/free")
    @limiter.exempt
    def free() -> str:
        return "free"

    @app.get("/raise")
    def raises() -> str:
        l = sluicegate.Limiter("1/h; burst=1")
        l.try_acquire()
        raise sluicegate.RateLimited(l.try_acquire())

    @app.get("/me")
    @limiter.limit("1/minute", key="user")
    def me() -> str:
        return "me"

    @app.before_request
    def login() -> None:
        name = flask.request.headers.get("X-User")
        if name:
            flask.g.user = type("User", (), {"id": name})()

    limiter.init_app(app)
    return app, limiter


def test_default_limits_per_view_and_headers() -> None:
    app, _ = make_app(SLUICEGATE_DEFAULT_LIMITS=["2/minute"])
    client = app.test_client()
    first = client.get("/default")
    assert first.status_code == 200
    assert first.headers["RateLimit-Policy"] == '"default";q=2;w=60'
    assert first.headers["RateLimit"] == '"default";r=1;t=30'
    assert client.get("/default").status_code == 200
    denied = client.get("/default")
    assert denied.status_code == 429
    assert denied.headers["Retry-After"] == "30"
    assert denied.headers["RateLimit"] == '"default";r=0;t=30'
    assert "retry after 30 s" in denied.get_data(as_text=True)
    # Default limits count each view separately.
    assert client.get("/other").status_code == 200
    # Another client address has its own bucket.
    assert client.get("/default", environ_base={"REMOTE_ADDR": "10.0.0.2"}).status_code == 200


def test_decorated_limit_with_header_key() -> None:
    app, _ = make_app(SLUICEGATE_DEFAULT_LIMITS=["1/minute"])
    client = app.test_client()
    for _ in range(2):
        assert client.get("/limited", headers={"X-Api-Key": "a"}).status_code == 200
    assert client.get("/limited", headers={"X-Api-Key": "a"}).status_code == 429
    assert client.get("/limited", headers={"X-Api-Key": "b"}).status_code == 200
    # Without the header, the key falls back to the client address.
    assert client.get("/limited").status_code == 200


def test_header_key_reads_the_request_it_is_handed() -> None:
    # Key functions get the request itself (the extension passes it); the header key reads
    # that one, so it also works outside a request context (a key computed for an admin tool).
    class Req:
        headers = {"X-Api-Key": "k"}

    assert header("X-Api-Key")(Req()) == "X-Api-Key:k"


def test_blueprints_and_class_based_views() -> None:
    """``limit``/``exempt`` on a blueprint, on a MethodView class and on its handlers: each
    applies where the view has no limit of its own, counted per view."""
    from flask.views import MethodView

    from sluicegate._web import view_name

    app = flask.Flask(__name__)
    app.config["SLUICEGATE_DEFAULT_LIMITS"] = ["1/minute; burst=5"]
    limiter = Sluicegate(app)
    api = flask.Blueprint("api", __name__, url_prefix="/api")
    inner = flask.Blueprint("inner", __name__, url_prefix="/inner")
    free = flask.Blueprint("free", __name__, url_prefix="/free")
    limiter.limit("1/minute; burst=2")(api)
    limiter.exempt(free)

    @api.get("/a")
    def a() -> str:
        return "a"

    @api.get("/b")
    def b() -> str:
        return "b"

    @api.get("/own")
    @limiter.limit("1/minute; burst=1")
    def own() -> str:
        return "own"

    @inner.get("/c")
    def c() -> str:
        return "c"

    @free.get("/d")
    def d() -> str:
        return "d"

    @limiter.limit("1/minute; burst=3")
    class Items(MethodView):
        def get(self) -> str:
            return "items"

        @limiter.limit("1/minute; burst=1")
        def post(self) -> str:
            return "posted"

    class Listed(MethodView):
        decorators = [limiter.limit("1/minute; burst=1")]

        def get(self) -> str:
            return "listed"

    api.register_blueprint(inner)
    app.register_blueprint(api)
    app.register_blueprint(free)
    app.add_url_rule("/items", view_func=Items.as_view("items"))
    app.add_url_rule("/one", view_func=Listed.as_view("one"))
    app.add_url_rule("/two", view_func=Listed.as_view("two"))
    client = app.test_client()
    # The blueprint's limit, per view; a view's own limit first; nested blueprints inherit.
    assert [client.get("/api/a").status_code for _ in range(3)] == [200, 200, 429]
    assert [client.get("/api/b").status_code for _ in range(3)] == [200, 200, 429]
    assert [client.get("/api/own").status_code for _ in range(2)] == [200, 429]
    assert [client.get("/api/inner/c").status_code for _ in range(3)] == [200, 200, 429]
    assert [client.get("/free/d").status_code for _ in range(7)] == [200] * 7
    # The class's limit for GET (HEAD too), the handler's own for POST.
    assert [client.get("/items").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert [client.post("/items").status_code for _ in range(2)] == [200, 429]
    # `decorators = [...]`: one limit per registration, each with a name of its own.
    assert [client.get(p).status_code for p in ("/one", "/one", "/two")] == [200, 429, 200]
    one, two = app.view_functions["one"], app.view_functions["two"]
    assert view_name(Items.as_view("x")).endswith("Items.as_view")
    assert one.__sluicegate_limits__[0].scope != two.__sluicegate_limits__[0].scope
    with app.app_context():
        assert limiter.get("127.0.0.1", "api.a").remaining == 0  # type: ignore[union-attr]
        assert limiter.reset("127.0.0.1", "api.a") == 1


def test_several_limits_must_all_admit_and_rejections_cost_nothing() -> None:
    app, _ = make_app()
    client = app.test_client()
    for i in range(3):
        r = client.get("/two")
        assert r.status_code == 200, i
        assert r.headers["RateLimit-Policy"].startswith('"two";')
    r = client.get("/two")
    assert r.status_code == 429 and r.headers["RateLimit-Policy"] == '"two";q=3;w=180'


def test_cost_function_and_exempt() -> None:
    app, _ = make_app(SLUICEGATE_DEFAULT_LIMITS="1/hour")
    client = app.test_client()
    assert client.get("/heavy?n=7").status_code == 200
    assert client.get("/heavy?n=4").status_code == 429
    assert client.get("/heavy?n=3").status_code == 200
    for _ in range(5):
        r = client.get("/free")
        assert r.status_code == 200 and "RateLimit" not in r.headers


def test_raised_rate_limited_becomes_429() -> None:
    app, _ = make_app()
    r = app.test_client().get("/raise")
    assert r.status_code == 429 and r.headers["Retry-After"] == "3600"


def test_logged_in_user_key() -> None:
    app, _ = make_app()
    client = app.test_client()
    assert client.get("/me", headers={"X-User": "ann"}).status_code == 200
    assert client.get("/me", headers={"X-User": "ann"}).status_code == 429
    assert client.get("/me", headers={"X-User": "bob"}).status_code == 200
    assert client.get("/me").status_code == 200  # anonymous: by address


def test_configuration() -> None:
    app, _ = make_app(
        SLUICEGATE_DEFAULT_LIMITS=["1/minute"],
        SLUICEGATE_HEADERS="legacy",
        SLUICEGATE_HEADERS_ON_ALLOWED=False,
        SLUICEGATE_KEY_FUNC="header:X-Tenant",
    )
    client = app.test_client()
    ok = client.get("/default", headers={"X-Tenant": "t1"})
    assert ok.status_code == 200 and "X-RateLimit-Limit" not in ok.headers
    before = time.time()
    denied = client.get("/default", headers={"X-Tenant": "t1"})
    assert denied.status_code == 429 and denied.headers["X-RateLimit-Limit"] == "1"
    # X-RateLimit-Reset is a Unix time, as flask-limiter sends it (not 60).
    assert before + 59 <= int(denied.headers["X-RateLimit-Reset"]) <= time.time() + 61
    assert "RateLimit" not in denied.headers
    assert client.get("/default", headers={"X-Tenant": "t2"}).status_code == 200
    off, _ = make_app(SLUICEGATE_DEFAULT_LIMITS=["1/minute"], SLUICEGATE_ENABLED=False)
    assert all(off.test_client().get("/default").status_code == 200 for _ in range(3))
    draft7, _ = make_app(SLUICEGATE_DEFAULT_LIMITS=["5/minute"], SLUICEGATE_HEADERS="draft7", SLUICEGATE_POLICY="p")
    assert draft7.test_client().get("/default").headers["RateLimit"] == "limit=5, remaining=4, reset=12"


def test_bad_configuration() -> None:
    with pytest.raises(sluicegate.InvalidOptionError, match="style"):
        make_app(SLUICEGATE_HEADERS="rfc")  # at configuration, not at the first request
    with pytest.raises(ValueError):
        make_app(SLUICEGATE_KEY_FUNC="cookie")
    with pytest.raises(sluicegate.InvalidQuotaError):
        make_app(SLUICEGATE_DEFAULT_LIMITS=["10/fortnight"])
    with pytest.raises(ValueError):
        Sluicegate().limit([])
    assert key_func("remote_address") is remote_address
    assert callable(user())


def test_on_breach_and_constructor_arguments() -> None:
    app = flask.Flask(__name__)
    limiter = Sluicegate(
        app,
        default_limits="1/minute",
        headers="draft6",
        on_breach=lambda err: ({"error": "slow down", "retry_after": err.retry_after}, 429),
    )

    @app.get("/")
    def index() -> str:
        return "ok"

    client = app.test_client()
    assert client.get("/").headers["RateLimit-Limit"] == "1"
    r = client.get("/")
    assert r.status_code == 429 and r.json["error"] == "slow down"
    assert r.headers["Retry-After"] == "60" and r.headers["RateLimit-Remaining"] == "0"
    assert limiter is app.extensions["sluicegate"][0]


@pytest.fixture
def server() -> Iterator[str]:
    app, _ = make_app(SLUICEGATE_DEFAULT_LIMITS=["5/minute"])
    srv = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()
        thread.join(timeout=5)


def fetch(url: str) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers)


def test_real_server(server: str) -> None:
    results = [fetch(f"{server}/default") for _ in range(8)]  # bounded: 8 requests
    codes = [code for code, _ in results]
    assert codes == [200] * 5 + [429] * 3
    assert results[0][1]["RateLimit"] == '"default";r=4;t=12'
    # The first token comes back 12 s after the first request: Retry-After is that less the
    # time the 8 requests took, rounded up (11 where a loaded machine made them take over 1 s).
    assert results[-1][1]["Retry-After"] in ("11", "12")

    # Concurrent clients: exactly 5 of 20 are admitted on a fresh view.
    out: list[int] = []
    lock = threading.Lock()

    def hit() -> None:
        code, _ = fetch(f"{server}/other")
        with lock:
            out.append(code)

    threads = [threading.Thread(target=hit) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(out) == [200] * 5 + [429] * 15


async def _async_key(req: object) -> str:
    return "k"


def test_async_callables_are_refused_when_configured() -> None:
    """``before_request`` cannot await: an async key, cost or skip function was called and its
    coroutine taken for the key (its repr), the cost or a truthy skip. Refused at once, and a
    sync function that returns an awaitable is a TypeError at the request."""
    limiter = Sluicegate()
    with pytest.raises(TypeError, match="async"):
        limiter.limit("1/minute", key=_async_key)
    with pytest.raises(TypeError, match="async"):
        limiter.limit("1/minute", cost=_async_key)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="async"):
        Sluicegate(flask.Flask(__name__), key_func=_async_key)
    with pytest.raises(TypeError, match="async"):
        Sluicegate(flask.Flask(__name__), skip=_async_key)  # type: ignore[arg-type]

    app = flask.Flask(__name__)
    app.testing = True  # the view's exception reaches the test
    limiter = Sluicegate(app)

    @app.get("/")
    @limiter.limit("1/minute", key=lambda req: _async_key(req))
    def index() -> str:
        return "ok"

    with pytest.raises(TypeError, match="returned an awaitable"):
        app.test_client().get("/")


def test_key_cost_and_skip_functions_of_no_argument() -> None:
    """flask-limiter's key functions take no argument and read ``flask.request``."""
    app = flask.Flask(__name__)
    limiter = Sluicegate(
        app, key_func=lambda: flask.request.headers.get("X-Api-Key", "anon"),
        skip=lambda: flask.request.headers.get("X-Internal") == "yes",
    )  # fmt: skip

    @app.get("/")
    @limiter.limit("1/minute; burst=2")
    def index() -> str:
        return "ok"

    @app.get("/heavy")
    @limiter.limit("1/minute; burst=3", key=lambda: "one", cost=lambda: int(flask.request.args.get("n", "1")))
    def heavy() -> str:
        return "ok"

    client = app.test_client()
    assert statuses(client, "/", 3, headers={"X-Api-Key": "a"}) == [200, 200, 429]
    assert statuses(client, "/", 1, headers={"X-Api-Key": "b"}) == [200]
    assert statuses(client, "/", 2, headers={"X-Api-Key": "a", "X-Internal": "yes"}) == [200, 200]
    assert client.get("/heavy?n=2").status_code == 200
    assert client.get("/heavy?n=2").status_code == 429
    assert client.get("/heavy?n=1").status_code == 200
    with pytest.raises(TypeError, match="must take the request, or no argument"):
        limiter.limit("1/minute", key=lambda a, b: "x")  # type: ignore[arg-type, misc]


def statuses(client: flask.testing.FlaskClient, path: str, n: int, **kwargs: object) -> list[int]:
    return [client.get(path, **kwargs).status_code for _ in range(n)]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("answer", "status", "body"),
    [(None, 429, b"Too Many Requests: retry after 60 s\n"), ("slow down", 429, b"slow down"),
     (("gone fishing", 503), 503, b"gone fishing")],
)  # fmt: skip
def test_on_breach_is_told_and_may_answer(answer: object, status: int, body: bytes) -> None:
    """None (a notification, flask-limiter's form) answers the default 429, not a 500; an
    answer of a success status is made a 429, not a 200."""
    told: list[float] = []

    def on_breach(error: sluicegate.RateLimited) -> object:
        told.append(error.retry_after)
        assert flask.request.path == "/"
        return answer

    app = flask.Flask(__name__)
    Sluicegate(app, default_limits="1/minute", on_breach=on_breach)

    @app.get("/")
    def index() -> str:
        return "ok"

    client = app.test_client()
    assert client.get("/").status_code == 200
    r = client.get("/")
    assert (r.status_code, r.data) == (status, body)
    assert r.headers["Retry-After"] == "60" and len(told) == 1 and 59 < told[0] <= 60


def test_the_apps_own_429_handler_answers_a_rejection() -> None:
    """``@app.errorhandler(429)`` (flask-limiter's users' way to shape the answer) was never
    called: the extension answered its own 429. It now gets a ``RateLimitExceeded`` (werkzeug's
    429, with the decision) and answers, with the fields and Retry-After set on its response;
    a blueprint's handler answers its routes; a catch-all handler (of Exception) does not."""
    from sluicegate.flask import RateLimitExceeded
    from werkzeug.exceptions import TooManyRequests

    app = flask.Flask(__name__)
    Sluicegate(app, default_limits="1/minute", headers="legacy")
    seen: list[RateLimitExceeded] = []

    @app.errorhandler(429)
    def too_many(e: RateLimitExceeded) -> object:
        seen.append(e)
        return {"error": "ratelimit exceeded", "detail": e.description}, 429

    @app.errorhandler(Exception)
    def everything(e: Exception) -> object:  # not asked about rate limits
        return "boom", 500

    bp = flask.Blueprint("bp", __name__)

    @bp.errorhandler(TooManyRequests)
    def bp_too_many(e: RateLimitExceeded) -> object:
        return "blueprint says wait", 200  # a success status is made 429

    @bp.get("/b")
    def b() -> str:
        return "ok"

    app.register_blueprint(bp)

    @app.get("/")
    def index() -> str:
        return "ok"

    client = app.test_client()
    assert client.get("/").status_code == 200
    r = client.get("/")
    assert r.status_code == 429 and r.json == {"error": "ratelimit exceeded", "detail": "Too Many Requests: retry after 60 s"}
    assert r.headers["Retry-After"] == "60" and r.headers["X-RateLimit-Remaining"] == "0"
    (e,) = seen
    assert isinstance(e, TooManyRequests) and e.code == 429 and e.retry_after == 60
    assert not e.decision.allowed and e.decision.retry_after_header == 60
    assert client.get("/b").status_code == 200
    r = client.get("/b")
    assert (r.status_code, r.data, r.headers["Retry-After"]) == (429, b"blueprint says wait", "60")

    # Without a handler of 429 a catch-all one is left alone: the default answer.
    plain = flask.Flask(__name__)
    Sluicegate(plain, default_limits="1/minute")
    plain.register_error_handler(Exception, lambda e: ("boom", 500))
    plain.add_url_rule("/", "index", lambda: "ok")
    pc = plain.test_client()
    assert pc.get("/").status_code == 200
    r = pc.get("/")
    assert (r.status_code, r.data) == (429, b"Too Many Requests: retry after 60 s\n")


def test_enabled_turns_the_checks_off_and_on_at_any_time() -> None:
    """``limiter.enabled = False`` in a test fixture (flask-limiter's way) did nothing: the
    setting was read once, by ``init_app``, and requests kept getting 429s."""
    app = flask.Flask(__name__)
    limiter = Sluicegate(app, default_limits="1/minute")
    app.add_url_rule("/", "index", lambda: "ok")
    client = app.test_client()
    assert limiter.enabled is True
    assert statuses(client, "/", 2) == [200, 429]
    limiter.enabled = False
    assert limiter.enabled is False
    assert statuses(client, "/", 3) == [200, 200, 200]
    limiter.enabled = True
    assert statuses(client, "/", 1) == [429]
    with pytest.raises(TypeError, match="enabled must be a bool"):
        limiter.enabled = "no"  # type: ignore[assignment]
    # Off by the configuration: reported so, until set.
    off = flask.Flask(__name__)
    off.config["SLUICEGATE_ENABLED"] = False
    assert Sluicegate(off, default_limits="1/minute").enabled is False


def test_static_files_get_no_default_limit(tmp_path: Path) -> None:
    (tmp_path / "app.js").write_text("ok")
    app = flask.Flask(__name__, static_folder=str(tmp_path), static_url_path="/static")
    limiter = Sluicegate(app, default_limits="1/minute")

    @app.get("/")
    def index() -> str:
        return "ok"

    client = app.test_client()
    assert statuses(client, "/static/app.js", 3) == [200, 200, 200]
    assert statuses(client, "/", 2) == [200, 429]
    # A limit of its own still applies.
    limiter.limit("1/minute; burst=2")(app.view_functions["static"])
    assert statuses(client, "/static/app.js", 3) == [200, 200, 429]
