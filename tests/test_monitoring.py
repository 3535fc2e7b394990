"""Monitoring the way operators do (issue 37, item 3), on a real server over a real database: /health is liveness (200
without a database), /ready is readiness (a real pinned search: 503 with a JSON reason when search fails, 200 when it
works again), /metrics is Prometheus' text format (parsed with prometheus_client's own parser), an unknown path or
method gets JSON, `toolkit status --format json` gives ISO 8601 durations and nulls, and toolkit.version_lag shows
how far a version is behind."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")
import httpx
from prometheus_client.parser import text_string_to_metric_families

from toolkit import cutover
from toolkit.backfill import backfill
from toolkit.cli import main
from toolkit.ingest import ingest

SAMPLE = Path(__file__).resolve().parent.parent / "toolkit" / "data" / "sample" / "docs"
TENANT = "acme"
QUESTION = "How do I create an index on an expression?"


@pytest.fixture
def versions(conn, database_url, make_model, tmp_path):
    """Two versions of two documents, the first active, the second a complete candidate serving nothing."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("row-security.md", "indexes.md"):
        shutil.copyfile(SAMPLE / name, docs / name)
    make_model("one", 32, options={"seed": 1})
    make_model("two", 48, options={"seed": 2})
    ingest(conn, [docs], TENANT)
    first = backfill(database_url, "one", "recursive:120:0").version
    second = backfill(database_url, "two", "fixed:64:0").version
    cutover.activate_version(conn, first, force=True)
    return first, second


