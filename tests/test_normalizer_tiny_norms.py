"""Normalizer on rows whose norm is tiny: scikit-learn's dense ``normalize`` counts a norm
below 10 epsilons of its dtype as zero and returns the row as it is (_handle_zeros_in_scale:
2.2e-15 in float64, 1.2e-6 in float32), where dividing would give a unit row. Every backend
and the ONNX file must answer as scikit-learn does, in both dtypes, batch and one row."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import Normalizer

import peregrine
from peregrine.backends import available_backends

BACKENDS = [b for b in ("reference", "torch", "native", "tvm") if b in available_backends()]


def _rows(dtype):
    eps10 = 10 * np.finfo(dtype).eps
    X = np.array([
        [1e-16, 2e-16, 0.0],           # float64: below 10 eps; float32: far below
        [3e-7, 1e-7, 0.0],             # float32: below 1.2e-6, float64: above
        [eps10, 0.0, 0.0],             # exactly at the limit: divided
        [eps10 * 0.99, 0.0, 0.0],      # just under: kept
        [-eps10 * 0.5, eps10 * 0.4, 0.0],
        [1.0, 2.0, 3.0],
        [0.0, 0.0, 0.0],
        [5e-324, 0.0, -5e-324],
    ])
    return X.astype(dtype)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_tiny_norms_as_scikit_learn(backend, norm, dtype):
    X = _rows(dtype)
    est = Normalizer(norm=norm).fit(X)
    compiled = peregrine.compile(est, backend)
    want = est.transform(X)
    np.testing.assert_array_equal(compiled.transform(X), want)
    for i in range(len(X)):
        np.testing.assert_array_equal(compiled.transform(X[i:i + 1]), want[i:i + 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_tiny_norms_before_a_model(backend):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = (X[:, 0] > X[:, 1]).astype(int)
    pipe = make_pipeline(Normalizer(), LogisticRegression()).fit(X, y)
    rows = np.vstack([_rows(np.float64), X[:20] * 1e-16])
    compiled = peregrine.compile(pipe, backend)
    np.testing.assert_allclose(compiled.predict_proba(rows), pipe.predict_proba(rows),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(compiled.predict(rows), pipe.predict(rows))


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_tiny_norms_in_the_onnx_file(norm, tmp_path):
    pytest.importorskip("onnxruntime")
    import onnxruntime as ort

    X = _rows(np.float64)
    est = Normalizer(norm=norm).fit(X)
    compiled = peregrine.compile(est, "reference")
    compiled.export_onnx(tmp_path / "n.onnx", sample=X)
    sess = ort.InferenceSession(str(tmp_path / "n.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: X})[0]
    np.testing.assert_allclose(got, est.transform(X), rtol=1e-5, atol=1e-300)
