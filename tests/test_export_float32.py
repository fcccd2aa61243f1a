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


# the scores' bound the task sets for the float32 linear forms (issue #14): ONNX Runtime's
# float32 Gemm and Sigmoid/Softmax against scikit-learn's double
LIN_RTOL, LIN_ATOL = 1e-5, 1e-6


def _edge_rows(X, model) -> np.ndarray:
    """NaN-free rows with the scores far out in both tails (v = +-17, +-30, +-100: ONNX
    Runtime's float32 Sigmoid is absolute, not relative, there), near 0 and at zero input."""
    rng = np.random.default_rng(3)
    rows = [np.zeros(X.shape[1]), X.min(axis=0), X.max(axis=0)]
    w = np.atleast_2d(model.coef_)[0]
    direction = w / (w @ w)
    for v in (-100.0, -30.0, -17.0, -1e-3, 1e-3, 17.0, 30.0, 100.0):
        rows.append(direction * (v - float(np.atleast_1d(model.intercept_)[0])))
    rows += list(rng.normal(size=(200, X.shape[1])) * 3.0 + 1.0)
    return np.asarray(rows, np.float32)


def _clear(scores: np.ndarray) -> np.ndarray:
    """Rows whose label no float32 rounding of the scores can change (binary: |v|; else the
    gap between the two largest scores)."""
    if scores.ndim == 1:
        return np.abs(scores) > 1e-4
    top = np.sort(scores, axis=1)
    return (top[:, -1] - top[:, -2]) > 1e-4


def test_float32_binary_logistic_is_gemm_and_sigmoid(tmp_path):
    """Binary LogisticRegression on the float32 level: one Gemm with the columns [-v, v] and
    one Sigmoid, which is [1 - p, p] (the form measured faster than skl2onnx's
    LinearClassifier at one row and at 100K rows); the labels read column v."""
    from peregrine.export import export_onnx

    X, y = _data(k=2)
    model = LogisticRegression(max_iter=500).fit(X, y)
    compiled = peregrine.compile(model, backend="reference")
    only = tmp_path / "p.onnx"
    export_onnx(compiled, only, methods=["predict_proba"], precision="float32")
    assert [n.op_type for n in onnx.load(str(only)).graph.node] == ["Gemm", "Sigmoid"]
    both = tmp_path / "b.onnx"
    report = export_onnx(compiled, both, precision="float32")
    assert report.deviations["predict"] == {"mismatches": 0}
    assert sum(n.op_type == "Gemm" for n in onnx.load(str(both)).graph.node) == 1

    Xt = np.concatenate([_edge_rows(X, model), X.astype(np.float32)])
    want = model.predict_proba(Xt)
    (proba,) = session(only).run(["probabilities"], {"X": Xt})
    np.testing.assert_allclose(proba, want, rtol=LIN_RTOL, atol=LIN_ATOL)
    label, proba2 = session(both).run(["label", "probabilities"], {"X": Xt})
    np.testing.assert_array_equal(proba2, proba)
    clear = _clear(model.decision_function(Xt))
    assert clear[:3].all() and clear.sum() > 1000
    np.testing.assert_array_equal(label[clear], model.predict(Xt)[clear])
    # the signed tails: a wrong column would swap them
    assert label[3] == model.classes_[0] and label[10] == model.classes_[1]


