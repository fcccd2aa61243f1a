"""Torch lowerings of the pipeline ops (scikit-learn featurizers and linear models), one per
Op, mirroring their NumPy rules in ``ir/semantics``: every module casts its input to
float64 first, as the rules do."""

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from peregrine.backends.torch.ops import Lowered, f64, lowering
from peregrine.ir import Node, Op
from peregrine.ir.semantics.pipeline import Normalize as NormalizeAttrs
from peregrine.ir.semantics.row_sums import row_sum_program
from peregrine.options import CompileOptions


def _i64(value: Any) -> Tensor:
    return torch.from_numpy(np.array(value, dtype=np.int64).reshape(-1))


class Linear(nn.Module):
    def __init__(self, weight: Any, bias: Any) -> None:
        super().__init__()
        self.register_buffer("weight", f64(weight))
        self.register_buffer("bias", f64(bias))

    def forward(self, xs: list[Tensor]) -> Tensor:
        # the product's fresh result takes the bias in place (x @ W, then + b: the rule's order)
        return (xs[0].to(torch.float64) @ self.weight).add_(self.bias)


class Select(nn.Module):
    def __init__(self, columns: Any, float32: bool = False) -> None:
        super().__init__()
        self.register_buffer("columns", _i64(columns))
        self.float32 = float32  # a float32 frame block (Select.float32): values as float32

    def forward(self, xs: list[Tensor]) -> Tensor:
        out = xs[0].index_select(1, self.columns)
        if self.float32:
            return out.to(torch.float32)
        return out


class Concat(nn.Module):
    def __init__(self, float32: bool = False) -> None:
        super().__init__()
        self.float32 = float32

    def forward(self, xs: list[Tensor]) -> Tensor:
        if self.float32:  # float32 blocks and 0/1 indicators hstack to float32 (the rule)
            for x in xs:
                if x.dtype == torch.float32:
                    return torch.cat([v.to(torch.float32) for v in xs], dim=1)
        return torch.cat([x.to(torch.float64) for x in xs], dim=1)


class CenterScale(nn.Module):
    def __init__(self, center: Any, scale: Any, float32: str = "never") -> None:
        super().__init__()
        self.register_buffer("center", f64(center))
        self.register_buffer("scale", f64(scale))
        self.float32 = float32 != "never"
        c32, s32 = f64(center), f64(scale)
        if float32 == "cast":  # StandardScaler casts its parameters to float32 first
            c32, s32 = c32.to(torch.float32).to(torch.float64), s32.to(torch.float32).to(
                torch.float64)
        self.register_buffer("center32", c32)
        self.register_buffer("scale32", s32)

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0]
        if self.float32 and x.dtype == torch.float32:  # each step rounds to float32 (rule)
            y = x.to(torch.float64).sub_(self.center32).to(torch.float32)
            return y.to(torch.float64).div_(self.scale32).to(torch.float32)
        # (x - center) / scale, the rule's two roundings; the subtraction makes the op's own
        # tensor (from a float32 block, the cast does), the division then runs in place
        if x.dtype == torch.float64:
            return (x - self.center).div_(self.scale)
        return x.to(torch.float64).sub_(self.center).div_(self.scale)


class Clip(nn.Module):
    def __init__(self, low: float, high: float, float32: bool = False) -> None:
        super().__init__()
        self.low = low
        self.high = high
        self.float32 = float32

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0]
        if self.float32 and x.dtype == torch.float32:
            return x.to(torch.float64).clamp_(self.low, self.high).to(torch.float32)
        if x.dtype == torch.float64:
            return torch.clamp(x, self.low, self.high)  # NaN stays NaN
        return x.to(torch.float64).clamp_(self.low, self.high)


