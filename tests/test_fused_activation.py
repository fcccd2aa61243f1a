"""Row kernels for np.square (UFUNC) and a float64 network's softmax, log_softmax and ReLU
(ACTIVATION): GaussianNB and QDA pipelines, which end in them, run as one row kernel on the
native backend (and the torch backend on the CPU) instead of NumPy rules and torch calls."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.discriminant_analysis import QuadraticDiscriminantAnalysis
from sklearn.naive_bayes import GaussianNB
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import peregrine
from peregrine.ir import Op
from tests.one_op import one_op_model


def _data(n_classes):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 6)) * [1.0, 3.0, 0.5, 2.0, 1.0, 10.0]
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 1) * (n_classes - 2)
    return X, y


def _rows(X):
    far = np.tile([[40.0], [-40.0], [0.0], [-0.0], [1e-300]], (1, X.shape[1]))
    return np.concatenate([X, far, X * 25])  # probabilities of 0 and 1, tiny scores


@pytest.mark.parametrize("backend", ["native", "torch"])
@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("make", [GaussianNB, QuadraticDiscriminantAnalysis],
                         ids=["gaussiannb", "qda"])
def test_naive_bayes_and_qda_run_as_one_row_kernel(make, n_classes, backend):
    X, y = _data(n_classes)
    model = make_pipeline(StandardScaler(), make()).fit(X, y)
    compiled = peregrine.compile(model, backend)
    lowering = compiled.explain()
    if backend == "native":
        assert "one row kernel for predict_proba" in lowering, lowering
    reference = peregrine.compile(model, "reference")
    rows = _rows(X)
    for dtype in (np.float64, np.float32):
        r = rows.astype(dtype)
        for method in ("predict", "predict_proba", "predict_log_proba"):
            got, want = getattr(compiled, method)(r), getattr(model, method)(r)
            if method == "predict":
                np.testing.assert_array_equal(got, want)
                continue
            finite = np.isfinite(want)
            np.testing.assert_array_equal(np.isfinite(got), finite)
            np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)
            # vmath's exp and libm's log against NumPy's, a few ulps apart: exp(v) moves by
            # |v| ulps when v does by one, and the far rows' scores are in the thousands
            ref = getattr(reference, method)(r)
            np.testing.assert_allclose(got[finite], ref[finite], rtol=1e-10, atol=1e-300)


def test_square_is_the_rules_bits():
    rows = np.array([[3.0, -1.5e154, 1e-160, np.nan], [-0.0, np.inf, 7.1, -2.5]])
    native = one_op_model(Op.UFUNC, 4, 4, "native", name="square")
    reference = one_op_model(Op.UFUNC, 4, 4, "reference", name="square")
    np.testing.assert_array_equal(native.transform(rows), reference.transform(rows))
    np.testing.assert_array_equal(native.transform(rows), np.square(rows))


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "relu", "identity"])
def test_float64_activations_match_the_rule(kind):
    rng = np.random.default_rng(1)
    rows = np.concatenate([rng.normal(size=(50, 5)) * 30,
                           [[np.nan, 1.0, 2.0, 3.0, 4.0], [-0.0, 0.0, -1e-300, 800.0, -800.0],
                            [np.inf, 1.0, 0.0, 0.0, 0.0], [-np.inf, -np.inf, 0.0, 1.0, 2.0]]])
    native = one_op_model(Op.ACTIVATION, 5, 5, "native", kind=kind, net_dtype="float64")
    reference = one_op_model(Op.ACTIVATION, 5, 5, "reference", kind=kind, net_dtype="float64")
    assert "one row kernel" in native.explain()
    got, want = native.transform(rows), reference.transform(rows)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    if kind in ("relu", "identity"):
        np.testing.assert_array_equal(got, want)  # exact ops: the same bits, -0.0 included
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-300)


EXACT_UFUNCS = ["square", "negative", "reciprocal", "sign", "floor", "ceil", "rint", "trunc"]


@pytest.mark.parametrize("name", EXACT_UFUNCS)
def test_ufuncs_in_the_row_kernel(name):
    """NumPy's exact ufuncs as one row kernel: NumPy's bits, NaN, infinities and signed zeros
    included."""
    rng = np.random.default_rng(2)
    rows = np.concatenate([rng.normal(size=(40, 4)) * [1.0, 10.0, 1e-3, 300.0],
                           [[np.nan, np.inf, -np.inf, -0.0], [0.0, 2.5, -2.5, 0.5],
                            [-0.75, 1e-300, -1e-300, 1e10]]])
    native = one_op_model(Op.UFUNC, 4, 4, "native", name=name)
    assert "one row kernel" in native.explain()
    with np.errstate(all="ignore"):
        want = getattr(np, name)(rows)
        got = native.transform(rows)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
