"""The element-wise ops after a forest (links, affine, binary probabilities), run inside the
kernel on each finished row.

Why: for one row, each NumPy rule costs microseconds of dispatch (a sigmoid alone ~5 us),
more than walking 500 trees, so the single-row path cannot afford them. The ops are encoded as
a small float64 program passed with each call and interpreted per row, so one kernel serves
every method and every model; the formulas are those of the op rules (``ir/semantics``), op by op
(``sigmoid`` in its overflow-free form, max-subtracted softmax), equal to them up to the last
bit of libm's ``exp``. Ops outside this table end the fused chain and run as NumPy rules.

A classifier's decision (THRESHOLD, ARGMAX) may end a program: the kernel then writes the class
index as a float64 number (exact for any index), which the caller converts to int64. ``predict``
on one row then costs one kernel call, not a kernel call plus a NumPy rule (~2.7 us more).

Program: ``[op, params...]*`` then END. AFFINE carries n (1 or the width) scales and n shifts.
"""

from __future__ import annotations

import enum

import numpy as np
from llvmlite import ir

from peregrine.ir import Link, Node, Op
from peregrine.ir.semantics.libm32 import EPS, EXP_CLAMP
from peregrine.kernels.irutil import F32, F64, I32, I64, Lanes, gep


class Code(enum.IntEnum):
    END = 0
    SIGMOID = 1  # scale
    EXP = 2
    SOFTMAX = 3
    AFFINE = 4  # n, scale[n], shift[n]
    BINARY_PROBA = 5
    ISOLATION = 6  # denominator
    SIGMOID32 = 7  # XGBoost's float32 sigmoid around libm's expf (ir/semantics/libm32.py)
    SOFTMAX32 = 8  # XGBoost's float32 softmax, the sum in float64
    THRESHOLD = 9  # value, strict: column 0 > value (>=) as 1.0 / 0.0
    ARGMAX = 10  # first index of the row's maximum, NaN counting as the maximum (np.argmax)


DECISIONS = (Op.THRESHOLD, Op.ARGMAX)  # int64 results: they end a program


def encode(chain: list[Node], width: int,
           decisions: bool = True) -> tuple[np.ndarray, int] | None:
    """(program, output width) for ops applied in order to a ``width``-column ensemble output,
    or None when some op cannot run fused (it then runs as its NumPy rule). ``decisions``:
    whether THRESHOLD / ARGMAX may end the program."""
    prog: list[float] = []
    for i, node in enumerate(chain):
        if node.op in DECISIONS:
            if not decisions or i != len(chain) - 1:
                return None  # nothing after a class index runs in float64 lanes
            if node.op is Op.THRESHOLD:
                prog += [Code.THRESHOLD, float(node.attrs.value), float(node.attrs.strict)]
            else:
                prog += [Code.ARGMAX]
            width = 1
        elif node.op is Op.LINK:
            kind = node.attrs.kind
            if kind is Link.IDENTITY:
                continue
            if node.attrs.float32:  # LINK.check: SIGMOID (scale 1) or SOFTMAX
                prog += [Code.SIGMOID32 if kind is Link.SIGMOID else Code.SOFTMAX32]
            elif kind is Link.SIGMOID:
                prog += [Code.SIGMOID, float(node.attrs.scale)]
            elif kind is Link.EXP:
                prog += [Code.EXP]
            elif kind is Link.SOFTMAX:
                prog += [Code.SOFTMAX]
            elif kind is Link.ISOLATION_SCORE:
                prog += [Code.ISOLATION, float(node.attrs.denominator)]
            else:
                return None
        elif node.op is Op.AFFINE:
            scale = np.asarray(node.attrs.scale, dtype=np.float64)
            shift = np.asarray(node.attrs.shift, dtype=np.float64)
            if scale.ndim > 1 or shift.ndim > 1 or scale.size not in (1, width) or (
                    shift.size not in (1, width)):
                return None
            n = max(scale.size, shift.size)
            prog += [Code.AFFINE, n, *np.broadcast_to(scale, n), *np.broadcast_to(shift, n)]
        elif node.op is Op.BINARY_PROBA:
            prog += [Code.BINARY_PROBA]
            width = 2
        else:
            return None
    return np.asarray(prog + [Code.END], dtype=np.float64), width


