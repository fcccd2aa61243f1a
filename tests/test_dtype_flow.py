"""dtype flow through pipelines (issue #11 item 6): every intermediate has the dtype and the
rounding scikit-learn gives it (a float32 block stays float32 inside a scaler or imputer, each
in-place step rounding; hstack promotes), so a tree model whose thresholds sit on the
featurizer's outputs decides every row as the source does. Each featurizer is followed by a
tree model fitted on its outputs (XGBoost: cuts are training values, compared with ``<``, so a
one-ulp difference flips rows; HistGradientBoosting compares in float64), on float32 and
float64 arrays and DataFrames, mixed-dtype DataFrames (float32 numbers beside a string column),
``set_output(transform="pandas")``, on every backend."""

from __future__ import annotations

import functools
import importlib.util
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.impute import SimpleImputer
from sklearn.pipeline import FeatureUnion, make_pipeline
from sklearn.preprocessing import (
    Binarizer,
    FunctionTransformer,
    MaxAbsScaler,
    MinMaxScaler,
    Normalizer,
    OneHotEncoder,
    PolynomialFeatures,
    RobustScaler,
    StandardScaler,
)

import peregrine

BACKENDS = [b for b in ("reference", "torch", "torchscript", "native")
            if b != "native" or importlib.util.find_spec("llvmlite")]
RTOL, ATOL = 1e-5, 1e-6

xgboost = pytest.importorskip("xgboost")


def _data(n: int = 400, d: int = 6, seed: int = 0, nan: float = 0.1):
    rng = np.random.default_rng(seed)
    X = (rng.normal(size=(n, d)) * 10.0 ** np.arange(d) / 7).astype(np.float32)
    y = ((X[:, 0] + X[:, 1] / 10 > 0) ^ (rng.random(n) < 0.2)).astype(int)
    if nan:
        X[rng.random(X.shape) < nan] = np.nan
    return X, y


FEATURIZERS = {
    "standard": StandardScaler,
    "standard_no_std": lambda: StandardScaler(with_std=False),
    "standard_no_mean": lambda: StandardScaler(with_mean=False),
    "robust": RobustScaler,
    "maxabs": MaxAbsScaler,
    "minmax": MinMaxScaler,
    "minmax_clip": lambda: MinMaxScaler(feature_range=(0.1, 0.9), clip=True),
    "impute_mean": SimpleImputer,
    "impute_median_indicator": lambda: SimpleImputer(strategy="median", add_indicator=True),
    "impute_then_scale": lambda: make_pipeline(SimpleImputer(add_indicator=True),
                                               StandardScaler()),
    "union_weighted": lambda: FeatureUnion([("s", StandardScaler()), ("m", MinMaxScaler())],
                                           transformer_weights={"s": 0.3, "m": 3}),
    # float32 norms summed in NumPy's order, float32 products, float32 comparisons (the
    # imputer first: these reject NaN)
    "normalize_l1": lambda: make_pipeline(SimpleImputer(), Normalizer("l1")),
    "normalize_l2": lambda: make_pipeline(SimpleImputer(), Normalizer("l2")),
    "normalize_max": lambda: make_pipeline(SimpleImputer(), Normalizer("max")),
    "binarize": lambda: make_pipeline(SimpleImputer(), Binarizer(threshold=0.1)),
    "poly3": lambda: make_pipeline(SimpleImputer(), MinMaxScaler(), PolynomialFeatures(3)),
    "ufunc_abs": lambda: make_pipeline(SimpleImputer(), FunctionTransformer(np.absolute)),
    "ufunc_arcsinh": lambda: make_pipeline(SimpleImputer(), FunctionTransformer(np.arcsinh)),
}
# Transcendental ufuncs: the reference and native backends call NumPy's own loop (float32 or
# float64) and match it bit for bit; torch uses ATen's functions, within the bound
# docs/exactness.md states (float32: ATen in float64 rounded, NumPy's float32 loops are
# within 3 ulp of that; float64: 2 ulp, arcsinh), so a tree right after may split differently
APPROX_UFUNC_FEATURIZERS = {"ufunc_arcsinh"}
UFUNC_ULPS = {"float32": 3, "float64": 2}
TORCH = ("torch", "torchscript")
# NumPy sums an F-ordered array's rows (a DataFrame's values) column after column, not in its
# C-order pairwise/einsum order, so scikit-learn's Normalizer rounds differently there; the
# compiled model follows the C order: test_normalizer_f_ordered_within_bound checks the bound
LAYOUT_DEPENDENT = {"normalize_l1", "normalize_l2"}
HEADS = {
    "xgb": lambda: xgboost.XGBClassifier(n_estimators=30, max_depth=5, random_state=0),
    "hgb": lambda: HistGradientBoostingClassifier(max_iter=30, random_state=0),
}


@functools.cache
def _fitted(feat: str, head: str, fit_dtype: str):
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_pipeline(FEATURIZERS[feat](), HEADS[head]()).fit(X.astype(fit_dtype), y)


