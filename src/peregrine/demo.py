"""`make demo`: train small XGBoost, LightGBM and RandomForest models on generated data, compile
each with the fastest available backend, validate against the source library, and print a speed
comparison. Run with ``python -m peregrine.demo [--rows N]``."""

from __future__ import annotations

import argparse
import copy
import importlib.util
import platform
import statistics
import sys
import time

import numpy as np

import peregrine
from peregrine.backends import available_backends

RTOL, ATOL = 1e-5, 1e-6


def _models(X: np.ndarray, y: np.ndarray):
    from sklearn.ensemble import RandomForestClassifier

    yield "RandomForest 100x d8", RandomForestClassifier(
        100, max_depth=8, n_jobs=2, random_state=0
    ).fit(X, y)
    if importlib.util.find_spec("xgboost"):
        import xgboost as xgb

        yield "XGBoost 200x d6", xgb.XGBClassifier(
            n_estimators=200, max_depth=6, n_jobs=2, random_state=0
        ).fit(X, y)
    else:
        print("  (xgboost not installed: skipped)")
    if importlib.util.find_spec("lightgbm"):
        import lightgbm as lgb

        yield "LightGBM 200x 63 leaves", lgb.LGBMClassifier(
            n_estimators=200, num_leaves=63, n_jobs=2, random_state=0, verbose=-1
        ).fit(X, y)
    else:
        print("  (lightgbm not installed: skipped)")


def _time(fn, X: np.ndarray, batch: int, repeat: int) -> float:
    """Median seconds per row of ``fn`` called on batches of ``batch`` rows."""
    if batch == 1:
        rows = [X[i : i + 1] for i in range(min(200, len(X)))]
        fn(rows[0])
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for r in rows:
                fn(r)
            samples.append((time.perf_counter() - t0) / len(rows))
        return statistics.median(samples)
    data = X[:batch]
    fn(data)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(data)
        samples.append((time.perf_counter() - t0) / len(data))
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=20000, help="rows to score (default 20000)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)

    from sklearn.datasets import make_classification

    X, y = make_classification(
        args.rows + 5000, 28, n_informative=14, random_state=0, flip_y=0.05
    )
    X_train, y_train, X_test = X[:5000], y[:5000], X[5000:].astype(np.float32)
    X_test[::50, 3] = np.nan  # missing values take each model's learned default direction
    backends = [b for b in ("native", "torch") if b in available_backends()] or ["reference"]
    batches = [1, 1000, min(args.rows, 100_000)]
    print(f"Peregrine {peregrine.__version__} demo on {platform.processor() or platform.machine()}"
          f", Python {platform.python_version()}; backends: {', '.join(backends)}")
    print(f"Scoring {len(X_test)} rows x 28 features (float32, with NaN); median of "
          f"{args.repeat} runs; batch 1 = per-row calls (the library's with n_jobs=1)\n")
    header = f"{'model':<24}{'system':<20}{'compile s':>10}{'max |diff|':>12}" + "".join(
        f"{'b=' + str(b) + ' us/row':>16}" for b in batches
    )
    print(header)
    print("-" * len(header))
    failures = 0
    for name, model in _models(X_train, y_train):
        # per-row calls of the library on one thread: its pool (n_jobs=2) costs far more than
        # a row (a RandomForest: 40 ms per call on an AMD EPYC Zen 3), as in bench_trees.py
        single = copy.deepcopy(model)
        single.set_params(n_jobs=1)
        base = {b: _time((single if b == 1 else model).predict_proba, X_test, b, args.repeat)
                for b in batches}
        print(f"{name:<24}{'source library':<20}{'':>10}{'':>12}" + "".join(
            f"{base[b] * 1e6:>16.3f}" for b in batches))
        want = model.predict_proba(X_test)
        for backend in backends:
            t0 = time.perf_counter()
            fast = peregrine.compile(model, backend)
            compile_s = time.perf_counter() - t0
            got = fast.predict_proba(X_test)
            diff = float(np.max(np.abs(got - want)))
            ok = np.allclose(got, want, rtol=RTOL, atol=ATOL) and np.array_equal(
                fast.predict(X_test), model.predict(X_test))
            failures += not ok
            times = {b: _time(fast.predict_proba, X_test, b, args.repeat) for b in batches}
            cells = "".join(f"{times[b] * 1e6:>9.3f} ({base[b] / times[b]:>4.1f}x)" for b in batches)
            tag = "" if ok else "  MISMATCH"
            print(f"{'':<24}{'peregrine ' + backend:<20}{compile_s:>10.2f}{diff:>12.2e}{cells}{tag}")
    print("\n(x) = speed-up over the source library's own predict_proba at that batch size.")
    if failures:
        print(f"{failures} compiled model(s) did NOT match the source library", file=sys.stderr)
        return 1
    print("All compiled models match their source library (rtol 1e-5, atol 1e-6; labels equal).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
