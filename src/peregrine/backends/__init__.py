"""Backends: ModelSpec -> Executable. Each module registers its Backend subclass below.

Adding a backend = one new module with a ``Backend`` subclass, plus one line in ``_MODULES``.
"""

from __future__ import annotations

import importlib

from peregrine.backends.base import Backend, Executable
from peregrine.errors import UnsupportedModelError

# Order matters only for "auto": the first available backend wins.
_MODULES = (
    ("native", "peregrine.backends.native", "NativeBackend"),
    ("torch", "peregrine.backends.torch", "TorchBackend"),
    ("torchscript", "peregrine.backends.torchscript", "TorchScriptBackend"),
    ("tvm", "peregrine.backends.tvm", "TvmBackend"),
    ("reference", "peregrine.backends.reference", "ReferenceBackend"),
)
AUTO_ORDER = ("native", "torch", "reference")


def get_backend(name: str) -> type[Backend]:
    for key, module, cls in _MODULES:
        if key == name:
            try:
                backend = getattr(importlib.import_module(module), cls)
            except ModuleNotFoundError as exc:
                raise UnsupportedModelError(
                    f"backend {name!r} is not available here ({exc}); install peregrine-ml[{name}]"
                ) from exc
            if not backend.available():
                raise UnsupportedModelError(
                    f"backend {name!r} is not available: its dependencies are not installed"
                )
            return backend
    raise UnsupportedModelError(
        f"unknown backend {name!r}; choose one of {', '.join(k for k, _, _ in _MODULES)} or 'auto'"
    )


def available_backends() -> list[str]:
    out = []
    for key, _, _ in _MODULES:
        try:
            get_backend(key)
        except UnsupportedModelError:
            continue
        out.append(key)
    return out


def resolve_auto() -> str:
    avail = available_backends()
    for name in AUTO_ORDER:
        if name in avail:
            return name
    return "reference"


__all__ = ["Backend", "Executable", "available_backends", "get_backend", "resolve_auto"]
