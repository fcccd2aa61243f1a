"""Which ops run inside one kernel: each forest and the element-wise chain after it (links,
affine, binary probabilities, a classifier's decision) become one :class:`FusedForest`, encoded
as its epilogue program (epilogue.py); row-wise ops become a :class:`RowRegion`. Graph-level,
shared by the in-process lowering (lower.py) and the ahead-of-time libraries (aot.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peregrine.backends.native import epilogue
from peregrine.ir import Node, Op
from peregrine.ir.spec import GUARD

FLOAT64 = np.dtype(np.float64)


@dataclass
class FusedForest:
    """A forest and the element-wise ops fused after it; computes the value of ``end``."""

    tree: Node
    chain: list[Node]
    end: str
    program: np.ndarray
    width: int

    @property
    def dtype(self) -> np.dtype:
        """What the program computes: int64 class indices when a decision ends it (the kernel
        writes them as float64 numbers), else float64."""
        last = self.chain[-1] if self.chain else self.tree
        return np.dtype(np.int64) if last.op in epilogue.DECISIONS else FLOAT64


def fuse_plan(graph, wanted: set[str], decisions: bool = True) -> list:
    """The nodes computing ``wanted`` (node names) in order, with each forest and the
    element-wise chain after it fused into one :class:`FusedForest` (what runs in its
    kernel). Shared with the ahead-of-time libraries (aot.py), which lower the same plan;
    ``decisions``: whether a THRESHOLD / ARGMAX may end a fused chain."""
    return fuse_forests(needed_nodes(graph, wanted), wanted, decisions)


def needed_nodes(graph, wanted: set[str]) -> list[Node]:
    """Every node (the input included) computing ``wanted``, in dependency order."""
    needed, stack = set(), list(wanted)
    while stack:
        name = stack.pop()
        if name not in needed:
            needed.add(name)
            stack.extend(graph.node(name).inputs)
    return [n for n in graph.toposort() if n.name in needed]


def fuse_forests(order: list, wanted: set[str], decisions: bool = True) -> list:
    """``order`` (nodes in dependency order) with each forest and the element-wise chain after
    it, as far as its epilogue encodes (epilogue.py) and no other node reads into it, replaced
    by one :class:`FusedForest`."""
    users = {n.name: [u for u in order if n.name in u.inputs] for n in order}
    plan, skip = [], set()
    for node in order:
        if node.name in skip:
            continue
        if node.op is not Op.TREE_ENSEMBLE:
            plan.append(node)
            continue
        chain, cur, enc = [], node, epilogue.encode([], node.width or 1)
        while cur.name not in wanted and len(users[cur.name]) == 1:
            nxt = users[cur.name][0]
            trial = epilogue.encode(chain + [nxt], node.attrs.forest.n_outputs, decisions)
            if trial is None or len(nxt.inputs) != 1:
                break
            chain, cur, enc = chain + [nxt], nxt, trial
        skip.update(n.name for n in chain)
        plan.append(FusedForest(node, chain, cur.name, enc[0], enc[1]))
    return plan


@dataclass
class RowRegion:
    """Row-wise ops run as one fused row kernel (kernels/rowwise.py): each input row is read
    once and only the region's results are stored, where the ops' rules would make one pass
    over memory each and keep every intermediate. Two uses (lower.py): every op of an output
    computed by row-wise ops alone, and the ops computing a forest's input (scalers, one-hot,
    selections, ColumnTransformer blocks...), stored in the dtype the forest compares in."""

    ends: tuple[str, ...]  # the nodes computed (a forest's input; or the outputs)
    nodes: list[Node]  # every node of the region, in order
    kernel: object  # kernels.fused.RowKernel
    dtype: np.dtype | None  # what the kernel stores, for a forest's input (else per output)

    @property
    def end(self) -> str:
        return self.ends[0]

    @property
    def width(self) -> int:
        return int(self.nodes[-1].width or 1)


def prologue_regions(graph, plan: list, make_kernel) -> list:
    """``plan`` with the ops between the input and each forest replaced by a
    :class:`RowRegion` where ``make_kernel(end, forest_step)`` fuses them (it returns the
    kernel and its output dtype, or None). A region's nodes other than its end must be read
    only inside the region (otherwise they are needed on their own and stay rules)."""
    out = list(plan)
    for step in plan:
        if not isinstance(step, FusedForest):
            continue
        end = step.tree.inputs[0]
        region = graph.steps([end])
        names = {n.name for n in region}
        if not region or not names <= {getattr(s, "name", None) for s in out}:
            continue  # the input itself, or nodes another region took
        inner = names - {end}
        readers = [s for s in out if getattr(s, "name", None) not in names]
        # another output reading an inner node keeps it; guard outputs do not count: only
        # runtime/guards.py reads them, by the reference rules, on rows beyond the model's bound
        if any(set(_inputs(s)) & inner for s in readers) or \
                any(graph.outputs[o] in inner for o in graph.outputs if not o.startswith(GUARD)):
            continue
        made = make_kernel(end, step)
        if made is None:
            continue
        kernel, dtype = made
        first = min(out.index(s) for s in out if getattr(s, "name", None) in names)
        kept = [s for s in out if getattr(s, "name", None) not in names]
        kept.insert(first, RowRegion((end,), region, kernel, np.dtype(dtype)))
        out = kept
    return out


def _inputs(step) -> tuple[str, ...]:
    if isinstance(step, FusedForest):
        return tuple(step.tree.inputs) + tuple(i for n in step.chain for i in n.inputs)
    if isinstance(step, RowRegion):
        return ()
    return tuple(step.inputs)
