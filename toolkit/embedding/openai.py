"""The ``openai`` provider: OpenAI's embeddings API, or any OpenAI-compatible server, via the official client.

Batches are bounded by count and tokens, over-limit inputs are refused before anything is sent, and retrying
is done here (the client's own retries are off) so that what is retried, and for how long, is explicit.
Vectors are asked for as base64 (little-endian float32, 3-4x fewer bytes than JSON numbers) and decoded
straight into numpy; a server that ignores the request and sends numbers is read as well. The answer's body
is parsed here, not by the client, so that every malformed answer becomes a clear EmbeddingError.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import json
import math
import os
import random
import re
import time
from dataclasses import dataclass

import numpy as np

from toolkit.embedding.base import (
    Embedder,
    batches,
    check_vectors,
    positive_float,
    positive_int,
    reject_unused,
)
from toolkit.embedding.ratelimit import RateLimiter
from toolkit.errors import EmbeddingError, InputError


@dataclass(frozen=True)
class KnownModel:
    dimensions: int
    max_input_tokens: int
    supports_shortening: bool


KNOWN_MODELS = {
    "text-embedding-3-small": KnownModel(1536, 8191, True),
    "text-embedding-3-large": KnownModel(3072, 8191, True),
    "text-embedding-ada-002": KnownModel(1536, 8191, False),
}
DEFAULT_MODEL = "text-embedding-3-small"
# Most open embedding models (BERT and e5 families) take 512 tokens; declare more with max_input_tokens.
UNKNOWN_MODEL_MAX_INPUT_TOKENS = 512
# Sent when a local server needs no key: the client refuses to start without one.
PLACEHOLDER_API_KEY = "no-key-needed"
RETRYABLE_STATUS = frozenset({408, 409, 429}) | frozenset(range(500, 600))
MAX_BACKOFF = 30.0
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
ENCODINGS = ("base64", "float")
# Seconds one request may take. An embedding request normally answers within seconds; a server that has not
# answered in 30 s is hanging, not slow.
DEFAULT_TIMEOUT = 30.0
# A request that timed out is sent once more; a second timeout means the server is not answering, and waiting
# for it again would stall the caller for minutes (six retries of 60 s were ~7 minutes per batch).
MAX_TIMEOUTS = 2
# Registering a model probes it once: an unreachable server is said at once, not after a minute of retries.
PROBE_TIMEOUT = 10.0
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class OpenAIEmbedder(Embedder):
    """``openai:MODEL`` through ``openai.OpenAI(base_url=..., max_retries=0)``."""

    provider = "openai"
    remote = True
    disk_cached = False  # the provider's vectors, served and billed by it (its key would need the server too)

    def __init__(
        self,
        name: str | None = None,
        *,
        dimensions: int | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str | None = None,
        encoding_format: str | None = None,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        max_input_tokens: int | None = None,
        supports_shortening: bool | None = None,
        batch_size: int | None = None,
        max_batch_tokens: int | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        retry_base_delay: float | None = None,
        max_retry_wait: float | None = None,
        send_input_type: bool | None = None,
        rate_limiter: RateLimiter | None = None,
        **unused,
    ):
        reject_unused(self.provider, unused)
        self.name = name or DEFAULT_MODEL
        known = KNOWN_MODELS.get(self.name)
        # The table is authoritative for known models (a registry row's default False must not switch off
        # text-embedding-3's shortening); the option declares it for models the table does not know.
        self.supports_shortening = bool(supports_shortening or (known and known.supports_shortening))
        self.dimensions, self._request_dimensions = self._resolve_dimensions(dimensions, known)
        limit = known.max_input_tokens if known else UNKNOWN_MODEL_MAX_INPUT_TOKENS
        if max_input_tokens is not None:
            max_input_tokens = positive_int(max_input_tokens, "max_input_tokens")
            if known and max_input_tokens > known.max_input_tokens:
                raise InputError(
                    f"max_input_tokens={max_input_tokens} is over the {known.max_input_tokens}-token "
                    f"limit of {self.name}; use at most {known.max_input_tokens}."
                )
            limit = max_input_tokens
        self.max_input_tokens = limit
        self.query_prefix = query_prefix or ""
        self.document_prefix = document_prefix or ""
        self.batch_size = positive_int(128 if batch_size is None else batch_size, "batch_size")
        self.max_batch_tokens = positive_int(
            100_000 if max_batch_tokens is None else max_batch_tokens, "max_batch_tokens"
        )
        self.timeout = positive_float(timeout if timeout is not None else DEFAULT_TIMEOUT, "timeout")
        if max_retries is not None and (
            isinstance(max_retries, bool) or not isinstance(max_retries, int) or not 0 <= max_retries <= 100
        ):
            raise InputError(
                f"The embedding option max_retries must be a whole number from 0 to 100, not {max_retries!r}."
            )
        self.max_retries = max_retries if max_retries is not None else 6
        self.retry_base_delay = positive_float(
            0.5 if retry_base_delay is None else retry_base_delay, "retry_base_delay"
        )
        self.max_retry_wait = positive_float(120.0 if max_retry_wait is None else max_retry_wait, "max_retry_wait")
        self.send_input_type = bool(send_input_type)
        self.rate_limiter = rate_limiter
        if encoding_format is not None and encoding_format not in ENCODINGS:
            raise InputError(f"The embedding option encoding_format must be base64 or float, not {encoding_format!r}.")
        # base64 unless told otherwise; switched to float for good if the server refuses base64.
        self.encoding_format = encoding_format or "base64"
        url_from_environment = not base_url and bool(os.environ.get("OPENAI_BASE_URL"))
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.api_key_env = _api_key_env(api_key_env)
        # An explicit api_key (library code) is used as given and never stored; otherwise the variable named by
        # api_key_env is read, so a registry row only ever holds the variable's name. A key read from the
        # environment goes only to a URL this process's operator approved for it (TOOLKIT_API_KEY_URLS).
        if not api_key and os.environ.get(self.api_key_env) and not url_from_environment:
            check_key_destination(self.api_key_env, self.base_url or DEFAULT_BASE_URL)
        api_key = api_key or os.environ.get(self.api_key_env)
        if not api_key:
            if self.base_url is None:
                raise InputError(
                    f"No API key for {self.ref}: set the environment variable {self.api_key_env}, or point "
                    "base_url / OPENAI_BASE_URL at an OpenAI-compatible server that needs none."
                )
            api_key = PLACEHOLDER_API_KEY
        import openai

        self._openai = openai
        self._client = openai.OpenAI(api_key=api_key, base_url=self.base_url, timeout=self.timeout, max_retries=0)
        self._random = random.Random()
        self._sleep = time.sleep
        self._probing = False

    def _resolve_dimensions(self, dimensions, known: KnownModel | None) -> tuple[int | None, int | None]:
        """Return (declared dimensions, dimensions to send in requests or None)."""
        if dimensions is None:
            return (known.dimensions if known else None), None
        dimensions = positive_int(dimensions, "dimensions")
        if known is None:
            # An unknown model: the number is a declaration checked against every answer, sent only if the
            # model is declared to shorten its embeddings on request.
            return dimensions, (dimensions if self.supports_shortening else None)
        if dimensions == known.dimensions:
            return dimensions, None
        if dimensions > known.dimensions:
            raise InputError(
                f"{self.name} produces {known.dimensions} dimensions; dimensions={dimensions} is more "
                f"than it has. Use at most {known.dimensions}."
            )
        if not self.supports_shortening:
            raise InputError(
                f"{self.name} does not support shortened embeddings, so dimensions={dimensions} cannot be "
                f"honoured; use its full {known.dimensions} dimensions or a text-embedding-3 model."
            )
        return dimensions, dimensions

    def _token_counts(self, texts: list[str], is_query: bool) -> list[int]:
        # OpenAI's embedding models use cl100k_base; for other models served this way it is an estimate.
        from toolkit.text.tokens import count_tokens

        return [count_tokens(text) for text in self._prefixed(texts, is_query)]

    def count_chunk_tokens(self, chunks) -> list[int]:
        # A chunk's token_count is the cl100k count of its embed_text, exactly what is counted here when no
        # prefix goes in front: the chunker's count is reused instead of counting every text again.
        if self.document_prefix:
            return super().count_chunk_tokens(chunks)
        return [chunk.token_count for chunk in chunks]

    def _embed(self, texts: list[str], is_query: bool, token_counts: list[int]) -> np.ndarray:
        inputs = self._prefixed(texts, is_query)
        parts = [
            self._request(inputs[start:stop], sum(token_counts[start:stop]), is_query)
            for start, stop in batches(token_counts, self.batch_size, self.max_batch_tokens)
        ]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def probe(self) -> np.ndarray:
        """Embed one short string, failing at once when the server cannot be reached or does not answer
        (registration must not sit through a minute of retries against a wrong URL)."""
        self._probing = True
        try:
            return self.embed_documents(["dimension probe"])
        finally:
            self._probing = False

    def _request(self, inputs: list[str], tokens: int, is_query: bool) -> np.ndarray:
        """Send one batch, retrying transient failures; return its checked vectors or raise EmbeddingError."""
        openai = self._openai
        probing = self._probing
        arguments = {"model": self.name, "input": inputs, "encoding_format": self.encoding_format}
        if self._request_dimensions is not None:
            arguments["dimensions"] = self._request_dimensions
        if self.send_input_type:
            arguments["extra_body"] = {"input_type": "query" if is_query else "document"}
        if probing:
            arguments["timeout"] = min(self.timeout, PROBE_TIMEOUT)
        waited = 0.0
        attempt = 0
        timeouts = 0
        while True:
            if self.rate_limiter is not None:
                self.rate_limiter.acquire(tokens)
            retry_after = None
            try:
                # The raw answer: its body is parsed and decoded here (base64 straight into numpy, every field
                # checked), not turned into Python objects by the client.
                body = self._client.embeddings.with_raw_response.create(**arguments).http_response.content
            except openai.APIStatusError as error:
                if arguments["encoding_format"] == "base64" and _refuses_base64(error):
                    # A server that does not know base64 and says so: ask for numbers from now on.
                    self.encoding_format = arguments["encoding_format"] = "float"
                    continue
                if error.status_code not in RETRYABLE_STATUS:
                    raise EmbeddingError(self._refusal(error)) from error
                retry_after = parse_retry_after(error.response.headers)
                failure = f"HTTP {error.status_code} ({_server_message(error)})"
            except openai.APITimeoutError as error:
                timeouts += 1
                limit = arguments.get("timeout", self.timeout)
                failure = f"no answer within the {limit:g} s timeout"
                if probing or timeouts >= MAX_TIMEOUTS:
                    raise EmbeddingError(
                        f"{self.ref} at {self._where()} gave no answer within {limit:g} s"
                        + (f", {timeouts} times in a row" if timeouts > 1 else "")
                        + "; nothing was kept. Check that the server is running and answering (raise the timeout "
                        "option if it is only slow)."
                    ) from error
            except openai.APIConnectionError as error:
                failure = f"a connection error ({error.__cause__ or error})"
                if probing:
                    raise EmbeddingError(
                        f"Could not reach {self.ref} at {self._where()} ({error.__cause__ or error}). Check that the "
                        "server is running and that base_url is right (it ends in /v1)."
                    ) from error
            except openai.APIError as error:
                raise EmbeddingError(
                    f"{self.ref} at {self._where()} answered something the OpenAI client cannot read "
                    f"({error}); check that base_url points at an OpenAI-compatible /v1 endpoint."
                ) from error
            else:
                return self._vectors(body, len(inputs))
            if attempt >= self.max_retries or (probing and attempt >= 1):
                raise EmbeddingError(
                    f"{self.ref} at {self._where()} failed {attempt + 1} time(s), last with {failure}; "
                    f"nothing was kept from this batch. Check the server, then run the command again (raise "
                    f"max_retries or timeout if the server is just slow)."
                )
            delay = retry_after if retry_after is not None else self._backoff(attempt)
            if waited + delay > self.max_retry_wait:
                raise EmbeddingError(
                    f"{self.ref} at {self._where()} failed with {failure} and retrying would wait "
                    f"{waited + delay:.1f} s in total, over the {self.max_retry_wait:g} s allowed "
                    f"(max_retry_wait); nothing was kept from this batch. Run the command again later."
                )
            if self.rate_limiter is not None:
                # Everyone sharing the limiter holds back, not just this caller; acquire() does the waiting.
                self.rate_limiter.pause(delay)
            else:
                self._sleep(delay)
            waited += delay
            attempt += 1

    def _backoff(self, attempt: int) -> float:
        ceiling = min(MAX_BACKOFF, self.retry_base_delay * 2**attempt)
        return ceiling * (0.5 + 0.5 * self._random.random())

    def _vectors(self, body: bytes, count: int) -> np.ndarray:
        """The answer's vectors in input order (matched by ``index``), checked; EmbeddingError for anything else."""
        where = f"{self.ref} at {self._where()}"
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError) as error:
            snippet = body[:60].decode("utf-8", "replace")
            raise EmbeddingError(
                f"{where} answered HTTP 200 with a body that is not JSON ({snippet!r}); nothing was kept. Check "
                "that base_url points at an OpenAI-compatible /v1 endpoint."
            ) from error
        data = payload.get("data") if isinstance(payload, dict) else None
        if not isinstance(data, list):
            raise EmbeddingError(
                f"{where} answered JSON without a 'data' list of embeddings; nothing was kept. Check that base_url "
                "points at an OpenAI-compatible /v1 endpoint."
            )
        if len(data) != count:
            raise EmbeddingError(
                f"{where} returned {len(data)} vectors for {count} inputs; nothing was kept. The server dropped or "
                "added inputs: check its batch limits, or lower batch_size."
            )
        # Matched by index, never by position: a server may answer in any order, and one that leaves the index
        # out cannot be trusted to have kept the order either.
        ordered: list = [None] * count
        for item in data:
            index = item.get("index") if isinstance(item, dict) else None
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
                raise EmbeddingError(
                    f"{where} answered an embedding with index {index!r} for {count} inputs; nothing was kept. "
                    "Each embedding must carry the index (0 to n-1) of its input: the server is not "
                    "OpenAI-compatible in its answers."
                )
            if ordered[index] is not None:
                raise EmbeddingError(
                    f"{where} answered two embeddings for input {index}; nothing was kept. The server is not "
                    "OpenAI-compatible in its answers."
                )
            ordered[index] = item.get("embedding")
        vectors = check_vectors(decode_embeddings(ordered, source=where), count, self.dimensions, source=self.ref)
        if self.dimensions is None:
            # A model of unknown size: the first answer fixes it, and later batches must agree.
            self.dimensions = int(vectors.shape[1])
        return vectors

    def _refusal(self, error) -> str:
        status = error.status_code
        detail = _server_message(error)
        where = self._where()
        if status == 401:
            fix = f"set the environment variable {self.api_key_env} to a valid key for this server"
        elif status == 403:
            fix = "use a key that is allowed to call this model"
        elif status == 404:
            fix = f"check the model name {self.name!r} and that base_url ends in /v1"
        else:
            fix = "fix the request (model name, dimensions, input size) and run the command again"
        return f"{self.ref} at {where} refused the request with HTTP {status} ({detail}); {fix}."

    def _where(self) -> str:
        return self.base_url or "api.openai.com"


