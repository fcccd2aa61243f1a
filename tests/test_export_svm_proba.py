"""ONNX export of SVM_PROBA (SVC/NuSVC(probability=True): libsvm's Platt scaling and pairwise
coupling iteration as an ONNX Loop, ``export/onnx_kernels.py``) against scikit-learn through
ONNX Runtime: 2, 3 and 4 classes, rows far out (Platt's clip at 1e-7), a scaler pipeline and
``predict_log_proba``. SVC rejects NaN and inf, so no such rows."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from sklearn.datasets import make_classification  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402
from sklearn.svm import SVC, NuSVC  # noqa: E402

import peregrine  # noqa: E402
from peregrine.export import export_onnx  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("make", [
    lambda: SVC(probability=True, random_state=0),
    lambda: NuSVC(probability=True, nu=0.3, random_state=0),
    lambda: make_pipeline(StandardScaler(), SVC(kernel="linear", probability=True,
                                                random_state=0)),
], ids=["svc_rbf", "nusvc", "scaled_linear_svc"])
def test_svm_proba_matches_scikit_learn(tmp_path, k, make):
    X, y = make_classification(400, 6, n_informative=4, n_classes=k, random_state=k)
    model = make().fit(X, y)
    compiled = peregrine.compile(model, backend="reference")
    path = tmp_path / "svm.onnx"
    report = export_onnx(compiled, path, methods=["predict", "predict_proba",
                                                   "predict_log_proba"])
    assert any(n.op_type == "Loop" for n in onnx.load(str(path)).graph.node)
    rng = np.random.default_rng(1)
    Xt = np.concatenate([rng.normal(size=(800, 6)) * 2, rng.normal(size=(50, 6)) * 60, X[:50]])
    out = dict(zip([o.name for o in session(path).get_outputs()],
                   session(path).run(None, {"X": Xt})))
    m = report.methods
    assert np.array_equal(out[m["predict"]], model.predict(Xt))
    np.testing.assert_allclose(out[m["predict_proba"]], model.predict_proba(Xt),
                               rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(out[m["predict_log_proba"]], model.predict_log_proba(Xt),
                               rtol=RTOL, atol=ATOL)
