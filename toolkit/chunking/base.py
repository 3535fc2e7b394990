"""The chunk record and the chunker interface every strategy implements.

A strategy only proposes spans (start, end, heading path, context); this module trims them, enforces
the token budget and the embedding model's input limit, and turns them into ``Chunk`` records with
exact offsets, stable ids and hashes.
"""

from __future__ import annotations

import hashlib

from toolkit.chunking.document import Chunk, Document, Span, compose_embed_text, trim
from toolkit.chunking.outline import heading_outline, source_format
from toolkit.chunking.spec import Spec
from toolkit.chunking.split import split_range
from toolkit.errors import InputError
from toolkit.text.tokens import wrap_tokenizer


class Chunker:
    """Base class: ``chunk(text, doc_id)`` → chunks. Subclasses implement ``spans(document)``."""

    # 2: a Markdown or HTML source's chunks carry the heading path at their start (toolkit.chunking.outline).
    algorithm_version = 2
    trims_whitespace = True
    # A strategy that reads a format's headings itself (markdown, html; code its definitions) sets its paths;
    # for every other strategy, Markdown and HTML sources get theirs from the document's heading outline.
    own_headings = False

    def __init__(self, spec: Spec, *, tokenizer=None, embedder=None):
        self.spec = spec
        self.size = spec.size
        self.overlap = spec.overlap
        self.unit = spec.unit
        self.tokenizer = wrap_tokenizer(tokenizer)
        self._chunking = getattr(self.tokenizer, "chunking", None)
        self.embedder = embedder
        self.max_tokens = spec.options.get("max_tokens") or getattr(embedder, "max_input_tokens", None)
        self.on_overflow = spec.options.get("on_overflow", "split")
        self.context_mode = spec.options.get("context")
        # The model's own count (prefix and special tokens included) decides whether it accepts a chunk.
        self.limit_counter = getattr(embedder, "count_tokens", None)
        if self.limit_counter is not None and self.max_tokens:
            prefix = getattr(embedder, "document_prefix", "")
            self.limit_counter = _ModelCount(self.limit_counter, prefix, self.max_tokens)

    @property
    def version(self) -> str:
        """Spec and algorithm version, e.g. ``markdown:400:40@1``; stored with every chunk."""
        return f"{self.spec.canonical}@{self.algorithm_version}"

    def spans(self, document: Document) -> list[Span]:
        raise NotImplementedError

    def chunk(self, text: str, doc_id: str | None = None, *, title: str | None = None) -> list[Chunk]:
        """Chunks of ``text``; with ``context=title`` each embeds ``title`` (default: the text's own title line,
        see ``document_title``) above its body."""
        if not isinstance(text, str):
            raise InputError(
                f"Chunkers take text (str), not {type(text).__name__}; decode the file first "
                "(toolkit.text.sources.read_documents does that)."
            )
        if self._chunking is not None:
            self._chunking(len(text))  # the shared cl100k counter picks its engine by how much the process chunks
        document = Document(text, self.tokenizer, self.unit, doc_id)
        document.title = (document_title(text) if title is None else title) if self.context_mode == "title" else ""
        if document.title and self.unit == "tokens":
            document.reserved = self.tokenizer.count(document.title + "\n")
        if not self.own_headings:
            document.outline = heading_outline(text, source_format(doc_id))
        return build_chunks(
            document,
            self.counted_spans(document),
            doc_id,
            self.version,
            self.max_tokens,
            self.on_overflow,
            self.limit_counter,
        )

    def counted_spans(self, document: Document) -> list[tuple[Span, int]]:
        """The final spans (trimmed, within the budget) with their exact sizes (``Document.embed_tokens``)."""
        spans = self.spans(document)
        if self.trims_whitespace:
            spans = [span for span in (trim(document.text, span) for span in spans) if span is not None]
        if not spans and (whole := trim(document.text, Span(0, len(document.text)))) is not None:
            # Every document with text gets at least one chunk: a Markdown file that is only a heading has no
            # section body, and a document no chunk comes from can never be found (and is chunked again by
            # every backfill).
            spans = [whole]
        return self.finish_spans(document, spans)

    def finish_spans(self, document: Document, spans: list[Span]) -> list[tuple[Span, int]]:
        """The title attached and the budget enforced, then the heading paths of a Markdown or HTML source attached
        (after: the split rule is the strategy's, unchanged by them), each span with its exact size."""
        spans = self.enforce_budget(document, attach_title(document, spans))
        return [(span, document.embed_tokens(span)) for span in attach_headings(document, spans)]

    def enforce_budget(self, document: Document, spans: list[Span]) -> list[Span]:
        """Split any non-atomic span over the budget (a safety net under every strategy)."""
        result = []
        for span in spans:
            # Measured exactly as stored (spans are already trimmed, except fixed windows, which are not).
            size = span.end - span.start if self.unit == "chars" else document.embed_tokens(span)
            if span.atomic or size <= self.size:
                result.append(span)
                continue
            result.extend(split_range(document, span, self.size))
        return result


