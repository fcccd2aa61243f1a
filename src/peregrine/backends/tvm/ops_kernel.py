"""Relax lowering of KERNEL (``ir/semantics/kernels.py``): the row-by-vector matrix from one
scheduled TIR function (``kernel_matrix.py``), then the rule's element-wise steps.

Lowered: rbf in both forms, linear, and libsvm's poly (``gamma * k + coef0`` raised by
repeated squaring, the rule's multiplications), each with KernelCenterer's centring when the
node has it. The sigmoid kernel (``np.tanh``: TVM's tanh is an approximation, 1.0 relative off
at 1e-300), the cosine kernel and scikit-learn's float ``k ** degree`` run their rule
(``ops.rule_only``).
"""

from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.relax import op as R

from peregrine.backends.tvm import kernel_matrix
from peregrine.backends.tvm.ops import Context, const, f64, lowering, rule_only, width_of
from peregrine.ir import Node, Op


def _powi(k: relax.Expr, times: int) -> relax.Expr:
    """``ir/semantics/kernels.powi``: the same products in the same order."""
    tmp, ret, t = k, None, times
    while t > 0:
        if t % 2 == 1:
            ret = tmp if ret is None else R.multiply(ret, tmp)  # ones * tmp is tmp
        tmp = R.multiply(tmp, tmp)
        t //= 2
    return R.ones_like(k) if ret is None else ret


@lowering(Op.KERNEL)
def lower_kernel(ctx: Context, node: Node, ins: list) -> relax.Expr:
    a = node.attrs
    if rule_only(node):
        assert ctx.fallback is not None
        return ctx.fallback(node, ins)
    x = f64(ins[0])
    d = width_of(x)
    m = int(a.vectors.shape[0])
    mode = ("diff" if a.form == "libsvm" else "expanded") if a.kind == "rbf" else "dot"
    gamma = float(a.gamma)
    # the kernel function centres the rows itself, but for poly, whose power comes after it
    center = a.center_rows is not None
    inside = center and a.kind != "poly"
    key = ("kernel", node.name)
    if key not in ctx.shared:
        name = f"kernel_{len(ctx.shared)}"
        ctx.shared[key] = ctx.bb.add_func(kernel_matrix.kernel_matrix(
            d, m, mode, gamma, float(a.center_all) if inside else None).with_attr(
                "global_symbol", name), name)
    v, vv = kernel_matrix.chunked(a.vectors)
    rows = np.asarray(a.center_rows if center else np.zeros(m), np.float64)
    out = relax.TensorType((ctx.rows, m), "float64")
    k = relax.call_tir(ctx.shared[key], [x, const(v), const(vv), const(rows)], out)
    if a.kind == "poly":
        k = _powi(R.add(R.multiply(const(gamma), k), const(float(a.coef0))), int(a.degree))
    if center and not inside:  # KernelCenterer.transform: means of the raw kernel
        cols = R.divide(R.sum(k, axis=1, keepdims=True), const(float(m)))
        k = R.subtract(k, const(rows.reshape(1, -1)))
        k = R.add(R.subtract(k, cols), const(float(a.center_all)))
    return k

