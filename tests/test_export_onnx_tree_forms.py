"""The ONNX export's forest forms (docs/export.md, "Speed" and "Trees"): double thresholds that
decide as float32(x) against the float32 ones (no input Cast), NaN-left nodes on negated
columns (no missing-value tracks), a random forest's average in the tree op. Each is checked
against the source library on rows with NaN, +-inf and values at and beside the thresholds,
and for the graph it writes."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")

from onnx import helper  # noqa: E402
from sklearn.datasets import make_classification  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    ExtraTreesClassifier,
    GradientBoostingClassifier,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

import peregrine  # noqa: E402
from peregrine.export import export_onnx  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402
from peregrine.export.onnx_trees import float32_split_as_double  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6
F32 = np.finfo(np.float32)


def test_float32_split_as_double_decides_as_the_float32_cast():
    """x <= T iff float32(x) <= t32 on the doubles where it can change: the midpoints to both
    float32 neighbours, the doubles beside them, the float32 values themselves, for random,
    subnormal, zero, extreme and infinite thresholds (NumPy's cast: round to nearest even,
    overflow past FLT_MAX + half an ulp)."""
    rng = np.random.default_rng(0)
    t32 = np.concatenate([
        rng.normal(size=2000).astype(np.float32),
        (rng.normal(size=500) * 1e30).astype(np.float32),
        np.asarray([0.0, -0.0, F32.tiny, -F32.tiny, 1e-45, -1e-45, F32.max, -F32.max, 1.0,
                    -1.0, 0.5, np.inf, -np.inf, np.nan], np.float32)])
    T = float32_split_as_double(t32)
    assert T.dtype == np.float64
    with np.errstate(over="ignore", invalid="ignore"):
        up = np.nextafter(t32, np.float32(np.inf)).astype(np.float64)
        down = np.nextafter(t32, np.float32(-np.inf)).astype(np.float64)
        up = np.where(t32 == F32.max, 2.0 ** 128, up)
        down = np.where(t32 == -F32.max, -(2.0 ** 128), down)
        t = t32.astype(np.float64)
        cands = [t, (t + up) / 2, (t + down) / 2, up, down]
        cands += [np.nextafter(c, s) for c in cands[1:3] for s in (np.inf, -np.inf)]
        cands += [np.full_like(t, v) for v in (np.inf, -np.inf, 0.0, -0.0, 2.0 ** -150,
                                                 3.4028235677973366e38, 1e308, -1e308)]
        for x in cands:
            ok = ~np.isnan(x)
            want = x[ok].astype(np.float32) <= t32[ok]
            np.testing.assert_array_equal(x[ok] <= T[ok], want)


def _rows(model_rows, forest, rng, n=3000):
    """Data rows, 10% NaN, +-FLT_MAX (scikit-learn's trees reject larger values), and rows
    whose columns sit at the forest's thresholds, their float32 neighbours and the midpoints
    between them."""
    X = model_rows[rng.integers(0, len(model_rows), n)].astype(np.float64)
    X[rng.random(X.shape) < 0.1] = np.nan
    X[rng.random(X.shape) < 0.02] = float(F32.max)
    X[rng.random(X.shape) < 0.02] = -float(F32.max)
    internal = forest.feature >= 0
    t = forest.threshold[internal].astype(np.float32)
    f = forest.feature[internal]
    up = np.nextafter(t, np.float32(np.inf)).astype(np.float64)
    edges = [t.astype(np.float64), up, (t.astype(np.float64) + up) / 2,
             np.nextafter((t.astype(np.float64) + up) / 2, np.inf), forest.threshold[internal]]
    k = rng.integers(0, len(f), n)
    for e in edges:
        ok = np.abs(e[k]) <= F32.max  # a missing-value split's threshold is +inf
        X[np.arange(n)[ok], f[k][ok]] = e[k][ok]
        k = rng.integers(0, len(f), n)
    return X


def _export(model, tmp_path, methods):
    compiled = peregrine.compile(model, backend="reference")
    path = tmp_path / "m.onnx"
    report = export_onnx(compiled, path, methods=methods)
    forest = next(n for n in compiled.spec.graph.nodes if n.op.name == "TREE_ENSEMBLE")
    return onnx.load(str(path)), session(str(path)), report, forest.attrs.forest


def _tree_ops(model):
    return [n for n in model.graph.node if n.op_type.startswith("TreeEnsemble")]


@pytest.mark.parametrize("make", [
    lambda: RandomForestClassifier(30, max_depth=8, random_state=0),
    lambda: ExtraTreesClassifier(30, max_depth=8, random_state=0),
    lambda: RandomForestClassifier(20, random_state=0),  # pure leaves: exact ties
    lambda: GradientBoostingClassifier(n_estimators=30, random_state=0),
])
def test_forests_match_the_library(tmp_path, make):
    """The forms against scikit-learn on rows at the thresholds, NaN and +-FLT_MAX: labels
    identical, probabilities within the contract; the file has no input Cast, no
    missing-value tracks and (random forests) no Div after the tree op."""
    X, y = make_classification(800, 8, n_informative=5, n_redundant=0, n_classes=3,
                               random_state=0)
    m = make()
    nan = not isinstance(m, GradientBoostingClassifier)  # scikit-learn's GBDT rejects NaN
    if nan:
        X[::13, 2] = np.nan  # a missing-value split in the trees that see it
    m.fit(X, y)
    model, sess, report, forest = _export(m, tmp_path, ["predict", "predict_proba"])
    rows = _rows(X, forest, np.random.default_rng(1))
    if not nan:
        rows = np.nan_to_num(rows, nan=0.5)
    label, proba = sess.run([report.methods["predict"], report.methods["predict_proba"]],
                            {"X": rows})
    np.testing.assert_array_equal(label, m.predict(rows))
    np.testing.assert_allclose(proba, m.predict_proba(rows), rtol=RTOL, atol=ATOL)
    ops = [n.op_type for n in model.graph.node]
    assert not any(n.input[0] == "X" for n in model.graph.node if n.op_type == "Cast")
    for node in _tree_ops(model):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        assert not any(attrs["nodes_missing_value_tracks_true"])
    if isinstance(m, (RandomForestClassifier, ExtraTreesClassifier)):
        assert "Div" not in ops
    # NaN-left nodes read the negated columns (GBDT's trees send NaN right: none there)
    assert ("Neg" in ops) == bool(forest.nan_left[forest.feature >= 0].any())
    assert ("Neg" in ops) == nan


def test_nan_left_edge_thresholds(tmp_path):
    """NaN-left nodes at threshold +inf (every row left) and at a float32 threshold whose
    negation sits at the type's extremes: validated on export against the compiled model
    (generated rows: NaN, +-inf where accepted) and compared with it here."""
    X = np.asarray([[0.0, 1.0], [1.0, 0.0], [2.0, 1.0], [3.0, 0.0]] * 5)
    y = np.asarray([0, 1, 0, 1] * 5)
    tree = DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, y)
    compiled = peregrine.compile(tree, backend="reference")
    forest = compiled.spec.graph.node("tree_ensemble_1").attrs.forest
    internal = np.flatnonzero(forest.feature >= 0)
    forest.nan_left[internal] = True
    forest.threshold[internal[0]] = np.inf
    if len(internal) > 1:
        forest.threshold[internal[1]] = float(F32.max)
    path = tmp_path / "t.onnx"
    export_onnx(compiled, path, methods=["predict_proba"])
    big = float(F32.max)  # scikit-learn's trees reject larger values
    rows = np.asarray([[np.nan, np.nan], [big, -big], [-big, big], [0.5, np.nan], [1.5, 0.5],
                       [np.nan, 1.0], [3.0, 0.0], [big, 1.0], [-0.0, 0.0]])
    (got,) = session(str(path)).run(None, {"X": rows})
    np.testing.assert_allclose(got, compiled.predict_proba(rows), rtol=0, atol=0)


def test_random_forest_regressor_average_in_the_op(tmp_path):
    """A regressor's average is the op's AVERAGE (double sum divided by the tree count, as
    scikit-learn divides its double sum): within a few ulps of scikit-learn."""
    X, _ = make_classification(600, 6, random_state=0)
    yr = X[:, 0] * 3.0 + X[:, 1] ** 2
    X[::11, 3] = np.nan
    m = RandomForestRegressor(25, max_depth=7, random_state=0).fit(X, yr)
    model, sess, report, forest = _export(m, tmp_path, ["predict"])
    rows = _rows(X, forest, np.random.default_rng(2))
    (got,) = sess.run(None, {"X": rows})
    np.testing.assert_allclose(got, m.predict(rows), rtol=1e-12, atol=1e-12)
    assert "Div" not in [n.op_type for n in model.graph.node]


def test_xgboost_binary_sigmoid_in_float32(tmp_path):
    """XGBoost's binary probabilities as its rule computes them, in float32 from the float32
    margin: the forest sums negated leaves (-v), then Exp, Add, Reciprocal, 1 - p in float32
    and no Cast to double and back; against XGBoost on NaN rows and on margins out to the
    float32 exp's range (relative in the tails, labels identical)."""
    xgb = pytest.importorskip("xgboost")
    X, y = make_classification(1500, 8, n_informative=6, random_state=0)
    X[::9, 1] = np.nan
    m = xgb.XGBClassifier(n_estimators=60, max_depth=5, learning_rate=0.8).fit(X, y)
    rng = np.random.default_rng(3)
    rows = X[rng.integers(0, len(X), 4000)] * rng.choice([1.0, 4.0, 30.0], (4000, 1))
    rows[rng.random(rows.shape) < 0.1] = np.nan
    model, sess, report, _ = _export(m, tmp_path, ["predict", "predict_proba"])
    label, proba = sess.run([report.methods["predict"], report.methods["predict_proba"]],
                            {"X": rows})
    want = m.predict_proba(rows)
    assert proba.dtype == np.float32
    np.testing.assert_array_equal(label, m.predict(rows))
    np.testing.assert_allclose(proba, want, rtol=RTOL, atol=ATOL)
    tail = want > 1e-30  # relative where the rule's value is not subnormal-small
    np.testing.assert_allclose(proba[tail], want[tail], rtol=1e-5, atol=0)
    assert want.min() < 1e-6  # the tails were reached
    producer = {o: nd.op_type for nd in model.graph.node for o in nd.output}
    (exp,) = [nd for nd in model.graph.node if nd.op_type == "Exp"]
    assert producer[exp.input[0]] == "TreeEnsemble"  # -v from the forest itself
    # no double detour: nothing widens the margin, the output is the float32 Concat itself
    assert not [nd for nd in model.graph.node
                if nd.op_type == "Cast" and producer.get(nd.input[0]) == "TreeEnsemble"]
    assert producer[report.methods["predict_proba"]] == "Concat"


@pytest.mark.parametrize("depth", [8, None])  # None: pure leaves, many exact ties
def test_binary_forest_probabilities_as_one_class(tmp_path, depth):
    """A two-class random forest exported for predict_proba alone: one double TreeEnsemble
    over class 1 (averaged in the op) and class 0 as 1 - p; class 1 within a few ulps of
    scikit-learn's, class 0 within (2n + 5) eps absolute; with predict too, the vector form
    and its exact labels."""
    X, y = make_classification(800, 8, n_informative=5, n_redundant=0, random_state=0)
    X[::13, 2] = np.nan
    m = RandomForestClassifier(40, max_depth=depth, random_state=0).fit(X, y)
    model, sess, report, forest = _export(m, tmp_path, ["predict_proba"])
    rows = _rows(X, forest, np.random.default_rng(4))
    (proba,) = sess.run(None, {"X": rows})
    want = m.predict_proba(rows)
    (tree,) = _tree_ops(model)
    attrs = {a.name: helper.get_attribute_value(a) for a in tree.attribute}
    assert tree.op_type == "TreeEnsemble" and attrs["n_targets"] == 1
    np.testing.assert_allclose(proba[:, 1], want[:, 1], rtol=1e-13, atol=0)
    np.testing.assert_allclose(proba[:, 0], want[:, 0], rtol=0,
                               atol=(2 * 40 + 5) * np.finfo(float).eps)
    model, sess, report, _ = _export(m, tmp_path, ["predict", "predict_proba"])
    assert [t.op_type for t in _tree_ops(model)] == ["TreeEnsembleRegressor"]
    label, proba = sess.run([report.methods["predict"], report.methods["predict_proba"]],
                            {"X": rows})
    np.testing.assert_array_equal(label, m.predict(rows))
    np.testing.assert_allclose(proba, want, rtol=6e-8, atol=0)
