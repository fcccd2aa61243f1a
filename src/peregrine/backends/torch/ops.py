"""One torch lowering per IR op, in a table keyed by Op (mirrors ``reference.RULES``).

A lowering turns a Node into an ``nn.Module`` whose ``forward(xs: List[Tensor]) -> Tensor`` takes
the node's input values in order; the modules are scriptable, so the TorchScript backend compiles
the same program. Each rule follows its NumPy rule in ``backends/reference.py`` operation for
operation, including dtypes (NumPy promotes ``float32 * float64 array`` to float64, torch would
not for a 0-d tensor, so casts are explicit). An op or Link kind without a lowering raises
UnsupportedModelError at compile time: never a silently different answer.
"""

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from peregrine.backends.torch.trees import STRATEGY_MODULES
from peregrine.errors import UnsupportedModelError
from peregrine.ir import Link, Node, Op
from peregrine.options import CompileOptions, Precision, TreeStrategy
from peregrine.tune.heuristics import choose_tree_strategy


@dataclass(frozen=True)
class Lowered:
    module: nn.Module
    info: dict[str, Any] | None = None  # what was chosen and why (tree ensembles), for explain()


Lowering = Callable[[Node, CompileOptions], Lowered]
LOWERINGS: dict[Op, Lowering] = {}


def lowering(op: Op) -> Callable[[Lowering], Lowering]:
    def deco(fn: Lowering) -> Lowering:
        LOWERINGS[op] = fn
        return fn

    return deco


def lower_node(node: Node, options: CompileOptions) -> Lowered:
    rule = LOWERINGS.get(node.op)
    if rule is None:
        raise UnsupportedModelError(
            f"torch backend: IR op {node.op.value!r} (node {node.name!r}) has no torch lowering; "
            "use backend='reference' or add a rule to peregrine.backends.torch.ops"
        )
    return rule(node, options)


def _f64(value: Any) -> Tensor:
    return torch.from_numpy(np.array(value, dtype=np.float64))


# --------------------------------------------------------------------------------- ops --
class ReplaceWithNan(nn.Module):
    def __init__(self, value: Any, compare_dtype: Any) -> None:
        super().__init__()
        # compare_dtype None: compare in x's own dtype (value cast to it), as the reference does
        self.cast = compare_dtype is not None
        value = np.asarray(value, dtype=np.dtype(compare_dtype or np.float64))
        self.register_buffer("value", torch.from_numpy(np.array(value)))

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0]
        if self.cast:  # e.g. XGBoost tests float32(x) == missing
            hit = x.to(self.value.dtype) == self.value
        else:
            hit = x == self.value.to(x.dtype)
        return x.masked_fill(hit, float("nan"))


@lowering(Op.REPLACE_WITH_NAN)
def lower_replace_with_nan(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(ReplaceWithNan(node.attrs["value"], node.attrs.get("compare_dtype")))


class OrdinalEncode(nn.Module):
    """Listed columns -> position among their (ascending) categories, NaN when absent. The
    categories are padded with +inf to one (columns, width) table for a batched searchsorted;
    ``lengths`` keeps padding from matching."""

    def __init__(self, columns: Any, categories: Any) -> None:
        super().__init__()
        # NaN categories never compare equal and sort last: dropping them moves no position.
        cats = [np.asarray(c, dtype=np.float64) for c in categories]
        cats = [c[~np.isnan(c)] for c in cats]
        width = max([len(c) for c in cats] + [1])
        table = np.full((len(cats), width), np.inf)
        for i, c in enumerate(cats):
            table[i, : len(c)] = c
        self.register_buffer("columns", torch.tensor([int(j) for j in columns], dtype=torch.int64))
        self.register_buffer("table", torch.from_numpy(table))
        self.register_buffer("lengths", torch.tensor([[len(c)] for c in cats], dtype=torch.int64))
        self.width = width

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0]
        if self.columns.numel() == 0:
            return x
        vals = x.index_select(1, self.columns).to(torch.float64).t().contiguous()
        pos = torch.searchsorted(self.table, vals)  # side="left", as np.searchsorted
        found = self.table.gather(1, pos.clamp(max=self.width - 1))
        hit = (pos < self.lengths) & (found == vals)
        enc = torch.where(hit, pos.to(torch.float64), torch.full_like(vals, float("nan")))
        return x.index_copy(1, self.columns, enc.t().to(x.dtype))


