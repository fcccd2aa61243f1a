"""The online fast path of ``CompiledModel`` (a 2-D float array of the right width skips the
generic input preparation): same answers, dtypes and errors as the generic path."""

from __future__ import annotations

import numpy as np
import pytest

import peregrine
from peregrine.errors import InputError

pytest.importorskip("llvmlite")
sklearn_ensemble = pytest.importorskip("sklearn.ensemble")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 6))
    X[::11, 2] = np.nan
    y = (np.nan_to_num(X[:, 0]) + X[:, 1] > 0).astype(int) + (X[:, 3] > 1)
    return X, y


@pytest.fixture(scope="module")
def models(data):
    X, y = data
    clf = sklearn_ensemble.HistGradientBoostingClassifier(max_iter=20, random_state=0).fit(X, y)
    reg = sklearn_ensemble.HistGradientBoostingRegressor(max_iter=20, random_state=0).fit(X, y)
    return clf, reg


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 3, 257])
def test_fast_path_matches_source(models, data, dtype, rows):
    clf, reg = models
    X = data[0][:rows].astype(dtype)
    for model in (clf, reg):
        cm = peregrine.compile(model, "native")
        for name in cm.methods:
            got = getattr(cm, name)(X)
            want = getattr(model, name)(X)
            assert got.shape == want.shape and got.dtype == want.dtype, name
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
            else:
                np.testing.assert_array_equal(got, want, err_msg=name)
            # the fast path was taken (a callable cached for the method, not False)
            assert cm._fast.get(name) not in (None, False), name


def test_fast_path_same_as_generic_path(models, data):
    clf, _ = models
    cm = peregrine.compile(clf, "native")
    X = data[0][:50]
    for name in cm.methods:
        fast = getattr(cm, name)(X)
        generic = cm._call(name, X)
        np.testing.assert_array_equal(fast, generic)
    # non-contiguous views and Fortran order go through it too, with the same answers
    Xf = np.asfortranarray(data[0][:50])
    np.testing.assert_array_equal(cm.predict_proba(Xf), cm._call("predict_proba", X))
    wide = np.hstack([data[0][:50], data[0][:50]])[:, ::2]
    np.testing.assert_array_equal(cm.predict_proba(wide),
                                  cm._call("predict_proba", np.ascontiguousarray(wide)))


def test_fast_path_errors_are_the_generic_ones(models, data):
    clf, _ = models
    cm = peregrine.compile(clf, "native")
    cm.predict(data[0][:1])  # fast path built
    with pytest.raises(InputError, match="features"):
        cm.predict(data[0][:2, :5])
    with pytest.raises(InputError, match="0 rows"):
        cm.predict(data[0][:0])
    with pytest.raises(InputError, match="2-D"):
        cm.predict(data[0][0])
    # other input types still take the generic path
    assert cm.predict(data[0][:2].tolist()).tolist() == clf.predict(data[0][:2]).tolist()


def test_models_that_reject_infinity_keep_checking(data):
    """sklearn's forests accept NaN but reject infinity: the fast path still raises for inf
    (through the generic path's check) and answers NaN rows as the source does."""
    from sklearn.ensemble import RandomForestClassifier

    X, y = data
    rf = RandomForestClassifier(n_estimators=5, max_depth=3, random_state=0).fit(X, y)
    cm = peregrine.compile(rf, "native")
    assert cm.spec.allow_nan and not cm.spec.allow_inf
    np.testing.assert_array_equal(cm.predict_proba(X[:1]), rf.predict_proba(X[:1]))
    assert callable(cm._fast["predict_proba"])
    for rows in (X[:1], X[:40]):
        bad = rows.copy()
        bad[-1, 4] = -np.inf
        with pytest.raises(InputError, match="infinity"):
            cm.predict_proba(bad)
    nan_rows = X[10:12].copy()
    nan_rows[:, 1] = np.nan
    np.testing.assert_allclose(cm.predict_proba(nan_rows), rf.predict_proba(nan_rows))
    off = peregrine.compile(rf, "native", options=peregrine.CompileOptions(
        validate_input=False))
    np.testing.assert_array_equal(off.predict_proba(X[:3]), rf.predict_proba(X[:3]))


@pytest.mark.parametrize("threads", [1, 2])
def test_float32_results_in_row_chunks(threads):
    """XGBoost returns float32: large batches go through the chunked narrow path (several
    chunks per thread here) and must equal the library and the one-row path."""
    xgb = pytest.importorskip("xgboost")
    from peregrine.backends.native.program import NARROW_CHUNK

    rng = np.random.default_rng(0)
    X = rng.normal(size=(3 * NARROW_CHUNK + 17, 8)).astype(np.float32)
    X[::13, 3] = np.nan
    y = (np.nan_to_num(X[:, 0]) + X[:, 1] > 0).astype(int)
    model = xgb.XGBClassifier(n_estimators=30, max_depth=4, n_jobs=1).fit(X[:2000], y[:2000])
    cm = peregrine.compile(model, "native", options=peregrine.CompileOptions(n_threads=threads))
    got = cm.predict_proba(X)
    want = model.predict_proba(X)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[5:6], cm.predict_proba(X[5:6]))
    np.testing.assert_array_equal(cm.predict(X), model.predict(X))


@pytest.mark.parametrize("backend", ["reference", "native", "torch", "tvm"])
def test_method_dtype_holds_when_the_graph_computes_in_float32(backend):
    """A runner that declares no dtype used to be taken as returning the method's float64
    (``np.dtype("float64") == None`` holds), so a float32 graph output (a network's layer)
    came back float32 from the fast path and float64 from the generic one."""
    from peregrine.backends import available_backends
    from peregrine.ir import GraphBuilder, Op
    from peregrine.ir.spec import MethodSpec, ModelSpec
    from peregrine.options import CompileOptions
    from peregrine.runtime.compiled import build

    if backend not in available_backends():
        pytest.skip(f"backend {backend} not available")
    rng = np.random.default_rng(0)
    w = rng.normal(size=(6, 4)).astype(np.float32).astype(np.float64)
    g = GraphBuilder()
    layer = g.add(Op.DENSE, (g.input(6),), width=4, weight=w, bias=np.zeros(4),
                  net_dtype="float32")
    spec = ModelSpec(graph=g.build({"transform": layer}), n_features=6, source="test.Dense",
                     methods={"transform": MethodSpec("transform")})  # dtype float64
    cm = build(spec, backend, CompileOptions(), "cpu")
    X = rng.normal(size=(5, 6))
    for rows in (X, X[:1], X.astype(np.float32)):
        out = cm.transform(rows)
        assert out.dtype == np.float64
        np.testing.assert_array_equal(out, cm._call("transform", rows))
