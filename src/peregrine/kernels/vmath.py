"""Vector ``exp`` and ``log`` for ``<n x double>`` values, written out in IR.

Why: ``llvm.exp.v4f64`` has no vector lowering without a vector math library, so LLVM calls
libm's scalar ``exp`` once per lane, which made ``exp`` the largest cost of a fused
predict_proba (a call per row, more than reading the row). This one is plain vector
arithmetic, so four or eight lanes cost about what one did.

Method (the classic one, as in fdlibm and Cephes): ``x = k ln2 + r`` with ``k`` the nearest
integer to ``x / ln2`` and ``|r| <= ln2 / 2``; ``exp(r)`` from its Taylor series to degree 13
(truncation error below 1e-17 relative); then ``2**k`` as two exact power-of-two factors, so
results that are subnormal are rounded once. ``ln2`` is split in two (``LN2_HI`` has 32
trailing zero bits, so ``k * LN2_HI`` is exact for any ``|k| < 2**20``), which keeps ``r``
accurate without an FMA. No FMA and no fast-math flags: every target computes the same bits.
Against glibc's exp: within 1 ulp over [-745.2, 709.78] (about 90% of results identical);
tests/test_vmath.py checks that, and the special values.

``exp(+inf) = inf``, ``exp(-inf) = 0``, ``exp(nan) = nan``, overflow past 709.78 gives inf and
underflow below -745.13 gives 0, as libm.
"""

from __future__ import annotations

import math
from typing import Any

from llvmlite import ir

from peregrine.kernels.irutil import I64

LOG2E = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01  # 0x3FE62E42FEE00000: low 32 bits zero
LN2_LO = 1.90821492927058770002e-10  # ln 2 - LN2_HI
# past these, the result is inf or 0 anyway; clamping first keeps k a small integer
CLAMP_LO, CLAMP_HI = -746.0, 710.0
DEGREE = 13
TAYLOR = [1.0 / math.factorial(i) for i in range(DEGREE + 1)]


def exp(m: ir.Module, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """exp of every lane of ``x`` (a ``<n x double>``)."""
    n = x.type.count
    vd, vi = x.type, ir.VectorType(I64, n)

    def c(value: float) -> ir.Constant:
        return ir.Constant(vd, [value] * n)

    def call(name: str, *args: ir.Value) -> ir.Value:
        fn = m.globals.get(name)
        if fn is None:
            fn = ir.Function(m, ir.FunctionType(vd, [a.type for a in args]), name=name)
        return b.call(fn, list(args))

    # maxnum/minnum return the other operand for NaN: xc is never NaN, so k never is either
    xc = call(f"llvm.minnum.v{n}f64", call(f"llvm.maxnum.v{n}f64", x, c(CLAMP_LO)), c(CLAMP_HI))
    k = call(f"llvm.rint.v{n}f64", b.fmul(xc, c(LOG2E)))
    r = b.fsub(b.fsub(xc, b.fmul(k, c(LN2_HI))), b.fmul(k, c(LN2_LO)))
    p = c(TAYLOR[DEGREE])
    for coef in reversed(TAYLOR[:DEGREE]):
        p = b.fadd(b.fmul(p, r), c(coef))
    # 2**k = 2**k1 * 2**k2 with k1 = k >> 1: both factors are normal numbers for every
    # k in [-1077, 1025], and a subnormal result is rounded by the last product only
    ki = b.fptosi(k, vi)
    k1 = b.ashr(ki, ir.Constant(vi, [1] * n))
    k2 = b.sub(ki, k1)
    bias, shift = ir.Constant(vi, [1023] * n), ir.Constant(vi, [52] * n)
    s1 = b.bitcast(b.shl(b.add(k1, bias), shift), vd)
    s2 = b.bitcast(b.shl(b.add(k2, bias), shift), vd)
    out = b.fmul(b.fmul(p, s1), s2)
    return b.select(b.fcmp_unordered("uno", x, x), x, out)


# ---------------------------------------------------------------------------------- log --
# log: x = 2**k * m with m in [sqrt(2)/2, sqrt(2)), f = m - 1, s = f / (2 + f), and
# log(1 + f) = 2s + (2/3)s**3 + ... = f - (f**2 / 2 - s (f**2 / 2 + R(s**2))), R a degree-7
# polynomial in s**2 (the minimax coefficients of fdlibm's e_log.c, error below 2**-58.45);
# then + k ln2 with ln2 split as for exp. Written for whole vectors: both of fdlibm's forms
# of the last sum are computed and one is selected per lane, and its k == 0 shortcuts are
# the general form's values (0 * ln2 terms change no bits). Against glibc's log: within 1
# ulp (tests/test_vmath.py). Subnormal inputs are scaled by 2**54 first; log(0) = -inf,
# log(x < 0) = NaN, log(inf) = inf, NaN stays NaN, as libm.
LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
      2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
      1.479819860511658591e-01)
