"""ONNX lowerings of the kernel-method ops (``ir/semantics/kernels.py``): KERNEL (SVMs,
KernelPCA) and OVR_DECISION (one-vs-one votes), in double, in the rule's order where ONNX has
the same operation.

KERNEL's dot products are MatMul (ONNX Runtime's summation order: a few ulps, as the LINEAR
lowering). libsvm's rbf, exp(-gamma * sum((x - v)**2)), is written through the expanded
squared distance |x|^2 - 2 x.v + |v|^2 (clamped at 0), the form scikit-learn's pairwise rbf
uses: the literal form needs a (rows, vectors, features) temporary (8 GB for 100K rows, 500
support vectors, 20 features). The expanded distance carries an absolute error of a few ulps
of |x|^2 + |v|^2, so the kernel value a relative error of gamma times that (1e-13 for
gamma * (|x|^2 + |v|^2) = 100), far inside the export's 1e-5; the validation on export
checks it on the model's own rows."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from peregrine.export.onnx_graph import Emitter, lowering
from peregrine.ir.ops import Op, class_pairs

DOUBLE = TensorProto.DOUBLE


def _k(value: float) -> np.ndarray:
    return np.asarray(float(value))


def _row_sumsq(e: Emitter, x: str) -> str:
    """(n, 1): the sum of squares of each row."""
    return e.op("ReduceSum", [e.op("Mul", [x, x]), e.const(np.asarray([1], np.int64))],
                keepdims=1)


def _l2_rows(e: Emitter, x: str) -> str:
    """sklearn.preprocessing.normalize: x / ||x||, a zero norm divides by 1."""
    norm = e.op("Sqrt", [_row_sumsq(e, x)])
    zero = e.op("Equal", [norm, e.const(_k(0.0))])
    return e.op("Div", [x, e.op("Where", [zero, e.const(_k(1.0)), norm])])


def _np_l2_rows(v: np.ndarray) -> np.ndarray:
    n = np.sqrt(np.einsum("ij,ij->i", v, v))
    return v / np.where(n == 0.0, 1.0, n)[:, None]


def _powi(e: Emitter, base: str, times: int) -> str:
    """libsvm's powi (semantics.kernels.powi): the same products in the same order."""
    tmp, ret, t = base, None, times
    while t > 0:
        if t % 2 == 1:
            ret = tmp if ret is None else e.op("Mul", [ret, tmp])
        tmp = e.op("Mul", [tmp, tmp])
        t //= 2
    if ret is None:  # degree 0: ones
        return e.op("Add", [e.op("Mul", [base, e.const(_k(0.0))]), e.const(_k(1.0))])
    return ret


@lowering(Op.KERNEL)
def lower_kernel(e: Emitter, n: Any, ins: list[str]) -> str:
    a, x = n.attrs, ins[0]
    v = np.asarray(a.vectors, np.float64)
    gamma, coef0 = float(a.gamma), float(a.coef0)
    if a.kind == "rbf":
        d = e.op("Mul", [e.const(_k(-2.0)), e.op("MatMul", [x, e.const(v.T.copy())])])
        d = e.op("Add", [d, _row_sumsq(e, x)])
        d = e.op("Add", [d, e.const(np.einsum("ij,ij->i", v, v).reshape(1, -1))])
        d = e.op("Where", [e.op("Less", [d, e.const(_k(0.0))]), e.const(_k(0.0)), d])
        k = e.op("Exp", [e.op("Mul", [d, e.const(_k(-gamma))])])
    elif a.kind == "cosine":
        k = e.op("MatMul", [_l2_rows(e, x), e.const(_np_l2_rows(v).T.copy())])
    else:
        k = e.op("MatMul", [x, e.const(v.T.copy())])
        if a.kind in ("poly", "sigmoid"):
            k = e.op("Add", [e.op("Mul", [e.const(_k(gamma)), k]), e.const(_k(coef0))])
        if a.kind == "poly":
            k = (_powi(e, k, int(a.degree)) if a.form == "libsvm"
                 else e.op("Pow", [k, e.const(_k(a.degree))]))
        elif a.kind == "sigmoid":
            k = e.op("Tanh", [k])
    if a.center_rows is not None:  # KernelCenterer: column means of the raw kernel
        m = v.shape[0]
        cols = e.op("Div", [e.op("ReduceSum", [k, e.const(np.asarray([1], np.int64))],
                                 keepdims=1), e.const(_k(m))])
        k = e.op("Sub", [k, e.const(np.asarray(a.center_rows, np.float64).reshape(1, -1))])
        k = e.op("Sub", [k, cols])
        k = e.op("Add", [k, e.const(_k(a.center_all))])
    return k


@lowering(Op.OVR_DECISION)
def lower_ovr_decision(e: Emitter, n: Any, ins: list[str]) -> str:
    """votes + sums / (3 * (|sums| + 1)). ``sums``: pair by pair in the rule's order, each
    pair's confidence times a (1, k) row of -1 (class i), +1 (class j) and 0 elsewhere (x + 0.0
    leaves x, so every column sees the rule's additions in its order). ``votes``: integer
    counts, two 0/1 matrix products (exact in any order)."""
    pred, conf = ins
    k = int(n.attrs.n_classes)
    pairs = class_pairs(k)
    sums = None
    for p, (i, j) in enumerate(pairs):
        sign = np.zeros((1, k))
        sign[0, i], sign[0, j] = -1.0, 1.0
        step = e.op("Mul", [e.columns(conf, p, p + 1), e.const(sign)])
        sums = step if sums is None else e.op("Add", [sums, step])
    assert sums is not None
    first, second = np.zeros((len(pairs), k)), np.zeros((len(pairs), k))
    for p, (i, j) in enumerate(pairs):
        first[p, i], second[p, j] = 1.0, 1.0
    zero = e.op("Cast", [e.op("Equal", [pred, e.const(_k(0.0))])], to=DOUBLE)
    one = e.op("Cast", [e.op("Equal", [pred, e.const(_k(1.0))])], to=DOUBLE)
    votes = e.op("Add", [e.op("MatMul", [zero, e.const(first)]),
                         e.op("MatMul", [one, e.const(second)])])
    den = e.op("Mul", [e.const(_k(3.0)),
                       e.op("Add", [e.op("Abs", [sums]), e.const(_k(1.0))])])
    return e.op("Add", [votes, e.op("Div", [sums, den])])