def decode_embeddings(items: list, *, source: str) -> np.ndarray:
    """Embeddings as OpenAI sends them, as an (n, d) float32 array: base64 strings (little-endian float32) or
    lists of numbers. Anything else (numeric strings, nulls, ragged or mixed answers) is an EmbeddingError."""
    if items and all(isinstance(item, str) for item in items):
        try:
            raw = [base64.b64decode(item, validate=True) for item in items]
        except (binascii.Error, ValueError) as error:
            raise EmbeddingError(
                f"{source} answered an embedding that is not valid base64 ({error}); nothing was kept."
            ) from error
        sizes = {len(part) for part in raw}
        if len(sizes) != 1 or next(iter(sizes)) % 4:
            raise EmbeddingError(
                f"{source} answered base64 embeddings of {sorted(sizes)} bytes; nothing was kept. Each must be the "
                "same whole number of little-endian float32 values (4 bytes each)."
            )
        # One copy into native float32 (frombuffer's view is read-only and little-endian).
        return np.frombuffer(b"".join(raw), dtype="<f4").reshape(len(items), -1).astype(np.float32)
    if not all(isinstance(item, list) for item in items):
        kinds = sorted({type(item).__name__ for item in items})
        raise EmbeddingError(
            f"{source} answered embeddings of type {', '.join(kinds)} instead of lists of numbers or base64 "
            "strings; nothing was kept."
        )
    try:
        array = np.array(items)
    except ValueError as error:  # ragged lists
        raise EmbeddingError(
            f"{source} returned embeddings that are not a rectangular array of numbers ({error}); nothing was kept."
        ) from error
    # JSON numbers only: numpy would read "0.1" or true as numbers if asked for floats straight away.
    if array.dtype.kind not in "fiu" or array.ndim != 2:
        raise EmbeddingError(
            f"{source} returned embeddings that are not lists of JSON numbers (found {array.dtype.kind!r} values, "
            "e.g. strings or nulls); nothing was kept. The server is not OpenAI-compatible in its answers."
        )
    return array.astype(np.float32)


