"""Running compiled models outside the process that compiled them.

- ``peregrine serve`` (``app``, ``batcher``, ``formats``, ``metrics``, ``server``): an HTTP
  scoring server on uvicorn + Starlette with dynamic batching; needs the ``serve`` extra.
- ``artifacts``: artifact bytes shipped to workers (Dask, Spark) and loaded once per process.

``import peregrine`` imports none of this; the names below load their module on first use.

>>> from peregrine.deploy import ServeConfig, serve
>>> serve(ServeConfig("model.peregrine", max_batch=512, max_delay_ms=1), port=8000)
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ServeConfig": "app", "create_app": "app",
    "Batcher": "batcher", "QueueFull": "batcher",
    "RemoteBindRefused": "server", "is_loopback": "server", "serve": "server",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'peregrine.deploy' has no attribute {name!r}")
    return getattr(importlib.import_module(f"peregrine.deploy.{module}"), name)


__all__ = sorted(_EXPORTS)
