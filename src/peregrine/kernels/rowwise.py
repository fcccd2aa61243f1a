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
from peregrine.ir.semantics.pipeline import float32_params
from peregrine.ir.semantics.row_sums import ADD as ROW_SUM_ADD
from peregrine.ir.semantics.row_sums import row_sum_program
from peregrine.kernels import vmath
from peregrine.kernels.irutil import F32, F64, I1, I32, I64, PTR, gep

# Limits past which a fused kernel is the wrong tool: a LINEAR this large is a GEMM (torch's
# BLAS blocks it for the cache; a per-row loop would reload the weights every row), and very
# wide row vectors spill registers and take LLVM long to compile.
MAX_WIDTH = 512
MAX_WEIGHTS = 1 << 15
ROW_UNROLL = 4
DOT_OUTPUTS = 4  # LINEAR with at most this many outputs: one vector dot product per output
UFUNCS = {"log": "log", "exp": "exp", "sqrt": "sqrt", "absolute": "fabs", "abs": "fabs"}
LINKS = (Link.IDENTITY, Link.SIGMOID, Link.SOFTMAX, Link.EXP)
OUT_TYPES = {"float64": F64, "float32": F32, "int64": I64}
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
        _Emitter(module, self).emit()
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
    ("float32") in that dtype (rounded as NumPy's astype rounds), False in float64."""
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

    try:
        for node in graph.steps(wanted):
            ins = [index[i] for i in node.inputs]
            widths = [int(by_name[i].width) for i in node.inputs]
            f32[node.name] = node.attrs.float32_out([f32[i] for i in node.inputs])
            step = _step(node, widths, param, f32[node.name])
            if step is None or not 0 < int(node.width or 0) <= MAX_WIDTH:
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
        step = {"op": "normalize", "norm": a.norm, "uniform": a.zero == "uniform", "r32": r32}
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
        return {"op": "select", "cols": cols}
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
    return None


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


# ------------------------------------------------------------------------------ codegen --
# kernel(x, row_begin, row_end, params, outs, flag): rows [row_begin, row_end) of the
# row-major input x; outs[k] points at output k's (rows, width) array; *flag receives the
# sum of x * 0 over the rows read (NaN iff some input value was NaN or infinite).
KERNEL_ARGS = ("x", "rb", "re", "params", "outs", "flag")


class _Emitter:
    def __init__(self, module: ir.Module, spec: RowSpec) -> None:
        self.m, self.spec = module, spec
        fnty = ir.FunctionType(ir.VoidType(), [PTR, I64, I64, PTR, PTR, PTR])
        self.fn = ir.Function(module, fnty, name=spec.symbol)
        for arg, name in zip(self.fn.args, KERNEL_ARGS):
            arg.name = name
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))

    # ---- helpers
    def vec(self, w: int) -> ir.VectorType:
        return ir.VectorType(F64, w)

    def splat(self, value: ir.Value, w: int) -> ir.Value:
        b = self.b
        v = b.insert_element(ir.Constant(self.vec(1), ir.Undefined), value, ir.Constant(I32, 0))
        return b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, w), [0] * w))

    def const(self, value: float, w: int) -> ir.Constant:
        return ir.Constant(self.vec(w), [value] * w)

    def intrinsic(self, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
        fn = self.m.globals.get(name)
        if fn is None:
            fn = ir.Function(self.m, ir.FunctionType(ret, [a.type for a in args]), name=name)
        return self.b.call(fn, args)

    def unary(self, name: str, v: ir.Value) -> ir.Value:
        return self.intrinsic(f"llvm.{name}.v{v.type.count}f64", v.type, [v])

    def load_param(self, ref: list[int]) -> ir.Value:
        off, size = ref
        p = gep(self.b, self.params, [ir.Constant(I64, off)], source_etype=F64)
        return self.b.load(p, typ=self.vec(size), align=8)

    def lane(self, v: ir.Value, j: int) -> ir.Value:
        return self.b.extract_element(v, ir.Constant(I32, j))

    def reduce_sum(self, v: ir.Value) -> ir.Value:
        # no reassoc flag: lanes are added in order (the same bits on every target)
        return self.intrinsic(f"llvm.vector.reduce.fadd.v{v.type.count}f64", F64,
                              [ir.Constant(F64, -0.0), v])

    def tree_sum(self, v: ir.Value) -> ir.Value:
        """Sum of the lanes, pairwise: halves added lane by lane until one is left (a short
        dependency chain where an in-order sum is one add per lane). The pairing is spelled
        out with shuffles, so every target computes the same bits. Padding is -0.0, which
        leaves every sum unchanged."""
        b, n = self.b, v.type.count
        p = 1 << max(0, (n - 1).bit_length())
        if p != n:
            pad = ir.Constant(v.type, [-0.0] * n)
            v = b.shuffle_vector(v, pad, ir.Constant(ir.VectorType(I32, p),
                                                     [j if j < n else n for j in range(p)]))
        while p > 1:
            p //= 2
            lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, p), list(range(p))))
            hi = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, p),
                                                    list(range(p, 2 * p))))
            v = b.fadd(lo, hi)
        return self.lane(v, 0)

    def reduce_max(self, v: ir.Value) -> ir.Value:
        # fmaximum propagates NaN, as np.max does
        return self.intrinsic(f"llvm.vector.reduce.fmaximum.v{v.type.count}f64", F64, [v])

    # ---- kernel
    def emit(self) -> None:
        b, spec = self.b, self.spec
        x, rb, re, self.params, outs, flag = self.fn.args
        self.steps = json.loads(spec.steps)
        self.outputs = json.loads(spec.outputs)
        self.x, self.d = x, spec.n_features
        self.xt = F32 if spec.x_dtype == "float32" else F64
        self.out_ptrs = [b.load(gep(b, outs, [ir.Constant(I64, k)], source_etype=PTR), typ=PTR)
                         for k in range(len(self.outputs))]
        # ROW_UNROLL rows per iteration, then the rest one at a time: a row's sums are chains
        # of dependent adds (a dot product over the input columns), and independent rows side
        # by side let the core overlap them
        span = b.sub(re, rb)
        main_end = b.add(rb, b.mul(b.sdiv(span, ir.Constant(I64, ROW_UNROLL)),
                                   ir.Constant(I64, ROW_UNROLL)))
        acc = self.loop(rb, main_end, ROW_UNROLL, self.const(0.0, self.d), "rows")
        acc = self.loop(main_end, re, 1, acc, "tail")
        b.store(self.reduce_sum(acc), flag, align=8)
        b.ret_void()

    def loop(self, start: ir.Value, stop: ir.Value, step: int, acc0: ir.Value,
             name: str) -> ir.Value:
        """for r in range(start, stop, step): rows r..r+step-1; returns the non-finite sum."""
        b = self.b
        before = b.block
        body = self.fn.append_basic_block(name)
        after = self.fn.append_basic_block(name + ".end")
        b.cbranch(b.icmp_signed("<", start, stop), body, after)
        b.position_at_end(body)
        r = b.phi(I64, name="r")
        acc = b.phi(acc0.type, name="nonfinite")
        r.add_incoming(start, before)
        acc.add_incoming(acc0, before)
        acc_next = self.rows([b.add(r, ir.Constant(I64, k)) for k in range(step)], acc)
        r_next = b.add(r, ir.Constant(I64, step))
        latch = b.block
        r.add_incoming(r_next, latch)
        acc.add_incoming(acc_next, latch)
        b.cbranch(b.icmp_signed("<", r_next, stop), body, after)
        b.position_at_end(after)
        total = b.phi(acc0.type)
        total.add_incoming(acc0, before)
        total.add_incoming(acc_next, latch)
        return total

    def rows(self, rs: list[ir.Value], acc: ir.Value) -> ir.Value:
        """Rows rs side by side: load, every step, store the outputs; returns acc + x * 0.
        Steps run for all rows before the next step, so an op with a ``rows_`` form (exp)
        works on the rows' values together, one vector op for all of them."""
        b, d, xt = self.b, self.d, self.xt
        values = []
        for r in rs:
            src = gep(b, self.x, [b.mul(r, ir.Constant(I64, d))], source_etype=xt)
            v0 = b.load(src, typ=ir.VectorType(xt, d), align=4 if xt is F32 else 8)
            values.append([b.fpext(v0, self.vec(d)) if xt is F32 else v0])
        for step in self.steps:
            ins = [[vals[i] for i in step["in"]] for vals in values]
            together = getattr(self, "rows_" + step["op"], None)
            outs = (together(step, ins) if together is not None else
                    [getattr(self, "op_" + step["op"])(step, one) for one in ins])
            for vals, out in zip(values, outs):
                vals.append(out)
        for r, vals in zip(rs, values):
            for (idx, dtype), ptr in zip(self.outputs, self.out_ptrs):
                value = vals[idx]
                w = value.type.count
                ty = OUT_TYPES[dtype]
                if ty is F32:
                    value = b.fptrunc(value, ir.VectorType(F32, w))
                elif ty is I64:
                    value = b.fptosi(value, ir.VectorType(I64, w))
                dst = gep(b, ptr, [b.mul(r, ir.Constant(I64, w))], source_etype=ty)
                b.store(value, dst, align=4 if ty is F32 else 8)
            acc = b.fadd(acc, b.fmul(vals[0], self.const(0.0, d)))
        return acc

    def joined(self, vs: list[ir.Value]) -> ir.Value:
        """The rows' vectors end to end in one vector."""
        if len(vs) == 1:
            return vs[0]
        out, k = ir.Constant(self.vec(sum(v.type.count for v in vs)), ir.Undefined), 0
        for v in vs:
            for j in range(v.type.count):
                out = self.b.insert_element(out, self.lane(v, j), ir.Constant(I32, k))
                k += 1
        return out

    def split(self, v: ir.Value, widths: list[int]) -> list[ir.Value]:
        """joined's inverse."""
        if len(widths) == 1:
            return [v]
        out, k = [], 0
        for w in widths:
            mask = ir.Constant(ir.VectorType(I32, w), list(range(k, k + w)))
            out.append(self.b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), mask))
            k += w
        return out

    def exp(self, v: ir.Value) -> ir.Value:
        return vmath.exp(self.m, self.b, v)

    # ---- ops (each: step record, input values -> output value, all <w x double>)
    def op_linear(self, s: dict, ins: list) -> ir.Value:
        # x @ W + b as sklearn's safe_sparse_dot then + intercept: products summed, the bias
        # added last. Few outputs ("dot", W stored transposed): per output a vector product
        # and a pairwise sum; more outputs ("axpy"): x_j * W[j, :] accumulated over j in order.
        b, x, w = self.b, ins[0], s["w"]
        off, win = s["W"][0], s["win"][0]
        if s["form"] == "dot":
            dots = [self.tree_sum(b.fmul(x, self.load_param([off + k * win, win])))
                    for k in range(w)]
            acc = ir.Constant(self.vec(w), ir.Undefined)
            for k, dot in enumerate(dots):
                acc = b.insert_element(acc, dot, ir.Constant(I32, k))
        else:
            acc = None
            for j in range(win):
                term = b.fmul(self.splat(self.lane(x, j), w), self.load_param([off + j * w, w]))
                acc = term if acc is None else b.fadd(acc, term)
        return b.fadd(acc, self.load_param(s["b"]))

    def r32(self, s: dict, v: ir.Value) -> ir.Value:
        """``v`` rounded to float32 (and widened back) when the step computes in float32."""
        if not s.get("r32"):
            return v
        return self.b.fpext(self.b.fptrunc(v, ir.VectorType(F32, v.type.count)), v.type)

    def op_center_scale(self, s: dict, ins: list) -> ir.Value:
        b = self.b
        centred = self.r32(s, b.fsub(ins[0], self.load_param(s["c"])))
        return self.r32(s, b.fdiv(centred, self.load_param(s["s"])))

    def op_affine(self, s: dict, ins: list) -> ir.Value:
        b = self.b
        scaled = self.r32(s, b.fmul(ins[0], self.load_param(s["a"])))
        return self.r32(s, b.fadd(scaled, self.load_param(s["s"])))

    def op_impute(self, s: dict, ins: list) -> ir.Value:
        b, x, w = self.b, ins[0], s["w"]
        hit = (b.fcmp_unordered("uno", x, x) if s["nan"]
               else b.fcmp_ordered("==", x, self.const(s["m"], w)))
        return b.select(hit, self.load_param(s["v"]), x)

    def op_clip(self, s: dict, ins: list) -> ir.Value:
        # np.clip: NaN stays NaN (both compares are false for it)
        b, x, w = self.b, ins[0], s["w"]
        lo, hi = self.const(s["lo"], w), self.const(s["hi"], w)
        x = b.select(b.fcmp_ordered("<", x, lo), lo, x)
        return self.r32(s, b.select(b.fcmp_ordered(">", x, hi), hi, x))

    def program_sum(self, s: dict, v: ir.Value) -> ir.Value:
        """The lanes of ``v`` summed in the step's program order (ir/semantics/row_sums.py),
        each sum rounded to float32 when the step computes in float32."""
        b, stack = self.b, []
        for step in s["sum"]:
            if step == ROW_SUM_ADD:
                right, left = stack.pop(), stack.pop()
                total = b.fadd(left, right)
                if s.get("r32"):
                    total = b.fpext(b.fptrunc(total, F32), F64)
                stack.append(total)
            else:
                stack.append(self.lane(v, step))
        return stack.pop() if stack else ir.Constant(F64, 0.0)

    def op_binarize(self, s: dict, ins: list) -> ir.Value:
        w = s["w"]
        hit = self.b.fcmp_ordered(">", ins[0], self.const(s["t"], w))  # NaN -> 0
        return self.b.uitofp(hit, self.vec(w))

    def op_normalize(self, s: dict, ins: list) -> ir.Value:
        b, x, w = self.b, ins[0], s["w"]
        if s["norm"] == "l1":  # |x| summed in NumPy's order
            n = self.program_sum(s, self.unary("fabs", x))
        elif s["norm"] == "l2":  # squares summed as np.einsum does; a float32 sqrt rounds once
            n = self.program_sum(s, self.r32(s, b.fmul(x, x)))
            n = self.intrinsic("llvm.sqrt.f64", F64, [n])
            if s.get("r32"):
                n = b.fpext(b.fptrunc(n, F32), F64)
        else:
            n = self.reduce_max(self.unary("fabs", x))
        zero = b.fcmp_ordered("==", n, ir.Constant(F64, 0.0))
        # a float64 quotient of float32 numbers rounded once is the float32 quotient
        out = self.r32(s, b.fdiv(x, self.splat(b.select(zero, ir.Constant(F64, 1.0), n), w)))
        if s["uniform"]:
            out = b.select(zero, self.const(1.0 / w, w), out)
        return out

    def rows_link(self, s: dict, ins: list) -> list:
        b, kind = self.b, s["kind"]
        xs = [one[0] for one in ins]
        widths = [x.type.count for x in xs]
        if kind == Link.IDENTITY.value:
            return xs
        if kind == Link.SOFTMAX.value:  # max-subtracted, per row
            xs = [b.fsub(x, self.splat(self.reduce_max(x), w)) for x, w in zip(xs, widths)]
        x = self.joined(xs)
        n = x.type.count
        if kind == Link.SIGMOID.value:
            # reference.sigmoid: exp of a non-positive number only, no overflow
            x = b.fmul(self.const(s["scale"], n), x)
            e = self.exp(b.fneg(self.unary("fabs", x)))
            one = self.const(1.0, n)
            pos = b.fcmp_ordered(">=", x, self.const(0.0, n))
            # 1 / (1 + e) or e / (1 + e): the numerator is picked first, one division
            return self.split(b.fdiv(b.select(pos, one, e), b.fadd(one, e)), widths)
        es = self.split(self.exp(x), widths)
        if kind == Link.EXP.value:
            return es
        return [b.fdiv(e, self.splat(self.tree_sum(e), w)) for e, w in zip(es, widths)]

    def op_binary_proba(self, s: dict, ins: list) -> ir.Value:
        b = self.b
        p = self.lane(ins[0], 0)
        q = b.fsub(ir.Constant(F64, 1.0), p)
        v = b.insert_element(ir.Constant(self.vec(2), ir.Undefined), q, ir.Constant(I32, 0))
        return b.insert_element(v, p, ir.Constant(I32, 1))

    def op_threshold(self, s: dict, ins: list) -> ir.Value:
        b = self.b
        x = self.lane(ins[0], 0)
        hit = b.fcmp_ordered(">" if s["strict"] else ">=", x, ir.Constant(F64, s["v"]))
        return b.uitofp(b.insert_element(ir.Constant(ir.VectorType(I1, 1), ir.Undefined), hit,
                                         ir.Constant(I32, 0)), self.vec(1))

    def op_argmax(self, s: dict, ins: list) -> ir.Value:
        # np.argmax: the first maximum, and the first NaN if there is one
        b, x = self.b, ins[0]
        best, idx = self.lane(x, 0), ir.Constant(F64, 0.0)
        for j in range(1, s["win"][0]):
            v = self.lane(x, j)
            take = b.or_(b.fcmp_ordered(">", v, best),
                         b.and_(b.fcmp_unordered("uno", v, v), b.fcmp_ordered("ord", best, best)))
            best = b.select(take, v, best)
            idx = b.select(take, ir.Constant(F64, float(j)), idx)
        return b.insert_element(ir.Constant(self.vec(1), ir.Undefined), idx, ir.Constant(I32, 0))

    def rows_ufunc(self, s: dict, ins: list) -> list:
        xs = [one[0] for one in ins]
        if s["f"] == "exp":
            return self.split(self.exp(self.joined(xs)), [x.type.count for x in xs])
        return [self.r32(s, self.unary(s["f"], x)) for x in xs]

    def op_select(self, s: dict, ins: list) -> ir.Value:
        x = ins[0]
        mask = ir.Constant(ir.VectorType(I32, len(s["cols"])), s["cols"])
        return self.b.shuffle_vector(x, ir.Constant(x.type, ir.Undefined), mask)

    def op_polynomial(self, s: dict, ins: list) -> ir.Value:
        # out_k = 1.0 * f_k0 * f_k1 ..., as the rule multiplies columns one factor at a time:
        # one lane shuffle and one vector product per factor slot (1.0 past a term's degree)
        b, x, w = self.b, ins[0], s["w"]
        n = x.type.count
        out = self.const(1.0, w)
        for slot in s["factors"]:
            mask = ir.Constant(ir.VectorType(I32, w), [j if j >= 0 else n for j in slot])
            out = self.r32(s, b.fmul(out, b.shuffle_vector(x, self.const(1.0, n), mask)))
        return out

    def op_concat(self, s: dict, ins: list) -> ir.Value:
        return self.r32(s, self.joined(ins))

    def op_one_hot(self, s: dict, ins: list) -> ir.Value:
        # the rule's category_slots: exact float64 equality, a NaN category matching NaN
        b, x, w = self.b, ins[0], s["w"]
        n_terms = len(s["cols"])
        bools = ir.VectorType(I1, n_terms)
        if not n_terms:
            return self.const(0.0, w)
        xs = b.shuffle_vector(x, ir.Constant(x.type, ir.Undefined),
                              ir.Constant(ir.VectorType(I32, n_terms), s["cols"]))
        eq = b.fcmp_ordered("==", xs, self.load_param(s["cats"]))
        if any(s["nan"]):
            eq = b.select(ir.Constant(bools, [bool(v) for v in s["nan"]]),
                          b.fcmp_unordered("uno", xs, xs), eq)
        never = ir.Constant(bools, [False] * n_terms)
        hit = ir.Constant(ir.VectorType(I1, w), [False] * w)
        for lanes in s["rounds"]:
            hit = b.or_(hit, b.shuffle_vector(eq, never,
                                              ir.Constant(ir.VectorType(I32, w), lanes)))
        for slot, lanes in s["unknown"]:
            found = ir.Constant(I1, False)
            for t in lanes:
                found = b.or_(found, b.extract_element(eq, ir.Constant(I32, t)))
            at = ir.Constant(I32, slot)
            hit = b.insert_element(hit, b.or_(b.extract_element(hit, at), b.not_(found)), at)
        return b.uitofp(hit, self.vec(w))
