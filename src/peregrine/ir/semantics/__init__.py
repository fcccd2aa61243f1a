"""The IR's op semantics: one definition per op (attributes, validation, width/dtype inference
and the NumPy rule; see ``base.py``), grouped by area, and ``evaluate``, which runs a graph by
those rules. The rules are the oracle for tests and the fallback of every backend; torch and
native take their shared constants and helpers from these modules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from peregrine.ir.ops import Op
from peregrine.ir.semantics import (
    core,
    ctr,
    kernels,
    meta,
    neighbours,
    nn,
    pipeline,
    transformers,
    trees,
)
from peregrine.ir.semantics.base import DEFS, Attrs
from peregrine.options import CompileOptions

if TYPE_CHECKING:
    from peregrine.ir.graph import Graph

_MISSING = [op.name for op in Op if op not in DEFS]
if _MISSING:  # every op has a definition, or importing the IR fails
    raise RuntimeError(f"ops without a definition in ir/semantics: {', '.join(_MISSING)}")


def evaluate(graph: Graph, X: np.ndarray, outputs: tuple[str, ...],
             options: CompileOptions | None = None) -> dict[str, np.ndarray]:
    """Evaluate the graph outputs named in ``outputs`` on X (2-D) by the op rules."""
    options = options or CompileOptions()
    values: dict[str, Any] = {}
    needed = graph.needed(graph.outputs[o] for o in outputs)
    for node in graph.toposort():
        if node.name not in needed:
            continue
        if node.op is Op.INPUT:
            values[node.name] = X
            continue
        values[node.name] = node.attrs.rule(node, [values[i] for i in node.inputs], options)
    return {o: values[graph.outputs[o]] for o in outputs}

__all__ = ["DEFS", "Attrs", "core", "ctr", "evaluate", "kernels", "meta", "neighbours", "nn", "pipeline",
           "transformers", "trees"]
