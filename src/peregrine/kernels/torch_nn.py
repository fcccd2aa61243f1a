"""torch's own kernels for the network ops (``ir/semantics/nn.py``: DENSE, ACTIVATION,
BATCH_NORM), shared by the torch backend's lowerings (``backends/torch/ops_nn.py``, whose
modules call these TorchScript-compatible functions) and the native backend, which runs them
where torch is installed instead of the ops' NumPy rules (``backends/native/rules.py``).

Why torch and not the rules: the network was trained and is run by torch. Calling the same
functions (``F.linear`` on nn.Linear's own weight layout, ``F.batch_norm``, the activations) on
the same float32 numbers gives the source's bits wherever torch's BLAS sums a product in the
same order, so what follows the network (a forest's splits) sees the numbers the source's
forest sees; the rules' NumPy sgemm and correctly rounded activations differ from those in the
last bits (docs/exactness.md, "Networks").
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def constant(value: Any, dtype: str, transpose: bool = False) -> Tensor:
    """An attribute as a C-contiguous tensor in the network's dtype (exact: it holds such
    numbers), in torch-allocated memory, as a module's own parameter is laid out."""
    arr = np.asarray(value, dtype=np.float64)
    arr = arr.T if transpose else arr
    return torch.from_numpy(np.array(arr, dtype=np.dtype(dtype), order="C")).clone()


def dense(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """nn.Linear: ``weight`` (out, in), in the network's dtype."""
    return F.linear(x.to(weight.dtype), weight, bias)


def batch_norm(x: Tensor, mean: Tensor, var: Tensor, weight: Tensor, bias: Tensor,
               eps: float) -> Tensor:
    """nn.BatchNorm1d in eval mode."""
    return F.batch_norm(x.to(mean.dtype), mean, var, weight, bias, False, 0.0, eps)


def activation(x: Tensor, kind: str, dtype: torch.dtype, alpha: float, scale: float,
               input_scale: float, low: float, high: float, beta: float, threshold: float,
               approximate: str) -> Tensor:
    """The ACTIVATION ``kind`` as the module computes it (nn.ELU, SELU and CELU all run aten's
    elu)."""
    x = x.to(dtype)
    if kind == "relu":
        return torch.relu(x)
    if kind == "hardtanh":
        return F.hardtanh(x, low, high)
    if kind == "leaky_relu":
        return F.leaky_relu(x, alpha)
    if kind == "elu":
        return torch.ops.aten.elu(x, alpha, scale, input_scale)
    if kind == "gelu":
        return F.gelu(x, approximate=approximate)
    if kind == "tanh":
        return torch.tanh(x)
    if kind == "sigmoid":
        return torch.sigmoid(x)
    if kind == "softplus":
        return F.softplus(x, beta, threshold)
    if kind == "silu":
        return F.silu(x)
    if kind == "mish":
        return F.mish(x)
    if kind == "softmax":
        return torch.softmax(x, 1)
    if kind == "log_softmax":
        return torch.log_softmax(x, 1)
    return x  # "identity": the cast alone


def activation_args(a: Any) -> tuple:
    """ACTIVATION attributes as ``activation``'s arguments after ``kind`` and ``dtype``."""
    return (float(a.alpha), float(a.scale), float(a.input_scale), float(a.low), float(a.high),
            float(a.beta), float(a.threshold), str(a.approximate))


@functools.lru_cache(maxsize=512)
def _constants(op_name: str, attrs: Any) -> tuple[Tensor, ...]:
    """A node's parameters as tensors, made once per node (attributes are immutable and hash
    by identity)."""
    dt = attrs.net_dtype
    if op_name == "dense":
        return constant(attrs.weight, dt, transpose=True), constant(attrs.bias, dt)
    return tuple(constant(getattr(attrs, k), dt) for k in ("mean", "var", "weight", "bias"))


def run_numpy(op_name: str, attrs: Any, x: np.ndarray) -> np.ndarray:
    """One network op ("dense", "batch_norm", "activation") on a NumPy array through torch
    (the native backend's path): the input viewed without a copy where it can be, the result
    back as NumPy."""
    x = np.ascontiguousarray(x)
    t = torch.from_numpy(x if x.flags.writeable else x.copy())
    with torch.inference_mode():
        if op_name == "dense":
            out = dense(t, *_constants(op_name, attrs))
        elif op_name == "batch_norm":
            out = batch_norm(t, *_constants(op_name, attrs), float(attrs.eps))
        else:
            out = activation(t, attrs.kind, DTYPES[attrs.net_dtype], *activation_args(attrs))
    return out.numpy()


__all__ = ["activation", "batch_norm", "constant", "dense", "run_numpy"]
