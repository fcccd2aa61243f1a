"""ONNX export of QuantileTransformer (QUANTILE) and SplineTransformer (BSPLINE),
``export/onnx_transformers.py``: each op's lowering alone in ONNX Runtime against its NumPy
rule (``ir/semantics/transformers.py``) on edge rows (the fitted quantiles and knots, their
float neighbours, values beyond the fitted range, +-inf, NaN, signed zeros), bit-equal where
the lowering is (uniform quantiles, every spline mode), within a few ulps for the normal
output (scipy's ndtri by Cephes' algorithm); and whole models against scikit-learn through the
exported file, NaN rows included."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import QuantileTransformer, SplineTransformer  # noqa: E402

import peregrine  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402
from peregrine.ir.ops import Op  # noqa: E402
from peregrine.options import CompileOptions  # noqa: E402
from tests.onnx_lowering import run_lowering  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6


def _train(seed=0, n=400, d=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * [1.0, 3.0, 0.5, 2.0][:d]
    X[:, -1] = np.round(X[:, -1])  # repeated values: repeated quantiles
    return X


def _node(compiled, op):
    (node,) = [n for n in compiled.spec.graph.toposort() if n.op is op]
    return node


def _run_lowering(node, X):
    return run_lowering(node, X, "peregrine.export.onnx_transformers")


def _edges(tables, rng, extra=200):
    """Per column: every table entry, its float neighbours, beyond both ends, +-inf, NaN,
    +-0, and random values over the range (columns padded by cycling to one length)."""
    cols = []
    for t in tables:
        t = np.asarray(t, np.float64)
        span = t[-1] - t[0]
        cols.append(np.concatenate([
            t, np.nextafter(t, -np.inf), np.nextafter(t, np.inf),
            [t[0] - span, t[-1] + span, t[0] - 1e-7, t[-1] + 1e-7, np.inf, -np.inf, np.nan,
             0.0, -0.0, 1e300, -1e300],
            rng.uniform(t[0] - span / 4, t[-1] + span / 4, extra)]))
    size = max(len(c) for c in cols)
    return np.stack([np.resize(c, size) for c in cols], axis=1)


@pytest.mark.parametrize("output", ["uniform", "normal"])
def test_quantile_lowering_against_rule(output):
    X = _train()
    qt = QuantileTransformer(n_quantiles=60, output_distribution=output).fit(X)
    node = _node(peregrine.compile(qt, "reference"), Op.QUANTILE)
    rng = np.random.default_rng(1)
    Xt = _edges([np.asarray(q) for q in node.attrs.quantiles], rng)
    got = _run_lowering(node, Xt)
    with np.errstate(all="ignore"):
        want = node.attrs.rule(node, [Xt], CompileOptions())
    if output == "uniform":  # two np.interp lookups and the bounds: the same doubles
        np.testing.assert_array_equal(got, want)
    else:  # ndtri's logs are ONNX Runtime's: within a few ulps
        assert np.array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=4e-15, atol=0)


@pytest.mark.parametrize("output", ["uniform", "normal"])
def test_quantile_transformer_matches_scikit_learn(tmp_path, output):
    X = _train(seed=2)
    qt = QuantileTransformer(n_quantiles=80, output_distribution=output).fit(X)
    rng = np.random.default_rng(3)
    Xt = _edges([np.quantile(X[:, j], [0, 0.5, 1]) for j in range(X.shape[1])], rng)
    Xt = Xt[np.isfinite(Xt).all(axis=1) | np.isnan(Xt).any(axis=1)]
    Xt = Xt[~np.isinf(Xt).any(axis=1)]  # scikit-learn rejects inf (NaN passes through)
    path = tmp_path / "q.onnx"
    peregrine.compile(qt).export_onnx(path)
    got = session(path).run(["variable"], {"X": Xt})[0]
    want = qt.transform(Xt)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


SPLINES = [
    dict(n_knots=5, degree=3, extrapolation="constant"),
    dict(n_knots=4, degree=1, extrapolation="linear"),
    dict(n_knots=6, degree=3, extrapolation="linear", knots="quantile"),
    dict(n_knots=4, degree=2, extrapolation="continue"),
    dict(n_knots=5, degree=3, extrapolation="periodic"),
    dict(n_knots=4, degree=0, extrapolation="continue"),
    dict(n_knots=4, degree=0, extrapolation="linear"),
    dict(n_knots=5, degree=2, extrapolation="error"),
    dict(n_knots=5, degree=3, extrapolation="constant", include_bias=False),
]


@pytest.mark.parametrize("kw", SPLINES, ids=lambda kw: "-".join(map(str, kw.values())))
def test_spline_lowering_against_rule(kw):
    X = _train(seed=4, d=3)
    st = SplineTransformer(handle_missing="zeros", **kw).fit(X)
    node = _node(peregrine.compile(st, "reference"), Op.BSPLINE)
    rng = np.random.default_rng(5)
    Xt = _edges([np.asarray(t) for t in node.attrs.knots], rng)
    got = _run_lowering(node, Xt)
    with np.errstate(all="ignore"):
        want = node.attrs.rule(node, [Xt], CompileOptions())
    np.testing.assert_array_equal(got, want)  # NaN where the rule's NaN, else the same doubles


@pytest.mark.parametrize("kw", SPLINES, ids=lambda kw: "-".join(map(str, kw.values())))
def test_spline_transformer_matches_scikit_learn(tmp_path, kw):
    X = _train(seed=6, d=3)
    st = SplineTransformer(handle_missing="zeros", **kw).fit(X)
    rng = np.random.default_rng(7)
    lo, hi = X.min(axis=0), X.max(axis=0)
    Xt = np.concatenate([X[:50], rng.uniform(lo - 2, hi + 2, size=(300, 3)), [lo, hi]])
    if kw["extrapolation"] == "error":  # scikit-learn rejects rows outside the knots
        Xt = Xt[((Xt >= lo) & (Xt <= hi)).all(axis=1)]
    Xt[::7, 1] = np.nan
    path = tmp_path / "s.onnx"
    peregrine.compile(st).export_onnx(path)
    got = session(path).run(["variable"], {"X": Xt})[0]
    np.testing.assert_allclose(got, st.transform(Xt), rtol=RTOL, atol=ATOL)


def test_quantile_and_spline_in_a_pipeline(tmp_path):
    from sklearn.linear_model import LogisticRegression

    X = _train(seed=8)
    y = (X[:, 0] + np.sin(X[:, 1]) > 0).astype(int)
    model = make_pipeline(QuantileTransformer(n_quantiles=40, output_distribution="normal"),
                          SplineTransformer(n_knots=4, degree=2), LogisticRegression())
    model.fit(X, y)
    rng = np.random.default_rng(9)
    Xt = rng.normal(size=(500, 4)) * 3
    path = tmp_path / "p.onnx"
    peregrine.compile(model).export_onnx(path)
    label, proba = session(path).run(["label", "probabilities"], {"X": Xt})
    assert np.array_equal(label, model.predict(Xt))
    np.testing.assert_allclose(proba, model.predict_proba(Xt), rtol=RTOL, atol=ATOL)
