"""Model sources (issue #15): CatBoost (500 trees, depth 6) against CatBoost's own predict and
ONNX Runtime on CatBoost's ONNX export; an ONNX-ML tree model (skl2onnx, a 200-tree random
forest) against ONNX Runtime on the same file. Best-of-N wall times at 100K rows and one row.

    .venv/bin/python benchmarks/bench_sources.py [--rows 100000] [--repeat 5]

``--single-thread``: the CatBoost model on one thread only, each tree representation that can
hold it against CatBoost's predict(thread_count=1), timed with the calling thread's CPU time
(time.thread_time: other processes' load adds no time), best of ``--repeat``, in ns per
(row, tree):

    .venv/bin/python benchmarks/bench_sources.py --single-thread --rows 20000 --repeat 15
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import catboost as cb
import numpy as np
import onnxruntime as ort
from skl2onnx import to_onnx
from sklearn.ensemble import RandomForestRegressor

import peregrine


def best(fn, X, repeat: int) -> float:
    fn(X)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn(X)
        times.append(time.perf_counter() - t)
    return min(times)


def best_cpu(fn, X, repeat: int) -> float:
    fn(X)
    times = []
    for _ in range(repeat):
        t = time.thread_time()
        fn(X)
        times.append(time.thread_time() - t)
    return min(times)


def single_thread(model, T: np.ndarray, repeat: int) -> None:
    """One thread, CPU time of the calling thread: the ratios hold on a loaded machine."""
    from peregrine.backends.native import Schedule
    from peregrine.backends.native.schedule import Layout

    n_trees = model.tree_count_
    per = lambda t: t / len(T) / n_trees * 1e9  # noqa: E731
    ref = best_cpu(lambda X: model.predict(X, thread_count=1), T, repeat)
    print(f"single thread, {len(T)} rows x {n_trees} trees: catboost-predict {ref * 1e3:.2f} ms "
          f"({per(ref):.3f} ns/(row*tree))")
    default = peregrine.compile(model, "native", options=peregrine.CompileOptions(n_threads=1))
    rivals = {"default": default}
    for layout in (Layout.PERFECT, Layout.BINNED, Layout.OBLIVIOUS, Layout.OBLIVIOUS_BINNED):
        walks = 8 if layout is Layout.OBLIVIOUS_BINNED else 6
        s = Schedule(layout=layout, interleave=walks, row_tile=1024 if walks == 8 else 288)
        rivals[layout.value] = peregrine.compile(model, "native", options=peregrine.CompileOptions(
            n_threads=1, schedule=s))
    for name, compiled in rivals.items():
        np.testing.assert_allclose(compiled.predict(T[:1000]), model.predict(T[:1000]),
                                   rtol=1e-5, atol=1e-6)
        used = next(iter(compiled._exec.programs.values())).variant(T.dtype).packed.layout.value
        t = best_cpu(compiled.predict, T, repeat)
        print(f"  peregrine-native {name} ({used}): {t * 1e3:.2f} ms ({per(t):.3f} "
              f"ns/(row*tree), {ref / t:.2f}x catboost)")


def session(model_bytes: bytes):
    sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return lambda X: sess.run(None, {name: X})


def row(label: str, rivals: dict, X: np.ndarray, repeat: int) -> None:
    for n in (len(X), 1):
        part = X[:n]
        times = {k: best(f, part, repeat if n > 1 else repeat * 200) for k, f in rivals.items()}
        base = times["peregrine-native"]
        shown = ", ".join(f"{k} {t * 1e3:.3f} ms ({t / base:.2f}x)" for k, t in times.items())
        print(f"{label} rows={n}: {shown}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--single-thread", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 20)).astype(np.float32)
    y = X[:, 0] + np.sin(X[:, 1]) + X[:, 2] * X[:, 3]
    T = rng.normal(size=(args.rows, 20)).astype(np.float32)
    print(f"python {platform.python_version()}, catboost {cb.__version__}, onnxruntime "
          f"{ort.__version__}, peregrine {peregrine.__version__}, cpus {os.cpu_count()}")

    model = cb.CatBoostRegressor(iterations=500, depth=6, verbose=0, random_seed=0,
                                 allow_writing_files=False).fit(X, y)
    if args.single_thread:
        single_thread(model, T, args.repeat)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "cb.onnx")
        model.save_model(path, format="onnx")
        with open(path, "rb") as f:
            cb_onnx = f.read()
    native = peregrine.compile(model, backend="native")
    np.testing.assert_allclose(native.predict(T[:1000]), model.predict(T[:1000]), rtol=1e-5,
                               atol=1e-6)
    row("catboost 500x6", {"peregrine-native": native.predict,
                           "catboost-predict": model.predict,
                           "onnxruntime": session(cb_onnx)}, T, args.repeat)

    rf = RandomForestRegressor(200, max_depth=8, random_state=0, n_jobs=-1).fit(X[:5000],
                                                                              y[:5000])
    onx = to_onnx(rf, X[:1])
    native = peregrine.compile(onx, backend="native")
    run = session(onx.SerializeToString())
    np.testing.assert_allclose(native.predict(T[:1000]), run(T[:1000])[0], rtol=1e-5, atol=1e-6)
    row("onnx-ml rf 200x8", {"peregrine-native": native.predict, "onnxruntime": run}, T,
        args.repeat)


if __name__ == "__main__":
    main()
