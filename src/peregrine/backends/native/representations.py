"""Tree representations (Treebeard's representation plugins): how a forest's nodes are laid out
in memory, which the kernel's walks read.

A representation is one object with three parts:

* ``unsupported(forest, cmp_dtype, target)``: why it cannot hold this forest on this target
  (``None`` when it can), so the tuner only searches representations that apply;
* ``pack_nodes(...)``: the node, leaf and per-tree arrays (whole-forest NumPy, no per-node loop);
* ``cost(forest, target)``: a rough relative cost per (row, tree), used to prune the search
  before anything is measured.

The walks that read each representation are in ``walks.py`` (``Walks.walk``), keyed by the same
:class:`~peregrine.backends.native.schedule.Layout`.

* PERFECT: tree t occupies slots ``[t * (2**D - 1), (t+1) * (2**D - 1))`` in level order; the
  children of slot i are 2i+1 and 2i+2, so no child array is read. Tree t's leaves start at
  ``t << D``. A leaf above depth D becomes a dummy split whose whole subtree of leaf slots
  repeats its value, so the direction the dummy takes never matters.
* SPARSE: nodes in breadth-first order per tree, with ``kid[i]`` the left child and the right
  child at ``kid[i] + 1``. A leaf is a self-loop: threshold NaN sends every value right (no flag
  bits set) and ``kid = self - 1``, so walks may run past a leaf without a leaf test.
* BINNED: PERFECT slots, but each node is one int32 word ``rank | feature << 8 | NAN_LEFT``,
  where ``rank - 1`` is the threshold's position among the distinct thresholds the forest tests
  on that feature. The kernel quantises each row once, ``bin(x) = base + #{thresholds of f <
  x}`` (NaN: ``NAN_BIN``), into a byte tile, and ``x <= t`` holds exactly when ``bin(x) <=
  rank`` (every threshold below x is below ``t`` iff x is not above it). ``base`` is 1 only
  for forests with a NaN threshold (``Forest.thresholds_for`` gives one for ``x < -inf``),
  which takes rank 0: no number is at or below it. Walks then read the input
  with byte permutes (AVX-512 VBMI) instead of gathers, and a whole level's node words fit
  twice as many registers as feature and threshold did: the representation for CPUs whose
  gathers are slow (Zen 4). Walks with trees in the lanes (one row) read the same nodes as
  ``ranks``: ``feature | NAN_LEFT << 7 | rank << 8``, against the row's bins shifted by 8 in
  registers. Needs at most ``MAX_RANKS`` distinct thresholds per feature and no
  categorical or LightGBM zero-band splits.
* OBLIVIOUS_BINNED: BINNED node words of OBLIVIOUS trees of depth <= 6 with one value per
  leaf. The kernel (oblivious.py) compares 64 rows' bins at once per level and looks leaves up
  with word permutes, so the leaf array holds each tree's 64 leaf values (padded) in the sum
  dtype as 16-bit planes, ``[tree][word][leaf]``: plane p is word p of every leaf value. Every
  split on a feature must send NaN the same way (CatBoost's nan_mode is per model): then NaN's
  bin is 0 (left at every rank) or NAN_BIN (right), and a level is one compare with no NaN
  test. A feature's n thresholds are searched over 2**m slots, m = n.bit_length(), stored in
  search order (``search_order``): step s's candidates are the 2**s entries from ``2**s - 1``,
  so the kernel reads them from registers with permutes instead of gathering them, and a
  feature with few thresholds takes few steps. ``kid`` (unused by perfect slots) holds each
  feature's ``m | nan_bin << 8``.
* OBLIVIOUS: PERFECT slots of forests whose trees test one (feature, threshold, flags) per level
  (CatBoost's symmetric trees; a shallower tree's padding levels qualify too). A walk reads
  each level's node once for all lanes, and every lane's input for it is one contiguous load
  from the transposed row tile: only the leaf is gathered.
* REFILL: SPARSE nodes whose feature word also holds the right child, ``flags | right << fb |
  feature`` (``fb`` = bit_length(n_features - 1)), so with the float32 threshold one 64-bit
  gather reads a whole node. Walks with rows in the lanes hand a lane the next row as soon as
  its row reaches a leaf (refill.py): deep, unbalanced trees cost their mean path, not the max.
"""

