"""Transformer ops (QuantileTransformer, PowerTransformer, KBinsDiscretizer,
SplineTransformer, KNNImputer): definitions and NumPy rules. Ops whose sklearn counterpart
writes results back into the (float32 or float64) input array store them in the input's
dtype, so a float32 input rounds where sklearn's does."""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.ir.ops import Op
from peregrine.ir.semantics.base import (
    Attrs,
    array,
    ascending,
    bad,
    choice,
    define,
    f64,
    indices,
    integer,
    per_column,
    tables,
)
from peregrine.ir.semantics.neighbours import NEIGHBOUR_WEIGHTS, distance_weights
from peregrine.options import CompileOptions

QUANTILE_BOUNDS = 1e-7  # sklearn.preprocessing._data.BOUNDS_THRESHOLD
EXTRAPOLATIONS = ("error", "continue", "periodic", "constant", "linear")


def _own_dtype(x: np.ndarray) -> np.dtype:
    return np.dtype(np.float32) if x.dtype == np.float32 else np.dtype(np.float64)


@define(Op.INTERP)
class Interp(Attrs):
    """Column j -> np.interp(x, xp[j], fp[j], left[j], right[j]) exactly (one 1-D float64
    table per input column; xp non-decreasing, lengths may differ between columns): with i
    the last index where xp[i] <= x, x < xp[0] -> left, x > xp[-1] -> right, x == xp[i] ->
    fp[i] (the last of repeated xp), else slope * (x - xp[i]) + fp[i]; NaN -> NaN (a
    one-point table maps NaN to fp[0], as numpy)."""

    PER_COLUMN = ("xp", "fp", "left", "right")

    xp: Any
    fp: Any
    left: Any
    right: Any

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        xp, fp = tables(n, "xp", self.xp, ins[0].width), tables(n, "fp", self.fp, ins[0].width)
        if len(xp) != len(fp):
            raise bad(n, "xp and fp list different numbers of columns")
        for x, f in zip(xp, fp):
            if x.size == 0 or x.shape != f.shape:
                raise bad(n, "a column's xp and fp differ in length or are empty")
            ascending(n, "xp", x)
        array(n, "left", self.left, (len(xp),))
        array(n, "right", self.right, (len(xp),))

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        cols = f64(ins[0]).T.copy()  # each column contiguous: np.interp reads it in order
        out = np.empty_like(cols)
        for j, (xp, fp) in enumerate(zip(self.xp, self.fp)):
            xp, fp = f64(xp), f64(fp)
            left, right = float(self.left[j]), float(self.right[j])
            if not _positional(xp, fp, cols[j], left, right, out[j]):
                out[j] = np.interp(cols[j], xp, fp, left=left, right=right)
        return np.ascontiguousarray(out.T)


def _positional(xp: np.ndarray, fp: np.ndarray, x: np.ndarray, left: float, right: float,
                out: np.ndarray) -> bool:
    """np.interp through a table with xp = 0, 1, ..., n-1 (lookup tables keyed by small
    integers, catboost_ctr.py): an integer x in [0, n) is xp[x], where np.interp returns fp[x]
    exactly, so it is read by position; any other x (NaN, fractions, outside) goes through
    np.interp. Fills ``out``; False (nothing written) for any other table."""
    n = xp.size
    if n < 2 or xp[0] != 0.0 or xp[-1] != n - 1 or not np.array_equal(xp, np.arange(n)):
        return False
    with np.errstate(invalid="ignore"):
        i = x.astype(np.int64)  # NaN and out-of-range values give junk, caught below
    hit = (i == x) & (i >= 0) & (i < n)
    np.take(fp, np.where(hit, i, 0), out=out)
    if not hit.all():
        miss = ~hit
        out[miss] = np.interp(x[miss], xp, fp, left=left, right=right)
    return True


def quantile_clip() -> tuple[float, float]:
    """Where QuantileTransformer clips its normal output (the ppf of the bounds)."""
    from scipy.special import ndtri  # scipy ships with scikit-learn, the only source of QUANTILE

    low = QUANTILE_BOUNDS - np.spacing(1)
    return float(ndtri(low)), float(ndtri(1 - low))


