"""One Relax lowering per IR op, in a table keyed by Op (mirrors the op rules in
``ir/semantics``, operation for operation and dtype for dtype, as the torch lowerings do), and
the declared fallbacks: an op without a lowering here runs its NumPy rule, called from the
compiled program as a packed function (``fallback_ops()``; listed in docs/tvm.md). The other
lowerings are in ``ops_columns.py`` (column featurizers, interpolation), ``ops_votes.py`` and
``ops_ctr.py``, which the package imports.

A lowering takes the build context, the node and its input values (Relax expressions, each with
its dtype in its struct info) and returns the node's value. Casts are explicit: NumPy promotes
``float32 array * float64 array`` to float64, Relax does not promote at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tvm import relax
from tvm.relax import op as R
from tvm.script import tirx as T

from peregrine.backends.tvm import kernels, kernels_nn
from peregrine.backends.tvm.tir_math import fenced, is_nan
from peregrine.backends.tvm.trees import forest_constants, forest_walk, plan_forest
from peregrine.ir import Link, Node, Op
from peregrine.ir.semantics.neighbours import kernel_form
from peregrine.ir.semantics.row_sums import evaluate, row_sum_program
from peregrine.options import CompileOptions, Precision


@dataclass
class Context:
    """What a lowering may use: the block builder, the options, and what it reports."""

    bb: relax.BlockBuilder
    options: CompileOptions
    rows: Any  # the batch dimension (a symbolic TIR variable)
    fallback: Callable[[Node, list[relax.Expr]], relax.Expr] | None = None
    # shared by the functions of one module: a forest's walk and tables are added once
    shared: dict[Any, Any] = field(default_factory=dict)

    def emit(self, expr: relax.Expr) -> relax.Expr:
        return self.bb.emit(expr)


Lowering = Callable[[Context, Node, list], relax.Expr]
LOWERINGS: dict[Op, Lowering] = {}


def lowering(op: Op) -> Callable[[Lowering], Lowering]:
    def deco(fn: Lowering) -> Lowering:
        LOWERINGS[op] = fn
        return fn

    return deco


# ------------------------------------------------------------------------- helpers --
def dtype_of(x: relax.Expr) -> str:
    if not isinstance(x.ty, relax.TensorType):  # a nested call not yet typed
        x = relax.BlockBuilder.current().normalize(x)
    return str(x.ty.dtype)


def width_of(x: relax.Expr) -> int:
    """The column count of a 2-d value."""
    return int(relax.BlockBuilder.current().normalize(x).ty.shape[1])


def cast(x: relax.Expr, dtype: str) -> relax.Expr:
    return x if dtype_of(x) == dtype else R.astype(x, dtype)


def f64(x: relax.Expr) -> relax.Expr:
    return cast(x, "float64")


def const(value: Any, dtype: str = "float64") -> relax.Constant:
    return relax.const(np.array(value, dtype=dtype, order="C"), dtype)


def first_column(x: relax.Expr) -> relax.Expr:
    return R.strided_slice(x, axes=[1], begin=[0], end=[1])


def sigmoid(x: relax.Expr) -> relax.Expr:
    """``ir/semantics/core.sigmoid``: exp of a non-positive number only."""
    dt = dtype_of(x)
    e = R.exp(R.negative(R.abs(x)))
    one = const(1.0, dt)
    return R.where(R.greater_equal(x, const(0.0, dt)), R.divide(one, R.add(one, e)),
                   R.divide(e, R.add(one, e)))


def column_map(ctx: Context, node: Node, x: relax.Expr, out_dtype: str, fn: Callable,
               a: Any, b: Any) -> relax.Expr:
    """The node as one scheduled pass over the rows (``kernels.map_kernel``): ``fn(x, a_j,
    b_j)`` per value in float64, ``x`` the input rounded to ``out_dtype`` (exact: callers pass
    the dtype the rule computes in), the result rounded to ``out_dtype``; ``a``, ``b``: per-
    column constants (scalars are broadcast to the node's width)."""
    width, src = int(node.width), dtype_of(x)
    key = ("map", node.name, src)
    if key not in ctx.shared:
        name = f"columns_{len(ctx.shared)}"
        ctx.shared[key] = ctx.bb.add_func(
            kernels.map_kernel(width, src, out_dtype, fn).with_attr("global_symbol", name), name)
    a, b = (np.broadcast_to(np.asarray(v, np.float64), (width,)).copy() for v in (a, b))
    return relax.call_tir(ctx.shared[key], [x, const(a), const(b)],
                          relax.TensorType((ctx.rows, width), out_dtype))


def float32_out(node: Node, x: relax.Expr) -> str:
    """The rule's output dtype for an op whose ``float32`` mode keeps a float32 input float32
    (``Attrs.float32_out``)."""
    return "float32" if node.attrs.float32_out([dtype_of(x) == "float32"]) else "float64"


# ------------------------------------------------------------------------ core ops --
@lowering(Op.REPLACE_WITH_NAN)
def lower_replace_with_nan(ctx: Context, node: Node, ins: list) -> relax.Expr:
    x = ins[0]
    cdt = node.attrs.compare_dtype or dtype_of(x)
    hit = R.equal(cast(x, cdt), const(node.attrs.value, cdt))
    return R.where(hit, const(np.nan, dtype_of(x)), x)


@lowering(Op.TREE_ENSEMBLE)
def lower_tree_ensemble(ctx: Context, node: Node, ins: list) -> relax.Expr:
    forest = node.attrs.forest
    x = ins[0]
    width = width_of(x)
    key = (node.name, dtype_of(x))
    if key not in ctx.shared:
        plan = plan_forest(forest, np.dtype(dtype_of(x)), width, ctx.options)
        name = f"forest_{len(ctx.shared)}_{dtype_of(x)}"
        walk = ctx.bb.add_func(forest_walk(forest, plan).with_attr("global_symbol", name), name)
        tables = [relax.const(np.ascontiguousarray(a), a.dtype.name) for a in forest_constants(plan)]
        ctx.shared[key] = (walk, tables)
    walk, tables = ctx.shared[key]
    args = [x, *tables]
    out = relax.TensorType((ctx.rows, forest.n_outputs), "float64")
    return relax.call_tir(walk, args, out)


@lowering(Op.AFFINE)
def lower_affine(ctx: Context, node: Node, ins: list) -> relax.Expr:
    a = node.attrs
    x = ins[0]
    if ctx.options.precision is Precision.FLOAT32 and not a.float32_out(
            [dtype_of(x) == "float32"]):  # stay in the input's precision
        dt = dtype_of(x)
        return R.add(R.multiply(x, const(a.scale, dt)), const(a.shift, dt))
    out = float32_out(node, x)
    if out == "float32":  # each step rounds to float32
        scale, shift = _float32_params("cast" if a.float32 == "cast" else "round",
                                       a.scale, a.shift)
        return column_map(ctx, node, x, out, lambda v, s, c: T.Cast(
            "float64", T.Cast("float32", v * s)) + c, scale, shift)
    # the product rounds before the sum, as NumPy's two loops (fenced: no fused multiply-add)
    return column_map(ctx, node, x, out, lambda v, s, c: fenced(v * s) + c, a.scale, a.shift)


def _log_softmax(x: relax.Expr) -> relax.Expr:
    """x - logsumexp(x) in ``ir/semantics/core.logsumexp_rows``' order (sklearn's)."""
    dt = dtype_of(x)
    m = R.max(x, axis=1, keepdims=True)
    at_max = R.equal(x, m)
    count = R.sum(cast(at_max, dt), axis=1, keepdims=True)
    shift = R.where(R.isfinite(m), m, const(0.0, dt))
    rest = R.where(at_max, const(-np.inf, dt), x)
    s = R.sum(R.exp(R.subtract(rest, shift)), axis=1, keepdims=True)
    s = R.where(R.equal(s, const(0.0, dt)), s, R.divide(s, count))
    return R.subtract(x, R.add(R.add(R.log(R.add(const(1.0, dt), s)), R.log(count)), m))


def _softmax(x: relax.Expr) -> relax.Expr:
    e = R.exp(R.subtract(x, R.max(x, axis=1, keepdims=True)))
    return R.divide(e, R.sum(e, axis=1, keepdims=True))


def _sigmoid_link(x: relax.Expr, node: Node) -> relax.Expr:
    scale = float(node.attrs.scale)
    return sigmoid(x if scale == 1.0 else R.multiply(const(scale, dtype_of(x)), x))


def _isolation(x: relax.Expr, node: Node) -> relax.Expr:
    dt = dtype_of(x)
    power = R.divide(R.negative(x), const(float(node.attrs.denominator), dt))
    return R.negative(R.power(const(2.0, dt), power))


LINKS: dict[Link, Callable[[relax.Expr, Node], relax.Expr]] = {
    Link.IDENTITY: lambda x, node: x,
    Link.SIGMOID: _sigmoid_link,
    Link.SOFTMAX: lambda x, node: _softmax(x),
    Link.EXP: lambda x, node: R.exp(x),
    Link.ISOLATION_SCORE: _isolation,
    Link.LOG_SOFTMAX: lambda x, node: _log_softmax(x),
}
if set(LINKS) != set(Link):
    raise RuntimeError(f"LINK kinds without a tvm lowering: {set(Link) - set(LINKS)}")


# UFUNC names run by their rule even on this backend: the transcendental ones, whose NumPy loops
# are both the rule's bits and faster than TVM's calls into the C library (exp on 100K x 10
# doubles: 3.0 ms by the rule, 6.4 ms lowered, Intel Xeon family 6 model 207), and tanh, whose
# Relax form is a fast approximation (1.0 relative off at 1e-300). log is lowered although
# 0.05% of its values are an ulp from NumPy's: every classifier's predict_log_proba takes it,
# and as a rule it cost each one-row call ~25 us (a forest's 73 -> 46 us lowered)
RULE_UFUNCS = frozenset({"exp", "sin", "cos", "arcsinh", "log1p", "expm1", "tanh", "log2",
                         "log10", "exp2", "cbrt"})


# ACTIVATION kinds ops_nn.py lowers: exact in any dtype, and through exp / log (the C
# library's, an ulp from NumPy's in float64: lowered for float32 networks, which round it away)
EXACT_ACTIVATIONS = frozenset({"identity", "relu", "hardtanh", "leaky_relu"})
LIBM_ACTIVATIONS = frozenset({"sigmoid", "silu", "softmax", "log_softmax"})


def rule_only(node: Node) -> bool:
    """A node of a lowered op that still runs its NumPy rule: XGBoost's float32 sigmoid and
    softmax (LINK float32), whose bits are the C library's expf (ir/semantics/libm32.py),
    which the rule calls, where TVM's own exp would round differently; and the ufuncs of
    ``RULE_UFUNCS``; QuantileTransformer's normal output (scipy's ndtri); and the KERNEL
    kinds ``ops_kernel.py`` leaves to the rule (sigmoid's tanh, cosine, the float power); and
    the network layers ``ops_nn.py`` leaves to it (float64 networks, wide DENSE layers, the
    activations through tanh, expm1, log1p or erf); and the KNN metrics ``knn.py`` leaves to
    it (``neighbours.kernel_form``: cosine, minkowski p other than 1 and 2, wide rows)."""
    if node.op is Op.KNN:
        return kernel_form(node.attrs) is None
    if node.op is Op.KERNEL:
        a = node.attrs
        return a.kind in ("sigmoid", "cosine") or (a.kind == "poly" and a.form != "libsvm")
    if node.op in (Op.DENSE, Op.BATCH_NORM, Op.ACTIVATION):
        a = node.attrs
        if node.op is Op.ACTIVATION:
            exact = a.kind in EXACT_ACTIVATIONS
            return not (exact or (a.kind in LIBM_ACTIVATIONS and a.net_dtype == "float32"))
        return a.net_dtype != "float32" or (
            node.op is Op.DENSE and np.shape(a.weight)[0] > kernels_nn.MAX_INPUTS)
    if node.op is Op.UFUNC:
        return node.attrs.name in RULE_UFUNCS
    if node.op is Op.QUANTILE:
        return node.attrs.output == "normal"
    return node.op is Op.LINK and bool(node.attrs.float32)


@lowering(Op.LINK)
def lower_link(ctx: Context, node: Node, ins: list) -> relax.Expr:
    if rule_only(node):
        assert ctx.fallback is not None
        return ctx.fallback(node, ins)
    return LINKS[node.attrs.kind](ins[0], node)


@lowering(Op.BINARY_PROBA)
def lower_binary_proba(ctx: Context, node: Node, ins: list) -> relax.Expr:
    p = first_column(ins[0])
    return R.concat([R.subtract(const(1.0, dtype_of(p)), p), p], axis=1)


@lowering(Op.ARGMAX)
def lower_argmax(ctx: Context, node: Node, ins: list) -> relax.Expr:
    return _argmax_nan_first(ins[0])


def _argmax_nan_first(x: relax.Expr) -> relax.Expr:
    """NumPy's argmax: the first maximum, or the first NaN of a row that has one (TVM's argmax
    compares, and a NaN compares false)."""
    nan = R.isnan(x)
    best = R.argmax(x, axis=1, keepdims=True)
    first_nan = R.argmax(cast(nan, "int32"), axis=1, keepdims=True)
    any_nan = R.max(cast(nan, "int32"), axis=1, keepdims=True)
    return cast(R.where(R.greater(any_nan, const(0, "int32")), first_nan, best), "int64")


@lowering(Op.THRESHOLD)
def lower_threshold(ctx: Context, node: Node, ins: list) -> relax.Expr:
    x = first_column(ins[0])
    v = const(float(node.attrs.value), dtype_of(x))
    hit = R.greater(x, v) if node.attrs.strict else R.greater_equal(x, v)
    return cast(hit, "int64")


# ------------------------------------------------------------------- pipeline ops --
@lowering(Op.LINEAR)
def lower_linear(ctx: Context, node: Node, ins: list) -> relax.Expr:
    """safe_sparse_dot(X, coef_.T) + intercept_: the product, then the bias, as one scheduled
    function (``kernels.py``; Relax's matmul is left serial by the default pipeline)."""
    wt, bias = kernels.constants(node.attrs.weight, node.attrs.bias)
    k, d = wt.shape
    key = ("dense", d, k)
    if key not in ctx.shared:
        name = f"dense_{d}x{k}"
        ctx.shared[key] = ctx.bb.add_func(
            kernels.dense_kernel(d, k).with_attr("global_symbol", name), name)
    out = relax.TensorType((ctx.rows, k), "float64")
    return relax.call_tir(ctx.shared[key], [f64(ins[0]), const(wt), const(bias)], out)


@lowering(Op.SELECT)
def lower_select(ctx: Context, node: Node, ins: list) -> relax.Expr:
    cols = np.asarray(node.attrs.columns, dtype=np.int64).reshape(-1)
    out = R.take(ins[0], const(cols, "int64"), axis=1)
    return cast(out, "float32") if node.attrs.float32 else out  # a float32 frame block


@lowering(Op.CONCAT)
def lower_concat(ctx: Context, node: Node, ins: list) -> relax.Expr:
    if node.attrs.float32 and any(dtype_of(x) == "float32" for x in ins):
        return R.concat([cast(x, "float32") for x in ins], axis=1)
    return R.concat([f64(x) for x in ins], axis=1)


def _float32_params(mode: str, *params: Any) -> list[np.ndarray]:
    out = [np.asarray(p, np.float64) for p in params]
    return [p.astype(np.float32).astype(np.float64) for p in out] if mode == "cast" else out


@lowering(Op.CENTER_SCALE)
def lower_center_scale(ctx: Context, node: Node, ins: list) -> relax.Expr:
    a, x = node.attrs, ins[0]
    out = float32_out(node, x)
    if out == "float32":  # each step rounds to float32
        c, s = _float32_params(a.float32, a.center, a.scale)
        return column_map(ctx, node, x, out, lambda v, m, d: T.Cast(
            "float64", T.Cast("float32", v - m)) / d, c, s)
    return column_map(ctx, node, x, out, lambda v, m, d: (v - m) / d, a.center, a.scale)


@lowering(Op.CLIP)
def lower_clip(ctx: Context, node: Node, ins: list) -> relax.Expr:
    """np.clip: ``x < low`` gives low (NaN and -0.0 at a 0.0 bound stay), then ``> high``
    gives high (so high wins where low > high, as NumPy's)."""

    def clip(v: Any, low: Any, high: Any) -> Any:
        lifted = T.Select(v < low, low, v)
        return T.Select(lifted > high, high, lifted)

    a, x = node.attrs, ins[0]
    return column_map(ctx, node, x, float32_out(node, x), clip, float(a.low), float(a.high))


@lowering(Op.NORMALIZE)
def lower_normalize(ctx: Context, node: Node, ins: list) -> relax.Expr:
    """Norms summed in NumPy's order (row_sums: one column slice per program step), in
    float32 on a float32 input with ``float32`` (sqrt and quotient round once, as NumPy's)."""
    a, width = node.attrs, int(node.width)
    dt = "float32" if a.float32 and dtype_of(ins[0]) == "float32" else "float64"
    x = cast(ins[0], dt)
    if a.norm == "max":
        norm = R.max(R.abs(x), axis=1, keepdims=True)
    else:
        values = R.abs(x) if a.norm == "l1" else R.multiply(x, x)
        program = row_sum_program("pairwise" if a.norm == "l1" else "einsum", width, dt)
        norm = evaluate(program, lambda j: R.strided_slice(
            values, axes=[1], begin=[j], end=[j + 1]), R.add)
        if a.norm == "l2":
            norm = R.sqrt(norm)
    zero = (R.less(norm, const(a.zero_below(dt), dt)) if a.tiny  # scikit-learn's 10 eps
            else R.equal(norm, const(0.0, dt)))
    out = R.divide(x, R.where(zero, const(1.0, dt), norm))
    if a.zero == "uniform":
        out = R.where(zero, const(1.0 / width, dt), out)
    return out


@lowering(Op.BINARIZE)
def lower_binarize(ctx: Context, node: Node, ins: list) -> relax.Expr:
    x = ins[0]
    t = node.attrs.threshold_for(dtype_of(x) == "float32")  # exact against float64 x
    return column_map(ctx, node, x, float32_out(node, x), lambda v, thr, one: T.Select(
        v > thr, one, T.float64(0)), t, 1.0)


@lowering(Op.IMPUTE)
def lower_impute(ctx: Context, node: Node, ins: list) -> relax.Expr:
    a, x = node.attrs, ins[0]
    out = float32_out(node, x)
    missing = float(np.array(a.missing, dtype=out))  # a float32 X compares to float32(missing)
    values = np.asarray(a.values, np.float64).astype(out)
    if np.isnan(missing):
        return column_map(ctx, node, x, out, lambda v, fill, _: T.Select(is_nan(v), fill, v),
                          values, 0.0)
    return column_map(ctx, node, x, out, lambda v, fill, m: T.Select(v == m, fill, v),
                      values, missing)


@lowering(Op.WEIGHTED_SUM)
def lower_weighted_sum(ctx: Context, node: Node, ins: list) -> relax.Expr:
    weights = [float(w) for w in node.attrs.weights]
    acc = R.multiply(f64(ins[0]), const(weights[0]))
    for x, w in zip(ins[1:], weights[1:]):
        acc = R.add(acc, R.multiply(f64(x), const(w)))
    return R.divide(acc, const(float(node.attrs.divisor)))


def lower_node(ctx: Context, node: Node, ins: list) -> relax.Expr:
    rule = LOWERINGS.get(node.op)
    if rule is None:  # a declared fallback: the op's NumPy rule
        assert ctx.fallback is not None
        return ctx.fallback(node, ins)
    return rule(ctx, node, ins)


def fallback_ops() -> frozenset[Op]:
    """The ops without a lowering (once the package has imported every ``ops_*`` module)."""
    return frozenset(op for op in Op if op is not Op.INPUT) - frozenset(LOWERINGS)


__all__ = ["LOWERINGS", "RULE_UFUNCS", "Context", "fallback_ops", "lower_node", "rule_only",
           "width_of"]
