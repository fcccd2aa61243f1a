"""XGBoost cases: every supported objective, NaN in training, custom ``missing`` values,
categorical splits (numpy feature_types and pandas categories), early stopping, dart, random
forests, multi-target and vector-leaf trees, rankers and raw Boosters."""

from __future__ import annotations

import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.datasets import make_classification, make_regression

from tests.conformance.case import Case, cached


@cached
def classification(n_classes: int = 2, seed: int = 0):
    X, y = make_classification(600, 8, n_informative=5, n_classes=n_classes, random_state=seed)
    X[::9, 1] = np.nan
    X[::13, 4] = np.nan
    return X, y


@cached
def regression(n_targets: int = 1, seed: int = 0):
    X, y = make_regression(600, 8, n_informative=5, n_targets=n_targets, random_state=seed)
    X[::9, 1] = np.nan
    return X, y / 50.0


def positive_target(kind: str):
    X, y = regression()
    rng = np.random.default_rng(1)
    if kind == "counts":
        return X, rng.poisson(np.exp(np.clip(y, -3, 3))).astype(float)
    return X, np.exp(np.clip(y, -3, 3)) + 0.05


def categorical_numpy(seed: int = 0):
    """Two numeric columns, a 3-category column (one-hot splits) and a 40-category column
    (partition splits, two bitset words)."""
    rng = np.random.default_rng(seed)
    n = 800
    X = np.column_stack([
        rng.normal(size=n), rng.integers(0, 3, n), rng.integers(0, 40, n), rng.normal(size=n),
    ]).astype(np.float64)
    X[::11, 2] = np.nan
    effect = np.sin(np.arange(40) * 1.7)
    y = X[:, 0] + np.nan_to_num(effect[np.nan_to_num(X[:, 2], nan=0).astype(int)]) + X[:, 1]
    return X, y


def _clf(make, n_classes=2):
    def build():
        X, y = classification(n_classes)
        return make().fit(X, y), X

    return build


def _reg(make, data=regression):
    def build():
        X, y = data()
        return make().fit(X, y), X

    return build


def _positive(make, kind):
    return _reg(make, lambda: positive_target(kind))


def _missing(make, value):
    """Training data where the missing marker is ``value`` instead of NaN."""

    def build():
        X, y = classification(2)
        X = np.where(np.isnan(X), value, X)
        X[::17, 6] = value
        return make(value).fit(X, y), X

    return build


def _early_stopping():
    X, y = classification(3)
    model = xgb.XGBClassifier(n_estimators=40, max_depth=4, learning_rate=0.8,
                              early_stopping_rounds=3, eval_metric="mlogloss")
    model.fit(X[:400], y[:400], eval_set=[(X[400:], y[400:])], verbose=False)
    assert model.best_iteration + 1 < model.get_booster().num_boosted_rounds()
    return model, X


def _categorical(make, binary=False):
    def build():
        X, y = categorical_numpy()
        return make().fit(X, (y > np.median(y)).astype(int) if binary else y), X

    return build


def _pandas_categorical():
    rng = np.random.default_rng(3)
    n = 700
    letters = [f"k{i:02d}" for i in range(37)]
    df = pd.DataFrame({
        "a": rng.normal(size=n),
        "city": pd.Categorical(rng.choice(letters, n), categories=letters[::-1]),
        "b": rng.normal(size=n),
        "size": pd.Categorical(rng.choice([3, 1, 2], n)),
    })
    df.loc[::10, "city"] = np.nan
    codes = df["city"].cat.codes.to_numpy()
    y = ((np.sin(codes * 0.9) + df["a"] + (df["size"] == 2)) > 0.3).astype(int)
    model = xgb.XGBClassifier(n_estimators=15, max_depth=4, enable_categorical=True,
                              max_cat_to_onehot=1).fit(df, y)
    X = np.column_stack([df["a"], codes, df["b"], df["size"].cat.codes]).astype(np.float64)
    X[X[:, 1] < 0, 1] = np.nan
    return model, X


def _rank(objective):
    def build():
        X, y = regression()
        rel = np.digitize(y, np.quantile(y, [0.3, 0.6, 0.85]))
        qid = np.repeat(np.arange(30), 20)
        model = xgb.XGBRanker(n_estimators=20, max_depth=4, objective=objective)
        return model.fit(X, rel, qid=qid), X

    return build


def _cox():
    X, y = regression()
    time = np.exp(np.clip(y, -3, 3)) + 0.1
    time[::4] *= -1  # negative: right-censored
    return xgb.XGBRegressor(n_estimators=15, max_depth=3, objective="survival:cox").fit(X, time), X


def _booster(params, rounds, data):
    def build():
        X, y = data()
        dtrain = xgb.DMatrix(X, y, feature_types=params.pop("feature_types", None),
                             enable_categorical=True)
        return xgb.train(dict(params), dtrain, rounds), X

    return build


def _booster_expect(model, method, X):
    assert method == "predict"
    return model.predict(xgb.DMatrix(X, feature_types=model.feature_types,
                                     enable_categorical=True))


