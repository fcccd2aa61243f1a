"""Lowerings of a PyTorch network's layers (``ir/semantics/nn.py``: TorchStep, skorch): DENSE,
BATCH_NORM and ACTIVATION in the network's float32, following the rules, each one scheduled
TIR function: ``kernels_nn.py``'s product and softmax, the element-wise loop
``kernels.map_kernel`` for the rest (Relax's element-wise ops on the batch axis cost about 10
ns a value there).

- DENSE (float32, up to ``kernels_nn.MAX_INPUTS`` inputs): the scheduled FMA-chain product of
  ``kernels_nn.py``, within float32 rounding of the rule's BLAS sum (equal to it for whole
  blocks of 16 outputs on AVX-512).
- BATCH_NORM (float32): ``x * alpha + beta`` in float64 with ATen's float32 terms, rounded
  once to float32: the product of two float32 numbers is exact in float64, so the one
  rounding of the sum is the rule's (fused or not).
- ACTIVATION: the rule's float64 formula, rounded once to the network's dtype. Exact ones
  (identity, relu, hardtanh, leaky_relu) give the rule's bits; sigmoid and silu take
  ``tir_math.exp`` (vectorized), softmax and log_softmax the C library's ``exp`` and ``log``:
  within an ulp of NumPy's in float64, which the float32 rounding absorbs but at a float32
  tie.

The rest run their rule (``ops.rule_only``): a float64 network's DENSE and BATCH_NORM (its
double sums and ``x * alpha + beta`` would be fused into one rounding where the rule has two)
and its activations through ``exp`` (no float32 rounding to absorb the C library's ulp), DENSE
layers wider than ``MAX_INPUTS`` inputs, and the activations through ``tanh``, ``expm1``,
``log1p`` or ``erf`` (tanh, elu, gelu, softplus, mish), which Relax either lacks or
approximates.
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.script import tirx as T

from peregrine.backends.tvm import kernels_nn
from peregrine.backends.tvm.ops import (
    Context,
    cast,
    column_map,
    const,
    dtype_of,
    lowering,
    rule_only,
)
from peregrine.backends.tvm.tir_math import exp
from peregrine.ir import Node, Op


def _rule(ctx: Context, node: Node, ins: list) -> relax.Expr:
    assert ctx.fallback is not None
    return ctx.fallback(node, ins)


@lowering(Op.DENSE)
def lower_dense(ctx: Context, node: Node, ins: list) -> relax.Expr:
    if rule_only(node):
        return _rule(ctx, node, ins)
    a = node.attrs
    d, k = np.shape(a.weight)
    key = ("dense32", node.name)
    if key not in ctx.shared:
        name = f"dense32_{len(ctx.shared)}"
        ctx.shared[key] = ctx.bb.add_func(
            kernels_nn.dense32_kernel(d, k).with_attr("global_symbol", name), name)
    w = kernels_nn.chunked_weights(a.weight)
    b = np.asarray(a.bias, np.float64).astype(np.float32)
    out = relax.TensorType((ctx.rows, k), "float32")
    return relax.call_tir(ctx.shared[key], [cast(ins[0], "float32"), const(w, "float32"),
                                            const(b, "float32")], out)


def _map(ctx: Context, node: Node, x: relax.Expr, fn, a: np.ndarray, b: np.ndarray
         ) -> relax.Expr:
    """The layer as ``kernels.map_kernel``: ``fn(x, a_j, b_j)`` per value, in float64."""
    return column_map(ctx, node, x, str(node.attrs.net_dtype), fn, a, b)


@lowering(Op.BATCH_NORM)
def lower_batch_norm(ctx: Context, node: Node, ins: list) -> relax.Expr:
    if rule_only(node):
        return _rule(ctx, node, ins)
    alpha, beta = node.attrs.terms()  # ATen's float32 terms, as float64 numbers
    return _map(ctx, node, ins[0], lambda x, a, b: x * a + b, alpha, beta)


def _sigmoid(x, one):
    # ir/semantics/core.sigmoid: exp of a non-positive number only, a branch per sign
    e = exp(-T.abs(x))
    return T.Select(x >= T.float64(0), T.float64(1) / (one + e), e / (one + e))


def _elementwise(a, width: int) -> dict:
    """Per kind: the TIR form on the float64 value ``x`` and its per-column constants ``p``,
    ``q`` (every form reads at least one: a scheduled function of the input alone, called on
    an intermediate value, fails TVM 0.27's reshape analysis), with those constants."""
    f, cols = T.float64, np.ones(width)
    return {
        # x * 1 + (-0.0) is x, -0.0, NaN and infinities included
        "identity": (lambda x, p, q: x * p + q, cols, np.full(width, -0.0)),
        # NaN < 0 is false: NaN stays NaN, as np.maximum
        "relu": (lambda x, p, q: T.Select(x < p, p, x), 0 * cols, 0 * cols),
        "hardtanh": (lambda x, p, q: T.Select(x < p, p, T.Select(x > q, q, x)),
                     a.param("low") * cols, a.param("high") * cols),
        "leaky_relu": (lambda x, p, q: T.Select(x > f(0), x, x * p), a.param("alpha") * cols,
                       0 * cols),
        "sigmoid": (lambda x, p, q: _sigmoid(x, p), cols, 0 * cols),
        "silu": (lambda x, p, q: x / (p + exp(-x)), cols, 0 * cols),
    }


@lowering(Op.ACTIVATION)
def lower_activation(ctx: Context, node: Node, ins: list) -> relax.Expr:
    if rule_only(node):
        return _rule(ctx, node, ins)
    a = node.attrs
    kind = str(a.kind)
    if kind in ("softmax", "log_softmax"):
        x = ins[0]
        key = ("softmax", node.name, dtype_of(x))
        if key not in ctx.shared:
            name = f"softmax_{len(ctx.shared)}"
            ctx.shared[key] = ctx.bb.add_func(kernels_nn.softmax_kernel(
                int(node.width), dtype_of(x), kind == "log_softmax").with_attr(
                    "global_symbol", name), name)
        out = relax.TensorType((ctx.rows, int(node.width)), "float32")
        ones = const(np.ones(int(node.width), np.float32), "float32")  # (see _elementwise)
        return relax.call_tir(ctx.shared[key], [x, ones], out)
    fn, p, q = _elementwise(a, int(node.width))[kind]
    return _map(ctx, node, ins[0], fn, p, q)
