"""ONNX export of KNN (KNeighborsClassifier/Regressor, ``export/onnx_neighbours.py``): every
metric and weighting against scikit-learn through ONNX Runtime, rows equal to fitted rows
(zero distances), and the candidate form's fallback (exact ties, overflow) against the compiled
model. scikit-learn rejects NaN and inf in KNN inputs, so no such rows."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor  # noqa: E402

import peregrine  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6


def _data(seed=0, n=300, d=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 1)
    Xt = rng.normal(size=(1500, d))
    Xt[:40] = X[:40]  # zero distances: the distance weighting's special rows
    return X, y, Xt


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "chebyshev", "minkowski",
                                    "cosine"])
@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_knn_matches_scikit_learn(tmp_path, metric, weights):
    X, y, Xt = _data()
    kw = {"p": 3} if metric == "minkowski" else {}
    clf = KNeighborsClassifier(5, weights=weights, metric=metric, **kw).fit(X, y)
    reg = KNeighborsRegressor(7, weights=weights, metric=metric, **kw).fit(X, X[:, 3])
    path = tmp_path / "clf.onnx"
    peregrine.compile(clf).export_onnx(path)
    label, proba = session(path).run(["label", "probabilities"], {"X": Xt})
    assert np.array_equal(label, clf.predict(Xt))
    np.testing.assert_allclose(proba, clf.predict_proba(Xt), rtol=RTOL, atol=ATOL)
    path = tmp_path / "reg.onnx"
    peregrine.compile(reg).export_onnx(path)
    out = session(path).run(["variable"], {"X": Xt})[0]
    np.testing.assert_allclose(out, reg.predict(Xt), rtol=RTOL, atol=ATOL)


def test_knn_candidate_fallback_on_ties_and_overflow(tmp_path):
    """Integer-grid data: many fitted rows at exactly the k-th distance (the candidate bound
    fails, rows are redone from every distance, ties to the lowest index) and rows that
    overflow the expanded form; the compiled model is the reference (scikit-learn's tree
    search orders exact ties its own way)."""
    rng = np.random.default_rng(0)
    X = rng.integers(0, 3, size=(300, 3)).astype(float)
    y = rng.integers(0, 3, 300)
    Xt = rng.integers(0, 3, size=(600, 3)).astype(float)
    Xt[:5] = 1e200
    model = KNeighborsClassifier(4).fit(X, y)
    compiled = peregrine.compile(model, backend="reference")
    path = tmp_path / "ties.onnx"
    compiled.export_onnx(path, sample=Xt)
    assert any(n.op_type == "If" for n in onnx.load(str(path)).graph.node)
    label, proba = session(path).run(["label", "probabilities"], {"X": Xt})
    assert np.array_equal(label, compiled.predict(Xt))
    np.testing.assert_array_equal(proba, compiled.predict_proba(Xt))
    # off-grid rows still meet duplicated fitted rows at equal distances: the compiled model
    Xc = rng.normal(size=(300, 3)) + 1.0
    assert np.array_equal(session(path).run(["label"], {"X": Xc})[0], compiled.predict(Xc))


def test_knn_pipeline_and_float32_input(tmp_path):
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y, Xt = _data(seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make_pipeline(StandardScaler(), KNeighborsClassifier(3, weights="distance"))
        model.fit(X, y)
    path = tmp_path / "p.onnx"
    peregrine.compile(model).export_onnx(path, input_dtype="float32")
    X32 = Xt.astype(np.float32)
    label, proba = session(path).run(["label", "probabilities"], {"X": X32})
    assert np.array_equal(label, model.predict(X32))
    np.testing.assert_allclose(proba, model.predict_proba(X32), rtol=RTOL, atol=ATOL)
