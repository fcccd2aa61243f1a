"""Per-op attribute checks run by ``graph.verify`` (the core and featurizer ops here, the
kernel/meta/transformer ops in ``checks_pipeline.py``): a graph a frontend builds or an artifact
holds must give every backend attributes of the documented form (``ir/ops.py``), so damage is
a ValueError here (an ArtifactError on load), never a crash or a silent answer in a backend.
Widths of ``None`` are unknown and not compared."""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

import numpy as np

from peregrine.ir.forest import Forest
from peregrine.ir.ops import UFUNCS, Link, Op

if TYPE_CHECKING:
    from peregrine.ir.graph import Node

Check = Callable[["Node", "list[Node]"], None]


def bad(n: Node, what: str) -> ValueError:
    return ValueError(f"IR node {n.name!r} ({n.op.value}): {what}")


def n_inputs(n: Node, ins: list[Node], count: int) -> None:
    if len(ins) != count:
        raise bad(n, f"takes {count} input(s), has {len(ins)}")


def one_input(n: Node, ins: list[Node]) -> None:
    n_inputs(n, ins, 1)


def check_width(n: Node, ins: list[Node], expect: int | None) -> None:
    if n.width is not None and expect is not None and n.width != expect:
        raise bad(n, f"width {n.width} != {expect}")


def same_width(n: Node, ins: list[Node]) -> None:
    one_input(n, ins)
    check_width(n, ins, ins[0].width)


def attr(n: Node, key: str) -> Any:
    if key not in n.attrs:
        raise bad(n, f"missing attribute {key!r}")
    return n.attrs[key]


def array(n: Node, key: str, shape: tuple[int | None, ...], *, finite: bool = False,
           value: Any = None) -> np.ndarray:
    """Attribute ``key`` (or ``value``) as a float64 array of ``shape`` (None: any length)."""
    raw = attr(n, key) if value is None else value
    try:
        a = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise bad(n, f"{key} is not numeric") from None
    if a.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, a.shape)):
        raise bad(n, f"{key} has shape {a.shape}, expected {shape}")
    if finite and not np.all(np.isfinite(a)):
        raise bad(n, f"{key} holds NaN or inf")
    return a


def ascending(n: Node, key: str, a: np.ndarray) -> None:
    if np.isnan(a).any() or np.any(np.diff(a) < 0):
        raise bad(n, f"{key} is not ascending")


def integer(n: Node, key: str, low: int = 0, high: int | None = None) -> int:
    v = attr(n, key)
    if isinstance(v, bool) or not isinstance(v, Integral) or v < low or (
            high is not None and v > high):
        raise bad(n, f"{key}={v!r} is not an integer in [{low}, {high}]")
    return int(v)


def real(n: Node, key: str, *, nonzero: bool = False) -> float:
    v = attr(n, key)
    if isinstance(v, bool) or not isinstance(v, Real) or not np.isfinite(v) or (
            nonzero and v == 0):
        raise bad(n, f"{key}={v!r} is not a finite{' non-zero' if nonzero else ''} number")
    return float(v)


def choice(n: Node, key: str, options: tuple[str, ...]) -> str:
    v = attr(n, key)
    if v not in options:
        raise bad(n, f"{key}={v!r} is not one of {options}")
    return str(v)


def tables(n: Node, key: str, count: int | None) -> list[np.ndarray]:
    """A per-column list of 1-D arrays (one per input column)."""
    v = attr(n, key)
    if not isinstance(v, (list, tuple)) or (count is not None and len(v) != count):
        raise bad(n, f"{key} must list one array per column ({count})")
    return [array(n, key, (None,), value=t) for t in v]


def indices(n: Node, key: str, size: int | None) -> np.ndarray:
    a = np.asarray(attr(n, key)).reshape(-1)
    if a.size and (a.dtype.kind not in "iu" or a.min() < 0 or (size is not None and
                                                             a.max() >= size)):
        raise bad(n, f"{key} holds an index outside [0, {size})")
    return a.astype(np.int64)


# ------------------------------------------------------------------ core ops --


def _check_tree(n: Node, ins: list[Node]) -> None:
    one_input(n, ins)
    forest = n.attrs.get("forest")
    if not isinstance(forest, Forest):
        raise bad(n, "needs a Forest attribute")
    forest.validate()
    if ins[0].width is not None and forest.n_features > ins[0].width:
        raise ValueError(f"Forest reads {forest.n_features} features, input has {ins[0].width}")
    if n.width != forest.n_outputs:
        raise bad(n, f"width {n.width} != forest outputs")


def _check_link(n: Node, ins: list[Node]) -> None:
    one_input(n, ins)
    if not isinstance(n.attrs.get("kind"), Link):
        raise bad(n, "needs a Link kind")


