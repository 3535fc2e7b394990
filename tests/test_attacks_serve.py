"""Hostile callers of `toolkit serve` (issue 39, items 1 and 2), each test named for the attack it reproduces, on a
real server (uvicorn on a bound socket of 127.0.0.1) over the real database:

- item 1, the tenant boundary: a body naming another tenant than the proxy's header, principals (access labels)
  from the body under a proxy, a foreign Host header (DNS rebinding), a text/plain or cross-origin POST (what a web
  page open on the same machine can send);
- item 2, staying up: 70 sockets that send nothing or half a request head, a 60 kB head, a k over the cap, a
  statement that runs out of time (504, not 503), malformed bodies (deep JSON, deep filters, a lone surrogate,
  ``filters: [5]``: 400, never 500).
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import threading
import time

import psycopg
import pytest
from support import wait_until

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
import httpx

from toolkit import cutover
from toolkit.backfill import backfill
from toolkit.ingest import ingest

SECRET = "The globex launch codes are kept in the orange binder."
SALARIES = "The acme salary bands for engineers are reviewed every spring."
PUBLIC = "The acme kestrel project ships its launch checklist on Fridays."


@pytest.fixture
def store(conn, database_url, make_model, tmp_path):
    """Two tenants: acme with a public document and one labelled ``hr``, globex with a secret; one active version."""
    for tenant, name, text, acl in (
        ("acme", "public.md", PUBLIC, ()),
        ("acme", "hr.md", SALARIES, ("hr",)),
        ("globex", "secret.md", SECRET, ()),
    ):
        folder = tmp_path / f"{tenant}-{name}"
        folder.mkdir()
        (folder / name).write_text(f"# {name}\n\n{text}\n")
        ingest(conn, [folder], tenant, acl=acl)
    make_model("m", 32, options={"seed": 3})
    version = backfill(database_url, "m", "recursive:120:0").version
    cutover.activate_version(conn, version, force=True)
    return version


@pytest.fixture
def start(database_url, store):
    """Starts a server with these settings (``ServerSettings`` fields, then ``server()`` keywords) on a free port
    of 127.0.0.1 in a thread; returns its URL once /health answers. Every server is stopped at the end."""
    from toolkit import serve

    running = []

    def start_server(*, server_options: dict | None = None, **settings) -> str:
        sock = serve.bound_socket()
        server = serve.server(serve.ServerSettings(database_url, **settings), **(server_options or {}))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        running.append((server, thread, sock))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200
        return url

    yield start_server
    for server, thread, sock in running:
        server.should_exit = True
        thread.join(30)
        sock.close()


def refused(answer: httpx.Response, status: int, words: str) -> None:
    """A refusal: the status, JSON in OpenAI's error shape, one sentence holding ``words``."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/json"), answer.headers
    message = answer.json()["error"]["message"]
    assert words in message and message.endswith("."), message


def doc_ids(answer: httpx.Response) -> set[str]:
    assert answer.status_code == 200, answer.text
    return {hit["doc_id"] for hit in answer.json()}


# -- item 1: the tenant boundary ---------------------------------------------------------------------------------


def test_a_body_naming_another_tenant_never_wins_over_the_proxy_header(start):
    """The proxy authenticated the caller as acme and said so in X-Toolkit-Tenant; the body asks for globex."""
    attack = {"question": "launch codes orange binder", "tenant": "globex", "k": 5}
    proxied = start(trust_proxy_headers=True)
    refused(httpx.post(f"{proxied}/search", json=attack, headers={"X-Toolkit-Tenant": "acme"}), 400, "X-Toolkit-Tenant")
    refused(
        httpx.post(
            f"{proxied}/v1/embeddings", json={"input": "x", "tenant": "globex"}, headers={"X-Toolkit-Tenant": "acme"}
        ),
        400,
        "X-Toolkit-Tenant",
    )
    # The header alone decides: acme's answer, nothing of globex; no header at all is refused.
    question = {"question": "launch codes orange binder", "k": 5}
    assert doc_ids(httpx.post(f"{proxied}/search", json=question, headers={"X-Toolkit-Tenant": "acme"})) == {
        "public.md"
    }
    refused(httpx.post(f"{proxied}/search", json=question), 401, "X-Toolkit-Tenant")
    # Without --trust-proxy-headers (a server someone put a proxy in front of anyway), header and body disagreeing
    # is refused too, never settled in the body's favour.
    direct = start()
    refused(httpx.post(f"{direct}/search", json=attack, headers={"X-Toolkit-Tenant": "acme"}), 400, "globex")
    # A pinned tenant (serve --tenant acme) cannot be overridden by a body.
    pinned = start(tenant="acme")
    refused(httpx.post(f"{pinned}/search", json=attack), 400, "acme")
    assert doc_ids(httpx.post(f"{pinned}/search", json=question)) == {"public.md"}


