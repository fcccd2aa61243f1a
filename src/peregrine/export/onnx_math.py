"""ONNX lowerings of NumPy's ufuncs (UFUNC), the power transforms (POWER) and
``np.logaddexp`` (LOG_ADD_EXP), and the exact ``log1p`` / ``expm1`` they share with the
network activations (``onnx_nn.py``). ONNX has neither log1p nor expm1, and ``Log(1 + z)`` /
``Exp(x) - 1`` lose a small argument to the rounding of ``1 + z`` / the cancellation, so both
are written by their classical exact formulas; everything else is ONNX Runtime's double op
(within an ulp or two of NumPy's)."""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.export.onnx_graph import Emitter, lowering
from peregrine.ir.ops import Op

_LN2, _LN10 = float(np.log(2.0)), float(np.log(10.0))
# NumPy ufunc -> how ONNX computes it on a double tensor
_UFUNCS = {
    "exp": lambda e, x: e.op("Exp", [x]),
    "log": lambda e, x: e.op("Log", [x]),
    "sqrt": lambda e, x: e.op("Sqrt", [x]),
    "absolute": lambda e, x: e.op("Abs", [x]),
    "negative": lambda e, x: e.op("Neg", [x]),
    "square": lambda e, x: e.op("Mul", [x, x]),
    "reciprocal": lambda e, x: e.op("Reciprocal", [x]),
    "tanh": lambda e, x: e.op("Tanh", [x]),
    "sign": lambda e, x: e.op("Sign", [x]),
    # ONNX has no Trunc: ceil below zero, floor elsewhere (exact; NaN, +-inf, -0.0 kept)
    "trunc": lambda e, x: e.op("Where", [e.op("Less", [x, e.const(np.asarray(0.0))]),
                                         e.op("Ceil", [x]), e.op("Floor", [x])]),
    "floor": lambda e, x: e.op("Floor", [x]),
    "ceil": lambda e, x: e.op("Ceil", [x]),
    "rint": lambda e, x: e.op("Round", [x]),  # both round half to even
    "sin": lambda e, x: e.op("Sin", [x]),
    "cos": lambda e, x: e.op("Cos", [x]),
    "log1p": lambda e, x: log1p(e, x),  # the exact forms below
    "expm1": lambda e, x: expm1(e, x),
    "exp2": lambda e, x: e.op("Pow", [e.const(np.asarray(2.0)), x]),
    "log2": lambda e, x: e.op("Div", [e.op("Log", [x]), e.const(np.asarray(_LN2))]),
    "log10": lambda e, x: e.op("Div", [e.op("Log", [x]), e.const(np.asarray(_LN10))]),
}


@lowering(Op.UFUNC)
def lower_ufunc(e: Emitter, n: Any, ins: list[str]) -> str:
    make = _UFUNCS.get(n.attrs.name)
    if make is None:
        e.refuse(n, f"ufunc {n.attrs.name!r} (exported: {', '.join(sorted(_UFUNCS))})")
    return make(e, ins[0])  # type: ignore[misc]


def log1p(e: Emitter, z: str) -> str:
    """log1p without the rounding of 1 + z: w = 1 + z, then z where w == 1, else
    log(w) * z / (w - 1) (Goldberg, "What every computer scientist should know about
    floating-point arithmetic", thm. 4: within a few ulps); +inf stays +inf."""
    one = e.const(np.asarray(1.0))
    w = e.op("Add", [one, z])
    ratio = e.op("Div", [e.op("Mul", [e.op("Log", [w]), z]), e.op("Sub", [w, one])])
    out = e.op("Where", [e.op("Equal", [w, one]), z, ratio])
    inf = e.const(np.asarray(np.inf))
    return e.op("Where", [e.op("Equal", [w, inf]), inf, out])


def expm1(e: Emitter, x: str) -> str:
    """expm1 without the cancellation of exp(x) - 1: u = exp(x), then x where u == 1, -1 where
    u - 1 == -1, else (u - 1) * x / log(u) (Kahan's formula: the rounding errors of u - 1 and
    log(u) cancel; within a few ulps); +inf stays +inf (inf / inf would be NaN)."""
    one = e.const(np.asarray(1.0))
    u = e.op("Exp", [x])
    um1 = e.op("Sub", [u, one])
    ratio = e.op("Div", [e.op("Mul", [um1, x]), e.op("Log", [u])])
    out = e.op("Where", [e.op("Equal", [um1, e.const(np.asarray(-1.0))]), um1, ratio])
    out = e.op("Where", [e.op("Equal", [u, one]), x, out])
    inf = e.const(np.asarray(np.inf))
    return e.op("Where", [e.op("Equal", [u, inf]), inf, out])


