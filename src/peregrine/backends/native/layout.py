"""Model-level layout: pack a Forest into the flat arrays the generated kernels read.

The kernels are generic over the model: they are specialised only by shape parameters (layout,
depth, dtypes, output width, feature flags), so a new model of the same shape costs only this
packing. Every array is built with whole-forest NumPy operations (no per-node Python loop).

Per node (one slot): a feature word (int32; low 29 bits the feature, then flag bits below) and a
threshold in the comparison dtype (and, for float32 compares, both in one int64 word), already rounded by ``Forest.thresholds_for`` so that the one
rule ``x <= t`` is exact. Categorical nodes keep their bitset row in the threshold's bits.

The representations themselves (PERFECT, SPARSE, BINNED, OBLIVIOUS, OBLIVIOUS_BINNED) are
plugins in representations.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from peregrine.backends.native.representations import (
    CATEGORICAL,
    FEATURE_MASK,
    MISSING_ZERO,
    NAN_LEFT,
    REPRESENTATIONS,
    aligned,
    node_words,
)
from peregrine.backends.native.schedule import Lanes, Layout, Schedule
from peregrine.ir import Aggregation, Forest

__all__ = ["CATEGORICAL", "FEATURE_MASK", "MISSING_ZERO", "NAN_LEFT", "PackedForest",
           "choose_layout", "pack"]

TOP_LEVELS = 4  # levels stored slot-major for tree-lane walks (15 slots per tree)
# BINNED: 16-bit words, read with word permutes (binned.py top_word): two more levels (63
# slots per tree; measured 5 and 7 slower on Zen 4)
BINNED_TOP_LEVELS = 6
TOP_PAD = 512  # >= lanes x walks of any schedule
TOP_GROUP = 16  # BINNED: trees per run (the tree-lane walks' 16 lanes)


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
    kid: np.ndarray  # int32 left child per slot (SPARSE); OBLIVIOUS_BINNED: per-feature search
    # steps | NaN's bin << 8 (representations.py)
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
    bins: np.ndarray  # BINNED: cmp_dtype [n_features * BIN_SLOTS] sorted thresholds per feature
    cat_unknown: np.ndarray  # uint8 [n_cat]
    n_cat_words: int
    divisor: np.ndarray  # float64 [n_outputs]
    base: np.ndarray  # float64 [n_outputs]
    rank_base: int = 0  # BINNED: the bin of a number below every threshold (representations.py)
    # OBLIVIOUS_BINNED: int32 per slot, the slot's rank in each of its 4 bytes (derived from
    # feat, so not part of arrays(), which the artifact's digest covers)
    ranks: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int32))

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
                 "tree_depth", "order", "cat_bits", "cat_unknown", "divisor", "base", "bins")
        return {k: getattr(self, k) for k in names}


def choose_layout(forest: Forest, requested: Layout, cmp_dtype: np.dtype | None = None,
                  target=None, lanes: Lanes = Lanes.ROWS, vector_width: int = 16,
                  interleave: int = 4) -> Layout:
    """The requested representation where it can hold this forest (BINNED also needs the
    target, and 16 row lanes: a 64-byte register of bytes; OBLIVIOUS row lanes;
    OBLIVIOUS_BINNED both and walks in groups of 4), else PERFECT, else SPARSE, which holds
    any forest."""
    # OBLIVIOUS_BINNED falls back to the float form of the same walk first
    order = [requested] + ([Layout.OBLIVIOUS] if requested is Layout.OBLIVIOUS_BINNED else [])
    order += [Layout.PERFECT, Layout.SPARSE]
    for layout in order:
        # BINNED: 16 lanes (row lanes: a 64-byte register of bytes; tree lanes: 16 features
        # of the row's bins a register)
        if layout is Layout.BINNED and (target is None or vector_width != 16):
            continue
        if layout is Layout.OBLIVIOUS and lanes is not Lanes.ROWS:  # lanes walk other trees
            continue
        if layout is Layout.OBLIVIOUS_BINNED and (
                target is None or lanes is not Lanes.ROWS or vector_width != 16
                or interleave % 4):  # walks come in 64-row groups: one register of bytes
            continue
        why = REPRESENTATIONS[layout].unsupported(forest, np.dtype(cmp_dtype or np.float32),
                                                  target)
        if why is None:
            return layout
    return Layout.SPARSE


def leaf_dtype(forest: Forest) -> np.dtype:
    """float32 when every leaf value is a float32 number (XGBoost): half the bytes, same sums,
    since the kernels widen to float64 before accumulating."""
    vals = forest.value[forest.is_leaf]
    with np.errstate(over="ignore"):
        exact = np.array_equal(vals.astype(np.float32).astype(np.float64), vals)
    return np.dtype(np.float32 if exact else np.float64)


def pack(forest: Forest, schedule: Schedule, cmp_dtype: np.dtype, target=None) -> PackedForest:
    """``target``: the CPU the kernel runs on (representations that need an instruction, such as
    BINNED's byte permutes, are only chosen with one)."""
    cmp_dtype = np.dtype(cmp_dtype)
    layout = choose_layout(forest, schedule.layout, cmp_dtype, target, schedule.lanes,
                           schedule.vector_width, schedule.interleave)
    words, thr = node_words(forest, cmp_dtype)
    depths = forest.tree_depths().astype(np.int32)
    order = np.arange(forest.n_trees, dtype=np.int64)
    if schedule.reorder_trees and forest.sum_dtype == np.float64:
        # Treebeard's tree reordering: trees of equal depth side by side; grouped outputs keep
        # their column's trees together too. The sum is then reassociated: no longer the
        # library's bits (~1e-16 relative in float64), so only on request (Schedule default
        # off), and never for float32 sums, where the order moves results by far more.
        order = np.lexsort((depths, forest.tree_group)) if forest.value_width == 1 else (
            np.argsort(depths, kind="stable"))
    ldt = REPRESENTATIONS[layout].leaf_dtype(forest, leaf_dtype(forest))
    nodes = REPRESENTATIONS[layout].pack_nodes(forest, order, words, thr, cmp_dtype, ldt)
    nodes["node"] = _node_pairs(nodes["feat"], nodes["thr"])
    nodes["top"], nodes["top_stride"] = _top_levels(
        nodes["ranks"] if layout is Layout.BINNED else nodes["node"], layout,
        forest.max_depth(), forest.n_trees)
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


def _node_pairs(feat: np.ndarray, thr: np.ndarray) -> np.ndarray:
    """Feature word and float32 threshold in one 64-bit word, so a walk gathers one element
    per node instead of two (a gather costs per element loaded)."""
    if thr.dtype != np.float32 or thr.size != feat.size:
        # float64 thresholds do not fit beside a feature; BINNED keeps no thresholds
        return np.zeros(1, np.int64)
    out = aligned(feat.size, np.int64)
    out[:] = (feat.astype(np.int64) << 32) | thr.view(np.uint32).astype(np.int64)
    return out


def _top_levels(pairs: np.ndarray, layout: Layout, depth: int, n_trees: int):
    """The first TOP_LEVELS levels of every tree, slot-major: slot s of trees t..t+15 is one
    contiguous run, so walks with a tree per lane read those levels with plain loads (and all
    trees' top levels, 60 KiB for 500 trees, stay near L1) instead of gathering them. BINNED:
    BINNED_TOP_LEVELS levels of its tree-lane words (``ranks``), 64 KiB for 500 trees."""
    levels = BINNED_TOP_LEVELS if layout is Layout.BINNED else TOP_LEVELS
    slots = min(2**levels, 2**depth) - 1
    if layout not in (Layout.PERFECT, Layout.BINNED) or pairs.size == 1 or slots == 0:
        return np.zeros(1, np.int64), 0
    stride = -(-n_trees // TOP_PAD) * TOP_PAD  # walks may read a whole group past the last tree
    # ... and past the stride too, in the last slot, when lanes x walks does not divide it
    # (8 x 6 trees a group: 500 trees read up to tree 527 of a 512 stride)
    per_tree = pairs[: n_trees * (2**depth - 1)].reshape(n_trees, 2**depth - 1)
    if layout is Layout.BINNED:
        # group-major, [group of 16 trees][slot + 1][tree] in 16 bits: a walk's runs sit at
        # constant offsets from one pointer (no address arithmetic), and level L's 2**L runs
        # start at run 2**L, so each level is whole 64-byte registers of two runs each
        stride += TOP_PAD  # a step of lanes x walks that does not divide 512 (16 x 6)
        out = aligned((slots + 1) * stride, np.int16)
        out[:] = 0
        grouped = out.reshape(stride // TOP_GROUP, slots + 1, TOP_GROUP)
        padded = np.zeros((stride, slots), np.int16)
        padded[:n_trees] = per_tree[:, :slots].astype(np.uint16).view(np.int16)
        grouped[:, 1:] = padded.reshape(stride // TOP_GROUP, TOP_GROUP, slots).transpose(0, 2, 1)
        return out, stride
    out = aligned(slots * stride + TOP_PAD, np.int64)
    out[:] = 0
    out[:slots * stride].reshape(slots, stride)[:, :n_trees] = per_tree[:, :slots].T
    return out, stride
