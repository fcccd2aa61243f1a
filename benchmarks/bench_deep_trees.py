"""Deep trees (issue #13's targets): an unlimited-depth DecisionTreeClassifier (20 features,
3 classes, 500K rows) and a 100-tree RandomForestClassifier of depth 22 (100K rows), Peregrine
native against ONNX Runtime (skl2onnx, no ZipMap) on ``--threads`` threads, ``predict_proba`` on
float32 rows. Native runs its default schedule (the heuristic's: REFILL walks for these trees
on AVX2/AVX-512) and, for comparison, the SPARSE walks it used before. Best-of-N times in one
process, wall clock and process CPU time (every thread of the process: on a loaded machine the
CPU time is what the work cost, wall time also counts waiting for a core); ratios are
ORT / native.

    .venv/bin/python benchmarks/bench_deep_trees.py [--threads 2] [--repeat 5]

This is a script, not a test.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import onnxruntime as ort
from bench_sources import best  # one best-of-N timer for the source benchmarks
from skl2onnx import to_onnx
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.tree import DecisionTreeClassifier

import peregrine
from peregrine.backends.native import Schedule


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{cpu_model()}, python {platform.python_version()}, onnxruntime {ort.__version__}, "
          f"threads {args.threads}")
    X, y = make_classification(500_000, 20, n_informative=12, n_classes=3, random_state=0)
    X = X.astype(np.float32)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
    models = (
        ("DecisionTree, unlimited depth", DecisionTreeClassifier(random_state=0), 500_000),
        ("RandomForest, 100 trees, max_depth 22",
         RandomForestClassifier(100, max_depth=22, random_state=0, n_jobs=args.threads), 100_000),
    )
    for name, model, rows in models:
        model.fit(X[:200_000], y[:200_000])
        Xs = X[:rows]
        onx = to_onnx(model, X[:1], options={"zipmap": False})
        sess = ort.InferenceSession(onx.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        feed = sess.get_inputs()[0].name
        run_ort = lambda A, s=sess, f=feed: s.run(None, {f: A})  # noqa: E731
        opts = dict(n_threads=args.threads)
        compiled = peregrine.compile(model, backend="native",
                                     options=peregrine.CompileOptions(**opts))
        sparse = Schedule(layout="sparse", interleave=8, row_tile=384, node_pairs=True)
        before = peregrine.compile(model, backend="native",
                                   options=peregrine.CompileOptions(schedule=sparse, **opts))
        want = model.predict_proba(Xs[:20_000])
        diff = float(np.abs(compiled.predict_proba(Xs[:20_000]) - want).max())
        depth = (model.get_depth() if hasattr(model, "get_depth")
                 else max(e.get_depth() for e in model.estimators_))
        times = {}
        for clock in ("wall", "cpu"):  # interleaved, so both see the same load
            tick = time.perf_counter if clock == "wall" else time.process_time
            for who, fn in (("onnxruntime", run_ort), ("native", compiled.predict_proba),
                            ("native sparse", before.predict_proba)):
                times[who, clock] = best(fn, Xs, args.repeat, clock=tick)
        layout = compiled.explain().split("schedule: ")[1].split(" layout")[0]
        print(f"{name} (depth {depth}), {rows} rows, load {os.getloadavg()[0]:.1f}; "
              f"native default: {layout} layout; max |diff| vs scikit-learn {diff:.1e}")
        for clock in ("wall", "cpu"):
            o, n, sp = (times[w, clock] for w in ("onnxruntime", "native", "native sparse"))
            print(f"  {clock:4}: onnxruntime {o * 1e3:.1f} ms, native {n * 1e3:.1f} ms "
                  f"({o / n:.2f}x ORT), native sparse {sp * 1e3:.1f} ms ({o / sp:.2f}x ORT; "
                  f"default {sp / n:.2f}x sparse)")

if __name__ == "__main__":
    main()
