"""ONNX Runtime on Peregrine's ONNX export against ONNX Runtime on skl2onnx / onnxmltools's
conversion of the same model (the peer ``peregrine.bench.builtin_peers.OnnxRuntimePeer``), on
the three tree models of ``bench_trees.py``, at 100K rows and at one row (a loop of single-row
calls). Both sessions: CPU execution provider, ``--threads`` intra-op threads. Peregrine's
export reads float64 (its exactness contract), the converters' float32; each side gets its
own input dtype, made from the same float32 rows. Also reports each side's largest difference
from the library's own predict_proba.

    .venv/bin/python benchmarks/bench_export.py [--train-rows 100000] [--threads N]

This is a script, not a test; figures go to docs/export.md with the CPU from lscpu.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trees import best_time, make_data, train  # noqa: E402


def per_row(fn, X, rows=300) -> float:
    fn(X[:1])
    t = time.perf_counter()
    for i in range(rows):
        fn(X[i:i + 1])
    return (time.perf_counter() - t) / rows


def cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        name = next(line.split(":", 1)[1].strip() for line in out.splitlines()
                    if line.startswith("Model name"))
    except (OSError, StopIteration):
        name = platform.processor()
    return f"{name}, {os.cpu_count()} CPUs"


def main(argv=None) -> None:
    import onnxruntime as ort

    import peregrine
    from peregrine.bench.builtin_peers import OnnxRuntimePeer

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--train-rows", type=int, default=100_000)
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--models", default="xgboost,lightgbm,rf")
    args = p.parse_args(argv)

    X, y = make_data(args.train_rows)
    Xb, _ = make_data(args.rows, seed=1)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    print(f"CPU: {cpu()}; onnxruntime {ort.__version__}; threads {args.threads}; "
          f"trained on {args.train_rows} rows; batch {args.rows} rows")
    print("| model | system | 100K rows (s) | 1 row (us) | max abs diff vs library |")
    print("|---|---|---|---|---|")
    for name in args.models.split(","):
        model = train(name, X, y, args.threads)
        want = model.predict_proba(Xb)
        peer = OnnxRuntimePeer().prepare(model, Xb.shape[1], threads=args.threads)
        compiled = peregrine.compile(model, backend="reference")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.onnx")
            t = time.perf_counter()
            compiled.export_onnx(path, sample=Xb[:2000])
            export_s = time.perf_counter() - t
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])

        def ours(A, sess=sess):
            return sess.run(["probabilities"], {"X": A})[0]

        X64 = Xb.astype(np.float64)
        rows = {
            "peregrine export": (ours, X64),
            "skl2onnx/onnxmltools": (peer, Xb),
        }
        for system, (fn, A) in rows.items():
            batch = best_time(fn, A, 5)
            one = per_row(fn, A)
            diff = float(np.max(np.abs(np.asarray(fn(A)).reshape(want.shape) - want)))
            print(f"| {name} | {system} | {batch:.3f} | {one * 1e6:.0f} | {diff:.2g} |",
                  flush=True)
        print(f"| {name} | (export + validation time) | {export_s:.1f} s | | |", flush=True)


if __name__ == "__main__":
    main()
