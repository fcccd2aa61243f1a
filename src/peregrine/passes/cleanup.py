"""Redundant elimination that keeps every bit: nodes no output needs, and duplicate nodes (same
op, inputs, attributes, dtype and width compute the same values)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from peregrine.ir import Forest, Graph


def dead_nodes(graph: Graph) -> tuple[Graph, str]:
    """Drop nodes no graph output depends on (an input node always stays)."""
    needed = graph.needed(graph.outputs.values())
    keep = tuple(n for n in graph.nodes if n.name in needed or not n.inputs)
    dropped = len(graph.nodes) - len(keep)
    if not dropped:
        return graph, ""
    return Graph(keep, dict(graph.outputs)), f"removed {dropped} unused node(s)"


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, Forest) or isinstance(b, Forest):
        return False  # compared by identity: forests are large and rarely duplicated
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and bool(
            np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    return type(a) is type(b) and a == b


def duplicates(graph: Graph) -> tuple[Graph, str]:
    """Merge nodes that compute the same thing from the same inputs (a ColumnTransformer that
    scales one column in two blocks, a pipeline reused by two methods)."""
    alias: dict[str, str] = {}
    seen: dict[tuple, list] = {}
    nodes = []
    for n in graph.toposort():
        inputs = tuple(alias.get(i, i) for i in n.inputs)
        key = (n.op, inputs, n.dtype, n.width)
        twin = next((m for m in seen.get(key, []) if type(m.attrs) is type(n.attrs) and all(
            _same(x, y) for (_, x), (_, y) in zip(m.attrs.items(), n.attrs.items()))
            and [k for k, _ in m.attrs.items()] == [k for k, _ in n.attrs.items()]), None)
        if twin is not None and n.inputs:
            alias[n.name] = twin.name
            continue
        n = replace(n, inputs=inputs) if inputs != n.inputs else n
        seen.setdefault(key, []).append(n)
        nodes.append(n)
    if not alias:
        return graph, ""
    outputs = {k: alias.get(v, v) for k, v in graph.outputs.items()}
    return Graph(tuple(nodes), outputs), f"merged {len(alias)} duplicate node(s)"
