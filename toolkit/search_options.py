"""The options of one search, declared once: ``SearchOptions`` holds each with its default, its check and a line of
doc, and every surface takes it — ``toolkit.search.search``, the CLI's ``toolkit search`` (its options are made from
these fields), ``toolkit serve``'s ``/search`` body and the LangChain and LlamaIndex retrievers. A new option is a
field here (and one in ``toolkit.store.search.REQUEST_FIELDS`` when SQL reads it), not a parameter in six places.

Who asks — the tenant, the principals (access labels) and the request key (the canary split) — is not an option:
the deployment decides it (``toolkit serve`` takes it from a trusted proxy's headers), so it travels beside the
options, never inside a record a caller may have written. Light on purpose (no numpy, no psycopg): the CLI reads it
to build ``toolkit search --help``."""

from __future__ import annotations

import dataclasses
import difflib
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import InitVar, dataclass, field

from toolkit import validation
from toolkit.errors import InputError

FILTER_KEYS = ("doc_id", "doc_id_prefix", "heading_prefix", "updated_after", "updated_before", "labels", "metadata")
# A metadata filter as typed: metadata.KEY=VALUE (a top-level key of documents.metadata, equal to VALUE).
METADATA_PREFIX = "metadata."
# Filters that take several values; the others take one.
LIST_FILTERS = ("doc_id", "doc_id_prefix", "heading_prefix", "labels")
# A value of each key, for the sentence that refuses an empty one.
FILTER_EXAMPLES = {
    "doc_id": "guide.md",
    "doc_id_prefix": "support/",
    "heading_prefix": "Guide > Install",
    "updated_after": "2026-01-01",
    "updated_before": "2026-01-01",
    "labels": "eng",
}
# The largest k of every search function (toolkit.search_max_k(); a test keeps the two equal).
MAX_K = validation.RESULTS.maximum
_EXPAND = re.compile(r"^(parent|window:(\d{1,2}))$")
# The retrievals a search can run: passages (the default: toolkit.search_passages, hybrid hits assembled into
# passages), hybrid (hybrid_search_chunks: fused chunks), vector (search_chunks).
RETRIEVALS = ("passages", "hybrid", "vector")
DEFAULT_RETRIEVAL = "passages"


def parse_expand(expand: str | None) -> str | None:
    """``parent`` or ``window:N`` (N neighbouring chunks on each side), or None for plain chunks."""
    if expand is None or expand == "":
        return None
    if not isinstance(expand, str) or not _EXPAND.match(expand):
        raise InputError(
            f"--expand {validation.shown(expand)} is not understood: use parent (each hit's parent section) or "
            "window:N (N chunks before and after each hit, N from 0 to 99), e.g. window:1."
        )
    return expand


def parse_retrieval(retrieval: str | None, *, hybrid: bool = False, expand: str | None = None) -> str:
    """The retrieval a search runs: ``passages`` (the default), ``hybrid`` or ``vector``. ``hybrid=True`` (the
    earlier option) means ``hybrid``; ``expand`` (small-to-big) searches chunks, vector or hybrid."""
    if retrieval is None:
        retrieval = "hybrid" if hybrid else ("vector" if expand else DEFAULT_RETRIEVAL)
    if retrieval not in RETRIEVALS:
        raise InputError(
            f"The retrieval {validation.shown(retrieval)} is not one of {', '.join(RETRIEVALS)}; passages (the "
            "default) is what toolkit verify gates."
        )
    if hybrid and retrieval != "hybrid":
        raise InputError(f"hybrid=True asks for the hybrid retrieval, but retrieval={retrieval!r} was given; pick one.")
    if expand and retrieval == "passages":
        raise InputError(
            "--expand returns parents or windows of chunk hits, not passages: add --retrieval vector or hybrid."
        )
    return retrieval


