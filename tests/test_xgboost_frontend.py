"""XGBoost frontend behaviour beyond the shared conformance suite: typed errors, base margins per
objective, iteration ranges, the ``missing`` value, +-inf policy, pandas categories, artifacts."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb

import peregrine
from peregrine.backends import available_backends
from peregrine.errors import InputError, NotFittedError, UnsupportedModelError
from peregrine.frontends import convert
from peregrine.ir.semantics.trees import forest_predict

RTOL, ATOL = 1e-5, 1e-6


def data(n=400, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[::7, 2] = np.nan
    return X, rng


def compiled(model):
    return peregrine.compile(model, "reference")


# ----------------------------------------------------------------------------- errors --


@pytest.mark.parametrize("cls", [xgb.XGBClassifier, xgb.XGBRegressor, xgb.XGBRanker])
def test_unfitted_wrapper_raises_not_fitted(cls):
    with pytest.raises(NotFittedError, match="not fitted"):
        compiled(cls())


def test_untrained_booster_raises_not_fitted():
    with pytest.raises(NotFittedError, match="Booster"):
        compiled(xgb.Booster())


def test_gblinear_is_unsupported_and_named():
    X, rng = data()
    model = xgb.XGBRegressor(booster="gblinear", n_estimators=3).fit(X, rng.normal(size=len(X)))
    with pytest.raises(UnsupportedModelError, match="gblinear"):
        convert(model)
    with pytest.raises(UnsupportedModelError, match="gblinear"):
        convert(model.get_booster())


def test_unknown_objective_is_unsupported_and_named():
    X, rng = data()
    dtrain = xgb.DMatrix(X, label_lower_bound=np.ones(len(X)), label_upper_bound=np.full(len(X), 2))
    booster = xgb.train({"objective": "survival:aft"}, dtrain, 2)
    with pytest.raises(UnsupportedModelError, match="survival:aft.*supported: "):
        convert(booster)


def test_custom_objective_is_unsupported():
    X, rng = data()

    def squared(y, p):
        return p - y, np.ones_like(p)

    model = xgb.XGBRegressor(objective=squared, n_estimators=2).fit(X, rng.normal(size=len(X)))
    with pytest.raises(UnsupportedModelError, match="custom objective"):
        convert(model)


def test_multilabel_classifier_is_unsupported():
    X, rng = data()
    Y = (rng.normal(size=(len(X), 2)) > 0).astype(int)
    model = xgb.XGBClassifier(n_estimators=2, tree_method="hist").fit(X, Y)
    with pytest.raises(UnsupportedModelError, match="multi-label"):
        convert(model)


# --------------------------------------------------------------- base score / margins --

OBJECTIVES = [
    ("binary:logistic", "binary"), ("binary:logitraw", "binary"), ("reg:logistic", "unit"),
    ("binary:hinge", "binary"), ("reg:squarederror", "real"), ("reg:pseudohubererror", "real"),
    ("reg:absoluteerror", "real"), ("reg:squaredlogerror", "pos"), ("count:poisson", "count"),
    ("reg:tweedie", "pos"), ("reg:gamma", "pos"), ("survival:cox", "pos"),
    ("multi:softprob", "class"), ("multi:softmax", "class"), ("rank:pairwise", "class"),
    ("rank:ndcg", "class"), ("rank:map", "binary"),
]


def _label(kind, X, rng):
    z = X[:, 0] + np.nan_to_num(X[:, 1]) + 0.3 * rng.normal(size=len(X))
    return {
        "binary": (z > 0.4).astype(float), "unit": 1 / (1 + np.exp(-z)), "real": 3 * z + 1,
        "pos": np.exp(z / 2) + 0.1, "count": rng.poisson(np.exp(z / 2)).astype(float),
        "class": np.digitize(z, [-0.5, 0.5]).astype(float),
    }[kind]


@pytest.mark.parametrize("objective,kind", OBJECTIVES, ids=[o for o, _ in OBJECTIVES])
def test_margin_is_base_score_through_prob_to_margin(objective, kind):
    """The tree ensemble's output (trees + converted base_score) is XGBoost's margin."""
    X, rng = data()
    dtrain = xgb.DMatrix(X, _label(kind, X, rng))
    params = {"objective": objective, "max_depth": 3}
    if objective.startswith("multi:"):
        params["num_class"] = 3
    if objective.startswith("rank:"):
        dtrain.set_group([40] * 10)
    booster = xgb.train(params, dtrain, 4)
    forest = convert(booster).graph.forests()[0]
    want = booster.predict(xgb.DMatrix(X), output_margin=True)
    got = forest_predict(forest, X.astype(np.float32)).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
    out = compiled(booster).predict(X)
    np.testing.assert_allclose(out, booster.predict(xgb.DMatrix(X)), rtol=RTOL, atol=ATOL)


def test_vector_base_score_multi_target():
    X, rng = data()
    Y = np.column_stack([X[:, 0] * 5 + 3, np.nan_to_num(X[:, 2]) - 7])
    model = xgb.XGBRegressor(n_estimators=5, max_depth=3).fit(X, Y)
    base = json.loads(model.get_booster().save_raw(raw_format="json"))
    assert "," in base["learner"]["learner_model_param"]["base_score"]  # "[a,b]"
    got = compiled(model).predict(X)
    assert got.shape == (len(X), 2) and got.dtype == np.float32
    np.testing.assert_allclose(got, model.predict(X), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("objective", ["binary:logistic", "count:poisson", "reg:squarederror"])
@pytest.mark.parametrize("base_score", [None, 0.7])
def test_zero_rounds(objective, base_score):
    """No trees: an explicit base_score goes through ProbToMargin; the default one (intercept
    still to be estimated) is used as the margin itself (learner.cc NeedFit)."""
    X, rng = data()
    params = {"objective": objective}
    if base_score is not None:
        params["base_score"] = base_score
    booster = xgb.train(params, xgb.DMatrix(X, (X[:, 0] > 0).astype(float) + 1), 0)
    np.testing.assert_allclose(compiled(booster).predict(X), booster.predict(xgb.DMatrix(X)),
                               rtol=RTOL, atol=ATOL)


# ------------------------------------------------------------------ iteration ranges --


def _early_stopped(cls=xgb.XGBRegressor):
    X, rng = data(600)
    y = X[:, 0] * 2 + rng.normal(size=len(X))
    model = cls(n_estimators=40, max_depth=4, learning_rate=0.9, early_stopping_rounds=2)
    model.fit(X[:300], y[:300], eval_set=[(X[300:], y[300:])], verbose=False)
    assert model.best_iteration + 1 < model.get_booster().num_boosted_rounds()
    return model, X


def test_wrapper_uses_best_iteration_booster_uses_all_trees():
    model, X = _early_stopped()
    booster = model.get_booster()
    wrapper_spec, booster_spec = convert(model), convert(booster)
    assert wrapper_spec.graph.forests()[0].n_trees == model.best_iteration + 1
    assert booster_spec.graph.forests()[0].n_trees == booster.num_boosted_rounds()
    np.testing.assert_allclose(compiled(model).predict(X), model.predict(X), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(compiled(booster).predict(X), booster.predict(xgb.DMatrix(X)),
                               rtol=RTOL, atol=ATOL)


def test_multiclass_parallel_trees_best_iteration():
    X, rng = data(600)
    y = np.digitize(X[:, 0] + rng.normal(size=len(X)) * 0.5, [-0.5, 0.5])
    model = xgb.XGBClassifier(n_estimators=30, max_depth=3, num_parallel_tree=2,
                              learning_rate=0.9, early_stopping_rounds=2, subsample=0.7,
                              colsample_bynode=0.7)
    model.fit(X[:300], y[:300], eval_set=[(X[300:], y[300:])], verbose=False)
    assert convert(model).graph.forests()[0].n_trees == 3 * 2 * (model.best_iteration + 1)
    c = compiled(model)
    np.testing.assert_allclose(c.predict_proba(X), model.predict_proba(X), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(c.predict(X), model.predict(X))


# ------------------------------------------------------------------- missing and inf --


def test_missing_value_compared_after_float32_cast():
    X, rng = data()
    X[::5, 1] = -999.0
    y = np.where(X[:, 1] == -999.0, 5.0, X[:, 1])
    model = xgb.XGBRegressor(n_estimators=5, max_depth=3, missing=-999.0).fit(X, y)
    Xt = X[:6].copy()
    # float64 values that round to float32(-999) are missing to XGBoost as well
    Xt[:, 1] = [-999.0, -999.00001, -998.99999, -999.001, np.nan, 0.0]
    for backend in available_backends():  # every backend must honour compare_dtype
        c = peregrine.compile(model, backend)
        np.testing.assert_allclose(c.predict(Xt), model.predict(Xt), rtol=RTOL, atol=ATOL,
                                   err_msg=backend)
        np.testing.assert_allclose(c.predict(Xt.astype(np.float32)), model.predict(Xt),
                                   rtol=RTOL, atol=ATOL, err_msg=backend)


@pytest.mark.parametrize("missing", [np.nan, 0.0, np.inf, -np.inf])
def test_wrapper_accepts_inf_like_inplace_predict(missing):
    X, rng = data()
    Xtr = np.where(np.isnan(X), missing, X)
    model = xgb.XGBClassifier(n_estimators=5, max_depth=3, missing=missing)
    model.fit(Xtr, (X[:, 0] > 0).astype(int))
    Xt = Xtr[:40].copy()
    Xt[::2, 0], Xt[1::2, 0], Xt[::3, 3] = np.inf, -np.inf, 0.0
    c = compiled(model)
    np.testing.assert_allclose(c.predict_proba(Xt), model.predict_proba(Xt), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(c.predict(Xt), model.predict(Xt))


def test_booster_rejects_inf_like_dmatrix():
    X, rng = data()
    booster = xgb.train({"max_depth": 3}, xgb.DMatrix(X, X[:, 0]), 3)
    Xt = X[:4].copy()
    Xt[1, 3] = np.inf
    with pytest.raises(xgb.core.XGBoostError, match="inf"):
        booster.predict(xgb.DMatrix(Xt))
    with pytest.raises(InputError, match="infinity at row 1, column 3"):
        compiled(booster).predict(Xt)
    Xt[1, 3] = np.nan  # NaN is fine for both
    np.testing.assert_allclose(compiled(booster).predict(Xt), booster.predict(xgb.DMatrix(Xt)),
                               rtol=RTOL, atol=ATOL)


# ------------------------------------------------------------------------ categorical --


def test_categorical_direction_in_set_goes_right():
    """A category in the stored set goes RIGHT; others, negatives (even -0.5), codes past the
    bitset and codes >= 2**24 go LEFT; NaN takes default_left."""
    rng = np.random.default_rng(0)
    c = rng.integers(0, 6, 600).astype(float)
    y = np.isin(c, [1, 4]).astype(float) * 10
    booster = xgb.train({"max_depth": 1, "eta": 1.0, "base_score": 0.0, "max_cat_to_onehot": 1},
                        xgb.DMatrix(c[:, None], y, feature_types=["c"], enable_categorical=True),
                        1)
    tree = json.loads(booster.save_raw(raw_format="json"))["learner"]["gradient_booster"]
    tree = tree["model"]["trees"][0]
    assert tree["split_type"][0] == 1
    in_set = sorted(tree["categories"])
    assert in_set in ([1, 4], [0, 2, 3, 5])
    left_value = tree["split_conditions"][tree["left_children"][0]]
    right_value = tree["split_conditions"][tree["right_children"][0]]
    out_set = [v for v in range(6) if v not in in_set]
    probe = np.array(in_set + [in_set[0] + 0.9] + out_set + [-0.5, -1, 6, 31, 32, 1e6, 2.0**24,
                                                             2.0**31, np.nan])
    got = compiled(booster).predict(probe[:, None])
    want = booster.predict(xgb.DMatrix(probe[:, None], feature_types=["c"],
                                       enable_categorical=True))
    np.testing.assert_array_equal(got, want)
    n_right = len(in_set) + 1
    np.testing.assert_allclose(got[:n_right], right_value, rtol=1e-6)
    np.testing.assert_allclose(got[n_right:-1], left_value, rtol=1e-6)
    default = left_value if tree["default_left"][0] else right_value
    np.testing.assert_allclose(got[-1], default, rtol=1e-6)


def _pandas_model():
    rng = np.random.default_rng(2)
    n = 600
    colors = ["red", "green", "blue", "teal", "plum"]
    df = pd.DataFrame({
        "x": rng.normal(size=n),
        "color": pd.Categorical(rng.choice(colors, n), categories=colors),
        "level": pd.Categorical(rng.choice([10, 30, 20], n)),
    })
    df.loc[::9, "color"] = np.nan
    y = df["color"].isin(["green", "plum"]).astype(float) * 2 + df["x"] + (df["level"] == 20)
    model = xgb.XGBRegressor(n_estimators=8, max_depth=3, enable_categorical=True,
                             max_cat_to_onehot=1).fit(df, y)
    return model, df


def test_pandas_categories_recorded_in_code_order():
    model, df = _pandas_model()
    spec = convert(model)
    assert spec.feature_names == ("x", "color", "level")
    assert spec.category_maps == {1: ("red", "green", "blue", "teal", "plum"), 2: (10, 20, 30)}


def test_pandas_frames_are_recoded_like_xgboost():
    model, df = _pandas_model()
    c = compiled(model)
    np.testing.assert_allclose(c.predict(df), model.predict(df), rtol=RTOL, atol=ATOL)
    reordered = df.copy()  # same values, categories listed in another order
    reordered["color"] = pd.Categorical(df["color"].astype(object),
                                        categories=["plum", "teal", "blue", "green", "red"])
    np.testing.assert_allclose(c.predict(reordered), model.predict(reordered), rtol=RTOL,
                               atol=ATOL)
    subset = df.iloc[:20].copy()  # fewer categories than at fit time, plus NaN
    subset["color"] = pd.Categorical(["plum", None, "green", "red"] * 5)
    np.testing.assert_allclose(c.predict(subset), model.predict(subset), rtol=RTOL, atol=ATOL)


def test_unseen_pandas_categories_are_refused():
    """XGBoost 3.x raises for a category it was not trained on when it lies past the largest
    training category, and inside the range answers for the next larger one (its lower-bound
    search has no equality check); a value unseen at fit time is an InputError here in both
    cases, naming the column and the row. Known values in a frame whose dtype lists extra,
    unused categories are answered (XGBoost refuses the whole frame)."""
    model, df = _pandas_model()
    c = compiled(model)
    rows = df.iloc[:6].copy()
    for column, unseen, cats in (("color", "amber", ["amber", "blue", "green", "plum", "red",
                                                     "teal"]),
                                 ("color", "zinc", ["blue", "green", "plum", "red", "teal",
                                                    "zinc"]),
                                 ("level", 15, [10, 15, 20, 30]),
                                 ("level", 99, [10, 20, 30, 99])):
        bad = rows.copy()
        values = bad[column].astype(object).to_numpy().copy()
        values[3] = unseen
        bad[column] = pd.Categorical(values, categories=cats)
        with pytest.raises(InputError, match=rf"column '{column}' holds .*{unseen}.* \(row 3\)"):
            c.predict(bad)
        if unseen in ("zinc", 99):  # past the largest: XGBoost raises too
            with pytest.raises(Exception, match="not in the training set"):
                model.predict(bad)
        known = bad.drop(index=bad.index[3])  # the extra category listed, not used
        np.testing.assert_allclose(c.predict(known), model.predict(rows.drop(index=rows.index[3])),
                                   rtol=RTOL, atol=ATOL)


def test_numpy_codes_for_pandas_trained_model():
    model, df = _pandas_model()
    X = np.column_stack([df["x"], df["color"].cat.codes, df["level"].cat.codes]).astype(float)
    X[X[:, 1] < 0, 1] = np.nan
    np.testing.assert_allclose(compiled(model).predict(X), model.predict(X), rtol=RTOL, atol=ATOL)


# ---------------------------------------------------------------- registry & artifacts --


def test_supported_models_lists_xgboost():
    rows = {r["model"]: r for r in peregrine.supported_models() if r["library"] == "xgboost"}
    assert {"XGBClassifier", "XGBRegressor", "XGBRanker", "Booster"} <= set(rows)
    assert rows["XGBClassifier"]["methods"] == ["predict", "predict_proba"]


def test_classifier_output_dtypes_match():
    X, rng = data()
    model = xgb.XGBClassifier(n_estimators=3, max_depth=2).fit(X, (X[:, 0] > 0).astype(int))
    c = compiled(model)
    assert c.predict(X).dtype == model.predict(X).dtype
    assert c.predict_proba(X).dtype == model.predict_proba(X).dtype == np.float32
    np.testing.assert_array_equal(c.classes_, model.classes_)


def test_artifact_round_trip_keeps_missing_and_categories(tmp_path):
    model, df = _pandas_model()
    model.set_params(missing=-1.0)
    c = compiled(model)
    path = tmp_path / "xgb.peregrine"
    c.save(path)
    loaded = peregrine.load(path)
    np.testing.assert_array_equal(loaded.predict(df), c.predict(df))
    assert loaded.spec.category_maps == c.spec.category_maps


@pytest.mark.parametrize("make", [
    lambda X, y: xgb.XGBClassifier(n_estimators=30, max_depth=5).fit(X, y),
    lambda X, y: xgb.XGBClassifier(n_estimators=10, max_depth=3, objective="multi:softprob")
    .fit(X, y % 3),
    lambda X, y: xgb.XGBRegressor(n_estimators=20, max_depth=4, base_score=0.3).fit(X, X[:, 0]),
])
def test_model_json_reads_the_same_with_orjson_and_the_standard_library(make):
    """The frontend reads the booster's JSON with orjson where installed: every number must
    be the double the standard library reads (the thresholds decide splits bit for bit)."""
    orjson = pytest.importorskip("orjson")
    from peregrine.frontends.xgboost import _read_json

    rng = np.random.default_rng(5)
    X = rng.normal(size=(600, 5)) * np.array([1e-30, 1.0, 1e6, 3.3, 1e30])
    X[::7, 1] = np.nan
    y = (X[:, 1] > 0).astype(int) + (X[:, 2] > 0)
    data = bytes(make(X, y).get_booster().save_raw(raw_format="json"))

    def same(a, b):
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return len(a) == len(b) and all(same(u, v) for u, v in zip(a, b))
        if isinstance(a, float):
            return np.float64(a).tobytes() == np.float64(b).tobytes()
        return type(a) is type(b) and a == b

    assert same(orjson.loads(data), json.loads(data))
    assert same(_read_json(data), json.loads(data))
    assert same(_read_json(b'{"a": NaN, "b": [Infinity, 1.5]}'),
                json.loads(b'{"a": NaN, "b": [Infinity, 1.5]}'))
