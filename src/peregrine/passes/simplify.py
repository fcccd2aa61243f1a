"""Local simplifications: rewrites that remove work without changing any result bit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from peregrine.ir import Graph, Link, Node, Op


def _rewire(graph: Graph, alias: dict[str, str], drop: set[str]) -> Graph:
    def resolve(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    nodes = tuple(
        replace(n, inputs=tuple(resolve(i) for i in n.inputs))
        for n in graph.nodes
        if n.name not in drop
    )
    outputs = {k: resolve(v) for k, v in graph.outputs.items()}
    return Graph(nodes, outputs)


def drop_identity_links(graph: Graph) -> tuple[Graph, str]:
    """LINK(identity) is a no-op: point its readers at its input."""
    alias = {
        n.name: n.inputs[0]
        for n in graph.nodes
        if n.op is Op.LINK and n.attrs.kind is Link.IDENTITY
    }
    if not alias:
        return graph, ""
    return _rewire(graph, alias, set(alias)), f"removed {len(alias)} identity link(s)"


def fold_affine_chains(graph: Graph) -> tuple[Graph, str]:
    """AFFINE(AFFINE(x)) -> one AFFINE where that keeps every bit (see _fold_affine)."""
    out = _fold_affine(graph)
    folded = len(graph.nodes) - len(out.nodes)
    return out, (f"folded {folded} affine pair(s)" if folded else "")


def _fold_affine(graph: Graph) -> Graph:
    """AFFINE(AFFINE(x)) -> one AFFINE when the inner one has no other reader.

    In general (x*a + b)*c + d = x*(a*c) + (b*c + d) rounds differently, so the fold is applied
    only where it keeps every result bit: the inner affine is a pure scale (b = 0) and the outer
    a pure shift (c = 1), giving x*a + d with the same two roundings."""
    readers = graph.readers()
    by_name = graph.by_name
    for n in graph.nodes:
        if n.op is not Op.AFFINE:
            continue
        inner = by_name[n.inputs[0]]
        if inner.op is not Op.AFFINE or readers.get(inner.name, 0) != 1:
            continue
        c = np.asarray(n.attrs.scale, np.float64)
        d = np.asarray(n.attrs.shift, np.float64)
        a = np.asarray(inner.attrs.scale, np.float64)
        b = np.asarray(inner.attrs.shift, np.float64)
        exact = np.all(c == 1.0) and np.all(b == 0.0)  # x*a + d: same single rounding steps
        if not exact or n.attrs.float32 != "never" or inner.attrs.float32 != "never":
            continue  # a float32 AFFINE rounds between its steps: the pair rounds differently
        merged = Node(n.name, Op.AFFINE, inner.inputs, {"scale": a, "shift": d}, n.dtype, n.width)
        nodes = tuple(merged if m.name == n.name else m for m in graph.nodes
                      if m.name != inner.name)
        return _fold_affine(Graph(nodes, dict(graph.outputs)))
    return graph
