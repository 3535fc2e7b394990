"""The model registry: embedding models by alias (``v1``, ``v2``), with what is needed to call them again.

No secret is ever stored: API keys come from the environment when a model is used (``OPENAI_API_KEY``, or the
variable an ``api_key_env`` option names). SQL owns the rule (``toolkit.model_secrets`` and the trigger on
``toolkit.models``); models are registered through ``toolkit.register_model``, which never re-points an alias.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field

import psycopg
from psycopg.types.json import Jsonb

from toolkit import validation
from toolkit.db.connection import translate_errors
from toolkit.embedding import PROVIDERS, get_embedder, probe_dimensions
from toolkit.embedding.cache import cached_when_configured
from toolkit.errors import InputError

ALIAS_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
DISTANCES = ("cosine", "l2", "inner_product")


@dataclass(frozen=True)
class Model:
    alias: str
    provider: str
    model_name: str
    dimensions: int
    max_input_tokens: int
    revision: str = ""
    distance: str = "cosine"
    query_prefix: str = ""
    document_prefix: str = ""
    supports_shortening: bool = False
    price_per_million_tokens: float = 0.0
    base_url: str | None = None
    options: dict = field(default_factory=dict)


def validate_alias(alias: str) -> str:
    if not isinstance(alias, str) or not ALIAS_PATTERN.match(alias):
        raise InputError(
            f"The model alias {alias!r} is not allowed: use 1-63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (for example v2 or minilm-2024)."
        )
    return alias


def refuse_secrets(conn: psycopg.Connection, options: dict | None, base_url: str | None) -> None:
    """Refuses options or a base URL that would store a secret, and, below the owner, a model that chooses its server
    or key (SQL's rules: ``toolkit.model_secrets``, ``toolkit.model_destination_refused``), before anything is probed
    or stored; options that are not a flat object (a list, a nested object) first."""
    validation.model_options(options)
    with translate_errors(), conn.transaction():
        found, refused = conn.execute(
            "SELECT toolkit.model_secrets(%s, %s), toolkit.model_destination_refused(%s, %s)",
            (Jsonb(options or {}), base_url, Jsonb(options or {}), base_url),
        ).fetchone()
    if found:
        raise InputError(
            f"The model would store a secret ({', '.join(found)}); keys never go into the database. Put the key in "
            "an environment variable and name it with --option api_key_env=VARIABLE (default OPENAI_API_KEY), and "
            "give the URL without user:password@."
        )
    if refused:
        raise InputError(
            f"Only the owner (toolkit_owner, the DBA) may register a model that chooses its server or key "
            f"({', '.join(refused)}): a model pointed at a server with another process's key would send that key "
            "there. Ask the DBA to register it, or leave them out (the provider's default server and each "
            "process's own OPENAI_API_KEY)."
        )


# toolkit.register_model's argument types (psycopg sends Python ints as smallint when they fit, floats as double).
_REGISTER_TYPES = {
    "alias": "text",
    "provider": "text",
    "model_name": "text",
    "dimensions": "integer",
    "max_input_tokens": "integer",
    "revision": "text",
    "distance": "text",
    "query_prefix": "text",
    "document_prefix": "text",
    "supports_shortening": "boolean",
    "price_per_million_tokens": "numeric",
    "base_url": "text",
    "options": "jsonb",
}


def insert_model(conn: psycopg.Connection, model: Model) -> None:
    """Registers a model under its alias through ``toolkit.register_model`` (an existing alias is refused)."""
    validate_alias(model.alias)
    validation.DIMENSIONS.check(model.dimensions)
    validation.MAX_INPUT_TOKENS.check(model.max_input_tokens)
    validation.PRICE.check(model.price_per_million_tokens)
    if model.distance not in DISTANCES:
        raise InputError(f"The distance {model.distance!r} is unknown; use one of {', '.join(DISTANCES)}.")
    refuse_secrets(conn, model.options, model.base_url)
    values = asdict(model)
    values["options"] = Jsonb(values["options"])
    names = ", ".join(f"{name} => %({name})s::{_REGISTER_TYPES[name]}" for name in values)
    try:
        with translate_errors(), conn.transaction():
            conn.execute(f"SELECT toolkit.register_model({names})", values)
    except InputError as error:
        if not isinstance(error.__cause__, psycopg.errors.UniqueViolation):
            raise
        raise InputError(
            f"A model is already registered as {model.alias!r}. Choose another alias: a version's vectors "
            "belong to its model, so an alias is never silently re-pointed."
        ) from error


_MODEL_COLUMNS = (
    "alias, provider, model_name, dimensions, max_input_tokens, revision, distance, query_prefix,"
    " document_prefix, supports_shortening, price_per_million_tokens::float8, base_url, options"
)


def _columns(conn: psycopg.Connection) -> str:
    # An application (the reader) may read what it needs to embed questions, not the price.
    priced = conn.execute(
        "SELECT has_column_privilege('toolkit.models', 'price_per_million_tokens', 'SELECT')"
    ).fetchone()[0]
    return _MODEL_COLUMNS if priced else _MODEL_COLUMNS.replace("price_per_million_tokens::float8", "0::float8")


def get_model(conn: psycopg.Connection, alias: str) -> Model:
    with conn.transaction():
        row = conn.execute(f"SELECT {_columns(conn)} FROM toolkit.models WHERE alias = %s", (alias,)).fetchone()
    if row is None:
        raise InputError(f"No model is registered as {alias!r}. List them with toolkit model list.")
    return Model(*row)


def list_models(conn: psycopg.Connection) -> list[Model]:
    with conn.transaction():
        rows = conn.execute(f"SELECT {_MODEL_COLUMNS} FROM toolkit.models ORDER BY created_at, alias").fetchall()
    return [Model(*row) for row in rows]


# One reading of KEY=VALUE for --option and model references (toolkit.validation owns it).
parse_options = validation.parse_options


def embedder_for_model(model: Model, dimensions: int | None = None, *, cached: bool = True, **options):
    """Builds the embedder a registered model describes (API keys come from the environment). ``cached=False``: never
    through TOOLKIT_EMBEDDING_CACHE (a caller that puts its own EmbeddingCache in front, as the evaluation does)."""
    settings = dict(model.options)
    settings.update(options)
    key_variable = settings.get("api_key_env")
    if key_variable and "api_key" not in options:
        # The provider reads the key itself, so it knows which variable it came from and sends it only where this
        # process's operator approved (TOOLKIT_API_KEY_URLS).
        if not os.environ.get(str(key_variable)):
            raise InputError(
                f"Model {model.alias} reads its API key from the environment variable {key_variable}, which is not "
                f"set here. Export {key_variable}=... for every toolkit process that embeds with it."
            )
    elif key_variable:
        settings.pop("api_key_env")
    settings["max_input_tokens"] = model.max_input_tokens
    if model.query_prefix:
        settings["query_prefix"] = model.query_prefix
    if model.document_prefix:
        settings["document_prefix"] = model.document_prefix
    if PROVIDERS[model.provider].remote:
        if model.base_url:
            settings["base_url"] = model.base_url
        settings["supports_shortening"] = model.supports_shortening
    if dimensions is not None and dimensions != model.dimensions:
        settings["dimensions"] = dimensions
    embedder = get_embedder(f"{model.provider}:{model.model_name}", **settings)
    if embedder.dimensions is None:
        # The registry knows the size: every answer, the first included, is checked against it (an embedder that
        # learnt it from its first answer would, with several workers, blame the right answer for the wrong one).
        embedder.dimensions = dimensions or model.dimensions
    # TOOLKIT_EMBEDDING_CACHE (unset by default): a local model's vectors read from and written to a disk cache.
    return cached_when_configured(embedder) if cached else embedder


def _with_runtime(options: dict | None, embedder) -> dict:
    """The options to store: a local model's runtime is recorded even when it was the default, so that a later
    change of default never changes the runtime (and so the vectors) of a registered model."""
    stored = dict(options or {})
    runtime = getattr(embedder, "runtime", None)
    if runtime and "runtime" not in stored:
        stored["runtime"] = runtime
    return stored


def register_model(
    conn: psycopg.Connection,
    alias: str,
    provider: str,
    name: str,
    *,
    dimensions: int | None = None,
    base_url: str | None = None,
    query_prefix: str | None = None,
    document_prefix: str | None = None,
    max_input_tokens: int | None = None,
    supports_shortening: bool = False,
    distance: str = "cosine",
    price_per_million_tokens: float = 0.0,
    options: dict | None = None,
) -> Model:
    """Probes the model once (one short embedding) to confirm its dimensions and limits, then registers it."""
    validate_alias(alias)
    validation.DIMENSIONS.check_optional(dimensions)
    validation.MAX_INPUT_TOKENS.check_optional(max_input_tokens)
    validation.PRICE.check(price_per_million_tokens)
    refuse_secrets(conn, options, base_url)
    settings = dict(options or {})
    for key, value in (
        ("base_url", base_url),
        ("query_prefix", query_prefix),
        ("document_prefix", document_prefix),
        ("max_input_tokens", max_input_tokens),
    ):
        if value is not None:
            settings[key] = value
    remote = PROVIDERS[provider].remote if provider in PROVIDERS else False
    if remote:
        settings["supports_shortening"] = supports_shortening
    if dimensions is not None and not remote:
        settings["dimensions"] = dimensions
    embedder = get_embedder(f"{provider}:{name}", **settings)
    probed = probe_dimensions(embedder)
    if dimensions is not None and probed != dimensions:
        raise InputError(
            f"The model {provider}:{name} answered with {probed} dimensions, not the {dimensions} given. "
            "Drop --dims or pass the right number."
        )
    model = Model(
        alias=alias,
        provider=provider,
        model_name=name,
        dimensions=probed,
        max_input_tokens=embedder.max_input_tokens,
        revision=embedder.revision or "",
        distance=distance,
        query_prefix=embedder.query_prefix or "",
        document_prefix=embedder.document_prefix or "",
        supports_shortening=supports_shortening,
        price_per_million_tokens=price_per_million_tokens,
        base_url=base_url,
        options=_with_runtime(options, embedder),
    )
    insert_model(conn, model)
    return model
