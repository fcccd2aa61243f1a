"""ONNX lowering of KNN (KNeighborsClassifier/Regressor, ``ir/semantics/neighbours.py``), in
double, following the rule's steps:

- euclidean (and minkowski p=2) with more fitted rows than ``K = 2k + 16``: the expanded
  squared distance ``|x|^2 - 2 x.v + |v|^2`` (one MatMul) picks K candidates per row (TopK);
  the candidates, put in index order, get their distances from the differences, and TopK
  takes the k nearest (ONNX's TopK breaks ties by the lower index, as the rule's stable sort
  of index-ordered candidates). Each row checks the rule's bound (no non-candidate can be as
  near as the k-th: ``neighbours.ERROR_BOUND``); rows that fail it (near-ties that close,
  overflow) are recomputed from every distance in an ``If`` that batches without such rows
  skip.
- other metrics, or few fitted rows: every distance (a (rows, fitted rows, features)
  difference tensor; cosine through a MatMul of l2-normalised rows, clipped to [0, 2] as
  sklearn's cosine_distances), then TopK.
- weights 1 or 1/dist (a row with a zero distance: 1 for zero distances, 0 for the rest),
  and the weighted values added neighbour by neighbour in the rule's order (``out += w_i *
  values[idx_i]``), divided by the weights' sum or, for class probabilities, the row sum.

Distances from differences add the features' squares (or absolute values) left to right,
the same for every fitted row (``_sum_features``); NumPy's einsum may group a long sum
otherwise, a few ulps apart, so two fitted rows whose distances to a row are that close may be
ordered differently (a tie only within rounding; exact ties, as duplicated fitted rows, give
equal sums on both sides and go to the lower index). The export's validation
runs the model's own rows. Memory: the every-distance form holds rows x fitted rows x features
doubles (the candidate form rows x K x features)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from peregrine.export.onnx_graph import Emitter, lowering
from peregrine.ir.ops import Op
from peregrine.ir.semantics.neighbours import EPS, ERROR_BOUND, EXTRA_CANDIDATES

DOUBLE = TensorProto.DOUBLE


def _k(v: float) -> np.ndarray:
    return np.asarray(float(v))


def _axes(e: Emitter, *axes: int) -> str:
    return e.const(np.asarray(axes, np.int64))


def _np_l2_rows(v: np.ndarray) -> np.ndarray:
    n = np.sqrt(np.einsum("ij,ij->i", v, v))
    return v / np.where(n == 0.0, 1.0, n)[:, None]


def _sum_features(e: Emitter, t: str, f: int) -> str:
    """(n, m, f) -> (n, m): feature by feature, left to right. Not ReduceSum: ONNX Runtime's
    groups a sum by the element's position in memory (measured: duplicated fitted rows got
    distances an ulp apart, which reordered exact ties), and a fitted row's distance must not
    depend on where it sits."""
    slabs = e.op("Transpose", [t], perm=[2, 0, 1])  # (f, n, m): each feature contiguous
    acc = None
    for j in range(f):
        term = e.op("Gather", [slabs, e.const(np.asarray(j, np.int64))], axis=0)
        acc = term if acc is None else e.op("Add", [acc, term])
    assert acc is not None
    return acc


def _from_differences(e: Emitter, d: str, metric: str, p: float, f: int) -> str:
    """(n, m, f) differences -> (n, m) distances, the rule's operations (NumPy's ``**``
    takes 2 as a square and 0.5 as a square root, 1 as the value itself: so here too)."""
    if metric == "euclidean" or (metric == "minkowski" and p == 2.0):
        sq = e.op("Mul", [d, d]) if metric == "euclidean" else e.op("Mul", [
            e.op("Abs", [d]), e.op("Abs", [d])])
        return e.op("Sqrt", [_sum_features(e, sq, f)])
    a = e.op("Abs", [d])
    if metric == "manhattan":
        return _sum_features(e, a, f)
    if metric == "chebyshev":  # a maximum: the same in any order
        return e.op("ReduceMax", [a, _axes(e, 2)], keepdims=0)
    if p != 1.0:
        a = e.op("Pow", [a, e.const(_k(p))])
    s = _sum_features(e, a, f)
    return s if p == 1.0 else e.op("Pow", [s, e.const(_k(1.0 / p))])


def _all_distances(e: Emitter, x: str, v: np.ndarray, metric: str, p: float) -> str:
    if metric == "cosine":  # cosine_distances: 1 - l2(x) @ l2(v).T, clipped to [0, 2]
        sq = e.op("ReduceSum", [e.op("Mul", [x, x]), _axes(e, 1)], keepdims=1)
        norm = e.op("Sqrt", [sq])
        zero = e.op("Equal", [norm, e.const(_k(0.0))])
        xn = e.op("Div", [x, e.op("Where", [zero, e.const(_k(1.0)), norm])])
        dot = e.op("MatMul", [xn, e.const(_np_l2_rows(v).T.copy())])
        dist = e.op("Sub", [e.const(_k(1.0)), dot])
        return e.op("Min", [e.op("Max", [dist, e.const(_k(0.0))]), e.const(_k(2.0))])
    diff = e.op("Sub", [e.op("Unsqueeze", [x, _axes(e, 1)]), e.const(v[None, :, :])])
    return _from_differences(e, diff, metric, p, v.shape[1])


def _topk_smallest(e: Emitter, dist: str, k: int) -> tuple[str, str]:
    """(values, indices) of each row's k smallest, ascending, ties to the lower index."""
    vals = e.fresh("topk_values")
    idx = e.fresh("topk_indices")
    from onnx import helper

    e.nodes.append(helper.make_node("TopK", [dist, e.const(np.asarray([k], np.int64))],
                                    [vals, idx], name=vals, axis=1, largest=0, sorted=1))
    return vals, idx


