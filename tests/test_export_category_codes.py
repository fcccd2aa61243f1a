"""ONNX export of models that read string / pandas category columns (CATEGORY_MAP at the
runtime boundary): the file's X holds each such column's code (the category's position among
those recorded at fit time, NaN for a missing or unseen value), as the compiled model's
numeric input and export_library do, and its metadata lists the categories in code order.
XGBoost and LightGBM on pandas categories (string and integer categories, missing values),
a ColumnTransformer one-hot encoding a string column, against the libraries on DataFrames;
CatBoost's hashed string columns stay refused, naming the columns."""

from __future__ import annotations

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pd = pytest.importorskip("pandas")

import peregrine  # noqa: E402
from peregrine.errors import UnsupportedModelError  # noqa: E402
from peregrine.export.onnx import session  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6
LETTERS = [f"k{i:02d}" for i in range(23)]


def _frame(seed=0, n=600):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "a": rng.normal(size=n),
        "city": pd.Categorical(rng.choice(LETTERS, n), categories=LETTERS[::-1]),
        "size": pd.Categorical(rng.choice([30, 10, 20], n)),
    })
    df.loc[::9, "city"] = np.nan
    y = ((df["city"].cat.codes.to_numpy() % 3 == 0) + df["a"] + (df["size"] == 20) > 0.7)
    return df, y.astype(int)


def _codes(df):
    """The file's X: numeric columns as they are, category columns as their codes."""
    cols = []
    for c in df.columns:
        if isinstance(df[c].dtype, pd.CategoricalDtype):
            code = df[c].cat.codes.to_numpy().astype(np.float64)
            cols.append(np.where(code < 0, np.nan, code))
        else:
            cols.append(df[c].to_numpy(np.float64))
    return np.column_stack(cols)


def _metadata(path):
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_pandas_category_columns_export_as_codes(tmp_path, library):
    df, y = _frame()
    if library == "xgboost":
        xgb = pytest.importorskip("xgboost")
        model = xgb.XGBClassifier(n_estimators=12, max_depth=4, enable_categorical=True,
                                  max_cat_to_onehot=1).fit(df, y)
    else:
        lgb = pytest.importorskip("lightgbm")
        model = lgb.LGBMClassifier(n_estimators=12, num_leaves=8, verbose=-1,
                                   min_data_per_group=5, cat_smooth=1).fit(df, y)
    test, _ = _frame(seed=1, n=400)
    path = tmp_path / "cat.onnx"
    peregrine.compile(model).export_onnx(path)
    label, proba = session(path).run(["label", "probabilities"], {"X": _codes(test)})
    assert np.array_equal(label, model.predict(test))
    np.testing.assert_allclose(proba, model.predict_proba(test), rtol=RTOL, atol=ATOL)
    meta = _metadata(path)
    assert json.loads(meta["peregrine.category_codes.city"]) == LETTERS[::-1]
    assert json.loads(meta["peregrine.category_codes.size"]) == [10, 20, 30]


def test_one_hot_string_column_exports_as_codes(tmp_path):
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    rng = np.random.default_rng(4)
    n = 500
    df = pd.DataFrame({"x": rng.normal(size=n),
                       "colour": rng.choice(["red", "green", "blue"], n).astype(object)})
    y = ((df["colour"] == "red") + df["x"] > 0.5).astype(int)
    model = make_pipeline(ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore"),
                                              ["colour"])], remainder="passthrough"),
                          LogisticRegression()).fit(df, y)
    path = tmp_path / "oh.onnx"
    peregrine.compile(model).export_onnx(path, sample=df.iloc[:300])  # a DataFrame sample
    cats = json.loads(_metadata(path)["peregrine.category_codes.colour"])
    test = df.iloc[:200].copy()
    test.loc[test.index[::13], "colour"] = "purple"  # unseen: code NaN, an all-zero one-hot
    code = np.asarray([cats.index(v) if v in cats else np.nan for v in test["colour"]],
                      np.float64)
    X = np.column_stack([test["x"].to_numpy(), code])
    label, proba = session(path).run(["label", "probabilities"], {"X": X})
    assert np.array_equal(label, model.predict(test))
    np.testing.assert_allclose(proba, model.predict_proba(test), rtol=RTOL, atol=ATOL)


def test_catboost_hashed_columns_refused_naming_them(tmp_path):
    catboost = pytest.importorskip("catboost")
    df, y = _frame(seed=2, n=200)
    df = df.assign(city=df["city"].astype(object).fillna("none").astype(str),
                   size=df["size"].astype(object).astype(str))
    model = catboost.CatBoostClassifier(iterations=5, depth=3, verbose=0,
                                        cat_features=["city", "size"]).fit(df, y)
    compiled = peregrine.compile(model)
    with pytest.raises(UnsupportedModelError, match=r"hashes string columns \(city, size"):
        compiled.export_onnx(tmp_path / "cb.onnx")
    assert not (tmp_path / "cb.onnx").exists()


def test_cli_export_with_a_string_column_sample(tmp_path, capsys):
    """``peregrine export ... --sample DATA``: a CSV with a string column validates through
    the runtime's conversion to codes."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    from peregrine.cli import main

    rng = np.random.default_rng(6)
    df = pd.DataFrame({"x": rng.normal(size=300),
                       "colour": rng.choice(["red", "green", "blue"], 300).astype(object)})
    y = ((df["colour"] == "blue") + df["x"] > 0.4).astype(int)
    model = make_pipeline(ColumnTransformer([("oh", OneHotEncoder(handle_unknown="ignore"),
                                              ["colour"])], remainder="passthrough"),
                          LogisticRegression()).fit(df, y)
    artifact = tmp_path / "m.peregrine"
    peregrine.compile(model).save(artifact)
    df.iloc[:100].to_csv(tmp_path / "sample.csv", index=False)
    assert main(["export", str(artifact), "--format", "onnx", "-o", str(tmp_path / "m.onnx"),
                 "--sample", str(tmp_path / "sample.csv")]) == 0
    assert "validated" in capsys.readouterr().out
    assert "peregrine.category_codes.colour" in _metadata(tmp_path / "m.onnx")
