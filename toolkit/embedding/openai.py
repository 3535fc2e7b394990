"""The ``openai`` provider: OpenAI's embeddings API, or any OpenAI-compatible server, via the official client.

Batches are bounded by count and tokens, over-limit inputs are refused before anything is sent, and retrying
is done here (the client's own retries are off) so that what is retried, and for how long, is explicit.
"""

from __future__ import annotations

import email.utils
import math
import os
import random
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


class OpenAIEmbedder(Embedder):
    """``openai:MODEL`` through ``openai.OpenAI(base_url=..., max_retries=0)``."""

    provider = "openai"

    def __init__(
        self,
        name: str | None = None,
        *,
        dimensions: int | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
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
        self.batch_size = positive_int(batch_size or 128, "batch_size")
        self.max_batch_tokens = positive_int(max_batch_tokens or 100_000, "max_batch_tokens")
        self.timeout = positive_float(timeout if timeout is not None else 60.0, "timeout")
        if max_retries is not None and (isinstance(max_retries, bool) or not isinstance(max_retries, int)):
            raise InputError(f"The embedding option max_retries must be a whole number, not {max_retries!r}.")
        self.max_retries = max(0, max_retries) if max_retries is not None else 6
        self.retry_base_delay = positive_float(retry_base_delay or 0.5, "retry_base_delay")
        self.max_retry_wait = positive_float(max_retry_wait or 120.0, "max_retry_wait")
        self.send_input_type = bool(send_input_type)
        self.rate_limiter = rate_limiter
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        api_key = api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            if self.base_url is None:
                raise InputError(
                    "No OpenAI API key: set OPENAI_API_KEY (or pass api_key), or point base_url / "
                    "OPENAI_BASE_URL at an OpenAI-compatible server that needs none."
                )
            api_key = PLACEHOLDER_API_KEY
        import openai

        self._openai = openai
        self._client = openai.OpenAI(api_key=api_key, base_url=self.base_url, timeout=self.timeout, max_retries=0)
        self._random = random.Random()
        self._sleep = time.sleep

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
        from toolkit.tokens import count_tokens

        return [count_tokens(text) for text in self._prefixed(texts, is_query)]

    def _embed(self, texts: list[str], is_query: bool, token_counts: list[int]) -> np.ndarray:
        inputs = self._prefixed(texts, is_query)
        parts = [
            self._request(inputs[start:stop], sum(token_counts[start:stop]), is_query)
            for start, stop in batches(token_counts, self.batch_size, self.max_batch_tokens)
        ]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def _request(self, inputs: list[str], tokens: int, is_query: bool) -> np.ndarray:
        """Send one batch, retrying transient failures; return its checked vectors or raise EmbeddingError."""
        openai = self._openai
        arguments = {"model": self.name, "input": inputs, "encoding_format": "float"}
        if self._request_dimensions is not None:
            arguments["dimensions"] = self._request_dimensions
        if self.send_input_type:
            arguments["extra_body"] = {"input_type": "query" if is_query else "document"}
        waited = 0.0
        attempt = 0
        while True:
            if self.rate_limiter is not None:
                self.rate_limiter.acquire(tokens)
            retry_after = None
            try:
                response = self._client.embeddings.create(**arguments)
            except openai.APIStatusError as error:
                if error.status_code not in RETRYABLE_STATUS:
                    raise EmbeddingError(self._refusal(error)) from error
                retry_after = parse_retry_after(error.response.headers)
                failure = f"HTTP {error.status_code} ({_server_message(error)})"
            except openai.APITimeoutError:
                failure = f"no answer within the {self.timeout:g} s timeout"
            except openai.APIConnectionError as error:
                failure = f"a connection error ({error.__cause__ or error})"
            except openai.APIError as error:
                raise EmbeddingError(
                    f"{self.ref} at {self._where()} answered something the OpenAI client cannot read "
                    f"({error}); check that base_url points at an OpenAI-compatible /v1 endpoint."
                ) from error
            else:
                return self._vectors(response, len(inputs))
            if attempt >= self.max_retries:
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

    def _vectors(self, response, count: int) -> np.ndarray:
        data = list(getattr(response, "data", None) or [])
        indexes = [getattr(item, "index", None) for item in data]
        if len(data) == count and None not in indexes:
            if sorted(indexes) != list(range(count)):
                raise EmbeddingError(
                    f"{self.ref} at {self._where()} answered with vector indexes {sorted(indexes)} for "
                    f"{count} inputs; nothing was kept. The server is not OpenAI-compatible in its answers."
                )
            data = sorted(data, key=lambda item: item.index)
        # Checked per batch as well as whole (Embedder._checked): a bad batch stops before the next is sent.
        vectors = check_vectors(
            [getattr(item, "embedding", None) for item in data], count, self.dimensions, source=self.ref
        )
        if self.dimensions is None:
            # A model of unknown size: the first answer fixes it, and later batches must agree.
            self.dimensions = int(vectors.shape[1])
        return vectors

    def _refusal(self, error) -> str:
        status = error.status_code
        detail = _server_message(error)
        where = self._where()
        if status == 401:
            fix = "set OPENAI_API_KEY (or api_key) to a valid key for this server"
        elif status == 403:
            fix = "use a key that is allowed to call this model"
        elif status == 404:
            fix = f"check the model name {self.name!r} and that base_url ends in /v1"
        else:
            fix = "fix the request (model name, dimensions, input size) and run the command again"
        return f"{self.ref} at {where} refused the request with HTTP {status} ({detail}); {fix}."

    def _where(self) -> str:
        return self.base_url or "api.openai.com"


def parse_retry_after(headers) -> float | None:
    """Seconds to wait from ``Retry-After`` (seconds or HTTP date) or ``retry-after-ms``; None if absent."""
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
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _server_message(error) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error")
        message = body.get("message") or (inner.get("message") if isinstance(inner, dict) else inner)
        if message:
            return str(message)[:200]
    return str(getattr(error, "message", error))[:200]
