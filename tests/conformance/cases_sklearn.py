"""scikit-learn tree models. (Boosting and IsolationForest cases are appended by their frontends'
authors below the forest cases.)"""

from __future__ import annotations

import numpy as np
from sklearn.datasets import make_classification, make_regression
from sklearn.ensemble import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.tree import (
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    ExtraTreeClassifier,
    ExtraTreeRegressor,
)

from tests.conformance.case import Case, cached


@cached
def classification(n_classes: int = 2, nan: bool = True, seed: int = 0):
    X, y = make_classification(600, 10, n_informative=6, n_classes=n_classes, random_state=seed)
    if nan:
        X[::9, 1] = np.nan
        X[::13, 4] = np.nan
    return X, y


@cached
def regression(n_targets: int = 1, nan: bool = True, seed: int = 0):
    X, y = make_regression(600, 10, n_informative=6, n_targets=n_targets, random_state=seed)
    if nan:
        X[::9, 1] = np.nan
    return X, y


def _clf(make, n_classes=2, labels=None):
    def build():
        X, y = classification(n_classes)
        if labels is not None:
            y = np.asarray(labels, dtype=object)[y]
        return make().fit(X, y), X

    return build


def _reg(make, n_targets=1):
    def build():
        X, y = regression(n_targets)
        return make().fit(X, y), X

    return build


CASES = [
    Case("sk-dt-clf-binary", _clf(lambda: DecisionTreeClassifier(max_depth=7, random_state=0))),
    Case("sk-dt-clf-multi-strlabels", _clf(
        lambda: DecisionTreeClassifier(max_depth=9, random_state=0), 3, ["cat", "dog", "emu"])),
    Case("sk-et1-clf", _clf(lambda: ExtraTreeClassifier(max_depth=8, random_state=0), 3)),
    Case("sk-rf-clf-binary", _clf(
        lambda: RandomForestClassifier(25, max_depth=8, random_state=0))),
    Case("sk-rf-clf-multi", _clf(
        lambda: RandomForestClassifier(20, max_depth=10, random_state=0), 4)),
    Case("sk-et-clf-multi", _clf(lambda: ExtraTreesClassifier(20, max_depth=8, random_state=0), 3)),
    Case("sk-dt-reg", _reg(lambda: DecisionTreeRegressor(max_depth=8, random_state=0))),
    Case("sk-et1-reg", _reg(lambda: ExtraTreeRegressor(max_depth=8, random_state=0))),
    Case("sk-rf-reg", _reg(lambda: RandomForestRegressor(20, max_depth=9, random_state=0))),
    Case("sk-rf-reg-multioutput", _reg(
        lambda: RandomForestRegressor(10, max_depth=6, random_state=0), 3)),
    Case("sk-et-reg", _reg(lambda: ExtraTreesRegressor(15, max_depth=8, random_state=0))),
]


# --------------------------------------------------------------------------------------------
# Gradient boosting, HistGradientBoosting and IsolationForest (frontends/sklearn_boosting.py,
# frontends/sklearn_iforest.py). GradientBoosting rejects NaN, so its data has none.

from sklearn.dummy import DummyClassifier, DummyRegressor  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    IsolationForest,
)

from tests.conformance.rows import DEFAULT_CATEGORY_VALUES  # noqa: E402

# Column 2 holds codes 0..11 (and NaN), column 5 the odd categories -1, 2, 5, 7.5, 300:
# scikit-learn >= 1.4 ordinal-encodes every categorical column, so any value is a category.
HGB_CATEGORICAL = (2, 5)
ODD_CATEGORIES = (-1.0, 2.0, 5.0, 7.5, 300.0)
# the defaults (negative, fractional, >= 256, 2**31) plus the odd categories and near misses
HGB_CATEGORY_VALUES = tuple(DEFAULT_CATEGORY_VALUES) + (
    -0.0, 7.5, 7.0, 8.0, 300.0, 299.5, 258.0, 11.0, 12.0, 256.0, 255.0, -2.0)


