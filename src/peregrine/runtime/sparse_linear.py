"""The sparse linear path (docs/sparse.md): a program whose input is read only by linear layers
(linear models, naive Bayes, a pipeline whose first op on the input is LINEAR) takes a sparse
matrix through scipy's CSR x dense product and runs the rest of its graph on the K-wide result.

The split is the text boundary's (``ir/linear_split.py``): the layers' weights stack into the
projection W and each layer keeps its bias as an AFFINE shift, added after the product. On sparse
input scikit-learn computes ``safe_sparse_dot(X, coef_.T) + intercept_``, i.e. this very scipy
call (``csr_matvecs``: each output adds ``data * W[col]`` over the row's entries in index order,
from 0.0), then the bias: the scores are scikit-learn's own sums. The (rows x features) matrix
is never dense; it is taken while density x K (outputs of the product) is below ``DENSITY_K``
(above it, BLAS on dense blocks is faster; both are within the tolerance).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from peregrine.backends import get_backend
from peregrine.ir.linear_split import linear_readers, split_linear
from peregrine.ir.ops import Op

# density (stored entries / (rows x features)) x K at or above which the dense blocks are used
# instead. Measured (benchmarks/bench_sparse.py --crossover, Zen 4, docs/sparse.md): the sparse
# product costs ~1.4 ns per entry and output, the dense blocks ~2 ns per element to fill plus
# BLAS; with K = 3 or 20 the sparse path won at every density up to 1.0, with K = 100 up to 0.2
# and lost from 0.4: density x K = 25 sits between
DENSITY_K = 25.0


@dataclass(frozen=True)
class LinearPlan:
    projection: np.ndarray  # (features, K) float64: the stacked LINEAR weights
    rest: Any  # a CompiledModel of the graph after the product, same backend and options


def linear_plan(model: Any) -> LinearPlan | None:
    """The model's sparse linear plan, built on first use and kept on the model; None where
    the input is read by anything but LINEAR layers."""
    try:
        return model.__dict__["_sparse_plan"]
    except KeyError:
        pass
    plan = model.__dict__["_sparse_plan"] = _build(model)
    return plan


def _build(model: Any) -> LinearPlan | None:
    spec = model.spec
    if spec.sparse_absent != "zero" or spec.category_maps or spec.input_checks or \
            any(m.dtype == "input" or m.strings for m in spec.methods.values()):
        return None  # float32-keeping transformers, codes and row checks: the dense blocks
    x = next(n.name for n in spec.graph.nodes if n.op is Op.INPUT)
    readers = linear_readers(spec.graph, x)
    if readers is None:
        return None
    graph, proj = split_linear(spec.graph, x, readers)
    # the stored values were checked at the boundary (runtime/sparse.py as_csr)
    rest_spec = replace(spec, graph=graph, n_features=int(proj.shape[1]), feature_names=None,
                        allow_nan=True, allow_inf=True)
    exe = get_backend(model.backend).build(rest_spec, model.options, model.device)
    rest = type(model)(rest_spec, model.backend, exe, model.options, model.device)
    return LinearPlan(np.ascontiguousarray(proj), rest)


def linear_call(model: Any, name: str, csr: Any) -> Any:
    """``model.<name>(csr)`` by the sparse linear path, or None where it does not apply (the
    caller makes dense blocks)."""
    plan = linear_plan(model)
    if plan is None:
        return None
    rows, cols = csr.shape
    if csr.nnz * plan.projection.shape[1] >= DENSITY_K * rows * cols:
        return None
    # scipy's csr @ dense (float32 data upcast exactly to float64), as safe_sparse_dot does
    scores = np.asarray(csr @ plan.projection, dtype=np.float64)
    return plan.rest._call(name, scores)