@define(Op.QUANTILE)
class Quantile(Attrs):
    """QuantileTransformer._transform_col (forward): 0.5 * (interp(x, q, r) -
    interp(-x, -q[::-1], -r[::-1])) with ``quantiles`` q per column (ascending) and the
    shared ``references`` r, stored in the input's dtype; bounds set to 0/1 (x == q[0] /
    q[-1] for ``output="uniform"``; x -+ 1e-7 beyond them, computed in the input's dtype, for
    "normal"); normal: ndtri clipped to ndtri(1e-7 - eps), ndtri(1 - (1e-7 - eps)). NaN
    passes through."""

    PER_COLUMN = ("quantiles",)

    quantiles: Any
    references: Any
    output: str = "uniform"

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        refs = array(n, "references", self.references, (None,), finite=True)
        ascending(n, "references", refs)
        for q in tables(n, "quantiles", self.quantiles, ins[0].width):
            if q.shape != refs.shape:
                raise bad(n, f"a column has {q.size} quantiles for {refs.size} references")
            ascending(n, "quantiles", q)
        choice(n, "output", self.output, ("uniform", "normal"))

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        dt = _own_dtype(ins[0])
        x = np.asarray(ins[0], dtype=dt)
        refs = f64(self.references)
        normal = self.output == "normal"
        out = np.empty(x.shape, dtype=dt)
        for j, q in enumerate(self.quantiles):
            q, col = f64(q), x[:, j]
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


@define(Op.POWER)
class Power(Attrs):
    """``method`` "yeo-johnson" | "box-cox" with one lambda per column: scipy's yeojohnson /
    special.boxcox formulas and branches in float64, stored in the input's dtype; NaN -> NaN."""

    PER_COLUMN = ("lambdas",)

    method: str
    lambdas: Any

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        choice(n, "method", self.method, ("yeo-johnson", "box-cox"))
        array(n, "lambdas", self.lambdas, (ins[0].width,), finite=True)

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x = f64(ins[0])
        fn = yeo_johnson if self.method == "yeo-johnson" else box_cox
        out = np.empty_like(x)
        for j, lmbda in enumerate(np.asarray(self.lambdas, dtype=np.float64)):
            out[:, j] = fn(x[:, j], float(lmbda))
        return out.astype(_own_dtype(ins[0]))  # sklearn writes X[:, i] = f(X[:, i])


@define(Op.DIGITIZE)
class Digitize(Attrs):
    """Per column, the count of ``edges`` (ascending) <= x: np.searchsorted(edges, x,
    side="right") as float64 (NaN -> len(edges))."""

    PER_COLUMN = ("edges",)

    edges: Any

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        for e in tables(n, "edges", self.edges, ins[0].width):
            ascending(n, "edges", e)

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x = f64(ins[0])
        out = np.empty_like(x)
        for j, edges in enumerate(self.edges):
            out[:, j] = np.searchsorted(f64(edges), x[:, j], side="right")
        return out


@define(Op.RANGE_CHECK)
class RangeCheck(Attrs):
    """1.0 where x < low or x > high (per column or scalar), else 0.0 (NaN -> 0.0). Used as
    an INPUT_ERRORS check (rows sklearn rejects: Box-Cox x <= 0, spline knots)."""

    low: Any
    high: Any

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        per_column(n, "low", self.low, ins[0].width)
        per_column(n, "high", self.high, ins[0].width)

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x = f64(ins[0])
        with np.errstate(invalid="ignore"):
            out = (x < f64(self.low)) | (x > f64(self.high))
        return out.astype(np.float64)


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


