"""The float32 export level (``export_onnx(precision="float32")``, docs/export.md): which ops
compute in float32, how their lowerings are narrowed, and what validation then checks.

The default export computes every rule in double and is held to rtol 1e-5 / atol 1e-6. On the
float32 level the file takes a float32 input and the arithmetic ops below run in float32
(float32 GEMM, float32 constants): the same lowerings, their double constants rounded to
float32 and their Casts to double made Casts to float (``narrow_lowering``). An op takes the
float32 path only where every float input it reads is already float32 and no forest reads
its value, directly or further down (``float32_nodes``): trees keep their exact comparisons
(a float32 input against ``Forest.thresholds_for``, as the default's float32 input does) and
their double sums. Validation then measures the error (max abs and max rel per output against
the exact compiled model on the validation rows) instead of bounding it, and still requires
identical labels and the same NaN/inf positions (``float32_mismatch``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, numpy_helper

from peregrine.ir.ops import Link, Op
from peregrine.options import Precision

# ops whose lowerings are type-generic arithmetic: run in float32 on the float32 level
FLOAT32_OPS = frozenset({
    Op.LINEAR, Op.AFFINE, Op.CENTER_SCALE, Op.CLIP, Op.LINK, Op.BINARY_PROBA, Op.ARGMAX,
    Op.THRESHOLD, Op.SELECT, Op.CONCAT, Op.NORMALIZE, Op.UFUNC, Op.BINARIZE, Op.KERNEL,
    Op.WEIGHTED_SUM,
})
# ops whose decisions must stay the library's: nothing feeding them is narrowed
_EXACT_READERS = frozenset({Op.TREE_ENSEMBLE})


def parse_precision(precision: Any) -> Precision:
    """Precision.FLOAT32 for the float32 level; AUTO and FLOAT64 are the exact export."""
    try:
        level = precision if isinstance(precision, Precision) else Precision(str(precision))
    except ValueError:
        level = None
    # Precision has compile-only levels too (FAST, FLOAT16, BFLOAT16): the export has these
    if level not in (Precision.AUTO, Precision.FLOAT64, Precision.FLOAT32):
        raise ValueError(f"precision={precision!r}: use 'auto' (exact, the default), "
                         "'float64' (the same) or 'float32'")
    return level


def float32_nodes(steps: list[Any]) -> set[str]:
    """The IR nodes that may compute in float32: an op of FLOAT32_OPS from which no forest
    (or other exact reader) is reachable."""
    readers: dict[str, list[Any]] = {}
    for n in steps:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)
    tainted: set[str] = set()  # nodes whose value reaches an exact reader
    for n in reversed(steps):  # steps are in topological order: readers come later
        if any(r.op in _EXACT_READERS or r.name in tainted for r in readers.get(n.name, [])):
            tainted.add(n.name)
    return {n.name for n in steps if n.op in FLOAT32_OPS and n.name not in tainted}


def feeds_pair_sigmoid(e: Any, n: Any, w: np.ndarray) -> bool:
    """Whether a float32 LINEAR is a binary logistic's score that may be written as the pair
    [-v, v] (onnx_ops.lower_linear), whose sigmoid is the probabilities [1 - p, p]: one
    output column, not a result, read by one logistic LINK (and possibly THRESHOLDs, the
    labels, which read column 1) whose value only BINARY_PROBA reads. Besides fewer nodes,
    1 - p is then sigmoid(-v), within float32's relative error where the float32
    ``1 - p`` is 0.0 (v > 16.6: a log of it was -inf for -17)."""
    users = e.consumers.get(n.name, [])
    links = [u for u in users if u.op is Op.LINK]
    if (w.shape[1] != 1 or n.name in e.results or len(links) != 1
            or any(u.op not in (Op.LINK, Op.THRESHOLD) for u in users)):
        return False
    link = links[0]
    probas = e.consumers.get(link.name, [])
    return bool(link.attrs.kind is Link.SIGMOID and not link.attrs.float32
                and float(link.attrs.scale) == 1.0 and link.name not in e.results and probas
                and all(p.op is Op.BINARY_PROBA for p in probas))


def narrow_lowering(e: Any, first_node: int, first_const: int) -> None:
    """Make the nodes and constants a lowering appended (from the given positions) float32:
    double constants rounded to float32 (with their names), Casts to double made Casts to
    float."""
    for k in range(first_const, len(e.initializers)):
        t = e.initializers[k]
        if t.data_type == TensorProto.DOUBLE:
            arr = numpy_helper.to_array(t)
            with np.errstate(over="ignore"):
                e.initializers[k] = numpy_helper.from_array(arr.astype(np.float32), t.name)
    for node in e.nodes[first_node:]:
        if node.op_type == "Cast":
            for a in node.attribute:
                if a.name == "to" and a.i == TensorProto.DOUBLE:
                    a.i = TensorProto.FLOAT


def float32_mismatch(have: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where a float32-level value is wrong in kind, not by rounding: NaN against a number,
    or an infinity the other side does not have."""
    have = have.astype(np.float64)
    want = want.astype(np.float64)
    nan = np.isnan(have) != np.isnan(want)
    inf = (np.isinf(have) | np.isinf(want)) & (have != want) & ~np.isnan(want)
    return nan | inf