from __future__ import annotations

import abc

import numpy as np

from peregrine.backends.native.schedule import Layout
from peregrine.ir import Forest

NAN_LEFT = 1 << 31  # missing values go left
MISSING_ZERO = 1 << 30  # |x| <= 1e-35 is missing too (LightGBM MissingType::Zero)
CATEGORICAL = 1 << 29  # threshold bits hold the cat_bitsets row
FEATURE_MASK = CATEGORICAL - 1
PAD_SLOTS = 128  # >= the widest register table (8 registers x 16 lanes)
MAX_PERFECT_BYTES = 256 << 20  # beyond this padding costs more than it saves: use SPARSE
PERFECT_MAX_DEPTH = 16

# BINNED
RANK_BITS = 8
RANK_MASK = (1 << RANK_BITS) - 1
NAN_BIN = RANK_MASK  # the bin of a NaN input: above every rank, so it goes right unless flagged
BIN_SLOTS = 1 << RANK_BITS  # per-feature sorted thresholds, padded with +inf
MAX_RANKS = BIN_SLOTS - 2  # keeps every bin of a number (0..MAX_RANKS) below NAN_BIN: the
# limit is one lower for forests with a NaN threshold (their bins start at 1)
LANE_RANK_SHIFT = 8  # BINNED tree-lane words, 16 bits: feature | NAN_LEFT << 7 | rank << 8
LANE_NAN_LEFT = 1 << 7
BINNED_MAX_FEATURES = 64  # the x lookup picks among n_features / 8 byte permutes
BINNED_MAX_DEPTH = 10
OBLIVIOUS_LEAVES = 64  # a byte permute (vpermb) indexes 64 bytes: depth <= 6
PLANE_BYTES = 2  # leaf planes of 16-bit words: a two-register word permute (vpermi2w) indexes
# all 64, and each value needs one unpack stage fewer than from byte planes
OBLIVIOUS_BINNED_MAX_FEATURES = 1024  # a 64-row group's byte tile fits the 64 KiB row tile


class Representation(abc.ABC):
    name: str = ""

    def unsupported(self, forest: Forest, cmp_dtype: np.dtype, target) -> str | None:
        return None

    @abc.abstractmethod
    def pack_nodes(self, forest: Forest, order: np.ndarray, words: np.ndarray,
                   thr: np.ndarray, cmp_dtype: np.dtype, ldt: np.dtype) -> dict:
        """The node, leaf and per-tree arrays (and any scalars) PackedForest takes."""

    def cost(self, forest: Forest, target) -> float:
        """Relative cost per (row, tree); only the order between representations matters."""
        return 1.0

    def leaf_dtype(self, forest: Forest, ldt: np.dtype) -> np.dtype:
        """The dtype the leaf array is packed in (``ldt``: the narrowest exact one)."""
        return ldt


class Perfect(Representation):
    name = "perfect"

    def unsupported(self, forest, cmp_dtype, target):
        depth = forest.max_depth()
        slot_bytes = 8 + 8 * forest.value_width
        if depth > PERFECT_MAX_DEPTH:
            return f"depth {depth} > {PERFECT_MAX_DEPTH}"
        if forest.n_trees * (2 ** depth) * slot_bytes > MAX_PERFECT_BYTES:
            return f"padding to depth {depth} takes more than {MAX_PERFECT_BYTES >> 20} MiB"
        return None

    def pack_nodes(self, forest, order, words, thr, cmp_dtype, ldt):
        depth = forest.max_depth()
        n = len(order)
        feat, thr_all, cur = _perfect_slots(forest, order, words, thr, cmp_dtype)
        leaf = forest.value[cur.reshape(-1)].astype(ldt)  # (trees * 2**depth, width)
        return dict(
            feat=pad(feat.reshape(-1).astype(np.int32)),
            thr=pad(thr_all.reshape(-1).astype(cmp_dtype)),
            kid=np.zeros(1, np.int32),
            leaf=np.ascontiguousarray(leaf.reshape(-1)),
            tree_root=(np.arange(n, dtype=np.int64) * (2**depth - 1)).astype(np.int32),
            tree_leaf=(np.arange(n, dtype=np.int64) << depth).astype(np.int32),
            bins=np.zeros(1, cmp_dtype),
        )

    def cost(self, forest, target):
        # padding: every walk runs the deepest tree's levels
        return float(forest.max_depth())


