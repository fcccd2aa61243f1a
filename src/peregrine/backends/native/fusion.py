"""Which ops run inside a forest's kernel: each forest and the element-wise chain after it (links,
affine, binary probabilities, a classifier's decision) become one :class:`FusedForest`, encoded
as its epilogue program (epilogue.py). The plan is graph-level, shared by the in-process
executable (executable.py) and the ahead-of-time libraries (aot.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peregrine.backends.native import epilogue
from peregrine.ir import Node, Op

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
    needed, stack = set(), list(wanted)
    while stack:
        name = stack.pop()
        if name not in needed:
            needed.add(name)
            stack.extend(graph.node(name).inputs)
    order = [n for n in graph.toposort() if n.name in needed]
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
