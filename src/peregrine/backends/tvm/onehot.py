"""A linear model reading one-hot indicators, lowered without them (the TVM form of the native
row kernel's step, ``kernels/rowwise_onehot.py``; ONE_HOT alone makes the indicators by
comparisons, ``ops_columns.py``).

``LINEAR(ONE_HOT(x))`` or ``LINEAR(CONCAT(one-hot and dense blocks))``: each one-hot column's
value indexes a table of weight rows (``rowwise_onehot.RowTable``: integer categories in a
short range, string codes among them), one ``take`` for all columns; the picked rows are added
column by column from 0.0, then ``x_j * W[j]`` for each dense column, then the intercept:
scikit-learn's order on the ColumnTransformer's sparse matrix (``csr_matvec``), as the native
kernel and the torch module sum, so the answers keep those bits."""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import relax
from tvm.relax import op as R

from peregrine.backends.tvm.ops import const, f64
from peregrine.ir import Graph, Node, Op
from peregrine.kernels import rowwise_onehot

MAX_SEQUENTIAL = 256  # dense columns added one by one; a wider block is one product


def plan(graph: Graph, order: list[Node], wanted: set[str],
         f32: dict[str, bool]) -> tuple[dict[str, list], set[str]]:
    """(LINEAR name -> its blocks, the ONE_HOT and CONCAT nodes they absorb): the row
    kernel's choice (``rowwise_onehot.absorbed``), kept where every one-hot block has a
    RowTable."""
    linears, _ = rowwise_onehot.absorbed(order, wanted, rowwise_onehot.value_readers(graph),
                                         graph.by_name, f32)
    kept: dict[str, list] = {}
    taken: set[str] = set()
    for name, parts in linears.items():
        if any(p.op is Op.ONE_HOT and _table(graph.node(name), parts, p) is None
               for p in parts):
            continue
        kept[name] = parts
        src = graph.node(graph.node(name).inputs[0])
        taken.update(p.name for p in parts if p.op is Op.ONE_HOT)
        if src.op is Op.CONCAT:
            taken.add(src.name)
    return kept, taken


def _blocks(node: Node, parts: list) -> list[np.ndarray]:
    weight = np.asarray(node.attrs.weight, np.float64)
    bounds = np.cumsum([0] + [int(p.width) for p in parts])
    return [weight[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _table(node: Node, parts: list, part: Node) -> rowwise_onehot.RowTable | None:
    return rowwise_onehot.row_table(part.attrs, _blocks(node, parts)[parts.index(part)])


def lower(node: Node, parts: list, values: dict[str, Any]) -> relax.Expr:
    """The LINEAR's value from its blocks' inputs (``values``: node name -> Relax value)."""
    w = int(node.width)
    acc: relax.Expr = const(np.zeros((1, w)))
    for part, block in zip(parts, _blocks(node, parts)):
        if part.op is Op.ONE_HOT:
            t = rowwise_onehot.row_table(part.attrs, block)
            assert t is not None  # plan() checked
            acc = _picked(acc, f64(values[part.inputs[0]]), t)
            continue
        x = f64(values[part.name])
        if block.shape[0] > MAX_SEQUENTIAL:
            acc = R.add(acc, R.matmul(x, const(block)))
            continue
        for j in range(block.shape[0]):
            xj = R.strided_slice(x, axes=[1], begin=[j], end=[j + 1])
            acc = R.add(acc, R.multiply(xj, const(block[j:j + 1])))
    bias = np.broadcast_to(np.asarray(node.attrs.bias, np.float64), (w,)).reshape(1, w)
    return R.add(acc, const(bias))


def _picked(acc: relax.Expr, x: relax.Expr, t: rowwise_onehot.RowTable) -> relax.Expr:
    """``acc`` plus each column's picked row, column by column."""
    m = len(t.columns)
    xs = R.take(x, const(np.asarray(t.columns, np.int64), "int64"), axis=1)  # (n, m)
    v = R.subtract(xs, const(np.asarray(t.lows).reshape(1, m)))
    span = const(np.asarray(t.spans, np.float64).reshape(1, m))
    # value - lo in [0, span) and whole picks its row; anything else (out of range, a
    # fraction, NaN: every comparison false) the no-match row
    inside = R.logical_and(R.logical_and(R.greater_equal(v, const(0.0)), R.less(v, span)),
                           R.equal(R.floor(v), v))
    row = R.where(inside, v, span)
    if any(r > s for r, s in zip(t.nan_rows, t.spans)):
        row = R.where(R.isnan(xs), const(np.asarray(t.nan_rows, np.float64).reshape(1, m)),
                      row)
    index = R.add(R.astype(row, "int64"), const(t.offsets.reshape(1, m), "int64"))
    # (n, m, w); "clip": indices are in range by construction, but never a wild read
    picked = R.take(const(t.table), index, axis=0, mode="clip")
    for k in range(m):
        term = R.squeeze(R.strided_slice(picked, axes=[1], begin=[k], end=[k + 1]), axis=[1])
        acc = R.add(acc, term)
    return acc