class Sparse(Representation):
    name = "sparse"

    def pack_nodes(self, forest, order, words, thr, cmp_dtype, ldt):
        # Breadth-first numbering per tree, computed for all trees at once: walk the levels of
        # the whole forest together, then sort the visited nodes by (tree, level, position).
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
            bins=np.zeros(1, cmp_dtype),
        )

    def cost(self, forest, target):
        # a child index per level, and walks that wait for their slowest lane
        depths = forest.tree_depths()
        return 1.5 * float(depths.mean() if depths.size else 0.0)


class Binned(Perfect):
    name = "binned"

    def unsupported(self, forest, cmp_dtype, target):
        if not (target.isa == "avx512" and target.has("avx512vbmi")):
            return "needs AVX-512 VBMI byte permutes"
        if forest.has_categorical or forest.has_missing_zero:
            return "categorical or zero-band splits"
        if forest.n_features > BINNED_MAX_FEATURES:
            return f"{forest.n_features} features > {BINNED_MAX_FEATURES}"
        if forest.max_depth() > BINNED_MAX_DEPTH:
            return f"depth {forest.max_depth()} > {BINNED_MAX_DEPTH}"
        ranks = feature_thresholds(forest, cmp_dtype)
        if ranks is None:
            limit = MAX_RANKS - rank_base(forest, cmp_dtype)
            return f"a feature with more than {limit} distinct thresholds"
        return super().unsupported(forest, cmp_dtype, target)

    def pack_nodes(self, forest, order, words, thr, cmp_dtype, ldt):
        out = super().pack_nodes(forest, order, words, thr, cmp_dtype, ldt)
        per_feature = feature_thresholds(forest, cmp_dtype)
        assert per_feature is not None  # unsupported() said so
        # each feature's thresholds padded with +inf to BIN_SLOTS, stored in the binary
        # search's order (binned.py reads a level's candidates as consecutive slots)
        steps = BIN_SLOTS.bit_length() - 1
        bins = np.full((max(1, forest.n_features), BIN_SLOTS), np.inf, cmp_dtype)
        for f, values in per_feature.items():
            padded = np.full(BIN_SLOTS, np.inf, cmp_dtype)
            padded[: values.size] = values
            bins[f, : BIN_SLOTS - 1] = padded[search_order(steps)]
        n = forest.n_trees * (2 ** forest.max_depth() - 1)
        feat_w, thr_s = out["feat"][:n], out["thr"][:n]
        feature = (feat_w & FEATURE_MASK).astype(np.int64)
        # rank of each slot's threshold among its feature's; dummy slots (leaves above the
        # depth, word 0) get whatever rank: both their subtrees hold the same leaf value
        base = rank_base(forest, cmp_dtype)
        rank = np.zeros(n, np.int64)  # NaN thresholds keep rank 0: never left for a number
        for f, values in per_feature.items():
            sel = (feature == f) & ~np.isnan(thr_s)
            rank[sel] = np.searchsorted(values, thr_s[sel]) + base
        word = (rank & RANK_MASK) | (feature << RANK_BITS)
        word |= np.where(feat_w < 0, NAN_LEFT, 0)  # the NAN_LEFT flag is the sign bit
        out["feat"] = pad(word.astype(np.uint32).view(np.int32))
        # tree lanes read another form of the same node (not part of arrays(): derived), 16
        # bits: the feature in the low bits, so the word itself indexes the row's bins
        # (vpermi2d reads an index's low bits), and the rank in the high byte, so one
        # unsigned compare of the word with bin << 8 is the decision (the bits below stay
        # under 1 << 8); int32 here for the gathers, int16 in the top levels' copy
        lane = feature | (rank & RANK_MASK) << LANE_RANK_SHIFT
        lane |= np.where(feat_w < 0, LANE_NAN_LEFT, 0)
        out["ranks"] = pad(lane.astype(np.uint32).view(np.int32))
        out["thr"] = np.zeros(1, cmp_dtype)
        out["bins"] = np.ascontiguousarray(bins.reshape(-1))
        out["rank_base"] = base
        return out

    def cost(self, forest, target):
        # per (row, tree): no input gathers, the x lookup grows a little with the feature
        # count; plus binning the row (a search per input value), shared by all trees, so
        # few trees make it the larger part. Fitted 2026-11-29 on an AMD EPYC (family 26,
        # AVX-512), random forests of 1-100 trees, depth 4-10, 10-60 features, 20K rows,
        # one thread: perfect / binned time per (row, tree) ~ d / (0.37 d (1 + f/150)) and
        # binning ~1.2 f units a row. The former hint (no binning term) picked binned for
        # one tree of depth 4 over 20 features, 1.78x slower than perfect.
        return (0.37 * forest.max_depth() * (1 + forest.n_features / 150)
                + 1.2 * forest.n_features / max(1, forest.n_trees))


