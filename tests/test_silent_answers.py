"""Models Peregrine could compile only by answering where scikit-learn does not: sklearn's
predict raises on every call, or sklearn would score a member through a method Peregrine does
not offer. Each is refused at compile time with an UnsupportedModelError naming the reason."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import make_classification
from sklearn.ensemble import BaggingClassifier, VotingClassifier, VotingRegressor
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.multiclass import OneVsOneClassifier, OneVsRestClassifier
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.preprocessing import QuantileTransformer
from sklearn.svm import SVC

import peregrine
from peregrine.errors import UnsupportedModelError


def _data(n=60, classes=3):
    return make_classification(n, 4, n_informative=3, n_redundant=0, n_classes=classes,
                               random_state=0)


def _fit(model, X, y=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(X) if y is None else model.fit(X, y)


@pytest.mark.parametrize("cls", [KNeighborsClassifier, KNeighborsRegressor])
def test_more_neighbours_than_fitted_rows(cls):
    X, y = _data()
    model = _fit(cls(n_neighbors=8), X[:6], y[:6])
    with pytest.raises(ValueError, match="n_neighbors"):  # sklearn raises on every call
        model.predict(X)
    with pytest.raises(UnsupportedModelError, match="n_neighbors=8"):
        peregrine.compile(model, "reference")
    peregrine.compile(_fit(cls(n_neighbors=6), X[:6], y[:6]), "reference")  # k == rows: fine


def test_svc_break_ties_with_ovo():
    X, y = _data()
    model = _fit(SVC(break_ties=True, decision_function_shape="ovo"), X, y)
    with pytest.raises(ValueError, match="break_ties"):
        model.predict(X)
    with pytest.raises(UnsupportedModelError, match="break_ties"):
        peregrine.compile(model, "reference")


@pytest.mark.parametrize("make", [
    lambda: VotingClassifier([("a", LogisticRegression()), ("b", LogisticRegression(C=0.1))],
                             voting="soft", weights=[1.0, -1.0]),
    lambda: VotingRegressor([("a", Ridge()), ("b", Ridge(alpha=5.0))], weights=[0, 0]),
])
def test_voting_weights_summing_to_zero(make):
    X, y = _data()
    model = _fit(make(), X, y)
    with pytest.raises(ZeroDivisionError):
        model.predict(X)
    with pytest.raises(UnsupportedModelError, match="summing to 0"):
        peregrine.compile(model, "reference")


def test_quantile_transformer_column_all_missing_at_fit():
    X, _ = _data()
    X[:, 1] = np.nan
    model = _fit(QuantileTransformer(n_quantiles=20), X)
    with pytest.raises(UnsupportedModelError, match="all-missing"):
        peregrine.compile(model, "reference")


@pytest.mark.parametrize("wrap", [
    lambda m: CalibratedClassifierCV(m, cv=2),
    lambda m: OneVsRestClassifier(m),
    lambda m: OneVsOneClassifier(m),
])
def test_lightgbm_members_are_scored_by_decision_function(wrap):
    """LightGBM >= 4.7 has decision_function (the raw margin), which sklearn's calibration and
    multiclass wrappers score members by; so does the compiled LightGBM model."""
    lightgbm = pytest.importorskip("lightgbm")
    member = lightgbm.LGBMClassifier(n_estimators=3, verbose=-1)
    if not hasattr(member, "decision_function"):
        pytest.skip("this LightGBM has no decision_function")
    X, y = _data(90)
    model = _fit(wrap(member), X, y)
    compiled = peregrine.compile(model, "reference")
    for method in compiled.methods:
        want, got = getattr(model, method)(X), getattr(compiled, method)(X)
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=method)
        else:
            np.testing.assert_array_equal(got, want, err_msg=method)


class _NBWithDecision(GaussianNB):
    """A member sklearn scores by decision_function (it has one), Peregrine's GaussianNB
    conversion does not offer it."""

    def decision_function(self, X):
        return self.predict_log_proba(X)[:, 1]


@pytest.mark.parametrize("wrap", [
    lambda m: CalibratedClassifierCV(m, cv=2),
    lambda m: OneVsRestClassifier(m),
])
def test_member_method_sklearn_uses_but_peregrine_lacks(wrap):
    X, y = _data(90)
    with pytest.raises(UnsupportedModelError, match="decision_function"):
        peregrine.compile(_fit(wrap(_NBWithDecision()), X, y), "reference")


def test_bagging_member_proba_is_used_when_sklearn_has_it():
    """A member with predict_proba is averaged, one without it votes, as sklearn decides by
    hasattr; both compile and agree with sklearn."""
    X, y = _data(90)
    for member in (LogisticRegression(), SVC()):  # SVC without probability has no predict_proba
        model = _fit(BaggingClassifier(member, n_estimators=3, random_state=0), X, y)
        compiled = peregrine.compile(model, "reference")
        np.testing.assert_allclose(compiled.predict_proba(X), model.predict_proba(X),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(compiled.predict(X), model.predict(X))
