"""Neural-network layers: a PyTorch module inside a scikit-learn pipeline (issue #15 item 4),
translated op by op by ``frontends/torch_fx.py``. A module computes in its parameters' dtype
(float32 unless the user converted it) and what follows reads those numbers (a forest's splits
compare the float32 outputs), so these ops compute in the network's ``net_dtype``, whatever their
input: the input is rounded to it first and the output is in it (``float32_out``).

Rounding. DENSE is a matrix product in the network's dtype, as torch's: NumPy's BLAS in this
rule, torch's (MKL/oneDNN) in the source and in the torch and native backends, which call
torch's own kernels (``kernels/torch_nn.py``). A float32 sum's order is the BLAS library's
blocking, which depends on the library, the CPU and the row count, so the rule's last bits may
differ from the source's (measured: none for a 6-input layer, two values in five for 16
inputs, each within 2 ulps). BATCH_NORM reproduces ATen's float32 terms and fused multiply-add.
The element-wise activations are evaluated in float64 and rounded once (the correctly rounded
value); torch's vectorised float32 kernels are within a few ulps of it (docs/exactness.md,
"Networks").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.ir.ops import ACTIVATIONS, Op
from peregrine.ir.semantics.base import Attrs, bad, choice, define, f64, real
from peregrine.ir.semantics.core import sigmoid
from peregrine.options import CompileOptions

NET_DTYPES = ("float32", "float64")
ROW_WISE = ("softmax", "log_softmax")  # over the columns of a row (dim=1 of a 2-D tensor)
GELU_APPROXIMATIONS = ("none", "tanh")


def in_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to the network's dtype (what ``module(x.to(dtype))`` reads)."""
    return np.asarray(x).astype(dtype, copy=False)


def exact_in(n: Any, key: str, value: Any, dtype: str) -> np.ndarray:
    """A parameter array whose float64 values are exactly the network's ``dtype`` values."""
    a = f64(value)
    if not np.array_equal(a.astype(dtype).astype(np.float64), a, equal_nan=True):
        raise bad(n, f"{key} holds values that are not {dtype} numbers")
    return a


@define(Op.DENSE)
class Dense(Attrs):
    """x @ weight + bias in ``net_dtype`` (one of NET_DTYPES): torch.nn.Linear, whose ``weight`` is
    this op's ``weight.T``. The input is rounded to ``net_dtype``, the product accumulates in it
    (a BLAS sgemm for float32), then the bias is added, rounded again; weight (in, out) and bias
    (out,) hold ``net_dtype`` numbers (stored as float64, exactly)."""

    weight: Any
    bias: Any
    net_dtype: str = "float32"

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        choice(n, "net_dtype", self.net_dtype, NET_DTYPES)
        w = exact_in(n, "weight", self.weight, self.net_dtype)
        b = exact_in(n, "bias", self.bias, self.net_dtype)
        if w.ndim != 2 or b.shape != (w.shape[1],):
            raise bad(n, f"weight {w.shape} / bias {b.shape} mismatch")
        if ins[0].width is not None and ins[0].width != w.shape[0]:
            raise bad(n, f"weight has {w.shape[0]} rows, input {ins[0].width} columns")

    def infer_width(self, widths: list) -> int:
        return int(np.shape(self.weight)[1])

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return self.net_dtype == "float32"

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        dt = self.net_dtype
        return in_dtype(ins[0], dt) @ f64(self.weight).astype(dt) + f64(self.bias).astype(dt)


@define(Op.ACTIVATION)
class Activation(Attrs):
    """The activation ``kind`` (one of ``ir.ops.ACTIVATIONS``, torch.nn.functional's names) in
    ``net_dtype``, element-wise except the row-wise softmax/log_softmax (over the columns). The
    parameters, each rounded to ``net_dtype`` as torch does with a Python number:

    * hardtanh: clip to [low, high] (ReLU6: [0, 6]);
    * leaky_relu: x if x > 0 else x * alpha;
    * elu: x * scale if x > 0 else alpha * scale * expm1(x * input_scale) (SELU: torch's
      alpha and scale; CELU: input_scale = 1 / alpha);
    * gelu: 0.5 x (1 + erf(x / sqrt 2)), or with ``approximate`` "tanh" 0.5 x (1 +
      tanh(sqrt(2 / pi) (x + 0.044715 x^3)));
    * softplus: x if x * beta > threshold else log1p(exp(x * beta)) / beta;
    * silu: x / (1 + exp(-x)); mish: x tanh(log1p(exp(x))); "identity" only casts."""

    kind: str
    net_dtype: str = "float32"
    alpha: float = 1.0
    scale: float = 1.0
    input_scale: float = 1.0
    low: float = -1.0
    high: float = 1.0
    beta: float = 1.0
    threshold: float = 20.0
    approximate: str = "none"

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        choice(n, "kind", self.kind, ACTIVATIONS)
        choice(n, "net_dtype", self.net_dtype, NET_DTYPES)
        choice(n, "approximate", self.approximate, GELU_APPROXIMATIONS)
        for key in ("alpha", "scale", "input_scale", "beta", "threshold"):
            real(n, key, getattr(self, key), nonzero=key == "beta")
        for key in ("low", "high"):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or np.isnan(v):
                raise bad(n, f"{key}={v!r} is not a number")
        if self.low > self.high:
            raise bad(n, f"low {self.low} > high {self.high}")

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return self.net_dtype == "float32"

    def narrow(self, cols: np.ndarray) -> tuple[Attrs, np.ndarray] | None:
        return None if self.kind in ROW_WISE else (self, cols)

    def param(self, key: str) -> float:
        """Attribute ``key`` as the network's dtype holds it."""
        return self.param_of(getattr(self, key))

    def param_of(self, value: float) -> float:
        """A constant as the network's dtype holds it (torch casts a Python number so)."""
        return float(np.asarray(value).astype(self.net_dtype))

    def round(self, x: np.ndarray) -> np.ndarray:
        """Float64 values rounded to the network's dtype (and held in float64 again)."""
        return np.asarray(x).astype(self.net_dtype).astype(np.float64)

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x = f64(in_dtype(ins[0], self.net_dtype))
        with np.errstate(all="ignore"):  # overflow to inf, NaN in -> NaN out, as torch
            out = _ACTIVATION_RULES[self.kind](x, self)
        return out.astype(self.net_dtype)