class Normalize(nn.Module):
    """Norms summed in NumPy's order (ir/semantics/row_sums.py: one column op per step of the
    program), in float32 on a float32 input with ``float32``, else in float64."""

    def __init__(self, norm: str, uniform: bool, width: int, float32: bool = False,
                 tiny: bool = False) -> None:
        super().__init__()
        self.norm = norm
        self.uniform = uniform
        self.float32 = float32
        self.tiny = tiny  # (ir/semantics/pipeline.Normalize)
        self.below32 = NormalizeAttrs.zero_below(np.float32)
        self.below64 = NormalizeAttrs.zero_below(np.float64)
        kind = "pairwise" if norm == "l1" else "einsum"
        self.sum64 = row_sum_program(kind, width, np.float64)
        self.sum32 = row_sum_program(kind, width, np.float32)

    def forward(self, xs: list[Tensor]) -> Tensor:
        r32 = self.float32 and xs[0].dtype == torch.float32
        x = xs[0] if r32 else xs[0].to(torch.float64)
        program = self.sum32 if r32 else self.sum64
        if self.norm == "l1":
            n = _row_sum(program, x.abs())
        elif self.norm == "l2":  # NumPy's correctly rounded root; the division rounds once
            n = _sqrt_rn(_row_sum(program, x * x).to(torch.float64)).to(x.dtype)
        else:
            n = x.abs().max(dim=1)[0]
        if self.tiny:
            zero = n < (self.below32 if n.dtype == torch.float32 else self.below64)
        else:
            zero = n == 0.0
        out = x / torch.where(zero, torch.ones_like(n), n).unsqueeze(1)
        if self.uniform:
            out = torch.where(zero.unsqueeze(1), torch.full_like(out, 1.0 / x.shape[1]), out)
        return out


def _sqrt_rn(s: Tensor) -> Tensor:
    """The correctly rounded float64 square root (IEEE's, NumPy's). ATen's vectorised sqrt is
    not: measured 1 ulp off on 1% of float64 row norms (15% of float32 ones) on an AMD EPYC
    host. One correction step: r*r is split exactly (Dekker's product, Veltkamp's split of
    r), so the residual s - r*r tells whether the true root lies past the midpoint to r's
    next float up or down. A float32 root is this one rounded (innocuous double rounding)."""
    r = torch.sqrt(s)
    c = r * 134217729.0  # 2**27 + 1
    hi = c - (c - r)
    lo = r - hi
    p = r * r
    e = ((hi * hi - p) + hi * lo + hi * lo) + lo * lo  # r*r == p + e exactly
    d = (s - p) - e  # s - p is exact (Sterbenz: p is within a factor 2 of s)
    up = torch.nextafter(r, torch.full_like(r, float("inf")))
    down = torch.nextafter(r, torch.zeros_like(r))
    r = torch.where(d > r * (up - r), up, r)  # s > (r + ulp/2)**2: round up
    return torch.where(d < -(r * (r - down)), down, r)  # s < (r - ulp/2)**2: round down


def _row_sum(program: list[int], values: Tensor) -> Tensor:
    """Row sums of ``values`` in ``program``'s order (row_sums: -1 adds two)."""
    stack: list[Tensor] = []
    for step in program:
        if step == -1:
            right = stack.pop()
            stack.append(stack.pop() + right)
        else:
            stack.append(values[:, step])
    if len(stack) == 0:
        return torch.zeros(values.shape[0], dtype=values.dtype, device=values.device)
    return stack.pop()


class Binarize(nn.Module):
    def __init__(self, threshold: float, threshold32: float) -> None:
        super().__init__()
        self.threshold = threshold
        self.threshold32 = threshold32  # for a float32 input (Binarize.threshold_for)

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0]
        if x.dtype == torch.float32:
            return (x.to(torch.float64) > self.threshold32).to(torch.float64)
        return (x.to(torch.float64) > self.threshold).to(torch.float64)