def test_principals_from_the_body_are_refused_behind_a_proxy(start):
    """Access labels are the proxy's to say (X-Toolkit-Principals); a caller naming its own gets a 400."""
    url = start(trust_proxy_headers=True)
    question = {"question": "salary bands engineers", "k": 5}
    refused(
        httpx.post(f"{url}/search", json={**question, "principals": ["hr"]}, headers={"X-Toolkit-Tenant": "acme"}),
        400,
        "X-Toolkit-Principals",
    )
    # Without the header the caller holds no label: the hr document stays hidden; with it, it is found.
    assert "hr.md" not in doc_ids(httpx.post(f"{url}/search", json=question, headers={"X-Toolkit-Tenant": "acme"}))
    labelled = {"X-Toolkit-Tenant": "acme", "X-Toolkit-Principals": "finance, hr"}
    assert "hr.md" in doc_ids(httpx.post(f"{url}/search", json=question, headers=labelled))


def test_a_foreign_host_header_is_refused_against_dns_rebinding(start):
    """A page of evil.example whose name was rebound to 127.0.0.1 sends Host: evil.example."""
    url = start(tenant="acme")
    port = url.rsplit(":", 1)[1]
    body = {"question": "kestrel project", "k": 3}
    refused(httpx.post(f"{url}/search", json=body, headers={"Host": f"evil.example:{port}"}), 421, "evil.example")
    refused(httpx.get(f"{url}/health", headers={"Host": "evil.example"}), 421, "evil.example")
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
        assert httpx.post(f"{url}/search", json=body, headers={"Host": host}).status_code == 200, host
    # A name the operator allowed (the one its proxy forwards) is taken.
    allowed = start(tenant="acme", allowed_hosts=("rag.internal",))
    assert httpx.post(f"{allowed}/search", json=body, headers={"Host": "rag.internal"}).status_code == 200


def test_a_cross_origin_text_plain_post_is_refused(start):
    """A web page may POST text/plain to any address without a CORS preflight; the body is valid JSON."""
    url = start(tenant="acme")
    body = json.dumps({"question": "kestrel project", "k": 3})
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": content_type} if content_type else {}
        refused(httpx.post(f"{url}/search", content=body, headers=headers), 415, "application/json")
    refused(httpx.post(f"{url}/v1/embeddings", content='{"input": "x"}', headers={"Content-Type": "text/plain"}), 415,
            "application/json")  # fmt: skip
    # A browser's cross-origin fetch carries its page's Origin: refused even with a JSON content type.
    evil = {"Origin": "http://evil.example"}
    refused(httpx.post(f"{url}/search", json={"question": "kestrel", "k": 3}, headers=evil), 403, "evil.example")
    json_utf8 = {"Content-Type": "application/json; charset=utf-8"}
    assert httpx.post(f"{url}/search", content=body, headers=json_utf8).status_code == 200


# -- item 2: staying up -----------------------------------------------------------------------------------------


def _closed_within(sockets: list[socket.socket], deadline: float, still_open: int = 0) -> list[socket.socket]:
    """Waits until each socket but ``still_open`` of them reads end-of-file (the server closed it; whatever it wrote
    first is drained) or the deadline passes; returns the sockets still open."""
    selector = selectors.DefaultSelector()
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    open_ones = set(sockets)
    while len(open_ones) > still_open and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=max(0.0, deadline - time.monotonic())):
            try:
                data = key.fileobj.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                selector.unregister(key.fileobj)
                open_ones.discard(key.fileobj)
    selector.close()
    return list(open_ones)


