"""Feature-selection push-down and injection (Hummingbird, OSDI'20 section 5.1).

* **Push-down**: a tree ensemble reading ``SELECT(x, cols)`` reads ``x`` itself, its node
  features renumbered through ``cols``: the same values reach the same comparisons. Only
  where the selection keeps at least half of ``x``'s columns: a narrower one is cheaper
  copied once than folded (the kernels would then walk the wide rows).
* **Injection**: a tree ensemble reads only the features its splits use. A ``SELECT`` of
  those features is put in front of it (the forest renumbered to read them) and pushed back
  towards the input through every op that computes each output column from its own input
  column (scalers, imputers, encoders, ``ops.narrow``), through ``CONCAT`` (the blocks of a
  ColumnTransformer; a block none of whose columns is used disappears) and ``ONE_HOT``
  (unused indicator columns are never computed; input columns none of whose categories is
  used are never read) — so the steps before a model compute only what it reads.

Both keep every bit: each kept value is computed by the same operations on the same inputs;
only values nothing reads are no longer computed. A selection moves only through a node it is
the only reader of (otherwise the node's other readers still need every column)."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from peregrine.ir import Graph, Node, Op
from peregrine.ir.spec import GUARD


def _forest_reading(forest, cols: np.ndarray, width: int | None):
    """``forest`` renumbered: its feature ``f`` becomes ``cols[f]``, for an input (``width``
    columns) of which ``cols`` are the columns it used to see."""
    feature = forest.feature.copy()
    internal = feature >= 0
    feature[internal] = np.asarray(cols, dtype=feature.dtype)[feature[internal]]
    n = int(cols.max(initial=-1)) + 1 if width is None else int(width)
    return dataclasses.replace(forest, feature=feature, n_features=n)


def pushdown(graph: Graph) -> tuple[Graph, str]:
    """Fold a SELECT in front of a tree ensemble into the forest's feature indices."""
    by_name = graph.by_name
    nodes, folded = [], 0
    for n in graph.nodes:
        if n.op is Op.TREE_ENSEMBLE and by_name[n.inputs[0]].op is Op.SELECT:
            sel = by_name[n.inputs[0]]
            cols = np.asarray(sel.attrs.columns, dtype=np.int64).reshape(-1)
            width = by_name[sel.inputs[0]].width
            if width is None or 2 * cols.size < width:
                # a narrow selection stays: copying k of d columns once is cheaper than the
                # forest kernels walking d-wide rows (SelectKBest(20 of 500) -> forest ran
                # 2x slower folded on the native backend; benchmarks/bench_passes.py)
                nodes.append(n)
                continue
            forest = _forest_reading(n.attrs.forest, cols, by_name[sel.inputs[0]].width)
            n = dataclasses.replace(n, inputs=sel.inputs,
                                    attrs=dataclasses.replace(n.attrs, forest=forest))
            folded += 1
        nodes.append(n)
    if not folded:
        return graph, ""
    from peregrine.passes.cleanup import dead_nodes

    out, _ = dead_nodes(Graph(tuple(nodes), dict(graph.outputs)))
    return out, f"folded {folded} column selection(s) into forests"


class _Rewriter:
    def __init__(self, graph: Graph) -> None:
        self.nodes = {n.name: n for n in graph.nodes}
        self.order = [n.name for n in graph.nodes]
        self.outputs = dict(graph.outputs)
        self.fresh = itertools.count()
        self.saved = 0  # columns no longer computed

    def add(self, op: Op, inputs: tuple[str, ...], attrs, width: int, dtype: str) -> str:
        name = f"{op.value}_inj{next(self.fresh)}"
        while name in self.nodes:
            name = f"{op.value}_inj{next(self.fresh)}"
        self.nodes[name] = Node(name, op, inputs, attrs, dtype, width)
        self.order.append(name)
        return name

    def replace_node(self, old: str, new: Node) -> None:
        """``new`` computes what node ``old`` did: readers of ``old`` read it."""
        if new.name != old:
            del self.nodes[old]
            if new.name not in self.order:
                self.order.append(new.name)
            for k, n in self.nodes.items():
                if old in n.inputs:
                    self.nodes[k] = dataclasses.replace(
                        n, inputs=tuple(new.name if i == old else i for i in n.inputs))
            self.outputs = {o: new.name if v == old else v for o, v in self.outputs.items()}
        self.nodes[new.name] = new

    def readers(self) -> dict[str, int]:
        """Readers of each node on the paths to the outputs other than guards: a guard
        (runtime/guards.py) reads the node as it was, kept whole beside the narrowed copy
        (computed only when an input is large enough to need the check)."""
        g = self.graph()
        kept = {o: v for o, v in self.outputs.items() if not o.startswith(GUARD)}
        live = g.needed(kept.values())
        return Graph(tuple(n for n in g.nodes if n.name in live), kept).readers()

    def drop(self, name: str) -> str:
        """Remove a node its narrowed copy replaces, unless a guard still reads it; the name
        the copy takes (a fresh one beside a kept node)."""
        guarded = [v for o, v in self.outputs.items() if o.startswith(GUARD)]
        if not guarded or name not in self.graph().needed(guarded):
            del self.nodes[name]
            return name
        fresh = f"{name}_inj{next(self.fresh)}"
        while fresh in self.nodes:
            fresh = f"{name}_inj{next(self.fresh)}"
        return fresh

    def graph(self) -> Graph:
        # order: toposort of the final nodes keeps every reader after what it reads
        g = Graph(tuple(self.nodes[n] for n in self.order if n in self.nodes), self.outputs)
        return Graph(tuple(g.toposort()), self.outputs)