@define(Op.BATCH_NORM)
class BatchNorm(Attrs):
    """torch.nn.BatchNorm1d in eval mode, per column, in ``net_dtype``, as ATen's CPU kernel
    computes it (``batch_norm_cpu_collect_linear_and_constant_terms``, then the transform):
    invstd = 1 / sqrt(var + eps), alpha = invstd * weight and beta = bias - mean * alpha in the
    dtype, out = x * alpha + beta. ATen fuses the two multiply-adds (``fmadd``, on the AVX2 and
    AVX-512 CPUs the project runs on): here the exact float64 product and sum, rounded once
    (a double rounding only when the float64 sum lands on a float32 tie, 2**-29 of the time)."""

    PER_COLUMN = ("mean", "var", "weight", "bias")

    mean: Any
    var: Any
    weight: Any
    bias: Any
    eps: float = 1e-5
    net_dtype: str = "float32"

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        choice(n, "net_dtype", self.net_dtype, NET_DTYPES)
        real(n, "eps", self.eps)
        for key in ("mean", "var", "weight", "bias"):
            a = exact_in(n, key, getattr(self, key), self.net_dtype)
            if a.shape != (ins[0].width,) and ins[0].width is not None:
                raise bad(n, f"{key} has shape {a.shape}, input {ins[0].width} columns")

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return self.net_dtype == "float32"

    def terms(self) -> tuple[np.ndarray, np.ndarray]:
        """(alpha, beta) as ATen holds them, in the dtype (float64 arrays of its numbers)."""
        dt = np.dtype(self.net_dtype)
        var, w = f64(self.var).astype(dt), f64(self.weight).astype(dt)
        invstd = dt.type(1) / np.sqrt(var + dt.type(self.eps))
        alpha = f64((invstd * w).astype(dt))
        beta = f64((f64(self.bias) - f64(self.mean) * alpha).astype(dt))  # fused: one rounding
        return alpha, beta

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        alpha, beta = self.terms()
        x = f64(in_dtype(ins[0], self.net_dtype))
        return (x * alpha + beta).astype(self.net_dtype)


def _gelu(x: np.ndarray, a: Activation) -> np.ndarray:
    # ATen's GeluKernelImpl step by step in the dtype (1 + erf(...) cancels for x < 0, so the
    # float32 roundings, not erf's last bit, decide torch's value there): 0.5 x (1 + erf(x
    # sqrt(1/2))), or 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    r = a.round
    if a.approximate == "tanh":
        cube = r(r(x * x) * x)
        inner = r(a.param_of(np.sqrt(2.0) * (2.0 / np.sqrt(np.pi)) * 0.5) * r(x + r(
            a.param_of(0.044715) * cube)))
        return r(r(0.5 * x) * r(1.0 + r(np.tanh(inner))))
    from scipy.special import erf  # scipy ships with scikit-learn, which every source needs

    return r(r(x * 0.5) * r(1.0 + r(erf(r(x * a.param_of(np.sqrt(0.5)))))))


def _elu(x: np.ndarray, a: Activation) -> np.ndarray:
    # torch's elu kernel: negcoef = alpha * scale, each a float32 number for a float32 tensor
    negcoef = float(np.asarray(a.param("alpha") * a.param("scale")).astype(a.net_dtype))
    return np.where(x > 0, x * a.param("scale"), np.expm1(x * a.param("input_scale")) * negcoef)


def _softplus(x: np.ndarray, a: Activation) -> np.ndarray:
    beta = a.param("beta")
    return np.where(x * beta > a.param("threshold"), x, np.log1p(np.exp(x * beta)) / beta)


def _softmax(x: np.ndarray, a: Activation) -> np.ndarray:
    # x - max rounds in the dtype as torch's kernel computes it (that rounding, relative to
    # |x - max|, dominates a small probability's error); the rest once, in float64
    e = np.exp(a.round(x - x.max(axis=1, keepdims=True)))
    return e / e.sum(axis=1, keepdims=True)


def _log_softmax(x: np.ndarray, a: Activation) -> np.ndarray:
    shifted = a.round(x - x.max(axis=1, keepdims=True))
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


_ACTIVATION_RULES = {
    "identity": lambda x, a: x,
    "relu": lambda x, a: np.maximum(x, 0.0),  # NaN stays NaN
    "hardtanh": lambda x, a: np.clip(x, a.param("low"), a.param("high")),
    "leaky_relu": lambda x, a: np.where(x > 0, x, x * a.param("alpha")),
    "elu": _elu,
    "gelu": _gelu,
    "tanh": lambda x, a: np.tanh(x),
    "sigmoid": lambda x, a: sigmoid(x),
    "softplus": _softplus,
    "silu": lambda x, a: x / (1.0 + np.exp(-x)),
    "mish": lambda x, a: x * np.tanh(np.log1p(np.exp(x))),
    "softmax": _softmax,
    "log_softmax": _log_softmax,
}
if set(_ACTIVATION_RULES) != set(ACTIVATIONS):
    raise RuntimeError(f"activations without a rule: {set(ACTIVATIONS) - set(_ACTIVATION_RULES)}")