@cached
def categorical_data(n_classes: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    X, y = make_classification(800, 8, n_informative=5, n_classes=n_classes, random_state=seed)
    X[:, 2] = rng.integers(0, 12, len(X))
    X[:, 5] = rng.choice(ODD_CATEGORIES, len(X))
    X[::17, 2] = np.nan
    X[::11, 0] = np.nan
    # make the categories matter so the trees split on them
    y = (y + (X[:, 2] % 3 == 0) + 2 * (X[:, 5] == 5.0)) % n_classes
    return X, y


def _hgb_cat(make, task="multi"):
    def build():
        X, y = categorical_data(2 if task == "binary" else 3)
        if task == "reg":
            y = y + X[:, 1] + np.where(X[:, 5] == 7.5, 2.0, 0.0)
        return make().fit(X, y), X

    return build


def _gb_clf(make, n_classes=2, labels=None):
    def build():
        X, y = classification(n_classes, nan=False)
        if labels is not None:
            y = np.asarray(labels, dtype=object)[y]
        return make().fit(X, y), X

    return build


def _boost_reg(make, nan=True, positive=False):
    def build():
        X, y = regression(1, nan=nan)
        if positive:  # poisson / gamma need y > 0
            y = np.exp(y / np.std(y))
        return make().fit(X, y), X

    return build


def _iforest(make, nan=True):
    def build():
        X, _ = classification(2, nan=nan)
        return make().fit(X), X

    return build


def _hgb(**kw):
    kw = {"max_iter": 25, "random_state": 0, **kw}
    return lambda: HistGradientBoostingClassifier(**kw)


def _hgbr(**kw):
    kw = {"max_iter": 25, "random_state": 0, **kw}
    return lambda: HistGradientBoostingRegressor(**kw)


def _gbc(**kw):
    kw = {"n_estimators": 25, "max_depth": 3, "random_state": 0, **kw}
    return lambda: GradientBoostingClassifier(**kw)


def _gbr(**kw):
    kw = {"n_estimators": 25, "max_depth": 3, "random_state": 0, **kw}
    return lambda: GradientBoostingRegressor(**kw)


CASES += [
    # ------------------------------------------------------------ GradientBoosting --------
    Case("sk-gb-clf-binary", _gb_clf(_gbc())),
    Case("sk-gb-clf-binary-exponential", _gb_clf(_gbc(loss="exponential"))),
    Case("sk-gb-clf-binary-zero-init", _gb_clf(_gbc(init="zero", subsample=0.8))),
    Case("sk-gb-clf-binary-earlystop", _gb_clf(_gbc(
        n_estimators=40, n_iter_no_change=2, validation_fraction=0.25, tol=1e-2))),
    Case("sk-gb-clf-multi-strlabels", _gb_clf(_gbc(n_estimators=12), 3, ["cat", "dog", "emu"])),
    Case("sk-gb-clf-multi-dummy-init", _gb_clf(
        _gbc(n_estimators=10, init=DummyClassifier(strategy="most_frequent")), 4)),
    Case("sk-gb-reg-squared", _boost_reg(_gbr(), nan=False)),
    Case("sk-gb-reg-absolute", _boost_reg(_gbr(loss="absolute_error"), nan=False)),
    Case("sk-gb-reg-huber", _boost_reg(_gbr(loss="huber", alpha=0.8), nan=False)),
    Case("sk-gb-reg-quantile", _boost_reg(_gbr(loss="quantile", alpha=0.25), nan=False)),
    Case("sk-gb-reg-dummy-init", _boost_reg(
        _gbr(init=DummyRegressor(strategy="quantile", quantile=0.3), max_features=0.5),
        nan=False)),
    # ------------------------------------------------------ HistGradientBoosting ----------
    Case("sk-hgb-clf-binary", _clf(_hgb())),
    Case("sk-hgb-clf-multi-strlabels", _clf(_hgb(max_iter=12), 3, ["cat", "dog", "emu"])),
    Case("sk-hgb-clf-multi-earlystop", _clf(
        _hgb(max_iter=40, early_stopping=True, n_iter_no_change=2, tol=1e-3), 4)),
    Case("sk-hgb-reg-squared", _reg(_hgbr())),
    Case("sk-hgb-reg-absolute", _reg(_hgbr(loss="absolute_error"))),
    Case("sk-hgb-reg-quantile", _reg(_hgbr(loss="quantile", quantile=0.8))),
    Case("sk-hgb-reg-poisson", _boost_reg(_hgbr(loss="poisson"), positive=True)),
    Case("sk-hgb-reg-gamma", _boost_reg(_hgbr(loss="gamma"), positive=True)),
    Case("sk-hgb-clf-cat-multi", _hgb_cat(_hgb(categorical_features=list(HGB_CATEGORICAL))),
         categorical=HGB_CATEGORICAL, category_values=HGB_CATEGORY_VALUES),
    Case("sk-hgb-clf-cat-binary", _hgb_cat(_hgb(
        categorical_features=np.isin(np.arange(8), HGB_CATEGORICAL)), "binary"),
         categorical=HGB_CATEGORICAL, category_values=HGB_CATEGORY_VALUES),
    Case("sk-hgb-reg-cat", _hgb_cat(_hgbr(categorical_features=[5, 2]), "reg"),
         categorical=HGB_CATEGORICAL),
    # ------------------------------------------------------------- IsolationForest --------
    Case("sk-iforest", _iforest(lambda: IsolationForest(n_estimators=30, random_state=0))),
    Case("sk-iforest-subfeatures", _iforest(lambda: IsolationForest(
        n_estimators=25, max_features=0.6, max_samples=128, contamination=0.1,
        random_state=0))),
    Case("sk-iforest-bootstrap", _iforest(lambda: IsolationForest(
        n_estimators=20, max_features=3, bootstrap=True, contamination=0.05,
        random_state=1), nan=False)),
]