def test_seventy_idle_or_half_sent_sockets_neither_block_requests_nor_stay_open(start):
    """60 sockets that send nothing, 10 that send half a request head, and one that drips a header byte by byte
    (slowloris): other requests are answered, and every one of them is closed within the head timeout."""
    from toolkit.serve import HEAD_TIMEOUT

    url = start(tenant="acme")
    address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
    silent = [socket.create_connection(address) for _ in range(60)]
    half = [socket.create_connection(address) for _ in range(10)]
    for sock in half:
        sock.sendall(b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl")
    drip = socket.create_connection(address)
    drip.sendall(b"GET /health HTTP/1.1\r\n")
    opened = time.monotonic()
    try:
        # The 71 were accepted before it (the listen backlog is first in, first out).
        answer = httpx.post(f"{url}/search", json={"question": "kestrel project", "k": 3}, timeout=30)
        assert doc_ids(answer) == {"public.md"}
        dripping = True
        while dripping and time.monotonic() < opened + HEAD_TIMEOUT + 10:
            try:
                drip.sendall(b"X")
            except OSError:
                dripping = False  # closed by the server
            if dripping and not _closed_within([drip], time.monotonic() + 0.2):
                dripping = False
        assert not dripping, "a head sent one byte at a time kept its socket open"
        left = _closed_within(silent + half, opened + HEAD_TIMEOUT + 10)
        assert not left, f"{len(left)} of 70 idle sockets still open {HEAD_TIMEOUT + 10} s after they connected"
    finally:
        for sock in silent + half + [drip]:
            sock.close()


def test_a_flood_of_sockets_closes_the_longest_waiting_not_the_newcomer(start, monkeypatch):
    """More sockets than the server keeps open: each new one closes the one waiting longest for a head (the head
    timeout is made long here, so every close seen is one of these)."""
    from toolkit import serve

    monkeypatch.setattr(serve, "MAX_CONNECTIONS", 5)
    monkeypatch.setattr(serve, "HEAD_TIMEOUT", 600.0)
    url = start(tenant="acme")
    address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
    silent = [socket.create_connection(address) for _ in range(8)]
    try:
        assert doc_ids(httpx.post(f"{url}/search", json={"question": "kestrel project", "k": 3})) == {"public.md"}
        left = _closed_within(silent, time.monotonic() + 30, still_open=4)
        assert len(left) == 4, f"{8 - len(left)} of the 8 waiting sockets were closed; 4 should have been"
    finally:
        for sock in silent:
            sock.close()


def test_a_body_that_never_arrives_gets_408(start, monkeypatch):
    from toolkit import serve

    monkeypatch.setattr(serve, "BODY_TIMEOUT", 1.0)
    url = start(tenant="acme")
    address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(
            b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"question"'
        )
        answer_bytes = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                answer_bytes += chunk
    assert answer_bytes.startswith(b"HTTP/1.1 408 "), answer_bytes[:200]
    assert "send it whole" in json.loads(answer_bytes.split(b"\r\n\r\n", 1)[1])["error"]["message"]


def test_a_60_kb_request_head_is_refused(start):
    url = start(tenant="acme")
    answer = httpx.post(
        f"{url}/search", json={"question": "kestrel project", "k": 3}, headers={"X-Padding": "a" * 60_000}
    )
    assert answer.status_code == 431, answer.text
    # A head still incomplete at 20 kB (the rest may never come): refused without waiting for its end.
    address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 20_000)
        answer_bytes = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                answer_bytes += chunk
    assert answer_bytes.startswith(b"HTTP/1.1 431 "), answer_bytes[:200]
    assert json.loads(answer_bytes.split(b"\r\n\r\n", 1)[1])["error"]["message"].endswith(".")
    # Under the bound, many headers are fine.
    padded = {f"X-Padding-{n}": "a" * 100 for n in range(40)}
    assert httpx.post(f"{url}/search", json={"question": "kestrel project", "k": 3}, headers=padded).status_code == 200


