"""Frontends: fitted model -> ModelSpec (IR graph + method contract).

Every frontend module is imported here, explicitly, so the registry's contents never depend on
import order. A module whose library is not installed is skipped (its models stay unsupported).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from peregrine.errors import UnsupportedModelError
from peregrine.frontends.base import FRONTENDS, qualified_name, register_frontend
from peregrine.ir.spec import METHOD_NAMES, ModelSpec

# (frontend module, library it needs)
_MODULES = (
    ("peregrine.frontends.sklearn_trees", "sklearn"),
    ("peregrine.frontends.sklearn_boosting", "sklearn"),
    ("peregrine.frontends.sklearn_iforest", "sklearn"),
    ("peregrine.frontends.sklearn_pipeline", "sklearn"),
    ("peregrine.frontends.sklearn_missing", "sklearn"),
    ("peregrine.frontends.sklearn_preprocessing", "sklearn"),
    ("peregrine.frontends.sklearn_linear", "sklearn"),
    ("peregrine.frontends.sklearn_models", "sklearn"),
    ("peregrine.frontends.sklearn_kernel", "sklearn"),
    ("peregrine.frontends.sklearn_mixture", "sklearn"),
    ("peregrine.frontends.sklearn_transformers", "sklearn"),
    ("peregrine.frontends.sklearn_decomposition", "sklearn"),  # transformers area
    ("peregrine.frontends.sklearn_meta", "sklearn"),
    ("peregrine.frontends.xgboost", "xgboost"),
    ("peregrine.frontends.lightgbm", "lightgbm"),
    ("peregrine.frontends.catboost", "catboost"),
    ("peregrine.frontends.onnx_ml_model", "onnx"),
)
_loaded = False


def load_all() -> None:
    global _loaded
    if _loaded:
        return
    for module, library in _MODULES:
        if importlib.util.find_spec(library) is None:
            continue
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:  # frontend module not written yet / optional dep
            if exc.name != module:
                raise
    _loaded = True


def convert(model: Any) -> ModelSpec:
    """Dispatch to the frontend registered for ``type(model)``."""
    load_all()
    entry = FRONTENDS.lookup(type(model))
    if entry is None:
        names = sorted({e.key.__name__ for e in FRONTENDS})
        raise UnsupportedModelError(
            f"{qualified_name(model)} is not supported. Supported models: {', '.join(names)}"
        )
    spec = entry.fn(model)
    for name in spec.methods:
        if name not in METHOD_NAMES:
            raise RuntimeError(f"frontend for {spec.source} declared unknown method {name!r}")
    return spec


__all__ = ["FRONTENDS", "convert", "load_all", "register_frontend"]
