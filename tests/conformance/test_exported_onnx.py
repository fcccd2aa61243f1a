"""The conformance suite through the exported ONNX file (issue #14): every case is compiled
(reference backend: the export lowers the program's IR, whichever backend compiled it), written
with ``peregrine.export.export_onnx`` (every method the compiled model has), opened in ONNX
Runtime with one intra-op and one inter-op thread, and every output compared with the source
library's own method on the suite's rows (NaN and +-inf where the source accepts them,
threshold edges, category edge codes) through the suite's ``assert_same``: rtol 1e-5,
atol 1e-6, labels identical.

The exported model declares one input, ``X`` as ``tensor(double)`` (docs/export.md), so the
rows are scored as float64; there is no float32 input to run.

Cases whose ops ONNX cannot express are listed in ``REFUSED`` with the op the error must name:
the export must raise ``UnsupportedModelError`` there, and must succeed everywhere else, so a
regression in either direction fails. One case per model family runs by default (``DEFAULT``);
the full matrix is ``slow``."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import peregrine  # noqa: E402
from peregrine.errors import UnsupportedModelError  # noqa: E402
from peregrine.export import export_onnx  # noqa: E402
from peregrine.export.onnx import INPUT_NAME, session  # noqa: E402
from tests.conformance.test_conformance import (  # noqa: E402
    CASES,
    _rows,
    assert_log_proba_offered,
    assert_same,
)

# One representative per model family runs in the default (`make test`) run.
DEFAULT = {
    "sk-rf-clf-multi",  # scikit-learn trees
    "sk-hgb-clf-cat-binary",  # HistGradientBoosting, categorical splits
    "xgb-clf-multi-softprob",  # XGBoost
    "lgb-clf-binary",  # LightGBM
    "catboost-multiclass",  # CatBoost (refused: see REFUSED)
    "pipe-logreg-3c",  # linear
    "kernel-svc-rbf-3c",  # kernel / SVM
    "kernel-knn-uniform-euclidean",  # KNN
    "pipe-gaussiannb-3c",  # naive Bayes
    "pipe-mlp-relu-3c",  # MLP
    "pipe-impute-scale-logreg-3c",  # pipelines / featurizers
    "tf-kbins-quantile-onehot",  # transformers
    "meta-vote-soft-3c",  # meta-estimators
    "onnx-skl-gb-multi",  # ONNX-ML sources
    "hybrid-scaler-torchstep-lightgbm",  # hybrid (network + trees)
}

# case id -> a pattern the UnsupportedModelError must contain (the op the exporter cannot
# express). Found by running the full matrix; docs/export.md's table says why each refuses.
_REFUSALS: dict[str, tuple[str, ...]] = {
    # KNN_IMPUTE: refused on purpose (onnx_graph.REFUSAL_REASONS: donors at equal distances
    # are ordered by the BLAS's rounding of nan_euclidean's expanded form)
    r"op knn_impute": ("tf-knn-imputer-uniform", "tf-knn-imputer-distance"),
}
REFUSED = {case_id: pattern for pattern, ids in _REFUSALS.items() for case_id in ids}


def _param(case):
    marks = list(case.marks)
    if case.id not in DEFAULT:
        marks.append(pytest.mark.slow)
    return pytest.param(case, id=case.id, marks=marks)


def test_refusal_list_names_real_cases():
    ids = {c.id for c in CASES}
    assert not set(REFUSED) - ids, f"REFUSED names no case: {sorted(set(REFUSED) - ids)}"
    assert not DEFAULT - ids, f"DEFAULT names no case: {sorted(DEFAULT - ids)}"


@pytest.fixture(scope="module")
def rows_cache():
    return {}


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_exported_matches_source(case, rows_cache, tmp_path):
    model, _ = case.built
    spec, X = _rows(case, rows_cache)
    compiled = peregrine.compile(model, "reference")
    assert_log_proba_offered(model, compiled, case.id)
    methods = list(compiled.methods)
    path = tmp_path / "model.onnx"
    if case.id in REFUSED:
        with pytest.raises(UnsupportedModelError, match=REFUSED[case.id]):
            export_onnx(compiled, path, methods=methods)
        assert not path.exists()
        return
    report = export_onnx(compiled, path, methods=methods)
    assert set(report.methods) == set(spec.methods)
    sess = session(str(path), threads=1)
    (inp,) = sess.get_inputs()
    assert (inp.name, inp.type) == (INPUT_NAME, "tensor(double)")
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(None, {INPUT_NAME: np.ascontiguousarray(X, np.float64)})))
    for method, output in report.methods.items():
        want = case.expected(method, X)
        have = np.asarray(got[output])
        if want.dtype.kind == "U" and have.dtype == object:  # ONNX strings come back as str
            have = have.astype(want.dtype)
        assert_same(method, have, want, f"{case.id} onnx float64 {method} -> {output}")


def test_opset_too_old_names_the_ops_and_backends(tmp_path):
    """Below opset 18 ReduceSum/ReduceMax take no axes input: refused, naming them and the
    backends that run the model; nothing is written."""
    case = next(c for c in CASES if c.id == "pipe-logreg-3c")
    compiled = peregrine.compile(case.built[0], "reference")
    path = tmp_path / "model.onnx"
    with pytest.raises(UnsupportedModelError, match=r"opset 17.*ReduceSum.*reference, torch"):
        export_onnx(compiled, path, opset=17)
    assert not path.exists()


def test_support_table_matches_refusals():
    """supported_models()'s onnx-export field (export/support.py) names every op the refusal
    list names, and only ops the exporter has no lowering for (category maps: lowered, and
    string / pandas category columns export as their codes, but CatBoost's hashed string
    columns are not exported)."""
    from peregrine.export.onnx import load_lowerings

    LOWERINGS = load_lowerings()  # noqa: N806
    from peregrine.export.support import NOT_EXPORTED

    table_ops = {part for op, _ in NOT_EXPORTED.values() for part in op.split("/")}
    refused_ops = {p.split()[1] for p in _REFUSALS if p.startswith("op ")}
    assert refused_ops <= table_ops, sorted(refused_ops - table_ops)
    lowered = {op.value for op in LOWERINGS}
    assert (table_ops & lowered) == {"category_map"}
    rows = {r["model"]: r["backends"] for r in peregrine.supported_models()}
    assert set(NOT_EXPORTED) <= set(rows), sorted(set(NOT_EXPORTED) - set(rows))
    assert rows["RandomForestClassifier"]["onnx-export"] == "yes"
    assert rows["KNeighborsClassifier"]["onnx-export"] == "yes"
    assert rows["SVC"]["onnx-export"] == "yes"
    assert all(v == "yes" for k, v in rows["SVC"].items() if k != "onnx-export")


def test_string_columns_as_string_inputs(tmp_path):
    """A pipeline reading string columns (an imputer and a one-hot encoder on one, an ordinal
    encoder on another, string class labels), exported with ``string_inputs=True``: the string
    columns are ``tensor(string)`` inputs, run through ONNX Runtime (one intra-op and one
    inter-op thread) on rows with unseen strings and missing values (``""`` in the file, NaN
    in the frame scikit-learn scores), every method compared with scikit-learn's."""
    pd = pytest.importorskip("pandas")
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler

    def frame(seed, n):
        rng = np.random.default_rng(seed)
        df = pd.DataFrame({"x": rng.normal(size=n),
                           "colour": rng.choice(["red", "green", "blue"], n).astype(object),
                           "shape": rng.choice(["disc", "cube", "cone"], n).astype(object)})
        df.loc[::9, "colour"] = np.nan
        return df

    df = frame(0, 500)
    y = np.where((df["colour"] == "red") + (df["shape"] == "cube") + df["x"] > 0.8, "yes", "no")
    ct = ColumnTransformer([
        ("colour", make_pipeline(SimpleImputer(strategy="constant", fill_value="none"),
                                 OneHotEncoder(handle_unknown="ignore")), ["colour"]),
        ("shape", OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1),
         ["shape"]),
        ("x", StandardScaler(), ["x"])])
    model = make_pipeline(ct, RandomForestClassifier(n_estimators=15, max_depth=6,
                                                     random_state=0)).fit(df, y)
    compiled = peregrine.compile(model, "reference")
    path = tmp_path / "model.onnx"
    report = export_onnx(compiled, path, methods=list(compiled.methods),
                         string_inputs=True)
    sess = session(str(path), threads=1)
    types = {i.name: i.type for i in sess.get_inputs()}
    assert types == {"X": "tensor(double)", "colour": "tensor(string)",
                     "shape": "tensor(string)"}
    test = frame(1, 300)
    test.loc[test.index[::7], "colour"] = "purple"
    test.loc[test.index[2::11], "shape"] = "sphere"
    feed = {"X": test[["x"]].to_numpy(np.float64)}
    for c in ("colour", "shape"):
        feed[c] = np.asarray([v if isinstance(v, str) else "" for v in test[c]],
                             dtype=object).reshape(-1, 1)
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed)))
    for method, output in report.methods.items():
        want = np.asarray(getattr(model, method)(test))
        have = np.asarray(got[output])
        if want.dtype.kind in "UO" and have.dtype == object:
            have, want = have.astype(str), want.astype(str)
        assert_same(method, have, want, f"string inputs onnx {method} -> {output}")


