"""`toolkit serve`: the serving model and search over HTTP on the loopback interface, for applications in any
language (extra ``toolkit[serve]``: Starlette on uvicorn).

- ``POST /v1/embeddings``: OpenAI-compatible. ``input`` (a question or a list of them) embedded as queries with the
  model of the version that serves the request (its query prefix applied once), all from one version.
- ``POST /search``: ``{"question": ..., "tenant": ..., "k": 5, ...}``; the same JSON as ``toolkit search --format
  json`` (``toolkit.search.search`` with its defaults).
- ``GET /health``: 200 with the active version when the database answers, else 503.

Every answer that comes from a version says which in ``X-Toolkit-Version``. The tenant comes from the body
(``tenant``), the ``X-Toolkit-Tenant`` header, or ``--tenant``; the request key (canary split) from
``request_key`` / ``user`` or ``X-Toolkit-Request-Key``. Bodies are bounded (``MAX_BODY_BYTES``), as are the inputs
per request, the question's length and the time a statement may run. There is no authentication: it listens on a
loopback address only."""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psycopg
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
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
from toolkit.validation import MAX_ARGUMENT_CHARS

MAX_BODY_BYTES = 256 * 1024
MAX_INPUTS = 64  # questions per /v1/embeddings request
MAX_QUESTION_CHARS = MAX_ARGUMENT_CHARS
STATEMENT_TIMEOUT = "10s"  # per SQL statement of a request
POOL_WAIT_SECONDS = 10.0  # for a free database connection
RETRIES = 3  # a version retired between serving_model() and the search: read the serving model again
VERSION_HEADER = "X-Toolkit-Version"
SEARCH_FIELDS = {
    "question",
    "tenant",
    "k",
    "request_key",
    "filters",
    "principals",
    "hybrid",
    "expand",
    "version",
    "min_score",
    "diversity",
}
EMBEDDING_FIELDS = {"input", "model", "encoding_format", "dimensions", "user", "tenant", "request_key"}


class RequestError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.code = status, kind, code


@dataclass
class ServerSettings:
    database_url: str
    tenant: str | None = None  # the default tenant (a single-tenant deployment)
    pool_size: int = 8


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


async def _read_json(request: Request) -> dict:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise RequestError(413, f"The request body is over {MAX_BODY_BYTES} bytes.")
    received = bytearray()
    async for chunk in request.stream():
        received += chunk
        if len(received) > MAX_BODY_BYTES:
            raise RequestError(413, f"The request body is over {MAX_BODY_BYTES} bytes.")
    try:
        body = json.loads(received)
    except (ValueError, UnicodeDecodeError):
        raise RequestError(400, "The body is not JSON.") from None
    if not isinstance(body, dict):
        raise RequestError(400, "The body must be a JSON object.")
    return body


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


