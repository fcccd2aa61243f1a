"""The code generator of the fused row kernels (rowwise.py plans them): one LLVM function
``kernel(x, row_begin, row_end, params, outs, flag)`` whose body runs every step of a
:class:`~peregrine.kernels.rowwise.RowSpec` on each row's values held in vector registers.
See rowwise.py for the semantics each step reproduces."""

from __future__ import annotations

import json
from typing import Any

from llvmlite import ir

from peregrine.ir import Link
from peregrine.ir.semantics.row_sums import evaluate
from peregrine.kernels import rowwise_spline, vmath
from peregrine.kernels.irutil import F32, F64, I1, I32, I64, PTR, gep, splat

ROW_UNROLL = 4
RBF_CHUNK = 8  # support vectors per iteration of a fused rbf KERNEL (one AVX-512 vector)
LOOPING_OPS = frozenset({"rbf"})  # steps that emit a loop of their own
OUT_TYPES = {"float64": F64, "float32": F32, "int64": I64}


# ------------------------------------------------------------------------------ codegen --
# kernel(x, row_begin, row_end, params, outs, flag): rows [row_begin, row_end) of the
# row-major input x; outs[k] points at output k's (rows, width) array; *flag receives the
# sum of x * 0 over the rows read (NaN iff some input value was NaN or infinite).
KERNEL_ARGS = ("x", "rb", "re", "params", "outs", "flag")