def XC(**kw):
    return lambda: xgb.XGBClassifier(**{"n_estimators": 20, "max_depth": 4, **kw})


def XR(**kw):
    return lambda: xgb.XGBRegressor(**{"n_estimators": 20, "max_depth": 4, **kw})


CAT = dict(categorical=(1, 2))
CAT_TYPES = ["q", "c", "c", "q"]

CASES = [
    # --- classifiers
    Case("xgb-clf-binary", _clf(XC())),
    Case("xgb-clf-binary-deep-base", _clf(XC(max_depth=6, base_score=0.3, n_estimators=30))),
    Case("xgb-clf-logitraw", _clf(XC(objective="binary:logitraw"))),
    Case("xgb-clf-hinge", _clf(XC(objective="binary:hinge"))),
    Case("xgb-clf-multi-softprob", _clf(XC(n_estimators=12), 4)),
    Case("xgb-clf-multi-softmax", _clf(XC(n_estimators=10, objective="multi:softmax"), 3)),
    Case("xgb-clf-early-stopping", _early_stopping),
    Case("xgb-clf-missing-999", _missing(lambda v: XC(missing=v)(), -999.0)),
    Case("xgb-clf-missing-0", _missing(lambda v: XC(missing=v)(), 0.0)),
    Case("xgb-clf-missing-inf", _missing(lambda v: XC(missing=v)(), np.inf)),
    Case("xgb-rf-clf", _clf(lambda: xgb.XGBRFClassifier(n_estimators=10, max_depth=5), 3)),
    Case("xgb-clf-pandas-categorical", _pandas_categorical, categorical=(1, 3)),
    Case("xgb-clf-categorical-numpy", _categorical(XC(
        n_estimators=15, feature_types=CAT_TYPES, enable_categorical=True), binary=True),
        **CAT),
    # --- regressors
    Case("xgb-reg-squarederror", _reg(XR())),
    Case("xgb-reg-logistic", _reg(XR(objective="reg:logistic"),
                                  lambda: (regression()[0], 1 / (1 + np.exp(-regression()[1]))))),
    Case("xgb-reg-pseudohuber", _reg(XR(objective="reg:pseudohubererror"))),
    Case("xgb-reg-absoluteerror", _reg(XR(objective="reg:absoluteerror", n_estimators=10))),
    Case("xgb-reg-squaredlogerror", _positive(XR(objective="reg:squaredlogerror"), "pos")),
    Case("xgb-reg-poisson", _positive(XR(objective="count:poisson"), "counts")),
    Case("xgb-reg-tweedie", _positive(XR(objective="reg:tweedie"), "pos")),
    Case("xgb-reg-gamma", _positive(XR(objective="reg:gamma"), "pos")),
    Case("xgb-reg-cox", _cox),
    Case("xgb-reg-quantiles", _reg(XR(objective="reg:quantileerror", n_estimators=8,
                                      quantile_alpha=np.array([0.2, 0.5, 0.9])))),
    Case("xgb-reg-multitarget", _reg(XR(n_estimators=10), lambda: regression(3))),
    Case("xgb-reg-vector-leaf", _reg(XR(n_estimators=10, multi_strategy="multi_output_tree"),
                                     lambda: regression(2))),
    Case("xgb-reg-dart", _reg(XR(booster="dart", rate_drop=0.3, skip_drop=0.0, n_estimators=15,
                                 random_state=0))),
    Case("xgb-rf-reg", _reg(lambda: xgb.XGBRFRegressor(n_estimators=12, max_depth=5))),
    Case("xgb-reg-parallel-trees", _reg(XR(n_estimators=6, num_parallel_tree=3))),
    Case("xgb-reg-categorical-numpy", _categorical(XR(
        n_estimators=15, feature_types=CAT_TYPES, enable_categorical=True, max_cat_to_onehot=4)),
        **CAT),
    # --- rankers
    Case("xgb-rank-pairwise", _rank("rank:pairwise")),
    Case("xgb-rank-ndcg", _rank("rank:ndcg")),
    # --- raw boosters: Booster.predict(DMatrix(X))
    Case("xgb-booster-binary", _booster(
        {"objective": "binary:logistic", "max_depth": 4}, 15, lambda: classification(2)),
        expect=_booster_expect),
    Case("xgb-booster-softmax", _booster(
        {"objective": "multi:softmax", "num_class": 3, "max_depth": 3}, 8,
        lambda: classification(3)), expect=_booster_expect),
    Case("xgb-booster-softprob", _booster(
        {"objective": "multi:softprob", "num_class": 4, "max_depth": 3}, 8,
        lambda: classification(4)), expect=_booster_expect),
    Case("xgb-booster-poisson", _booster(
        {"objective": "count:poisson", "max_depth": 4}, 15, lambda: positive_target("counts")),
        expect=_booster_expect),
    Case("xgb-booster-categorical", _booster(
        {"objective": "reg:squarederror", "max_depth": 4, "feature_types": CAT_TYPES}, 15,
        categorical_numpy), expect=_booster_expect, **CAT),
]