def parse_filters(pairs: Sequence[str]) -> dict:
    """Turns ``KEY=VALUE`` strings into the filters object; a key given twice collects its values.
    ``metadata.KEY=VALUE`` filters on a top-level key of the document's metadata (``validation.metadata_value``).
    Every value must say something: ``doc_id=`` (empty, or only spaces) is refused, not searched for; so is an empty
    heading in ``heading_prefix`` (``A >``)."""
    if isinstance(pairs, str | bytes) or not isinstance(pairs, Sequence):
        raise InputError('The filters are a list of KEY=VALUE strings, e.g. ["doc_id=guide.md"].')
    filters: dict = {}
    for pair in pairs:
        if not isinstance(pair, str):
            raise InputError(f"A filter is a KEY=VALUE string (e.g. doc_id=guide.md), not {validation.shown(pair)}.")
        if pair.strip().startswith(METADATA_PREFIX):
            key, sep, text = pair.strip().partition("=")
            name = key[len(METADATA_PREFIX) :].strip()
            if not sep or not name:
                raise InputError(
                    f"The metadata filter {validation.shown(pair)} is not metadata.KEY=VALUE with a key; "
                    "e.g. --filter metadata.lang=en."
                )
            metadata = filters.setdefault("metadata", {})
            if name in metadata:
                raise InputError(f"The metadata filter {name} was given twice; it takes one value.")
            metadata[name] = validation.metadata_value(name, text)
            continue
        parsed = validation.key_value(pair, FILTER_KEYS)
        if parsed is None:
            raise InputError(
                f"The filter {pair!r} is not KEY=VALUE with a known key; the keys are {', '.join(FILTER_KEYS[:-1])} "
                "and metadata.KEY (e.g. --filter doc_id=guide.md --filter updated_after=2026-01-01 "
                "--filter metadata.lang=en)."
            )
        key, value = parsed
        if key == "metadata":
            raise InputError("Write a metadata filter as metadata.KEY=VALUE, e.g. --filter metadata.lang=en.")
        if not value.strip():
            raise InputError(
                f"The filter {key} has no value; write one after the = (e.g. {key}={FILTER_EXAMPLES[key]}), or leave "
                "the filter out."
            )
        if key == "heading_prefix":
            value = [part.strip() for part in value.split(">")]
            if not all(value):
                raise InputError(
                    f"The filter heading_prefix {validation.shown(pair.partition('=')[2])} has an empty heading; "
                    "write the headings from the top, each non-empty, e.g. heading_prefix=Guide > Install."
                )
            filters[key] = value
        elif key in LIST_FILTERS:
            filters.setdefault(key, []).append(value)
        elif key in filters:
            raise InputError(f"The filter {key} was given twice; it takes one value.")
        else:
            filters[key] = value
    return filters


def check_filters(filters: dict | None) -> None:
    """The filters object as search() takes it (from Python, or a JSON body): known keys, nested at most
    ``validation.MAX_JSON_DEPTH`` levels (SQL checks each value's type: 22023), and no empty text where a value is
    compared (``{"doc_id": ""}`` is a mistake, not a document)."""
    if filters is None:
        return
    if not isinstance(filters, dict):
        raise InputError(f"The filters are an object of KEY: VALUE pairs, not {validation.shown(filters)}.")
    unknown = sorted((str(key) for key in set(filters) - set(FILTER_KEYS)), key=str)
    if unknown:
        raise InputError(f"Unknown search filter {unknown[0]!r}; the filters are {', '.join(FILTER_KEYS)}.")
    if validation.value_depth(filters) > validation.MAX_JSON_DEPTH:
        raise validation.too_deep("the filters")
    for key, value in filters.items():
        if key == "metadata":
            continue  # its values may be "" (a document's metadata may hold the empty string)
        values = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(item, str) and not item.strip() for item in values):
            raise InputError(
                f"The filter {key} holds an empty value; give e.g. {FILTER_EXAMPLES[key]!r}, or leave the filter out."
            )


# -- each option's check: the value as given in, the value searched with out (or InputError) ---------------------


def _filters(value) -> dict | None:
    """The filters object, or KEY=VALUE strings (as typed on the command line or sent in a JSON list) read into one."""
    if isinstance(value, list | tuple):
        return parse_filters(value)
    check_filters(value)
    return value


def _retrieval(value) -> str | None:
    if value is not None and value not in RETRIEVALS:
        raise InputError(
            f"The retrieval {validation.shown(value)} is not one of {', '.join(RETRIEVALS)}; passages (the default) "
            "is what toolkit verify gates."
        )
    return value


def _text(what: str) -> Callable[[object], str | None]:
    def check(value) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{what[0].upper()}{what[1:]} is a non-empty string, not {validation.shown(value)}.")
        return validation.check_text(value, what)

    return check


def _number(rule: validation.NumberRule, *, optional: bool = True, real: bool = False) -> Callable:
    def check(value):
        checked = rule.check_optional(value) if optional else rule.check(value)
        return float(checked) if real and checked is not None else checked

    return check


def _option(default, doc: str, check: Callable, *, request: str | None = None, **shown) -> dataclasses.Field:
    """A field of SearchOptions: its default, a one-line doc, its check, the name of the SQL request field it fills
    (``toolkit.store.search.REQUEST_FIELDS``), and how a command line shows it (``rule``, ``choices``, ``metavar``)."""
    return field(default=default, metadata={"doc": doc, "check": check, "request": request, **shown})


