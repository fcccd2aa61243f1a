"""Forests whose leaves hold a vector (random forest classifiers, multi-output trees) in one
traversal: ``ai.onnx.ml`` TreeEnsembleRegressor (opset 3), whose leaves may vote for several
targets. ai.onnx.ml opset 5's TreeEnsemble holds one target per leaf, so there such a forest is
walked once per output column (``onnx_trees``, COPIES); measured on scikit-learn's
RandomForestClassifier(100, depth 8), two classes, 100K rows, ONNX Runtime 1.32 on 2 threads:
copies 0.53-0.64 s, one opset-3 traversal 0.25 s (skl2onnx's conversion: 0.24 s).

The opset-3 op sums in double (the thresholds and weights are ``*_as_tensor`` doubles: ONNX
Runtime accumulates in the thresholds' type) and returns float32 (the op's schema), so each
value is the library's double sum rounded once to float32 (half an ulp: 3e-8 relative; the
export validates at 1e-5). Rounding is monotonic, so it cannot reorder two classes, only tie
them: an ARGMAX on the rounded values is exact except on rows where the top values became
equal, and those rows are recomputed exactly (``exact_rows``: each tree's leaf id from a
per-tree traversal, the leaf vectors gathered from a double table and added tree by tree with
CumSum, the library's order). A model mixes opsets 3 and 5 of ``ai.onnx.ml`` in no file
(TreeEnsembleRegressor is deprecated in 5), so ``plan_forests`` takes VECTOR only where every
forest of the program qualifies and its values reach only ARGMAX, a log or an output: a
rounded probability must decide nothing else (a stacked tree's split could flip)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, numpy_helper

from peregrine.export.onnx_graph import Emitter
from peregrine.ir.forest import Forest
from peregrine.ir.ops import Op

COPIES, VECTOR, PER_TREE_SUM, BINARY = "copies", "vector", "per-tree-sum", "binary"
# the repair sends leaf ids through the op's float32 output: exact integers below 2**24
MAX_LEAVES = 1 << 24
# consumers of a VECTOR forest's values (besides being a method's output): ARGMAX is repaired,
# a log keeps the 1e-5 relative bound
SAFE_CONSUMERS = {Op.ARGMAX}
SAFE_UFUNCS = {"log"}


def vector_eligible(forest: Forest) -> bool:
    return (forest.value_width > 1 and forest.n_trees > 0
            and np.dtype(forest.sum_dtype) == np.float64 and not forest.has_categorical
            and int((forest.feature < 0).sum()) < MAX_LEAVES)


def binary_eligible(forest: Forest) -> bool:
    """A two-class average whose every leaf's probabilities add up to 1 (a random forest or
    extra-trees classifier): class 0's average is then 1 minus class 1's, up to the rounding
    of the sums (BINARY, ``onnx_trees.lower_binary``)."""
    if not (forest.value_width == 2 and forest.n_outputs == 2 and divides_by_trees(forest)
            and np.dtype(forest.sum_dtype) == np.float64 and not forest.has_categorical
            and not np.any(forest.base_score != 0)):
        return False
    leaves = forest.value[forest.feature < 0]
    return bool(np.all(np.abs(leaves[:, 0] + leaves[:, 1] - 1.0) <= 4 * np.finfo(float).eps))


def plan_forests(steps: list[Any]) -> tuple[dict[str, str], int]:
    """How each TREE_ENSEMBLE of the exported ``steps`` is written, and the ai.onnx.ml opset:
    BINARY (opset 5) where every forest is a two-class average whose value is only a method
    result (``predict_proba`` alone), VECTOR (opset 3) where every forest qualifies for it,
    else opset 5 for all."""
    forests = [n for n in steps if n.op is Op.TREE_ENSEMBLE]
    consumers: dict[str, list[Any]] = {}
    for n in steps:
        for i in n.inputs:
            consumers.setdefault(i, []).append(n)
    if forests and all(binary_eligible(n.attrs.forest) and not consumers.get(n.name)
                       for n in forests):
        return {n.name: BINARY for n in forests}, 5

    def safe(n: Any) -> bool:
        return all(c.op in SAFE_CONSUMERS
                   or (c.op is Op.UFUNC and c.attrs.name in SAFE_UFUNCS)
                   for c in consumers.get(n.name, []))

    if forests and all(vector_eligible(n.attrs.forest) and safe(n) for n in forests):
        return {n.name: VECTOR for n in forests}, 3
    return {}, 5


def divides_by_trees(forest: Forest) -> bool:
    """Whether ``forest`` averages every output over all its trees (a random forest), which
    the tree ops' AVERAGE does: ONNX Runtime divides each double sum by its tree count."""
    from peregrine.ir.forest import Aggregation

    return (forest.aggregation is Aggregation.AVERAGE and forest.n_trees > 0
            and bool(np.all(forest.output_divisor() == float(forest.n_trees))))


