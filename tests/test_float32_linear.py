"""Linear models fitted on float32 (issue #11 item 8): scikit-learn keeps ``coef_`` float32 for
SGDClassifier/Perceptron (and SGDRegressor, PassiveAggressive*), and on a float32 X computes
``X @ coef_.T`` in float32 (sgemm, an order BLAS picks) before adding the float64 intercept.

Contract (docs/exactness.md "Linear models fitted on float32"): Peregrine computes the same
product of the same float32 operands in float64, i.e. the exact dot product up to float64
rounding; scikit-learn's sgemm is within ``gamma_k(float32) * sum |x_i w_i|`` of it. So the
decision values differ by at most that bound, and labels agree wherever the decision is
farther from zero than the bound. These tests build rows exactly at and next to the zero
crossing and assert both."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from sklearn.linear_model import PassiveAggressiveClassifier, Perceptron, SGDClassifier

import peregrine
from tests.blas_bounds import gamma

BACKENDS = [b for b in ("reference", "torch", "torchscript", "native")
            if b != "native" or importlib.util.find_spec("llvmlite")]
MODELS = {
    "sgd": lambda: SGDClassifier(random_state=0),
    "sgd_log": lambda: SGDClassifier(loss="log_loss", random_state=0),
    "perceptron": lambda: Perceptron(random_state=0),
    "passive_aggressive": lambda: PassiveAggressiveClassifier(random_state=0),
}


def _fit(name: str, n_classes: int):
    rng = np.random.default_rng(3)
    X = (rng.normal(size=(600, 24)) * rng.uniform(0.1, 100, 24)).astype(np.float32)
    y = np.digitize(X[:, 0] / 100 + X[:, 1] / 50 + rng.normal(size=600) * 0.1,
                    np.linspace(-0.5, 0.5, n_classes - 1))
    model = MODELS[name]().fit(X, y)
    assert model.coef_.dtype == np.float32
    return model, X


def _crossing_rows(model, X: np.ndarray) -> np.ndarray:
    """Rows whose float64 decision for class 0 is at or within a few float32 ulps of zero:
    each row moved along coef_[0] onto the crossing, then nudged by k ulps of one column."""
    w = model.coef_[0].astype(np.float64)
    b = float(model.intercept_[0])
    x = X[:50].astype(np.float64)
    t = -(x @ w + b) / (w @ w)
    on = (x + t[:, None] * w).astype(np.float32)
    j = int(np.argmax(np.abs(w)))
    rows = [on]
    for k in (1, 2, 4):
        for sign in (1, -1):
            r = on.copy()
            r[:, j] = np.nextafter(r[:, j], np.float32(sign * np.inf))
            for _ in range(k - 1):
                r[:, j] = np.nextafter(r[:, j], np.float32(sign * np.inf))
            rows.append(r)
    return np.concatenate(rows + [X[:200]])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_float32_coefficients_at_zero_crossing(name, n_classes, backend):
    model, X = _fit(name, n_classes)
    rows = _crossing_rows(model, X)
    compiled = peregrine.compile(model, backend=backend)
    want = model.decision_function(rows)
    got = compiled.decision_function(rows)
    # binary: the float64 intercept_ promotes; multiclass: intercept_ is float32 too
    assert got.dtype == want.dtype
    W = model.coef_.astype(np.float64).T
    mags = np.abs(rows.astype(np.float64)) @ np.abs(W)
    if want.ndim == 1:
        mags = mags[:, 0]
    # sgemm's error (float32, k products) plus the float64 sum's own, then the intercept add
    bound = gamma(rows.shape[1] + 1, np.float32) * mags + 2 * np.spacing(np.abs(want))
    gap = np.abs(got - want)
    assert (gap <= bound).all(), f"{name}: gap {gap.max():.3g} above the bound"
    # labels: equal wherever the decision is decided beyond the bound
    decided = np.abs(got) > bound if got.ndim == 1 else np.sort(got, 1)[:, -1] - np.sort(
        got, 1)[:, -2] > 2 * bound.max(axis=1)
    if got.ndim == 1:  # the crossing rows really are at the crossing
        assert decided[:50].sum() < 50
    np.testing.assert_array_equal(compiled.predict(rows)[decided], model.predict(rows)[decided])
    # float64 input: sklearn upcasts coef_ exactly, both are float64 products (dgemm bound)
    rows64 = rows.astype(np.float64)
    got64, want64 = compiled.decision_function(rows64), model.decision_function(rows64)
    assert got64.dtype == want64.dtype == np.float64
    bound64 = 2 * gamma(rows.shape[1] + 2) * mags + 2 * np.spacing(np.abs(want64))
    assert (np.abs(got64 - want64) <= bound64).all()