def _check(compiled, model, X, where: str) -> None:
    for method in ("predict_proba", "predict"):
        got, want = getattr(compiled, method)(X), getattr(model, method)(X)
        if method == "predict":
            assert np.array_equal(got, want), f"{where} {method}: labels differ"
        else:
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=where)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("head", sorted(HEADS))
@pytest.mark.parametrize("feat", sorted(FEATURIZERS))
def test_featurizer_then_trees(feat, head, backend):
    if feat in APPROX_UFUNC_FEATURIZERS and backend in TORCH:
        pytest.skip("ATen's transcendental functions are within the documented ulp bound of "
                    "NumPy's (test_featurizer_transform_bits checks it), not bit-equal")
    X, _ = _data()
    for fit_dtype in ("float32", "float64"):
        model = _fitted(feat, head, fit_dtype)
        compiled = peregrine.compile(model, backend=backend)
        for dtype in ("float32", "float64"):
            Xd = X.astype(dtype)
            _check(compiled, model, Xd, f"{feat}->{head} fit {fit_dtype} {dtype} array")
            if feat in LAYOUT_DEPENDENT:
                continue
            frame = pd.DataFrame(Xd, columns=[f"c{i}" for i in range(X.shape[1])])
            _check(compiled, model, frame.to_numpy(), f"{feat}->{head} {dtype} frame values")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("feat", sorted(FEATURIZERS))
def test_featurizer_transform_bits(feat, backend):
    """The featurizer alone: the same bits and dtype as scikit-learn's transform."""
    X, y = _data()
    for fit_dtype in ("float32", "float64"):
        est = FEATURIZERS[feat]().fit(X.astype(fit_dtype), y)
        compiled = peregrine.compile(est, backend=backend)
        for dtype in ("float32", "float64"):
            want = est.transform(X.astype(dtype))
            got = compiled.transform(X.astype(dtype))
            assert got.dtype == want.dtype, (feat, fit_dtype, dtype)
            if feat in APPROX_UFUNC_FEATURIZERS and backend in TORCH:
                ints = np.int32 if dtype == "float32" else np.int64
                ulps = np.abs(got.view(ints).astype(np.int64) -
                              want.view(ints).astype(np.int64))
                assert ulps.max() <= UFUNC_ULPS[dtype], (feat, fit_dtype, dtype, ulps.max())
                continue
            np.testing.assert_array_equal(got, want, err_msg=f"{feat} {fit_dtype} {dtype}")


