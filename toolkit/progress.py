"""Progress of long work: a live line on a terminal (done, share, rate, ETA), redrawn on time and not only when a
batch ends, with the rate and ETA from recent throughput; nothing at all when stderr is not a terminal (logs, CI)
or the command was given ``--quiet``.

``TOOLKIT_PROGRESS=always`` shows it anyway (off a terminal: one plain line every ``LOG_TICK`` seconds and a last
one at the end, for a CI log); ``TOOLKIT_PROGRESS=never`` hides it on a terminal too.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TextIO

# Rate and ETA come from the work done in the last RECENT seconds (at least the last two reports): a cumulative
# average carries the slow or fast start of a run into its end (e5's backfill said "ETA 30s" and took 101 s).
# The time before the first report (a model loading, a first batch) is not throughput: the rate counts from the
# first report on, and the ETA waits for a second one.
RECENT = 30.0
TICK = 0.25
LOG_TICK = 10.0
ENVIRONMENT = "TOOLKIT_PROGRESS"


def shown(stream: TextIO, quiet: bool = False) -> bool:
    """Whether progress is drawn on ``stream``: never under ``quiet``, else as ``TOOLKIT_PROGRESS`` says
    (``always`` / ``never``), else only on a terminal."""
    if quiet:
        return False
    forced = os.environ.get(ENVIRONMENT, "").strip().lower()
    if forced in ("always", "1", "on", "yes"):
        return True
    if forced in ("never", "0", "off", "no"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def _rate(per_second: float, unit: str) -> str:
    """A rate with its unit, per minute when under one a second (a slow model's documents are not "0.0/s")."""
    if per_second == 0:
        return f"0 {unit}/s"
    if per_second < 1:
        per_minute = per_second * 60
        return f"{per_minute:,.{1 if per_minute < 10 else 0}f} {unit}/min"
    return f"{per_second:,.{1 if per_second < 10 else 0}f} {unit}/s"


class Progress:
    """Counts items toward an optional total and shows them on ``stream`` (stderr by default), on a terminal only.

    ``advance(count, weight=…)`` reports work done; ``weight`` (for example bytes of text) is what the share and
    the ETA are measured in when the items differ in size, with ``set_total(total, weight=…)``. On a terminal a
    ticker thread redraws the line every ``tick`` seconds, so elapsed time and ETA move between reports.
    """

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        unit: str = "items",
        stream: TextIO | None = None,
        quiet: bool = False,
        tick: float = TICK,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream or sys.stderr
        self._clock = clock
        self.done = 0
        self.weight_done = 0
        self.total_weight: int | None = None
        self.extra: dict[str, str] = {}
        self.started = clock()
        # (time, items, weight) of the reports in the recent window; the first report is kept as the window's start
        # until RECENT seconds of later ones exist.
        self._samples: deque[tuple[float, int, int]] = deque()
        self.quiet = not shown(self.stream, quiet)
        self._terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.tick = tick if self._terminal else max(tick, LOG_TICK)
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._ticker: threading.Thread | None = None

    def set_total(self, total: int | None, *, weight: int | None = None) -> None:
        with self._lock:
            self.total = total
            self.total_weight = weight
        self._start()

    def advance(self, count: int = 1, *, weight: int | None = None, **extra) -> None:
        with self._lock:
            self.done += count
            self.weight_done += count if weight is None else weight
            self.extra.update({k: str(v) for k, v in extra.items()})
            now = self._clock()
            self._samples.append((now, self.done, self.weight_done))
            while len(self._samples) > 2 and self._samples[0][0] < now - RECENT:
                self._samples.popleft()
        self._start()

    def rate(self, now: float | None = None) -> tuple[float, float]:
        """(items per second, weight per second) over the recent window; zero before anything was done."""
        with self._lock:
            return self._rate(self._clock() if now is None else now)

    def _rate(self, now: float) -> tuple[float, float]:
        if not self._samples:
            return 0.0, 0.0
        first, last = self._samples[0], self._samples[-1]
        if len(self._samples) == 1:
            # One report: all there is to go by is the whole run so far (shown, but no ETA is made of it).
            first = (self.started, 0, 0)
        # Up to now, not to the last report: a stall shows as a falling rate instead of a frozen one.
        span = max(now, last[0]) - first[0]
        if span <= 0 or (last[1] == first[1] and last[2] == first[2]):
            return 0.0, 0.0
        return (last[1] - first[1]) / span, (last[2] - first[2]) / span

    def eta(self, now: float | None = None) -> float | None:
        """Seconds left at the recent rate, or None when there is no total or no rate yet."""
        with self._lock:
            return self._eta(self._clock() if now is None else now)

    def _eta(self, now: float) -> float | None:
        if len(self._samples) < 2:
            return None  # the first report's time includes the start (a model loading): not a rate to plan by
        items, weight = self._rate(now)
        if self.total_weight:
            return (self.total_weight - self.weight_done) / weight if weight > 0 else None
        if self.total:
            return (self.total - self.done) / items if items > 0 else None
        return None

    def line(self, now: float | None = None) -> str:
        with self._lock:
            now = self._clock() if now is None else now
            text = f"{self.label}: {self.done:,}"
            share = None
            if self.total_weight:
                share = self.weight_done / self.total_weight
            elif self.total:
                share = self.done / self.total
            if self.total:
                text += f"/{self.total:,}"
            text += f" {self.unit}"
            if share is not None:
                text += f" ({100 * min(share, 1.0):.0f}%)"
            items, _ = self._rate(now)
            text += f", {_rate(items, self.unit)}, {_duration(now - self.started)}"
            eta = None if self._finished.is_set() else self._eta(now)
            if eta is not None and share is not None and share < 1:
                text += f", ETA {_duration(max(0.0, eta))}"
            for key, value in self.extra.items():
                text += f", {key} {value}"
            return text

    def finish(self) -> None:
        if self._finished.is_set():
            return
        self._finished.set()
        if self._ticker is not None:
            self._ticker.join()
        if not self.quiet and (self._samples or self._ticker is not None):  # nothing reported, nothing to say
            self._draw(final=True)

    def _start(self) -> None:
        if self.quiet or self._ticker is not None or self._finished.is_set():
            return
        with self._lock:
            if self._ticker is None:
                self._ticker = threading.Thread(target=self._tick, name="toolkit-progress", daemon=True)
                self._ticker.start()

    def _tick(self) -> None:
        while not self._finished.wait(self.tick):
            self._draw(final=False)

    def _draw(self, final: bool) -> None:
        text = self.line()
        if self._terminal:
            self.stream.write("\r\033[K" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")  # forced on off a terminal (a CI log): plain lines
        self.stream.flush()
