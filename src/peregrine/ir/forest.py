"""The canonical tree-ensemble form: one struct-of-arrays every frontend produces and every backend
consumes. Library semantics (comparison operator, the precision the library compares in, missing
value directions, categorical rules) are data here, so backends implement a single decision rule:

    x is NaN                          -> nan_left[node]
    missing_zero[node] and |x|<=1e-35 -> nan_left[node]          (LightGBM MissingType::Zero)
    cat_index[node] >= 0 (categorical)-> category rule below
    otherwise                         -> x <= thresholds_for(dtype)[node]

Category rule: c = trunc(x); the value is *invalid* when c < 0 (or x < 0 where
``cat_negative_before_trunc``; XGBoost and scikit-learn test the float before truncating, LightGBM
truncates first, so -0.5 is category 0 there) or c >= 32 * n_words; invalid values go to
``cat_unknown_left``, valid ones left iff their bit is set in ``cat_bitsets``.

Node arrays span all trees; ``tree_offsets[t]`` is tree t's root, children are global indices,
leaves have ``feature == -1`` and ``left == right == -1``.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# LightGBM's kZeroThreshold is the float literal 1e-35f, compared after promotion to double.
LIGHTGBM_ZERO_THRESHOLD = float(np.float32(1e-35))


class Comparison(enum.Enum):
    LE = "<="  # scikit-learn, LightGBM, HistGradientBoosting: left iff x <= t
    LT = "<"  # XGBoost: left iff x < t


class Aggregation(enum.Enum):
    SUM = "sum"  # boosting
    AVERAGE = "average"  # random forests, LightGBM rf, IsolationForest path lengths


@dataclass(frozen=True, eq=False)
class Forest:
    # --- per node -------------------------------------------------------------------------
    feature: np.ndarray  # int32 [n_nodes]; -1 on leaves
    threshold: np.ndarray  # float64 [n_nodes]; exact value as the library stores it
    left: np.ndarray  # int32 [n_nodes]; global index, -1 on leaves
    right: np.ndarray  # int32 [n_nodes]
    nan_left: np.ndarray  # bool [n_nodes]; default direction for missing values
    value: np.ndarray  # float64 [n_nodes, value_width]; meaningful on leaves only
    # --- per tree -------------------------------------------------------------------------
    tree_offsets: np.ndarray  # int64 [n_trees + 1]; nodes of tree t are [off[t], off[t+1])
    tree_group: np.ndarray  # int32 [n_trees]; output column when value_width == 1
    # --- ensemble -------------------------------------------------------------------------
    n_features: int
    n_outputs: int
    base_score: np.ndarray  # float64 [n_outputs], added after aggregation
    comparison: Comparison = Comparison.LE
    # dtype the library casts inputs to before comparing (float32: sklearn trees, XGBoost)
    input_dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float64))
    aggregation: Aggregation = Aggregation.SUM
    # dtype the library sums leaf values in (float32: XGBoost's CPU predictor; float64: the
    # others). The order is every library's: row by row, trees in order; a SUM starts from
    # base_score (XGBoost's base margin, sklearn's init / baseline prediction), an AVERAGE
    # starts from zero, is divided, then offset by base_score. See ``sum_starts_at_base``.
    sum_dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float64))
    # --- optional semantics ---------------------------------------------------------------
    missing_zero: np.ndarray | None = None  # bool [n_nodes]; LightGBM zero-as-missing nodes
    cat_index: np.ndarray | None = None  # int32 [n_nodes]; row in cat_bitsets or -1
    cat_bitsets: np.ndarray | None = None  # uint32 [n_cat_nodes, n_words]; bit set = go left
    cat_unknown_left: np.ndarray | None = None  # bool [n_cat_nodes]
    cat_negative_before_trunc: bool = True

    # ---------------------------------------------------------------- derived properties --
    @property
    def n_trees(self) -> int:
        return int(len(self.tree_offsets) - 1)

    @property
    def n_nodes(self) -> int:
        return int(len(self.feature))

    @property
    def value_width(self) -> int:
        return int(self.value.shape[1])

    @property
    def is_leaf(self) -> np.ndarray:
        return self.feature < 0

    @property
    def has_categorical(self) -> bool:
        return self.cat_index is not None and bool(np.any(self.cat_index >= 0))

    @property
    def has_missing_zero(self) -> bool:
        return self.missing_zero is not None and bool(np.any(self.missing_zero))

    @property
    def n_cat_bits(self) -> int:
        return 0 if self.cat_bitsets is None else int(self.cat_bitsets.shape[1] * 32)

    @functools.cached_property
    def node_depth(self) -> np.ndarray:
        """Depth of every node (root = 0). Cached: frontends may number nodes in any order."""
        depth = np.full(self.n_nodes, -1, dtype=np.int64)
        depth[self.tree_offsets[:-1]] = 0
        internal = np.flatnonzero(self.feature >= 0)
        # Relax parent -> child edges until stable; converges in max_depth sweeps.
        while True:
            known = internal[depth[internal] >= 0]
            kids_l, kids_r = self.left[known], self.right[known]
            new = depth[known] + 1
            if np.array_equal(depth[kids_l], new) and np.array_equal(depth[kids_r], new):
                break
            depth[kids_l] = new
            depth[kids_r] = new
        return depth

    @property
    def sum_starts_at_base(self) -> bool:
        """Boosting libraries add leaf values onto the base score (XGBoost ``PredictBatch``
        starts from the base margin, sklearn's ``predict_stages`` from ``_raw_predict_init``);
        averaging forests sum from zero, divide, then add the (zero) base."""
        return self.aggregation is Aggregation.SUM

    def tree_depths(self) -> np.ndarray:
        """Depth (edges on the longest root-to-leaf path) of every tree."""
        out = np.zeros(self.n_trees, dtype=np.int64)
        np.maximum.at(out, self.tree_of_node(), self.node_depth)
        return out

    def max_depth(self) -> int:
        return int(self.tree_depths().max()) if self.n_trees else 0

    def tree_of_node(self) -> np.ndarray:
        return np.repeat(np.arange(self.n_trees), np.diff(self.tree_offsets)).astype(np.int64)

    def output_divisor(self) -> np.ndarray:
        """Per output column, what the aggregated sum is divided by (1 for SUM)."""
        if self.aggregation is Aggregation.SUM:
            return np.ones(self.n_outputs)
        if self.value_width == self.n_outputs:
            return np.full(self.n_outputs, float(max(self.n_trees, 1)))
        counts = np.bincount(self.tree_group, minlength=self.n_outputs).astype(np.float64)
        return np.maximum(counts, 1.0)

    # ---------------------------------------------------------------------- thresholds --
    def thresholds_for(self, dtype: np.dtype | type) -> np.ndarray:
        """Thresholds t' in ``dtype`` such that for every x of that dtype, ``x <= t'`` decides
        exactly as the library's own comparison (``<=`` or ``<`` against the stored threshold).

        For ``<=``: t' is the largest dtype value <= t (round down). For ``<``: t' is the largest
        dtype value strictly below t. Where no such value exists (t = -inf with ``<``) t' is NaN,
        which sends every non-missing x right, as the library does.
        """
        dt = np.dtype(dtype)
        t64 = self.threshold.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            t = t64.astype(dt)
            back = t.astype(np.float64)
            if self.comparison is Comparison.LE:
                too_big = back > t64
                t = np.where(too_big, np.nextafter(t, dt.type(-np.inf)), t)
            else:
                not_below = t.astype(np.float64) >= t64
                t = np.where(not_below, np.nextafter(t, dt.type(-np.inf)), t)
                t = np.where(np.isneginf(t64), dt.type(np.nan), t)
        return np.ascontiguousarray(t.astype(dt))

    # ------------------------------------------------------------------------ checking --
    def validate(self) -> None:
        """Structural checks; raises ValueError naming the first inconsistency."""
        n = self.n_nodes
        _sum_dtype(np.dtype(self.sum_dtype).name)
        if self.sum_dtype == np.float32 and np.any(
                self.value.astype(np.float32).astype(np.float64) != self.value):
            raise ValueError("Forest summed in float32 has leaf values that are not float32")
        for name in ("feature", "threshold", "left", "right", "nan_left"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Forest.{name} has {len(getattr(self, name))} entries, need {n}")
        if self.value.ndim != 2 or self.value.shape[0] != n:
            raise ValueError(f"Forest.value must be [n_nodes, width], got {self.value.shape}")
        if self.value_width not in (1, self.n_outputs):
            raise ValueError(f"Forest.value width {self.value_width} not 1 or {self.n_outputs}")
        if self.tree_offsets[0] != 0 or self.tree_offsets[-1] != n:
            raise ValueError("Forest.tree_offsets must start at 0 and end at n_nodes")
        if len(self.tree_group) != self.n_trees:
            raise ValueError("Forest.tree_group needs one entry per tree")
        if np.any((self.tree_group < 0) | (self.tree_group >= self.n_outputs)):
            raise ValueError("Forest.tree_group out of range")
        if self.base_score.shape != (self.n_outputs,):
            raise ValueError(f"Forest.base_score must have shape ({self.n_outputs},)")
        internal = self.feature >= 0
        if np.any(self.feature[internal] >= self.n_features):
            raise ValueError("Forest.feature refers past n_features")
        tree = self.tree_of_node()
        for side in (self.left, self.right):
            kids = side[internal]
            if np.any((kids < 0) | (kids >= n)):
                raise ValueError("Forest child index out of range")
            if np.any(tree[kids] != tree[internal]):
                raise ValueError("Forest child points into another tree")
        if self.cat_index is not None:
            cats = self.cat_index[internal]
            n_cat = 0 if self.cat_bitsets is None else self.cat_bitsets.shape[0]
            if np.any(cats >= n_cat):
                raise ValueError("Forest.cat_index refers past cat_bitsets")
            if self.cat_unknown_left is None or len(self.cat_unknown_left) != n_cat:
                raise ValueError("Forest.cat_unknown_left needs one entry per categorical split")

    # --------------------------------------------------------------------- persistence --
    ARRAY_FIELDS = (
        "feature", "threshold", "left", "right", "nan_left", "value", "tree_offsets",
        "tree_group", "base_score", "missing_zero", "cat_index", "cat_bitsets",
        "cat_unknown_left",
    )  # fmt: skip

    def to_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """(JSON-able scalars, named arrays) — what the artifact writer stores."""
        arrays = {k: getattr(self, k) for k in self.ARRAY_FIELDS if getattr(self, k) is not None}
        meta = {
            "n_features": self.n_features,
            "n_outputs": self.n_outputs,
            "comparison": self.comparison.value,
            "input_dtype": np.dtype(self.input_dtype).name,
            "aggregation": self.aggregation.value,
            "sum_dtype": np.dtype(self.sum_dtype).name,
            "cat_negative_before_trunc": self.cat_negative_before_trunc,
        }
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict, arrays: dict[str, np.ndarray]) -> Forest:
        forest = cls(
            n_features=int(meta["n_features"]),
            n_outputs=int(meta["n_outputs"]),
            comparison=Comparison(meta["comparison"]),
            input_dtype=np.dtype(meta["input_dtype"]),
            aggregation=Aggregation(meta["aggregation"]),
            sum_dtype=_sum_dtype(meta.get("sum_dtype", "float64")),
            cat_negative_before_trunc=bool(meta["cat_negative_before_trunc"]),
            **{k: arrays.get(k) for k in cls.ARRAY_FIELDS},  # type: ignore[arg-type]
        )
        forest.validate()
        return forest


def _sum_dtype(name: Any) -> np.dtype:
    if name not in ("float32", "float64", np.float32, np.float64):
        raise ValueError(f"Forest sum_dtype must be float32 or float64, got {name!r}")
    return np.dtype(name)


def make_forest(
    *,
    feature,
    threshold,
    left,
    right,
    nan_left,
    value,
    tree_offsets,
    n_features: int,
    n_outputs: int,
    tree_group=None,
    base_score=None,
    missing_zero=None,
    cat_index=None,
    cat_bitsets=None,
    cat_unknown_left=None,
    **scalars,
) -> Forest:
    """Build a Forest with canonical dtypes from array-likes and validate it."""
    n_trees = len(tree_offsets) - 1
    value = np.asarray(value, dtype=np.float64)
    if value.ndim == 1:
        value = value[:, None]
    forest = Forest(
        feature=np.asarray(feature, dtype=np.int32),
        threshold=np.asarray(threshold, dtype=np.float64),
        left=np.asarray(left, dtype=np.int32),
        right=np.asarray(right, dtype=np.int32),
        nan_left=np.asarray(nan_left, dtype=bool),
        value=np.ascontiguousarray(value),
        tree_offsets=np.asarray(tree_offsets, dtype=np.int64),
        tree_group=(
            np.zeros(n_trees, dtype=np.int32)
            if tree_group is None
            else np.asarray(tree_group, dtype=np.int32)
        ),
        n_features=int(n_features),
        n_outputs=int(n_outputs),
        base_score=(
            np.zeros(n_outputs) if base_score is None else np.asarray(base_score, np.float64)
        ).reshape(n_outputs),
        missing_zero=None if missing_zero is None else np.asarray(missing_zero, dtype=bool),
        cat_index=None if cat_index is None else np.asarray(cat_index, dtype=np.int32),
        cat_bitsets=None if cat_bitsets is None else np.asarray(cat_bitsets, dtype=np.uint32),
        cat_unknown_left=(
            None if cat_unknown_left is None else np.asarray(cat_unknown_left, dtype=bool)
        ),
        **scalars,
    )
    forest.validate()
    return forest


def concat_trees(parts: list[dict]) -> dict:
    """Concatenate per-tree node arrays (local child indices) into global Forest arrays.

    Each part holds equal-length arrays ``feature, threshold, left, right, nan_left, value`` and
    optionally ``missing_zero, cat_index``; ``left/right`` are local (-1 on leaves). ``cat_index``
    must already be global (frontends number categorical splits across the whole forest).
    """
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    for i, p in enumerate(parts):
        offsets[i + 1] = offsets[i] + len(p["feature"])
    out: dict = {"tree_offsets": offsets}
    keys = ("feature", "threshold", "nan_left", "value", "missing_zero", "cat_index")
    for key in keys:
        if all(key in p for p in parts) and parts:
            out[key] = np.concatenate([np.asarray(p[key]) for p in parts])
    for side in ("left", "right"):
        arrs = []
        for i, p in enumerate(parts):
            a = np.asarray(p[side], dtype=np.int64)
            arrs.append(np.where(a >= 0, a + offsets[i], -1))
        out[side] = np.concatenate(arrs) if arrs else np.zeros(0, np.int64)
    return out


def bitset_from_categories(categories, n_words: int) -> np.ndarray:
    """uint32 words with bit c set for every category c (c < 32 * n_words)."""
    words = np.zeros(n_words, dtype=np.uint32)
    for c in categories:
        c = int(c)
        if 0 <= c < 32 * n_words:
            words[c // 32] |= np.uint32(1) << np.uint32(c % 32)
    return words
