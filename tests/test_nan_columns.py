"""NaN refused only in the input columns from which it reaches a step that rejects it
(frontends/nan_columns.py): a ColumnTransformer whose OneHotEncoder reads a numeric column with
NaN (a fitted category, or an unknown one) beside a StandardScaler, then a linear model,
answers as scikit-learn does; a NaN in the scaler's columns still raises InputError naming
the column, on every path (numpy, DataFrame, one row, each backend, a saved artifact)."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import (
    MinMaxScaler,
    OneHotEncoder,
    OrdinalEncoder,
    StandardScaler,
)

import peregrine
from peregrine.errors import InputError

pytestmark = pytest.mark.filterwarnings("ignore:Found unknown categories")


def _data(n: int, seed: int, nan_codes: bool = True) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 5, n).astype(float)
    if nan_codes:
        codes[rng.random(n) < 0.2] = np.nan
    gaps = rng.normal(size=n)
    gaps[rng.random(n) < 0.2] = np.nan
    return pd.DataFrame({"code": codes, "kind": rng.choice(["a", "b", "c"], n),
                         "x": rng.normal(size=n), "gap": gaps, "y": rng.normal(size=n)})


def _model(encoder=None, fit_nan: bool = True):
    train = _data(2000, 0, nan_codes=fit_nan)
    ct = ColumnTransformer([
        ("oh", encoder or OneHotEncoder(handle_unknown="ignore"), ["code", "kind"]),
        ("imp", make_pipeline(SimpleImputer(), StandardScaler()), ["gap"]),
        ("sc", StandardScaler(), ["x", "y"])])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make_pipeline(ct, LogisticRegression()).fit(train, np.arange(2000) % 2)


@pytest.mark.parametrize("backend", ["reference", "native", "torch"])
@pytest.mark.parametrize("fit_nan", [True, False], ids=["nan-category", "nan-unknown"])
def test_nan_in_encoded_and_imputed_columns_is_answered(backend, fit_nan, tmp_path):
    model = _model(fit_nan=fit_nan)
    fast = peregrine.compile(model, backend=backend)
    X = _data(3001, 1)
    assert X["code"].isna().any() and X["gap"].isna().any()
    fast.save(tmp_path / "m.peregrine")
    for m in (fast, peregrine.load(tmp_path / "m.peregrine")):
        for rows in (X, X[:1], X.iloc[[i for i in range(50) if np.isnan(X["code"][i])][:1]]):
            np.testing.assert_allclose(m.predict_proba(rows), model.predict_proba(rows),
                                       rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(m.predict(rows), model.predict(rows))
        as_array = X.to_numpy(dtype=object)
        np.testing.assert_allclose(m.predict_proba(as_array), model.predict_proba(X),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["reference", "native", "torch"])
def test_nan_where_it_reaches_the_model_still_raises(backend):
    model = _model()
    fast = peregrine.compile(model, backend=backend)
    for col in ("x", "y"):
        X = _data(100, 2)
        X.loc[7, col] = np.nan
        with pytest.raises(ValueError):
            model.predict(X)
        for rows in (X, X[7:8]):
            with pytest.raises(InputError, match=f"column {list(X.columns).index(col)}"):
                fast.predict_proba(rows)
    X = _data(100, 3)
    X.loc[5, "code"] = np.inf  # infinity is no category: OneHotEncoder refuses it
    with pytest.raises(ValueError):
        model.predict(X)
    with pytest.raises(InputError):
        fast.predict(X)


def test_a_nan_passing_step_keeps_refusing():
    """A MinMaxScaler keeps NaN as NaN: it reaches the model, so NaN is refused in the
    column it reads, as scikit-learn refuses it; an OrdinalEncoder that never saw NaN gives
    it its unknown value, and both answer."""
    train = _data(2000, 0, nan_codes=False)
    for step in (MinMaxScaler(), OrdinalEncoder(handle_unknown="use_encoded_value",
                                                unknown_value=-1)):
        ct = ColumnTransformer([("code", step, ["code"]),
                                ("oh", OneHotEncoder(handle_unknown="ignore"), ["kind"]),
                                ("imp", SimpleImputer(), ["gap"])])
        model = make_pipeline(ct, LogisticRegression()).fit(train, np.arange(2000) % 2)
        fast = peregrine.compile(model, backend="native")
        X = _data(100, 4)
        if isinstance(step, MinMaxScaler):
            with pytest.raises(ValueError):
                model.predict(X)
            with pytest.raises(InputError, match="column 0"):
                fast.predict(X)
        else:  # an unseen NaN is the unknown value
            np.testing.assert_array_equal(fast.predict(X), model.predict(X))
        X["code"] = X["code"].fillna(1.0)  # NaN left in "gap" only: imputed
        np.testing.assert_array_equal(fast.predict(X), model.predict(X))


def _ordinal_frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"code": rng.integers(0, 5, n).astype(float), "x": rng.normal(size=n),
                       "z": rng.normal(size=n)})
    df.loc[::7, "code"] = np.nan
    return df


@pytest.mark.parametrize("backend", ["reference", "native", "torch"])
@pytest.mark.parametrize("encoder, fit_nan", [
    (OrdinalEncoder(encoded_missing_value=-1), True),
    (OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1), False),
], ids=["nan-category-coded", "nan-unknown-coded"])
def test_ordinal_encoder_coding_nan_answers_beside_a_scaler(backend, encoder, fit_nan):
    """An OrdinalEncoder that codes NaN as a number (a fitted NaN category with a numeric
    encoded_missing_value, or an unseen NaN as a numeric unknown value) beside a
    StandardScaler, then LogisticRegression: scikit-learn answers NaN in the coded column and
    refuses it in the scaled ones, and so does the compiled model (the ordinal map was taken
    as mixing columns before: every NaN refused)."""
    train = _ordinal_frame(600, 0)
    if not fit_nan:
        train["code"] = train["code"].fillna(1.0)
    ct = ColumnTransformer([("e", encoder, ["code"]), ("s", StandardScaler(), ["x", "z"])])
    model = make_pipeline(ct, LogisticRegression()).fit(train, np.arange(600) % 2)
    fast = peregrine.compile(model, backend=backend)
    X = _ordinal_frame(200, 1)
    for rows in (X, X[:1], X[7:8]):
        np.testing.assert_allclose(fast.predict_proba(rows), model.predict_proba(rows),
                                   rtol=1e-5, atol=1e-6)
    X.loc[3, "z"] = np.nan
    with pytest.raises(ValueError):
        model.predict(X)
    with pytest.raises(InputError, match="column 2"):
        fast.predict(X)


def test_ordinal_encoder_passing_nan_on_keeps_refusing():
    """unknown_value=np.nan: an unseen NaN stays NaN and reaches the model, which refuses it;
    so does the compiled model, naming the column."""
    train = _ordinal_frame(600, 0)
    train["code"] = train["code"].fillna(1.0)
    ct = ColumnTransformer([
        ("e", OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=np.nan),
         ["code"]),
        ("s", StandardScaler(), ["x", "z"])])
    model = make_pipeline(ct, LogisticRegression()).fit(train, np.arange(600) % 2)
    fast = peregrine.compile(model, backend="native")
    X = _ordinal_frame(50, 2)
    with pytest.raises(ValueError):
        model.predict(X)
    with pytest.raises(InputError, match="column 0"):
        fast.predict(X)
    X["code"] = X["code"].fillna(2.0)
    np.testing.assert_array_equal(fast.predict(X), model.predict(X))
