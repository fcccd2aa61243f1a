"""One node type and an immutable graph. Passes return new graphs; one toposort; one verifier."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from peregrine.ir.forest import Forest
from peregrine.ir.ops import Link, Op


@dataclass(frozen=True, eq=False)
class Node:
    name: str
    op: Op
    inputs: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = field(default_factory=dict)
    dtype: str = "float64"  # numpy dtype name of the output
    width: int | None = None  # output columns; rows are the batch

    def with_attrs(self, **attrs: Any) -> Node:
        return replace(self, attrs={**self.attrs, **attrs})


@dataclass(frozen=True, eq=False)
class Graph:
    nodes: tuple[Node, ...]
    outputs: Mapping[str, str]  # public output name -> node name

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @property
    def by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def toposort(self) -> list[Node]:
        """Nodes in dependency order (inputs first); raises ValueError on cycles."""
        by_name = self.by_name
        order: list[Node] = []
        state: dict[str, int] = {}  # 1 = visiting, 2 = done

        def visit(name: str) -> None:
            s = state.get(name)
            if s == 2:
                return
            if s == 1:
                raise ValueError(f"IR graph has a cycle through {name!r}")
            state[name] = 1
            for dep in by_name[name].inputs:
                visit(dep)
            state[name] = 2
            order.append(by_name[name])

        for n in self.nodes:
            visit(n.name)
        return order

    def forests(self) -> list[Forest]:
        return [n.attrs["forest"] for n in self.nodes if n.op is Op.TREE_ENSEMBLE]


class GraphBuilder:
    """Small helper frontends use to append nodes with unique names."""

    def __init__(self) -> None:
        self._nodes: list[Node] = []
        self._count = 0

    def add(self, op: Op, inputs: tuple[str, ...] = (), *, dtype: str = "float64",
            width: int | None = None, **attrs: Any) -> str:
        self._count += 1
        name = f"{op.value}_{self._count}"
        self._nodes.append(Node(name, op, tuple(inputs), attrs, dtype, width))
        return name

    def input(self, n_features: int) -> str:
        self._nodes.append(Node("X", Op.INPUT, (), {}, "float64", n_features))
        return "X"

    def build(self, outputs: Mapping[str, str]) -> Graph:
        graph = Graph(tuple(self._nodes), dict(outputs))
        verify(graph)
        return graph


def verify(graph: Graph) -> None:
    """Check names, references, op attributes and widths. Raises ValueError on the first problem."""
    names = [n.name for n in graph.nodes]
    if len(set(names)) != len(names):
        raise ValueError("IR graph has duplicate node names")
    by_name = graph.by_name
    for n in graph.nodes:
        for dep in n.inputs:
            if dep not in by_name:
                raise ValueError(f"IR node {n.name!r} reads unknown node {dep!r}")
        check = _ATTR_CHECKS.get(n.op)
        if check is not None:
            check(n, [by_name[d] for d in n.inputs])
    for out, node in graph.outputs.items():
        if node not in by_name:
            raise ValueError(f"IR output {out!r} names unknown node {node!r}")
    graph.toposort()


def _one_input(n: Node, ins: list[Node]) -> None:
    if len(ins) != 1:
        raise ValueError(f"IR node {n.name!r} ({n.op.value}) takes one input, has {len(ins)}")


def _check_tree(n: Node, ins: list[Node]) -> None:
    _one_input(n, ins)
    forest = n.attrs.get("forest")
    if not isinstance(forest, Forest):
        raise ValueError(f"IR node {n.name!r} needs a Forest attribute")
    forest.validate()
    if ins[0].width is not None and forest.n_features > ins[0].width:
        raise ValueError(f"Forest reads {forest.n_features} features, input has {ins[0].width}")
    if n.width != forest.n_outputs:
        raise ValueError(f"IR node {n.name!r} width {n.width} != forest outputs")


def _check_link(n: Node, ins: list[Node]) -> None:
    _one_input(n, ins)
    if not isinstance(n.attrs.get("kind"), Link):
        raise ValueError(f"IR node {n.name!r} needs a Link kind")


def _check_affine(n: Node, ins: list[Node]) -> None:
    _one_input(n, ins)
    for key in ("scale", "shift"):
        np.asarray(n.attrs.get(key, 0.0), dtype=np.float64)


_ATTR_CHECKS = {
    Op.TREE_ENSEMBLE: _check_tree,
    Op.LINK: _check_link,
    Op.AFFINE: _check_affine,
    Op.BINARY_PROBA: _one_input,
    Op.ARGMAX: _one_input,
    Op.THRESHOLD: _one_input,
    Op.REPLACE_WITH_NAN: _one_input,
    Op.ORDINAL_ENCODE: _one_input,
}
