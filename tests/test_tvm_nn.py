"""The tvm backend's network layers (backends/tvm/ops_nn.py, kernels_nn.py): DENSE's float32
FMA chain exactly, and against its rule (NumPy's sgemm) within float32 rounding, at row counts
around the kernel's groups and tasks and output counts around its chunks; BATCH_NORM bit for bit; each
lowered activation bit for bit against its rule on values from 1e-30 to 1e4, +-inf and NaN;
the layers left to their rule reported as such. The pipelines (TorchStep, skorch) against torch
are tests/test_hybrid_pipelines.py's, which run tvm too."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tvm")

from peregrine import config  # noqa: E402
from peregrine.ir import Op  # noqa: E402
from tests.one_op import one_op_model  # noqa: E402
from tests.tvm_cache import fresh_library_cache  # noqa: E402,F401 (autouse)

# at a forced x86-64-v2 level TVM's code has no FMA: each product is rounded first
_LEVEL = config.cpu_level()
NO_FMA = _LEVEL is not None and "+fma" not in _LEVEL.llvm_features


_layer = one_op_model  # a model whose one method is the layer's output


def _fallbacks(compiled) -> list:
    return compiled.explain_dict()["backend_choices"].get("fallback_ops", [])


def _f32(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32).astype(np.float64)  # float32 numbers, held in float64


def _values(rng, n: int, d: int) -> np.ndarray:
    """Rows of magnitudes 1e-30 to 1e4, both signs, zeros, +-inf and NaN."""
    X = rng.normal(size=(n, d)) * 10.0 ** rng.integers(-30, 5, size=(n, d))
    X[rng.random((n, d)) < 0.05] = 0.0
    if n > 10:
        X[3, 0], X[4, 1 % d], X[5, 0], X[6, d - 1] = np.inf, -np.inf, np.nan, -0.0
    return X


def _fma_chain(X: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """acc = fma(x_k, w_k, acc) for k in order from 0, then + b, in float32 (the exact double
    product plus acc rounded to float32: one fma but at a double-rounding tie, 2**-29 of the
    time); at a level without FMA each product is rounded to float32 first."""
    x32, w32 = X.astype(np.float32).astype(np.float64), w.astype(np.float32).astype(np.float64)
    acc = np.zeros((len(X), w.shape[1]), np.float32)
    for k in range(w.shape[0]):
        prod = x32[:, k:k + 1] * w32[k]
        if NO_FMA:
            prod = prod.astype(np.float32).astype(np.float64)
        acc = (acc.astype(np.float64) + prod).astype(np.float32)
    return acc + b.astype(np.float32)


@pytest.mark.parametrize("d,k", [(6, 4), (16, 16), (37, 19), (3, 1)])
def test_dense_float32_is_an_fma_chain(d, k):
    """The kernel's order, exactly; against the rule (NumPy's sgemm, whose blocking differs
    for some shapes: 37 inputs x 3 outputs, say) within float32 rounding of the sum."""
    rng = np.random.default_rng(d * 100 + k)
    w, b = _f32(rng.normal(size=(d, k))), _f32(rng.normal(size=k))
    attrs = dict(weight=w, bias=b, net_dtype="float32")
    tvm_layer = _layer(Op.DENSE, k, d, "tvm", **attrs)
    ref = _layer(Op.DENSE, k, d, "reference", **attrs)
    assert "DENSE" not in _fallbacks(tvm_layer)
    for n in (1, 2, 7, 8, 9, 63, 64, 65, 300):  # groups of 8, tasks of 64, their tails
        X = rng.normal(size=(n, d))
        if n > 8:
            X[3, 0], X[5, d - 1] = np.nan, np.inf
        for dtype in (np.float64, np.float32):
            Xd = X.astype(dtype)
            got = tvm_layer.transform(Xd)
            np.testing.assert_array_equal(got, _fma_chain(Xd, w, b), err_msg=f"{n} {dtype}")
            want = ref.transform(Xd)
            with np.errstate(invalid="ignore"):
                scale = np.abs(Xd.astype(np.float32)) @ np.abs(w) + np.abs(b)
            bound = 2 * (d + 1) * 2.0**-24 * scale
            ok = np.isfinite(want)
            assert np.array_equal(np.isnan(got), np.isnan(want))
            assert np.all(np.abs(got - want)[ok] <= bound[ok]), f"{n} rows {dtype}"


def test_wide_and_float64_layers_run_their_rule():
    rng = np.random.default_rng(0)
    attrs = dict(weight=_f32(rng.normal(size=(600, 3))), bias=np.zeros(3), net_dtype="float32")
    wide = _layer(Op.DENSE, 3, 600, "tvm", **attrs)
    assert "DENSE" in _fallbacks(wide)
    X = rng.normal(size=(20, 600))
    np.testing.assert_array_equal(wide.transform(X),
                                  _layer(Op.DENSE, 3, 600, "reference", **attrs).transform(X))
    f64 = _layer(Op.DENSE, 2, 4, "tvm", weight=rng.normal(size=(4, 2)), bias=np.zeros(2),
                 net_dtype="float64")
    assert "DENSE" in _fallbacks(f64)


@pytest.mark.parametrize("net_dtype", ["float32", "float64"])
def test_batch_norm_bit_equal(net_dtype):
    rng = np.random.default_rng(1)
    d = 9
    stats = {k: rng.uniform(0.5, 2.0, d).astype(net_dtype).astype(np.float64)
             for k in ("mean", "var", "weight", "bias")}
    tvm_layer = _layer(Op.BATCH_NORM, d, d, "tvm", net_dtype=net_dtype, **stats)
    assert ("BATCH_NORM" in _fallbacks(tvm_layer)) == (net_dtype == "float64")
    X = _values(rng, 5000, d)
    want = _layer(Op.BATCH_NORM, d, d, "reference", net_dtype=net_dtype, **stats).transform(X)
    np.testing.assert_array_equal(tvm_layer.transform(X), want)


LOWERED = [("identity", {}), ("relu", {}), ("hardtanh", {"low": -0.75, "high": 2.5}),
           ("leaky_relu", {"alpha": 0.2}), ("sigmoid", {}), ("silu", {}), ("softmax", {}),
           ("log_softmax", {})]


@pytest.mark.parametrize("kind,params", LOWERED, ids=[k for k, _ in LOWERED])
def test_lowered_activations_bit_equal(kind, params):
    rng = np.random.default_rng(len(kind))
    d = 7
    tvm_layer = _layer(Op.ACTIVATION, d, d, "tvm", kind=kind, net_dtype="float32", **params)
    assert "ACTIVATION" not in _fallbacks(tvm_layer)
    X = np.vstack([_values(rng, 20_000, d), rng.normal(size=(20_000, d)) * 30])
    ref = _layer(Op.ACTIVATION, d, d, "reference", kind=kind, net_dtype="float32", **params)
    got, want = tvm_layer.transform(X), ref.transform(X)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, got.astype(np.float32))  # float32 numbers
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind,net_dtype", [("tanh", "float32"), ("gelu", "float32"),
                                            ("elu", "float32"), ("softplus", "float32"),
                                            ("mish", "float32"), ("sigmoid", "float64")])
def test_other_activations_run_their_rule(kind, net_dtype):
    tvm_layer = _layer(Op.ACTIVATION, 4, 4, "tvm", kind=kind, net_dtype=net_dtype)
    assert "ACTIVATION" in _fallbacks(tvm_layer)
    X = np.random.default_rng(3).normal(size=(50, 4))
    np.testing.assert_array_equal(tvm_layer.transform(X), _layer(
        Op.ACTIVATION, 4, 4, "reference", kind=kind, net_dtype=net_dtype).transform(X))
