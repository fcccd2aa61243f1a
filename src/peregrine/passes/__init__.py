"""Graph passes: IR -> IR rewrites run in order by the pass manager (``manager.py``), the
verifier after each; ``explain()`` lists what each changed. Every pass in ``PIPELINE`` is exact
(same answers, bit for bit, with it on or off) except the ``gated`` ones, which run only under
``Precision.FAST``: they may move result bits within the conformance tolerance, and compile
reports their measured error (``measure.py``). ``CompileOptions.passes`` /
``disable_passes`` select them."""

from __future__ import annotations

from typing import Any

from peregrine.ir import Graph
from peregrine.options import CompileOptions
from peregrine.passes.cleanup import dead_nodes, duplicates
from peregrine.passes.columns import inject, pushdown
from peregrine.passes.decisions import drop_monotone_decisions
from peregrine.passes.fold_linear import fold_linear
from peregrine.passes.fold_votes import fold_votes
from peregrine.passes.manager import Pass, format_graph, run_pipeline
from peregrine.passes.measure import gated_changed, measure
from peregrine.passes.simplify import drop_identity_links, fold_affine_chains

PIPELINE: tuple[Pass, ...] = (
    Pass("drop_identity_links", drop_identity_links, "LINK(identity) removed"),
    Pass("fold_affine_chains", fold_affine_chains,
         "a pure scale then a pure shift become one AFFINE"),
    Pass("drop_monotone_decisions", drop_monotone_decisions,
         "(fast) predict's argmax/threshold reads the raw scores, not their softmax, sigmoid "
         "or normalisation", gated=True),
    Pass("fold_linear", fold_linear, "(fast) scaler -> linear, affine -> linear and linear -> "
         "linear chains feeding only scores become one LINEAR", gated=True),
    Pass("fold_votes", fold_votes, "a single tree's vote (argmax, one-hot, linear: AdaBoost's "
         "terms) folded into its leaves"),
    Pass("duplicates", duplicates, "nodes computing the same thing merged"),
    Pass("inject", inject, "steps before a tree ensemble compute only the features it splits "
         "on (unused one-hot, scaler, imputer... columns are never computed)"),
    Pass("pushdown", pushdown, "a column selection in front of a tree ensemble folded into its "
         "feature indices"),
    Pass("dead_nodes", dead_nodes, "nodes no output needs removed"),
)
GATED = frozenset(p.name for p in PIPELINE if p.gated)


def run_passes(graph: Graph, options: CompileOptions | None = None,
               report: list[dict] | None = None) -> Graph:
    """The pipeline's passes selected by ``options`` on ``graph`` (see manager.run_pipeline)."""
    return run_pipeline(graph, PIPELINE, options, report)


def report_error(exact: Graph, optimized: Graph, report: list[dict[str, Any]],
                 sample: Any = None, options: CompileOptions | None = None) -> None:
    """Append the measured error of the gated passes to ``report`` when one of them changed
    the graph (``exact``: the graph before the passes; ``sample``: the user's rows, prepared,
    or None for synthetic rows; see measure.py)."""
    if gated_changed(report, set(GATED)):
        report.append(measure(exact, optimized, sample, options))


__all__ = ["GATED", "PIPELINE", "Pass", "format_graph", "report_error", "run_passes"]