class Impute(nn.Module):
    def __init__(self, values: Any, missing: float, float32: bool = False) -> None:
        super().__init__()
        self.register_buffer("values", f64(values))
        self.register_buffer("values32", f64(values).to(torch.float32))
        self.missing = float(missing)
        self.missing32 = float(np.float32(missing))
        self.is_nan = bool(np.isnan(missing))
        self.float32 = float32

    def forward(self, xs: list[Tensor]) -> Tensor:
        if self.float32 and xs[0].dtype == torch.float32:  # X[mask] = values on float32 X
            x32 = xs[0]
            hit32 = torch.isnan(x32) if self.is_nan else x32 == self.missing32
            return torch.where(hit32, self.values32.expand_as(x32), x32)
        x = xs[0].to(torch.float64)
        hit = torch.isnan(x) if self.is_nan else x == self.missing
        return torch.where(hit, self.values.expand_as(x), x)


def _category_table(columns: Any, categories: Any, per_cat: Any, fill: float):
    """Flattened (column, category, per-category value) triples for a batched match."""
    col, cat, val = [], [], []
    for j, cats, vals in zip(columns, categories, per_cat):
        cats = np.asarray(cats, dtype=np.float64)
        col += [int(j)] * len(cats)
        cat += cats.tolist()
        val += np.asarray(vals, dtype=np.float64).tolist()
    if not col:  # keep buffers non-empty shaped
        return _i64([]), f64(np.zeros(0)), f64(np.zeros(0))
    return _i64(col), f64(cat), f64(val)


class OneHot(nn.Module):
    """Indicators: (n, n_categories) matches, scattered (max) into their slots; unknown slots
    set where a column matched nothing.

    Fast path (``direct``): when every category has its own slot, no slot is shared and there
    is no unknown slot (OneHotEncoder with handle_unknown='ignore', with or without ``drop``),
    the max-scatter is a plain column placement of the matches: one compare and one gather (no
    gather at all when the slots are the categories in order), instead of three scatters over
    the batch. The general path keeps the reference rule's max-merge for shared slots
    (infrequent categories) and unknown slots."""

    direct: bool
    in_order: bool
    nan_cats: bool

    def __init__(self, node: Node) -> None:
        super().__init__()
        a = node.attrs
        col, cat, slot = _category_table(a.columns, a.categories, a.slots, -1)
        # per category: which listed column it belongs to (position), for the any-match test
        owner = np.concatenate([[i] * len(c) for i, c in enumerate(a.categories)] + [[]])
        self.register_buffer("col", col)
        self.register_buffer("cat", cat)
        self.register_buffer("slot", slot.to(torch.int64))
        self.register_buffer("owner", _i64(owner))
        self.register_buffer("unknown_slot", _i64(a.unknown_slots))
        self.register_buffer("columns", _i64(a.columns))
        self.width = int(node.width)
        slots = slot.numpy()
        used = slots[slots >= 0]
        unknown = np.asarray(a.unknown_slots, dtype=np.int64).reshape(-1)
        self.direct = bool((unknown < 0).all() and len(np.unique(used)) == len(used)
                           and len(used) == self.width)
        # matches -> output: the categories with a slot, ordered by slot
        order = np.flatnonzero(slots >= 0)[np.argsort(used, kind="stable")]
        self.in_order = bool(self.direct and len(order) == len(slots)
                             and (used == np.arange(self.width)).all())
        self.register_buffer("order", _i64(order))
        self.nan_cats = bool(np.isnan(cat.numpy()).any())

    def _hits(self, x: Tensor) -> Tensor:
        v = x.index_select(1, self.col)
        if self.nan_cats:
            return (v == self.cat) | (torch.isnan(v) & torch.isnan(self.cat))
        return v == self.cat

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0].to(torch.float64)
        n = x.shape[0]
        if self.direct:
            if self.in_order:
                return self._hits(x).to(torch.float64)
            return self._hits(x).index_select(1, self.order).to(torch.float64)
        out = torch.zeros((n, self.width + 1), dtype=torch.float64, device=x.device)
        hitf = self._hits(x).to(torch.float64)
        slot = torch.where(self.slot >= 0, self.slot, torch.full_like(self.slot, self.width))
        out = out.scatter_reduce(1, slot.expand(n, -1), hitf, reduce="amax")
        any_hit = torch.zeros((n, self.columns.numel()), dtype=torch.float64, device=x.device)
        any_hit = any_hit.scatter_reduce(1, self.owner.expand(n, -1), hitf, reduce="amax")
        unk = torch.where(self.unknown_slot >= 0, self.unknown_slot,
                          torch.full_like(self.unknown_slot, self.width))
        out = out.scatter_reduce(1, unk.expand(n, -1), 1.0 - any_hit, reduce="amax")
        return out[:, : self.width]


