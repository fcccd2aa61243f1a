"""NaN stored in a scipy.sparse input, against the library on the same matrix.

scikit-learn's trees and forests take NaN in a dense row (missing_go_to_left) but validate a
sparse X with NaN refused; IsolationForest takes it and its sparse traversal sends it right at
every node, as +inf; XGBoost and LightGBM read it as missing, as in a dense array
(ModelSpec.sparse_nan, runtime/sparse.py). Refused means InputError, answered means the
library's answer."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.ensemble import (
    BaggingClassifier,
    ExtraTreesRegressor,
    IsolationForest,
    RandomForestClassifier,
    VotingClassifier,
)
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MaxAbsScaler
from sklearn.tree import DecisionTreeClassifier

import peregrine
from peregrine.errors import InputError

BACKENDS = ["reference", "torch", "native"]
X = sp.random(300, 6, density=0.4, random_state=0, format="csr")
Y = (X.toarray()[:, 0] + X.toarray()[:, 3] > 0.4).astype(int)


def _holes(dense: np.ndarray) -> np.ndarray:
    """The training rows with NaN where a value was stored in column 0 or 2 of some rows:
    the trees learn a missing-value direction (a dense NaN then differs from +inf)."""
    out = dense.copy()
    out[::7, 0] = np.nan
    out[1::11, 2] = np.nan
    return out


def _models():
    dense = _holes(X.toarray())
    lgb = pytest.importorskip("lightgbm")
    xgb = pytest.importorskip("xgboost")
    return {
        "tree": (DecisionTreeClassifier(random_state=0).fit(dense, Y), "predict_proba"),
        "forest": (RandomForestClassifier(10, random_state=0).fit(dense, Y), "predict_proba"),
        "extra-trees-regressor": (ExtraTreesRegressor(5, random_state=0).fit(dense, Y),
                                  "predict"),
        "maxabs-forest": (make_pipeline(MaxAbsScaler(), RandomForestClassifier(
            5, random_state=0)).fit(X, Y), "predict_proba"),
        "voting": (VotingClassifier([("rf", RandomForestClassifier(5, random_state=0)),
                                     ("dt", DecisionTreeClassifier(random_state=0))],
                                    voting="soft").fit(dense, Y), "predict_proba"),
        "bagging": (BaggingClassifier(DecisionTreeClassifier(), n_estimators=4,
                                      random_state=0).fit(dense, Y), "predict_proba"),
        "iforest": (IsolationForest(n_estimators=20, random_state=0).fit(dense),
                    "decision_function"),
        "xgboost": (xgb.XGBClassifier(n_estimators=10, max_depth=4).fit(dense, Y),
                    "predict_proba"),
        "lightgbm": (lgb.LGBMClassifier(n_estimators=10, num_leaves=8, verbose=-1)
                     .fit(dense, Y), "predict_proba"),
    }


MODELS = None


def _rows() -> list[sp.csr_matrix]:
    """CSR batches: NaN stored in a column the trees split on (in every third row, in a
    one-row call, beside +-inf in other columns), and no NaN at all. The first has NaN
    alone."""
    base = X[:40].toarray()
    out = []
    for col in (0, 2, 5):
        rows = base.copy()
        rows[::3, col] = np.nan
        out += [sp.csr_matrix(rows), sp.csr_matrix(rows[:1])]
        rows[1, (col + 1) % 6] = np.inf
        rows[2, (col + 2) % 6] = -np.inf
        out.append(sp.csr_matrix(rows))
    out.append(X[40:80])
    return out


def _library(model, method, csr):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return getattr(model, method)(csr)
    except ValueError:
        return None


@pytest.fixture(scope="module")
def models():
    global MODELS
    if MODELS is None:
        MODELS = _models()
    return MODELS


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["tree", "forest", "extra-trees-regressor", "maxabs-forest",
                                  "voting", "bagging", "iforest", "xgboost", "lightgbm"])
def test_stored_nan_as_the_library(models, name, backend):
    model, method = models[name]
    c = peregrine.compile(model, backend=backend)
    answered = refused = 0
    for k, csr in enumerate(_rows()):
        want = _library(model, method, csr)
        where = f"{name} {backend} batch {k}"
        if want is None:
            refused += 1
            with pytest.raises(InputError):
                getattr(c, method)(csr)
            continue
        answered += 1
        np.testing.assert_allclose(getattr(c, method)(csr), want, rtol=1e-5, atol=1e-6,
                                   err_msg=where)
    assert answered  # the batch without NaN at least
    if name in ("iforest", "xgboost", "lightgbm"):
        assert refused == 0  # every NaN answered, as the library answers it
    elif name in ("tree", "forest", "voting", "bagging", "maxabs-forest"):
        assert refused  # scikit-learn's trees refuse NaN in sparse X...
        dense = _rows()[0].toarray()  # ... and take it in a dense array
        np.testing.assert_allclose(getattr(c, method)(dense), getattr(model, method)(dense),
                                   rtol=1e-5, atol=1e-6)


def test_iforest_sparse_nan_is_not_dense_nan(models):
    """The case that was answered wrongly: IsolationForest on a CSR row with NaN (sklearn:
    NaN goes right, as +inf) differs from the same row dense (NaN follows the learned
    missing direction); the compiled model gives each its own answer, and the caller's
    matrix is not changed."""
    model, _ = models["iforest"]
    c = peregrine.compile(model, backend="reference")
    csr = _rows()[0]
    data = csr.data.copy()
    want_sparse, want_dense = model.decision_function(csr), model.decision_function(
        csr.toarray())
    assert not np.array_equal(want_sparse, want_dense)
    np.testing.assert_allclose(c.decision_function(csr), want_sparse, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c.decision_function(csr.toarray()), want_dense, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(csr.data, data)


def test_rule_saved_in_artifacts(models, tmp_path):
    model, method = models["forest"]
    path = tmp_path / "forest.peregrine"
    peregrine.compile(model, backend="reference").save(path)
    loaded = peregrine.load(path)
    assert loaded.spec.sparse_nan == "refuse"
    with pytest.raises(InputError, match="NaN in a sparse matrix"):
        getattr(loaded, method)(_rows()[0])
