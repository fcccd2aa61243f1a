"""pd.NA in a string column read by a SimpleImputer or a MissingIndicator: scikit-learn's
missing-value mask (``X != X``, ``X == None``) raises TypeError ("boolean value of NA is
ambiguous"); the compiled model raises InputError naming the column, on the batch path and the
few-rows path, for object and nullable ``string`` columns. Where scikit-learn answers (pd.NA
read only by a OneHotEncoder, an unseen value there), the compiled model answers the same."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder

import peregrine
from peregrine.errors import InputError

DF = pd.DataFrame({"s": ["a", "b", np.nan, "a"] * 10, "t": ["u", "v", "w", "u"] * 10,
                   "x": np.arange(40.0)})
Y = np.arange(40) % 2


def _imputing(imputer):
    return make_pipeline(ColumnTransformer([
        ("s", make_pipeline(imputer, OneHotEncoder(handle_unknown="ignore")), ["s"]),
        ("t", OneHotEncoder(handle_unknown="ignore"), ["t"])], remainder="passthrough"),
        LogisticRegression())


IMPUTERS = {
    "most_frequent": SimpleImputer(strategy="most_frequent"),
    "constant": SimpleImputer(strategy="constant", fill_value="zz"),
}


def _with_na(df, col, dtype):
    bad = df.iloc[:9].copy()
    bad[col] = bad[col].astype(dtype)
    bad.loc[4, col] = pd.NA
    return bad


@pytest.mark.parametrize("backend", ["reference", "native"])
@pytest.mark.parametrize("name", list(IMPUTERS))
@pytest.mark.parametrize("dtype", ["object", "string"])
def test_na_read_by_an_imputer_raises(backend, name, dtype):
    p = _imputing(IMPUTERS[name]).fit(DF, Y)
    c = peregrine.compile(p, backend)
    np.testing.assert_array_equal(c.predict(DF), p.predict(DF))
    bad = _with_na(DF, "s", dtype)
    with pytest.raises(TypeError):
        p.predict(bad)
    for rows in (bad, bad.iloc[3:6]):  # vectorised lookup, and the few-rows path
        with pytest.raises(InputError, match=r"column 's' holds pd.NA.*SimpleImputer"):
            c.predict(rows)


@pytest.mark.parametrize("dtype", ["object", "string"])
def test_na_read_only_by_an_encoder_answers_like_sklearn(dtype):
    p = _imputing(IMPUTERS["most_frequent"]).fit(DF, Y)
    c = peregrine.compile(p, "reference")
    bad = _with_na(DF, "t", dtype)
    np.testing.assert_array_equal(c.predict(bad), p.predict(bad))
    np.testing.assert_allclose(c.predict_proba(bad), p.predict_proba(bad), rtol=1e-5,
                               atol=1e-6)


def test_imputer_alone_returning_strings():
    imp = SimpleImputer(strategy="most_frequent").fit(DF[["s"]])
    c = peregrine.compile(imp, "reference")
    bad = _with_na(DF[["s"]], "s", "object")
    with pytest.raises(TypeError):
        imp.transform(bad)
    with pytest.raises(InputError, match="pd.NA"):
        c.transform(bad)
