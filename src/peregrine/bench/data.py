"""Rows to benchmark on when the user has none: synthetic, but shaped by the model.

Standard-normal rows would send almost every row down the same path when a feature's split
points sit far from 0 (prices, counts), and that would time an unrealistically easy workload.
When Peregrine can read the model, each feature is drawn uniformly over the span of the
thresholds the trees use for it (padded by 10% each side, so both sides of the extreme splits
are visited); categorical split features get small non-negative integer codes.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def synthetic_rows(
    model: Any, n_rows: int, n_features: int, *, seed: int = 0, dtype: Any = np.float32
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    spans = _threshold_spans(model, n_features)
    for j, (lo, hi, categorical) in spans.items():
        if categorical:
            X[:, j] = rng.integers(0, max(2, int(hi) + 2), size=n_rows)
        else:
            pad = 0.1 * (hi - lo) if hi > lo else max(1.0, abs(lo))
            X[:, j] = rng.uniform(lo - pad, hi + pad, size=n_rows)
    return X.astype(dtype)


def _threshold_spans(model: Any, n_features: int) -> dict[int, tuple[float, float, bool]]:
    """feature -> (lowest threshold, highest threshold, is categorical) over every tree."""
    try:
        from peregrine.frontends import convert
        from peregrine.ir import Op

        spec = convert(model)
    except Exception:  # noqa: BLE001 - no frontend for it: plain normal rows it is
        return {}
    spans: dict[int, tuple[float, float, bool]] = {}
    for node in spec.graph.nodes:
        if node.op is not Op.TREE_ENSEMBLE:
            continue
        forest = node.attrs.forest
        categorical = (forest.cat_index >= 0) if forest.cat_index is not None else None
        for j in np.unique(forest.feature[forest.feature >= 0]):
            mask = forest.feature == j
            if categorical is not None and categorical[mask].any():
                spans[int(j)] = (0.0, float(forest.n_cat_bits - 1), True)
                continue
            thr = forest.threshold[mask]
            thr = thr[np.isfinite(thr)]
            if thr.size and 0 <= j < n_features:
                old = spans.get(int(j))
                lo, hi = float(thr.min()), float(thr.max())
                if old is not None and not old[2]:
                    lo, hi = min(lo, old[0]), max(hi, old[1])
                spans[int(j)] = (lo, hi, False)
    return spans
