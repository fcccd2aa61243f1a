"""The measured error of the gated passes. When a pass gated behind ``Precision.FAST`` changed
the graph, ``peregrine.compile`` evaluates the optimized graph and the unoptimized one by the
reference rules (as ``ir.semantics.evaluate``; nodes no pass touched evaluated once) on the same rows and reports, per output, the
largest absolute and relative difference (scores) or the number of rows whose label differs
(integer outputs). The entry is appended to the pass report: ``explain()`` prints it and a
saved artifact keeps it.

Rows: the user's ``sample_input`` (its first ``MAX_ROWS``: the report costs a few
milliseconds, a 500-tree forest's evaluation included) when given; otherwise
``SYNTHETIC_ROWS`` rows drawn from what the graph knows of its input. A column a scaler reads
directly is drawn around the scaler's fitted statistics: ``center + |scale| * N(0, 1)`` for a
CENTER_SCALE (StandardScaler's mean and standard deviation, RobustScaler's median and IQR),
``(U(0, 1) - shift) / scale`` for an AFFINE (MinMaxScaler's fitted range); any other column is
standard normal. Seeded, so a compile reports the same figure every time. Synthetic rows show
the error's order on typical data; only the user's rows say what their data does."""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.ir import Graph, Op
from peregrine.options import CompileOptions

MAX_ROWS = 500
SYNTHETIC_ROWS = 256
_ENTRY = "measured_error"


def _synthetic(graph: Graph, rng: np.random.Generator) -> np.ndarray | None:
    x = next((n for n in graph.nodes if n.op is Op.INPUT), None)
    if x is None or x.width is None:
        return None
    d = int(x.width)
    center, spread, uniform = np.zeros(d), np.ones(d), np.zeros(d, bool)
    for n in graph.nodes:
        if n.inputs[:1] != (x.name,) or n.width != d:
            continue
        with np.errstate(all="ignore"):
            if n.op is Op.CENTER_SCALE:
                c = np.broadcast_to(np.asarray(n.attrs.center, np.float64), (d,))
                s = np.abs(np.broadcast_to(np.asarray(n.attrs.scale, np.float64), (d,)))
                ok = np.isfinite(c) & np.isfinite(s) & (s > 0)
                center[ok], spread[ok], uniform[ok] = c[ok], s[ok], False
            elif n.op is Op.AFFINE:
                a = np.broadcast_to(np.asarray(n.attrs.scale, np.float64), (d,))
                b = np.broadcast_to(np.asarray(n.attrs.shift, np.float64), (d,))
                lo, hi = (0.0 - b) / a, (1.0 - b) / a  # the inputs mapped onto [0, 1]
                ok = np.isfinite(lo) & np.isfinite(hi) & (a != 0)
                center[ok], spread[ok], uniform[ok] = lo[ok], (hi - lo)[ok], True
    rows = np.where(uniform, center + spread * rng.random((SYNTHETIC_ROWS, d)),
                    center + spread * rng.standard_normal((SYNTHETIC_ROWS, d)))
    return rows


