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
from peregrine.ir.spec import GUARD, ModelSpec

# the smallest float64 magnitude that rounds to infinity in float32: 2**128 less half an ulp
# of FLT_MAX (that tie rounds to even, which is infinity); the input boundary (inputs.py)
# checks it too
FLOAT32_OVERFLOW = 2.0**128 - 2.0**103
_MAX64 = float(np.finfo(np.float64).max)
# relative slack on the analysed bounds: they are exact-arithmetic bounds, and each op rounds
# (a LINEAR row sum of n terms by at most n ulps); 1e-6 covers a million terms
_SLACK = 1e-6

# id(spec) -> (spec, guards, M)
_CACHE: dict[int, tuple[ModelSpec, tuple, float]] = {}


def guards(spec: ModelSpec) -> tuple[tuple, float]:
    """((output, kind, step), ...) and the input magnitude M below which none can fire."""
    entry = _CACHE.get(id(spec))
    if entry is not None and entry[0] is spec:
        return entry[1], entry[2]
    # "guard:<kind>:<k>:<step>[@<input columns>]"
    found = tuple(g for g in ((o, *o[len(GUARD):].split("@")[0].split(":", 2)[::2])
                              for o in spec.graph.outputs if o.startswith(GUARD))
                  if g[1] not in ("na", "input"))  # boundary checks (inputs.py)
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
    within its limit (and NaN-free: NaN only comes from an infinity, or from ops this
    analysis does not know, which give M = 0: every large-enough input is then checked)."""
    def ok(m: float) -> bool:
        b = _bounds(spec, m)
        return all(node_ok(_columns(o, b.get(spec.graph.outputs[o])), kind)
                   for o, kind, _ in found)

    def node_ok(v: Any, kind: str) -> bool:
        return v is not None and bool(np.all(v * (1 + _SLACK) < _limit(kind)))

    lo, hi = -1074, 1024  # M = 2**k: bisect on the exponent (bounds grow with M)
    if not ok(2.0**lo):
        return 0.0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(2.0**mid):
            lo = mid
        else:
            hi = mid
    return 2.0**lo


def _columns(output: str, v: Any) -> Any:
    """The guarded columns of an output's node value: all, or the input columns the output
    names after "@" (a selector's, read from the input itself)."""
    if v is None or "@" not in output:
        return v
    cols = np.asarray([int(c) for c in output.split("@")[1].split(",")], dtype=np.int64)
    return v[..., cols]


def _bounds(spec: ModelSpec, m: float) -> dict[str, np.ndarray]:
    """Per node, an upper bound of each column's magnitude for inputs with |x| <= m (None
    where an op is not analysed); only the nodes guards read are needed."""
    graph = spec.graph
    wanted = [graph.outputs[o] for o in graph.outputs if o.startswith(GUARD)]
    needed = graph.needed(wanted)
    out: dict[str, Any] = {}
    with np.errstate(all="ignore"):
        for n in graph.toposort():
            if n.name not in needed:
                continue
            ins = [out.get(i) for i in n.inputs]
            if any(v is None for v in ins):
                out[n.name] = None
                continue
            out[n.name] = _rule(n, ins, m)
    return out


def _f(v: Any) -> np.ndarray:
    return np.abs(np.asarray(v, dtype=np.float64))


def _rule(n: Any, ins: list, m: float) -> np.ndarray | None:
    a = n.attrs
    op = n.op
    if op is Op.INPUT:
        return np.full(int(n.width), m)
    x = ins[0] if ins else None
    if op is Op.SELECT:
        return x[np.asarray(a.columns, dtype=np.int64).reshape(-1)]
    if op is Op.CONCAT:
        return np.concatenate(ins)
    if op is Op.CENTER_SCALE:
        return (x + _f(a.center)) / _f(a.scale)
    if op is Op.AFFINE:
        return x * _f(a.scale) + _f(a.shift)
    if op is Op.IMPUTE:
        return np.maximum(x, np.nan_to_num(_f(a.values), nan=0.0))
    if op is Op.CLIP:
        return np.minimum(x, max(abs(float(a.low)), abs(float(a.high))))
    if op is Op.LINEAR:
        return x @ _f(a.weight) + _f(a.bias)
    if op is Op.POLYNOMIAL:
        p = np.asarray(a.powers, dtype=np.float64)
        return np.exp2(p @ np.log2(np.maximum(x, 1.0)))  # prod x_j**p_j, factors >= 1
    if op is Op.NORMALIZE:
        return np.ones(int(n.width))
    if op is Op.ONE_HOT:
        return np.ones(int(n.width))
    return None


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
                    not o.startswith((GUARD + "na:", GUARD + "input:")):
                if "@" not in o:
                    read = None
                    break
                read = read | frozenset(int(c) for c in o.split("@", 1)[1].split(","))
    if len(_READ) > 4096:
        _READ.clear()
    _READ[id(spec)] = (spec, read)
    return read


def check_guards(spec: ModelSpec, arr: Any) -> None:
    """Raise InputError where a guarded value breaks its step's rule (the rows whose largest
    magnitude exceeds M are evaluated; the others cannot)."""
    found, m = guards(spec)
    if not found:
        return
    x = arr if isinstance(arr, np.ndarray) else arr.detach().cpu().numpy()
    if not x.size:
        return
    read = read_columns(spec)  # the columns the graph and its guards read (the others: a
    probe = x if read is None or len(read) >= x.shape[1] else \
        x[:, np.asarray(sorted(read), dtype=np.intp)]  # frame's unconverted zeros)
    flat = probe.ravel(order="K")  # a view of a C- or F-ordered matrix
    # NaN-ignoring max and min: no (rows, columns) temporary on the common path
    if np.fmax.reduce(flat) <= m and np.fmin.reduce(flat) >= -m:
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