class CategoryMap(nn.Module):
    """Listed columns -> code of their first matching category, else ``unknown``. Categories
    are padded to one (columns, width) table; ``valid`` keeps padding from matching."""

    def __init__(self, node: Node) -> None:
        super().__init__()
        a = node.attrs
        cats = [np.asarray(c, dtype=np.float64) for c in a.categories]
        width = max([len(c) for c in cats] + [1])
        table = np.zeros((len(cats), width))
        codes = np.zeros((len(cats), width))
        valid = np.zeros((len(cats), width), dtype=bool)
        for i, (c, k) in enumerate(zip(cats, a.codes)):
            table[i, : len(c)] = c
            codes[i, : len(c)] = np.asarray(k, dtype=np.float64)
            valid[i, : len(c)] = True
        self.register_buffer("columns", _i64(a.columns))
        self.register_buffer("table", f64(table))
        self.register_buffer("codes", f64(codes))
        self.register_buffer("valid", torch.from_numpy(valid))
        self.register_buffer("unknown", f64(np.asarray(a.unknown, dtype=np.float64)))

    def forward(self, xs: list[Tensor]) -> Tensor:
        x = xs[0].to(torch.float64)
        if self.columns.numel() == 0:
            return x
        v = x.index_select(1, self.columns).unsqueeze(2)  # (n, m, 1)
        hit = ((v == self.table) | (torch.isnan(v) & torch.isnan(self.table))) & self.valid
        found = hit.any(dim=2)
        first = torch.argmax(hit.to(torch.int64), dim=2, keepdim=True)
        code = self.codes.unsqueeze(0).expand(x.shape[0], -1, -1).gather(2, first).squeeze(2)
        enc = torch.where(found, code, self.unknown.expand_as(code))
        return x.index_copy(1, self.columns, enc)


class Polynomial(nn.Module):
    """All output columns at once: ``factors`` is a (degree, n_out) table of input columns,
    each output's factors in the reference's order (``Polynomial.factors``: highest column first,
    repeated by power) and
    padded with a column of ones; the output is the running product of one gathered
    (n, n_out) matrix per degree, so each output sees the same multiplications in the same
    order as the reference (a trailing ``* 1.0`` is exact)."""

    def __init__(self, powers: Any, lists: list[list[int]], float32: bool = False) -> None:
        super().__init__()
        n_out, n_in = np.shape(powers)
        self.float32 = float32
        degree = max([len(f) for f in lists] + [1])
        table = np.full((degree, n_out), n_in, dtype=np.int64)  # n_in: the ones column
        for k, f in enumerate(lists):
            table[: len(f), k] = f
        self.register_buffer("factors", torch.from_numpy(table))

    def forward(self, xs: list[Tensor]) -> Tensor:
        # float32 products on a float32 input (each rounds, as np.multiply into float32)
        dtype = torch.float32 if self.float32 and xs[0].dtype == torch.float32 else \
            torch.float64
        x = xs[0].to(dtype)
        ones = torch.ones((x.shape[0], 1), dtype=dtype, device=x.device)
        x = torch.cat([x, ones], dim=1)
        out = x.index_select(1, self.factors[0])
        for d in range(1, self.factors.shape[0]):
            out.mul_(x.index_select(1, self.factors[d]))
        return out


