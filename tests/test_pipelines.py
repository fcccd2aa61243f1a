"""DataFrame pipelines with string columns (encoded once at the runtime boundary), checked on
the reference and torch backends against scikit-learn: unseen categories, missing strings,
single rows, reordered columns, and typed errors for what is not supported."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer, make_column_selector
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import (
    FunctionTransformer,
    OneHotEncoder,
    OrdinalEncoder,
    StandardScaler,
)

import peregrine
from peregrine.errors import InputError, UnsupportedModelError

BACKENDS = ["reference", "torch"]
RTOL, ATOL = 1e-5, 1e-6


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "age": rng.normal(40, 10, n),
        "city": rng.choice(["paris", "lyon", "nice", "brest"], n).astype(object),
        "income": rng.lognormal(3, 1, n),
        "plan": rng.choice(["a", "b", "c"], n, p=[0.6, 0.35, 0.05]).astype(object),
    })
    df.loc[::11, "age"] = np.nan
    df.loc[::7, "city"] = np.nan
    return df


def _target(df: pd.DataFrame) -> np.ndarray:
    score = (df["city"] == "paris") * 1.5 + np.nan_to_num(df["age"]) / 40 + (df["plan"] == "b")
    return (score > 1.6).astype(int).to_numpy() + (df["plan"] == "c").to_numpy()


def _preprocess(numeric_scaler=True):
    num = make_pipeline(SimpleImputer(strategy="median"), StandardScaler())
    cat = make_pipeline(SimpleImputer(strategy="most_frequent"),
                        OneHotEncoder(handle_unknown="ignore", sparse_output=False))
    return ColumnTransformer([
        ("num", num if numeric_scaler else SimpleImputer(), ["age", "income"]),
        ("cat", cat, ["city"]),
        ("plan", OneHotEncoder(handle_unknown="infrequent_if_exist", min_frequency=20,
                               sparse_output=False), make_column_selector(pattern="plan")),
    ])


def _final_models():
    models = {
        "logreg": lambda: LogisticRegression(max_iter=500),
        "gb": lambda: GradientBoostingClassifier(n_estimators=15, max_depth=3, random_state=0),
        "rf": lambda: RandomForestClassifier(10, max_depth=6, random_state=0),
    }
    if importlib.util.find_spec("lightgbm") is not None:
        import lightgbm

        models["lgbm"] = lambda: lightgbm.LGBMClassifier(n_estimators=15, verbose=-1)
    return models


FINALS = _final_models()


@pytest.fixture(scope="module", params=sorted(FINALS))
def fitted(request):
    df = _frame(400, 0)
    pipe = make_pipeline(_preprocess(), FINALS[request.param]())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pipe.fit(df, _target(df))
    return pipe


def _test_frame() -> pd.DataFrame:
    df = _frame(60, 1)
    df.loc[3, "city"] = "tokyo"  # unseen category
    df.loc[4, "plan"] = "zzz"  # unseen -> infrequent column
    df.loc[5, "city"] = None
    df.loc[6, ["age", "income"]] = np.nan
    return df


def _check(compiled, pipe, df):
    for method in compiled.methods:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = getattr(pipe, method)(df)
        got = getattr(compiled, method)(df)
        assert got.shape == want.shape, method
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=method)
        else:
            assert (got == want).all(), method
        assert got.dtype == want.dtype, method


@pytest.mark.parametrize("backend", BACKENDS)
def test_dataframe_pipeline_matches_sklearn(fitted, backend):
    compiled = peregrine.compile(fitted, backend)
    assert set(compiled.methods) >= {"predict", "predict_proba"}
    df = _test_frame()
    _check(compiled, fitted, df)
    _check(compiled, fitted, df[list(reversed(df.columns))])  # matched by name
    for i in (0, 3, 5):
        _check(compiled, fitted, df.iloc[i : i + 1])


def test_string_columns_become_category_maps(fitted):
    spec = peregrine.compile(fitted, "reference").spec
    assert set(spec.category_maps) == {1, 3}  # city, plan: encoded once at the boundary
    assert spec.allow_nan


def test_ordinal_encoder_strings_with_unknown_and_missing():
    df = _frame(300, 2)
    ct = ColumnTransformer([
        ("ord", OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1,
                               encoded_missing_value=-2), ["city", "plan"]),
        ("num", SimpleImputer(), ["age"]),
    ])
    pipe = make_pipeline(ct, Ridge()).fit(df, np.nan_to_num(df["age"].to_numpy()))
    test = _test_frame()
    for backend in BACKENDS:
        compiled = peregrine.compile(pipe, backend)
        _check(compiled, pipe, test)
        t = peregrine.compile(ct, backend)
        _check(t, ct, test)


def test_transform_only_pipeline_and_passthrough_remainder():
    df = _frame(200, 3)
    ct = ColumnTransformer([("log", FunctionTransformer(np.log1p), ["income"])],
                           remainder="passthrough")
    numeric = df[["age", "income"]]
    ct.fit(numeric)
    for backend in BACKENDS:
        _check(peregrine.compile(ct, backend), ct, numeric)


def test_unsupported_parts_raise_typed_errors():
    df = _frame(100, 4)
    y = _target(df)
    sparse = make_pipeline(ColumnTransformer([("c", OneHotEncoder(), ["city", "plan"])],
                                             sparse_threshold=1.0), LogisticRegression())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sparse.fit(df.fillna("x"), y)
    # a sparse ColumnTransformer output was refused; it is converted now (tests/
    # test_sparse_steps.py): the pipeline gives scikit-learn's answers
    rows = df.fillna("x")
    np.testing.assert_allclose(peregrine.compile(sparse, "reference").predict_proba(rows),
                               sparse.predict_proba(rows), rtol=1e-5, atol=1e-6)
    custom = make_pipeline(FunctionTransformer(lambda x: x + 1), Ridge())
    custom.fit(df[["age", "income"]].fillna(0), y)
    with pytest.raises(UnsupportedModelError, match="FunctionTransformer"):
        peregrine.compile(custom, "reference")


def test_handle_unknown_error_raises_like_sklearn(tmp_path):
    """handle_unknown='error' (the default): every value sklearn rejects is an InputError,
    whether it is an unseen string, a missing value imputed to an unknown fill value, or an
    unseen numeric category; known values give sklearn's numbers (also after save/load)."""
    df = pd.DataFrame({"c": ["a", "b", "c", "a"] * 10, "x": np.arange(40.0) % 3,
                       "o": ["u", "v"] * 20})
    ct = ColumnTransformer([
        ("s", make_pipeline(SimpleImputer(strategy="constant", fill_value="zz"),
                            OneHotEncoder(sparse_output=False)), ["c"]),
        ("n", OneHotEncoder(sparse_output=False), ["x"]),
        ("o", OrdinalEncoder(), ["o"]),
    ])
    pipe = make_pipeline(ct, LogisticRegression()).fit(df, np.arange(40) % 2)
    for backend in BACKENDS:
        compiled = peregrine.compile(pipe, backend)
        assert compiled.spec.category_unknown_error == {0, 2}
        path = tmp_path / f"{backend}.peregrine"
        compiled.save(path)
        for model in (compiled, peregrine.load(path)):
            _check(model, pipe, df)
            for col, value, match in [("c", "q", "'q'"), ("c", None, "column 'c'"),
                                      ("x", 5.0, "5.0"), ("c", "zz", "'zz'"),
                                      ("o", "w", "'w'"), ("o", None, "column 'o'")]:
                bad = df.iloc[:3].copy()
                bad[col] = bad[col].astype(object)
                bad.loc[1, col] = value
                with pytest.raises(ValueError):
                    pipe.predict(bad)
                with pytest.raises(InputError, match=match):
                    model.predict(bad)
