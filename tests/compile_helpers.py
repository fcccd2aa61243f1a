"""Shared by the test modules that run one model on every backend."""

from __future__ import annotations

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
