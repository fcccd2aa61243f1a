"""Model-level layout: pack a Forest into the flat arrays the generated kernels read.

The kernels are generic over the model: they are specialised only by shape parameters (layout,
depth, dtypes, output width, feature flags), so a new model of the same shape costs only this
packing. Every array is built with whole-forest NumPy operations (no per-node Python loop).

Per node (one slot): a feature word (int32; low 29 bits the feature, then flag bits below) and a
threshold in the comparison dtype (and, for float32 compares, both in one int64 word), already rounded by ``Forest.thresholds_for`` so that the one
rule ``x <= t`` is exact. Categorical nodes keep their bitset row in the threshold's bits.

* PERFECT: tree t occupies slots ``[t * (2**D - 1), (t+1) * (2**D - 1))`` in level order; the
  children of slot i are 2i+1 and 2i+2, so no child array is read. Tree t's leaves start at
  ``t << D``. A leaf above depth D becomes
  a dummy split whose whole subtree of leaf slots repeats its value, so the direction the dummy
  takes never matters. Leaf values: ``2**D`` per tree.
* SPARSE: nodes in breadth-first order per tree, with ``kid[i]`` the left child and the right
  child at ``kid[i] + 1``. A leaf is a self-loop: threshold NaN sends every value right (no flag
  bits set) and ``kid = self - 1``, so walks may run past a leaf without a leaf test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peregrine.backends.native.schedule import Layout, Schedule
from peregrine.ir import Aggregation, Forest

NAN_LEFT = 1 << 31  # missing values go left
MISSING_ZERO = 1 << 30  # |x| <= 1e-35 is missing too (LightGBM MissingType::Zero)
CATEGORICAL = 1 << 29  # threshold bits hold the cat_bitsets row
FEATURE_MASK = CATEGORICAL - 1
PAD_SLOTS = 64  # >= MAX_TABLE_REGS * 16 lanes
TOP_LEVELS = 4  # levels stored slot-major for tree-lane walks (15 slots per tree)
TOP_PAD = 512  # >= lanes x walks of any schedule
MAX_PERFECT_BYTES = 256 << 20  # beyond this padding costs more than it saves: use SPARSE


@dataclass(frozen=True, eq=False)
class PackedForest:
    layout: Layout
    depth: int  # PERFECT: depth every tree is padded to; SPARSE: deepest tree
    cmp_dtype: np.dtype
    leaf_dtype: np.dtype
    n_outputs: int
    value_width: int
    average: bool
    sum_dtype: np.dtype  # the library's accumulation dtype (Forest.sum_dtype)
    base_first: bool  # sums start from the base score (Forest.sum_starts_at_base)
    has_nan: bool
    has_missing_zero: bool
    has_categorical: bool
    cat_negative_before_trunc: bool
    feat: np.ndarray  # int32 feature words per slot
    thr: np.ndarray  # cmp_dtype per slot
    kid: np.ndarray  # int32 left child per slot (SPARSE only)
    node: np.ndarray  # int64 per slot: threshold bits | feature word << 32 (float32 compares)
    top: np.ndarray  # int64 [TOP_LEVELS slots x top_stride trees]: PERFECT top levels by level
    top_stride: int
    leaf: np.ndarray  # leaf_dtype [slots * value_width]
    tree_root: np.ndarray  # int32 first slot of each packed tree
    tree_leaf: np.ndarray  # int32 first leaf slot of each packed tree (PERFECT)
    tree_col: np.ndarray  # int32 output column of each packed tree (grouped leaves)
    tree_depth: np.ndarray  # int32 walk steps of each packed tree (SPARSE)
    order: np.ndarray  # int64 original index of each packed tree
    cat_bits: np.ndarray  # uint32 [n_cat * n_cat_words]
    cat_unknown: np.ndarray  # uint8 [n_cat]
    n_cat_words: int
    divisor: np.ndarray  # float64 [n_outputs]
    base: np.ndarray  # float64 [n_outputs]

    @property
    def n_trees(self) -> int:
        return len(self.tree_root)

    @property
    def grouped(self) -> bool:
        """Scalar leaves summed into per-tree output columns (multiclass boosting)."""
        return self.value_width == 1 and self.n_outputs > 1

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.feat, self.thr, self.kid, self.leaf, self.cat_bits))

    def arrays(self) -> dict[str, np.ndarray]:
        names = ("feat", "thr", "kid", "node", "top", "leaf", "tree_root", "tree_leaf", "tree_col",
                 "tree_depth", "order", "cat_bits", "cat_unknown", "divisor", "base")
        return {k: getattr(self, k) for k in names}


def choose_layout(forest: Forest, requested: Layout) -> Layout:
    """PERFECT unless padding every tree to the deepest one would be too large."""
    if requested is Layout.SPARSE:
        return Layout.SPARSE
    depth = forest.max_depth()
    slot_bytes = 8 + 8 * forest.value_width
    if depth > 16 or forest.n_trees * (2 ** depth) * slot_bytes > MAX_PERFECT_BYTES:
        return Layout.SPARSE
    return Layout.PERFECT


def leaf_dtype(forest: Forest) -> np.dtype:
    """float32 when every leaf value is a float32 number (XGBoost): half the bytes, same sums,
    since the kernels widen to float64 before accumulating."""
    vals = forest.value[forest.is_leaf]
    with np.errstate(over="ignore"):
        exact = np.array_equal(vals.astype(np.float32).astype(np.float64), vals)
    return np.dtype(np.float32 if exact else np.float64)


def pack(forest: Forest, schedule: Schedule, cmp_dtype: np.dtype) -> PackedForest:
    cmp_dtype = np.dtype(cmp_dtype)
    layout = choose_layout(forest, schedule.layout)
    words, thr = _node_words(forest, cmp_dtype)
    depths = forest.tree_depths().astype(np.int32)
    order = np.arange(forest.n_trees, dtype=np.int64)
    if schedule.reorder_trees and forest.sum_dtype == np.float64:
        # Treebeard's tree reordering: trees of equal depth side by side; grouped outputs keep
        # their column's trees together too. The sum is then reassociated: no longer the
        # library's bits (~1e-16 relative in float64), so only on request (Schedule default
        # off), and never for float32 sums, where the order moves results by far more.
        order = np.lexsort((depths, forest.tree_group)) if forest.value_width == 1 else (
            np.argsort(depths, kind="stable"))
    pack_fn = _pack_perfect if layout is Layout.PERFECT else _pack_sparse
    ldt = leaf_dtype(forest)
    nodes = pack_fn(forest, order, words, thr, cmp_dtype, ldt)
    nodes["node"] = _node_pairs(nodes["feat"], nodes["thr"])
    nodes["top"], nodes["top_stride"] = _top_levels(nodes["node"], layout, forest.max_depth(),
                                                   forest.n_trees)
    internal = ~forest.is_leaf
    has_cat = forest.has_categorical
    bits = forest.cat_bitsets if has_cat else np.zeros((1, 1), np.uint32)
    unknown = forest.cat_unknown_left if has_cat else np.zeros(1, bool)
    return PackedForest(
        layout=layout,
        depth=forest.max_depth(),
        cmp_dtype=cmp_dtype,
        leaf_dtype=ldt,
        n_outputs=forest.n_outputs,
        value_width=forest.value_width,
        average=forest.aggregation is Aggregation.AVERAGE,
        sum_dtype=np.dtype(forest.sum_dtype),
        base_first=forest.sum_starts_at_base,
        has_nan=bool(np.any(forest.nan_left & internal)),
        has_missing_zero=forest.has_missing_zero,
        has_categorical=has_cat,
        cat_negative_before_trunc=bool(forest.cat_negative_before_trunc),
        tree_col=np.ascontiguousarray(forest.tree_group[order], dtype=np.int32),
        tree_depth=np.ascontiguousarray(depths[order], dtype=np.int32),
        order=order,
        cat_bits=np.ascontiguousarray(bits, dtype=np.uint32).reshape(-1),
        cat_unknown=np.ascontiguousarray(unknown, dtype=np.uint8),
        n_cat_words=int(bits.shape[1]),
        divisor=np.ascontiguousarray(forest.output_divisor(), dtype=np.float64),
        base=np.ascontiguousarray(forest.base_score, dtype=np.float64),
        **nodes,
    )


def _node_words(forest: Forest, cmp_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Feature word and threshold of every original node (leaves: 0 and 0)."""
    internal = ~forest.is_leaf
    words = np.where(internal, forest.feature, 0).astype(np.int64)
    words |= np.where(internal & forest.nan_left, NAN_LEFT, 0)
    if forest.has_missing_zero:
        words |= np.where(internal & forest.missing_zero, MISSING_ZERO, 0)
    thr = np.where(internal, forest.thresholds_for(cmp_dtype), 0).astype(cmp_dtype)
    if forest.has_categorical:
        cat = internal & (forest.cat_index >= 0)
        words |= np.where(cat, CATEGORICAL, 0)
        int_view = thr.view(np.int32 if cmp_dtype.itemsize == 4 else np.int64)
        int_view[cat] = forest.cat_index[cat]
    return words.astype(np.uint32).view(np.int32), thr


