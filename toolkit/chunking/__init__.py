"""Chunking strategies behind one interface: ``get_chunker(spec).chunk(text, doc_id)`` → ``Chunk`` records.

Every chunk's body is an exact span of the source (``source[start:end] == chunk.text``); see
docs/chunking.md for the strategies, the spec syntax and the rules each strategy keeps.
"""

from __future__ import annotations

from toolkit.chunking.base import Chunker
from toolkit.chunking.document import Chunk, compose_embed_text
from toolkit.chunking.recommended import RECOMMENDED_RETRIEVAL, recommended_spec
from toolkit.chunking.spec import STRATEGIES, STRATEGY_TABLE, Spec, parse_spec

__all__ = [
    "RECOMMENDED_RETRIEVAL",
    "STRATEGIES",
    "STRATEGY_TABLE",
    "Chunk",
    "Chunker",
    "Spec",
    "chunker_for_version",
    "compose_embed_text",
    "get_chunker",
    "parse_spec",
    "recommended_spec",
]


def get_chunker(spec: str, *, embedder=None, tokenizer=None):
    """A chunker for ``spec`` (``strategy:size:overlap[:key=value...]``, e.g. ``markdown:400:40``).

    ``embedder`` is needed by ``semantic`` and ``cluster`` (and sets the input-token limit when it has
    ``max_input_tokens``); ``tokenizer`` replaces cl100k_base for counting.
    """
    parsed = parse_spec(spec)
    options = dict(parsed.options)
    parent_spec = options.pop("parent", None)
    window = options.pop("window", None)
    base = Spec(parsed.strategy, parsed.size, parsed.overlap, options)
    child = STRATEGY_TABLE[base.strategy].load()(base, tokenizer=tokenizer, embedder=embedder)
    if parent_spec is None and window is None:
        return child
    from toolkit.chunking.small_to_big import SmallToBigChunker

    parent = None
    if parent_spec is not None:
        parent = get_chunker(parent_spec, embedder=embedder, tokenizer=tokenizer)
        # Parents are returned to the LLM, never embedded: the model's input limit is not theirs.
        parent.max_tokens = None
    return SmallToBigChunker(parsed, child, parent, window)


def chunker_for_version(spec: str, recorded: str, *, embedder=None, tokenizer=None):
    """The chunker for ``spec`` that chunks as ``recorded`` (a version's stored chunker version) when this toolkit
    still can: a version built before every strategy recorded heading paths (``…@1``; the strategies without their
    own heading reader are at 2 now) keeps receiving writes chunked as it was built, instead of refusing them. Any
    other difference is returned as is (the caller refuses the mix)."""
    chunker = get_chunker(spec, embedder=embedder, tokenizer=tokenizer)
    if chunker.version != recorded and recorded == chunker.version.rsplit("@", 1)[0] + "@1":
        for part in (chunker, getattr(chunker, "child", None), getattr(chunker, "parent", None)):
            if getattr(part, "own_headings", True) is False and part.algorithm_version == 2:
                part.algorithm_version = 1  # the instance's: as it chunked before the heading outline
                part.own_headings = True  # no outline read: no path attached (toolkit.chunking.base.attach_headings)
    return chunker
