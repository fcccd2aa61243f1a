"""One node type and an immutable graph. Passes return new graphs; one toposort; one verifier.
A node's attributes are its op's typed definition (``ir/semantics``), built from keywords."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from peregrine.ir.forest import Forest
from peregrine.ir.ops import Op
from peregrine.ir.semantics import DEFS, Attrs


@dataclass(frozen=True, eq=False)
class Node:
    name: str
    op: Op
    inputs: tuple[str, ...] = ()
    attrs: Any = field(default_factory=dict)  # the op's Attrs (ir/semantics); keywords given
    dtype: str = "float64"  # numpy dtype name of the output
    width: int | None = None  # output columns; rows are the batch

    def __post_init__(self) -> None:
        # keywords (a frontend's, an artifact's) become the op's typed attributes; unknown or
        # missing ones raise ValueError here
        if not isinstance(self.attrs, DEFS[self.op]):
            if isinstance(self.attrs, Attrs):
                raise ValueError(f"IR node {self.name!r} ({self.op.value}) holds "
                                 f"{type(self.attrs).__name__} attributes")
            try:
                object.__setattr__(self, "attrs", DEFS[self.op].of(self.attrs))
            except ValueError as exc:
                raise ValueError(f"IR node {self.name!r}: {exc}") from None

    def with_attrs(self, **attrs: Any) -> Node:
        return replace(self, attrs=replace(self.attrs, **attrs))


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

    def readers(self) -> dict[str, int]:
        """How many times each node is read: by other nodes' inputs and as a graph output."""
        count: dict[str, int] = {}
        for n in self.nodes:
            for i in n.inputs:
                count[i] = count.get(i, 0) + 1
        for out in self.outputs.values():
            count[out] = count.get(out, 0) + 1
        return count

    def needed(self, wanted: Iterable[str]) -> set[str]:
        """The named nodes and every node they depend on (what computing them evaluates)."""
        by_name = self.by_name
        seen: set[str] = set()
        stack = list(wanted)
        while stack:
            name = stack.pop()
            if name not in seen:
                seen.add(name)
                stack.extend(by_name[name].inputs)
        return seen

    def steps(self, wanted: Iterable[str]) -> list[Node]:
        """The nodes computing ``wanted``, in dependency order, without the input: what a
        backend evaluates, one after the other, for those outputs."""
        needed = self.needed(wanted)
        return [n for n in self.toposort() if n.name in needed and n.op is not Op.INPUT]

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
        return [n.attrs.forest for n in self.nodes if n.op is Op.TREE_ENSEMBLE]


class GraphBuilder:
    """Small helper frontends use to append nodes with unique names."""

    def __init__(self) -> None:
        self._nodes: list[Node] = []
        self._by_name: dict[str, Node] = {}  # lookups stay O(1) in large meta-estimators
        self._count = 0

    def _append(self, node: Node) -> str:
        self._nodes.append(node)
        self._by_name[node.name] = node
        return node.name

    def add(self, op: Op, inputs: tuple[str, ...] = (), *, dtype: str | None = None,
            width: int | None = None, **attrs: Any) -> str:
        self._count += 1
        name = f"{op.value}_{self._count}"
        typed = DEFS[op].of(attrs)
        if width is None:  # the op's inference from its inputs' widths, where it has one
            width = typed.infer_width([self._by_name[i].width for i in inputs])
        dtype = typed.OUT_DTYPE if dtype is None else dtype
        return self._append(Node(name, op, tuple(inputs), typed, dtype, width))

    def input(self, n_features: int) -> str:
        return self._append(Node("X", Op.INPUT, (), {}, "float64", n_features))

    def node(self, name: str) -> Node:
        """A node added so far (KeyError when there is none of that name)."""
        return self._by_name[name]

    def width(self, name: str) -> int:
        """Output columns of a node added so far; frontends combining sub-estimator outputs
        need them, and every node they add has a width."""
        width = self.node(name).width
        if width is None:
            raise ValueError(f"IR node {name!r} has no known width")
        return int(width)

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
            self._append(replace(n, name=rename[n.name],
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
        ins = [by_name[d] for d in n.inputs]
        try:
            n.attrs.check(n, ins)
            inferred = n.attrs.infer_width([i.width for i in ins])
        except (KeyError, TypeError, IndexError, AttributeError) as exc:  # malformed attrs
            raise ValueError(f"IR node {n.name!r} ({n.op.value}) has malformed attributes: "
                             f"{type(exc).__name__}: {exc}") from exc
        if n.width is not None and inferred is not None and n.width != inferred:
            raise ValueError(f"IR node {n.name!r} ({n.op.value}): width {n.width} != {inferred}")
        if n.dtype != n.attrs.OUT_DTYPE:
            raise ValueError(f"IR node {n.name!r} ({n.op.value}): dtype {n.dtype} != "
                             f"{n.attrs.OUT_DTYPE}")
    for out, node in graph.outputs.items():
        if node not in by_name:
            raise ValueError(f"IR output {out!r} names unknown node {node!r}")
    graph.toposort()
