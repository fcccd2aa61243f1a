"""LightGBM frontend behaviour beyond the shared conformance suite: errors, pandas categories,
iteration selection, and the decision-rule corner cases probed one value at a time against
LightGBM's own predict."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

lgb = pytest.importorskip("lightgbm")

import peregrine  # noqa: E402
from peregrine.errors import InputError, NotFittedError, UnsupportedModelError  # noqa: E402
from peregrine.frontends import convert  # noqa: E402
from peregrine.frontends.lightgbm import parse_model_string  # noqa: E402
from peregrine.ir.forest import LIGHTGBM_ZERO_THRESHOLD  # noqa: E402

Z = LIGHTGBM_ZERO_THRESHOLD
QUIET = dict(verbose=-1, n_jobs=1, random_state=0)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = X[:, 0] + 0.5 * X[:, 1] + 0.1 * rng.normal(size=n)
    return X, y


def _same(compiled, model, X, method="predict"):
    got, want = getattr(compiled, method)(X), getattr(model, method)(X)
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    else:
        assert (got == want).all()


# ------------------------------------------------------------------------------ errors --


@pytest.mark.parametrize("cls", [lgb.LGBMClassifier, lgb.LGBMRegressor, lgb.LGBMRanker])
def test_unfitted_estimator(cls):
    with pytest.raises(NotFittedError, match=cls.__name__):
        peregrine.compile(cls(), "reference")


@pytest.mark.parametrize("params, match", [
    ({"objective": "regression", "reg_sqrt": True}, "reg_sqrt"),
    ({"objective": "regression", "linear_tree": True}, "linear_tree"),
    ({"objective": "cross_entropy_lambda"}, "cross_entropy_lambda"),
])  # fmt: skip
def test_unsupported_parameters(params, match):
    X, y = _data()
    booster = lgb.train({**params, "verbose": -1}, lgb.Dataset(X, np.abs(y) / 4), 3)
    with pytest.raises(UnsupportedModelError, match=match):
        convert(booster)


def test_prediction_early_stopping_is_rejected():
    X, y = _data()
    model = lgb.LGBMRegressor(n_estimators=5, pred_early_stop=True, **QUIET).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="pred_early_stop"):
        convert(model)


def test_wrong_feature_count():
    X, y = _data()
    compiled = peregrine.compile(lgb.LGBMRegressor(n_estimators=3, **QUIET).fit(X, y),
                                 "reference")
    with pytest.raises(InputError, match="4"):
        compiled.predict(X[:, :3])


def test_supported_models_lists_lightgbm():
    names = {r["model"] for r in peregrine.supported_models() if r["library"] == "lightgbm"}
    assert {"LGBMClassifier", "LGBMRegressor", "LGBMRanker", "Booster"} <= names


# ----------------------------------------------------------------- decision semantics --


def _categorical_booster():
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(0, 40, 800).astype(float), rng.normal(size=800)])
    effect = rng.normal(size=40)
    y = effect[X[:, 0].astype(int)] + 0.1 * X[:, 1]
    params = {"objective": "regression", "verbose": -1, "min_data_per_group": 5,
              "cat_smooth": 1.0, "num_leaves": 15}
    return lgb.train(params, lgb.Dataset(X, y, categorical_feature=[0]), 10), X


@pytest.mark.parametrize("value", [-0.5, -0.0, 0.5, 1.7, 31.9, 32.0, 39.99, -1.0, -1e-300,
                                   40.0, 1000.0, 2.0**31 - 1, 2.0**31, 2.0**40, 1e300,
                                   np.inf, -np.inf, np.nan])
def test_categorical_values_match_lightgbm(value):
    """static_cast<int> truncates (-0.5 -> category 0, 1.7 -> 1); NaN, negatives, codes past
    the bitset and huge values go right."""
    booster, X = _categorical_booster()
    compiled = peregrine.compile(booster, "reference")
    rows = X[:20].copy()
    rows[:, 0] = value
    for dtype in (np.float64, np.float32):
        r = rows.astype(dtype)
        np.testing.assert_allclose(compiled.predict(r), booster.predict(r), rtol=1e-12)


def test_categorical_minus_half_is_category_zero():
    booster, X = _categorical_booster()
    rows = X[:30].copy()
    zero, minus_half = rows.copy(), rows.copy()
    zero[:, 0], minus_half[:, 0] = 0.0, -0.5
    np.testing.assert_array_equal(booster.predict(zero), booster.predict(minus_half))
    compiled = peregrine.compile(booster, "reference")
    np.testing.assert_array_equal(compiled.predict(minus_half), booster.predict(zero))


def _zero_band_booster(**params):
    rng = np.random.default_rng(0)
    X = rng.choice([-1.0, 0.0, 1.0], size=(600, 2))
    y = (X[:, 0] < 0) * 2.0 + (X[:, 1] > 0) + 0.01 * rng.normal(size=600)
    base = {"objective": "regression", "num_leaves": 4, "verbose": -1, "min_data_in_leaf": 5}
    return lgb.train({**base, **params}, lgb.Dataset(X, y), 3)


@pytest.mark.parametrize("params", [{}, {"zero_as_missing": True}, {"use_missing": False}],
                         ids=["nan", "zero", "none"])
def test_zero_band_thresholds(params):
    """LightGBM's row reader turns |x| <= 1e-35f into 0.0 before any tree sees it, so a threshold
    at -1e-35f sends x = -1e-35f right although x <= threshold."""
    booster = _zero_band_booster(**params)
    _, trees, _ = parse_model_string(booster.model_to_string())
    assert any(float(t) == -Z for tree in trees for t in tree["threshold"].split())
    vals = np.array([-Z, np.nextafter(-Z, -1), np.nextafter(-Z, 1), Z, np.nextafter(Z, 1),
                     np.nextafter(Z, -1), 0.0, -0.0, -1e-36, 1e-36, np.nan, np.inf, -np.inf])
    X = np.column_stack([vals, vals[::-1]])
    compiled = peregrine.compile(booster, "reference")
    for dtype in (np.float64, np.float32):
        np.testing.assert_allclose(compiled.predict(X.astype(dtype)),
                                   booster.predict(X.astype(dtype)), rtol=1e-12)


def test_missing_type_encoding():
    """None: NaN compared as 0.0; Zero: NaN and |x|<=1e-35f follow default_left; NaN: NaN does."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 2))
    X[::4, 0] = np.nan
    X[1::5, 1] = 0.0
    y = np.nan_to_num(X[:, 0], nan=3.0) + X[:, 1]
    for params, kind in [({}, "nan"), ({"zero_as_missing": True}, "zero"),
                         ({"use_missing": False}, "none")]:
        model = lgb.LGBMRegressor(n_estimators=8, **params, **QUIET).fit(X, y)
        forest = convert(model).graph.forests()[0]
        internal = forest.feature >= 0
        assert forest.has_missing_zero == (kind == "zero")
        if kind == "none":  # nan_left is exactly (0 <= threshold)
            assert (forest.nan_left[internal] == (forest.threshold[internal] >= 0)).all()
        T = X[:50].copy()
        T[::3, 1] = np.nan
        T[1::3, 0] = 1e-36
        _same(peregrine.compile(model, "reference"), model, T)