class App:
    """The endpoints over one connection pool."""

    def __init__(self, settings: ServerSettings):
        self.settings = settings
        self.pool = ConnectionPool(size=settings.pool_size, connect=self._connect)

    def _connect(self) -> psycopg.Connection:
        from toolkit.db.connection import connect

        return connect(self.settings.database_url, autocommit=True, statement_timeout=STATEMENT_TIMEOUT)

    def _tenant(self, request: Request, body: dict) -> str:
        tenant = body.get("tenant") or request.headers.get("x-toolkit-tenant") or self.settings.tenant
        if not tenant:
            raise RequestError(400, "Name the tenant: a tenant field, an X-Toolkit-Tenant header, or serve --tenant.")
        return _text(tenant, "tenant")

    def _request_key(self, request: Request, body: dict, *names: str) -> str | None:
        for name in names:
            if body.get(name) is not None:
                return _text(body[name], name)
        key = request.headers.get("x-toolkit-request-key")
        return _text(key, "X-Toolkit-Request-Key", required=False)

    def _with_retry(self, work):
        """``work(conn)`` on a pooled connection; a version retired meanwhile is retried with a fresh serving model."""
        for attempt in range(RETRIES):
            try:
                with self.pool.connection(POOL_WAIT_SECONDS) as conn:
                    return work(conn)
            except VersionUnavailableError:
                if attempt == RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    # --- endpoints -----------------------------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        def check(conn):
            from toolkit.store.versions import active_version

            return active_version(conn)

        try:
            active = await run_in_threadpool(self._with_retry, check)
        except (psycopg.Error, ToolkitError, TimeoutError) as error:
            return JSONResponse({"status": "unavailable", "error": str(error).strip()}, status_code=503)
        headers = {VERSION_HEADER: str(active)} if active is not None else None
        return JSONResponse({"status": "ok", "active_version": active, "toolkit": __version__}, headers=headers)

    async def search(self, request: Request) -> Response:
        body = await _read_json(request)
        unknown = sorted(set(body) - SEARCH_FIELDS)
        if unknown:
            raise RequestError(400, f"Unknown field {unknown[0]!r}; the fields are {', '.join(sorted(SEARCH_FIELDS))}.")
        question = _text(body.get("question"), "question")
        tenant = self._tenant(request, body)
        options = {
            "request_key": self._request_key(request, body, "request_key"),
            "principals": body.get("principals"),
            "version": _integer(body.get("version"), "version"),
        }
        if body.get("hybrid"):
            options["hybrid"] = True
        if body.get("expand") is not None:
            options["expand"] = _text(body["expand"], "expand")
        # Numbers checked by search() (the same rules as the CLI's); a string is not a number here.
        for name in ("min_score", "diversity"):
            value = body.get(name)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise RequestError(400, f"{name} must be a number.")
                options[name] = value
        k = _integer(body.get("k", 5), "k")
        filters = body.get("filters") or {}
        if isinstance(filters, list):
            from toolkit.search import parse_filters

            filters = parse_filters(filters)
        if not isinstance(filters, dict):
            raise RequestError(400, "filters must be an object or a list of KEY=VALUE strings.")
        principals = options["principals"]
        if principals is not None and (
            not isinstance(principals, list) or not all(isinstance(p, str) and p for p in principals)
        ):
            raise RequestError(400, "principals must be a list of non-empty strings.")

        def work(conn):
            from toolkit.search import search

            chosen = {name: value for name, value in options.items() if value is not None}
            return search(conn, question, tenant, k, filters=filters, **chosen)

        hits = await run_in_threadpool(self._with_retry, work)
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
        tenant = self._tenant(request, body)
        request_key = self._request_key(request, body, "request_key", "user")

        def work(conn):
            from toolkit.question import embed_questions

            return embed_questions(conn, questions, tenant, request_key)

        made = await run_in_threadpool(self._with_retry, work)
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


def _errors(handler):
    async def wrapped(request: Request) -> Response:
        try:
            return await handler(request)
        except RequestError as error:
            return _error(error.status, str(error), error.kind, error.code)
        except (InputError, ModelMismatchError) as error:
            return _error(400, str(error), "invalid_request_error")
        except (VersionUnavailableError, StateError, LockTimeoutError, DatabaseError, TimeoutError) as error:
            return _error(503, str(error), "service_unavailable", headers={"Retry-After": "1"})
        except psycopg.errors.QueryCanceled:
            return _error(504, f"The search took longer than {STATEMENT_TIMEOUT}.", "timeout")
        except psycopg.OperationalError as error:
            return _error(503, f"The database is unavailable: {str(error).strip()}", "service_unavailable")
        except EmbeddingError as error:
            return _error(502, str(error), "embedding_error")
        except ToolkitError as error:
            return _error(500, str(error), "server_error")

    return wrapped


def create_app(settings: ServerSettings) -> Starlette:
    app = App(settings)
    routes = [
        Route("/health", app.health, methods=["GET"]),
        Route("/search", _errors(app.search), methods=["POST"]),
        Route("/v1/embeddings", _errors(app.embeddings), methods=["POST"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_):
        yield
        app.pool.close()

    starlette = Starlette(routes=routes, lifespan=lifespan)
    starlette.state.toolkit = app
    return starlette


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


def server(
    settings: ServerSettings,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    workers_limit: int = 64,
    log_level: str = "warning",
):
    """A uvicorn server for the app (``server.run()`` serves until stopped; ``server.run(sockets=[s])`` on a socket
    already bound). At most ``workers_limit`` connections at once (503 beyond); idle keep-alive connections close
    after 5 s; request heads are bounded by h11."""
    import uvicorn

    check_loopback(host)
    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_level=log_level,
        limit_concurrency=workers_limit,
        timeout_keep_alive=5,
        timeout_graceful_shutdown=10,
        h11_max_incomplete_event_size=16 * 1024,
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


__all__: Sequence[str] = ("MAX_BODY_BYTES", "ServerSettings", "bound_socket", "create_app", "server")