class Ufunc(nn.Module):
    """The float64 result; on a float32 input with ``float32``, rounded to float32: NumPy's own
    float32 loops (exp, log, sin... are approximations) may differ by the few ulps
    docs/exactness.md bounds."""

    def __init__(self, name: str, float32: bool = False) -> None:
        super().__init__()
        self.name = name
        self.float32 = float32

    def forward(self, xs: list[Tensor]) -> Tensor:
        out = self.apply(xs[0].to(torch.float64))
        if self.float32 and xs[0].dtype == torch.float32:
            return out.to(torch.float32)
        return out

    def apply(self, x: Tensor) -> Tensor:  # if-chain: scriptable, unlike a dict
        n = self.name
        if n == "log1p":
            return torch.log1p(x)
        if n == "expm1":
            return torch.expm1(x)
        if n == "exp":
            return torch.exp(x)
        if n == "log":
            return torch.log(x)
        if n == "sqrt":
            return _sqrt_rn(x)  # NumPy's correctly rounded root
        if n == "absolute":
            return torch.abs(x)
        if n == "square":
            return x * x
        if n == "negative":
            return -x
        if n == "sin":
            return torch.sin(x)
        if n == "cos":
            return torch.cos(x)
        if n == "tanh":
            return torch.tanh(x)
        if n == "arcsinh":
            return torch.asinh(x)
        if n == "log2":
            return torch.log2(x)
        if n == "log10":
            return torch.log10(x)
        if n == "exp2":
            return torch.exp2(x)
        if n == "cbrt":  # no torch.cbrt
            return torch.sign(x) * torch.pow(x.abs(), 1.0 / 3.0)
        if n == "reciprocal":
            return 1.0 / x
        if n == "sign":
            return torch.sign(x)
        if n == "floor":
            return torch.floor(x)
        if n == "ceil":
            return torch.ceil(x)
        if n == "rint":
            return torch.round(x)  # half to even, as numpy
        return torch.trunc(x)


@lowering(Op.LINEAR)
def lower_linear(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Linear(node.attrs.weight, node.attrs.bias))


@lowering(Op.SELECT)
def lower_select(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Select(node.attrs.columns, bool(node.attrs.float32)))


@lowering(Op.CONCAT)
def lower_concat(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Concat(bool(node.attrs.float32)))


@lowering(Op.CENTER_SCALE)
def lower_center_scale(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(CenterScale(node.attrs.center, node.attrs.scale, node.attrs.float32))


@lowering(Op.CLIP)
def lower_clip(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Clip(float(node.attrs.low), float(node.attrs.high),
                        bool(node.attrs.float32)))


@lowering(Op.NORMALIZE)
def lower_normalize(node: Node, options: CompileOptions) -> Lowered:
    a = node.attrs
    return Lowered(Normalize(a.norm, a.zero == "uniform", int(node.width), bool(a.float32),
                             bool(a.tiny)))


@lowering(Op.BINARIZE)
def lower_binarize(node: Node, options: CompileOptions) -> Lowered:
    a = node.attrs
    return Lowered(Binarize(a.threshold_for(False), a.threshold_for(True)))


@lowering(Op.IMPUTE)
def lower_impute(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Impute(node.attrs.values, float(node.attrs.missing),
                          bool(node.attrs.float32)))


@lowering(Op.ONE_HOT)
def lower_one_hot(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(OneHot(node))


@lowering(Op.CATEGORY_MAP)
def lower_category_map(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(CategoryMap(node))


@lowering(Op.POLYNOMIAL)
def lower_polynomial(node: Node, options: CompileOptions) -> Lowered:
    a = node.attrs
    return Lowered(Polynomial(a.powers, a.factors(), bool(a.float32)))


@lowering(Op.UFUNC)
def lower_ufunc(node: Node, options: CompileOptions) -> Lowered:
    return Lowered(Ufunc(node.attrs.name, bool(node.attrs.float32)))