def _compare(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """``a`` (optimized) against ``b`` (exact)."""
    if a.dtype.kind in "iub" and b.dtype.kind in "iub":
        rows = np.any(a.reshape(len(a), -1) != b.reshape(len(b), -1), axis=1)
        return {"labels_changed": int(rows.sum())}
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    diff = np.abs(a - b, where=both, out=np.zeros(a.shape))
    rel = np.divide(diff, np.abs(b), where=both & (b != 0), out=np.zeros(a.shape))
    # NaN against a number, or infinities of different sign
    odd = (np.isnan(a) != np.isnan(b)) | (~both & ~np.isnan(a) & ~np.isnan(b) & (a != b))
    out = {"max_abs": float(diff.max(initial=0.0)), "max_rel": float(rel.max(initial=0.0))}
    if odd.any():
        out["non_finite_differ"] = int(odd.sum())
    return out


def _line(errors: dict[str, dict[str, Any]], n: int, source: str,
          what: str = "against the exact graph") -> str:
    parts = []
    for out, e in errors.items():
        if "labels_changed" in e:
            parts.append(f"{out}: {e['labels_changed']} of {n} label(s) differ")
        else:
            extra = (f", {e['non_finite_differ']} non-finite value(s) differ"
                     if "non_finite_differ" in e else "")
            parts.append(f"{out}: max abs {e['max_abs']:.3g}, max rel {e['max_rel']:.3g}{extra}")
    return f"{what} on {n} {source} rows: " + "; ".join(parts)


def _evaluate(graph: Graph, X: np.ndarray, outputs: tuple[str, ...], options: CompileOptions,
              reuse: tuple[dict, dict] | None = None) -> tuple[dict, dict]:
    """``ir.semantics.evaluate``, keeping every node's value; with ``reuse`` (the other graph's
    nodes and values), a node that is the same object reading unchanged nodes takes its value
    from there (the passes keep untouched nodes: a forest is evaluated once, not twice)."""
    nodes, known = reuse if reuse is not None else ({}, {})
    values: dict[str, Any] = {}
    unchanged: set[str] = set()
    needed = graph.needed(graph.outputs[o] for o in outputs)
    for node in graph.toposort():
        if node.name not in needed:
            continue
        if nodes.get(node.name) is node and all(i in unchanged for i in node.inputs):
            unchanged.add(node.name)
            if node.name in known:
                values[node.name] = known[node.name]
                continue
        if node.op is Op.INPUT:
            values[node.name] = X
            continue
        values[node.name] = node.attrs.rule(node, [values[i] for i in node.inputs], options)
    return {o: values[graph.outputs[o]] for o in outputs}, values


def _rows(graph: Graph, sample: Any) -> tuple[np.ndarray | None, str]:
    """The rows measured on: the user's first MAX_ROWS, or synthetic ones (module docstring)."""
    if sample is not None:
        if hasattr(sample, "toarray"):  # a scipy.sparse matrix (a text pipeline's boundary)
            sample = sample[:MAX_ROWS].toarray()
        return np.asarray(sample)[:MAX_ROWS], "sample_input"
    return _synthetic(graph, np.random.default_rng(0)), "synthetic"


def measure(exact: Graph, fast: Graph, sample: np.ndarray | None = None,
            options: CompileOptions | None = None) -> dict[str, Any]:
    """The report entry comparing graph ``fast`` with graph ``exact`` (same outputs)."""
    options = options or CompileOptions()
    rows, source = _rows(exact, sample)
    entry: dict[str, Any] = {"pass": _ENTRY, "nodes": f"{len(fast.nodes)} -> {len(fast.nodes)}"}
    if rows is None or rows.ndim != 2 or rows.shape[0] == 0:
        return {**entry, "changed": "not measured: the graph's input width is unknown"}
    outputs = tuple(o for o in fast.outputs if o in exact.outputs)
    try:
        with np.errstate(all="ignore"):
            want, values = _evaluate(exact, rows, outputs, options)
            got, _ = _evaluate(fast, rows, outputs, options, reuse=(exact.by_name, values))
    except (ValueError, TypeError, IndexError, FloatingPointError) as exc:
        return {**entry, "changed": f"not measured: {type(exc).__name__}: {exc}"}
    errors = {o: _compare(np.asarray(got[o]), np.asarray(want[o])) for o in outputs}
    return {**entry, "changed": _line(errors, int(rows.shape[0]), source),
            "rows": int(rows.shape[0]), "rows_from": source, "errors": errors}


def gated_changed(report: list[dict], gated: set[str]) -> bool:
    """Whether a gated pass of the pipeline changed the graph (per the pass report)."""
    return any(p.get("pass") in gated and not str(p.get("changed", "")).startswith(
        ("nothing", "off")) for p in report)


def measure_program(graph: Graph, run: Any, level: str, sample: np.ndarray | None = None,
                    options: CompileOptions | None = None) -> dict[str, Any]:
    """The report entry for a low-precision program (``Precision.BFLOAT16`` / ``FLOAT16``):
    ``run(rows, outputs)`` (the compiled program, returning a dict of arrays) against
    ``graph`` evaluated by the reference rules on the same rows, per output; same entry format
    as ``measure``."""
    options = options or CompileOptions()
    rows, source = _rows(graph, sample)
    entry: dict[str, Any] = {"pass": _ENTRY, "nodes": f"{len(graph.nodes)} -> {len(graph.nodes)}"}
    if rows is None or rows.ndim != 2 or rows.shape[0] == 0:
        return {**entry, "changed": "not measured: the graph's input width is unknown"}
    outputs = tuple(graph.outputs)
    try:
        with np.errstate(all="ignore"):
            want, _ = _evaluate(graph, rows, outputs, options)
        got = run(rows, outputs)
    except (ValueError, TypeError, IndexError, FloatingPointError, RuntimeError) as exc:
        return {**entry, "changed": f"not measured: {type(exc).__name__}: {exc}"}
    errors = {o: _compare(np.asarray(got[o]), np.asarray(want[o])) for o in outputs}
    what = f"the {level} program against the exact graph"
    return {**entry, "changed": _line(errors, int(rows.shape[0]), source, what),
            "rows": int(rows.shape[0]), "rows_from": source, "errors": errors}
