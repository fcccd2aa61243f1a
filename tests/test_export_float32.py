"""The float32 export level (``export_onnx(precision="float32")``, ``peregrine export
--precision float32``): a float32 input, float32 arithmetic for linear models, MLPs and
scalers, forests with exact decisions; the measured error reported in the ExportReport and the
file's metadata_props; labels identical to the library's. The default export stays exact
(tests/test_export_onnx.py)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from sklearn.datasets import make_classification  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.linear_model import LogisticRegression, Ridge  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import MinMaxScaler, StandardScaler  # noqa: E402

import peregrine  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402

# float32 arithmetic: the bound documented in docs/exactness.md ("The float32 export level"),
# with margin for these models' condition (|x| w sums of order 10)
F32_RTOL, F32_ATOL = 1e-4, 1e-5


def _data(n=800, d=8, k=3, seed=0):
    X, y = make_classification(n, d, n_informative=5, n_redundant=0, n_classes=k,
                               random_state=seed)
    return X * 3.0 + 1.0, y


def _props(path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


def _elem(path, which="input"):
    m = onnx.load(str(path))
    vals = m.graph.input if which == "input" else m.graph.output
    return {v.name: v.type.tensor_type.elem_type for v in vals}


@pytest.mark.parametrize("make", [
    lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)),
    lambda: MLPClassifier((32, 16), max_iter=300, random_state=0),
    lambda: make_pipeline(MinMaxScaler(clip=True), LogisticRegression(max_iter=500)),
], ids=["scaler_lr", "mlp", "minmax_clip_lr"])
def test_float32_level_linear_and_mlp(tmp_path, make):
    import warnings

    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make().fit(X, y)
    compiled = peregrine.compile(model, backend="reference")
    path = tmp_path / "m.onnx"
    report = compiled.export_onnx(path, precision="float32")
    assert report.precision == "float32"
    assert report.inputs["X"][0] == "float32"
    assert report.outputs["probabilities"][0] == "float32"
    # the measured error is recorded, in the report and in the file
    dev = report.deviations["predict_proba"]
    assert 0.0 < dev["max_abs"] < F32_ATOL * 10
    assert report.deviations["predict"] == {"mismatches": 0}
    props = _props(path)
    assert props["peregrine.precision"] == "float32"
    assert props["peregrine.validation_rows"] == str(report.rows)
    assert props["peregrine.validation.predict_proba"].startswith("max_abs=")
    # the arithmetic is float32: no double tensor is computed
    m = onnx.load(str(path))
    assert not any(t.data_type == onnx.TensorProto.DOUBLE for t in m.graph.initializer)
    assert any(n.op_type == "Gemm" for n in m.graph.node)

    rng = np.random.default_rng(1)
    Xt = (rng.normal(size=(3000, X.shape[1])) * 3.0 + 1.0).astype(np.float32)
    label, proba = session(path).run(["label", "probabilities"], {"X": Xt})
    np.testing.assert_allclose(proba, model.predict_proba(Xt), rtol=F32_RTOL, atol=F32_ATOL)
    want = model.predict(Xt)
    # labels: identical wherever the two top probabilities are farther apart than the bound
    top = np.sort(model.predict_proba(Xt), axis=1)
    clear = (top[:, -1] - top[:, -2]) > 2 * F32_ATOL
    assert np.array_equal(label[clear], want[clear])


def test_float32_level_regressor(tmp_path):
    X, y = _data()
    model = make_pipeline(StandardScaler(), Ridge()).fit(X, X[:, 0] * 2 + y)
    path = tmp_path / "r.onnx"
    report = peregrine.compile(model).export_onnx(path, precision="float32")
    assert report.outputs["variable"][0] == "float32"
    Xt = X[:500].astype(np.float32)
    out = session(path).run(["variable"], {"X": Xt})[0]
    np.testing.assert_allclose(out, model.predict(Xt), rtol=F32_RTOL, atol=F32_ATOL)


def test_float32_level_keeps_forests_exact(tmp_path):
    """A forest under the float32 level: splits on the float32 input as the library (labels
    identical on threshold rows and NaN), double sums; only the output is float32."""
    X, y = _data()
    rng = np.random.default_rng(2)
    X[rng.random(X.shape) < 0.1] = np.nan
    model = make_pipeline(StandardScaler(), RandomForestClassifier(20, max_depth=6,
                                                                   random_state=0)).fit(X, y)
    compiled = peregrine.compile(model, backend="reference")
    path = tmp_path / "f.onnx"
    report = compiled.export_onnx(path, precision="float32")
    # the scaler feeds the forest: it stays double, so the splits are the library's
    m = onnx.load(str(path))
    assert any(n.op_type == "Sub" for n in m.graph.node)
    assert any(t.data_type == onnx.TensorProto.DOUBLE for t in m.graph.initializer)
    assert report.deviations["predict_proba"]["max_rel"] < 1e-7  # rounding to float32 once
    Xt = X.astype(np.float32)
    label, proba = session(path).run(["label", "probabilities"], {"X": Xt})
    assert np.array_equal(label, model.predict(Xt))
    np.testing.assert_allclose(proba, model.predict_proba(Xt), rtol=1e-6, atol=1e-7)


def test_default_stays_exact_and_records_it(tmp_path):
    X, y = _data()
    model = LogisticRegression(max_iter=500).fit(X, y)
    path = tmp_path / "e.onnx"
    report = peregrine.compile(model).export_onnx(path)
    assert report.precision == "exact"
    assert report.inputs["X"][0] == "float64"
    assert _props(path)["peregrine.precision"] == "exact"


def test_precision_arguments_checked(tmp_path):
    X, y = _data()
    compiled = peregrine.compile(LogisticRegression(max_iter=500).fit(X, y))
    with pytest.raises(ValueError, match="precision='float16'"):
        compiled.export_onnx(tmp_path / "a.onnx", precision="float16")
    with pytest.raises(ValueError, match="contradicts"):
        compiled.export_onnx(tmp_path / "a.onnx", precision="float32", input_dtype="float64")
    from peregrine.options import Precision

    report = compiled.export_onnx(tmp_path / "b.onnx", precision=Precision.FLOAT32)
    assert report.precision == "float32"


def test_cli_precision(tmp_path, capsys):
    from peregrine.cli import main

    X, y = _data()
    artifact = tmp_path / "m.peregrine"
    peregrine.compile(LogisticRegression(max_iter=500).fit(X, y)).save(artifact)
    assert main(["export", str(artifact), "--format", "onnx", "-o", str(tmp_path / "m.onnx"),
                 "--precision", "float32"]) == 0
    out = capsys.readouterr().out
    assert "float32 level" in out and "max_abs" in out
    assert _elem(tmp_path / "m.onnx")["X"] == onnx.TensorProto.FLOAT
