"""Precision.BFLOAT16 / FLOAT16 (backends/torch/lowp.py): the arithmetic ops compute in the low
dtype on the torch backends, trees and what they read stay exact, and compile reports the
measured error per output (passes/measure.py, ``measure_program``)."""

import numpy as np
import pytest
from sklearn.datasets import make_classification, make_regression
from sklearn.decomposition import PCA
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVR

import peregrine
from peregrine import CompileOptions
from peregrine.options import Precision

LOW = ("bfloat16", "float16")
# the low dtypes' unit roundoff: bfloat16 keeps 8 significant bits, float16 11
EPS = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def _entry(compiled, name="measured_error"):
    found = [p for p in compiled.passes if p["pass"] == name]
    assert len(found) == 1, compiled.passes
    return found[0]


def _clf_data(n=1500, d=20, classes=3):
    X, y = make_classification(n, d, n_informative=8, n_classes=classes, random_state=0)
    return X * 5.0 + 2.0, y  # unscaled: the scaler's statistics matter


@pytest.fixture(scope="module")
def scaled_logreg():
    X, y = _clf_data()
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000)).fit(X, y), X


def test_levels_exist_and_unknown_levels_raise():
    assert Precision("bfloat16") is Precision.BFLOAT16
    assert Precision("float16") is Precision.FLOAT16
    for level in LOW:
        opts = CompileOptions(precision=level)
        assert CompileOptions.from_json(opts.to_json()) == opts
    with pytest.raises(ValueError, match="bfloat16, float16"):
        CompileOptions(precision="float8")


@pytest.mark.parametrize("level", LOW)
@pytest.mark.parametrize("backend", ["torch", "torchscript"])
def test_error_report_present_and_bounded(scaled_logreg, level, backend):
    model, X = scaled_logreg
    c = peregrine.compile(model, backend, options=CompileOptions(precision=level))
    e = _entry(c)
    assert e["rows_from"] == "synthetic" and e["rows"] == 256
    assert e["changed"].startswith(f"the {level} program against the exact graph")
    assert set(e["errors"]) == set(c.spec.graph.outputs)
    # probabilities within a few units of the low dtype's rounding of inputs, weights and sums
    assert 0 < e["errors"]["predict_proba"]["max_abs"] < 8 * EPS[level]
    assert e["errors"]["predict"]["labels_changed"] <= 3
    # the program really runs in the low dtype, and the report says what it saw
    p = c.predict_proba(X)
    assert p.dtype == np.float64
    diff = np.abs(p - model.predict_proba(X)).max()
    assert 0 < diff < 8 * EPS[level]
    assert (c.predict(X) != model.predict(X)).mean() < 0.01
    assert f"precision: {level}" in c.explain() and "measured_error" in c.explain()


def test_bfloat16_relative_error_on_scaled_data():
    X, y = make_regression(2000, 30, n_targets=5, noise=1.0, random_state=1)
    model = make_pipeline(StandardScaler(), LinearRegression()).fit(X * 3 + 1, y)
    c = peregrine.compile(model, "torch", options=CompileOptions(precision="bfloat16"),
                          sample_input=X[:300] * 3 + 1)
    e = _entry(c)
    assert e["rows_from"] == "sample_input" and e["rows"] == 300
    scale = np.abs(model.predict(X[:300] * 3 + 1)).max()
    # relative to the outputs' range (a prediction near 0 has no relative error to speak of)
    assert e["errors"]["predict"]["max_abs"] / scale < 2.0 ** -7


@pytest.mark.parametrize("level", LOW)
def test_tree_models_keep_their_labels_and_scores(level):
    X, y = _clf_data()
    X[::7, 3] = np.nan  # both forests learn where missing values go
    rows = X.copy()
    rows[::11, 5] = np.inf
    rows[::13, 6] = -np.inf
    opts = CompileOptions(precision=level)
    for model in (HistGradientBoostingClassifier(max_iter=30, random_state=0).fit(X, y),
                  RandomForestClassifier(20, max_depth=8, random_state=0).fit(X, y)):
        Xm = rows if isinstance(model, HistGradientBoostingClassifier) else X
        for backend in ("torch", "torchscript"):
            c = peregrine.compile(model, backend, options=opts)
            np.testing.assert_array_equal(c.predict(Xm), model.predict(Xm))
            np.testing.assert_allclose(c.predict_proba(Xm), model.predict_proba(Xm),
                                       rtol=1e-5, atol=1e-6)
            e = _entry(c)
            assert e["errors"]["predict"]["labels_changed"] == 0