def test_infinite_training_values_keep_exact_thresholds():
    """With +-inf in the training data LightGBM splits at -DBL_MAX; dump_model() would print
    -1e300 (AvoidInf), so the text model is what is parsed."""
    X, y = _data()
    X[::5, 0] = -np.inf
    y[::5] = -10.0
    model = lgb.LGBMRegressor(n_estimators=5, **QUIET).fit(X, y)
    forest = convert(model).graph.forests()[0]
    assert (forest.threshold == -np.finfo(np.float64).max).any()
    T = X[:40].copy()
    T[:10, 0] = [-np.inf, -1e308, -1.7e308, -np.finfo(np.float64).max, -1e300, np.inf,
                 np.nan, 0.0, 1e300, -2e300]
    _same(peregrine.compile(model, "reference"), model, T)


def test_single_leaf_trees():
    X, y = _data()
    model = lgb.LGBMRegressor(n_estimators=4, min_child_samples=400, **QUIET).fit(X, y)
    forest = convert(model).graph.forests()[0]
    assert forest.n_nodes == forest.n_trees  # every tree is one leaf
    _same(peregrine.compile(model, "reference"), model, X[:20])


# ------------------------------------------------------------------------ iterations --


def test_sklearn_early_stopping_uses_best_iteration():
    X, y = _data(600)
    model = lgb.LGBMRegressor(n_estimators=200, learning_rate=0.3, **QUIET)
    model.fit(X[:400], y[:400], eval_set=[(X[400:], y[400:])],
              callbacks=[lgb.early_stopping(2, verbose=False)])
    assert 0 < model.best_iteration_ < 200
    _same(peregrine.compile(model, "reference"), model, X)


