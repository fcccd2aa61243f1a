"""plot.png: rows/second against batch size, log-log, one line per system (IQR as a band).

Uses matplotlib's object API with the Agg canvas directly, never pyplot, so it neither needs a
display nor changes the global backend of a program that imports it."""

from __future__ import annotations

import math
from typing import Any

from peregrine.bench.runner import BenchResult


def make_figure(result: BenchResult) -> Any:
    """The figure; one ``Line2D`` per system that has at least one timing."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for system in result.systems:
        points = [
            (t.batch_size, t.rows_per_s, *t.rows_per_s_iqr)
            for t in system.timings
            if t.seconds and math.isfinite(t.rows_per_s)
        ]
        if not points:
            continue
        xs, ys, lo, hi = (list(v) for v in zip(*points))
        style = "-" if system.kind == "peregrine" else "--" if system.kind == "source" else ":"
        label = system.label
        if system.check.get("status") == "mismatch":
            label += " (MISMATCH)"
        (line,) = ax.plot(xs, ys, style, marker="o", label=label)
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("batch size (rows per call)")
    ax.set_ylabel("rows / second (median; band: IQR)")
    ax.set_title(f"{result.model['description']}: throughput", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_lines():
        ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def save_plot(result: BenchResult, path: str) -> list[str]:
    """Write the PNG; returns the line labels (one per system plotted)."""
    fig = make_figure(result)
    fig.savefig(path, format="png")
    return [line.get_label() for line in fig.axes[0].get_lines()]