@dataclass(frozen=True)
class SearchOptions:
    """What to search for and how: every option of a search, each checked when the record is made (InputError with
    one sentence). ``SearchOptions(hybrid=True)`` is the deprecated spelling of ``retrieval="hybrid"``: it warns
    (DeprecationWarning) and is resolved here, nowhere else. ``retrieval`` left out is resolved too: passages, or
    vector when ``expand`` is given."""

    k: int = _option(
        5,
        "How many results, best first (1 to 1,000).",
        _number(validation.RESULTS, optional=False),
        request="k",
        rule=validation.RESULTS,
    )
    retrieval: str | None = _option(
        None,
        "passages (the default: hybrid hits merged into passages, what verify gates), hybrid (fused chunks) or vector "
        "(chunks by distance).",
        _retrieval,
        request="retrieval",
        choices=RETRIEVALS,
    )
    max_tokens: int | None = _option(
        None,
        "The passages' token budget (default: k x 1.5 mean chunks); passages only.",
        _number(validation.PASSAGE_TOKENS),
        request="max_tokens",
        rule=validation.PASSAGE_TOKENS,
    )
    expand: str | None = _option(
        None,
        "Return each hit's parent, or N chunks on each side (parent or window:N); vector or hybrid hits.",
        parse_expand,
        request="expand",
        metavar="parent|window:N",
    )
    filters: dict | None = _option(  # noqa: RUF009 - a field(), as every other option's
        None,
        "Filters that all hold: doc_id, doc_id_prefix, heading_prefix (A > B), updated_after, updated_before, labels, "
        "metadata (an object, or KEY=VALUE strings with metadata.KEY).",
        _filters,
        request="filters",
        metavar="KEY=VALUE",
    )
    min_score: float | None = _option(
        None,
        "Drop hits whose cosine similarity to the question is below this (-1 to 1); fewer than k may come back.",
        _number(validation.MIN_SCORE, real=True),
        request="min_score",
        rule=validation.MIN_SCORE,
    )
    diversity: float = _option(
        0.0,
        "MMR re-ranking: 0 is off, up to 1 prefers hits unlike those already chosen.",
        _number(validation.DIVERSITY, optional=False, real=True),
        request="diversity",
        rule=validation.DIVERSITY,
    )
    ef_search: int | None = _option(
        None,
        "hnsw.ef_search for this search (default 40): more candidates from the HNSW index, slower.",
        _number(validation.EF_SEARCH),
        request="ef_search",
        rule=validation.EF_SEARCH,
    )
    version: int | None = _option(
        None,
        "Search this version (pinned) instead of the one that serves the request.",
        _number(validation.VERSION_NUMBER),
        request="version",
        rule=validation.VERSION_NUMBER,
    )
    query_model: str | None = _option(
        None,
        "The model alias the query is for: a vector is searched in that model's serving version; a question's "
        "serving model must be this one.",
        _text("the query model (query_model)"),
        request="model",
        metavar="ALIAS",
    )
    query_text: str | None = _option(
        None,
        "The text full-text ranking searches for (default: the question; with a vector, none).",
        _text("the query text (query_text)"),
        request="query_text",
        metavar="TEXT",
    )
    hybrid: InitVar[bool] = False  # deprecated: retrieval="hybrid"

    def __post_init__(self, hybrid: bool) -> None:
        for option in dataclasses.fields(self):
            object.__setattr__(self, option.name, option.metadata["check"](getattr(self, option.name)))
        if not isinstance(hybrid, bool):
            raise InputError(f"hybrid is true or false, not {validation.shown(hybrid)}; write retrieval='hybrid'.")
        if hybrid:
            warnings.warn(
                "hybrid=True is deprecated: write retrieval='hybrid' (--retrieval hybrid).",
                DeprecationWarning,
                stacklevel=3,
            )
        object.__setattr__(self, "retrieval", parse_retrieval(self.retrieval, hybrid=hybrid, expand=self.expand))
        if self.max_tokens is not None and self.retrieval != "passages":
            raise InputError("max_tokens is the passages' token budget; it applies to the passages retrieval only.")
        if self.expand and (self.min_score is not None or self.diversity):
            raise InputError(
                "--min-score and --diversity choose among hits; --expand returns their parents or windows: use one "
                "or the other."
            )

    def request(self) -> dict:
        """The options as SQL's request names them (``toolkit.store.search.REQUEST_FIELDS``); the query's vector,
        and the text, model and version a question resolves to, are the caller's to add."""
        return {option.metadata["request"]: getattr(self, option.name) for option in dataclasses.fields(self)}


# The names a search option may be given by: the record's fields, and the deprecated spellings it resolves.
FIELDS = tuple(option.name for option in dataclasses.fields(SearchOptions))
DEPRECATED = {"hybrid": "retrieval='hybrid'"}
KEYWORDS = (*FIELDS, *DEPRECATED)
# Who asks: beside the options, never inside them (the deployment decides it; see the module's doc).
IDENTITY = ("tenant", "principals", "request_key")


def unknown_option(name, known: Sequence[str], where: str) -> InputError:
    """The sentence refusing ``name`` given ``where``: the closest known name, and every known one."""
    close = difflib.get_close_matches(str(name), known, n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    return InputError(f"{where} has no option {str(name)!r}{guess}; the options are {', '.join(known)}.")


def search_options(options: SearchOptions | None = None, where: str = "search()", /, **keywords) -> SearchOptions:
    """``options`` (default: every default) with the ``keywords`` given replacing its fields; a name that is no
    option is refused with a sentence naming ``where`` it was given and every option."""
    for name in keywords:
        if name not in KEYWORDS:
            raise unknown_option(name, FIELDS, where)
    if options is None:
        return SearchOptions(**keywords)
    if not isinstance(options, SearchOptions):
        raise InputError(f"options is a toolkit.search.SearchOptions, not {validation.shown(options)}.")
    return dataclasses.replace(options, **keywords) if keywords else options
