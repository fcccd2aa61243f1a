"""The pass manager: an ordered list of named IR -> IR passes, the verifier after each, and a
report of what each changed (``explain()`` shows it). ``CompileOptions.passes`` selects passes
(None: the default pipeline) and ``CompileOptions.disable_passes`` removes some; the order is
always the pipeline's.

A pass is exact (the compiled program answers with the same bits with the pass on or off; each
pass's docstring gives the argument) unless it is ``gated``: a gated pass may move result bits
within the conformance tolerance, and runs only under ``Precision.FAST`` (its report line says
"off" otherwise); compile then measures its error (``passes/measure.py``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass

from peregrine import config
from peregrine.errors import UnsupportedModelError
from peregrine.ir import Graph, verify
from peregrine.options import CompileOptions, Precision

# A pass returns the new graph and one line saying what it changed ("" when nothing).
PassFn = Callable[[Graph], "tuple[Graph, str]"]


@dataclass(frozen=True)
class Pass:
    name: str
    run: PassFn
    what: str  # one line for the docs and --help
    gated: bool = False  # may move result bits: runs only under Precision.FAST


def selected(pipeline: tuple[Pass, ...], options: CompileOptions) -> list[Pass]:
    names = {p.name for p in pipeline}
    asked = set(options.passes or ()) | set(options.disable_passes)
    unknown = sorted(asked - names)
    if unknown:
        raise UnsupportedModelError(
            f"unknown pass(es) {', '.join(unknown)}; the passes are {', '.join(sorted(names))}")
    chosen = [p for p in pipeline if options.passes is None or p.name in options.passes]
    return [p for p in chosen if p.name not in options.disable_passes]


def run_pipeline(graph: Graph, pipeline: tuple[Pass, ...], options: CompileOptions | None = None,
                 report: list[dict] | None = None) -> Graph:
    """Run the selected passes in order, verifying after each; append to ``report`` one entry
    per pass run: its name, the node count before and after, and what it changed."""
    options = options or CompileOptions()
    verify(graph)
    for p in selected(pipeline, options):
        before = len(graph.nodes)
        if p.gated and options.precision is not Precision.FAST:
            if report is not None:
                report.append({"pass": p.name, "nodes": f"{before} -> {before}",
                               "changed": "off (moves bits: needs precision='fast')"})
            continue
        graph, changed = p.run(graph)
        verify(graph)
        if report is not None:
            report.append({"pass": p.name, "nodes": f"{before} -> {len(graph.nodes)}",
                           "changed": changed or "nothing"})
        if config.dump_ir():
            print(f"--- IR after {p.name} ---\n{format_graph(graph)}", file=sys.stderr)
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
