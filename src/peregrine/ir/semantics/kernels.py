"""Kernel-method ops (SVMs, KernelPCA): OVR_DECISION, KERNEL, SVM_PROBA; float64 throughout,
in the order of operations of libsvm's svm.cpp and sklearn.metrics.pairwise."""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.ir.ops import Op, class_pairs
from peregrine.ir.semantics.base import (
    Attrs,
    array,
    bad,
    choice,
    define,
    f64,
    integer,
    n_inputs,
    real,
)
from peregrine.options import CompileOptions

KERNEL_KINDS = ("linear", "poly", "rbf", "sigmoid", "cosine")


def _pairs(n: Any, n_classes: Any) -> tuple[int, int]:
    """(n_classes, number of class pairs i < j)."""
    k = integer(n, "n_classes", n_classes, 2)
    return k, k * (k - 1) // 2


@define(Op.OVR_DECISION)
class OvrDecision(Attrs):
    """Inputs: predictions (n, P) 0/1 and confidences (n, P) for the P = k(k-1)/2 pairs i < j
    in ``class_pairs`` order. sklearn.utils.multiclass._ovr_decision_function: votes plus
    sum_of_confidences / (3 * (|sum| + 1)); prediction 0 votes i, 1 votes j."""

    n_classes: int

    def check(self, n: Any, ins: list) -> None:
        n_inputs(n, ins, 2)
        k, pairs = _pairs(n, self.n_classes)
        for i in ins:
            if i.width is not None and i.width != pairs:
                raise bad(n, f"input {i.name!r} has {i.width} columns, {k} classes make "
                          f"{pairs} pairs")

    def infer_width(self, widths: list) -> int:
        return int(self.n_classes)

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        pred, conf = f64(ins[0]), f64(ins[1])
        k = int(self.n_classes)
        votes = np.zeros((pred.shape[0], k))
        sums = np.zeros((pred.shape[0], k))
        for p, (i, j) in enumerate(class_pairs(k)):
            sums[:, i] -= conf[:, p]
            sums[:, j] += conf[:, p]
            votes[pred[:, p] == 0, i] += 1
            votes[pred[:, p] == 1, j] += 1
        return votes + sums / (3 * (np.abs(sums) + 1))


