"""Low-precision tensor programs (``Precision.BFLOAT16`` / ``Precision.FLOAT16``, issue #12
item 4): which IR nodes compute in the low dtype, and their lowerings.

A node computes in the low dtype when its op is arithmetic (``LOW_OPS``: products, scalers,
the network's layers) and its value reaches the outputs only through continuous ops and the
final argmax / threshold (``low_nodes``). A value a tree's threshold comparison, a bin index, a
binarizer or a category lookup reads stays exact, so a tree's splits never move; trees
themselves are lowered as at ``AUTO`` (leaf sums in float64). The input is cast to the low
dtype once per op that reads it; links and decisions that read a low value run in its dtype
(their torch kernels are dtype-generic); ``GraphProgram`` returns every output in the method's
usual dtype. What moved is measured at compile time (``passes/measure.py``)."""

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from peregrine.backends.torch.ops_kernel import Kernel
from peregrine.backends.torch.ops_nn import Activation
from peregrine.ir import Graph, Node, Op
from peregrine.ir.spec import GUARD
from peregrine.options import Precision
from peregrine.passes.fold_linear import SMOOTH, reaches_only_scores

LOW_DTYPES = {Precision.BFLOAT16: torch.bfloat16, Precision.FLOAT16: torch.float16}
# ops with a low-precision lowering below
LOW_OPS = frozenset({Op.LINEAR, Op.CENTER_SCALE, Op.AFFINE, Op.DENSE, Op.BATCH_NORM,
                     Op.ACTIVATION, Op.KERNEL})
# continuous readers a low value may flow through to an output
_CONTINUOUS = SMOOTH | {Op.DENSE, Op.BATCH_NORM, Op.ACTIVATION, Op.KERNEL}
# an RBF kernel expands |x - v|^2 as |x|^2 - 2 x.v + |v|^2: in a low dtype the product's
# rounding (2**-8 of |x| |v|) swamps the distance of near points, so it stays float64


def low_dtype(precision: Precision) -> torch.dtype | None:
    return LOW_DTYPES.get(precision)


def _only_scores(name: str, readers: dict[str, list[Node]]) -> bool:
    """``fold_linear.reaches_only_scores`` with the network's layers and kernels counted as
    continuous: a value may go low only where it cannot reach a tree, a bin index, a
    binarizer or a lookup, which stay exact."""
    return reaches_only_scores(name, readers, _CONTINUOUS)


def low_nodes(graph: Graph) -> set[str]:
    """The nodes computed in the low dtype."""
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)
    return {n.name for n in graph.nodes if n.op in LOW_OPS and _only_scores(n.name, readers)
            and not (n.op is Op.KERNEL and str(n.attrs.kind) == "rbf")}


def scaler_folds(graph: Graph, low: set[str]) -> dict[str, str]:
    """Low CENTER_SCALE / AFFINE nodes read only by one low LINEAR or DENSE: the scaling is
    folded into that product's weights and bias (``lower_low``), the scaler itself then only
    casts to the low dtype. Maps the product to its scaler. At these levels the arithmetic is
    the low dtype's anyway: the fold trades one elementwise pass (slow in bfloat16 on CPUs)
    for no extra rounding beyond the low dtype's, and the report measures what moved."""
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)
    out = {}
    for n in graph.nodes:
        r = readers.get(n.name, [])
        if (n.name in low and n.op in (Op.CENTER_SCALE, Op.AFFINE) and len(r) == 1
                and r[0].name in low and r[0].op in (Op.LINEAR, Op.DENSE)
                and not any(v == n.name and not o.startswith(GUARD)  # (guards.py)
                            for o, v in graph.outputs.items())):
            out[r[0].name] = n.name
    return out


def _folded(product: Node, scaler: Node, dtype: torch.dtype) -> tuple | None:
    """``product``'s weight and bias with ``scaler`` applied first (float64, then rounded
    once); None when a folded constant would not be finite in ``dtype``."""
    w = np.asarray(product.attrs.weight, np.float64)  # (in, out)
    b = np.reshape(np.asarray(product.attrs.bias, np.float64), -1)
    d = w.shape[0]
    with np.errstate(all="ignore"):
        if scaler.op is Op.CENTER_SCALE:
            c = np.broadcast_to(np.asarray(scaler.attrs.center, np.float64), (d,))
            s = np.broadcast_to(np.asarray(scaler.attrs.scale, np.float64), (d,))
            w2, b2 = w / s[:, None], b - (c / s) @ w
        else:
            a = np.broadcast_to(np.asarray(scaler.attrs.scale, np.float64), (d,))
            sh = np.broadcast_to(np.asarray(scaler.attrs.shift, np.float64), (d,))
            w2, b2 = a[:, None] * w, b + sh @ w
    limit = float(torch.finfo(dtype).max)
    if not (np.all(np.abs(w2) < limit) and np.all(np.abs(b2) < limit)):
        return None
    return w2, b2


