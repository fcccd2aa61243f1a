"""SplineTransformer in the native row kernel (kernels/rowwise_spline.py): the same bits as the
BSPLINE rule on every extrapolation mode and degree, NaN, huge values and float32 rows, and
the rule where the kernel cannot promise them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import SplineTransformer

import peregrine
from peregrine.ir import Op

CASES = [
    dict(n_knots=5, degree=3),
    dict(n_knots=4, degree=1, extrapolation="linear"),
    dict(n_knots=6, degree=3, extrapolation="linear"),
    dict(n_knots=3, degree=5, extrapolation="linear"),
    dict(n_knots=4, degree=2, extrapolation="continue"),
    dict(n_knots=4, degree=0, extrapolation="continue"),
    dict(n_knots=5, degree=3, extrapolation="periodic"),
    dict(n_knots=7, degree=0, extrapolation="periodic"),
    dict(n_knots=5, degree=2, extrapolation="error"),
    dict(n_knots=4, degree=2, handle_missing="zeros"),
    dict(n_knots=5, degree=4, knots="quantile", include_bias=False),
]


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4)) * [1.0, 3.0, 0.5, 2.0] + [0.0, 1.0, -2.0, 5.0]
    X[:, 3] = np.round(X[:, 3])  # quantile knots on a few distinct values repeat
    return X


def _rows(model, X, nan: bool):
    rows = np.concatenate([X, np.tile(np.array(
        [[1e30], [-1e30], [0.0], [-0.0], [1e-300], [7.0], [-7.0]]), (1, X.shape[1]))])
    knots = model.bsplines_[0].t  # each knot of column 0 and its neighbours
    edge = np.concatenate([knots, np.nextafter(knots, np.inf), np.nextafter(knots, -np.inf)])
    rows = np.concatenate([rows, np.tile(X[:1], (edge.size, 1))])
    rows[-edge.size:, 0] = edge
    if nan:
        rows[:5, 1] = np.nan
    return rows


@pytest.mark.parametrize("kw", CASES, ids=[str(sorted(k.items())) for k in CASES])
def test_native_spline_gives_the_rules_bits(kw):
    X = _data()
    model = SplineTransformer(**kw).fit(X)
    reference = peregrine.compile(model, "reference")
    native = peregrine.compile(model, "native")
    assert "one row kernel" in native.explain()  # fused: no BSPLINE rule runs
    rows = _rows(model, X, nan=kw.get("handle_missing") == "zeros")
    if kw.get("extrapolation") == "error":  # values beyond the knots raise there
        k = model.degree
        lo = np.array([spl.t[k] for spl in model.bsplines_])
        hi = np.array([spl.t[-k - 1] for spl in model.bsplines_])
        pad = 1e-4 * (hi - lo)  # float32 rounding keeps these inside
        rows = np.concatenate([np.clip(X, lo + pad, hi - pad), [lo], [hi]])
    for dtype in (np.float64, np.float32):
        r = rows.astype(dtype)
        if kw.get("extrapolation") == "error" and dtype is np.float32:
            r = r[:-2]  # the knots themselves: float64 rows only
        got, want = native.transform(r), reference.transform(r)
        np.testing.assert_array_equal(got, want)
        finite = np.isfinite(r).all(1) & (np.abs(r) < 1e6).all(1)
        np.testing.assert_allclose(got[finite], model.transform(r[finite]), rtol=1e-5,
                                   atol=1e-6)


def test_error_mode_still_raises_beyond_the_knots():
    X = _data()
    model = SplineTransformer(n_knots=4, degree=2, extrapolation="error").fit(X)
    native = peregrine.compile(model, "native")
    rows = X.copy()
    rows[7, 2] = 1e3
    with pytest.raises(peregrine.InputError, match="row 7"):
        native.transform(rows)


def test_spline_into_a_linear_model_is_one_kernel():
    X = _data()
    y = np.sin(X[:, 0]) + X[:, 1] ** 2
    model = make_pipeline(SplineTransformer(n_knots=6, degree=3), Ridge()).fit(X, y)
    native = peregrine.compile(model, "native")
    assert "one row kernel" in native.explain()  # (the linear model's sum is in the
    # kernel's order, not BLAS's: within the tolerance, docs/exactness.md)
    np.testing.assert_allclose(native.predict(X), model.predict(X), rtol=1e-5, atol=1e-6)


def test_a_coef_summing_three_splines_runs_the_rule():
    """The periodic wrap of more splines than there are outputs puts three ones in a coef
    column: the BLAS product's order matters there, so the kernel is not planned."""
    from peregrine.kernels import rowwise_spline

    X = _data()
    model = SplineTransformer(n_knots=5, degree=3, extrapolation="periodic").fit(X)
    node = next(n for n in peregrine.compile(model, "reference").spec.graph.nodes
                if n.op is Op.BSPLINE)
    a = node.attrs
    wide = np.asarray(a.coef).copy()
    wide[-1, 0] = 1.0  # the last spline onto output 0 as well
    widened = dataclasses.replace(a, coef=wide)
    width = int(node.width)
    assert rowwise_spline.step(a, width, len(a.knots), lambda v, size=None: [0, 0]) is not None
    assert rowwise_spline.step(widened, width, len(a.knots),
                               lambda v, size=None: [0, 0]) is None
