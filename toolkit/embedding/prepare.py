"""``python -m toolkit.embedding.prepare [MODEL ...]``: export (and quantize) a local model's ONNX runtimes ahead of
time, so that the first embedding of a process never waits for it (``make install`` runs it for the bundled
all-MiniLM-L6-v2). An export whose signed manifest does not verify (altered, or copied from another user) is
deleted and made again: this is the command the refusal names."""

from __future__ import annotations

import logging
import sys

from toolkit.embedding import onnx_runtime
from toolkit.embedding.local import DEFAULT_LOCAL_MODEL, _locate


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for name in (argv if argv is not None else sys.argv[1:]) or [DEFAULT_LOCAL_MODEL]:
        location, _ = _locate(name)
        for runtime in onnx_runtime.ONNX_RUNTIMES:
            print(f"{name} {runtime}: {onnx_runtime.prepare(location, runtime, replace_unverified=True)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