@lowering(Op.POWER)
def lower_power(e: Emitter, n: Any, ins: list[str]) -> str:
    """Yeo-Johnson / Box-Cox with the rule's branches (semantics.transformers.yeo_johnson,
    box_cox), per column through constant masks: every branch is computed and Where picks the
    rule's (the others' NaN or inf are discarded); log1p and expm1 as above (a few ulps)."""
    x = ins[0]
    lam = np.asarray(n.attrs.lambdas, np.float64).reshape(1, -1)
    eps = float(np.finfo(np.float64).eps)

    def k(v: Any) -> str:
        return e.const(np.asarray(v, np.float64))

    if n.attrs.method == "yeo-johnson":
        lp = log1p(e, x)
        pos_pow = e.op("Div", [expm1(e, e.op("Mul", [k(lam), lp])), k(lam)])
        pos = e.op("Where", [e.const(np.abs(lam) < eps), lp, pos_pow])
        ln = log1p(e, e.op("Neg", [x]))
        two = 2.0 - lam
        neg_pow = e.op("Neg", [e.op("Div", [expm1(e, e.op("Mul", [k(two), ln])), k(two)])])
        neg = e.op("Where", [e.const(np.abs(lam - 2.0) > eps), neg_pow,
                                  e.op("Neg", [ln])])
        return e.op("Where", [e.op("GreaterOrEqual", [x, k(0.0)]), pos, neg])
    logx = e.op("Log", [x])
    lx = e.op("Mul", [k(lam), logx])
    with np.errstate(divide="ignore"):
        log_abs = np.log(np.abs(lam))
        inv = np.where(lam != 0, 1.0 / np.where(lam != 0, lam, 1.0), 0.0)
    scaled = e.op("Exp", [e.op("Sub", [lx, k(log_abs)])])
    big = e.op("Sub", [e.op("Mul", [k(np.sign(lam)), scaled]), k(inv)])
    small = e.op("Div", [expm1(e, lx), k(lam)])
    out = e.op("Where", [e.op("Less", [lx, k(709.78)]), small, big])
    return e.op("Where", [e.const(np.abs(lam) < 1e-19), logx, out])


def _log_add_exp(e: Emitter, x: str, y: str) -> str:
    """np.logaddexp's branches (npy_logaddexp): x == y -> x + log 2 (equal infinities);
    else the larger plus log1p(exp(-|x - y|)); NaN in either gives NaN."""
    d = e.op("Sub", [x, y])
    big = e.op("Where", [e.op("Greater", [d, e.const(np.asarray(0.0))]), x, y])
    tail = log1p(e, e.op("Exp", [e.op("Neg", [e.op("Abs", [d])])]))
    out = e.op("Add", [big, tail])
    same = e.op("Add", [x, e.const(np.asarray(float(np.log(2.0))))])
    return e.op("Where", [e.op("Equal", [x, y]), same, out])


@lowering(Op.LOG_ADD_EXP)
def lower_log_add_exp(e: Emitter, n: Any, ins: list[str]) -> str:
    """The rule's order: per joblib job a running logaddexp from -inf over its members (a
    member's columns gathered, combined, and put back by one Gather over [acc, new]), then
    the jobs combined in order, minus ``shift``."""
    a, width = n.attrs, int(n.width)
    rows = e.op("Slice", [e.op("Shape", [ins[0]]), e.const(np.asarray([0], np.int64)),
                          e.const(np.asarray([1], np.int64))])
    shape = e.op("Concat", [rows, e.const(np.asarray([width], np.int64))], axis=0)
    starts = [int(s) for s in a.starts]
    out = None
    for lo, hi in zip(starts[:-1], starts[1:]):
        acc = e.op("Expand", [e.const(np.full((1, 1), -np.inf)), shape])
        for x, cols in zip(ins[lo:hi], a.columns[lo:hi]):
            cols = np.asarray(cols, np.int64).reshape(-1)
            new = _log_add_exp(e, e.op("Gather", [acc, e.const(cols)], axis=1), x)
            idx = np.arange(width, dtype=np.int64)
            idx[cols] = width + np.arange(len(cols))
            acc = e.op("Gather", [e.op("Concat", [acc, new], axis=1), e.const(idx)], axis=1)
        out = acc if out is None else _log_add_exp(e, out, acc)
    assert out is not None
    return e.op("Sub", [out, e.const(np.asarray(float(a.shift)))])