@define(Op.BSPLINE)
class Bspline(Attrs):
    """SplineTransformer.transform. Per input column j: ``knots[j]`` (the BSpline's t), the
    shared ``degree`` and ``coef`` (rows, n_splines), ``extrapolation`` ("error" | "continue"
    | "periodic" | "constant" | "linear"), ``f_min``, ``f_max``, ``fp_min``, ``fp_max``
    (per column (n_splines,) arrays: spline values and slopes at low and high), ``low``,
    ``high``, ``reach`` (per column: the range constant/linear extrapolate beyond and how many
    end splines they set; sklearn's degree <= 1 increment leaks into later columns, hence per
    column). Output (n, columns * n_splines): column j's block is scipy BSpline(t, coef,
    degree)(x) by de Boor's recursion (periodic: x wrapped first; error: NaN outside
    [t[k], t[n]]; constant/linear: outside rows as sklearn sets them). NaN input -> zeros."""

    knots: Any
    degree: int
    coef: Any
    extrapolation: str
    f_min: Any
    f_max: Any
    fp_min: Any
    fp_max: Any
    low: Any
    high: Any
    reach: Any

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        knots = tables(n, "knots", self.knots, ins[0].width)
        k = integer(n, "degree", self.degree, 0)
        coef = array(n, "coef", self.coef, (None, None), finite=True)
        s = coef.shape[1]
        for t in knots:  # one (columns, knots) table in the torch lowering: one length
            if t.shape != knots[0].shape or t.size < 2 * k + 2 or t.size - k - 1 > coef.shape[0]:
                raise bad(n, "knot vectors differ in length or do not fit degree and coef")
            ascending(n, "knots", t)
        choice(n, "extrapolation", self.extrapolation, EXTRAPOLATIONS)
        for key in ("f_min", "f_max", "fp_min", "fp_max"):
            array(n, key, getattr(self, key), (len(knots), s))
        array(n, "low", self.low, (len(knots),))
        array(n, "high", self.high, (len(knots),))
        reach = array(n, "reach", self.reach, (len(knots),))
        if np.any((reach < 0) | (reach > s) | (reach != np.round(reach))):
            raise bad(n, f"reach must hold integers in [0, {s}]")

    def infer_width(self, widths: list) -> int:
        return len(self.knots) * int(np.shape(self.coef)[1])

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x = f64(ins[0])
        coef = f64(self.coef)
        blocks = []
        for j, t in enumerate(self.knots):
            ends = tuple(f64(getattr(self, e)[j]) for e in ("f_min", "f_max", "fp_min",
                                                            "fp_max"))
            edge = (float(self.low[j]), float(self.high[j]), int(self.reach[j]))
            blocks.append(bspline_column(x[:, j], f64(t), int(self.degree), coef,
                                         self.extrapolation, ends, edge))
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


@define(Op.KNN_IMPUTE)
class KnnImpute(Attrs):
    """KNNImputer.transform: nan_euclidean distances to ``fit_X`` (m, d) with NaN
    (sklearn's expanded formula); each NaN in a listed column (``columns``) gets the weighted
    (``weights`` "uniform" | "distance") mean of the ``n_neighbors`` nearest fit rows having
    that column (ties: lower row index first; NaN distances weigh 0), or ``fill[column]`` when
    no donor has a distance (sklearn's masked column mean). Width d: other entries pass
    through."""

    fit_X: Any
    n_neighbors: int
    weights: str
    columns: Any
    fill: Any

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        fit = array(n, "fit_X", self.fit_X, (None, ins[0].width))
        integer(n, "n_neighbors", self.n_neighbors, 1)
        choice(n, "weights", self.weights, NEIGHBOUR_WEIGHTS)
        cols = indices(n, "columns", self.columns, fit.shape[1])
        if len(set(cols.tolist())) != cols.size:
            raise bad(n, "columns repeats a column")
        array(n, "fill", self.fill, (fit.shape[1],))

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x, F = f64(ins[0]), f64(self.fit_X)
        out = x.copy()
        cols = [int(c) for c in self.columns]
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
            k = min(int(self.n_neighbors), len(donors))
            idx = np.argsort(sub, axis=1, kind="stable")[:, :k]  # NaN sorts last
            d = np.take_along_axis(sub, idx, axis=1)
            w = knn_weights(d, self.weights)
            with np.errstate(invalid="ignore", divide="ignore"):
                value = (F[donors, c][idx] * w).sum(axis=1) / w.sum(axis=1)
            value[np.isnan(sub).all(axis=1)] = float(self.fill[c])  # no distance to any donor
            out[rows[recv], c] = value
        return out
