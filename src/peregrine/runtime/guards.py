"""Guards: values a pipeline step re-validates after earlier steps computed them.

scikit-learn's estimators run ``check_array`` on what the step before them returns: a tree
casts it to float32 and rejects the infinity a float64 value at or beyond float32's range
becomes ("Input X contains infinity or a value too large for dtype('float32')"); a linear
model rejects NaN and infinity. A StandardScaler with a tiny scale, a PolynomialFeatures or a
FunctionTransformer can produce such values from inputs the boundary accepts. The frontend
names each re-validated node as a graph output ``GUARD + "<kind>:<k>:<step>"``
(``steps.Context.guard``).

The check costs nothing measurable on ordinary inputs: an interval analysis of the graph,
made once per model, gives the largest input magnitude ``M`` for which no guarded value can
break its rule (``bound``); an input whose largest magnitude (NaN ignored) is at most ``M``
needs nothing more. Above it (a value near 1e36 reaching a scaler with scale 1e-3), the
guarded nodes are evaluated by the reference rules (``ir.semantics.evaluate``, the
backends' own semantics) and the first offending value raises InputError naming the step,
the row and the column. The backends are untouched: every one answers through this check."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from peregrine.errors import InputError
from peregrine.ir import Op
from peregrine.ir.spec import BOUNDARY_KINDS, GUARD, ModelSpec

# the smallest float64 magnitude that rounds to infinity in float32: 2**128 less half an ulp
# of FLT_MAX (that tie rounds to even, which is infinity); the input boundary (inputs.py)
# checks it too
FLOAT32_OVERFLOW = 2.0**128 - 2.0**103
_MAX64 = float(np.finfo(np.float64).max)
# relative slack on the analysed bounds: they are exact-arithmetic bounds, and each op rounds
# (a LINEAR row sum of n terms by at most n ulps); 1e-6 covers a million terms
_SLACK = 1e-6


# M when even an all-zero row may break a rule: every row is checked (|x| > -1 always holds;
# CompiledModel's one-row proof compares a sum of squares with -M*M, which nothing passes)
EVERY_ROW = -1.0

# id(spec) -> (spec, guards, M)
_CACHE: dict[int, tuple[ModelSpec, tuple, float]] = {}


def guards(spec: ModelSpec) -> tuple[tuple, float]:
    """((output, kind, step), ...) and the input magnitude M below which none can fire."""
    entry = _CACHE.get(id(spec))
    if entry is not None and entry[0] is spec:
        return entry[1], entry[2]
    # "guard:<kind>:<k>:<step>[#<method>,...][@<input columns>]"
    found = tuple((o, kind, step.split("#")[0]) for o, kind, step in (
        (o, *o[len(GUARD):].split("@")[0].split(":", 2)[::2])
        for o in spec.graph.outputs if o.startswith(GUARD)) if kind not in BOUNDARY_KINDS)
    m = _safe_magnitude(spec, found) if found else math.inf
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[id(spec)] = (spec, found, m)
    return found, m


_NA: dict[int, tuple[ModelSpec, dict[int, str]]] = {}


def na_columns(spec: ModelSpec) -> dict[int, str]:
    """Input string columns a step reads that cannot take pd.NA (guards of kind "na": a
    string SimpleImputer or MissingIndicator, whose ``X != X`` mask raises TypeError on it),
    each with that step's name: the boundary raises InputError there (categories.py)."""
    entry = _NA.get(id(spec))
    if entry is not None and entry[0] is spec:
        return entry[1]
    out: dict[int, str] = {}
    for o in spec.graph.outputs:
        if o.startswith(GUARD + "na:") and "@" in o:
            head, cols = o.split("@", 1)
            for c in cols.split(","):
                out.setdefault(int(c), head.split(":", 3)[3])
    if len(_NA) > 4096:
        _NA.clear()
    _NA[id(spec)] = (spec, out)
    return out


