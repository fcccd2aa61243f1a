"""Meta-estimators beyond the conformance suite: typed errors for what is not supported or not
fitted, NaN rejection where sklearn rejects it, the methods offered, string labels, DataFrame
pipelines around meta-estimators, nesting, and artifacts."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn import linear_model as lm
from sklearn import tree
from sklearn.calibration import CalibratedClassifierCV
from sklearn.compose import ColumnTransformer, TransformedTargetRegressor
from sklearn.datasets import make_classification, make_regression
from sklearn.ensemble import (
    AdaBoostClassifier,
    BaggingClassifier,
    StackingClassifier,
    VotingClassifier,
)
from sklearn.model_selection import GridSearchCV
from sklearn.multiclass import OneVsRestClassifier
from sklearn.multioutput import MultiOutputClassifier, RegressorChain
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, QuantileTransformer, StandardScaler

import peregrine
from peregrine.errors import InputError, NotFittedError, UnsupportedModelError

RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="module")
def clf3():
    return make_classification(150, 5, n_informative=3, n_classes=3, random_state=0)


@pytest.fixture(scope="module")
def reg():
    return make_regression(150, 5, random_state=0)


def _fit(model, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(X, y)


def _same(compiled, model, X):
    for method in compiled.methods:
        got, want = getattr(compiled, method)(X), getattr(model, method)(X)
        if want.dtype.kind in "fc":
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=method)
        else:
            np.testing.assert_array_equal(got, want, err_msg=method)


@pytest.mark.parametrize("model", [
    VotingClassifier([("lr", lm.LogisticRegression())]),
    StackingClassifier([("lr", lm.LogisticRegression())]),
    BaggingClassifier(lm.LogisticRegression()),
    GridSearchCV(lm.LogisticRegression(), {"C": [1.0]}),
    CalibratedClassifierCV(lm.LogisticRegression()),
], ids=lambda m: type(m).__name__)
def test_unfitted_meta_estimators_raise(model):
    with pytest.raises(NotFittedError, match=type(model).__name__):
        peregrine.compile(model, "reference")


def test_unsupported_parameters_name_estimator_and_parameter(clf3, reg):
    X, y = clf3
    cases = [
        (CalibratedClassifierCV(lm.LogisticRegression(), method="temperature", cv=3), X, y,
         "temperature"),
        (GridSearchCV(lm.LogisticRegression(), {"C": [0.1, 1.0]}, refit=False, cv=3), X, y,
         "refit=False"),
        (VotingClassifier([("a", lm.LogisticRegression()), ("b", tree.DecisionTreeClassifier())],
                          weights=[1, -1]), X, y, "negative weights"),
        (TransformedTargetRegressor(lm.Ridge(), transformer=QuantileTransformer(
            n_quantiles=20)), *reg, "QuantileTransformer"),
        (OneVsRestClassifier(lm.LogisticRegression()), X,
         np.column_stack([y == 0, y == 1]).astype(int), "multilabel"),
        (MultiOutputClassifier(lm.LogisticRegression()), X,
         np.column_stack([np.array(["a", "b", "c"])[y], y]), "non-numeric class labels"),
    ]
    for model, Xf, yf, what in cases:
        _fit(model, Xf, yf)
        with pytest.raises(UnsupportedModelError, match=what) as info:
            peregrine.compile(model, "reference")
        assert type(model).__name__ in str(info.value)


def test_nan_rejected_where_sklearn_rejects(clf3, reg):
    X, y = clf3
    ada = _fit(AdaBoostClassifier(n_estimators=3, random_state=0), X, y)
    chain = _fit(RegressorChain(lm.Ridge()), reg[0], np.column_stack([reg[1], -reg[1]]))
    for model, Xm in ((ada, X), (chain, reg[0])):
        bad = Xm[:3].copy()
        bad[1, 2] = np.nan
        with pytest.raises(ValueError):
            model.predict(bad)
        compiled = peregrine.compile(model, "reference")
        with pytest.raises(InputError):
            compiled.predict(bad)


def test_methods_offered_follow_sklearn(clf3):
    X, y = clf3
    soft3d = _fit(VotingClassifier([("lr", lm.LogisticRegression())], voting="soft",
                                   flatten_transform=False), X, y)
    assert set(peregrine.compile(soft3d, "reference").methods) == {"predict", "predict_proba"}
    multi = _fit(MultiOutputClassifier(lm.LogisticRegression()), X, np.column_stack([y, y]))
    assert peregrine.compile(multi, "reference").methods == ("predict",)


def test_string_labels_and_nesting(clf3):
    X, y = clf3
    labels = np.array(["cat", "dog", "eel"])[y]
    inner = StackingClassifier([("lr", lm.LogisticRegression()),
                                ("dt", tree.DecisionTreeClassifier(max_depth=3))], cv=3)
    model = _fit(VotingClassifier(
        [("stack", inner),
         ("bag", BaggingClassifier(make_pipeline(StandardScaler(), lm.LogisticRegression()),
                                   4, random_state=0))], voting="soft"), X, labels)
    for backend in ("reference", "torch"):
        compiled = peregrine.compile(model, backend)
        _same(compiled, model, X)
        assert compiled.predict(X).dtype == labels.dtype


def test_dataframe_pipeline_around_meta_estimator():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x": rng.normal(size=200),
                       "city": rng.choice(["paris", "lyon", "nice"], 200).astype(object)})
    y = (df["x"] + (df["city"] == "lyon") > 0.5).astype(int).to_numpy()
    pre = ColumnTransformer([("num", StandardScaler(), ["x"]),
                             ("cat", OneHotEncoder(handle_unknown="ignore",
                                                   sparse_output=False), ["city"])])
    model = _fit(make_pipeline(pre, CalibratedClassifierCV(
        tree.DecisionTreeClassifier(max_depth=3), cv=3, method="isotonic")), df, y)
    test = df.iloc[:20].copy()
    test.loc[test.index[:3], "city"] = "brest"  # unseen: ignored by the encoder
    for backend in ("reference", "torch"):
        _same(peregrine.compile(model, backend), model, test)


def test_meta_artifact_round_trip(tmp_path, clf3):
    X, y = clf3
    model = _fit(AdaBoostClassifier(n_estimators=4, random_state=0), X, y)
    compiled = peregrine.compile(model, "torch")
    path = tmp_path / "ada.peregrine"
    compiled.save(path)
    loaded = peregrine.load(path)
    for method in compiled.methods:
        np.testing.assert_array_equal(getattr(loaded, method)(X), getattr(compiled, method)(X))
