"""The KNN op (KNeighborsClassifier/Regressor): its definition and NumPy rule, which the
native backend runs and the torch lowering mirrors (taking EPS, ERROR_BOUND and
EXTRA_CANDIDATES from here).

What it computes (the specification, ``Op.KNN``): the distance of each row to every fitted row
from the per-pair differences (``sqrt(sum (x - v)**2)`` for euclidean, as a KD/ball tree
does), the k smallest with ties to the lowest index (a stable sort's first k), then the
weighted average of their values.

How, without an (n, m, d) difference tensor and a full sort per row:

- euclidean (and minkowski p=2): squared distances in the expanded form ``|x|^2 - 2 x.v +
  |v|^2`` (one BLAS product, as sklearn's brute force) pick ``K = 2k + 16`` candidates per
  row; only the candidates' distances are computed from their differences, and the k nearest
  are taken among them. That is the specification's answer whenever no other fitted row can
  be as near as the k-th, which each row checks: every non-candidate has an expanded distance
  at least the K-th smallest, so an exact one at least that minus the expanded form's rounding
  bound (``ERROR_BOUND``). Rows that fail the check (near-ties that close, overflow) are
  recomputed the specification's way.
- other metrics: every distance from the differences, in row chunks, then the k smallest by
  a partition (the k-th value), not a sort.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.ir.ops import Op
from peregrine.ir.semantics.base import Attrs, array, bad, choice, define, f64, integer, real
from peregrine.ir.semantics.kernels import l2_rows, row_chunks
from peregrine.options import CompileOptions

DISTANCE_METRICS = ("euclidean", "manhattan", "chebyshev", "minkowski", "cosine")
NEIGHBOUR_WEIGHTS = ("uniform", "distance")
EPS = float(np.finfo(np.float64).eps)
# |expanded - exact| <= ERROR_BOUND * (d + 4) * eps * (|x|^2 + max |v|^2): a dot product's
# rounding error is at most d eps |x||v| (any summation order, FMA or not), each squared norm's
# d eps |x|^2, and the difference form's own sum (d + 1) eps (|x| + |v|)^2; 8 covers them with
# room to spare.
ERROR_BOUND = 8.0
EXTRA_CANDIDATES = 16

# The metrics a compiled kernel computes the rule's way, distance by distance from the
# differences in the rule's NumPy order (backends/tvm/knn.py, kernels/knn.py):
# each sum is written out term by term, so rows up to this many features. The others (cosine's
# BLAS product, minkowski's pow for p other than 1 and 2) run this rule.
KERNEL_MAX_FEATURES = 256
# Euclidean distances: on wide rows or large fitted sets the rule's search (one BLAS product
# over blocks, then the candidates' differences) beats every difference computed directly,
# which reads all the fitted rows for each group of query rows. Measured on AMD EPYC family
# 26, one thread, 2,000 query rows, fitted rows x features, native kernel s / rule s: 5K x 20
# 0.011 / 0.066, 10K x 64 0.098 / 0.126, 10K x 128 0.222 / 0.178, 50K x 50 0.487 / 0.613,
# 50K x 96 1.78 / 0.75, 20K x 200 1.25 / 0.51. The other metrics' rule computes every
# difference too, through temporaries: always the kernel.
KERNEL_EUCLIDEAN_FEATURES = 64
KERNEL_EUCLIDEAN_VALUES = 1 << 22  # fitted rows x features (32 MiB of doubles)


def metric_form(attrs: Any) -> str | None:
    """The form a kernel computes the KNN node ``attrs`` in, or None where none does:
    "euclidean" (sqrt of einsum's sum of squares), "minkowski2" (sqrt of the pairwise sum of
    squares), "manhattan" (the pairwise sum of absolute values; minkowski p=1 too),
    "chebyshev"."""
    metric, d = str(attrs.metric), int(np.shape(attrs.vectors)[1])
    if metric == "minkowski":
        form = {1.0: "manhattan", 2.0: "minkowski2"}.get(float(attrs.p))
    else:
        form = metric if metric in ("euclidean", "manhattan", "chebyshev") else None
    return None if d > KERNEL_MAX_FEATURES else form


def rule_search_slower(m: int, d: int) -> bool:
    """Whether a kernel computing every euclidean distance beats this rule's search on m
    fitted rows of d features (the measurements above)."""
    return d <= KERNEL_EUCLIDEAN_FEATURES and m * d <= KERNEL_EUCLIDEAN_VALUES


def kernel_form(attrs: Any, kernel_faster: Any = rule_search_slower) -> str | None:
    """``metric_form``, or None where the search beats computing every distance: for
    euclidean distances (minkowski p=2 too) where ``kernel_faster(m, d)`` is false; the
    backend's own search may be faster than this rule's (kernels/knn_search.py)."""
    form = metric_form(attrs)
    m, d = np.shape(attrs.vectors)
    if form in ("euclidean", "minkowski2") and not kernel_faster(int(m), int(d)):
        return None
    return form


_REDUCE = {
    "euclidean": lambda d: np.sqrt(np.einsum("ijk,ijk->ij", d, d)),
    "manhattan": lambda d: np.abs(d).sum(axis=2),
    "chebyshev": lambda d: np.abs(d).max(axis=2),
}


def _from_differences(d: np.ndarray, metric: str, p: float) -> np.ndarray:
    """(rows, vectors, features) differences -> (rows, vectors) distances."""
    if metric == "minkowski":
        return (np.abs(d) ** p).sum(axis=2) ** (1.0 / p)
    return _REDUCE[metric](d)


def distances(x: np.ndarray, v: np.ndarray, metric: str, p: float) -> np.ndarray:
    """Every row's distance to every vector, the specification's way: (n, m)."""
    if metric == "cosine":  # cosine_distances: S = -cos; S += 1; clip to [0, 2]
        return np.clip(1.0 - l2_rows(x) @ l2_rows(v).T, 0.0, 2.0)
    out = np.empty((x.shape[0], v.shape[0]))
    with np.errstate(over="ignore"):  # huge inputs: inf distances, as sklearn's
        for sl in row_chunks(x.shape[0], v.shape[0] * v.shape[1]):
            out[sl] = _from_differences(x[sl, None, :] - v[None, :, :], metric, p)
    return out


def smallest(dist: np.ndarray, k: int) -> np.ndarray:
    """Column indices of each row's k smallest values, ordered by (value, index): what a
    stable argsort's first k columns are, by a partition instead of a sort."""
    n, m = dist.shape
    if k >= m or n == 0:
        return np.argsort(dist, axis=1, kind="stable")[:, :k]
    kth = np.partition(dist, k - 1, axis=1)[:, k - 1:k]
    if np.isnan(kth).any():  # fewer than k numbers in some row: NaN order is the sort's
        return np.argsort(dist, axis=1, kind="stable")[:, :k]
    less, tie = dist < kth, dist == kth
    room = k - less.sum(axis=1, keepdims=True)  # ties at the k-th value: lowest indices
    take = less | (tie & (np.cumsum(tie, axis=1) <= room))
    cols = np.nonzero(take)[1].reshape(n, k)  # row-major: ascending index within a row
    order = np.argsort(np.take_along_axis(dist, cols, axis=1), axis=1, kind="stable")
    return np.take_along_axis(cols, order, axis=1)


