"""CatBoost models on numeric features: every supported loss, oblivious and non-symmetric trees,
the three NaN modes, multiclass, rankers, a raw ``catboost.CatBoost`` and a model read back from
its .cbm file. Training data holds NaN (except for nan_mode Forbidden)."""

from __future__ import annotations

import os
import tempfile

import catboost as cb
import numpy as np
from sklearn.datasets import make_classification, make_regression

from tests.conformance.case import Case, cached

COMMON = dict(iterations=40, depth=5, verbose=0, random_seed=0, thread_count=1,
              allow_writing_files=False)


@cached
def classification(n_classes: int = 2):
    X, y = make_classification(600, 8, n_informative=5, n_classes=n_classes, random_state=0)
    X[::9, 1] = np.nan
    X[::13, 4] = np.nan
    return X, y


@cached
def regression():
    X, y = make_regression(600, 8, n_informative=5, noise=5.0, random_state=0)
    X[::9, 1] = np.nan
    return X, y


def _regressor(loss: str = "RMSE", nan_mode: str = "Min", **kw):
    def build():
        X, y = regression()
        if nan_mode == "Forbidden":
            X = np.nan_to_num(X)
        if loss.split(":")[0] in ("Poisson", "Tweedie"):
            y = np.round(np.exp((y - y.mean()) / y.std()))
        model = cb.CatBoostRegressor(loss_function=loss, nan_mode=nan_mode, **COMMON, **kw)
        return model.fit(X, y), X
    return cached(build)


def _classifier(loss: str = "Logloss", n_classes: int = 2, labels=None, **kw):
    def build():
        X, y = classification(n_classes)
        if labels is not None:
            y = np.asarray(labels)[y]
        if loss == "CrossEntropy":
            y = np.clip(y * 0.8 + 0.1, 0, 1)
        model = cb.CatBoostClassifier(loss_function=loss, **COMMON, **kw)
        return model.fit(X, y), X
    return cached(build)


def _ranker(loss: str):
    def build():
        X, y = regression()
        group = np.repeat(np.arange(60), 10)
        y = np.digitize(y, np.quantile(y, [0.25, 0.5, 0.75]))
        model = cb.CatBoostRanker(loss_function=loss, **COMMON)
        return model.fit(X, y, group_id=group), X
    return cached(build)


@cached
def _raw_catboost():
    X, y = regression()
    model = cb.CatBoost(dict(loss_function="RMSE", **COMMON))
    return model.fit(X, y), X


@cached
def _from_file():
    model, X = _classifier("MultiClass", 3)()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.cbm")
        model.save_model(path)
        loaded = cb.CatBoostClassifier().load_model(path)
    return loaded, X


CASES = [
    Case("catboost-rmse", _regressor()),
    Case("catboost-rmse-nan-max", _regressor(nan_mode="Max")),
    Case("catboost-rmse-nan-forbidden", _regressor(nan_mode="Forbidden")),
    Case("catboost-quantile", _regressor("Quantile:alpha=0.3")),
    Case("catboost-mae-depthwise", _regressor("MAE", grow_policy="Depthwise")),
    Case("catboost-rmse-lossguide", _regressor(grow_policy="Lossguide", max_leaves=12)),
    Case("catboost-poisson", _regressor("Poisson")),
    Case("catboost-tweedie", _regressor("Tweedie:variance_power=1.5")),
    Case("catboost-logloss", _classifier()),
    Case("catboost-logloss-strings", _classifier(labels=["no", "yes"])),
    Case("catboost-crossentropy", _classifier("CrossEntropy")),
    Case("catboost-multiclass", _classifier("MultiClass", 3)),
    Case("catboost-multiclass-depthwise", _classifier("MultiClass", 4, grow_policy="Depthwise")),
    Case("catboost-yetirank", _ranker("YetiRank")),
    Case("catboost-pairlogit", _ranker("PairLogit")),
    Case("catboost-raw-booster", _raw_catboost),
    Case("catboost-from-cbm", _from_file),
]
