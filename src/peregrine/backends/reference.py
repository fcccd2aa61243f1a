"""The reference backend: a plain NumPy evaluator of the IR. It defines what each op means, is the
oracle for the other backends in tests, and the fallback when nothing faster is installed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from peregrine.backends.base import Backend, Executable
from peregrine.frontends.base import ModelSpec
from peregrine.ir import Forest, Graph, Link, Node, Op
from peregrine.ir.forest import LIGHTGBM_ZERO_THRESHOLD
from peregrine.ir.ops import class_pairs
from peregrine.options import CompileOptions, Precision

# ------------------------------------------------------------------------ tree semantics --


def compute_dtype(forest: Forest, x_dtype: np.dtype, precision: Precision) -> np.dtype:
    """Precision the comparisons run in. float32 is exact when the library itself rounds inputs to
    float32, or when the input already is float32 (thresholds are rounded to match)."""
    if precision is Precision.FLOAT32 or forest.input_dtype == np.float32:
        return np.dtype(np.float32)
    if precision is Precision.FLOAT64:
        return np.dtype(np.float64)
    return np.dtype(np.float32) if x_dtype == np.float32 else np.dtype(np.float64)


def decide_left(forest: Forest, nodes: np.ndarray, x: np.ndarray, thr: np.ndarray) -> np.ndarray:
    """Whether value ``x`` at internal node ``nodes`` goes left (the Forest's one decision rule)."""
    nan = np.isnan(x)
    with np.errstate(invalid="ignore"):
        left = np.where(nan, forest.nan_left[nodes], x <= thr[nodes])
        if forest.has_missing_zero:
            zero = forest.missing_zero[nodes] & (np.abs(x) <= LIGHTGBM_ZERO_THRESHOLD)
            left = np.where(zero, forest.nan_left[nodes], left)
        if forest.has_categorical:
            cat = forest.cat_index[nodes]
            is_cat = (cat >= 0) & ~nan
            if np.any(is_cat):
                n_bits = forest.n_cat_bits
                trunc = np.trunc(np.where(is_cat, x, 0.0))
                neg = (x < 0) if forest.cat_negative_before_trunc else (trunc < 0)
                invalid = neg | ~(trunc < n_bits)  # catches +inf too
                code = np.where(invalid | ~is_cat, 0, trunc).astype(np.int64)
                row = np.where(is_cat, cat, 0)
                word = forest.cat_bitsets[row, code // 32]
                bit = ((word >> (code % 32).astype(np.uint32)) & 1).astype(bool)
                cat_left = np.where(invalid, forest.cat_unknown_left[row], bit)
                left = np.where(is_cat, cat_left, left)
    return left


def forest_leaves(forest: Forest, X: np.ndarray, precision: Precision = Precision.AUTO):
    """Leaf node index reached in every tree: int64 (n_rows, n_trees)."""
    dt = compute_dtype(forest, X.dtype, precision)
    Xc = np.asarray(X, dtype=dt)
    thr = forest.thresholds_for(dt)
    n = Xc.shape[0]
    idx = np.broadcast_to(forest.tree_offsets[:-1], (n, forest.n_trees)).copy()
    rows = np.arange(n)[:, None]
    for _ in range(forest.max_depth()):
        feat = forest.feature[idx]
        active = feat >= 0
        if not active.any():
            break
        x = Xc[rows, np.where(active, feat, 0)]
        safe = np.where(active, idx, forest.tree_offsets[0])
        go_left = decide_left(forest, safe, x, thr)
        nxt = np.where(go_left, forest.left[safe], forest.right[safe])
        idx = np.where(active, nxt, idx)
    return idx


def forest_predict(forest: Forest, X: np.ndarray, precision: Precision = Precision.AUTO):
    """Aggregated ensemble output (n_rows, n_outputs) in float64."""
    leaves = forest_leaves(forest, X, precision)
    n = leaves.shape[0]
    out = np.zeros((n, forest.n_outputs), dtype=np.float64)
    if forest.value_width == forest.n_outputs:
        for t in range(forest.n_trees):  # tree order, as the libraries accumulate
            out += forest.value[leaves[:, t]]
    else:
        for t in range(forest.n_trees):
            out[:, forest.tree_group[t]] += forest.value[leaves[:, t], 0]
    out /= forest.output_divisor()
    return out + forest.base_score


# ------------------------------------------------------------------------- op rules -------

Rule = Callable[[Node, list, CompileOptions], np.ndarray]
RULES: dict[Op, Rule] = {}


def rule(op: Op) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        RULES[op] = fn
        return fn

    return deco


@rule(Op.REPLACE_WITH_NAN)
def _replace(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = ins[0]
    value = node.attrs["value"]
    # compare_dtype (optional): compare after casting x to it; XGBoost tests float32(x) == missing
    cdt = np.dtype(node.attrs.get("compare_dtype") or x.dtype)
    hit = x.astype(cdt, copy=False) == np.asarray(value, dtype=cdt)
    return np.where(hit, np.nan, x).astype(x.dtype)


@rule(Op.TREE_ENSEMBLE)
def _trees(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    return forest_predict(node.attrs["forest"], ins[0], options.precision)


@rule(Op.AFFINE)
def _affine(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    scale = np.asarray(node.attrs.get("scale", 1.0), dtype=np.float64)
    shift = np.asarray(node.attrs.get("shift", 0.0), dtype=np.float64)
    return ins[0] * scale + shift


def sigmoid(x: np.ndarray) -> np.ndarray:
    # Branch-free and overflow-free: exp of a non-positive number only.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@rule(Op.LINK)
def _link(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = ins[0]
    kind = node.attrs["kind"]
    if kind is Link.IDENTITY:
        return x
    if kind is Link.SIGMOID:
        return sigmoid(float(node.attrs.get("scale", 1.0)) * x)
    if kind is Link.SOFTMAX:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if kind is Link.EXP:
        return np.exp(x)
    if kind is Link.ISOLATION_SCORE:
        return -(2.0 ** (-x / float(node.attrs["denominator"])))
    if kind is Link.LOG_SOFTMAX:
        with np.errstate(invalid="ignore"):  # inf - inf -> NaN (rows sklearn rejects anyway)
            return x - logsumexp_rows(x)
    raise NotImplementedError(f"reference backend: link {kind}")


def logsumexp_rows(x: np.ndarray) -> np.ndarray:
    """(n, 1) row-wise logsumexp in sklearn's utils._array_api._logsumexp order: the maxima
    are counted and left out of the sum, so a row whose other entries underflow still gets
    log(count) + max exactly (helper "logproba"; naive Bayes' predict_log_proba)."""
    m = x.max(axis=1, keepdims=True)
    at_max = x == m
    count = at_max.sum(axis=1, keepdims=True, dtype=x.dtype)
    shift = np.where(np.isfinite(m), m, 0)
    with np.errstate(all="ignore"):  # inf - inf and log(0) -> NaN/-inf, as sklearn's rows
        s = np.exp(np.where(at_max, -np.inf, x) - shift).sum(axis=1, keepdims=True)
        s = np.where(s == 0, s, s / count)
        return np.log1p(s) + np.log(count) + m


@rule(Op.BINARY_PROBA)
def _binary(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    p = ins[0][:, :1]
    return np.concatenate([1.0 - p, p], axis=1)


@rule(Op.ARGMAX)
def _argmax(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    return np.argmax(ins[0], axis=1)[:, None].astype(np.int64)


@rule(Op.THRESHOLD)
def _threshold(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = ins[0][:, :1]
    v = float(node.attrs["value"])
    hit = (x > v) if node.attrs.get("strict", True) else (x >= v)
    return hit.astype(np.int64)


@rule(Op.ORDINAL_ENCODE)
def _ordinal_encode(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = ins[0]
    out = x.copy()
    for j, cats in zip(node.attrs["columns"], node.attrs["categories"]):
        cats = np.asarray(cats, dtype=np.float64)
        col = x[:, int(j)].astype(np.float64)
        pos = np.searchsorted(cats, col)  # NaN sorts past the end
        hit = (pos < len(cats)) & (np.append(cats, np.nan)[pos] == col)
        out[:, int(j)] = np.where(hit, pos, np.nan)
    return out


# ------------------------------------------------------------- pipeline op rules --
# scikit-learn featurizers and linear models; float64 throughout (sklearn's float64 path;
# float32 inputs are promoted, the runtime casts the output back where sklearn keeps float32).


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


@rule(Op.LINEAR)
def _linear(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    # safe_sparse_dot(X, coef_.T) + intercept_ (sklearn/linear_model/_base.py)
    return _f64(ins[0]) @ _f64(node.attrs["weight"]) + _f64(node.attrs["bias"])


@rule(Op.SELECT)
def _select(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    return ins[0][:, np.asarray(node.attrs["columns"], dtype=np.int64).reshape(-1)]


@rule(Op.CONCAT)
def _concat(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    return np.concatenate([_f64(x) for x in ins], axis=1)


@rule(Op.CENTER_SCALE)
def _center_scale(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    # StandardScaler/RobustScaler/MaxAbsScaler: X -= center; X /= scale (two roundings)
    return (_f64(ins[0]) - _f64(node.attrs["center"])) / _f64(node.attrs["scale"])


@rule(Op.CLIP)
def _clip(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    return np.clip(_f64(ins[0]), float(node.attrs["low"]), float(node.attrs["high"]))


@rule(Op.NORMALIZE)
def _normalize(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    # sklearn.preprocessing.normalize: norms of 0 are replaced by 1 (_handle_zeros_in_scale)
    x = _f64(ins[0])
    norm = node.attrs["norm"]
    if norm == "l1":
        n = np.abs(x).sum(axis=1)
    elif norm == "l2":
        n = np.sqrt(np.einsum("ij,ij->i", x, x))
    else:
        n = np.max(np.abs(x), axis=1)
    zero = n == 0.0
    out = x / np.where(zero, 1.0, n)[:, None]
    if node.attrs.get("zero", "one") == "uniform":  # _predict_proba_lr: all-zero -> uniform
        out[zero] = 1.0 / x.shape[1]
    return out


@rule(Op.BINARIZE)
def _binarize(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    return (_f64(ins[0]) > float(node.attrs["threshold"])).astype(np.float64)


@rule(Op.IMPUTE)
def _impute(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = _f64(ins[0])
    missing = float(node.attrs["missing"])
    hit = np.isnan(x) if np.isnan(missing) else (x == missing)
    return np.where(hit, _f64(node.attrs["values"]), x)


def category_matches(x: np.ndarray, cats: np.ndarray) -> np.ndarray:
    """(n, len(cats)) bool: x equals the category, NaN matching a NaN category."""
    x = x[:, None]
    return (x == cats[None, :]) | (np.isnan(x) & np.isnan(cats)[None, :])


@rule(Op.ONE_HOT)
def _one_hot(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = _f64(ins[0])
    out = np.zeros((x.shape[0], int(node.width)), dtype=np.float64)
    for j, cats, slots, unknown in zip(node.attrs["columns"], node.attrs["categories"],
                                       node.attrs["slots"], node.attrs["unknown_slots"]):
        hit = category_matches(x[:, int(j)], _f64(cats))
        for k, slot in enumerate(np.asarray(slots, dtype=np.int64)):
            if slot >= 0:
                out[:, slot] = np.maximum(out[:, slot], hit[:, k])
        if int(unknown) >= 0:
            out[:, int(unknown)] = np.maximum(out[:, int(unknown)], ~hit.any(axis=1))
    return out


@rule(Op.CATEGORY_MAP)
def _category_map(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = _f64(ins[0])
    out = x.copy()
    for j, cats, codes, unknown in zip(node.attrs["columns"], node.attrs["categories"],
                                       node.attrs["codes"], node.attrs["unknown"]):
        hit = category_matches(x[:, int(j)], _f64(cats))
        first = np.argmax(hit, axis=1)
        code = np.append(_f64(codes), np.nan)[np.where(hit.any(axis=1), first, len(codes))]
        out[:, int(j)] = np.where(hit.any(axis=1), code, float(unknown))
    return out


@rule(Op.POLYNOMIAL)
def _polynomial(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = _f64(ins[0])
    powers = np.asarray(node.attrs["powers"], dtype=np.int64)
    out = np.ones((x.shape[0], powers.shape[0]), dtype=np.float64)
    for k, row in enumerate(powers):
        for j in np.flatnonzero(row):
            for _ in range(int(row[j])):  # repeated products, as sklearn multiplies columns
                out[:, k] = out[:, k] * x[:, j]
    return out


@rule(Op.UFUNC)
def _ufunc(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    with np.errstate(all="ignore"):  # log(-1) -> NaN, as numpy (sklearn does not check)
        return getattr(np, node.attrs["name"])(_f64(ins[0]))


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


@rule(Op.KERNEL)
def _kernel(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    a = node.attrs
    x, v, kind = _f64(ins[0]), _f64(a["vectors"]), a["kind"]
    gamma, coef0, libsvm = float(a.get("gamma", 1.0)), float(a.get("coef0", 0.0)), \
        a.get("form", "libsvm") == "libsvm"
    if kind == "rbf" and libsvm:  # k_function: exp(-gamma * dot(x - v, x - v))
        k = np.exp(-gamma * _pair_diffs(x, v, lambda d: np.einsum("ijk,ijk->ij", d, d)))
    elif kind == "rbf":  # rbf_kernel via euclidean_distances(squared=True)
        d = -2 * (x @ v.T)
        d += np.einsum("ij,ij->i", x, x)[:, None]
        d += np.einsum("ij,ij->i", v, v)[None, :]
        k = np.exp(np.maximum(d, 0) * -gamma)
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


_METRICS = {
    "euclidean": lambda d: np.sqrt(np.einsum("ijk,ijk->ij", d, d)),
    "manhattan": lambda d: np.abs(d).sum(axis=2),
    "chebyshev": lambda d: np.abs(d).max(axis=2),
}


@rule(Op.PAIRWISE_DISTANCE)
def _pairwise_distance(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x, v, metric = _f64(ins[0]), _f64(node.attrs["vectors"]), node.attrs["metric"]
    if metric == "cosine":  # cosine_distances: S = -cos; S += 1; clip to [0, 2]
        return np.clip(1.0 - _l2_rows(x) @ _l2_rows(v).T, 0.0, 2.0)
    if metric == "minkowski":
        p = float(node.attrs["p"])
        return _pair_diffs(x, v, lambda d: (np.abs(d) ** p).sum(axis=2)) ** (1.0 / p)
    return _pair_diffs(x, v, _METRICS[metric])


def distance_weights(dist: np.ndarray) -> np.ndarray:
    """neighbors._base._get_weights(dist, "distance"): 1 / dist per neighbour; a row with a
    zero distance weighs its zero-distance neighbours 1 and the others 0."""
    with np.errstate(divide="ignore"):
        w = 1.0 / dist
    inf = np.isinf(w)
    return np.where(inf.any(axis=1, keepdims=True), inf.astype(np.float64), w)


@rule(Op.KNN)
def _knn(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    dist = _f64(ins[0])
    k = int(node.attrs["k"])
    idx = np.argsort(dist, axis=1, kind="stable")[:, :k]  # equal distances: lowest index
    if node.attrs["weights"] == "distance":
        w = distance_weights(np.take_along_axis(dist, idx, axis=1))
    else:
        w = np.ones(idx.shape)
    values = _f64(node.attrs["values"])
    out = np.zeros((dist.shape[0], values.shape[1]))
    for i in range(k):  # neighbour order, as sklearn accumulates
        out += w[:, i:i + 1] * values[idx[:, i]]
    if node.attrs.get("normalize", False):
        total = out.sum(axis=1, keepdims=True)
        return out / np.where(total == 0.0, 1.0, total)
    return out / w.sum(axis=1, keepdims=True)



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

def evaluate(graph: Graph, X: np.ndarray, outputs: tuple[str, ...],
             options: CompileOptions | None = None) -> dict[str, np.ndarray]:
    """Evaluate the graph outputs named in ``outputs`` on X (2-D)."""
    options = options or CompileOptions()
    values: dict[str, Any] = {}
    wanted = {graph.outputs[o] for o in outputs}
    needed = _needed(graph, wanted)
    for node in graph.toposort():
        if node.name not in needed:
            continue
        if node.op is Op.INPUT:
            values[node.name] = X
            continue
        values[node.name] = RULES[node.op](node, [values[i] for i in node.inputs], options)
    return {o: values[graph.outputs[o]] for o in outputs}


def _needed(graph: Graph, wanted: set[str]) -> set[str]:
    by_name = graph.by_name
    seen: set[str] = set()
    stack = list(wanted)
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(by_name[n].inputs)
    return seen


class ReferenceExecutable(Executable):
    def __init__(self, spec: ModelSpec, options: CompileOptions) -> None:
        self.spec = spec
        self.options = options

    def run(self, X: Any, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        if not isinstance(X, np.ndarray):
            X = X.detach().cpu().numpy()
        return evaluate(self.spec.graph, X, outputs, self.options)

    def explain(self) -> dict[str, Any]:
        return {"backend": "reference", "why": "NumPy evaluator of the IR (the test oracle)"}


class ReferenceBackend(Backend):
    name = "reference"
    description = "NumPy evaluator of the IR; the oracle and fallback"

    @classmethod
    def compile(cls, spec: ModelSpec, options: CompileOptions, device: str) -> Executable:
        return ReferenceExecutable(spec, options)
