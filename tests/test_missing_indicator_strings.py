"""MissingIndicator on its own reads object input as scikit-learn does (X != X for np.nan,
X == None, X == ""): strings, None and NaN in object arrays and DataFrames, numbers in numeric
arrays; where scikit-learn raises (NaN with missing_values None or "", infinity in a numeric
X, pd.NA) the compiled model raises InputError."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.impute import MissingIndicator

import peregrine
from peregrine.errors import InputError

NAN = np.nan
FIT = {
    "nan": np.array([["a", None, "x"], [NAN, "b", ""], ["c", "d", "y"], ["", None, NAN]],
                    dtype=object),
    "none": np.array([["a", None, "x"], ["e", "b", ""], ["c", "d", None], ["", None, "z"]],
                     dtype=object),
    "empty": np.array([["a", None, "x"], ["e", "b", ""], ["", "d", "y"], ["", None, "z"]],
                      dtype=object),
}
MISSING = {"nan": NAN, "none": None, "empty": ""}
ROWS = [
    ["a", None, "x"], [NAN, "q", ""], ["", "", None], [None, NAN, "y"], ["new", "b", NAN],
    ["c", "d", "y"], [NAN, NAN, NAN], [None, None, None], ["", "", ""],
]


def _sklearn(est, X):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return est.transform(X)
    except (ValueError, TypeError):
        return None


def _check(c, est, X):
    want = _sklearn(est, X)
    if want is None:
        with pytest.raises(InputError):
            c.transform(X)
        return False
    got = c.transform(X)
    got = got.toarray() if hasattr(got, "toarray") else np.asarray(got)
    want = want.toarray() if hasattr(want, "toarray") else want
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    return True


@pytest.mark.parametrize("backend", ["reference", "native"])
@pytest.mark.parametrize("features", ["missing-only", "all"])
@pytest.mark.parametrize("error_on_new", [True, False])
@pytest.mark.parametrize("kind", sorted(MISSING))
def test_object_input(kind, features, error_on_new, backend):
    est = MissingIndicator(missing_values=MISSING[kind], features=features,
                           error_on_new=error_on_new).fit(FIT[kind])
    c = peregrine.compile(est, backend=backend)
    answered = 0
    for row in ROWS:  # one row, then every row up to it as a batch
        answered += _check(c, est, np.array([row], dtype=object))
    for k in range(2, len(ROWS) + 1):
        _check(c, est, np.array(ROWS[:k], dtype=object))
    assert answered
    frame = pd.DataFrame(FIT[kind], columns=["p", "q", "r"])
    _check(c, est, frame)


@pytest.mark.parametrize("backend", ["reference", "native"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_numeric_input_with_nan(dtype, backend):
    """Fitted on strings or on numbers, a MissingIndicator(np.nan) reads a numeric X with
    isnan; infinity is refused (check_array, allow-nan)."""
    X = np.array([[1.0, NAN, 0.0], [NAN, 2.0, 3.0], [0.0, 0.0, NAN]], dtype=dtype)
    for fit in (FIT["nan"], X):
        est = MissingIndicator(features="all").fit(fit)
        c = peregrine.compile(est, backend=backend)
        for rows in (X, X[:1], X[1:2], np.zeros((2, 3), dtype=dtype)):
            assert _check(c, est, rows)
    ints = np.array([[1, 2, 0]])
    assert _check(c, est, ints)


@pytest.mark.parametrize("backend", ["reference", "torch", "native"])
def test_numeric_infinity_refused(backend):
    """check_array(ensure_all_finite='allow-nan') on a numeric X refuses infinity."""
    X = np.array([[1.0, NAN, 0.0], [NAN, 2.0, np.inf]])
    est = MissingIndicator(features="all").fit(X[:1])
    c = peregrine.compile(est, backend=backend)
    for rows in (X, X[1:]):
        assert not _check(c, est, rows)


def test_pd_na_is_refused():
    est = MissingIndicator(features="all").fit(FIT["nan"])
    c = peregrine.compile(est, backend="reference")
    X = np.array([["a", pd.NA, "x"]], dtype=object)
    assert _sklearn(est, X) is None  # the mask's X != X raises TypeError on pd.NA
    with pytest.raises(InputError):
        c.transform(X)


def test_sparse_output():
    est = MissingIndicator(features="all", sparse=True).fit(FIT["nan"])
    c = peregrine.compile(est, backend="reference")
    X = np.array(ROWS[:3], dtype=object)
    want, got = est.transform(X), c.transform(X)
    assert type(got) is type(want)
    np.testing.assert_array_equal(got.toarray(), want.toarray())


@pytest.mark.parametrize("kind", ["none", "empty"])
def test_numeric_input_refused_with_none_or_string(kind):
    """missing_values None or "" on a numeric X: scikit-learn refuses the pair of types."""
    est = MissingIndicator(missing_values=MISSING[kind], features="all").fit(FIT[kind])
    c = peregrine.compile(est, backend="reference")
    for X in (np.array([[1.0, 2.0, 3.0]]), np.array([[1, 2, 3]]), np.zeros((2, 3))):
        assert _sklearn(est, X) is None
        with pytest.raises(InputError, match="MissingIndicator"):
            c.transform(X)
    assert _check(c, est, np.array([["a", 1.5, None]], dtype=object))  # numbers in objects