def _nearest_all(e: Emitter, x: str, v: np.ndarray, metric: str, p: float, k: int
                 ) -> tuple[str, str]:
    return _topk_smallest(e, _all_distances(e, x, v, metric, p), k)


def _nearest_candidates(e: Emitter, x: str, v: np.ndarray, metric: str, p: float, k: int
                        ) -> tuple[str, str]:
    """The rule's candidate search (``neighbours.nearest``), rows failing its bound redone
    from every distance."""
    m, f = v.shape
    n_cand = min(m, 2 * k + EXTRA_CANDIDATES)
    vv = np.einsum("ij,ij->i", v, v)
    xx = e.op("ReduceSum", [e.op("Mul", [x, x]), _axes(e, 1)], keepdims=1)
    approx = e.op("Mul", [e.op("MatMul", [x, e.const(v.T.copy())]), e.const(_k(-2.0))])
    approx = e.op("Add", [e.op("Add", [approx, xx]), e.const(vv.reshape(1, -1))])
    cand_vals, cand = _topk_smallest(e, approx, n_cand)
    bound = e.op("ReduceMax", [cand_vals, _axes(e, 1)], keepdims=1)
    # candidates in index order: the k nearest below then break ties by index
    cand_sorted, _ = _topk_smallest(e, cand, n_cand)
    diff = e.op("Sub", [e.op("Unsqueeze", [x, _axes(e, 1)]),
                        e.op("Gather", [e.const(v), cand_sorted], axis=0)])
    near, pos = _topk_smallest(e, _from_differences(e, diff, metric, p, f), k)
    near_idx = e.op("GatherElements", [cand_sorted, pos], axis=1)
    # the rule's check: a non-candidate's exact squared distance is >= bound - margin
    slack = ERROR_BOUND * (f + 4) * EPS
    margin = e.op("Mul", [e.const(_k(slack)), e.op("Add", [xx, e.const(_k(vv.max()))])])
    kth = e.op("Gather", [near, e.const(np.asarray([k - 1], np.int64))], axis=1)
    need = e.op("Mul", [e.op("Mul", [kth, kth]), e.const(_k(1.0 + 8.0 * EPS))])
    safe = e.op("Greater", [e.op("Sub", [bound, margin]), need])
    finite = e.op("Not", [e.op("Or", [e.op("IsNaN", [approx]), e.op("IsInf", [approx])])])
    all_finite = e.op("Equal", [e.op("ReduceMin", [e.op("Cast", [finite], to=DOUBLE),
                                                   _axes(e, 1)], keepdims=1),
                                e.const(_k(1.0))])
    unsafe = e.op("Not", [e.op("And", [safe, all_finite])])
    packed = e.op("Concat", [near, e.op("Cast", [near_idx], to=DOUBLE)], axis=1)
    any_unsafe = e.op("Cast", [e.op("ReduceMax", [e.op("Cast", [unsafe], to=DOUBLE)],
                                    keepdims=0)], to=TensorProto.BOOL)

    def redo() -> str:
        flat = e.op("Reshape", [unsafe, e.const(np.asarray([-1], np.int64))])
        rows = e.op("Reshape", [e.op("NonZero", [flat]), e.const(np.asarray([-1], np.int64))])
        d_all, i_all = _nearest_all(e, e.op("Gather", [x, rows], axis=0), v, metric, p, k)
        fixed = e.op("Concat", [d_all, e.op("Cast", [i_all], to=DOUBLE)], axis=1)
        where = e.op("Reshape", [rows, e.const(np.asarray([-1, 1], np.int64))])
        return e.op("ScatterND", [packed, where, fixed])

    then = e.subgraph(redo, DOUBLE)
    keep = e.subgraph(lambda: e.op("Identity", [packed]), DOUBLE)
    out = e.op("If", [any_unsafe], then_branch=then, else_branch=keep)
    near = e.op("Slice", [out, e.const(np.asarray([0], np.int64)),
                          e.const(np.asarray([k], np.int64)), _axes(e, 1)])
    idx = e.op("Cast", [e.op("Slice", [out, e.const(np.asarray([k], np.int64)),
                                       e.const(np.asarray([2 * k], np.int64)), _axes(e, 1)])],
               to=TensorProto.INT64)
    return near, idx


