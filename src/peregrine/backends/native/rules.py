"""The NumPy rules the native executable runs for ops that are neither forests nor fused row
kernels: the op's own rule (``ir/semantics``), except where that form is a specification too
slow to serve.

KERNEL, rbf with libsvm's form: the reference sums squared differences pair by pair as libsvm's
``k_function`` does, an (rows, vectors, features) temporary; here it is the expanded form
``|x|^2 - 2 x.v + |v|^2`` (one BLAS product), as the torch backend computes it. The two differ
by rounding only (about 1e-16 (|x|^2 + |v|^2) in the distance), inside the conformance
tolerances the suite checks for both backends; 1M rows against 485 support vectors went from
25 s to 1.6 s (benchmark run 5). A row whose |x|^2 overflows (a feature past ~1.3e154) would
be inf - inf there: those rows are recomputed by differences (``rbf_fast_libsvm``).

KNN runs its kernel (``kernels/knn.py``: every distance from the differences in the rule's
order, a sorted k-best list per row), the rule's bits; wide or large euclidean models run the
rule's search with its candidate step as a kernel (``kernels/knn_search.py``), the rule's bits too;
cosine and minkowski p other than 1 and 2 run the rule.

A PyTorch network's ops (DENSE, ACTIVATION, BATCH_NORM; issue #15 item 4) run torch's own
kernels where torch is installed (``kernels/torch_nn.py``, as the torch backend does): the
network was trained and is run by torch, and its float32 outputs feed the trees after it, so
the source's bits are worth more than the rules' (NumPy's sgemm sums in another order; measured:
2 to 13 of 300 training rows changed an XGBoost leaf with the rules, none with torch's kernels).
Without torch (an artifact loaded elsewhere) they run their rules.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from functools import partial

import numpy as np

from peregrine.ir import Node, Op
from peregrine.ir.semantics.kernels import rbf_expanded, rbf_fast_libsvm
from peregrine.kernels import knn
from peregrine.options import CompileOptions

NETWORK_OPS = {Op.DENSE: "dense", Op.ACTIVATION: "activation", Op.BATCH_NORM: "batch_norm"}
_TORCH = importlib.util.find_spec("torch") is not None


def prepare(node: Node, options: CompileOptions) -> Callable[[list], np.ndarray]:
    """``run`` for one node as ``ins -> value``, with what every call would recompute done
    once: a plan's rule steps are prepared when it is made (executable.py), so one row pays
    for the arithmetic, not for converting the op's constants again."""
    a = node.attrs
    if node.op is Op.KNN:
        return _knn(node, options)
    if node.op is Op.KERNEL and a.kind == "rbf" and a.center_rows is None:
        v = np.ascontiguousarray(a.vectors, dtype=np.float64)
        vv, gamma = np.einsum("ij,ij->i", v, v), float(a.gamma)  # |v|^2: rbf_expanded's
        fn = rbf_fast_libsvm if a.form == "libsvm" else rbf_expanded
        return lambda ins: fn(np.asarray(ins[0], dtype=np.float64), v, gamma, vv)
    return partial(run, node, options=options)


def run(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    """``node`` on its input values, as the native executable computes ops it has no kernel
    for."""
    a = node.attrs
    if node.op is Op.KNN:
        return _knn(node, options)(ins)
    if node.op is Op.CTR_LOOKUP:  # its row kernel (ctr_kernel.py)
        from peregrine.backends.native.ctr_kernel import run as run_ctr

        return run_ctr(node, ins, options)
    if node.op is Op.KERNEL and a.kind == "rbf" and a.center_rows is None:
        x = np.asarray(ins[0], dtype=np.float64)
        fn = rbf_fast_libsvm if a.form == "libsvm" else rbf_expanded
        return fn(x, np.asarray(a.vectors, dtype=np.float64), float(a.gamma))
    if node.op in NETWORK_OPS and _TORCH:
        from peregrine.kernels.torch_nn import run_numpy

        return run_numpy(NETWORK_OPS[node.op], a, np.asarray(ins[0]))
    return a.rule(node, ins, options)


def _knn(node: Node, options: CompileOptions) -> Callable[[list], np.ndarray]:
    """A KNN node's run: its kernel or the euclidean search (``kernels/knn.py``), else
    (cosine, minkowski p not in {1, 2}) the rule."""
    a = node.attrs
    run = knn.runner(a, knn.threads(options))
    if run is None:
        return lambda ins: a.rule(node, ins, options)
    return lambda ins: run(ins[0])
