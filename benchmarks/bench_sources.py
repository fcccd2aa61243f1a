"""Model sources (issue #15): CatBoost (500 trees, depth 6) against CatBoost's own predict and
ONNX Runtime on CatBoost's ONNX export; an ONNX-ML tree model (skl2onnx, a 200-tree random
forest) against ONNX Runtime on the same file. Best-of-N wall times at 100K rows and one row.

    .venv/bin/python benchmarks/bench_sources.py [--rows 100000] [--repeat 5]

``--single-thread``: the CatBoost model on one thread only, each tree representation that can
hold it against CatBoost's predict(thread_count=1), timed with the calling thread's CPU time
(time.thread_time: other processes' load adds no time), best of ``--repeat``, in ns per
(row, tree):

    .venv/bin/python benchmarks/bench_sources.py --single-thread --rows 20000 --repeat 15

``--ctr``: a default CatBoostClassifier (200 iterations, depth 6) on 6 string categorical
columns (20-500 categories) and 10 numeric ones, so CatBoost builds CTRs of single features and
of combinations; Peregrine native against CatBoost's predict_proba on DataFrames (CatBoost's
ONNX export refuses models with CTRs, so there is no ONNX Runtime row). ``--profile`` adds a
per-node timing of the compiled graph's steps (reference rules) and a cProfile of one call:

    .venv/bin/python benchmarks/bench_sources.py --ctr [--rows 100000] [--repeat 5] [--profile]
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
import pandas as pd
from skl2onnx import to_onnx
from sklearn.ensemble import RandomForestRegressor

import peregrine


def best(fn, X, repeat: int, clock=time.perf_counter) -> float:
    """Best of ``repeat`` timed calls after one warm-up, on ``clock``."""
    fn(X)
    times = []
    for _ in range(repeat):
        t = clock()
        fn(X)
        times.append(clock() - t)
    return min(times)


def best_cpu(fn, X, repeat: int) -> float:
    """The calling thread's CPU time: other processes' load adds nothing."""
    return best(fn, X, repeat, clock=time.thread_time)


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


CTR_CATS = (20, 50, 100, 200, 350, 500)  # categories of the 6 string columns


def ctr_frame(n: int, seed: int) -> pd.DataFrame:
    r = np.random.default_rng(seed)
    cols = {f"n{i}": r.normal(size=n) for i in range(10)}
    for i, k in enumerate(CTR_CATS):
        # skewed frequencies (a few frequent categories, a long tail), as real columns have
        cols[f"c{i}"] = np.array([f"v{i}_{j}" for j in range(k)], dtype=object)[
            np.minimum(r.zipf(1.3, n) - 1, k - 1)]
    return pd.DataFrame(cols)


def ctr_model(iterations: int) -> cb.CatBoostClassifier:
    df = ctr_frame(20_000, 0)
    code = lambda c: df[c].str.split("_").str[1].astype(int)  # noqa: E731
    logit = (df.n0 + np.sin(df.n1) + 0.5 * ((code("c0") * 7 + code("c1")) % 5 - 2)
             + 0.3 * (code("c3") % 3 == 0) * df.n2 + 0.2 * (code("c5") % 4 - 1.5))
    y = (logit + np.random.default_rng(1).logistic(size=len(df)) > 0).astype(int)
    cats = [c for c in df.columns if c.startswith("c")]
    return cb.CatBoostClassifier(iterations=iterations, depth=6, cat_features=cats, verbose=0,
                                 random_seed=0, allow_writing_files=False).fit(df, y)


def ctr_profile(compiled, T) -> None:
    """Seconds per graph node (each op's reference rule, as native runs its non-forest ops) and
    a cProfile of one native predict_proba."""
    import cProfile
    import pstats

    from peregrine.runtime.inputs import prepare_input

    spec = compiled.spec
    t = time.perf_counter()
    X = prepare_input(T, spec)
    print(f"  input boundary (hashing): {time.perf_counter() - t:.3f} s")
    values = {}
    for node in spec.graph.toposort():
        t = time.perf_counter()
        values[node.name] = X if node.op.name == "INPUT" else node.attrs.rule(
            node, [values[i] for i in node.inputs], compiled.options)
        print(f"  {node.name} {node.op.name} width={node.width}: "
              f"{time.perf_counter() - t:.3f} s")
    prof = cProfile.Profile()
    prof.runcall(compiled.predict_proba, T)
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


def ctr_bench(args) -> None:
    model = ctr_model(args.iterations)
    T = ctr_frame(args.rows, 2)
    native = peregrine.compile(model, backend="native")
    np.testing.assert_allclose(native.predict_proba(T[:2000]), model.predict_proba(T[:2000]),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(native.predict(T[:2000]), model.predict(T[:2000]))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            model.save_model(os.path.join(tmp, "m.onnx"), format="onnx")
        onnx_note = "exported (unexpected)"
    except cb.CatBoostError as exc:
        onnx_note = f"refused by CatBoost: {str(exc).splitlines()[0][:120]}"
    print(f"catboost ctr model: {model.tree_count_} trees, onnx export {onnx_note}")
    if args.profile:
        ctr_profile(native, T)
    row(f"catboost ctr {model.tree_count_}x6", {"peregrine-native": native.predict_proba,
                                               "catboost-predict": model.predict_proba},
        T, args.repeat)
    # one row as a numpy object array (the DataFrame row above pays pandas' column access)
    one = T[:1].to_numpy(dtype=object)
    np.testing.assert_allclose(native.predict_proba(one), model.predict_proba(T[:1]),
                               rtol=1e-5, atol=1e-6)
    t = best(native.predict_proba, one, args.repeat * 200)
    print(f"catboost ctr rows=1 numpy object array: peregrine-native {t * 1e6:.1f} us")
    # one thread each, CPU time of the calling thread (holds on a loaded machine)
    one_thread = peregrine.compile(model, backend="native",
                                   options=peregrine.CompileOptions(n_threads=1))
    ours = best_cpu(one_thread.predict_proba, T, args.repeat)
    theirs = best_cpu(lambda X: model.predict_proba(X, thread_count=1), T, args.repeat)
    print(f"catboost ctr rows={len(T)} one thread (CPU time): peregrine-native "
          f"{ours * 1e3:.1f} ms, catboost-predict {theirs * 1e3:.1f} ms ({theirs / ours:.2f}x)")


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
    ap.add_argument("--ctr", action="store_true")
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 20)).astype(np.float32)
    y = X[:, 0] + np.sin(X[:, 1]) + X[:, 2] * X[:, 3]
    T = rng.normal(size=(args.rows, 20)).astype(np.float32)
    print(f"python {platform.python_version()}, catboost {cb.__version__}, onnxruntime "
          f"{ort.__version__}, peregrine {peregrine.__version__}, cpus {os.cpu_count()}")
    if args.ctr:
        ctr_bench(args)
        return

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
