"""Pipeline ops: scikit-learn's featurizers and linear models. Every rule computes in float64
(sklearn's float64 path; float32 inputs are promoted, the runtime casts the output back where
sklearn keeps float32), except the ops with a ``float32`` attribute: given a float32 input they
compute as scikit-learn does on a float32 array (each in-place step ``X op= param`` rounds to
float32; StandardScaler casts its parameters to float32 first) and return float32, so a float32
value flows on, as in scikit-learn, until a step (an encoder, a hstack with a float64 block)
promotes it. SELECT keeps its input's dtype."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from peregrine.ir.ops import UFUNCS, Op
from peregrine.ir.semantics.base import (
    Attrs,
    bad,
    choice,
    define,
    f64,
    narrow_column_maps,
    per_column,
    some_inputs,
)
from peregrine.ir.semantics.row_sums import row_sum_program, run_program
from peregrine.options import CompileOptions


@define(Op.LINEAR)
class Linear(Attrs):
    """x @ weight + bias; weight (in, out), bias (out,)."""

    weight: Any
    bias: Any

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        w, b = f64(self.weight), f64(self.bias)
        if w.ndim != 2 or b.shape != (w.shape[1],):
            raise bad(n, f"weight {w.shape} / bias {b.shape} mismatch")
        if ins[0].width is not None and ins[0].width != w.shape[0]:
            raise bad(n, f"weight has {w.shape[0]} rows, input {ins[0].width} columns")

    def infer_width(self, widths: list) -> int:
        return int(np.shape(self.weight)[1])

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        # safe_sparse_dot(X, coef_.T) + intercept_ (sklearn/linear_model/_base.py)
        return f64(ins[0]) @ f64(self.weight) + f64(self.bias)


@define(Op.SELECT)
class Select(Attrs):
    """x[:, columns]: drop, reorder or repeat columns.

    ``frame_block``: set on a ColumnTransformer block read straight from the input, the input
    columns the block's transformer receives (before any pass narrowed ``columns``).
    scikit-learn hands that transformer the sub-frame, whose ``check_array`` keeps it float32
    when ``np.result_type`` of those columns' dtypes is float32, even inside a frame of mixed
    dtypes that the program reads as float64. ``float32``: the runtime's per-frame variant of
    the graph (``runtime/frame_blocks.py``) sets it where that is so: the selected values
    (float32 numbers in a float64 matrix) are returned as float32, and the block's steps
    compute in float32 as scikit-learn's do."""

    columns: Any
    frame_block: Any = None
    float32: bool = False

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        cols = np.asarray(self.columns, dtype=np.int64).reshape(-1)
        if ins[0].width is not None and cols.size and (cols.min() < 0
                                                       or cols.max() >= ins[0].width):
            raise bad(n, f"selects a column outside [0, {ins[0].width})")

    def infer_width(self, widths: list) -> int:
        return int(np.asarray(self.columns).size)

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        out = ins[0][:, np.asarray(self.columns, dtype=np.int64).reshape(-1)]
        return out.astype(np.float32) if self.float32 else out

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return bool(self.float32) or ins_float32[0]


@define(Op.CONCAT)
class Concat(Attrs):
    """Several inputs hstacked in order (ColumnTransformer, FeatureUnion). ``float32``: every
    input is float32 or 0/1 when the program's input is float32; then a float32 input makes
    the output float32 (``np.hstack`` of float32 blocks and boolean indicators)."""

    float32: bool = False

    def check(self, n: Any, ins: list) -> None:
        some_inputs(n, ins)

    def infer_width(self, widths: list) -> int | None:
        return None if None in widths else sum(widths)

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return self.float32 and any(ins_float32)

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        if self.float32 and any(x.dtype == np.float32 for x in ins):
            # np.hstack of float32 blocks and boolean indicators stays float32
            return np.concatenate([np.asarray(x, np.float32) for x in ins], axis=1)
        return np.concatenate([f64(x) for x in ins], axis=1)


FLOAT32_MODES = ("never", "round", "cast")
F32 = np.float32


def float32_mode(x: np.ndarray, mode: str | bool) -> bool:
    """Whether an op with ``float32=mode`` computes in float32 on ``x``: only float32 input."""
    return mode not in ("never", False) and x.dtype == F32


def float32_params(mode: str, *params: Any) -> list[np.ndarray]:
    """The parameters a float32-mode op applies: cast to float32 first in mode "cast"
    (StandardScaler's ``xp.astype(self.mean_, X.dtype)``), as fitted otherwise (a float64
    parameter then meets the float32 array in NumPy's float64 loop and the result rounds)."""
    out = [f64(p) for p in params]
    return [p.astype(F32).astype(np.float64) for p in out] if mode == "cast" else out


