"""LightGBM models: every supported objective, gbdt/dart/rf, the three missing types, categorical
splits (numpy codes and pandas categories), string labels, raw Boosters and rankers. Training
data holds NaN, zeros (LightGBM's zero bin) and, in one case, +-inf (thresholds of -DBL_MAX)."""

from __future__ import annotations

import warnings

import lightgbm as lgb
import numpy as np
import pandas as pd
from sklearn.datasets import make_classification, make_regression

from tests.conformance.case import Case, cached

COMMON = dict(n_estimators=20, num_leaves=15, verbose=-1, random_state=0, n_jobs=1)


@cached
def classification(n_classes: int = 2, seed: int = 0):
    X, y = make_classification(600, 8, n_informative=5, n_classes=n_classes, random_state=seed)
    X[::9, 1] = np.nan
    X[::13, 4] = np.nan
    X[::5, 2] = 0.0  # a populated zero bin: thresholds at +-1e-35f
    return X, y


@cached
def regression(seed: int = 0):
    X, y = make_regression(600, 8, n_informative=5, noise=5.0, random_state=seed)
    X[::9, 1] = np.nan
    X[::4, 3] = 0.0
    return X, y


def _positive_target(kind: str):
    X, y = regression()
    z = (y - y.mean()) / y.std()
    rng = np.random.default_rng(1)
    if kind == "count":
        return X, rng.poisson(np.exp(0.8 * z)).astype(float)
    if kind == "gamma":
        return X, np.exp(0.5 * z) * rng.gamma(2.0, 0.5, len(z))
    return X, 1.0 / (1.0 + np.exp(-z))  # probability-like labels for cross_entropy


def _clf(n_classes=2, labels=None, **params):
    def build():
        X, y = classification(n_classes)
        if labels is not None:
            y = np.asarray(labels, dtype=object)[y]
        return lgb.LGBMClassifier(**{**COMMON, **params}).fit(X, y), X

    return build


def _reg(target=None, **params):
    def build():
        X, y = regression() if target is None else _positive_target(target)
        return lgb.LGBMRegressor(**{**COMMON, **params}).fit(X, y), X

    return build


def _inf_regression():
    X, y = regression()
    X = X.copy()
    X[::7, 0] = np.inf
    X[3::11, 0] = -np.inf
    y = y + np.where(np.isposinf(X[:, 0]), 50.0, 0.0) - np.where(np.isneginf(X[:, 0]), 50.0, 0.0)
    return lgb.LGBMRegressor(**COMMON).fit(X, y), X


@cached
def categorical_data(seed: int = 0):
    """Numeric columns plus category codes: 3 levels (one-vs-rest splits), 12 and 45 levels
    (many-vs-many bitsets spanning two 32-bit words); NaN in the codes too."""
    rng = np.random.default_rng(seed)
    n = 800
    X = rng.normal(size=(n, 5))
    X[:, 1] = rng.integers(0, 3, n)
    X[:, 3] = rng.integers(0, 12, n)
    X[:, 4] = rng.integers(0, 45, n)
    X[::17, 3] = np.nan
    X[::10, 0] = np.nan
    effect12 = rng.normal(size=12)
    effect45 = rng.normal(size=45)
    y = (np.nan_to_num(X[:, 0]) + (X[:, 1] == 2) + effect12[np.nan_to_num(X[:, 3]).astype(int)]
         + effect45[X[:, 4].astype(int)] + 0.3 * rng.normal(size=n))  # fmt: skip
    return X, y


def _cat_reg(**params):
    def build():
        X, y = categorical_data()
        model = lgb.LGBMRegressor(**{**COMMON, "min_data_per_group": 5, "cat_smooth": 1.0,
                                     **params})
        return model.fit(X, y, categorical_feature=[1, 3, 4]), X

    return build


def _cat_clf_multi():
    X, y = categorical_data()
    labels = np.digitize(y, np.quantile(y, [0.33, 0.66]))
    model = lgb.LGBMClassifier(**{**COMMON, "min_data_per_group": 5, "max_cat_to_onehot": 8})
    return model.fit(X, labels, categorical_feature=[1, 3, 4]), X


def _pandas_frame():
    X, y = categorical_data()
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    names = np.array(["zeta", "alpha", "mid", "omega", "beta", "k", "l", "m", "n", "o", "p", "q"])
    codes = np.nan_to_num(X[:, 3], nan=-1).astype(int)
    df["f3"] = pd.Categorical.from_codes(codes, categories=names)  # not sorted: code order counts
    df["f1"] = pd.Categorical.from_codes(X[:, 1].astype(int), categories=["a", "b", "c"])
    return df, X, y


def _pandas_clf():
    df, X, y = _pandas_frame()
    model = lgb.LGBMClassifier(**{**COMMON, "min_data_per_group": 5}).fit(df, y > np.median(y))
    return model, X


