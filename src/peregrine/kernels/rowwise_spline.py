"""SplineTransformer's BSPLINE op in the fused row kernel (rowwise.py plans the step,
rowwise_emit.Emitter.op_bspline calls :func:`emit`).

Per input column, in the rule's order of operations (``ir/semantics/transformers.py``
``bspline_column``): the periodic wrap ``lo + np.mod(x - lo, hi - lo)``, the knot interval
``ell`` (``searchsorted(t, x, "right") - 1`` clipped to ``[k, n - 1]``: the count of knots
``<= x``, less one), de Boor's recursion with its repeated-knot guards, the basis row times
``coef`` as a sum over the basis from 0.0, then the extrapolation modes and the NaN rows. The
rule's ``basis @ coef`` is a BLAS product; here each output is ``0.0 + sum_i basis_i coef_i``
in basis order, the same bits wherever an output sums at most two nonzero products (addition
of two numbers commutes, adding a zero of either sign to a sum started at +0.0 changes
nothing) and NaN wherever a basis value is NaN or infinite (``inf * 0``): so the step is
planned only for a 0/1 ``coef`` with at most two ones per output (the identity, or the
periodic wrap of the last ``degree`` splines onto the first). Scalar code per column: the
recursion's knot reads are indexed by ``ell``."""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir

from peregrine.kernels.irutil import F64, I1, I32, I64

MODES = ("error", "continue", "periodic", "constant", "linear")


def step(a: Any, w: int, win: int, param) -> dict | None:
    """The step record of BSPLINE attributes ``a`` (None: not fusable here)."""
    knots = [np.asarray(t, dtype=np.float64).reshape(-1) for t in a.knots]
    k, mode = int(a.degree), str(a.extrapolation)
    coef = np.asarray(a.coef, dtype=np.float64)
    if mode not in MODES or len(knots) != win or coef.ndim != 2 or not knots:
        return None
    size, s = knots[0].size, coef.shape[1]
    n = size - k - 1
    if w != win * s or n < 1 or n > coef.shape[0] or any(t.size != size for t in knots):
        return None
    c = coef[:n]
    if not np.isin(c, (0.0, 1.0)).all() or (c != 0).sum(0).max(initial=0) > 2:
        return None  # the BLAS product's order would matter: the rule runs
    cols = []
    for j, t in enumerate(knots):
        if not np.isfinite(t).all():
            return None
        cols.append({"t": param(t), "edge": param([a.low[j], a.high[j]]),
                     "reach": int(a.reach[j]),
                     **{e: param(getattr(a, e)[j], s) for e in ("f_min", "f_max", "fp_min",
                                                                 "fp_max")}})
    return {"op": "bspline", "k": k, "n": n, "L": size, "s": s, "mode": mode,
            "C": param(c), "cols": cols}


def emit(e: Any, s: dict, ins: list) -> ir.Value:
    """The step's output row (columns' blocks end to end) from the input row ``ins[0]``;
    ``e``: the rowwise_emit.Emitter."""
    x = ins[0]
    coef = [e.load_param([s["C"][0] + i * s["s"], s["s"]]) for i in range(s["n"])]
    blocks = [_column(e, s, col, e.lane(x, j), coef) for j, col in enumerate(s["cols"])]
    return e.joined(blocks)