def row_chunks(n: int, per_row: int) -> list[slice]:
    """Row slices keeping (rows x per_row) temporaries near 4M doubles."""
    step = max(1, (1 << 22) // max(per_row, 1))
    return [slice(i, i + step) for i in range(0, n, step)]


def _pair_diffs(x: np.ndarray, v: np.ndarray, fn: Any) -> np.ndarray:
    """fn(x_i - v_j) reduced over features, for every row/vector pair, in row chunks."""
    out = np.empty((x.shape[0], v.shape[0]))
    for sl in row_chunks(x.shape[0], v.shape[0] * v.shape[1]):
        out[sl] = fn(x[sl, None, :] - v[None, :, :])
    return out


def l2_rows(x: np.ndarray) -> np.ndarray:
    # sklearn.preprocessing.normalize: x / row_norms(x), zero norms divide by 1
    n = np.sqrt(np.einsum("ij,ij->i", x, x))
    return x / np.where(n == 0.0, 1.0, n)[:, None]


def powi(base: np.ndarray, times: int) -> np.ndarray:
    """libsvm's powi: exponentiation by repeated squaring."""
    tmp, ret, t = base, np.ones_like(base), times
    while t > 0:
        if t % 2 == 1:
            ret = ret * tmp
        tmp = tmp * tmp
        t //= 2
    return ret


def rbf_expanded(x: np.ndarray, v: np.ndarray, gamma: float,
                 vv: np.ndarray | None = None) -> np.ndarray:
    """rbf_kernel via euclidean_distances(squared=True): |x|^2 - 2 x.v + |v|^2, clamped at 0.
    ``vv``: |v|^2 per vector, when the caller has it already. In place after the product: the
    same operations in the same order, one temporary."""
    d = x @ v.T
    d *= -2
    d += np.einsum("ij,ij->i", x, x)[:, None]
    d += (np.einsum("ij,ij->i", v, v) if vv is None else vv)[None, :]
    np.maximum(d, 0, out=d)
    d *= -gamma
    return np.exp(d, out=d)


def rbf_libsvm_rows(x: np.ndarray, v: np.ndarray, gamma: float) -> np.ndarray:
    """libsvm's k_function rbf, exp(-gamma * sum((x - v)**2)), pair by pair (the rule's own
    form): for the rows the expanded form cannot serve (``overflowed_rows``)."""
    return np.exp(-gamma * _pair_diffs(x, v, lambda d: np.einsum("ijk,ijk->ij", d, d)))


def overflowed_rows(x: np.ndarray) -> np.ndarray:
    """Rows whose |x|^2 overflows to infinity (a finite feature past ~1.3e154): there the
    expanded distance |x|^2 - 2 x.v + |v|^2 is inf - inf = NaN, where libsvm's differences
    give a distance of infinity (or a huge finite one) and a kernel value of 0. NaN rows
    (NaN either way) are not among them."""
    with np.errstate(over="ignore"):
        return np.isinf(np.einsum("ij,ij->i", x, x))


def rbf_fast_libsvm(x: np.ndarray, v: np.ndarray, gamma: float,
                    vv: np.ndarray | None = None) -> np.ndarray:
    """libsvm's rbf as the backends serve it: the expanded form (one BLAS product, rounding
    only: ~1e-16 (|x|^2 + |v|^2) in the distance) and the few rows whose |x|^2 overflows
    recomputed pair by pair, as the rule does them."""
    with np.errstate(over="ignore", invalid="ignore"):
        k = rbf_expanded(x, v, gamma, vv)
    far = overflowed_rows(x)
    if far.any():
        k[far] = rbf_libsvm_rows(x[far], v, gamma)
    return k


def far_rows_vanish(v: np.ndarray, gamma: float) -> bool:
    """Whether libsvm's rbf is exactly 0 for every row whose |x|^2 overflows: such a row has a
    feature with x_j^2 > DBL_MAX / (2 d) (the 2: rounding of the sum), so its distance to
    every vector is at least (sqrt(DBL_MAX / (2 d)) - max |v|)^2, and exp(-gamma * that)
    underflows to 0 past -745.2. Where this holds, a kernel that cannot branch per row (a
    fused row kernel, an exported graph) may answer 0 for those rows instead of inf - inf."""
    d = max(int(v.shape[1]), 1)
    reach = np.sqrt(np.finfo(np.float64).max / (2 * d)) - float(np.max(np.abs(v), initial=0.0))
    return bool(gamma > 0 and reach > 0 and gamma * reach * reach > 746.0)


@define(Op.KERNEL)
class Kernel(Attrs):
    """(n, d) -> (n, m): the kernel ``kind`` of each row against each of the m ``vectors``.
    ``form="libsvm"``: libsvm's k_function (rbf as exp(-gamma * sum((x - v)**2)), poly by
    repeated squaring); ``"pairwise"``: sklearn.metrics.pairwise (rbf through the expanded
    squared euclidean distance). ``center_rows`` (m,) and ``center_all`` (both or neither):
    KernelCenterer.transform applied to the result."""

    kind: str
    vectors: Any
    gamma: float = 1.0
    coef0: float = 0.0
    degree: float = 3.0
    form: str = "libsvm"
    center_rows: Any = None
    center_all: float | None = None

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        m = array(n, "vectors", self.vectors, (None, ins[0].width), finite=True).shape[0]
        kind = choice(n, "kind", self.kind, KERNEL_KINDS)
        form = choice(n, "form", self.form, ("libsvm", "pairwise"))
        real(n, "gamma", self.gamma)
        real(n, "coef0", self.coef0)
        if kind == "poly":
            degree = real(n, "degree", self.degree)
            if degree < 0 or (form == "libsvm" and not float(degree).is_integer()):
                raise bad(n, f"degree={degree!r}: libsvm's powi takes an integer >= 0")
        if self.center_rows is not None or self.center_all is not None:
            array(n, "center_rows", self.center_rows, (m,), finite=True)
            real(n, "center_all", self.center_all)

    def infer_width(self, widths: list) -> int:
        return int(np.shape(self.vectors)[0])

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x, v, kind = f64(ins[0]), f64(self.vectors), self.kind
        gamma, coef0, libsvm = float(self.gamma), float(self.coef0), self.form == "libsvm"
        if kind == "rbf" and libsvm:  # k_function: exp(-gamma * dot(x - v, x - v))
            k = rbf_libsvm_rows(x, v, gamma)
        elif kind == "rbf":
            k = rbf_expanded(x, v, gamma)
        elif kind == "cosine":
            k = l2_rows(x) @ l2_rows(v).T
        else:
            k = x @ v.T
            if kind == "poly":
                k = gamma * k + coef0
                k = powi(k, int(self.degree)) if libsvm else k ** float(self.degree)
            elif kind == "sigmoid":
                k = np.tanh(gamma * k + coef0)
        if self.center_rows is not None:  # KernelCenterer: column means from the raw kernel
            cols = k.sum(axis=1) / k.shape[1]
            k = k - f64(self.center_rows)
            k -= cols[:, None]
            k += float(self.center_all)  # type: ignore[arg-type]
        return k


def platt(dec: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """libsvm's sigmoid_predict, branch per sign of f = dec * A + B (no cancellation)."""
    f = dec * a + b
    with np.errstate(over="ignore"):
        e = np.exp(-np.abs(f))
        return np.where(f >= 0, e / (1.0 + e), 1.0 / (1 + np.exp(np.minimum(f, 0.0))))


def coupling_q(r: np.ndarray, k: int) -> np.ndarray:
    """Q of libsvm's multiclass_probability, (n, k, k), from r (n, k, k) = pairwise_prob."""
    q = np.zeros(r.shape)
    for t in range(k):
        for j in range(k):  # Q[t][t] accumulates over j in order
            if j != t:
                q[:, t, t] += r[:, j, t] * r[:, j, t]
        for j in range(t + 1, k):
            q[:, t, j] = -r[:, j, t] * r[:, t, j]
            q[:, j, t] = q[:, t, j]
    return q


@define(Op.SVM_PROBA)
class SvmProba(Attrs):
    """libsvm's svm_predict_probability on decision values (n, P): Platt sigmoid per pair
    (``prob_a``, ``prob_b``) clipped to [1e-7, 1 - 1e-7], then libsvm's
    multiclass_probability (Wu, Lin & Weng pairwise coupling iteration; 2 classes too)."""

    n_classes: int
    prob_a: Any
    prob_b: Any

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        k, pairs = _pairs(n, self.n_classes)
        array(n, "prob_a", self.prob_a, (pairs,), finite=True)
        array(n, "prob_b", self.prob_b, (pairs,), finite=True)
        if ins[0].width is not None and ins[0].width != pairs:
            raise bad(n, f"reads {ins[0].width} decision values, {k} classes make {pairs} "
                      "pairs")

    def infer_width(self, widths: list) -> int:
        return int(self.n_classes)

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        dec = f64(ins[0])
        k = int(self.n_classes)
        pair = platt(dec, f64(self.prob_a), f64(self.prob_b))
        pair = np.minimum(np.maximum(pair, 1e-7), 1 - 1e-7)
        n = dec.shape[0]
        r = np.zeros((n, k, k))
        for c, (i, j) in enumerate(class_pairs(k)):
            r[:, i, j] = pair[:, c]
            r[:, j, i] = 1 - pair[:, c]
        q = coupling_q(r, k)
        p = np.full((n, k), 1.0 / k)
        active = np.ones(n, dtype=bool)
        for _ in range(max(100, k)):  # libsvm's loop, each row stopping at its own iteration
            qp = np.zeros((n, k))
            pqp = np.zeros(n)
            for t in range(k):
                for j in range(k):
                    qp[:, t] += q[:, t, j] * p[:, j]
                pqp += p[:, t] * qp[:, t]
            active &= ~(np.abs(qp - pqp[:, None]).max(axis=1) < 0.005 / k)
            if not active.any():
                break
            new_p = p.copy()
            for t in range(k):
                diff = (-qp[:, t] + pqp) / q[:, t, t]
                new_p[:, t] += diff
                pqp = (pqp + diff * (diff * q[:, t, t] + 2 * qp[:, t])) / (1 + diff) / (1 + diff)
                qp = (qp + diff[:, None] * q[:, t, :]) / (1 + diff)[:, None]
                new_p /= (1 + diff)[:, None]
            p = np.where(active[:, None], new_p, p)
        return p