class Oblivious(Perfect):
    name = "oblivious"

    def unsupported(self, forest, cmp_dtype, target):
        why = super().unsupported(forest, cmp_dtype, target)
        if why is not None:
            return why
        words, thr = node_words(forest, np.dtype(cmp_dtype))
        order = np.arange(forest.n_trees)
        feat, thr_all, _ = _perfect_slots(forest, order, words, thr, np.dtype(cmp_dtype))
        for level in range(forest.max_depth()):
            lo, hi = 2**level - 1, 2**(level + 1) - 1
            bits = thr_all[:, lo:hi].view(np.int32 if thr_all.itemsize == 4 else np.int64)
            if not (np.all(feat[:, lo:hi] == feat[:, lo:lo + 1])
                    and np.all(bits == bits[:, :1])):  # bitwise: NaN thresholds equal too
                return f"level {level} tests more than one split in a tree"
        return None

    def cost(self, forest, target):
        return 0.25 * forest.max_depth()


class ObliviousBinned(Binned):
    name = "oblivious_binned"

    def unsupported(self, forest, cmp_dtype, target):
        if not (target.isa == "avx512" and target.has("avx512vbmi")):
            return "needs AVX-512 VBMI byte permutes"
        if forest.max_depth() > 6:
            return f"depth {forest.max_depth()} > 6 (64 leaves per byte permute)"
        if forest.value_width != 1:
            return "vector leaves"
        if forest.has_categorical or forest.has_missing_zero:
            return "categorical or zero-band splits"
        if forest.n_features > OBLIVIOUS_BINNED_MAX_FEATURES:
            return f"{forest.n_features} features > {OBLIVIOUS_BINNED_MAX_FEATURES}"
        if feature_thresholds(forest, cmp_dtype) is None:
            limit = MAX_RANKS - rank_base(forest, cmp_dtype)
            return f"a feature with more than {limit} distinct thresholds"
        why = REPRESENTATIONS[Layout.OBLIVIOUS].unsupported(forest, cmp_dtype, target)
        if why is None and nan_left_by_feature(forest) is None:
            return "splits on one feature send NaN different ways"
        return why

    def leaf_dtype(self, forest, ldt):
        # the planes are added as they are: the sum dtype, so no conversion per leaf
        return np.dtype(forest.sum_dtype)

    def pack_nodes(self, forest, order, words, thr, cmp_dtype, ldt):
        out = super().pack_nodes(forest, order, words, thr, cmp_dtype, ldt)
        n, leaves = len(order), 2 ** forest.max_depth()
        table = np.zeros((n, OBLIVIOUS_LEAVES), ldt)
        table[:, :leaves] = out["leaf"].reshape(n, leaves)
        unit = np.dtype(f"u{PLANE_BYTES}")
        planes = table.view(unit).reshape(n, OBLIVIOUS_LEAVES, ldt.itemsize // PLANE_BYTES)
        # 64-byte aligned: the kernel loads each plane as aligned registers
        leaf = aligned(table.size, ldt)
        leaf.view(unit)[:] = planes.transpose(0, 2, 1).reshape(-1)
        out["leaf"] = leaf
        nan_left = nan_left_by_feature(forest)
        assert nan_left is not None  # unsupported() said so
        bins = np.full((max(1, forest.n_features), BIN_SLOTS), np.inf, cmp_dtype)
        steps = np.zeros(bins.shape[0], np.int64)
        for f, values in feature_thresholds(forest, cmp_dtype).items():
            steps[f] = m = values.size.bit_length()  # 2**m slots > n: the last is +inf
            padded = np.full(2**m, np.inf, cmp_dtype)
            padded[: values.size] = values
            bins[f, : 2**m - 1] = padded[search_order(m)]
        nan_bin = np.where(nan_left, 0, NAN_BIN)  # bin 0 <= every rank: left
        out["bins"] = np.ascontiguousarray(bins.reshape(-1))
        out["kid"] = (steps | nan_bin << 8).astype(np.int32)
        # a level's rank splat is then one 4-byte broadcast load (no byte shuffle: the kernel
        # is bound by its shuffles)
        rank = (out["feat"].view(np.uint32) & RANK_MASK).astype(np.uint32)
        out["ranks"] = (rank * 0x01010101).view(np.int32)
        return out

    def cost(self, forest, target):
        # 64 rows per compare and no gathers: measured 2.5-3x below OBLIVIOUS per (row, tree)
        # (docs/native.md); the row tile's quantisation, a search per input value, is shared
        # by all trees, so few trees make it the larger part
        return 0.1 * forest.max_depth() + 0.3 * forest.n_features / max(1, forest.n_trees)


class Refill(Sparse):
    """SPARSE nodes (breadth-first, siblings adjacent, leaves self-loops) packed so that one
    64-bit gather reads a whole node: the feature word becomes ``flags | right << fb |
    feature`` (``fb`` = bit_length(n_features - 1), the flags where every layout has them), and
    ``layout.pack`` pairs it with the float32 threshold bits (``node``). The walks (refill.py)
    hand a lane the next row as soon as its row reaches a leaf."""

    name = "refill"

    def unsupported(self, forest, cmp_dtype, target):
        if target is None or target.isa not in ("avx512", "avx2"):
            return "needs vector gathers (AVX2 or AVX-512)"
        if np.dtype(cmp_dtype) != np.float32:
            return "float64 compares: the node word holds a float32 threshold"
        fb = refill_feature_bits(forest)
        if forest.n_nodes >= 1 << (29 - fb):
            return f"{forest.n_nodes} nodes do not fit {29 - fb} bits beside the feature"
        return None

    def pack_nodes(self, forest, order, words, thr, cmp_dtype, ldt):
        out = super().pack_nodes(forest, order, words, thr, cmp_dtype, ldt)
        word = out["feat"].view(np.uint32).astype(np.int64)
        right = out["kid"].astype(np.int64) + 1  # a leaf's "right child" is itself
        word = (word & ~FEATURE_MASK) | right << refill_feature_bits(forest) | (
            word & FEATURE_MASK)
        out["feat"] = word.astype(np.uint32).view(np.int32)
        return out

    def cost(self, forest, target):
        # the mean root-to-leaf path over leaves, at a higher price a step than SPARSE's (a
        # scatter and a prefix count each step, a pass over the leaves after each tree).
        # Calibrated on AMD EPYC Zen 4, one thread, against SPARSE (1.5 x mean tree depth):
        # scikit-learn forests of max_depth 12 (REFILL 1.15x slower), 16 (1.40x faster), 22
        # (2.7x) and an unlimited-depth tree (1.46x)
        level, total, count = forest.tree_offsets[:-1], 0, 0
        for d in range(forest.max_depth() + 1):  # level by level, all trees at once
            leaf = forest.is_leaf[level]
            total, count = total + d * int(leaf.sum()), count + int(leaf.sum())
            level = level[~leaf]
            level = np.concatenate([forest.left[level], forest.right[level]])
        return 2.0 + 1.5 * total / max(count, 1)


def refill_feature_bits(forest: Forest) -> int:
    return max(forest.n_features - 1, 0).bit_length()


def node_words(forest: Forest, cmp_dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
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


def feature_thresholds(forest: Forest, cmp_dtype: np.dtype) -> dict[int, np.ndarray] | None:
    """Distinct thresholds per feature, sorted, in the compare dtype (``Forest.thresholds_for``,
    the values the one rule ``x <= t`` compares with; NaN ones left out: rank 0); None when one
    feature has more of them than the bins can rank (MAX_RANKS - rank_base)."""
    internal = ~forest.is_leaf
    feats = forest.feature[internal]
    thr = forest.thresholds_for(np.dtype(cmp_dtype))[internal].astype(cmp_dtype)
    keep = ~np.isnan(thr)
    limit = MAX_RANKS - int(not keep.all())
    feats, thr = feats[keep], thr[keep]
    out = {}
    for f in np.unique(feats):
        values = np.unique(thr[feats == f])
        if values.size > limit:
            return None
        out[int(f)] = values
    return out


def search_order(steps: int) -> np.ndarray:
    """Sorted-slot index of each stored slot when a binary search over ``2**steps`` sorted
    slots is stored step by step: a search that has counted ``pos`` (a multiple of 2 * half)
    so far compares with sorted slot ``pos + half - 1`` at its step of size ``half``; the
    step's candidates for every ``pos`` are stored together, from slot ``2**step - 1``."""
    return np.concatenate([np.arange(2**s) * 2**(steps - s) + 2**(steps - 1 - s) - 1
                           for s in range(steps)] or [np.zeros(0, np.int64)])


def nan_left_by_feature(forest: Forest) -> np.ndarray | None:
    """Whether NaN goes left, per feature (bool [n_features]); None when two splits on one
    feature disagree."""
    internal = ~forest.is_leaf
    feats, left = forest.feature[internal], forest.nan_left[internal]
    out = np.zeros(max(1, forest.n_features), bool)
    out[feats[left]] = True
    if np.any(out[feats] != left):
        return None
    return out


def rank_base(forest: Forest, cmp_dtype: np.dtype) -> int:
    """1 when a split has a NaN threshold (it takes rank 0, below every bin), else 0."""
    internal = ~forest.is_leaf
    return int(np.isnan(forest.thresholds_for(np.dtype(cmp_dtype))[internal]).any())


def _perfect_slots(forest, order, words, thr, cmp_dtype):
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
    return feat, thr_all, cur


def pad(a: np.ndarray) -> np.ndarray:
    """Kernels load a tree's first slots as whole registers (up to 8 x 16 lanes), which may run
    past the last tree's slots: pad so those loads stay inside the array. The copy is 64-byte
    aligned, so gathers of the top levels touch as few lines as possible."""
    out = aligned(a.size + PAD_SLOTS, a.dtype)
    out[: a.size] = a
    return out


def aligned(n: int, dtype: np.dtype, align: int = 64) -> np.ndarray:
    raw = np.zeros(n * np.dtype(dtype).itemsize + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start: start + n * np.dtype(dtype).itemsize].view(dtype)


REPRESENTATIONS: dict[Layout, Representation] = {
    Layout.PERFECT: Perfect(), Layout.SPARSE: Sparse(), Layout.BINNED: Binned(),
    Layout.OBLIVIOUS: Oblivious(), Layout.OBLIVIOUS_BINNED: ObliviousBinned(),
    Layout.REFILL: Refill()}
