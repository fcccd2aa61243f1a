"""Frontends: fitted model -> ModelSpec (IR graph + method contract).

Every frontend module is imported here, explicitly, so the registry's contents never depend on
import order. A module whose library is not installed is skipped (its models stay unsupported).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
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
    ("peregrine.frontends.sklearn_text", "sklearn"),
    ("peregrine.frontends.sklearn_text_columns", "sklearn"),
    ("peregrine.frontends.xgboost", "xgboost"),
    ("peregrine.frontends.lightgbm", "lightgbm"),
    ("peregrine.frontends.catboost", "catboost"),
    ("peregrine.frontends.onnx_ml_model", "onnx"),
    ("peregrine.frontends.torch_nn", "sklearn"),  # peregrine.TorchStep; imports torch lazily
    ("peregrine.frontends.spark_ml", "pyarrow"),  # saved Spark ML pipelines (no JVM)
)
# Frontends of libraries slow to import (skorch imports torch: about 3 s): ``convert`` loads
# them once the library has been imported, since no model of theirs can exist before;
# ``load_all`` (the registry's listing, supported_models) loads them whenever installed.
_WHEN_IMPORTED = (
    ("peregrine.frontends.skorch", "skorch"),
)
_loaded = False
_loaded_late: set[str] = set()


def _load(module: str) -> None:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:  # frontend module not written yet / optional dep
        if exc.name != module:
            raise


def _load_common() -> None:
    global _loaded
    if _loaded:
        return
    for module, library in _MODULES:
        if importlib.util.find_spec(library) is not None:
            _load(module)
    _loaded = True


def _load_imported(library: str | None = None) -> None:
    """The frontends of libraries this process has imported already (of ``library`` alone
    when given). A model's class comes from an imported library, so its own frontend is among
    these (an ONNX frontend is not needed, nor its 0.2 s import, to compile an XGBoost
    model)."""
    for module, lib in _MODULES:
        if lib in sys.modules and module not in sys.modules and library in (None, lib):
            _load(module)


def _load_late(installed: bool) -> None:
    for module, library in _WHEN_IMPORTED:
        if module in _loaded_late:
            continue
        if library in sys.modules or (installed and importlib.util.find_spec(library)):
            _load(module)
            _loaded_late.add(module)


def load_all() -> None:
    """Import every frontend whose library is installed (their registrations)."""
    _load_common()
    _load_late(installed=True)


def convert(model: Any) -> ModelSpec:
    """Dispatch to the frontend registered for ``type(model)``."""
    # The model's own library first: LightGBM and XGBoost import scikit-learn, and loading
    # every scikit-learn frontend imports most of scikit-learn (sklearn.cluster, .manifold,
    # .ensemble: 0.6-1.3 s), none of which a LightGBM model needs
    _load_imported(type(model).__module__.partition(".")[0])
    entry = FRONTENDS.exact(type(model))
    if entry is None:
        _load_imported()
        entry = FRONTENDS.exact(type(model))
    if entry is None:  # a subclass, or a class whose frontend's library is not imported yet
        _load_common()
        _load_late(installed=False)
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
