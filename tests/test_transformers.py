"""Transformers area beyond the conformance suite: string columns in DataFrames (TargetEncoder,
MissingIndicator, SimpleImputer(add_indicator)), the rows sklearn rejects (InputError), the
estimators refused with a reason (UnsupportedModelError), and the INTERP op against np.interp."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.decomposition import NMF, LatentDirichletAllocation, MiniBatchNMF
from sklearn.feature_extraction import FeatureHasher
from sklearn.impute import MissingIndicator, SimpleImputer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.naive_bayes import CategoricalNB
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import (
    KBinsDiscretizer,
    LabelBinarizer,
    LabelEncoder,
    MinMaxScaler,
    PowerTransformer,
    SplineTransformer,
    TargetEncoder,
)

import peregrine
from peregrine.errors import InputError, UnsupportedModelError
from peregrine.ir import Node, Op
from peregrine.options import CompileOptions

BACKENDS = ["reference", "torch", "torchscript"]
RTOL, ATOL = 1e-5, 1e-6


def _frame(n: int = 150, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "city": rng.choice(["paris", "lyon", "nice"], n).astype(object),
        "x": rng.normal(0, 1, n),
        "plan": rng.choice(["a", "b"], n).astype(object),
    })
    df.loc[::9, "city"] = np.nan
    df.loc[::7, "x"] = np.nan
    return df


def _new_rows() -> pd.DataFrame:
    return pd.DataFrame({"city": ["paris", "rome", None, "nice"], "x": [0.5, np.nan, 1.0, -2.0],
                         "plan": ["b", "a", "zzz", None]})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("target", ["continuous", "binary", "multiclass"])
def test_target_encoder_on_string_columns(backend, target):
    df = _frame()
    y = {"continuous": np.arange(len(df)) * 0.1, "binary": np.arange(len(df)) % 2,
         "multiclass": np.arange(len(df)) % 3}[target]
    model = make_pipeline(
        ColumnTransformer([("te", TargetEncoder(), ["city", "plan"])],
                          remainder=SimpleImputer()),
        LogisticRegression() if target != "continuous" else Ridge(),
    ).fit(df, y)
    fast = peregrine.compile(model, backend)
    for X in (df, _new_rows()):  # unseen strings and missing values -> target_mean_
        if target == "continuous":
            np.testing.assert_allclose(fast.predict(X), model.predict(X), rtol=RTOL, atol=ATOL)
        else:
            np.testing.assert_array_equal(fast.predict(X), model.predict(X))
            np.testing.assert_allclose(fast.predict_proba(X), model.predict_proba(X),
                                       rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_indicator_on_string_columns(backend):
    """A missing string is missing wherever the indicator reads a string column's codes (the
    column is known to hold strings once an imputer or encoder has read it)."""
    df = _frame()[["city", "plan"]]
    y = np.arange(len(df)) % 2
    model = make_pipeline(
        ColumnTransformer([
            ("te", TargetEncoder(), ["city", "plan"]),
            ("miss", MissingIndicator(features="all"), ["city", "plan"]),
        ]),
        LogisticRegression()).fit(df, y)
    fast = peregrine.compile(model, backend)
    X = _new_rows()[["city", "plan"]]
    np.testing.assert_allclose(fast.predict_proba(X), model.predict_proba(X), rtol=RTOL,
                               atol=ATOL)


def test_missing_indicator_alone_on_strings():
    """Alone, MissingIndicator reads every column as scikit-learn's object comparisons do
    (X != X): string columns answer as scikit-learn answers (more in
    test_missing_indicator_strings.py)."""
    df = _frame()[["city", "plan"]]
    est = MissingIndicator(features="all").fit(df)
    fast = peregrine.compile(est, "reference")
    np.testing.assert_array_equal(fast.transform(df), est.transform(df))


def test_imputer_add_indicator_in_a_pipeline():
    df = _frame()[["x"]].assign(z=np.arange(150.0))
    y = np.arange(len(df)) % 2
    model = make_pipeline(
        ColumnTransformer([("num", SimpleImputer(add_indicator=True), ["x"])]),
        LogisticRegression()).fit(df, y)
    fast = peregrine.compile(model, "torch")
    np.testing.assert_allclose(fast.predict_proba(df), model.predict_proba(df), rtol=RTOL,
                               atol=ATOL)


# ------------------------------------------------------------- rows sklearn rejects --


def _assert_rejects_like_sklearn(model, good, bad, match):
    for backend in BACKENDS:
        fast = peregrine.compile(model, backend)
        np.testing.assert_allclose(fast.transform(good) if hasattr(model, "transform")
                                   else fast.predict_proba(good),
                                   model.transform(good) if hasattr(model, "transform")
                                   else model.predict_proba(good), rtol=RTOL, atol=ATOL)
        with pytest.raises(ValueError):  # sklearn's own answer: it raises
            (model.transform if hasattr(model, "transform") else model.predict_proba)(bad)
        with pytest.raises(InputError, match=match):
            (fast.transform if hasattr(model, "transform") else fast.predict_proba)(bad)


def test_box_cox_rejects_non_positive_rows():
    X = np.random.default_rng(0).lognormal(size=(80, 2))
    model = PowerTransformer(method="box-cox").fit(X)
    _assert_rejects_like_sklearn(model, X[:5], np.array([[1.0, 0.0]]), "strictly positive")
    _assert_rejects_like_sklearn(model, X[:5], np.array([[-1.0, 2.0]]), "strictly positive")


def test_spline_error_extrapolation_rejects_rows_beyond_the_knots():
    X = np.random.default_rng(0).normal(size=(80, 2))
    model = SplineTransformer(n_knots=4, extrapolation="error").fit(X)
    _assert_rejects_like_sklearn(model, X[:5], np.array([[0.0, 100.0]]), "beyond the limits")


def test_categorical_nb_rejects_out_of_range_categories():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 3, (60, 2)).astype(float)
    model = CategoricalNB().fit(X, rng.integers(0, 2, 60))
    for bad in ([[3.0, 0.0]], [[-1.0, 0.0]], [[0.0, 7.2]]):  # IndexError / ValueError in sklearn
        with pytest.raises((IndexError, ValueError)):
            model.predict_proba(np.array(bad))
        for backend in BACKENDS:
            with pytest.raises(InputError, match="CategoricalNB"):
                peregrine.compile(model, backend).predict(np.array(bad))


def test_missing_indicator_error_on_new():
    X = np.random.default_rng(0).normal(size=(40, 3))
    X[::5, 1] = np.nan
    model = MissingIndicator().fit(X)  # features 'missing-only', error_on_new=True
    bad = np.array([[np.nan, 1.0, 2.0]])
    _assert_rejects_like_sklearn(model, X[:6], bad, "no missing values at fit")


# ----------------------------------------------------------------- refused, with why --


@pytest.mark.parametrize("make,why", [
    (lambda X: NMF(2, max_iter=500).fit(np.abs(X)), "non-negative least-squares"),
    (lambda X: MiniBatchNMF(2).fit(np.abs(X)), "non-negative least-squares"),
    (lambda X: LatentDirichletAllocation(2).fit(np.abs(X)), "variational"),
    (lambda X: FeatureHasher(4).fit(X), "hashes"),
    (lambda X: LabelEncoder().fit([1, 2, 2]), "targets"),
    (lambda X: LabelBinarizer().fit([1, 2, 2]), "targets"),
])
def test_refused_estimators_say_why(make, why):
    X = np.random.default_rng(0).normal(size=(30, 3))
    est = make(X)
    with pytest.raises(UnsupportedModelError, match=why):
        peregrine.compile(est, "reference")
    if not isinstance(est, (LabelEncoder, LabelBinarizer, FeatureHasher)):
        with pytest.raises(UnsupportedModelError, match=why):
            peregrine.compile(make_pipeline(MinMaxScaler(), est).fit(np.abs(X)), "reference")


def test_unsupported_parameters_are_named():
    X = np.random.default_rng(0).normal(size=(60, 2))
    # sparse output is compiled as the last step (tests/test_sparse_outputs.py); in the middle
    # of a pipeline the next step would read the sparse matrix its own way
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MaxAbsScaler

    y = X[:, 0]
    with pytest.raises(UnsupportedModelError, match="encode='onehot'"):
        peregrine.compile(make_pipeline(KBinsDiscretizer(3, encode="onehot"),
                                        MaxAbsScaler()).fit(X, y), "reference")
    with pytest.raises(UnsupportedModelError, match="sparse_output"):
        peregrine.compile(make_pipeline(SplineTransformer(sparse_output=True),
                                        MaxAbsScaler()).fit(X, y), "reference")


# ------------------------------------------------------------------ INTERP vs np.interp --


def test_interp_op_is_np_interp_on_every_backend():
    """Tables of different lengths, repeated xp, one-point tables, NaN and +-inf inputs."""
    import torch

    from peregrine.backends.torch.ops_transformers import Interp

    rng = np.random.default_rng(1)
    xps = [np.sort(rng.choice([0.0, 1, 2, 3], 9)), np.array([2.0]), np.sort(rng.normal(size=40))]
    fps = [rng.normal(size=len(t)) for t in xps]
    left, right = np.array([-5.0, -6.0, -7.0]), np.array([5.0, 6.0, 7.0])
    x = np.concatenate([rng.normal(size=(300, 3)) * 2,
                        np.array([[np.nan] * 3, [np.inf] * 3, [-np.inf] * 3, [0, 2, 0],
                                  [1, 2.0, xps[2][5]], [3, 1, xps[2][-1]]])])
    want = np.column_stack([np.interp(x[:, j], xps[j], fps[j], left[j], right[j])
                            for j in range(3)])
    node = Node("i", Op.INTERP, ("X",), {"xp": tuple(xps), "fp": tuple(fps), "left": left,
                                         "right": right}, "float64", 3)
    got = node.attrs.rule(node, [x], CompileOptions())
    np.testing.assert_array_equal(got, want)
    module = Interp(xps, fps, left, right)
    for m in (module, torch.jit.script(module)):
        np.testing.assert_array_equal(m([torch.from_numpy(x)]).numpy(), want)


@pytest.mark.parametrize("keep", [False, True])
def test_knn_imputer_empty_feature(keep):
    """A column all-missing at fit is dropped, or (keep_empty_features) zeroed, as sklearn."""
    from sklearn.impute import KNNImputer

    rng = np.random.default_rng(2)
    X = rng.normal(size=(60, 3))
    X[:, 1] = np.nan
    X[::4, 2] = np.nan
    model = KNNImputer(n_neighbors=2, keep_empty_features=keep).fit(X)
    Xt = rng.normal(size=(10, 3))
    Xt[::2, 0] = np.nan
    for backend in BACKENDS:
        got = peregrine.compile(model, backend).transform(Xt)
        np.testing.assert_allclose(got, model.transform(Xt), rtol=RTOL, atol=ATOL)
    with pytest.raises(UnsupportedModelError, match="missing_values"):
        peregrine.compile(KNNImputer(missing_values=-1.0).fit(np.abs(X[:, [0]])),
                          "reference")


@pytest.mark.parametrize("backend", BACKENDS + ["native"])
def test_simple_imputer_empty_features_every_strategy(backend):
    """A column all-missing at fit is dropped by every strategy, 'constant' included
    (scikit-learn >= 1.6: its statistic is NaN), unless keep_empty_features; in a pipeline the
    next step sees the narrower matrix."""
    rng = np.random.default_rng(0)
    X = np.c_[rng.normal(size=60), np.full(60, np.nan), rng.normal(size=60)]
    X[::7, 0] = np.nan
    rows = X[:20].copy()
    rows[1, 1] = 3.0  # a value where fit saw none: dropped with the column
    for kw in (dict(strategy="constant", fill_value=7.5), dict(strategy="mean"),
               dict(strategy="constant", fill_value=7.5, keep_empty_features=True),
               dict(strategy="median", keep_empty_features=True, add_indicator=True)):
        est = SimpleImputer(**kw).fit(X)
        got = peregrine.compile(est, backend=backend).transform(rows)
        np.testing.assert_array_equal(got, est.transform(rows), err_msg=str(kw))
    y = X[:, 2] * 2.0
    model = make_pipeline(SimpleImputer(strategy="constant", fill_value=-1.0), Ridge()).fit(X, y)
    np.testing.assert_allclose(peregrine.compile(model, backend=backend).predict(rows),
                               model.predict(rows), rtol=1e-5, atol=1e-6)
