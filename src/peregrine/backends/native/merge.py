"""The graph as the native backend runs it: a WEIGHTED_SUM of one-tree forests (weights 1.0)
becomes one forest of those trees, then the sum's division.

Bagging over decision trees sums its members' outputs this way, and so does AdaBoost once
``fold_votes`` has put each tree's vote in its leaves; each member was one kernel writing a
(rows, outputs) array, and the sum a NumPy rule over them (50 passes over the batch and
the outputs for 50 trees). The merged forest reads the batch once.

Exact here, and only here: this backend's forest kernels add trees in order from the base
score, row by row (``program.splits_trees``: tree-range threads only where a schedule asks),
so the merged sum is ``((0.0 + l1) + l2) + ...``, where the WEIGHTED_SUM computed
``(o1 * 1.0 + o2 * 1.0) + ...`` with each member's output ``o = 0.0 + l`` (a one-tree SUM
from a +0.0 base, or a one-tree AVERAGE: ``(0.0 + l) / 1 + 0.0``): the same additions, as
``0.0 + l`` differs from ``l`` only for -0.0 and a running sum that starts at ``0.0 + l1``
never is -0.0. The torch backend's vector-leaf sum is not in tree order, so this is not a
graph pass (passes/) but this backend's rewrite. Only at the exact precision levels: under
``Precision.FLOAT32`` a forest sums in float32 where the WEIGHTED_SUM adds in float64.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from peregrine.ir import Graph, Node, Op
from peregrine.ir.forest import Aggregation, Forest

FLOAT64 = np.dtype(np.float64)


def merge_tree_sums(graph: Graph) -> tuple[Graph, dict[str, str]]:
    """``graph`` with each such sum's members merged; and, per merged forest, a line for
    ``explain()``."""
    readers, by_name = graph.readers(), graph.by_name
    replaced: dict[str, tuple[Node, Node]] = {}
    dropped: set[str] = set()
    notes: dict[str, str] = {}
    for w in graph.nodes:
        if w.op is not Op.WEIGHTED_SUM or len(w.inputs) < 2 or len(set(w.inputs)) != len(
                w.inputs) or any(float(x) != 1.0 for x in w.attrs.weights):
            continue
        members = [by_name[i] for i in w.inputs]
        if not all(m.op is Op.TREE_ENSEMBLE and m.inputs == members[0].inputs
                   for m in members):
            continue
        forests = [m.attrs.forest for m in members]
        if not all(_one_tree_from_zero(f) and _same_reading(f, forests[0]) for f in forests):
            continue
        name = _fresh(f"{w.name}_trees", by_name)
        merged = Node(name, Op.TREE_ENSEMBLE, members[0].inputs, {"forest": _concat(forests)},
                      "float64", forests[0].n_outputs)
        total = w.with_attrs(weights=[1.0])
        replaced[w.name] = (merged, dataclasses.replace(total, inputs=(name,)))
        # a member something else reads too (BaggingClassifier's log-probabilities) stays;
        # a plan computes only the nodes its outputs need
        dropped |= {m.name for m in members if readers.get(m.name, 0) == 1}
        notes[name] = (f"{len(members)} one-tree forests summed by {w.name} merged into one "
                       "(the same additions, in tree order)")
    if not replaced:
        return graph, {}
    nodes: list[Node] = []
    for n in graph.nodes:
        if n.name in dropped:
            continue
        nodes.extend(replaced.get(n.name, (n,)))
    return Graph(tuple(nodes), dict(graph.outputs)), notes


def _one_tree_from_zero(f: Forest) -> bool:
    """One tree whose output is ``0.0 + leaf``: a SUM from a +0.0 base, or an AVERAGE (divided
    by 1, then +0.0 added), in float64, without LightGBM's or the categorical extras."""
    base = np.asarray(f.base_score, dtype=np.float64)
    return (f.n_trees == 1 and np.dtype(f.sum_dtype) == FLOAT64
            and f.value_width == f.n_outputs and bool(np.all((base == 0) & ~np.signbit(base)))
            and f.aggregation in (Aggregation.SUM, Aggregation.AVERAGE)
            and not f.has_categorical and not f.has_missing_zero)


def _same_reading(f: Forest, g: Forest) -> bool:
    """Trees that read and compare the input alike, with as many outputs."""
    return (f.n_outputs == g.n_outputs and f.comparison == g.comparison
            and np.dtype(f.input_dtype) == np.dtype(g.input_dtype))


def _concat(forests: list[Forest]) -> Forest:
    offsets = np.cumsum([0] + [f.n_nodes for f in forests])

    def shifted(side: str) -> np.ndarray:
        parts = [np.where(getattr(f, side) >= 0, getattr(f, side) + off, -1)
                 for f, off in zip(forests, offsets)]
        return np.concatenate(parts).astype(np.int32)

    k = forests[0].n_outputs
    return dataclasses.replace(
        forests[0],
        feature=np.concatenate([f.feature for f in forests]).astype(np.int32),
        threshold=np.concatenate([f.threshold for f in forests]),
        left=shifted("left"), right=shifted("right"),
        nan_left=np.concatenate([f.nan_left for f in forests]),
        value=np.concatenate([f.value for f in forests]).astype(np.float64),
        tree_offsets=offsets.astype(np.int64),
        tree_group=np.zeros(len(forests), dtype=np.int32),
        n_features=max(f.n_features for f in forests),
        base_score=np.zeros(k), aggregation=Aggregation.SUM, sum_dtype=FLOAT64,
        missing_zero=None, cat_index=None, cat_bitsets=None, cat_unknown_left=None)


def _fresh(name: str, taken: dict[str, Node]) -> str:
    out, i = name, 1
    while out in taken:
        i += 1
        out = f"{name}{i}"
    return out
