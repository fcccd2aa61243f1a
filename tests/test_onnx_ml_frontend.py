"""ONNX-ML frontend beyond the conformance cases: every node mode and the NaN rule on hand-made
TreeEnsembleRegressor graphs (checked against ONNX Runtime on the same graph), AVERAGE, typed
refusals (unknown op naming op and domain, MIN aggregation, two inputs), files and the CLI."""

from __future__ import annotations

import numpy as np
import pytest

import peregrine
from peregrine.errors import InputError, UnsupportedModelError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

BACKENDS = ["reference", "torch", "torchscript", "native"]


def tree_model(mode: str, threshold: float, tracks: int, aggregate: str = "SUM",
               base: float = 0.25) -> onnx.ModelProto:
    """Two trees on 2 features: tree 0 splits feature 0 by ``mode``; tree 1 by BRANCH_LEQ on
    feature 1; leaves 1.5/-2.0 and 0.125/8.0."""
    node = helper.make_node(
        "TreeEnsembleRegressor", ["X"], ["Y"], domain="ai.onnx.ml",
        n_targets=1, aggregate_function=aggregate, post_transform="NONE", base_values=[base],
        nodes_treeids=[0, 0, 0, 1, 1, 1], nodes_nodeids=[0, 1, 2, 0, 1, 2],
        nodes_featureids=[0, 0, 0, 1, 0, 0], nodes_values=[threshold, 0, 0, -0.5, 0, 0],
        nodes_modes=[mode, "LEAF", "LEAF", "BRANCH_LEQ", "LEAF", "LEAF"],
        nodes_truenodeids=[1, 0, 0, 1, 0, 0], nodes_falsenodeids=[2, 0, 0, 2, 0, 0],
        nodes_missing_value_tracks_true=[tracks, 0, 0, 1 - tracks, 0, 0],
        target_treeids=[0, 0, 1, 1], target_nodeids=[1, 2, 1, 2], target_ids=[0, 0, 0, 0],
        target_weights=[1.5, -2.0, 0.125, 8.0],
    )
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ai.onnx.ml", 3)])


def run_ort(model, X):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"X": X.astype(np.float32)})[0]


def edge_rows(threshold: float) -> np.ndarray:
    t = np.float32(threshold)
    col0 = [t, np.nextafter(t, np.float32(np.inf)), np.nextafter(t, np.float32(-np.inf)), 0.0,
            np.nan, np.inf, -np.inf, 1e30, -1e30]
    col1 = [-0.5, np.nan, 0.0, -1.0, -0.5, np.nan, np.inf, -np.inf, 3.0]
    return np.array([[a, b] for a in col0 for b in col1], dtype=np.float64)


@pytest.mark.parametrize("mode", ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT",
                                  "BRANCH_EQ", "BRANCH_NEQ"])
@pytest.mark.parametrize("tracks", [0, 1])
@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE"])
def test_node_modes_and_nan(mode, tracks, aggregate):
    model = tree_model(mode, 0.3, tracks, aggregate)
    X = edge_rows(0.3)
    want = run_ort(model, X)
    for backend in BACKENDS:
        got = peregrine.compile(model, backend=backend).predict(X)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=f"{backend} {mode}")


def test_unknown_op_names_op_and_domain():
    node = helper.make_node("TfIdfVectorizer", ["X"], ["Y"], mode="TF", min_gram_length=1,
                            max_gram_length=1, max_skip_count=0, ngram_counts=[0],
                            ngram_indexes=[0], pool_int64s=[1])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", TensorProto.INT64, [None, 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 1])])
    model = helper.make_model(graph)
    with pytest.raises(UnsupportedModelError, match="TfIdfVectorizer.*ai.onnx"):
        peregrine.compile(model, backend="reference")


def test_min_aggregation_refused():
    with pytest.raises(UnsupportedModelError, match="aggregate_function 'MIN'"):
        peregrine.compile(tree_model("BRANCH_LEQ", 0.3, 0, "MIN"), backend="reference")


def test_one_column_per_input():
    """Inputs one column wide each (skl2onnx's form for a DataFrame) are the compiled model's
    columns, by name."""
    import pandas as pd

    concat = helper.make_node("Concat", ["A", "B"], ["AB"], axis=1)
    scale = helper.make_node("Scaler", ["AB"], ["Y"], domain="ai.onnx.ml", offset=[1.0, -2.0],
                             scale=[0.5, 4.0])
    graph = helper.make_graph(
        [concat, scale], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 1])
                               for n in "AB"],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.ml", 3)])
    df = pd.DataFrame({"B": [0.5, -1.0, 3.0], "A": [2.0, 0.0, -4.0]})
    compiled = peregrine.compile(model, backend="reference")
    assert compiled.spec.feature_names == ("A", "B")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {n: df[[n]].to_numpy(np.float32) for n in "AB"})[0]
    np.testing.assert_allclose(compiled.predict(df), want, rtol=1e-6)


def test_linear_classifier_refuses_nan_rows():
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 3)).astype(np.float32)
    onx = skl2onnx.to_onnx(LogisticRegression().fit(X, X[:, 0] > 0), X[:1])
    compiled = peregrine.compile(onx, backend="reference")
    sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(compiled.predict(X), sess.run(None, {"X": X})[0])
    X[0, 1] = np.nan
    with pytest.raises(InputError, match="NaN"):
        compiled.predict(X)


@pytest.mark.parametrize("backend", ["reference", "torch", "native"])
def test_linear_classifier_behind_an_imputer_takes_nan(backend):
    """Imputer -> Scaler -> LinearClassifier (skl2onnx's SimpleImputer -> StandardScaler ->
    LogisticRegression): the imputer replaces every NaN before the scores, so NaN rows are
    answered as ONNX Runtime answers them; only infinity (which it passes on: inf - inf
    scores) is refused."""
    skl2onnx = pytest.importorskip("skl2onnx")
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 1)
    pipe = make_pipeline(SimpleImputer(), StandardScaler(), LogisticRegression(max_iter=500))
    last = pipe.fit(X, y)[-1]
    onx = skl2onnx.to_onnx(pipe, X[:1], options={id(last): {"zipmap": False}})
    compiled = peregrine.compile(onx, backend=backend)
    sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    rows = X[:60].copy()
    rows[::4, 1] = np.nan
    rows[3, :] = np.nan
    label, proba = sess.run(None, {"X": rows})
    np.testing.assert_array_equal(compiled.predict(rows), label)
    np.testing.assert_allclose(compiled.predict_proba(rows), proba, rtol=1e-5, atol=1e-6)
    rows[5, 2] = np.inf
    with pytest.raises(InputError, match="infinity"):
        compiled.predict(rows)


def test_file_and_cli(tmp_path, capsys):
    from peregrine.cli import main

    model = tree_model("BRANCH_LT", 0.3, 1)
    path = tmp_path / "trees.onnx"
    path.write_bytes(model.SerializeToString())
    X = edge_rows(0.3)
    np.testing.assert_allclose(peregrine.compile(str(path), backend="reference").predict(X),
                               run_ort(model, X), rtol=1e-6)
    code = main(["compile", str(path), "-o", str(tmp_path / "t.pgn"), "--backend", "native"])
    assert code == 0, capsys.readouterr().err
    assert "(onnx)" in capsys.readouterr().out
    np.testing.assert_allclose(peregrine.load(tmp_path / "t.pgn").predict(X), run_ort(model, X),
                               rtol=1e-6)
