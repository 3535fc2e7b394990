"""Small-to-big retrieval: small child chunks are searched, their larger parent is returned.

Two forms, on any strategy: ``parent=SPEC`` (children are cut inside each parent chunk of another spec,
e.g. ``sentence:60:0:parent=markdown,800,0``) and ``window=N`` (each child's parent is the span from N
chunks before it to N chunks after it: sentence-window retrieval with ``sentence:1:0:window=2``).
Parents have ``is_parent=True`` and are not meant to be embedded, so neither the budget nor the model's
input limit applies to them; children carry ``parent_id``. Parents come first in the list, then children.
"""

from __future__ import annotations

import dataclasses

from toolkit.chunking.base import Chunker, build_chunks, chunk_id
from toolkit.chunking.document import Chunk, Document, Span, compose_embed_text
from toolkit.chunking.spec import Spec

ALGORITHM_VERSION = 1


class SmallToBigChunker:
    """Wraps a child chunker (the spec without ``parent``/``window``) and a parent rule."""

    def __init__(self, spec: Spec, child: Chunker, parent: Chunker | None, window: int | None):
        self.spec = spec
        self.child = child
        self.parent = parent
        self.window = window
        self.tokenizer = child.tokenizer
        self._sized: dict[int, Chunker] = {}

    @property
    def version(self) -> str:
        # 2 when the chunker that reads the whole document (the parent, else the child) takes its heading paths from
        # the outline (Chunker.own_headings): its chunks of a Markdown or HTML source now carry them. Children cut
        # inside a parent see only the parent's text and keep the parent's path, as before.
        reader = self.child if self.parent is None else self.parent
        return f"{self.spec.canonical}@{ALGORITHM_VERSION + (not reader.own_headings)}"

    def chunk(self, text: str, doc_id: str | None = None, *, title: str | None = None) -> list[Chunk]:
        if self.parent is not None:
            return self._parent_child(text, doc_id, title)
        return self._windows(text, doc_id)

    def _finish(self, parents: list[Chunk], children: list[Chunk], owners: list[int]) -> list[Chunk]:
        # A parent with a single child can have the child's exact span and text; its id must still differ,
        # because both are stored in one table keyed by (tenant, chunk_id).
        parents = [
            dataclasses.replace(
                p, is_parent=True, chunker_version=self.version, chunk_id=chunk_id("parent", p.start, p.end, p.chunk_id)
            )
            for p in parents
        ]
        children = [
            dataclasses.replace(c, parent_id=parents[owner].chunk_id, chunker_version=self.version)
            for c, owner in zip(children, owners, strict=True)
        ]
        return parents + children

    def _parent_child(self, text: str, doc_id: str | None, title: str | None) -> list[Chunk]:
        from toolkit.chunking.base import document_title

        parents = self.parent.chunk(text, doc_id)
        title = document_title(text) if title is None else title  # the document's, not each parent's first line
        document = Document(text, self.tokenizer, self.child.unit)
        spans: list[Span] = []
        owners: list[int] = []
        for index, parent in enumerate(parents):
            for child in self._child_for(parent.heading_path).chunk(parent.text, title=title):
                path = parent.heading_path + child.heading_path
                span = Span(
                    child.start + parent.start,
                    child.end + parent.start,
                    path,
                    child.context or parent.context,
                )
                for piece in self.child.enforce_budget(document, [dataclasses.replace(span, atomic=child.atomic)]):
                    spans.append(piece)
                    owners.append(index)
        children = build_chunks(
            document,
            spans,
            doc_id,
            self.version,
            self.child.max_tokens,
            self.child.on_overflow,
            self.child.limit_counter,
        )
        if len(children) != len(owners):  # the model's input limit split some children further
            owners = [_owner(parents, c.start) for c in children]
        return self._finish(parents, children, owners)

    def _child_for(self, heading_path: tuple[str, ...]) -> Chunker:
        """The child chunker for a parent with this heading path: a child embeds the parent's path before its
        own text, so its strategy packs to the size less the path's tokens. Sized without the path, a child
        that fit was over the size with it, and the budget check then cut it inside a sentence."""
        child = self.child
        if not heading_path or child.unit == "chars":
            return child
        prefix = self.tokenizer.count(compose_embed_text(heading_path, "", ""))
        size = max(1, child.size - prefix)
        if size == child.size:
            return child
        chunker = self._sized.get(size)
        if chunker is None:
            # Overlap in tokens must stay under the size (sentence and semantic count it in sentences).
            overlap = child.overlap if child.spec.strategy in ("sentence", "semantic") else min(child.overlap, size - 1)
            spec = dataclasses.replace(child.spec, size=size, overlap=overlap)
            chunker = type(child)(spec, tokenizer=child.tokenizer, embedder=child.embedder)
            chunker.max_tokens = child.max_tokens
            chunker.limit_counter = child.limit_counter
            self._sized[size] = chunker
        return chunker

    def _windows(self, text: str, doc_id: str | None) -> list[Chunk]:
        children = self.child.chunk(text, doc_id)
        document = Document(text, self.tokenizer, self.child.unit)
        spans: list[Span] = []
        owners: list[int] = []
        seen: dict[tuple, int] = {}
        for i, child in enumerate(children):
            group = children[max(0, i - self.window) : i + self.window + 1]
            span = Span(group[0].start, max(c.end for c in group), child.heading_path)
            key = (span.start, span.end, span.heading_path)
            if key not in seen:
                seen[key] = len(spans)
                spans.append(span)
            owners.append(seen[key])
        parents = build_chunks(document, spans, doc_id, self.version, None, "split", check_limit=False)
        return self._finish(parents, children, owners)


def _owner(parents: list[Chunk], offset: int) -> int:
    for index, parent in enumerate(parents):
        if parent.start <= offset < parent.end:
            return index
    return len(parents) - 1
