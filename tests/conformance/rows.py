"""Test rows that hit the places converters get wrong: values exactly at split thresholds and one
ulp either side (in float32 and float64), NaN and +-inf where the source accepts them, zeros and
tiny values (LightGBM's zero-as-missing band), and category codes in and out of range."""

from __future__ import annotations

import numpy as np

from peregrine.ir.spec import ModelSpec

DEFAULT_CATEGORY_VALUES = (-1, -0.5, 0, 0.5, 1, 1.7, 2, 3, 5, 31, 32, 33, 63, 64, 1000, 2.0**31)


def edge_rows(spec: ModelSpec, X: np.ndarray, categorical=(), seed: int = 0,
              n_random: int = 64, category_values=None) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = np.asarray(X, dtype=np.float64)
    base = X[rng.integers(0, len(X), size=n_random)].copy()
    rows = [X[: min(len(X), 64)], base]
    numeric = [j for j in range(spec.n_features) if j not in set(categorical)]
    # threshold hits, one ulp below/above in float32 and float64
    for forest in spec.graph.forests():
        internal = np.flatnonzero(forest.feature >= 0)
        if forest.cat_index is not None:
            internal = internal[forest.cat_index[internal] < 0]
        internal = [n for n in internal if forest.feature[n] in numeric]
        if not internal:
            continue
        pick = rng.choice(internal, size=min(96, len(internal)), replace=False)
        for k, node in enumerate(pick):
            t = float(forest.threshold[node])
            if not np.isfinite(t):
                continue
            t32 = np.float32(t)
            candidates = [t, np.nextafter(t, -np.inf), np.nextafter(t, np.inf), float(t32),
                          float(np.nextafter(t32, np.float32(-np.inf))),
                          float(np.nextafter(t32, np.float32(np.inf)))]
            r = base[k % len(base)].copy()
            r[forest.feature[node]] = candidates[k % len(candidates)]
            rows.append(r[None, :])
            r2 = r.copy()
            r2[forest.feature[node]] = candidates[(k + 3) % len(candidates)]
            rows.append(r2[None, :])
    special = [0.0, -0.0, 1e-36, -1e-36, 1e-30]
    if spec.allow_nan:
        special.append(np.nan)
    if spec.allow_inf:
        special += [np.inf, -np.inf]
    for value in special:
        r = base[: min(16, len(base))].copy()
        cols = rng.choice(numeric, size=(len(r), max(1, len(numeric) // 3))) if numeric else None
        if cols is not None:
            for i in range(len(r)):
                r[i, cols[i]] = value
        rows.append(r)
    if spec.allow_nan and numeric:
        r = base[:4].copy()
        r[:, numeric] = np.nan  # all missing
        rows.append(r)
    for j in categorical:
        values = DEFAULT_CATEGORY_VALUES if category_values is None else category_values
        r = base[np.arange(len(values)) % len(base)].copy()
        r[:, j] = values
        if spec.allow_nan:
            r[-1, j] = np.nan
        rows.append(r)
    return np.concatenate(rows, axis=0)