def test_booster_best_iteration_set_by_hand():
    X, y = _data()
    booster = lgb.train({"objective": "regression", "verbose": -1}, lgb.Dataset(X, y), 20,
                        keep_training_booster=True)
    booster.best_iteration = 7
    compiled = peregrine.compile(booster, "reference")
    assert convert(booster).graph.forests()[0].n_trees == 7
    np.testing.assert_allclose(compiled.predict(X), booster.predict(X), rtol=1e-12)


def test_booster_from_model_string_and_multiclass_shape():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = np.argmax(X, axis=1)
    trained = lgb.train({"objective": "multiclass", "num_class": 3, "verbose": -1},
                        lgb.Dataset(X, y), 5)
    booster = lgb.Booster(model_str=trained.model_to_string())
    compiled = peregrine.compile(booster, "reference")
    assert compiled.predict(X).shape == (300, 3)
    np.testing.assert_allclose(compiled.predict(X), booster.predict(X), rtol=1e-12)


# ------------------------------------------------------------------ custom objectives --


def _l2(y_true, y_pred):
    return y_pred - y_true, np.ones_like(y_pred)


def _logloss(y_true, y_pred):
    p = 1.0 / (1.0 + np.exp(-y_pred))
    return p - y_true, p * (1.0 - p)


def test_custom_objective_returns_raw_scores():
    X, y = _data()
    reg = lgb.LGBMRegressor(objective=_l2, n_estimators=5, **QUIET).fit(X, y)
    _same(peregrine.compile(reg, "reference"), reg, X)
    clf = lgb.LGBMClassifier(objective=_logloss, n_estimators=5, **QUIET).fit(X, y > 0)
    compiled = peregrine.compile(clf, "reference")
    for method in ("predict", "predict_proba"):  # LightGBM returns raw scores from both
        _same(compiled, clf, X, method)


# ----------------------------------------------------------------------------- pandas --


def _frame(seed=0, n=600):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "num": rng.normal(size=n),
        "color": pd.Categorical(rng.choice(["red", "green", "blue", "teal"], n),
                                categories=["teal", "red", "green", "blue"]),
        "size": pd.Categorical(rng.choice(["S", "M", "L"], n), categories=["S", "M", "L"],
                               ordered=True),
        "count": rng.integers(0, 5, n).astype(float),
    })  # fmt: skip
    y = (df["num"] + (df["color"] == "red") * 1.5 - (df["color"] == "blue")
         + df["size"].cat.codes * 0.7 + 0.2 * rng.normal(size=n))  # fmt: skip
    return df, y.to_numpy()


