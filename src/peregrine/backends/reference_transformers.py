"""NumPy rules of the transformer ops (QuantileTransformer, PowerTransformer, KBinsDiscretizer,
SplineTransformer, KNNImputer): part of the reference backend (``reference.py`` imports this
module, so ``RULES`` is complete whenever the reference backend is); split out only to keep
files small."""

from __future__ import annotations

import numpy as np

from peregrine.backends.reference import _f64, rule
from peregrine.backends.reference_models import distance_weights
from peregrine.ir import Node, Op
from peregrine.options import CompileOptions

# ---------------------------------------------------- transformers area rules --
# QuantileTransformer, PowerTransformer, KBinsDiscretizer, SplineTransformer, KNNImputer. Ops
# whose sklearn counterpart writes results back into the (float32 or float64) input array
# store them in the input's dtype, so a float32 input rounds where sklearn's does.

QUANTILE_BOUNDS = 1e-7  # sklearn.preprocessing._data.BOUNDS_THRESHOLD


def _own_dtype(x: np.ndarray) -> np.dtype:
    return np.dtype(np.float32) if x.dtype == np.float32 else np.dtype(np.float64)


@rule(Op.INTERP)
def _interp(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = _f64(ins[0])
    out = np.empty_like(x)
    a = node.attrs
    for j, (xp, fp) in enumerate(zip(a["xp"], a["fp"])):
        out[:, j] = np.interp(x[:, j], _f64(xp), _f64(fp), left=float(a["left"][j]),
                              right=float(a["right"][j]))
    return out


def quantile_clip() -> tuple[float, float]:
    """Where QuantileTransformer clips its normal output (the ppf of the bounds)."""
    from scipy.special import ndtri  # scipy ships with scikit-learn, the only source of QUANTILE

    low = QUANTILE_BOUNDS - np.spacing(1)
    return float(ndtri(low)), float(ndtri(1 - low))


@rule(Op.QUANTILE)
def _quantile(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    # QuantileTransformer._transform_col, forward direction
    dt = _own_dtype(ins[0])
    x = np.asarray(ins[0], dtype=dt)
    refs = _f64(node.attrs["references"])
    normal = node.attrs["output"] == "normal"
    out = np.empty(x.shape, dtype=dt)
    for j, q in enumerate(node.attrs["quantiles"]):
        q, col = _f64(q), x[:, j]
        with np.errstate(invalid="ignore"):
            if normal:  # x -+ 1e-7 in x's own dtype (a float32 array stays float32)
                lower, upper = col - QUANTILE_BOUNDS < q[0], col + QUANTILE_BOUNDS > q[-1]
            else:
                lower, upper = col == q[0], col == q[-1]
        u = 0.5 * (np.interp(col, q, refs) - np.interp(-col, -q[::-1], -refs[::-1]))
        u = u.astype(dt)
        u[upper] = 1.0
        u[lower] = 0.0
        out[:, j] = u
    if not normal:
        return out
    from scipy.special import ndtri  # stats.norm.ppf is ndtri in float64

    with np.errstate(all="ignore"):
        z = ndtri(out.astype(np.float64))
    return np.clip(z, *quantile_clip())


def yeo_johnson(x: np.ndarray, lmbda: float) -> np.ndarray:
    """scipy.stats._morestats._yeojohnson_transform in float64."""
    eps = np.finfo(np.float64).eps
    out = np.zeros_like(x)
    pos = x >= 0  # NaN takes the negative branch and stays NaN
    with np.errstate(all="ignore"):
        if abs(lmbda) < eps:
            out[pos] = np.log1p(x[pos])
        else:
            out[pos] = np.expm1(lmbda * np.log1p(x[pos])) / lmbda
        if abs(lmbda - 2) > eps:
            out[~pos] = -np.expm1((2 - lmbda) * np.log1p(-x[~pos])) / (2 - lmbda)
        else:
            out[~pos] = -np.log1p(-x[~pos])
    return out


def box_cox(x: np.ndarray, lmbda: float) -> np.ndarray:
    """scipy.special.boxcox: log(x) for |lmbda| < 1e-19, else expm1(lmbda log x) / lmbda, with
    the overflow-free form once lmbda log x reaches 709.78."""
    with np.errstate(all="ignore"):
        if abs(lmbda) < 1e-19:
            return np.log(x)
        lx = lmbda * np.log(x)
        big = np.sign(lmbda) * np.exp(lx - np.log(abs(lmbda))) - 1.0 / lmbda
        return np.where(lx < 709.78, np.expm1(lx) / lmbda, big)


@rule(Op.POWER)
def _power(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = _f64(ins[0])
    fn = yeo_johnson if node.attrs["method"] == "yeo-johnson" else box_cox
    out = np.empty_like(x)
    for j, lmbda in enumerate(np.asarray(node.attrs["lambdas"], dtype=np.float64)):
        out[:, j] = fn(x[:, j], float(lmbda))
    return out.astype(_own_dtype(ins[0]))  # sklearn writes X[:, i] = f(X[:, i])


@rule(Op.DIGITIZE)
def _digitize(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = _f64(ins[0])
    out = np.empty_like(x)
    for j, edges in enumerate(node.attrs["edges"]):
        out[:, j] = np.searchsorted(_f64(edges), x[:, j], side="right")
    return out


@rule(Op.RANGE_CHECK)
def _range_check(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = _f64(ins[0])
    with np.errstate(invalid="ignore"):
        bad = (x < _f64(node.attrs["low"])) | (x > _f64(node.attrs["high"]))
    return bad.astype(np.float64)


def bspline_basis(x: np.ndarray, t: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k+1 non-zero B-splines at each x and the knot interval l they start from (scipy's
    find_interval with extrapolation, then _deBoor_D with m=0), vectorised over x."""
    n = len(t) - k - 1
    safe = np.where(np.isnan(x), t[k], x)
    ell = np.clip(np.searchsorted(t, safe, side="right") - 1, k, n - 1)
    h = np.zeros((len(x), k + 1))
    h[:, 0] = 1.0
    with np.errstate(all="ignore"):
        for j in range(1, k + 1):
            hh = h[:, :j].copy()
            h[:, 0] = 0.0
            for m in range(1, j + 1):
                xb, xa = t[ell + m], t[ell + m - j]
                same = xb == xa  # repeated knots: that B-spline is 0
                w = hh[:, m - 1] / (xb - xa)
                h[:, m - 1] = np.where(same, h[:, m - 1], h[:, m - 1] + w * (xb - safe))
                h[:, m] = np.where(same, 0.0, w * (safe - xa))
    return ell, h


def bspline_column(x: np.ndarray, t: np.ndarray, k: int, coef: np.ndarray, mode: str,
                   ends: tuple[np.ndarray, ...], edge: tuple[float, float, int]) -> np.ndarray:
    """SplineTransformer.transform for one column (see Op.BSPLINE)."""
    n = len(t) - k - 1
    lo, hi = t[k], t[n]
    xe = x
    if mode == "periodic":
        with np.errstate(invalid="ignore"):
            xe = lo + np.mod(x - lo, hi - lo) if hi - lo > 0 else np.zeros_like(x)
    ell, h = bspline_basis(xe, t, k)
    basis = np.zeros((len(x), n))
    for a in range(k + 1):
        basis[np.arange(len(x)), ell - k + a] = h[:, a]
    out = basis @ coef[:n]  # coef is 0/1: each output is one basis value (or two, periodic)
    if mode == "error":
        with np.errstate(invalid="ignore"):
            out[~((lo <= x) & (x <= hi))] = np.nan  # extrapolate=False; RANGE_CHECK raises
    elif mode in ("constant", "linear"):
        f_min, f_max, fp_min, fp_max = ends
        lo, hi, reach = edge  # sklearn's xmin, xmax (see Op.BSPLINE)
        with np.errstate(invalid="ignore"):
            inside = (lo <= x) & (x <= hi)
            below, above = x < lo, x > hi
        out[~inside] = 0.0
        s = out.shape[1]
        if mode == "constant":
            if reach > 0:
                out[below, :reach] = f_min[:reach]
                out[above, s - reach:] = f_max[s - reach:]
        else:
            for j in range(reach):
                out[below, j] = f_min[j] + (x[below] - lo) * fp_min[j]
                out[above, s - 1 - j] = f_max[s - 1 - j] + (x[above] - hi) * fp_max[s - 1 - j]
    out[np.isnan(x)] = 0.0  # handle_missing="zeros" (NaN is rejected otherwise)
    return out


@rule(Op.BSPLINE)
def _bspline(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = _f64(ins[0])
    a = node.attrs
    coef = _f64(a["coef"])
    blocks = []
    for j, t in enumerate(a["knots"]):
        ends = tuple(_f64(a[e][j]) for e in ("f_min", "f_max", "fp_min", "fp_max"))
        edge = (float(a["low"][j]), float(a["high"][j]), int(a["reach"][j]))
        blocks.append(bspline_column(x[:, j], _f64(t), int(a["degree"]), coef,
                                     a["extrapolation"], ends, edge))
    return np.concatenate(blocks, axis=1)


def nan_euclidean(X: np.ndarray, F: np.ndarray) -> np.ndarray:
    """sklearn.metrics.pairwise.nan_euclidean_distances(X, F) in its order of operations
    (the expanded squared distance of the zero-filled rows, corrected for missing entries)."""
    mx, mf = np.isnan(X), np.isnan(F)
    X0, F0 = np.where(mx, 0.0, X), np.where(mf, 0.0, F)
    d = -2 * (X0 @ F0.T)
    d += np.einsum("ij,ij->i", X0, X0)[:, None]
    d += np.einsum("ij,ij->i", F0, F0)[None, :]
    np.maximum(d, 0, out=d)
    d -= (X0 * X0) @ mf.T
    d -= mx @ (F0 * F0).T
    np.clip(d, 0, None, out=d)
    present = (~mx).astype(np.float64) @ (~mf).T.astype(np.float64)
    d[present == 0] = np.nan
    d /= np.maximum(1, present)
    d *= X.shape[1]
    return np.sqrt(d)


def knn_weights(dist: np.ndarray, weights: str) -> np.ndarray:
    """neighbors._base._get_weights, then KNNImputer's NaN (no distance) -> weight 0."""
    if weights == "uniform":
        return np.where(np.isnan(dist), 0.0, 1.0)
    w = distance_weights(dist)
    return np.where(np.isnan(w), 0.0, w)


@rule(Op.KNN_IMPUTE)
def _knn_impute(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    a = node.attrs
    x, F = _f64(ins[0]), _f64(a["fit_X"])
    out = x.copy()
    cols = [int(c) for c in a["columns"]]
    rows = np.flatnonzero(np.isnan(x[:, cols]).any(axis=1))
    if rows.size == 0:
        return out
    dist = nan_euclidean(x[rows], F)
    for c in cols:
        recv = np.isnan(x[rows, c])
        donors = np.flatnonzero(~np.isnan(F[:, c]))
        if not recv.any():
            continue
        sub = dist[recv][:, donors]
        k = min(int(a["n_neighbors"]), len(donors))
        idx = np.argsort(sub, axis=1, kind="stable")[:, :k]  # NaN sorts last
        d = np.take_along_axis(sub, idx, axis=1)
        w = knn_weights(d, a["weights"])
        with np.errstate(invalid="ignore", divide="ignore"):
            value = (F[donors, c][idx] * w).sum(axis=1) / w.sum(axis=1)
        value[np.isnan(sub).all(axis=1)] = float(a["fill"][c])  # no distance to any donor
        out[rows[recv], c] = value
    return out
