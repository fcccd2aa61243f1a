"""Torch lowerings of the meta-estimator ops (see ops.py for the lowering table), mirroring
their NumPy rules in ``ir/semantics`` operation for operation, in float64."""

from typing import Any

import torch
from torch import Tensor, nn

from peregrine.backends.torch.ops import Lowered, f64, lowering
from peregrine.ir import Node, Op
from peregrine.options import CompileOptions


class WeightedSum(nn.Module):
    weights: list[float]

    def __init__(self, weights: Any, divisor: float) -> None:
        super().__init__()
        self.weights = [float(w) for w in weights]
        self.divisor = float(divisor)

    def forward(self, xs: list[Tensor]) -> Tensor:
        # a running sum in input order: the accumulation order sklearn's loops use
        acc = xs[0].to(torch.float64) * self.weights[0]
        for i in range(1, len(xs)):
            acc = acc + xs[i].to(torch.float64) * self.weights[i]
        return acc / self.divisor


class WeightedMedian(nn.Module):
    weights: Tensor

    def __init__(self, weights: Any) -> None:
        super().__init__()
        self.register_buffer("weights", f64(weights))

    def forward(self, xs: list[Tensor]) -> Tensor:
        pred = xs[0].to(torch.float64)
        # Stable sort: tied predictions keep estimator order. NumPy's default argsort may order
        # ties differently; that only permutes equal values, so the median picked is the same
        # value unless the half-weight point falls within rounding of a tie group's boundary.
        sorted_pred, order = torch.sort(pred, dim=1, stable=True)
        cdf = torch.cumsum(self.weights[order], dim=1)
        above = (cdf >= 0.5 * cdf[:, -1:]).to(torch.int64)
        first = torch.argmax(above, dim=1, keepdim=True)  # first True, as numpy's argmax
        return sorted_pred.gather(1, first)


@lowering(Op.WEIGHTED_SUM)
def lower_weighted_sum(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(WeightedSum(node.attrs.weights, node.attrs.divisor))


@lowering(Op.WEIGHTED_MEDIAN)
def lower_weighted_median(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(WeightedMedian(node.attrs.weights))