@define(Op.CENTER_SCALE)
class CenterScale(Attrs):
    """(x - center) / scale per column, two roundings in that order (StandardScaler,
    RobustScaler, MaxAbsScaler: ``X -= center; X /= scale``). ``float32`` (one of
    FLOAT32_MODES): on a float32 input, "round" rounds each step to float32 (the in-place
    ``X -= center_`` on a float32 array), "cast" also casts center and scale to float32 first
    (StandardScaler); the output is float32. "never": float64 throughout."""

    PER_COLUMN = ("center", "scale")

    center: Any
    scale: Any
    float32: str = "never"

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        per_column(n, "center", self.center, ins[0].width)
        per_column(n, "scale", self.scale, ins[0].width)
        choice(n, "float32", self.float32, FLOAT32_MODES)

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return self.float32 != "never" and ins_float32[0]

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x = ins[0]
        if float32_mode(x, self.float32):
            # float64 arithmetic on float32 operands rounded to float32 after each step is
            # IEEE float32 arithmetic (53 >= 2 * 24 + 2), and NumPy's mixed in-place loop
            c, s = float32_params(self.float32, self.center, self.scale)
            return ((f64(x) - c).astype(F32) / s).astype(F32)
        out = f64(x) - f64(self.center)  # a new array: dividing it in place is the same
        out /= f64(self.scale)            # division, without a second temporary's page faults
        return out


@define(Op.CLIP)
class Clip(Attrs):
    """np.clip(x, low, high) with scalar bounds."""

    PER_COLUMN = ()

    low: float
    high: float
    float32: bool = False  # a float32 input stays float32 (MinMaxScaler's np.clip(out=X))

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return self.float32 and ins_float32[0]

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        out = np.clip(f64(ins[0]), float(self.low), float(self.high))
        return out.astype(F32) if float32_mode(ins[0], self.float32) else out


@define(Op.NORMALIZE)
class Normalize(Attrs):
    """Rows divided by their ``norm`` ("l1", "l2", "max"); a zero norm divides by 1, or with
    ``zero="uniform"`` an all-zero row becomes 1/width in every column (_predict_proba_lr).
    ``tiny``: a norm below 10 epsilons of its dtype counts as zero, as scikit-learn's
    ``normalize`` decides on a dense X (_handle_zeros_in_scale: such a row is returned as it
    is; 1.2e-6 in float32). Norms are summed in NumPy's order (``row_sums``). ``float32``: on
    a float32 input the norm is summed in float32 and the quotient rounds to float32, as
    ``normalize`` computes on a float32 array."""

    norm: str
    zero: str = "one"
    float32: bool = False
    tiny: bool = False

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        choice(n, "norm", self.norm, ("l1", "l2", "max"))
        choice(n, "zero", self.zero, ("one", "uniform"))

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return self.float32 and ins_float32[0]

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        r32 = float32_mode(ins[0], self.float32)
        x = np.asarray(ins[0], F32) if r32 else f64(ins[0])
        n = self.norms(x)
        zero = n < self.zero_below(x.dtype) if self.tiny else n == 0.0
        out = x / np.where(zero, x.dtype.type(1.0), n)[:, None]  # float32 X: float32 quotient
        if self.zero == "uniform":
            out[zero] = 1.0 / x.shape[1]
        return out

    @staticmethod
    def zero_below(dtype: Any) -> float:
        """With ``tiny``: norms below this count as zero (10 * eps in the norms' dtype, a
        number exact in float32 and float64 both)."""
        dtype = np.dtype(dtype)
        return float(dtype.type(10) * np.finfo(dtype).eps)

    def norms(self, x: np.ndarray) -> np.ndarray:
        """Row norms in x's dtype, summed in NumPy's order on a C-ordered X (``row_sums``)."""
        if self.norm == "max":
            return np.max(np.abs(x), axis=1)
        if self.norm == "l1":
            return run_program(row_sum_program("pairwise", x.shape[1], x.dtype), np.abs(x))
        return np.sqrt(run_program(row_sum_program("einsum", x.shape[1], x.dtype), x * x))


@define(Op.BINARIZE)
class Binarize(Attrs):
    """(x > threshold) as 0.0/1.0. ``float32``: a float32 input is compared with the threshold
    rounded to float32 (sklearn's ``X > threshold`` with a Python number threshold: NEP 50
    casts the number to the array's dtype); a NumPy float64 threshold keeps float64."""

    PER_COLUMN = ()

    threshold: float = 0.0
    float32: bool = False

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return self.float32 and ins_float32[0]

    def threshold_for(self, x_float32: bool) -> float:
        """The float64 number a (float64-widened) input is compared with: exact both ways."""
        t = float(self.threshold)
        return float(F32(t)) if self.float32 and x_float32 else t

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        if float32_mode(ins[0], self.float32):
            return (ins[0] > F32(self.threshold)).astype(F32)
        return (f64(ins[0]) > float(self.threshold)).astype(np.float64)


