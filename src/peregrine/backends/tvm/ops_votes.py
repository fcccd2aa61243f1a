"""Relax lowering of OVR_DECISION (``ir/semantics/kernels.py``): scikit-learn's
``_ovr_decision_function`` over one-vs-one predictions and confidences, in the rule's order.

Each class's confidence sum is built from 0.0 by subtracting (the pair's first class) or
adding (its second) each pair's confidence in pair order, as the rule's ``sums[:, i] -=``,
``sums[:, j] +=`` do; votes are counts of 0/1 comparisons (small integers: exact in any
order); then ``votes + sums / (3 * (|sums| + 1))``. So the result has the rule's bits.
"""

from __future__ import annotations

from tvm import relax
from tvm.relax import op as R

from peregrine.backends.tvm.ops import Context, const, f64, lowering
from peregrine.ir import Node, Op
from peregrine.ir.ops import class_pairs


def _column(x: relax.Expr, p: int) -> relax.Expr:
    return R.strided_slice(x, axes=[1], begin=[p], end=[p + 1])


@lowering(Op.OVR_DECISION)
def lower_ovr_decision(ctx: Context, node: Node, ins: list) -> relax.Expr:
    pred, conf = f64(ins[0]), f64(ins[1])
    k = int(node.attrs.n_classes)
    pairs = class_pairs(k)
    zero = R.zeros_like(_column(conf, 0))
    sums, votes = [zero] * k, [zero] * k
    for p, (i, j) in enumerate(pairs):
        c = _column(conf, p)
        sums[i] = R.subtract(sums[i], c)
        sums[j] = R.add(sums[j], c)
        votes[i] = R.add(votes[i], R.astype(R.equal(_column(pred, p), const(0.0)), "float64"))
        votes[j] = R.add(votes[j], R.astype(R.equal(_column(pred, p), const(1.0)), "float64"))
    s, v = R.concat(sums, axis=1), R.concat(votes, axis=1)
    scale = R.multiply(const(3.0), R.add(R.abs(s), const(1.0)))
    return R.add(v, R.divide(s, scale))

