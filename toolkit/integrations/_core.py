"""What the framework retrievers and the HTTP server share: a small pool of database connections, and one search
request as ``toolkit.search.search`` runs it (its defaults: the serving version for the request key, pinned), retried
when the version it read was retired before its search ran (``ConnectionPool.run``), with each hit's metadata taken
from the hit generically (every field but the text), so fields search() gains later (e.g. ``kind``, ``hit_ranks``,
``tokens``) reach the applications unchanged."""

from __future__ import annotations

import contextlib
import difflib
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar
from urllib.parse import quote

import psycopg

from toolkit.errors import InputError, VersionUnavailableError
from toolkit.search_options import DEPRECATED, IDENTITY, KEYWORDS, SearchOptions, search_options
from toolkit.validation import shown

# Attempts of one request whose version was retired between serving_model() and its search (SQLSTATE TK002): each
# attempt reads the serving model again, so the second finds the version that replaced it (a third covers a
# cutover and retirement racing the retry itself).
RETRIES = 3
POOL_WAIT_SECONDS = 30.0  # for a free connection of the pool

T = TypeVar("T")


class ConnectionPool:
    """At most ``size`` connections, opened on demand (autocommit: search() opens its own transactions); a connection
    left broken or inside a transaction is closed, not reused. ``connect`` opens one (default:
    toolkit.db.connection.connect(url))."""

    def __init__(
        self, url: str | None = None, *, size: int = 4, connect: Callable[[], psycopg.Connection] | None = None
    ):
        if url is None and connect is None:
            raise InputError("Give the database URL (or a connect function) to search.")
        if size < 1:
            raise InputError("The pool needs at least one connection.")
        self._connect = connect or (lambda: _open(url))
        self._idle: queue.LifoQueue[psycopg.Connection] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(size)
        self._closed = False

    @contextlib.contextmanager
    def connection(self, timeout: float | None = POOL_WAIT_SECONDS) -> Iterator[psycopg.Connection]:
        if not self._slots.acquire(timeout=timeout):
            raise TimeoutError("Every database connection of the pool stayed busy; retry, or raise the pool size.")
        conn = None
        try:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                conn = self._connect()
            yield conn
        finally:
            # A connection goes back only when it is idle and healthy (an error the database raised inside a
            # transaction the toolkit opened left it idle; a broken one is closed and replaced on demand).
            if conn is not None:
                if self._closed or conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    conn.close()
                else:
                    self._idle.put(conn)
            self._slots.release()

    def run(self, work: Callable[[psycopg.Connection], T], timeout: float | None = POOL_WAIT_SECONDS) -> T:
        """``work(conn)`` on a pooled connection. A version retired meanwhile (VersionUnavailableError, TK002: the
        version serving_model() named was retired before the search read it) is retried, at most RETRIES attempts
        in all, each on a connection taken afresh and reading the serving model again; the last one's error is
        raised. The one retry of every caller: the retrievers and ``toolkit serve``."""
        for attempt in range(1, RETRIES + 1):
            try:
                with self.connection(timeout) as conn:
                    return work(conn)
            except VersionUnavailableError:
                if attempt == RETRIES:
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    def close(self) -> None:
        self._closed = True
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


def _open(url: str) -> psycopg.Connection:
    from toolkit.db.connection import connect

    return connect(url, autocommit=True)


@dataclass(frozen=True)
class SearchRequest:
    """One search as the application asks it: who asks (the tenant, and optionally the request key for the canary
    split and the principals for access labels) and the search options as given (``given``: keywords of
    ``toolkit.search_options.SearchOptions``, ``hybrid`` among them), checked when the request is made. ``options``
    is the record they make; ``with_`` layers more keywords over them (a retriever's fields, its search_kwargs, a
    call), each overriding the one before, and the record is made from the whole (so ``expand`` given per call still
    resolves ``retrieval`` as a search does)."""

    tenant: str
    request_key: str | None = None
    principals: Sequence[str] | None = None
    given: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "given", dict(self.given))
        self.options  # noqa: B018 - made now, so a bad option is refused where it was given, not at the first question

    @property
    def options(self) -> SearchOptions:
        return search_options(None, "the search", **self.given)

    def with_(self, **changes) -> SearchRequest:
        """This request with ``changes``: who asks (``tenant``, ``request_key``, ``principals``) and options."""
        identity = {name: changes.pop(name) for name in IDENTITY if name in changes}
        return replace(self, **identity, given={**self.given, **changes})

    def tenant_of(self, **overrides) -> str:
        """The tenant a search with ``overrides`` runs for (an override, else the request's)."""
        return overrides.get("tenant", self.tenant)

    def run(self, conn: psycopg.Connection, question: str, **overrides) -> list:
        from toolkit.search import search

        request = self.with_(**overrides) if overrides else self
        return search(
            conn,
            question,
            request.tenant,
            options=request.options,
            principals=request.principals,
            request_key=request.request_key,
        )


