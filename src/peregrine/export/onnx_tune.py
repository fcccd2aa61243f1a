"""Rewrites of the finished ONNX graph that change ONNX Runtime's speed, never a value
(``match_constant_ranks``, ``drop_output_copies``, ``drop_dead_nodes``).

``match_constant_ranks``: ONNX Runtime's CPU broadcasting takes a slow path (an inner loop
per row) when a constant has fewer dimensions than the tensor it meets: measured on 100K
double rows (ONNX Runtime 1.32, 2 threads), ``Add([N, 1], scalar)`` 463 us against 18 us for
the same constant shaped ``[1, 1]``, ``Add([N, 1], bias[1])`` alike. Broadcasting prepends
ones to the shorter shape (numpy's rule, which ONNX follows), so reshaping the constant to
the other operand's rank computes the same values element for element; only the loop that
ONNX Runtime picks changes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import numpy_helper

# ops whose inputs broadcast against each other (ONNX multidirectional broadcasting)
BROADCASTING = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Where", "Equal", "Less",
    "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "BitShift",
})


def _ranks(model: Any) -> dict[str, int]:
    """Tensor name -> rank, where ONNX shape inference knows it (top-level graph)."""
    from onnx import shape_inference

    inferred = shape_inference.infer_shapes(model)
    ranks = {}
    for v in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output):
        t = v.type.tensor_type
        if t.HasField("shape"):
            ranks[v.name] = len(t.shape.dim)
    return ranks


def _used_names(nodes: Any) -> set[str]:
    """Every tensor name a node reads, subgraphs (If branches) included."""
    used: set[str] = set()
    for n in nodes:
        used.update(n.input)
        for a in n.attribute:
            if a.HasField("g"):
                used.update(_used_names(a.g.node))
            for g in a.graphs:
                used.update(_used_names(g.node))
    return used


def match_constant_ranks(model: Any) -> None:
    """Reshape (a copy of) every constant that a broadcasting op of the top-level graph reads
    to that op's output rank, in place; constants nobody reads any more are dropped."""
    graph = model.graph
    consts = {t.name: t for t in graph.initializer}
    ranks = _ranks(model)
    made: dict[tuple[str, int], str] = {}
    for node in graph.node:
        if node.op_type not in BROADCASTING or node.domain not in ("", "ai.onnx"):
            continue
        rank = ranks.get(node.output[0])
        if rank is None:
            continue
        for k, name in enumerate(node.input):
            t = consts.get(name)
            if t is None or len(t.dims) >= rank:
                continue
            key = (name, rank)
            if key not in made:
                arr = numpy_helper.to_array(t)
                new = numpy_helper.from_array(
                    np.ascontiguousarray(arr.reshape((1,) * (rank - arr.ndim) + arr.shape)),
                    f"{name}_r{rank}")
                graph.initializer.append(new)
                made[key] = new.name
            node.input[k] = made[key]
    if made:
        used = _used_names(graph.node) | {o.name for o in graph.output}
        keep = [t for t in graph.initializer if t.name in used]
        del graph.initializer[:]
        graph.initializer.extend(keep)


def _rename_everywhere(nodes: Any, old: str, new: str) -> None:
    """Top-level nodes only: callers skip names a subgraph reads (``_in_subgraph``)."""
    for n in nodes:
        for k, name in enumerate(n.input):
            if name == old:
                n.input[k] = new
        for k, name in enumerate(n.output):
            if name == old:
                n.output[k] = new


def drop_output_copies(model: Any) -> None:
    """An output ``Cast`` to the type its input already has is a copy of the whole result
    (measured: 1.2 ms for 100K x 20 doubles, as much as the scaler before it): the producer
    writes the output name itself instead. Kept where the input is the graph's input or a
    constant (nothing to rename) or another output."""
    from onnx import shape_inference

    graph = model.graph
    inferred = shape_inference.infer_shapes(model).graph
    elem = {v.name: v.type.tensor_type.elem_type
            for v in (*inferred.value_info, *inferred.input)}
    producer = {o: n for n in graph.node for o in n.output}
    outputs = {o.name for o in graph.output}
    fixed = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    renamed: set[str] = set()  # one source read by two output Casts: the first takes it
    for cast in [n for n in graph.node if n.op_type == "Cast" and n.output[0] in outputs]:
        src, dst = cast.input[0], cast.output[0]
        to = next(a.i for a in cast.attribute if a.name == "to")
        if (elem.get(src) != to or src in fixed or src in outputs or src not in producer
                or src in renamed or _in_subgraph(graph.node, src)):
            continue
        graph.node.remove(cast)
        _rename_everywhere(graph.node, src, dst)
        renamed.add(src)


def _in_subgraph(nodes: Any, name: str) -> bool:
    """Whether a subgraph (an If branch) reads ``name`` from the outer scope."""
    for n in nodes:
        for a in n.attribute:
            graphs = ([a.g] if a.HasField("g") else []) + list(a.graphs)
            if any(name in _used_names(g.node) | {o.name for o in g.output} for g in graphs):
                return True
    return False


def drop_dead_nodes(model: Any) -> None:
    """Nodes whose outputs nothing reads (no node, subgraph or graph output) are removed,
    repeatedly, and constants nobody reads after that: e.g. the Cast of a float32 input to
    double where only float32-comparing forests read the input. ONNX Runtime would run them."""
    graph = model.graph
    outputs = {o.name for o in graph.output}
    while True:
        used = _used_names(graph.node) | outputs
        dead = [n for n in graph.node if not any(o in used for o in n.output)]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
    used = _used_names(graph.node) | outputs
    keep = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
