"""ONNX lowerings of table lookups: ONE_HOT (at the end: an encoder's comparisons with its
categories), WEIGHTED_MEDIAN, and INTERP (np.interp per column: isotonic calibration's
lookup, ``ir/semantics/transformers.py``), in double, as NumPy's ``arr_interp`` computes it:

- ``i`` = how many of the column's ``xp`` are <= x, minus one (the last ``xp[i] <= x``),
  counted by comparing x with every table entry at once and a 0/1 matrix product (integers:
  exact), as DIGITIZE's lowering;
- x < xp[0] -> left, x > xp[-1] -> right, x == xp[i] -> fp[i] (the last of repeated xp, as
  the binary search lands there), NaN -> NaN;
- else ``slope * (x - xp[i]) + fp[i]`` with NumPy's slope ``(fp[i+1] - fp[i]) / (xp[i+1] -
  xp[i])`` (computed here by NumPy itself: the same double), and NumPy's fallbacks where that
  is NaN (an infinite x on a flat segment): ``slope * (x - xp[i+1]) + fp[i+1]``, then fp[i]
  when the segment is flat;
- a one-point table: x < xp -> left, x > xp -> right, else fp (NaN too), as NumPy.

Every step is one IEEE operation on the same operands as NumPy's C loop (which is compiled
without FMA contraction on x86-64's baseline): bit-equal values."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from peregrine.export.onnx_graph import Emitter, lowering
from peregrine.ir.ops import Op
from peregrine.kernels.rowwise_onehot import row_table

DOUBLE = TensorProto.DOUBLE


def _row(e: Emitter, v: Any, dtype: Any = np.float64) -> str:
    return e.const(np.asarray(v, dtype).reshape(1, -1))


@lowering(Op.INTERP)
def lower_interp(e: Emitter, n: Any, ins: list[str]) -> str:
    a = n.attrs
    return interp_columns(e, ins[0], a.xp, a.fp, a.left, a.right)


def interp_columns(e: Emitter, x: str, xp: Any, fp: Any, left: Any, right: Any) -> str:
    """Column j of ``x`` (double) -> np.interp(x[:, j], xp[j], fp[j], left[j], right[j]),
    bit-equal (INTERP, and QUANTILE's two lookups: ``onnx_transformers.py``)."""
    xps = [np.asarray(t, np.float64).reshape(-1) for t in xp]
    fps = [np.asarray(t, np.float64).reshape(-1) for t in fp]
    d = len(xps)
    sizes = np.asarray([len(t) for t in xps], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    # count xp <= x per column: every (column, entry) pair compared at once
    owner_col = np.concatenate([np.full(len(t), j, np.int64) for j, t in enumerate(xps)])
    flat_xp = np.concatenate(xps)
    picked = e.op("Gather", [x, e.const(owner_col)], axis=1)
    le = e.op("Cast", [e.op("GreaterOrEqual", [picked, _row(e, flat_xp)])], to=DOUBLE)
    owner = np.zeros((len(flat_xp), d))
    owner[np.arange(len(flat_xp)), owner_col] = 1.0
    count = e.op("Cast", [e.op("MatMul", [le, e.const(owner)])], to=TensorProto.INT64)
    i = e.op("Sub", [count, _row(e, np.ones(d), np.int64)])  # -1: below the table
    # the segment [xp[j], xp[j+1]] read: j = clip(i, 0, size - 2) (0 for one-point tables)
    hi = np.maximum(sizes - 2, 0)
    j = e.op("Min", [e.op("Max", [i, _row(e, np.zeros(d), np.int64)]), _row(e, hi, np.int64)])
    at = e.op("Add", [j, _row(e, offsets, np.int64)])
    nxt = e.op("Add", [at, _row(e, (sizes > 1).astype(np.int64), np.int64)])
    slopes = np.zeros(len(flat_xp))
    flat_fp = np.concatenate(fps)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for t, (xp, fp) in enumerate(zip(xps, fps)):
            if len(xp) > 1:  # NumPy's own slopes: the same doubles
                slopes[offsets[t]:offsets[t] + len(xp) - 1] = (fp[1:] - fp[:-1]) / (
                    xp[1:] - xp[:-1])

    def table(values: np.ndarray, idx: str) -> str:
        return e.op("Gather", [e.const(values), idx], axis=0)

    xp0, fp0 = table(flat_xp, at), table(flat_fp, at)
    xp1, fp1 = table(flat_xp, nxt), table(flat_fp, nxt)
    slope = table(slopes, at)
    res = e.op("Add", [e.op("Mul", [slope, e.op("Sub", [x, xp0])]), fp0])
    other = e.op("Add", [e.op("Mul", [slope, e.op("Sub", [x, xp1])]), fp1])
    flat_seg = e.op("Equal", [fp0, fp1])
    other = e.op("Where", [e.op("And", [e.op("IsNaN", [other]), flat_seg]), fp0, other])
    res = e.op("Where", [e.op("IsNaN", [res]), other, res])
    # exact hits: x == xp[i] -> fp[i] (i = j, or j + 1 past the last segment's start)
    fp_i = table(flat_fp, e.op("Add", [e.op("Max", [i, _row(e, np.zeros(d), np.int64)]),
                                       _row(e, offsets, np.int64)]))
    xp_i = table(flat_xp, e.op("Add", [e.op("Max", [i, _row(e, np.zeros(d), np.int64)]),
                                       _row(e, offsets, np.int64)]))
    res = e.op("Where", [e.op("Equal", [x, xp_i]), fp_i, res])
    first = _row(e, [t[0] for t in xps])
    last = _row(e, [t[-1] for t in xps])
    res = e.op("Where", [e.op("Less", [x, first]), _row(e, np.asarray(left, np.float64)),
                         res])
    res = e.op("Where", [e.op("Greater", [x, last]),
                         _row(e, np.asarray(right, np.float64)), res])
    # NaN -> NaN, except a one-point table's fp
    single = sizes == 1
    nan_to = np.where(single, [t[0] for t in fps], np.nan)
    return e.op("Where", [e.op("IsNaN", [x]), _row(e, nan_to), res])


@lowering(Op.WEIGHTED_MEDIAN)
def lower_weighted_median(e: Emitter, n: Any, ins: list[str]) -> str:
    """AdaBoostRegressor's weighted median (``ir/semantics/meta.py``) as the rule computes it:
    each row sorted ascending (TopK with k = all members; ONNX orders equal values by lower
    index), the members' weights gathered in that order and summed left to right (CumSum:
    NumPy's cumsum is sequential too, so the same doubles), the first position whose
    cumulative weight is >= 0.5 * the row's total (ArgMax keeps the first maximum, as
    NumPy's ``argmax`` of the 0/1 row), and the sorted prediction there. Equal predictions
    sorted in another order than NumPy's argsort give the same value (the crossing is inside
    the tied run either way) unless reordering their weights moves the rounded cumulative
    sum across the half, which needs a tie exactly at the crossing."""
    from onnx import helper

    w = np.asarray(n.attrs.weights, np.float64).reshape(-1)
    m = w.size
    pred = e.to_double(ins[0])
    values, order = e.fresh("sorted"), e.fresh("order")
    e.nodes.append(helper.make_node(
        "TopK", [pred, e.const(np.asarray([m], np.int64))], [values, order],
        name=e.fresh("topk"), axis=1, largest=0, sorted=1))
    cdf = e.op("CumSum", [e.op("Gather", [e.const(w), order], axis=0),
                          e.const(np.asarray(1, np.int64))])
    half = e.op("Mul", [e.const(np.asarray(0.5)), e.columns(cdf, m - 1, m)])
    reached = e.op("Cast", [e.op("GreaterOrEqual", [cdf, half])], to=TensorProto.INT32)
    at = e.op("ArgMax", [reached], axis=1, keepdims=1)
    return e.op("GatherElements", [values, at], axis=1)


@lowering(Op.ONE_HOT)
def lower_one_hot(e: Emitter, n: Any, ins: list[str]) -> str:
    """Every (column, category) pair compared at once, on the transposed input: ``match``
    (K, n) 0/1 (ONNX Runtime's Gather along axis 1 copies one element at a time, along axis
    0 a row of n values). Where each output slot is one pair's and the pairs are taken in slot
    order (a plain one-hot: no unknown slots), the output is ``match`` transposed (as bools,
    then widened): measured on 100K rows, 5 columns, 50 categories, ONNX Runtime 1.32, one
    thread: 7.5 ms against 62 ms for Gather + Equal + MatMul. Otherwise two 0/1 matrix
    products (Gemm with transA) place the matches in their slots and the no-match flags in
    the unknown slots (30 ms there). Categories of a column are distinct, so each output
    entry is a sum of at most one 1.0: exact."""
    a, x = n.attrs, ins[0]
    width = int(n.width)
    e.one_hots[out := _one_hot_matches(e, a, x, width)] = (n, x)
    return out


def _one_hot_matches(e: Emitter, a: Any, x: str, width: int) -> str:
    cols, cats, slot_of, owner = [], [], [], []
    for k, (j, c, s) in enumerate(zip(a.columns, a.categories, a.slots)):
        c = np.asarray(c, np.float64)
        cols.extend([int(j)] * len(c))
        cats.extend(c.tolist())
        slot_of.extend(np.asarray(s, np.int64).tolist())
        owner.extend([k] * len(c))
    unknown = np.asarray(a.unknown_slots, np.int64).reshape(-1)
    slots = np.asarray(slot_of, np.int64)
    order = np.argsort(slots, kind="stable")
    plain = not (unknown >= 0).any() and np.array_equal(
        slots[order][slots[order] >= 0], np.arange(width))
    if plain:  # only the pairs that own a slot, in slot order
        keep = order[slots[order] >= 0]
        cols = [cols[i] for i in keep]
        cats = [cats[i] for i in keep]
    cats_a = np.asarray(cats, np.float64)[:, None]
    xt = e.op("Transpose", [x], perm=[1, 0])
    picked = e.op("Gather", [xt, e.const(np.asarray(cols, np.int64))], axis=0)
    match = e.op("Equal", [picked, e.const(cats_a)])
    if np.isnan(cats_a).any():  # NaN matches a NaN category
        nan_cat = e.const(np.isnan(cats_a))
        match = e.op("Or", [match, e.op("And", [e.op("IsNaN", [picked]), nan_cat])])
    if plain:
        return e.op("Cast", [e.op("Transpose", [match], perm=[1, 0])], to=TensorProto.DOUBLE)
    match = e.op("Cast", [match], to=TensorProto.DOUBLE)
    place = np.zeros((len(cats), width))
    for k, s in enumerate(slot_of):
        if s >= 0:
            place[k, s] = 1.0
    out = e.op("Gemm", [match, e.const(place)], transA=1)
    if (unknown >= 0).any():
        per_col = np.zeros((len(cats), len(a.columns)))
        per_col[np.arange(len(cats)), owner] = 1.0
        found = e.op("Gemm", [match, e.const(per_col)], transA=1)
        none = e.op("Cast", [e.op("Equal", [found, e.const(np.asarray(0.0))])], to=TensorProto.DOUBLE)
        spread = np.zeros((len(a.columns), width))
        for k, s in enumerate(unknown):
            if s >= 0:
                spread[k, s] = 1.0
        out = e.op("Add", [out, e.op("MatMul", [none, e.const(spread)])])
    return out


def one_hot_product(e: Emitter, hot: Any, x: str, block: np.ndarray) -> str | None:
    """``ONE_HOT(x) @ block`` without the indicators (a LINEAR's rows for them, lower_linear):
    each one-hot column's value picks one row of weights, its category's slot's row (zeros
    for a dropped category, the unknown slot's row, or zeros, when none matches), and the
    picked rows are summed. One Gather of all columns' rows from one table indexed by
    ``value - lowest category`` plus the column's offset, then ReduceSum: 1,000 indicator
    columns of 20 string columns were four passes over a (n, 1,000) double matrix (compare,
    cast, place, transpose) and a Gemm over it. Only where each column's categories are
    integers in a short range (codes of strings, small integer categories) and no two
    columns set one slot; otherwise None (the indicators and a Gemm, as before). The sum of
    the picked rows is the Gemm's sum less its zero products, in ReduceSum's order: the same
    few-ulp bound (docs/export.md, "One-hot columns into a linear model")."""
    plan = row_table(hot.attrs, block)
    if plan is None:
        return None
    cols, lows, spans, nan_rows, offsets = (plan.columns, plan.lows, plan.spans,
                                            plan.nan_rows, plan.offsets)
    table, w = plan.table, block.shape[1]
    axes = e.const(np.asarray([1], np.int64))
    by_column = _string_rows(e, x, cols, lows, spans, nan_rows, offsets)
    if by_column is not None:  # (m, n): the sum over columns adds whole rows
        picked = e.op("Gather", [e.const(table), by_column], axis=0)
        return e.op("ReduceSum", [picked, e.const(np.asarray([0], np.int64))], keepdims=0)
    index = _value_rows(e, _columns_of(e, x, cols), lows, spans, nan_rows, offsets)
    if w == 1:  # (n, m) picked values summed into (n, 1): a 3-d middle-axis sum is slower
        picked = e.op("Gather", [e.const(table.reshape(-1)), index], axis=0)
        return e.op("ReduceSum", [picked, axes], keepdims=1)
    picked = e.op("Gather", [e.const(table), index], axis=0)  # (n, m, w)
    return e.op("ReduceSum", [picked, axes], keepdims=0)


def _value_rows(e: Emitter, xs: str, lows: list, spans: list, nan_rows: list,
                offsets: np.ndarray) -> str:
    """The table row each value of ``xs`` (n, m) picks, int64."""
    if any(lows):
        xs = e.op("Sub", [xs, _row(e, lows)])
    span_row = _row(e, spans)
    # value - lo in [0, span) and whole picks its row; anything else (out of range, a
    # fraction, NaN: every comparison false) the no-match row
    whole = e.op("Equal", [e.op("Floor", [xs]), xs])
    inside = e.op("And", [e.op("GreaterOrEqual", [xs, e.const(np.asarray(0.0))]),
                          e.op("Less", [xs, span_row])])
    v = e.op("Where", [e.op("And", [inside, whole]), xs, span_row])
    if any(r > s for r, s in zip(nan_rows, spans)):
        v = e.op("Where", [e.op("IsNaN", [xs]), _row(e, nan_rows), v])
    return e.op("Add", [e.op("Cast", [v], to=TensorProto.INT64), _row(e, offsets, np.int64)])


def _string_rows(e: Emitter, x: str, cols: list[int], lows: list, spans: list,
                 nan_rows: list, offsets: np.ndarray) -> str | None:
    """The table rows (m, n), int64: where every column read is a string input's code (string_inputs=True), one
    LabelEncoder per column straight from its strings to the table row its code picks (the
    code's LabelEncoder, Cast and the matrix Concat are then unused and dropped); else None."""
    pieces = e.pieces.get(x)
    found = [e.string_codes.get(pieces[c][0]) for c in cols] if pieces else [None]
    if any(f is None for f in found):
        return None
    parts = []
    for (name, keys, codes), lo, span, nan_row, off in zip(found, lows, spans, nan_rows,
                                                           offsets.tolist()):
        rows = []
        for code in codes:
            at = code - lo
            rows.append(nan_row if code != code else
                        int(at) if 0 <= at < span and at == int(at) else span)
        # an unseen string is the NaN code, as in the code's own LabelEncoder
        parts.append(e.op("LabelEncoder", [name], domain="ai.onnx.ml", keys_strings=keys,
                          values_int64s=[off + r for r in rows], default_int64=off + nan_row))
    # (m, n): the columns stacked one after another (contiguous copies, where a Concat of
    # (n, 1) columns along axis 1 writes one element at a time)
    stacked = parts[0] if len(parts) == 1 else e.op("Concat", parts, axis=0)
    return e.op("Reshape", [stacked, e.const(np.asarray([len(parts), -1], np.int64))])


def _columns_of(e: Emitter, x: str, cols: list[int]) -> str:
    """Columns ``cols`` of ``x``: ``x`` itself, or read from the parts a matrix of string
    codes was Concat'ed from (``Emitter.pieces``: no Gather along axis 1, which ONNX Runtime
    copies one element at a time), or a Gather."""
    pieces = e.pieces.get(x)
    if pieces is None:
        if cols == list(range(e.widths.get(x) or -1)):
            return x
        return e.op("Gather", [x, e.const(np.asarray(cols, np.int64))], axis=1)
    runs: list[list[Any]] = []  # [tensor, start, stop]
    for t, k in (pieces[c] for c in cols):
        if runs and runs[-1][0] == t and runs[-1][2] == k:
            runs[-1][2] += 1
        else:
            runs.append([t, k, k + 1])
    out = [t if start == 0 and stop == e.widths.get(t) else e.columns(t, start, stop)
           for t, start, stop in runs]
    return out[0] if len(out) == 1 else e.op("Concat", out, axis=1)