def test_float32_binary_logistic_log_proba_tails(tmp_path):
    """predict_log_proba reads the probabilities through a log: the pair [-v, v] goes
    through the rule's sigmoid (relative accuracy in both tails), not ONNX Runtime's
    Sigmoid (absolute only); 1 - p is sigmoid(-v), so log(1 - p) at v = 17 or 30 is about
    -17 or -30 as scikit-learn's, not log(0.0)."""
    from peregrine.export import export_onnx

    X, y = _data(k=2)
    model = LogisticRegression(max_iter=500).fit(X, y)
    path = tmp_path / "l.onnx"
    export_onnx(peregrine.compile(model, backend="reference"), path,
                methods=["predict_log_proba"], precision="float32")
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert "Sigmoid" not in ops and ops.count("Gemm") == 1
    Xt = np.concatenate([_edge_rows(X, model), X.astype(np.float32)])
    (logp,) = session(path).run(["log_probabilities"], {"X": Xt})
    # scikit-learn's data rows as it computes them
    np.testing.assert_allclose(logp[211:], model.predict_log_proba(Xt[211:]), rtol=1e-5,
                               atol=1e-5)
    # the tails against log sigmoid(+-v) computed stably from scikit-learn's score:
    # scikit-learn's own log(1 - p) is off by 1e-3 at v = 30 (1 - p cancels in double) and
    # -inf at v = 100
    v = model.decision_function(Xt[:211])
    exact = np.stack([-np.logaddexp(0.0, v), -np.logaddexp(0.0, -v)], axis=1)
    inner = np.abs(v) <= 30.0
    np.testing.assert_allclose(logp[:211][inner], exact[inner], rtol=1e-5, atol=1e-5)
    # |v| = 100: exp(-100) is a float32 subnormal (3.7e-44, 5 significant bits): within
    # 2e-4 relative, and finite
    assert np.isfinite(logp).all()
    np.testing.assert_allclose(logp[:211][~inner], exact[~inner], rtol=2e-4, atol=1e-6)


@pytest.mark.parametrize("make, method, form", [
    (lambda: LogisticRegression(max_iter=500), "predict_proba", ["Gemm", "Softmax"]),
    (lambda: _linear("RidgeClassifier"), "decision_function", ["Gemm"]),
    (lambda: _linear("LinearSVC"), "decision_function", ["Gemm"]),
], ids=["lr_multinomial", "ridge_classifier", "linear_svc"])
def test_float32_linear_classifiers_against_sklearn(tmp_path, make, method, form):
    from peregrine.export import export_onnx

    X, y = _data(k=3)
    model = make().fit(X, y)
    compiled = peregrine.compile(model, backend="reference")
    path = tmp_path / "m.onnx"
    report = export_onnx(compiled, path, methods=[method, "predict"], precision="float32")
    assert report.deviations["predict"] == {"mismatches": 0}
    one = tmp_path / "one.onnx"
    export_onnx(compiled, one, methods=[method], precision="float32")
    assert [n.op_type for n in onnx.load(str(one)).graph.node] == form
    Xt = np.concatenate([_edge_rows(X, model), X.astype(np.float32)])
    out = report.methods[method]
    label, got = session(path).run(["label", out], {"X": Xt})
    np.testing.assert_allclose(got, getattr(model, method)(Xt), rtol=LIN_RTOL, atol=LIN_ATOL)
    clear = _clear(model.decision_function(Xt))
    np.testing.assert_array_equal(label[clear], model.predict(Xt)[clear])


def _linear(name):
    from sklearn.linear_model import RidgeClassifier
    from sklearn.svm import LinearSVC

    return {"RidgeClassifier": RidgeClassifier(), "LinearSVC": LinearSVC()}[name]


def test_float32_binary_logistic_after_column_transformer(tmp_path):
    """A LINEAR reading a CONCAT (a ColumnTransformer's parts) takes the pair form per part:
    one Gemm per part, each adding the previous partial pair, no concatenated matrix."""
    from sklearn.compose import ColumnTransformer

    from peregrine.export import export_onnx

    X, y = _data(k=2)
    ct = ColumnTransformer([("s", StandardScaler(), [0, 1, 2, 3]), ("m", MinMaxScaler(), [4, 5, 6, 7])])
    model = make_pipeline(ct, LogisticRegression(max_iter=500)).fit(X, y)
    path = tmp_path / "c.onnx"
    export_onnx(peregrine.compile(model, backend="reference"), path,
                methods=["predict_proba"], precision="float32")
    ops = [n.op_type for n in onnx.load(str(path)).graph.node]
    assert "Concat" not in ops and ops.count("Gemm") == 2 and ops[-1] == "Sigmoid"
    Xt = np.concatenate([X, X * 4.0 - 8.0]).astype(np.float32)
    (proba,) = session(path).run(["probabilities"], {"X": Xt})
    np.testing.assert_allclose(proba, model.predict_proba(Xt), rtol=LIN_RTOL, atol=LIN_ATOL)
