"""A guarded pipeline's large batch proved by its own column ranges (runtime/guards.py
``batch_proves``): a log or sqrt before a scaler and a model that refuse infinity and NaN has
no input bound M (log(0) is -inf), so every row used to be evaluated again by the rules.
Strictly positive batches are now proved by their per-column [min, max] and take the fast
path; a batch with one value that breaks a rule still raises exactly where scikit-learn does.
Every case is scored by scikit-learn itself."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler

import peregrine
import peregrine.ir.semantics as semantics
from peregrine.errors import InputError
from peregrine.runtime.guards import EVERY_ROW, PROOF_ROWS, _column_reduce, batch_proves, guards

rng = np.random.default_rng(3)
N = 2 * PROOF_ROWS + 37  # past the proof's threshold, and not a multiple of its row blocks
X = rng.uniform(0.1, 100.0, size=(N, 6))
y = (X[:, 0] > 50).astype(int)


def _pipe(fn):
    return make_pipeline(FunctionTransformer(fn), StandardScaler(), LogisticRegression()).fit(X, y)


MODELS = {"log": _pipe(np.log), "sqrt": _pipe(np.sqrt), "log1p": _pipe(np.log1p)}


def _source(model, rows):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return model.predict_proba(rows)
    except ValueError:
        return None


@pytest.fixture
def evaluations(monkeypatch):
    """How many times the guards evaluated rows by the rules."""
    calls = []
    real = semantics.evaluate

    def counting(*args, **kwargs):
        calls.append(args[1].shape[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(semantics, "evaluate", counting)
    return calls


@pytest.mark.parametrize("backend", ["native", "reference"])
@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_positive_batch_is_proved_and_answers(name, backend, dtype, evaluations):
    model = MODELS[name]
    c = peregrine.compile(model, backend)
    rows = X.astype(dtype)
    found, m = guards(c.spec)
    assert found and (m == EVERY_ROW or m < 100)  # no input bound covers these rows
    assert batch_proves(c.spec, rows, nan_ok=False)
    np.testing.assert_allclose(c.predict_proba(rows), model.predict_proba(rows),
                               rtol=1e-5, atol=1e-6)
    if backend == "native":  # (the reference backend's own run is an evaluation)
        assert evaluations == []  # proved: no row evaluated again


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("value", [0.0, -1.0, -0.5, np.nan, np.inf])
@pytest.mark.parametrize("where", [0, N - 1])
def test_one_breaking_value_raises_where_scikit_learn_does(name, value, where):
    model = MODELS[name]
    c = peregrine.compile(model, "native")
    rows = X.copy()
    rows[where, 2] = value
    want = _source(model, rows)
    if want is None:
        assert not batch_proves(c.spec, rows, nan_ok=False)
        with pytest.raises(InputError):
            c.predict_proba(rows)
    else:  # log1p(0), log1p(-0.5), sqrt(0) are finite: answered
        np.testing.assert_allclose(c.predict_proba(rows), want, rtol=1e-5, atol=1e-6)


def test_nan_accepted_by_the_source_is_left_to_the_imputer():
    holes = X.copy()
    holes[::5, 1] = np.nan
    model = make_pipeline(SimpleImputer(), FunctionTransformer(np.log), StandardScaler(),
                          LogisticRegression()).fit(holes, y)
    c = peregrine.compile(model, "native")
    assert c.spec.allow_nan
    assert batch_proves(c.spec, holes, nan_ok=True)
    np.testing.assert_allclose(c.predict_proba(holes), model.predict_proba(holes),
                               rtol=1e-5, atol=1e-6)
    # without an imputer first, NaN in a column reaching the log is not proved
    plain = _pipe(np.log)
    assert not batch_proves(peregrine.compile(plain).spec, holes, nan_ok=True)


@pytest.mark.parametrize("shape", [(1, 3), (7, 1), (5000, 10), (5003, 10), (300, 700)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_column_reduce_is_numpys(shape, order):
    x = np.asarray(rng.normal(size=shape), order=order)
    x[rng.random(shape) < 0.01] = np.nan
    for f in (np.fmin, np.fmax, np.minimum, np.maximum):
        np.testing.assert_array_equal(_column_reduce(f, x), f.reduce(x, axis=0))
