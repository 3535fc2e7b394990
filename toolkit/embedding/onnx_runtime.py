"""ONNX Runtime for local sentence-transformers models: the export made once from the installed weights, cached
with a hash check, and the inference that needs neither torch nor sentence-transformers.

Runtimes of a ``sentence-transformers`` model (the ``runtime`` option, part of a registered model's identity):

- ``onnx`` (the default for the bundled all-MiniLM-L6-v2 and any local directory of a supported layout): the
  model exported to ONNX and run by ONNX Runtime in fp32. Its vectors equal torch's (1 - cos below 1e-6).
- ``onnx-int8``: the same graph with its weights dynamically quantized to int8 (``quantize_dynamic``), about 1.8x
  as fast as fp32 per CPU-second, a different model: its vectors are close, not equal, so its revision says so.
- ``torch``: sentence-transformers on torch, the reference.

The export runs once per model (torch and transformers are imported then, never at inference) into
``$TOOLKIT_CACHE_DIR/onnx`` (default ``$XDG_CACHE_HOME/toolkit/onnx`` or ``~/.cache/toolkit/onnx``), directories
0700. Each file's SHA-256 is in ``manifest.json`` beside it, and the manifest is signed (an HMAC with this user's
signing key, toolkit.private_files, which lives outside the cache): a hash rewritten there by whoever altered the
file does not verify, so the export is refused with a sentence, never run. A missing, truncated or altered file
under a manifest that verifies is rebuilt; an unsigned manifest (an earlier release's) is a missing export. A
directory another user owns, or that its group or others may write, is refused. Nothing is downloaded: the export
reads the weights the installed package or directory holds. ``python -m toolkit.embedding.prepare`` makes the
export ahead of time (an install step can run it) and replaces one that does not verify.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from toolkit.errors import EmbeddingError, InputError
from toolkit.private_files import create_private, mac, private_directory, refuse_unless_private

log = logging.getLogger(__name__)

RUNTIMES = ("onnx", "onnx-int8", "torch")
DEFAULT_RUNTIME = "onnx"
ONNX_RUNTIMES = ("onnx", "onnx-int8")
FILES = {"onnx": "model.onnx", "onnx-int8": "model-int8.onnx"}
# Bumped whenever the exported graph changes (inputs, pooling, opset, quantization settings): a new cache entry.
EXPORT_FORMAT = 3
OPSET = 17
# The files of a model directory whose content makes the exported graph: any change means a new export.
_SOURCE_FILES = (
    "config.json",
    "model.safetensors",
    "pytorch_model.bin",
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
)
_SUPPORTED_MODULES = {
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
}
_INSTALL_HINT = "install the local extra: pip install 'toolkit[local]' (it brings onnxruntime and tokenizers)"


def check_runtime(runtime, model: str) -> str:
    """``runtime`` if it is one the toolkit knows, else InputError naming the choices."""
    if runtime not in RUNTIMES:
        raise InputError(
            f"Unknown runtime {runtime!r} for the sentence-transformers model {model}; use one of "
            f"{', '.join(RUNTIMES)} (see docs/embedding.md)."
        )
    return runtime


def unsupported_reason(location: str | os.PathLike) -> str | None:
    """Why the model at ``location`` cannot run on ONNX Runtime, or None when it can.

    Supported: a local sentence-transformers directory made of a Transformer, mean or CLS pooling and an optional
    Normalize, with a fast tokenizer (``tokenizer.json``)."""
    path = Path(location)
    if not path.is_dir():
        return f"{location} is not a local model directory (only local weights are exported, nothing is downloaded)"
    try:
        modules = json.loads((path / "modules.json").read_text())
        pooling = json.loads((path / "1_Pooling" / "config.json").read_text())
    except (OSError, ValueError):
        return f"{location} has no readable modules.json and 1_Pooling/config.json"
    extra = sorted({module.get("type", "?") for module in modules} - _SUPPORTED_MODULES)
    if extra:
        return f"its modules include {', '.join(extra)}, which the ONNX export does not cover"
    if _pooling_mode(pooling) is None:
        return "its pooling is neither mean nor CLS"
    if not (path / "tokenizer.json").is_file():
        return "it has no tokenizer.json (a fast tokenizer)"
    if not any((path / name).is_file() for name in ("model.safetensors", "pytorch_model.bin")):
        return "it has no model.safetensors or pytorch_model.bin"
    return None


def _pooling_mode(pooling: dict) -> str | None:
    modes = [mode for mode in ("mean_tokens", "cls_token") if pooling.get(f"pooling_mode_{mode}")]
    others = [key for key, value in pooling.items() if key.startswith("pooling_mode_") and value]
    return modes[0] if len(modes) == 1 and len(others) == 1 else None


def cache_root() -> Path:
    """``$TOOLKIT_CACHE_DIR/onnx``, else ``$XDG_CACHE_HOME/toolkit/onnx``, else ``~/.cache/toolkit/onnx``."""
    configured = os.environ.get("TOOLKIT_CACHE_DIR")
    if configured:
        return Path(configured).expanduser() / "onnx"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "toolkit" / "onnx"


def export_directory(location: str | os.PathLike) -> Path:
    """The cache directory of one model's exports: named after the model's directory and its source files' sizes
    and modification times, so a reinstalled or edited model gets a new export."""
    path = Path(location).resolve()
    identity = [EXPORT_FORMAT, OPSET, str(path)]
    for name in _SOURCE_FILES:
        with contextlib.suppress(OSError):
            stat = (path / name).stat()
            identity.append([name, stat.st_size, stat.st_mtime_ns])
    digest = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:20]
    return cache_root() / f"{path.parent.name}-{path.name}-{digest}"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(functools.partial(handle.read, 1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_manifest(directory: Path) -> dict:
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict) else {}


def _signature(directory: Path, files: dict) -> str:
    # The directory's name is the model's identity (export_directory): a manifest signed for one model does not
    # verify beside another's files.
    return mac("onnx-manifest", directory.name, json.dumps(files, sort_keys=True)).hex()


def _prepare_hint() -> str:
    return "re-run `python -m toolkit.embedding.prepare` (it exports the model again)"


def _trusted_manifest(directory: Path) -> dict:
    """The manifest when its signature verifies; {} when there is none or it is unsigned (an earlier release's: the
    export is made again). A signature that does not verify is refused: something other than this user's toolkit
    wrote the manifest (a rewritten hash, a copy from another user or machine)."""
    manifest = _read_manifest(directory)
    if not manifest or "signature" not in manifest:
        return {}
    signature = manifest["signature"]
    if not isinstance(signature, str) or not hmac.compare_digest(signature, _signature(directory, manifest["files"])):
        raise EmbeddingError(
            f"The ONNX export in {directory} does not match the signature this toolkit recorded for it (its "
            f"manifest.json was rewritten, or copied from another user or machine), so it is not run; "
            f"{_prepare_hint()}."
        )
    return manifest


def _verified(directory: Path, runtime: str) -> Path | None:
    """The exported file for ``runtime`` if it is there and its SHA-256 is the signed manifest's."""
    name = FILES[runtime]
    if directory.exists():
        refuse_unless_private(directory, "ONNX export directory", f"delete it and {_prepare_hint()}.")
    expected = _trusted_manifest(directory).get("files", {}).get(name)
    path = directory / name
    if not expected or not path.is_file():
        return None
    if sha256_file(path) != expected:
        log.warning("The cached ONNX export %s does not match its recorded SHA-256; it is rebuilt.", path)
        return None
    return path


