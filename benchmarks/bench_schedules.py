"""Native-backend schedules by hand against the heuristic, on this CPU (one XGBoost model).

    .venv/bin/python benchmarks/bench_schedules.py [--rows 100000] [--trees 500] [--depth 8]

Each schedule is a fixed ``CompileOptions.schedule`` for batches (lanes hold rows), timed on
the same batch (best of ``--repeat``) and checked equal to XGBoost's own ``predict_proba``.
Used to check the heuristic on a CPU it was not measured on (docs/benchmarks.md, "On an
AVX2-only CPU"); ``tune="exhaustive"`` searches further.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import xgboost as xgb

import peregrine
from peregrine import CompileOptions
from peregrine.backends.native.schedule import Layout, Schedule
from peregrine.kernels.jit import Target


def schedules(lanes: int) -> dict[str, Schedule | None]:
    return {
        "heuristic": None,
        f"perfect, 4 walks x {lanes}": Schedule(Layout.PERFECT, vector_width=lanes, interleave=4,
                                                row_tile=12 * lanes),
        f"perfect, 8 walks x {lanes}": Schedule(Layout.PERFECT, vector_width=lanes, interleave=8,
                                                row_tile=24 * lanes),
        f"perfect, 8 walks x {lanes // 2}": Schedule(Layout.PERFECT, vector_width=lanes // 2,
                                                     interleave=8, row_tile=12 * lanes),
        f"sparse, 8 walks x {lanes}": Schedule(Layout.SPARSE, vector_width=lanes, interleave=8,
                                               row_tile=24 * lanes, node_pairs=True),
        "scalar, 8 walks": Schedule(Layout.PERFECT, vector_width=1, interleave=8, row_tile=64),
    }


def best_time(fn, X, repeat: int) -> float:
    fn(X)
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(X)
        runs.append(time.perf_counter() - t)
    return min(runs)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--trees", type=int, default=500)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 28)).astype(np.float32)
    y = (X[:, :5].sum(1) + rng.normal(size=len(X)) > 0).astype(int)
    model = xgb.XGBClassifier(n_estimators=args.trees, max_depth=args.depth,
                              tree_method="hist", n_jobs=args.threads).fit(X, y)
    batch = rng.normal(size=(args.rows, 28)).astype(np.float32)
    want = model.predict_proba(batch)
    target = Target.host()
    lanes = 16 if target.isa == "avx512" else 8
    print(f"CPU {target.cpu} ({target.isa}); XGBoost {args.trees} x d{args.depth}, "
          f"{args.rows} rows, {args.threads} threads")
    for name, schedule in schedules(lanes).items():
        options = CompileOptions(n_threads=args.threads, schedule=schedule)
        compiled = peregrine.compile(model, "native", options=options)
        diff = float(np.abs(compiled.predict_proba(batch) - want).max())
        ms = best_time(compiled.predict_proba, batch, args.repeat) * 1e3
        print(f"  {name:26s} {ms:8.1f} ms   max |diff| {diff:.1e}")


if __name__ == "__main__":
    main()