def test_pandas_categories_are_recorded_and_mapped():
    df, y = _frame()
    model = lgb.LGBMRegressor(n_estimators=15, min_data_per_group=5, **QUIET).fit(df, y)
    spec = convert(model)
    assert spec.feature_names == ("num", "color", "size", "count")
    # 'color' is a categorical feature; ordered 'size' is trained on its codes as a number
    assert spec.category_maps == {1: ("teal", "red", "green", "blue"), 2: ("S", "M", "L")}
    compiled = peregrine.compile(model, "reference")
    _same(compiled, model, df)

    test = df.iloc[:60].copy()
    colors = test["color"].astype(object).to_numpy().copy()
    colors[:6] = "mauve"  # unseen at fit time: LightGBM maps it to NaN
    test["color"] = pd.Categorical(colors)  # categories in another order than at fit time
    np.testing.assert_allclose(compiled.predict(test), model.predict(test), rtol=1e-12)
    assert not np.allclose(model.predict(test)[:6], model.predict(df.iloc[:6]))

    # columns are matched by name; LightGBM itself would read them by position
    shuffled = test[["count", "size", "num", "color"]]
    np.testing.assert_allclose(compiled.predict(shuffled), model.predict(test), rtol=1e-12)
    with pytest.raises(InputError, match="count"):
        compiled.predict(test.drop(columns=["count"]))


def test_pandas_booster_and_artifact_round_trip(tmp_path):
    df, y = _frame(1)
    booster = lgb.train({"objective": "regression", "verbose": -1, "min_data_per_group": 5},
                        lgb.Dataset(df, y), 10)
    reloaded = lgb.Booster(model_str=booster.model_to_string())
    compiled = peregrine.compile(reloaded, "reference")
    np.testing.assert_allclose(compiled.predict(df), booster.predict(df), rtol=1e-12)
    path = tmp_path / "lgb.peregrine"
    compiled.save(path)
    loaded = peregrine.load(path)
    np.testing.assert_allclose(loaded.predict(df.iloc[:50]), booster.predict(df.iloc[:50]),
                               rtol=1e-12)


def test_unrecoverable_category_columns_are_rejected():
    """An explicit categorical_feature list that leaves a pandas category column numeric, plus a
    numeric column made categorical: which DataFrame column each category list belongs to
    cannot be told from the model."""
    df, y = _frame()
    df = df.drop(columns=["size"])
    df["count"] = df["count"].astype(int)
    model = lgb.LGBMRegressor(n_estimators=5, **QUIET).fit(df, y, categorical_feature=["count"])
    with pytest.raises(UnsupportedModelError, match="category columns"):
        convert(model)


def test_numpy_trained_model_has_no_feature_names():
    X, y = _data()
    assert convert(lgb.LGBMRegressor(n_estimators=3, **QUIET).fit(X, y)).feature_names is None
    booster = lgb.train({"verbose": -1}, lgb.Dataset(X, y), 3)
    assert convert(booster).feature_names is None


def test_integer_numpy_input_is_cast_to_float32_as_lightgbm_does():
    """LightGBM converts a non-float numpy array to float32 before predicting; above 2**24 that
    rounds (2**24 + 1 -> 2**24), which decides splits between neighbouring integers."""
    base = 2 ** 24
    x = np.arange(base, base + 64, dtype=np.int64)
    X = np.column_stack([x, x % 3])
    y = (x % 2 == 1).astype(float) + (x > base + 31)
    model = lgb.LGBMRegressor(n_estimators=5, num_leaves=16, min_child_samples=1,
                                   min_data_in_bin=1, max_bin=255, verbose=-1).fit(
        X.astype(np.float64), y)
    want = model.predict(X)  # int64 input: lightgbm rounds it through float32
    assert not np.allclose(want, model.predict(X.astype(np.float64)))  # the cast matters here
    for backend in ("reference", "native", "torch"):
        cm = peregrine.compile(model, backend)
        np.testing.assert_allclose(cm.predict(X), want, rtol=1e-12, err_msg=backend)
        np.testing.assert_allclose(cm.predict(X.astype(np.float64)),
                                   model.predict(X.astype(np.float64)), rtol=1e-12)
    torch = pytest.importorskip("torch")
    cm = peregrine.compile(model, "torch")
    np.testing.assert_allclose(cm.predict(torch.from_numpy(X)), want, rtol=1e-12)


def test_integer_input_dtype_survives_save_and_load(tmp_path):
    X = np.arange(40, dtype=np.float64).reshape(20, 2)
    model = lgb.LGBMRegressor(n_estimators=2, min_child_samples=1, verbose=-1).fit(
        X, X[:, 0])
    cm = peregrine.compile(model, "reference")
    cm.save(tmp_path / "m.peregrine")
    assert peregrine.load(tmp_path / "m.peregrine").spec.int_input_dtype == "float32"