def _pack_perfect(forest: Forest, order, words, thr, cmp_dtype, ldt) -> dict:
    depth = forest.max_depth()
    n = len(order)
    is_leaf = forest.is_leaf
    cur = forest.tree_offsets[:-1][order][:, None]  # (trees, nodes at this level)
    feat_levels, thr_levels = [], []
    for _ in range(depth):
        leaf = is_leaf[cur]
        feat_levels.append(np.where(leaf, 0, words[cur]))
        thr_levels.append(np.where(leaf, 0, thr[cur]).astype(cmp_dtype))
        # a leaf's "children" are itself, so its value fills its whole padded subtree
        kids = np.stack([np.where(leaf, cur, forest.left[cur]),
                         np.where(leaf, cur, forest.right[cur])], axis=2)
        cur = kids.reshape(n, -1)
    # 2**depth - 1 slots per tree: a power-of-two stride would map every tree's root to the
    # same few cache sets
    empty_i, empty_t = np.zeros((n, 0), np.int32), np.zeros((n, 0), cmp_dtype)
    feat = np.concatenate(feat_levels, axis=1) if feat_levels else empty_i
    thr_all = np.concatenate(thr_levels, axis=1) if thr_levels else empty_t
    leaf = forest.value[cur.reshape(-1)].astype(ldt)  # (trees * 2**depth, width)
    return dict(
        feat=_pad(feat.reshape(-1).astype(np.int32)),
        thr=_pad(thr_all.reshape(-1).astype(cmp_dtype)),
        kid=np.zeros(1, np.int32),
        leaf=np.ascontiguousarray(leaf.reshape(-1)),
        tree_root=(np.arange(n, dtype=np.int64) * (2**depth - 1)).astype(np.int32),
        tree_leaf=(np.arange(n, dtype=np.int64) << depth).astype(np.int32),
    )


