"""Splitting a graph's leading linear layers off its input: the mechanism shared by the text
boundary (``frontends/sklearn_text.py``: the document-term matrix) and sparse input
(``runtime/sparse_linear.py``: a scipy.sparse matrix), docs/text.md and docs/sparse.md.

When every reader of the input is a ``LINEAR`` layer (``x @ W_i + b_i``), their weights stack
into one projection ``W = [W_1 | W_2 | ...]`` and each layer keeps only its bias, as an
``AFFINE`` shift of its slice of ``x @ W``: added after the product, exactly as scikit-learn adds
``intercept_`` (or ``class_log_prior_``) after ``safe_sparse_dot(X, coef_.T)``. The caller
computes ``x @ W`` itself, on a sparse matrix, with scipy's CSR x dense product: the very call
scikit-learn's decision functions make on sparse input, so the sums are added in its order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.ir.graph import Graph, Node, verify
from peregrine.ir.ops import Op
from peregrine.ir.semantics import DEFS


def linear_readers(graph: Graph, source: str) -> list[Node] | None:
    """The readers of ``source`` when all of them are LINEAR layers (else None)."""
    readers = [n for n in graph.nodes if source in n.inputs]
    if readers and all(n.op is Op.LINEAR for n in readers):
        return readers
    return None


def split_linear(graph: Graph, source: str, readers: list[Node],
                 drop: tuple[str, ...] = ()) -> tuple[Graph, np.ndarray]:
    """(the graph reading ``X`` = source @ projection, the float64 projection): ``readers``
    (every reader of ``source``, LINEAR) become AFFINE shifts by their bias of their columns of
    the new input; ``source`` and the nodes in ``drop`` are removed."""
    nodes = {n.name: n for n in graph.nodes}
    weights = [np.asarray(n.attrs.weight, np.float64) for n in readers]
    proj = np.hstack(weights)
    width = proj.shape[1]
    new_x = Node("X", Op.INPUT, (), {}, "float64", width)
    at = 0
    for n, w in zip(readers, weights):
        k = w.shape[1]
        src = "X"
        if k != width:
            src = f"{n.name}_cols"
            nodes[src] = _node(src, Op.SELECT, ("X",), k,
                               columns=np.arange(at, at + k, dtype=np.int64))
        bias = np.broadcast_to(np.asarray(n.attrs.bias, np.float64), (k,)).copy()
        nodes[n.name] = _node(n.name, Op.AFFINE, (src,), k, scale=1.0, shift=bias)
        at += k
    return with_input(graph, nodes, new_x, (source, *drop)), proj


def with_input(graph: Graph, nodes: dict[str, Node], new_x: Node,
               gone: tuple[str, ...]) -> Graph:
    """``nodes`` (in order) with ``gone`` removed and ``new_x`` first as the input ``X``."""
    for name in gone:
        nodes.pop(name, None)
    nodes["X"] = new_x
    out = Graph(tuple(nodes[n] for n in ["X"] + [n for n in nodes if n != "X"]),
                dict(graph.outputs))
    verify(out)
    return out


def _node(name: str, op: Op, inputs: tuple[str, ...], width: int, **attrs: Any) -> Node:
    typed = DEFS[op].of(attrs)
    return Node(name, op, inputs, typed, typed.OUT_DTYPE, width)