# Where every key variable may be sent besides what TOOLKIT_API_KEY_URLS approves: OpenAI's own API (a model may
# name its own OpenAI key with api_key_env, which only the owner may register).
DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_URLS_ENV = "TOOLKIT_API_KEY_URLS"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _url_parts(url: str) -> tuple[str, str, int | None, str] | None:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname or parts.username or parts.password:
        return None
    return parts.scheme.lower(), parts.hostname.lower(), port, parts.path.rstrip("/")


def approved_key_urls(environ=None) -> dict[str, list[str]]:
    """The URLs each key variable may be sent to besides OpenAI's own API: what ``TOOLKIT_API_KEY_URLS`` lists
    (``VARIABLE=URL[,URL...]`` entries separated by spaces, semicolons or new lines), set by the operator of this
    process. A URL covers the paths below it."""
    environ = os.environ if environ is None else environ
    approved: dict[str, list[str]] = {}
    for entry in re.split(r"[\s;]+", environ.get(KEY_URLS_ENV, "").strip()):
        if not entry:
            continue
        name, _, urls = entry.partition("=")
        if not _ENV_NAME.match(name) or not urls:
            raise InputError(
                f"{KEY_URLS_ENV} must list VARIABLE=URL[,URL...] entries separated by spaces, not {entry!r}."
            )
        for url in urls.split(","):
            if _url_parts(url) is None:
                raise InputError(f"{KEY_URLS_ENV}: {url!r} is not a URL such as https://llm.internal:8443/v1.")
            approved.setdefault(name, []).append(url)
    return approved


