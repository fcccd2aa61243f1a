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


def resolve_auto(device: str = "cpu") -> str:
    """The backend ``"auto"`` means on ``device``: the first of ``AUTO_ORDER`` installed that
    runs there (native on a CPU, torch on CUDA: the fastest of each on the conformance survey,
    docs/benchmarks_cases.md)."""
    kind = device.split(":")[0]
    for name in AUTO_ORDER:
        try:
            backend = get_backend(name)
        except UnsupportedModelError:
            continue
        if kind in backend.devices:
            return name
    raise UnsupportedModelError(
        f"no installed backend runs on {device!r} (installed: {', '.join(available_backends())})")


__all__ = ["Backend", "Executable", "available_backends", "get_backend", "resolve_auto"]
