"""The progress line: silent off a terminal, redrawn on time on one, with rate and ETA from recent throughput."""

import io
import threading

from toolkit.progress import Progress


class Terminal(io.StringIO):
    """A stream that says it is a terminal and signals every write."""

    def __init__(self):
        super().__init__()
        self.writes = 0
        self.changed = threading.Condition()

    def isatty(self):
        return True

    def write(self, text):
        with self.changed:
            self.writes += 1
            self.changed.notify_all()
        return super().write(text)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_nothing_is_written_when_the_stream_is_not_a_terminal():
    stream = io.StringIO()
    progress = Progress("ingest", 10, unit="documents", stream=stream)
    progress.advance(5)
    progress.finish()
    assert stream.getvalue() == ""


def test_rate_and_eta_come_from_recent_work_not_the_whole_run():
    clock = Clock()
    progress = Progress("backfill", 1000, unit="documents", stream=io.StringIO(), clock=clock)
    for _ in range(10):  # a slow start: 100 documents in 300 s
        clock.now += 30
        progress.advance(10)
    for _ in range(30):  # then 10 a second
        clock.now += 1
        progress.advance(10)
    items, _ = progress.rate()
    assert 9.0 <= items <= 10.0  # the last 30 s, where the cumulative average is 400 / 330 s = 1.2/s
    assert 60 <= progress.eta() <= 67  # 600 left at ~10/s, not ~500 s
    assert "ETA 1m0" in progress.line()


def test_the_eta_is_measured_in_weight_when_items_differ_in_size():
    clock = Clock()
    progress = Progress("backfill", stream=io.StringIO(), clock=clock)
    progress.set_total(100, weight=10_000)
    clock.now += 10
    progress.advance(50, weight=1_000)  # half the documents, a tenth of the bytes
    assert progress.eta() == 90.0
    assert "(10%)" in progress.line()


def test_the_line_is_redrawn_on_time_between_reports_and_ends_with_a_newline():
    stream = Terminal()
    progress = Progress("ingest", 3, unit="documents", stream=stream, tick=0.01)
    progress.advance(1)  # one report, then nothing: the ticker keeps drawing
    with stream.changed:
        assert stream.changed.wait_for(lambda: stream.writes >= 3, timeout=60)
    progress.finish()
    output = stream.getvalue()
    assert output.count("\r\x1b[K") >= 3 and output.endswith("\n") and "1/3 documents (33%)" in output
