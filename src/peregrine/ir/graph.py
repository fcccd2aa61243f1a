"""One node type and an immutable graph. Passes return new graphs; one toposort; one verifier."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from peregrine.ir.forest import Forest
from peregrine.ir.ops import UFUNCS, Link, Op


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

    def splice(self, graph: Graph, input_node: str) -> dict[str, str]:
        """Append ``graph``'s nodes with fresh names, its INPUT replaced by ``input_node``
        (a fitted model used as a pipeline step). Returns its outputs under the new names."""
        rename: dict[str, str] = {}
        for n in graph.toposort():
            if n.op is Op.INPUT:
                rename[n.name] = input_node
                continue
            self._count += 1
            rename[n.name] = f"{n.name}_s{self._count}"
            self._nodes.append(replace(n, name=rename[n.name],
                                       inputs=tuple(rename[i] for i in n.inputs)))
        return {out: rename[node] for out, node in graph.outputs.items()}

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


def _check_width(n: Node, ins: list[Node], expect: int | None) -> None:
    if n.width is not None and expect is not None and n.width != expect:
        raise ValueError(f"IR node {n.name!r} ({n.op.value}) width {n.width} != {expect}")


def _same_width(n: Node, ins: list[Node]) -> None:
    _one_input(n, ins)
    _check_width(n, ins, ins[0].width)


def _check_linear(n: Node, ins: list[Node]) -> None:
    _one_input(n, ins)
    w = np.asarray(n.attrs["weight"], dtype=np.float64)
    b = np.asarray(n.attrs["bias"], dtype=np.float64)
    if w.ndim != 2 or b.shape != (w.shape[1],):
        raise ValueError(f"IR node {n.name!r}: weight {w.shape} / bias {b.shape} mismatch")
    if ins[0].width is not None and ins[0].width != w.shape[0]:
        raise ValueError(f"IR node {n.name!r}: weight has {w.shape[0]} rows, input "
                         f"{ins[0].width} columns")
    _check_width(n, ins, w.shape[1])


def _check_select(n: Node, ins: list[Node]) -> None:
    _one_input(n, ins)
    cols = np.asarray(n.attrs["columns"], dtype=np.int64).reshape(-1)
    if ins[0].width is not None and cols.size and (cols.min() < 0 or cols.max() >= ins[0].width):
        raise ValueError(f"IR node {n.name!r} selects a column outside [0, {ins[0].width})")
    _check_width(n, ins, len(cols))


def _check_concat(n: Node, ins: list[Node]) -> None:
    if not ins:
        raise ValueError(f"IR node {n.name!r} (concat) has no inputs")
    widths = [i.width for i in ins]
    _check_width(n, ins, None if None in widths else sum(widths))  # type: ignore[arg-type]


def _check_per_column(*keys: str):
    def check(n: Node, ins: list[Node]) -> None:
        _same_width(n, ins)
        for key in keys:
            v = np.asarray(n.attrs[key], dtype=np.float64)
            if v.ndim > 1 or (v.ndim == 1 and ins[0].width not in (None, v.shape[0])):
                raise ValueError(f"IR node {n.name!r}: {key} has shape {v.shape}")
    return check


def _check_categories(n: Node, ins: list[Node]) -> None:
    _one_input(n, ins)
    cols, cats = n.attrs["columns"], n.attrs["categories"]
    per_col = n.attrs["slots"] if n.op is Op.ONE_HOT else n.attrs["codes"]
    if not (len(cols) == len(cats) == len(per_col)):
        raise ValueError(f"IR node {n.name!r}: columns/categories/slots lengths differ")
    for c, s in zip(cats, per_col):
        if len(c) != len(s):
            raise ValueError(f"IR node {n.name!r}: a column's categories and slots differ")
    if n.op is Op.ONE_HOT:
        top = max([int(np.max(s, initial=-1)) for s in per_col] +
                  [int(np.max(n.attrs["unknown_slots"], initial=-1))])
        if n.width is None or top >= n.width:
            raise ValueError(f"IR node {n.name!r}: one-hot slot {top} outside width {n.width}")
    else:
        _check_width(n, ins, ins[0].width)


def _check_polynomial(n: Node, ins: list[Node]) -> None:
    _one_input(n, ins)
    p = np.asarray(n.attrs["powers"])
    if p.ndim != 2 or (ins[0].width is not None and p.shape[1] != ins[0].width):
        raise ValueError(f"IR node {n.name!r}: powers shape {p.shape} vs input {ins[0].width}")
    _check_width(n, ins, p.shape[0])


def _check_ufunc(n: Node, ins: list[Node]) -> None:
    _same_width(n, ins)
    if n.attrs.get("name") not in UFUNCS:
        raise ValueError(f"IR node {n.name!r}: ufunc {n.attrs.get('name')!r} not in UFUNCS")


def _check_normalize(n: Node, ins: list[Node]) -> None:
    _same_width(n, ins)
    if n.attrs.get("norm") not in ("l1", "l2", "max"):
        raise ValueError(f"IR node {n.name!r}: norm {n.attrs.get('norm')!r}")


_ATTR_CHECKS = {
    Op.LINEAR: _check_linear,
    Op.SELECT: _check_select,
    Op.CONCAT: _check_concat,
    Op.CENTER_SCALE: _check_per_column("center", "scale"),
    Op.CLIP: _same_width,
    Op.NORMALIZE: _check_normalize,
    Op.BINARIZE: _same_width,
    Op.IMPUTE: _check_per_column("values"),
    Op.ONE_HOT: _check_categories,
    Op.CATEGORY_MAP: _check_categories,
    Op.POLYNOMIAL: _check_polynomial,
    Op.UFUNC: _check_ufunc,
    Op.TREE_ENSEMBLE: _check_tree,
    Op.LINK: _check_link,
    Op.AFFINE: _check_affine,
    Op.BINARY_PROBA: _one_input,
    Op.ARGMAX: _one_input,
    Op.THRESHOLD: _one_input,
    Op.REPLACE_WITH_NAN: _one_input,
    Op.ORDINAL_ENCODE: _one_input,
}
