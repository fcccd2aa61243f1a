"""The pass manager and the column passes (feature-selection push-down and injection): every
pass is exact, so a model compiled with the passes on answers bit for bit as with them off, on
every backend, and as the source library does; explain() and artifacts report what each pass
changed."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import GradientBoostingClassifier, RandomForestRegressor
from sklearn.feature_selection import SelectKBest, f_regression
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

import peregrine
from peregrine import CompileOptions, UnsupportedModelError
from peregrine.ir import Op
from peregrine.passes import PIPELINE

BACKENDS = ["reference", "torch", "torchscript", "native"]
COLUMN_PASSES = ("inject", "pushdown")


def _frame(n=600, seed=0, n_cat=6, n_num=8):
    rng = np.random.default_rng(seed)
    data = {f"c{j}": rng.choice([f"v{k}" for k in range(12)], n) for j in range(n_cat)}
    data.update({f"x{j}": rng.normal(size=n) for j in range(n_num)})
    df = pd.DataFrame(data)
    df.loc[rng.random(n) < 0.05, "x0"] = np.nan
    y = (df["x1"].fillna(0) + (df["c0"] == "v3") * 1.5 + rng.normal(scale=0.3, size=n) > 0.4)
    return df, y.astype(int).to_numpy()


def _column_pipeline(seed=0):
    df, y = _frame(seed=seed)
    cats = [c for c in df.columns if c.startswith("c")]
    nums = [c for c in df.columns if c.startswith("x")]
    pre = ColumnTransformer([
        ("cat", OneHotEncoder(handle_unknown="ignore"), cats),
        ("num", make_pipeline(SimpleImputer(), StandardScaler()), nums),
    ], sparse_threshold=0)
    # shallow trees over 80 columns: the splits read a handful of them
    model = make_pipeline(pre, GradientBoostingClassifier(n_estimators=8, max_depth=2,
                                                          random_state=0))
    return model.fit(df, y), df


def _ops(compiled):
    return [n.op for n in compiled.spec.graph.nodes]


@pytest.mark.parametrize("backend", BACKENDS)
def test_injection_computes_only_what_the_trees_read_and_changes_no_bit(backend):
    model, df = _column_pipeline()
    rows = df.copy()
    rows.loc[rows.index[:5], "x2"] = [1e30, -1e30, np.nan, 0.0, -0.0]  # sklearn rejects inf
    on = peregrine.compile(model, backend)
    off = peregrine.compile(model, backend, options=CompileOptions(disable_passes=COLUMN_PASSES))
    for method in ("predict", "predict_proba", "decision_function"):
        a, b = getattr(on, method)(rows), getattr(off, method)(rows)
        np.testing.assert_array_equal(a, b)  # exact passes: the same bits
        want = getattr(model, method)(rows)
        if method == "predict":
            np.testing.assert_array_equal(a, want)
        else:
            np.testing.assert_allclose(a, want, rtol=1e-5, atol=1e-6)
    width = {n.op: n.width for n in on.spec.graph.nodes}
    full = {n.op: n.width for n in off.spec.graph.nodes}
    assert width[Op.ONE_HOT] < full[Op.ONE_HOT]  # unused indicator columns are gone
    report = {p["pass"]: p["changed"] for p in on.explain_dict()["passes"]}
    assert "no longer computed" in report["inject"]
    assert "inject" in on.explain()


@pytest.mark.parametrize("backend", BACKENDS)
def test_pushdown_folds_a_selector_into_the_forest(backend):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 24))
    y = X[:, 7] - 2 * X[:, 20] + rng.normal(scale=0.1, size=400)
    model = make_pipeline(SelectKBest(f_regression, k=16),
                          RandomForestRegressor(n_estimators=10, max_depth=5, random_state=0))
    model.fit(X, y)
    Xt = X.copy()
    Xt[:3, 7] = [1e30, -1e30, -0.0]  # SelectKBest rejects NaN and inf
    on = peregrine.compile(model, backend)
    off = peregrine.compile(model, backend, options=CompileOptions(disable_passes=COLUMN_PASSES))
    assert Op.SELECT not in _ops(on) and Op.SELECT in _ops(off)
    np.testing.assert_array_equal(on.predict(Xt), off.predict(Xt))
    np.testing.assert_allclose(on.predict(Xt), model.predict(Xt), rtol=1e-5, atol=1e-6)


def test_a_narrow_selection_stays_a_copy():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 100))
    model = make_pipeline(SelectKBest(f_regression, k=10), RandomForestRegressor(
        n_estimators=5, max_depth=4, random_state=0)).fit(X, X[:, 3] + X[:, 50])
    on = peregrine.compile(model, "native")
    assert Op.SELECT in _ops(on)
    np.testing.assert_allclose(on.predict(X), model.predict(X), rtol=1e-5, atol=1e-6)


def test_passes_option_selects_and_rejects_unknown_names():
    model, df = _column_pipeline(seed=1)
    none = peregrine.compile(model, "reference", options=CompileOptions(passes=()))
    assert none.explain_dict()["passes"] == []
    one = peregrine.compile(model, "reference", options=CompileOptions(passes=["dead_nodes"]))
    assert [p["pass"] for p in one.explain_dict()["passes"]] == ["dead_nodes"]
    every = peregrine.compile(model, "reference")
    assert [p["pass"] for p in every.explain_dict()["passes"]] == [p.name for p in PIPELINE]
    np.testing.assert_array_equal(none.predict_proba(df), every.predict_proba(df))
    with pytest.raises(UnsupportedModelError, match="unknown pass.*no_such_pass"):
        peregrine.compile(model, "reference", options=CompileOptions(passes=["no_such_pass"]))
    with pytest.raises(ValueError, match="sequence of pass names"):
        CompileOptions(disable_passes="inject")


def test_artifact_keeps_the_optimized_graph_and_the_pass_report(tmp_path):
    model, df = _column_pipeline(seed=2)
    compiled = peregrine.compile(model, "native")
    path = tmp_path / "m.peregrine"
    compiled.save(path)
    loaded = peregrine.load(path)
    assert loaded.explain_dict()["passes"] == compiled.explain_dict()["passes"]
    assert loaded.options.disable_passes == () and loaded.options.passes is None
    np.testing.assert_array_equal(loaded.predict_proba(df), compiled.predict_proba(df))


def test_duplicate_and_dead_nodes_are_removed():
    from peregrine.ir import GraphBuilder
    from peregrine.ir.semantics import evaluate
    from peregrine.passes import run_passes

    g = GraphBuilder()
    x = g.input(3)
    a = g.add(Op.AFFINE, (x,), scale=np.array([1.0, 2.0, 3.0]), shift=0.5)
    b = g.add(Op.AFFINE, (x,), scale=np.array([1.0, 2.0, 3.0]), shift=0.5)  # a's twin
    g.add(Op.UFUNC, (x,), name="exp")  # read by nothing
    out = g.add(Op.CONCAT, (a, b))
    graph = g.build({"raw": out})
    report: list = []
    opt = run_passes(graph, report=report)
    assert len(opt.nodes) == 3  # input, one affine, concat
    changed = {p["pass"]: p["changed"] for p in report}
    assert changed["duplicates"].startswith("merged 1") and "removed 1" in changed["dead_nodes"]
    X = np.random.default_rng(0).normal(size=(5, 3))
    np.testing.assert_array_equal(evaluate(opt, X, ("raw",))["raw"],
                                  evaluate(graph, X, ("raw",))["raw"])