def _issue_frame(dtype: str, n: int = 400, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({f"f{i}": (rng.normal(size=n) * 10 ** i).astype(dtype) for i in range(6)})
    X["kind"] = rng.choice(["a", "b", "c"], n)
    y = ((X.f0 + X.f1 / 10 > 0) ^ (rng.random(n) < 0.2)).astype(int)
    return X, y


def _issue_ct(dense: bool = False) -> ColumnTransformer:
    encoder = OneHotEncoder(handle_unknown="ignore", sparse_output=not dense)
    return ColumnTransformer([("num", StandardScaler(), [f"f{i}" for i in range(6)]),
                              ("cat", encoder, ["kind"])])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("pandas_out", [False, True])
def test_column_transformer_float32_block_then_xgboost(dtype, pandas_out, backend):
    """The issue's first composition: float32 frame columns scaled in float32 inside their
    block, a string column one-hot encoded beside them (the frame is mixed), XGBoost after.
    Before: 2.75% of probabilities off by up to 0.073."""
    X, y = _issue_frame(dtype)
    ct = _issue_ct(dense=pandas_out)
    if pandas_out:  # per-column dtypes kept by pd.concat (float32 scaled, float64 one-hot)
        ct.set_output(transform="pandas")
    model = make_pipeline(ct, xgboost.XGBClassifier(n_estimators=50, max_depth=6,
                                                    random_state=0)).fit(X, y)
    compiled = peregrine.compile(model, backend=backend)
    _check(compiled, model, X, f"ct->xgb {dtype} pandas={pandas_out}")
    ct_alone = peregrine.compile(model[0], backend=backend)
    want_out, got_out = model[0].transform(X), ct_alone.transform(X)
    if pandas_out:  # set_output: both DataFrames, the same column names
        assert isinstance(got_out, pd.DataFrame)
        assert list(got_out.columns) == list(want_out.columns)
    want, got = np.asarray(want_out), np.asarray(got_out)
    assert got.dtype == want.dtype == np.float64  # hstack with the float64 one-hot block
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_imputer_indicator_then_hist_gradient_boosting(backend):
    """The issue's second composition: float32 data with 10% NaN; the imputer stores its
    statistics rounded to float32, HistGradientBoosting compares those in float64. Before: 30
    of 400 rows off by up to 0.10."""
    X, y = _data(n=400)
    model = make_pipeline(SimpleImputer(add_indicator=True),
                          HistGradientBoostingClassifier(random_state=0)).fit(X, y)
    compiled = peregrine.compile(model, backend=backend)
    _check(compiled, model, X, "imputer->hgb float32")
    _check(compiled, model, X.astype(np.float64), "imputer->hgb float64")
    frame = pd.DataFrame(X, columns=[f"c{i}" for i in range(X.shape[1])])
    model_df = make_pipeline(SimpleImputer(add_indicator=True),
                             HistGradientBoostingClassifier(random_state=0)).fit(frame, y)
    _check(peregrine.compile(model_df, backend=backend), model_df, frame, "imputer->hgb frame")


@pytest.mark.parametrize("backend", BACKENDS)
def test_column_transformer_weights(backend):
    """transformer_weights multiply each block's output as ``res * weight``: a Python number
    keeps a float32 block float32 (rounded to float32 first), a NumPy float64 promotes it.
    Before: ignored (probabilities off by 0.64)."""
    from sklearn.linear_model import LogisticRegression

    X, y = _data(nan=0.0)
    for dtype in ("float64", "float32"):
        Xd = X.astype(dtype)
        for weights in ({"a": 3.0, "b": 0.5}, {"a": 0.1, "remainder": np.float64(7.3)}):
            ct = ColumnTransformer([("a", StandardScaler(), [0, 1]), ("b", MinMaxScaler(), [2])],
                                   remainder="passthrough", transformer_weights=weights)
            ct.fit(Xd, y)
            got, want = peregrine.compile(ct, backend=backend).transform(Xd), ct.transform(Xd)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
            model = make_pipeline(ct, LogisticRegression()).fit(Xd, y)
            np.testing.assert_allclose(
                peregrine.compile(model, backend=backend).predict_proba(Xd),
                model.predict_proba(Xd), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_binarizer_threshold_on_a_float32_value(backend):
    """Binarizer(threshold=t) on float32 X compares with float32(t) (NEP 50: a Python number
    takes the array's dtype): a value equal to float32(t) but above t is 0, not 1. A NumPy
    float64 threshold keeps the comparison in float64."""
    v = np.float32(0.1)
    X = np.array([[v, 0.0], [np.nextafter(v, np.float32(1)), 1.0], [0.05, 0.2]], np.float32)
    for threshold in (0.1, np.float64(0.1), np.float32(0.1), 0):
        est = Binarizer(threshold=threshold).fit(X)
        compiled = peregrine.compile(est, backend=backend)
        for dtype in ("float32", "float64"):
            want = est.transform(X.astype(dtype))
            got = compiled.transform(X.astype(dtype))
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want, err_msg=f"{threshold!r} {dtype}")
    # the row that differs between the float32 and the float64 comparison
    assert Binarizer(threshold=0.1).fit(X).transform(X)[0, 0] == 0.0
    assert Binarizer(threshold=np.float64(0.1)).fit(X).transform(X)[0, 0] == 1.0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["pairwise", "einsum"])
def test_row_sum_programs_follow_numpy(kind, dtype):
    """The summation programs NORMALIZE uses (ir/semantics/row_sums.py) add in NumPy's own
    order: bit-identical to ``np.abs(X).sum(axis=1)`` / ``np.einsum`` on a C-ordered X at
    every width up to 300 (a NumPy that changes its order fails here first)."""
    from peregrine.ir.semantics.row_sums import row_sum_program, run_program

    rng = np.random.default_rng(5)
    for width in list(range(1, 70)) + [100, 127, 128, 129, 200, 255, 256, 300]:
        X = (rng.random((500, width)) * 10 - 5).astype(dtype)
        if kind == "pairwise":
            values, want = np.abs(X), np.abs(X).sum(axis=1)
        else:
            values, want = X * X, np.einsum("ij,ij->i", X, X)
        got = run_program(row_sum_program(kind, width, dtype), values)
        np.testing.assert_array_equal(got, want, err_msg=f"width {width}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("norm", ["l1", "l2"])
def test_normalizer_f_ordered_within_bound(norm, backend):
    """On an F-ordered float32 X (np.asfortranarray, a DataFrame's ``to_numpy()``) NumPy sums
    each row column after column, so scikit-learn's norms round differently from the C-order
    sums the compiled model reproduces. The documented bound (docs/exactness.md): two orders of
    a sum of w non-negative float32 terms differ by at most 2 gamma_(w-1) relative, the sqrt
    halves it, the quotients add an ulp each; 2 (w + 2) u relative covers both norms
    (u = 2**-24). C-ordered input is bit-identical (test_featurizer_transform_bits)."""
    rng = np.random.default_rng(7)
    for width in (3, 6, 17, 40):
        X = (rng.random((2000, width)) * 10 - 5).astype(np.float32)
        est = Normalizer(norm).fit(X)
        compiled = peregrine.compile(est, backend=backend)
        XF = np.asfortranarray(X)
        want, got = est.transform(XF), compiled.transform(XF)
        np.testing.assert_array_equal(got, est.transform(X))  # the C-order answer
        bound = 2 * (width + 2) * 2.0 ** -24 * np.abs(want)
        assert (np.abs(got.astype(np.float64) - want) <= bound).all(), width
