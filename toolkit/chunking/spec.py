"""Chunker spec strings, ``strategy:size:overlap[:key=value...]``, parsed and checked in one place."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from toolkit.chunking.languages import DEFINITION_KEYWORDS
from toolkit.errors import InputError
from toolkit.validation import key_value


@dataclass(frozen=True)
class Strategy:
    """One chunking strategy: the class that implements it (``module:Class``, imported on demand — html pulls in
    selectolax, markdown markdown-it-py, semantic and cluster numpy) and the options only it accepts."""

    implementation: str
    options: frozenset[str] = frozenset()

    def load(self) -> type:
        module, _, name = self.implementation.partition(":")
        return getattr(importlib.import_module(module), name)


# The one table of strategies: name → implementation and options. A new strategy is a module and a row here.
STRATEGY_TABLE = {
    "fixed": Strategy("toolkit.chunking.fixed:FixedChunker"),
    "sentence": Strategy("toolkit.chunking.sentence:SentenceChunker"),
    "recursive": Strategy("toolkit.chunking.recursive:RecursiveChunker"),
    "markdown": Strategy("toolkit.chunking.markdown:MarkdownChunker", frozenset({"merge"})),
    "html": Strategy("toolkit.chunking.html:HtmlChunker", frozenset({"merge"})),
    "code": Strategy("toolkit.chunking.code:CodeChunker", frozenset({"language", "merge"})),
    "semantic": Strategy("toolkit.chunking.semantic:SemanticChunker", frozenset({"threshold"})),
    "cluster": Strategy("toolkit.chunking.cluster:ClusterChunker", frozenset({"piece"})),
}
STRATEGIES = tuple(STRATEGY_TABLE)

# Options every strategy accepts (the others are in the table). Values are parsed by `_OPTION_TYPES`.
COMMON_OPTIONS = {"unit", "max_tokens", "on_overflow", "parent", "window", "context"}
_OPTION_TYPES = {
    "unit": ("tokens", "chars"),
    "on_overflow": ("split", "error"),
    "context": ("title",),
    "max_tokens": int,
    "merge": int,
    "window": int,
    "threshold": float,
    "piece": int,
    "language": str,
    "parent": str,
}

EXAMPLES = "markdown:400:40, fixed:200:0:unit=chars, sentence:200:1:unit=chars"


@dataclass(frozen=True)
class Spec:
    """A parsed spec. ``canonical`` is the normalized spec string stored with chunks."""

    strategy: str
    size: int
    overlap: int
    options: dict = field(default_factory=dict)

    @property
    def unit(self) -> str:
        return self.options.get("unit", "tokens")

    @property
    def canonical(self) -> str:
        # parent= goes last: everything after it is the parent's own spec.
        keys = sorted(self.options, key=lambda key: (key == "parent", key))
        extra = "".join(f":{key}={self.options[key]}" for key in keys)
        return f"{self.strategy}:{self.size}:{self.overlap}{extra}"


def parse_spec(spec: str) -> Spec:
    """Parse ``strategy:size:overlap[:key=value...]``; raise ``InputError`` saying what is wrong.

    ``parent=`` takes a nested spec whose own fields are separated by commas or colons, for example
    ``sentence:60:0:parent=markdown,800,0`` (everything after ``parent=`` belongs to the parent).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"The chunker spec is empty; give one such as {EXAMPLES}.")
    text = spec.strip()
    parent = None
    if ":parent=" in text:
        text, parent = text.split(":parent=", 1)
        parent = parent.replace(",", ":")
    parts = text.split(":")
    if len(parts) < 3:
        raise InputError(f"The chunker spec '{spec}' needs at least strategy:size:overlap; for example {EXAMPLES}.")
    strategy, size_text, overlap_text, *extras = parts
    strategy = strategy.strip().lower().replace("-", "_")
    if strategy not in STRATEGIES:
        raise InputError(
            f"The chunker spec '{spec}' names an unknown strategy '{strategy}'; use one of {', '.join(STRATEGIES)}."
        )
    size = _integer(spec, "size", size_text, minimum=1)
    overlap = _integer(spec, "overlap", overlap_text, minimum=0)
    options: dict = {}
    allowed = COMMON_OPTIONS | STRATEGY_TABLE[strategy].options
    for extra in extras:
        parsed = key_value(extra, allowed)
        if parsed is None:
            raise InputError(
                f"The chunker spec '{spec}' has an option '{extra}' that {strategy} does not take; "
                f"options are key=value with key one of {', '.join(sorted(allowed))}."
            )
        key, value = parsed
        options[key] = _option(spec, key, value.strip())
    if parent is not None:
        options["parent"] = parse_spec(parent).canonical
    if strategy in ("sentence", "semantic"):
        pass  # overlap counts whole sentences, so it may exceed nothing but the sentence count
    elif overlap >= size:
        raise InputError(
            f"The chunker spec '{spec}' has overlap {overlap} ≥ size {size}; the overlap must be smaller "
            "than the chunk size (try about a tenth of it)."
        )
    if "parent" in options and "window" in options:
        raise InputError(f"The chunker spec '{spec}' sets both parent= and window=; choose one of the two.")
    return Spec(strategy, size, overlap, options)


def _integer(spec: str, name: str, text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise InputError(f"The chunker spec '{spec}' has {name} '{text}'; it must be a whole number ≥ {minimum}.")
    return value


def _option(spec: str, key: str, value: str):
    kind = _OPTION_TYPES[key]
    if isinstance(kind, tuple):
        if value not in kind:
            raise InputError(f"The chunker spec '{spec}' has {key}={value}; use one of {', '.join(kind)}.")
        return value
    if kind is str:
        if not value:
            raise InputError(f"The chunker spec '{spec}' has an empty {key}=; give it a value.")
        if key == "language" and value.lower() not in DEFINITION_KEYWORDS:
            raise InputError(
                f"The chunker spec '{spec}' has language={value}, which the code strategy does not know; use one "
                f"of {', '.join(sorted(DEFINITION_KEYWORDS))}, or leave it out to go by the file extension."
            )
        return value
    try:
        parsed = kind(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed < 0:
        raise InputError(f"The chunker spec '{spec}' has {key}={value}; it must be a non-negative {kind.__name__}.")
    return parsed
