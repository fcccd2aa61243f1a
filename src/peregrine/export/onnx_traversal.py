"""A tree ensemble in standard ONNX ops only (``export_onnx(ml_ops="never")``): for runtimes
without the ``ai.onnx.ml`` domain (TensorRT, some mobile and web runtimes). Hummingbird's
TreeTraversal, unrolled to the deepest tree's depth:

- every tree's current node, ``(rows, trees)`` int64, starts at its root; per level one
  Gather each of the nodes' feature and threshold, one GatherElements of the row's value of
  that feature, ``x <= t'`` (``Forest.thresholds_for``: the library's ``<`` or ``<=`` in its
  own precision, as the TreeEnsemble form: a library comparing in float32 gets double
  thresholds that decide as ``float32(x) <= t32``, ``onnx_trees.float32_split_as_double``),
  and one Gather of the child taken. NaN goes to the false branch everywhere: NaN-left nodes
  read negated columns with their children swapped (``onnx_trees._without_missing_tracks``).
  A leaf is its own child, so rows that reached one stay there;
- the leaves' values are gathered, ``(rows, trees)`` or ``(rows, trees, width)``, and summed
  tree by tree per output by a CumSum (a running sum, the libraries' order; XGBoost's in
  float32 from the base margin, folded into each output's first tree as in
  ``onnx_trees._float32_sum``), then divided where the forest averages.

LightGBM's zero-as-missing columns become NaN first (``onnx_trees._zero_as_missing``);
categorical (membership) splits are decided from a per-node table of codes (``_Categories``).
``onnx_trees._standard_ops`` prepares the input and thresholds."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from peregrine.export.onnx_graph import Emitter
from peregrine.ir.forest import Aggregation, Forest


def lower_traversal(e: Emitter, forest: Forest, x: str, thresholds: np.ndarray) -> str:
    """The forest's aggregated value (double) in standard ops, from ``x`` (double) and
    thresholds ``x <= t'`` decides with; no node may send NaN left (``onnx_trees.
    _standard_ops`` prepares both)."""
    if forest.n_trees == 0:
        zero = e.op("Mul", [e.columns(x, 0, 1), e.const(np.zeros((1, 1)))])
        return e.op("Add", [zero, e.const(forest.base_score.reshape(1, -1))])
    return _sum_leaves(e, forest, _walk(e, forest, x, thresholds))


def fold_base(forest: Forest, dtype: type = np.float64) -> np.ndarray:
    """Leaf values with each output's base score added (in ``dtype``) to the leaves of the
    first tree that feeds that output."""
    value = forest.value.astype(dtype).copy()
    tree_of = forest.tree_of_node()
    leaf = forest.feature < 0
    if forest.value_width == 1:
        for g in range(forest.n_outputs):
            trees = np.flatnonzero(forest.tree_group == g)
            if len(trees):
                first = leaf & (tree_of == trees[0])
                value[first, 0] = dtype(forest.base_score[g]) + value[first, 0]
    else:
        first = leaf & (tree_of == 0)
        value[first] = forest.base_score.astype(dtype)[None, :] + value[first]
    return value


def _walk(e: Emitter, forest: Forest, x: str, thresholds: np.ndarray) -> str:
    """Each row's leaf in each tree, (rows, trees) int64 global node indices. The state is
    twice the node index: entry ``2k`` and ``2k + 1`` of the feature and threshold tables
    are node k's, and ``children[2k + (x > t)]`` is twice the child taken, so one Gather
    moves every row down a level. NaN takes the false branch of every node (the forest's
    NaN-left nodes were flipped onto negated columns), except in a forest with membership
    splits, which decides NaN and those splits explicitly (``_Categories``)."""
    leaf = forest.feature < 0
    own = np.arange(forest.n_nodes, dtype=np.int64)
    feature = np.repeat(np.where(leaf, 0, forest.feature).astype(np.int64), 2)
    threshold = np.repeat(np.where(leaf, 0.0, thresholds), 2)
    children = np.empty(2 * forest.n_nodes, np.int64)
    children[0::2] = 2 * np.where(leaf, own, forest.left)  # x <= t (a leaf: itself)
    children[1::2] = 2 * np.where(leaf, own, forest.right)  # otherwise, NaN too
    roots = 2 * np.asarray(forest.tree_offsets[:-1], np.int64).reshape(1, -1)
    rows = e.op("Slice", [e.op("Shape", [x]), e.const(np.asarray([0], np.int64)),
                          e.const(np.asarray([1], np.int64))])
    shape = e.op("Concat", [rows, e.const(np.asarray([forest.n_trees], np.int64))], axis=0)
    at = e.op("Expand", [e.const(roots), shape])
    feature_c, threshold_c, children_c = (e.const(feature), e.const(threshold),
                                          e.const(children))
    cats = _Categories(e, forest) if forest.has_categorical else None
    for _ in range(forest.max_depth()):
        value = e.op("GatherElements", [x, e.op("Gather", [feature_c, at], axis=0)], axis=1)
        left = e.op("LessOrEqual", [value, e.op("Gather", [threshold_c, at], axis=0)])
        if cats is not None:
            left = cats.decide(e, at, value, left)
        step = e.op("Cast", [e.op("Not", [left])], to=TensorProto.INT64)
        at = e.op("Gather", [children_c, e.op("Add", [at, step])], axis=0)
    return e.op("Div", [at, e.const(np.asarray(2, np.int64))])


class _Categories:
    """Membership splits (``ir/semantics/trees.decide_left``), for a forest whose NaN-left
    nodes could not be flipped (membership has no negated form): NaN takes the node's
    default direction; at a categorical node the value, rounded to float32 first where the
    library compares in float32, truncated, is a code, invalid when negative (before or after
    truncation, as the library), at or past the bitset's bits, or infinite; a valid code's
    bit in the node's bitset says left, an invalid one the node's unknown direction. Tables
    are indexed by twice the node, as the walk's."""

    def __init__(self, e: Emitter, forest: Forest) -> None:
        bits = forest.n_cat_bits
        rows = forest.cat_bitsets.shape[0]
        member = np.zeros((rows, bits + 1), bool)  # code -> left; column ``bits``: invalid
        for r in range(rows):
            words = forest.cat_bitsets[r].astype(np.uint64)
            shift = (np.arange(bits) % 32).astype(np.uint64)
            member[r, :bits] = ((words[np.arange(bits) // 32] >> shift) & np.uint64(1)
                                ).astype(bool)
            member[r, bits] = bool(forest.cat_unknown_left[r])
        cat = np.where(forest.feature >= 0, forest.cat_index, -1)
        self.bits = bits
        self.float32 = forest.input_dtype == np.float32
        self.negative_first = bool(forest.cat_negative_before_trunc)
        self.member = e.const(member.reshape(-1))
        self.is_cat = e.const(np.repeat(cat >= 0, 2))
        self.row = e.const(np.repeat(np.maximum(cat, 0).astype(np.int64) * (bits + 1), 2))
        self.nan_left = e.const(np.repeat(forest.nan_left & (forest.feature >= 0), 2))

    def decide(self, e: Emitter, at: str, value: str, left: str) -> str:
        v = value
        if self.float32:  # the library truncates float32(x)
            v = e.op("Cast", [e.op("Cast", [v], to=TensorProto.FLOAT)], to=TensorProto.DOUBLE)
        zero = e.const(np.asarray(0.0))
        negative = e.op("Less", [v, zero])
        trunc = e.op("Where", [negative, e.op("Ceil", [v]), e.op("Floor", [v])])
        if not self.negative_first:
            negative = e.op("Less", [trunc, zero])
        bits = e.const(np.asarray(float(self.bits)))
        # NaN and +inf fail ``trunc < bits``: invalid (NaN is decided below anyway)
        invalid = e.op("Or", [negative, e.op("Not", [e.op("Less", [trunc, bits])])])
        code = e.op("Cast", [e.op("Where", [invalid, bits, trunc])], to=TensorProto.INT64)
        index = e.op("Add", [e.op("Gather", [self.row, at], axis=0), code])
        member = e.op("Gather", [self.member, index], axis=0)
        # (ONNX Runtime has no Where on bool: the choices as And / Or)
        left = _pick(e, e.op("Gather", [self.is_cat, at], axis=0), member, left)
        return _pick(e, e.op("IsNaN", [value]), e.op("Gather", [self.nan_left, at], axis=0),
                     left)


def _pick(e: Emitter, cond: str, a: str, b: str) -> str:
    """``cond ? a : b`` on bools."""
    return e.op("Or", [e.op("And", [cond, a]), e.op("And", [e.op("Not", [cond]), b])])


def _sum_leaves(e: Emitter, forest: Forest, at: str) -> str:
    """The leaves' values summed tree by tree (CumSum: the libraries' order), per output."""
    f32 = forest.sum_dtype == np.float32 and forest.value_width == 1 \
        and forest.aggregation is Aggregation.SUM
    dtype = np.float32 if f32 else np.float64
    base_first = forest.sum_starts_at_base and np.any(forest.base_score != 0)
    value = fold_base(forest, dtype) if base_first else forest.value.astype(dtype)
    axis = e.const(np.asarray(1, np.int64))
    if forest.value_width == 1:
        leaves = e.op("Gather", [e.const(value[:, 0]), at], axis=0)  # (rows, trees)
        parts = []
        for g in range(forest.n_outputs):
            trees = np.flatnonzero(forest.tree_group == g).astype(np.int64)
            if not len(trees):  # no trees: the base score alone
                zero = e.op("Mul", [e.columns(leaves, 0, 1), e.const(np.zeros(1, dtype))])
                parts.append(e.op("Add", [zero, e.const(
                    np.asarray([forest.base_score[g]], dtype))]))
                continue
            cols = leaves if forest.n_outputs == 1 else e.op(
                "Gather", [leaves, e.const(trees)], axis=1)
            running = e.op("CumSum", [cols, axis])
            parts.append(e.columns(running, len(trees) - 1, len(trees)))
        out = parts[0] if len(parts) == 1 else e.op("Concat", parts, axis=1)
    else:
        leaves = e.op("Gather", [e.const(value), at], axis=0)  # (rows, trees, width)
        last = e.op("Slice", [e.op("CumSum", [leaves, axis]),
                              e.const(np.asarray([forest.n_trees - 1], np.int64)),
                              e.const(np.asarray([forest.n_trees], np.int64)),
                              e.const(np.asarray([1], np.int64))])
        out = e.op("Reshape", [last, e.const(np.asarray([-1, forest.value_width], np.int64))])
    if f32:
        out = e.op("Cast", [out], to=TensorProto.DOUBLE)
    if forest.aggregation is Aggregation.AVERAGE:
        out = e.op("Div", [out, e.const(forest.output_divisor().reshape(1, -1))])
    if not base_first and np.any(forest.base_score != 0):
        out = e.op("Add", [out, e.const(forest.base_score.reshape(1, -1))])
    return out