def prepare(location: str | os.PathLike, runtime: str, *, replace_unverified: bool = False) -> Path:
    """The verified ONNX file of the model at ``location`` for ``runtime``, exported (and quantized) first if the
    cache lacks it or holds a corrupt copy. An export whose manifest's signature does not verify is refused, or,
    with ``replace_unverified`` (`python -m toolkit.embedding.prepare`), deleted and made again. Safe when several
    processes prepare the same model at once."""
    if runtime not in ONNX_RUNTIMES:
        raise InputError(f"The runtime {runtime!r} has no ONNX export; use one of {', '.join(ONNX_RUNTIMES)}.")
    reason = unsupported_reason(location)
    if reason:
        raise EmbeddingError(f"The model {location} cannot run on ONNX Runtime: {reason}. Use runtime=torch.")
    directory = export_directory(location)
    if replace_unverified:
        try:
            _trusted_manifest(directory)
        except EmbeddingError:
            log.warning("The ONNX export in %s does not verify; it is deleted and made again.", directory)
            shutil.rmtree(directory)
    found = _verified(directory, runtime)
    if found:
        return found
    try:
        private_directory(directory, "ONNX export directory", f"delete it and {_prepare_hint()}.")
    except OSError as error:
        raise EmbeddingError(
            f"Cannot create the ONNX cache directory {directory} ({error}); set TOOLKIT_CACHE_DIR to a writable "
            f"directory."
        ) from error
    with _locked(directory / ".lock"):
        found = _verified(directory, runtime)  # another process may have built it while this one waited
        if found:
            return found
        fp32 = _verified(directory, "onnx")
        if fp32 is None:
            _build(directory, "onnx", lambda target: _export(Path(location), target))
            fp32 = directory / FILES["onnx"]
        if runtime == "onnx-int8":
            _build(directory, "onnx-int8", lambda target: _quantize(fp32, target))
        return directory / FILES[runtime]


