"""Torch lowerings of the neural-network ops (``ir/semantics/nn.py``): the torch functions the
source module itself calls (``F.linear`` for nn.Linear, ``F.gelu``, ``torch.softmax``...), in
the network's dtype on parameters of that dtype, so this backend computes what the module
computes: the element-wise results are the module's own, a product's last bits may still move
with the batch's row count (BLAS blocking; docs/exactness.md)."""

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from peregrine.backends.torch.ops import Lowered, lowering
from peregrine.ir import Node, Op
from peregrine.options import CompileOptions

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _in(value: Any, dtype: str) -> Tensor:
    """An attribute as a C-contiguous tensor of the network's dtype (exact: it holds such
    numbers), laid out as the module's own parameter."""
    return torch.from_numpy(np.array(value, dtype=np.dtype(dtype), order="C")).clone()


class Dense(nn.Module):
    def __init__(self, weight: Any, bias: Any, dtype: str) -> None:
        super().__init__()
        # nn.Linear's layout: (out, in), so F.linear runs the module's own addmm
        self.register_buffer("weight", _in(np.asarray(weight).T, dtype))
        self.register_buffer("bias", _in(bias, dtype))

    def forward(self, xs: list[Tensor]) -> Tensor:
        return F.linear(xs[0].to(self.weight.dtype), self.weight, self.bias)


class Activation(nn.Module):
    def __init__(self, kind: str, dtype: str, attrs: Any) -> None:
        super().__init__()
        self.kind = kind
        self.dtype = _DTYPES[dtype]
        self.alpha = float(attrs.alpha)
        self.scale = float(attrs.scale)
        self.input_scale = float(attrs.input_scale)
        self.low = float(attrs.low)
        self.high = float(attrs.high)
        self.beta = float(attrs.beta)
        self.threshold = float(attrs.threshold)
        self.approximate = str(attrs.approximate)

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0].to(self.dtype)
        kind = self.kind
        if kind == "relu":
            return torch.relu(x)
        if kind == "hardtanh":
            return F.hardtanh(x, self.low, self.high)
        if kind == "leaky_relu":
            return F.leaky_relu(x, self.alpha)
        if kind == "elu":  # nn.ELU, nn.SELU and nn.CELU all run aten's elu
            return torch.ops.aten.elu(x, self.alpha, self.scale, self.input_scale)
        if kind == "gelu":
            return F.gelu(x, approximate=self.approximate)
        if kind == "tanh":
            return torch.tanh(x)
        if kind == "sigmoid":
            return torch.sigmoid(x)
        if kind == "softplus":
            return F.softplus(x, self.beta, self.threshold)
        if kind == "silu":
            return F.silu(x)
        if kind == "mish":
            return F.mish(x)
        if kind == "softmax":
            return torch.softmax(x, 1)
        if kind == "log_softmax":
            return torch.log_softmax(x, 1)
        return x  # "identity": the cast alone


@lowering(Op.DENSE)
def lower_dense(node: Node, options: CompileOptions) -> Lowered:
    a = node.attrs
    return Lowered(Dense(a.weight, a.bias, a.net_dtype))


@lowering(Op.ACTIVATION)
def lower_activation(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Activation(node.attrs.kind, node.attrs.net_dtype, node.attrs))
