"""Redundant elimination before a decision (gated: ``Precision.FAST``). A final ARGMAX or
THRESHOLD (the ``predict`` of a classifier: a graph output nothing else reads) that reads a
monotone map of the scores reads the scores themselves:

* ARGMAX(LINK softmax / log_softmax / exp / sigmoid with scale > 0 (x)) -> ARGMAX(x)
* ARGMAX(NORMALIZE(x)) -> ARGMAX(x): every entry of a row divided by the same positive norm
* THRESHOLD(LINK sigmoid with scale > 0 (x), v) -> THRESHOLD(x, logit(v) / scale), 0 < v < 1
  (v = 0.5: x > 0; MLPClassifier's and XGBoost's binary predict)
* ARGMAX(BINARY_PROBA(p)) -> THRESHOLD(p, 0.5): exact by itself (argmax of [1 - p, p] is 1
  iff p > 1 - p, which in floating point is p > 0.5 for every p, NaN and infinities included:
  1 - p is exact for p in [0.5, 2], and rounds to a value above p below that), and it exposes
  a sigmoid in front (LightGBM's binary predict) to the rule above

In real arithmetic each map is strictly increasing, so the decision is the same. The program
computes the map rounded, and rounding can merge two scores that differ in their last bits
(softmax: scores within about 4 ulp of the row maximum's magnitude; sigmoid: a margin in
(0, 2**-53], or (0, 2**-24] for XGBoost's float32 sigmoid, rounds to 0.5): there the exact path's
label is the first tied column of the rounded values (or "not above 0.5"), the fast path's
the larger raw score. Labels differ only on such rows (docs/passes.md, "Gated passes"). Scores
that are NaN or infinite are not covered: a NaN or an infinity in a row makes softmax's and a
normalisation's whole row NaN (label 0), while the raw argmax finds the first NaN or the
infinity; no converted model's scores are non-finite on input its library accepts."""

from __future__ import annotations

import dataclasses
import math

from peregrine.ir import Graph, Link, Node, Op

_ARGMAX_MONOTONE = (Link.SOFTMAX, Link.LOG_SOFTMAX, Link.EXP, Link.SIGMOID)


def _monotone_for_argmax(n: Node) -> bool:
    if n.op is Op.NORMALIZE:
        return True
    return (n.op is Op.LINK and n.attrs.kind in _ARGMAX_MONOTONE
            and (n.attrs.kind is not Link.SIGMOID or n.attrs.scale > 0))


def _rewrite(d: Node, by_name: dict[str, Node]) -> Node | None:
    """The decision ``d`` reading one monotone map less, or None."""
    src = by_name[d.inputs[0]]
    if d.op is Op.ARGMAX and src.op is Op.BINARY_PROBA:
        return Node(d.name, Op.THRESHOLD, src.inputs[:1], {"value": 0.5, "strict": True},
                    "int64", 1)
    if d.op is Op.ARGMAX and _monotone_for_argmax(src):
        return dataclasses.replace(d, inputs=src.inputs[:1])
    if (d.op is Op.THRESHOLD and src.op is Op.LINK and src.attrs.kind is Link.SIGMOID
            and src.attrs.scale > 0 and 0.0 < d.attrs.value < 1.0):
        v = float(d.attrs.value)
        # logit(0.5) is 0 exactly; otherwise the rounded logit adds its own tie band
        value = 0.0 if v == 0.5 else math.log(v / (1.0 - v)) / float(src.attrs.scale)
        return dataclasses.replace(d, inputs=src.inputs[:1],
                                   attrs=dataclasses.replace(d.attrs, value=value))
    return None


def drop_monotone_decisions(graph: Graph) -> tuple[Graph, str]:
    """Make each final ARGMAX / THRESHOLD read the raw scores instead of a monotone map of
    them (the map stays for the outputs that return it, e.g. predict_proba)."""
    outputs = set(graph.outputs.values())
    read = {i for n in graph.nodes for i in n.inputs}
    changed: list[str] = []
    nodes = {n.name: n for n in graph.nodes}
    for name in list(nodes):
        d = nodes[name]
        if d.op not in (Op.ARGMAX, Op.THRESHOLD) or name not in outputs or name in read:
            continue
        steps = []
        while (new := _rewrite(d, nodes)) is not None:
            steps.append(nodes[d.inputs[0]].op.value if nodes[d.inputs[0]].op is not Op.LINK
                         else nodes[d.inputs[0]].attrs.kind.value)
            d = new
        if steps:
            nodes[name] = d
            changed.append(f"{name} skips {' and '.join(steps)}")
    if not changed:
        return graph, ""
    from peregrine.passes.cleanup import dead_nodes

    graph, _ = dead_nodes(Graph(tuple(nodes.values()), dict(graph.outputs)))
    return graph, "decision(s) read the raw scores: " + "; ".join(changed)
