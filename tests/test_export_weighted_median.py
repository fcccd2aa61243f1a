"""ONNX export of WEIGHTED_MEDIAN (AdaBoostRegressor's weighted median,
``export/onnx_lookup.py``): the lowering alone against the NumPy rule on member predictions
with many ties (integer values), equal weights and a half landing exactly on a cumulative
weight; AdaBoostRegressor against scikit-learn through the exported file (it rejects NaN and
inf, so no such rows)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from sklearn.ensemble import AdaBoostRegressor  # noqa: E402
from sklearn.tree import DecisionTreeRegressor  # noqa: E402

import peregrine  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402
from peregrine.export.onnx_graph import Emitter  # noqa: E402
from peregrine.export.onnx_lookup import lower_weighted_median  # noqa: E402
from peregrine.ir.semantics.meta import WeightedMedian  # noqa: E402
from peregrine.options import CompileOptions  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6


def _lowered(weights, m):
    e = Emitter("test", "auto")
    attrs = WeightedMedian(weights=np.asarray(weights, np.float64))

    class Node:
        name = "median"

    node = Node()
    node.attrs = attrs
    out = lower_weighted_median(e, node, ["P"])
    e.nodes.append(helper.make_node("Identity", [out], ["Y"]))
    g = helper.make_graph(e.nodes, "g", [helper.make_tensor_value_info(
        "P", TensorProto.DOUBLE, ["N", m])], [helper.make_tensor_value_info(
            "Y", TensorProto.DOUBLE, ["N", 1])], e.initializers)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model, full_check=True)
    return session(model), attrs, node


@pytest.mark.parametrize("weights", [
    np.random.default_rng(0).uniform(0.1, 2.0, 7),  # below NumPy's insertion-sort size
    np.random.default_rng(1).uniform(0.1, 2.0, 50),  # AdaBoost's default member count
    np.ones(6),  # equal weights: the half lands exactly on a cumulative weight
    np.asarray([1.0, 2.0, 1.0, 4.0]),  # half of 8 = 4 reached exactly
], ids=["w7", "w50", "equal6", "exact-half"])
def test_weighted_median_lowering_against_rule(weights):
    m = len(weights)
    rng = np.random.default_rng(m)
    P = np.concatenate([
        rng.integers(0, 4, size=(2000, m)).astype(np.float64),  # ties everywhere
        rng.normal(size=(500, m)),
        np.full((3, m), 2.5),  # every member equal
        np.tile(np.arange(m, dtype=np.float64)[::-1], (2, 1)),  # descending
    ])
    sess, attrs, node = _lowered(weights, m)
    got = sess.run(["Y"], {"P": P})[0]
    want = attrs.rule(node, [P], CompileOptions())
    np.testing.assert_array_equal(got, want)


def test_adaboost_regressor_matches_scikit_learn(tmp_path):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 5))
    y = np.round(X[:, 0] * 2 + X[:, 1])  # integer targets: members tie on leaf values
    stumps = AdaBoostRegressor(DecisionTreeRegressor(max_depth=2), n_estimators=40,
                               random_state=0).fit(X, y)
    Xt = np.concatenate([X[:100], rng.normal(size=(400, 5)) * 2])
    path = tmp_path / "ada.onnx"
    peregrine.compile(stumps).export_onnx(path)
    got = session(path).run(["variable"], {"X": Xt})[0]
    np.testing.assert_allclose(got, stumps.predict(Xt), rtol=RTOL, atol=ATOL)
