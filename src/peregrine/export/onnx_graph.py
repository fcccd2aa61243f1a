"""The ONNX graph under construction (``Emitter``) and the table of per-op lowerings
(``LOWERINGS``, keyed by ``Op``, filled by ``@lowering`` beside each function in
``onnx_ops.py``, ``onnx_math.py``, ``onnx_trees.py`` and the other ``onnx_*`` modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from peregrine.errors import UnsupportedModelError
from peregrine.ir.ops import Op

Lowering = Callable[["Emitter", Any, list[str]], str]
LOWERINGS: dict[Op, Lowering] = {}
# the backends that run every op (named when an op has no ONNX lowering)
RUNNING_BACKENDS = "reference, torch, torchscript and native"
# why an op without a lowering has none, where that is not just "not written yet"
REFUSAL_REASONS: dict[Op, str] = {
    # measured 2026-11-24: a lowering of the rule's steps (MatMul for its products) matched
    # scikit-learn on continuous rows but imputed 0.75 for 0.5 on integer-valued features
    Op.KNN_IMPUTE: (
        "KNNImputer's nan_euclidean distances are scikit-learn's expanded form, whose "
        "products and sums round in the BLAS's order (OpenBLAS's fused multiply-adds); "
        "donors at equal distances (integer or repeated features) are then ordered by that "
        "rounding, which ONNX Runtime's GEMM does not reproduce, so a file could impute "
        "from other donors"),
}


def lowering(op: Op) -> Callable[[Lowering], Lowering]:
    def deco(fn: Lowering) -> Lowering:
        if op in LOWERINGS:
            raise RuntimeError(f"{op} has two ONNX lowerings")
        LOWERINGS[op] = fn
        return fn

    return deco


class Emitter:
    """Appends ONNX nodes and constant initializers with unique names."""

    def __init__(self, source: str, ml_ops: str, exact_sums: bool = False) -> None:
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.source = source
        self.ml_ops = ml_ops
        # trees: the library's sums in its order (per-tree CumSum, per-class copies) instead
        # of the faster one-traversal forms (export_onnx(exact_sums=...), docs/export.md)
        self.exact_sums = exact_sums
        self.dtypes: dict[str, int] = {}  # tensor name -> ONNX elem type, where known
        self.widths: dict[str, int | None] = {}  # tensor name -> columns, for IR node outputs
        # how each forest is written (onnx_trees.plan_forests) and the ai.onnx.ml opset
        self.narrow: dict[str, str] = {}  # a double tensor widened from float32 -> the float32
        self.tree_plan: dict[str, str] = {}
        self.ml_opset = 5
        # tensor -> how to recompute its exact values on some rows (a rows-index tensor in,
        # a double tensor out), for values that were rounded (the VECTOR forests)
        self.exact_values: dict[str, Callable[[Emitter, str], str]] = {}
        # IR node name -> the exported steps reading it, and the IR nodes that are method
        # results: a lowering may pick a form by what its value reaches (onnx_ops._sigmoid)
        self.consumers: dict[str, list[Any]] = {}
        self.results: set[str] = set()
        # tensors holding -v for their IR node's value v (a Gemm with negated weights feeding
        # the short sigmoid, which needs exp(-v): onnx_ops.lower_linear)
        self.negated: set[str] = set()
        # float32 level, binary logistic: a Gemm's two columns [-v, v] for its one-column IR
        # node's value v, and the Sigmoid of such a pair, [1 - p, p] (onnx_ops.lower_linear)
        self.pairs: set[str] = set()
        self.proba_pairs: set[str] = set()
        # a tensor holding its IR node's value divided column by column by these factors,
        # which a LINEAR reading it multiplies into its weight rows (the rbf kernel's
        # exp(-gamma |v|^2): onnx_kernels.lower_kernel, onnx_ops.lower_linear)
        self.column_scales: dict[str, np.ndarray] = {}
        # a double tensor -> its float32 twin, for values the rule itself computes in float32
        # (XGBoost's sigmoid: onnx_ops.lower_link), which the next op may compute in float32
        self.rule32: dict[str, str] = {}
        # the float type lowerings compute in: DOUBLE, or FLOAT while an op is lowered on the
        # float32 level (export_onnx(precision="float32"): build_onnx narrows its constants)
        self.working = TensorProto.DOUBLE
        self._casts: dict[tuple[str, int], str] = {}  # (tensor, to) -> its Cast, made once
        # a matrix Concat'ed from parts (string inputs: onnx_strings.py) -> (part, column)
        # per column, so a column selection reads the parts (onnx_ops.lower_select)
        self.pieces: dict[str, list[tuple[str, int]]] = {}
        # a CONCAT's output -> its parts, for a LINEAR reading it (onnx_ops.lower_linear)
        self.concat_parts: dict[str, list[str]] = {}
        # a ONE_HOT's output -> (its IR node, its input tensor), for a LINEAR reading the
        # indicators, which picks weight rows instead (onnx_lookup.one_hot_product)
        self.one_hots: dict[str, tuple[Any, str]] = {}
        # a string column's code tensor -> (its string input, the LabelEncoder's keys and
        # codes), so a one-hot product can map the strings to its table rows directly
        self.string_codes: dict[str, tuple[str, list[str], list[float]]] = {}
        self._count = 0

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def op(self, op_type: str, inputs: list[str], *, domain: str = "", **attrs: Any) -> str:
        out = self.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, domain=domain,
                                           **attrs))
        return out

    def subgraph(self, build: Callable[[], str], elem_type: int) -> Any:
        """A graph (an If branch) of the nodes ``build`` emits, its output the tensor it
        returns; its constants join the outer graph's initializers (outer scope)."""
        outer, self.nodes = self.nodes, []
        casts = dict(self._casts)  # a Cast made inside the branch is not seen outside it
        try:
            out = build()
            nodes = self.nodes
        finally:
            self.nodes, self._casts = outer, casts
        return helper.make_graph(nodes, self.fresh("branch"), [],
                                 [helper.make_tensor_value_info(out, elem_type, None)])

    def const(self, value: np.ndarray) -> str:
        name = self.fresh("c")
        arr = np.asarray(value)
        if arr.dtype == object or arr.dtype.kind == "U":
            t = helper.make_tensor(name, TensorProto.STRING, arr.shape,
                                   [str(v).encode() for v in arr.reshape(-1)])
        else:
            # a 0-d array stays a scalar (np.ascontiguousarray would make it 1-d, and
            # Gather with a [1] index keeps the axis a scalar index removes)
            t = numpy_helper.from_array(np.ascontiguousarray(arr) if arr.ndim else arr, name)
        self.initializers.append(t)
        return name

    def row(self, value: Any) -> str:
        """A scalar or per-column float64 parameter, broadcast over rows."""
        v = np.asarray(value, np.float64)
        return self.const(v if v.ndim == 0 else v.reshape(1, -1))

    def columns(self, x: str, start: int, stop: int) -> str:
        return self.op("Slice", [x, self.const(np.asarray([start], np.int64)),
                                 self.const(np.asarray([stop], np.int64)),
                                 self.const(np.asarray([1], np.int64))])

    def to_double(self, x: str) -> str:
        return self.cast(x, TensorProto.DOUBLE)

    def to_work(self, x: str) -> str:
        """``x`` in the float type the current lowering computes in (``working``)."""
        return self.cast(x, self.working)

    def cast(self, x: str, to: int) -> str:
        """``x`` as ``to`` (DOUBLE or FLOAT), one Cast per tensor and type however many ops
        read it; a float32 tensor widened to double is remembered (``narrow``) so that a
        float32-comparing forest reads the float32 values as they came."""
        if self.dtypes.get(x, TensorProto.DOUBLE) == to:
            return x
        key = (x, to)
        if key not in self._casts:
            out = self.op("Cast", [x], to=to)
            self.dtypes[out] = to
            self.widths[out] = self.widths.get(x)
            if to == TensorProto.DOUBLE and self.dtypes.get(x) == TensorProto.FLOAT:
                self.narrow[out] = self.narrow.get(x, x)
            self._casts[key] = out
        return self._casts[key]

    def refuse(self, node: Any, what: str | None = None) -> None:
        reason = REFUSAL_REASONS.get(node.op) if what is None else None
        what = what or f"op {node.op.value}"
        why = f": {reason}" if reason else ""
        raise UnsupportedModelError(
            f"{self.source}: ONNX export cannot express {what} (IR node {node.name!r}){why}; "
            f"the {RUNNING_BACKENDS} backends run it: peregrine.compile(model, backend=...)")
