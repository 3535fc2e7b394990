"""Reading PDFs in a child process with limits, so that a hostile PDF cannot hang or exhaust the reader.

A PDF is a program for a parser: a stream compressed twice (a 5 KB "Flate bomb") decodes to gigabytes, a page can
draw millions of glyphs, a file can hold 100,000 pages, and a structure pdfminer does not guard against can keep it
busy forever (a reference loop was one: ``toolkit.text.pdf`` now refuses those by itself). Each PDF is therefore
read by ``PdfReader`` in a separate Python process (``python -m toolkit.text.pdf_process``) whose address space is
capped (``RLIMIT_AS``); the parent kills it when a document takes longer than the time limit. Inside the child,
``toolkit.text.pdf.read_pdf`` refuses a document of more pages, or a page of more glyphs, than allowed before
interpreting it. A document over any limit becomes a ``PdfError`` whose sentence names the limit and the option
that raises it; the reader then starts a fresh child for the next PDF, and every other file of the run is read as
usual.

The child is started once per run and reused for every PDF that stays within the limits (starting Python and
importing pdfminer costs about a third of a second). Requests and answers are pickled, length-prefixed, over the
child's stdin and stdout; the child exits when its stdin closes (the parent ended, however it ended).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import struct
import subprocess
import sys
import time
from pathlib import Path

from toolkit.text.pdf import PdfError, PdfText

_HEADER = struct.Struct("!Q")
# The child's own exit codes (sent when it could not even answer).
_EXIT_MEMORY = 3


def _size(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:g} {unit}"
    return f"{count} bytes"


class PdfReader:
    """Reads PDFs one at a time in a child process bounded by ``limits`` (a ``toolkit.text.sources.ReadLimits``).
    Use as a context manager, or call ``close``; ``read`` returns a ``PdfText`` or raises ``PdfError`` (or
    ``ImportError`` when the ``pdf`` extra is missing)."""

    def __init__(self, limits):
        self.limits = limits
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> PdfReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            process.stdin.close()  # the child's read ends: it exits
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        with contextlib.suppress(OSError):
            process.stdout.close()

    def _kill(self) -> int:
        process, self._process = self._process, None
        process.kill()
        code = process.wait()  # reaped, so its peak memory counts in the parent's children usage
        for stream in (process.stdin, process.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        return code

    def _start(self) -> subprocess.Popen:
        if self._process is None:
            toolkit_root = str(Path(__file__).resolve().parents[2])
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (toolkit_root, env.get("PYTHONPATH")) if p)
            self._process = subprocess.Popen(
                [sys.executable, "-m", "toolkit.text.pdf_process", str(int(self.limits.pdf_memory_bytes))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                close_fds=True,
            )
        return self._process

    def read(self, path: str | Path, *, clean: bool = True) -> PdfText:
        import pdfminer  # noqa: F401 - the pdf extra: without it, ImportError here (the child would import it too)

        limits = self.limits
        process = self._start()
        request = pickle.dumps((str(path), clean, limits.pdf_max_pages, limits.pdf_max_glyphs))
        deadline = time.monotonic() + limits.pdf_seconds
        try:
            process.stdin.write(_HEADER.pack(len(request)) + request)
            process.stdin.flush()
            answer = self._receive(process, deadline)
        except BrokenPipeError:
            answer = None
        if answer == "timeout":
            self._kill()
            raise PdfError(
                f"took longer than {limits.pdf_seconds:g} s to read and was stopped (the limit is --pdf-timeout); "
                "a PDF built to hang a reader looks like this: leave it out, or raise "
                "--pdf-timeout if it is only very large."
            )
        if answer is None:  # the child died without answering: out of memory, most likely
            code = self._kill()
            if code in (_EXIT_MEMORY, -9, -6, -11) or code < 0:
                raise PdfError(self._memory_reason())
            raise PdfError(f"stopped the process reading it (exit code {code}); re-export it from its source.")
        kind, value = answer
        if kind == "ok":
            return PdfText(*value)
        if kind == "missing":
            self.close()
            raise ImportError(value)
        if kind == "memory":
            self._kill()
            raise PdfError(self._memory_reason())
        raise PdfError(value)

    def _memory_reason(self) -> str:
        return (
            f"needed more than {_size(self.limits.pdf_memory_bytes)} of memory to read and was stopped (the limit "
            "is --pdf-memory); a PDF built to exhaust memory (a compression bomb) looks like this: leave it out, or "
            "raise --pdf-memory if it is only very large."
        )

    @staticmethod
    def _receive(process: subprocess.Popen, deadline: float):
        """The child's answer, "timeout" at the deadline, or None when it closed its stdout (it died)."""
        stream = process.stdout
        fd = stream.fileno()
        data = b""
        needed = _HEADER.size
        header_read = False
        while True:
            while len(data) < needed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return "timeout"
                ready, _, _ = select.select([fd], [], [], left)
                if not ready:
                    return "timeout"
                piece = os.read(fd, max(needed - len(data), 65536) if header_read else needed - len(data))
                if not piece:
                    return None
                data += piece
            if header_read:
                return pickle.loads(data[:needed])
            needed = _HEADER.unpack(data[: _HEADER.size])[0]
            data = data[_HEADER.size :]
            header_read = True


def _serve(memory_bytes: int) -> int:
    """The child: caps its address space, then answers requests until stdin closes."""
    import resource

    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    inbox, outbox = sys.stdin.buffer, os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    sys.stdout = sys.stderr  # nothing a library prints can corrupt the answers

    def answer(kind: str, value) -> None:
        payload = pickle.dumps((kind, value))
        outbox.write(_HEADER.pack(len(payload)) + payload)
        outbox.flush()

    try:
        import pdfminer  # noqa: F401 - the pdf extra

        from toolkit.text.pdf import read_pdf
    except ImportError:
        missing = True
    except MemoryError:
        return _EXIT_MEMORY
    else:
        missing = False
    while True:
        header = inbox.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return 0
        request = inbox.read(_HEADER.unpack(header)[0])
        path, clean, max_pages, max_glyphs = pickle.loads(request)
        if missing:
            answer("missing", "pdfminer.six is not installed")
            continue
        try:
            pdf = read_pdf(path, clean=clean, max_pages=max_pages, max_glyphs=max_glyphs)
        except PdfError as error:
            answer("error", str(error))
        except MemoryError:
            try:
                answer("memory", "")
            except MemoryError:
                return _EXIT_MEMORY
            return _EXIT_MEMORY
        else:
            try:
                answer("ok", (pdf.text, pdf.pages, pdf.title))
            except MemoryError:
                return _EXIT_MEMORY


if __name__ == "__main__":
    sys.exit(_serve(int(sys.argv[1])))
