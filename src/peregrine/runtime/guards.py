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

import math
from typing import Any

import numpy as np

from peregrine.errors import InputError
from peregrine.ir import Op
from peregrine.ir.spec import BOUNDARY_KINDS, GUARD, ModelSpec
from peregrine.runtime.intervals import (
    FLOAT32_OVERFLOW,
    MAX64,
    Interval,
    intervals,
    within,
)

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
    return FLOAT32_OVERFLOW if kind.startswith("float32") else MAX64


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

    return min(largest(MAX64), largest(FLOAT32_OVERFLOW))


def _holds(graph: Any, needed: Any, found: tuple, m: float, node_limit: float,
           seed: Interval | None = None) -> bool:
    """Whether inputs in [-m, m] (or in ``seed``'s per-column interval) keep every node the
    guards read within ``node_limit`` and every guarded value within its rule."""
    b = intervals(graph, needed, m, seed)
    if any(v is not None and not within(v, node_limit) for v in b.values()):
        return False
    for o, kind, _ in found:
        v = b[graph.outputs[o]]
        if v is None:
            return False
        lo, hi, nan = (_columns(o, a) for a in v)
        if not within((lo, hi), _limit(kind)) or (kind.endswith("+nan") and nan.any()):
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
    node_limit = FLOAT32_OVERFLOW if x.dtype == np.float32 else MAX64
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


def _columns(output: str, v: Any) -> Any:
    """The guarded columns of an output's node value: all, or the input columns the output
    names after "@" (a selector's, read from the input itself)."""
    if v is None or "@" not in output:
        return v
    cols = np.asarray([int(c) for c in output.split("@")[1].split(",")], dtype=np.int64)
    return v[..., cols]


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
