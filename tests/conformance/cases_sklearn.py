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
