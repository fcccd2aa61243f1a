"""Dtype rewriting in the torch backend's GEMM tree strategy (issue #12): its two products
multiply 0/1 decisions by small integers, exact in bfloat16, so on CPUs with bfloat16 dot
products they run in bfloat16 (backends/torch/trees.py ``exact_bf16``). The answers must be the
float32 program's bits, and the source library's, whichever dtype runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import peregrine
from peregrine import CompileOptions, TreeStrategy
from peregrine.backends.torch import trees

lgb = pytest.importorskip("lightgbm")
from sklearn.datasets import make_classification  # noqa: E402
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor  # noqa: E402

GEMM = CompileOptions(tree_strategy=TreeStrategy.GEMM)


def _data(n=3000, seed=0):
    X, y = make_classification(n, 12, n_informative=6, random_state=seed)
    return X.astype(np.float32), y


def _models():
    X, y = _data()
    Xn = X.copy()
    Xn[::7, 3] = np.nan  # LightGBM learns default directions for missing values
    return {
        "rf-depth6": (RandomForestClassifier(30, max_depth=6, random_state=0).fit(X, y), X),
        "rf-regressor-depth8": (RandomForestRegressor(20, max_depth=8, random_state=0)
                                .fit(X, X[:, 0]), X),
        "lightgbm-nan": (lgb.LGBMClassifier(n_estimators=40, num_leaves=31, verbose=-1)
                         .fit(Xn, y), Xn),
    }


MODELS = _models()


def _gemm_modules(compiled) -> list:
    return [m for low in compiled._exec._lowered.values() for m in low.module.modules()
            if isinstance(m, trees.Gemm)]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_bfloat16_products_give_the_float32_bits(name, monkeypatch):
    model, X = MODELS[name]
    rows = np.concatenate([X[:500], np.full((3, X.shape[1]), np.nan, np.float32)])
    rows[-3:, :2] = [[np.inf, -np.inf], [-np.inf, np.inf], [0.0, -0.0]]
    if name.startswith("rf"):
        rows = rows[:-3]  # scikit-learn's forests reject infinity (LightGBM takes it)
    method = "predict_proba" if hasattr(model, "predict_proba") else "predict"
    monkeypatch.setattr(trees, "exact_bf16", lambda: True)
    bf = peregrine.compile(model, "torch", options=GEMM)
    assert {m.mm_dtype for m in _gemm_modules(bf)} == {torch.bfloat16}
    monkeypatch.setattr(trees, "exact_bf16", lambda: False)
    f32 = peregrine.compile(model, "torch", options=GEMM)
    assert {m.mm_dtype for m in _gemm_modules(f32)} == {torch.float32}
    got = getattr(bf, method)(rows)
    np.testing.assert_array_equal(got, getattr(f32, method)(rows))
    np.testing.assert_allclose(got, getattr(model, method)(rows), rtol=1e-5, atol=1e-6)


def test_deep_trees_keep_float32_products(monkeypatch):
    """Partial sums reach the tree's depth and slot numbers its leaf count: past 256 bfloat16
    would round them, so such products stay float32."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4000, 4)).astype(np.float32)
    model = RandomForestRegressor(2, random_state=0).fit(X, rng.normal(size=4000))
    monkeypatch.setattr(trees, "exact_bf16", lambda: True)
    compiled = peregrine.compile(model, "torch", options=GEMM)
    slots = {m.slot.dtype for m in _gemm_modules(compiled)}
    assert slots == {torch.float32}  # thousands of leaves per tree
    # bfloat16 products are emulated where the CPU lacks AVX512_BF16/AMX (exact_bf16 is forced
    # above): 300 rows took 28 s of torch.bmm (the leaf stage) on an AMD EPYC Zen 3, so fewer
    n = 300 if trees._cpu_flags() & {"avx512_bf16", "amx_bf16"} else 24
    np.testing.assert_allclose(compiled.predict(X[:n]), model.predict(X[:n]),
                               rtol=1e-5, atol=1e-6)


def test_forced_cpu_level_turns_bfloat16_off(monkeypatch):
    monkeypatch.setenv("PEREGRINE_CPU_LEVEL", "x86-64-v3")
    assert trees.exact_bf16() is False
