"""ONNX export of a linear model reading one-hot indicators (``onnx_lookup.one_hot_product``):
the file picks each category's row of weights (one Gather from a table, one ReduceSum)
instead of writing the indicator matrix and multiplying it. Against scikit-learn on rows with
unseen, fractional, out-of-range and NaN category values, dropped and infrequent categories,
several classes, string inputs, one row and the float32 level; categories that are not small
integers keep the indicator form."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pd = pytest.importorskip("pandas")

from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.linear_model import LogisticRegression, Ridge  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, StandardScaler  # noqa: E402

import peregrine  # noqa: E402
from peregrine.export import export_onnx  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6
# the test rows hold unseen categories on purpose
pytestmark = pytest.mark.filterwarnings("ignore:Found unknown categories")


def _ops(path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path)).graph.node]


def _numeric(n=900, seed=0, nan=False):
    """Columns 1 and 3 hold small integer categories (3..8 and -2..1), 0 and 2 numbers."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.normal(size=n), rng.integers(3, 9, n).astype(float),
                         rng.normal(size=n), rng.integers(-2, 2, n).astype(float)])
    if nan:
        X[::13, 1] = np.nan
    y = (X[:, 0] + (X[:, 1] == 4) - (X[:, 3] == 0) + (X[:, 3] == -2) > 0.4).astype(int)
    y[::5] += (X[::5, 2] > 0).astype(int)  # a third class where used
    return X, y


def _odd_rows(X):
    T = X[:300].copy()
    T[::7, 1] = 12.0  # unseen, past the categories' range
    T[1::11, 1] = 5.5  # a fraction inside the range
    T[2::17, 3] = -7.0  # unseen, below the range
    T[3::19, 1] = 0.0
    T[4::23, 3] = -0.0  # -0.0 is the category 0
    T[5::29, 0] = np.nan  # not read by the encoder: the scaler, then LR, refuses it
    return T[~np.isnan(T[:, 0])]


def _export(model, path, sample, **kw):
    compiled = peregrine.compile(model, backend="reference")
    report = export_onnx(compiled, path, sample=sample, **kw)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    return report


@pytest.mark.parametrize("encoder, classes", [
    (dict(handle_unknown="ignore"), 2),
    (dict(handle_unknown="ignore", drop="first"), 3),
    (dict(handle_unknown="infrequent_if_exist", min_frequency=160), 3),
    (dict(handle_unknown="ignore", drop="if_binary"), 2),
], ids=["ignore", "drop_first_3class", "infrequent", "drop_if_binary"])
def test_integer_categories_pick_weight_rows(tmp_path, encoder, classes):
    X, y = _numeric()
    y = np.minimum(y, classes - 1)
    ct = ColumnTransformer([("num", StandardScaler(), [0, 2]),
                            ("cat", OneHotEncoder(**encoder), [1, 3])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make_pipeline(ct, LogisticRegression(max_iter=300)).fit(X, y)
    T = _odd_rows(X)
    if encoder.get("drop") == "first":
        T = T[~np.isin(T[:, 1], [12.0, 5.5, 0.0]) & (T[:, 3] != -7.0)]  # drop + unknown: warns
    path = tmp_path / "m.onnx"
    _export(model, path, sample=T)
    ops = _ops(path)
    assert "ReduceSum" in ops and ops.count("Gemm") == 1  # the rows picked; one dense Gemm
    sess = session(str(path))
    for rows in (T, T[:1], T[7:8]):
        label, proba = sess.run(["label", "probabilities"], {"X": rows})
        np.testing.assert_array_equal(label, model.predict(rows))
        np.testing.assert_allclose(proba, model.predict_proba(rows), rtol=RTOL, atol=ATOL)


def test_nan_category_and_unseen_nan(tmp_path):
    X, y = _numeric(nan=True)
    ct = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), [1, 3]),
                            ("num", StandardScaler(), [0, 2])])
    model = make_pipeline(ct, Ridge(alpha=0.5)).fit(X, y.astype(float))
    T = _odd_rows(X)
    T[6::31, 1] = np.nan  # a fitted category of column 1
    T[8::37, 3] = np.nan  # never seen in column 3: no row picked
    path = tmp_path / "r.onnx"
    _export(model, path, sample=T)
    assert "ReduceSum" in _ops(path) and "IsNaN" in _ops(path)
    (got,) = session(str(path)).run(["variable"], {"X": T})
    np.testing.assert_allclose(got.reshape(-1), model.predict(T), rtol=RTOL, atol=ATOL)


