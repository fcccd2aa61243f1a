"""Frontend-specific behaviour of the scikit-learn boosting and IsolationForest converters:
typed errors for unfitted/unsupported models, tie rules, early stopping, the HGB categorical
encoder (numpy, pandas category dtype, object columns) and artifacts. Numeric agreement on edge
rows for every backend is the conformance suite's job (tests/conformance/cases_sklearn.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn._loss.loss import HalfBinomialLoss
from sklearn.datasets import make_classification, make_regression
from sklearn.dummy import DummyClassifier
from sklearn.ensemble import (
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    IsolationForest,
)
from sklearn.linear_model import LinearRegression

import peregrine
from peregrine.errors import InputError, NotFittedError, UnsupportedModelError
from peregrine.frontends import convert
from peregrine.ir import GraphBuilder, Op
from peregrine.ir.semantics import evaluate

RTOL, ATOL = 1e-5, 1e-6


def _same(compiled, model, X, methods=None):
    for method in methods or compiled.methods:
        got, want = getattr(compiled, method)(X), getattr(model, method)(X)
        assert got.shape == want.shape and got.dtype == want.dtype, method
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=method)
        else:
            np.testing.assert_array_equal(got, want, err_msg=method)


@pytest.fixture(scope="module")
def clf_data():
    return make_classification(300, 6, n_informative=4, random_state=0)


@pytest.fixture(scope="module")
def reg_data():
    return make_regression(300, 6, random_state=0)


# ------------------------------------------------------------------------- typed errors --


@pytest.mark.parametrize("model", [
    GradientBoostingClassifier(), GradientBoostingRegressor(),
    HistGradientBoostingClassifier(), HistGradientBoostingRegressor(), IsolationForest(),
], ids=lambda m: type(m).__name__)
def test_unfitted_models_raise_not_fitted(model):
    with pytest.raises(NotFittedError, match=type(model).__name__):
        convert(model)


def test_gb_init_estimator_that_reads_x_is_unsupported(reg_data):
    X, y = reg_data
    model = GradientBoostingRegressor(n_estimators=3, init=LinearRegression()).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="init estimator LinearRegression"):
        convert(model)


def test_gb_random_dummy_init_is_unsupported(clf_data):
    X, y = clf_data
    model = GradientBoostingClassifier(
        n_estimators=3, init=DummyClassifier(strategy="stratified", random_state=0)).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="stratified"):
        convert(model)


def test_hgb_loss_without_a_known_link_is_unsupported(reg_data):
    X, y = reg_data
    model = HistGradientBoostingRegressor(max_iter=3).fit(X, y)
    model._loss = HalfBinomialLoss()  # logit link: no regressor predicts through it
    with pytest.raises(UnsupportedModelError, match="HalfBinomialLoss"):
        convert(model)


def test_isolation_forest_with_one_sample_per_tree_is_unsupported(reg_data):
    model = IsolationForest(n_estimators=3, max_samples=1, random_state=0).fit(reg_data[0])
    with pytest.raises(UnsupportedModelError, match="max_samples"):
        convert(model)


def test_gb_rejects_nan_and_inf_like_sklearn(clf_data):
    X, y = clf_data
    spec = convert(GradientBoostingClassifier(n_estimators=3).fit(X, y))
    assert not spec.allow_nan and not spec.allow_inf
    compiled = peregrine.compile(GradientBoostingClassifier(n_estimators=3).fit(X, y),
                                 "reference")
    bad = X[:2].copy()
    bad[1, 3] = np.nan
    with pytest.raises(InputError, match="row 1, column 3"):
        compiled.predict(bad)


def test_hgb_and_iforest_accept_nan_and_inf(clf_data):
    X, y = clf_data
    rows = X[:6].copy()
    rows[0, 0], rows[1, 1], rows[2, 2] = np.nan, np.inf, -np.inf
    for model in (HistGradientBoostingClassifier(max_iter=5).fit(X, y),
                  IsolationForest(n_estimators=5, random_state=0).fit(X)):
        spec = convert(model)
        assert spec.allow_nan and spec.allow_inf
        _same(peregrine.compile(model, "reference"), model, rows)


# --------------------------------------------------------------------- labels and ties --


def test_binary_tie_rules_differ_between_gb_and_hgb(clf_data):
    """raw == 0 exactly: GradientBoosting predicts class 1 (raw >= 0), HGB class 0 (raw > 0)."""
    X, y = clf_data
    gb = GradientBoostingClassifier(n_estimators=3, init="zero").fit(X, y)
    for est in gb.estimators_[:, 0]:
        est.tree_.value[:] = 0.0
    hgb = HistGradientBoostingClassifier(max_iter=3).fit(X, y)
    hgb._baseline_prediction[:] = 0.0
    for (pred,) in hgb._predictors:
        pred.nodes["value"] = 0.0
    for model, label in ((gb, 1), (hgb, 0)):
        assert np.all(model.predict(X[:5]) == label)
        _same(peregrine.compile(model, "reference"), model, X[:5])


def test_decision_function_shape_and_string_labels():
    X, y = make_classification(300, 6, n_informative=4, n_classes=3, random_state=0)
    labels = np.array(["ant", "bee", "cow"], dtype=object)[y]
    for model in (GradientBoostingClassifier(n_estimators=4).fit(X, labels),
                  HistGradientBoostingClassifier(max_iter=4).fit(X, labels)):
        compiled = peregrine.compile(model, "reference")
        assert compiled.decision_function(X[:7]).shape == (7, 3)
        assert list(compiled.classes_) == ["ant", "bee", "cow"]
        _same(compiled, model, X)
    binary = GradientBoostingClassifier(n_estimators=4).fit(X, y > 0)
    assert peregrine.compile(binary, "reference").decision_function(X[:7]).shape == (7,)


def test_isolation_forest_predict_labels(clf_data):
    X, _ = clf_data
    model = IsolationForest(n_estimators=10, contamination=0.2, random_state=0).fit(X)
    compiled = peregrine.compile(model, "reference")
    out = compiled.predict(X)
    assert out.dtype == np.int64 and set(np.unique(out)) == {-1, 1}
    _same(compiled, model, X)


# ---------------------------------------------------------------------- early stopping --


def test_early_stopping_uses_fitted_stages_only(clf_data, reg_data):
    X, y = clf_data
    gb = GradientBoostingClassifier(n_estimators=200, n_iter_no_change=2, tol=1e-2,
                                    random_state=0).fit(X, y)
    assert gb.n_estimators_ < 200
    assert convert(gb).graph.forests()[0].n_trees == gb.n_estimators_
    _same(peregrine.compile(gb, "reference"), gb, X)
    Xr, yr = reg_data
    hgb = HistGradientBoostingRegressor(max_iter=200, early_stopping=True, n_iter_no_change=2,
                                        tol=1e-1, random_state=0).fit(Xr, yr)
    assert hgb.n_iter_ < 200
    assert convert(hgb).graph.forests()[0].n_trees == hgb.n_iter_
    _same(peregrine.compile(hgb, "reference"), hgb, Xr)


# ------------------------------------------------------------------- HGB categoricals ----


def _frame(n=500, seed=0, categories=("z", "y", "x", "w")):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "a": rng.normal(size=n),
        "c": pd.Categorical(rng.choice(["z", "x", "y", None], n), categories=list(categories)),
        "d": pd.Categorical(rng.choice([10, 20, 5], n)),
        "b": rng.normal(size=n),
    })


@pytest.fixture(scope="module")
def pandas_hgb():
    df = _frame()
    y = ((df.c == "x") | (df.a > 0.5) | (df.d == 20)).astype(int)
    return HistGradientBoostingClassifier(max_iter=15, random_state=0).fit(df, y), df


def test_hgb_pandas_category_dtype_maps_to_codes(pandas_hgb):
    model, df = pandas_hgb
    spec = convert(model)
    # the OrdinalEncoder sorts categories and drops unused ones; the map follows it
    assert spec.category_maps == {1: ("x", "y", "z"), 2: (5, 10, 20)}
    assert spec.graph.forests()[0].has_categorical
    compiled = peregrine.compile(model, "reference")
    _same(compiled, model, df)
    # predict-time frame: other category order, unseen values, NaN, columns reordered
    other = _frame(n=300, seed=1, categories=("q", "w", "x", "y", "z"))
    other.loc[::7, "c"] = "q"
    other.loc[::5, "d"] = np.nan
    _same(compiled, model, other)
    _same(compiled, model, other[["b", "d", "c", "a"]])


def test_hgb_object_column_named_categorical():
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"num": rng.normal(size=400),
                       "s": rng.choice(["red", "green", "blue"], 400).astype(object),
                       "k": rng.choice([3, 8, 11], 400)})
    y = 2.0 * (df.s == "green") + df.num + (df.k == 8)
    model = HistGradientBoostingRegressor(max_iter=10, categorical_features=["s", "k"]).fit(
        df, y)
    spec = convert(model)
    assert spec.category_maps == {1: ("blue", "green", "red")}  # "k" is encoded in the graph
    compiled = peregrine.compile(model, "reference")
    test = df.head(60).copy()
    test.loc[:9, "s"] = "purple"  # unseen -> missing, as sklearn's encoder does
    test.loc[10:19, "k"] = 4  # unseen integer category
    _same(compiled, model, test)


def test_hgb_numpy_categories_encoded_by_value():
    """Categorical values are matched exactly (OrdinalEncoder), so 2.5 is not category 2, 258
    is not 2 (no uint8 wrap-around) and -1 can be a real category."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 3))
    X[:, 0] = rng.choice([-1.0, 2.0, 3.0, 600.0], 600)
    y = (X[:, 0] == 2.0) * 3.0 + (X[:, 0] == -1.0) + X[:, 1]
    model = HistGradientBoostingRegressor(max_iter=10, categorical_features=[0]).fit(X, y)
    rows = np.repeat(X[:1], 12, axis=0)
    rows[:, 0] = [-1, -0.0, 0, 2, 2.5, 3, 258, 600, 600.5, np.nan, 1e30, -1e30]
    compiled = peregrine.compile(model, "reference")
    _same(compiled, model, rows)
    _same(compiled, model, rows.astype(np.float32))
    enc = [n for n in convert(model).graph.nodes if n.op is Op.ORDINAL_ENCODE]
    assert len(enc) == 1 and list(enc[0].attrs.columns) == [0]


