"""ONNX lowerings of a PyTorch network's layers (DENSE, ACTIVATION, BATCH_NORM: TorchStep,
skorch), the rules of ``ir/semantics/nn.py``. A layer computes in the network's dtype
(``net_dtype``, float32 unless converted): its input is rounded to it (a Cast), its output is
in it; the exported tensor between ops is double (the export's working type) holding those
float32 numbers exactly, and the float32 tensor is remembered (``Emitter.narrow``) so that the
next layer, or a forest comparing in float32, reads it without another rounding.

- DENSE: the product then the bias, in the network's dtype, as the rule. float32: the
  product as the rule's BLAS (OpenBLAS) sums it, a chain of fused multiply-adds per input
  (``_fma_chain``), so the exported network gives the compiled model's float32 numbers and a
  forest after it splits as the compiled model does (torch's own BLAS differs from both in
  last bits: docs/exactness.md, "Networks"); float64: one MatMul (the runtime's order).
- ACTIVATION: the rule's float64 formula on the rounded input, rounded once to the dtype
  (gelu "tanh" rounds every step, as ATen's kernel and the rule); exp, log, tanh are ONNX
  Runtime's double functions (within an ulp or two of NumPy's, so the float32 results agree
  but where the double value lies within that of a float32 rounding boundary); expm1 and log1p
  by the exact forms of ``onnx_math``. gelu's erf (``approximate="none"``) is Cephes' erf in
  double (``_erf``: ONNX Runtime's Erf takes float32 only and is an approximation, 12% of
  float32 arguments one ulp from the correctly rounded value; measured for this one: within
  1.4e-16 relative of scipy's erf, and rounded to float32 equal on all but 1 in 3 million
  float32 arguments, a double rounding at a float32 tie).
- BATCH_NORM: x * alpha + beta with ATen's float32 terms, in double (the product of two
  float32 numbers is exact, the sum rounds once, as the rule's), rounded to the dtype."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from peregrine.export.onnx_graph import Emitter, lowering
from peregrine.export.onnx_math import expm1, log1p
from peregrine.export.onnx_ops import _sigmoid
from peregrine.export.onnx_transformers import _horner
from peregrine.ir.ops import Op

DOUBLE, FLOAT = TensorProto.DOUBLE, TensorProto.FLOAT


def _f32(a: Any) -> bool:
    return str(a.net_dtype) == "float32"


def _net_input(e: Emitter, x: str, f32: bool) -> tuple[str | None, str]:
    """(the float32 tensor or None, the double tensor of the input rounded to the dtype)."""
    if not f32:
        return None, e.to_double(x)
    xf = e.narrow.get(x) or e.cast(x, FLOAT)  # a widened float32 tensor: its original
    return xf, e.cast(xf, DOUBLE)


def _net_output(e: Emitter, out: str, f32: bool, is_float: bool = False) -> str:
    """``out`` (double, or float32 where ``is_float``) rounded to the dtype, held as double."""
    if not f32:
        return out
    if not is_float:
        out = e.op("Cast", [out], to=FLOAT)
    e.dtypes[out] = FLOAT
    return e.cast(out, DOUBLE)


@lowering(Op.DENSE)
def lower_dense(e: Emitter, n: Any, ins: list[str]) -> str:
    a = n.attrs
    f32 = _f32(a)
    xf, xd = _net_input(e, ins[0], f32)
    dt = np.float32 if f32 else np.float64
    w = np.asarray(a.weight, np.float64).astype(dt)  # exact: the check held dtype numbers
    b = np.asarray(a.bias, np.float64).astype(dt).reshape(1, -1)
    if f32 and w.shape[0] <= FMA_CHAIN_MAX:
        product = _fma_chain(e, xd, np.asarray(a.weight, np.float64))
    else:
        product = e.op("MatMul", [xf if f32 else xd, e.const(w)])
    out = e.op("Add", [product, e.const(b)])
    return _net_output(e, out, f32, is_float=f32)


# DENSE inputs up to this many: the float32 product as NumPy's BLAS sums it (_fma_chain);
# wider layers are one float32 MatMul (ONNX Runtime's GEMM blocking; a node per input term
# would make the file as large as the layer)
FMA_CHAIN_MAX = 512


def _fma_chain(e: Emitter, x: str, w: np.ndarray) -> str:
    """x @ w in float32 as OpenBLAS's sgemm computes it on the rule's side (NumPy): each output
    accumulates acc = fma(x[:, k], w[k], acc) for k in order, from 0 (measured: equal to
    NumPy's float32 matmul on every value for 2 to 2,000 rows and 6 to 300 inputs; one row
    goes through sgemv, equal up to 16 inputs). The fma is the exact double product of two
    float32 numbers plus acc, rounded to double then to float32: the same as one rounding but
    where the double sum falls on a float32 tie (2**-29 of the time). Returns float32."""
    acc = None
    for k in range(w.shape[0]):
        prod = e.op("Mul", [e.columns(x, k, k + 1), e.const(w[k].reshape(1, -1))])
        total = prod if acc is None else e.op("Add", [prod, acc])
        acc_f = e.op("Cast", [total], to=FLOAT)
        if k == w.shape[0] - 1:
            return acc_f
        acc = e.op("Cast", [acc_f], to=DOUBLE)
    raise AssertionError("a DENSE layer without inputs")


@lowering(Op.BATCH_NORM)
def lower_batch_norm(e: Emitter, n: Any, ins: list[str]) -> str:
    a = n.attrs
    f32 = _f32(a)
    alpha, beta = a.terms()
    _, x = _net_input(e, ins[0], f32)
    out = e.op("Add", [e.op("Mul", [x, e.row(alpha)]), e.row(beta)])
    return _net_output(e, out, f32)


@lowering(Op.ACTIVATION)
def lower_activation(e: Emitter, n: Any, ins: list[str]) -> str:
    a = n.attrs
    f32 = _f32(a)
    _, x = _net_input(e, ins[0], f32)
    out = _ACTIVATIONS[a.kind](e, x, a, f32)
    return _net_output(e, out, f32)


def _c(e: Emitter, v: float) -> str:
    return e.const(np.asarray(float(v), np.float64))


def _round(e: Emitter, x: str, f32: bool) -> str:
    """a.round: the double value rounded to the dtype and held as double again."""
    if not f32:
        return x
    return e.op("Cast", [e.op("Cast", [x], to=FLOAT)], to=DOUBLE)


def _where_positive(e: Emitter, x: str, yes: str, no: str) -> str:
    return e.op("Where", [e.op("Greater", [x, _c(e, 0.0)]), yes, no])


def _elu(e: Emitter, x: str, a: Any, f32: bool) -> str:
    negcoef = a.param_of(a.param("alpha") * a.param("scale"))
    neg = e.op("Mul", [expm1(e, e.op("Mul", [x, _c(e, a.param("input_scale"))])),
                       _c(e, negcoef)])
    return _where_positive(e, x, e.op("Mul", [x, _c(e, a.param("scale"))]), neg)


# Cephes' erf (scipy.special.erf computes with these): x T(x^2) / U(x^2) for |x| <= 1, else
# 1 - erfc(|x|) with erfc = exp(-x^2) P(|x|) / Q(|x|) (U's and Q's leading 1 implied)
_ERF_T = (9.60497373987051638749e0, 9.00260197203842689217e1, 2.23200534594684319226e3,
          7.00332514112805075473e3, 5.55923013010394962768e4)
_ERF_U = (3.35617141647503099647e1, 5.21357949780152679795e2, 4.59432382970980127987e3,
          2.26290000613890934246e4, 4.92673942608635921086e4)
_ERFC_P = (2.46196981473530512524e-10, 5.64189564831068821977e-1, 7.46321056442269912687e0,
           4.86371970985681366614e1, 1.96520832956077098242e2, 5.26445194995477358631e2,
           9.34528527171957607540e2, 1.02755188689515710272e3, 5.57535335369399327526e2)
_ERFC_Q = (1.32281951154744992508e1, 8.67072140885989742329e1, 3.54937778887819891062e2,
           9.75708501743205489753e2, 1.82390916687909736289e3, 2.24633760818710981792e3,
           1.65666309194161350182e3, 5.57535340817727675546e2)


def _erf(e: Emitter, x: str) -> str:
    """erf in double, both of Cephes' branches computed and picked by Where. |x| is capped at
    6 in the erfc branch (erfc(6) = 2e-17: erf is 1.0 in double from there, and the cap keeps
    inf out of P / Q); NaN stays NaN, +-inf give +-1."""
    z = e.op("Mul", [x, x])
    small = e.op("Div", [e.op("Mul", [x, _horner(e, z, _ERF_T, False)]),
                         _horner(e, z, _ERF_U, True)])
    ax = e.op("Abs", [x])
    capped = e.op("Min", [ax, _c(e, 6.0)])
    erfc = e.op("Div", [e.op("Mul", [e.op("Exp", [e.op("Neg", [e.op("Mul", [capped, capped])])]),
                                     _horner(e, capped, _ERFC_P, False)]),
                        _horner(e, capped, _ERFC_Q, True)])
    big = e.op("Sub", [_c(e, 1.0), erfc])
    big = e.op("Where", [e.op("Less", [x, _c(e, 0.0)]), e.op("Neg", [big]), big])
    return e.op("Where", [e.op("LessOrEqual", [ax, _c(e, 1.0)]), small, big])


def _gelu(e: Emitter, x: str, a: Any, f32: bool) -> str:
    def r(t: str) -> str:
        return _round(e, t, f32)

    if a.approximate != "tanh":  # 0.5 x (1 + erf(x sqrt(1/2))), each step rounded
        arg = r(e.op("Mul", [x, _c(e, a.param_of(np.sqrt(0.5)))]))
        half = r(e.op("Mul", [x, _c(e, 0.5)]))
        return r(e.op("Mul", [half, r(e.op("Add", [_c(e, 1.0), r(_erf(e, arg))]))]))

    cube = r(e.op("Mul", [r(e.op("Mul", [x, x])), x]))
    c1 = a.param_of(np.sqrt(2.0) * (2.0 / np.sqrt(np.pi)) * 0.5)
    inner = r(e.op("Mul", [_c(e, c1), r(e.op("Add", [x, r(e.op(
        "Mul", [_c(e, a.param_of(0.044715)), cube]))]))]))
    half = r(e.op("Mul", [_c(e, 0.5), x]))
    return r(e.op("Mul", [half, r(e.op("Add", [_c(e, 1.0), r(e.op("Tanh", [inner]))]))]))


def _softplus(e: Emitter, x: str, a: Any, f32: bool) -> str:
    beta = _c(e, a.param("beta"))
    xb = e.op("Mul", [x, beta])
    soft = e.op("Div", [log1p(e, e.op("Exp", [xb])), beta])
    return e.op("Where", [e.op("Greater", [xb, _c(e, a.param("threshold"))]), x, soft])


def _softmax(e: Emitter, x: str, a: Any, f32: bool, log: bool = False) -> str:
    axes = e.const(np.asarray([1], np.int64))
    shifted = _round(e, e.op("Sub", [x, e.op("ReduceMax", [x, axes], keepdims=1)]), f32)
    ex = e.op("Exp", [shifted])
    total = e.op("ReduceSum", [ex, axes], keepdims=1)
    if log:
        return e.op("Sub", [shifted, e.op("Log", [total])])
    return e.op("Div", [ex, total])


_ACTIVATIONS = {
    "identity": lambda e, x, a, f32: x,
    "relu": lambda e, x, a, f32: e.op("Max", [x, _c(e, 0.0)]),  # Max keeps NaN
    "hardtanh": lambda e, x, a, f32: e.op("Min", [e.op("Max", [x, _c(e, a.param("low"))]),
                                                   _c(e, a.param("high"))]),
    "leaky_relu": lambda e, x, a, f32: _where_positive(
        e, x, x, e.op("Mul", [x, _c(e, a.param("alpha"))])),
    "elu": _elu,
    "gelu": _gelu,
    "tanh": lambda e, x, a, f32: e.op("Tanh", [x]),
    "sigmoid": lambda e, x, a, f32: _sigmoid(e, x),
    "softplus": _softplus,
    "silu": lambda e, x, a, f32: e.op("Div", [x, e.op("Add", [_c(e, 1.0), e.op(
        "Exp", [e.op("Neg", [x])])])]),
    "mish": lambda e, x, a, f32: e.op("Mul", [x, e.op("Tanh", [log1p(e, e.op("Exp", [x]))])]),
    "softmax": _softmax,
    "log_softmax": lambda e, x, a, f32: _softmax(e, x, a, f32, log=True),
}
