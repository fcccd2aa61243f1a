"""One torch lowering per IR op, in a table keyed by Op (mirrors the op rules (``ir/semantics``)).

A lowering turns a Node into an ``nn.Module`` whose ``forward(xs: List[Tensor]) -> Tensor`` takes
the node's input values in order; the modules are scriptable, so the TorchScript backend compiles
the same program. Each rule follows its NumPy rule in ``ir/semantics`` operation for
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

from peregrine.backends.torch.strategy import choose_tree_strategy
from peregrine.backends.torch.trees import STRATEGY_MODULES
from peregrine.errors import UnsupportedModelError
from peregrine.ir import Link, Node, Op
from peregrine.options import CompileOptions, Precision, TreeStrategy


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


def f64(value: Any) -> Tensor:
    """A float64 tensor (a copy) of an attribute: lowerings' buffers. C-contiguous, in memory
    torch allocates (64-byte aligned): MKL may pick kernels by operand layout and alignment, so a
    program compiled from a model and one rebuilt from its artifact must hold their constants
    the same way to compute the same bits."""
    return torch.from_numpy(np.array(value, dtype=np.float64, order="C")).clone()


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
    return Lowered(ReplaceWithNan(node.attrs.value, node.attrs.compare_dtype))


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
    return Lowered(OrdinalEncode(node.attrs.columns, node.attrs.categories))


@lowering(Op.TREE_ENSEMBLE)
def lower_tree_ensemble(node: Node, options: CompileOptions) -> Lowered:
    forest = node.attrs.forest
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
        "chunk_rows_cuda": module.gpu_chunk_rows,
    }
    return Lowered(module, info)


class Affine(nn.Module):
    def __init__(self, scale: Any, shift: Any, keep_dtype: bool, float32: str = "never"
                 ) -> None:
        super().__init__()
        self.register_buffer("scale", f64(scale))
        self.register_buffer("shift", f64(shift))
        self.keep_dtype = keep_dtype
        self.float32 = float32 != "never"
        a32, b32 = f64(scale), f64(shift)
        if float32 == "cast":
            a32, b32 = a32.float().double(), b32.float().double()
        self.register_buffer("scale32", a32)
        self.register_buffer("shift32", b32)

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0]
        if self.float32 and x.dtype == torch.float32:  # the rule: each step rounds to float32
            y = (x.to(torch.float64) * self.scale32).to(torch.float32)
            return (y.to(torch.float64) + self.shift32).to(torch.float32)
        if self.keep_dtype:  # Precision.FLOAT32: stay in the input's precision
            return x * self.scale.to(x.dtype) + self.shift.to(x.dtype)
        return x.to(torch.float64) * self.scale + self.shift  # NumPy: float64 arrays promote


@lowering(Op.AFFINE)
def lower_affine(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Affine(node.attrs.scale, node.attrs.shift,
                          options.precision is Precision.FLOAT32, node.attrs.float32))


# ------------------------------------------------------------------------------- links --
class Identity(nn.Module):
    def forward(self, xs: list[Tensor]) -> Tensor:
        return xs[0]


class Sigmoid(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, xs: list[Tensor]) -> Tensor:
        # one overflow-free kernel instead of reference.sigmoid's six passes: the two agree to
        # a few ulps (far inside the 1e-5 contract), and the block-wise program (module.py)
        # pays Python dispatch per op per block
        if self.scale == 1.0:
            return torch.sigmoid(xs[0])
        return torch.sigmoid(self.scale * xs[0])


class Softmax(nn.Module):
    def forward(self, xs: list[Tensor]) -> Tensor:
        # torch's kernel is the same max-subtracted exp / sum, fused (one op instead of four)
        return torch.softmax(xs[0], dim=1)


class Exp(nn.Module):
    def forward(self, xs: list[Tensor]) -> Tensor:
        return torch.exp(xs[0])


class IsolationScore(nn.Module):
    def __init__(self, denominator: float) -> None:
        super().__init__()
        self.denominator = denominator

    def forward(self, xs: list[Tensor]) -> Tensor:
        return -torch.pow(2.0, -xs[0] / self.denominator)


class LogSoftmax(nn.Module):
    """x - logsumexp(x) per row in reference.logsumexp_rows' order (sklearn's _logsumexp):
    the row maxima are counted and left out of the sum (helper "logproba")."""

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0]
        m = x.max(dim=1, keepdim=True)[0]
        at_max = x == m
        count = at_max.sum(dim=1, keepdim=True).to(x.dtype)
        shift = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        rest = torch.where(at_max, torch.full_like(x, float("-inf")), x)
        s = torch.exp(rest - shift).sum(dim=1, keepdim=True)
        s = torch.where(s == 0, s, s / count)
        return x - (torch.log1p(s) + torch.log(count) + m)


LINKS: dict[Link, Callable[[Node], nn.Module]] = {
    Link.IDENTITY: lambda node: Identity(),
    Link.SIGMOID: lambda node: Sigmoid(float(node.attrs.scale)),
    Link.SOFTMAX: lambda node: Softmax(),
    Link.EXP: lambda node: Exp(),
    Link.ISOLATION_SCORE: lambda node: IsolationScore(float(node.attrs.denominator)),
    Link.LOG_SOFTMAX: lambda node: LogSoftmax(),
}


@lowering(Op.LINK)
def lower_link(node: Node, options: CompileOptions) -> Lowered:
    kind = node.attrs.kind
    make = LINKS.get(kind)
    if make is None:
        name = getattr(kind, "value", kind)
        raise UnsupportedModelError(
            f"torch backend: link {name!r} (node {node.name!r}) has no torch lowering; "
            "use backend='reference' or add it to peregrine.backends.torch.ops.LINKS"
        )
    return Lowered(make(node))


# ------------------------------------------------ predict_log_proba (helper "logproba") --
class LogAddExp(nn.Module):
    """Op.LOG_ADD_EXP as reference._log_add_exp: per job a running logaddexp from -inf over its
    members, each scattered to its columns with -inf elsewhere (logaddexp(a, -inf) == a
    exactly, so the other columns are unchanged as in sklearn), then the jobs, minus shift."""

    offsets: list[int]
    starts: list[int]

    def __init__(self, columns: Any, starts: Any, width: int, shift: float) -> None:
        super().__init__()
        cols = [np.asarray(c, dtype=np.int64) for c in columns]
        self.register_buffer("cols", torch.from_numpy(np.concatenate(cols)))
        self.offsets = [0] + [int(v) for v in np.cumsum([len(c) for c in cols])]
        self.starts = [int(v) for v in starts]
        self.width = int(width)
        self.shift = float(shift)

    def forward(self, xs: list[Tensor]) -> Tensor:
        n = xs[0].shape[0]
        out = torch.empty(0)
        for j in range(len(self.starts) - 1):
            acc = torch.full((n, self.width), float("-inf"), dtype=torch.float64,
                             device=xs[0].device)
            for i in range(self.starts[j], self.starts[j + 1]):
                cols = self.cols[self.offsets[i]:self.offsets[i + 1]]
                full = torch.full_like(acc, float("-inf")).index_copy(
                    1, cols, xs[i].to(torch.float64))
                acc = torch.logaddexp(acc, full)
            out = acc if j == 0 else torch.logaddexp(out, acc)
        return out - self.shift


@lowering(Op.LOG_ADD_EXP)
def lower_log_add_exp(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(LogAddExp(node.attrs.columns, node.attrs.starts, int(node.width),
                             float(node.attrs.shift)))


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
    return Lowered(Threshold(float(node.attrs.value), bool(node.attrs.strict)))
