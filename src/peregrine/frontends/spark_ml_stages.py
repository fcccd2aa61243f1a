"""The shared part of the Spark ML frontend: the named columns a pipeline's stages read and
write, the stage registry (keyed by the JVM class name, which is how a saved stage names its
type), and helpers that decode Spark's saved vectors and matrices.

A Spark pipeline transforms a DataFrame stage by stage, each stage reading named columns and
adding new ones. Here each column is a ``Col``: a graph node and which of its columns hold the
value (a scalar double is one column, a Spark vector several). The DataFrame's input columns
are the graph's input X, one column each, in the order the pipeline first reads them; a missing
value there (pandas NaN or None) is what Spark's ``createDataFrame`` makes of it, a null.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from peregrine.errors import UnsupportedModelError
from peregrine.formats.spark_ml import SparkStage
from peregrine.ir import GraphBuilder, Op
from peregrine.ir.spec import MethodSpec


@dataclass(frozen=True)
class Col:
    """A DataFrame column: columns ``index`` of graph node ``node``."""

    node: str
    index: tuple[int, ...]
    vector: bool  # a Spark vector (else a scalar double)
    integral: bool = False  # integer codes or NaN only (StringIndexer, Bucketizer outputs)
    src: int | None = None  # the input column it still is (unchanged), else None
    nan: bool = True  # may hold NaN (a null: Spark's nulls are NaN here)
    null_row: bool = False  # a vector that may be null: NaN in every entry, its first NaN

    @property
    def width(self) -> int:
        return len(self.index)


@dataclass
class ModelOut:
    """The public methods of the pipeline's final model: method -> node, and their contract."""

    outputs: dict[str, str]
    methods: dict[str, MethodSpec]


@dataclass
class Ctx:
    """Shared state while one saved pipeline is converted."""

    g: GraphBuilder
    columns: dict[str, Col] = field(default_factory=dict)
    # input column -> the labels of the StringIndexer reading it (ModelSpec.category_maps)
    strings: dict[int, tuple[str, ...]] = field(default_factory=dict)
    unknown_error: set[int] = field(default_factory=set)  # ModelSpec.category_unknown_error
    # (node, per column: (what Spark raises, input column read or -1)): ModelSpec.input_checks
    checks: list[tuple[str, tuple[tuple[str, int], ...]]] = field(default_factory=list)
    model: ModelOut | None = None

    def read(self, stage: SparkStage, name: str, *, vector: bool | None = None) -> Col:
        """The column ``name`` as ``stage`` reads it (``vector``: the kind it requires)."""
        col = self.columns.get(name)
        if col is None:
            raise UnsupportedModelError(f"{stage.describe()} reads column {name!r}, which no "
                                        "input or earlier stage provides")
        if vector is not None and col.vector != vector:
            kind = "a vector" if vector else "a number"
            raise UnsupportedModelError(f"{stage.describe()} needs {kind} in column {name!r}")
        if col.src is not None and col.src in self.strings and stage.name != "StringIndexerModel":
            raise UnsupportedModelError(f"{stage.describe()} reads the string column {name!r}; "
                                        "only StringIndexer reads strings")
        return col

    def node_of(self, cols: list[Col]) -> str:
        """One node holding ``cols`` side by side (no new node when one column already is)."""
        parts: list[tuple[str, list[int]]] = []
        for c in cols:
            if parts and parts[-1][0] == c.node:
                parts[-1][1].extend(c.index)
            else:
                parts.append((c.node, list(c.index)))
        nodes = []
        for node, index in parts:
            width = self.g.width(node)
            if index == list(range(width)):
                nodes.append(node)
            else:
                nodes.append(self.g.add(Op.SELECT, (node,), width=len(index),
                                        columns=np.asarray(index, dtype=np.int64)))
        if len(nodes) == 1:
            return nodes[0]
        return self.g.add(Op.CONCAT, tuple(nodes), width=sum(len(i) for _, i in parts))

    def write(self, stage: SparkStage, name: str, node: str, *, vector: bool,
              index: tuple[int, ...] | None = None, integral: bool = False,
              nan: bool = True, null_row: bool = False) -> None:
        if name in self.columns:
            raise UnsupportedModelError(f"{stage.describe()} writes column {name!r}, which "
                                        "already exists")
        if index is None:
            index = tuple(range(self.g.width(node)))
        self.columns[name] = Col(node, index, vector, integral, nan=nan, null_row=null_row)

    def check(self, node: str, what: str, cols: list[Col]) -> None:
        """Rows where ``node`` (one column per entry of ``cols``) is non-zero raise InputError
        saying ``what``, naming the input column each entry reads."""
        self.checks.append((node, tuple((what, -1 if c.src is None else c.src) for c in cols)))

    def nan_flags(self, node: str) -> str:
        """1.0 where ``node``'s value is NaN (Spark's null), per column."""
        width = self.g.width(node)
        return self.g.add(Op.ONE_HOT, (node,), width=width, columns=np.arange(width),
                          categories=tuple(np.array([np.nan]) for _ in range(width)),
                          slots=tuple(np.array([j]) for j in range(width)),
                          unknown_slots=np.full(width, -1))


    def null_mask(self, node: str, width: int) -> str:
        """NaN where ``node``'s single column is NaN (a null), else 0.0, repeated ``width``
        times: added to a stage's output, it makes the row null where Spark's UDF, whose
        argument is a primitive double, returns null for a null input."""
        zero = self.g.add(Op.IMPUTE, (node,), values=np.zeros(1), missing=np.inf)
        zero = self.g.add(Op.IMPUTE, (zero,), values=np.zeros(1), missing=-np.inf)
        zero = self.g.add(Op.AFFINE, (zero,), scale=0.0, shift=0.0)  # NaN * 0 stays NaN
        return self.g.add(Op.SELECT, (zero,), width=width, columns=np.zeros(width, np.int64))

    def with_nulls(self, out: str, mask: str) -> str:
        return self.g.add(Op.WEIGHTED_SUM, (out, mask), width=self.g.width(out),
                          weights=np.ones(2))


