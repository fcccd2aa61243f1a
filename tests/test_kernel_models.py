"""Kernel methods and neighbours beyond the conformance suite: unsupported parameters raise
UnsupportedModelError naming them, bad input raises InputError, and the shared ops
(OVR_DECISION, SVM_PROBA) agree with scikit-learn / across backends on hard inputs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification
from sklearn.decomposition import KernelPCA
from sklearn.neighbors import (
    KNeighborsClassifier,
    KNeighborsRegressor,
    RadiusNeighborsClassifier,
    RadiusNeighborsRegressor,
)
from sklearn.svm import SVC, SVR, OneClassSVM
from sklearn.utils.multiclass import _ovr_decision_function

import peregrine
from peregrine.backends.torch.ops import lower_node
from peregrine.errors import InputError, UnsupportedModelError
from peregrine.ir import GraphBuilder, Op
from peregrine.ir.semantics import evaluate
from peregrine.options import CompileOptions


@pytest.fixture(scope="module")
def data():
    return make_classification(80, 4, n_informative=3, n_redundant=0, n_classes=3,
                               random_state=0)


def _rbf(a, b):  # SVMs pass matrices, pairwise_kernels (KernelPCA) single rows
    if np.ndim(a) == 1:
        return float(np.exp(-((a - b) ** 2).sum()))
    return np.exp(-((a[:, None, :] - b[None]) ** 2).sum(axis=2))


@pytest.mark.parametrize("make,what", [
    (lambda: SVC(kernel="precomputed"), "kernel='precomputed'"),
    (lambda: SVC(kernel=_rbf), "callable kernel"),
    (lambda: SVR(kernel="precomputed"), "kernel='precomputed'"),
    (lambda: OneClassSVM(kernel=_rbf), "callable kernel"),
    (lambda: KNeighborsClassifier(3, metric="canberra"), "metric='canberra'"),
    (lambda: KNeighborsClassifier(3, weights=lambda d: d), "callable weights"),
    (lambda: KNeighborsRegressor(3, metric="minkowski", p=0.5), "minkowski p=0.5"),
    (lambda: KNeighborsRegressor(3, metric="precomputed"), "metric='precomputed'"),
    (lambda: KNeighborsClassifier(3, metric="minkowski", metric_params={"w": [1, 2, 1, 1]}),
     "metric_params ['w']"),
    (lambda: RadiusNeighborsClassifier(2.0), "RadiusNeighborsClassifier is not supported"),
    (lambda: RadiusNeighborsRegressor(2.0), "RadiusNeighborsRegressor is not supported"),
    (lambda: KernelPCA(2, kernel="precomputed"), "kernel='precomputed'"),
    (lambda: KernelPCA(2, kernel=_rbf), "callable kernel"),
])
def test_unsupported_parameters_raise(data, make, what):
    X, y = data
    model = make()
    fit_x = _rbf(X, X) if getattr(model, "kernel", None) == "precomputed" or getattr(
        model, "metric", None) == "precomputed" else X
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = model.fit(fit_x) if isinstance(model, (OneClassSVM, KernelPCA)) else \
            model.fit(fit_x, y)
    with pytest.raises(UnsupportedModelError, match=r".*" + __import__("re").escape(what)):
        peregrine.compile(model, "reference")


def test_multioutput_knn_classifier_is_unsupported(data):
    X, y = data
    model = KNeighborsClassifier(3).fit(X, np.stack([y, y], axis=1))
    with pytest.raises(UnsupportedModelError, match="multi-output"):
        peregrine.compile(model, "reference")


def test_nan_input_is_rejected_like_sklearn(data):
    X, y = data
    compiled = peregrine.compile(SVC().fit(X, y), "reference")
    bad = X[:3].copy()
    bad[2, 1] = np.nan
    with pytest.raises(InputError, match="row 2, column 1"):
        compiled.predict(bad)


def test_predict_proba_only_with_probability(data):
    X, y = data
    assert "predict_proba" not in peregrine.compile(SVC().fit(X, y), "reference").methods
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # probability= is deprecated in sklearn 1.9
        model = SVC(probability=True, random_state=0).fit(X, y)
    assert "predict_proba" in peregrine.compile(model, "reference").methods


def _run(op: Op, inputs: list[np.ndarray], width: int, **attrs) -> tuple[np.ndarray, ...]:
    """One op on given input columns: reference rule and torch lowering outputs."""
    g = GraphBuilder()
    x = g.input(sum(a.shape[1] for a in inputs))
    names, start = [], 0
    for a in inputs:
        cols = np.arange(start, start + a.shape[1])
        names.append(g.add(Op.SELECT, (x,), width=a.shape[1], columns=cols))
        start += a.shape[1]
    out = g.add(op, tuple(names), width=width, **attrs)
    graph = g.build({"out": out})
    X = np.concatenate(inputs, axis=1)
    ref = evaluate(graph, X, ("out",))["out"]
    node = graph.by_name[out]
    module = lower_node(node, CompileOptions()).module
    got = module([torch.from_numpy(a) for a in inputs]).numpy()
    return ref, got


@pytest.mark.parametrize("k", [2, 3, 5])
def test_ovr_decision_matches_sklearn(k):
    rng = np.random.default_rng(k)
    n_pairs = k * (k - 1) // 2
    pred = rng.integers(0, 2, size=(50, n_pairs)).astype(np.float64)
    conf = rng.normal(size=(50, n_pairs)) * 3
    want = _ovr_decision_function(pred, conf, k)
    ref, got = _run(Op.OVR_DECISION, [pred, conf], k, n_classes=k)
    np.testing.assert_array_equal(ref, want)  # same accumulation order: bit-identical
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("k", [2, 3, 6])
def test_svm_proba_torch_follows_reference_on_extreme_decisions(k):
    """Large decision values saturate the Platt sigmoid (clipped to 1e-7), the hardest rows
    for the coupling iteration; torch must stop each row at the same iteration."""
    rng = np.random.default_rng(k)
    n_pairs = k * (k - 1) // 2
    dec = np.concatenate([rng.normal(size=(40, n_pairs)) * 40, rng.normal(size=(40, n_pairs)),
                          np.zeros((1, n_pairs))])
    a, b = -rng.uniform(0.5, 3, n_pairs), rng.normal(size=n_pairs) * 0.1
    ref, got = _run(Op.SVM_PROBA, [dec], k, n_classes=k, prob_a=a, prob_b=b)
    assert np.all(np.isfinite(ref)) and np.allclose(ref.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-15)
