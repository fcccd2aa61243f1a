"""The tvm backend against the torch backend on bench_trees.py's three tree models (XGBoost 500
trees depth 8, LightGBM 500 trees depth 8 / 256 leaves, RandomForest 100 trees depth 8; 28
features, trained on 100K rows), ``predict_proba`` on 10K and 100K float32 rows, and the tvm
backend's cold compile time (an empty library cache).

    .venv/bin/python benchmarks/bench_tvm.py [--threads 1] [--rounds 5]

Both backends run in this one process on ``--threads`` threads (torch through
``CompileOptions.n_threads``, TVM's runtime through ``TVM_NUM_THREADS``, set before TVM loads).
Timings alternate between the two backends round by round and keep each one's best, so a
neighbour's load on a shared machine hits both alike; the ratios are taken within the run.
This is a script, not a test.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trees import N_TREES, TRAIN_ROWS, best_time, make_data, train  # noqa: E402

BATCHES = {"10K": 10_000, "100K": 100_000}


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--models", default="xgboost,lightgbm,rf")
    args = parser.parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    os.environ["PEREGRINE_CACHE_DIR"] = tempfile.mkdtemp(prefix="peregrine-bench-tvm-")

    import torch
    import tvm

    import peregrine

    X_train, y_train = make_data(TRAIN_ROWS)
    X_test, _ = make_data(max(BATCHES.values()), seed=1)
    options = peregrine.CompileOptions(n_threads=args.threads)
    print(f"CPU: {cpu_model()}; threads {args.threads}; torch {torch.__version__}, "
          f"tvm {tvm.__version__}")
    print("| model | trees | tvm compile s | torch compile s | batch | torch s | tvm s | "
          "torch / tvm | max diff |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        model = train(name, X_train, y_train, args.threads)
        t = time.perf_counter()
        fast_tvm = peregrine.compile(model, "tvm", options=options)
        tvm_compile = time.perf_counter() - t
        t = time.perf_counter()
        fast_torch = peregrine.compile(model, "torch", options=options)
        torch_compile = time.perf_counter() - t
        for label, rows in BATCHES.items():
            X = X_test[:rows]
            best = {"torch": np.inf, "tvm": np.inf}
            for _ in range(args.rounds):
                best["torch"] = min(best["torch"],
                                    best_time(fast_torch.predict_proba, X, args.repeat))
                best["tvm"] = min(best["tvm"], best_time(fast_tvm.predict_proba, X, args.repeat))
            diff = float(np.abs(fast_tvm.predict_proba(X) - model.predict_proba(X)).max())
            print(f"| {name} | {N_TREES[name]} | {tvm_compile:.1f} | {torch_compile:.1f} | "
                  f"{label} | {best['torch']:.4f} | {best['tvm']:.4f} | "
                  f"{best['torch'] / best['tvm']:.2f}x | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
