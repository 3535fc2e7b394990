"""A rate limiter for embedding requests that keeps its promise over any minute: at most ``requests_per_minute``
requests and ``tokens_per_minute`` tokens in any 60-second window, spread evenly (no burst at the start), and
nothing sent during the pause a server asks for with ``Retry-After``. Thread-safe; the clock and sleep are
injectable for tests."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable

from toolkit.errors import InputError

WINDOW = 60.0
# A wait this short is rounding left over from the last one: sleeping it again could loop forever on a clock
# whose resolution is coarser.
EPSILON = 1e-9


class RateLimiter:
    """Blocks callers so that no 60-second window holds more than ``requests_per_minute`` requests or
    ``tokens_per_minute`` tokens, and nobody sends during a ``pause``.

    Requests are spaced at least ``60 / requests_per_minute`` seconds apart, and a request of ``t`` tokens holds
    the next one back for ``t / (tokens_per_minute / 60)`` seconds, so the budget is spent evenly over the minute
    instead of in a burst at its start (providers enforce their limits over shorter periods too). A token bucket
    with a minute's capacity, as before, let ``--rate 120`` send 131 requests in 6 seconds. A single request of
    more tokens than the minute's budget is sent alone once the last minute held no other.

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
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or not value > 0
            ):
                raise InputError(f"The rate limit {option} must be a positive number or None, not {value!r}.")
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._interval = WINDOW / requests_per_minute if requests_per_minute else None
        self._tokens_per_minute = float(tokens_per_minute) if tokens_per_minute else None
        self._last_request = -math.inf
        self._tokens_paced_until = -math.inf
        self._sent: deque[tuple[float, int]] = deque()  # (when, tokens) of the requests of the last minute
        self._sent_tokens = 0
        self._paused_until = clock()

    def delay(self, tokens: int = 0) -> float:
        """Seconds a request of ``tokens`` tokens would have to wait now (0.0 if it may go). Takes nothing."""
        with self._lock:
            return self._delay(tokens, self._clock())

    def try_acquire(self, tokens: int = 0) -> bool:
        """Take one request and ``tokens`` tokens if that needs no waiting; return whether it did."""
        with self._lock:
            now = self._clock()
            if self._delay(tokens, now) > EPSILON:
                return False
            self._take(tokens, now)
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
                if wait <= EPSILON:
                    self._take(tokens, now)
                    return waited
            self._sleep(wait)
            waited += wait

    def pause(self, seconds: float) -> None:
        """Hold every request for ``seconds`` from now (a server's ``Retry-After``); a shorter pause than
        one already in force changes nothing."""
        with self._lock:
            self._paused_until = max(self._paused_until, self._clock() + max(0.0, float(seconds)))

    def _delay(self, tokens: int, now: float) -> float:
        wait = self._paused_until - now
        if self._interval is not None:
            wait = max(wait, self._last_request + self._interval - now)
        if self._tokens_per_minute is not None and tokens:
            wait = max(wait, self._tokens_paced_until - now, self._window_wait(tokens, now))
        return max(0.0, wait)

    def _window_wait(self, tokens: int, now: float) -> float:
        """Seconds until the tokens sent in the last minute leave room for ``tokens`` more."""
        while self._sent and self._sent[0][0] <= now - WINDOW:
            self._sent_tokens -= self._sent.popleft()[1]
        if not self._sent:
            return 0.0
        if tokens > self._tokens_per_minute:
            return self._sent[-1][0] + WINDOW - now  # alone: once nothing else was sent in the last minute
        excess = self._sent_tokens + tokens - self._tokens_per_minute
        if excess <= 0:
            return 0.0
        for when, sent in self._sent:
            excess -= sent
            if excess <= 0:
                return when + WINDOW - now
        return self._sent[-1][0] + WINDOW - now

    def _take(self, tokens: int, now: float) -> None:
        self._last_request = now
        if self._tokens_per_minute is not None and tokens:
            self._tokens_paced_until = now + tokens * WINDOW / self._tokens_per_minute
            self._sent.append((now, tokens))
            self._sent_tokens += tokens