def expanded_candidates(xb: np.ndarray, v: np.ndarray, vv: np.ndarray, n_cand: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """The euclidean search's first step for rows ``xb`` against fitted rows ``v`` (squared
    norms ``vv``): each row's ``n_cand`` smallest expanded squared distances ``((x.v * -2) +
    |x|^2) + |v|^2`` (any of them where values tie), and a lower bound on every other fitted
    row's squared distance (``expanded_lower``). Returns (candidates (rows, n_cand), lower).
    The native backend computes the same from the product with a kernel
    (kernels/knn_search.py); which of tied candidates is taken does not change
    ``nearest``'s answer."""
    xx = np.einsum("ij,ij->i", xb, xb)
    with np.errstate(over="ignore", invalid="ignore"):
        approx = xb @ v.T
        approx *= -2.0
        approx += xx[:, None]
        approx += vv
        cand = np.argpartition(approx, n_cand - 1, axis=1)[:, :n_cand]
        bound = np.take_along_axis(approx, cand, axis=1).max(axis=1)
        finite = np.isfinite(approx).all(axis=1)
    return cand, expanded_lower(bound, finite, xx, float(vv.max()), v.shape[1])


def expanded_lower(bound: np.ndarray, finite: np.ndarray, xx: np.ndarray, vv_max: float,
                   d: int) -> np.ndarray:
    """Per row, a lower bound on the squared distance (the specification's sum of squared
    differences) of every fitted row that is not a candidate: each has an expanded value at
    least ``bound``, which errs by at most the margin; -inf where some expanded value is not
    finite (no bound)."""
    with np.errstate(over="ignore", invalid="ignore"):
        lower = bound - ERROR_BOUND * (d + 4) * EPS * (xx + vv_max)
    return np.where(finite, lower, -np.inf)


def nearest(x: np.ndarray, v: np.ndarray, metric: str, p: float, k: int,
            candidates: Any = None, redo: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """(distances, indices) of each row's k nearest vectors, nearest first, ties by index.

    Euclidean distances (minkowski p=2 too) are searched: ``candidates(rows, n_cand)`` gives
    each row's candidates and a lower bound on every other fitted row's squared distance
    (``expanded_candidates`` by default); the k nearest candidates are the answer where the
    bound is above the k-th's squared distance, and the other rows are answered by
    ``redo(rows)`` ((distances, indices); by default every distance computed)."""
    n, m = x.shape[0], v.shape[0]
    n_cand = min(m, 2 * k + EXTRA_CANDIDATES)

    def every_distance(xr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dist_all = distances(xr, v, metric, p)
        r_idx = smallest(dist_all, k)
        return np.take_along_axis(dist_all, r_idx, axis=1), r_idx

    if not (metric == "euclidean" or (metric == "minkowski" and p == 2.0)) or n_cand >= m:
        return every_distance(x)
    if candidates is None:
        vv = np.einsum("ij,ij->i", v, v)

        def candidates(xb: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
            return expanded_candidates(xb, v, vv, count)
    redo = redo or every_distance
    dist, idx = np.empty((n, k)), np.empty((n, k), dtype=np.int64)
    for sl in row_chunks(n, m):
        xb = x[sl]
        cand, lower = candidates(xb, n_cand)
        with np.errstate(over="ignore", invalid="ignore"):
            cand.sort(axis=1)  # index order: the stable sort below breaks ties by index
            d = _from_differences(xb[:, None, :] - v[cand], metric, p)
            order = np.argsort(d, axis=1, kind="stable")[:, :k]
            near, near_idx = np.take_along_axis(d, order, axis=1), np.take_along_axis(
                cand, order, axis=1)
            # strictly above the k-th's (with a few ulps for the root's rounding), no other
            # fitted row can be chosen
            safe = lower > near[:, -1] ** 2 * (1.0 + 8.0 * EPS)
        if not safe.all():
            rows = np.flatnonzero(~safe)
            near[rows], near_idx[rows] = redo(xb[rows])
        dist[sl], idx[sl] = near, near_idx
    return dist, idx


def distance_weights(dist: np.ndarray) -> np.ndarray:
    """neighbors._base._get_weights(dist, "distance"): 1 / dist per neighbour; a row with a
    zero distance weighs its zero-distance neighbours 1 and the others 0."""
    with np.errstate(divide="ignore"):
        w = 1.0 / dist
    inf = np.isinf(w)
    return np.where(inf.any(axis=1, keepdims=True), inf.astype(np.float64), w)


@define(Op.KNN)
class Knn(Attrs):
    """(n, d) -> (n, w): each row's distances (``metric``, ``p`` for minkowski) to the m
    fitted ``vectors`` (m, d) from the per-pair differences (cosine as sklearn's
    cosine_distances: 1 - normalized dot, clipped to [0, 2]); the ``k`` smallest (ties: lowest
    index first, a stable sort's first k); ``weights`` 1 or 1/dist (rows with a zero distance:
    1 for zero distances, 0 for the rest); output sum_i w_i * values[idx_i] divided by
    sum_i w_i, or when ``normalize`` by the row sum of that (0 -> 1), as
    KNeighborsClassifier.predict_proba. ``values`` is (m, w)."""

    vectors: Any
    values: Any
    k: int
    metric: str = "euclidean"
    p: float = 2.0
    weights: str = "uniform"
    normalize: bool = False

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        m = array(n, "vectors", self.vectors, (None, ins[0].width), finite=True).shape[0]
        if choice(n, "metric", self.metric, DISTANCE_METRICS) == "minkowski" and real(
                n, "p", self.p) < 1:
            raise bad(n, "minkowski p must be >= 1")
        integer(n, "k", self.k, 1, m)
        choice(n, "weights", self.weights, NEIGHBOUR_WEIGHTS)
        array(n, "values", self.values, (m, None))
        if not isinstance(self.normalize, bool):
            raise bad(n, "normalize must be a bool")

    def infer_width(self, widths: list) -> int:
        return int(np.shape(self.values)[1])

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        return self.combine(*nearest(f64(ins[0]), f64(self.vectors), self.metric,
                                     float(self.p), int(self.k)))

    def combine(self, near: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """The output from each row's k nearest (distances, indices), nearest first."""
        w = distance_weights(near) if self.weights == "distance" else np.ones(idx.shape)
        values = f64(self.values)
        out = np.zeros((idx.shape[0], values.shape[1]))
        for i in range(idx.shape[1]):  # neighbour order, as sklearn accumulates
            out += w[:, i:i + 1] * values[idx[:, i]]
        if self.normalize:
            total = out.sum(axis=1, keepdims=True)
            return out / np.where(total == 0.0, 1.0, total)
        return out / w.sum(axis=1, keepdims=True)