def regressor_attrs(forest: Forest, thresholds: np.ndarray, weights: np.ndarray,
                    targets: np.ndarray, n_targets: int,
                    average: bool = False) -> dict[str, Any]:
    """TreeEnsembleRegressor (opset 3) attributes: every split ``x <= thresholds`` (double),
    NaN to the node's default side; leaf ``l`` (in node order) votes ``weights[k]`` for target
    ``targets[k]`` for each k whose entry belongs to it (``weights`` is [leaves, width]);
    ``average``: each sum divided by the tree count (in double, before the float32 output)."""
    internal = forest.feature >= 0
    tree_of = forest.tree_of_node()
    local = np.arange(forest.n_nodes) - forest.tree_offsets[tree_of]
    leaves = np.flatnonzero(~internal)
    w = np.asarray(weights, np.float64).reshape(len(leaves), -1)
    t = np.asarray(targets, np.int64).reshape(len(leaves), -1)
    # x + 0.0 == x: a zero vote changes no sum's bits, so it is left out (fewer adds)
    r, c = np.nonzero(w != 0)
    return {
        "nodes_treeids": tree_of.tolist(),
        "nodes_nodeids": local.tolist(),
        "nodes_featureids": np.where(internal, forest.feature, 0).tolist(),
        "nodes_modes": ["BRANCH_LEQ" if i else "LEAF" for i in internal],
        "nodes_values_as_tensor": numpy_helper.from_array(
            np.where(internal, thresholds, 0.0).astype(np.float64)),
        "nodes_truenodeids": np.where(internal, forest.left - forest.tree_offsets[tree_of],
                                      0).tolist(),
        "nodes_falsenodeids": np.where(internal, forest.right - forest.tree_offsets[tree_of],
                                       0).tolist(),
        "nodes_missing_value_tracks_true": (forest.nan_left & internal).astype(np.int64).tolist(),
        "target_treeids": tree_of[leaves][r].tolist(),
        "target_nodeids": local[leaves][r].tolist(),
        "target_ids": t[r, c].tolist(),
        "target_weights_as_tensor": numpy_helper.from_array(w[r, c]),
        "n_targets": int(n_targets),
        "aggregate_function": "AVERAGE" if average else "SUM",
    }


def lower_vector(e: Emitter, forest: Forest, x: str, thresholds: np.ndarray,
                 values: np.ndarray, base_left: np.ndarray) -> str:
    """One traversal summing every column (float32 out, widened), then the average's divisor
    and the base score in double, as the COPIES lowering applies them; ``exact_rows`` is
    registered for an ARGMAX to repair rounding ties."""
    leaf = forest.feature < 0
    width = forest.n_outputs
    cols = np.tile(np.arange(width), (int(leaf.sum()), 1))
    # a random forest's average in the op: the double sum divided, then rounded once to
    # float32 (monotonic, so ties stay ties for the repair), and no Div node after it
    average = divides_by_trees(forest)
    y = e.op("TreeEnsembleRegressor", [x], domain="ai.onnx.ml",
             **regressor_attrs(forest, thresholds, values[leaf], cols, width, average))
    out = _finish(e, forest, e.op("Cast", [y], to=TensorProto.DOUBLE), base_left, average)

    def exact_rows(e: Emitter, rows: str) -> str:
        return _finish(e, forest, _exact_sums(e, forest, x, rows, thresholds, values[leaf]),
                       base_left)

    e.exact_values[out] = exact_rows
    return out