def test_model_text_numbers_parse_as_python_does():
    """The frontend casts the model text's number lists with NumPy: the same doubles and
    integers as float() / int() on every token, on a model with extreme thresholds."""
    from peregrine.frontends.lightgbm import _floats, _ints

    rng = np.random.default_rng(3)
    X = rng.normal(size=(800, 4)) * np.array([1e-30, 1.0, 1e8, 1e30])
    X[::9, 1] = np.nan
    y = np.nan_to_num(X[:, 1]) * 3 + (X[:, 2] > 0)
    model = lgb.LGBMRegressor(n_estimators=15, num_leaves=31, verbose=-1).fit(X, y)
    _, trees, _ = parse_model_string(model.booster_.model_to_string())
    for tree in trees:
        for key in ("threshold", "leaf_value", "split_gain", "internal_value"):
            if key in tree:
                want = np.array([float(v) for v in tree[key].split()], dtype=np.float64)
                assert _floats(tree[key]).tobytes() == want.tobytes(), key
        for key in ("split_feature", "left_child", "right_child", "decision_type"):
            if key in tree:
                want = np.array([int(v) for v in tree[key].split()], dtype=np.int64)
                np.testing.assert_array_equal(_ints(tree[key]), want)


def test_a_model_text_with_missing_numbers_is_refused():
    """Each field is parsed across all trees at once, so a tree whose line lost a number (or
    holds a word) would shift every later tree's nodes: the counts are checked instead."""
    from peregrine.errors import UnsupportedModelError
    from peregrine.frontends.lightgbm import forest_from_text

    X = np.random.default_rng(4).normal(size=(300, 3))
    model = lgb.LGBMRegressor(n_estimators=3, num_leaves=7, verbose=-1).fit(X, X[:, 0])
    header, trees, _ = parse_model_string(model.booster_.model_to_string())
    forest_from_text(model, header, trees)  # as written: fine
    for key, edit in (("threshold", lambda v: v.rsplit(" ", 1)[0]),
                      ("left_child", lambda v: v.replace(v.split()[0], "x", 1)),
                      ("leaf_value", lambda v: v + " 0.5")):
        broken = [dict(t) for t in trees]
        broken[1][key] = edit(broken[1][key])
        with pytest.raises(UnsupportedModelError, match=key):
            forest_from_text(model, header, broken)


def test_model_text_is_the_wrappers_text():
    """frontends.lightgbm.model_text (one C call) returns model_to_string()'s text, up to the
    pandas categories the wrapper appends (read from the booster instead): a model over the
    wrapper's first 1 MiB buffer, an early-stopped one (best_iteration), a categorical frame."""
    from peregrine.frontends.lightgbm import model_text

    rng = np.random.default_rng(4)
    X = rng.normal(size=(3000, 6))
    y = X[:, 0] + np.sin(X[:, 1])
    big = lgb.LGBMRegressor(n_estimators=120, num_leaves=127, verbose=-1).fit(X, y)
    stopped = lgb.LGBMRegressor(n_estimators=200, verbose=-1).fit(
        X[:2000], y[:2000], eval_set=[(X[2000:], y[2000:])],
        callbacks=[lgb.early_stopping(3, verbose=False)])
    assert 0 < stopped.booster_.best_iteration < 200
    frame = pd.DataFrame({"c": pd.Categorical(rng.choice(["u", "v", "w"], 3000)),
                          "x": X[:, 0]})
    cat = lgb.LGBMRegressor(n_estimators=10, verbose=-1).fit(frame, y)
    for model in (big, stopped, cat):
        want = model.booster_.model_to_string()
        got = model_text(model.booster_)
        assert want.startswith(got) and "pandas_categorical" not in got
        assert want[len(got):].strip().startswith("pandas_categorical")
    assert len(big.booster_.model_to_string()) > 1 << 20