class Interpreter:
    """Emits the per-row interpreter over ``vals`` (a stack array of lane values)."""

    def __init__(self, kernel, lanes: Lanes, max_width: int) -> None:
        self.k, self.v, self.b = kernel, lanes, kernel.b
        self.vals = kernel.loops.var(ir.ArrayType(lanes.ty(F64), max_width), name="epi")
        self.width = kernel.loops.var(I32, name="width")

    def slot(self, c: ir.Value | int) -> ir.Value:
        c = ir.Constant(I32, c) if isinstance(c, int) else c
        return gep(self.b, self.vals, [ir.Constant(I32, 0), c],
                   source_etype=self.vals.allocated_type)

    def get(self, c):
        return self.b.load(self.slot(c), typ=self.v.ty(F64))

    def put(self, c, value) -> None:
        self.b.store(value, self.slot(c))

    def run(self, program: ir.Value, n_outputs: int) -> ir.Value:
        """Interpret ``program`` (pointer to float64 codes) over vals; returns the width."""
        b, loops = self.b, self.k.loops
        b.store(ir.Constant(I32, n_outputs), self.width)
        pc = loops.var(I64, ir.Constant(I64, 0), "pc")
        head = b.append_basic_block("epi.op")
        done = b.append_basic_block("epi.end")
        b.branch(head)
        b.position_at_end(head)
        at = b.load(pc, typ=I64)

        def param(i: int | ir.Value) -> ir.Value:  # program[pc + i]
            i = ir.Constant(I64, i) if isinstance(i, int) else i
            return b.load(gep(b, program, [b.add(at, i)], source_etype=F64), typ=F64)

        switch = b.switch(b.fptosi(param(0), I32), done)
        for code, emit in ((Code.SIGMOID, self.sigmoid), (Code.EXP, self.exp),
                           (Code.SOFTMAX, self.softmax), (Code.AFFINE, self.affine),
                           (Code.BINARY_PROBA, self.binary), (Code.ISOLATION, self.isolation),
                           (Code.SIGMOID32, self.sigmoid32), (Code.SOFTMAX32, self.softmax32),
                           (Code.THRESHOLD, self.threshold), (Code.ARGMAX, self.argmax)):
            case = b.append_basic_block(f"epi.{code.name.lower()}")
            switch.add_case(ir.Constant(I32, int(code)), case)
            b.position_at_end(case)
            size = emit(param)
            b.store(b.add(at, size), pc)
            b.branch(head)
        b.position_at_end(done)
        return b.load(self.width, typ=I32)

    def each(self, body) -> None:
        w = self.b.zext(self.b.load(self.width, typ=I32), I64)
        self.k.loops.range(ir.Constant(I64, 0), w, ir.Constant(I64, 1),
                           lambda c: body(self.b.trunc(c, I32)), "col")

    def splat(self, x: ir.Value) -> ir.Value:
        return self.v.splat(x)

    def sigmoid(self, param) -> ir.Value:
        b, v = self.b, self.v
        scale = self.splat(param(1))
        one = v.const(F64, 1.0)

        def body(c):
            x = b.fmul(scale, self.get(c))
            e = v.unary("exp", b.fneg(v.unary("fabs", x)))
            pos = b.fcmp_ordered(">=", x, v.const(F64, 0.0))
            den = b.fadd(one, e)
            self.put(c, b.select(pos, b.fdiv(one, den), b.fdiv(e, den)))

        self.each(body)
        return ir.Constant(I64, 2)

    def expf(self, x: ir.Value) -> ir.Value:
        """libm's expf on each lane (``llvm.exp`` on float lowers to a call of ``expf``, the
        function XGBoost calls; no vector math library is linked in)."""
        v = self.v
        return v.intrinsic(f"llvm.exp.{v._suffix(F32)}", v.ty(F32), [x])

    def sigmoid32(self, param) -> ir.Value:
        """common::Sigmoid(float): 1 / (expf(min(-x, 88.7)) + 1 + 1e-16) in float32."""
        b, v = self.b, self.v
        clamp, one = v.const(F32, float(EXP_CLAMP)), v.const(F32, 1.0)

        def body(c):
            neg = b.fneg(b.fptrunc(self.get(c), v.ty(F32)))  # the margin is a float32 number
            t = b.select(b.fcmp_ordered("<", clamp, neg), clamp, neg)  # std::min(-x, 88.7f)
            den = b.fadd(b.fadd(self.expf(t), one), v.const(F32, float(EPS)))
            self.put(c, b.fpext(b.fdiv(one, den), v.ty(F64)))

        self.each(body)
        return ir.Constant(I64, 1)

    def softmax32(self, param) -> ir.Value:
        """common::Softmax: fmaxf maximum, expf(x - max) in float32, summed in float64 in
        column order, each divided by the float32-rounded sum."""
        b, v = self.b, self.v
        f32 = v.ty(F32)
        top = self.k.loops.var(f32, b.fptrunc(self.get(0), f32), "top32")
        total = self.k.loops.var(v.ty(F64), v.const(F64, 0.0), "total64")

        def find_max(c):  # fmaxf: a NaN loses to a number
            cur, x = b.load(top, typ=f32), b.fptrunc(self.get(c), f32)
            take = b.or_(b.fcmp_ordered(">", x, cur), b.fcmp_unordered("uno", cur, cur))
            b.store(b.select(take, x, cur), top)

        def exponentiate(c):
            e = self.expf(b.fsub(b.fptrunc(self.get(c), f32), b.load(top, typ=f32)))
            self.put(c, b.fpext(e, v.ty(F64)))
            b.store(b.fadd(b.load(total, typ=v.ty(F64)), b.fpext(e, v.ty(F64))), total)

        def divide(c):
            den = b.fptrunc(b.load(total, typ=v.ty(F64)), f32)
            self.put(c, b.fpext(b.fdiv(b.fptrunc(self.get(c), f32), den), v.ty(F64)))

        self.each(find_max)
        self.each(exponentiate)
        self.each(divide)
        return ir.Constant(I64, 1)

    def exp(self, param) -> ir.Value:
        self.each(lambda c: self.put(c, self.v.unary("exp", self.get(c))))
        return ir.Constant(I64, 1)

    def softmax(self, param) -> ir.Value:
        b, v = self.b, self.v
        top = self.k.loops.var(v.ty(F64), self.get(0), "top")
        total = self.k.loops.var(v.ty(F64), v.const(F64, 0.0), "total")

        def find_max(c):
            cur, x = b.load(top, typ=v.ty(F64)), self.get(c)
            b.store(b.select(b.fcmp_ordered(">", x, cur), x, cur), top)

        def exponentiate(c):
            e = v.unary("exp", b.fsub(self.get(c), b.load(top, typ=v.ty(F64))))
            self.put(c, e)
            b.store(b.fadd(b.load(total, typ=v.ty(F64)), e), total)

        self.each(find_max)
        self.each(exponentiate)
        self.each(lambda c: self.put(c, b.fdiv(self.get(c), b.load(total, typ=v.ty(F64)))))
        return ir.Constant(I64, 1)

    def affine(self, param) -> ir.Value:
        b = self.b
        n = b.fptosi(param(1), I64)

        def body(c):
            i = b.select(b.icmp_signed("<", b.zext(c, I64), n), b.zext(c, I64),
                         b.sub(n, ir.Constant(I64, 1)))
            scale = self.splat(param(b.add(i, ir.Constant(I64, 2))))
            shift = self.splat(param(b.add(b.add(i, n), ir.Constant(I64, 2))))
            self.put(c, b.fadd(b.fmul(self.get(c), scale), shift))  # two roundings, as NumPy

        self.each(body)
        return b.add(b.add(n, n), ir.Constant(I64, 2))

    def binary(self, param) -> ir.Value:
        b, v = self.b, self.v
        p = self.get(0)
        self.put(1, p)
        self.put(0, b.fsub(v.const(F64, 1.0), p))
        b.store(ir.Constant(I32, 2), self.width)
        return ir.Constant(I64, 1)

    def isolation(self, param) -> ir.Value:
        b, v = self.b, self.v
        den = self.splat(param(1))

        def body(c):
            y = b.fdiv(b.fneg(self.get(c)), den)
            p = v.intrinsic(f"llvm.pow.{v._suffix(F64)}", v.ty(F64), [v.const(F64, 2.0), y])
            self.put(c, b.fneg(p))

        self.each(body)
        return ir.Constant(I64, 2)

    def threshold(self, param) -> ir.Value:
        """Threshold's rule: column 0 compared in float64; NaN compares false (class 0)."""
        b, v = self.b, self.v
        x, value = self.get(0), self.splat(param(1))
        strict = b.fcmp_ordered("!=", param(2), ir.Constant(F64, 0.0))
        above = b.select(strict, b.fcmp_ordered(">", x, value), b.fcmp_ordered(">=", x, value))
        self.put(0, b.uitofp(above, v.ty(F64)))
        b.store(ir.Constant(I32, 1), self.width)
        return ir.Constant(I64, 3)

    def argmax(self, param) -> ir.Value:
        """np.argmax over the row: a later column wins only when strictly greater, and the
        first NaN wins over everything (once the best is NaN, nothing compares greater)."""
        b, v = self.b, self.v
        best = self.k.loops.var(v.ty(F64), self.get(0), "best")
        at = self.k.loops.var(v.ty(F64), v.const(F64, 0.0), "best_at")

        def body(c):
            cur, x = b.load(best, typ=v.ty(F64)), self.get(c)
            nan_first = b.and_(b.fcmp_unordered("uno", x, x), b.fcmp_ordered("ord", cur, cur))
            take = b.or_(b.fcmp_ordered(">", x, cur), nan_first)
            b.store(b.select(take, x, cur), best)
            b.store(b.select(take, self.splat(b.uitofp(c, F64)), b.load(at, typ=v.ty(F64))), at)

        self.each(body)
        self.put(0, b.load(at, typ=v.ty(F64)))
        b.store(ir.Constant(I32, 1), self.width)
        return ir.Constant(I64, 1)
