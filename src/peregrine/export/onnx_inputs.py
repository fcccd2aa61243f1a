"""What the ONNX export validates on and records about its input: the generated validation
rows (``validation_rows``, also the shared-library export's), the model validated against
(``rules_twin``) and the category columns' codes in the file's metadata
(``categories_metadata``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.ir.ops import Op


def validation_rows(compiled: Any, n: int = 512, seed: int = 0) -> np.ndarray:
    """Rows to validate on when the caller gives none: per column, values the model's trees
    split at (each threshold and its float32/float64 neighbours) mixed with normal draws, NaN
    and +-inf where the source accepts them."""
    spec = compiled.spec
    rng = np.random.default_rng(seed)
    d = spec.n_features
    X = rng.normal(0.0, 2.0, size=(n, d))
    pools: list[list[float]] = [[] for _ in range(d)]
    for f in spec.graph.forests():
        if f.n_features != d:
            continue
        internal = f.feature >= 0
        for j, t in zip(f.feature[internal], f.threshold[internal]):
            # scikit-learn splits non-missing from missing values at threshold +inf: no
            # edge to probe there, and inf is no row for a source that rejects it
            if np.isfinite(t):
                pools[j].append(float(t))
    for j, pool in enumerate(pools):
        if pool:
            t = rng.choice(np.asarray(pool), size=n)
            with np.errstate(over="ignore"):
                t32 = t.astype(np.float32)
                cand = np.stack([t, np.nextafter(t, -np.inf), np.nextafter(t, np.inf), t32,
                                 np.nextafter(t32, np.float32(-np.inf)).astype(np.float64),
                                 np.nextafter(t32, np.float32(np.inf)).astype(np.float64)], 1)
            # a threshold past float32's range has no float32 neighbours: probe it instead
            cand = np.where(np.isfinite(cand), cand, t[:, None])
            pick = cand[np.arange(n), rng.integers(0, cand.shape[1], n)]
            X[:, j] = np.where(rng.random(n) < 0.8, pick, X[:, j])
    # codes: each category, missing / unseen NaN; after the thresholds, which index the
    # forests' own features (a pipeline's encoded columns), not necessarily these columns
    for j, cats in spec.category_maps.items():
        codes = rng.integers(0, max(len(cats), 1), n).astype(np.float64)
        X[:, j] = np.where(rng.random(n) < 0.1, np.nan, codes)
    if spec.allow_nan:
        X[rng.random((n, d)) < 0.08] = np.nan
    if spec.allow_inf:
        X[rng.random((n, d)) < 0.01] = np.inf
        X[rng.random((n, d)) < 0.01] = -np.inf
    return X


def categories_metadata(spec: Any) -> dict[str, str]:
    """``peregrine.category_codes.<column>``: a JSON list of the column's categories in code
    order (code = position), for each string / pandas category column, whose codes the
    file's X holds (NaN for a missing or unseen value). JSON has one null, and a pipeline's
    vocabulary holds two missing categories (code 0 NaN, 1 None, as scikit-learn tells them
    apart), so a missing category is a one-key object: ``{"missing": "nan"}`` or
    ``{"missing": "none"}`` (``categories_from_metadata`` reads them back)."""
    import json

    out = {}
    for c, cats in sorted(spec.category_maps.items()):
        name = spec.feature_names[c] if spec.feature_names else str(c)
        out[f"peregrine.category_codes.{name}"] = json.dumps(
            [_MISSING_NAN if _is_nan(v) else _MISSING_NONE if v is None else
             (v.item() if isinstance(v, np.generic) else v) for v in cats], default=str)
    return out


_MISSING_NAN, _MISSING_NONE = {"missing": "nan"}, {"missing": "none"}


def _is_nan(v: Any) -> bool:
    return isinstance(v, (float, np.floating)) and v != v


def categories_from_metadata(value: str) -> tuple[Any, ...]:
    """A ``peregrine.category_codes.<column>`` value as the categories it lists (NaN and None
    for the missing categories), for a caller encoding its own rows."""
    import json

    return tuple(float("nan") if v == _MISSING_NAN else None if v == _MISSING_NONE else v
                 for v in json.loads(value))


def rules_twin(compiled: Any) -> Any:
    """The model to validate against: ``compiled`` itself, or for a network (DENSE, ACTIVATION,
    BATCH_NORM) compiled with a backend running torch's kernels, the same program on the
    reference backend: the file reproduces the rules (NumPy's float32 sums), and torch's MKL
    sums differ in last bits, which a forest after the network turns into other branches on
    rows at its thresholds (docs/export.md, "Networks and the compiled model's backend")."""
    if compiled.backend == "reference" or not any(
            n.op in (Op.DENSE, Op.ACTIVATION, Op.BATCH_NORM)
            for n in compiled.spec.graph.toposort()):
        return compiled
    return compiled.rebuild("reference")
