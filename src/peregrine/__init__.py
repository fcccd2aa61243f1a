"""Peregrine: compile trained classical-ML models into fast, exact programs.

>>> import peregrine
>>> fast = peregrine.compile(fitted_model)  # backend="auto": native code on a CPU
>>> fast.predict_proba(X)
"""

from peregrine._version import __version__
from peregrine.api import compile, load, supported_models
from peregrine.errors import (
    ArtifactError,
    InputError,
    NotFittedError,
    PeregrineError,
    UnsupportedModelError,
    ValidationError,
)
from peregrine.options import CompileOptions, Precision, TreeStrategy
from peregrine.runtime.compiled import CompiledModel

__all__ = [
    "ArtifactError", "CompileOptions", "CompiledModel", "InputError", "NotFittedError",
    "PeregrineError", "Precision", "TorchStep", "TreeStrategy", "UnsupportedModelError",
    "ValidationError", "__version__",
    "compile", "load", "supported_models",
]  # fmt: skip


def __getattr__(name: str):
    # peregrine.TorchStep (a PyTorch module as a scikit-learn transformer) is imported on first
    # use: ``import peregrine`` needs neither scikit-learn nor torch
    if name == "TorchStep":
        from peregrine.torch_step import TorchStep

        return TorchStep
    raise AttributeError(f"module 'peregrine' has no attribute {name!r}")
