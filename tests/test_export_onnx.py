"""ONNX export (``CompiledModel.export_onnx``, ``peregrine export``): one case per model family
exported, checked with onnx.checker and run in ONNX Runtime (one intra-op thread) against the
source library's own methods on rows with NaN where the source accepts it; refused ops name
themselves; the Triton repository's files match the ONNX file."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("sklearn")

from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.datasets import make_classification, make_regression  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import (  # noqa: E402
    Normalizer,
    OneHotEncoder,
    PolynomialFeatures,
    StandardScaler,
)
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

import peregrine  # noqa: E402
from peregrine.errors import UnsupportedModelError, ValidationError  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6


def _rows(n=400, d=6, seed=0, nan=True):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if nan:
        X[rng.random((n, d)) < 0.1] = np.nan
    return X


def _cls(n=600, d=6, k=3, seed=0):
    X, y = make_classification(n, d, n_informative=4, n_redundant=0, n_classes=k,
                               random_state=seed)
    return X, y


def _reg(n=600, d=6, seed=0):
    return make_regression(n, d, noise=1.0, random_state=seed)


def _run(path, X):
    sess = session(str(path))
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, {"X": np.ascontiguousarray(X, np.float64)})))


def _check(model, X, tmp_path, *, sample=None, proba=True):
    compiled = peregrine.compile(model, backend="reference")
    path = tmp_path / "m.onnx"
    report = compiled.export_onnx(path, sample=sample)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    out = _run(path, X)
    if hasattr(model, "predict_proba") and proba:
        np.testing.assert_array_equal(out["label"], model.predict(X))
        np.testing.assert_allclose(out["probabilities"], model.predict_proba(X),
                                   rtol=RTOL, atol=ATOL)
    else:
        np.testing.assert_allclose(out["variable"], model.predict(X), rtol=RTOL, atol=ATOL)
    return report, out


# -------------------------------------------------------------------- model families --
def test_random_forest_classifier_nan(tmp_path):
    X, y = _cls()
    m = RandomForestClassifier(25, max_depth=7, random_state=0).fit(X, y)
    report, _ = _check(m, _rows(), tmp_path)
    assert report.methods == {"predict": "label", "predict_proba": "probabilities"}
    assert report.inputs == {"X": ("float64", ["N", 6])}
    assert report.rows > 0 and report.deviations["predict"]["mismatches"] == 0


def test_random_forest_regressor_and_string_labels(tmp_path):
    X, y = _reg()
    _check(RandomForestRegressor(10, max_depth=6, random_state=0).fit(X, y), _rows(), tmp_path)
    Xc, yc = _cls(k=2)
    labels = np.where(yc == 1, "spam", "ham")
    m = DecisionTreeClassifier(max_depth=5, random_state=0).fit(Xc, labels)
    _, out = _check(m, _rows(), tmp_path)
    assert out["label"].dtype == object and set(out["label"]) <= {"spam", "ham"}


def test_gradient_boosting(tmp_path):
    X, y = _reg()
    _check(GradientBoostingRegressor(n_estimators=40, random_state=0).fit(X, y),
           _rows(nan=False), tmp_path)
    Xc, yc = _cls(k=2)
    _check(GradientBoostingClassifier(n_estimators=30, random_state=0).fit(Xc, yc),
           _rows(nan=False), tmp_path)
    Xc, yc = _cls(k=3)
    _check(GradientBoostingClassifier(n_estimators=20, random_state=0).fit(Xc, yc),
           _rows(nan=False), tmp_path)


def test_xgboost(tmp_path):
    xgb = pytest.importorskip("xgboost")
    X, y = _cls(k=3)
    X[::7, 1] = np.nan
    m = xgb.XGBClassifier(n_estimators=30, max_depth=4, random_state=0).fit(X, y)
    _check(m, _rows(), tmp_path)
    Xr, yr = _reg()
    r = xgb.XGBRegressor(n_estimators=30, max_depth=5, missing=-999.0).fit(Xr, yr)
    Xt = _rows()
    Xt[::5, 2] = -999.0
    _check(r, Xt, tmp_path)


def test_lightgbm(tmp_path):
    lgb = pytest.importorskip("lightgbm")
    X, y = _reg()
    X[::6, 0] = np.nan
    m = lgb.LGBMRegressor(n_estimators=40, num_leaves=15, verbose=-1).fit(X, y)
    _check(m, _rows(), tmp_path)
    Xc, yc = _cls(k=2)
    c = lgb.LGBMClassifier(n_estimators=30, num_leaves=15, verbose=-1).fit(Xc, yc)
    _check(c, _rows(), tmp_path)


def test_linear_models(tmp_path):
    X, y = _cls(k=3)
    Xt = _rows(nan=False)
    _check(LogisticRegression(max_iter=500).fit(X, y), Xt, tmp_path)
    Xr, yr = _reg()
    _check(LinearRegression().fit(Xr, yr), Xt, tmp_path)
    _check(make_pipeline(PolynomialFeatures(3), Ridge()).fit(Xr, yr), Xt, tmp_path)
    pipe = make_pipeline(SimpleImputer(), Normalizer(norm="l1"), StandardScaler(),
                         LogisticRegression(max_iter=500)).fit(X, y)
    _check(pipe, _rows(), tmp_path)


def test_mlp(tmp_path):
    X, y = _cls(k=3)
    m = MLPClassifier((16, 8), max_iter=300, random_state=0).fit(X, y)
    _check(m, _rows(nan=False), tmp_path)
    m2 = MLPClassifier((8,), activation="tanh", max_iter=300, random_state=0).fit(X, y % 2)
    _check(m2, _rows(nan=False), tmp_path)


def test_column_transformer_one_hot_into_trees(tmp_path):
    rng = np.random.default_rng(1)
    n = 500
    X = np.column_stack([rng.normal(size=n), rng.integers(0, 4, n).astype(float),
                         rng.normal(size=n), rng.integers(0, 3, n).astype(float)])
    y = (X[:, 0] + (X[:, 1] == 2) - (X[:, 3] == 0) > 0).astype(int)
    ct = ColumnTransformer([("num", StandardScaler(), [0, 2]),
                            ("cat", OneHotEncoder(handle_unknown="ignore"), [1, 3])])
    pipe = make_pipeline(ct, RandomForestClassifier(15, max_depth=6, random_state=0)).fit(X, y)
    Xt = X[:200].copy()
    Xt[::9, 1] = 7.0  # unseen category: all zeros, as handle_unknown="ignore"
    _check(pipe, Xt, tmp_path, sample=Xt)


# ------------------------------------------------------------------ refusals, errors --
def test_refused_op_names_itself(tmp_path):
    # KNN and QUANTILE, the examples here before, export now (tests/test_export_knn.py,
    # test_export_quantile_spline.py); KNN_IMPUTE refuses on purpose and says why
    from sklearn.impute import KNNImputer

    X, y = _cls()
    X = X.copy()
    X[::5, 1] = np.nan
    m = KNNImputer(n_neighbors=3).fit(X)
    compiled = peregrine.compile(m, backend="reference")
    with pytest.raises(UnsupportedModelError,
                       match=r"op knn_impute.*equal distances.*reference, torch"):
        compiled.export_onnx(tmp_path / "k.onnx")
    assert not (tmp_path / "k.onnx").exists()


def test_old_opset_and_bad_batch_refused(tmp_path):
    X, y = _reg()
    compiled = peregrine.compile(LinearRegression().fit(X, y), backend="reference")
    with pytest.raises(UnsupportedModelError, match="opset 11"):
        compiled.export_onnx(tmp_path / "m.onnx", opset=11)
    with pytest.raises(ValueError, match="batch"):
        compiled.export_onnx(tmp_path / "m.onnx", batch=0)
    report = compiled.export_onnx(tmp_path / "m.onnx", batch=8, sample=X[:8])
    assert report.inputs["X"][1] == [8, 6]
    # a fixed batch validates on any row count (generated rows, a sample of 13): whole
    # batches, the last one filled up
    for sample in (None, X[:13]):
        report = compiled.export_onnx(tmp_path / "m.onnx", batch=8, sample=sample)
        assert report.inputs["X"][1] == [8, 6] and report.rows == (512 if sample is None
                                                                    else 13)


def test_validation_catches_a_wrong_lowering(tmp_path, monkeypatch):
    from peregrine.export import onnx_graph
    from peregrine.export.onnx import load_lowerings
    from peregrine.ir.ops import Op

    X, y = _reg()
    compiled = peregrine.compile(LinearRegression().fit(X, y), backend="reference")
    real = load_lowerings()[Op.LINEAR]  # the table is filled on the first export otherwise

    def off_by_a_bit(e, n, ins):
        return e.op("Mul", [real(e, n, ins), e.const(np.asarray(1.001))])

    monkeypatch.setitem(onnx_graph.LOWERINGS, Op.LINEAR, off_by_a_bit)
    with pytest.raises(ValidationError, match="predict differs"):
        compiled.export_onnx(tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


# --------------------------------------------------------------------------- Triton --
def _pbtxt(text):
    """The few fields of config.pbtxt the layout promises, read from its text."""
    def entries(kind):
        block = re.search(kind + r" \[\n(.*?)\n\]", text, re.S).group(1)
        return [dict(name=re.search(r'name: "([^"]+)"', b).group(1),
                     data_type=re.search(r"data_type: (\w+)", b).group(1),
                     dims=[int(d) for d in re.search(r"dims: \[ ([-\d, ]+) \]", b)
                           .group(1).split(",")],
                     reshape="reshape" in b)
                for b in re.findall(r"\{\n(.*?)\n  \}", block, re.S)]

    return {"name": re.search(r'^name: "([^"]+)"', text, re.M).group(1),
            "platform": re.search(r'platform: "([^"]+)"', text).group(1),
            "max_batch_size": int(re.search(r"max_batch_size: (\d+)", text).group(1)),
            "dynamic_batching": "dynamic_batching {" in text,
            "input": entries("input"), "output": entries("output")}


def test_triton_repository_layout(tmp_path):
    from peregrine.export import write_triton_repository

    X, y = _cls()
    compiled = peregrine.compile(RandomForestClassifier(5, random_state=0).fit(X, y),
                                 backend="reference")
    write_triton_repository(compiled, tmp_path / "repo", max_batch_size=256)
    root = tmp_path / "repo" / "randomforestclassifier"
    assert sorted(os.listdir(root)) == ["1", "config.pbtxt"]
    cfg = _pbtxt((root / "config.pbtxt").read_text())
    assert cfg["name"] == "randomforestclassifier"
    assert cfg["platform"] == "onnxruntime_onnx"
    assert cfg["max_batch_size"] == 256 and cfg["dynamic_batching"]
    model = onnx.load(str(root / "1" / "model.onnx"))
    onnx.checker.check_model(model)
    types = {1: "TYPE_FP32", 11: "TYPE_FP64", 7: "TYPE_INT64", 8: "TYPE_STRING"}
    for kind, values in (("input", model.graph.input), ("output", model.graph.output)):
        got = {e["name"]: e for e in cfg[kind]}
        assert set(got) == {v.name for v in values}
        for v in values:
            t = v.type.tensor_type
            dims = [d.dim_value for d in t.shape.dim[1:]]
            assert t.shape.dim[0].dim_param  # the batch axis is dynamic
            assert got[v.name]["data_type"] == types[t.elem_type]
            assert got[v.name]["dims"] == (dims or [1])
            assert got[v.name]["reshape"] == (not dims)


# ----------------------------------------------------------------------------- CLI --
def test_cli_export(tmp_path, capsys):
    from peregrine.cli import main

    lgb = pytest.importorskip("lightgbm")
    X, y = _reg()
    booster = lgb.LGBMRegressor(n_estimators=10, num_leaves=7, verbose=-1).fit(X, y).booster_
    model_file = tmp_path / "model.txt"
    booster.save_model(str(model_file))
    assert main(["export", str(model_file), "--format", "onnx",
                 "-o", str(tmp_path / "m.onnx")]) == 0
    out = _run(tmp_path / "m.onnx", X[:50])
    np.testing.assert_allclose(out["variable"], booster.predict(X[:50]), rtol=RTOL, atol=ATOL)
    assert "validated predict" in capsys.readouterr().out

    artifact = tmp_path / "m.peregrine"
    peregrine.compile(booster).save(artifact)
    assert main(["export", str(artifact), "--format", "triton", "-o", str(tmp_path / "repo"),
                 "--name", "lgbm"]) == 0
    assert (tmp_path / "repo" / "lgbm" / "1" / "model.onnx").exists()
    assert (tmp_path / "repo" / "lgbm" / "config.pbtxt").exists()

    # --format shared-library: tests/test_export_library.py


def test_featurizers_and_ensembles(tmp_path):
    from sklearn.ensemble import VotingClassifier
    from sklearn.preprocessing import KBinsDiscretizer, OrdinalEncoder

    X, y = _cls(k=3)
    Xt = _rows(nan=False)
    pipe = make_pipeline(KBinsDiscretizer(5, encode="ordinal"), LogisticRegression(max_iter=300))
    _check(pipe.fit(X, y), Xt, tmp_path)
    vote = VotingClassifier([("lr", LogisticRegression(max_iter=300)),
                             ("rf", RandomForestClassifier(5, max_depth=4, random_state=0))],
                            voting="soft", weights=[2, 1]).fit(X, y)
    _check(vote, Xt, tmp_path)
    rng = np.random.default_rng(0)
    C = np.column_stack([rng.integers(0, 5, 400), rng.normal(size=400)]).astype(float)
    yc = (C[:, 0] % 2 == 0).astype(int)
    ct = ColumnTransformer([("ord", OrdinalEncoder(handle_unknown="use_encoded_value",
                                                   unknown_value=-1), [0])],
                           remainder="passthrough")
    enc = make_pipeline(ct, DecisionTreeClassifier(max_depth=4, random_state=0)).fit(C, yc)
    Ct = C[:100].copy()
    Ct[::7, 0] = 9.0  # unseen -> -1
    _check(enc, Ct, tmp_path, sample=Ct)


def test_lightgbm_zero_as_missing(tmp_path):
    lgb = pytest.importorskip("lightgbm")
    X, y = _reg()
    X[::4, 0] = 0.0
    X[::5, 1] = np.nan
    m = lgb.LGBMRegressor(n_estimators=30, num_leaves=15, zero_as_missing=True,
                          verbose=-1).fit(X, y)
    Xt = _rows()
    Xt[::3, 0] = 0.0
    Xt[::7, 1] = -0.0
    Xt[::11, 2] = 1e-36
    compiled = peregrine.compile(m, backend="reference")
    assert compiled.spec.graph.forests()[0].has_missing_zero
    _check(m, Xt, tmp_path, sample=Xt)


def test_categorical_splits(tmp_path):
    from sklearn.ensemble import HistGradientBoostingClassifier

    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(0)
    n = 800
    X = np.column_stack([rng.integers(0, 12, n), rng.normal(size=n),
                         rng.integers(0, 40, n)]).astype(float)
    y = ((X[:, 0] % 3 == 0) ^ (X[:, 2] > 25) ^ (X[:, 1] > 0.5)).astype(int)
    Xt = np.column_stack([rng.integers(-2, 45, 300) + rng.choice([0, 0.5, 0.999], 300),
                          rng.normal(size=300), rng.integers(-3, 70, 300)]).astype(float)
    Xt[::9, 0] = np.nan
    Xt[::13, 2] = np.inf
    Xt[::17, 0] = -0.5
    lg = lgb.LGBMClassifier(n_estimators=20, num_leaves=15, min_data_per_group=5,
                            verbose=-1).fit(X, y, categorical_feature=[0, 2])
    _check(lg, Xt, tmp_path, sample=Xt)
    hgb = HistGradientBoostingClassifier(max_iter=20, categorical_features=[0, 2],
                                         random_state=0).fit(X, y)
    Xh = Xt.copy()
    Xh[~np.isfinite(Xh)] = np.nan
    Xh[:, [0, 2]] = np.where(Xh[:, [0, 2]] < 0, np.nan, np.floor(Xh[:, [0, 2]]))
    _check(hgb, Xh, tmp_path, sample=Xh)


# ------------------------------------------------- vector leaves in one traversal --
def test_vector_forest_one_traversal_labels_exact_on_ties(tmp_path):
    """A random forest classifier is one opset-3 TreeEnsembleRegressor (every class per leaf;
    float32 out, double sums): probabilities within half a float32 ulp of scikit-learn's, and
    the labels equal scikit-learn's also on rows where classes tie exactly (fully grown trees,
    pure leaves: many exact ties) and where float32 rounding ties them (the repair)."""
    X, y = _cls(k=3)
    m = RandomForestClassifier(20, random_state=0).fit(X, y)  # pure leaves: exact ties
    Xt = _rows(3000)
    p = m.predict_proba(Xt)
    top2 = np.sort(p, axis=1)[:, -2:]
    assert (top2[:, 0] == top2[:, 1]).sum() > 50  # the rows the repair must get right
    compiled = peregrine.compile(m, backend="reference")
    path = tmp_path / "m.onnx"
    compiled.export_onnx(path)
    model = onnx.load(str(path))
    ops = {n.op_type for n in model.graph.node}
    assert "TreeEnsembleRegressor" in ops and "TreeEnsemble" not in ops
    assert {(o.domain, o.version) for o in model.opset_import} == {("", 21), ("ai.onnx.ml", 3)}
    out = _run(path, Xt)
    np.testing.assert_array_equal(out["label"], m.predict(Xt))
    np.testing.assert_allclose(out["probabilities"], p, rtol=6e-8, atol=0)

    # near ties below float32's resolution: two leaves 1e-9 apart, one tree
    from peregrine.export import onnx_vector_trees as vt

    Xs = np.asarray([[0.0], [1.0]])
    tree = DecisionTreeClassifier(max_depth=1).fit(Xs, [0, 1])
    compiled = peregrine.compile(tree, backend="reference")
    forest = compiled.spec.graph.node("tree_ensemble_1").attrs.forest
    forest.value[forest.feature < 0] = [[0.5 + 1e-9, 0.5 - 1e-9], [0.5 - 1e-9, 0.5 + 1e-9]]
    assert vt.vector_eligible(forest)
    out = _run(_export(compiled, tmp_path / "t.onnx"), Xs)
    np.testing.assert_array_equal(out["label"], [0, 1])  # float32 ties both rows at 0.5
    np.testing.assert_array_equal(out["probabilities"], np.float32(0.5))


def _export(compiled, path):
    compiled.export_onnx(path)
    return path


def test_vector_forest_not_taken_where_rounding_could_decide(tmp_path):
    """A forest whose probabilities feed another model (stacking) keeps opset 5's exact
    per-class copies: a float32-rounded probability must not reach a split."""
    from sklearn.ensemble import StackingClassifier

    X, y = _cls(k=2)
    m = StackingClassifier([("rf", RandomForestClassifier(5, max_depth=4, random_state=0))],
                           final_estimator=DecisionTreeClassifier(max_depth=3)).fit(X, y)
    compiled = peregrine.compile(m, backend="reference")
    compiled.export_onnx(tmp_path / "m.onnx")
    model = onnx.load(str(tmp_path / "m.onnx"))
    assert "TreeEnsembleRegressor" not in {n.op_type for n in model.graph.node}
    out = _run(tmp_path / "m.onnx", _rows())
    np.testing.assert_array_equal(out["label"], m.predict(_rows()))


# ----------------------------------------------------------------- float32 input --
def test_float32_input(tmp_path):
    """input_dtype="auto" declares float32 where the model reads its input only through
    float32-comparing trees (XGBoost, scikit-learn), float64 elsewhere; "float32" forces it.
    The file then matches the source scored on float32 arrays (bit for bit for XGBoost's
    margins), validated on export like every file."""
    xgb = pytest.importorskip("xgboost")
    X, y = _cls(k=3)
    X32 = X.astype(np.float32)
    Xt = _rows(2000).astype(np.float32)
    for m in (xgb.XGBClassifier(n_estimators=30, max_depth=4).fit(X32, y),
              RandomForestClassifier(10, max_depth=6, random_state=0).fit(X32, y),
              GradientBoostingClassifier(n_estimators=10, random_state=0).fit(X32, y)):
        compiled = peregrine.compile(m, backend="reference")
        report = compiled.export_onnx(tmp_path / "m.onnx", input_dtype="auto")
        assert report.inputs == {"X": ("float32", ["N", 6])}
        sess = session(str(tmp_path / "m.onnx"))
        rows = Xt if not isinstance(m, GradientBoostingClassifier) else np.nan_to_num(Xt)
        label, proba = sess.run(["label", "probabilities"], {"X": rows})
        np.testing.assert_array_equal(label, m.predict(rows))
        np.testing.assert_allclose(proba, m.predict_proba(rows), rtol=RTOL, atol=ATOL)
        if isinstance(m, xgb.XGBClassifier):
            assert proba.dtype == np.float32
    pipe = make_pipeline(StandardScaler(), LogisticRegression()).fit(X, y)
    compiled = peregrine.compile(pipe, backend="reference")
    assert compiled.export_onnx(tmp_path / "p.onnx", input_dtype="auto").inputs["X"][0] \
        == "float64"  # a scaler before: float32 arithmetic in the source, not exact here
    report = compiled.export_onnx(tmp_path / "p.onnx", input_dtype="float32")
    assert report.inputs["X"][0] == "float32"
    Xf = np.nan_to_num(Xt)
    (proba,) = session(str(tmp_path / "p.onnx")).run(["probabilities"], {"X": Xf})
    np.testing.assert_allclose(proba, pipe.predict_proba(Xf), rtol=RTOL, atol=ATOL)
    with pytest.raises(ValueError, match="input_dtype"):
        compiled.export_onnx(tmp_path / "p.onnx", input_dtype="float16")


def test_exact_sums(tmp_path):
    """exact_sums=True writes the libraries' sums in their order: XGBoost's float32 margin bit
    for bit (per-tree CumSum), a random forest's sums in double (one copy of the trees per
    class, ai.onnx.ml opset 5); the default's one-traversal forms stay within their bounds
    (float32 reassociation for XGBoost, one float32 rounding for vector leaves)."""
    xgb = pytest.importorskip("xgboost")
    Xr, yr = _reg()
    r = xgb.XGBRegressor(n_estimators=200, max_depth=6).fit(Xr, yr)
    X = _rows(3000)
    compiled = peregrine.compile(r, backend="reference")
    from peregrine.export import export_onnx

    for exact in (True, False):
        report = export_onnx(compiled, tmp_path / "m.onnx", input_dtype="float32",
                             exact_sums=exact)
        (out,) = session(str(tmp_path / "m.onnx")).run(["variable"],
                                                       {"X": X.astype(np.float32)})
        want = r.predict(X.astype(np.float32))
        assert out.dtype == np.float32 and report.inputs["X"][0] == "float32"
        if exact:
            np.testing.assert_array_equal(out, want)
        else:
            np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL)
    Xc, yc = _cls(k=3)
    rf = RandomForestClassifier(30, max_depth=8, random_state=0).fit(Xc, yc)
    export_onnx(peregrine.compile(rf, backend="reference"), tmp_path / "rf.onnx",
                exact_sums=True)
    model = onnx.load(str(tmp_path / "rf.onnx"))
    assert ("ai.onnx.ml", 5) in {(o.domain, o.version) for o in model.opset_import}
    out = _run(tmp_path / "rf.onnx", X)
    # double sums in ONNX Runtime's order (it blocks trees): within a few ulps
    np.testing.assert_allclose(out["probabilities"], rf.predict_proba(X), rtol=1e-14, atol=0)
    np.testing.assert_array_equal(out["label"], rf.predict(X))
