"""A LlamaIndex retriever over the toolkit (extra ``toolkit[llamaindex]``)::

    from toolkit.integrations.llamaindex import ToolkitRetriever
    from llama_index.core.query_engine import RetrieverQueryEngine

    retriever = ToolkitRetriever(database_url=url, tenant="acme", k=5)
    engine = RetrieverQueryEngine.from_args(retriever, llm=llm)

Each ``NodeWithScore`` holds a ``TextNode`` with the hit's text and its doc id, span (``start``, ``end``), heading
path, pages, version, model alias and rank in ``metadata`` (``toolkit.integrations._core.hit_metadata``), and the
hit's score. Only doc id, heading path and pages are shown to the LLM. ``filters`` (``{"metadata": {"lang": "en"}}``
among them), ``min_score`` (a cosine similarity floor) and ``diversity`` (MMR lambda, 0 is off) are search()'s. A
node's id is ``toolkit.integrations._core.hit_id``'s (version, tenant, document and span). A version retired between
reading the serving model and searching it is searched again (``ConnectionPool.run``). The async path runs the same
search in a worker thread."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from toolkit.integrations._core import ConnectionPool, SearchRequest, hit_id, hit_metadata

# The metadata an LLM sees beside a node's text (the rest is for the application: spans, versions, scores).
LLM_METADATA = ("doc_id", "heading_path", "pages")


class ToolkitRetriever(BaseRetriever):
    """Retrieves from the version that serves the request (``toolkit.serving_model``), pinned, as the reader role
    with the tenant and principals set; read-only."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        tenant: str,
        k: int = 5,
        request_key: str | None = None,
        principals: Sequence[str] | None = None,
        filters: dict | None = None,
        hybrid: bool = False,
        expand: str | None = None,
        min_score: float | None = None,
        diversity: float = 0.0,
        pool: ConnectionPool | None = None,
        pool_size: int = 4,
        search_options: dict | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._own_pool = pool is None
        self._pool = pool or ConnectionPool(database_url, size=pool_size)
        self.request = SearchRequest(
            tenant,
            k,
            request_key,
            principals,
            filters,
            hybrid,
            expand,
            dict(search_options or {}),
            min_score=min_score,
            diversity=diversity,
        )

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
