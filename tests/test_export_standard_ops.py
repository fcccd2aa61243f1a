"""ONNX export in standard ops only (``export_onnx(ml_ops="never")``, ``--ml-ops never``):
tree ensembles as the traversal of ``export/onnx_traversal.py`` (no ``ai.onnx.ml`` node in
the file), against the libraries' own predict on rows with NaN, +-inf and values on the
thresholds, batch and one row; LightGBM's zero-as-missing splits; categorical splits; what
cannot be written in standard ops refuses by name (string inputs). The conformance suite runs
every tree case through such a file (tests/conformance/test_exported_onnx.py)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pd = pytest.importorskip("pandas")

from sklearn.datasets import make_classification  # noqa: E402
from sklearn.ensemble import ExtraTreesRegressor, RandomForestClassifier  # noqa: E402

import peregrine  # noqa: E402
from peregrine.errors import UnsupportedModelError  # noqa: E402
from peregrine.export import export_onnx  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6


def _data(n=2000, seed=0, k=3):
    X, y = make_classification(n, 8, n_informative=5, n_classes=k, random_state=seed)
    X[::11, 2] = np.nan
    return X, y


def _test_rows(model, X):
    """NaN, infinities, and every threshold the first trees split on, as values."""
    T = X[:400].copy()
    T[::7, 0] = np.nan
    T[3::13, 4] = np.inf
    T[5::17, 5] = -np.inf
    f = peregrine.compile(model, "reference")
    forest = next(n.attrs.forest for n in f.spec.graph.nodes if n.op.name == "TREE_ENSEMBLE")
    inner = np.flatnonzero(forest.feature >= 0)[:len(T)]
    T[np.arange(len(inner)), forest.feature[inner]] = forest.threshold[inner]
    return T


def _standard_only(path) -> bool:
    return {n.domain for n in onnx.load(str(path)).graph.node} <= {""}


def _check(model, T, path, classes=True):
    compiled = peregrine.compile(model, backend="reference")
    report = export_onnx(compiled, path, ml_ops="never", sample=T)
    assert _standard_only(path)
    sess = session(str(path))
    for rows in (T, T[:1], T[7:8]):
        out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"X": rows})))
        if classes:
            np.testing.assert_array_equal(out["label"], model.predict(rows))
            np.testing.assert_allclose(out["probabilities"], model.predict_proba(rows),
                                       rtol=RTOL, atol=ATOL)
        else:
            np.testing.assert_allclose(out["variable"].reshape(-1), model.predict(rows),
                                       rtol=RTOL, atol=ATOL)
    return report


def test_xgboost_float32_sums_and_nan(tmp_path):
    xgb = pytest.importorskip("xgboost")
    X, y = _data()
    for k in (2, 3):
        model = xgb.XGBClassifier(n_estimators=30, max_depth=5).fit(X, y % k)
        T = _test_rows(model, X)
        _check(model, T, tmp_path / f"x{k}.onnx")


def test_lightgbm_zero_as_missing(tmp_path):
    lgb = pytest.importorskip("lightgbm")
    X, y = _data(seed=1, k=2)
    X[::5, 3] = 0.0
    model = lgb.LGBMClassifier(n_estimators=25, zero_as_missing=True, verbose=-1).fit(X, y)
    T = _test_rows(model, X)
    T[1::9, 3] = 0.0
    T[2::9, 3] = 1e-40  # within kZeroThreshold: missing too
    _check(model, T, tmp_path / "l.onnx")


def test_scikit_learn_forests_average(tmp_path):
    X, y = _data(seed=2)
    clf = RandomForestClassifier(20, max_depth=6, random_state=0).fit(X, y)
    T = _test_rows(clf, X)
    T = np.where(np.isinf(T), 3.0, T)  # scikit-learn's forests refuse infinity
    _check(clf, T, tmp_path / "rf.onnx")
    reg = ExtraTreesRegressor(15, max_depth=5, random_state=0).fit(
        np.nan_to_num(X), X[:, 0] * 2 - np.nan_to_num(X[:, 2]))
    _check(reg, np.nan_to_num(T), tmp_path / "et.onnx", classes=False)


@pytest.mark.parametrize("library", ["sklearn", "lightgbm"])
def test_categorical_splits(tmp_path, library):
    """Membership splits: codes truncated from fractions, negative (before truncation, as the
    libraries), at and past the bitset, +-inf and NaN (the default direction), -0.0."""
    X, y = _data(seed=3, k=2)
    X[:, 1] = np.abs(np.round(X[:, 1] * 3)) % 12
    X[::13, 1] = np.nan
    y = (np.isin(X[:, 1], [1, 3, 7]) ^ (X[:, 0] > 0.3)).astype(int)  # split on as categories
    if library == "lightgbm":
        lgb = pytest.importorskip("lightgbm")
        model = lgb.LGBMClassifier(n_estimators=15, verbose=-1).fit(
            X, y, categorical_feature=[1])
    else:
        from sklearn.ensemble import HistGradientBoostingClassifier

        model = HistGradientBoostingClassifier(max_iter=15, categorical_features=[1]).fit(X, y)
    T = X[:500].copy()
    odd = np.array([-0.5, -1.0, 2.7, 11.9, 12.0, 40.0, np.nan, 3.0, 1e10, 7.0000001, -0.0])
    if library == "lightgbm":
        odd = np.concatenate([odd, [np.inf, -np.inf]])  # scikit-learn refuses infinity
    T[:len(odd) * 10:10, 1] = odd
    forests = [n.attrs.forest for n in peregrine.compile(model).spec.graph.nodes
               if n.op.name == "TREE_ENSEMBLE"]
    assert any(f.has_categorical for f in forests)
    _check(model, T, tmp_path / "c.onnx")


def test_what_standard_ops_cannot_write_refuses(tmp_path):
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    df = pd.DataFrame({"c": np.array(["a", "b", "c"] * 100, dtype=object),
                       "x": np.arange(300.0)})
    pipe = make_pipeline(ColumnTransformer([("oh", OneHotEncoder(), ["c"])],
                                           remainder="passthrough"),
                         LogisticRegression()).fit(df, np.arange(300) % 2)
    with pytest.raises(UnsupportedModelError, match="LabelEncoder"):
        export_onnx(peregrine.compile(pipe), tmp_path / "s.onnx", ml_ops="never",
                    string_inputs=True)
    export_onnx(peregrine.compile(pipe), tmp_path / "codes.onnx", ml_ops="never")
    assert _standard_only(tmp_path / "codes.onnx")  # the codes in X: no ai.onnx.ml needed


def test_cli_ml_ops_never(tmp_path, capsys):
    from peregrine.cli import main

    X, y = _data(seed=4)
    model = RandomForestClassifier(10, max_depth=5, random_state=0).fit(X, y)
    artifact = tmp_path / "m.peregrine"
    peregrine.compile(model).save(artifact)
    out = tmp_path / "m.onnx"
    assert main(["export", str(artifact), "--format", "onnx", "-o", str(out),
                 "--ml-ops", "never"]) == 0
    assert "validated" in capsys.readouterr().out
    assert _standard_only(out)
    T = np.nan_to_num(X[:100])
    label = session(str(out)).run(["label"], {"X": T})[0]
    np.testing.assert_array_equal(label, model.predict(T))