class Emitter:
    def __init__(self, module: ir.Module, spec: Any) -> None:  # a rowwise.RowSpec
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
        # inserted into a w-wide vector, then lane 0 broadcast (LLVM's own splat form): a
        # one-lane vector widened by the shuffle made the optimiser assert
        # (cast<FixedVectorType>) on a SELECT of a softmax's outputs
        b = self.b
        v = b.insert_element(ir.Constant(self.vec(w), ir.Undefined), value, ir.Constant(I32, 0))
        return b.shuffle_vector(v, ir.Constant(self.vec(w), ir.Undefined), splat(I32, w, 0))

    def const(self, value: float, w: int) -> ir.Constant:
        return splat(F64, w, value)

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
        # The last pair is added by the ordered reduction, (-0.0 + a) + b = a + b, not by
        # one-lane shuffles or two extracted lanes: those, on a softmax's exp, made LLVM's
        # optimiser assert (cast<FixedVectorType>) when a SELECT took one of its outputs.
        while p > 2:
            p //= 2
            lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, p), list(range(p))))
            hi = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, p),
                                                    list(range(p, 2 * p))))
            v = b.fadd(lo, hi)
        if p == 1:
            return self.lane(v, 0)
        return self.reduce_sum(v)  # the last pair: (-0.0 + a) + b = a + b (see above)

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
        # A plan with a looping step (a fused rbf KERNEL) has independent work enough in one
        # row, and four copies of its loop took LLVM four times as long to compile.
        unroll = 1 if any(step["op"] in LOOPING_OPS for step in self.steps) else ROW_UNROLL
        acc = self.const(0.0, self.d)
        if unroll > 1:
            span = b.sub(re, rb)
            main_end = b.add(rb, b.mul(b.sdiv(span, ir.Constant(I64, unroll)),
                                       ir.Constant(I64, unroll)))
            acc = self.loop(rb, main_end, unroll, acc, "rows")
            rb = main_end
        acc = self.loop(rb, re, 1, acc, "tail")
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

    def op_rbf(self, s: dict, ins: list) -> ir.Value:
        # exp(max(|x|^2 - 2 x.v + |v|^2, 0) * -gamma) per vector v, in rbf_expanded's order
        # of operations, x.v as x_j * VT[j, :] accumulated over j. A loop over RBF_CHUNK
        # vectors at a time into a stack buffer: hundreds of vectors as one straight-line
        # vector value took LLVM seconds to compile (28 s for four kernels of 408).
        b, x, w = self.b, ins[0], s["w"]
        off, win, pad, c = s["VT"][0], s["win"][0], s["pad"], RBF_CHUNK
        with b.goto_entry_block():
            buf = b.alloca(ir.ArrayType(F64, pad))
        xx = self.splat(self.program_sum(s, b.fmul(x, x)), c)
        xs = [self.splat(self.lane(x, j), c) for j in range(win)]
        before = b.block
        body = self.fn.append_basic_block("rbf")
        after = self.fn.append_basic_block("rbf.end")
        b.branch(body)
        b.position_at_end(body)
        k = b.phi(I64, name="k")
        k.add_incoming(ir.Constant(I64, 0), before)

        def chunk(start: int) -> ir.Value:
            p = gep(b, self.params, [b.add(ir.Constant(I64, start), k)], source_etype=F64)
            return b.load(p, typ=self.vec(c), align=8)

        dot = None
        for j in range(win):
            term = b.fmul(xs[j], chunk(off + j * pad))
            dot = term if dot is None else b.fadd(dot, term)
        d = b.fadd(b.fadd(b.fmul(dot, self.const(-2.0, c)), xx), chunk(s["vv"][0]))
        zero = self.const(0.0, c)
        d = b.select(b.fcmp_ordered("<", d, zero), zero, d)  # np.maximum: NaN stays NaN
        out = gep(b, buf, [ir.Constant(I32, 0), k], source_etype=buf.allocated_type)
        kv = self.exp(b.fmul(d, self.const(-s["g"], c)))
        if s.get("far"):  # |x|^2 overflowed: libsvm's value is 0 (rowwise.py, far_rows_vanish)
            kv = b.select(b.fcmp_ordered("==", xx, self.const(float("inf"), c)), zero, kv)
        b.store(kv, out, align=8)
        k_next = b.add(k, ir.Constant(I64, c))
        k.add_incoming(k_next, b.block)
        b.cbranch(b.icmp_signed("<", k_next, ir.Constant(I64, pad)), body, after)
        b.position_at_end(after)
        first = gep(b, buf, [ir.Constant(I32, 0), ir.Constant(I32, 0)],
                    source_etype=buf.allocated_type)
        return b.load(first, typ=self.vec(w), align=8)

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
        b = self.b

        def add(left: ir.Value, right: ir.Value) -> ir.Value:
            total = b.fadd(left, right)
            return b.fpext(b.fptrunc(total, F32), F64) if s.get("r32") else total

        if not s["sum"]:
            return ir.Constant(F64, 0.0)
        return evaluate(s["sum"], lambda j: self.lane(v, j), add)

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
        # Normalize.tiny: below 10 eps of the norms' dtype (exact as a double; n holds the
        # float32 norm exactly in float32 mode)
        below = s.get("below", 0.0)
        zero = (b.fcmp_ordered("<", n, ir.Constant(F64, below)) if below
                else b.fcmp_ordered("==", n, ir.Constant(F64, 0.0)))
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
        if s["f"] in ("log", "log1p"):  # vmath's: vector arithmetic, not libm once per lane
            logs = self.split(getattr(vmath, s["f"])(self.m, self.b, self.joined(xs)),
                              [x.type.count for x in xs])
            return [self.r32(s, v) for v in logs]
        f = s["f"]
        exact = getattr(self, "ufunc_" + f, None)
        if exact is not None:  # correctly rounded or exact: the same bits as NumPy's
            return [self.r32(s, exact(x)) for x in xs]
        return [self.r32(s, self.unary(f, x)) for x in xs]

    def ufunc_square(self, x: ir.Value) -> ir.Value:
        return self.b.fmul(x, x)

    def ufunc_negative(self, x: ir.Value) -> ir.Value:
        return self.b.fneg(x)

    def ufunc_reciprocal(self, x: ir.Value) -> ir.Value:
        return self.b.fdiv(self.const(1.0, x.type.count), x)

    def ufunc_sign(self, x: ir.Value) -> ir.Value:
        # NumPy's: 1.0 above 0, -1.0 below, 0.0 for either zero, NaN for NaN
        b, w = self.b, x.type.count
        out = b.select(b.fcmp_ordered("==", x, self.const(0.0, w)), self.const(0.0, w), x)
        out = b.select(b.fcmp_ordered("<", x, self.const(0.0, w)), self.const(-1.0, w), out)
        return b.select(b.fcmp_ordered(">", x, self.const(0.0, w)), self.const(1.0, w), out)

    def rows_activation(self, s: dict, ins: list) -> list:
        # ir/semantics/nn.py, float64 network: softmax e / sum(e) and log_softmax
        # shifted - log(sum(e)), e = exp(x - max) (np.max: NaN wins), the sums in NumPy's order
        b, kind = self.b, s["kind"]
        xs = [one[0] for one in ins]
        if kind == "identity":
            return xs
        if kind == "relu":  # np.maximum(x, 0.0): NaN stays NaN, -0.0 gives 0.0 (as NumPy's
            # vector loop does)
            return [b.select(b.fcmp_unordered("ugt", x, self.const(0.0, x.type.count)), x,
                             self.const(0.0, x.type.count)) for x in xs]
        widths = [x.type.count for x in xs]
        shifted = [b.fsub(x, self.splat(self.reduce_max(x), w)) for x, w in zip(xs, widths)]
        es = self.split(self.exp(self.joined(shifted)), widths)
        sums = [self.program_sum(s, e) for e in es]
        if kind == "softmax":
            return [b.fdiv(e, self.splat(t, w)) for e, t, w in zip(es, sums, widths)]
        logs = [self.intrinsic("llvm.log.f64", F64, [t]) for t in sums]
        return [b.fsub(v, self.splat(lg, w)) for v, lg, w in zip(shifted, logs, widths)]

    def op_select(self, s: dict, ins: list) -> ir.Value:
        x = ins[0]
        mask = ir.Constant(ir.VectorType(I32, len(s["cols"])), s["cols"])
        return self.r32(s, self.b.shuffle_vector(x, ir.Constant(x.type, ir.Undefined), mask))

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

    def op_range_check(self, s: dict, ins: list) -> ir.Value:
        # (x < low) | (x > high) as 1.0 / 0.0; NaN compares false: 0.0
        b, x = self.b, ins[0]
        out = b.or_(b.fcmp_ordered("<", x, self.load_param(s["lo"])),
                    b.fcmp_ordered(">", x, self.load_param(s["hi"])))
        return b.uitofp(out, self.vec(s["w"]))

    def op_bspline(self, s: dict, ins: list) -> ir.Value:
        return rowwise_spline.emit(self, s, ins)

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
        hit = splat(I1, w, False)
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

    def op_one_hot_linear(self, s: dict, ins: list) -> ir.Value:
        # rowwise_onehot.py: from 0.0, block by block in W's row order, the weight row each
        # one-hot column's category picks, or x_j * W[j] for a dense block's columns; then
        # the bias (csr_matvec's order on the ColumnTransformer's sparse output)
        b, w = self.b, s["w"]
        acc = self.const(0.0, w)
        for block, x in zip(s["blocks"], ins):
            if block["kind"] == "dense":
                off, size = block["W"]
                for j in range(size // w):
                    term = b.fmul(self.splat(self.lane(x, j), w),
                                  self.load_param([off + j * w, w]))
                    acc = b.fadd(acc, term)
                continue
            for col in block["cols"]:
                pick = self.category_index(self.lane(x, col["j"]), col)
                at = b.add(ir.Constant(I64, col["rows"][0]), b.mul(pick, ir.Constant(I64, w)))
                row = b.load(gep(b, self.params, [at], source_etype=F64), typ=self.vec(w),
                             align=8)
                acc = b.fadd(acc, row)
        return b.fadd(acc, self.load_param(s["b"]))

    def category_index(self, v: ir.Value, col: dict) -> ir.Value:
        """The position of the category equal to ``v`` among the column's ``n`` (float64
        equality, a NaN category matching NaN: the ONE_HOT rule's), ``n`` when none is: each
        64 categories one vector comparison, its mask's first set bit."""
        b, n = self.b, col["n"]
        if not n:
            return ir.Constant(I64, 0)
        cttz = self.m.globals.get("llvm.cttz.i64") or ir.Function(
            self.m, ir.FunctionType(I64, [I64, I1]), name="llvm.cttz.i64")
        nan = set(col["nan"])
        is_nan = b.fcmp_unordered("uno", v, v) if nan else None
        best = None
        for start in range(0, n, 64):
            m = min(64, n - start)
            eq = b.fcmp_ordered("==", self.splat(v, m),
                                self.load_param([col["cats"][0] + start, m]))
            lanes = [start + k in nan for k in range(m)]
            if any(lanes):  # the NaN category's lane: whether v is NaN
                either = ir.Constant(ir.VectorType(I1, m), lanes)
                eq = b.or_(b.and_(eq, b.not_(either)),
                           b.and_(either, b.select(is_nan, splat(I1, m, True),
                                                   splat(I1, m, False))))
            bits = b.bitcast(eq, ir.IntType(m))
            if m < 64:  # no match gives m, the chunk's end
                bits = b.or_(b.zext(bits, I64), ir.Constant(I64, 1 << m))
            here = b.add(b.call(cttz, [bits, ir.Constant(I1, 0)]), ir.Constant(I64, start))
            # a match in an earlier chunk is below this chunk's start
            best = here if best is None else b.select(
                b.icmp_unsigned("<", best, ir.Constant(I64, start)), best, here)
        return best