# standard ops only (ml_ops="never": onnx_traversal.py): the tree cases of DEFAULT run by
# default (categorical splits among them), every case in the slow matrix
NEVER_DEFAULT = {"sk-rf-clf-multi", "sk-hgb-clf-cat-binary", "xgb-clf-multi-softprob",
                 "lgb-clf-binary", "hybrid-scaler-torchstep-lightgbm"}


def _param_never(case):
    marks = list(case.marks)
    if case.id not in NEVER_DEFAULT:
        marks.append(pytest.mark.slow)
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param_never(c) for c in CASES])
def test_exported_standard_ops_match_source(case, rows_cache, tmp_path):
    from peregrine.ir import Op

    model, _ = case.built
    spec, X = _rows(case, rows_cache)
    compiled = peregrine.compile(model, "reference")
    forests = [n.attrs.forest for n in compiled.spec.graph.nodes if n.op is Op.TREE_ENSEMBLE]
    if not forests or case.id in REFUSED:
        pytest.skip("no tree ensemble: the default export is the same file")
    methods = list(compiled.methods)
    path = tmp_path / "model.onnx"
    report = export_onnx(compiled, path, methods=methods, ml_ops="never")
    import onnx

    assert {n.domain for n in onnx.load(str(path)).graph.node} <= {""}
    sess = session(str(path), threads=1)
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(None, {INPUT_NAME: np.ascontiguousarray(X, np.float64)})))
    for method, output in report.methods.items():
        want = case.expected(method, X)
        have = np.asarray(got[output])
        if want.dtype.kind == "U" and have.dtype == object:
            have = have.astype(want.dtype)
        assert_same(method, have, want, f"{case.id} onnx ml_ops=never {method} -> {output}")
