"""The tvm backend: every model family against its source library (the conformance cases and
edge rows: NaN, +-inf, threshold edges, category codes), strategies against the reference,
artifacts (rebuilt or found in the library cache on load), the fallback ops, and the error that
names the extra when TVM is missing. A few cases per family run by default, the whole
conformance matrix is ``slow``."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

import peregrine
from peregrine.errors import UnsupportedModelError
from peregrine.options import CompileOptions, TreeStrategy
from tests.conformance.test_conformance import CASES, _rows, assert_same
from tests.tvm_cache import fresh_library_cache  # noqa: E402,F401 (autouse)

tvm = pytest.importorskip("tvm")

# One or a few cases per family in the default run (trees with NaN defaults, zero-as-missing
# and categorical splits, linear models, pipelines with preprocessing and a fallback op,
# classifiers and regressors); the rest are slow.
DEFAULT = {
    "sk-rf-clf-multi", "sk-hgb-clf-cat-binary", "sk-iforest",
    "xgb-clf-binary", "xgb-reg-categorical-numpy",
    "lgb-clf-binary-zero-missing", "lgb-reg-categorical", "pipe-logreg-3c",
    "pipe-impute-scale-logreg-3c", "pipe-union-select-forest-3c", "pipe-poly",
    "catboost-multiclass", "kernel-svc-rbf-2c-proba", "meta-vote-soft-3c",
    "tf-quantile-uniform", "onnx-xgb-binary",
}


@pytest.fixture(scope="module")
def rows_cache():
    return {}


def _param(case):
    marks = list(case.marks) + ([] if case.id in DEFAULT else [pytest.mark.slow])
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_matches_source(case, rows_cache):
    model, _ = case.built
    spec, X = _rows(case, rows_cache)
    compiled = peregrine.compile(model, "tvm")
    assert set(compiled.methods) == set(spec.methods)
    for dtype in ("float64", "float32"):
        Xd = X.astype(dtype)
        for method in compiled.methods:
            want = case.expected(method, Xd)
            got = getattr(compiled, method)(Xd)
            assert_same(method, got, want, f"{case.id} tvm {dtype} {method}")


def _forest_case(case_id):
    return next(c for c in CASES if c.id == case_id)


STRATEGY_CASES = [("lgb-reg-categorical-zero-missing", s) for s in TreeStrategy] + [
    ("xgb-clf-multi-softprob", TreeStrategy.TREE_TRAVERSAL),
    pytest.param("xgb-clf-multi-softprob", TreeStrategy.AUTO, marks=pytest.mark.slow),
    pytest.param("sk-gb-reg-squared", TreeStrategy.TREE_TRAVERSAL, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("case_id,strategy", STRATEGY_CASES)
def test_strategies_match_the_reference(case_id, strategy, rows_cache):
    """Every strategy (GEMM runs as the perfect walk) gives the reference's numbers: the tree
    sums bit for bit."""
    case = _forest_case(case_id)
    model, _ = case.built
    spec, X = _rows(case, rows_cache)
    options = CompileOptions(tree_strategy=strategy)
    got = peregrine.compile(model, "tvm", options=options)
    ref = peregrine.compile(model, "reference", options=options)
    info = got.explain_dict()["backend_choices"]
    expected = (TreeStrategy.PERFECT_TREE_TRAVERSAL if strategy in (
        TreeStrategy.AUTO, TreeStrategy.GEMM) else strategy)
    assert info["strategy"] == expected.value, info
    for dtype in ("float64", "float32"):
        Xd = X.astype(dtype)
        for method in got.methods:
            np.testing.assert_array_equal(getattr(got, method)(Xd), getattr(ref, method)(Xd))


def test_deep_sparse_trees_walk_the_node_arrays():
    from sklearn.ensemble import RandomForestRegressor

    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 6))
    y = X[:, 0] * 3 + np.sin(X[:, 1] * 5) + rng.standard_normal(400) * 0.1
    model = RandomForestRegressor(5, random_state=0).fit(X, y)  # unlimited depth
    compiled = peregrine.compile(model, "tvm")
    info = compiled.explain_dict()["backend_choices"]
    assert info["strategy"] == "tree_traversal", info
    np.testing.assert_allclose(compiled.predict(X), model.predict(X), rtol=1e-5, atol=1e-6)


def test_artifact_reload_hits_the_cache(tmp_path, library_cache):
    xgb = pytest.importorskip("xgboost")
    from peregrine.backends.tvm import build

    rng = np.random.default_rng(1)
    X = rng.standard_normal((300, 5)).astype(np.float32)
    X[::9, 2] = np.nan
    y = (X[:, 0] + np.nan_to_num(X[:, 2]) > 0).astype(int)
    model = xgb.XGBClassifier(n_estimators=12, max_depth=3).fit(X, y)
    compiled = peregrine.compile(model, "tvm")
    path = tmp_path / "model.prg"
    compiled.save(path)
    # the artifact holds the IR, no library
    import zipfile

    names = zipfile.ZipFile(path).namelist()
    assert not [n for n in names if n.endswith((".so", ".o", ".dll", ".dylib"))], names
    hits = build.STATS["disk_hits"]
    loaded = peregrine.load(path, backend="tvm")
    assert build.STATS["disk_hits"] == hits + 1
    assert "cache hit" in loaded.explain_dict()["backend_choices"]["library"]
    np.testing.assert_array_equal(loaded.predict_proba(X), compiled.predict_proba(X))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    # an emptied cache: load rebuilds
    for f in (library_cache / "tvm").glob("*.so"):
        f.unlink()
    rebuilt = peregrine.load(path, backend="tvm")
    assert "built" in rebuilt.explain_dict()["backend_choices"]["library"]
    np.testing.assert_array_equal(rebuilt.predict_proba(X), compiled.predict_proba(X))


def test_fallback_ops_run_their_rules():
    """A pipeline mixing lowered ops with fallbacks (a power transform, a transcendental
    ufunc): explain() names the fallbacks and the numbers are the source's."""
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import (
        FunctionTransformer,
        OneHotEncoder,
        PowerTransformer,
        StandardScaler,
    )

    rng = np.random.default_rng(2)
    X = np.column_stack([rng.integers(0, 4, 300), rng.random((300, 3)) * 5])
    y = (X[:, 0] + X[:, 1] > 3).astype(int)
    ct = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"), [0]),
                            ("num", make_pipeline(FunctionTransformer(np.log1p),
                                                  StandardScaler()), [1, 2]),
                            ("p", PowerTransformer(), [3])])
    model = make_pipeline(ct, LogisticRegression()).fit(X, y)
    compiled = peregrine.compile(model, "tvm")
    fallbacks = compiled.explain_dict()["backend_choices"]["fallback_ops"]
    assert {"POWER", "UFUNC"} <= set(fallbacks)  # log1p: ops.RULE_UFUNCS
    assert "ONE_HOT" not in fallbacks
    for dtype in (np.float64, np.float32):
        Xd = X.astype(dtype)
        np.testing.assert_allclose(compiled.predict_proba(Xd), model.predict_proba(Xd),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(compiled.predict(Xd), model.predict(Xd))


def test_missing_tvm_names_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m == "tvm" or m.startswith(("tvm.",
                                                                       "peregrine.backends.tvm"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tvm", None)  # import tvm -> ModuleNotFoundError
    from peregrine.backends import available_backends, get_backend

    with pytest.raises(UnsupportedModelError, match=r"peregrine-ml\[tvm\]"):
        get_backend("tvm")
    assert "tvm" not in available_backends()


def test_module_reimports_after_the_missing_extra_test():
    importlib.import_module("peregrine.backends.tvm")
    from peregrine.backends import available_backends

    assert "tvm" in available_backends()


def test_n_threads_sizes_tvms_pool_and_keeps_the_bits():
    from sklearn.datasets import make_classification
    from sklearn.ensemble import RandomForestClassifier

    X, y = make_classification(600, 6, random_state=3)
    model = RandomForestClassifier(n_estimators=8, max_depth=5, random_state=0).fit(X, y)
    outs = []
    for n in (1, 2):
        compiled = peregrine.compile(model, "tvm", options=peregrine.CompileOptions(n_threads=n))
        outs.append(compiled.predict_proba(X))
        assert tvm.get_global_func("runtime.NumThreads")() == n
    np.testing.assert_array_equal(outs[0], outs[1])


def test_results_are_fresh_writable_arrays():
    """Outputs come through DLPack without a copy: each call's are its own memory, which a
    later call does not overwrite, and the caller may write into them."""
    from sklearn.preprocessing import StandardScaler

    X = np.random.default_rng(0).normal(size=(300, 5))
    compiled = peregrine.compile(StandardScaler().fit(X), "tvm")
    first = compiled.transform(X)
    kept = first.copy()
    second = compiled.transform(2 * X)
    compiled.transform(X[:1])
    np.testing.assert_array_equal(first, kept)
    assert not np.shares_memory(first, second)
    first[0, 0] = 42.0  # writable, and not the program's
    np.testing.assert_array_equal(compiled.transform(X)[1:], kept[1:])