def _finish(e: Emitter, forest: Forest, s: str, base_left: np.ndarray,
            averaged: bool = False) -> str:
    from peregrine.ir.forest import Aggregation

    if forest.aggregation is Aggregation.AVERAGE and not averaged:
        s = e.op("Div", [s, e.const(forest.output_divisor().reshape(1, -1))])
    if np.any(base_left != 0):
        s = e.op("Add", [s, e.const(np.asarray(base_left, np.float64).reshape(1, -1))])
    return s


def _exact_sums(e: Emitter, forest: Forest, x: str, rows: str, thresholds: np.ndarray,
                leaf_values: np.ndarray) -> str:
    """The double sums of ``rows`` of ``x``, tree by tree in the library's order: a per-tree
    traversal returns each tree's leaf number (exact in float32 below 2**24), a Gather reads
    the leaf vectors from a double table, CumSum adds them left to right (ONNX Runtime's
    CumSum is a running sum; the first step 0 + v is v) and its last step is the total."""
    leaf = forest.feature < 0
    n_leaves = int(leaf.sum())
    tree_of = forest.tree_of_node()[leaf]
    xs = e.op("Gather", [x, rows], axis=0)
    ids = e.op("TreeEnsembleRegressor", [xs], domain="ai.onnx.ml",
               **regressor_attrs(forest, thresholds,
                                 np.arange(n_leaves, dtype=np.float64), tree_of, forest.n_trees))
    # leaf 0 votes 0.0, left out as a zero vote: its tree's column stays 0, its number
    ids = e.op("Cast", [ids], to=TensorProto.INT64)
    picked = e.op("Gather", [e.const(np.asarray(leaf_values, np.float64)), ids], axis=0)
    running = e.op("CumSum", [picked, e.const(np.asarray(1, np.int64))])
    return e.op("Gather", [running, e.const(np.asarray(forest.n_trees - 1, np.int64))], axis=1)


def repaired_argmax(e: Emitter, x: str, exact_rows: Any) -> str:
    """ArgMax over rounded values, recomputed exactly on the rows where the top value is
    shared (only there can rounding have changed the first maximum); an If skips the repair
    when no row ties, so untied batches pay the check only. TopK's two largest per row give
    both: its first index is the first maximum (equal values come out lower index first, as
    np.argmax picks), and the gap v0 - v1, one subtraction (a MatMul against [1, -1]: exact
    products, one rounding), is 0 exactly where the two are equal (a difference of distinct
    doubles never rounds to 0). Six nodes before the If where ArgMax and a count of the
    maxima took nine (about half a microsecond each at one row)."""
    from onnx import helper

    vals, idx = e.fresh("topk_values"), e.fresh("topk_indices")
    e.nodes.append(helper.make_node("TopK", [x, e.const(np.asarray([2], np.int64))],
                                    [vals, idx], name=vals, axis=1, largest=1, sorted=1))
    am = e.columns(idx, 0, 1)
    gap = e.op("MatMul", [vals, e.const(np.asarray([[1.0], [-1.0]]))])
    zero = e.const(np.asarray(0.0))
    any_tied = e.op("Equal", [e.op("ReduceMin", [gap], keepdims=0), zero])

    def repair() -> str:
        tied = e.op("Equal", [gap, zero])
        flat = e.op("Reshape", [tied, e.const(np.asarray([-1], np.int64))])
        rows = e.op("Reshape", [e.op("NonZero", [flat]), e.const(np.asarray([-1], np.int64))])
        fixed = e.op("ArgMax", [exact_rows(e, rows)], axis=1, keepdims=1)
        where = e.op("Reshape", [rows, e.const(np.asarray([-1, 1], np.int64))])
        return e.op("ScatterND", [am, where, fixed])

    then = e.subgraph(repair, TensorProto.INT64)
    keep = e.subgraph(lambda: e.op("Identity", [am]), TensorProto.INT64)
    return e.op("If", [any_tied], then_branch=then, else_branch=keep)