def _booster(params, rounds=20, multi=False, early_stopping=False):
    def build():
        X, y = classification(3 if multi else 2)
        base = {"verbose": -1, "num_leaves": 15, "seed": 0, "num_threads": 1}
        train = lgb.Dataset(X[:450], y[:450])
        kwargs = {}
        if early_stopping:
            valid = lgb.Dataset(X[450:], y[450:], reference=train)
            # keep_training_booster: otherwise lgb.train reloads the model truncated to
            # best_iteration, and predict()'s best_iteration default would go untested
            kwargs = {"valid_sets": [valid], "keep_training_booster": True,
                      "callbacks": [lgb.early_stopping(3, verbose=False)]}
        booster = lgb.train({**base, **params}, train, num_boost_round=rounds, **kwargs)
        if early_stopping:
            assert 0 < booster.best_iteration < booster.current_iteration()
        return booster, X

    return build


def _ranker(**params):
    def build():
        X, y = regression()
        rel = np.digitize(y, np.quantile(y, [0.25, 0.5, 0.75])).astype(int)
        group = [30] * 20
        return lgb.LGBMRanker(**{**COMMON, **params}).fit(X, rel, group=group), X

    return build


def _quiet(build):
    def wrapped():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return build()

    return wrapped


def _expect_quiet(model, method, X):
    with warnings.catch_warnings():  # numpy rows for a DataFrame-fitted model warn about names
        warnings.simplefilter("ignore")
        return getattr(model, method)(X)


_CAT_VALUES = (-1, -0.5, -0.0, 0, 0.5, 1, 1.7, 2, 3, 5, 11, 12, 31, 32, 33, 44, 45, 63, 64,
               1000, 2.0**31, 2.0**31 - 1, 1e20, np.inf, -np.inf)

CASES = [
    Case("lgb-clf-binary", _clf()),
    Case("lgb-clf-binary-sigmoid", _clf(sigmoid=0.4)),
    Case("lgb-clf-binary-zero-missing", _clf(zero_as_missing=True)),
    Case("lgb-clf-binary-no-missing", _clf(use_missing=False)),
    Case("lgb-clf-binary-xentropy", _clf(objective="cross_entropy")),
    Case("lgb-clf-multi-strlabels", _clf(3, ["cat", "dog", "emu"], n_estimators=12)),
    Case("lgb-clf-multiclassova", _clf(4, objective="multiclassova", n_estimators=8)),
    Case("lgb-clf-dart", _clf(boosting_type="dart", n_estimators=15)),
    Case("lgb-clf-rf", _clf(boosting_type="rf", bagging_fraction=0.7, bagging_freq=1,
                            feature_fraction=0.8)),
    Case("lgb-clf-rf-multi", _clf(3, boosting_type="rf", bagging_fraction=0.7, bagging_freq=1,
                                  n_estimators=10)),
    Case("lgb-reg-l2", _reg()),
    Case("lgb-reg-l2-zero-missing", _reg(zero_as_missing=True)),
    Case("lgb-reg-l2-no-missing", _reg(use_missing=False)),
    Case("lgb-reg-l1", _reg(objective="regression_l1")),
    Case("lgb-reg-huber", _reg(objective="huber", alpha=5.0)),
    Case("lgb-reg-quantile", _reg(objective="quantile", alpha=0.3)),
    Case("lgb-reg-poisson", _reg("count", objective="poisson")),
    Case("lgb-reg-tweedie", _reg("count", objective="tweedie", tweedie_variance_power=1.3)),
    Case("lgb-reg-gamma", _reg("gamma", objective="gamma")),
    Case("lgb-reg-xentropy", _reg("proba", objective="xentropy")),
    Case("lgb-reg-dart", _reg(boosting_type="dart", n_estimators=15)),
    Case("lgb-reg-rf", _reg(boosting_type="rf", bagging_fraction=0.6, bagging_freq=1)),
    Case("lgb-reg-inf-data", _quiet(_inf_regression)),
    Case("lgb-reg-categorical", _cat_reg(), categorical=(1, 3, 4), category_values=_CAT_VALUES),
    Case("lgb-reg-categorical-zero-missing", _cat_reg(zero_as_missing=True),
         categorical=(1, 3, 4), category_values=_CAT_VALUES),
    Case("lgb-clf-categorical-multi", _cat_clf_multi, categorical=(1, 3, 4),
         category_values=_CAT_VALUES),
    Case("lgb-clf-pandas-categorical", _pandas_clf, expect=_expect_quiet, categorical=(1, 3),
         category_values=_CAT_VALUES),
    Case("lgb-ranker-lambdarank", _ranker()),
    Case("lgb-ranker-xendcg", _ranker(objective="rank_xendcg", n_estimators=10)),
    Case("lgb-booster-binary", _booster({"objective": "binary"})),
    Case("lgb-booster-multiclass-early-stop",
         _booster({"objective": "multiclass", "num_class": 3, "learning_rate": 0.3}, rounds=40,
                  multi=True, early_stopping=True)),
    Case("lgb-booster-regression-rf", _booster({"objective": "regression", "boosting": "rf",
                                                "bagging_fraction": 0.5, "bagging_freq": 1})),
]
