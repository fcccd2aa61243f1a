"""Conformance cases: one fitted model + base rows per case. The shared suite
(test_conformance.py) adds NaN/inf/threshold-edge rows, compiles the case for every backend and
strategy and compares every method against the source library's own answer.

Each ``cases_<library>.py`` module defines ``CASES: list[Case]``. Builders are cached, so each
model is trained once per test session.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Case:
    id: str
    # () -> (fitted model, base rows as a float64 numpy array)
    build: Callable[[], tuple[Any, np.ndarray]]
    # (model, method name, X) -> expected output; default: getattr(model, method)(X)
    expect: Callable[[Any, str, np.ndarray], np.ndarray] | None = None
    # columns holding category codes (no threshold edges there; small non-negative ints)
    categorical: tuple[int, ...] = ()
    # values written into categorical columns on edge rows (None: rows.DEFAULT_CATEGORY_VALUES)
    category_values: tuple[float, ...] | None = None
    marks: tuple[Any, ...] = field(default_factory=tuple)

    @functools.cached_property
    def built(self) -> tuple[Any, np.ndarray]:
        return self.build()

    def expected(self, method: str, X: np.ndarray) -> np.ndarray:
        model = self.built[0]
        if self.expect is not None:
            return np.asarray(self.expect(model, method, X))
        return np.asarray(getattr(model, method)(X))


def cached(fn: Callable[[], Any]) -> Callable[[], Any]:
    return functools.lru_cache(maxsize=None)(fn)
