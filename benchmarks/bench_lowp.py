"""Low-precision tensor programs (Precision.BFLOAT16 / FLOAT16, docs/passes.md): each model
compiled on the torch backend at AUTO, BFLOAT16 and FLOAT16 on the same commit and timed in
one run; the answers checked (labels against scikit-learn, scores' largest deviation
printed) and the compile-time measured error shown.

    .venv/bin/python benchmarks/bench_lowp.py --rows 100000 [--device cuda] [--repeat 5]

Wall time and process CPU time (all threads) per call, median of ``--repeat``; on a shared
machine the CPU column is the steadier one. Ratios are AUTO's time over the level's. On CUDA
the call includes the host-to-device copy of the rows and the copy back; the "program" column
times the tensor program alone on rows already on the device (``forward_tensors``, synchronized).
"Error" is the largest absolute deviation from the library divided by the output's largest
magnitude.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
from sklearn.datasets import make_classification, make_regression
from sklearn.decomposition import PCA
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import peregrine
from peregrine import CompileOptions

LEVELS = ("auto", "bfloat16", "float16")


def _cases(rows: int, seed: int = 0) -> list[tuple[str, object, np.ndarray, str]]:
    fit = 5000
    X, y = make_classification(fit + rows, 100, n_informative=30, n_classes=4,
                               random_state=seed)
    Xs = StandardScaler().fit_transform(X)
    mlp = MLPClassifier((256, 256), max_iter=20, random_state=seed).fit(Xs[:fit], y[:fit])
    X2, y2 = make_classification(fit + rows, 200, n_informative=40, n_classes=3,
                                 random_state=seed + 1)
    X2 = X2 * 4.0 + 1.0
    pca = make_pipeline(StandardScaler(), PCA(50), LogisticRegression(max_iter=500)).fit(
        X2[:fit], y2[:fit])
    X3, y3 = make_regression(fit + rows, 200, n_targets=500, random_state=seed + 2)
    lin = LinearRegression().fit(X3[:fit], y3[:fit])
    return [
        ("MLPClassifier(256, 256), 100 features, 4 classes", mlp, Xs[fit:], "predict_proba"),
        ("StandardScaler -> PCA(50 of 200) -> LogisticRegression (3 classes)", pca, X2[fit:],
         "predict_proba"),
        ("LinearRegression, 200 features -> 500 outputs", lin, X3[fit:], "predict"),
    ]


def _time(fn, X, repeat: int) -> tuple[float, float]:
    fn(X)  # warm-up
    walls, cpus = [], []
    for _ in range(repeat):
        w, c = time.perf_counter(), time.process_time()
        fn(X)
        cpus.append(time.process_time() - c)
        walls.append(time.perf_counter() - w)
    return statistics.median(walls), statistics.median(cpus)


def _program_time(c, X, output: str, device: str, repeat: int) -> float:
    import torch

    x = torch.from_numpy(np.ascontiguousarray(X)).to(device)
    run = c._exec.forward_tensors  # noqa: SLF001 - the program alone, no host copies

    def once() -> None:
        run(x, (output,))
        torch.cuda.synchronize()

    once()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        once()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=5)
    # one thread by default: on a shared 2-core machine two OpenMP threads wait on each
    # other's barriers behind other people's jobs (a 4096-row bfloat16 product took 16x
    # longer with 2 threads than with 1 at load 6), which measures the load, not the program
    ap.add_argument("--threads", type=int, default=1, help="CompileOptions.n_threads")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"),
                    help="the rows' dtype handed to the compiled model")
    args = ap.parse_args()
    print(f"{platform.processor() or platform.machine()}, device {args.device}, "
          f"{args.rows} rows, {args.dtype} input, {args.threads} thread(s), "
          f"median of {args.repeat}")
    gpu = args.device.startswith("cuda")
    print("| case | method | level | wall s | CPU s | vs AUTO (wall, CPU) | "
          + ("program s | vs AUTO | " if gpu else "")
          + "error vs library | labels differ | measured at compile (max abs; labels) |")
    print("|---|---|---|---:|---:|---:|" + ("---:|---:|" if gpu else "") + "---:|---:|---|")
    for name, model, X, method in _cases(args.rows):
        X = X.astype(args.dtype)
        want = getattr(model, method)(X)
        labels = model.predict(X) if hasattr(model, "classes_") else None
        base, base_prog = None, None
        for level in LEVELS:
            c = peregrine.compile(model, "torch", device=args.device,
                                  options=CompileOptions(precision=level,
                                                         n_threads=args.threads))
            fn = getattr(c, method)
            wall, cpu = _time(fn, X, args.repeat)
            base = base or (wall, cpu)
            dev = float(np.abs(fn(X) - want).max() / np.abs(want).max())
            changed = "" if labels is None else int((c.predict(X) != labels).sum())
            prog = ""
            if gpu:
                out = c.spec.methods[method].output
                t = _program_time(c, X, out, args.device, args.repeat)
                base_prog = base_prog or t
                prog = f"{t:.4f} | {base_prog / t:.2f} | "
            e = next((p for p in c.passes if p["pass"] == "measured_error"), None)
            seen = "" if e is None else "; ".join(
                f"{k}: {v.get('max_abs', v.get('labels_changed')):.3g}"
                for k, v in e.get("errors", {}).items())
            print(f"| {name} | {method} | {level} | {wall:.3f} | {cpu:.3f} | "
                  f"{base[0] / wall:.2f}, {base[1] / cpu:.2f} | {prog}{dev:.2e} | {changed} | "
                  f"{seen} |", flush=True)


if __name__ == "__main__":
    main()
