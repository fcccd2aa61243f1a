"""None and NaN in string (object) columns are different values to scikit-learn 1.9: an encoder
fitted on both has two categories (``[..., None, nan]``), one fitted on one of them finds the
other unknown, pd.NA is unknown to every encoder, SimpleImputer(missing_values=np.nan) passes a
None through and SimpleImputer(missing_values=None) refuses NaN. Peregrine gives the same
answers and, where scikit-learn raises, an InputError: numpy object arrays and DataFrames, the
few-rows path (<= 64 rows, categories.few_codes) and the batch path, on every backend."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.impute import MissingIndicator, SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder

import peregrine
from peregrine.errors import InputError

BACKENDS = [b for b in ("reference", "torch", "native")
            if b != "native" or importlib.util.find_spec("llvmlite")]

FITS = {
    "none": ["a", "b", None, "a", "b", "c"],
    "nan": ["a", "b", np.nan, "a", "b", "c"],
    "both": ["a", "b", None, np.nan, "a", "b", "c", None, np.nan],
}
VALUES = [None, np.nan, float("nan"), np.float32("nan"), pd.NA, "zz", "a", "c"]
ENCODERS = {
    "ohe_error": lambda: OneHotEncoder(handle_unknown="error", sparse_output=False),
    "ohe_ignore": lambda: OneHotEncoder(handle_unknown="ignore", sparse_output=False),
    "ohe_infrequent": lambda: OneHotEncoder(handle_unknown="infrequent_if_exist",
                                            min_frequency=2, sparse_output=False),
    "ord_error": lambda: OrdinalEncoder(),
    "ord_value": lambda: OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-7,
                                        encoded_missing_value=-3),
}


def _column(values: list) -> np.ndarray:
    out = np.empty((len(values), 1), dtype=object)
    out[:, 0] = values
    return out


def _rows(value, n: int) -> np.ndarray:
    """n rows: the known strings, then ``value`` in every third row."""
    vals = ["a", "b", value] * (n // 3 + 1)
    return _column(vals[:n])


def _frame(X: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame({"s": pd.Series(X[:, 0], dtype=object)})


def _agree(est, compiled, X, method: str = "transform") -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            want = getattr(est, method)(X)
        except (ValueError, TypeError):
            with pytest.raises(InputError):
                getattr(compiled, method)(X)
            return
    got = getattr(compiled, method)(X)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64),
                               np.asarray(want, dtype=np.float64), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("encoder", sorted(ENCODERS))
@pytest.mark.parametrize("fit", sorted(FITS))
def test_encoder_tells_none_from_nan(fit, encoder, backend):
    for frame in (False, True):
        X = _column(FITS[fit])
        est = ENCODERS[encoder]().fit(_frame(X) if frame else X)
        compiled = peregrine.compile(est, backend=backend)
        for value in VALUES:
            for n in (3, 100):  # the few-rows path and the batch path
                rows = _rows(value, n)
                _agree(est, compiled, _frame(rows) if frame else rows)


def test_categories_hold_none_and_nan_apart():
    est = OneHotEncoder(sparse_output=False).fit(_column(FITS["both"]))
    assert est.categories_[0][-2] is None and est.categories_[0][-1] != est.categories_[0][-1]
    compiled = peregrine.compile(est, backend="reference")
    got = compiled.transform(_column([None, np.nan]))
    np.testing.assert_array_equal(got, est.transform(_column([None, np.nan])))
    assert not (got[0] == got[1]).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("missing", ["nan", "none"])
def test_imputer_then_encoder(missing, backend):
    """SimpleImputer(np.nan) passes None on to the encoder; SimpleImputer(None) refuses NaN."""
    fit = FITS[missing] + ["a"]
    mv = np.nan if missing == "nan" else None
    y = np.arange(len(fit)) % 2
    for handle in ("ignore", "error"):
        est = make_pipeline(SimpleImputer(missing_values=mv, strategy="most_frequent"),
                            OneHotEncoder(handle_unknown=handle, sparse_output=False),
                            LogisticRegression()).fit(_column(fit), y)
        compiled = peregrine.compile(est, backend=backend)
        for value in VALUES:
            if value is pd.NA:  # scikit-learn's imputer raises TypeError (docs: Known gaps)
                continue
            for n in (3, 100):
                rows = _rows(value, n)
                for X in (rows, _frame(rows)):
                    _agree(est, compiled, X, "predict_proba")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("missing", ["nan", "none"])
def test_missing_indicator_on_strings(missing, backend):
    """MissingIndicator beside an encoder marks its own missing value only (with None, NaN
    is refused)."""
    mv = np.nan if missing == "nan" else None
    est = ColumnTransformer([
        ("e", OneHotEncoder(handle_unknown="ignore", sparse_output=False), [0]),
        ("m", MissingIndicator(missing_values=mv, features="all"), [0])]).fit(
            _column(FITS[missing]))
    compiled = peregrine.compile(est, backend=backend)
    for value in (None, np.nan, "zz", "a"):
        for n in (3, 100):
            rows = _rows(value, n)
            for X in (rows, _frame(rows)):
                _agree(est, compiled, X)


def test_string_dtypes_missing_values():
    """A pandas ``str`` column's missing values are NaN to scikit-learn, a nullable
    ``string`` column's pd.NA (unknown) and a categorical's NaN."""
    est = OneHotEncoder(handle_unknown="ignore", sparse_output=False).fit(
        _frame(_column(FITS["both"])))
    compiled = peregrine.compile(est, backend="reference")
    for dtype in ("str", "string", "category"):
        for n in (3, 100):
            vals = (["a", None, np.nan] * 40)[:n]
            X = pd.DataFrame({"s": pd.Series(vals, dtype=dtype)})
            np.testing.assert_array_equal(compiled.transform(X), est.transform(X))


def test_artifact_round_trip_keeps_none_apart(tmp_path):
    est = OrdinalEncoder().fit(_column(FITS["both"]))
    compiled = peregrine.compile(est, backend="reference")
    path = tmp_path / "m.peregrine"
    compiled.save(path)
    loaded = peregrine.load(path)
    X = _column(["a", None, np.nan, "c"])
    np.testing.assert_array_equal(loaded.transform(X), est.transform(X))
