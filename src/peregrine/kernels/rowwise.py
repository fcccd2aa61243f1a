"""One LLVM kernel for a graph of row-wise pipeline ops (scalers, linear models, links...).

Why: these ops do a few flops per element, so run one at a time (NumPy rules, or torch ops on
row blocks) each is a pass over memory plus dispatch, and a float32 batch needs a float64 copy
first. The fused kernel reads each input row once (float32 or float64), keeps every
intermediate value of that row in registers as a ``<width x double>`` vector, and stores only
the outputs, in their final dtype. That is a single pass over the batch, the least any
implementation can do (ONNX Runtime's float32 kernels included) while still computing in
float64 as scikit-learn does.

Semantics are those of the op rules (``ir/semantics``) op by op, in float64 (the rules' casts), with the
rules' operation order where rounding depends on it (``(x - c) / s``, ``x * a + b``, products
then bias); sums run left to right where NumPy may pair them up, ``exp`` is vmath's vector
one (within 1 ulp of libm's) evaluated for the interleaved rows together, and ``log``/``sqrt``
are libm's/LLVM's: differences of a few ulps, far inside the conformance tolerances.
NaN follows IEEE comparisons exactly as the rules' NumPy expressions do.

The kernel also sums ``x * 0`` over every input value it reads: the sum is NaN exactly when the
input holds a NaN or an infinity, so the finite-input check scikit-learn makes costs nothing
extra (``RowKernel`` reports it; the runtime then takes its checking path).

Parameters (weights, centres...) are not baked into the code: they travel in one float64
buffer, and the spec holds only shapes, offsets and scalar attributes. Models of one shape
share a kernel, and the object cache (jit.py) keys on the spec.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from peregrine.ir import Graph, Link, Op
from peregrine.ir.semantics.kernels import far_rows_vanish
from peregrine.ir.semantics.pipeline import float32_params
from peregrine.ir.semantics.row_sums import row_sum_program
from peregrine.kernels import rowwise_onehot, rowwise_spline
from peregrine.kernels.rowwise_emit import RBF_CHUNK, Emitter

# Limits past which a fused kernel is the wrong tool: a LINEAR this large is a GEMM (torch's
# BLAS blocks it for the cache; a per-row loop would reload the weights every row), and very
# wide row vectors spill registers and take LLVM long to compile.
MAX_WIDTH = 512
MAX_WEIGHTS = 1 << 15
DOT_OUTPUTS = 4  # LINEAR with at most this many outputs: one vector dot product per output
# NumPy ufunc -> the kernel's form: LLVM intrinsics, exact arithmetic (square, negative,
# reciprocal, sign: NumPy's bits) and vmath's exp, log and log1p (each within 1 ulp of
# libm's and of NumPy's; libm's log once per lane made a log -> StandardScaler ->
# LogisticRegression pipeline slower than its rules). Not the other transcendental
# functions: NumPy's own SIMD routines (0.11 ms for log1p of 200K values, AMD EPYC family
# 26) beat a kernel calling the C library's per value (a log1p -> StandardScaler -> Ridge
# pipeline: 2.87 ms fused against 2.83 ms by the rules, before vmath's log1p)
UFUNCS = {"log": "log", "log1p": "log1p", "exp": "exp", "sqrt": "sqrt", "absolute": "fabs",
          "abs": "fabs",
          "square": "square", "negative": "negative", "reciprocal": "reciprocal",
          "sign": "sign", "floor": "floor", "ceil": "ceil", "rint": "rint", "trunc": "trunc"}
# ACTIVATION kinds fused for a float64 network (a float32 one rounds as torch does: its
# layers run torch's kernels): the row-wise softmax and log_softmax that QDA and GaussianNB
# pipelines end in, and ReLU
ACTIVATIONS = ("softmax", "log_softmax", "relu", "identity")
LINKS = (Link.IDENTITY, Link.SIGMOID, Link.SOFTMAX, Link.EXP)
INT_OPS = (Op.THRESHOLD, Op.ARGMAX)  # their values are int64 0/1 or indices (the rules')


@dataclass(frozen=True)
class RowSpec:
    """A fused kernel's structure: input dtype and width, the steps (op, inputs, width, scalar
    attributes, parameter offsets) and the outputs (value index, dtype). JSON text, hashed."""

    x_dtype: str
    n_features: int
    steps: str  # json list of step dicts
    outputs: str  # json list of [value index, dtype]

    @property
    def key(self) -> str:
        text = "|".join((self.x_dtype, str(self.n_features), self.steps, self.outputs))
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    @property
    def symbol(self) -> str:
        return f"peregrine_rows_{self.key}"

    def build_ir(self, triple: str = "") -> ir.Module:
        module = ir.Module(name=self.symbol)
        module.triple = triple
        Emitter(module, self).emit()
        return module


@dataclass(frozen=True)
class RowPlan:
    spec: RowSpec
    params: np.ndarray  # float64, what the offsets in spec.steps index
    out_dtypes: tuple[str, ...]
    out_widths: tuple[int, ...]


def plan(graph: Graph, wanted: list[str], narrow: list[bool | str], x_dtype: str
         ) -> RowPlan | None:
    """The fused kernel computing the nodes ``wanted`` (graph node names) from X, or None when
    some node it needs is not a row-wise op this generator knows (the caller keeps its
    op-by-op program). ``narrow[k]``: True stores output k in the input's dtype, a dtype name
    ("float32") in that dtype (rounded as NumPy's astype rounds), False in float64, "rule"
    in the dtype the node's rule returns for an ``x_dtype`` input."""
    x_node = next(n for n in graph.nodes if n.op is Op.INPUT)
    if not 0 < int(x_node.width or 0) <= MAX_WIDTH:
        return None
    by_name = graph.by_name
    index: dict[str, int] = {x_node.name: 0}
    # nodes whose rule returns float32 for this input dtype (scikit-learn's float32 flow):
    # their steps round to float32 where the rule does ("r32")
    f32: dict[str, bool] = {x_node.name: x_dtype == "float32"}
    steps: list[dict] = []
    params: list[np.ndarray] = []
    offset = 0

    def param(value: Any, size: int | None = None) -> list[int]:
        nonlocal offset
        arr = np.asarray(value, dtype=np.float64).reshape(-1)
        if size is not None:
            arr = np.broadcast_to(arr, (size,)) if arr.size == 1 else arr
            if arr.size != size:
                raise _Unfusable
        params.append(arr)
        offset += arr.size
        return [offset - arr.size, arr.size]

    order = graph.steps(wanted)
    for node in order:
        f32[node.name] = node.attrs.float32_out([f32[i] for i in node.inputs])
    # a LINEAR reading one-hot indicators picks its weight rows instead (rowwise_onehot.py)
    linears, absorbed = rowwise_onehot.absorbed(order, set(wanted),
                                                rowwise_onehot.value_readers(graph), by_name,
                                                f32)
    try:
        for node in order:
            if node.name in absorbed:
                continue
            if node.name in linears:
                step, ins, widths = rowwise_onehot.one_hot_linear_step(
                    node, linears[node.name], index, by_name, param)
            else:
                ins = [index[i] for i in node.inputs]
                widths = [int(by_name[i].width) for i in node.inputs]
                step = _step(node, widths, param, f32[node.name])
            # a fused rbf KERNEL loops over its vectors (rowwise_emit.op_rbf): wider is fine
            limit = MAX_KERNEL_WIDTH if node.op is Op.KERNEL else MAX_WIDTH
            if step is None or not 0 < int(node.width or 0) <= limit:
                return None
            step.update({"in": ins, "w": int(node.width), "win": widths})
            steps.append(step)
            index[node.name] = len(steps)
    except _Unfusable:
        return None
    if not steps:
        return None
    outs, dtypes, widths = [], [], []
    for name, thin in zip(wanted, narrow):
        node = by_name[name]
        if node.op is Op.INPUT:  # the input returned as is: nothing to fuse
            return None
        if thin == "rule":  # the dtype the node's rule returns for this input dtype
            thin = "float32" if f32[name] else False
        dtype = ("int64" if node.op in INT_OPS else thin if isinstance(thin, str)
                 else x_dtype if thin else "float64")
        outs.append([index[name], dtype])
        dtypes.append(dtype)
        widths.append(int(node.width))
    spec = RowSpec(x_dtype, int(x_node.width),
                   json.dumps(steps, sort_keys=True), json.dumps(outs))
    flat = np.concatenate(params) if params else np.zeros(1)
    return RowPlan(spec, np.ascontiguousarray(flat, dtype=np.float64), tuple(dtypes),
                   tuple(widths))


class _Unfusable(Exception):
    pass


def fusable(node, widths: list[int]) -> bool:
    """Whether a row kernel can compute ``node`` (inputs ``widths`` wide) on float64 input:
    for a caller choosing which nodes to hand :func:`plan`."""
    if not 0 < int(node.width or 0) <= (MAX_KERNEL_WIDTH if node.op is Op.KERNEL
                                         else MAX_WIDTH):
        return False
    try:
        return _step(node, widths, lambda value, size=None: [0, 0]) is not None
    except _Unfusable:
        return False


def _step(node, widths: list[int], param, r32: bool = False) -> dict | None:
    """The step record for one node (None: not fusable). Shapes are checked here so the
    emitter can trust them. ``r32``: the rule computes this node in float32 (its input is
    float32 and the op keeps it so); the step then rounds as the rule does."""
    op, a = node.op, node.attrs
    if r32 and op not in R32_OPS:
        return None
    w, win = int(node.width), (widths[0] if widths else 0)
    if op is Op.LINEAR:
        weight = np.asarray(a.weight, dtype=np.float64)
        if weight.ndim != 2 or weight.shape != (win, w) or weight.size > MAX_WEIGHTS:
            return None
        form = "dot" if w <= DOT_OUTPUTS else "axpy"
        return {"op": "linear", "form": form, "W": param(weight.T if form == "dot" else weight),
                "b": param(a.bias, w)}
    if op is Op.CENTER_SCALE and w == win:
        c, s = float32_params(a.float32, a.center, a.scale) if r32 else (a.center, a.scale)
        return {"op": "center_scale", "c": param(c, w), "s": param(s, w), "r32": r32}
    if op is Op.AFFINE and w == win:
        sc, sh = float32_params(a.float32, a.scale, a.shift) if r32 else (a.scale, a.shift)
        return {"op": "affine", "a": param(sc, w), "s": param(sh, w), "r32": r32}
    if op is Op.IMPUTE and w == win:
        # the rule's float32 form compares with the missing marker as float32 and writes the
        # values rounded to float32
        values = np.asarray(a.values, dtype=np.float64)
        missing = float(np.float32(a.missing)) if r32 else float(a.missing)
        if r32:
            values = values.astype(np.float32).astype(np.float64)
        return {"op": "impute", "v": param(values, w), "nan": bool(np.isnan(missing)),
                "m": 0.0 if np.isnan(missing) else missing}
    if op is Op.CLIP and w == win:
        return {"op": "clip", "lo": float(a.low), "hi": float(a.high), "r32": r32}
    if op is Op.BINARIZE and w == win:
        return {"op": "binarize", "t": a.threshold_for(r32)}
    if op is Op.NORMALIZE and w == win and a.norm in ("l1", "l2", "max"):
        step = {"op": "normalize", "norm": a.norm, "uniform": a.zero == "uniform", "r32": r32,
                "below": a.zero_below(np.float32 if r32 else np.float64) if a.tiny else 0.0}
        if a.norm != "max":  # NumPy's summation order in the rule's dtype (row_sums)
            step["sum"] = row_sum_program("pairwise" if a.norm == "l1" else "einsum", w,
                                          np.float32 if r32 else np.float64)
        return step
    if op is Op.LINK and a.kind in LINKS and w == win:
        return {"op": "link", "kind": a.kind.value, "scale": float(a.scale)}
    if op is Op.BINARY_PROBA and w == 2:
        return {"op": "binary_proba"}
    if op is Op.THRESHOLD and w == 1:
        return {"op": "threshold", "v": float(a.value), "strict": bool(a.strict)}
    if op is Op.ARGMAX and w == 1:
        return {"op": "argmax"}
    if op is Op.UFUNC and a.name in UFUNCS and w == win:
        if r32 and a.name not in EXACT_UFUNCS:
            return None  # NumPy's own float32 loop: the rule calls it
        return {"op": "ufunc", "f": UFUNCS[a.name], "r32": r32}
    if op is Op.SELECT:
        cols = [int(c) for c in np.asarray(a.columns).reshape(-1)]
        if len(cols) != w or any(not 0 <= c < win for c in cols):
            return None
        # a float32 frame block (Select.float32): the values are rounded as the rule's astype
        return {"op": "select", "cols": cols, **({"r32": True} if a.float32 else {})}
    if op is Op.POLYNOMIAL:
        powers = np.asarray(a.powers, dtype=np.int64)
        if powers.shape != (w, win) or (powers < 0).any() or powers.sum(1).max(initial=0) > 8:
            return None
        # factors[t][k]: output k's t-th factor column (-1: none left, multiply by 1.0), in
        # the rule's order (Polynomial.factors)
        terms = a.factors()
        depth = max((len(t) for t in terms), default=0)
        return {"op": "polynomial", "r32": r32,
                "factors": [[t[i] if i < len(t) else -1 for t in terms] for i in range(depth)]}
    if op is Op.CONCAT and sum(widths) == w:
        return {"op": "concat", "r32": r32}
    if op is Op.ONE_HOT:
        return _one_hot_step(a, w, win, param)
    if op is Op.ACTIVATION and a.kind in ACTIVATIONS and a.net_dtype == "float64" \
            and w == win:
        step = {"op": "activation", "kind": a.kind}
        if a.kind in ("softmax", "log_softmax"):  # the rule's .sum(axis=1): NumPy's order
            step["sum"] = row_sum_program("pairwise", w, np.float64)
        return step
    if op is Op.BSPLINE:
        return rowwise_spline.step(a, w, win, param)
    if op is Op.RANGE_CHECK and w == win:  # an input-error check (SplineTransformer's knots)
        return {"op": "range_check", "lo": param(a.low, w), "hi": param(a.high, w)}
    if op is Op.KERNEL and a.kind == "rbf" and a.center_rows is None:
        # the native backend's rbf form (backends/native/rules.py: |x|^2 - 2 x.v + |v|^2,
        # clamped at 0), its x.v as a sum over features in order instead of BLAS's blocks
        v = np.asarray(a.vectors, dtype=np.float64)
        if v.shape != (w, win) or v.size > MAX_KERNEL_VALUES:
            return None
        # libsvm's form: a row whose |x|^2 overflows is answered 0 (its exact value) instead
        # of inf - inf; where 0 might not be exact (a tiny gamma) the rules' path recomputes
        far = a.form == "libsvm"
        if far and not far_rows_vanish(v, float(a.gamma)):
            return None
        pad = -(-w // RBF_CHUNK) * RBF_CHUNK  # whole chunks: the padding vectors are zeros
        vt = np.zeros((win, pad))
        vt[:, :w] = v.T
        vv = np.zeros(pad)
        vv[:w] = np.einsum("ij,ij->i", v, v)
        return {"op": "rbf", "VT": param(vt), "vv": param(vv), "pad": pad, "far": far,
                "g": float(a.gamma), "sum": row_sum_program("einsum", win, np.float64)}
    return None


# (vectors x features) of a fused rbf KERNEL: the support vectors of a kernel SVM scored one
# row at a time (a larger set is a GEMM: BLAS over row blocks, backends/native/rules.py)
MAX_KERNEL_VALUES = 1 << 14
# its output is one row vector the next step reads whole (a LINEAR's dot product): 1,000
# vectors (16 features): four kernels (two methods x two input dtypes) in about 0.9 s
MAX_KERNEL_WIDTH = 1024


MAX_ONE_HOT_TERMS = 1024  # (column, category) comparisons in one row vector


def _one_hot_step(a, w: int, win: int, param) -> dict | None:
    """ONE_HOT as comparisons: each (input column, category) pair a slot reads is one lane of
    a vector compared with the categories at once; a slot is the OR of its pairs' lanes (an
    infrequent group has several), an unknown slot is set where none of its column's
    categories matched (then every category of that column is a lane, slot or not)."""
    terms: list[tuple[int, float, int]] = []  # (input column, category, slot or -1)
    unknown: list[tuple[int, list[int]]] = []  # (slot, the column's term lanes)
    for j, cats, slots, unk in zip(a.columns, a.categories, a.slots, a.unknown_slots):
        cats = np.asarray(cats, dtype=np.float64).reshape(-1)
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        if not 0 <= int(j) < win or (slots >= w).any() or int(unk) >= w:
            return None
        every = int(unk) >= 0
        lanes = []
        for c, s in zip(cats, slots):
            if s >= 0 or every:
                lanes.append(len(terms))
                terms.append((int(j), float(c), int(s)))
        if every:
            unknown.append((int(unk), lanes))
    if len(terms) > MAX_ONE_HOT_TERMS:
        return None
    per_slot: list[list[int]] = [[] for _ in range(w)]
    for t, (_, _, s) in enumerate(terms):
        if s >= 0:
            per_slot[s].append(t)
    depth = max((len(p) for p in per_slot), default=0)
    # rounds[r][s]: slot s's r-th lane, or len(terms) (a lane that is always false)
    rounds = [[p[r] if r < len(p) else len(terms) for p in per_slot] for r in range(depth)]
    step = {"op": "one_hot", "cols": [t[0] for t in terms], "rounds": rounds,
            "nan": [int(np.isnan(t[1])) for t in terms], "unknown": unknown}
    if terms:
        step["cats"] = param(np.nan_to_num(np.array([t[1] for t in terms]), nan=0.0))
    return step


# ops whose float32 form (``Attrs.float32_out``) the emitter reproduces
R32_OPS = frozenset({Op.SELECT, Op.CENTER_SCALE, Op.AFFINE, Op.CLIP, Op.CONCAT, Op.BINARIZE,
                     Op.NORMALIZE, Op.POLYNOMIAL, Op.UFUNC, Op.IMPUTE})
# ufuncs whose float32 result is the float64 one rounded (correctly rounded operations, or
# exact ones); the others' float32 loops are NumPy's own approximations, run by the rule
EXACT_UFUNCS = frozenset({"sqrt", "absolute", "square", "negative", "reciprocal", "sign",
                          "floor", "ceil", "rint", "trunc"})