StageFn = Callable[[SparkStage, Ctx], None]


@dataclass(frozen=True)
class StageKind:
    fn: StageFn
    model: bool  # a predictor: its columns are the compiled model's methods


# JVM class name -> how the stage is converted. A saved stage names its type only by this
# string, as an ONNX node names its op; every entry is registered beside its code.
STAGES: dict[str, StageKind] = {}


def register_stage(*class_names: str, model: bool = False) -> Callable[[StageFn], StageFn]:
    def deco(fn: StageFn) -> StageFn:
        for name in class_names:
            if name in STAGES:
                raise RuntimeError(f"Spark stage {name} registered twice")
            STAGES[name] = StageKind(fn, model)
        return fn
    return deco


def refuse(stage: SparkStage, what: str, supported: str = "") -> UnsupportedModelError:
    msg = f"{stage.describe()}: {what} is not supported"
    return UnsupportedModelError(msg + (f" (supported: {supported})" if supported else ""))


def choice(stage: SparkStage, param: str, allowed: tuple[str, ...]) -> str:
    value = stage.params.get(param)
    if value not in allowed:
        raise refuse(stage, f"{param}={value!r}", ", ".join(allowed))
    return str(value)


def column_params(stage: SparkStage, single: str, multi: str) -> list[str]:
    """``inputCols`` when the user set it, else ``[inputCol]`` (and the same for outputs)."""
    if stage.is_set(multi):
        return [str(c) for c in stage.params[multi]]
    if single in stage.params:
        return [str(stage.params[single])]
    raise refuse(stage, f"a stage with neither {single} nor {multi}")


def reads_writes(stage: SparkStage) -> tuple[list[str], list[str]]:
    """The columns a stage reads and writes, from its parameters."""
    kind = STAGES.get(stage.class_name)
    if kind is not None and kind.model:
        outs = [str(stage.params.get(p) or "") for p in
                ("predictionCol", "rawPredictionCol", "probabilityCol")]
        return [str(stage.params.get("featuresCol", "features"))], [o for o in outs if o]
    return column_params(stage, "inputCol", "inputCols"), \
        column_params(stage, "outputCol", "outputCols")


# ---------------------------------------------------------------- saved linear algebra --


def vector(stage: SparkStage, v: Any) -> np.ndarray:
    """A saved ``VectorUDT`` (type 0 sparse: size, indices, values; type 1 dense: values)."""
    if not isinstance(v, dict) or "values" not in v:
        raise refuse(stage, f"a saved vector of unexpected form {type(v).__name__}")
    values = np.asarray(v["values"] or [], dtype=np.float64)
    if v.get("type") == 0:
        out = np.zeros(int(v["size"]), dtype=np.float64)
        out[np.asarray(v["indices"] or [], dtype=np.int64)] = values
        return out
    return values


def matrix(stage: SparkStage, m: Any) -> np.ndarray:
    """A saved ``MatrixUDT`` as a dense (numRows, numCols) array: type 1 dense, column-major
    unless isTransposed; type 0 sparse, CSC (CSR when isTransposed)."""
    rows, cols = int(m["numRows"]), int(m["numCols"])
    values = np.asarray(m["values"] or [], dtype=np.float64)
    transposed = bool(m.get("isTransposed"))
    if m.get("type") == 1:
        return values.reshape((rows, cols)) if transposed else values.reshape((cols, rows)).T
    ptrs = np.asarray(m["colPtrs"], dtype=np.int64)
    idx = np.asarray(m["rowIndices"], dtype=np.int64)
    major, minor = (rows, cols) if transposed else (cols, rows)
    out = np.zeros((major, minor), dtype=np.float64)
    for k in range(major):
        out[k, idx[ptrs[k]:ptrs[k + 1]]] = values[ptrs[k]:ptrs[k + 1]]
    return out if transposed else out.T


def one_row(stage: SparkStage) -> dict[str, Any]:
    if len(stage.data) != 1:
        raise refuse(stage, f"saved data with {len(stage.data)} rows (expected one)")
    return stage.data[0]


__all__ = ["STAGES", "Col", "Ctx", "ModelOut", "StageKind", "choice", "column_params", "matrix",
           "one_row", "reads_writes", "refuse", "register_stage", "vector"]
