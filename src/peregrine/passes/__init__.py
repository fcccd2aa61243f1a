"""Graph passes: IR -> IR rewrites run in order by the pass manager (``manager.py``), the
verifier after each; ``explain()`` lists what each changed. Every pass in ``PIPELINE`` is exact
(same answers, bit for bit, with it on or off); ``CompileOptions.passes`` /
``disable_passes`` select them."""

from __future__ import annotations

from peregrine.ir import Graph
from peregrine.options import CompileOptions
from peregrine.passes.cleanup import dead_nodes, duplicates
from peregrine.passes.columns import inject, pushdown
from peregrine.passes.manager import Pass, format_graph, run_pipeline
from peregrine.passes.simplify import drop_identity_links, fold_affine_chains

PIPELINE: tuple[Pass, ...] = (
    Pass("drop_identity_links", drop_identity_links, "LINK(identity) removed"),
    Pass("fold_affine_chains", fold_affine_chains,
         "a pure scale then a pure shift become one AFFINE"),
    Pass("duplicates", duplicates, "nodes computing the same thing merged"),
    Pass("inject", inject, "steps before a tree ensemble compute only the features it splits "
         "on (unused one-hot, scaler, imputer... columns are never computed)"),
    Pass("pushdown", pushdown, "a column selection in front of a tree ensemble folded into its "
         "feature indices"),
    Pass("dead_nodes", dead_nodes, "nodes no output needs removed"),
)


def run_passes(graph: Graph, options: CompileOptions | None = None,
               report: list[dict] | None = None) -> Graph:
    """The pipeline's passes selected by ``options`` on ``graph`` (see manager.run_pipeline)."""
    return run_pipeline(graph, PIPELINE, options, report)


__all__ = ["PIPELINE", "Pass", "format_graph", "run_passes"]