def attach_headings(document: Document, spans: list[Span]) -> list[Span]:
    """For a Markdown or HTML source (``Document.outline``), each span the strategy gave no heading path gets the
    path of the headings enclosing its start. The path is context above the body, like a title: the strategy sized
    the body, the path comes on top (the model's input limit still holds: ``build_chunks`` splits to it). A title
    (``context=title``) that the path already starts with is not repeated."""
    outline = document.outline
    if outline is None:
        return spans
    result = []
    for s in spans:
        if s.heading_path:
            result.append(s)
            continue
        path = outline.path_at(s.start)
        context = s.context
        title = document.title
        if title and path[:1] == (title,) and (context == title or context.startswith(title + "\n")):
            context = context[len(title) + 1 :]
        result.append(Span(s.start, s.end, path, context, s.atomic))
    return result


def attach_title(document: Document, spans: list[Span]) -> list[Span]:
    """With ``context=title``, each span with the document's title above its own context (a table's header rows),
    below its heading path (unless the path already starts with the title); the budget counts it exactly from
    then on (``Document.reserved`` drops to 0)."""
    title = document.title
    if not title:
        return spans
    document.reserved = 0
    return [
        s
        if s.heading_path[:1] == (title,)
        else Span(s.start, s.end, s.heading_path, title + "\n" + s.context if s.context else title, s.atomic)
        for s in spans
    ]


_TITLE_MARKUP = " \t#=*-_>"
TITLE_CHARACTERS = 80


def document_title(text: str) -> str:
    """A document's title for ``context=title``: its first line with text, without Markdown heading or emphasis
    marks, cut at a word to at most 80 characters (a title is context, not content)."""
    for line in text.splitlines():
        title = " ".join(line.strip(_TITLE_MARKUP).split())
        if title:
            if len(title) > TITLE_CHARACTERS:
                title = title[:TITLE_CHARACTERS].rsplit(" ", 1)[0]
            return title
    return ""


# Special tokens a model may add around a text (BERT's [CLS] and [SEP], a BOS/EOS pair, ...), with room to spare.
_SPECIAL_TOKENS = 16


class _ModelCount:
    """The embedding model's token count of a text, or an upper bound of it where that bound is already within
    the limit, so short chunks are not tokenized twice. The bound applies to ASCII text only: its length (with
    the document prefix) plus ``_SPECIAL_TOKENS``, since byte-level BPE, SentencePiece, WordPiece and character
    tokenizers give at most one token per ASCII character (beyond ASCII, normalization can expand a character:
    NFKC turns U+FDFA into 18). A tokenizer that gave more would still never see an input over its limit:
    ``embed_documents`` counts every input exactly and refuses one that is over."""

    def __init__(self, count, prefix: str | None, limit: int):
        self.count = count
        self.limit = limit
        self.overhead = len(prefix or "") + _SPECIAL_TOKENS
        self.ascii_prefix = (prefix or "").isascii()

    def __call__(self, text: str) -> int:
        bound = len(text) + self.overhead
        if bound <= self.limit and self.ascii_prefix and text.isascii():
            return bound
        return self.count(text)


def _limit_count(document: Document, span: Span, tokens: int, limit_counter) -> int:
    if limit_counter is None:
        return tokens
    return limit_counter(compose_embed_text(span.heading_path, span.context, document.text[span.start : span.end]))


def _split_to_limit(document: Document, span: Span, max_tokens: int, limit_counter) -> list[Span]:
    """Split a span until every piece is within the model's limit, atomic units included (this is the one
    rule that outranks "never cut a code block"); the budget shrinks if the model counts more tokens."""
    budget = max_tokens
    while True:
        pieces = split_range(document, span, budget, in_tokens=True, ignore_protection=True)
        over = [p for p in pieces if _limit_count(document, p, document.embed_tokens(p), limit_counter) > max_tokens]
        if not over:
            return pieces
        if budget <= 1:
            raise InputError(
                f"A piece of {document.doc_id or 'the document'} at characters {over[0].start}-{over[0].end} "
                f"cannot be brought under the model's input limit of {max_tokens} tokens (its heading path "
                "alone may be too long); shorten the headings or use a model with a larger limit."
            )
        budget = max(1, int(budget * 0.8))


