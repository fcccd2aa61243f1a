"""Interval rules: per graph node, a per-column interval (lo, hi, may-be-NaN) bounding every
value the node computes for inputs in a given interval, op by op (``_RULES``). The guards
(runtime/guards.py) use them to find the input magnitude below which no re-validated value
can break its step's rule, and to prove a batch by its own column ranges."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from peregrine.ir import Op

# the smallest float64 magnitude that rounds to infinity in float32: 2**128 less half an ulp
# of FLT_MAX (that tie rounds to even, which is infinity); the input boundary (inputs.py)
# checks it too
FLOAT32_OVERFLOW = 2.0**128 - 2.0**103
MAX64 = float(np.finfo(np.float64).max)
# relative slack on the analysed bounds: they are exact-arithmetic bounds, and each op rounds
# (a LINEAR row sum of n terms by at most n ulps); 1e-6 covers a million terms
SLACK = 1e-6


def within(v: tuple, limit: float) -> bool:
    with np.errstate(invalid="ignore"):  # a NaN bound fails
        return bool(np.all(np.maximum(np.abs(v[0]), np.abs(v[1])) * (1 + SLACK) < limit))


# An interval per column: (lo, hi, nan), float64 arrays lo <= hi bounding every value a node
# computes for inputs in [-m, m], and a bool array "may be NaN the steps computed" (log of a
# negative number; a NaN in the input itself is the boundary's business: inputs.py)
Interval = tuple[np.ndarray, np.ndarray, np.ndarray]


def intervals(graph: Any, needed: Any, m: float, seed: Interval | None = None
               ) -> dict[str, Interval | None]:
    """Per needed node its interval (None where no rule is known: no bound). The input's is
    [-m, m] per column, or ``seed`` (then m bounds its magnitudes)."""
    out: dict[str, Interval | None] = {}
    with np.errstate(all="ignore"):  # bounds beyond float64 are infinite: they fail the check
        for n in graph.toposort():
            if n.name not in needed:
                continue
            ins = [out.get(i) for i in n.inputs]
            rule = _RULES.get(n.op)
            if n.op is Op.INPUT and seed is not None:
                out[n.name] = seed
            elif n.op is Op.ARGMAX:  # a column index whatever the row holds (NaN: the first)
                width = graph.by_name[n.inputs[0]].width
                out[n.name] = None if width is None else _fixed(n, 0.0, float(width) - 1.0)
            elif rule is None or (n.op not in _ANY_INPUT and any(v is None for v in ins)):
                out[n.name] = None
            else:
                out[n.name] = rule(n, n.attrs, ins, m)
    return out


def _ends(a: np.ndarray, b: np.ndarray, nan: np.ndarray) -> Interval:
    """The interval of a function monotone on the input interval, from its two ends."""
    return np.minimum(a, b), np.maximum(a, b), nan


def _fixed(n: Any, lo: float, hi: float, nan: Any = False) -> Interval:
    w = int(n.width)
    return np.full(w, lo), np.full(w, hi), np.broadcast_to(np.asarray(nan), (w,)).copy()


def _f(v: Any, width: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(v, dtype=np.float64), (width,))


def _linear(n: Any, a: Any, ins: list, m: float) -> Interval:
    lo, hi, nan = ins[0]
    w = np.asarray(a.weight, dtype=np.float64)
    pos, neg = np.maximum(w, 0.0), np.minimum(w, 0.0)
    bias = np.asarray(a.bias, dtype=np.float64)
    any_nan = np.full(w.shape[1], nan.any())  # NaN * 0 is NaN: every output
    return lo @ pos + hi @ neg + bias, hi @ pos + lo @ neg + bias, any_nan


def _polynomial(n: Any, a: Any, ins: list, m: float) -> Interval:
    lo, hi, nan = ins[0]
    p = np.asarray(a.powers, dtype=np.float64)
    mag = np.maximum(np.maximum(np.abs(lo), np.abs(hi)), 1.0)  # factors >= 1 bound the product
    b = np.exp2(p @ np.log2(mag))
    return -b, b, (p @ nan.astype(np.float64)) > 0


def _impute(n: Any, a: Any, ins: list, m: float) -> Interval:
    lo, hi, nan = ins[0]
    v = _f(a.values, lo.size)
    fill = np.nan_to_num(v, nan=0.0)  # a NaN fill value leaves NaN, flagged below
    lo2, hi2 = np.minimum(lo, fill), np.maximum(hi, fill)
    if math.isnan(float(a.missing)):
        return lo2, hi2, nan & np.isnan(v)
    return lo2, hi2, nan | np.isnan(v)


# the domain's lower end of the ufuncs defined on part of the line (below it: NaN); each
# other ufunc is monotone over the line unless named in _UFUNC_SPECIAL
_DOMAIN = {"log": 0.0, "log2": 0.0, "log10": 0.0, "log1p": -1.0, "sqrt": 0.0}
_DECREASING = frozenset({"negative"})


def _ufunc(n: Any, a: Any, ins: list, m: float) -> Interval:
    lo, hi, nan = ins[0]
    name = str(a.name)
    f = getattr(np, name)
    if name in ("sin", "cos"):
        return _fixed(n, -1.0, 1.0, nan)
    if name in ("absolute", "square"):
        low = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(np.abs(lo), np.abs(hi)))
        high = np.maximum(np.abs(lo), np.abs(hi))
        return f(low), f(high), nan
    if name == "reciprocal":  # monotone on each side of 0; 1/0 is infinity
        spans0 = (lo <= 0) & (hi >= 0)
        return (np.where(spans0, -np.inf, 1.0 / hi), np.where(spans0, np.inf, 1.0 / lo), nan)
    if name in _DOMAIN:
        d = _DOMAIN[name]
        nan = nan | (lo < d)  # values below the domain become NaN
        lo, hi = np.maximum(lo, d), np.maximum(hi, d)
    a_, b_ = f(lo), f(hi)
    return _ends(b_, a_, nan) if name in _DECREASING else _ends(a_, b_, nan)


def _power(n: Any, a: Any, ins: list, m: float) -> Interval:
    from peregrine.ir.semantics.transformers import box_cox, yeo_johnson

    lo, hi, nan = ins[0]
    if a.method == "box-cox":  # x <= 0 raises first (its RANGE_CHECK, an input check)
        tiny = np.nextafter(0.0, 1.0)
        lo, hi = np.maximum(lo, tiny), np.maximum(hi, tiny)
    fn = yeo_johnson if a.method == "yeo-johnson" else box_cox
    lam = np.asarray(a.lambdas, dtype=np.float64)
    # both transforms increase with x for every lambda: the ends map to the ends
    low = np.asarray([fn(np.asarray([v]), float(k))[0] for v, k in zip(lo, lam)])
    high = np.asarray([fn(np.asarray([v]), float(k))[0] for v, k in zip(hi, lam)])
    return low, high, nan


def _quantile(n: Any, a: Any, ins: list, m: float) -> Interval:
    from peregrine.ir.semantics.transformers import quantile_clip

    low, high = quantile_clip() if a.output == "normal" else (0.0, 1.0)
    return _fixed(n, low, high, True if ins[0] is None else ins[0][2])  # NaN passes through


def _digitize(n: Any, a: Any, ins: list, m: float) -> Interval:
    counts = np.asarray([len(e) for e in a.edges], dtype=np.float64)
    return np.zeros(counts.size), counts, np.zeros(counts.size, dtype=bool)


def _clip(n: Any, a: Any, ins: list, m: float) -> Interval:
    lo, hi, nan = ins[0]
    low, high = float(a.low), float(a.high)
    return np.clip(lo, low, high), np.clip(hi, low, high), nan


def _forest(n: Any, a: Any, ins: list, m: float) -> Interval:
    """A tree ensemble's aggregated output, whatever it reads (every value, NaN and infinity
    too, reaches a leaf): the base score plus, per tree, its smallest and largest leaf."""
    lo, hi, nan = _forest_range(a.forest)
    return lo.copy(), hi.copy(), nan.copy()


@functools.lru_cache(maxsize=64)  # the same for every M the bisection tries
def _forest_range(f: Any) -> Interval:
    lo, hi, mag = (np.zeros(f.n_outputs) for _ in range(3))
    leaf = f.feature < 0
    for t in range(f.n_trees):
        start, stop = int(f.tree_offsets[t]), int(f.tree_offsets[t + 1])
        v = f.value[start:stop][leaf[start:stop]]
        if f.value_width == f.n_outputs:
            lo, hi = lo + v.min(axis=0), hi + v.max(axis=0)
            mag += np.abs(v).max(axis=0)
        else:
            g = int(f.tree_group[t])
            lo[g], hi[g] = lo[g] + v[:, 0].min(), hi[g] + v[:, 0].max()
            mag[g] += np.abs(v[:, 0]).max()
    base = np.asarray(f.base_score, dtype=np.float64)
    # the library's sum rounds (float32 for XGBoost): at most (trees + 1) ulps of the
    # magnitudes added
    pad = (mag + np.abs(base)) * (f.n_trees + 1) * float(np.finfo(f.sum_dtype).eps)
    lo, hi = lo - pad, hi + pad
    if not f.sum_starts_at_base:
        lo, hi = lo / f.output_divisor(), hi / f.output_divisor()
    return lo + base, hi + base, np.zeros(f.n_outputs, dtype=bool)


def _link(n: Any, a: Any, ins: list, m: float) -> Interval | None:
    lo, hi, nan = ins[0]
    kind = a.kind.value
    if kind == "identity":
        return lo, hi, nan
    if kind == "sigmoid":  # increasing for a positive scale, in [0, 1] either way
        return _fixed(n, 0.0, 1.0, nan)
    if kind == "softmax":  # a NaN anywhere in the row spreads over it
        return _fixed(n, 0.0, 1.0, nan.any())
    return None


def _rowwise(n: Any, a: Any, ins: list, m: float) -> Interval:  # NORMALIZE: |x_j| <= norm
    return _fixed(n, -1.0, 1.0, ins[0][2].any())


def _kernel(n: Any, a: Any, ins: list, m: float) -> Interval | None:
    """KERNEL (``ir/semantics/kernels.py``), each row against each vector, then
    KernelCenterer's centring. None (no bound) wherever an intermediate may overflow: there the
    expanded rbf distance can be ``inf - inf`` (NaN; scikit-learn's KernelPCA then raises),
    so the bisection settles on an M below it (about 1e153 for a few features)."""
    lo, hi, nan = ins[0]
    v = np.asarray(a.vectors, dtype=np.float64)
    w = v.shape[0]
    mag = np.maximum(np.abs(lo), np.abs(hi))
    xx = float(np.sum(mag * mag))  # |x|^2
    dot = np.abs(v) @ mag  # |x.v| per vector
    vv = np.einsum("ij,ij->i", v, v)
    limit = MAX64 / 4  # room for the rounding of the sums and the -2 x.v + ... steps
    if not (xx < limit and float(dot.max(initial=0.0)) < limit and float(vv.max(initial=0.0)) < limit):
        return None
    kind, any_nan = str(a.kind), np.full(w, nan.any())  # NaN spreads over the row
    if kind in ("rbf", "sigmoid", "cosine"):  # exp(-gamma d) for gamma >= 0; tanh; unit rows
        low, high = (0.0 if kind == "rbf" and float(a.gamma) >= 0 else -np.inf if kind == "rbf"
                     else -1.0), (1.0 if kind != "rbf" or float(a.gamma) >= 0 else np.inf)
        k_lo, k_hi = np.full(w, low), np.full(w, high)
    elif kind == "linear":
        k_lo, k_hi = -dot, dot
    else:  # poly: |gamma x.v + coef0| ** degree
        b = (abs(float(a.gamma)) * dot + abs(float(a.coef0))) ** float(a.degree)
        k_lo, k_hi = -b, b
    if a.center_rows is None:
        return k_lo, k_hi, any_nan
    # k - center_rows - (row mean of k) + center_all; the mean lies within the row's range
    c, call = np.asarray(a.center_rows, dtype=np.float64), float(a.center_all)
    return (k_lo - c - float(k_hi.max()) + call, k_hi - c - float(k_lo.min()) + call, any_nan)


def _knn(n: Any, a: Any, ins: list, m: float) -> Interval | None:
    """KNN (``ir/semantics/neighbours.py``): a mean of k fitted rows' values with weights >= 0,
    so within each column's range of values; with ``normalize`` (a classifier's one-hot
    values) each row divided by its sum (0 -> 1), in [0, 1]. NaN where the input may be NaN,
    or without ``normalize``, with distance weights where a distance may overflow (1 / inf is
    0 for every neighbour: 0 / 0).
    Without this rule a stacking model over a KNN re-evaluated the KNN by its NumPy rule on
    every call (its bound was EVERY_ROW)."""
    lo, hi, nan = ins[0]
    values = np.asarray(a.values, dtype=np.float64)
    w = values.shape[1]
    if a.normalize:
        if (values < 0).any():
            return None
        v_lo, v_hi = np.zeros(w), np.ones(w)
    else:
        v_lo, v_hi = values.min(axis=0), values.max(axis=0)
    vectors = np.asarray(a.vectors, dtype=np.float64)
    reach = np.float64(np.maximum(np.abs(lo), np.abs(hi)).max(initial=0.0)) + np.float64(
        np.abs(vectors).max(initial=0.0))  # |x_j - v_j| for every feature (NumPy: inf past)
    power = max(float(a.p), 2.0) if a.metric == "minkowski" else 2.0
    overflow = not vectors.shape[1] * reach**power < MAX64 / 4  # any metric's sum of terms
    may_nan = bool(nan.any()) or (a.weights == "distance" and overflow and not a.normalize)
    return v_lo, v_hi, np.full(w, may_nan)


# A PyTorch network's layers (ir/semantics/nn.py) compute in the network's dtype: a float32
# layer rounds its input to float32 (infinite past float32's range) and each of its sums
# rounds d + 1 times, so its exact-arithmetic bound is widened by that, and a bound reaching
# float32's range fails the check whatever the input dtype (the analysis's float64 pass
# would otherwise let a float32 network overflow).
_F32_EPS = 2.0**-23  # twice float32's unit roundoff: one rounding of a product and a sum


def _net(a: Any, lo: np.ndarray, hi: np.ndarray, nan: np.ndarray, roundings: int = 1) -> Interval:
    if a.net_dtype != "float32":
        return lo, hi, nan
    pad = np.maximum(np.abs(lo), np.abs(hi)) * roundings * _F32_EPS
    lo, hi = lo - pad, hi + pad
    if not within((lo, hi), FLOAT32_OVERFLOW):
        return np.full(lo.shape, -np.inf), np.full(hi.shape, np.inf), nan
    return lo, hi, nan


def _net_input(a: Any, v: Interval) -> Interval | None:
    """The input as the network reads it: rounded to float32 (None where it may overflow)."""
    if a.net_dtype == "float32" and not within(v[:2], FLOAT32_OVERFLOW):
        return None
    return v


def _dense(n: Any, a: Any, ins: list, m: float) -> Interval | None:
    v = _net_input(a, ins[0])
    if v is None:
        return None
    lo, hi, nan = _linear(n, a, [v], m)
    return _net(a, lo, hi, nan, roundings=np.shape(a.weight)[0] + 1)


def _batch_norm(n: Any, a: Any, ins: list, m: float) -> Interval | None:
    v = _net_input(a, ins[0])
    if v is None:
        return None
    alpha, beta = a.terms()
    return _net(a, *_ends(v[0] * alpha + beta, v[1] * alpha + beta, v[2]))


# lower ends of the activations below zero (their minima over the line, rounded down)
_ACTIVATION_FLOOR = {"silu": -0.2785, "gelu": -0.1701, "mish": -0.3089}


def _activation(n: Any, a: Any, ins: list, m: float) -> Interval | None:
    v = _net_input(a, ins[0])
    if v is None:
        return None
    lo, hi, nan = v
    kind, w = str(a.kind), lo.size
    if kind in ("softmax", "log_softmax"):  # a NaN anywhere in the row spreads over it
        nan = np.full(w, nan.any())
    if kind == "identity":
        out = (lo, hi)
    elif kind == "relu":
        out = (np.maximum(lo, 0.0), np.maximum(hi, 0.0))
    elif kind == "hardtanh":
        low, high = a.param("low"), a.param("high")
        out = (np.clip(lo, low, high), np.clip(hi, low, high))
    elif kind == "leaky_relu":  # x or alpha x: within alpha-scaled and plain ends
        ends = [lo, hi, lo * a.param("alpha"), hi * a.param("alpha")]
        out = (np.minimum(np.min(ends, axis=0), 0.0), np.maximum(np.max(ends, axis=0), 0.0))
    elif kind in ("sigmoid", "softmax"):
        out = (np.zeros(w), np.ones(w))
    elif kind == "tanh":
        out = (-np.ones(w), np.ones(w))
    elif kind in _ACTIVATION_FLOOR:  # at most max(x, 0)
        out = (np.full(w, _ACTIVATION_FLOOR[kind]), np.maximum(hi, 0.0))
    elif kind == "elu":  # x scale for x > 0, else within alpha scale of 0
        b = np.maximum(np.abs(lo), np.abs(hi)) * abs(a.param("scale")) + abs(
            a.param("alpha") * a.param("scale"))
        out = (-b, b)
    elif kind == "softplus" and a.param("beta") > 0:  # max(x, 0) < softplus <= that + ln2/b
        out = (np.zeros(w), np.maximum(hi, 0.0) + math.log(2.0) / a.param("beta"))
    elif kind == "log_softmax":  # x - max - log(sum), the sum >= 1: between lo - hi - log w
        out = (np.full(w, float(lo.min() - hi.max()) - math.log(w)), np.zeros(w))
    else:
        return None
    return _net(a, out[0], out[1], nan, roundings=2)


# ops whose output lies in a fixed range whatever their input holds (infinity, NaN): the
# rule needs no interval of the input (QUANTILE's NaN passes through: all flagged without one)
_ANY_INPUT = frozenset({Op.ONE_HOT, Op.BINARIZE, Op.DIGITIZE, Op.QUANTILE, Op.TREE_ENSEMBLE,
                        Op.ARGMAX, Op.THRESHOLD})

_RULES: dict[Op, Any] = {
    Op.INPUT: lambda n, a, ins, m: _fixed(n, -m, m),
    Op.SELECT: lambda n, a, ins, m: tuple(
        v[np.asarray(a.columns, dtype=np.int64).reshape(-1)] for v in ins[0]),
    Op.CONCAT: lambda n, a, ins, m: tuple(np.concatenate(v) for v in zip(*ins)),
    Op.CENTER_SCALE: lambda n, a, ins, m: _ends(
        *((e - _f(a.center, e.size)) / _f(a.scale, e.size) for e in ins[0][:2]), ins[0][2]),
    Op.AFFINE: lambda n, a, ins, m: _ends(
        *(e * _f(a.scale, e.size) + _f(a.shift, e.size) for e in ins[0][:2]), ins[0][2]),
    Op.IMPUTE: _impute,
    Op.CLIP: _clip,
    Op.LINEAR: _linear,
    Op.POLYNOMIAL: _polynomial,
    Op.KERNEL: _kernel,
    Op.KNN: _knn,
    Op.DENSE: _dense,
    Op.BATCH_NORM: _batch_norm,
    Op.ACTIVATION: _activation,
    Op.NORMALIZE: _rowwise,
    Op.ONE_HOT: lambda n, a, ins, m: _fixed(n, 0.0, 1.0),
    Op.BINARIZE: lambda n, a, ins, m: _fixed(n, 0.0, 1.0),  # NaN > t is False: 0
    Op.THRESHOLD: lambda n, a, ins, m: _fixed(n, 0.0, 1.0),  # a 0/1 label (NaN: 0)
    Op.UFUNC: _ufunc,
    Op.POWER: _power,
    Op.QUANTILE: _quantile,
    Op.DIGITIZE: _digitize,
    Op.TREE_ENSEMBLE: _forest,
    Op.LINK: _link,
    Op.BINARY_PROBA: lambda n, a, ins, m: (
        np.concatenate([1.0 - ins[0][1][:1], ins[0][0][:1]]),
        np.concatenate([1.0 - ins[0][0][:1], ins[0][1][:1]]), np.repeat(ins[0][2][:1], 2)),
}
