"""ONNX lowerings of QuantileTransformer (QUANTILE) and SplineTransformer (BSPLINE), the rules
of ``ir/semantics/transformers.py`` on their float64 path, in standard ``ai.onnx`` ops:

- QUANTILE: its two ``np.interp`` lookups through INTERP's bit-equal lowering
  (``onnx_lookup.interp_columns``), the bounds as the rule sets them; ``output="normal"``
  adds ``scipy.special.ndtri`` as Cephes computes it (``_ndtri``), then the rule's clip.
- BSPLINE: de Boor's recursion on the knot interval each value falls in (counted by
  comparisons, as DIGITIZE), every operation the rule's on the same operands; the basis
  placed by 0/1 masks and multiplied by ``coef`` as the rule's ``basis @ coef``; then the
  extrapolation modes' rows."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from peregrine.export.onnx_graph import Emitter, lowering
from peregrine.export.onnx_lookup import interp_columns
from peregrine.ir.ops import Op
from peregrine.ir.semantics.transformers import QUANTILE_BOUNDS, quantile_clip

DOUBLE = TensorProto.DOUBLE
INT64 = TensorProto.INT64

# Cephes ndtri's rational approximations (scipy.special.ndtri computes with these): P0/Q0
# for |y - 0.5| <= 3/8, P1/Q1 for sqrt(-2 log y) in [2, 8), P2/Q2 from 8; Q's leading 1
# implied (p1evl)
_S2PI = 2.50662827463100050242e0
_EXP_M2 = 0.13533528323661269189  # exp(-2)
_P0 = (-5.99633501014107895267e1, 9.80010754185999661536e1, -5.66762857469070293439e1,
       1.39312609387279679503e1, -1.23916583867381258016e0)
_Q0 = (1.95448858338141759834e0, 4.67627912898881538453e0, 8.63602421390890590575e1,
       -2.25462687854119370527e2, 2.00260212380060660359e2, -8.20372256168333339912e1,
       1.59056225126211695515e1, -1.18331621121330003142e0)
_P1 = (4.05544892305962419923e0, 3.15251094599893866154e1, 5.71628192246421288162e1,
       4.40805073893200834700e1, 1.46849561928858024014e1, 2.18663306850790267539e0,
       -1.40256079171354495875e-1, -3.50424626827848203418e-2, -8.57456785154685413611e-4)
_Q1 = (1.57799883256466749731e1, 4.53907635128879210584e1, 4.13172038254672030440e1,
       1.50425385692907503408e1, 2.50464946208309415979e0, -1.42182922854787788574e-1,
       -3.80806407691578277194e-2, -9.33259480895457427372e-4)
_P2 = (3.23774891776946035970e0, 6.91522889068984211695e0, 3.93881025292474443415e0,
       1.33303460815807542389e0, 2.01485389549179081538e-1, 1.23716634817820021358e-2,
       3.01581553508235416007e-4, 2.65806974686737550832e-6, 6.23974539184983293730e-9)
_Q2 = (6.02427039364742014255e0, 3.67983563856160859403e0, 1.37702099489081330271e0,
       2.16236993594496635890e-1, 1.34204006088543189037e-2, 3.28014464682127739104e-4,
       2.89247864745380683936e-6, 6.79019408009981274425e-9)


def _s(e: Emitter, v: float) -> str:
    return e.const(np.asarray(v, np.float64))


def _horner(e: Emitter, x: str, coefs: tuple[float, ...], monic: bool) -> str:
    """Cephes' polevl (``monic``: p1evl, a leading 1): ((c0 x + c1) x + ...) in that order."""
    acc = e.op("Add", [x, _s(e, coefs[0])]) if monic else _s(e, coefs[0])
    for c in coefs[1:]:
        acc = e.op("Add", [e.op("Mul", [acc, x]), _s(e, c)])
    return acc


def _ndtri(e: Emitter, u: str) -> str:
    """scipy.special.ndtri(u) by Cephes' algorithm, every branch computed and picked by
    Where: within an ulp or two of scipy's (the logs are ONNX Runtime's; measured 6e-16
    relative at most, 18 values in 300,000 differing). 0 -> -inf, 1 -> inf, NaN -> NaN."""
    flip = e.op("Greater", [u, _s(e, 1.0 - _EXP_M2)])
    y = e.op("Where", [flip, e.op("Sub", [_s(e, 1.0), u]), u])
    yc = e.op("Sub", [y, _s(e, 0.5)])
    y2 = e.op("Mul", [yc, yc])
    ratio = e.op("Div", [e.op("Mul", [y2, _horner(e, y2, _P0, False)]),
                         _horner(e, y2, _Q0, True)])
    central = e.op("Mul", [e.op("Add", [yc, e.op("Mul", [yc, ratio])]), _s(e, _S2PI)])
    t = e.op("Sqrt", [e.op("Mul", [_s(e, -2.0), e.op("Log", [y])])])
    t0 = e.op("Sub", [t, e.op("Div", [e.op("Log", [t]), t])])
    z = e.op("Div", [_s(e, 1.0), t])
    near = e.op("Div", [e.op("Mul", [z, _horner(e, z, _P1, False)]), _horner(e, z, _Q1, True)])
    far = e.op("Div", [e.op("Mul", [z, _horner(e, z, _P2, False)]), _horner(e, z, _Q2, True)])
    tail = e.op("Sub", [t0, e.op("Where", [e.op("Less", [t, _s(e, 8.0)]), near, far])])
    tail = e.op("Where", [flip, tail, e.op("Neg", [tail])])
    out = e.op("Where", [e.op("Greater", [y, _s(e, _EXP_M2)]), central, tail])
    out = e.op("Where", [e.op("Equal", [u, _s(e, 0.0)]), _s(e, -np.inf), out])
    return e.op("Where", [e.op("Equal", [u, _s(e, 1.0)]), _s(e, np.inf), out])


