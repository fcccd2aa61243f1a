"""Deep trees (issue #13's targets): an unlimited-depth DecisionTreeClassifier (20 features,
3 classes, 500K rows) and a 100-tree RandomForestClassifier of depth 22 (100K rows), Peregrine
native against ONNX Runtime (skl2onnx, no ZipMap) on ``--threads`` threads, ``predict_proba`` on
float32 rows. Best-of-N wall times in one process; the ratio is ORT / native.

    .venv/bin/python benchmarks/bench_deep_trees.py [--threads 2] [--repeat 5]

This is a script, not a test.
"""

from __future__ import annotations

import argparse
import platform

import numpy as np
import onnxruntime as ort
from bench_sources import best  # one best-of-N timer for the source benchmarks
from skl2onnx import to_onnx
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier
from sklearn.tree import DecisionTreeClassifier

import peregrine


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
        t_ort = best(lambda A, s=sess, f=feed: s.run(None, {f: A}), Xs, args.repeat)
        compiled = peregrine.compile(model, backend="native",
                                     options=peregrine.CompileOptions(n_threads=args.threads))
        t_nat = best(compiled.predict_proba, Xs, args.repeat)
        want = model.predict_proba(Xs[:20_000])
        diff = float(np.abs(compiled.predict_proba(Xs[:20_000]) - want).max())
        depth = (model.get_depth() if hasattr(model, "get_depth")
                 else max(e.get_depth() for e in model.estimators_))
        print(f"{name} (depth {depth}), {rows} rows: onnxruntime {t_ort * 1e3:.1f} ms, "
              f"peregrine-native {t_nat * 1e3:.1f} ms, native speedup {t_ort / t_nat:.2f}x "
              f"(target >= 2), max |diff| vs scikit-learn {diff:.1e}")


if __name__ == "__main__":
    main()