@lowering(Op.KNN)
def lower_knn(e: Emitter, n: Any, ins: list[str]) -> str:
    a, x = n.attrs, ins[0]
    v = np.asarray(a.vectors, np.float64)
    values = np.asarray(a.values, np.float64)
    k, metric, p = int(a.k), str(a.metric), float(a.p)
    euclid = metric == "euclidean" or (metric == "minkowski" and p == 2.0)
    if euclid and min(v.shape[0], 2 * k + EXTRA_CANDIDATES) < v.shape[0]:
        near, idx = _nearest_candidates(e, x, v, metric, p, k)
    else:
        near, idx = _nearest_all(e, x, v, metric, p, k)
    w = None
    if a.weights == "distance":  # 1 / dist; a row with a zero distance: [dist == 0]
        inv = e.op("Div", [e.const(_k(1.0)), near])
        inf = e.op("Cast", [e.op("IsInf", [inv]), ], to=DOUBLE)
        any_inf = e.op("Greater", [e.op("ReduceMax", [inf, _axes(e, 1)], keepdims=1),
                                   e.const(_k(0.0))])
        w = e.op("Where", [any_inf, inf, inv])
    picked = e.op("Gather", [e.const(values), idx], axis=0)  # (n, k, width)
    out = None
    for i in range(k):  # neighbour by neighbour, the rule's order
        term = e.op("Gather", [picked, e.const(np.asarray(i, np.int64))], axis=1)
        if w is not None:
            wi = e.op("Gather", [w, e.const(np.asarray([i], np.int64))], axis=1)
            term = e.op("Mul", [wi, term])
        out = term if out is None else e.op("Add", [out, term])
    assert out is not None
    if a.normalize:
        total = e.op("ReduceSum", [out, _axes(e, 1)], keepdims=1)
        zero = e.op("Equal", [total, e.const(_k(0.0))])
        return e.op("Div", [out, e.op("Where", [zero, e.const(_k(1.0)), total])])
    wsum = (e.const(_k(float(k))) if w is None
            else e.op("ReduceSum", [w, _axes(e, 1)], keepdims=1))
    return e.op("Div", [out, wsum])
