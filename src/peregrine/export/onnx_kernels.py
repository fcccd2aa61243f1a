"""ONNX lowerings of the kernel-method ops (``ir/semantics/kernels.py``): KERNEL (SVMs,
KernelPCA) and OVR_DECISION (one-vs-one votes), in double, in the rule's order where ONNX has
the same operation.

KERNEL's dot products are MatMul (ONNX Runtime's summation order: a few ulps, as the LINEAR
lowering). libsvm's rbf, exp(-gamma * sum((x - v)**2)), is written through the expanded
squared distance |x|^2 - 2 x.v + |v|^2 (clamped at 0), the form scikit-learn's pairwise rbf
uses: the literal form needs a (rows, vectors, features) temporary (8 GB for 100K rows, 500
support vectors, 20 features). The expanded distance carries an absolute error of a few ulps
of |x|^2 + |v|^2, so the kernel value a relative error of gamma times that (1e-13 for
gamma * (|x|^2 + |v|^2) = 100), far inside the export's 1e-5; the validation on export
checks it on the model's own rows."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from peregrine.export.onnx_graph import Emitter, lowering
from peregrine.ir.ops import Op, class_pairs
from peregrine.ir.semantics.kernels import far_rows_vanish

DOUBLE = TensorProto.DOUBLE


def _k(value: float) -> np.ndarray:
    return np.asarray(float(value))


def _row_sumsq(e: Emitter, x: str) -> str:
    """(n, 1): the sum of squares of each row, one node (the sum's order is ONNX Runtime's,
    as ReduceSum's of the products was)."""
    return e.op("ReduceSumSquare", [x, e.const(np.asarray([1], np.int64))], keepdims=1)


def _l2_rows(e: Emitter, x: str) -> str:
    """sklearn.preprocessing.normalize: x / ||x||, a zero norm divides by 1."""
    norm = e.op("ReduceL2", [x, e.const(np.asarray([1], np.int64))], keepdims=1)
    zero = e.op("Equal", [norm, e.const(_k(0.0))])
    return e.op("Div", [x, e.op("Where", [zero, e.const(_k(1.0)), norm])])


def _np_l2_rows(v: np.ndarray) -> np.ndarray:
    n = np.sqrt(np.einsum("ij,ij->i", v, v))
    return v / np.where(n == 0.0, 1.0, n)[:, None]


def _powi(e: Emitter, base: str, times: int) -> str:
    """libsvm's powi (semantics.kernels.powi): the same products in the same order."""
    tmp, ret, t = base, None, times
    while t > 0:
        if t % 2 == 1:
            ret = tmp if ret is None else e.op("Mul", [ret, tmp])
        tmp = e.op("Mul", [tmp, tmp])
        t //= 2
    if ret is None:  # degree 0: ones
        return e.op("Add", [e.op("Mul", [base, e.const(_k(0.0))]), e.const(_k(1.0))])
    return ret


# the largest gamma |v|^2 folded (_rbf_folds): exp(t) <= exp(gamma |v|^2) stays finite
# (overflow past 709.78) with room for the rounding of t
FOLD_MAX_EXPONENT = 700.0


def _rbf_folds(e: Emitter, n: Any, v: np.ndarray, gamma: float) -> bool:
    """Whether the rbf kernel may be written as exp(2 gamma x.v - gamma |x|^2) with
    exp(-gamma |v|^2) left to the LINEARs reading it (``_rbf_folded``): computed in double,
    read only by LINEARs (no centering, not a result), gamma |v|^2 at most
    FOLD_MAX_EXPONENT, and every folded weight w * exp(-gamma |v|^2) a normal double (full
    precision: one rounding) or zero."""
    users = e.consumers.get(n.name, [])
    if (e.working != DOUBLE or n.attrs.center_rows is not None or n.name in e.results
            or not users or any(u.op is not Op.LINEAR for u in users)
            or not 0.0 <= gamma < np.inf or len(v) == 0):
        return False
    vv = gamma * np.einsum("ij,ij->i", v, v)
    if not np.all(vv <= FOLD_MAX_EXPONENT):
        return False
    s = np.exp(-vv)[:, None]
    for u in users:
        w = np.asarray(u.attrs.weight, np.float64)
        ws = w * s
        if not np.all((w == 0) | (np.abs(ws) >= np.finfo(np.float64).tiny)):
            return False
    return True


def _rbf_folded(e: Emitter, x: str, xx: str, v: np.ndarray, gamma: float) -> str:
    """exp(-gamma |x - v|^2) = exp(t) * exp(-gamma |v|^2) with t = 2 gamma x.v - gamma |x|^2:
    ReduceSumSquare, Concat [x, |x|^2], one MatMul against [2 gamma v; -gamma] (gamma is no
    float32, so not Gemm's beta) and Exp, four nodes where the distance form takes six; the
    factor exp(-gamma |v|^2) joins the reading LINEAR's weight rows (``column_scales``).
    Measured on SVC (485 vectors, 20 features, ONNX Runtime 1.32, one thread): 100K rows
    1.5x faster (two passes over the 100K x 485 kernel values fewer), one row about 0.7 us.

    Rounding: t carries an absolute error of a few ulps of gamma (2 |x||v| + |x|^2) (the
    MatMul's order, one rounding of each 2 gamma v and of -gamma |x|^2), the distance form's
    bound (a few ulps of gamma (|x|^2 + |v|^2)); exp turns it into the same relative error
    of the kernel value, and the folded weight adds one rounding. t = gamma (|v|^2 -
    |x - v|^2) <= gamma |v|^2 <= FOLD_MAX_EXPONENT up to that error, so exp(t) never
    overflows (far rows: t -> -inf, exp 0, as the kernel's underflow); the distance form's
    clamp at 0 (a kernel value above 1 by rounding) is within the same bound. NaN stays
    NaN."""
    g = e.op("MatMul", [
        e.op("Concat", [x, xx], axis=1),
        e.const(np.vstack([(2.0 * gamma * v).T, np.full((1, len(v)), -gamma)]))])
    out = e.op("Exp", [g])
    e.column_scales[out] = np.exp(-gamma * np.einsum("ij,ij->i", v, v))
    return out


def _far_rows(e: Emitter, n: Any, xx: str, v: np.ndarray, gamma: float, k: str) -> str:
    """libsvm's rbf is 0 on a row whose |x|^2 overflowed (a feature past ~1.3e154), where
    both expanded forms compute inf - inf: those rows answer 0 (IsInf, Where), which is
    their exact value where ``far_rows_vanish`` proves it (any gamma a fitted SVM has; a
    model outside that bound keeps the expanded form: docs/exactness.md). scikit-learn's
    pairwise form (KernelPCA) computes the expanded distance itself, NaN included."""
    if n.attrs.form != "libsvm" or not far_rows_vanish(v, gamma):
        return k
    out = e.op("Where", [e.op("IsInf", [xx]), e.const(_k(0.0)), k])
    if k in e.column_scales:  # the folded form's factors apply to the zeros alike
        e.column_scales[out] = e.column_scales.pop(k)
    return out


@lowering(Op.KERNEL)
def lower_kernel(e: Emitter, n: Any, ins: list[str]) -> str:
    a, x = n.attrs, ins[0]
    v = np.asarray(a.vectors, np.float64)
    gamma, coef0 = float(a.gamma), float(a.coef0)
    if a.kind == "rbf":
        xx = _row_sumsq(e, x)
    if a.kind == "rbf" and _rbf_folds(e, n, v, gamma):
        return _far_rows(e, n, xx, v, gamma, _rbf_folded(e, x, xx, v, gamma))
    if a.kind == "rbf":
        # |x|^2 - 2 x.v + |v|^2 in three nodes where it took seven (each about half a
        # microsecond at one row): the -2 folded into the vectors (a power of two: every
        # product and partial sum scales exactly), |v|^2 as the Gemm's C, |x|^2 added last
        # (one rounding in another place: still a few ulps of |x|^2 + |v|^2, the expanded
        # form's bound), and the clamp at 0 as Max (ONNX Runtime's keeps NaN; -0.0 and 0.0
        # give the same exp)
        vv = np.einsum("ij,ij->i", v, v).reshape(1, -1)
        d = e.op("Gemm", [x, e.const((-2.0 * v).T.copy()), e.const(vv)])
        d = e.op("Max", [e.op("Add", [d, xx]), e.const(_k(0.0))])
        k = _far_rows(e, n, xx, v, gamma, e.op("Exp", [e.op("Mul", [d, e.const(_k(-gamma))])]))
    elif a.kind == "cosine":
        k = e.op("MatMul", [_l2_rows(e, x), e.const(_np_l2_rows(v).T.copy())])
    else:
        k = e.op("MatMul", [x, e.const(v.T.copy())])
        if a.kind in ("poly", "sigmoid"):
            k = e.op("Add", [e.op("Mul", [e.const(_k(gamma)), k]), e.const(_k(coef0))])
        if a.kind == "poly":
            k = (_powi(e, k, int(a.degree)) if a.form == "libsvm"
                 else e.op("Pow", [k, e.const(_k(a.degree))]))
        elif a.kind == "sigmoid":
            k = e.op("Tanh", [k])
    if a.center_rows is not None:  # KernelCenterer: column means of the raw kernel
        m = v.shape[0]
        cols = e.op("Div", [e.op("ReduceSum", [k, e.const(np.asarray([1], np.int64))],
                                 keepdims=1), e.const(_k(m))])
        k = e.op("Sub", [k, e.const(np.asarray(a.center_rows, np.float64).reshape(1, -1))])
        k = e.op("Sub", [k, cols])
        k = e.op("Add", [k, e.const(_k(a.center_all))])
    return k


@lowering(Op.OVR_DECISION)
def lower_ovr_decision(e: Emitter, n: Any, ins: list[str]) -> str:
    """votes + sums / (3 * (|sums| + 1)). ``sums``: pair by pair in the rule's order, each
    pair's confidence times a (1, k) row of -1 (class i), +1 (class j) and 0 elsewhere (x + 0.0
    leaves x, so every column sees the rule's additions in its order). ``votes``: integer
    counts, two 0/1 matrix products (exact in any order)."""
    pred, conf = ins
    k = int(n.attrs.n_classes)
    pairs = class_pairs(k)
    sums = None
    for p, (i, j) in enumerate(pairs):
        sign = np.zeros((1, k))
        sign[0, i], sign[0, j] = -1.0, 1.0
        step = e.op("Mul", [e.columns(conf, p, p + 1), e.const(sign)])
        sums = step if sums is None else e.op("Add", [sums, step])
    assert sums is not None
    first, second = np.zeros((len(pairs), k)), np.zeros((len(pairs), k))
    for p, (i, j) in enumerate(pairs):
        first[p, i], second[p, j] = 1.0, 1.0
    zero = e.op("Cast", [e.op("Equal", [pred, e.const(_k(0.0))])], to=DOUBLE)
    one = e.op("Cast", [e.op("Equal", [pred, e.const(_k(1.0))])], to=DOUBLE)
    votes = e.op("Add", [e.op("MatMul", [zero, e.const(first)]),
                         e.op("MatMul", [one, e.const(second)])])
    den = e.op("Mul", [e.const(_k(3.0)),
                       e.op("Add", [e.op("Abs", [sums]), e.const(_k(1.0))])])
    return e.op("Add", [votes, e.op("Div", [sums, den])])


def _col(e: Emitter, x: str, c: int) -> str:
    return e.op("Slice", [x, e.const(np.asarray([c], np.int64)),
                          e.const(np.asarray([c + 1], np.int64)),
                          e.const(np.asarray([1], np.int64))])


def _platt(e: Emitter, dec: str, a: float, b: float) -> str:
    """semantics.kernels.platt: f = dec * A + B; e/(1+e) with e = exp(-|f|) where f >= 0,
    else 1/(1+exp(min(f, 0))); both branches computed, Where picks the rule's."""
    f = e.op("Add", [e.op("Mul", [dec, e.const(_k(a))]), e.const(_k(b))])
    ex = e.op("Exp", [e.op("Neg", [e.op("Abs", [f])])])
    one = e.const(_k(1.0))
    pos = e.op("Div", [ex, e.op("Add", [one, ex])])
    neg = e.op("Div", [one, e.op("Add", [one, e.op("Exp", [
        e.op("Min", [f, e.const(_k(0.0))])])])])
    return e.op("Where", [e.op("GreaterOrEqual", [f, e.const(_k(0.0))]), pos, neg])


@lowering(Op.SVM_PROBA)
def lower_svm_proba(e: Emitter, n: Any, ins: list[str]) -> str:
    """libsvm's svm_predict_probability (semantics.kernels.SvmProba) step for step: Platt per
    pair clipped to [1e-7, 1 - 1e-7], Q (coupling_q's sums in its order), then the coupling
    iteration as an ONNX Loop of at most max(100, k) trips, each row's probabilities frozen
    from the trip its own stopping test passes and the Loop ending when no row is active
    (the rule's break); inside a trip the rule's per-class updates, unrolled over the k
    classes, each an IEEE operation on the rule's operands in its order."""
    from onnx import helper

    a, dec = n.attrs, ins[0]
    k = int(a.n_classes)
    prob_a = np.asarray(a.prob_a, np.float64).reshape(-1)
    prob_b = np.asarray(a.prob_b, np.float64).reshape(-1)
    lo, hi = e.const(_k(1e-7)), e.const(_k(1 - 1e-7))
    one = e.const(_k(1.0))
    r: dict[tuple[int, int], str] = {}
    for c, (i, j) in enumerate(class_pairs(k)):
        p = _platt(e, _col(e, dec, c), float(prob_a[c]), float(prob_b[c]))
        p = e.op("Min", [e.op("Max", [p, lo]), hi])
        r[i, j], r[j, i] = p, e.op("Sub", [one, p])
    q: dict[tuple[int, int], str] = {}
    for t in range(k):
        acc = None
        for j in range(k):
            if j != t:
                sq = e.op("Mul", [r[j, t], r[j, t]])
                acc = sq if acc is None else e.op("Add", [acc, sq])
        assert acc is not None
        q[t, t] = acc
        for j in range(t + 1, k):
            q[t, j] = q[j, t] = e.op("Mul", [e.op("Neg", [r[j, t]]), r[t, j]])
    rows = e.op("Slice", [e.op("Shape", [dec]), e.const(np.asarray([0], np.int64)),
                          e.const(np.asarray([1], np.int64))])
    p0 = e.op("Expand", [e.const(np.full((1, k), 1.0 / k)),
                         e.op("Concat", [rows, e.const(np.asarray([k], np.int64))], axis=0)])
    active0 = e.op("Expand", [e.const(np.ones((1, 1), bool)),
                              e.op("Concat", [rows, e.const(np.asarray([1], np.int64))],
                                   axis=0)])

    outer, casts = e.nodes, dict(e._casts)
    e.nodes = []
    try:
        it, cond_in = e.fresh("iter"), e.fresh("cond_in")
        p_in, active_in = e.fresh("p_in"), e.fresh("active_in")
        cols = [_col(e, p_in, t) for t in range(k)]
        qp = []
        for t in range(k):
            acc = None
            for j in range(k):
                term = e.op("Mul", [q[t, j], cols[j]])
                acc = term if acc is None else e.op("Add", [acc, term])
            qp.append(acc)
        pqp = None
        for t in range(k):
            term = e.op("Mul", [cols[t], qp[t]])
            pqp = term if pqp is None else e.op("Add", [pqp, term])
        assert pqp is not None
        gap = e.op("Max", [e.op("Abs", [e.op("Sub", [v, pqp])]) for v in qp])
        done = e.op("Less", [gap, e.const(_k(0.005 / k))])
        active = e.op("And", [active_in, e.op("Not", [done])])
        new = list(cols)
        two = e.const(_k(2.0))
        for t in range(k):
            qtt = q[t, t]
            diff = e.op("Div", [e.op("Add", [e.op("Neg", [qp[t]]), pqp]), qtt])
            new[t] = e.op("Add", [new[t], diff])
            opd = e.op("Add", [one, diff])
            inner = e.op("Add", [e.op("Mul", [diff, qtt]), e.op("Mul", [two, qp[t]])])
            pqp = e.op("Div", [e.op("Div", [e.op("Add", [pqp, e.op("Mul", [diff, inner])]),
                                            opd]), opd])
            qp = [e.op("Div", [e.op("Add", [qp[j], e.op("Mul", [diff, q[t, j]])]), opd])
                  for j in range(k)]
            new = [e.op("Div", [v, opd]) for v in new]
        p_out = e.op("Where", [active, e.op("Concat", new, axis=1), p_in])
        cond_out = e.op("Cast", [e.op("ReduceMax", [e.op("Cast", [active], to=DOUBLE)],
                                      keepdims=0)], to=TensorProto.BOOL)
        body_nodes = e.nodes
    finally:
        e.nodes, e._casts = outer, casts
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        body_nodes, e.fresh("coupling"),
        [vi(it, TensorProto.INT64, []), vi(cond_in, TensorProto.BOOL, []),
         vi(p_in, DOUBLE, None), vi(active_in, TensorProto.BOOL, None)],
        [vi(cond_out, TensorProto.BOOL, []), vi(p_out, DOUBLE, None),
         vi(active, TensorProto.BOOL, None)])
    p_final, active_final = e.fresh("p_final"), e.fresh("active_final")
    e.nodes.append(helper.make_node(
        "Loop", [e.const(np.asarray(max(100, k), np.int64)), e.const(np.asarray(True)),
                 p0, active0], [p_final, active_final], name=p_final, body=body))
    return p_final
