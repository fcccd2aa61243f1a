"""Column injection at the input boundary: a DataFrame's columns no op reads are not
converted, yet everything scikit-learn validates is still validated: NaN/inf in any column
a NaN-rejecting first step reads (SelectKBest's check_array reads all of them) raises; a
column a ColumnTransformer drops is never looked at (scikit-learn does not either); values a
later tree re-validates in float32 raise where they are read."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import RandomForestClassifier
from sklearn.feature_selection import SelectKBest
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import peregrine
from peregrine import CompileOptions
from peregrine.errors import InputError
from peregrine.runtime.inputs import read_columns
from tests.compile_helpers import sklearn_predict_or_none

BACKENDS = ["reference", "torch", "native"]
rng = np.random.default_rng(0)
COLS = [f"f{j}" for j in range(60)]
DF = pd.DataFrame(rng.normal(size=(600, 60)), columns=COLS)
Y = (DF["f3"] + DF["f40"] > 0).astype(int)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("passes", [True, False])
def test_selector_validates_every_column(backend, passes):
    p = make_pipeline(SelectKBest(k=5), RandomForestClassifier(
        10, max_depth=5, random_state=0)).fit(DF, Y)
    opts = CompileOptions() if passes else CompileOptions(disable_passes=("inject", "pushdown"))
    c = peregrine.compile(p, backend, options=opts)
    kept = np.flatnonzero(p[0].get_support())
    assert read_columns(c.spec) == frozenset(int(k) for k in kept)  # only those converted
    np.testing.assert_array_equal(c.predict(DF), p.predict(DF))
    dropped = int(np.flatnonzero(~p[0].get_support())[0])
    for col in (dropped, int(kept[0])):
        for v in (np.nan, np.inf, -np.inf, 1e39, -1e39, 1e30):
            for n in (200, 3):  # the batch and the few-rows conversions
                bad = DF.iloc[:n].copy()
                bad.iloc[1, col] = v
                want = sklearn_predict_or_none(p, bad)
                if want is None:
                    with pytest.raises(InputError):
                        c.predict(bad)
                else:
                    np.testing.assert_array_equal(c.predict(bad), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_dropped_column_is_not_looked_at(backend):
    ct = ColumnTransformer([("s", StandardScaler(), COLS[:10])])  # remainder dropped
    p = make_pipeline(ct, RandomForestClassifier(5, max_depth=4, random_state=0)).fit(DF, Y)
    c = peregrine.compile(p, backend)
    bad = DF.iloc[:50].copy()
    bad["f55"] = np.nan
    bad.loc[3, "f56"] = np.inf
    bad["f57"] = bad["f57"].astype(object)
    bad.loc[4, "f57"] = "text"
    np.testing.assert_array_equal(c.predict(bad), p.predict(bad))
