"""What Precision.FAST's gated passes buy (run by hand, not a test): each model compiled on the
same commit at the exact level (AUTO) and at FAST (passes/fold_linear.py folds the linear
chain, passes/decisions.py drops the monotone map before predict's decision), timed in one run
so the figures are ratios under the same load.

    .venv/bin/python benchmarks/bench_precision.py --rows 100000

Cases:
- StandardScaler -> PCA(50 of 200) -> LogisticRegression (3 classes): FAST folds the three
  steps into one 200 x 3 product (AUTO: 200 x 50, then 50 x 3).
- StandardScaler -> MLPClassifier(64, binary): FAST folds the scaler into the first layer and
  predict thresholds the raw output instead of its sigmoid.
Per backend (native, torch) and method: median of --repeats batch calls after a warm-up (wall
and process CPU time: every thread of the process) at --rows rows, and the one-row call (thread
CPU time per call, median of 5 runs of --one-row-calls calls). Answers checked: FAST against
AUTO within rtol 1e-5 / atol 1e-6, labels identical to scikit-learn. Also the compile-time cost
of the measured-error report (passes/measure.py) on synthetic and on 500 sample rows.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

THREADS = "2"
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, THREADS)

import numpy as np  # noqa: E402


def _cpu() -> str:
    from peregrine.bench.report import _cpu_model  # the CPU name peregrine bench reports

    try:  # the microarchitecture LLVM sees ("AMD EPYC" alone does not say which)
        import llvmlite.binding as llvm

        arch = f" ({llvm.get_host_cpu_name()})"
    except (ImportError, RuntimeError):
        arch = ""
    return (_cpu_model() or "unknown CPU") + arch


def pca_case(rng):
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    def rows(n):
        z = rng.normal(size=(n, 20))
        return z @ mix + 0.3 * rng.normal(size=(n, 200)) + 40.0

    mix = rng.normal(size=(20, 200))
    X = rows(20000)
    y = np.digitize(X[:, :3].sum(axis=1) - 120.0, [-2.0, 2.0])
    model = make_pipeline(StandardScaler(), PCA(50, random_state=0),
                          LogisticRegression(max_iter=2000)).fit(X, y)
    return "StandardScaler -> PCA(50 of 200) -> LogisticRegression (3 classes)", model, rows


def mlp_case(rng):
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    def rows(n):
        return rng.normal(size=(n, 100)) * 4.0 + 10.0

    X = rows(20000)
    y = (np.sin(X[:, 0]) + X[:, 1] * X[:, 2] / 16 > 0).astype(int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make_pipeline(StandardScaler(), MLPClassifier((64,), max_iter=50,
                                                              random_state=0)).fit(X, y)
    return "StandardScaler -> MLPClassifier(64, binary)", model, rows


def _batch(fn, X, repeats):
    fn(X)
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn(X)
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    return float(np.median(walls)), float(np.median(cpus))


def _one_row(fn, x, calls):
    fn(x)
    runs = []
    for _ in range(5):
        c = time.thread_time()
        for _ in range(calls):
            fn(x)
        runs.append((time.thread_time() - c) / calls)
    return float(np.median(runs))


def _report_cost(model, sample):
    """Milliseconds the measured-error report adds to a FAST compile (thread CPU time)."""
    import dataclasses

    from peregrine.frontends import convert
    from peregrine.options import CompileOptions
    from peregrine.passes import report_error, run_passes

    spec = convert(model)
    opts = CompileOptions(precision="fast")
    out = {}
    for label, rows in (("synthetic", None), ("500 sample rows", sample)):
        report: list = []
        fast = dataclasses.replace(spec, graph=run_passes(spec.graph, opts, report)).graph
        c = time.thread_time()
        for _ in range(5):
            report_error(spec.graph, fast, list(report), rows, opts)
        out[label] = (time.thread_time() - c) / 5 * 1e3
    return out


def main() -> None:
    import peregrine
    from peregrine import CompileOptions

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=100000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--one-row-calls", type=int, default=2000)
    p.add_argument("--backends", default="native,torch")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    print(f"CPU: {_cpu()}; {os.cpu_count()} cores; load average "
          f"{', '.join(f'{v:.1f}' for v in os.getloadavg())} at start")
    print(f"rows {args.rows:,}; batch: median of {args.repeats} (wall s, process CPU s); one "
          f"row: thread CPU us per call, median of 5 x {args.one_row_calls} calls\n")
    print("| case | backend | method | AUTO wall / CPU s | FAST wall / CPU s | FAST speed-up "
          "(wall, CPU) | one row AUTO / FAST us | one-row speed-up |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for make in (pca_case, mlp_case):
        name, model, rows = make(rng)
        X = rows(args.rows)
        want = model.predict(X)
        for backend in args.backends.split(","):
            exact = peregrine.compile(model, backend)
            fast = peregrine.compile(model, backend, options=CompileOptions(precision="fast"))
            for method in ("predict", "predict_proba"):
                a, b = getattr(fast, method)(X), getattr(exact, method)(X)
                if method == "predict":
                    assert np.array_equal(a, want), "FAST labels differ from scikit-learn"
                else:
                    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
                ew, ec = _batch(getattr(exact, method), X, args.repeats)
                fw, fc = _batch(getattr(fast, method), X, args.repeats)
                e1 = _one_row(getattr(exact, method), X[:1], args.one_row_calls)
                f1 = _one_row(getattr(fast, method), X[:1], args.one_row_calls)
                print(f"| {name} | {backend} | {method} | {ew:.4f} / {ec:.4f} | "
                      f"{fw:.4f} / {fc:.4f} | {ew / fw:.2f}, {ec / fc:.2f} | "
                      f"{e1 * 1e6:.1f} / {f1 * 1e6:.1f} | {e1 / f1:.2f} |", flush=True)
        err = {p["pass"]: p for p in fast.explain_dict()["passes"]}["measured_error"]
        print(f"\n{name}: {err['changed']}")
        cost = _report_cost(model, X[:500])
        print("error report cost: " + ", ".join(f"{k} {v:.1f} ms" for k, v in cost.items())
              + "\n")
    print(f"load average {', '.join(f'{v:.1f}' for v in os.getloadavg())} at the end")


if __name__ == "__main__":
    main()
