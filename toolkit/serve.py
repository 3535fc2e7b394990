"""`toolkit serve`: the serving model and search over HTTP on the loopback interface, for applications in any
language (extra ``toolkit[serve]``: Starlette on uvicorn).

- ``POST /v1/embeddings``: OpenAI-compatible. ``input`` (a question or a list of them) embedded as queries with the
  model of the version that serves the request (its query prefix applied once), all from one version.
- ``POST /search``: ``{"question": ..., "k": 5, ...}``, the options named as ``toolkit.search_options.SearchOptions``
  names them (an unknown field is refused, naming the known ones); the same JSON as ``toolkit search --format json``
  (``toolkit.search.search`` with its defaults).
- ``GET /health``: liveness: 200 whenever the process answers (the database is not needed; the active version is
  named when the database answers within HEALTH_DATABASE_SECONDS).
- ``GET /ready``: readiness: 200 when a real pinned search succeeds (the serving model, then a search on that
  version, within READY_SECONDS), else 503 with the reason.
- ``GET /metrics``: Prometheus' text format (``prometheus-client``, a registry of this app's own): requests, errors
  and latency by endpoint and served version, the canary's share, the pool's use.

Every answer that comes from a version says which in ``X-Toolkit-Version``.

Trust comes from the deployment, not the request (docs/security.md#toolkit-serves-trust-model): with
``trust_proxy_headers`` the tenant and the principals come only from the headers a trusted proxy sets
(``X-Toolkit-Tenant``, ``X-Toolkit-Principals``) and a body naming either is refused; without it (direct use on
loopback: every local process is trusted) they may come from the body or the headers, which must agree; a pinned
``tenant`` (``serve --tenant``) cannot be changed by a request. Only loopback names (and ``allowed_hosts``) are
taken as Host and Origin, and POST bodies must be ``application/json`` (DNS rebinding, cross-origin pages).

What one caller can cost is bounded: the request head (``MAX_HEAD_BYTES``) and the time to send it
(``HEAD_TIMEOUT``, also the idle keep-alive time), the body (``MAX_BODY_BYTES``, ``BODY_TIMEOUT``, ``MAX_JSON_DEPTH``),
k (``MAX_K``), the requests in flight (``workers_limit``), the searches running at once (the pool, and a smaller
share of it for large k) and the time a statement may run (504 beyond). There is no authentication: it listens
on a loopback address only."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import json
import logging
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import urlsplit

import numpy as np
import psycopg
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from toolkit import __version__
from toolkit.errors import (
    DatabaseError,
    EmbeddingError,
    InputError,
    LockTimeoutError,
    ModelMismatchError,
    StateError,
    ToolkitError,
    VersionUnavailableError,
)
from toolkit.integrations._core import ConnectionPool
from toolkit.search_options import DEPRECATED, IDENTITY, KEYWORDS, SearchOptions
from toolkit.validation import MAX_ARGUMENT_CHARS, MAX_JSON_DEPTH

MAX_BODY_BYTES = 256 * 1024
MAX_HEAD_BYTES = 16 * 1024  # the request line and headers
HEAD_TIMEOUT = 5.0  # seconds from the connection (or the previous answer) until a request head is complete
BODY_TIMEOUT = 10.0  # seconds for the body once its head is in
MAX_CONNECTIONS = 1024  # open sockets; beyond, the one waiting longest for a head is closed
MAX_INPUTS = 64  # questions per /v1/embeddings request
MAX_QUESTION_CHARS = MAX_ARGUMENT_CHARS
# k per search: one search_passages call cost 49 ms at k 5, 2.9 s at k 100, 16 s at 250 (issue 39; growth ~k²), so
# serve stops at 100; docs/benchmarks.md#a-hostile-caller-of-toolkit-serve has this machine's figures.
MAX_K = 100
LARGE_K = 20  # searches asking more share a smaller budget (a quarter of the pool), so small ones always find room
MAX_EXPAND_WINDOW = 5  # expand window:N reads k x (2N + 1) chunks
STATEMENT_TIMEOUT = "10s"  # per SQL statement of a request
POOL_WAIT_SECONDS = 10.0  # for a free database connection
VERSION_HEADER = "X-Toolkit-Version"
CLOSE = {"Connection": "close"}  # a refusal after which nothing more of the connection is read
TENANT_HEADER = "X-Toolkit-Tenant"
PRINCIPALS_HEADER = "X-Toolkit-Principals"
HEALTH_DATABASE_SECONDS = 1.0  # /health names the active version if the database answers this fast; 200 regardless
READY_SECONDS = 5.0  # /ready's search must succeed within this, else 503
# /ready searches this tenant (serve --tenant when pinned): one without documents still runs every step of a search
# (serving model, the question embedded, the SQL search with its grants and policies) and returns nothing.
PROBE_TENANT = "toolkit-ready-probe"
PROBE_QUESTION = "toolkit readiness probe"
ENDPOINTS = ("/search", "/v1/embeddings", "/health", "/ready", "/metrics")  # metric labels; any other path: "other"
# /search's body: the question, who asks (tenant and principals only when the server takes them from the body), and
# the search options, named as toolkit.search_options.SearchOptions names them (the deprecated hybrid among them).
SEARCH_FIELDS = ("question", *IDENTITY, *KEYWORDS)
EMBEDDING_FIELDS = {"input", "model", "encoding_format", "dimensions", "user", "tenant", "request_key"}

log = logging.getLogger("toolkit.serve")


class RequestError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        code: str | None = None,
        headers: dict | None = None,
    ):
        super().__init__(message)
        self.status, self.kind, self.code, self.headers = status, kind, code, headers


@dataclass
class ServerSettings:
    database_url: str
    tenant: str | None = None  # pinned: every request is for this tenant (a single-tenant deployment)
    pool_size: int = 8
    trust_proxy_headers: bool = False  # tenant and principals only from a trusted proxy's headers
    allowed_hosts: Sequence[str] = ()  # Host / Origin names taken besides the loopback ones
    statement_timeout: str = STATEMENT_TIMEOUT


def _error(status: int, message: str, kind: str, code: str | None = None, headers: dict | None = None) -> JSONResponse:
    # OpenAI's error shape, so its clients raise their usual exceptions.
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _plain(value):
    import datetime

    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def _json(body, headers: dict | None = None) -> Response:
    return Response(json.dumps(body, default=_plain), media_type="application/json", headers=headers)


# --- the body -----------------------------------------------------------------------------------------------------


async def _read_json(request: Request) -> dict:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise RequestError(413, f"The request body is over {MAX_BODY_BYTES} bytes.")
    received = bytearray()
    try:
        async with asyncio.timeout(BODY_TIMEOUT):
            async for chunk in request.stream():
                received += chunk
                if len(received) > MAX_BODY_BYTES:
                    raise RequestError(413, f"The request body is over {MAX_BODY_BYTES} bytes.")
    except TimeoutError:
        raise RequestError(
            408,
            f"The request body did not arrive within {BODY_TIMEOUT:g} s of its head; send it whole.",
            headers=CLOSE,
        ) from None
    try:
        body = json.loads(received)
    except RecursionError:
        raise RequestError(400, f"The body nests arrays or objects deeper than {MAX_JSON_DEPTH} levels.") from None
    except (ValueError, UnicodeDecodeError):
        raise RequestError(400, "The body is not JSON (UTF-8).") from None
    if not isinstance(body, dict):
        raise RequestError(400, "The body must be a JSON object.")
    _check_structure(body)
    return body


def _check_structure(body) -> None:
    """Bounds what the code after the parser walks (its nesting) and refuses text PostgreSQL cannot store (a lone
    surrogate such as \\ud800 is valid JSON but not Unicode text), before anything reaches the database."""
    pending = [(body, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise RequestError(400, f"The body nests arrays or objects deeper than {MAX_JSON_DEPTH} levels.")
            items = value.items() if isinstance(value, dict) else ((None, item) for item in value)
            for key, item in items:
                if key is not None:
                    _check_text(key)
                pending.append((item, depth + 1))
        elif isinstance(value, str):
            _check_text(value)


def _check_text(value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise RequestError(
            400, "The body holds a string with a lone surrogate (such as \\ud800), which is not text; send UTF-8 text."
        ) from None


def _text(value, name: str, required: bool = True) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise RequestError(400, f"{name} must be a non-empty string.")
    if len(value) > MAX_QUESTION_CHARS or "\x00" in value:
        raise RequestError(400, f"{name} is over {MAX_QUESTION_CHARS} characters or holds a NUL byte.")
    return value


def _integer(value, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise RequestError(400, f"{name} must be an integer.")
    return value


def _labels(value, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise RequestError(400, f"{name} must be a list of non-empty strings.")
    return [_text(label, name) for label in value]


def _k(value) -> int:
    k = _integer(value, "k")
    if not 1 <= k <= MAX_K:
        raise RequestError(
            400,
            f"k must be from 1 to {MAX_K}: toolkit serve returns at most {MAX_K} results per search (a search's "
            "cost grows faster than k); page through fewer, or run toolkit search for more.",
        )
    return k


def _search_options(body: dict) -> SearchOptions:
    """The body's search options as the record (its checks: JSON types, ranges, combinations), within this server's
    own bounds: k up to MAX_K, expand window:N up to MAX_EXPAND_WINDOW, text up to MAX_QUESTION_CHARS."""
    given = {name: body[name] for name in KEYWORDS if body.get(name) is not None}
    given["k"] = _k(given.get("k", 5))
    for name, value in given.items():
        if isinstance(value, str):
            _text(value, name)
    expand = given.get("expand")
    if isinstance(expand, str):
        window = expand.removeprefix("window:")
        if window != expand and window.isdigit() and int(window) > MAX_EXPAND_WINDOW:
            raise RequestError(
                400, f"expand window:N takes N up to {MAX_EXPAND_WINDOW} on toolkit serve (each hit reads 2N+1 chunks)."
            )
    filters = given.get("filters")
    if filters is not None and not isinstance(filters, dict | list):
        raise RequestError(400, "filters must be an object or a list of KEY=VALUE strings.")
    return SearchOptions(**given)


# --- who the request is for -----------------------------------------------------------------------------------


def _same(name: str, choices: list[tuple[str, object]]) -> object:
    """The one value the places that name it agree on; two that disagree are refused, never settled."""
    given = [(where, value) for where, value in choices if value is not None]
    for where, value in given[1:]:
        if value != given[0][1]:
            raise RequestError(
                400,
                f"The {given[0][0]} names {name} {given[0][1]!r} but the {where} names {value!r}; a request is for "
                "one tenant and one set of principals: send one of them.",
            )
    return given[0][1] if given else None


# --- the endpoints --------------------------------------------------------------------------------------------


class App:
    """The endpoints over one connection pool."""

    def __init__(self, settings: ServerSettings):
        self.settings = settings
        self.pool = ConnectionPool(size=settings.pool_size, connect=self._connect)
        # Waiting happens here, on the event loop, not in the thread pool: a search takes a connection slot (and a
        # large one first a slot of its smaller budget) before a thread, so small searches queue behind at most
        # the large ones that already run, never behind all of them.
        self.database_slots = asyncio.Semaphore(settings.pool_size)
        self.large_slots = asyncio.Semaphore(max(1, settings.pool_size // 4))
        self.in_use = 0  # requests running on a database connection (/metrics: pool use)
        self.waiting = 0  # requests waiting for one
        self.metrics = Metrics(self)

    def _connect(self) -> psycopg.Connection:
        from toolkit.db.connection import connect

        return connect(self.settings.database_url, autocommit=True, statement_timeout=self.settings.statement_timeout)

    def _identity(self, request: Request, body: dict, *, principals: bool) -> tuple[str, list[str] | None]:
        """The tenant and the principals: from the trusted proxy's headers only with trust_proxy_headers; else
        from the body or the headers, which must agree; a pinned tenant cannot be changed."""
        header_tenant = request.headers.get(TENANT_HEADER)
        header_principals = request.headers.get(PRINCIPALS_HEADER)
        from_header = None
        if header_principals is not None:
            from_header = [label.strip() for label in header_principals.split(",") if label.strip()]
        pinned = self.settings.tenant
        if self.settings.trust_proxy_headers:
            for name, header in (("tenant", TENANT_HEADER), ("principals", PRINCIPALS_HEADER)):
                if name in body:
                    raise RequestError(
                        400,
                        f"This server takes {name} only from the {header} header its trusted proxy sets "
                        f"(serve --trust-proxy-headers); leave {name} out of the body.",
                    )
            if header_tenant is None and pinned is None:
                raise RequestError(
                    401,
                    f"The request has no {TENANT_HEADER} header: this server takes the tenant only from its trusted "
                    "proxy, which authenticates the caller; send requests through the proxy.",
                    kind="authentication_error",
                )
            tenant = _same("tenant", [("server (serve --tenant)", pinned), (f"{TENANT_HEADER} header", header_tenant)])
            labels = from_header
        else:
            tenant = _same(
                "tenant",
                [
                    ("server (serve --tenant)", pinned),
                    ("body", body.get("tenant")),
                    (f"{TENANT_HEADER} header", header_tenant),
                ],
            )
            if tenant is None:
                raise RequestError(
                    400, f"Name the tenant: a tenant field, an {TENANT_HEADER} header, or serve --tenant."
                )
            body_labels = _labels(body["principals"], "principals") if body.get("principals") is not None else None
            labels = _same("principals", [("body", body_labels), (f"{PRINCIPALS_HEADER} header", from_header)])
        tenant = _text(tenant, "tenant")
        if labels is not None:
            labels = _labels(labels, "principals")
        return tenant, (labels if principals else None)

    def _request_key(self, request: Request, body: dict, *names: str) -> str | None:
        for name in names:
            if body.get(name) is not None:
                return _text(body[name], name)
        key = request.headers.get("x-toolkit-request-key")
        return _text(key, "X-Toolkit-Request-Key", required=False)

    async def _run(self, work, *, large: bool = False):
        """``work(conn)`` in a thread once a database slot is free (for a large search, first a slot of its
        budget); a slot that stays busy for POOL_WAIT_SECONDS answers 503."""
        async with contextlib.AsyncExitStack() as slots:
            self.waiting += 1
            waiting = slots.enter_context(contextlib.ExitStack())
            waiting.callback(self._stop_waiting)
            for semaphore in (self.large_slots, self.database_slots) if large else (self.database_slots,):
                try:
                    await asyncio.wait_for(semaphore.acquire(), POOL_WAIT_SECONDS)
                except TimeoutError:
                    raise RequestError(
                        503,
                        f"Every database connection stayed busy for {POOL_WAIT_SECONDS:g} s; retry.",
                        "service_unavailable",
                        headers={"Retry-After": "1"},
                    ) from None
                slots.callback(semaphore.release)
            waiting.close()
            self.in_use += 1
            slots.callback(self._stop_using)
            # ConnectionPool.run: a version retired between serving_model() and the search is retried there.
            return await run_in_threadpool(self.pool.run, work, POOL_WAIT_SECONDS)

    def _stop_waiting(self) -> None:
        self.waiting -= 1

    def _stop_using(self) -> None:
        self.in_use -= 1

    async def health(self, request: Request) -> Response:
        """Liveness: the process answers, 200 whatever the database does (a probe that restarted the server when
        the database is down would only add restarts). The active version is named when the database answers
        within HEALTH_DATABASE_SECONDS, else null with the reason in ``database``; readiness is /ready."""

        def check(conn):
            from toolkit.store.versions import active_version

            return active_version(conn)

        active, database = None, "ok"
        try:
            active = await asyncio.wait_for(self._run(check), HEALTH_DATABASE_SECONDS)
        except TimeoutError:
            database = f"no answer within {HEALTH_DATABASE_SECONDS:g} s"
        except Exception as error:  # any failure is reported, never turned into a failed liveness probe
            database = _reason(error)
        headers = {VERSION_HEADER: str(active)} if active is not None else None
        body = {"status": "ok", "toolkit": __version__, "active_version": active, "database": database}
        return JSONResponse(body, headers=headers)

    async def ready(self, request: Request) -> Response:
        """Readiness: what an application's request does, for real — the serving model, then a search pinned to
        the version it names (as the reader, not logged), within READY_SECONDS; 503 with the reason otherwise (the
        database down, no version active, a grant or function missing, the schema downgraded under the server)."""
        tenant = self.settings.tenant or PROBE_TENANT

        def probe(conn):
            from toolkit.search import search
            from toolkit.serving import serving_model

            model = serving_model(conn, tenant)
            hits = search(conn, PROBE_QUESTION, tenant, 1, version=model.version, log=False)
            return model, len(hits)

        started = time.perf_counter()
        try:
            model, _ = await asyncio.wait_for(self._run(probe), READY_SECONDS)
        except TimeoutError:
            return _not_ready(f"A search did not complete within {READY_SECONDS:g} s.")
        except Exception as error:  # whatever stops a search makes the server not ready; the reason says which
            return _not_ready(f"A search failed: {_reason(error)}")
        body = {
            "status": "ready",
            "version": model.version,
            "model": model.model_alias,
            "serving": model.serving,
            "search_ms": round((time.perf_counter() - started) * 1000, 1),
        }
        return JSONResponse(body, headers={VERSION_HEADER: str(model.version)})

    async def metrics_page(self, request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        await self.metrics.read_database()
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def search(self, request: Request) -> Response:
        body = await _read_json(request)
        unknown = sorted(set(body) - set(SEARCH_FIELDS))
        if unknown:
            listed = ", ".join(name for name in SEARCH_FIELDS if name not in DEPRECATED)
            raise RequestError(400, f"Unknown field {unknown[0]!r}; the fields are {listed}.")
        question = _text(body.get("question"), "question")
        tenant, principals = self._identity(request, body, principals=True)
        request_key = self._request_key(request, body, "request_key")
        options = _search_options(body)

        def work(conn):
            from toolkit.search import search

            return search(conn, question, tenant, options=options, principals=principals, request_key=request_key)

        hits = await self._run(work, large=options.k > LARGE_K)
        headers = {VERSION_HEADER: str(hits[0].version)} if hits else None
        return _json([hit.as_dict() for hit in hits], headers)

    async def embeddings(self, request: Request) -> Response:
        body = await _read_json(request)
        unknown = sorted(set(body) - EMBEDDING_FIELDS)
        if unknown:
            raise RequestError(400, f"Unknown field {unknown[0]!r}.")
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs:
            raise RequestError(400, "input must be a string or a non-empty list of strings (token ids are not taken).")
        if len(inputs) > MAX_INPUTS:
            raise RequestError(400, f"At most {MAX_INPUTS} inputs per request.")
        questions = [_text(text, "each input") for text in inputs]
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise RequestError(400, "encoding_format must be float or base64.")
        model = body.get("model")
        dimensions = _integer(body.get("dimensions"), "dimensions")
        tenant, _ = self._identity(request, body, principals=False)
        request_key = self._request_key(request, body, "request_key", "user")

        def work(conn):
            from toolkit.question import embed_questions

            return embed_questions(conn, questions, tenant, request_key)

        made = await self._run(work)
        if model is not None and model not in (made.model_alias, made.model_name):
            raise RequestError(
                404,
                f"The model {model!r} does not serve this request: version {made.version} serves it with "
                f"{made.model_alias!r} ({made.model_name}). Leave model out, or name that one.",
                code="model_not_found",
            )
        if dimensions is not None and dimensions != made.dimensions:
            raise RequestError(400, f"The serving model has {made.dimensions} dimensions, not {dimensions}.")
        data = []
        for index, vector in enumerate(made.embeddings):
            value = (
                base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
                if encoding == "base64"
                else vector
            )
            data.append({"object": "embedding", "index": index, "embedding": value})
        tokens = sum(made.tokens)
        answer = {
            "object": "list",
            "data": data,
            "model": made.model_alias,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            "toolkit": {"version": made.version, "serving": made.serving, "distance": made.distance},
        }
        return _json(answer, {VERSION_HEADER: str(made.version)})


def _reason(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text if text.endswith(".") else text + "."


def _not_ready(reason: str) -> JSONResponse:
    body = {"status": "not ready", "error": {"message": reason, "type": "service_unavailable", "param": None,
                                             "code": None}}  # fmt: skip
    return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})


# --- /metrics -------------------------------------------------------------------------------------------------


class Metrics:
    """This app's Prometheus metrics, in a registry of its own (two apps in one process never mix their counts):
    what ``Measured`` records per request, the pool's use read at each scrape, and from the database at each scrape
    (bounded by HEALTH_DATABASE_SECONDS) the active version and the canary's share."""

    def __init__(self, app: App):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.app = app
        self.registry = registry = CollectorRegistry(auto_describe=True)
        labels = ("endpoint", "version", "status")
        self.requests = Counter(
            "toolkit_serve_requests",
            "Requests answered, by endpoint, the version that served them (none: no version) and HTTP status.",
            labels,
            registry=registry,
        )
        self.errors = Counter(
            "toolkit_serve_errors",
            "Requests answered with an error (HTTP 4xx or 5xx), by endpoint, version and HTTP status.",
            labels,
            registry=registry,
        )
        self.latency = Histogram(
            "toolkit_serve_request_duration_seconds",
            "Time from the request's head to the end of its answer, by endpoint and served version.",
            ("endpoint", "version"),
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=registry,
        )
        pool = Gauge("toolkit_serve_pool_connections", "Database connections: size, in_use, waiting.", ("state",),
                     registry=registry)  # fmt: skip
        pool.labels("size").set(app.settings.pool_size)
        pool.labels("in_use").set_function(lambda: app.in_use)
        pool.labels("waiting").set_function(lambda: app.waiting)
        self.database_up = Gauge(
            "toolkit_serve_database_up", "1 when the database answered this scrape's questions in time.",
            registry=registry,
        )  # fmt: skip
        self.active = Gauge("toolkit_active_version", "The active version (NaN when none is).", registry=registry)
        self.canary = Gauge(
            "toolkit_canary_percent",
            "The canary candidate's configured share of request keys, in percent (0 without a canary; absent when the "
            "server's login may not read it: toolkit.canary_status is the writer's and deployer's).",
            ("candidate",),
            registry=registry,
        )

    def observe(self, path: str, version: str, status: int, seconds: float) -> None:
        endpoint = path if path in ENDPOINTS else "other"  # bounded labels: a caller's path never becomes one
        self.requests.labels(endpoint, version, str(status)).inc()
        if status >= 400:
            self.errors.labels(endpoint, version, str(status)).inc()
        self.latency.labels(endpoint, version).observe(seconds)

    async def read_database(self) -> None:
        def read(conn):
            from toolkit.serving import canary_status
            from toolkit.store.versions import active_version

            active = active_version(conn)
            try:
                canary = canary_status(conn)
            except (psycopg.errors.InsufficientPrivilege, DatabaseError):
                return active, False, None
            return active, True, canary

        try:
            active, readable, canary = await asyncio.wait_for(self.app._run(read), HEALTH_DATABASE_SECONDS)
        except Exception:  # a scrape never fails: the gauge says the database did not answer
            self.database_up.set(0)
            return
        self.database_up.set(1)
        self.active.set(active if active is not None else float("nan"))
        self.canary.clear()
        if readable:
            self.canary.labels(str(canary.candidate) if canary else "none").set(canary.percent if canary else 0)


