"""What the guards' interval rules buy (run by hand, not a test): pipelines whose guarded chain
holds an op that had no interval rule (QuantileTransformer, PowerTransformer, a
FunctionTransformer ufunc, a stacking model's members, KernelPCA's kernel) got the input
bound M = 0 (KernelPCA: M = -1, every row), so every row with a non-zero value had the
guarded nodes evaluated by the reference rules on every call. Each model is compiled once and
timed twice in this run: with the bound runtime/guards.py now finds, and with M forced to 0 (the
previous result for these ops, set in the guards' cache before the first call).

    .venv/bin/python benchmarks/bench_guards.py --rows 10000 --backend native

Process CPU time per call (both threads), median of --repeats after a warm-up; one row (the
online path) and a --rows batch; answers checked equal to scikit-learn's (rtol 1e-5)."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "2")

import numpy as np  # noqa: E402
from sklearn.decomposition import KernelPCA  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    GradientBoostingClassifier,
    RandomForestClassifier,
    StackingClassifier,
)
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import (  # noqa: E402
    FunctionTransformer,
    PowerTransformer,
    QuantileTransformer,
)

import peregrine  # noqa: E402
from peregrine.runtime import guards as guards_mod  # noqa: E402


def cases():
    return {
        "quantile->logistic": make_pipeline(QuantileTransformer(n_quantiles=200),
                                            LogisticRegression(max_iter=500)),
        "power->logistic": make_pipeline(PowerTransformer(), LogisticRegression(max_iter=500)),
        "sqrt->forest": make_pipeline(FunctionTransformer(np.sqrt), RandomForestClassifier(
            50, max_depth=8, random_state=0)),
        "stacking->logistic": StackingClassifier(
            [("rf", RandomForestClassifier(50, max_depth=8, random_state=0)),
             ("gb", GradientBoostingClassifier(n_estimators=50, random_state=0))],
            final_estimator=LogisticRegression()),
        # KernelCenterer re-validates the kernel; fitted on FIT_ROWS rows (main)
        "kpca->logistic": make_pipeline(KernelPCA(8, kernel="rbf", gamma=0.05),
                                        LogisticRegression(max_iter=500)),
    }


FIT_ROWS = {"kpca->logistic": 1500}  # KernelPCA's fit is an eigendecomposition of rows x rows


def per_call(fn, X, repeats):
    fn(X)
    times = []
    for _ in range(repeats):
        t = time.process_time()
        fn(X)
        times.append(time.process_time() - t)
    return float(np.median(times))


def per_row_call(fn, rows, repeats):
    """Median over ``repeats`` of the mean process time of one call over the distinct rows."""
    fn(rows[0])
    times = []
    for _ in range(repeats):
        t = time.process_time()
        for r in rows:
            fn(r)
        times.append((time.process_time() - t) / len(rows))
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--backend", default="native")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    X = np.abs(rng.normal(size=(max(args.rows, 2000), args.features))) + 0.01
    y = (X[:, 0] + X[:, 1] > 1.6).astype(int)
    Xb = X[:args.rows]
    singles = [X[i:i + 1].copy() for i in range(500)]
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines()
                  if ln.startswith("Model name")), platform.processor())
    print(f"CPU: {model}; load average {os.getloadavg()}; backend {args.backend}; "
          f"{args.rows} rows x {args.features}")
    print(f"{'case':20s} {'M now':>10s} {'batch M':>10s} {'batch M=0':>10s} {'ratio':>6s} "
          f"{'row M':>9s} {'row M=0':>9s} {'ratio':>6s}")
    for name, p in cases().items():
        p.fit(X[:FIT_ROWS.get(name)], y[:FIT_ROWS.get(name)])
        want = p.predict_proba(Xb)
        res = {}
        for forced in (False, True):
            c = peregrine.compile(p, backend=args.backend)
            found, m = guards_mod.guards(c.spec)
            if forced:  # the previous analysis's answer for an op without a rule
                guards_mod._CACHE[id(c.spec)] = (c.spec, found, 0.0)
            else:
                bound = m
            np.testing.assert_allclose(c.predict_proba(Xb), want, rtol=1e-5, atol=1e-6)
            res[forced] = (per_call(c.predict_proba, Xb, args.repeats),
                           per_row_call(c.predict_proba, singles, args.repeats))
        (b1, r1), (b0, r0) = res[False], res[True]
        print(f"{name:20s} {bound:10.3g} {b1 * 1e3:8.2f}ms {b0 * 1e3:8.2f}ms {b0 / b1:6.1f} "
              f"{r1 * 1e6:7.1f}us {r0 * 1e6:7.1f}us {r0 / r1:6.1f}")


if __name__ == "__main__":
    main()
