"""Tree ops: REPLACE_WITH_NAN and TREE_ENSEMBLE, and the Forest's one decision rule and the
libraries' leaf sums that every backend reproduces (``ir/forest.py`` documents the fields)."""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.ir.forest import LIGHTGBM_ZERO_THRESHOLD, Forest
from peregrine.ir.ops import Op
from peregrine.ir.semantics.base import Attrs, bad, define
from peregrine.options import CompileOptions, Precision


def compute_dtype(forest: Forest, x_dtype: np.dtype, precision: Precision) -> np.dtype:
    """Precision the comparisons run in. float32 is exact when the library itself rounds inputs to
    float32, or when the input already is float32 (thresholds are rounded to match)."""
    if precision is Precision.FLOAT32 or forest.input_dtype == np.float32:
        return np.dtype(np.float32)
    if precision is Precision.FLOAT64:
        return np.dtype(np.float64)
    return np.dtype(np.float32) if x_dtype == np.float32 else np.dtype(np.float64)


def decide_left(forest: Forest, nodes: np.ndarray, x: np.ndarray, thr: np.ndarray) -> np.ndarray:
    """Whether value ``x`` at internal node ``nodes`` goes left (the Forest's one decision rule)."""
    nan = np.isnan(x)
    with np.errstate(invalid="ignore"):
        left = np.where(nan, forest.nan_left[nodes], x <= thr[nodes])
        if forest.has_missing_zero:
            zero = forest.missing_zero[nodes] & (np.abs(x) <= LIGHTGBM_ZERO_THRESHOLD)
            left = np.where(zero, forest.nan_left[nodes], left)
        if forest.has_categorical:
            cat = forest.cat_index[nodes]
            is_cat = (cat >= 0) & ~nan
            if np.any(is_cat):
                n_bits = forest.n_cat_bits
                trunc = np.trunc(np.where(is_cat, x, 0.0))
                neg = (x < 0) if forest.cat_negative_before_trunc else (trunc < 0)
                invalid = neg | ~(trunc < n_bits)  # catches +inf too
                code = np.where(invalid | ~is_cat, 0, trunc).astype(np.int64)
                row = np.where(is_cat, cat, 0)
                word = forest.cat_bitsets[row, code // 32]
                bit = ((word >> (code % 32).astype(np.uint32)) & 1).astype(bool)
                cat_left = np.where(invalid, forest.cat_unknown_left[row], bit)
                left = np.where(is_cat, cat_left, left)
    return left


def forest_leaves(forest: Forest, X: np.ndarray, precision: Precision = Precision.AUTO):
    """Leaf node index reached in every tree: int64 (n_rows, n_trees)."""
    dt = compute_dtype(forest, X.dtype, precision)
    Xc = np.asarray(X, dtype=dt)
    thr = forest.thresholds_for(dt)
    n = Xc.shape[0]
    idx = np.broadcast_to(forest.tree_offsets[:-1], (n, forest.n_trees)).copy()
    rows = np.arange(n)[:, None]
    for _ in range(forest.max_depth()):
        feat = forest.feature[idx]
        active = feat >= 0
        if not active.any():
            break
        x = Xc[rows, np.where(active, feat, 0)]
        safe = np.where(active, idx, forest.tree_offsets[0])
        go_left = decide_left(forest, safe, x, thr)
        nxt = np.where(go_left, forest.left[safe], forest.right[safe])
        idx = np.where(active, nxt, idx)
    return idx


def forest_predict(forest: Forest, X: np.ndarray, precision: Precision = Precision.AUTO):
    """Aggregated ensemble output (n_rows, n_outputs) in float64."""
    return aggregate(forest, forest_leaves(forest, X, precision), precision)


def aggregate(forest: Forest, leaves: np.ndarray, precision: Precision = Precision.AUTO):
    """The ensemble's output (n_rows, n_outputs) float64 for rows reaching ``leaves`` (leaf node
    indices, (n_rows, n_trees)): the libraries' sum and division (below)."""
    n = leaves.shape[0]
    # the library's own sum: its dtype, trees in order, from the base score for boosting
    # (Forest.sum_dtype, Forest.sum_starts_at_base): bit for bit, not just within a tolerance
    dt = np.float32 if precision is Precision.FLOAT32 else forest.sum_dtype
    out = np.zeros((n, forest.n_outputs), dtype=dt)
    if forest.sum_starts_at_base:
        out += forest.base_score.astype(dt)
    value = forest.value.astype(dt)
    if forest.value_width == forest.n_outputs:
        for t in range(forest.n_trees):  # tree order, as the libraries accumulate
            out += value[leaves[:, t]]
    else:
        for t in range(forest.n_trees):
            out[:, forest.tree_group[t]] += value[leaves[:, t], 0]
    if forest.sum_starts_at_base:
        return out.astype(np.float64)
    return out.astype(np.float64) / forest.output_divisor() + forest.base_score


@define(Op.REPLACE_WITH_NAN)
class ReplaceWithNan(Attrs):
    """Entries equal to ``value`` become NaN (a booster's ``missing`` value). ``compare_dtype``
    (e.g. "float32"): compare after casting the input to it (XGBoost tests float32(x) == missing).
    The output keeps the input's dtype."""

    PER_COLUMN = ()

    value: float
    compare_dtype: str | None = None

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x = ins[0]
        cdt = np.dtype(self.compare_dtype or x.dtype)
        hit = x.astype(cdt, copy=False) == np.asarray(self.value, dtype=cdt)
        return np.where(hit, np.nan, x).astype(x.dtype)


@define(Op.TREE_ENSEMBLE)
class TreeEnsemble(Attrs):
    """The forest's aggregated leaf values plus base score and link-free output (n, outputs)."""

    forest: Forest

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        if not isinstance(self.forest, Forest):
            raise bad(n, "needs a Forest attribute")
        self.forest.validate()
        if ins[0].width is not None and self.forest.n_features > ins[0].width:
            raise ValueError(f"Forest reads {self.forest.n_features} features, input has "
                             f"{ins[0].width}")

    def infer_width(self, widths: list) -> int:
        return int(self.forest.n_outputs)

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        return forest_predict(self.forest, ins[0], options.precision)
