"""A LangChain retriever over the toolkit (extra ``toolkit[langchain]``)::

    from toolkit.integrations.langchain import ToolkitRetriever

    retriever = ToolkitRetriever(database_url=url, tenant="acme", search_kwargs={"k": 5, "filter": {"lang": "en"}})
    docs = retriever.invoke("How do I create an index?", request_key=user_id)

Each ``Document`` carries the hit's text as ``page_content`` and its doc id, span (``start``, ``end``), heading path,
pages, version, model alias, score and rank in ``metadata`` (``toolkit.integrations._core.hit_metadata``). The
search's options are fields (``k``, ``filters``, ``min_score``, ...), ``search_kwargs`` (LangChain's idiom: ``k``,
``filter`` — a metadata filter as PGVector takes it — and any keyword of ``toolkit.search.search``, e.g.
``retrieval``) and keyword arguments of ``invoke``/``ainvoke`` (the same names, plus ``tenant``), each overriding
the one before. An argument the retriever does not know is refused with a sentence naming it (``InputError``), in
the constructor and in a call: a misspelling must not be ignored. A Document's ``id`` is
``toolkit.integrations._core.hit_id``'s (version, tenant, document and span). A version retired between reading the
serving model and searching it is searched again (``ConnectionPool.run``). The async path runs the same search in a
worker thread."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from toolkit.errors import InputError
from toolkit.integrations._core import (
    ConnectionPool,
    SearchRequest,
    hit_id,
    hit_metadata,
    search_keywords,
    search_options,
    unknown_name,
)


class ToolkitRetriever(BaseRetriever):
    """Retrieves from the version that serves the request (``toolkit.serving_model``), pinned, as the reader role
    with the tenant and principals set; read-only."""

    # A field the class does not declare is refused (pydantic's own check; _known_arguments says it first, in a
    # sentence that names the closest field).
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

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
    search_kwargs: dict = Field(default_factory=dict)  # LangChain's: k, filter and search()'s keywords
    search_options: dict = Field(default_factory=dict)  # the same, as earlier releases named it
    pool: Any = None  # a toolkit.integrations._core.ConnectionPool to share; default: one of this retriever's own

    _pool: ConnectionPool = PrivateAttr()

    _options: dict = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _known_arguments(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in data:
                if name in search_keywords() and name not in cls.model_fields:
                    raise InputError(
                        f"{name!r} is an option of the search, not of ToolkitRetriever: pass "
                        f"search_kwargs={{{name!r}: ...}} (or {name}=... to invoke)."
                    )
                if name not in cls.model_fields:
                    raise unknown_name(name, list(cls.model_fields), "ToolkitRetriever")
        return data

    def model_post_init(self, context: Any) -> None:
        # Checked when the retriever is made, not at its first question.
        self._options = {
            **search_options(self.search_options, "ToolkitRetriever's search_options"),
            **search_options(self.search_kwargs, "ToolkitRetriever's search_kwargs"),
        }
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
            dict(self._options),
            min_score=self.min_score,
            diversity=self.diversity,
        )

    def search_hits(self, query: str, **overrides) -> list:
        """The toolkit's SearchHits for ``query`` (what the Documents are made of); ``overrides`` as ``invoke``
        takes them. A version retired between reading the serving model and searching it is retried
        (``ConnectionPool.run``)."""
        request = self._request()
        overrides = search_options(overrides, "ToolkitRetriever.invoke")
        return self._pool.run(lambda conn: request.run(conn, query, **overrides))

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **overrides
    ) -> list[Document]:
        tenant = self._request().tenant_of(**search_options(overrides, "ToolkitRetriever.invoke"))
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
