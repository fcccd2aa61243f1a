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
    fuse_branches   the row-wise ops beside forests that read only the input (a voting or
                    stacking model's linear and naive Bayes members): one row kernel storing
                    what the rest of the plan reads, in the dtypes their rules return

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
from peregrine.kernels import rowwise


class Kernels(Protocol):
    """What the passes ask the executable for (None: this cannot be fused here)."""

    fused: bool  # CompileOptions.fused_kernels

    def rows(self, outputs: tuple[str, ...]) -> Any: ...  # a RowKernel for the outputs

    def prologue(self, end: str, step: FusedForest) -> tuple[Any, np.dtype] | None: ...

    def branch(self, ends: tuple[str, ...]) -> Any: ...  # a RowKernel storing rule dtypes


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


def fuse_branches(graph: Graph, plan: Plan, kernels: Kernels) -> tuple[Plan, str]:
    if not kernels.fused or not any(isinstance(s, FusedForest) for s in plan.steps):
        return plan, ""
    steps = list(plan.steps)
    x = next((s.name for s in steps if isinstance(s, Node) and s.op is Op.INPUT), None)
    # a forest's own input stays the prologue's business (a bare column selection is a
    # cheaper copy than a kernel loading the wide rows)
    forest_inputs = {s.tree.inputs[0] for s in steps if isinstance(s, FusedForest)}
    region: list[Node] = []
    names: set[str] = set()
    by_name = graph.by_name
    for s in steps:
        if isinstance(s, Node) and s.op is not Op.INPUT and s.name not in forest_inputs and \
                all(i == x or i in names for i in s.inputs) and \
                None not in (by_name[i].width for i in s.inputs) and \
                rowwise.fusable(s, [int(by_name[i].width) for i in s.inputs]):
            region.append(s)
            names.add(s.name)
    if not any(n.op is not Op.SELECT for n in region):
        return plan, ""
    read = {i for s in steps if not (isinstance(s, Node) and s.name in names)
            for i in _step_inputs(s)} | set(plan.ends)
    ends = tuple(n.name for n in region if n.name in read)
    if not ends:
        return plan, ""
    kernel = kernels.branch(ends)
    if kernel is None:
        return plan, ""
    first = min(k for k, s in enumerate(steps) if isinstance(s, Node) and s.name in names)
    kept = [s for s in steps if not (isinstance(s, Node) and s.name in names)]
    kept.insert(first, RowRegion(ends, region, kernel, None))
    return (replace(plan, steps=tuple(kept)),
            f"{len(region)} op(s) beside the forests -> one row kernel")


def _step_inputs(step: Any) -> tuple[str, ...]:
    if isinstance(step, FusedForest):
        return tuple(step.tree.inputs) + tuple(i for n in step.chain for i in n.inputs)
    if isinstance(step, RowRegion):
        return tuple(i for n in step.nodes for i in n.inputs)
    return tuple(step.inputs)


PASSES: tuple[tuple[str, PassFn], ...] = (
    ("fuse_rows", fuse_rows),
    ("fuse_epilogues", fuse_epilogues),
    ("fuse_prologues", fuse_prologues),
    ("fuse_branches", fuse_branches),
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
