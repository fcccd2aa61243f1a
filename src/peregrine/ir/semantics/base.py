"""What an op definition is. Each op of ``ir.ops.Op`` has exactly one definition: a frozen
attributes dataclass registered with ``@define(Op.X)`` that holds

* the attribute schema and defaults (the dataclass fields; ``None`` marks an optional one),
* ``check(node, ins)``: validation against the input nodes, run by ``graph.verify`` so a graph
  a frontend builds or an artifact holds gives every backend attributes of the documented
  form (damage is a ValueError there, an ArtifactError on load, never a crash in a backend),
* ``infer_width(widths)`` and ``OUT_DTYPE``: the output width and dtype from the inputs',
* ``rule(node, ins, options)``: the op's meaning, as NumPy (the test oracle, the reference
  backend, and the fallback of every other backend).

The rules' shared constants and helpers (the sigmoid, the forest decision rule, the neighbour
search's error bound...) sit beside them in the same module and are what the torch and native
lowerings import, so every backend takes them from the semantics, never from another backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from peregrine.ir.ops import Op

if TYPE_CHECKING:
    from peregrine.ir.graph import Node
    from peregrine.options import CompileOptions

DEFS: dict[Op, type[Attrs]] = {}


@dataclass(frozen=True, eq=False)
class Attrs(ABC):
    """Base of the per-op attribute dataclasses (``eq=False``: attributes hold arrays)."""

    op: ClassVar[Op]
    OUT_DTYPE: ClassVar[str] = "float64"  # numpy dtype name of the output
    # Column-separable ops (output column j computed from input column j alone, the same way
    # for every column) name the attributes that hold one entry per column; None: not
    # separable. ``narrow`` uses it; the passes push column selections through such ops.
    PER_COLUMN: ClassVar[tuple[str, ...] | None] = None

    def __post_init__(self) -> None:
        # Array attributes are stored C-contiguous. A program built from a fitted model (whose
        # arrays may be transposed views) and one built from its saved artifact (arrays written
        # C-contiguous) are then the same program: a BLAS call given a transposed operand may
        # pick another kernel and sum in another order, which made a loaded KernelPCA differ
        # from the compiled one in the last bit on AMD hosts.
        for f in fields(self):
            v = getattr(self, f.name)
            if _has_array(v):
                object.__setattr__(self, f.name, _canonical(v))

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Attrs:
        """The attributes from a mapping (a frontend's keywords, an artifact's JSON)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"{cls.op.value} has no attribute(s) {', '.join(unknown)} "
                             f"(it has: {', '.join(sorted(names)) or 'none'})")
        try:
            return cls(**values)
        except TypeError as exc:  # a required attribute is missing
            raise ValueError(f"{cls.op.value}: {exc}") from None

    def items(self) -> list[tuple[str, Any]]:
        """(name, value) of the attributes that are set (optional ones left at None are not)."""
        return [(f.name, getattr(self, f.name)) for f in fields(self)
                if getattr(self, f.name) is not None]

    def check(self, n: Node, ins: list[Node]) -> None:
        """Validate against the input nodes (raise ``bad(n, ...)``); default: one input."""
        n_inputs(n, ins, 1)

    def infer_width(self, widths: list[int | None]) -> int | None:
        """Output width from the input widths (None: unknown); default: the first input's."""
        return widths[0] if widths else None

    @abstractmethod
    def rule(self, node: Node, ins: list[np.ndarray], options: CompileOptions) -> np.ndarray:
        """The op's value from its input values: its meaning, in NumPy. Abstract, so a
        definition without a rule cannot be instantiated (no node can carry it)."""

    def float32_out(self, ins_float32: list[bool]) -> bool:
        """Whether ``rule`` returns float32 when the inputs flagged True are float32 (and the
        others float64): the static form of the rule's dtype flow, for code generators that
        specialise on the input dtype (kernels/rowwise.py). Default: float64 out."""
        return False

    def narrow(self, cols: np.ndarray) -> tuple[Attrs, np.ndarray] | None:
        """Attributes computing only output columns ``cols`` (in that order) from input columns
        ``in_cols`` (returned; the new input is ``x[:, in_cols]``), with every kept value's
        arithmetic unchanged; None when the op cannot drop columns that way."""
        if self.PER_COLUMN is None:
            return None
        changes: dict[str, Any] = {}
        for name in self.PER_COLUMN:
            v = getattr(self, name)
            if isinstance(v, (list, tuple)):
                changes[name] = type(v)(v[int(c)] for c in cols)
            elif v is not None and np.ndim(v) >= 1:
                changes[name] = np.asarray(v)[cols]
        return replace(self, **changes), cols


