"""Properties every strategy keeps, with and without ``max_tokens``, ``parent=`` and ``window=``: no chunk is
empty or whitespace only, every document with text gets at least one chunk, and a sentence child never cuts a
sentence its parent holds whole. The generated documents are built to provoke the cases that broke these
(lone line breaks between blocks, heading-only documents, blank runs, fences and tables)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.chunking import STRATEGIES, get_chunker
from toolkit.chunking.sentence import sentence_spans
from toolkit.embedding import get_embedder

EMBEDDER = get_embedder("hashing:16")
WORDS = st.sampled_from(["refund", "order", "the", "of", "parcel", "résumé", "42", "x-ray", "`code`", "日本", "—"])
SETTINGS = settings(max_examples=40, deadline=None)


@st.composite
def sentence(draw) -> str:
    return " ".join(draw(st.lists(WORDS, min_size=1, max_size=18))).capitalize() + draw(st.sampled_from(".!?"))


@st.composite
def document(draw) -> str:
    """Markdown-like text: headings (possibly with nothing under them), paragraphs, fences, tables, and runs of
    blank lines, spaces and lone line breaks between them."""
    pieces = []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["heading", "paragraph", "paragraph", "fence", "table", "blank"]))
        if kind == "heading":
            pieces.append("#" * draw(st.integers(1, 3)) + " " + " ".join(draw(st.lists(WORDS, min_size=1, max_size=4))))
        elif kind == "paragraph":
            pieces.append(" ".join(draw(st.lists(sentence(), min_size=1, max_size=6))))
        elif kind == "fence":
            pieces.append("```\n" + "\n".join(draw(st.lists(sentence(), min_size=1, max_size=4))) + "\n```")
        elif kind == "table":
            rows = draw(st.lists(st.tuples(WORDS, WORDS), min_size=1, max_size=5))
            pieces.append("| a | b |\n| --- | --- |\n" + "\n".join(f"| {a} | {b} |" for a, b in rows))
        else:
            pieces.append(draw(st.sampled_from(["", " ", "\n", " \n \n", "\t"])))
    separators = st.sampled_from(["\n\n", "\n", "\n\n\n", "\n \n"])
    return "".join(piece + draw(separators) for piece in pieces)


def _spec(strategy: str, size: int, option: str) -> str:
    overlap = 1 if strategy in ("sentence", "semantic") else 0 if strategy == "cluster" else size // 5
    return f"{strategy}:{size}:{overlap}{option}"


OPTIONS = st.sampled_from(
    ["", ":max_tokens=12", ":max_tokens=30", ":window=1", ":parent=markdown,80,0", ":parent=recursive,60,0"]
)


@SETTINGS
@given(document(), st.sampled_from(STRATEGIES), st.integers(4, 60), OPTIONS)
def test_no_strategy_makes_an_empty_or_blank_chunk(text, strategy, size, option):
    chunker = get_chunker(_spec(strategy, size, option), embedder=EMBEDDER)
    chunks = chunker.chunk(text, "doc.md")
    for chunk in chunks:
        assert chunk.text.strip(), (chunk.start, chunk.end, chunk.is_parent)
        assert text[chunk.start : chunk.end] == chunk.text
    if text.strip():
        assert any(not c.is_parent for c in chunks), "a document with text got no chunk to search"


@SETTINGS
@given(st.sampled_from(STRATEGIES), st.lists(WORDS, min_size=1, max_size=4), st.sampled_from(["", "\n", "\n\n## b\n"]))
def test_a_document_that_is_only_headings_gets_one_chunk(strategy, words, tail):
    text = "# " + " ".join(words) + tail
    chunks = get_chunker(_spec(strategy, 400, ""), embedder=EMBEDDER).chunk(text, "only-a-heading.md")
    assert len(chunks) >= 1
    # A heading is found through a chunk's body or its heading path (both are embedded).
    embedded = " ".join(c.embed_text for c in chunks)
    assert all(word in embedded for word in words), "a heading is in no chunk"


def test_the_reported_heading_only_file_gets_a_chunk():
    (chunk,) = get_chunker("markdown:400:40").chunk("# hello", "hello.md")
    assert (chunk.text, chunk.start, chunk.end) == ("# hello", 0, 7)


@SETTINGS
@given(document(), st.integers(3, 40), st.sampled_from([":parent=markdown,120,0", ":parent=markdown,800,0"]))
def test_sentence_children_never_cut_a_sentence_their_parent_holds(text, size, parent):
    chunks = get_chunker(f"sentence:{size}:0{parent}").chunk(text, "doc.md")
    parents = [c for c in chunks if c.is_parent]
    children = [c for c in chunks if not c.is_parent]
    for start, end in sentence_spans(text):
        if any(p.start <= start and end <= p.end for p in parents):
            assert any(c.start <= start and end <= c.end for c in children), text[start:end]
    for child in children:
        assert child.token_count <= size or child.atomic, (child.text, child.token_count)


def test_the_reported_short_faq_is_not_cut():
    faq = (
        "# Uploads\n\n## Limits\n\nEvery file you upload counts towards the workspace quota. "
        "Files over the quota are refused with a message naming the workspace quota.\n"
    )
    children = [c for c in get_chunker("sentence:20:0:parent=markdown,800,0").chunk(faq, "faq.md") if not c.is_parent]
    for sentence_text in (
        "Every file you upload counts towards the workspace quota.",
        "Files over the quota are refused with a message naming the workspace quota.",
    ):
        assert any(sentence_text in c.text for c in children), sentence_text
    assert "workspace quota." not in [c.text for c in children]
    assert all(c.token_count <= 20 or c.atomic for c in children)