def _pack_sparse(forest: Forest, order, words, thr, cmp_dtype, ldt) -> dict:
    # Breadth-first numbering per tree, computed for all trees at once: walk the levels of the
    # whole forest together, then sort the visited nodes by (packed tree, level, position).
    rank_of_tree = np.empty(forest.n_trees, np.int64)
    rank_of_tree[order] = np.arange(len(order))
    tree_of = forest.tree_of_node()
    level_nodes = [forest.tree_offsets[:-1][order]]
    while True:
        cur = level_nodes[-1]
        cur = cur[~forest.is_leaf[cur]]
        if cur.size == 0:
            break
        level_nodes.append(np.stack([forest.left[cur], forest.right[cur]], 1).reshape(-1))
    nodes = np.concatenate(level_nodes)
    level = np.repeat(np.arange(len(level_nodes)), [len(x) for x in level_nodes])
    pos = np.arange(len(nodes))
    nodes = nodes[np.lexsort((pos, level, rank_of_tree[tree_of[nodes]]))]
    new_id = np.full(forest.n_nodes, -1, np.int64)
    new_id[nodes] = np.arange(len(nodes))
    leaf = forest.is_leaf[nodes]
    kid = np.where(leaf, new_id[nodes] - 1, new_id[np.maximum(forest.left[nodes], 0)])
    nan = np.array(np.nan, dtype=cmp_dtype)
    values = np.zeros((len(nodes), forest.value_width), ldt)
    values[leaf] = forest.value[nodes[leaf]]
    return dict(
        feat=words[nodes].astype(np.int32),
        thr=np.where(leaf, nan, thr[nodes]).astype(cmp_dtype),
        kid=kid.astype(np.int32),
        leaf=np.ascontiguousarray(values.reshape(-1)),
        tree_root=new_id[forest.tree_offsets[:-1][order]].astype(np.int32),
        tree_leaf=np.zeros(len(order), np.int32),
    )


def _node_pairs(feat: np.ndarray, thr: np.ndarray) -> np.ndarray:
    """Feature word and float32 threshold in one 64-bit word, so a walk gathers one element
    per node instead of two (a gather costs per element loaded)."""
    if thr.dtype != np.float32:
        return np.zeros(1, np.int64)  # float64 thresholds do not fit beside a feature
    out = _aligned(feat.size, np.int64)
    out[:] = (feat.astype(np.int64) << 32) | thr.view(np.uint32).astype(np.int64)
    return out


def _top_levels(pairs: np.ndarray, layout: Layout, depth: int, n_trees: int):
    """The first TOP_LEVELS levels of every tree, slot-major: slot s of trees t..t+15 is one
    contiguous run, so walks with a tree per lane read those levels with plain loads (and all
    trees' top levels, 60 KiB for 500 trees, stay near L1) instead of gathering them."""
    slots = min(2**TOP_LEVELS, 2**depth) - 1
    if layout is not Layout.PERFECT or pairs.size == 1 or slots == 0:
        return np.zeros(1, np.int64), 0
    stride = -(-n_trees // TOP_PAD) * TOP_PAD  # walks may read a whole group past the last tree
    out = _aligned(slots * stride, np.int64)
    out[:] = 0
    per_tree = pairs[: n_trees * (2**depth - 1)].reshape(n_trees, 2**depth - 1)
    out.reshape(slots, stride)[:, :n_trees] = per_tree[:, :slots].T
    return out, stride


def _pad(a: np.ndarray) -> np.ndarray:
    """Kernels load a tree's first slots as whole registers (up to 32 lanes), which may run past
    the last tree's slots: pad so those loads stay inside the array. The copy is 64-byte
    aligned, so gathers of the top levels touch as few lines as possible."""
    out = _aligned(a.size + PAD_SLOTS, a.dtype)
    out[: a.size] = a
    return out


def _aligned(n: int, dtype: np.dtype, align: int = 64) -> np.ndarray:
    raw = np.zeros(n * np.dtype(dtype).itemsize + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start: start + n * np.dtype(dtype).itemsize].view(dtype)
