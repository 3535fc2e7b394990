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
hit's score. Only doc id, heading path and pages are shown to the LLM. ``k`` (or LlamaIndex's ``similarity_top_k``),
``filters`` (the toolkit's object, or LlamaIndex's ``MetadataFilters`` with ``==`` and ``in``: ``_core.
metadata_filters``), ``min_score`` (a cosine similarity floor) and ``diversity`` (MMR lambda, 0 is off) are
search()'s; ``search_options`` takes any other keyword of search(). LlamaIndex's ``retrieve`` takes only the query,
so what changes per call (tenant, request key, principals, filters, k, ...) goes through ``with_options``: a
retriever sharing this one's connections. An argument the retriever does not know is refused with a sentence
naming it (``InputError``). A node's id is ``toolkit.integrations._core.hit_id``'s (version, tenant, document and
span). A version retired between reading the serving model and searching it is searched again
(``ConnectionPool.run``). The async path runs the same search in a worker thread."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Sequence

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from toolkit.errors import InputError
from toolkit.integrations._core import (
    ConnectionPool,
    SearchRequest,
    hit_id,
    hit_metadata,
    metadata_filters,
    unknown_name,
)
from toolkit.integrations._core import (
    search_options as checked_options,
)

# The metadata an LLM sees beside a node's text (the rest is for the application: spans, versions, scores).
LLM_METADATA = ("doc_id", "heading_path", "pages")


def top_k(k: int | None, similarity_top_k: int | None) -> int:
    """k, given as the toolkit names it or as LlamaIndex does (not both, unless equal); 5 when neither is."""
    if k is not None and similarity_top_k is not None and k != similarity_top_k:
        raise InputError(f"k ({k}) and similarity_top_k ({similarity_top_k}) are the same setting; give one.")
    return k if k is not None else similarity_top_k if similarity_top_k is not None else 5


def toolkit_filters(filters):
    """The filters object search() takes: given as it is, or made from LlamaIndex's MetadataFilters."""
    if filters is None or isinstance(filters, dict):
        return filters
    return metadata_filters(filters)


class ToolkitRetriever(BaseRetriever):
    """Retrieves from the version that serves the request (``toolkit.serving_model``), pinned, as the reader role
    with the tenant and principals set; read-only."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        tenant: str,
        k: int | None = None,
        similarity_top_k: int | None = None,
        request_key: str | None = None,
        principals: Sequence[str] | None = None,
        filters=None,
        hybrid: bool = False,
        expand: str | None = None,
        min_score: float | None = None,
        diversity: float = 0.0,
        pool: ConnectionPool | None = None,
        pool_size: int = 4,
        search_options: dict | None = None,
        **kwargs,
    ):
        # LlamaIndex's BaseRetriever takes a few arguments of its own; anything else is a mistake, refused rather
        # than passed on or ignored.
        for name in kwargs:
            if name not in FRAMEWORK_ARGUMENTS:
                raise unknown_name(name, [*CONSTRUCTOR_ARGUMENTS, *FRAMEWORK_ARGUMENTS], "ToolkitRetriever")
        super().__init__(**kwargs)
        self._own_pool = pool is None
        self._pool = pool or ConnectionPool(database_url, size=pool_size)
        self.request = SearchRequest(
            tenant,
            top_k(k, similarity_top_k),
            request_key,
            principals,
            toolkit_filters(filters),
            hybrid,
            expand,
            checked_options(search_options or {}, "ToolkitRetriever's search_options"),
            min_score=min_score,
            diversity=diversity,
        )

    def with_options(self, **overrides) -> ToolkitRetriever:
        """A retriever like this one, on the same connections, with ``overrides`` (``tenant``, ``request_key``,
        ``principals``, ``filters``, ``k``/``similarity_top_k``, ``min_score`` and any keyword of search()): the
        per-call form, since ``retrieve`` takes only the query. Closing it closes nothing."""
        options = checked_options(
            {name: value for name, value in overrides.items() if name not in ("filters", "k", "similarity_top_k")},
            "ToolkitRetriever.with_options",
        )
        fields = {name: options.pop(name) for name in list(options) if name in REQUEST_FIELDS}
        if "filters" in overrides:
            fields["filters"] = toolkit_filters(overrides["filters"])
        if "k" in overrides or "similarity_top_k" in overrides:
            fields["k"] = top_k(overrides.get("k"), overrides.get("similarity_top_k"))
        request = dataclasses.replace(self.request, options={**self.request.options, **options}, **fields)
        other = ToolkitRetriever.__new__(ToolkitRetriever)
        BaseRetriever.__init__(
            other, callback_manager=self.callback_manager, object_map=self.object_map, verbose=self._verbose
        )
        other._own_pool = False
        other._pool = self._pool
        other.request = request
        return other

    def search_hits(self, query: str, **overrides) -> list:
        """The toolkit's SearchHits for ``query`` (what the nodes are made of); overrides as for search(). A version
        retired between reading the serving model and searching it is retried (``ConnectionPool.run``)."""
        return self._pool.run(lambda conn: self.request.run(conn, query, **overrides))

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


# What the constructor takes: its own arguments, and those of LlamaIndex's BaseRetriever it passes on.
CONSTRUCTOR_ARGUMENTS = [
    name for name in inspect.signature(ToolkitRetriever.__init__).parameters if name not in ("self", "kwargs")
]
FRAMEWORK_ARGUMENTS = [name for name in inspect.signature(BaseRetriever.__init__).parameters if name != "self"]
REQUEST_FIELDS = {field.name for field in dataclasses.fields(SearchRequest)} - {"options"}