@lowering(Op.ORDINAL_ENCODE)
def lower_ordinal_encode(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(OrdinalEncode(node.attrs["columns"], node.attrs["categories"]))


@lowering(Op.TREE_ENSEMBLE)
def lower_tree_ensemble(node: Node, options: CompileOptions) -> Lowered:
    forest = node.attrs["forest"]
    strategy, reason = choose_tree_strategy(forest, options)
    requested = options.tree_strategy
    if requested is not TreeStrategy.AUTO and strategy is not requested:
        warnings.warn(f"node {node.name!r}: {reason}", RuntimeWarning, stacklevel=2)
    module = STRATEGY_MODULES[strategy](forest, options)
    f32 = "float32" if module.always32 else "float64"
    info = {
        "node": node.name,
        "strategy": strategy.value,
        "reason": reason,
        "n_trees": forest.n_trees,
        "max_depth": forest.max_depth(),
        "compute_dtype": {"float32 input": "float32" if not module.force64 else "float64",
                          "float64 input": f32},
        "accumulate_dtype": "float32" if options.precision is Precision.FLOAT32 else "float64",
        "chunk_rows": module.chunk_rows,
    }
    return Lowered(module, info)


class Affine(nn.Module):
    def __init__(self, scale: Any, shift: Any, keep_dtype: bool) -> None:
        super().__init__()
        self.register_buffer("scale", _f64(scale))
        self.register_buffer("shift", _f64(shift))
        self.keep_dtype = keep_dtype

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0]
        if self.keep_dtype:  # Precision.FLOAT32: stay in the input's precision
            return x * self.scale.to(x.dtype) + self.shift.to(x.dtype)
        return x.to(torch.float64) * self.scale + self.shift  # NumPy: float64 arrays promote


@lowering(Op.AFFINE)
def lower_affine(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Affine(node.attrs.get("scale", 1.0), node.attrs.get("shift", 0.0),
                          options.precision is Precision.FLOAT32))


# ------------------------------------------------------------------------------- links --
class Identity(nn.Module):
    def forward(self, xs: list[Tensor]) -> Tensor:
        return xs[0]


class Sigmoid(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, xs: list[Tensor]) -> Tensor:
        z = self.scale * xs[0]
        e = torch.exp(-torch.abs(z))  # branch- and overflow-free, as reference.sigmoid
        return torch.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


class Softmax(nn.Module):
    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0]
        e = torch.exp(x - x.max(dim=1, keepdim=True)[0])
        return e / e.sum(dim=1, keepdim=True)


class Exp(nn.Module):
    def forward(self, xs: list[Tensor]) -> Tensor:
        return torch.exp(xs[0])


class IsolationScore(nn.Module):
    def __init__(self, denominator: float) -> None:
        super().__init__()
        self.denominator = denominator

    def forward(self, xs: list[Tensor]) -> Tensor:
        return -torch.pow(2.0, -xs[0] / self.denominator)


LINKS: dict[Link, Callable[[Node], nn.Module]] = {
    Link.IDENTITY: lambda node: Identity(),
    Link.SIGMOID: lambda node: Sigmoid(float(node.attrs.get("scale", 1.0))),
    Link.SOFTMAX: lambda node: Softmax(),
    Link.EXP: lambda node: Exp(),
    Link.ISOLATION_SCORE: lambda node: IsolationScore(float(node.attrs["denominator"])),
}


@lowering(Op.LINK)
def lower_link(node: Node, options: CompileOptions) -> Lowered:
    kind = node.attrs["kind"]
    make = LINKS.get(kind)
    if make is None:
        name = getattr(kind, "value", kind)
        raise UnsupportedModelError(
            f"torch backend: link {name!r} (node {node.name!r}) has no torch lowering; "
            "use backend='reference' or add it to peregrine.backends.torch.ops.LINKS"
        )
    return Lowered(make(node))


# ---------------------------------------------------------------------- classifier tail --
class BinaryProba(nn.Module):
    def forward(self, xs: list[Tensor]) -> Tensor:
        p = xs[0][:, :1]
        return torch.cat([1.0 - p, p], dim=1)


class Argmax(nn.Module):
    def forward(self, xs: list[Tensor]) -> Tensor:
        return torch.argmax(xs[0], dim=1, keepdim=True)  # first maximum wins, as NumPy


class Threshold(nn.Module):
    def __init__(self, value: float, strict: bool) -> None:
        super().__init__()
        self.value = value
        self.strict = strict

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0][:, :1]
        hit = (x > self.value) if self.strict else (x >= self.value)
        return hit.to(torch.int64)


@lowering(Op.BINARY_PROBA)
def lower_binary_proba(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(BinaryProba())


@lowering(Op.ARGMAX)
def lower_argmax(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Argmax())


@lowering(Op.THRESHOLD)
def lower_threshold(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Threshold(float(node.attrs["value"]), bool(node.attrs.get("strict", True))))