def test_hgb_only_categorical_features():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 5, size=(300, 2)).astype(float)
    y = (X[:, 0] == 3) ^ (X[:, 1] == 1)
    model = HistGradientBoostingClassifier(max_iter=8, categorical_features=[0, 1]).fit(X, y)
    _same(peregrine.compile(model, "reference"), model, X)


def test_ordinal_encode_reference_rule():
    g = GraphBuilder()
    x = g.input(2)
    out = g.add(Op.ORDINAL_ENCODE, (x,), width=2, columns=(1,),
                categories=(np.array([-1.0, 0.0, 7.5]),))
    graph = g.build({"out": out})
    X = np.array([[5.0, -1.0], [5.0, -0.0], [5.0, 7.5], [5.0, 7.0], [5.0, np.nan],
                  [5.0, 100.0], [np.nan, -2.0]])
    got = evaluate(graph, X, ("out",))["out"]
    np.testing.assert_array_equal(got[:, 0], X[:, 0])
    np.testing.assert_array_equal(got[:, 1], [0, 1, 2, np.nan, np.nan, np.nan, np.nan])


def test_hgb_pandas_artifact_round_trip(pandas_hgb, tmp_path):
    model, df = pandas_hgb
    compiled = peregrine.compile(model, "reference")
    path = tmp_path / "hgb.peregrine"
    compiled.save(path)
    loaded = peregrine.load(path)
    _same(loaded, model, df)


# ------------------------------------------------------------------ IsolationForest -------


def test_isolation_forest_feature_subsets_map_to_input_columns(clf_data):
    X, _ = clf_data
    model = IsolationForest(n_estimators=8, max_features=2, random_state=0).fit(X)
    forest = convert(model).graph.forests()[0]
    used = set(forest.feature[forest.feature >= 0].tolist())
    expected = {int(f) for feats in model.estimators_features_ for f in feats}
    assert used <= expected and len(used) > 2
    _same(peregrine.compile(model, "reference"), model, X)


def test_isolation_forest_dataframe_feature_names(clf_data):
    X, _ = clf_data
    df = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    model = IsolationForest(n_estimators=6, random_state=0).fit(df)
    compiled = peregrine.compile(model, "reference")
    _same(compiled, model, df)
    # columns are matched by name, as sklearn requires them in fit order
    np.testing.assert_array_equal(compiled.score_samples(df[df.columns[::-1]]),
                                  model.score_samples(df))