class Measured:
    """ASGI middleware outside everything else (the Gate's refusals are requests too): records each request's
    endpoint, the version its answer names (X-Toolkit-Version), its status and its duration in ``Metrics``."""

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        seen = {"status": 500, "version": "none"}

        async def recording(message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
                for name, value in message.get("headers") or ():
                    if name.lower() == b"x-toolkit-version":
                        seen["version"] = value.decode("latin-1")
            await send(message)

        try:
            await self.app(scope, receive, recording)
        finally:
            self.metrics.observe(scope.get("path", ""), seen["version"], seen["status"], time.perf_counter() - started)


def _cancelled(error: BaseException) -> bool:
    """The statement was cancelled (statement_timeout, SQLSTATE 57014): the library wraps psycopg's QueryCanceled
    into a DatabaseError (toolkit.db.connection.translate_errors), whose words are about a connection that failed."""
    while error is not None:
        if isinstance(error, psycopg.errors.QueryCanceled):
            return True
        error = error.__cause__ or error.__context__
    return False


def _errors(handler, settings: ServerSettings):
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except RequestError as error:
            return _error(error.status, str(error), error.kind, error.code, error.headers)
        except (InputError, ModelMismatchError) as error:
            return _error(400, str(error), "invalid_request_error")
        except RecursionError:
            return _error(400, f"The request nests deeper than {MAX_JSON_DEPTH} levels.", "invalid_request_error")
        except (psycopg.Error, ToolkitError) as error:
            if _cancelled(error):
                return _error(
                    504,
                    f"The request's SQL statement ran longer than the server's statement timeout "
                    f"({settings.statement_timeout}) and was cancelled; ask for fewer results, or retry later.",
                    "timeout",
                )
            if isinstance(error, VersionUnavailableError | StateError | LockTimeoutError | DatabaseError):
                return _error(503, str(error), "service_unavailable", headers={"Retry-After": "1"})
            if isinstance(error, psycopg.OperationalError):
                return _error(503, f"The database is unavailable: {str(error).strip()}", "service_unavailable")
            if isinstance(error, EmbeddingError):
                return _error(502, str(error), "embedding_error")
            log.exception("toolkit serve: %s failed", request.url.path)
            return _error(500, str(error) if isinstance(error, ToolkitError) else _INTERNAL, "server_error")
        except TimeoutError as error:
            return _error(503, str(error), "service_unavailable", headers={"Retry-After": "1"})
        except Exception:
            log.exception("toolkit serve: %s failed", request.url.path)
            return _error(500, _INTERNAL, "server_error")

    return wrapped


_INTERNAL = "The server failed on this request (the error is in its log); retry, and report it if it persists."


async def _http_error(request: Request, error: HTTPException) -> Response:
    # Starlette's own refusals (no such path, wrong method) in the same JSON shape as every other error.
    if error.status_code == 404:
        message = (
            f"There is no endpoint {request.url.path}; the endpoints are POST /search, POST /v1/embeddings, GET "
            "/health, GET /ready and GET /metrics."
        )
    elif error.status_code == 405:
        allowed = error.headers.get("Allow", "") if error.headers else ""
        message = f"{request.url.path} takes {allowed or 'another method'}, not {request.method}."
    else:
        message = f"{error.detail}."
    return _error(error.status_code, message, "invalid_request_error", headers=error.headers)


# --- what reaches the endpoints: Host, Origin, content type, head size, requests in flight ------------------------


def _host_name(value: str) -> str:
    """The name in a Host header (``name``, ``name:port``, ``[::1]:port``), lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Gate:
    """ASGI middleware in front of the endpoints: refuses, in JSON, a head over MAX_HEAD_BYTES (431), a Host or
    Origin that is not one of the server's names (421 / 403: DNS rebinding and cross-origin pages), a POST that is
    not application/json (415: a page's 'simple' cross-origin POST) and a request beyond ``workers_limit`` in
    flight (503). Sockets that only wait cost no request slot (the protocol closes them)."""

    def __init__(self, app, allowed_hosts: Sequence[str], workers_limit: int):
        self.app = app
        self.allowed = {name.lower() for name in allowed_hosts}
        self.workers_limit = workers_limit
        self.in_flight = 0

    def _allowed(self, name: str | None) -> bool:
        if not name:
            return False
        if name == "localhost" or name in self.allowed:
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False

    def _refusal(self, scope) -> JSONResponse | None:
        headers: dict[str, str] = {}
        size = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) + 16
        for name, value in scope["headers"]:
            size += len(name) + len(value) + 4
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        if size > MAX_HEAD_BYTES:
            return _error(
                431, f"The request head is over {MAX_HEAD_BYTES} bytes.", "invalid_request_error", headers=CLOSE
            )
        host = headers.get("host")
        if not self._allowed(_host_name(host or "")):
            return _error(
                421,
                f"The Host {host!r} is not a name of this server (a loopback address, localhost, or serve "
                "--allowed-host); a page whose name was pointed at 127.0.0.1 is refused.",
                "invalid_request_error",
            )
        origin = headers.get("origin")
        if origin is not None and not self._allowed(urlsplit(origin).hostname if "://" in origin else None):
            return _error(
                403,
                f"Requests from the web origin {origin!r} are refused: toolkit serve answers applications, not "
                "pages in a browser.",
                "permission_error",
            )
        if scope["method"] == "POST":
            media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media != "application/json":
                return _error(
                    415,
                    f"The body must be sent as application/json, not {media or 'without a Content-Type'}; set "
                    "Content-Type: application/json.",
                    "invalid_request_error",
                )
        if self.in_flight >= self.workers_limit:
            return _error(
                503,
                f"The server is answering {self.workers_limit} requests already; retry.",
                "service_unavailable",
                headers={"Retry-After": "1"},
            )
        return None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1


async def _internal_error(request: Request, error: Exception) -> Response:
    # What no endpoint caught (the endpoints map every error they expect): logged, and answered in the same shape.
    log.error("toolkit serve: %s failed", request.url.path, exc_info=error)
    return _error(500, _INTERNAL, "server_error")


def create_app(settings: ServerSettings) -> Starlette:
    app = App(settings)
    routes = [
        Route("/health", app.health, methods=["GET"]),
        Route("/ready", app.ready, methods=["GET"]),
        Route("/metrics", app.metrics_page, methods=["GET"]),
        Route("/search", _errors(app.search, settings), methods=["POST"]),
        Route("/v1/embeddings", _errors(app.embeddings, settings), methods=["POST"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_):
        yield
        app.pool.close()

    starlette = Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_error, Exception: _internal_error}
    )
    starlette.state.toolkit = app
    return starlette


# --- the connections ------------------------------------------------------------------------------------------


def _protocol():
    """uvicorn's h11 protocol with a deadline on every request head. uvicorn arms its keep-alive timer only after
    an answer, so a socket that never completes its first head (nothing sent, half a head, a byte at a time) stayed
    open for ever, and its ``limit_concurrency`` counts such sockets: 70 of them answered everyone else 503. Here a
    head must be complete HEAD_TIMEOUT after the connection opened or the previous answer went out, at most
    MAX_CONNECTIONS sockets are open (a new one closes the one waiting longest for its head), and a head h11
    refuses is answered in JSON. The h11 protocol is chosen explicitly: with httptools installed uvicorn's
    ``auto`` would take that one, which none of this covers."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class BoundedH11Protocol(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._head_timer = None
            self._waiting_since = None
            self._await_head()
            if len(self.connections) > MAX_CONNECTIONS:
                waiting = [c for c in self.connections if getattr(c, "_waiting_since", None) is not None]
                min(waiting, key=lambda c: c._waiting_since, default=self)._close()

        def _await_head(self) -> None:
            self._stop_head_timer()
            self._waiting_since = self.loop.time()
            self._head_timer = self.loop.call_later(HEAD_TIMEOUT, self._close)

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer, self._waiting_since = None, None

        def _close(self) -> None:
            self._stop_head_timer()
            if not self.transport.is_closing():
                self.transport.close()

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not cycle:  # a head came in: its request is bounded by the body and statement timeouts
                self._stop_head_timer()

        def on_response_complete(self) -> None:
            cycle = self.cycle
            super().on_response_complete()
            if self.cycle is cycle and not self.transport.is_closing():  # no pipelined request started
                self._await_head()

        def connection_lost(self, exc) -> None:
            self._stop_head_timer()
            super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:
            too_long = len(self.conn.trailing_data[0]) > MAX_HEAD_BYTES
            status = 431 if too_long else 400
            message = (
                f"The request head is over {MAX_HEAD_BYTES} bytes."
                if too_long
                else "The request is not valid HTTP/1.1; send a well-formed request."
            )
            body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                         "code": None}}).encode()  # fmt: skip
            headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
            try:
                reason = HTTPStatus(status).phrase.encode()
                self.transport.write(self.conn.send(h11.Response(status_code=status, headers=headers, reason=reason)))
                self.transport.write(self.conn.send(h11.Data(data=body)))
                self.transport.write(self.conn.send(h11.EndOfMessage()))
            except h11.LocalProtocolError:
                pass
            self._close()

    return BoundedH11Protocol