def _limit(kind: str) -> float:
    return FLOAT32_OVERFLOW if kind.startswith("float32") else _MAX64


def _safe_magnitude(spec: ModelSpec, found: tuple) -> float:
    """The largest power of two M such that inputs with |x| <= M keep every guarded value
    within its rule, or EVERY_ROW when even an all-zero row may break one (log(0) is -inf).

    Sound for both input dtypes: on a float64 input no node the guards read may overflow
    float64 (an infinity can turn into NaN or a finite value further on, so the analysis does
    not follow it); on a float32 input the ops that keep float32 overflow at float32's range,
    so no such node may reach it either. M is the smaller of the two bounds."""
    graph = spec.graph
    needed = graph.needed([graph.outputs[o] for o, _, _ in found])

    def ok(m: float, node_limit: float) -> bool:
        return _holds(graph, needed, found, m, node_limit)

    def largest(node_limit: float) -> float:
        lo, hi = -1074, 1024  # M = 2**k: bisect on the exponent (bounds grow with M)
        if not ok(2.0**lo, node_limit):
            return 0.0 if ok(0.0, node_limit) else EVERY_ROW
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok(2.0**mid, node_limit):
                lo = mid
            else:
                hi = mid
        return 2.0**lo

    return min(largest(_MAX64), largest(FLOAT32_OVERFLOW))


def _holds(graph: Any, needed: Any, found: tuple, m: float, node_limit: float,
           seed: Interval | None = None) -> bool:
    """Whether inputs in [-m, m] (or in ``seed``'s per-column interval) keep every node the
    guards read within ``node_limit`` and every guarded value within its rule."""
    b = _intervals(graph, needed, m, seed)
    if any(v is not None and not _within(v, node_limit) for v in b.values()):
        return False
    for o, kind, _ in found:
        v = b[graph.outputs[o]]
        if v is None:
            return False
        lo, hi, nan = (_columns(o, a) for a in v)
        if not _within((lo, hi), _limit(kind)) or (kind.endswith("+nan") and nan.any()):
            return False
    return True


# Rows from which a batch is first tried against its own column ranges: below, evaluating the
# rows by the rules costs less than the interval evaluation (about 40 us)
PROOF_ROWS = 256


def batch_proves(spec: ModelSpec, x: np.ndarray, *, nan_ok: bool) -> bool:
    """Whether this batch's own per-column [min, max] keeps every guard within its rule: the
    intervals of ``_safe_magnitude`` seeded with the batch's column ranges instead of
    [-M, M]. A one-sided rule (a log before a model that rejects NaN: M is EVERY_ROW, since
    log(0) is -inf) sent every row of every batch to the rules; strictly positive columns
    prove it here in two passes.

    Also proves the input itself finite (the callers skip their own check): with ``nan_ok``
    NaN is ignored by the ranges (the source accepts it; every column is then taken as
    possibly NaN, so a guard rejecting NaN needs an imputer before it); without, a NaN makes
    its column's range NaN and the proof fails. Infinity, and a float64 value float32 makes
    infinite where the source rounds to float32, fail it too."""
    found, _ = guards(spec)
    if not found or x.ndim != 2 or not x.shape[0] or x.dtype.kind != "f":
        return False
    low, high = (np.fmin, np.fmax) if nan_ok else (np.minimum, np.maximum)
    with np.errstate(invalid="ignore"):
        lo = _column_reduce(low, x).astype(np.float64)
        hi = _column_reduce(high, x).astype(np.float64)
    if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
        return False  # NaN where refused (or a column all NaN), or an infinity
    m = float(max(np.abs(lo).max(), np.abs(hi).max()))
    if spec.finite_dtype == "float32" and m >= FLOAT32_OVERFLOW:
        return False
    graph = spec.graph
    needed = graph.needed([graph.outputs[o] for o, _, _ in found])
    seed = (lo, hi, np.full(lo.size, nan_ok))
    node_limit = FLOAT32_OVERFLOW if x.dtype == np.float32 else _MAX64
    return _holds(graph, needed, found, m, node_limit, seed)


