"""A LangChain retriever over the toolkit (extra ``toolkit[langchain]``)::

    from toolkit.integrations.langchain import ToolkitRetriever

    retriever = ToolkitRetriever(database_url=url, tenant="acme", k=5)
    docs = retriever.invoke("How do I create an index?", request_key=user_id)

Each ``Document`` carries the hit's text as ``page_content`` and its doc id, span (``start``, ``end``), heading path,
pages, version, model alias, score and rank in ``metadata`` (``toolkit.integrations._core.hit_metadata``). A call
may override ``tenant``, ``request_key``, ``principals``, ``filters`` (``{"metadata": {"lang": "en"}}`` among them),
``k``, ``hybrid``, ``expand``, ``min_score`` (a cosine similarity floor) and ``diversity`` (MMR lambda, 0 is off) as
keyword arguments of ``invoke``/``ainvoke``. A Document's ``id`` is ``toolkit.integrations._core.hit_id``'s (version,
tenant, document and span). A version retired between reading the serving model and searching it is searched again
(``ConnectionPool.run``). The async path runs the same search in a worker thread."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

from toolkit.integrations._core import ConnectionPool, SearchRequest, hit_id, hit_metadata


class ToolkitRetriever(BaseRetriever):
    """Retrieves from the version that serves the request (``toolkit.serving_model``), pinned, as the reader role
    with the tenant and principals set; read-only."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    database_url: str | None = None
    tenant: str
    k: int = 5
    request_key: str | None = None
    principals: list[str] | None = None
    filters: dict | None = None
    hybrid: bool = False
    expand: str | None = None
    min_score: float | None = None
    diversity: float = 0.0
    pool_size: int = 4
    search_options: dict = Field(default_factory=dict)
    pool: Any = None  # a toolkit.integrations._core.ConnectionPool to share; default: one of this retriever's own

    _pool: ConnectionPool = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._pool = self.pool or ConnectionPool(self.database_url, size=self.pool_size)

    def _request(self) -> SearchRequest:
        return SearchRequest(
            self.tenant,
            self.k,
            self.request_key,
            self.principals,
            self.filters,
            self.hybrid,
            self.expand,
            dict(self.search_options),
            min_score=self.min_score,
            diversity=self.diversity,
        )

    def search_hits(self, query: str, **overrides) -> list:
        """The toolkit's SearchHits for ``query`` (what the Documents are made of); a version retired between
        reading the serving model and searching it is retried (``ConnectionPool.run``)."""
        request = self._request()
        return self._pool.run(lambda conn: request.run(conn, query, **overrides))

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **overrides
    ) -> list[Document]:
        tenant = self._request().tenant_of(**overrides)
        return [
            Document(page_content=hit.text, metadata=hit_metadata(hit), id=hit_id(hit, tenant))
            for hit in self.search_hits(query, **overrides)
        ]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **overrides
    ) -> list[Document]:
        return await asyncio.to_thread(
            self._get_relevant_documents, query, run_manager=run_manager.get_sync(), **overrides
        )

    def close(self) -> None:
        """Closes this retriever's connections (not those of a pool it was given)."""
        if self.pool is None:
            self._pool.close()
