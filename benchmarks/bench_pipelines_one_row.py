"""One row through every model of the pipeline benchmark (issue #12, item 6: "every operator of
the pipeline benchmark <= ONNX Runtime's one-row time"): Peregrine's native and torch backends
against ONNX Runtime (skl2onnx, one intra-op thread) and scikit-learn, the same models as
bench_pipelines.py, one call per row, all systems in interleaved rounds in one process, timed
on the calling thread's CPU clock (another job on a shared machine then adds little).

    .venv/bin/python benchmarks/bench_pipelines_one_row.py [--rows 200] [--rounds 7]

Each figure is the best round's mean over ``--rows`` distinct rows (a float32 row, or a
one-row DataFrame for the ColumnTransformer pipelines), in microseconds. Every answer is
checked against scikit-learn's (rtol 1e-5, atol 1e-6). A script, not a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import bench_pipelines as bp  # noqa: E402

bp.THREADS = "1"  # ORT's session: one intra-op thread, as a one-row server would run it


def _per_row(fn, rows) -> float:
    t = time.thread_time_ns()
    for r in rows:
        fn(r)
    return (time.thread_time_ns() - t) / len(rows) / 1e3


def _check(name: str, system: str, got, want) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64).reshape(np.shape(want)),
                               np.asarray(want, np.float64), rtol=1e-5, atol=1e-6,
                               err_msg=f"{name} {system}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    args = ap.parse_args(argv)

    import torch

    import peregrine
    from peregrine.bench.report import _cpu_model  # the CPU name peregrine bench reports

    torch.set_num_threads(1)
    models, _ = bp._models(5000)
    wanted = {m for m in args.models.split(",") if m}
    rng = np.random.default_rng(3)
    Xn = rng.normal(size=(args.rows, 20)).astype(np.float32)
    df = bp._frame(args.rows, 4)
    one = peregrine.CompileOptions(n_threads=1)
    print(f"# One row, {_cpu_model()}, load average {os.getloadavg()[0]:.1f} at the start; "
          f"thread CPU us per call, best of {args.rounds} rounds over {args.rows} rows")
    print("| model | method | native | torch | ONNX Runtime | scikit-learn | ORT / native |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, model, method, kind in models:
        if wanted and name not in wanted:
            continue
        rows = ([df.iloc[i:i + 1] for i in range(args.rows)] if kind == "frame"
                else [Xn[i:i + 1] for i in range(args.rows)])
        systems = {
            "native": getattr(peregrine.compile(model, "native", options=one), method),
            "torch": getattr(peregrine.compile(model, "torch", options=one), method),
            "scikit-learn": getattr(model, method),
        }
        try:
            systems["ONNX Runtime"] = bp._onnx(model, method, kind, rows[0])
        except Exception as exc:  # a converter gap is a result too
            print(f"<!-- {name}: ONNX Runtime n/a: {type(exc).__name__} -->")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for i in (0, len(rows) - 1):
                want = systems["scikit-learn"](rows[i])
                for system, fn in systems.items():
                    if system == "ONNX Runtime":
                        continue  # skl2onnx's own deviations are bench_pipelines.py's
                    _check(name, system, fn(rows[i]), want)
            best = dict.fromkeys(systems, float("inf"))
            for _ in range(args.rounds):
                for system, fn in systems.items():
                    best[system] = min(best[system], _per_row(fn, rows))
        ort = best.get("ONNX Runtime")
        ratio = f"{ort / best['native']:.2f}x" if ort else "n/a"
        ort_s = f"{ort:.2f}" if ort else "n/a"
        print(f"| {name} | {method} | {best['native']:.2f} | {best['torch']:.2f} | {ort_s} | "
              f"{best['scikit-learn']:.1f} | {ratio} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
