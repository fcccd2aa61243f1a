"""String tensors in ONNX-ML graphs (LabelEncoder, CategoryMapper, OneHotEncoder on strings,
ZipMap with string labels, one input per DataFrame column), against ONNX Runtime on the same
file: skl2onnx pipelines on DataFrames with string columns, and hand-made graphs for the op
forms skl2onnx does not write (strings to strings, CategoryMapper both ways)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import peregrine
from peregrine.errors import UnsupportedModelError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
skl2onnx = pytest.importorskip("skl2onnx")
from onnx import TensorProto, helper  # noqa: E402
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder  # noqa: E402

BACKENDS = ["reference", "torch", "torchscript", "native"]


def _frame(n, seed, unseen=False):
    r = np.random.default_rng(seed)
    df = pd.DataFrame({"a": r.normal(size=n), "c": r.choice(["x", "y", "zed", "Ünï"], n),
                       "d": r.choice(["p", "q", "r"], n), "b": r.normal(size=n)})
    if unseen:
        df.loc[::5, "c"] = "never"
        df.loc[::7, "d"] = ""
    return df


def _ort(onx, df):
    sess = ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        col = df[[i.name]].to_numpy()
        feeds[i.name] = col.astype(object) if i.type == "tensor(string)" else \
            col.astype(np.float32 if i.type == "tensor(float)" else np.float64)
    return sess.run(None, feeds)


def _proba(maps, labels):
    return np.array([[m[k] for k in labels] for m in maps])


@pytest.fixture(scope="module")
def forest_pipeline():
    df = _frame(400, 0)
    y = np.where((df.c == "x") ^ (df.a > 0) ^ (df.d == "q"), "yes", "no")
    ct = ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore"), ["c"]),
                            ("ord", OrdinalEncoder(handle_unknown="use_encoded_value",
                                                   unknown_value=-1), ["d"]),
                            ("num", "passthrough", ["a", "b"])])
    pipe = make_pipeline(ct, RandomForestClassifier(n_estimators=8, max_depth=5,
                                                    random_state=0)).fit(df, y)
    return pipe, skl2onnx.to_onnx(pipe, df[:1], target_opset={"": 18, "ai.onnx.ml": 3})


@pytest.mark.parametrize("backend", BACKENDS)
def test_skl2onnx_string_columns_forest(forest_pipeline, backend):
    """Gather + OneHotEncoder(cats_strings) + LabelEncoder(keys_strings -> int64) + a forest
    with string labels behind ZipMap; four inputs, two of them strings; unseen strings."""
    pipe, onx = forest_pipeline
    ops = {n.op_type for n in onx.graph.node}
    assert {"OneHotEncoder", "LabelEncoder", "ZipMap"} <= ops
    compiled = peregrine.compile(onx, backend=backend)
    for df in (_frame(300, 1), _frame(300, 2, unseen=True)):
        label, maps = _ort(onx, df)
        np.testing.assert_array_equal(compiled.predict(df), label)
        np.testing.assert_allclose(compiled.predict_proba(df), _proba(maps, ["no", "yes"]),
                                   rtol=1e-5, atol=1e-6)


def test_skl2onnx_two_string_columns_one_encoder():
    """One OneHotEncoder over two string columns (a Concat of string inputs) before a
    three-class gradient boosting model."""
    df = _frame(400, 3)
    y = (df.c.isin(["x", "Ünï"]).astype(int) + (df.b > 0.2) + (df.d == "r")) % 3
    ct = ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore"), ["c", "d"]),
                            ("num", "passthrough", ["a", "b"])])
    pipe = make_pipeline(ct, GradientBoostingClassifier(n_estimators=10, max_depth=3,
                                                        random_state=0)).fit(df, y)
    onx = skl2onnx.to_onnx(pipe, df[:1], target_opset={"": 18, "ai.onnx.ml": 3})
    compiled = peregrine.compile(onx, backend="native")
    df = _frame(300, 4, unseen=True)
    label, maps = _ort(onx, df)
    np.testing.assert_array_equal(compiled.predict(df), label)
    np.testing.assert_allclose(compiled.predict_proba(df), _proba(maps, [0, 1, 2]),
                               rtol=1e-5, atol=1e-6)


def _string_graph(nodes, out_type, extra_inputs=()):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("s", TensorProto.STRING, [None, 1]),
                     *extra_inputs],
        [helper.make_tensor_value_info("Y", out_type, [None, 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                   helper.make_opsetid("ai.onnx.ml", 3)])


WORDS = pd.DataFrame({"s": ["a", "b", "c", "unseen", "", "Ünï", "b", "a"]})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", ["to-strings", "to-int64", "to-floats"])
def test_label_encoder_strings(form, backend):
    kw = {"to-strings": dict(values_strings=["x", "y", "Ünï"], default_string="?"),
          "to-int64": dict(values_int64s=[5, -3, 7], default_int64=42),
          "to-floats": dict(values_floats=[0.1, 2.5, -1.0], default_float=9.75)}[form]
    out_type = {"to-strings": TensorProto.STRING, "to-int64": TensorProto.INT64,
                "to-floats": TensorProto.FLOAT}[form]
    node = helper.make_node("LabelEncoder", ["s"], ["Y"], domain="ai.onnx.ml",
                            keys_strings=["a", "b", "Ünï"], **kw)
    model = _string_graph([node], out_type)
    want = _ort(model, WORDS)[0]
    got = peregrine.compile(model, backend=backend).predict(WORDS)
    np.testing.assert_array_equal(np.ravel(got), np.ravel(want))


@pytest.mark.parametrize("backend", BACKENDS)
def test_category_mapper_both_ways(backend):
    to_int = helper.make_node("CategoryMapper", ["s"], ["i"], domain="ai.onnx.ml",
                              cats_strings=["a", "b", "Ünï"], cats_int64s=[10, 20, 30],
                              default_int64=-7)
    back = helper.make_node("CategoryMapper", ["i"], ["Y"], domain="ai.onnx.ml",
                            cats_strings=["A", "B"], cats_int64s=[10, 30],
                            default_string="none")
    for nodes, out, out_type in (([to_int], "i", TensorProto.INT64),
                                 ([to_int, back], "Y", TensorProto.STRING)):
        graph = helper.make_graph(
            nodes, "g", [helper.make_tensor_value_info("s", TensorProto.STRING, [None, 1])],
            [helper.make_tensor_value_info(out, out_type, [None, 1])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                        helper.make_opsetid("ai.onnx.ml", 3)])
        want = _ort(model, WORDS)[0]
        got = peregrine.compile(model, backend=backend).predict(WORDS)
        np.testing.assert_array_equal(np.ravel(got), np.ravel(want))


def test_strings_into_a_numeric_op_refused():
    node = helper.make_node("Scaler", ["s"], ["Y"], domain="ai.onnx.ml", offset=[0.0],
                            scale=[1.0])
    with pytest.raises(UnsupportedModelError, match="holds strings"):
        peregrine.compile(_string_graph([node], TensorProto.FLOAT), backend="reference")


def test_wide_inputs_side_by_side_refused():
    node = helper.make_node("Concat", ["A", "B"], ["Y"], axis=1)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, 2])
                      for n in "AB"],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, 4])])
    with pytest.raises(UnsupportedModelError, match="one column per input"):
        peregrine.compile(helper.make_model(graph), backend="reference")


def test_label_encoder_opset4_tensors():
    """ai.onnx.ml 4's keys_tensor / values_tensor / default_tensor forms."""
    from onnx import numpy_helper

    node = helper.make_node(
        "LabelEncoder", ["s"], ["Y"], domain="ai.onnx.ml",
        keys_tensor=numpy_helper.from_array(np.array(["a", "b", "Ünï"], dtype=object)),
        values_tensor=numpy_helper.from_array(np.array([4, 5, 6], dtype=np.int64)),
        default_tensor=numpy_helper.from_array(np.array([-9], dtype=np.int64)))
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("s", TensorProto.STRING, [None, 1])],
        [helper.make_tensor_value_info("Y", TensorProto.INT64, [None, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18),
                                                    helper.make_opsetid("ai.onnx.ml", 4)])
    want = _ort(model, WORDS)[0]
    got = peregrine.compile(model, backend="reference").predict(WORDS)
    np.testing.assert_array_equal(np.ravel(got), np.ravel(want))