class LowCast(nn.Module):
    """A scaler folded into the product that reads it: only the cast to the low dtype."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("like", torch.zeros(0, dtype=dtype))

    def forward(self, xs: list[Tensor]) -> Tensor:
        return xs[0].to(self.like.dtype)


def plan(graph: Graph, dtype: torch.dtype) -> tuple[set[str], dict[str, str]]:
    """The low nodes and the scaler folds whose constants fit ``dtype``."""
    low = low_nodes(graph)
    folds = {p: sc for p, sc in scaler_folds(graph, low).items()
             if _folded(graph.by_name[p], graph.by_name[sc], dtype) is not None}
    return low, folds


def _const(value: Any, dtype: torch.dtype, transpose: bool = False) -> Tensor:
    arr = np.asarray(value, dtype=np.float64)
    arr = arr.T if transpose else arr
    # float64 constants rounded once to the low dtype (float16 overflow saturates to inf as a
    # cast does; the measured error reports it)
    return torch.from_numpy(np.array(arr, order="C")).to(dtype).contiguous()


class LowLinear(nn.Module):
    def __init__(self, weight: Any, bias: Any, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("weight", _const(weight, dtype, transpose=True))  # (out, in)
        self.register_buffer("bias", _const(np.reshape(bias, -1), dtype))

    def forward(self, xs: list[Tensor]) -> Tensor:
        # F.linear: one GEMM with the bias (bfloat16 runs oneDNN's native kernel on AVX512_BF16)
        return torch.nn.functional.linear(xs[0].to(self.weight.dtype), self.weight,
                                          self.bias.expand(self.weight.shape[0]))


class LowCenterScale(nn.Module):
    def __init__(self, center: Any, scale: Any, width: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("center", _const(np.broadcast_to(center, (width,)), dtype))
        self.register_buffer("scale", _const(np.broadcast_to(scale, (width,)), dtype))

    def forward(self, xs: list[Tensor]) -> Tensor:
        return (xs[0].to(self.center.dtype) - self.center) / self.scale


class LowAffine(nn.Module):
    def __init__(self, scale: Any, shift: Any, width: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.register_buffer("scale", _const(np.broadcast_to(scale, (width,)), dtype))
        self.register_buffer("shift", _const(np.broadcast_to(shift, (width,)), dtype))

    def forward(self, xs: list[Tensor]) -> Tensor:
        return torch.addcmul(self.shift, xs[0].to(self.scale.dtype), self.scale)


class LowBatchNorm(nn.Module):
    def __init__(self, a: Any, dtype: torch.dtype) -> None:
        super().__init__()
        for key in ("mean", "var", "weight", "bias"):
            self.register_buffer(key, _const(getattr(a, key), dtype))
        self.eps = float(a.eps)

    def forward(self, xs: list[Tensor]) -> Tensor:
        return torch.nn.functional.batch_norm(xs[0].to(self.mean.dtype), self.mean, self.var,
                                              self.weight, self.bias, False, 0.0, self.eps)


def lower_low(node: Node, dtype: torch.dtype, graph: Graph,
              folds: dict[str, str]) -> nn.Module:
    """The low-precision module of a node of ``LOW_OPS`` (``folds``: ``scaler_folds``, with
    the pairs whose fold is not representable already dropped by ``plan``)."""
    a, width = node.attrs, int(node.width)
    if node.name in folds.values():
        return LowCast(dtype)
    if node.name in folds:
        w, b = _folded(node, graph.by_name[folds[node.name]], dtype)
        return LowLinear(w, b, dtype)
    if node.op is Op.LINEAR:
        return LowLinear(np.asarray(a.weight, np.float64), a.bias, dtype)
    if node.op is Op.CENTER_SCALE:
        return LowCenterScale(a.center, a.scale, width, dtype)
    if node.op is Op.AFFINE:
        return LowAffine(a.scale, a.shift, width, dtype)
    if node.op is Op.DENSE:
        return LowLinear(np.asarray(a.weight, np.float64), a.bias, dtype)
    if node.op is Op.BATCH_NORM:
        return LowBatchNorm(a, dtype)
    if node.op is Op.KERNEL:
        return Kernel(node, dtype)
    return Activation(a, dtype)
