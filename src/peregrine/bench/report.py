"""Reports: report.json (everything measured, machine and versions), report.md (tables a person
reads), plot.png (see plot.py). ``write_report`` writes all three into one directory."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from typing import Any

from peregrine.bench.peers import package_version
from peregrine.bench.runner import BenchResult, SystemResult

# packages whose versions every report records when installed
CORE_PACKAGES = ("peregrine", "numpy", "sklearn", "xgboost", "lightgbm", "torch", "llvmlite")


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "system": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu": _cpu_model() or platform.processor() or "unknown",
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }
    if hasattr(os, "sched_getaffinity"):
        info["usable_cores"] = len(os.sched_getaffinity(0))
    try:
        info["memory_gib"] = round(
            os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1
        )
    except (ValueError, OSError, AttributeError):
        pass
    return info


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def versions(result: BenchResult) -> dict[str, str]:
    out = {}
    for p in CORE_PACKAGES:
        v = package_version(p)
        if v:
            out[{"peregrine": "peregrine-ml", "sklearn": "scikit-learn"}.get(p, p)] = v
    for s in result.systems:
        out.update({k: v for k, v in s.versions.items() if k != "error"})
    return dict(sorted(out.items()))


def to_json(result: BenchResult, plot_lines: list[str] | None = None) -> dict[str, Any]:
    c = result.config
    return {
        "started": result.started,
        "machine": machine_info(),
        "versions": versions(result),
        "model": result.model,
        "data": result.data,
        "config": {
            "batch_sizes": list(c.batch_sizes),
            "peers": c.peers,
            "threads": c.threads,
            "repeat": c.repeat,
            "batch1_rows": c.batch1_rows,
            "budget_s": c.budget_s,
            "memory": c.memory,
            "verify_rows": c.verify_rows,
        },
        "conventions": {
            "time": "wall clock; median of repeated runs after one warm-up; spread as IQR "
            "and min/max",
            "batch_1": f"a run is {c.batch1_rows} single-row calls",
            "memory": "compile_traced_peak_mb/predict_traced_peak_mb: tracemalloc peak "
            "(Python and NumPy heap only); rss_growth_mb: growth of ru_maxrss, the "
            "process high-water mark (0 if an earlier system peaked higher)",
            "check": "outputs on the first verify_rows rows against the source library's own "
            "predict, rtol 1e-5 and atol 1e-6 (labels: equality)",
        },
        "systems": [s.to_json() for s in result.systems],
        "notes": list(result.notes),
        "plot": {"file": "plot.png", "lines": plot_lines} if plot_lines is not None else None,
    }


def _finite(v: Any) -> Any:
    """JSON has no NaN/inf: write them as strings (an error of inf is information, not null)."""
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def _rate(v: float) -> str:
    if v != v:
        return "-"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            return f"{v / div:.3g}{suffix}"
    return f"{v:.3g}"


def _cell(system: SystemResult, batch: int) -> str:
    t = system.timing(batch)
    if t is None:
        return "-"
    if t.error:
        return "error"
    lo, hi = t.rows_per_s_iqr
    return f"{_rate(t.rows_per_s)} ({_rate(lo)}–{_rate(hi)})"


def _check(system: SystemResult) -> str:
    c = system.check
    status = c.get("status", "-")
    if status == "mismatch":
        if "detail" in c:
            return f"**MISMATCH** ({c['detail']})"
        return f"**MISMATCH** {c.get('rows_mismatched', '?')}/{c.get('rows', '?')} rows" + (
            f", max abs err {c['max_abs_err']:.2g}" if "max_abs_err" in c else ""
        )
    return status


def _mb(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"


def markdown(result: BenchResult, doc: dict[str, Any] | None = None) -> str:
    doc = doc or to_json(result)
    m, c = doc["machine"], result.config
    batches = list(c.batch_sizes)
    lines = [
        f"# Peregrine benchmark: {result.model['description']}",
        "",
        f"- **Model**: {result.model['class']}, {result.model['n_features']} features; timed "
        f"method: `{result.model['method']}`",
        f"- **Data**: {result.data['description'] or 'synthetic'} ({result.data['rows']} rows, "
        f"{result.data['dtype']})",
        f"- **Machine**: {m['cpu']}, {m['cores']} cores"
        + (f" ({m['usable_cores']} usable)" if "usable_cores" in m else "")
        + (f", {m['memory_gib']} GiB" if "memory_gib" in m else "")
        + f", {m['system']} {m['machine']}, Python {m['python']}",
        "- **Versions**: " + ", ".join(f"{k} {v}" for k, v in doc["versions"].items()),
        f"- **Settings**: threads {c.threads or 'library default'}, up to {c.repeat} timed runs "
        f"after a warm-up ({c.budget_s:g} s budget each), batch 1 = {c.batch1_rows} single-row "
        f"calls per run; started {result.started}",
        "",
        "## Throughput (rows/s: median (IQR); higher is better)",
        "",
        "| system | check | " + " | ".join(f"batch {b:,}" for b in batches) + " |",
        "|---|---|" + "---:|" * len(batches),
    ]
    ok = [s for s in result.systems if s.status == "ok"]
    for s in ok:
        cells = " | ".join(_cell(s, b) for b in batches)
        lines.append(f"| {s.label} | {_check(s)} | {cells} |")
    lines += [
        "",
        "## Compile time and memory",
        "",
        "| system | compile s | compile peak MB† | predict peak MB† | RSS growth MB‡ |",
        "|---|---:|---:|---:|---:|",
    ]
    for s in ok:
        mem = s.memory
        compile_s = f"{s.compile_s:.3f}" if s.compile_s is not None else "-"
        lines.append(
            f"| {s.label} | {compile_s} | {_mb(mem.get('compile_traced_peak_mb'))} | "
            f"{_mb(mem.get('predict_traced_peak_mb'))} | {_mb(mem.get('rss_growth_total_mb'))} |"
        )
    lines += [
        "",
        "## Speed-up over the source library (median rows/s ratio)",
        "",
        "| system | " + " | ".join(f"batch {b:,}" for b in batches) + " |",
        "|---|" + "---:|" * len(batches),
    ]
    src = result.source
    for s in result.systems[1:]:
        if s.status != "ok":
            continue
        cells = []
        for b in batches:
            t, r = s.timing(b), src.timing(b)
            ok = t and r and t.seconds and r.seconds and not t.error and not r.error
            cells.append(f"{t.rows_per_s / r.rows_per_s:.2f}×" if ok else "-")
        lines.append(f"| {s.label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Seconds per call (median, min–max)",
        "",
        "| system | batch | runs | median s/call | min–max s/run |",
        "|---|---:|---:|---:|---|",
    ]
    for s in result.systems:
        for t in s.timings:
            if t.error or not t.seconds:
                lines.append(f"| {s.label} | {t.batch_size:,} | 0 | error: {t.error} | |")
                continue
            lines.append(
                f"| {s.label} | {t.batch_size:,} | {len(t.seconds)} | "
                f"{t.latency_s:.3g} | {min(t.seconds):.3g}–{max(t.seconds):.3g} |"
            )
    failed = [s for s in result.systems if s.status != "ok"]
    notes = [f"{s.label}: {s.note}" for s in failed] + list(result.notes)
    notes += [f"{s.label}: {s.note}" for s in result.systems if s.status == "ok" and s.note]
    lines += [
        "",
        "## Notes",
        "",
        "- † tracemalloc peak during a second, untimed compile and during one call at the "
        "largest batch: Python and NumPy heap only; native allocations (ONNX Runtime, LLVM, "
        "torch) are not seen. ‡ growth of the process's ru_maxrss high-water mark over the "
        "system's whole run: 0 when an earlier system already peaked higher.",
        f"- check: outputs on {c.verify_rows} rows against the source library, "
        "rtol 1e-5 / atol 1e-6.",
    ]
    lines += [f"- {n}" for n in notes]
    if c.memory != "tracemalloc":
        lines.append("- run with --memory rss: no tracemalloc figures (†)")
    if doc.get("plot") is None:
        lines.append(
            "- plot.png was not written (matplotlib is not installed: "
            "pip install 'peregrine-ml[cli]')"
        )
    else:
        lines += ["", "![rows per second vs batch size](plot.png)"]
    return "\n".join(lines) + "\n"


def write_report(result: BenchResult, out_dir: str) -> dict[str, str]:
    """Write report.md, report.json and plot.png into ``out_dir``; returns their paths. Without
    matplotlib the plot is left out (and the report says so) rather than failing the run."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {
        "json": os.path.join(out_dir, "report.json"),
        "markdown": os.path.join(out_dir, "report.md"),
    }
    plot_lines = None
    try:
        from peregrine.bench.plot import save_plot

        paths["plot"] = os.path.join(out_dir, "plot.png")
        plot_lines = save_plot(result, paths["plot"])
    except ImportError:
        paths.pop("plot")
        print("peregrine: warning: matplotlib is not installed; plot.png skipped", file=sys.stderr)
    doc = to_json(result, plot_lines)
    with open(paths["json"], "w") as f:
        json.dump(_finite(doc), f, indent=2, allow_nan=False)
    with open(paths["markdown"], "w", encoding="utf-8") as f:
        f.write(markdown(result, doc))
    return paths