TWO54 = 2.0**54
SMALLEST_NORMAL = 2.0**-1022


def _splat(vt: ir.VectorType) -> Any:
    """value -> the constant vector of ``vt`` holding it in every lane."""
    return lambda value: ir.Constant(vt, [value] * vt.count)


def _with_high_word(b: ir.IRBuilder, bits: ir.Value, high: ir.Value, vd: ir.Type) -> ir.Value:
    """The doubles whose low 32 bits are ``bits``' and whose high 32 bits are ``high``."""
    vi = bits.type
    low = b.and_(bits, ir.Constant(vi, [0xFFFFFFFF] * vi.count))
    return b.bitcast(b.or_(b.shl(high, ir.Constant(vi, [32] * vi.count)), low), vd)


def log(m: ir.Module, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Natural log of every lane of ``x`` (a ``<n x double>``)."""
    vd, vi = x.type, ir.VectorType(I64, x.type.count)
    c, ci = _splat(vd), _splat(vi)

    sub = b.and_(b.fcmp_ordered(">", x, c(0.0)), b.fcmp_ordered("<", x, c(SMALLEST_NORMAL)))
    xs = b.select(sub, b.fmul(x, c(TWO54)), x)
    bits = b.bitcast(xs, vi)
    hx = b.lshr(bits, ci(32))  # the high word: sign, exponent, 20 bits of the mantissa
    k = b.add(b.sub(b.lshr(hx, ci(20)), ci(1023)), b.select(sub, ci(-54), ci(0)))
    hm = b.and_(hx, ci(0x000FFFFF))
    # m's exponent: 0 (m in [1, sqrt 2)) or -1 (m in [sqrt 2 / 2, 1)), k adjusted to match
    i = b.and_(b.add(hm, ci(0x95F64)), ci(0x100000))
    high = b.or_(hm, b.xor(i, ci(0x3FF00000)))
    mx = _with_high_word(b, bits, high, vd)
    k = b.add(k, b.lshr(i, ci(20)))
    f = b.fsub(mx, c(1.0))
    s = b.fdiv(f, b.fadd(c(2.0), f))
    dk = b.sitofp(k, vd)
    z = b.fmul(s, s)
    w = b.fmul(z, z)
    t1 = b.fmul(w, b.fadd(c(LG[1]), b.fmul(w, b.fadd(c(LG[3]), b.fmul(w, c(LG[5]))))))
    t2 = b.fmul(z, b.fadd(c(LG[0]), b.fmul(w, b.fadd(
        c(LG[2]), b.fmul(w, b.fadd(c(LG[4]), b.fmul(w, c(LG[6]))))))))
    r = b.fadd(t2, t1)
    hfsq = b.fmul(b.fmul(c(0.5), f), f)
    hi, lo = b.fmul(dk, c(LN2_HI)), b.fmul(dk, c(LN2_LO))
    # f far from 0 (fdlibm's i > 0): the f**2 / 2 form; near 0, the s (f - R) one
    wide = b.icmp_signed(">", b.or_(b.sub(hm, ci(0x6147A)), b.sub(ci(0x6B851), hm)), ci(0))
    a = b.fsub(hi, b.fsub(b.fsub(hfsq, b.fadd(b.fmul(s, b.fadd(hfsq, r)), lo)), f))
    a2 = b.fsub(hi, b.fsub(b.fsub(b.fmul(s, b.fsub(f, r)), lo), f))
    out = b.select(wide, a, a2)
    out = b.select(b.fcmp_ordered("==", x, c(math.inf)), c(math.inf), out)
    out = b.select(b.fcmp_ordered("==", x, c(0.0)), c(-math.inf), out)
    out = b.select(b.fcmp_ordered("<", x, c(0.0)), c(math.nan), out)
    return b.select(b.fcmp_unordered("uno", x, x), x, out)


# -------------------------------------------------------------------------------- log1p --
# log1p: fdlibm's s_log1p.c for whole vectors. Near 0 (-0.2929 < x < 0.41421) f = x and
# k = 0, no rounding of 1 + x at all; elsewhere u = 1 + x reduced as log reduces its argument,
# with c = the rounding error of 1 + x over u added back (0 past 2**53, where u = x). The same
# polynomial as log's. fdlibm's shortcuts for tiny |f| are the general form's values within
# its accuracy, so they are not taken; log1p(±0) keeps the zero's sign. Within 1 ulp of
# glibc's log1p and of np.log1p (tests/test_vmath.py); log1p(-1) = -inf, below -1 NaN.
LOG1P_HIGH = 0.41421353816986084  # fdlibm's bound: high word 0x3FDA827A
LOG1P_LOW = -0.2928932188134524  # and 0xBFD2BEC3 on the negative side


def log1p(m: ir.Module, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """log(1 + x) of every lane of ``x`` (a ``<n x double>``)."""
    vd, vi = x.type, ir.VectorType(I64, x.type.count)
    c, ci = _splat(vd), _splat(vi)

    big = b.fcmp_ordered(">=", x, c(2.0**53))
    u = b.select(big, x, b.fadd(c(1.0), x))
    bits = b.bitcast(u, vi)
    hu = b.lshr(bits, ci(32))
    k = b.sub(b.lshr(hu, ci(20)), ci(1023))
    # the rounding error of 1 + x, relative to u: exact either way round (Sterbenz)
    err = b.select(b.icmp_signed(">", k, ci(0)), b.fsub(c(1.0), b.fsub(u, x)),
                   b.fsub(x, b.fsub(u, c(1.0))))
    corr = b.select(big, c(0.0), b.fdiv(err, u))
    hm = b.and_(hu, ci(0x000FFFFF))
    low = b.icmp_signed("<", hm, ci(0x6A09E))  # u's mantissa below sqrt 2: m in [1, sqrt 2)
    high = b.select(low, b.or_(hm, ci(0x3FF00000)), b.or_(hm, ci(0x3FE00000)))
    k = b.select(low, k, b.add(k, ci(1)))
    um = _with_high_word(b, bits, high, vd)
    near0 = b.and_(b.fcmp_ordered(">", x, c(LOG1P_LOW)), b.fcmp_ordered("<", x, c(LOG1P_HIGH)))
    f = b.select(near0, x, b.fsub(um, c(1.0)))
    corr = b.select(near0, c(0.0), corr)
    dk = b.sitofp(b.select(near0, ci(0), k), vd)
    hfsq = b.fmul(b.fmul(c(0.5), f), f)
    s = b.fdiv(f, b.fadd(c(2.0), f))
    z = b.fmul(s, s)
    r = c(LG[6])
    for coef in reversed(LG[:6]):
        r = b.fadd(c(coef), b.fmul(z, r))
    r = b.fmul(z, r)
    tail = b.fadd(b.fmul(dk, c(LN2_LO)), corr)
    out = b.fsub(b.fmul(dk, c(LN2_HI)),
                 b.fsub(b.fsub(hfsq, b.fadd(b.fmul(s, b.fadd(hfsq, r)), tail)), f))
    out = b.select(b.fcmp_ordered("==", x, c(0.0)), x, out)  # ±0 as it came
    out = b.select(b.fcmp_ordered("==", x, c(math.inf)), c(math.inf), out)
    out = b.select(b.fcmp_ordered("==", x, c(-1.0)), c(-math.inf), out)
    out = b.select(b.fcmp_ordered("<", x, c(-1.0)), c(math.nan), out)
    return b.select(b.fcmp_unordered("uno", x, x), x, out)