@lowering(Op.QUANTILE)
def lower_quantile(e: Emitter, n: Any, ins: list[str]) -> str:
    """0.5 * (interp(x, q, r) - interp(-x, -q[::-1], -r[::-1])) per column (np.interp's
    default left/right: the table's end values), then the bounds: uniform x == q[0] -> 0,
    x == q[-1] -> 1; normal x - 1e-7 < q[0] -> 0, x + 1e-7 > q[-1] -> 1 (0 wins, as the
    rule writes it last), ndtri and the clip. Bit-equal for "uniform"."""
    a = n.attrs
    x = e.to_double(ins[0])
    qs = [np.asarray(q, np.float64).reshape(-1) for q in a.quantiles]
    r = np.asarray(a.references, np.float64).reshape(-1)
    d = len(qs)
    up = interp_columns(e, x, qs, [r] * d, np.full(d, r[0]), np.full(d, r[-1]))
    down = interp_columns(e, e.op("Neg", [x]), [-q[::-1] for q in qs], [-r[::-1]] * d,
                          np.full(d, -r[-1]), np.full(d, -r[0]))
    u = e.op("Mul", [_s(e, 0.5), e.op("Sub", [up, down])])
    first = e.row([q[0] for q in qs])
    last = e.row([q[-1] for q in qs])
    if a.output == "normal":
        lower = e.op("Less", [e.op("Sub", [x, _s(e, QUANTILE_BOUNDS)]), first])
        upper = e.op("Greater", [e.op("Add", [x, _s(e, QUANTILE_BOUNDS)]), last])
    else:
        lower, upper = e.op("Equal", [x, first]), e.op("Equal", [x, last])
    u = e.op("Where", [upper, _s(e, 1.0), u])
    u = e.op("Where", [lower, _s(e, 0.0), u])
    if a.output != "normal":
        return u
    low, high = quantile_clip()
    return e.op("Min", [e.op("Max", [_ndtri(e, u), _s(e, low)]), _s(e, high)])


@lowering(Op.BSPLINE)
def lower_bspline(e: Emitter, n: Any, ins: list[str]) -> str:
    a = n.attrs
    x = e.to_double(ins[0])
    knots = np.stack([np.asarray(t, np.float64).reshape(-1) for t in a.knots])  # (d, L)
    d, size = knots.shape
    k = int(a.degree)
    nb = size - k - 1  # B-splines per column
    coef = np.asarray(a.coef, np.float64)[:nb]
    s = coef.shape[1]
    t_lo, t_hi = knots[:, k], knots[:, nb]
    xe = x
    if a.extrapolation == "periodic":  # lo + np.mod(x - lo, hi - lo); 0 where hi == lo
        period = t_hi - t_lo
        live = period > 0
        b = e.row(np.where(live, period, 1.0))
        rem = e.op("Mod", [e.op("Sub", [x, e.row(t_lo)]), b], fmod=1)
        # np.mod: fmod, plus the divisor where the remainder's sign differs (b > 0), and
        # +0.0 for a zero remainder (adding 0.0 turns -0.0 into +0.0, nothing else)
        rem = e.op("Where", [e.op("Less", [rem, _s(e, 0.0)]), e.op("Add", [rem, b]),
                             e.op("Add", [rem, _s(e, 0.0)])])
        xe = e.op("Add", [e.row(t_lo), rem])
        if not live.all():
            xe = e.op("Where", [e.const(live.reshape(1, -1)), xe, _s(e, 0.0)])
    safe = e.op("Where", [e.op("IsNaN", [xe]), e.row(t_lo), xe])
    # ell = clip(searchsorted(t, safe, "right") - 1, k, nb - 1): knots <= safe, counted
    le = e.op("GreaterOrEqual", [e.op("Unsqueeze", [safe, e.const(np.asarray([2], np.int64))]),
                                 e.const(knots[None])])
    count = e.op("ReduceSum", [e.op("Cast", [le], to=INT64),
                               e.const(np.asarray([2], np.int64))], keepdims=0)
    ell = e.op("Min", [e.op("Max", [e.op("Sub", [count, e.const(np.asarray(1, np.int64))]),
                                     e.const(np.asarray(k, np.int64))]),
                       e.const(np.asarray(nb - 1, np.int64))])
    base = e.op("Add", [ell, e.const((np.arange(d, dtype=np.int64) * size).reshape(1, -1))])
    flat = knots.reshape(-1)
    knot_at: dict[int, str] = {}

    def t_of(shift: int) -> str:  # t[ell + shift] per (row, column)
        if shift not in knot_at:
            idx = e.op("Add", [base, e.const(np.asarray(shift, np.int64))])
            knot_at[shift] = e.op("Gather", [e.const(flat), idx], axis=0)
        return knot_at[shift]

    zero = _s(e, 0.0)
    h: list[str] = [_s(e, 1.0)] + [zero] * k  # the rule's h columns, as tensor names
    for j in range(1, k + 1):
        hh = h[:j]
        h[0] = zero
        for m in range(1, j + 1):
            xb, xa = t_of(m), t_of(m - j)
            same = e.op("Equal", [xb, xa])
            w = e.op("Div", [hh[m - 1], e.op("Sub", [xb, xa])])
            h[m - 1] = e.op("Where", [same, h[m - 1], e.op("Add", [h[m - 1], e.op(
                "Mul", [w, e.op("Sub", [xb, safe])])])])
            h[m] = e.op("Where", [same, zero, e.op("Mul", [w, e.op("Sub", [safe, xa])])])
    # basis[:, ell - k + c] = h[c]: placed by masks (no arithmetic), then basis @ coef as the
    # rule's (coef is 0/1: each output one basis value, or two when periodic wraps)
    ell3 = e.op("Unsqueeze", [ell, e.const(np.asarray([2], np.int64))])
    slot = e.op("Sub", [e.const(np.arange(nb, dtype=np.int64).reshape(1, 1, -1)), ell3])
    basis = zero
    for c in range(k + 1):
        hit = e.op("Equal", [slot, e.const(np.asarray(c - k, np.int64))])
        # degree 0: h[0] is the constant 1.0 (every other case: an (N, d) tensor)
        hc = h[c] if k == 0 else e.op("Unsqueeze", [h[c], e.const(np.asarray([2], np.int64))])
        basis = e.op("Where", [hit, hc, basis])
    out = e.op("MatMul", [basis, e.const(coef)])  # (N, d, s)
    out = e.op("Reshape", [out, e.const(np.asarray([0, d * s], np.int64))])
    return _extrapolate(e, a, x, out, d, s, t_lo, t_hi)


