"""Frontends: fitted model -> ModelSpec (IR graph + method contract).

Every frontend module is imported here, explicitly, so the registry's contents never depend on
import order. A module whose library is not installed is skipped (its models stay unsupported).
"""

from __future__ import annotations

import importlib
import importlib.util

from peregrine.frontends.base import FRONTENDS, MethodSpec, ModelSpec, convert, register_frontend

# (frontend module, library it needs)
_MODULES = (
    ("peregrine.frontends.sklearn_trees", "sklearn"),
    ("peregrine.frontends.sklearn_boosting", "sklearn"),
    ("peregrine.frontends.sklearn_iforest", "sklearn"),
    ("peregrine.frontends.sklearn_pipeline", "sklearn"),
    ("peregrine.frontends.sklearn_preprocessing", "sklearn"),
    ("peregrine.frontends.sklearn_linear", "sklearn"),
    ("peregrine.frontends.sklearn_models", "sklearn"),
    ("peregrine.frontends.sklearn_kernel", "sklearn"),
    ("peregrine.frontends.sklearn_transformers", "sklearn"),
    ("peregrine.frontends.sklearn_decomposition", "sklearn"),  # transformers area
    ("peregrine.frontends.sklearn_meta", "sklearn"),
    ("peregrine.frontends.xgboost", "xgboost"),
    ("peregrine.frontends.lightgbm", "lightgbm"),
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


__all__ = ["FRONTENDS", "MethodSpec", "ModelSpec", "convert", "load_all", "register_frontend"]
