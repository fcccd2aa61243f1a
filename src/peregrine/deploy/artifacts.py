"""Artifacts as bytes: what Dask and Spark ship to their workers (never a pickle of the source
model), and a per-process cache so each worker process builds the kernels once.

``peregrine.load`` reads the bytes directly (no file on the worker); the loaded model is kept
per process, keyed by the SHA-256 of the bytes. :func:`load_counts` says how many
times this process built each artifact's kernels (the proof that it was once).
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import tempfile
import threading
import time
import weakref
from typing import Any

log = logging.getLogger("peregrine.deploy")

_models: dict[tuple[str, str | None], Any] = {}
_loads: collections.Counter[str] = collections.Counter()
_lock = threading.Lock()
_saved: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()


def artifact_bytes(model_or_artifact: Any, backend: str | None = None) -> bytes:
    """The artifact of a CompiledModel, an artifact file, artifact bytes, or a fitted source
    model (compiled here first, with ``backend``, default ``"auto"``)."""
    import peregrine

    obj = model_or_artifact
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj)
    if isinstance(obj, (str, os.PathLike)):
        if not os.path.isfile(obj):
            raise FileNotFoundError(f"no artifact at {obj}")
        with open(obj, "rb") as f:
            return f.read()
    if not isinstance(obj, peregrine.CompiledModel):
        obj = peregrine.compile(obj, backend=backend or "auto")
    # saved once per model object: later calls (another predict on the same model) send the
    # very bytes the workers already built kernels for, without writing the zip again
    data = _saved.get(obj)
    if data is None:
        with tempfile.TemporaryDirectory(prefix="peregrine-") as tmp:
            path = os.path.join(tmp, "model.peregrine")
            obj.save(path)
            with open(path, "rb") as f:
                data = _saved[obj] = f.read()
    return data


def artifact_key(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def load_bytes(data: bytes, backend: str | None = None) -> Any:
    """``peregrine.load`` (the safe loader) of artifact bytes."""
    import peregrine

    return peregrine.load(bytes(data), backend=backend)


def load_cached(data: bytes, key: str | None = None, backend: str | None = None) -> Any:
    """The model of ``data``, built at most once per process (and backend)."""
    key = key or artifact_key(data)
    model = _models.get((key, backend))
    if model is not None:
        return model
    with _lock:  # worker threads asking at once wait for one build
        model = _models.get((key, backend))
        if model is None:
            t0 = time.perf_counter()
            model = load_bytes(data, backend)
            _models[(key, backend)] = model
            _loads[key] += 1
            log.info(
                "built kernels for artifact %s in %.2f s (pid %d)",
                key[:12],
                time.perf_counter() - t0,
                os.getpid(),
            )
    return model


def load_counts() -> dict[str, int]:
    """{artifact SHA-256: times this process built its kernels}; 1 each once warm."""
    return dict(_loads)


def clear_cache() -> None:
    with _lock:
        _models.clear()
        _loads.clear()
