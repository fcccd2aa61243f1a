"""Core ops: the input, the element-wise output transforms (AFFINE, LINK) and the heads that
turn scores into classes (BINARY_PROBA, ARGMAX, THRESHOLD), and ORDINAL_ENCODE."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from peregrine.ir.ops import Link, Op
from peregrine.ir.semantics.base import (
    Attrs,
    bad,
    define,
    n_inputs,
    narrow_column_maps,
    per_column,
)
from peregrine.ir.semantics.libm32 import sigmoid32, softmax32
from peregrine.options import CompileOptions


@define(Op.INPUT)
class Input(Attrs):
    """The feature matrix X (batch, n_features); the runtime supplies it."""

    def check(self, n: Any, ins: list) -> None:
        n_inputs(n, ins, 0)

    def infer_width(self, widths: list) -> None:
        return None

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        # evaluators bind the input node to X before any rule runs; reaching this means a
        # graph was evaluated without its input
        raise ValueError(f"IR node {node.name!r}: the input X was not given to the evaluator")


@define(Op.AFFINE)
class Affine(Attrs):
    """x * scale + shift, per column (arrays) or for all columns (scalars)."""

    PER_COLUMN = ("scale", "shift")

    scale: Any = 1.0
    shift: Any = 0.0
    # on a float32 input (pipeline.FLOAT32_MODES): "round" keeps it float32, each step rounded
    # (MinMaxScaler's in-place ``X *= scale_; X += min_`` on a float32 array); "cast" also
    # rounds scale and shift to float32 first (``res * weight`` with a Python number, NEP 50)
    float32: str = "never"

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return self.float32 != "never" and ins_float32[0]

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        for key in ("scale", "shift"):
            per_column(n, key, getattr(self, key), ins[0].width)
        if self.float32 not in ("never", "round", "cast"):
            raise bad(n, f"float32={self.float32!r} is not never, round or cast")

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x = ins[0]
        a, b = np.asarray(self.scale, np.float64), np.asarray(self.shift, np.float64)
        if self.float32 != "never" and x.dtype == np.float32:
            if self.float32 == "cast":
                a, b = a.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(
                    np.float64)
            return ((x * a).astype(np.float32) + b).astype(np.float32)
        return x * a + b


def sigmoid(x: np.ndarray) -> np.ndarray:
    # Branch-free and overflow-free: exp of a non-positive number only.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def logsumexp_rows(x: np.ndarray) -> np.ndarray:
    """(n, 1) row-wise logsumexp in sklearn's utils._array_api._logsumexp order: the maxima
    are counted and left out of the sum, so a row whose other entries underflow still gets
    log(count) + max exactly (helper "logproba"; naive Bayes' predict_log_proba)."""
    m = x.max(axis=1, keepdims=True)
    at_max = x == m
    count = at_max.sum(axis=1, keepdims=True, dtype=x.dtype)
    shift = np.where(np.isfinite(m), m, 0)
    with np.errstate(all="ignore"):  # inf - inf and log(0) -> NaN/-inf, as sklearn's rows
        s = np.exp(np.where(at_max, -np.inf, x) - shift).sum(axis=1, keepdims=True)
        s = np.where(s == 0, s, s / count)
        return np.log1p(s) + np.log(count) + m


@define(Op.LINK)
class LinkAttrs(Attrs):
    """Element-wise or row-wise output transform ``kind`` (``ir.ops.Link``): SIGMOID uses
    ``scale`` (1 / (1 + exp(-scale * x))), ISOLATION_SCORE uses ``denominator``
    (-(2 ** (-x / denominator))); the others take no parameter."""

    kind: Link
    scale: float = 1.0
    denominator: float | None = None
    # SIGMOID / SOFTMAX as XGBoost computes them: float32 arithmetic around the C library's
    # expf (ir/semantics/libm32.py), returning float32
    float32: bool = False

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        if not isinstance(self.kind, Link):
            raise bad(n, "needs a Link kind")
        if self.float32 and (self.kind not in (Link.SIGMOID, Link.SOFTMAX) or self.scale != 1.0):
            raise bad(n, "float32 applies to SIGMOID (scale 1) and SOFTMAX only")
        if self.kind is Link.ISOLATION_SCORE and self.denominator is None:
            raise bad(n, "ISOLATION_SCORE needs a denominator")

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return self.float32

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        if self.float32:
            return sigmoid32(ins[0]) if self.kind is Link.SIGMOID else softmax32(ins[0])
        return _LINK_RULES[self.kind](ins[0], self)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # inf - inf -> NaN (rows sklearn rejects)
        return x - logsumexp_rows(x)


# one rule per Link kind (LINK.check admits only Link members; every member is here)
_LINK_RULES: dict[Link, Callable[[np.ndarray, LinkAttrs], np.ndarray]] = {
    Link.IDENTITY: lambda x, a: x,
    Link.SIGMOID: lambda x, a: sigmoid(float(a.scale) * x),
    Link.SOFTMAX: lambda x, a: _softmax(x),
    Link.EXP: lambda x, a: np.exp(x),
    Link.ISOLATION_SCORE: lambda x, a: -(2.0 ** (-x / float(a.denominator))),
    Link.LOG_SOFTMAX: lambda x, a: _log_softmax(x),
}
if set(_LINK_RULES) != set(Link):
    raise RuntimeError(f"LINK kinds without a rule: {set(Link) - set(_LINK_RULES)}")


@define(Op.BINARY_PROBA)
class BinaryProba(Attrs):
    """(n, 1) probability p -> (n, 2) [1 - p, p]."""

    def infer_width(self, widths: list) -> int:
        return 2

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        p = ins[0][:, :1]
        return np.concatenate([1.0 - p, p], axis=1)


@define(Op.ARGMAX)
class Argmax(Attrs):
    """(n, k) -> (n, 1) int64 column index of the maximum, the first one on ties (numpy)."""

    OUT_DTYPE = "int64"

    def infer_width(self, widths: list) -> int:
        return 1

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        return np.argmax(ins[0], axis=1)[:, None].astype(np.int64)


@define(Op.THRESHOLD)
class Threshold(Attrs):
    """(n, 1) -> (n, 1) int64: x > value (``strict``) or x >= value."""

    OUT_DTYPE = "int64"
    value: float = 0.0
    strict: bool = True

    def infer_width(self, widths: list) -> int:
        return 1

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x, v = ins[0][:, :1], float(self.value)
        return ((x > v) if self.strict else (x >= v)).astype(np.int64)


@define(Op.ORDINAL_ENCODE)
class OrdinalEncode(Attrs):
    """Each listed column's value becomes its position among that column's ascending float64
    ``categories`` (exact equality, -0.0 == 0.0), NaN when absent or NaN; other columns pass
    through. scikit-learn's OrdinalEncoder(handle_unknown="use_encoded_value",
    unknown_value=nan)."""

    columns: Any
    categories: Any

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        if len(self.columns) != len(self.categories):
            raise bad(n, "columns and categories lengths differ")

    def narrow(self, cols: np.ndarray) -> tuple[Attrs, np.ndarray]:
        return narrow_column_maps(self, cols, ("categories",)), cols

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x = ins[0]
        out = x.copy()
        for j, cats in zip(self.columns, self.categories):
            cats = np.asarray(cats, dtype=np.float64)
            col = x[:, int(j)].astype(np.float64)
            pos = np.searchsorted(cats, col)  # NaN sorts past the end
            hit = (pos < len(cats)) & (np.append(cats, np.nan)[pos] == col)
            out[:, int(j)] = np.where(hit, pos, np.nan)
        return out

