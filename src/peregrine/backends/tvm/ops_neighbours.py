"""Relax lowering of KNN (``ir/semantics/neighbours.py``): one scheduled TIR function
(``knn.py``) from the rows to the weighted average of their neighbours' values, the rule's
bits. Cosine distances, minkowski with p other than 1 or 2, and rows too wide for the kernel
(``neighbours.kernel_form``) run the rule (``ops.rule_only``)."""

from __future__ import annotations

import numpy as np
from tvm import relax

from peregrine.backends.tvm import knn
from peregrine.backends.tvm.kernel_matrix import chunked
from peregrine.backends.tvm.ops import Context, const, f64, lowering, rule_only
from peregrine.ir import Node, Op
from peregrine.ir.semantics.neighbours import kernel_form


@lowering(Op.KNN)
def lower_knn(ctx: Context, node: Node, ins: list) -> relax.Expr:
    if rule_only(node):
        assert ctx.fallback is not None
        return ctx.fallback(node, ins)
    a = node.attrs
    m, d = np.shape(a.vectors)
    values = np.asarray(a.values, np.float64)
    width = int(values.shape[1])
    key = ("knn", node.name)
    if key not in ctx.shared:
        name = f"knn_{len(ctx.shared)}"
        ctx.shared[key] = ctx.bb.add_func(knn.knn_kernel(
            int(d), int(m), int(a.k), width, kernel_form(a),
            a.weights == "distance", bool(a.normalize)).with_attr("global_symbol", name), name)
    v, _ = chunked(a.vectors)
    out = relax.TensorType((ctx.rows, width), "float64")
    return relax.call_tir(ctx.shared[key], [f64(ins[0]), const(v), const(values)], out)