def _extrapolate(e: Emitter, a: Any, x: str, out: str, d: int, s: int,
                 t_lo: np.ndarray, t_hi: np.ndarray) -> str:
    """The rule's rows outside the base interval, per output column (column j's block of s),
    then NaN input -> 0."""
    xs = e.op("Gather", [x, e.const(np.repeat(np.arange(d, dtype=np.int64), s))], axis=1)

    def per_out(v: np.ndarray) -> str:  # a per-input-column value, per output column
        return e.row(np.repeat(np.asarray(v, np.float64), s))

    mode = a.extrapolation
    if mode == "error":  # NaN outside [t[k], t[n]] (RANGE_CHECK rejects those rows)
        inside = e.op("And", [e.op("GreaterOrEqual", [xs, per_out(t_lo)]),
                              e.op("LessOrEqual", [xs, per_out(t_hi)])])
        out = e.op("Where", [inside, out, _s(e, np.nan)])
    elif mode in ("constant", "linear"):
        lo, hi = np.asarray(a.low, np.float64), np.asarray(a.high, np.float64)
        reach = np.asarray(a.reach).astype(np.int64)
        below = e.op("Less", [xs, per_out(lo)])
        above = e.op("Greater", [xs, per_out(hi)])
        inside = e.op("And", [e.op("GreaterOrEqual", [xs, per_out(lo)]),
                              e.op("LessOrEqual", [xs, per_out(hi)])])
        out = e.op("Where", [inside, out, _s(e, 0.0)])
        i = np.tile(np.arange(s), d)
        r = np.repeat(reach, s)
        first, end = i < r, i >= s - r  # the columns each side sets
        f_min, f_max = (np.asarray(v, np.float64).reshape(-1) for v in (a.f_min, a.f_max))
        if mode == "constant":
            low_v, high_v = e.row(f_min), e.row(f_max)
        else:  # f_min[i] + (x - lo) * fp_min[i], f_max[i] + (x - hi) * fp_max[i]
            fp_min, fp_max = (np.asarray(v, np.float64).reshape(-1)
                              for v in (a.fp_min, a.fp_max))
            low_v = e.op("Add", [e.row(f_min), e.op("Mul", [e.op("Sub", [xs, per_out(lo)]),
                                                            e.row(fp_min)])])
            high_v = e.op("Add", [e.row(f_max), e.op("Mul", [e.op("Sub", [xs, per_out(hi)]),
                                                             e.row(fp_max)])])
        if first.any():
            out = e.op("Where", [e.op("And", [below, e.const(first.reshape(1, -1))]), low_v,
                                 out])
        if end.any():
            out = e.op("Where", [e.op("And", [above, e.const(end.reshape(1, -1))]), high_v,
                                 out])
    return e.op("Where", [e.op("IsNaN", [xs]), _s(e, 0.0), out])