# -- the options a retriever takes -------------------------------------------------------------------------------


def search_keywords() -> tuple[str, ...]:
    """What a search takes by name beside the tenant: who asks (``request_key``, ``principals``) and the options of
    ``SearchOptions`` (``retrieval``, ``filters``, ``min_score``, ...): an option the record gains is one the
    retrievers take, with no list to keep in step."""
    return (*IDENTITY[1:], *KEYWORDS)


# Other stores' names for what the toolkit spells otherwise (LangChain's VectorStoreRetriever search_kwargs,
# LlamaIndex's retriever arguments): the refusal says what to write instead.
OTHER_STORES_NAMES = {
    "score_threshold": "min_score (a cosine-similarity floor, -1 to 1)",
    "lambda_mult": "diversity, which is 1 - lambda_mult (0: no re-ranking; higher: more diverse)",
    "fetch_k": "none: search() picks its MMR candidates itself",
    "top_k": "k (similarity_top_k in LlamaIndex)",
}


def unknown_name(name: str, known: Sequence[str], where: str) -> InputError:
    """The sentence refusing ``name``: where it was given, the closest known name (or the toolkit's spelling of
    another store's name), and every known one."""
    close = difflib.get_close_matches(str(name), known, n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    if name in OTHER_STORES_NAMES:
        guess = f"; the toolkit's setting for it is {OTHER_STORES_NAMES[name]}"
    return InputError(f"{where} has no argument {str(name)!r}{guess}; it takes {', '.join(sorted(known))}.")


def framework_options(options: dict, where: str, *, aliases: dict[str, str] | None = None) -> dict:
    """``options`` as SearchRequest takes them (``tenant``, ``k`` and search()'s keywords), the framework's own
    spellings translated: ``filter`` (a metadata filter, ``metadata_filters``' forms) becomes ``filters``, and each
    of ``aliases`` (e.g. LlamaIndex's ``similarity_top_k`` for ``k``) its toolkit name. Anything else is refused
    with a sentence naming ``where`` it was given (a misspelled option must not be ignored)."""
    aliases = aliases or {}
    known = ("tenant", *search_keywords())
    chosen: dict = {}
    for name, value in options.items():
        target = aliases.get(name, name)
        if target == "filter":
            continue  # below, merged with filters
        if target not in known:
            listed = [name for name in known if name not in DEPRECATED]
            raise unknown_name(name, (*listed, "filter", *aliases), where)
        if target in chosen:
            raise InputError(f"{where} was given both {target!r} and {name!r}; give one.")
        chosen[target] = value
    if "filter" in options:
        chosen["filters"] = merge_filters(chosen.get("filters"), metadata_filters(options["filter"]))
    return chosen


def merge_filters(first: dict | None, second: dict | None) -> dict | None:
    """Two filters objects that must both hold, as one (a key both give is refused: it would have to hold twice)."""
    if not first or not second:
        return first or second
    if not isinstance(first, dict):
        raise InputError(f"The filters are an object of KEY: VALUE pairs, not {shown(first)}.")
    merged = dict(first)
    for key, value in second.items():
        if key == "metadata" and isinstance(merged.get("metadata"), dict):
            both = set(merged["metadata"]) & set(value)
            if both:
                raise InputError(f"The metadata key {sorted(both)[0]!r} is filtered twice; give it once.")
            merged["metadata"] = {**merged["metadata"], **value}
        elif key in merged:
            raise InputError(f"The filter {key!r} is given twice (in filters and filter); give it once.")
        else:
            merged[key] = value
    return merged


# The operators a metadata filter may use: equality, and one of several values (on the document's id, or on a
# metadata key: SQL's metadata filter reads a list of scalars as "any of").
EQ, IN = "==", "in"
SUPPORTED_OPERATORS = "EQ and IN"
# A filter on these keys is on the document's id (hits carry it as doc_id, and as source for other stores' code).
DOC_ID_KEYS = ("doc_id", "source")


def metadata_filters(conditions) -> dict | None:
    """The toolkit's filters object for a framework's metadata filter, every condition holding (AND):

    - LangChain's dict, as PGVector takes it: ``{"lang": "en"}`` or ``{"lang": {"$eq": "en"}}``,
      ``{"doc_id": {"$in": ["a.md", "b.md"]}}``;
    - LlamaIndex's ``MetadataFilters`` of ``MetadataFilter``/``ExactMatchFilter`` with ``==`` and ``in``.

    ``doc_id`` (or ``source``) takes EQ and IN; any other key is a top-level key of the document's metadata, EQ or
    IN (a non-empty list of scalars). Other operators, OR/NOT and nested groups are refused by name."""
    if conditions is None:
        return None
    pairs: list[tuple[str, str, object]] = []
    if isinstance(conditions, dict):
        for key, value in conditions.items():
            if isinstance(key, str) and key.startswith("$"):
                raise InputError(
                    f"The filter operator {key!r} is not supported: a filter is KEY: VALUE pairs that all hold, "
                    f"with {SUPPORTED_OPERATORS} ($eq, $in)."
                )
            if isinstance(value, dict):
                if len(value) != 1:
                    raise InputError(f"The filter on {key!r} takes one operator ($eq or $in), not {shown(value)}.")
                ((operator, operand),) = value.items()
                named = {"$eq": EQ, "$in": IN}.get(operator)
                if named is None:
                    raise InputError(
                        f"The filter operator {operator!r} is not supported: {SUPPORTED_OPERATORS} ($eq, $in) are."
                    )
                pairs.append((key, named, operand))
            else:
                pairs.append((key, EQ, value))
    elif hasattr(conditions, "filters") and hasattr(conditions, "condition"):  # LlamaIndex's MetadataFilters
        condition = getattr(conditions.condition, "value", conditions.condition)
        if condition != "and" and len(conditions.filters) > 1:
            raise InputError(
                f"The filter condition {str(condition).upper()!r} is not supported: the filters all hold (AND)."
            )
        for item in conditions.filters:
            if not hasattr(item, "operator"):
                raise InputError("Nested MetadataFilters are not supported: give one list of filters that all hold.")
            operator = getattr(item.operator, "value", item.operator)
            if operator not in (EQ, IN):
                raise InputError(f"The filter operator {operator!r} is not supported: {SUPPORTED_OPERATORS} are.")
            pairs.append((item.key, operator, item.value))
    else:
        raise InputError(
            "A metadata filter is a dict of KEY: VALUE pairs (or LlamaIndex's MetadataFilters), not "
            f"{shown(conditions)}."
        )
    filters: dict = {}
    for key, operator, value in pairs:
        if key in DOC_ID_KEYS:
            values = list(value) if operator == IN and isinstance(value, list | tuple) else [value]
            if operator == IN and not isinstance(value, list | tuple):
                raise InputError(f"The IN filter on {key!r} takes a list of document ids, not {shown(value)}.")
            if "doc_id" in filters:
                raise InputError("The document id is filtered twice; give one filter (IN for several ids).")
            filters["doc_id"] = values
        else:
            if operator == IN and (not isinstance(value, list | tuple) or not value):
                raise InputError(
                    f"The IN filter on the metadata key {key!r} takes a non-empty list, not {shown(value)}."
                )
            metadata = filters.setdefault("metadata", {})
            if key in metadata:
                raise InputError(f"The metadata key {key!r} is filtered twice; give it once.")
            # SQL reads a list as IN (the document's value is one of them), a scalar as EQ.
            metadata[key] = list(value) if operator == IN else value
    return filters


def hit_metadata(hit) -> dict:
    """Every field of a hit but its text (doc id, span, heading path, pages, version, model, score, rank, and what
    the hit carries beside), JSON-ready."""
    metadata = hit.as_dict() if hasattr(hit, "as_dict") else dict(vars(hit))
    metadata.pop("text", None)
    # The framework's own names beside the toolkit's, for code written against other stores.
    metadata["source"] = hit.doc_id
    return metadata


def hit_id(hit, tenant: str) -> str:
    """A stable id for a hit of ``tenant``'s: ``v{version}:{tenant}:{doc id}:{start}-{end}``. The same span of the
    same document in the same version has the same id; two tenants' documents of one name are different documents,
    so their ids differ (a framework that keys a store or a cache by id must not merge them). The tenant is
    percent-encoded (``quote(tenant, safe="")``): it holds no ``:``, so no tenant and doc id pair spells another's."""
    return f"v{hit.version}:{quote(tenant, safe='')}:{hit.doc_id}:{hit.start}-{hit.end}"