def chunk_id(doc_id: str | None, start: int, end: int, text: str, encoded: bytes | None = None) -> str:
    """Stable id: the same document, span and text always give the same id (``encoded``: the text's UTF-8, when
    the caller has it already)."""
    key = hashlib.sha256(f"{doc_id or ''}\x1f{start}\x1f{end}\x1f".encode())
    key.update(text.encode() if encoded is None else encoded)
    return key.hexdigest()[:32]


# What a passage may hold between two chunks and still be one (toolkit._spans_touch; toolkit.evaluation.retrieval).
_WHITESPACE = " \t\n\r\f\v"
# The longest gap a chunk row keeps (SQL's migration of earlier rows keeps the same).
MAX_GAP = 4096


def gap_before(text: str, start: int) -> str | None:
    """The whitespace right before ``start`` in ``text`` (ASCII, as SQL counts it), None when MAX_GAP or longer."""
    i = start
    limit = max(start - MAX_GAP, 0)
    while i > limit and text[i - 1] in _WHITESPACE:
        i -= 1
    gap = text[i:start]
    return None if len(gap) >= MAX_GAP else gap


def build_chunks(
    document: Document,
    spans: list[Span] | list[tuple[Span, int]],
    doc_id: str | None,
    version: str,
    max_tokens: int | None,
    on_overflow: str,
    limit_counter=None,
    *,
    check_limit: bool = True,
) -> list[Chunk]:
    """Turn spans (or (span, exact size) pairs) into chunks, applying the embedding model's input limit (split or
    refuse)."""
    text = document.text
    counted = []
    seen = None  # the spans kept, once a split to the model's limit may repeat one
    for item in spans:
        span, n = item if isinstance(item, tuple) else (item, document.embed_tokens(item))
        if span.end <= span.start or text[span.start : span.end].isspace():
            continue  # whitespace only: nothing to find, and it must never rank (the last guard of every strategy)
        if check_limit and max_tokens and _limit_count(document, span, n, limit_counter) > max_tokens:
            if on_overflow == "error":
                raise InputError(
                    f"A chunk of {doc_id or 'the document'} at characters {span.start}-{span.end} is over "
                    f"the embedding model's input limit of {max_tokens} tokens; use a smaller chunk size, "
                    "or on_overflow=split to split such chunks further."
                )
            # Two overlapping spans over the limit can split into the same piece: it is kept once (the same span
            # twice is the same chunk id, which a version's table refuses).
            if seen is None:
                seen = {(s.start, s.end) for s, _ in counted}
            for piece in _split_to_limit(document, span, max_tokens, limit_counter):
                if (piece.start, piece.end) not in seen:
                    seen.add((piece.start, piece.end))
                    counted.append((piece, document.embed_tokens(piece)))
        elif seen is None:
            counted.append((span, n))
        elif (span.start, span.end) not in seen:  # after a split, a span may repeat one of its pieces
            seen.add((span.start, span.end))
            counted.append((span, n))
    total = len(counted)
    sha256 = hashlib.sha256
    new = object.__new__
    chunks = []
    for position, (span, n) in enumerate(counted):
        start, end = span.start, span.end
        body = text[start:end]
        data = body.encode()
        identity = chunk_id(doc_id, start, end, body, data)
        if span.heading_path or span.context:
            data = compose_embed_text(span.heading_path, span.context, body).encode()
        # A frozen dataclass's __init__ sets each field through object.__setattr__; filling the instance's dict
        # directly makes the same object in a fifth of the time (tests compare with the constructor).
        chunk = new(Chunk)
        chunk.__dict__.update(
            text=body,
            start=start,
            end=end,
            doc_id=doc_id,
            heading_path=span.heading_path,
            token_count=n,
            position=position,
            total=total,
            chunk_id=identity,
            content_hash=sha256(data).hexdigest(),
            chunker_version=version,
            parent_id=None,
            is_parent=False,
            context=span.context,
            atomic=span.atomic,
            gap_before=gap_before(text, start),
        )
        chunks.append(chunk)
    return chunks
