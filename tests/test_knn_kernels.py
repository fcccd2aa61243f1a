"""The compiled KNN kernels (backends/native/knn_kernel.py, backends/tvm/knn.py): each backend's
KNeighborsClassifier and KNeighborsRegressor with each kernel metric, uniform and distance
weights, against scikit-learn and bit for bit against the reference backend's rule: fitted
sets smaller and larger than the rule's candidate count, rows around the kernels' vectors of 8
and tasks of 64, ties at the k-th neighbour on integer data (lowest index first), query rows
equal to fitted rows (zero distances under distance weights) and rows far enough out that
distances overflow; the metrics left to the rule reported as fallbacks on TVM."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

import peregrine
from tests.tvm_cache import fresh_library_cache  # noqa: F401 (autouse)

BACKENDS = ["native"] + (["tvm"] if importlib.util.find_spec("tvm") else [])
LOWERED = [("euclidean", 2), ("manhattan", 2), ("chebyshev", 2), ("minkowski", 1),
           ("minkowski", 2)]


def _fallbacks(compiled) -> list:
    return compiled.explain_dict()["backend_choices"].get("fallback_ops", [])


def _bits_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype, what
    same = (got.view(np.int64) == want.view(np.int64)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{what}: {(~same).sum()} values differ, first {np.argwhere(~same)[0]}"


def _rows(rng, X: np.ndarray, n: int) -> np.ndarray:
    """Query rows: new ones, exact copies of fitted rows, near copies."""
    Q = rng.normal(size=(n, X.shape[1])) * X.std(axis=0) + X.mean(axis=0)
    copies = rng.choice(len(X), size=max(1, n // 5))
    Q[: len(copies)] = X[copies]
    Q[len(copies): 2 * len(copies)] = X[copies] * (1 + 1e-15)
    return Q[:n]


def _check(model, Q: np.ndarray, methods: tuple[str, ...], backend: str) -> None:
    fast = peregrine.compile(model, backend)
    ref = peregrine.compile(model, "reference")
    assert "KNN" not in _fallbacks(fast), fast.explain()
    for method in methods:
        got = getattr(fast, method)(Q)
        if method == "predict" and isinstance(model, KNeighborsClassifier):
            np.testing.assert_array_equal(got, model.predict(Q))
        else:
            np.testing.assert_allclose(got, getattr(model, method)(Q), rtol=1e-5, atol=1e-6)
            _bits_equal(got, getattr(ref, method)(Q), f"{method} vs reference")
        np.testing.assert_array_equal(getattr(fast, method)(Q[:1]), got[:1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("metric,p", LOWERED)
@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("m", [12, 300])  # below and above the rule's candidate count
def test_classifier(metric, p, weights, m, backend):
    rng = np.random.default_rng(m + p)
    X = rng.normal(size=(m, 6)) * [1, 10, 0.1, 3, 1, 100]
    y = rng.integers(0, 3, size=m)
    model = KNeighborsClassifier(5, metric=metric, p=p, weights=weights).fit(X, y)
    _check(model, _rows(rng, X, 137), ("predict", "predict_proba"), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("metric,p", LOWERED)
@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_regressor(metric, p, weights, backend):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(200, 11))
    y = np.column_stack([X[:, 0] * 3 + rng.normal(size=200), X[:, 1] ** 2])
    model = KNeighborsRegressor(4, metric=metric, p=p, weights=weights).fit(X, y)
    _check(model, _rows(rng, X, 70), ("predict",), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [1, 5, 9])
def test_ties_take_the_lowest_index(k, backend):
    """Integer data: many fitted rows at exactly the k-th distance; the rule's (the lowest
    index) are taken, so predict_proba equals the reference backend's bit for bit."""
    rng = np.random.default_rng(k)
    X = rng.integers(0, 4, size=(500, 3)).astype(float)
    y = rng.integers(0, 4, size=500)
    Q = rng.integers(0, 4, size=(300, 3)).astype(float)
    for algorithm in ("brute", "kd_tree"):
        model = KNeighborsClassifier(k, algorithm=algorithm).fit(X, y)
        fast, ref = peregrine.compile(model, backend), peregrine.compile(model, "reference")
        _bits_equal(fast.predict_proba(Q), ref.predict_proba(Q), algorithm)
        np.testing.assert_array_equal(fast.predict(Q), ref.predict(Q))


@pytest.mark.parametrize("backend", BACKENDS)
def test_overflowing_distances(backend):
    """Rows past 1e154 overflow the squared distances to infinity: ties at infinity, by
    index, as the rule (scikit-learn accepts such rows)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 4))
    model = KNeighborsRegressor(3).fit(X, rng.normal(size=60))
    Q = rng.normal(size=(20, 4))
    Q[::3, 1] = 1e200
    fast, ref = peregrine.compile(model, backend), peregrine.compile(model, "reference")
    _bits_equal(fast.predict(Q), ref.predict(Q), "overflow")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("metric,p", [("cosine", 2), ("minkowski", 3)])
def test_other_metrics_run_their_rule(metric, p, backend):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4))
    model = KNeighborsClassifier(3, metric=metric, p=p).fit(X, rng.integers(0, 2, 50))
    fast = peregrine.compile(model, backend)
    if backend == "tvm":  # (the native backend reports no per-node fallbacks)
        assert "KNN" in _fallbacks(fast)
    Q = rng.normal(size=(30, 4))
    np.testing.assert_allclose(fast.predict_proba(Q), model.predict_proba(Q), atol=1e-6)


def test_native_rows_split_over_threads():
    """Enough work for two threads: the same bits as one thread and as the rule."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(400, 8))
    model = KNeighborsRegressor(6, weights="distance").fit(X, rng.normal(size=(400, 2)))
    Q = rng.normal(size=(2000, 8))
    two = peregrine.compile(model, "native", options=peregrine.CompileOptions(n_threads=2))
    one = peregrine.compile(model, "native", options=peregrine.CompileOptions(n_threads=1))
    ref = peregrine.compile(model, "reference")
    _bits_equal(two.predict(Q), one.predict(Q), "two threads vs one")
    _bits_equal(two.predict(Q), ref.predict(Q), "vs reference")


@pytest.mark.parametrize("backend", BACKENDS)
def test_wide_euclidean_rows_run_the_rule(backend):
    """Past ``KERNEL_EUCLIDEAN_FEATURES`` the rule's BLAS search is faster for euclidean
    distances: the rule runs (a fallback on TVM), the same answers; manhattan keeps the kernel
    (its rule builds every difference too)."""
    from peregrine.ir.semantics.neighbours import KERNEL_EUCLIDEAN_FEATURES, kernel_form

    rng = np.random.default_rng(5)
    d = KERNEL_EUCLIDEAN_FEATURES + 1
    X = rng.normal(size=(120, d))
    y = rng.integers(0, 3, 120)
    Q = rng.normal(size=(40, d))
    for metric, kernel in (("euclidean", False), ("manhattan", True)):
        model = KNeighborsClassifier(4, metric=metric, weights="distance").fit(X, y)
        fast, ref = peregrine.compile(model, backend), peregrine.compile(model, "reference")
        node = next(n for n in fast.spec.graph.nodes if n.op.name == "KNN")
        assert (kernel_form(node.attrs) is not None) == kernel
        if backend == "tvm":
            assert ("KNN" in _fallbacks(fast)) == (not kernel)
        _bits_equal(fast.predict_proba(Q), ref.predict_proba(Q), metric)
