"""Sparse input benchmark (run by hand, not a test; docs/sparse.md): Peregrine against the
source library's own predict on the same scipy.sparse matrix, timed in one run.

    .venv/bin/python benchmarks/bench_sparse.py            # the three cases
    .venv/bin/python benchmarks/bench_sparse.py --crossover  # sparse linear path vs dense blocks

Cases: (a) LogisticRegression (3 classes) predict_proba on a 100,000 x 50,000 CSR at density
0.001 (the sparse linear path); (b) XGBoost (100 trees, depth 6) predict_proba on a CSR at
density 0.05 (dense blocks, absent entries missing); (c) RandomForest on a one-hot-like CSR
(one 1 per group of columns; dense blocks, absent entries 0). Each system: the best thread CPU
time (time.thread_time, the calling thread only: XGBoost's and BLAS's worker threads are not
counted, so XGBoost runs with nthread=1) of --rounds interleaved rounds, and the median wall
time. Outputs are checked against the library (rtol 1e-5 / atol 1e-6).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402
from scipy import sparse  # noqa: E402


def _one_thread():
    from peregrine.options import CompileOptions

    return CompileOptions(n_threads=1)  # thread CPU time then counts all of Peregrine's work


def _cpu() -> str:
    from peregrine.bench.report import _cpu_model  # the CPU name peregrine bench reports

    return _cpu_model() or platform.processor() or "unknown CPU"


def _random_csr(rows: int, cols: int, density: float, seed: int):
    """A CSR with about ``density`` of its entries stored, uniform in [0, 1) (scipy's
    sparse.random permutes all rows x cols positions: 37 GiB at 100,000 x 50,000)."""
    rng = np.random.default_rng(seed)
    n = int(rows * cols * density)
    coo = sparse.coo_matrix((rng.random(n), (rng.integers(0, rows, n), rng.integers(0, cols, n))),
                            shape=(rows, cols))
    return coo.tocsr()  # duplicates summed


def _timed(fns: dict, X, rounds: int) -> dict[str, tuple[float, float]]:
    """name -> (best thread CPU s, median wall s), the systems interleaved per round."""
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    wall: dict[str, list[float]] = {k: [] for k in fns}
    for fn in fns.values():
        fn(X)  # warm-up: compile, caches
    for _ in range(rounds):
        for k, fn in fns.items():
            w0, c0 = time.perf_counter(), time.thread_time()
            fn(X)
            cpu[k].append(time.thread_time() - c0)
            wall[k].append(time.perf_counter() - w0)
    return {k: (min(cpu[k]), float(np.median(wall[k]))) for k in fns}


def _check(want, got, what: str) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=what)


def _row(name: str, t: tuple[float, float], ref: tuple[float, float] | None) -> str:
    ratio = "" if ref is None else f"{ref[0] / t[0]:.2f}x ({ref[1] / t[1]:.2f}x)"
    return f"| {name} | {t[0]:.3f} | {t[1]:.3f} | {ratio} |"


def _table(title: str, res: dict, ref: str) -> str:
    lines = [f"\n{title}\n", "| | thread CPU, s | wall, s | vs library: thread CPU (wall) |",
             "|---|---|---|---|"]
    lines += [_row(k, v, None if k == ref else res[ref]) for k, v in res.items()]
    return "\n".join(lines)


def case_logreg(rows: int, cols: int, density: float, rounds: int) -> str:
    import peregrine
    ONE = _one_thread()
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    fit = _random_csr(20_000, cols, density * 5, 1)
    y = rng.integers(0, 3, fit.shape[0])
    model = LogisticRegression(max_iter=100).fit(fit, y)
    X = _random_csr(rows, cols, density, 2)
    fns = {"scikit-learn": model.predict_proba}
    for backend in ("native", "torch"):
        fns[f"Peregrine {backend}"] = peregrine.compile(model, backend=backend, options=ONE).predict_proba
    want = model.predict_proba(X)
    for k, fn in fns.items():
        _check(want, fn(X), k)
    res = _timed(fns, X, rounds)
    return _table(f"(a) LogisticRegression (3 classes) predict_proba, {rows:,} x {cols:,} CSR, "
                  f"density {density} ({X.nnz:,} entries)", res, "scikit-learn")


def case_xgboost(rows: int, cols: int, density: float, rounds: int) -> str:
    import peregrine
    ONE = _one_thread()
    import xgboost as xgb

    rng = np.random.default_rng(0)
    fit = _random_csr(20_000, cols, density, 3)
    y = (np.asarray(fit[:, :5].sum(axis=1)).ravel() > 0.1).astype(int) ^ \
        (rng.random(fit.shape[0]) < 0.1)
    model = xgb.XGBClassifier(n_estimators=100, max_depth=6, nthread=1).fit(fit, y)
    X = _random_csr(rows, cols, density, 4)
    compiled = peregrine.compile(model, backend="native", options=ONE)
    fns = {"XGBoost 3.2 (nthread=1)": model.predict_proba,
           "Peregrine native": compiled.predict_proba}
    want = model.predict_proba(X)
    for k, fn in fns.items():
        _check(want, fn(X), k)
    res = _timed(fns, X, rounds)
    return _table(f"(b) XGBoost 100 trees depth 6 predict_proba, {rows:,} x {cols:,} CSR, "
                  f"density {density}", res, "XGBoost 3.2 (nthread=1)")


def _one_hot(rows: int, groups: int, width: int, seed: int):
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, width, size=(rows, groups)) + np.arange(groups) * width
    indptr = np.arange(0, rows * groups + 1, groups)
    return sparse.csr_matrix((np.ones(rows * groups), cols.ravel(), indptr),
                             shape=(rows, groups * width))


def case_forest(rows: int, groups: int, width: int, rounds: int) -> str:
    import peregrine
    ONE = _one_thread()
    from sklearn.ensemble import RandomForestClassifier

    fit = _one_hot(20_000, groups, width, 5)
    y = (np.asarray(fit[:, ::7].sum(axis=1)).ravel() > groups / 7).astype(int)
    model = RandomForestClassifier(n_estimators=50, max_depth=10, n_jobs=1,
                                   random_state=0).fit(fit, y)
    X = _one_hot(rows, groups, width, 6)
    fns = {"scikit-learn (n_jobs=1)": model.predict_proba,
           "Peregrine native": peregrine.compile(model, backend="native", options=ONE).predict_proba}
    want = model.predict_proba(X)
    for k, fn in fns.items():
        _check(want, fn(X), k)
    res = _timed(fns, X, rounds)
    return _table(f"(c) RandomForest 50 trees depth 10 predict_proba, one-hot CSR {rows:,} x "
                  f"{groups * width:,} ({groups} groups of {width})", res,
                  "scikit-learn (n_jobs=1)")


def crossover(rows: int, cols: int, rounds: int, classes: int) -> str:
    """The sparse linear path against the dense blocks on the same model, by density."""
    import peregrine
    ONE = _one_thread()
    from sklearn.linear_model import LogisticRegression

    from peregrine.runtime import sparse_linear

    rng = np.random.default_rng(0)
    fit = _random_csr(5000, cols, 0.05, 1)
    model = LogisticRegression(max_iter=100).fit(fit, rng.integers(0, classes, 5000))
    compiled = peregrine.compile(model, backend="native", options=ONE)
    lines = [f"\nsparse linear path vs dense blocks (LogisticRegression {classes} classes, native, "
             f"{rows:,} x {cols:,})\n", "| density | sparse path, thread CPU s | dense blocks, "
             "thread CPU s | dense / sparse |", "|---|---|---|---|"]
    saved = sparse_linear.DENSITY_K
    try:
        for density in (0.01, 0.05, 0.1, 0.2, 0.4, 0.7, 1.0):
            X = _random_csr(rows, cols, density, 2)
            t = {}
            for label, limit in (("sparse", 1e9), ("dense", 0.0)):
                sparse_linear.DENSITY_K = limit
                t[label] = _timed({label: compiled.predict_proba}, X, rounds)[label][0]
            lines.append(f"| {density} | {t['sparse']:.4f} | {t['dense']:.4f} | "
                         f"{t['dense'] / t['sparse']:.2f} |")
    finally:
        sparse_linear.DENSITY_K = saved
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--crossover", action="store_true")
    ap.add_argument("--small", action="store_true", help="a quick run on small matrices")
    args = ap.parse_args(argv)
    import lightgbm  # noqa: F401  (versions below)
    import sklearn
    import xgboost

    load0 = os.getloadavg()[0]
    scale = 10 if args.small else 1
    if args.crossover:
        parts = [crossover(20_000 // scale, 2000, args.rounds, k) for k in (3, 20, 100)]
    else:
        parts = [case_logreg(100_000 // scale, 50_000, 0.001, args.rounds),
                 case_xgboost(100_000 // scale, 500, 0.05, args.rounds),
                 case_forest(100_000 // scale, 20, 50, args.rounds)]
    load1 = os.getloadavg()[0]
    print(f"{_cpu()}, {os.cpu_count()} vCPUs; load average {load0:.1f} -> {load1:.1f} "
          f"(loaded: shared with other jobs); scikit-learn {sklearn.__version__}, xgboost "
          f"{xgboost.__version__}; one thread (OMP/BLAS 1)")
    print("\n".join(parts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
