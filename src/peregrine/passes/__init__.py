"""Graph passes. The pipeline is a flat list of named steps; each takes a Graph and returns a new
one (graphs are immutable), and the verifier runs after every step."""

from __future__ import annotations

import sys
from collections.abc import Callable

from peregrine import config
from peregrine.ir import Graph, verify
from peregrine.passes.simplify import pm_drop_identity_links, pm_fold_affine_chains

Pass = Callable[[Graph], Graph]

PIPELINE: tuple[tuple[str, Pass], ...] = (
    ("drop_identity_links", pm_drop_identity_links),
    ("fold_affine_chains", pm_fold_affine_chains),
)


def run_passes(graph: Graph, pipeline: tuple[tuple[str, Pass], ...] = PIPELINE) -> Graph:
    verify(graph)
    for name, step in pipeline:
        graph = step(graph)
        verify(graph)
        if config.dump_ir():
            print(f"--- IR after {name} ---\n{format_graph(graph)}", file=sys.stderr)
    return graph


def format_graph(graph: Graph) -> str:
    lines = []
    for n in graph.toposort():
        attrs = ", ".join(
            f"{k}={f'<Forest {v.n_trees} trees>' if k == 'forest' else v}"
            for k, v in n.attrs.items()
        )
        lines.append(f"{n.name}: {n.dtype}[{n.width}] = {n.op.value}({', '.join(n.inputs)})"
                     + (f" {{{attrs}}}" if attrs else ""))
    for out, node in graph.outputs.items():
        lines.append(f"output {out} <- {node}")
    return "\n".join(lines)


__all__ = ["PIPELINE", "format_graph", "run_passes"]