def _column_reduce(f: np.ufunc, x: np.ndarray) -> np.ndarray:
    """``f.reduce(x, axis=0)``, fast on narrow C-ordered rows: NumPy's loop over 10-wide rows
    took 450 us for 20K x 10 doubles; the rows viewed k at a time as one 4K-wide row, then
    the k partial rows reduced, take 48 us (AMD EPYC family 26)."""
    n, d = x.shape
    k = max(1, 4096 // max(1, d))
    if not x.flags.c_contiguous or n < 2 * k:
        return f.reduce(x, axis=0)
    n0 = n - n % k
    out = f.reduce(f.reduce(x[:n0].reshape(-1, k * d), axis=0).reshape(k, d), axis=0)
    return f(out, f.reduce(x[n0:], axis=0)) if n0 < n else out


def _within(v: tuple, limit: float) -> bool:
    with np.errstate(invalid="ignore"):  # a NaN bound fails
        return bool(np.all(np.maximum(np.abs(v[0]), np.abs(v[1])) * (1 + _SLACK) < limit))


def _columns(output: str, v: Any) -> Any:
    """The guarded columns of an output's node value: all, or the input columns the output
    names after "@" (a selector's, read from the input itself)."""
    if v is None or "@" not in output:
        return v
    cols = np.asarray([int(c) for c in output.split("@")[1].split(",")], dtype=np.int64)
    return v[..., cols]


# An interval per column: (lo, hi, nan), float64 arrays lo <= hi bounding every value a node
# computes for inputs in [-m, m], and a bool array "may be NaN the steps computed" (log of a
# negative number; a NaN in the input itself is the boundary's business: inputs.py)
Interval = tuple[np.ndarray, np.ndarray, np.ndarray]


def _intervals(graph: Any, needed: Any, m: float, seed: Interval | None = None
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
    limit = _MAX64 / 4  # room for the rounding of the sums and the -2 x.v + ... steps
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
    overflow = not vectors.shape[1] * reach**power < _MAX64 / 4  # any metric's sum of terms
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
    if not _within((lo, hi), FLOAT32_OVERFLOW):
        return np.full(lo.shape, -np.inf), np.full(hi.shape, np.inf), nan
    return lo, hi, nan


def _net_input(a: Any, v: Interval) -> Interval | None:
    """The input as the network reads it: rounded to float32 (None where it may overflow)."""
    if a.net_dtype == "float32" and not _within(v[:2], FLOAT32_OVERFLOW):
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


_READ: dict[int, tuple[ModelSpec, frozenset | None]] = {}


def read_columns(spec: ModelSpec) -> frozenset | None:
    """The input columns the program reads: the union of the column selections reading the
    input when those are its only readers (a ColumnTransformer's blocks, the selections the
    injection pass moved to the input), else None (every column)."""
    entry = _READ.get(id(spec))
    if entry is not None and entry[0] is spec:
        return entry[1]
    graph = spec.graph
    x = next(n.name for n in graph.nodes if n.op is Op.INPUT)
    readers = [n for n in graph.nodes if x in n.inputs]
    read: frozenset | None = None
    if readers and all(n.op is Op.SELECT for n in readers):
        # string columns an encoder with handle_unknown='error' reads are looked up even when
        # the passes dropped every indicator of theirs: the lookup is where the unseen
        # category raises, as scikit-learn's encoder would
        read = frozenset(int(c) for n in readers
                         for c in np.asarray(n.attrs.columns).reshape(-1)) | frozenset(
                             spec.category_unknown_error)
    if read is not None:  # the columns guards read at the input (runtime/guards.py)
        for o, v in graph.outputs.items():
            if o.startswith(GUARD) and v == x and \
                    not o.startswith(tuple(f"{GUARD}{k}:" for k in BOUNDARY_KINDS)):
                if "@" not in o:
                    read = None
                    break
                read = read | frozenset(int(c) for c in o.split("@", 1)[1].split(","))
    if len(_READ) > 4096:
        _READ.clear()
    _READ[id(spec)] = (spec, read)
    return read


def beyond_bound(spec: ModelSpec, arr: Any) -> bool:
    """Whether ``arr`` holds a magnitude above the model's bound M (NaN ignored): only then can
    a guard fire, and only then may the steps' values overflow (the caller then runs the
    backend quietly: the overflow is expected, and the guards say where it breaks a rule)."""
    found, m = guards(spec)
    if not found:
        return False
    x = arr if isinstance(arr, np.ndarray) else arr.detach().cpu().numpy()
    if not x.size:
        return False
    read = read_columns(spec)  # the columns the graph and its guards read (the others: a
    probe = x if read is None or len(read) >= x.shape[1] else \
        x[:, np.asarray(sorted(read), dtype=np.intp)]  # frame's unconverted zeros)
    flat = probe.ravel(order="K")  # a view of a C- or F-ordered matrix
    # NaN-ignoring max and min: no (rows, columns) temporary on the common path
    # (as Python floats: a float32 compared with a float64 beyond its range warns of the cast)
    return not (float(np.fmax.reduce(flat)) <= m and float(np.fmin.reduce(flat)) >= -m)


def holds_for(output: str, method: str | None) -> bool:
    """Whether the guard ``output`` holds for ``method``: every method, unless its name lists
    the methods that run the step re-validating (``#predict,...``: a StackingRegressor's
    transform never runs the final estimator; frontends/sklearn_pipeline.py ``guard_name``)."""
    head = output.split("@")[0]
    if method is None or "#" not in head:
        return True
    return method in head.split("#", 1)[1].split(",")


def check_guards(spec: ModelSpec, arr: Any, beyond: bool | None = None,
                 method: str | None = None) -> None:
    """Raise InputError where a guarded value breaks its step's rule (the rows whose largest
    magnitude exceeds M are evaluated; the others cannot). ``beyond``: ``beyond_bound``'s
    answer when the caller has it; ``method``: only the guards holding for it (None: all)."""
    if not (beyond_bound(spec, arr) if beyond is None else beyond):
        return
    found, m = guards(spec)
    found = tuple(g for g in found if holds_for(g[0], method))
    if not found:
        return
    x = arr if isinstance(arr, np.ndarray) else arr.detach().cpu().numpy()
    # a large batch: its own column ranges first (the boundary has applied the source's NaN
    # policy to x already)
    if x.shape[0] >= PROOF_ROWS and batch_proves(spec, x, nan_ok=spec.allow_nan):
        return
    with np.errstate(invalid="ignore"):
        rows = np.flatnonzero(np.any(np.abs(x) > m, axis=1))
    if not rows.size:
        return
    from peregrine.ir.semantics import evaluate  # the reference rules: the op semantics

    with np.errstate(all="ignore"):  # the overflow is what is being looked for
        values = evaluate(spec.graph, np.ascontiguousarray(x[rows]),
                          tuple(o for o, _, _ in found))
    for o, kind, step in found:
        v = _columns(o, np.asarray(values[o], dtype=np.float64))
        with np.errstate(invalid="ignore"):
            bad = np.abs(v) >= FLOAT32_OVERFLOW if kind.startswith("float32") else np.isinf(v)
            if kind.endswith("+nan"):
                bad |= np.isnan(v)
        if bad.any():
            r, c = (int(i) for i in np.argwhere(bad)[0])
            value = float(v[r, c])
            why = ("NaN" if value != value else
                   "infinity" if math.isinf(value) else
                   "a value too large for float32 (it casts its input to float32, where it "
                   "becomes infinity)")
            raise InputError(
                f"{spec.source}: row {int(rows[r])}: the steps before {step} compute "
                f"{value!r} in column {c} of its input; {step} rejects {why}, as scikit-learn "
                "does (check_array on that step's input)")
