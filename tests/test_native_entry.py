"""The one-row builtin (kernels/pyentry.py): a compiled model's method is a machine-code entry
that checks and copies the rows, runs the few-rows kernel and makes the result array. It must
return exactly what the Python path and the library return, for every input it takes (float32
and float64, any strides, NaN and +-inf where the model accepts them, 1..max rows), and hand
every other input to the Python path unchanged (errors included)."""

from __future__ import annotations

import inspect
import pickle
import threading

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import peregrine  # noqa: E402
from peregrine.errors import InputError  # noqa: E402
from peregrine.kernels import pyentry  # noqa: E402

if not pyentry._layout_ok():  # another interpreter build: the Python path is the only one
    pytest.skip("the entry's CPython/NumPy layout checks do not hold here",
                allow_module_level=True)

xgb = pytest.importorskip("xgboost")


def _rows(rng, n, nf, specials=True):
    X = rng.normal(size=(n, nf))
    if specials:
        X[rng.random(X.shape) < 0.1] = np.nan
        X[rng.random(X.shape) < 0.03] = np.inf
        X[rng.random(X.shape) < 0.03] = -np.inf
    return X


@pytest.fixture(scope="module")
def xgb_model():
    rng = np.random.default_rng(0)
    X = _rows(rng, 600, 7, specials=False)
    X[rng.random(X.shape) < 0.1] = np.nan  # missing values to learn default directions
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) > 0).astype(int)
    m = xgb.XGBClassifier(n_estimators=40, max_depth=5, tree_method="hist").fit(X, y)
    return m, peregrine.compile(m, "native")


def _views(X):
    """The same rows as arrays of every layout the entry reads: C, Fortran, a column slice of
    a wider array, reversed rows, a dtype object from a pickle, big-endian (the fallback;
    compared with the library on the same values in native order: XGBoost 3 misreads
    big-endian arrays)."""
    wide = np.zeros((X.shape[0], 2 * X.shape[1]), X.dtype)
    wide[:, ::2] = X
    out = [X, np.asfortranarray(X), wide[:, ::2], X[::-1][::-1],
           pickle.loads(pickle.dumps(X)), X.astype(X.dtype.newbyteorder(">"))]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_xgboost_rows_match_the_library(xgb_model, dtype):
    m, c = xgb_model
    assert isinstance(c.predict_proba, type(len))  # the builtin, not a Python function
    assert c.predict_proba.__name__ == "predict_proba"
    assert list(inspect.signature(c.predict_proba).parameters) == ["X"]
    rng = np.random.default_rng(1)
    X = _rows(rng, 60, 7).astype(dtype)
    for n in (1, 2, 5, 48, 49, 60):  # 49 and up: past the few-rows range, the Python path
        ref = np.ascontiguousarray(X[:n])
        for view in _views(X[:n]):
            got, want = c.predict_proba(view), m.predict_proba(ref)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(c.predict(view), m.predict(ref))


def test_every_row_alone_is_bit_identical(xgb_model):
    m, c = xgb_model
    X = _rows(np.random.default_rng(2), 300, 7).astype(np.float32)
    want = m.predict_proba(X)
    got = np.concatenate([c.predict_proba(X[i:i + 1]) for i in range(len(X))])
    np.testing.assert_array_equal(got, want)
    assert not np.shares_memory(c.predict_proba(X[:1]), c.predict_proba(X[:1]))


def test_other_inputs_take_the_python_path(xgb_model):
    m, c = xgb_model
    X = _rows(np.random.default_rng(3), 4, 7)
    np.testing.assert_array_equal(c.predict_proba(X.tolist()), m.predict_proba(X))
    ints = np.nan_to_num(X, posinf=3, neginf=-3).astype(np.int32)
    np.testing.assert_array_equal(c.predict_proba(ints), m.predict_proba(ints))
    with pytest.raises(InputError, match="0 rows"):
        c.predict_proba(np.zeros((0, 7), np.float32))
    with pytest.raises(InputError):
        c.predict_proba(np.zeros((1, 6), np.float32))
    with pytest.raises(InputError):
        c.predict_proba(np.zeros((1, 8), np.float32))
    with pytest.raises(InputError):
        c.predict_proba(np.zeros((2, 3, 7), np.float32))
    with pytest.raises(TypeError):
        c.predict_proba()
    with pytest.raises(TypeError):
        c.predict_proba(X, X)
    row = X[:1].astype(np.float32)
    np.testing.assert_array_equal(c.predict_proba(X=row), m.predict_proba(row))


def test_threads_share_the_builtin(xgb_model):
    m, c = xgb_model
    X = _rows(np.random.default_rng(4), 64, 7).astype(np.float32)
    want = m.predict_proba(X)
    errors = []

    def work(seed):
        order = np.random.default_rng(seed).permutation(len(X))
        for _ in range(20):
            for i in order:
                if not np.array_equal(c.predict_proba(X[i:i + 1]), want[i:i + 1]):
                    errors.append(i)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_a_model_rejecting_infinity_still_rejects_it():
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 6))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 1)
    m = RandomForestClassifier(12, max_depth=6, random_state=0).fit(X, y)
    c = peregrine.compile(m, "native")
    assert c.spec.allow_nan and not c.spec.allow_inf
    Q = rng.normal(size=(20, 6)).astype(np.float32)
    Q[3, 2] = np.nan  # accepted: scikit-learn's missing-value rule
    for i in range(len(Q)):
        np.testing.assert_array_equal(c.predict_proba(Q[i:i + 1]), m.predict_proba(Q[i:i + 1]))
        np.testing.assert_array_equal(c.predict(Q[i:i + 1]), m.predict(Q[i:i + 1]))
    bad = Q[:1].copy()
    bad[0, 4] = -np.inf
    with pytest.raises(InputError, match="infinity at row 0, column 4"):
        c.predict_proba(bad)


def test_lightgbm_multiclass_float64_rows():
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(6)
    X = _rows(rng, 600, 9, specials=False)
    X[rng.random(X.shape) < 0.1] = np.nan
    y = np.digitize(np.nan_to_num(X[:, 0]), [-0.5, 0.5])
    m = lgb.LGBMClassifier(n_estimators=15, num_leaves=12, verbose=-1).fit(X, y)
    c = peregrine.compile(m, "native")
    Q = _rows(rng, 30, 9)
    for i in range(len(Q)):
        for dt in (np.float64, np.float32):
            row = Q[i:i + 1].astype(dt)
            np.testing.assert_allclose(c.predict_proba(row), m.predict_proba(row),
                                       rtol=1e-12, atol=0)
            np.testing.assert_array_equal(c.predict(row), m.predict(row))
