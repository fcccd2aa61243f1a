"""Torch lowerings of the neural-network ops (``ir/semantics/nn.py``): the torch functions the
source module itself calls (``F.linear`` on nn.Linear's own weight layout, ``F.batch_norm``,
the activations), in the network's dtype on parameters of that dtype, from
``kernels/torch_nn.py`` (shared with the native backend). So this backend computes what the
module computes; a product's last bits may still move with the batch's row count (BLAS
blocking; docs/exactness.md, "Networks")."""

from typing import Any

import torch
from torch import Tensor, nn

from peregrine.backends.torch.ops import Lowered, lowering
from peregrine.ir import Node, Op
from peregrine.kernels.torch_nn import (
    DTYPES,
    activation,
    activation_args,
    batch_norm,
    constant,
    dense,
)
from peregrine.options import CompileOptions


class Dense(nn.Module):
    def __init__(self, weight: Any, bias: Any, dtype: str) -> None:
        super().__init__()
        self.register_buffer("weight", constant(weight, dtype, transpose=True))  # (out, in)
        self.register_buffer("bias", constant(bias, dtype))

    def forward(self, xs: list[Tensor]) -> Tensor:
        return dense(xs[0], self.weight, self.bias)


class BatchNorm(nn.Module):
    def __init__(self, a: Any) -> None:
        super().__init__()
        for key in ("mean", "var", "weight", "bias"):
            self.register_buffer(key, constant(getattr(a, key), a.net_dtype))
        self.eps = float(a.eps)

    def forward(self, xs: list[Tensor]) -> Tensor:
        return batch_norm(xs[0], self.mean, self.var, self.weight, self.bias, self.eps)


class Activation(nn.Module):
    """An ACTIVATION in the network's dtype, or in ``dtype`` (the low-precision levels,
    lowp.py)."""

    def __init__(self, a: Any, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.kind = str(a.kind)
        self.dtype = DTYPES[a.net_dtype] if dtype is None else dtype
        (self.alpha, self.scale, self.input_scale, self.low, self.high, self.beta,
         self.threshold, self.approximate) = activation_args(a)

    def forward(self, xs: list[Tensor]) -> Tensor:
        return activation(xs[0], self.kind, self.dtype, self.alpha, self.scale,
                          self.input_scale, self.low, self.high, self.beta, self.threshold,
                          self.approximate)


@lowering(Op.DENSE)
def lower_dense(node: Node, options: CompileOptions) -> Lowered:
    a = node.attrs
    return Lowered(Dense(a.weight, a.bias, a.net_dtype))


@lowering(Op.BATCH_NORM)
def lower_batch_norm(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(BatchNorm(node.attrs))


@lowering(Op.ACTIVATION)
def lower_activation(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Activation(node.attrs))
