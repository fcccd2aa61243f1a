"""ONNX export of INTERP (np.interp per column, ``export/onnx_lookup.py``): the lowering run in
ONNX Runtime against np.interp itself on tables with repeated and one-point entries, flat
segments, and x at every table entry, between them, outside, +-inf and NaN (bit-equal); and
isotonic calibration (CalibratedClassifierCV(method="isotonic")) against scikit-learn,
NaN rows through a HistGradientBoosting base."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import peregrine  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402
from peregrine.export.onnx_graph import Emitter  # noqa: E402
from peregrine.export.onnx_lookup import lower_interp  # noqa: E402
from tests.interp_cases import TABLES, assert_numpys  # noqa: E402
from tests.interp_cases import rows as interp_rows  # noqa: E402


def _lowered(tables, left, right):
    e = Emitter("test", "auto")
    d = len(tables)
    node = SimpleNamespace(attrs=SimpleNamespace(
        xp=[np.asarray(t[0]) for t in tables], fp=[np.asarray(t[1]) for t in tables],
        left=np.asarray(left), right=np.asarray(right)), width=d, name="interp")
    out = lower_interp(e, node, ["X"])
    e.nodes.append(helper.make_node("Identity", [out], ["Y"]))
    g = helper.make_graph(e.nodes, "g", [helper.make_tensor_value_info(
        "X", TensorProto.DOUBLE, ["N", d])], [helper.make_tensor_value_info(
            "Y", TensorProto.DOUBLE, ["N", d])], e.initializers)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.checker.check_model(m, full_check=True)
    return session(m)


def test_interp_bit_equal_to_numpy():
    rng = np.random.default_rng(0)
    left = [-7.0, np.nan, -1.0, 0.5, 11.0]
    right = [9.0, 8.0, np.inf, -0.5, 12.0]
    X = interp_rows(TABLES, rng, 1000, [0.0, 0.0, 0.25, 1e-300, 0.0])
    got = _lowered(TABLES, left, right).run(None, {"X": X})[0]
    assert_numpys(got, X, TABLES, left, right)


@pytest.mark.parametrize("k", [2, 3])
def test_isotonic_calibration(tmp_path, k):
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.datasets import make_classification
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    X, y = make_classification(800, 6, n_informative=4, n_classes=k, random_state=0)
    Xn = X.copy()
    Xn[np.random.default_rng(0).random(X.shape) < 0.1] = np.nan
    for base, rows in ((LogisticRegression(), X),
                       (HistGradientBoostingClassifier(max_iter=20), Xn)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = CalibratedClassifierCV(base, method="isotonic", cv=3).fit(rows, y)
        path = tmp_path / f"cal{k}.onnx"
        peregrine.compile(model).export_onnx(path)
        label, proba = session(path).run(["label", "probabilities"], {"X": rows})
        assert np.array_equal(label, model.predict(rows))
        np.testing.assert_allclose(proba, model.predict_proba(rows), rtol=1e-5, atol=1e-6)