def check_loopback(host: str) -> str:
    """The server has no authentication: it may listen on a loopback address only (``localhost`` or a loopback IP
    address; no name is looked up)."""
    if host == "localhost":
        return host
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise InputError(
            f"toolkit serve has no authentication, so it listens on a loopback address only (127.0.0.1, ::1 or "
            f"localhost), not {host!r}. Put a reverse proxy that authenticates (and sets X-Toolkit-Tenant) in "
            "front of it."
        )
    return host


def check_allowed_host(name: str) -> str:
    """A name ``--allowed-host`` adds to the Host / Origin names the server takes: a host name or an IP address,
    without a port or a scheme."""
    candidate = name.strip().lower() if isinstance(name, str) else ""
    try:
        ipaddress.ip_address(candidate)
        return candidate
    except ValueError:
        pass
    labels = candidate.split(".")
    if (
        not candidate
        or len(candidate) > 253
        or not all(
            label and len(label) <= 63 and label.replace("-", "").isalnum() and label.isascii() for label in labels
        )
    ):
        raise InputError(
            f"--allowed-host {name!r} is not a host name: give a name such as rag.internal or an IP address, "
            "without a scheme or a port."
        )
    return candidate


def server(
    settings: ServerSettings,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    workers_limit: int = 64,
    log_level: str = "warning",
):
    """A uvicorn server for the app (``server.run()`` serves until stopped; ``server.run(sockets=[s])`` on a socket
    already bound). At most ``workers_limit`` requests in flight (503 beyond; sockets waiting for a head do not
    count); a request head must be complete HEAD_TIMEOUT after the connection or the previous answer, and hold at
    most MAX_HEAD_BYTES."""
    import uvicorn

    check_loopback(host)
    allowed = [check_allowed_host(name) for name in settings.allowed_hosts]
    app = create_app(settings)
    config = uvicorn.Config(
        Measured(Gate(app, allowed, workers_limit), app.state.toolkit.metrics),
        host=host,
        port=port,
        http=_protocol(),
        ws="none",
        log_level=log_level,
        limit_concurrency=None,
        timeout_keep_alive=int(HEAD_TIMEOUT),
        timeout_graceful_shutdown=10,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        server_header=False,
        lifespan="on",
    )
    return uvicorn.Server(config)


def bound_socket(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening socket on ``host`` (``port`` 0: a free one; its number is ``getsockname()[1]``)."""
    check_loopback(host)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


__all__: Sequence[str] = (
    "MAX_BODY_BYTES",
    "MAX_K",
    "ServerSettings",
    "bound_socket",
    "check_allowed_host",
    "create_app",
    "server",
)