def _select(rw: _Rewriter, src: str, cols: np.ndarray) -> str:
    node = rw.nodes[src]
    return rw.add(Op.SELECT, (src,), {"columns": np.asarray(cols, dtype=np.int64)}, len(cols),
                  node.dtype)


def _push(rw: _Rewriter, name: str) -> list[str] | None:
    """Move SELECT node ``name`` one step towards the input: None when it stays, else the
    selections it became (to push further)."""
    sel = rw.nodes[name]
    cols = np.asarray(sel.attrs.columns, dtype=np.int64).reshape(-1)
    src = rw.nodes[sel.inputs[0]]
    readers = rw.readers()
    if src.op is Op.INPUT or readers.get(src.name, 0) != 1 or src.width is None:
        return None
    if src.op is Op.SELECT:  # SELECT of SELECT: one selection
        inner = np.asarray(src.attrs.columns, dtype=np.int64).reshape(-1)
        # the inner selection's attributes: a ColumnTransformer block's frame_block stays
        rw.replace_node(name, dataclasses.replace(sel, inputs=src.inputs, attrs=dataclasses.replace(
            src.attrs, columns=inner[cols])))
        rw.drop(src.name)
        return [name]
    if src.op is Op.CONCAT:
        if np.any(np.diff(cols) <= 0):
            return None  # a reordering selection stays where it is
        widths = [rw.nodes[i].width for i in src.inputs]
        if any(w is None for w in widths):
            return None
        starts = np.concatenate([[0], np.cumsum(widths)])
        parts, below = [], []
        for k, i in enumerate(src.inputs):
            local = cols[(cols >= starts[k]) & (cols < starts[k + 1])] - starts[k]
            if local.size == widths[k]:
                parts.append(i)
            elif local.size:
                parts.append(_select(rw, i, local))
                below.append(parts[-1])
        rw.saved += int(src.width) - cols.size
        rw.replace_node(name, dataclasses.replace(src, name=rw.drop(src.name),
                                                  inputs=tuple(parts), width=int(cols.size)))
        return below
    narrowed = src.attrs.narrow(cols)
    if narrowed is None:
        return None
    attrs, in_cols = narrowed
    width_in = rw.nodes[src.inputs[0]].width
    below, more = src.inputs[0], []
    if width_in is None or len(in_cols) != width_in or np.any(in_cols != np.arange(width_in)):
        below = _select(rw, src.inputs[0], in_cols)
        more.append(below)
    rw.saved += int(src.width) - cols.size
    rw.replace_node(name, dataclasses.replace(src, name=rw.drop(src.name),
                                              inputs=(below,) + src.inputs[1:], attrs=attrs,
                                              width=int(cols.size)))
    return more


def inject(graph: Graph) -> tuple[Graph, str]:
    """Make the steps before each tree ensemble compute only the features it splits on."""
    rw = _Rewriter(graph)
    selects = []
    for n in graph.nodes:
        if n.op is not Op.TREE_ENSEMBLE:
            continue
        src = rw.nodes[n.inputs[0]]
        if src.op is Op.INPUT or src.width is None:
            continue
        forest = n.attrs.forest
        used = np.unique(forest.feature[forest.feature >= 0]).astype(np.int64)
        if used.size == src.width:
            continue
        position = np.full(int(src.width), -1, dtype=np.int64)
        position[used] = np.arange(used.size)
        sel = _select(rw, src.name, used)
        # the forest reads the selection: its features renumbered to positions in ``used``
        feature = forest.feature.copy()
        internal = feature >= 0
        feature[internal] = position[feature[internal]].astype(feature.dtype)
        small = dataclasses.replace(forest, feature=feature, n_features=int(used.size))
        rw.replace_node(n.name, dataclasses.replace(
            n, inputs=(sel,) + n.inputs[1:], attrs=dataclasses.replace(n.attrs, forest=small)))
        selects.append(sel)
    if not selects:
        return graph, ""
    moved, work = 0, list(selects)
    while work:
        below = _push(rw, work.pop())
        if below is not None:
            moved += 1
            work.extend(below)
    out = rw.graph()
    from peregrine.passes.cleanup import dead_nodes

    out, _ = dead_nodes(out)
    return out, (f"{len(selects)} forest(s) read only the features they split on; the selection "
                 f"moved through {moved} op(s), {rw.saved} column(s) no longer computed")
