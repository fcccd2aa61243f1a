"""TREE_ENSEMBLE -> ``ai.onnx.ml`` TreeEnsemble (opset 5), in double.

Exactness (docs/export.md):
- Decisions: every split becomes ``x <= t'`` (BRANCH_LEQ) with ``t' = Forest.thresholds_for``
  of the precision the library compares in (``ir/semantics/trees.py: compute_dtype``). A
  library that compares in float32 (scikit-learn trees, XGBoost) gets its input rounded to
  float32 and back (Cast, exact) and float32 thresholds held in double: the same decision as
  the library's, for ``<`` and ``<=`` alike. NaN goes to ``nan_left`` through
  ``nodes_missing_value_tracks_true`` (the true branch is the left child).
- Sums: ONNX Runtime's TreeEnsemble (opset 5) sums in the thresholds' type, double here, and
  returns double (the opset-3 TreeEnsembleRegressor returns float32 and sums float thresholds
  in float32). The libraries that sum in float64 (scikit-learn, LightGBM) differ by
  reassociation only; XGBoost's float32 sum by the bound of docs/exactness.md (the torch
  backend's). The base score and an average's divisor are applied after, in double.
- Opset 5 gives each leaf one target: a forest whose leaves hold a vector (random forest
  classifiers) is written once per output column (COPIES), or, where ``plan_forests`` picks
  it, as one opset-3 TreeEnsembleRegressor whose leaves hold every column (VECTOR: one
  traversal instead of one per class, measured 2.2x faster on a two-class forest); that op
  sums in double but returns float32, so its values are the exact sums rounded once to
  float32, and an ARGMAX on them is repaired on the rows where that rounding made a tie
  (``exact_argmax``)
LightGBM zero-as-missing nodes (|x| <= kZeroThreshold goes where NaN goes) become NaN before
the TreeEnsemble, per feature, when every split on that feature is such a node (LightGBM's
``zero_as_missing=True`` models); a feature mixing both kinds is refused, as are categorical
splits (the torch and native backends run them)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from onnx import TensorProto, numpy_helper

from peregrine.export.onnx_graph import Emitter, lowering
from peregrine.export.onnx_traversal import fold_base, lower_traversal
from peregrine.export.onnx_vector_trees import (
    BINARY,
    VECTOR,
    divides_by_trees,
    lower_vector,
)
from peregrine.ir.forest import LIGHTGBM_ZERO_THRESHOLD, Aggregation, Forest
from peregrine.ir.ops import Op

BRANCH_LEQ = 0
BRANCH_MEMBER = 6
INVALID_CODE = -1.0  # what _categorical_codes makes of an invalid category
AGGREGATE_AVERAGE, AGGREGATE_SUM = 0, 1


def tree_ensemble_attrs(forest: Forest, thresholds: np.ndarray, per_tree: bool = False,
                        values: np.ndarray | None = None,
                        average: bool = False) -> dict[str, Any]:
    """The TreeEnsemble (ai.onnx.ml opset 5) attributes summing ``forest``'s leaves per output
    (no base score; ``average``: the sum divided by the tree count, single-value leaves
    only), comparing ``x <= thresholds``; ``per_tree`` (single-value leaves only): one
    output column per tree instead, holding the leaf value it reached. Splits and leaf
    weights take ``thresholds``' dtype (the input's: ONNX requires it); ``values`` replaces
    ``forest.value``."""
    value = forest.value if values is None else values
    wdt = thresholds.dtype
    internal = forest.feature >= 0
    leaf = ~internal
    n_int, n_leaf = int(internal.sum()), int(leaf.sum())
    branch_id = np.cumsum(internal) - 1  # valid where internal
    leaf_id = np.cumsum(leaf) - 1  # valid where leaf
    left, right = forest.left[internal], forest.right[internal]
    tree_of = forest.tree_of_node()
    roots = forest.tree_offsets[:-1]
    leaf_roots = roots[leaf[roots]]  # one-leaf trees get a branch whose children are the leaf
    n_dummy = len(leaf_roots)
    per_replica = n_int + n_dummy

    feat = np.concatenate([forest.feature[internal], np.zeros(n_dummy, np.int64)])
    split = np.concatenate([thresholds[internal], np.zeros(n_dummy, wdt)])
    missing = np.concatenate([forest.nan_left[internal], np.zeros(n_dummy, bool)])

    def child(side: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        is_leaf = leaf[side]
        ids = np.where(is_leaf, leaf_id[side], branch_id[side])
        dummy = leaf_id[leaf_roots]
        return (np.concatenate([ids, dummy]),
                np.concatenate([is_leaf, np.ones(n_dummy, bool)]).astype(np.int64))

    true_ids, true_leafs = child(left)
    false_ids, false_leafs = child(right)
    root_ids = np.where(leaf[roots], 0, branch_id[roots])
    root_ids[leaf[roots]] = n_int + np.arange(n_dummy)

    if per_tree:
        targets = [tree_of[leaf].astype(np.int64)]
        weights = [value[leaf, 0]]
    elif forest.value_width == 1:
        targets = [forest.tree_group[tree_of[leaf]].astype(np.int64)]
        weights = [value[leaf, 0]]
    else:  # one copy of the trees per output column
        targets = [np.full(n_leaf, k, np.int64) for k in range(forest.n_outputs)]
        weights = [value[leaf, k] for k in range(forest.n_outputs)]
    copies = len(targets)

    def tile(a: np.ndarray, step: int) -> list[int]:
        return np.concatenate([a + r * step for r in range(copies)]).astype(np.int64).tolist()

    modes = np.zeros(per_replica, np.uint8)
    extra: dict[str, Any] = {}
    if forest.has_categorical:  # BRANCH_MEMBER on the prepared codes (_categorical_codes)
        cat = forest.cat_index[internal]
        modes[:n_int][cat >= 0] = BRANCH_MEMBER
        sets: list[float] = []
        for c in cat[cat >= 0]:
            sets.extend(_members(forest, int(c)))
            sets.append(np.nan)
        extra["membership_values"] = numpy_helper.from_array(
            np.tile(np.asarray(sets, wdt), copies))
    return {
        **extra,
        "tree_roots": tile(root_ids, per_replica),
        "nodes_featureids": np.tile(feat, copies).astype(np.int64).tolist(),
        "nodes_splits": numpy_helper.from_array(np.tile(split, copies)),
        "nodes_modes": numpy_helper.from_array(np.tile(modes, copies)),
        "nodes_truenodeids": _ids(true_ids, true_leafs, per_replica, n_leaf, copies),
        "nodes_trueleafs": np.tile(true_leafs, copies).tolist(),
        "nodes_falsenodeids": _ids(false_ids, false_leafs, per_replica, n_leaf, copies),
        "nodes_falseleafs": np.tile(false_leafs, copies).tolist(),
        "nodes_missing_value_tracks_true": np.tile(missing, copies).astype(np.int64).tolist(),
        "leaf_targetids": np.concatenate(targets).tolist(),
        "leaf_weights": numpy_helper.from_array(np.concatenate(weights).astype(wdt)),
        "n_targets": forest.n_trees if per_tree else int(forest.n_outputs),
        "aggregate_function": AGGREGATE_AVERAGE if average else AGGREGATE_SUM,
    }


def _ids(ids: np.ndarray, is_leaf: np.ndarray, n_branch: int, n_leaf: int,
         copies: int) -> list[int]:
    """Child ids of every copy: leaf ids step by the leaves of a copy, branch ids by its
    branches."""
    step = np.where(is_leaf == 1, n_leaf, n_branch)
    return np.concatenate([ids + r * step for r in range(copies)]).astype(np.int64).tolist()


@lowering(Op.TREE_ENSEMBLE)
def lower_tree_ensemble(e: Emitter, n: Any, ins: list[str]) -> str:
    forest: Forest = n.attrs.forest
    if e.ml_ops == "never":  # standard ops only: the traversal (onnx_traversal.py)
        return _standard_ops(e, n, forest, ins[0])
    x = ins[0]
    if forest.has_missing_zero:
        x = _zero_as_missing(e, n, forest, x)
    # the input is float64; a library comparing in float32 sees float32(x) (compute_dtype)
    dt = np.dtype(np.float32) if forest.input_dtype == np.float32 else np.dtype(np.float64)
    thresholds = forest.thresholds_for(dt)
    float32_sums = (forest.sum_dtype == np.float32 and forest.value_width == 1
                    and forest.aggregation is Aggregation.SUM and forest.n_trees > 0)
    if dt == np.float32 and (float32_sums or forest.has_categorical):
        # a float32 input widened on entry is read as it came (the same values, one Cast less)
        width_in = e.widths.get(x)
        x = e.narrow.get(x) or e.op("Cast", [x], to=TensorProto.FLOAT)
        e.dtypes[x], e.widths[x] = TensorProto.FLOAT, width_in
        if forest.has_categorical:
            x = _categorical_codes(e, n, forest, x, np.float32)
            e.dtypes[x] = TensorProto.FLOAT
        if float32_sums:
            forest, thresholds, x = _without_missing_tracks(e, forest, thresholds, x)
            if e.exact_sums:
                return _float32_sum(e, forest, x, thresholds)
            return _float32_direct(e, forest, x, thresholds, _feeds_sigmoid32(e, n))
        x = e.op("Cast", [x], to=TensorProto.DOUBLE)  # exact: float32 values, double sums
    elif dt == np.float32:
        # double sums of float32 decisions: the double input against double thresholds that
        # decide as float32(x) against the float32 ones (float32_split_as_double), with no
        # Cast (and float32 data, widened on entry, is read widened: the same values)
        thresholds = float32_split_as_double(thresholds)
    elif forest.has_categorical:
        x = _categorical_codes(e, n, forest, x, np.float64)
    values, base_left = forest.value, forest.base_score
    if forest.sum_starts_at_base and forest.n_trees and np.any(base_left != 0):
        # the library's sum starts at the base score (sklearn's init, HistGradientBoosting's
        # baseline): base + leaf of each group's first tree is exactly its first step, and
        # ONNX Runtime then adds the trees in order (measured: bit-equal to scikit-learn's
        # GradientBoostingRegressor and LightGBM on 20,000 rows)
        values, base_left = fold_base(forest), np.zeros_like(base_left)
    thresholds = thresholds.astype(np.float64)
    if not forest.has_categorical:
        forest, thresholds, x = _without_missing_tracks(e, forest, thresholds, x)
    if e.tree_plan.get(n.name) == VECTOR:
        return lower_vector(e, forest, x, thresholds, values, base_left)
    if e.tree_plan.get(n.name) == BINARY:
        return lower_binary(e, forest, x, thresholds)
    # an average over every tree per output: ONNX Runtime's AVERAGE divides the double sum
    # by its tree count, the rule's division, in the op (one Div node less)
    average = forest.aggregation is Aggregation.AVERAGE and forest.value_width == 1 \
        and divides_by_trees(forest)
    attrs = tree_ensemble_attrs(forest, thresholds, values=values, average=average)
    out = e.op("TreeEnsemble", [x], domain="ai.onnx.ml", **attrs)
    if forest.aggregation is Aggregation.AVERAGE and not average:
        out = e.op("Div", [out, e.const(forest.output_divisor().reshape(1, -1))])
    if np.any(base_left != 0):
        out = e.op("Add", [out, e.const(base_left.reshape(1, -1))])
    return out


def _standard_ops(e: Emitter, n: Any, forest: Forest, x: str) -> str:
    """``ml_ops="never"``: the traversal (onnx_traversal.py) on a double input, thresholds
    deciding as the library's comparison in its precision, LightGBM's zero-as-missing
    columns as NaN and NaN-left nodes flipped onto negated columns (NaN then goes right
    everywhere; not for a forest with membership splits, which decides NaN per node)."""
    if e.dtypes.get(x, TensorProto.DOUBLE) != TensorProto.DOUBLE:
        x = e.op("Cast", [x], to=TensorProto.DOUBLE)  # exact: float32 values
    if forest.has_missing_zero:
        x = _zero_as_missing(e, n, forest, x)
    if forest.input_dtype == np.float32:
        thresholds = float32_split_as_double(forest.thresholds_for(np.float32))
    else:
        thresholds = forest.thresholds_for(np.float64).astype(np.float64)
    forest, thresholds, x = _without_missing_tracks(e, forest, thresholds, x)
    return lower_traversal(e, forest, x, thresholds)


def float32_split_as_double(t32: np.ndarray) -> np.ndarray:
    """Double thresholds T such that, for every double x, ``x <= T`` iff ``float32(x) <=
    t32`` (float32(x) rounding to nearest, ties to even, as NumPy's and the libraries'
    casts): float32(x) <= t32 iff x lies below the midpoint m between t32 and the next
    float32 u above it, or on m where the tie rounds to t32 (its significand even). m has
    at most 25 significant bits, so it is a double; past the largest float32 u is 2**128
    (x at m rounds to inf), below -inf's neighbour -inf stands for -2**128. t32 = +inf gives
    +inf and NaN stays NaN (no x <= NaN, as no float32(x) <= NaN). Measured: the input's
    Cast to float32 and back, two nodes, then goes (docs/export.md, "Speed")."""
    t32 = np.asarray(t32, np.float32)
    big = 2.0 ** 128
    with np.errstate(over="ignore", invalid="ignore"):
        up = np.nextafter(t32, np.float32(np.inf)).astype(np.float64)
        up = np.where(t32 == np.finfo(np.float32).max, big, up)
        lo = np.where(np.isneginf(t32), -big, t32.astype(np.float64))
        mid = (lo + up) / 2.0  # exact: both are float32 values (or +-2**128)
        even = (t32.view(np.uint32) & 1) == 0
        out = np.where(even, mid, np.nextafter(mid, -np.inf))
    out = np.where(np.isposinf(t32), np.inf, out)
    return np.where(np.isnan(t32), np.nan, out)


def _without_missing_tracks(e: Emitter, forest: Forest, thresholds: np.ndarray,
                            x: str) -> tuple[Forest, np.ndarray, str]:
    """``forest`` with no node sending NaN to its true branch, reading ``Concat(x, -x)``:
    a node whose NaN goes left (``x <= t`` true) becomes ``-x <= t'`` on the negated column
    with its children swapped, t' the largest value of the thresholds' type below -t
    (x > t iff -x < -t; negation is exact), so NaN, false in every comparison, takes the
    false branch, now the left child. t = +inf (always left) becomes t' = NaN (never true);
    t = NaN (non-missing x always right) t' = +inf. ONNX Runtime walks a forest with any
    ``nodes_missing_value_tracks_true`` node through a slower loop (an isnan test per
    node); measured on scikit-learn's RandomForestClassifier(100, depth 8), where the NaN
    direction is each node's larger child, 100K rows: 1.16x the speed with the two nodes
    (Neg, Concat) this adds (docs/export.md, "Speed"). Not for categorical forests (their
    membership splits have no negated form)."""
    internal = forest.feature >= 0
    flip = internal & forest.nan_left
    width = e.widths.get(x)  # x's columns (it may be wider than the forest reads)
    if not flip.any() or forest.has_categorical or not isinstance(width, int):
        return forest, thresholds, x
    t = np.asarray(thresholds)
    with np.errstate(invalid="ignore"):
        neg = np.nextafter(-t, t.dtype.type(-np.inf))
    neg = np.where(np.isposinf(t), np.nan, np.where(np.isnan(t), np.inf, neg)).astype(t.dtype)
    flipped = replace(
        forest,
        feature=np.where(flip, forest.feature + width, forest.feature).astype(
            forest.feature.dtype),
        left=np.where(flip, forest.right, forest.left).astype(forest.left.dtype),
        right=np.where(flip, forest.left, forest.right).astype(forest.right.dtype),
        nan_left=forest.nan_left & ~flip)
    both = e.op("Concat", [x, e.op("Neg", [x])], axis=1)
    e.dtypes[both] = e.dtypes.get(x, TensorProto.DOUBLE)
    e.widths[both] = 2 * width
    return flipped, np.where(flip, neg, t), both


def lower_binary(e: Emitter, forest: Forest, x: str, thresholds: np.ndarray) -> str:
    """A two-class random forest whose probabilities are only a method's result
    (``plan_forests``' BINARY): one double TreeEnsemble over class 1's leaf values, averaged
    in the op (the double sum divided by the tree count, as scikit-learn divides), and class
    0 as ``1 - p``. Every leaf's two values add up to 1 (``binary_eligible``), so class 0's
    average is 1 - p up to the sums' rounding: within (2n + 5) eps absolute for n trees
    (4.5e-14 at 100; measured 9e-16), not relative (a difference); class 1 within n eps.
    One class walks each tree once for one target: ONNX Runtime's one-target loop, measured
    1.15x the two-target opset-3 traversal at 100K rows (docs/export.md, "Speed"). Not where
    ARGMAX reads the values: ``1 - p`` against p does not order the classes as their sums
    do within those ulps (the VECTOR form's repair handles exact ties only)."""
    one = replace(forest, value=forest.value[:, 1:2].copy(), n_outputs=1,
                  base_score=np.zeros(1), tree_group=np.zeros(forest.n_trees, np.int32))
    p = e.op("TreeEnsemble", [x], domain="ai.onnx.ml",
             **tree_ensemble_attrs(one, thresholds, average=True))
    return e.op("Concat", [e.op("Sub", [e.const(np.asarray(1.0)), p]), p], axis=1)


def _float32_sum(e: Emitter, forest: Forest, x: str, thresholds: np.ndarray) -> str:
    """XGBoost's own sum, bit for bit: float32, from the base margin, tree by tree
    (``Forest.sum_dtype``). A float32 TreeEnsemble (the input rounded to float32 as XGBoost
    does; float32 thresholds and leaves, exact) returns each tree's leaf value in its own
    column; per output group a float32 CumSum over the group's trees adds them left to right
    (ONNX Runtime's CumSum is a running sum) and its last column is the library's total. The
    base margin is folded into each group's first tree: ``float32(base + leaf)`` is exactly
    the running sum's first step. Costs a (rows, trees) float32 intermediate."""
    value = fold_base(forest, np.float32)
    x32 = x if e.dtypes.get(x) == TensorProto.FLOAT else e.op("Cast", [x], to=TensorProto.FLOAT)
    leaves = e.op("TreeEnsemble", [x32], domain="ai.onnx.ml",
                  **tree_ensemble_attrs(forest, thresholds.astype(np.float32), per_tree=True,
                                        values=value))
    axis = e.const(np.asarray(1, np.int64))
    parts = []
    for g in range(forest.n_outputs):
        trees = np.flatnonzero(forest.tree_group == g).astype(np.int64)
        if not len(trees):  # no trees: the base margin alone
            zero = e.op("Mul", [e.columns(leaves, 0, 1), e.const(np.asarray(0, np.float32))])
            parts.append(e.op("Add", [zero, e.const(np.asarray(forest.base_score[g],
                                                                np.float32))]))
            continue
        cols = leaves
        if forest.n_outputs > 1:
            cols = e.op("Gather", [leaves, e.const(trees)], axis=1)
        running = e.op("CumSum", [cols, axis])
        parts.append(e.columns(running, len(trees) - 1, len(trees)))
    out = parts[0] if len(parts) == 1 else e.op("Concat", parts, axis=1)
    return e.op("Cast", [out], to=TensorProto.DOUBLE)


def _feeds_sigmoid32(e: Emitter, n: Any) -> bool:
    """Whether the forest's value is read only by XGBoost's float32 sigmoid in its float32
    form (onnx_ops._sigmoid32), which takes -v: the forest then sums negated leaves."""
    from peregrine.export.onnx_ops import _only_bounded_uses
    from peregrine.ir.ops import Link

    users = e.consumers.get(n.name, [])
    return bool(users) and n.name not in e.results and all(
        u.op is Op.LINK and u.attrs.kind is Link.SIGMOID and u.attrs.float32
        and float(u.attrs.scale) == 1.0 and _only_bounded_uses(e, u.name) for u in users)


def _float32_direct(e: Emitter, forest: Forest, x: str, thresholds: np.ndarray,
                    negate: bool = False) -> str:
    """XGBoost's float32 sum in one float32 TreeEnsemble: ONNX Runtime accumulates in the
    thresholds' type, tree by tree from the first, so with the base margin folded into each
    group's first tree this is the library's sum wherever ONNX Runtime walks a row's trees in
    order (one thread, or batches it splits by rows); where it splits one row's trees over
    threads (few rows, more than 80 trees, several intra-op threads) the partial sums are
    added in another order (float32 reassociation)."""
    value = fold_base(forest, np.float32)
    if negate:
        # -v for the float32 sigmoid's exp(-v) (a Neg node less): float32 rounding is
        # symmetric in sign, so every partial sum is the exact negation of the original's
        value = -value
    x32 = x if e.dtypes.get(x) == TensorProto.FLOAT else e.op("Cast", [x], to=TensorProto.FLOAT)
    out = e.op("TreeEnsemble", [x32], domain="ai.onnx.ml",
               **tree_ensemble_attrs(forest, thresholds.astype(np.float32), values=value))
    e.dtypes[out] = TensorProto.FLOAT
    wide = e.op("Cast", [out], to=TensorProto.DOUBLE)
    e.narrow[wide] = out  # the float32 sum, exactly: a float32 reader takes it as it is
    if negate:
        e.negated.add(wide)
    return wide


def _zero_as_missing(e: Emitter, n: Any, forest: Forest, x: str) -> str:
    """x with |x| <= LightGBM's kZeroThreshold replaced by NaN in the columns whose every
    split is a zero-as-missing node: there NaN and zero both take the default direction
    (``ir/semantics/trees.py: decide_left``), so the TreeEnsemble's NaN rule decides them."""
    internal = forest.feature >= 0
    width = int(forest.n_features)
    zero_cols = np.zeros((1, width), bool)
    for j in np.unique(forest.feature[internal]):
        kinds = forest.missing_zero[internal & (forest.feature == j)]
        if kinds.any() and not kinds.all():
            e.refuse(n, f"feature {int(j)} split both with and without LightGBM's "
                        "zero-as-missing rule (TREE_ENSEMBLE with mixed missing_zero)")
        zero_cols[0, int(j)] = bool(kinds.all())
    near_zero = e.op("LessOrEqual", [e.op("Abs", [x]),
                                     e.const(np.asarray(LIGHTGBM_ZERO_THRESHOLD))])
    if e.dtypes.get(x, TensorProto.DOUBLE) != TensorProto.DOUBLE:
        e.refuse(n, "zero-as-missing splits on a non-float64 input")
    # the forest reads columns [0, n_features) of its input, which may be wider
    cols = np.zeros((1, e.widths.get(x) or width), bool)
    cols[:, :width] = zero_cols
    mask = e.op("And", [near_zero, e.const(cols)])
    out = e.op("Where", [mask, e.const(np.asarray(np.nan)), x])
    e.widths[out] = e.widths.get(x)  # the negated columns sit after all of x's
    return out


def _members(forest: Forest, c: int) -> list[float]:
    """The codes categorical split ``c`` sends left (its bitset), plus INVALID_CODE when
    invalid categories go left."""
    words = forest.cat_bitsets[c]
    bits = [32 * w + b for w in range(len(words)) for b in range(32)
            if (int(words[w]) >> b) & 1]
    return [float(b) for b in bits] + ([INVALID_CODE] if forest.cat_unknown_left[c] else [])


def _categorical_codes(e: Emitter, n: Any, forest: Forest, x: str, dtype: type) -> str:
    """The Forest's category rule (``ir/semantics/trees.py: decide_left``) as a column
    rewrite before BRANCH_MEMBER, which tests exact membership: in every column whose splits
    are all categorical, x becomes trunc(x), or INVALID_CODE where the category is invalid
    (negative before or after truncation, as the library does, or >= 32 * words; +-inf too);
    NaN stays NaN (the node's missing direction). Columns mixing categorical and numeric
    splits are refused."""
    internal = forest.feature >= 0
    width = e.widths.get(x) or forest.n_features
    cols = np.zeros((1, width), bool)
    for j in np.unique(forest.feature[internal]):
        kinds = forest.cat_index[internal & (forest.feature == j)] >= 0
        if kinds.any() and not kinds.all():
            e.refuse(n, f"feature {int(j)} split both as a category and as a number")
        cols[0, int(j)] = bool(kinds.all())

    def k(v: float) -> str:
        return e.const(np.asarray(v, dtype))

    neg = e.op("Less", [x, k(0.0)])
    trunc = e.op("Where", [neg, e.op("Ceil", [x]), e.op("Floor", [x])])
    below = neg if forest.cat_negative_before_trunc else e.op("Less", [trunc, k(0.0)])
    inside = e.op("Less", [trunc, k(float(forest.n_cat_bits))])  # False for NaN and +inf
    invalid = e.op("Or", [below, e.op("Not", [inside])])
    code = e.op("Where", [invalid, k(INVALID_CODE), trunc])
    code = e.op("Where", [e.op("IsNaN", [x]), k(np.nan), code])
    return e.op("Where", [e.const(cols), code, x])
