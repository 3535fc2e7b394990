"""A question's vector as search() makes it, for applications that search in SQL themselves (``toolkit embed``, the
HTTP server's ``/v1/embeddings``): the version that serves the request (``toolkit.serving_model``), and the
question embedded with that version's model, its query prefix applied once (by the embedder, as search() does)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import psycopg

from toolkit.errors import InputError
from toolkit.serving import ServingModel, serving_model, version_model


@dataclass(frozen=True)
class QuestionVectors:
    """The serving version and its model, and one vector per question (float lists), in the questions' order."""

    version: int
    model_alias: str
    provider: str
    model_name: str
    dimensions: int
    distance: str
    query_prefix: str
    serving: str  # active or canary
    embeddings: list[list[float]]
    tokens: list[int]

    def as_dict(self) -> dict:
        return asdict(self)


def serving_for(
    conn: psycopg.Connection, tenant: str, request_key: str | None = None, version: int | None = None
) -> ServingModel:
    """The version a request is served by (``version`` pins one instead, as ``search(version=...)`` does)."""
    return version_model(conn, version) if version is not None else serving_model(conn, tenant, request_key)


def embed_questions(
    conn: psycopg.Connection,
    questions: Sequence[str],
    tenant: str,
    request_key: str | None = None,
    *,
    version: int | None = None,
) -> QuestionVectors:
    """Embeds ``questions`` for the version that serves this request: every vector from the same version, each with
    the model's query prefix applied once. Search that version with them (pinned: ``query_version``)."""
    from toolkit.search import query_embedder

    if isinstance(questions, str):
        questions = [questions]
    if not questions or any(not isinstance(q, str) or not q.strip() for q in questions):
        raise InputError("Give one or more non-empty questions to embed.")
    serving = serving_for(conn, tenant, request_key, version)
    embedder = query_embedder(conn, serving)
    vectors = [embedder.embed_query(q) for q in questions]
    return QuestionVectors(
        version=serving.version,
        model_alias=serving.model_alias,
        provider=serving.provider,
        model_name=serving.model_name,
        dimensions=serving.dimensions,
        distance=serving.distance,
        query_prefix=serving.query_prefix,
        serving=serving.serving,
        embeddings=[[float(x) for x in v] for v in vectors],
        # What the model receives for each question as a query (its prefix included), as embed_query counts it.
        tokens=[embedder._token_counts([q], is_query=True)[0] for q in questions],
    )


def vector_literal(vector: Sequence[float]) -> str:
    """The pgvector text form of a vector: ``[0.1,0.2,...]`` (shortest round-tripping floats)."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"