@define(Op.IMPUTE)
class Impute(Attrs):
    """Entries equal to ``missing`` (NaN: isnan) become ``values[j]`` of their column."""

    PER_COLUMN = ("values",)

    values: Any
    missing: float = float("nan")
    float32: bool = False  # a float32 input stays float32: values rounded (X[mask] = values)

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return self.float32 and ins_float32[0]

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        per_column(n, "values", self.values, ins[0].width)

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        if float32_mode(ins[0], self.float32):
            x = ins[0]
            # _get_mask: X == missing_values, the Python number taken as float32 (NEP 50)
            missing = F32(self.missing)
            hit = np.isnan(x) if np.isnan(missing) else (x == missing)
            return np.where(hit, f64(self.values).astype(F32), x)
        x = f64(ins[0])
        missing = float(self.missing)
        hit = np.isnan(x) if np.isnan(missing) else (x == missing)
        return np.where(hit, f64(self.values), x)


def category_slots(x: np.ndarray, cats: np.ndarray, slots: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per value of ``x``: the slot of the category it equals (-1 when none, or when that
    category has no slot) and whether it equals any category; NaN equals a NaN category.
    Categories are distinct (a fitted encoder's); equality is exact float64 (-0.0 == 0.0)."""
    order = np.argsort(cats, kind="stable")  # NaN sorts last
    sorted_cats = cats[order]
    pos = np.minimum(np.searchsorted(sorted_cats, x), max(len(cats) - 1, 0))
    if len(cats):
        found = sorted_cats[pos] == x
        nan_cat = np.flatnonzero(np.isnan(sorted_cats))
        if nan_cat.size:
            nan_x = np.isnan(x)
            pos = np.where(nan_x, nan_cat[0], pos)
            found |= nan_x
    else:
        found = np.zeros(x.shape, dtype=bool)
    slot = np.where(found, slots[order][pos] if len(cats) else -1, -1)
    return slot, found


def _check_categories(n: Any, columns: Any, categories: Any, per_col: Any) -> None:
    if not (len(columns) == len(categories) == len(per_col)):
        raise bad(n, "columns/categories/slots lengths differ")
    for c, s in zip(categories, per_col):
        if len(c) != len(s):
            raise bad(n, "a column's categories and slots differ")


@define(Op.ONE_HOT)
class OneHot(Attrs):
    """0/1 indicator columns. Per listed input column: ``categories`` (float64; NaN matches
    NaN), ``slots`` (the output column of each category, -1 = none) and ``unknown_slots`` (the
    output column set when no category matches, -1 = none). The node's width is the number of
    indicator columns."""

    columns: Any
    categories: Any
    slots: Any
    unknown_slots: Any

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        _check_categories(n, self.columns, self.categories, self.slots)
        top = max([int(np.max(s, initial=-1)) for s in self.slots] +
                  [int(np.max(self.unknown_slots, initial=-1))])
        if n.width is None or top >= n.width:
            raise bad(n, f"one-hot slot {top} outside width {n.width}")

    def infer_width(self, widths: list) -> None:
        return None  # slots may leave trailing columns unused: the frontend says the width

    def narrow(self, cols: np.ndarray) -> tuple[Attrs, np.ndarray]:
        # output column i of the narrowed op is slot cols[i]; categories whose slot is dropped
        # get -1 (no column), input columns with no kept slot are not read at all
        pos = {int(c): i for i, c in enumerate(cols)}
        kept = []
        for j, cats, slots, unknown in zip(self.columns, self.categories, self.slots,
                                           self.unknown_slots):
            new = np.asarray([pos.get(int(t), -1) for t in slots], dtype=np.int64)
            unk = pos.get(int(unknown), -1)
            if (new >= 0).any() or unk >= 0:
                kept.append((int(j), cats, new, unk))
        in_cols = np.asarray(sorted({k[0] for k in kept}), dtype=np.int64)
        at = {int(c): i for i, c in enumerate(in_cols)}
        return replace(self, columns=np.asarray([at[k[0]] for k in kept], dtype=np.int64),
                       categories=tuple(k[1] for k in kept), slots=tuple(k[2] for k in kept),
                       unknown_slots=np.asarray([k[3] for k in kept], dtype=np.int64)), in_cols

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x = f64(ins[0])
        n = x.shape[0]
        out = np.zeros((n, int(node.width)), dtype=np.float64)
        rows = np.arange(n)
        for j, cats, slots, unknown in zip(self.columns, self.categories, self.slots,
                                           self.unknown_slots):
            # each value's category by a sorted lookup (one pass, not one per category): a
            # column sets 1 in the slot of every category it equals, NaN matching NaN
            slot, found = category_slots(x[:, int(j)], f64(cats),
                                         np.asarray(slots, dtype=np.int64))
            hit = slot >= 0
            out[rows[hit], slot[hit]] = 1.0
            if int(unknown) >= 0:
                out[~found, int(unknown)] = 1.0
        return out


@define(Op.CATEGORY_MAP)
class CategoryMap(Attrs):
    """Listed columns -> ``codes[matching category]`` (categories as ONE_HOT), or that
    column's ``unknown`` value; other columns unchanged."""

    columns: Any
    categories: Any
    codes: Any
    unknown: Any

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        _check_categories(n, self.columns, self.categories, self.codes)

    def narrow(self, cols: np.ndarray) -> tuple[Attrs, np.ndarray]:
        return narrow_column_maps(self, cols, ("categories", "codes", "unknown")), cols

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x = f64(ins[0])
        out = x.copy()
        seen: list[tuple[int, np.ndarray, tuple]] = []  # (column, categories, its lookup)
        for j, cats, codes, unknown in zip(self.columns, self.categories, self.codes,
                                           self.unknown):
            cats, col = f64(cats), x[:, int(j)]
            # a column repeated with the same categories (TargetEncoder's multi-class
            # encoding reads each feature once per class) reuses its lookup: comparing the
            # two columns is one pass, the lookup a sort search and four
            found_before = next((hit for k, c, hit in seen if c.shape == cats.shape
                                 and np.array_equal(c, cats, equal_nan=True)
                                 and np.array_equal(x[:, k], col, equal_nan=True)), None)
            # the first equal category by a sorted lookup (category_slots: a stable sort, so
            # among equal categories the first), one pass instead of one per category
            slot, found = found_before or category_slots(col, cats, np.arange(len(cats)))
            if found_before is None:
                seen.append((int(j), cats, (slot, found)))
            code = f64(codes)[np.maximum(slot, 0)] if len(cats) else slot.astype(np.float64)
            out[:, int(j)] = np.where(found, code, float(unknown))
        return out


@define(Op.POLYNOMIAL)
class Polynomial(Attrs):
    """powers (n_out, n_in): out_k = prod_j x_j ** p_kj, as repeated products in the order
    PolynomialFeatures multiplies (``factors``). ``float32``: on a float32 input each product
    rounds to float32 (np.multiply into the float32 output array)."""

    powers: Any
    float32: bool = False

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        p = np.asarray(self.powers)
        if p.ndim != 2 or (ins[0].width is not None and p.shape[1] != ins[0].width):
            raise bad(n, f"powers shape {p.shape} vs input {ins[0].width}")

    def infer_width(self, widths: list) -> int:
        return int(np.shape(self.powers)[0])

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return self.float32 and ins_float32[0]

    def factors(self) -> list[list[int]]:
        """Per output, its factor columns in multiplication order. PolynomialFeatures builds a
        degree-d term as a degree-(d-1) term times the term's lowest feature, so a term's
        factors go from its highest column down: x_a x_b x_c (a <= b <= c) is
        (x_c * x_b) * x_a. The first product commutes; from the third factor on the order
        changes the rounding (measured: 16,956 of 60,000 degree-3 values off by an ulp with
        columns ascending)."""
        powers = np.asarray(self.powers, dtype=np.int64)
        return [[int(j) for j in np.flatnonzero(row)[::-1] for _ in range(int(row[j]))]
                for row in powers]

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        r32 = float32_mode(ins[0], self.float32)
        x = np.asarray(ins[0], F32) if r32 else f64(ins[0])
        factors = self.factors()
        out = np.ones((x.shape[0], len(factors)), dtype=x.dtype)
        for k, cols in enumerate(factors):
            if cols:
                acc = x[:, cols[0]].copy()
                for j in cols[1:]:
                    acc = acc * x[:, j]  # in x's dtype: float32 rounds every product
                out[:, k] = acc
        return out


@define(Op.UFUNC)
class Ufunc(Attrs):
    """The NumPy ufunc ``name`` (one of ``ir.ops.UFUNCS``) element-wise."""

    PER_COLUMN = ()

    name: str
    float32: bool = False  # a float32 input: NumPy's float32 loop (FunctionTransformer)

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        if self.name not in UFUNCS:
            raise bad(n, f"ufunc {self.name!r} not in UFUNCS")

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return self.float32 and ins_float32[0]

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        with np.errstate(all="ignore"):  # log(-1) -> NaN, as numpy (sklearn does not check)
            if float32_mode(ins[0], self.float32):  # NumPy's own float32 loop, as sklearn
                return getattr(np, self.name)(np.asarray(ins[0], F32))
            return getattr(np, self.name)(f64(ins[0]))
