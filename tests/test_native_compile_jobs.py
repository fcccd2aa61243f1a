"""Kernels compiled in several processes at once (``jit.load_all``) and the frontends loaded
for the model's own library only: what they change is the compile time (benchmarks/
bench_trees.py's compile column), so these tests check that nothing else changes: the same
kernels, the same answers, a failed child made good, and the disk cache used as before."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("llvmlite")
xgboost = pytest.importorskip("xgboost")
lightgbm = pytest.importorskip("lightgbm")

import peregrine  # noqa: E402
from peregrine.kernels import jit  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="kernels are compiled in forked processes on Linux only")


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(400, 6)).astype(np.float32)
    X[::17, 2] = np.nan
    return X, (X[:, 0] + np.nan_to_num(X[:, 2]) > 0).astype(int)


def _rows():
    X = np.random.default_rng(1).normal(size=(300, 6))
    X[::5, 1] = np.nan
    X[3, 0], X[4, 0] = np.inf, -np.inf
    return X


# Loaded kernels this module made the jit forget. Their engines must outlive the tests: the
# one-row entry (kernels/pyentry.py) keeps a raw address to the kernel it compiled first.
_KEEP: list[dict] = []


def _forget_loaded(monkeypatch):
    _KEEP.append(jit._loaded)
    monkeypatch.setattr(jit, "_loaded", {})


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PEREGRINE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit, "_built", {})
    _forget_loaded(monkeypatch)
    yield tmp_path
    _KEEP.append(jit._loaded)


def _compile(model, jobs, monkeypatch):
    monkeypatch.setenv("PEREGRINE_COMPILE_JOBS", str(jobs))
    before = dict(jit.STATS)
    compiled = peregrine.compile(model, "native", options=peregrine.CompileOptions(n_threads=2))
    return compiled, jit.STATS["compiled"] - before["compiled"]


def test_lightgbm_kernels_compiled_in_two_processes_match_one(fresh_cache, monkeypatch):
    X, y = _data()
    model = lightgbm.LGBMClassifier(n_estimators=20, num_leaves=15, verbose=-1).fit(X, y)
    calls = []
    real = jit._compile_forked
    monkeypatch.setattr(jit, "_compile_forked",
                        lambda *a: calls.append(len(a[0])) or real(*a))
    two, built = _compile(model, 2, monkeypatch)
    # batch and few-rows kernels, float32 and float64; and the one-row entry's object where
    # this process has not made one yet (compiled with them, loaded when first called)
    entry = calls[0] - built
    assert calls and built >= 2 and entry in (0, 1)
    assert len(list((fresh_cache / "native").glob("*.o"))) == built + entry

    _forget_loaded(monkeypatch)  # and compile them again, one by one, elsewhere
    monkeypatch.setenv("PEREGRINE_CACHE_DIR", str(fresh_cache / "serial"))
    one, built_one = _compile(model, 1, monkeypatch)
    assert built_one == built and len(calls) == 1
    Xt = _rows()
    for rows in (Xt, Xt.astype(np.float32), Xt[:1], Xt[:7]):
        np.testing.assert_array_equal(two.predict_proba(rows), one.predict_proba(rows))
        np.testing.assert_allclose(two.predict_proba(rows), model.predict_proba(rows),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(two.predict(rows), model.predict(rows))


def test_long_kernels_go_first_and_the_entry_compiles_with_them(fresh_cache, monkeypatch):
    """The processes take kernels in turn, so the batch kernels (twice the few-rows ones'
    compile time) are handed out first; the one-row entry's object, which a process that has
    not made one compiles, goes with them instead of alone after them."""
    from peregrine.kernels import pyentry

    monkeypatch.setattr(pyentry, "_state", {})  # this process has no entry yet
    X, y = _data(5)
    model = lightgbm.LGBMClassifier(n_estimators=20, num_leaves=15, verbose=-1).fit(X, y)
    handed = []
    real = jit._compile_forked
    monkeypatch.setattr(jit, "_compile_forked",
                        lambda specs, *a: handed.extend(specs) or real(specs, *a))
    compiled, built = _compile(model, 2, monkeypatch)
    # batch and few-rows x float32 and float64, and the entry (loaded when first called)
    assert len(handed) == 5 and built >= 4
    hints = [float(getattr(s, "cost_hint", 1.0)) for s in handed]
    assert hints == sorted(hints, reverse=True)
    assert [s.lanes for s in handed[:2]] == ["rows", "rows"]
    assert handed[-1].symbol == pyentry._EntrySource.symbol
    rows = _rows()
    np.testing.assert_array_equal(compiled.predict(rows[:1]), model.predict(rows[:1]))
    np.testing.assert_allclose(compiled.predict_proba(rows), model.predict_proba(rows),
                               rtol=1e-5, atol=1e-6)


def test_a_failed_child_costs_only_a_compile_here(fresh_cache, monkeypatch):
    X, y = _data(2)
    model = xgboost.XGBClassifier(n_estimators=10, max_depth=3).fit(X, y)
    # every child dies at once: the parent compiles what they took
    monkeypatch.setattr(jit, "_child", lambda *a: os._exit(3))
    compiled, built = _compile(model, 2, monkeypatch)
    assert built >= 2
    rows = _rows().astype(np.float32)
    np.testing.assert_allclose(compiled.predict_proba(rows), model.predict_proba(rows),
                               rtol=1e-5, atol=1e-6)


def test_no_process_to_spare_compiles_here(fresh_cache, monkeypatch):
    X, y = _data(4)
    model = xgboost.XGBClassifier(n_estimators=10, max_depth=3).fit(X, y)

    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    compiled, built = _compile(model, 2, monkeypatch)
    assert built >= 2
    rows = _rows().astype(np.float32)
    np.testing.assert_allclose(compiled.predict_proba(rows), model.predict_proba(rows),
                               rtol=1e-5, atol=1e-6)


def test_cached_kernels_are_not_compiled_again(fresh_cache, monkeypatch):
    X, y = _data(3)
    model = xgboost.XGBRegressor(n_estimators=10, max_depth=4).fit(X, y)
    _, built = _compile(model, 2, monkeypatch)
    assert built >= 1
    _forget_loaded(monkeypatch)
    monkeypatch.setattr(jit, "_compile_forked", lambda *a: pytest.fail("compiled again"))
    again, rebuilt = _compile(model, 2, monkeypatch)
    assert rebuilt == 0 and "(disk)" in again.explain()


def test_compile_jobs_setting(monkeypatch):
    monkeypatch.setenv("PEREGRINE_COMPILE_JOBS", "3")
    assert jit.compile_jobs(1) == 3
    monkeypatch.delenv("PEREGRINE_COMPILE_JOBS")
    assert jit.compile_jobs(2) == 2 and jit.compile_jobs(0) == 1
    monkeypatch.setenv("PEREGRINE_COMPILE_JOBS", "many")
    with pytest.raises(ValueError, match="PEREGRINE_COMPILE_JOBS"):
        jit.compile_jobs(2)


def test_compiling_an_xgboost_model_loads_no_onnx_frontend(tmp_path):
    """The frontends of libraries not imported are not loaded (onnx takes ~0.2 s to import),
    while a model of such a library still finds its frontend (an ONNX ModelProto below)."""
    code = (
        "import sys, numpy as np, xgboost, peregrine\n"
        "X = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)\n"
        "m = xgboost.XGBRegressor(n_estimators=3, max_depth=2).fit(X, X[:, 0])\n"
        "peregrine.compile(m, 'reference')\n"
        "assert 'onnx' not in sys.modules, 'onnx imported'\n"
        "import onnx\n"
        "from onnx import helper, TensorProto\n"
        "g = helper.make_graph([helper.make_node('Identity', ['X'], ['Y'])], 'g',\n"
        "    [helper.make_tensor_value_info('X', TensorProto.FLOAT, [None, 4])],\n"
        "    [helper.make_tensor_value_info('Y', TensorProto.FLOAT, [None, 4])])\n"
        "try:\n"
        "    peregrine.compile(helper.make_model(g), 'reference')\n"
        "except peregrine.errors.UnsupportedModelError as exc:\n"
        "    assert 'is not supported. Supported models' not in str(exc), exc\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PEREGRINE_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def test_a_lightgbm_model_loads_no_sklearn_frontend(tmp_path):
    """LightGBM imports scikit-learn; its model still needs only the LightGBM frontend (the
    scikit-learn ones import sklearn.cluster, .manifold, .ensemble: 0.6-1.3 s of a cold
    compile). A pipeline around a LightGBM model then loads them, and answers as before. The
    native backend's LLVM, loaded in a thread meanwhile (``NativeBackend.prefetch``), is
    there when the build starts."""
    code = (
        "import sys, numpy as np, lightgbm, peregrine\n"
        "X = np.random.default_rng(0).normal(size=(300, 4))\n"
        "y = (X[:, 0] > 0).astype(int)\n"
        "m = lightgbm.LGBMClassifier(n_estimators=5, verbose=-1).fit(X, y)\n"
        "c = peregrine.compile(m, 'native')\n"
        "loaded = [k for k in sys.modules if k.startswith('peregrine.frontends.sklearn')]\n"
        "assert not loaded, loaded\n"
        "np.testing.assert_array_equal(c.predict(X), m.predict(X))\n"
        "np.testing.assert_allclose(c.predict_proba(X), m.predict_proba(X), rtol=1e-5,\n"
        "                           atol=1e-6)\n"
        "from sklearn.pipeline import make_pipeline\n"
        "from sklearn.preprocessing import StandardScaler\n"
        "p = make_pipeline(StandardScaler(), lightgbm.LGBMClassifier(n_estimators=5,\n"
        "                  verbose=-1)).fit(X, y)\n"
        "np.testing.assert_allclose(peregrine.compile(p, 'native').predict_proba(X),\n"
        "                           p.predict_proba(X), rtol=1e-5, atol=1e-6)\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PEREGRINE_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def test_splat_constants_parse_to_the_list_form():
    """``irutil.splat`` writes ``splat (T v)``; LLVM reads it as the same constant as the
    list form (-0.0 kept apart from 0.0, NaN and infinities as written)."""
    import llvmlite.binding as llvm
    from llvmlite import ir

    from peregrine.kernels.irutil import F32, F64, I32, splat

    assert splat(F64, 8, -0.0) is not splat(F64, 8, 0.0)
    assert splat(F64, 8, 0.5) is splat(F64, 8, 0.5)
    for elem, value in ((F32, -0.0), (F64, float("nan")), (F64, float("-inf")), (I32, 7),
                        (F32, 1.1)):
        texts = []
        for c in (splat(elem, 8, value), ir.Constant(ir.VectorType(elem, 8), [value] * 8)):
            m = ir.Module()
            fn = ir.Function(m, ir.FunctionType(c.type, []), name="f")
            ir.IRBuilder(fn.append_basic_block()).ret(c)
            parsed = llvm.parse_assembly(str(m))
            parsed.verify()
            texts.append(str(parsed).split("define", 1)[1])
        assert texts[0] == texts[1], texts
    assert str(splat(I32, 4, 3)) == "<4 x i32> splat (i32 3)"


@pytest.mark.parametrize("backend", ["native", "torch"])
def test_a_pipelines_fused_kernels_compile_together(backend, fresh_cache, monkeypatch):
    """Every method's fused row kernels (float32 and float64) in one batch of processes."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from peregrine.backends import available_backends

    if backend not in available_backends():
        pytest.skip(f"{backend} backend not installed")
    X, y = _data(5)
    X = np.nan_to_num(X)
    model = make_pipeline(StandardScaler(), LogisticRegression()).fit(X, y)
    calls = []
    real = jit._compile_forked
    monkeypatch.setattr(jit, "_compile_forked",
                        lambda *a: calls.append(len(a[0])) or real(*a))
    monkeypatch.setenv("PEREGRINE_COMPILE_JOBS", "2")
    compiled = peregrine.compile(model, backend)
    assert len(calls) == 1 and calls[0] >= 4, calls  # methods x input dtypes, at once
    rows = _rows()
    rows[~np.isfinite(rows)] = 0.5
    for method in ("predict", "predict_proba", "decision_function"):
        for r in (rows, rows.astype(np.float32), rows[:1]):
            np.testing.assert_allclose(getattr(compiled, method)(r), getattr(model, method)(r),
                                       rtol=1e-5, atol=1e-6)
