"""Relax lowerings of the column featurizers: one-hot and category codes, polynomial terms,
bins, range checks, element-wise ufuncs and interpolation (INTERP, QUANTILE), each mirroring
its NumPy rule in ``ir/semantics`` (``pipeline.py``, ``core.py``, ``transformers.py``).

Matching and counting are done as comparisons against constant tables, so the results are
exact: an indicator is a 0/1 value, a slot shared by several categories (scikit-learn's
infrequent ones) is the largest of its members' 0/1 values, a code is picked by the first
match (``argmax`` returns the first maximum), a bin is a count of edges. Polynomial terms
are the rule's products in the rule's order (a scheduled TIR function, ``kernels.py``). The
lowered ufuncs are the exact ones (sqrt, absolute, floor...); the others run their rule from
the lowered program (``ops.RULE_UFUNCS``, ``ops.rule_only``), as XGBoost's float32 links do;
``log`` is lowered (the C library's, within an ulp of NumPy's: see ``ops.RULE_UFUNCS``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax
from tvm.relax import op as R

from peregrine.backends.tvm import kernels
from peregrine.backends.tvm.ops import (
    RULE_UFUNCS,
    Context,
    cast,
    const,
    dtype_of,
    f64,
    lowering,
    rule_only,
    width_of,
)
from peregrine.ir import Node, Op
from peregrine.ir.ops import UFUNCS as ALL_UFUNCS


def _i64(values: Any) -> relax.Constant:
    return const(np.asarray(values, np.int64), "int64")


def _take(x: relax.Expr, columns: Any) -> relax.Expr:
    return R.take(x, _i64(np.asarray(columns, np.int64).reshape(-1)), axis=1)


def _equal(v: relax.Expr, cats: np.ndarray, nan_matches: bool) -> relax.Expr:
    """``v == cats`` (broadcast), a NaN value matching a NaN category where ``nan_matches``."""
    hit = R.equal(v, const(cats))
    nan = np.isnan(cats)
    if nan_matches and nan.any():
        hit = R.logical_or(hit, R.logical_and(R.isnan(v), const(nan, "bool")))
    return hit


def _largest_of(values: relax.Expr, members: list[list[int]], none: int) -> relax.Expr:
    """Per output column k, the largest of ``values[:, members[k]]`` (0/1 floats); ``none``
    is the index of a column of zeros, for outputs (and padding) with no member."""
    depth = max([len(m) for m in members] + [1])
    if depth == 1:
        return _take(values, [m[0] if m else none for m in members])
    table = np.full((len(members), depth), none, dtype=np.int64)
    for k, m in enumerate(members):
        table[k, : len(m)] = m
    return R.max(R.take(values, _i64(table), axis=1), axis=2)


# ------------------------------------------------------------------------ one-hot --
@lowering(Op.ONE_HOT)
def lower_one_hot(ctx: Context, node: Node, ins: list) -> relax.Expr:
    """Every (column, category) comparison at once, then each slot the largest of its
    categories' indicators and, for a column's unknown slot, 1 where none of its categories
    matched (a category without a slot still counts as a match: the rule's ``found``)."""
    a, x = node.attrs, f64(ins[0])
    cols, cats, slots, owner = [], [], [], []
    for i, (j, c, s) in enumerate(zip(a.columns, a.categories, a.slots)):
        c = np.asarray(c, np.float64).reshape(-1)
        cols += [int(j)] * len(c)
        cats.append(c)
        slots += [int(t) for t in np.asarray(s).reshape(-1)]
        owner += [i] * len(c)
    width = int(node.width)
    n_cats = len(cols)
    zero = R.zeros_like(R.strided_slice(x, axes=[1], begin=[0], end=[1]))
    values = zero  # (n, n_cats + 1): the indicators, then a column of zeros (index n_cats)
    if n_cats:
        hits = _equal(_take(x, cols), np.concatenate(cats).reshape(1, -1), True)
        values = R.concat([cast(hits, "float64"), zero], axis=1)
    unknown = [int(u) for u in np.asarray(a.unknown_slots).reshape(-1)]
    members: list[list[int]] = [[] for _ in range(width)]
    for k, s in enumerate(slots):
        if s >= 0:
            members[s].append(k)
    unknown_cols = [i for i, u in enumerate(unknown) if u >= 0]
    if unknown_cols:
        own = [[k for k, o in enumerate(owner) if o == i] for i in unknown_cols]
        matched = _largest_of(values, own, n_cats)
        missed = R.subtract(const(1.0), matched)  # (n, len(unknown_cols))
        values = R.concat([values, missed], axis=1)
        for pos, i in enumerate(unknown_cols):
            members[unknown[i]].append(n_cats + 1 + pos)
    if all(len(m) == 1 for m in members) and [m[0] for m in members] == list(range(width)):
        return R.strided_slice(values, axes=[1], begin=[0], end=[width])  # the comparisons
    return _largest_of(values, members, n_cats)


# ----------------------------------------------------------------- category codes --
def _codes(x: relax.Expr, columns: Any, categories: Any, codes: Any, unknown: Any,
           nan_matches: bool) -> relax.Expr:
    """``x`` (float64) with each listed column replaced by the code of the first category it
    equals, or that column's ``unknown`` value."""
    cats = [np.asarray(c, np.float64).reshape(-1) for c in categories]
    m = len(cats)
    if m == 0:
        return x
    depth = max([len(c) for c in cats] + [1])
    table = np.zeros((m, depth))
    code_table = np.zeros((m, depth))
    valid = np.zeros((m, depth), dtype=bool)
    for i, (c, k) in enumerate(zip(cats, codes)):
        table[i, : len(c)] = c
        code_table[i, : len(c)] = np.asarray(k, np.float64).reshape(-1)
        valid[i, : len(c)] = True
    v = R.expand_dims(_take(x, columns), axis=2)  # (n, m, 1)
    hit = R.logical_and(_equal(v, table[None], nan_matches), const(valid[None], "bool"))
    hit = cast(hit, "int32")
    found = R.greater(R.max(hit, axis=2), const(0, "int32"))  # (n, m)
    first = R.argmax(hit, axis=2)  # the first match (its index in the padded row)
    flat = R.add(cast(first, "int64"), _i64((np.arange(m) * depth).reshape(1, m)))
    code = R.take(const(code_table.reshape(-1)), flat, axis=0)
    enc = R.where(found, code, const(np.asarray(unknown, np.float64).reshape(1, m)))
    # back into place: listed columns take their code, the others pass through
    width = width_of(x)
    listed = np.zeros(width, dtype=bool)
    where = np.zeros(width, dtype=np.int64)
    for i, j in enumerate(columns):
        listed[int(j)] = True
        where[int(j)] = i
    return R.where(const(listed.reshape(1, width), "bool"), _take(enc, where), x)


@lowering(Op.CATEGORY_MAP)
def lower_category_map(ctx: Context, node: Node, ins: list) -> relax.Expr:
    a = node.attrs
    unknown = np.broadcast_to(np.asarray(a.unknown, np.float64), (len(a.columns),))
    return _codes(f64(ins[0]), a.columns, a.categories, a.codes, unknown, True)


@lowering(Op.ORDINAL_ENCODE)
def lower_ordinal_encode(ctx: Context, node: Node, ins: list) -> relax.Expr:
    """Positions among the ascending categories; NaN when absent, and for NaN itself (the
    rule's ``searchsorted`` never matches it). Computed in float64; the module casts back to
    the rule's dtype (a float32 input stays float32: small positions and NaN are exact)."""
    a = node.attrs
    codes = [np.arange(len(np.asarray(c).reshape(-1)), dtype=np.float64) for c in a.categories]
    unknown = np.full(len(a.columns), np.nan)
    return _codes(f64(ins[0]), a.columns, a.categories, codes, unknown, False)


# --------------------------------------------------------------------- polynomial --
@lowering(Op.POLYNOMIAL)
def lower_polynomial(ctx: Context, node: Node, ins: list) -> relax.Expr:
    """All terms in one pass over each row (``kernels.polynomial_kernel``), each term's
    factors in the rule's order (``Polynomial.factors``); float32 products on a float32 input
    with ``float32``, as the rule."""
    a, x = node.attrs, ins[0]
    dt = "float32" if a.float32 and dtype_of(x) == "float32" else "float64"
    factors = a.factors()
    n_in = int(np.shape(a.powers)[1])
    degree = max([len(f) for f in factors] + [1])
    table = np.full((degree, len(factors)), n_in, dtype=np.int32)  # n_in: the 1.0
    for k, f in enumerate(factors):
        table[: len(f), k] = f
    key = ("polynomial", node.name, dt)
    if key not in ctx.shared:
        name = f"polynomial_{len(ctx.shared)}_{dt}"
        ctx.shared[key] = ctx.bb.add_func(
            kernels.polynomial_kernel(n_in, table, dt).with_attr("global_symbol", name), name)
    out = relax.TensorType((ctx.rows, len(factors)), dt)
    return relax.call_tir(ctx.shared[key], [cast(x, dt), const(table, "int32")], out)


# ------------------------------------------------------------------ interpolation --
def _interp(ctx: Context, x: relax.Expr, xps: Any, fps: Any, left: Any,
            right: Any) -> relax.Expr:
    """np.interp of each column of ``x`` (float64) through its own table, bit for bit."""
    xp, fp, slopes, starts, lengths = kernels.interp_tables(xps, fps)
    width = len(lengths)
    steps = int(lengths.max()).bit_length() + 1
    key = ("interp", width, len(xp), steps)
    if key not in ctx.shared:
        name = f"interp_{len(ctx.shared)}"
        ctx.shared[key] = ctx.bb.add_func(
            kernels.interp_kernel(width, len(xp), steps).with_attr("global_symbol", name), name)
    args = [x, const(xp), const(fp), const(slopes), const(starts, "int32"),
            const(lengths, "int32"), const(np.asarray(left, np.float64).reshape(-1)),
            const(np.asarray(right, np.float64).reshape(-1))]
    return relax.call_tir(ctx.shared[key], args, relax.TensorType((ctx.rows, width), "float64"))


@lowering(Op.INTERP)
def lower_interp(ctx: Context, node: Node, ins: list) -> relax.Expr:
    """np.interp per column, bit for bit (``kernels.interp_kernel``: NumPy's C loop)."""
    a = node.attrs
    return _interp(ctx, f64(ins[0]), a.xp, a.fp, a.left, a.right)


@lowering(Op.QUANTILE)
def lower_quantile(ctx: Context, node: Node, ins: list) -> relax.Expr:
    """QuantileTransformer's uniform output, bit for bit: ``0.5 * (interp(x, q, r) -
    interp(-x, -q[::-1], -r[::-1]))`` (both lookups in one interpolation call over the
    columns and their negations), rounded to the input's dtype, then 1 where ``x == q[-1]``
    and 0 where ``x == q[0]``. The normal output runs its rule (``ops.rule_only``: scipy's
    ndtri)."""
    if rule_only(node):
        assert ctx.fallback is not None
        return ctx.fallback(node, ins)
    a, dt = node.attrs, dtype_of(ins[0])
    x = f64(ins[0])
    refs = np.asarray(a.references, np.float64)
    qs = [np.asarray(q, np.float64) for q in a.quantiles]
    d = len(qs)
    xps = qs + [-q[::-1] for q in qs]
    fps = [refs] * d + [-refs[::-1]] * d
    both = _interp(ctx, R.concat([x, R.negative(x)], axis=1), xps, fps,
                   [f[0] for f in fps], [f[-1] for f in fps])
    fwd = R.strided_slice(both, axes=[1], begin=[0], end=[d])
    back = R.strided_slice(both, axes=[1], begin=[d], end=[2 * d])
    u = f64(cast(R.multiply(const(0.5), R.subtract(fwd, back)), dt))
    first = const(np.asarray([q[0] for q in qs]).reshape(1, d))
    last = const(np.asarray([q[-1] for q in qs]).reshape(1, d))
    u = R.where(R.equal(x, last), const(1.0), u)
    return cast(R.where(R.equal(x, first), const(0.0), u), dt)


# ------------------------------------------------------------- bins and ranges --
@lowering(Op.DIGITIZE)
def lower_digitize(ctx: Context, node: Node, ins: list) -> relax.Expr:
    """``searchsorted(edges, x, side="right")`` as the count of edges <= x (edges padded with
    NaN, which no comparison counts); NaN -> len(edges), where NumPy sorts it."""
    x = f64(ins[0])
    edges = [np.asarray(e, np.float64).reshape(-1) for e in node.attrs.edges]
    depth = max([len(e) for e in edges] + [1])
    table = np.full((1, len(edges), depth), np.nan)
    for j, e in enumerate(edges):
        table[0, j, : len(e)] = e
    le = R.less_equal(const(table), R.expand_dims(x, axis=2))  # (n, d, depth)
    count = R.sum(cast(le, "float64"), axis=2)
    lens = const(np.asarray([len(e) for e in edges], np.float64).reshape(1, -1))
    return R.where(R.isnan(x), lens, count)


@lowering(Op.RANGE_CHECK)
def lower_range_check(ctx: Context, node: Node, ins: list) -> relax.Expr:
    x = f64(ins[0])
    low, high = (np.asarray(v, np.float64) for v in (node.attrs.low, node.attrs.high))
    low, high = (v.reshape(1, -1) if v.ndim else v for v in (low, high))
    out = R.logical_or(R.less(x, const(low)), R.greater(x, const(high)))  # NaN: 0.0
    return cast(out, "float64")


# -------------------------------------------------------------------------- ufuncs --
def _sign(x: relax.Expr) -> relax.Expr:
    return R.where(R.isnan(x), x, R.sign(x))  # NumPy's sign(NaN) is NaN, TVM's 0


UFUNCS = {
    "log": R.log,
    "sqrt": R.sqrt,  # correctly rounded, as NumPy's
    "absolute": R.abs,
    "square": lambda x: R.multiply(x, x),
    "negative": R.negative,
    "reciprocal": lambda x: R.divide(const(1.0, dtype_of(x)), x),
    "sign": _sign,
    "floor": R.floor,
    "ceil": R.ceil,
    "rint": R.round,  # half to even, as NumPy
    "trunc": R.trunc,
}


if set(UFUNCS) | RULE_UFUNCS != set(ALL_UFUNCS):
    raise RuntimeError(f"UFUNC names without a tvm plan: {set(ALL_UFUNCS) - set(UFUNCS)}")


@lowering(Op.UFUNC)
def lower_ufunc(ctx: Context, node: Node, ins: list) -> relax.Expr:
    """The float64 result, NumPy's bits (every lowered ufunc but ``log`` is exact or correctly
    rounded; ``log`` is the C library's, an ulp from NumPy's on 0.05% of values); on a float32
    input with ``float32``, rounded once to float32 (``square`` and
    ``reciprocal`` of a float32 value: NumPy's float32 loop rounds once too, from the exact
    product; the quotient may differ by the double rounding docs/exactness.md bounds)."""
    if rule_only(node):
        assert ctx.fallback is not None
        return ctx.fallback(node, ins)
    out = UFUNCS[node.attrs.name](f64(ins[0]))
    if node.attrs.float32 and dtype_of(ins[0]) == "float32":
        return cast(out, "float32")
    return out