def _column(e: Any, s: dict, col: dict, x: ir.Value, coef: list[ir.Value]) -> ir.Value:
    b = e.b
    k, n, width, mode = s["k"], s["n"], s["s"], s["mode"]
    t = e.load_param(col["t"])

    def knot(i: ir.Value | int) -> ir.Value:
        return b.extract_element(t, ir.Constant(I64, i) if isinstance(i, int) else i)

    zero, lo, hi = ir.Constant(F64, 0.0), knot(k), knot(n)
    xe = x
    if mode == "periodic":
        period = b.fsub(hi, lo)
        wrapped = b.fadd(lo, _np_mod(b, b.fsub(x, lo), period))
        xe = b.select(b.fcmp_ordered(">", period, zero), wrapped, zero)
    safe = b.select(b.fcmp_unordered("uno", xe, xe), lo, xe)
    # searchsorted(t, safe, side="right") - 1: the knots <= safe (none is NaN), less one
    le = b.zext(b.fcmp_ordered("<=", t, e.splat(safe, s["L"])), ir.VectorType(I64, s["L"]))
    count = e.intrinsic(f"llvm.vector.reduce.add.v{s['L']}i64", I64, [le])
    ell = b.sub(count, ir.Constant(I64, 1))
    ell = b.select(b.icmp_signed("<", ell, ir.Constant(I64, k)), ir.Constant(I64, k), ell)
    ell = b.select(b.icmp_signed(">", ell, ir.Constant(I64, n - 1)), ir.Constant(I64, n - 1),
                   ell)
    # de Boor (bspline_basis): h[0..k], the k+1 B-splines that do not vanish at safe
    h = [ir.Constant(F64, 1.0)] + [zero] * k
    for j in range(1, k + 1):
        hh = h[:j]
        h[0] = zero
        for m in range(1, j + 1):
            xb = knot(b.add(ell, ir.Constant(I64, m)))
            xa = knot(b.add(ell, ir.Constant(I64, m - j)))
            same = b.fcmp_ordered("==", xb, xa)  # repeated knots: that B-spline is 0
            w = b.fdiv(hh[m - 1], b.fsub(xb, xa))
            h[m - 1] = b.select(same, h[m - 1], b.fadd(h[m - 1], b.fmul(w, b.fsub(xb, safe))))
            h[m] = b.select(same, zero, b.fmul(w, b.fsub(safe, xa)))
    # basis row: h[a] at ell - k + a, zeros elsewhere; times coef, summed in basis order
    first = b.sub(ell, ir.Constant(I64, k))
    out = e.const(0.0, width)
    for i in range(n):
        at = b.sub(ir.Constant(I64, i), first)  # which h lands on basis slot i, if any
        v = zero
        for a_ in range(k + 1):
            v = b.select(b.icmp_signed("==", at, ir.Constant(I64, a_)), h[a_], v)
        out = b.fadd(out, b.fmul(e.splat(v, width), coef[i]))
    if mode == "error":  # extrapolate=False: NaN outside [t[k], t[n]]
        inside = b.and_(b.fcmp_ordered("<=", lo, x), b.fcmp_ordered("<=", x, hi))
        out = b.select(inside, out, e.const(float("nan"), width))
    elif mode in ("constant", "linear"):
        edge = e.load_param(col["edge"])
        elo, ehi = e.lane(edge, 0), e.lane(edge, 1)
        inside = b.and_(b.fcmp_ordered("<=", elo, x), b.fcmp_ordered("<=", x, ehi))
        below, above = b.fcmp_ordered("<", x, elo), b.fcmp_ordered(">", x, ehi)
        out = b.select(inside, out, e.const(0.0, width))
        reach = col["reach"]
        if reach > 0:
            if mode == "constant":
                low_v, high_v = e.load_param(col["f_min"]), e.load_param(col["f_max"])
            else:  # f + (x - edge) * fp, the rule's two roundings
                low_v = b.fadd(e.load_param(col["f_min"]),
                               b.fmul(e.splat(b.fsub(x, elo), width),
                                      e.load_param(col["fp_min"])))
                high_v = b.fadd(e.load_param(col["f_max"]),
                                b.fmul(e.splat(b.fsub(x, ehi), width),
                                       e.load_param(col["fp_max"])))
            first_lanes = _lanes(width, range(reach))
            last_lanes = _lanes(width, range(width - reach, width))
            out = b.select(b.and_(_splat_bit(b, below, width), first_lanes), low_v, out)
            out = b.select(b.and_(_splat_bit(b, above, width), last_lanes), high_v, out)
    # handle_missing="zeros" (NaN is rejected at the boundary otherwise)
    return b.select(_splat_bit(b, b.fcmp_unordered("uno", x, x), width),
                    e.const(0.0, width), out)


def _np_mod(b: ir.IRBuilder, a: ir.Value, m: ir.Value) -> ir.Value:
    """np.mod(a, m) for m > 0 (NumPy's npy_divmod: fmod, moved into [0, m), +0.0 for 0)."""
    zero = ir.Constant(F64, 0.0)
    r = b.frem(a, m)
    r = b.select(b.and_(b.fcmp_ordered("!=", r, zero), b.fcmp_ordered("<", r, zero)),
                 b.fadd(r, m), r)
    return b.select(b.fcmp_ordered("==", r, zero), zero, r)


def _lanes(width: int, lanes: range) -> ir.Constant:
    return ir.Constant(ir.VectorType(I1, width), [int(j in lanes) for j in range(width)])


def _splat_bit(b: ir.IRBuilder, bit: ir.Value, width: int) -> ir.Value:
    v = b.insert_element(ir.Constant(ir.VectorType(I1, 1), ir.Undefined), bit,
                         ir.Constant(I32, 0))
    return b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, width), [0] * width))
