"""One-row latency: ``predict_proba`` on a single float32 row, Peregrine's native backend against
ONNX Runtime and the library, all in one process and in interleaved rounds, timed on the calling
thread's CPU clock (other processes on a shared machine then add little), with where
Peregrine's time goes:

* ``method``: ``compiled.predict_proba(row)``, the machine-code entry (kernels/pyentry.py);
* ``python path``: the same call through the Python fast path the entry replaced;
* ``kernel``: the few-rows kernel alone, through ctypes on a prepared argument block (the
  row's address set in it: ~0.1 us of Python);
* ``kernel (perfect)``: where the few-rows kernel walks binned words (AVX-512 VBMI), the
  perfect layout's tree-lane kernel on the same rows in the same rounds (what ran before).

    .venv/bin/python benchmarks/bench_one_row.py --models xgboost,lightgbm,rf

Models as in bench_trees.py (28 features, trained on 100K generated rows; pickled under
``--cache`` so a rerun skips training). Each figure is the best of ``--rounds`` passes over
``--rows`` distinct rows, per row. This is a script, not a test.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import bench_trees as bt  # noqa: E402


def per_row(fn, rows) -> float:
    t = time.thread_time_ns()
    for r in rows:
        fn(r)
    return (time.thread_time_ns() - t) / len(rows) / 1e3


def model_for(name: str, cache: Path):
    path = cache / f"one-row-{name}.pkl"
    if path.exists():
        with open(path, "rb") as f:
            return pickle.load(f)
    X, y = bt.make_data(bt.TRAIN_ROWS)
    model = bt.train(name, X, y, 2)
    with open(path, "wb") as f:
        pickle.dump(model, f)
    return model


def systems(model, rows) -> dict:
    import peregrine

    compiled = peregrine.compile(model, "native", options=peregrine.CompileOptions(n_threads=1))
    out = {"peregrine method": compiled.predict_proba}
    fast = compiled._fast["predict_proba"]
    run = getattr(fast, "__wrapped__", fast)
    out["peregrine python path"] = run
    slots = getattr(run, "slots", None)
    if slots:  # the kernel alone, reading each row in place (float32: the compare dtype)
        out["peregrine kernel (ctypes)"] = kernel_alone(slots, rows)
        program = next(iter(compiled._exec.programs.values()))
        if program.small is not None and program.small.layout.value != "perfect":
            # the same rows through the perfect layout's tree lanes (the kernel before binned
            # tree lanes), measured in the same rounds
            from peregrine.backends.native.program import ForestProgram

            perfect = ForestProgram(program.forest, program.schedule,
                                    precision=program.precision, target=program.target,
                                    n_threads=1, small=program.small.replace(layout="perfect"),
                                    small_rows=program.small_rows)
            empty = np.zeros(1)
            call = perfect.caller(empty, program.n_outputs, None)
            out["peregrine kernel (perfect)"] = kernel_alone(call.slots, rows)
            out["_keep"] = (perfect, call, empty)
    try:
        out["onnxruntime"] = bt.onnxruntime(model, 1)
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported
        print(f"  onnxruntime skipped: {exc}")
    single = bt.library(model, 1)
    out["library"] = single
    return out


def kernel_alone(slots: dict, rows):
    """One few-rows kernel through ctypes on a prepared argument block, each row read in
    place (float32 rows: the compare dtype of XGBoost's and LightGBM's float32 kernels)."""
    xbuf, _, args, fn, ptr, *_ = next(iter(slots.values()))
    args_one = args.copy()
    args_one[3] = 1  # ARGS "re"
    where = {id(r): r.ctypes.data for r in rows}

    def kernel(X, p=args_one.ctypes.data, a=args_one):
        a[0] = where[id(X)]  # ARGS "X"
        fn(p)

    return kernel


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="xgboost")
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--cache", default=str(Path.home() / ".cache" / "peregrine" / "bench"))
    args = p.parse_args(argv)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    info = bt.machine()
    print(f"CPU: {info.get('cpu', '?')} / {info.get('llvm_cpu', '?')}; "
          f"load average {os.getloadavg()[0]:.1f}; thread CPU time per row, best of "
          f"{args.rounds} rounds of {args.rows} distinct rows")
    X, _ = bt.make_data(max(args.rows, 1000), seed=1)
    rows = [X[i:i + 1] for i in range(args.rows)]
    for name in args.models.split(","):
        model = model_for(name, cache)
        fns = systems(model, rows)
        keep = fns.pop("_keep", None)  # noqa: F841 - the extra kernel's arrays stay alive
        check = min(200, len(rows))  # fewer --rows than that: those rows
        want = model.predict_proba(X[:check])
        got = np.concatenate([fns["peregrine method"](r) for r in rows[:check]])
        diff = float(np.max(np.abs(got - want)))
        best = {k: float("inf") for k in fns}
        for _ in range(args.rounds):
            for k, fn in fns.items():
                best[k] = min(best[k], per_row(fn, rows))
        print(f"\n{bt.TITLES[name]} (max |diff| vs library {diff:.1e})")
        ref = best["peregrine method"]
        for k, us in best.items():
            print(f"  {k:28s} {us:8.2f} us   {us / ref:6.2f}x the method")


if __name__ == "__main__":
    main()
