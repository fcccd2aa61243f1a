"""Every conformance case (tests/conformance) timed against its own library: the case's model on
its base rows tiled to ``--rows`` rows, its first method of predict_proba / predict /
transform / decision_function, the library and each backend, best of ``--repeat`` calls after
a warm-up, on ``--threads`` threads (the library's BLAS and OpenMP held to the same count
through threadpoolctl). A survey, not a headline benchmark: the cases are small models (a few
trees, a few features) picked to cover the converters' semantics, so it shows fixed costs and
slow paths, which the headline benchmarks (bench_trees.py, bench_pipelines.py) do not.

    .venv/bin/python benchmarks/bench_cases.py [--rows 20000] [--backends torch,native]
        [--threads 1] [--cases xgb,lgb] [--out table.md]

Prints one markdown row per case: the library's time, then per backend its time, the
library / backend ratio (> 1: the backend is faster) and the largest difference from the
library's output; a summary per backend (median ratio, cases slower than the library).
Cases whose expected output is not the model's own method (ONNX, hybrid) are skipped.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.conformance

METHODS = ("predict_proba", "predict", "transform", "decision_function")


def _cpu() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines()
                 if line.startswith("Model name")), "unknown CPU")


def _best(fn, rows: np.ndarray, repeat: int) -> float:
    fn(rows)  # warm-up
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn(rows)
        best = min(best, time.perf_counter() - t)
    return best


def _diff(got, want) -> float:
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype.kind not in "fc":
        return float((got != want).mean())  # labels: the share that differ
    with np.errstate(invalid="ignore"):
        d = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return float(np.nanmax(d)) if d.size else 0.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--backends", default="torch,native")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", default="", help="comma list of substrings of case ids")
    ap.add_argument("--out", default="", help="also write the table to this file")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")

    from tests.conformance.test_conformance import CASES
    from threadpoolctl import threadpool_limits

    import peregrine

    backends = [b for b in args.backends.split(",") if b]
    wanted = [w for w in args.cases.split(",") if w]
    options = peregrine.CompileOptions(n_threads=args.threads)
    lines = [f"CPU: {_cpu()}; {args.rows} rows; {args.threads} thread(s); best of "
             f"{args.repeat}; peregrine {peregrine.__version__}", "",
             "| case | method | library s | " + " | ".join(
                 f"{b} s | library / {b} | {b} max diff" for b in backends) + " |",
             "|---|---|---:|" + "---:|---:|---:|" * len(backends)]
    print("\n".join(lines), flush=True)
    ratios: dict[str, list[float]] = {b: [] for b in backends}
    with threadpool_limits(args.threads):
        for case in CASES:
            if case.expect is not None or (wanted and not any(w in case.id for w in wanted)):
                continue
            try:
                model, X = case.built
                X = np.asarray(X, dtype=np.float64)
                rows = np.ascontiguousarray(np.tile(X, (-(-args.rows // len(X)), 1))[:args.rows])
                ref = peregrine.compile(model, "reference")
                method = next(m for m in METHODS if hasattr(model, m) and hasattr(ref, m))
                want = getattr(model, method)(rows)
                t_lib = _best(getattr(model, method), rows, args.repeat)
                cells = [case.id, f"`{method}`", f"{t_lib:.4f}"]
                for b in backends:
                    fn = getattr(peregrine.compile(model, b, options=options), method)
                    got = fn(rows)
                    t = _best(fn, rows, args.repeat)
                    ratios[b].append(t_lib / t)
                    cells += [f"{t:.4f}", f"{t_lib / t:.2f}x", f"{_diff(got, want):.1e}"]
            except Exception as exc:  # a case this survey cannot time: say so, go on
                cells = [case.id, "", f"skipped: {type(exc).__name__}: {str(exc)[:80]}"]
            line = "| " + " | ".join(cells) + " |"
            lines.append(line)
            print(line, flush=True)
    lines.append("")
    for b, r in ratios.items():
        if r:
            summary = (f"{b}: {len(r)} cases, median library / {b} {statistics.median(r):.2f}x, "
                       f"{sum(x < 1 for x in r)} slower than the library")
            lines.append(summary)
            print(summary)
    if args.out:
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