@pytest.fixture
def start():
    """Starts a server for a database URL on a free port of 127.0.0.1 in a thread; returns its base URL once it
    answers. Every server is stopped at the end."""
    from toolkit.serve import ServerSettings, bound_socket, server

    running = []

    def start_server(url: str, **settings) -> str:
        sock = bound_socket()
        serving = server(ServerSettings(url, pool_size=4, **settings))
        thread = threading.Thread(target=serving.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        running.append((serving, thread, sock))
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        # The socket listens already: the first request waits in its backlog until the server accepts it.
        httpx.get(f"{base}/health", timeout=30)
        return base

    yield start_server
    for serving, thread, sock in running:
        serving.should_exit = True
        thread.join(30)
        sock.close()


def error_message(answer: httpx.Response, status: int) -> str:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    message = answer.json()["error"]["message"]
    assert message and message.endswith(".")
    return message


def samples(base: str) -> dict:
    """/metrics parsed by prometheus_client's parser: {(sample name, sorted labels): value}."""
    answer = httpx.get(f"{base}/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    found = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_health_is_liveness_and_ready_is_503_without_a_database(start):
    """Nothing listens on port 1: the process is alive (200), not ready (503, with the reason, in JSON)."""
    base = start("postgresql://toolkit@127.0.0.1:1/nothing?connect_timeout=2")
    health = httpx.get(f"{base}/health", timeout=30)
    assert health.status_code == 200, health.text
    assert health.json()["status"] == "ok" and health.json()["active_version"] is None
    assert health.json()["database"] != "ok"
    message = error_message(httpx.get(f"{base}/ready", timeout=30), 503)
    assert message.startswith("A search failed:")
    assert samples(base)[("toolkit_serve_database_up", ())] == 0


def test_ready_is_503_while_search_fails_and_200_when_it_works(start, database_url, conn, versions):
    """The reader loses its grant on toolkit.serving_model (as a downgraded or damaged schema would take it): /ready
    answers 503 naming the failure, as /search fails; given back, /ready is 200 again and names the version."""
    base = start(database_url, tenant=TENANT)
    ready = httpx.get(f"{base}/ready", timeout=30)
    assert ready.status_code == 200, ready.text
    assert ready.json()["status"] == "ready" and ready.json()["version"] == versions[0]
    assert ready.headers["X-Toolkit-Version"] == str(versions[0])
    conn.execute("REVOKE EXECUTE ON FUNCTION toolkit.serving_model FROM toolkit_reader")
    message = error_message(httpx.get(f"{base}/ready", timeout=30), 503)
    assert "serving_model" in message and "permission denied" in message
    assert httpx.post(f"{base}/search", json={"question": QUESTION}, timeout=30).status_code >= 500
    assert httpx.get(f"{base}/health", timeout=30).status_code == 200  # alive all along
    conn.execute("GRANT EXECUTE ON FUNCTION toolkit.serving_model TO toolkit_reader")
    assert httpx.get(f"{base}/ready", timeout=30).status_code == 200


def test_ready_is_503_without_an_active_version(start, database_url, conn, versions):
    base = start(database_url, tenant=TENANT)
    assert httpx.get(f"{base}/ready", timeout=30).status_code == 200
    conn.execute("UPDATE toolkit.versions SET state = 'ready' WHERE version = %s", (versions[0],))
    message = error_message(httpx.get(f"{base}/ready", timeout=30), 503)
    assert "active" in message


def test_metrics_count_requests_errors_versions_and_pool(start, database_url, conn, versions):
    from toolkit.serving import set_canary

    set_canary(conn, versions[1], 30, force=True)
    base = start(database_url, tenant=TENANT)
    # request keys the canary does not take: the active version serves them
    served = httpx.post(f"{base}/search", json={"question": QUESTION, "k": 2}, timeout=30)
    assert served.status_code == 200, served.text
    version = served.headers["X-Toolkit-Version"]
    refused = httpx.post(f"{base}/search", json={"question": QUESTION, "k": 0}, timeout=30)
    assert refused.status_code == 400
    assert httpx.get(f"{base}/no-such-page", timeout=30).status_code == 404
    found = samples(base)
    search = (("endpoint", "/search"), ("status", "200"), ("version", version))
    assert found[("toolkit_serve_requests_total", search)] == 1
    assert found[("toolkit_serve_errors_total", (("endpoint", "/search"), ("status", "400"), ("version", "none")))] == 1
    assert ("toolkit_serve_errors_total", search) not in found
    assert found[("toolkit_serve_errors_total", (("endpoint", "other"), ("status", "404"), ("version", "none")))] == 1
    assert found[("toolkit_serve_request_duration_seconds_count", (("endpoint", "/search"), ("version", version)))] == 1
    assert found[("toolkit_serve_pool_connections", (("state", "size"),))] == 4
    assert found[("toolkit_serve_pool_connections", (("state", "in_use"),))] == 0
    assert found[("toolkit_serve_pool_connections", (("state", "waiting"),))] == 0
    assert found[("toolkit_active_version", ())] == versions[0]
    assert found[("toolkit_canary_percent", (("candidate", str(versions[1])),))] == 30
    assert found[("toolkit_serve_database_up", ())] == 1
    # the scrape itself is counted once it has answered
    again = samples(base)
    assert again[("toolkit_serve_requests_total", (("endpoint", "/metrics"), ("status", "200"), ("version", "none")))]


def test_unknown_paths_and_methods_get_json(start, database_url, versions):
    base = start(database_url, tenant=TENANT)
    assert "/ready" in error_message(httpx.get(f"{base}/nowhere", timeout=30), 404)
    assert "GET" in error_message(httpx.delete(f"{base}/ready", timeout=30), 405)
    assert "POST" in error_message(httpx.get(f"{base}/search", timeout=30), 405)


def test_status_json_has_iso_durations_nulls_and_lag(database_url, versions):
    result = CliRunner().invoke(main, ["--database-url", database_url, "status", "--format", "json"])
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert status["query_log"]["retention"] == "P30D"
    serving = {row["version"]: row["serving"] for row in status["versions"]}
    assert serving == {versions[0]: "active", versions[1]: None}
    assert status["canary"] is None
    assert [(row["version"], row["caught_up"]) for row in status["lag"]] == [(versions[0], True), (versions[1], True)]
    # toolkit query-log's own JSON gives the retention the same way (it said "30 days, 0:00:00")
    logged = CliRunner().invoke(main, ["--database-url", database_url, "query-log", "--format", "json"])
    assert logged.exit_code == 0, logged.output
    assert json.loads(logged.stdout)["retention"] == "P30D"


def test_version_lag_shows_a_version_behind(conn, versions, database_url):
    """The candidate loses the embeddings of one document's chunks and every row of another: it is two documents
    behind, one of them not chunked, with those chunks not embedded; the active version is caught up."""
    table = f"toolkit.chunks_v{versions[1]}"
    emptied = conn.execute(
        f"UPDATE {table} SET embedding = NULL WHERE doc_id = 'indexes.md' AND NOT is_parent"
    ).rowcount
    conn.execute(f"DELETE FROM {table} WHERE doc_id = 'row-security.md'")
    assert emptied > 0
    rows = {row[0]: row for row in conn.execute(
        "SELECT version, state, active_version, documents, documents_behind, documents_not_chunked,"
        " rows_not_embedded, oldest_pending_since IS NOT NULL, caught_up FROM toolkit.version_lag()"
    )}  # fmt: skip
    assert rows[versions[0]][1:] == ("active", versions[0], 2, 0, 0, 0, False, True)
    assert rows[versions[1]][1:] == ("ready", versions[0], 2, 2, 1, emptied, True, False)
    result = CliRunner().invoke(main, ["--database-url", database_url, "status"])
    assert result.exit_code == 0, result.output
    assert f"Version {versions[1]} (ready) is behind: 2 documents" in result.output