def _build(directory: Path, runtime: str, make) -> None:
    """Write ``FILES[runtime]`` through a temporary file (renamed into place), then record its hash."""
    name = FILES[runtime]
    log.warning("Preparing the %s runtime of %s once (cached in %s).", runtime, directory.name, directory)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    os.close(handle)
    try:
        make(Path(temporary))
        digest = sha256_file(Path(temporary))
        os.replace(temporary, directory / name)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    # Only what this toolkit signed is carried over: an unsigned file's hash is never signed after the fact.
    manifest = _trusted_manifest(directory) or {"format": EXPORT_FORMAT, "files": {}}
    manifest["files"][name] = digest
    manifest.setdefault("exported_with", {}).update(_versions())
    manifest["signature"] = _signature(directory, manifest["files"])
    staged = directory / ".manifest.json.tmp"
    with os.fdopen(create_private(staged), "w") as handle:
        handle.write(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.replace(staged, directory / "manifest.json")


def _versions() -> dict:
    import importlib.metadata

    found = {}
    for distribution in ("torch", "transformers", "onnx", "onnxruntime"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[distribution] = importlib.metadata.version(distribution)
    return found


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive advisory lock on ``path`` (POSIX); elsewhere no lock (renames still keep files whole)."""
    try:
        import fcntl
    except ImportError:  # Windows: two exports at once only duplicate work
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _export(source: Path, target: Path) -> None:
    """torch.onnx.export of the Transformer with the model's pooling in the graph: inputs ``input_ids`` and
    ``attention_mask`` (batch, sequence), output ``sentence_embedding`` (batch, dimensions), not normalized."""
    try:
        import torch
        from transformers import AutoModel
        from transformers.utils import logging as transformers_logging
    except ImportError as error:
        raise EmbeddingError(
            f"Exporting a model to ONNX needs torch and transformers once; {_INSTALL_HINT}, or use runtime=torch."
        ) from error
    import warnings

    transformers_logging.disable_progress_bar()
    mode = _pooling_mode(json.loads((source / "1_Pooling" / "config.json").read_text()))
    # Eager attention traces into plain ops that every ONNX Runtime build runs the same way.
    model = AutoModel.from_pretrained(str(source), attn_implementation="eager")
    model.eval()
    takes_token_types = getattr(model.config, "type_vocab_size", 0) > 0

    class Pooled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            extra = {"token_type_ids": torch.zeros_like(input_ids)} if takes_token_types else {}
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask, **extra).last_hidden_state
            if mode == "cls_token":
                return hidden[:, 0]
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    # A padded example, so that the masking is traced with real zeros in the mask.
    input_ids = torch.full((2, 8), 101, dtype=torch.int64)
    attention_mask = torch.ones((2, 8), dtype=torch.int64)
    attention_mask[1, 5:] = 0
    axes = {0: "batch", 1: "sequence"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's warnings are about shapes the dynamic axes cover
        torch.onnx.export(
            Pooled(),
            (input_ids, attention_mask),
            str(target),
            input_names=["input_ids", "attention_mask"],
            output_names=["sentence_embedding"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "sentence_embedding": {0: "batch"}},
            opset_version=OPSET,
            dynamo=False,
        )


def _quantize(source: Path, target: Path) -> None:
    """Dynamic int8 quantization of the fp32 graph's matrix products: int8 weights with one scale per output
    channel, activations quantized on the fly; the embedding tables and the feed-forward output projections stay
    fp32."""
    try:
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as error:
        raise EmbeddingError(f"onnxruntime is not installed; {_INSTALL_HINT}.") from error
    import onnx

    # Per-channel scales: per-tensor ones lose far more (mean cosine to fp32 0.958 against 0.995 on the sample).
    # The feed-forward output projections stay fp32: their inputs (after GELU) carry outliers that one dynamic
    # scale per tensor flattens; quantizing them too lost 1.5 points of recall@5 on the sample set, keeping them
    # lost none (docs/embedding.md, "Which runtime, measured").
    products = [node.name for node in onnx.load(str(source)).graph.node if node.op_type == "MatMul"]
    kept = [name for name in products if "/output/dense/" in name and "/attention/" not in name]
    logging.disable(logging.WARNING)  # it advises "pre-processing" on the root logger; the graph is shaped already
    try:
        quantize_dynamic(
            str(source),
            str(target),
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul"],
            nodes_to_exclude=kept,
        )
    finally:
        logging.disable(logging.NOTSET)


class OnnxModel:
    """A sentence-transformers directory run by ONNX Runtime: its fast tokenizer (tokenizers) and exported graph."""

    def __init__(self, location: str, runtime: str, threads: int | None = None):
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as error:
            raise EmbeddingError(
                f"onnxruntime and tokenizers are needed for runtime={runtime}; {_INSTALL_HINT}."
            ) from error
        path = Path(location)
        self.runtime = runtime
        self.file = prepare(path, runtime)
        settings = _json(path / "sentence_bert_config.json")
        config = _json(path / "config.json")
        self.max_seq_length = int(settings.get("max_seq_length") or config.get("max_position_embeddings") or 512)
        self.lower_case = bool(settings.get("do_lower_case"))
        self.dimensions = int(_json(path / "1_Pooling" / "config.json").get("word_embedding_dimension") or 0) or None
        self.prompts = _json(path / "config_sentence_transformers.json").get("prompts") or {}
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.no_truncation()  # tokenizer.json may carry a truncation and a fixed padding: counts are exact
        self.tokenizer.no_padding()
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.inter_op_num_threads = 1
        self._pool = None
        if runtime == "onnx-int8":
            # One text per run (see embed): small products that several threads would mostly wait on. Each run gets
            # one thread, and `threads` texts (default: the usable cores) run at once.
            options.intra_op_num_threads = 1
            usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
            self.parallel = threads or usable or 1
        elif threads:
            options.intra_op_num_threads = threads
        try:
            self.session = onnxruntime.InferenceSession(str(self.file), options, providers=["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime raises its own exception types
            raise EmbeddingError(
                f"ONNX Runtime could not load {self.file} ({error}); delete it and it is exported again."
            ) from error
        if self.dimensions is None:
            self.dimensions = int(self.session.get_outputs()[0].shape[-1])

    def _texts(self, texts: list[str]) -> list[str]:
        return [text.lower() for text in texts] if self.lower_case else texts

    def encode_ids(self, texts: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self.tokenizer.encode_batch(self._texts(texts), add_special_tokens=True)]

    def embed(self, texts: list[str], batch_size: int, *, sort: bool = True) -> np.ndarray:
        """Mean- (or CLS-) pooled vectors, not normalized; texts sorted by length into batches (less padding)."""
        ids = self.encode_ids(texts)
        if self.runtime == "onnx-int8":
            # Dynamic quantization scales the activations of the whole input tensor at once: in a batch, a text's
            # vector would depend on its neighbours and their padding (cosine 0.97 to itself alone). One text per
            # run makes it a function of the text only, and costs nothing on a CPU (no padding at all).
            return self._embed_alone(ids)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True) if sort else list(range(len(ids)))
        out = np.empty((len(ids), self.dimensions), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = max(len(ids[row]) for row in rows)
            input_ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for index, row in enumerate(rows):
                input_ids[index, : len(ids[row])] = ids[row]
                mask[index, : len(ids[row])] = 1
            (vectors,) = self.session.run(None, {"input_ids": input_ids, "attention_mask": mask})
            out[rows] = vectors
        return out

    def _run_one(self, ids: list[int]) -> np.ndarray:
        input_ids = np.asarray([ids], dtype=np.int64)
        (vectors,) = self.session.run(None, {"input_ids": input_ids, "attention_mask": np.ones_like(input_ids)})
        return vectors[0]

    def _embed_alone(self, ids: list[list[int]]) -> np.ndarray:
        """Each text in its own run, ``self.parallel`` runs at once (ONNX Runtime releases the GIL in a run)."""
        if self.parallel <= 1 or len(ids) == 1:
            return np.stack([self._run_one(row) for row in ids]).astype(np.float32, copy=False)
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=self.parallel, thread_name_prefix="toolkit-onnx")
        return np.stack(list(self._pool.map(self._run_one, ids))).astype(np.float32, copy=False)


def _json(path: Path) -> dict:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def clear(location: str | os.PathLike) -> None:
    """Remove the cached exports of the model at ``location`` (the next use exports again)."""
    shutil.rmtree(export_directory(location), ignore_errors=True)
