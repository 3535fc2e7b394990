"""A LlamaIndex retriever over the toolkit (extra ``toolkit[llamaindex]``)::

    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.vector_stores import MetadataFilters, ExactMatchFilter
    from toolkit.integrations.llamaindex import ToolkitRetriever

    retriever = ToolkitRetriever(
        database_url=url, tenant="acme", similarity_top_k=5,
        filters=MetadataFilters(filters=[ExactMatchFilter(key="lang", value="en")]),
    )
    engine = RetrieverQueryEngine.from_args(retriever, llm=llm)
    nodes = retriever.with_options(tenant="globex").retrieve("...")   # one call for another tenant

Each ``NodeWithScore`` holds a ``TextNode`` with the hit's text and its doc id, span (``start``, ``end``), heading
path, pages, version, model alias and rank in ``metadata`` (``toolkit.integrations._core.hit_metadata``), and the
hit's score. Only doc id, heading path and pages are shown to the LLM. The constructor takes every field of
``toolkit.search_options.SearchOptions`` by name (``k`` — or LlamaIndex's ``similarity_top_k`` —, ``retrieval``,
``max_tokens``, ``filters``, ``min_score``, ...: read from the record, not typed again here); ``filters`` may also be
LlamaIndex's ``MetadataFilters`` with ``==`` and ``in`` (``_core.metadata_filters``); ``search_options`` (a dict of
the same names) overrides them. LlamaIndex's ``retrieve`` takes only the query,
so what changes per call (tenant, request key, principals, filters, k, ...) goes through ``with_options``: a
retriever sharing this one's connections. An argument the retriever does not know is refused with a sentence
naming it (``InputError``). A node's id is ``toolkit.integrations._core.hit_id``'s (version, tenant, document and
span). A version retired between reading the serving model and searching it is searched again
(``ConnectionPool.run``). The async path runs the same search in a worker thread."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from toolkit.errors import InputError
from toolkit.integrations._core import (
    ConnectionPool,
    SearchRequest,
    framework_options,
    hit_id,
    hit_metadata,
    metadata_filters,
    unknown_name,
)
from toolkit.search_options import DEPRECATED, FIELDS, KEYWORDS

# The metadata an LLM sees beside a node's text (the rest is for the application: spans, versions, scores).
LLM_METADATA = ("doc_id", "heading_path", "pages")


def top_k(k: int | None, similarity_top_k: int | None) -> int | None:
    """k, given as the toolkit names it or as LlamaIndex does (not both, unless equal); None when neither is."""
    if k is not None and similarity_top_k is not None and k != similarity_top_k:
        raise InputError(f"k ({k}) and similarity_top_k ({similarity_top_k}) are the same setting; give one.")
    return k if k is not None else similarity_top_k


def toolkit_filters(filters):
    """The filters object search() takes: given as it is, or made from LlamaIndex's MetadataFilters."""
    if filters is None or isinstance(filters, dict | list | tuple):
        return filters
    return metadata_filters(filters)


def _options(given: dict, where: str) -> dict:
    """Search options and who asks, as LlamaIndex's callers name them (``similarity_top_k``, ``MetadataFilters``),
    in the toolkit's names; anything else refused naming ``where``."""
    given = dict(given)
    k = top_k(given.pop("k", None), given.pop("similarity_top_k", None))
    chosen = framework_options(given, where)
    if k is not None:
        chosen["k"] = k
    if "filters" in chosen:
        chosen["filters"] = toolkit_filters(chosen["filters"])
    return chosen


class ToolkitRetriever(BaseRetriever):
    """Retrieves from the version that serves the request (``toolkit.serving_model``), pinned, as the reader role
    with the tenant and principals set; read-only."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        tenant: str,
        similarity_top_k: int | None = None,
        request_key: str | None = None,
        principals: Sequence[str] | None = None,
        pool: ConnectionPool | None = None,
        pool_size: int = 4,
        search_options: dict | None = None,
        **kwargs,
    ):
        # The search options (SearchOptions' fields) by name; LlamaIndex's BaseRetriever takes a few arguments of
        # its own; anything else is a mistake, refused rather than passed on or ignored.
        for name in kwargs:
            if name not in KEYWORDS and name not in FRAMEWORK_ARGUMENTS:
                raise unknown_name(name, [*CONSTRUCTOR_ARGUMENTS, *FRAMEWORK_ARGUMENTS], "ToolkitRetriever")
        options = {name: kwargs.pop(name) for name in list(kwargs) if name in KEYWORDS}
        super().__init__(**kwargs)
        # Checked now (the fields, then search_options), not at the first question.
        self.request = (
            SearchRequest(tenant, request_key, principals)
            .with_(**_options({**options, "similarity_top_k": similarity_top_k}, "ToolkitRetriever"))
            .with_(**_options(search_options or {}, "ToolkitRetriever's search_options"))
        )
        self._own_pool = pool is None
        self._pool = pool or ConnectionPool(database_url, size=pool_size)

    def with_options(self, **overrides) -> ToolkitRetriever:
        """A retriever like this one, on the same connections, with ``overrides`` (``tenant``, ``request_key``,
        ``principals``, ``k``/``similarity_top_k`` and any search option): the per-call form, since ``retrieve``
        takes only the query. Closing it closes nothing."""
        request = self.request.with_(**_options(overrides, "ToolkitRetriever.with_options"))
        other = ToolkitRetriever.__new__(ToolkitRetriever)
        BaseRetriever.__init__(
            other, callback_manager=self.callback_manager, object_map=self.object_map, verbose=self._verbose
        )
        other._own_pool = False
        other._pool = self._pool
        other.request = request
        return other

    def search_hits(self, query: str, **overrides) -> list:
        """The toolkit's SearchHits for ``query`` (what the nodes are made of); overrides as ``with_options`` takes
        them. A version retired between reading the serving model and searching it is retried
        (``ConnectionPool.run``)."""
        request = (
            self.request.with_(**_options(overrides, "ToolkitRetriever.search_hits")) if overrides else self.request
        )
        return self._pool.run(lambda conn: request.run(conn, query))

    def _nodes(self, hits) -> list[NodeWithScore]:
        tenant = self.request.tenant_of()
        nodes = []
        for hit in hits:
            metadata = hit_metadata(hit)
            hidden = [key for key in metadata if key not in LLM_METADATA]
            node = TextNode(
                id_=hit_id(hit, tenant),
                text=hit.text,
                metadata=metadata,
                excluded_llm_metadata_keys=hidden,
                excluded_embed_metadata_keys=list(metadata),
            )
            nodes.append(NodeWithScore(node=node, score=hit.score))
        return nodes

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(self.search_hits(query_bundle.query_str))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._nodes(await asyncio.to_thread(self.search_hits, query_bundle.query_str))

    def close(self) -> None:
        """Closes this retriever's connections (not those of a pool it was given)."""
        if self._own_pool:
            self._pool.close()


# What the constructor takes: its own arguments, the search options (SearchOptions' fields), and those of
# LlamaIndex's BaseRetriever it passes on.
OWN_ARGUMENTS = [
    name for name in inspect.signature(ToolkitRetriever.__init__).parameters if name not in ("self", "kwargs")
]
CONSTRUCTOR_ARGUMENTS = [*OWN_ARGUMENTS, *FIELDS]
FRAMEWORK_ARGUMENTS = [name for name in inspect.signature(BaseRetriever.__init__).parameters if name != "self"]
# Deprecated spellings are taken (SearchOptions resolves them) but not listed.
assert not set(DEPRECATED) & set(CONSTRUCTOR_ARGUMENTS)
