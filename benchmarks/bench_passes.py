"""What the column passes and the vote fold buy (run by hand, not a test): feature-selection
injection and push-down (issue #12) and ``fold_votes``, each model compiled on the same commit
with the passes on and with ``CompileOptions(disable_passes=("inject", "pushdown",
"fold_votes"))``, against the source library.

    .venv/bin/python benchmarks/bench_passes.py --rows 1000000

Cases:
- injection: ColumnTransformer(OneHotEncoder on 20 string columns of 50 categories +
  StandardScaler on 20 numeric columns) -> XGBClassifier (100 trees, depth 4) whose trees read
  about 10% of the 1,020 columns (``colsample_bytree`` 0.5; --colsample 0.1 reads about a
  third: fewer columns per tree make the trees split on more of them); predict_proba on a
  DataFrame.
- push-down: SelectKBest(k=20 of 500) -> RandomForestClassifier(100 trees, depth 8);
  predict_proba on a float64 array.
- push-down, DataFrame: the same, fitted and scored on a 500-column DataFrame (column names):
  the input boundary converts only the 20 columns the program reads and proves the other 480
  finite in place (SelectKBest rejects NaN/inf in every column).
- votes: AdaBoostClassifier(50 decision stumps, 3 classes) on 20 features: each tree's vote
  (argmax, one-hot, weight table) folded into its leaves (``--cases adaboost``).
Median of --repeats calls after one warm-up, wall and process CPU time (both threads); answers
checked equal (passes on vs off: the same bits; vs the library: rtol 1e-5 / atol 1e-6).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import time
from functools import partial

THREADS = "2"
for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, THREADS)

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

OFF = ("inject", "pushdown", "fold_votes")


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines()
                    if line.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def injection_case(n_fit: int, seed: int = 0, colsample: float = 0.5):
    from sklearn.compose import ColumnTransformer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler
    from xgboost import XGBClassifier

    rng = np.random.default_rng(seed)

    def frame(n):
        data = {f"s{j}": rng.choice([f"cat{k}" for k in range(50)], n) for j in range(20)}
        data.update({f"x{j}": rng.normal(size=n) for j in range(20)})
        return pd.DataFrame(data)

    df = frame(n_fit)
    y = ((df["x0"] + (df["s0"] == "cat7") * 2 - df["x3"] * (df["s1"] == "cat2")) > 0.5)
    pre = ColumnTransformer([("cat", OneHotEncoder(handle_unknown="ignore"),
                              [f"s{j}" for j in range(20)]),
                             ("num", StandardScaler(), [f"x{j}" for j in range(20)])],
                            sparse_threshold=0)
    model = make_pipeline(pre, XGBClassifier(n_estimators=100, max_depth=4, n_jobs=2,
                                             colsample_bytree=colsample, random_state=0))
    model.fit(df, y.astype(int))
    return "injection: ColumnTransformer(OneHot 20x50 + Scaler 20) -> XGBClassifier", model, frame


def pushdown_case(n_fit: int, seed: int = 0):
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.feature_selection import SelectKBest
    from sklearn.pipeline import make_pipeline

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_fit, 500))
    y = (X[:, 10] + X[:, 200] - X[:, 350] > 0).astype(int)
    model = make_pipeline(SelectKBest(k=20), RandomForestClassifier(
        n_estimators=100, max_depth=8, n_jobs=2, random_state=0))
    model.fit(X, y)
    return "push-down: SelectKBest(20 of 500) -> RandomForestClassifier", model, \
        lambda n: rng.normal(size=(n, 500))


def pushdown_frame_case(n_fit: int, seed: int = 0):
    title, model, rows = pushdown_case(n_fit, seed)
    cols = [f"f{j}" for j in range(500)]
    X = pd.DataFrame(np.random.default_rng(seed).normal(size=(n_fit, 500)), columns=cols)
    y = (X["f10"] + X["f200"] - X["f350"] > 0).astype(int)
    model.fit(X, y)
    return ("push-down, DataFrame: SelectKBest(20 of 500) -> RandomForestClassifier", model,
            lambda n: pd.DataFrame(rows(n), columns=cols))


def adaboost_case(n_fit: int, seed: int = 0):
    from sklearn.ensemble import AdaBoostClassifier
    from sklearn.tree import DecisionTreeClassifier

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_fit, 20))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int) + (X[:, 3] > 1)
    model = AdaBoostClassifier(DecisionTreeClassifier(max_depth=1), n_estimators=50,
                               random_state=0).fit(X, y)
    return "votes: AdaBoostClassifier(50 stumps, 3 classes)", model, \
        lambda n: rng.normal(size=(n, 20))


def _time(fn, data, repeats: int) -> tuple[tuple[float, float], object]:
    """(median wall seconds, median process CPU seconds) and the answer."""
    out = fn(data)
    walls, cpus = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn(data)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return (float(np.median(walls)), float(np.median(cpus))), out


def _read_fraction(compiled) -> str:
    from peregrine.ir import Op

    forests = [n for n in compiled.spec.graph.nodes if n.op is Op.TREE_ENSEMBLE]
    off = compiled.explain_dict()["passes"]
    inject = next((p["changed"] for p in off if p["pass"] == "inject"), "")
    read = sum(len(np.unique(f.attrs.forest.feature[f.attrs.forest.feature >= 0]))
               for f in forests)
    return f"{read} features read; {inject}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--fit-rows", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backends", default="native,torch")
    ap.add_argument("--colsample", type=float, default=0.5,
                    help="the injection case's colsample_bytree (0.5: ~10%% of columns read)")
    ap.add_argument("--cases", default="injection,pushdown,pushdown_frame")
    args = ap.parse_args(argv)

    import sklearn
    import torch
    import xgboost

    import peregrine
    from peregrine import CompileOptions

    torch.set_num_threads(int(THREADS))
    print(f"CPU: {_cpu()}; {THREADS} threads; rows {args.rows:,}; peregrine "
          f"{peregrine.__version__}, scikit-learn {sklearn.__version__}, xgboost "
          f"{xgboost.__version__}, torch {torch.__version__}")
    print("| case | system | wall s | CPU s | vs passes off (wall, CPU) | vs library (wall, "
          "CPU) |")
    print("|---|---|---:|---:|---:|---:|")

    def row(title, system, t, off, lib):
        print(f"| {title} | {system} | {t[0]:.3f} | {t[1]:.3f} | "
              f"{off[0] / t[0]:.2f}, {off[1] / t[1]:.2f} | {lib[0] / t[0]:.2f}, "
              f"{lib[1] / t[1]:.2f} |")

    cases = {"injection": partial(injection_case, colsample=args.colsample),
             "pushdown": pushdown_case, "pushdown_frame": pushdown_frame_case,
             "adaboost": adaboost_case}
    for make in (cases[c] for c in args.cases.split(",")):
        title, model, rows = make(args.fit_rows)
        data = rows(args.rows)
        lib_t, want = _time(model.predict_proba, data, args.repeats)
        row(title, "library", lib_t, lib_t, lib_t)
        for backend in args.backends.split(","):
            on = peregrine.compile(model, backend)
            off = peregrine.compile(model, backend, options=CompileOptions(disable_passes=OFF))
            t_on, got = _time(on.predict_proba, data, args.repeats)
            t_off, got_off = _time(off.predict_proba, data, args.repeats)
            np.testing.assert_array_equal(got, got_off)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            row(title, f"{backend}, passes off", t_off, t_off, lib_t)
            row(title, f"{backend}, passes on", t_on, t_off, lib_t)
        print(f"|  | ({_read_fraction(on)}) | | | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