def define(op: Op) -> Callable[[type[Attrs]], type[Attrs]]:
    """Register the class as ``op``'s definition (a frozen, ``eq=False`` dataclass)."""

    def deco(cls: type[Attrs]) -> type[Attrs]:
        if op in DEFS:
            raise RuntimeError(f"{op} is defined twice ({DEFS[op].__name__}, {cls.__name__})")
        cls = dataclass(frozen=True, eq=False)(cls)
        cls.op = op
        DEFS[op] = cls
        return cls

    return deco


def _has_array(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return not value.flags.c_contiguous
    if type(value) in (list, tuple):
        return any(_has_array(v) for v in value)
    return False


def _canonical(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return np.ascontiguousarray(value)
    if type(value) in (list, tuple):
        return type(value)(_canonical(v) for v in value)
    return value


def f64(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def narrow_column_maps(attrs: Any, cols: np.ndarray, per_entry: tuple[str, ...]) -> Any:
    """``attrs`` (with ``columns`` listing the input columns it maps and one entry per listed
    column in each ``per_entry`` attribute) for the input ``x[:, cols]``: entries of other
    columns dropped, the rest renumbered (ORDINAL_ENCODE, CATEGORY_MAP)."""
    at = {int(c): i for i, c in enumerate(cols)}
    keep = [k for k, j in enumerate(attrs.columns) if int(j) in at]
    changes: dict[str, Any] = {"columns": np.asarray([at[int(attrs.columns[k])] for k in keep],
                                                     dtype=np.int64)}
    for name in per_entry:
        v = getattr(attrs, name)
        changes[name] = (type(v)(v[k] for k in keep) if isinstance(v, (list, tuple))
                         else np.asarray(v)[keep])
    return replace(attrs, **changes)


# ------------------------------------------------------------- validation helpers --
# Widths of None are unknown and not compared.


def bad(n: Node, what: str) -> ValueError:
    return ValueError(f"IR node {n.name!r} ({n.op.value}): {what}")


def n_inputs(n: Node, ins: list[Node], count: int) -> None:
    if len(ins) != count:
        raise bad(n, f"takes {count} input(s), has {len(ins)}")


def some_inputs(n: Node, ins: list[Node]) -> None:
    if not ins:
        raise bad(n, "has no inputs")


def check_width(n: Node, expect: int | None) -> None:
    if n.width is not None and expect is not None and n.width != expect:
        raise bad(n, f"width {n.width} != {expect}")


def array(n: Node, key: str, value: Any, shape: tuple[int | None, ...], *,
          finite: bool = False) -> np.ndarray:
    """``value`` (attribute ``key``) as a float64 array of ``shape`` (None: any length)."""
    if value is None:
        raise bad(n, f"missing attribute {key!r}")
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise bad(n, f"{key} is not numeric") from None
    if a.ndim != len(shape) or any(s is not None and s != d for s, d in zip(shape, a.shape)):
        raise bad(n, f"{key} has shape {a.shape}, expected {shape}")
    if finite and not np.all(np.isfinite(a)):
        raise bad(n, f"{key} holds NaN or inf")
    return a


def per_column(n: Node, key: str, value: Any, width: int | None) -> np.ndarray:
    """A scalar or one value per column."""
    try:
        v = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise bad(n, f"{key} is not numeric") from None
    if v.ndim > 1 or (v.ndim == 1 and width not in (None, v.shape[0])):
        raise bad(n, f"{key} has shape {v.shape}")
    return v


def ascending(n: Node, key: str, a: np.ndarray) -> None:
    if np.isnan(a).any() or np.any(np.diff(a) < 0):
        raise bad(n, f"{key} is not ascending")


def integer(n: Node, key: str, v: Any, low: int = 0, high: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, Integral) or v < low or (
            high is not None and v > high):
        raise bad(n, f"{key}={v!r} is not an integer in [{low}, {high}]")
    return int(v)


def real(n: Node, key: str, v: Any, *, nonzero: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, Real) or not np.isfinite(v) or (
            nonzero and v == 0):
        raise bad(n, f"{key}={v!r} is not a finite{' non-zero' if nonzero else ''} number")
    return float(v)


def choice(n: Node, key: str, v: Any, options: tuple[str, ...]) -> str:
    if v not in options:
        raise bad(n, f"{key}={v!r} is not one of {options}")
    return str(v)


def tables(n: Node, key: str, v: Any, count: int | None) -> list[np.ndarray]:
    """A per-column list of 1-D arrays (one per input column)."""
    if not isinstance(v, (list, tuple)) or (count is not None and len(v) != count):
        raise bad(n, f"{key} must list one array per column ({count})")
    return [array(n, key, t, (None,)) for t in v]


def indices(n: Node, key: str, v: Any, size: int | None) -> np.ndarray:
    a = np.asarray(v).reshape(-1)
    if a.size and (a.dtype.kind not in "iu" or a.min() < 0 or (size is not None and
                                                             a.max() >= size)):
        raise bad(n, f"{key} holds an index outside [0, {size})")
    return a.astype(np.int64)