def test_a_k_over_the_cap_is_refused(start):
    from toolkit.serve import MAX_K

    url = start(tenant="acme")
    for k in (MAX_K + 1, 1000, 10**9):
        refused(httpx.post(f"{url}/search", json={"question": "kestrel", "k": k}), 400, f"at most {MAX_K}")
    assert httpx.post(f"{url}/search", json={"question": "kestrel", "k": MAX_K}).status_code == 200


def test_clients_asking_the_largest_k_cannot_take_every_connection(start, conn, store, database_url):
    """Six searches at the largest k on a pool of 4: they share a quarter of it (one connection), so a small request
    still finds a connection. The version's table is locked by the test, so the large search that runs waits on
    the lock (seen in pg_locks) and the others wait for their budget."""
    from toolkit.serve import MAX_K

    url = start(tenant="acme", pool_size=4)
    table = f"toolkit.chunks_v{store}"
    answers: list[int] = []

    def large() -> None:
        answers.append(httpx.post(f"{url}/search", json={"question": "kestrel", "k": MAX_K}, timeout=60).status_code)

    def waiting_on_the_lock(watcher) -> int:
        return watcher.execute(
            "SELECT count(*) FROM pg_locks WHERE relation = %s::regclass AND NOT granted", (table,)
        ).fetchone()[0]

    with psycopg.connect(database_url, autocommit=True) as watcher:
        with conn.transaction():
            conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            threads = [threading.Thread(target=large) for _ in range(6)]
            for thread in threads:
                thread.start()
            wait_until(lambda: waiting_on_the_lock(watcher) >= 1, "a large search waiting on the lock")
            health = httpx.get(f"{url}/health", timeout=60)
            assert health.status_code == 200, health.text
            assert waiting_on_the_lock(watcher) == 1
        for thread in threads:
            thread.join(60)
    assert answers == [200] * 6


def test_a_statement_timeout_answers_504_not_database_down(start, conn, store):
    """The version's table is locked by another session, so the search waits until its statement timeout."""
    url = start(tenant="acme", statement_timeout="300ms")
    with conn.transaction():
        conn.execute(f"LOCK TABLE toolkit.chunks_v{store} IN ACCESS EXCLUSIVE MODE")
        answer = httpx.post(f"{url}/search", json={"question": "kestrel", "k": 3}, timeout=60)
    refused(answer, 504, "300ms")
    assert "toolkit db start" not in answer.text


@pytest.mark.parametrize(
    ("attack", "body"),
    [
        ("deep_json", b"[" * 100_000 + b"]" * 100_000),
        ("deep_json_in_a_field", b'{"question": "q", "filters": {"metadata": ' + b"[" * 5000 + b"]" * 5000 + b"}}"),
        (
            "deep_filter_value",
            json.dumps({"question": "q", "filters": ["metadata.x=" + "[" * 100_000 + "]" * 100_000]}).encode(),
        ),
        ("lone_surrogate", b'{"question": "kestrel \\ud800 project", "k": 3}'),
        ("lone_surrogate_in_a_key", b'{"question": "kestrel", "\\udfff": 1}'),
        ("filters_not_strings", b'{"question": "kestrel", "filters": [5]}'),
        ("filters_a_number", b'{"question": "kestrel", "filters": 5}'),
        ("principals_nested", b'{"question": "kestrel", "principals": [["hr"]]}'),
        ("not_utf8", b'{"question": "kestrel \xff\xfe"}'),
    ],
)
def test_a_malformed_body_gets_a_400_never_a_500(start, attack, body):
    url = start(tenant="acme")
    answer = httpx.post(f"{url}/search", content=body, headers={"Content-Type": "application/json"}, timeout=60)
    assert answer.status_code == 400, (attack, answer.status_code, answer.text[:300])
    assert answer.json()["error"]["message"].endswith("."), answer.text[:300]


def test_every_error_answers_json(start):
    """Routing errors too (an unknown path, a wrong method): a client parses one error shape."""
    url = start(tenant="acme")
    refused(httpx.get(f"{url}/nowhere"), 404, "/nowhere")
    refused(httpx.get(f"{url}/search"), 405, "POST")
