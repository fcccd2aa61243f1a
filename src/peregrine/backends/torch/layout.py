"""Forest -> the NumPy tables each tree strategy gathers from. Built once at compile time,
vectorised over nodes (no Python loop over trees), deterministic for a given Forest.

Every strategy evaluates the same per-node attributes (``NodeTables``) in its own node order:

- TreeTraversal: the Forest's own global node order; leaves loop back to themselves.
- PerfectTreeTraversal: per tree a 1-based heap of ``2**depth`` slots (children of ``k`` are
  ``2k`` and ``2k+1``); shallow leaves are pushed down to full depth by filling the slots below
  them with dummy nodes and replicating their value over every final slot they cover.
- GEMM: per tree its internal nodes padded to the widest tree, plus the path matrix (+1: leaf is
  in the node's left subtree, -1: right subtree) and the count of left turns per leaf.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peregrine.backends.torch.strategy import gemm_sizes
from peregrine.ir import Forest


@dataclass(frozen=True)
class NodeTables:
    """Per-node decision attributes, gathered from the Forest by a list of global node ids
    (-1 = padding/dummy: a numeric node on feature 0 whose decision is never used)."""

    feature: np.ndarray  # int64; 0 on leaves and dummies so gathers stay in bounds
    thr32: np.ndarray  # float32 thresholds_for(float32)
    thr64: np.ndarray  # float64 thresholds_for(float64)
    nan_left: np.ndarray  # bool
    missing_zero: np.ndarray  # bool (all False when the forest has none)
    cat_row: np.ndarray  # int64 row in the bitset table, -1 for numeric nodes


def node_tables(forest: Forest, src: np.ndarray) -> NodeTables:
    src = np.asarray(src, dtype=np.int64)
    real = src >= 0
    safe = np.where(real, src, 0)
    internal = real & (forest.feature[safe] >= 0)

    def pick(arr: np.ndarray, fill) -> np.ndarray:
        return np.where(internal, arr[safe], fill)

    mz = forest.missing_zero if forest.has_missing_zero else np.zeros(forest.n_nodes, bool)
    cat = forest.cat_index if forest.has_categorical else np.full(forest.n_nodes, -1)
    return NodeTables(
        feature=pick(forest.feature.astype(np.int64), 0),
        thr32=pick(forest.thresholds_for(np.float32), np.float32(0)).astype(np.float32),
        thr64=pick(forest.thresholds_for(np.float64), 0.0).astype(np.float64),
        nan_left=pick(forest.nan_left, False).astype(bool),
        missing_zero=pick(mz, False).astype(bool),
        cat_row=pick(np.asarray(cat, dtype=np.int64), -1).astype(np.int64),
    )


# -------------------------------------------------------------------------- traversal --
@dataclass(frozen=True)
class TraversalLayout:
    nodes: NodeTables  # global node order
    children: np.ndarray  # int64 [2 * n_nodes]: [2i] = left, [2i + 1] = right; leaves -> self
    roots: np.ndarray  # int64 [n_trees]
    leaf_node: np.ndarray  # int64 [n_nodes]: leaf-table row -> global node id (identity)
    depth: int


def traversal_layout(forest: Forest) -> TraversalLayout:
    ids = np.arange(forest.n_nodes, dtype=np.int64)
    leaf = forest.is_leaf
    left = np.where(leaf, ids, forest.left)
    right = np.where(leaf, ids, forest.right)
    return TraversalLayout(
        nodes=node_tables(forest, ids),
        children=np.stack([left, right], axis=1).reshape(-1).astype(np.int64),
        roots=forest.tree_offsets[:-1].astype(np.int64),
        leaf_node=ids,
        depth=forest.max_depth(),
    )


# ------------------------------------------------------------------ perfect traversal --
@dataclass(frozen=True)
class PerfectLayout:
    """Level-blocked: level l is a (n_trees, 2**l) block at offset n_trees * 2**l, so node k of
    tree t at level l sits at ``p = (n_trees + t) * 2**l + k``; its left child is ``2p + 1`` and
    its right child ``2p`` (local ``k' = 2k + go_left``). Final slot of a row: ``p - T * 2**D``
    after D steps, ``= t * 2**D + k``. Positions below ``n_trees`` are unused."""

    nodes: NodeTables  # [n_trees * 2**depth]
    leaf_node: np.ndarray  # int64 [n_trees * 2**depth]: final slot -> global leaf node id
    depth: int


def perfect_layout(forest: Forest) -> PerfectLayout:
    depth = forest.max_depth()
    T = forest.n_trees
    tree = forest.tree_of_node()
    node_depth = forest.node_depth
    k = np.zeros(forest.n_nodes, dtype=np.int64)  # position within its tree's level
    internal = np.flatnonzero(forest.feature >= 0)
    for d in range(depth):  # parents are placed before their children, level by level
        at = internal[node_depth[internal] == d]
        k[forest.left[at]] = 2 * k[at] + 1
        k[forest.right[at]] = 2 * k[at]
    src = np.full(T << depth, -1, dtype=np.int64)
    src[((T + tree[internal]) << node_depth[internal]) + k[internal]] = internal
    leaf_node = np.zeros(T << depth, dtype=np.int64)
    leaves = np.flatnonzero(forest.feature < 0)
    for d in np.unique(node_depth[leaves]):
        at = leaves[node_depth[leaves] == d]
        span = 1 << (depth - int(d))  # final slots below a leaf at depth d
        first = (tree[at] << depth) + k[at] * span
        leaf_node[(first[:, None] + np.arange(span)).reshape(-1)] = np.repeat(at, span)
    return PerfectLayout(nodes=node_tables(forest, src), leaf_node=leaf_node, depth=depth)


# ------------------------------------------------------------------------------- GEMM --
@dataclass(frozen=True)
class GemmLayout:
    nodes: NodeTables  # [n_trees * n_internal]: tree t's internal node i at t * n_internal + i
    path: np.ndarray  # float32 [n_trees, n_internal, n_leaves]: +1 left subtree, -1 right
    n_left: np.ndarray  # float32 [n_trees, n_leaves]: left turns on the path; -1 on padding
    leaf_node: np.ndarray  # int64 [n_trees * n_leaves]: leaf slot -> global node id
    n_internal: int
    n_leaves: int


def _rank_within_tree(ids: np.ndarray, tree: np.ndarray) -> np.ndarray:
    """Position of each id among the ids of its own tree (ids sorted, so trees are runs)."""
    t = tree[ids]
    return np.arange(len(ids)) - np.searchsorted(t, t, side="left")


def gemm_layout(forest: Forest) -> GemmLayout:
    n_int, n_leaf = gemm_sizes(forest)
    T = forest.n_trees
    tree = forest.tree_of_node()
    internal = np.flatnonzero(forest.feature >= 0)
    leaves = np.flatnonzero(forest.feature < 0)
    int_rank = np.zeros(forest.n_nodes, dtype=np.int64)
    int_rank[internal] = _rank_within_tree(internal, tree)
    leaf_rank = _rank_within_tree(leaves, tree)

    src = np.full(T * n_int, -1, dtype=np.int64)
    src[tree[internal] * n_int + int_rank[internal]] = internal
    leaf_node = np.zeros(T * n_leaf, dtype=np.int64)
    leaf_node[tree[leaves] * n_leaf + leaf_rank] = leaves

    parent = np.full(forest.n_nodes, -1, dtype=np.int64)
    parent[forest.left[internal]] = internal
    parent[forest.right[internal]] = internal
    path = np.zeros((T, n_int, n_leaf), dtype=np.float32)
    n_left = np.full((T, n_leaf), -1.0, dtype=np.float32)  # padding slots never match
    n_left[tree[leaves], leaf_rank] = 0.0
    # Walk every leaf up to its root at once; one step per level.
    cur, lrank = leaves.copy(), leaf_rank.copy()
    while len(cur):
        p = parent[cur]
        keep = p >= 0
        cur, lrank, p = cur[keep], lrank[keep], p[keep]
        went_left = forest.left[p] == cur
        path[tree[p], int_rank[p], lrank] = np.where(went_left, 1.0, -1.0)
        np.add.at(n_left, (tree[p], lrank), went_left.astype(np.float32))
        cur = p
    return GemmLayout(
        nodes=node_tables(forest, src), path=path, n_left=n_left, leaf_node=leaf_node,
        n_internal=n_int, n_leaves=n_leaf,
    )
