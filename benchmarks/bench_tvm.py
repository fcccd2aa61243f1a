"""The tvm backend against the torch backend on bench_trees.py's three tree models (XGBoost 500
trees depth 8, LightGBM 500 trees depth 8 / 256 leaves, RandomForest 100 trees depth 8; 28
features, trained on 100K rows), ``predict_proba`` on 10K and 100K float32 rows, and the tvm
backend's cold compile time (an empty library cache).

    .venv/bin/python benchmarks/bench_tvm.py [--threads 1] [--rounds 5]
    .venv/bin/python benchmarks/bench_tvm.py --featurizers [--rows 100000]
    .venv/bin/python benchmarks/bench_tvm.py --kernels [--rows 20000]
    .venv/bin/python benchmarks/bench_tvm.py --networks [--rows 100000]
    .venv/bin/python benchmarks/bench_tvm.py --scalers [--rows 100000]
    .venv/bin/python benchmarks/bench_tvm.py --neighbours [--rows 20000]

``--featurizers`` times pipelines whose featurizers TVM lowers in ``ops_columns.py`` (one-hot
codes of float categories into a forest, ordinal codes into a forest, polynomial terms, bins,
a ufunc) against scikit-learn and the torch backend, ``predict_proba`` on float64 rows, and
one row at a time (best of 5 loops of 300 calls). ``--kernels`` does the same for kernel SVMs
and KernelPCA (``ops_kernel.py``), ``--networks`` for PyTorch networks in pipelines
(``ops_nn.py``), with the native backend beside them.

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


def featurizer_models(rows: int) -> list[tuple[str, object, np.ndarray]]:
    """(name, fitted pipeline, test rows) for ``--featurizers``."""
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import (
        FunctionTransformer,
        KBinsDiscretizer,
        OneHotEncoder,
        OrdinalEncoder,
        PolynomialFeatures,
        StandardScaler,
    )

    rng = np.random.default_rng(0)
    cats = rng.normal(size=(10, 20)).round(3) * 7  # 10 columns x 20 float categories
    Xc = np.column_stack([rng.choice(c, rows + 20_000) for c in cats])
    yc = (Xc[:, 0] + Xc[:, 1] > 0).astype(int)
    Xn = rng.normal(size=(rows + 20_000, 10))
    yn = (Xn[:, 0] * Xn[:, 1] + Xn[:, 2] > 0).astype(int)
    fit, test = slice(0, 20_000), slice(20_000, None)
    forest = dict(n_estimators=50, max_depth=8, random_state=0, n_jobs=1)
    models = [
        ("OneHotEncoder(10 x 20 float categories) -> RandomForest(50x8)", make_pipeline(
            OneHotEncoder(handle_unknown="ignore", sparse_output=False),
            RandomForestClassifier(**forest)), Xc),
        ("OrdinalEncoder(10 columns) -> RandomForest(50x8)", make_pipeline(
            OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1),
            RandomForestClassifier(**forest)), Xc),
        ("PolynomialFeatures(3) of 10 -> LogisticRegression", make_pipeline(
            PolynomialFeatures(3), StandardScaler(), LogisticRegression(max_iter=300)), Xn),
        ("KBinsDiscretizer(8, onehot-dense) -> LogisticRegression", make_pipeline(
            KBinsDiscretizer(n_bins=8, encode="onehot-dense", quantile_method="linear"),
            LogisticRegression(max_iter=300)), Xn),
        ("FunctionTransformer(np.exp) -> StandardScaler -> LogisticRegression", make_pipeline(
            FunctionTransformer(np.exp), StandardScaler(), LogisticRegression()), Xn),
    ]
    out = []
    for name, model, X in models:
        y = yc if X is Xc else yn
        out.append((name, model.fit(X[fit], y[fit]), np.ascontiguousarray(X[test])))
    return out


def kernel_models(rows: int) -> list[tuple[str, object, np.ndarray, str]]:
    """(name, fitted model, test rows, method) for ``--kernels``: kernel SVMs and KernelPCA,
    whose KERNEL node TVM lowers in ``ops_kernel.py``."""
    import warnings

    from sklearn.decomposition import KernelPCA
    from sklearn.svm import SVC, SVR

    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows + 4_000, 20))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int)
    fit, test = slice(0, 4_000), slice(4_000, None)
    models = [
        ("SVC(rbf), 4K training rows", SVC(), "decision_function"),
        ("SVC(poly, degree 3)", SVC(kernel="poly", degree=3), "decision_function"),
        ("SVR(rbf)", SVR(), "predict"),
        ("KernelPCA(rbf, 8 components), 2K training rows",
         KernelPCA(8, kernel="rbf", gamma=0.05), "transform"),
    ]
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, model, method in models:
            if isinstance(model, KernelPCA):
                model.fit(X[:2_000])
            else:
                model.fit(X[fit], y[fit])
            n_sv = getattr(model, "support_vectors_", np.empty((2_000, 0))).shape[0]
            out.append((f"{name} ({n_sv} vectors)", model, np.ascontiguousarray(X[test]), method))
    return out


def network_models(rows: int) -> list[tuple[str, object, np.ndarray, str]]:
    """(name, fitted pipeline, test rows, method) for ``--networks``: PyTorch networks inside
    pipelines (TorchStep), whose layers TVM lowers in ``ops_nn.py``."""
    import torch
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from torch import nn

    from peregrine import TorchStep

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows + 5_000, 20)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int)
    fit, test = slice(0, 5_000), slice(5_000, None)
    mlp = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 32), nn.BatchNorm1d(32),
                        nn.SiLU(), nn.Linear(32, 8)).eval()
    head = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 3), nn.Softmax(dim=1))
    models = [
        ("StandardScaler -> TorchStep(20-64-32-8, ReLU, BatchNorm, SiLU) -> LogisticRegression",
         make_pipeline(StandardScaler(), TorchStep(mlp), LogisticRegression(max_iter=300)),
         "predict_proba"),
        ("TorchStep(20-32-3, ReLU, Softmax) alone", TorchStep(head.eval()), "transform"),
    ]
    out = []
    for name, model, method in models:
        model.fit(X[fit], y[fit])
        out.append((name, model, np.ascontiguousarray(X[test]), method))
    return out


def neighbour_models(rows: int) -> list[tuple[str, object, np.ndarray, str]]:
    """(name, fitted model, test rows, method) for ``--neighbours``: KNN models, which TVM
    lowers in ``ops_neighbours.py``."""
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows + 5_000, 20))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int)
    fit, test = slice(0, 5_000), slice(5_000, None)
    W = rng.normal(size=(20_000 + max(1, rows // 10), 200))
    return [
        ("KNeighborsClassifier(5), 5K fitted rows of 20", KNeighborsClassifier(5).fit(
            X[fit], y[fit]), X[test], "predict_proba"),
        ("KNeighborsRegressor(10, distance, manhattan)", KNeighborsRegressor(
            10, weights="distance", metric="manhattan").fit(X[fit], X[fit, 0]), X[test],
         "predict"),
        # wide rows: the native backend's search (knn_search.py), TVM's fallback to the rule
        ("KNeighborsClassifier(5), 20K fitted rows of 200 (rows / 10 queried)",
         KNeighborsClassifier(5).fit(W[:20_000], W[:20_000, 0] > 0),
         W[20_000:20_000 + max(1, rows // 10)], "predict_proba"),
    ]


def scaler_models(rows: int) -> list[tuple[str, object, np.ndarray, str]]:
    """(name, fitted scaler, test rows, method) for ``--scalers``: wide ``transform`` outputs,
    where handing the result over (and Relax's element-wise code) is most of a call."""
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler, RobustScaler, StandardScaler

    X = np.random.default_rng(0).normal(size=(rows, 64))
    holes = np.where(np.random.default_rng(1).random(X.shape) < 0.05, np.nan, X)
    return [("StandardScaler, 64 columns", StandardScaler().fit(X), X, "transform"),
            ("StandardScaler, 64 float32 columns", StandardScaler().fit(X),
             X.astype(np.float32), "transform"),
            ("MinMaxScaler(clip=True), 64 columns", MinMaxScaler(clip=True).fit(X), X,
             "transform"),
            ("RobustScaler, 64 columns", RobustScaler().fit(X), X, "transform"),
            ("SimpleImputer(median) -> StandardScaler, 64 columns", make_pipeline(
                SimpleImputer(strategy="median"), StandardScaler()).fit(holes), holes,
             "transform")]


def networks(args: argparse.Namespace) -> None:
    table(args, network_models(args.rows), ("native", "torch", "tvm"), "pipeline")


def featurizers(args: argparse.Namespace) -> None:
    models = [(n, m, X, "predict_proba") for n, m, X in featurizer_models(args.rows)]
    table(args, models, ("torch", "tvm"), "pipeline")


def kernels(args: argparse.Namespace) -> None:
    table(args, kernel_models(args.rows), ("native", "torch", "tvm"), "model")


def table(args: argparse.Namespace, models: list, backends: tuple[str, ...], what: str) -> None:
    """scikit-learn and ``backends`` on each model, interleaved round by round; ratios are
    the others' time over tvm's."""
    import torch
    import tvm
    from threadpoolctl import threadpool_limits

    import peregrine

    options = peregrine.CompileOptions(n_threads=args.threads)
    systems = ("sklearn", *backends)
    print(f"CPU: {cpu_model()}; threads {args.threads}; {args.rows} rows; torch "
          f"{torch.__version__}, tvm {tvm.__version__}; best of {args.rounds} x {args.repeat}")
    print(f"| {what} | method | " + " | ".join(f"{k} s" for k in systems) + " | "
          + " | ".join(f"{k} / tvm" for k in systems if k != "tvm")
          + " | one row: " + " / ".join(systems) + " us | tvm fallbacks | max diff |")
    print("|---" * (2 * len(systems) + 4) + "|")
    for name, model, X, method in models:
        fast = {b: peregrine.compile(model, b, options=options) for b in backends}
        calls = {"sklearn": getattr(model, method),
                 **{b: getattr(fast[b], method) for b in backends}}
        best = dict.fromkeys(calls, np.inf)
        # scikit-learn's OpenMP loops (its KNN search) and BLAS held to --threads as well
        with threadpool_limits(limits=args.threads):
            for _ in range(args.rounds):
                for key, fn in calls.items():
                    best[key] = min(best[key], best_time(fn, X, args.repeat))
            one = {key: one_row_us(fn, X[:1]) for key, fn in calls.items()}
        diff = float(np.abs(calls["tvm"](X) - calls["sklearn"](X)).max())
        fb = fast["tvm"].explain_dict()["backend_choices"].get("fallback_ops", [])
        print(f"| {name} | `{method}` | " + " | ".join(f"{best[k]:.4f}" for k in systems)
              + " | " + " | ".join(f"{best[k] / best['tvm']:.2f}x" for k in systems
                                   if k != "tvm")
              + " | " + " / ".join(f"{one[k]:.1f}" for k in systems)
              + f" | {', '.join(fb) or 'none'} | {diff:.1e} |", flush=True)


def one_row_us(fn, row: np.ndarray, calls: int = 300, loops: int = 5) -> float:
    """Microseconds per single-row call: the best of ``loops`` loops of ``calls`` calls."""
    for _ in range(50):
        fn(row)
    best = np.inf
    for _ in range(loops):
        t = time.perf_counter()
        for _ in range(calls):
            fn(row)
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--models", default="xgboost,lightgbm,rf")
    parser.add_argument("--featurizers", action="store_true",
                        help="time the featurizer pipelines instead of the tree models")
    parser.add_argument("--scalers", action="store_true",
                        help="time scalers' transform (wide float64 outputs)")
    parser.add_argument("--networks", action="store_true",
                        help="time PyTorch networks in pipelines (TorchStep)")
    parser.add_argument("--kernels", action="store_true",
                        help="time kernel SVMs and KernelPCA instead of the tree models")
    parser.add_argument("--neighbours", action="store_true",
                        help="time KNN classifiers and regressors")
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args(argv)
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    os.environ["PEREGRINE_CACHE_DIR"] = tempfile.mkdtemp(prefix="peregrine-bench-tvm-")
    if args.featurizers:
        featurizers(args)
        return
    if args.kernels:
        kernels(args)
        return
    if args.networks:
        networks(args)
        return
    if args.neighbours:
        table(args, neighbour_models(args.rows), ("native", "torch", "tvm"), "model")
        return
    if args.scalers:
        table(args, scaler_models(args.rows), ("native", "torch", "tvm"), "model")
        return

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
