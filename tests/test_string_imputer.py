"""SimpleImputer on string columns as the last step (issue #11 item 7): transform returns the
strings themselves, as scikit-learn does (an object array: the input's values, the missing
ones replaced by the fitted statistic, unseen strings passed through unchanged), on every
backend, from arrays and DataFrames, and after a save/load round trip."""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline

import peregrine
from peregrine.errors import UnsupportedModelError

BACKENDS = [b for b in ("reference", "torch", "torchscript", "native")
            if b != "native" or importlib.util.find_spec("llvmlite")]

FIT_NAN = np.array([["a", "x"], [np.nan, "y"], ["a", np.nan], ["b", "y"], ["a", "x"]],
                   dtype=object)
FIT_NONE = np.where(pd.isna(FIT_NAN), None, FIT_NAN)
# unseen strings, both kinds of missing, a missing whole row
ROWS_NAN = np.array([["a", "q"], [np.nan, np.nan], ["new", "y"], ["b", None]], dtype=object)
ROWS_NONE = np.array([["a", "q"], [None, None], ["new", "y"], ["b", "x"]], dtype=object)


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """Element-wise identity of two object arrays (NaN equals NaN, None equals None)."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    return all(g is w or g == w or (isinstance(g, float) and isinstance(w, float) and g != g
                                    and w != w)
               for g, w in zip(got.ravel(), want.ravel()))


CASES = {
    "most_frequent": (lambda: SimpleImputer(strategy="most_frequent"), FIT_NAN, ROWS_NAN),
    "constant": (lambda: SimpleImputer(strategy="constant", fill_value="zz"), FIT_NAN,
                 ROWS_NAN),
    "missing_none": (lambda: SimpleImputer(strategy="most_frequent", missing_values=None),
                     FIT_NONE, ROWS_NONE),
    "in_pipeline": (lambda: make_pipeline(SimpleImputer(strategy="most_frequent")), FIT_NAN,
                    ROWS_NAN),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_string_imputer_last_step_returns_strings(case, backend):
    make, X, rows = CASES[case]
    est = make().fit(X)
    compiled = peregrine.compile(est, backend=backend)
    want = est.transform(rows)
    got = compiled.transform(rows)
    assert want.dtype == object
    assert _same(got, want), (got.tolist(), want.tolist())
    assert "new" in got[:, 0] and "q" in got[:, 1]  # unseen strings pass through


@pytest.mark.parametrize("backend", BACKENDS)
def test_string_imputer_dataframe_and_round_trip(backend, tmp_path):
    cols = ["city", "kind"]
    est = SimpleImputer(strategy="most_frequent").fit(pd.DataFrame(FIT_NAN, columns=cols))
    compiled = peregrine.compile(est, backend=backend)
    frame = pd.DataFrame(ROWS_NAN, columns=cols)
    want = est.transform(frame)
    assert _same(compiled.transform(frame), want)
    # columns matched by name, as scikit-learn matches them
    assert _same(compiled.transform(frame[cols[::-1]][cols]), want)
    path = tmp_path / "imputer.pgm"
    compiled.save(path)
    assert _same(peregrine.load(path).transform(frame), want)


def test_string_imputer_with_indicator_last_is_refused_by_name():
    est = SimpleImputer(strategy="most_frequent", add_indicator=True).fit(FIT_NAN)
    with pytest.raises(UnsupportedModelError, match="SimpleImputer"):
        peregrine.compile(est, backend="reference")
