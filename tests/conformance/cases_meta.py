"""scikit-learn meta-estimators (Voting, Stacking, Bagging, AdaBoost, calibration, multiclass
and multi-output wrappers, chains, TransformedTargetRegressor, searches) with linear, tree,
boosting, XGBoost and LightGBM members. Small models: each case trains in well under a second."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
from sklearn import linear_model as lm
from sklearn import tree
from sklearn.calibration import CalibratedClassifierCV
from sklearn.compose import TransformedTargetRegressor
from sklearn.datasets import make_classification, make_regression
from sklearn.ensemble import (
    AdaBoostClassifier,
    AdaBoostRegressor,
    BaggingClassifier,
    BaggingRegressor,
    GradientBoostingRegressor,
    RandomForestClassifier,
    StackingClassifier,
    StackingRegressor,
    VotingClassifier,
    VotingRegressor,
)
from sklearn.model_selection import GridSearchCV
from sklearn.multiclass import OneVsOneClassifier, OneVsRestClassifier
from sklearn.multioutput import (
    ClassifierChain,
    MultiOutputClassifier,
    MultiOutputRegressor,
    RegressorChain,
)
from sklearn.naive_bayes import GaussianNB
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, StandardScaler
from sklearn.svm import LinearSVC

from tests.conformance.case import Case, cached

HAS_XGB = importlib.util.find_spec("xgboost") is not None
HAS_LGBM = importlib.util.find_spec("lightgbm") is not None


@cached
def _clf(n_classes: int):
    return make_classification(240, 6, n_informative=4, n_classes=n_classes, random_state=3)


@cached
def _reg():
    X, y = make_regression(240, 6, n_informative=4, noise=1.0, random_state=3)
    return X, y / 50.0


@cached
def _multi_label():
    X, y = _clf(2)
    return X, np.column_stack([y, (X[:, 0] + X[:, 2] > 0).astype(np.int64)])


@cached
def _multi_target():
    X, y = _reg()
    return X, np.column_stack([y, np.sin(y) + X[:, 1]])


@cached
def _positive_target():
    X, y = _reg()
    return X, np.exp(y)


def _fit(make, data):
    def build():
        X, y = data()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence warnings on small data
            model = make().fit(X, y)
        return model, X
    return build


def _clf_case(name, make, n_classes=2):
    return Case(f"meta-{name}-{n_classes}c", _fit(make, lambda: _clf(n_classes)))


def _reg_case(name, make, data=_reg):
    return Case(f"meta-{name}", _fit(make, data))


def _dt(depth=3):
    return tree.DecisionTreeClassifier(max_depth=depth, random_state=0)


def _members():
    return [("lr", lm.LogisticRegression()), ("dt", _dt()), ("nb", GaussianNB())]


def _boosting_cases():
    out = []
    if HAS_XGB:
        import xgboost as xgb

        out += [
            _clf_case("pipe-xgb", lambda: make_pipeline(
                StandardScaler(), xgb.XGBClassifier(n_estimators=8, max_depth=3)), 3),
            _reg_case("bag-xgb", lambda: BaggingRegressor(
                xgb.XGBRegressor(n_estimators=5, max_depth=2), 3, max_features=0.7,
                random_state=0)),
        ]
    if HAS_LGBM:
        import lightgbm

        out += [
            _clf_case("pipe-lgbm", lambda: make_pipeline(
                MinMaxScaler(), lightgbm.LGBMClassifier(n_estimators=8, verbose=-1))),
            _clf_case("vote-lgbm", lambda: VotingClassifier(
                [("lgbm", lightgbm.LGBMClassifier(n_estimators=6, verbose=-1)),
                 ("lr", lm.LogisticRegression())], voting="soft"), 3),
        ]
    return out


CASES = [
    # Voting: soft with weights, hard (a member without predict_proba), regressor
    _clf_case("vote-soft", lambda: VotingClassifier(_members(), voting="soft",
                                                     weights=[2, 1, 0.5]), 3),
    _clf_case("vote-hard", lambda: VotingClassifier(
        _members() + [("ridge", lm.RidgeClassifier())], weights=[1, 2, 1, 1]), 3),
    _reg_case("vote-reg", lambda: VotingRegressor(
        [("r", lm.Ridge()), ("dt", tree.DecisionTreeRegressor(max_depth=4, random_state=0)),
         ("gb", GradientBoostingRegressor(n_estimators=5, max_depth=2, random_state=0))])),
    # Stacking: passthrough + binary proba column drop; decision_function members; predict
    _clf_case("stack-pass", lambda: StackingClassifier(_members(), passthrough=True, cv=3)),
    _clf_case("stack-auto", lambda: StackingClassifier(
        [("svc", LinearSVC(random_state=0)),
         ("rf", RandomForestClassifier(4, max_depth=3, random_state=0))], cv=3), 3),
    _clf_case("stack-predict", lambda: StackingClassifier(
        [("ridge", lm.RidgeClassifier()), ("dt", _dt())], stack_method="predict", cv=3), 3),
    _reg_case("stack-reg", lambda: StackingRegressor(
        [("r", lm.Ridge()), ("dt", tree.DecisionTreeRegressor(max_depth=3, random_state=0))],
        passthrough=True, cv=3)),
    # Bagging: feature subsets drawn with replacement, vote fallback, joblib job split
    _clf_case("bag-trees", lambda: BaggingClassifier(
        _dt(4), 5, max_features=0.7, bootstrap_features=True, max_samples=0.5,
        random_state=0), 3),
    _clf_case("bag-vote", lambda: BaggingClassifier(
        lm.RidgeClassifier(), 5, max_features=0.6, n_jobs=2, random_state=0), 3),
    _reg_case("bag-reg", lambda: BaggingRegressor(lm.Ridge(), 4, max_features=0.5,
                                                  random_state=0)),
    # AdaBoost SAMME (binary and multiclass) and AdaBoost.R2
    _clf_case("ada", lambda: AdaBoostClassifier(n_estimators=8, random_state=0)),
    _clf_case("ada", lambda: AdaBoostClassifier(_dt(2), n_estimators=8, random_state=0), 3),
    _reg_case("ada-reg", lambda: AdaBoostRegressor(
        tree.DecisionTreeRegressor(max_depth=3, random_state=0), n_estimators=8,
        random_state=0)),
    # calibration: sigmoid/isotonic, decision_function/predict_proba members, ensemble
    _clf_case("cal-sigmoid", lambda: CalibratedClassifierCV(lm.LogisticRegression(), cv=3), 3),
    _clf_case("cal-isotonic", lambda: CalibratedClassifierCV(
        _dt(), cv=3, method="isotonic")),
    _clf_case("cal-isotonic", lambda: CalibratedClassifierCV(
        LinearSVC(random_state=0), cv=3, method="isotonic", ensemble=False), 3),
    # multiclass wrappers
    _clf_case("ovr", lambda: OneVsRestClassifier(lm.LogisticRegression()), 3),
    _clf_case("ovr-tree", lambda: OneVsRestClassifier(_dt())),
    _clf_case("ovo", lambda: OneVsOneClassifier(lm.LogisticRegression()), 3),
    # multi-output and chains
    _reg_case("multi-reg", lambda: MultiOutputRegressor(lm.Ridge()), _multi_target),
    _reg_case("multi-clf", lambda: MultiOutputClassifier(_dt()), _multi_label),
    _reg_case("chain-reg", lambda: RegressorChain(lm.Ridge(), order=[1, 0]), _multi_target),
    _reg_case("chain-clf", lambda: ClassifierChain(lm.LogisticRegression(), order=[1, 0],
                                                   chain_method="predict_proba"),
              _multi_label),
    # target transforms and searches
    _reg_case("ttr-scaler", lambda: TransformedTargetRegressor(
        tree.DecisionTreeRegressor(max_depth=4, random_state=0), transformer=StandardScaler())),
    _reg_case("ttr-ufunc", lambda: TransformedTargetRegressor(
        lm.Ridge(), func=np.log, inverse_func=np.exp), _positive_target),
    _clf_case("grid", lambda: GridSearchCV(make_pipeline(StandardScaler(), lm.LogisticRegression()),
                                           {"logisticregression__C": [0.1, 1.0]}, cv=3), 3),
    *_boosting_cases(),
]