def _check_affine(n: Node, ins: list[Node]) -> None:
    one_input(n, ins)
    for key in ("scale", "shift"):
        np.asarray(n.attrs.get(key, 0.0), dtype=np.float64)


def _check_linear(n: Node, ins: list[Node]) -> None:
    one_input(n, ins)
    w = np.asarray(n.attrs["weight"], dtype=np.float64)
    b = np.asarray(n.attrs["bias"], dtype=np.float64)
    if w.ndim != 2 or b.shape != (w.shape[1],):
        raise bad(n, f"weight {w.shape} / bias {b.shape} mismatch")
    if ins[0].width is not None and ins[0].width != w.shape[0]:
        raise bad(n, f"weight has {w.shape[0]} rows, input {ins[0].width} columns")
    check_width(n, ins, w.shape[1])


def _check_select(n: Node, ins: list[Node]) -> None:
    one_input(n, ins)
    cols = np.asarray(n.attrs["columns"], dtype=np.int64).reshape(-1)
    if ins[0].width is not None and cols.size and (cols.min() < 0 or cols.max() >= ins[0].width):
        raise bad(n, f"selects a column outside [0, {ins[0].width})")
    check_width(n, ins, len(cols))


def _check_concat(n: Node, ins: list[Node]) -> None:
    if not ins:
        raise bad(n, "has no inputs")
    widths = [i.width for i in ins]
    check_width(n, ins, None if None in widths else sum(widths))  # type: ignore[arg-type]


def _check_per_column(*keys: str) -> Check:
    def check(n: Node, ins: list[Node]) -> None:
        same_width(n, ins)
        for key in keys:
            v = np.asarray(n.attrs[key], dtype=np.float64)
            if v.ndim > 1 or (v.ndim == 1 and ins[0].width not in (None, v.shape[0])):
                raise bad(n, f"{key} has shape {v.shape}")
    return check


def _check_categories(n: Node, ins: list[Node]) -> None:
    one_input(n, ins)
    cols, cats = n.attrs["columns"], n.attrs["categories"]
    per_col = n.attrs["slots"] if n.op is Op.ONE_HOT else n.attrs["codes"]
    if not (len(cols) == len(cats) == len(per_col)):
        raise bad(n, "columns/categories/slots lengths differ")
    for c, s in zip(cats, per_col):
        if len(c) != len(s):
            raise bad(n, "a column's categories and slots differ")
    if n.op is Op.ONE_HOT:
        top = max([int(np.max(s, initial=-1)) for s in per_col] +
                  [int(np.max(n.attrs["unknown_slots"], initial=-1))])
        if n.width is None or top >= n.width:
            raise bad(n, f"one-hot slot {top} outside width {n.width}")
    else:
        check_width(n, ins, ins[0].width)


def _check_polynomial(n: Node, ins: list[Node]) -> None:
    one_input(n, ins)
    p = np.asarray(n.attrs["powers"])
    if p.ndim != 2 or (ins[0].width is not None and p.shape[1] != ins[0].width):
        raise bad(n, f"powers shape {p.shape} vs input {ins[0].width}")
    check_width(n, ins, p.shape[0])


def _check_ufunc(n: Node, ins: list[Node]) -> None:
    same_width(n, ins)
    if n.attrs.get("name") not in UFUNCS:
        raise bad(n, f"ufunc {n.attrs.get('name')!r} not in UFUNCS")


def _check_normalize(n: Node, ins: list[Node]) -> None:
    same_width(n, ins)
    choice(n, "norm", ("l1", "l2", "max"))
    if "zero" in n.attrs:
        choice(n, "zero", ("one", "uniform"))


CORE_CHECKS: dict[Op, Check] = {
    Op.LINEAR: _check_linear,
    Op.SELECT: _check_select,
    Op.CONCAT: _check_concat,
    Op.CENTER_SCALE: _check_per_column("center", "scale"),
    Op.CLIP: same_width,
    Op.NORMALIZE: _check_normalize,
    Op.BINARIZE: same_width,
    Op.IMPUTE: _check_per_column("values"),
    Op.ONE_HOT: _check_categories,
    Op.CATEGORY_MAP: _check_categories,
    Op.POLYNOMIAL: _check_polynomial,
    Op.UFUNC: _check_ufunc,
    Op.TREE_ENSEMBLE: _check_tree,
    Op.LINK: _check_link,
    Op.AFFINE: _check_affine,
    Op.BINARY_PROBA: one_input,
    Op.ARGMAX: one_input,
    Op.THRESHOLD: one_input,
    Op.REPLACE_WITH_NAN: one_input,
    Op.ORDINAL_ENCODE: one_input,
}
