"""A token-bucket rate limiter for embedding requests: requests per minute, tokens per minute, and the
pause a server asks for with ``Retry-After``. Thread-safe; the clock and sleep are injectable for tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from toolkit.errors import InputError


class _Bucket:
    """Holds up to ``capacity`` units and refills at ``capacity`` per minute."""

    def __init__(self, per_minute: float, now: float):
        self.capacity = float(per_minute)
        self.rate = self.capacity / 60.0
        self.level = self.capacity
        self.updated = now

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.updated = now

    def wait_for(self, amount: float) -> float:
        # A request larger than the whole bucket waits for a full bucket and then runs into debt, so an
        # oversized batch is slowed down rather than refused forever.
        needed = min(amount, self.capacity)
        return 0.0 if self.level >= needed else (needed - self.level) / self.rate


class RateLimiter:
    """Blocks callers so that at most ``requests_per_minute`` requests and ``tokens_per_minute`` tokens are
    sent per minute (bursts of up to one minute's budget), and nobody sends during a ``pause``.

    ``None`` for a limit means unlimited. Typical use, once per request::

        limiter.acquire(tokens=batch_tokens)   # may sleep
        ... send ...
        limiter.pause(retry_after)             # on 429: every caller sharing the limiter waits
    """

    def __init__(
        self,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ):
        for value, option in (
            (requests_per_minute, "requests_per_minute"),
            (tokens_per_minute, "tokens_per_minute"),
        ):
            if value is not None and (isinstance(value, bool) or not value > 0):
                raise InputError(f"The rate limit {option} must be a positive number or None, not {value!r}.")
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        now = clock()
        self._requests = _Bucket(requests_per_minute, now) if requests_per_minute else None
        self._tokens = _Bucket(tokens_per_minute, now) if tokens_per_minute else None
        self._paused_until = now

    def delay(self, tokens: int = 0) -> float:
        """Seconds a request of ``tokens`` tokens would have to wait now (0.0 if it may go). Takes nothing."""
        with self._lock:
            return self._delay(tokens, self._clock())

    def try_acquire(self, tokens: int = 0) -> bool:
        """Take one request and ``tokens`` tokens if that needs no waiting; return whether it did."""
        with self._lock:
            now = self._clock()
            if self._delay(tokens, now) > 0:
                return False
            self._take(tokens)
            return True

    def acquire(self, tokens: int = 0) -> float:
        """Wait until one request of ``tokens`` tokens may be sent, take it, and return the seconds waited."""
        if tokens < 0:
            raise InputError(f"A request cannot use a negative number of tokens ({tokens}).")
        waited = 0.0
        while True:
            with self._lock:
                now = self._clock()
                wait = self._delay(tokens, now)
                if wait <= 0:
                    self._take(tokens)
                    return waited
            self._sleep(wait)
            waited += wait

    def pause(self, seconds: float) -> None:
        """Hold every request for ``seconds`` from now (a server's ``Retry-After``); a shorter pause than
        one already in force changes nothing."""
        with self._lock:
            self._paused_until = max(self._paused_until, self._clock() + max(0.0, float(seconds)))

    def _delay(self, tokens: int, now: float) -> float:
        wait = max(0.0, self._paused_until - now)
        if self._requests:
            self._requests.refill(now)
            wait = max(wait, self._requests.wait_for(1))
        if self._tokens and tokens:
            self._tokens.refill(now)
            wait = max(wait, self._tokens.wait_for(tokens))
        return wait

    def _take(self, tokens: int) -> None:
        if self._requests:
            self._requests.level -= 1
        if self._tokens:
            self._tokens.level -= tokens
