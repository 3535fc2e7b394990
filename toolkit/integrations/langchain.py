"""A LangChain retriever over the toolkit (extra ``toolkit[langchain]``)::

    from toolkit.integrations.langchain import ToolkitRetriever

    retriever = ToolkitRetriever(database_url=url, tenant="acme", search_kwargs={"k": 5, "filter": {"lang": "en"}})
    docs = retriever.invoke("How do I create an index?", request_key=user_id)

Each ``Document`` carries the hit's text as ``page_content`` and its doc id, span (``start``, ``end``), heading path,
pages, version, model alias, score and rank in ``metadata`` (``toolkit.integrations._core.hit_metadata``: every field
of the hit but its text). Every field of ``toolkit.search_options.SearchOptions`` is a field of the retriever (``k``,
``retrieval``, ``max_tokens``, ``filters``, ``min_score``, ...: made from the record, not typed again here), beside
who asks (``tenant``, ``request_key``, ``principals``); ``search_kwargs`` (LangChain's idiom: ``k``, ``filter`` — a
metadata filter as PGVector takes it — and any search option) and keyword arguments of ``invoke``/``ainvoke`` (the
same names, plus ``tenant``) override them, each overriding the one before. An argument the retriever does not know
is refused with a sentence naming it (``InputError``), in the constructor and in a call: a misspelling must not be
ignored. A Document's ``id`` is
``toolkit.integrations._core.hit_id``'s (version, tenant, document and span). A version retired between reading the
serving model and searching it is searched again (``ConnectionPool.run``). The async path runs the same search in a
worker thread."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, create_model, model_validator

from toolkit.integrations._core import (
    ConnectionPool,
    SearchRequest,
    framework_options,
    hit_id,
    hit_metadata,
    unknown_name,
)
from toolkit.search_options import DEPRECATED, SearchOptions


class _ToolkitRetriever(BaseRetriever):
    """Retrieves from the version that serves the request (``toolkit.serving_model``), pinned, as the reader role
    with the tenant and principals set; read-only."""

    # A field the class does not declare is refused (pydantic's own check; _known_arguments says it first, in a
    # sentence that names the closest field).
    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    database_url: str | None = None
    tenant: str
    request_key: str | None = None
    principals: list[str] | None = None
    pool_size: int = 4
    search_kwargs: dict = Field(default_factory=dict)  # LangChain's: k, filter and the search options
    search_options: dict = Field(default_factory=dict)  # the same, as earlier releases named it
    pool: Any = None  # a toolkit.integrations._core.ConnectionPool to share; default: one of this retriever's own

    _pool: ConnectionPool = PrivateAttr()
    _request: SearchRequest = PrivateAttr()

    @model_validator(mode="before")
    @classmethod
    def _known_arguments(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name in data:
                if name not in cls.model_fields:
                    listed = [field for field in cls.model_fields if field not in DEPRECATED]
                    raise unknown_name(name, listed, "ToolkitRetriever")
        return data

    def model_post_init(self, context: Any) -> None:
        # Checked when the retriever is made, not at its first question: the fields, then search_options, then
        # search_kwargs, each overriding the one before.
        fields = {name: getattr(self, name) for name in OPTION_FIELDS}
        self._request = (
            SearchRequest(self.tenant, self.request_key, self.principals, fields)
            .with_(**framework_options(self.search_options, "ToolkitRetriever's search_options"))
            .with_(**framework_options(self.search_kwargs, "ToolkitRetriever's search_kwargs"))
        )
        self._pool = self.pool or ConnectionPool(self.database_url, size=self.pool_size)

    def search_hits(self, query: str, **overrides) -> list:
        """The toolkit's SearchHits for ``query`` (what the Documents are made of); ``overrides`` as ``invoke``
        takes them. A version retired between reading the serving model and searching it is retried
        (``ConnectionPool.run``)."""
        request = self._request.with_(**framework_options(overrides, "ToolkitRetriever.invoke"))
        return self._pool.run(lambda conn: request.run(conn, query))

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **overrides
    ) -> list[Document]:
        tenant = self._request.tenant_of(**framework_options(overrides, "ToolkitRetriever.invoke"))
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


# The search options as fields, made from SearchOptions (each with its default and doc), and the deprecated
# spellings it resolves (hybrid=True: retrieval="hybrid", with a DeprecationWarning).
OPTION_FIELDS = {
    **{
        option.name: (Any, Field(option.default, description=option.metadata["doc"]))
        for option in dataclasses.fields(SearchOptions)
    },
    **{name: (Any, Field(False, description=f"Deprecated: {instead}.")) for name, instead in DEPRECATED.items()},
}

ToolkitRetriever = create_model(
    "ToolkitRetriever", __base__=_ToolkitRetriever, __module__=__name__, __doc__=_ToolkitRetriever.__doc__,
    **OPTION_FIELDS,
)  # fmt: skip