def check_key_destination(variable: str, url: str, environ=None) -> None:
    """Refuses to send the key in ``variable`` to ``url`` unless this process's operator approved that URL for it
    (``approved_key_urls``): a model's server and key variable come from the registry, which another role may have
    written; the key is this process's."""
    target = _url_parts(url)
    for approved in [DEFAULT_BASE_URL, *approved_key_urls(environ).get(variable, [])]:
        allowed = _url_parts(approved)
        if (
            target
            and allowed
            and target[:3] == allowed[:3]
            and (target[3] == allowed[3] or target[3].startswith(allowed[3] + "/"))
        ):
            return
    raise InputError(
        f"The key in {variable} would be sent to {url}, which this process's operator has not approved for it; "
        f"nothing was sent. If that server should receive it, add {variable}={url} to the environment variable "
        f"{KEY_URLS_ENV} (space-separated VARIABLE=URL entries)."
    )


def _api_key_env(name: str | None) -> str:
    if name is None:
        return DEFAULT_API_KEY_ENV
    if not isinstance(name, str) or not _ENV_NAME.match(name):
        raise InputError(
            f"The embedding option api_key_env must name an environment variable (letters, digits and _), not {name!r}."
        )
    return name


def _refuses_base64(error) -> bool:
    """Whether an error answer says the server does not accept ``encoding_format: base64``."""
    return error.status_code in (400, 415, 422) and "encoding" in _server_message(error).lower()


def parse_retry_after(headers, *, now: float | None = None) -> float | None:
    """Seconds to wait from ``Retry-After`` (seconds or HTTP date) or ``retry-after-ms``; None if absent.
    ``now`` (epoch seconds, default the clock) is what an HTTP date is counted from."""
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            seconds = float(value) / 1000
            return seconds if math.isfinite(seconds) and seconds >= 0 else None
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _server_message(error) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error")
        message = body.get("message") or (inner.get("message") if isinstance(inner, dict) else inner)
        if message:
            return str(message)[:200]
    return str(getattr(error, "message", error))[:200]
