"""Progress of long work: a live line (items, rate, ETA) on a terminal, a plain line now and then in logs."""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


class Progress:
    """Counts items toward an optional total and reports them on ``stream`` (stderr by default).

    On a terminal the line is redrawn at most 10 times a second; otherwise a line is printed every
    ``log_interval`` seconds, so CI logs stay short. ``quiet`` prints nothing.
    """

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        unit: str = "items",
        stream: TextIO | None = None,
        quiet: bool = False,
        log_interval: float = 10.0,
    ):
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.done = 0
        self.extra: dict[str, str] = {}
        self.started = time.monotonic()
        self._last = self.started
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._interval = 0.1 if self._tty else log_interval
        self._written_at: int | None = None  # the count last written, so finish() never repeats a line

    def advance(self, count: int = 1, **extra) -> None:
        self.done += count
        self.extra.update({k: str(v) for k, v in extra.items()})
        now = time.monotonic()
        if now - self._last >= self._interval:
            self._last = now
            self._write(final=False)

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed
        text = f"{self.label}: {self.done:,}"
        if self.total:
            text += f"/{self.total:,} {self.unit} ({100 * self.done / self.total:.0f}%)"
        else:
            text += f" {self.unit}"
        text += f", {rate:,.1f}/s"
        if self.total and rate > 0 and self.done < self.total:
            text += f", ETA {_duration((self.total - self.done) / rate)}"
        for key, value in self.extra.items():
            text += f", {key} {value}"
        return text

    def _write(self, final: bool) -> None:
        if self.quiet or (final and not self._tty and self._written_at == self.done):
            return
        self._written_at = self.done
        if self._tty:
            self.stream.write("\r\033[K" + self.line() + ("\n" if final else ""))
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()

    def finish(self) -> None:
        self._write(final=True)
