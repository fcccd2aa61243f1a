"""NumPy rules of the kernel-method, neighbour and meta-estimator ops (and Bagging's
log-probabilities): part of the reference backend (``reference.py`` imports this module, so
``RULES`` is complete whenever the reference backend is); split out only to keep files small."""

from __future__ import annotations

import numpy as np

from peregrine.backends.reference import _f64, rule
from peregrine.ir import Node, Op
from peregrine.ir.ops import class_pairs
from peregrine.options import CompileOptions

# ------------------------------------------------- kernel methods and neighbours --
# (helper "kernel") SVMs, KNN, KernelPCA; float64 throughout, in the order of operations
# of libsvm's svm.cpp and sklearn.metrics.pairwise / sklearn.neighbors.


@rule(Op.OVR_DECISION)
def _ovr_decision(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    # sklearn.utils.multiclass._ovr_decision_function, same accumulation order
    pred, conf = _f64(ins[0]), _f64(ins[1])
    k = int(node.attrs["n_classes"])
    votes = np.zeros((pred.shape[0], k))
    sums = np.zeros((pred.shape[0], k))
    for p, (i, j) in enumerate(class_pairs(k)):
        sums[:, i] -= conf[:, p]
        sums[:, j] += conf[:, p]
        votes[pred[:, p] == 0, i] += 1
        votes[pred[:, p] == 1, j] += 1
    return votes + sums / (3 * (np.abs(sums) + 1))


def _row_chunks(n: int, per_row: int):
    """Row slices keeping (rows x per_row) temporaries near 4M doubles."""
    step = max(1, (1 << 22) // max(per_row, 1))
    return [slice(i, i + step) for i in range(0, n, step)]


def _pair_diffs(x: np.ndarray, v: np.ndarray, fn) -> np.ndarray:
    """fn(x_i - v_j) reduced over features, for every row/vector pair, in row chunks."""
    out = np.empty((x.shape[0], v.shape[0]))
    for sl in _row_chunks(x.shape[0], v.shape[0] * v.shape[1]):
        out[sl] = fn(x[sl, None, :] - v[None, :, :])
    return out


def _l2_rows(x: np.ndarray) -> np.ndarray:
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


def rbf_expanded(x: np.ndarray, v: np.ndarray, gamma: float) -> np.ndarray:
    """rbf_kernel via euclidean_distances(squared=True): |x|^2 - 2 x.v + |v|^2, clamped at 0."""
    d = -2 * (x @ v.T)
    d += np.einsum("ij,ij->i", x, x)[:, None]
    d += np.einsum("ij,ij->i", v, v)[None, :]
    return np.exp(np.maximum(d, 0) * -gamma)


@rule(Op.KERNEL)
def _kernel(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    a = node.attrs
    x, v, kind = _f64(ins[0]), _f64(a["vectors"]), a["kind"]
    gamma, coef0, libsvm = float(a.get("gamma", 1.0)), float(a.get("coef0", 0.0)), \
        a.get("form", "libsvm") == "libsvm"
    if kind == "rbf" and libsvm:  # k_function: exp(-gamma * dot(x - v, x - v))
        k = np.exp(-gamma * _pair_diffs(x, v, lambda d: np.einsum("ijk,ijk->ij", d, d)))
    elif kind == "rbf":
        k = rbf_expanded(x, v, gamma)
    elif kind == "cosine":
        k = _l2_rows(x) @ _l2_rows(v).T
    else:
        k = x @ v.T
        if kind == "poly":
            k = gamma * k + coef0
            k = powi(k, int(a["degree"])) if libsvm else k ** float(a["degree"])
        elif kind == "sigmoid":
            k = np.tanh(gamma * k + coef0)
    if "center_rows" in a:  # KernelCenterer.transform: column means from the raw kernel
        cols = k.sum(axis=1) / k.shape[1]
        k = k - _f64(a["center_rows"])
        k -= cols[:, None]
        k += float(a["center_all"])
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


@rule(Op.SVM_PROBA)
def _svm_proba(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    dec = _f64(ins[0])
    k = int(node.attrs["n_classes"])
    pair = platt(dec, _f64(node.attrs["prob_a"]), _f64(node.attrs["prob_b"]))
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


def distance_weights(dist: np.ndarray) -> np.ndarray:
    """neighbors._base._get_weights(dist, "distance"): 1 / dist per neighbour; a row with a
    zero distance weighs its zero-distance neighbours 1 and the others 0."""
    with np.errstate(divide="ignore"):
        w = 1.0 / dist
    inf = np.isinf(w)
    return np.where(inf.any(axis=1, keepdims=True), inf.astype(np.float64), w)



# ------------------------------------------------------------------ meta-estimators --
# (helper "meta") Voting, Stacking, Bagging, AdaBoost, calibration: combining sub-estimator
# outputs in scikit-learn's order of accumulation.


@rule(Op.WEIGHTED_SUM)
def _weighted_sum(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    # running sum in estimator order, as np.add.reduce over axis 0 and sklearn's += loops
    weights = [float(w) for w in node.attrs["weights"]]
    acc = _f64(ins[0]) * weights[0]
    for x, w in zip(ins[1:], weights[1:]):
        acc = acc + _f64(x) * w
    return acc / float(node.attrs["divisor"])


# ------------------------------------------------- predict_log_proba (helper "logproba") --


@rule(Op.LOG_ADD_EXP)
def _log_add_exp(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    # ensemble/_bagging.py _parallel_predict_log_proba per job, then the reduce over jobs
    starts, columns = [int(s) for s in node.attrs["starts"]], node.attrs["columns"]
    jobs = []
    with np.errstate(all="ignore"):  # NaN rows stay NaN, as sklearn's
        for a, b in zip(starts[:-1], starts[1:]):
            acc = np.full((ins[0].shape[0], int(node.width)), -np.inf)
            for x, cols in zip(ins[a:b], columns[a:b]):
                cols = np.asarray(cols, dtype=np.int64)
                acc[:, cols] = np.logaddexp(acc[:, cols], _f64(x))
            jobs.append(acc)
        out = jobs[0]
        for acc in jobs[1:]:
            out = np.logaddexp(out, acc)
        return out - float(node.attrs["shift"])


@rule(Op.WEIGHTED_MEDIAN)
def _weighted_median(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    # AdaBoostRegressor._get_median_predict, the same calls (so ties sort as sklearn's do)
    pred = _f64(ins[0])
    sorted_idx = np.argsort(pred, axis=1)
    cdf = np.cumsum(_f64(node.attrs["weights"])[sorted_idx], axis=1)
    median_idx = (cdf >= 0.5 * cdf[:, -1][:, None]).argmax(axis=1)
    rows = np.arange(pred.shape[0])
    return pred[rows, sorted_idx[rows, median_idx]][:, None]