@pytest.mark.parametrize("level", LOW)
def test_scaler_before_forest_stays_exact(level):
    X, y = _clf_data()
    model = make_pipeline(StandardScaler(), RandomForestClassifier(
        20, max_depth=8, random_state=0)).fit(X, y)
    auto = peregrine.compile(model, "torch")
    low = peregrine.compile(model, "torch", options=CompileOptions(precision=level))
    np.testing.assert_array_equal(low.predict_proba(X), auto.predict_proba(X))
    np.testing.assert_array_equal(low.predict(X), model.predict(X))
    assert f"0 arithmetic node(s) compute in {level}" in low.explain()


def test_other_backends_run_the_level_as_auto(scaled_logreg):
    model, X = scaled_logreg
    auto = peregrine.compile(model, "native")
    low = peregrine.compile(model, "native", options=CompileOptions(precision="bfloat16"))
    np.testing.assert_array_equal(low.predict_proba(X), auto.predict_proba(X))
    note = _entry(low, "precision")
    assert "ran as 'auto'" in note["changed"] and "native" in note["changed"]
    assert not [p for p in low.passes if p["pass"] == "measured_error"]


def test_save_load_keeps_the_level_and_report(scaled_logreg, tmp_path):
    model, X = scaled_logreg
    c = peregrine.compile(model, "torch", options=CompileOptions(precision="bfloat16"))
    c.save(tmp_path / "low.peregrine")
    loaded = peregrine.load(tmp_path / "low.peregrine")
    assert loaded.options.precision is Precision.BFLOAT16
    assert loaded.explain_dict()["passes"] == c.explain_dict()["passes"]
    np.testing.assert_array_equal(loaded.predict_proba(X), c.predict_proba(X))
    scripted = peregrine.load(tmp_path / "low.peregrine", backend="torchscript")
    np.testing.assert_array_equal(scripted.predict_proba(X), c.predict_proba(X))


def test_network_and_pca_chain_compute_low():
    X, y = _clf_data(n=800)
    mlp = MLPClassifier((32, 32), max_iter=300, random_state=0).fit(
        StandardScaler().fit_transform(X), y)
    chain = make_pipeline(StandardScaler(), PCA(8), LogisticRegression(max_iter=1000)).fit(X, y)
    Xs = StandardScaler().fit(X).transform(X)
    for model, rows in ((mlp, Xs), (chain, X)):
        c = peregrine.compile(model, "torch", options=CompileOptions(precision="float16"))
        assert "compute in float16 (none)" not in c.explain()
        # the scaler reaches the products only through one LINEAR: folded into its weights
        assert ("folded into the product" in c.explain()) == (model is chain)
        np.testing.assert_allclose(c.predict_proba(rows), model.predict_proba(rows),
                                   atol=8 * EPS["float16"] * 4)
        assert (c.predict(rows) != model.predict(rows)).mean() < 0.01


@pytest.mark.gpu
@pytest.mark.parametrize("level", LOW)
def test_cuda_low_precision(scaled_logreg, level):
    model, X = scaled_logreg
    c = peregrine.compile(model, "torch", device="cuda", options=CompileOptions(precision=level))
    assert np.abs(c.predict_proba(X) - model.predict_proba(X)).max() < 8 * EPS[level]
    assert _entry(c)["errors"]["predict"]["labels_changed"] <= 3
    forest = RandomForestClassifier(10, max_depth=6, random_state=0).fit(X, model.predict(X))
    cf = peregrine.compile(forest, "torch", device="cuda", options=CompileOptions(precision=level))
    np.testing.assert_array_equal(cf.predict(X), forest.predict(X))


def test_kernel_products_low_rbf_exact_and_the_report_matches_the_program():
    X = np.random.default_rng(0).normal(size=(400, 12))
    y = X[:, 0] + X[:, 1] ** 2
    opts = CompileOptions(precision="float16")
    poly = SVR(kernel="poly", degree=2).fit(X, y)
    c = peregrine.compile(poly, "torchscript", options=opts, sample_input=X)
    assert "kernel_" in c.explain().split("precision: ")[1].split(";")[0]
    e = _entry(c)["errors"]["predict"]
    # the report is the program's deviation from the exact graph on those very rows
    exact = peregrine.compile(poly, "reference").predict(X)
    assert e["max_abs"] == pytest.approx(np.abs(c.predict(X) - exact).max(), rel=1e-12)
    assert e["max_abs"] < 2.0 ** -6 * np.abs(y).max()
    # |x|^2 - 2 x.v + |v|^2 cancels for near points: an RBF kernel stays float64
    rbf = peregrine.compile(SVR().fit(X, y), "torch", options=opts)
    assert "kernel_" not in rbf.explain().split("precision: ")[1].split(";")[0]
