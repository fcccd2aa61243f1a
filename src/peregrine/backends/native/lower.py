"""The native backend's lowering: the nodes computing a set of outputs become a :class:`Plan`, a
flat list of steps, through named passes, each plan -> plan (TVM Relax's FuseOps, at this
backend's grain). A step is an IR node run as its NumPy rule, a :class:`FusedForest` (a forest
and the element-wise ops after it, one kernel) or a :class:`RowRegion` (row-wise ops, one fused
row kernel). executable.py runs every plan with one executor; ``explain()`` lists what each
pass did.

    rules           every node the outputs need, in order: each runs its rule
    fuse_rows       outputs computed by row-wise ops only: one row kernel computes them all
    fuse_epilogues  each forest and the element-wise chain after it: one kernel
    fuse_prologues  the row-wise ops between the input and a forest: one row kernel storing
                    only the forest's input, in the dtype the forest compares in

The kernels themselves are made by the executable (``Kernels``): the passes decide what is
fused, not how it is compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from peregrine.backends.native.fusion import (
    FusedForest,
    RowRegion,
    fuse_forests,
    needed_nodes,
    prologue_regions,
)
from peregrine.ir import Graph, Node, Op


class Kernels(Protocol):
    """What the passes ask the executable for (None: this cannot be fused here)."""

    fused: bool  # CompileOptions.fused_kernels

    def rows(self, outputs: tuple[str, ...]) -> Any: ...  # a RowKernel for the outputs

    def prologue(self, end: str, step: FusedForest) -> tuple[Any, np.dtype] | None: ...


@dataclass(frozen=True)
class Plan:
    outputs: tuple[str, ...]  # the graph's output names the plan computes
    ends: tuple[str, ...]  # the nodes holding them, in the same order
    steps: tuple  # Node (the INPUT, or an op run as its rule) | FusedForest | RowRegion
    report: tuple[str, ...] = ()  # "pass: what it changed", one per pass run

    @property
    def kernel_only(self) -> bool:
        """The input, then one kernel computing every output: no rules, nothing between."""
        return len(self.steps) == 2 and not isinstance(self.steps[1], Node) and \
            set(_ends(self.steps[1])) == set(self.ends)

    @property
    def blocked(self) -> bool:
        """Whether the executor runs the plan a row block at a time: a plan of rules keeps
        each op's temporaries near the cache (and a kernel SVM's (rows x support vectors)
        matrix bounded), a row region's output (a forest's input, often much wider than
        the input: one-hot columns) is written and read back a block at a time. A forest
        without a region splits rows over threads itself, so the rest of its plan runs whole."""
        if self.kernel_only:
            return False
        return any(isinstance(s, RowRegion) for s in self.steps) or \
            not any(isinstance(s, FusedForest) for s in self.steps)


PassFn = Callable[[Graph, Plan, Kernels], "tuple[Plan, str]"]


def rules(graph: Graph, outputs: tuple[str, ...]) -> Plan:
    """The starting plan: every node the outputs need, in order, each run as its rule."""
    ends = tuple(graph.outputs[o] for o in outputs)
    return Plan(outputs, ends, tuple(needed_nodes(graph, set(ends))))


def fuse_rows(graph: Graph, plan: Plan, kernels: Kernels) -> tuple[Plan, str]:
    if not kernels.fused or any(n.op is Op.TREE_ENSEMBLE for n in plan.steps):
        return plan, ""
    kernel = kernels.rows(plan.outputs)
    if kernel is None:
        return plan, ""
    nodes = graph.steps(plan.ends)
    inputs = [n for n in plan.steps if isinstance(n, Node) and n.op is Op.INPUT]
    region = RowRegion(plan.ends, nodes, kernel, None)
    return (replace(plan, steps=(*inputs, region)),
            f"{len(nodes)} op(s) -> one row kernel for {', '.join(plan.outputs)}")


def fuse_epilogues(graph: Graph, plan: Plan, kernels: Kernels) -> tuple[Plan, str]:
    if not any(isinstance(n, Node) and n.op is Op.TREE_ENSEMBLE for n in plan.steps):
        return plan, ""
    steps = fuse_forests(list(plan.steps), set(plan.ends))
    forests = [s for s in steps if isinstance(s, FusedForest)]
    fused = sum(len(s.chain) for s in forests)
    return (replace(plan, steps=tuple(steps)),
            f"{len(forests)} forest kernel(s), {fused} op(s) fused after them")


def fuse_prologues(graph: Graph, plan: Plan, kernels: Kernels) -> tuple[Plan, str]:
    if not kernels.fused or not any(isinstance(s, FusedForest) for s in plan.steps):
        return plan, ""
    steps = prologue_regions(graph, list(plan.steps), kernels.prologue)
    regions = [s for s in steps if isinstance(s, RowRegion)]
    if not regions:
        return plan, ""
    ops = sum(len(r.nodes) for r in regions)
    return (replace(plan, steps=tuple(steps)),
            f"{ops} op(s) in front of forests -> {len(regions)} row kernel(s)")


PASSES: tuple[tuple[str, PassFn], ...] = (
    ("fuse_rows", fuse_rows),
    ("fuse_epilogues", fuse_epilogues),
    ("fuse_prologues", fuse_prologues),
)


def lower(graph: Graph, outputs: tuple[str, ...], kernels: Kernels) -> Plan:
    """The plan computing ``outputs``: the rules, then each pass in order."""
    plan = rules(graph, outputs)
    report = []
    for name, run in PASSES:
        plan, changed = run(graph, plan, kernels)
        if changed:
            report.append(f"{name}: {changed}")
    return replace(plan, report=tuple(report))


def _ends(step: Any) -> tuple[str, ...]:
    return step.ends if isinstance(step, RowRegion) else (step.end,)


__all__ = ["PASSES", "Kernels", "Plan", "lower", "rules"]