def test_one_hot_alone_into_a_linear_model(tmp_path):
    X, y = _numeric()
    model = make_pipeline(OneHotEncoder(handle_unknown="ignore"),
                          LogisticRegression()).fit(X[:, [1, 3]], y)
    T = _odd_rows(X)[:, [1, 3]]
    path = tmp_path / "o.onnx"
    _export(model, path, sample=T)
    assert "Gemm" not in _ops(path)
    label, proba = session(str(path)).run(["label", "probabilities"], {"X": T})
    np.testing.assert_array_equal(label, model.predict(T))
    np.testing.assert_allclose(proba, model.predict_proba(T), rtol=RTOL, atol=ATOL)


def test_non_integer_categories_keep_the_indicators(tmp_path):
    X, y = _numeric()
    X[:, 1] = X[:, 1] / 4.0  # 0.75, 1.0, 1.25, ...: not whole numbers
    ct = ColumnTransformer([("num", StandardScaler(), [0, 2]),
                            ("cat", OneHotEncoder(handle_unknown="ignore"), [1])])
    model = make_pipeline(ct, LogisticRegression()).fit(X, y)
    path = tmp_path / "f.onnx"
    _export(model, path, sample=X[:200])
    assert "ReduceSum" not in _ops(path)
    label, proba = session(str(path)).run(["label", "probabilities"], {"X": X[:200]})
    np.testing.assert_array_equal(label, model.predict(X[:200]))
    np.testing.assert_allclose(proba, model.predict_proba(X[:200]), rtol=RTOL, atol=ATOL)


def _strings(n=800, seed=0):
    rng = np.random.default_rng(seed)
    words = np.array([f"w{k}" for k in range(30)], dtype=object)
    df = pd.DataFrame({"a": words[rng.integers(0, 30, n)], "x": rng.normal(size=n),
                       "b": words[rng.integers(0, 12, n)], "c": words[rng.integers(5, 25, n)]})
    df.loc[::17, "b"] = np.nan
    y = ((df["a"] < "w15").astype(int) + (df["c"] == "w7") + df["x"] > 0.8).astype(int)
    return df, y


def test_string_inputs_pick_weight_rows(tmp_path):
    df, y = _strings()
    ct = ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore"), ["a", "b", "c"]),
                            ("num", StandardScaler(), ["x"])])
    model = make_pipeline(ct, LogisticRegression(max_iter=300)).fit(df, y)
    test, _ = _strings(300, seed=1)
    test.loc[test.index[::9], "a"] = "unseen"
    test.loc[test.index[4::11], "c"] = np.nan  # never missing at fit
    path = tmp_path / "s.onnx"
    _export(model, path, sample=test, string_inputs=True)
    assert "ReduceSum" in _ops(path)
    feed = {"X": test[["x"]].to_numpy(np.float64)}
    for c in "abc":
        feed[c] = np.asarray([v if isinstance(v, str) else "" for v in test[c]],
                             dtype=object).reshape(-1, 1)
    label, proba = session(str(path)).run(["label", "probabilities"], feed)
    np.testing.assert_array_equal(label, model.predict(test))
    np.testing.assert_allclose(proba, model.predict_proba(test), rtol=RTOL, atol=ATOL)
    one = {k: v[3:4] for k, v in feed.items()}
    _, p1 = session(str(path)).run(["label", "probabilities"], one)
    np.testing.assert_allclose(p1, model.predict_proba(test[3:4]), rtol=RTOL, atol=ATOL)


def test_float32_level(tmp_path):
    X, y = _numeric()
    ct = ColumnTransformer([("num", StandardScaler(), [0, 2]),
                            ("cat", OneHotEncoder(handle_unknown="ignore"), [1, 3])])
    model = make_pipeline(ct, LogisticRegression()).fit(X, y)
    T = _odd_rows(X)
    path = tmp_path / "f32.onnx"
    report = _export(model, path, sample=T, precision="float32")
    assert report.deviations["predict"] == {"mismatches": 0}
    assert "ReduceSum" in _ops(path)
    label, proba = session(str(path)).run(["label", "probabilities"],
                                          {"X": T.astype(np.float32)})
    np.testing.assert_array_equal(label, model.predict(T.astype(np.float32)))
    np.testing.assert_allclose(proba, model.predict_proba(T.astype(np.float32)),
                               rtol=1e-4, atol=1e-5)
