"""Shared by the test modules that run one model on every backend."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import peregrine
from peregrine.errors import UnsupportedModelError


def compile_or_skip(model, backend: str):
    """``peregrine.compile(model, backend)``, skipping the test where the backend's optional
    dependency is missing (TVM, a CUDA torch); any other refusal is a failure."""
    try:
        return peregrine.compile(model, backend=backend)
    except UnsupportedModelError as exc:
        if "not installed" in str(exc) or "unavailable" in str(exc):
            pytest.skip(str(exc))
        raise


def sklearn_predict_or_none(model, X):
    """``model.predict(X)`` quietly, or None where scikit-learn raises ValueError (its
    check_array refusing NaN, infinity or a value too large for float32)."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return model.predict(X)
    except ValueError:
        return None

