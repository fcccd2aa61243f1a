"""The torch backend on a CUDA GPU: each tree strategy, and what ``"auto"`` picks, on the three
models of ``bench_trees.py``, with the rows already on the GPU (``forward_tensors``, the program
alone) and as numpy rows in and out (the copies included, what ``predict_proba`` costs a
user). Needs a CUDA device; prints a markdown table naming the GPU and the versions.

    python benchmarks/bench_gpu.py --rows 10000,100000,1000000
    python benchmarks/bench_gpu.py --profile --models xgboost --rows 1000000

``--profile``: torch.profiler's table of the ops (CPU and CUDA time) for one call of each
model's ``"auto"`` program on the largest batch, rows on the GPU: where the time goes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_trees import TITLES, make_data, train  # noqa: E402


def timed(fn, repeat: int) -> float:
    import torch

    fn()  # warm: first-call allocations and kernel loads
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def profile(model, rows, title: str) -> None:
    import torch
    from torch.profiler import ProfilerActivity

    import peregrine

    c = peregrine.compile(model, "torch", device="cuda")
    out, exe = c.spec.methods["predict_proba"].output, c._exec
    exe.forward_tensors(rows, (out,))
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        exe.forward_tensors(rows, (out,))
        torch.cuda.synchronize()
    print(f"## {title}: {exe.tree_info()[0]['strategy']}, {len(rows):,} rows on the GPU\n")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25))


def main(argv=None) -> None:
    import torch

    import peregrine
    from peregrine.options import CompileOptions, TreeStrategy

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="10000,100000,1000000")
    p.add_argument("--models", default="xgboost,lightgbm,rf")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=8, help="threads for training")
    p.add_argument("--profile", action="store_true", help="profile the auto program instead")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA device")
    sizes = [int(r) for r in args.rows.split(",")]
    X, y = make_data(100_000)
    big = np.concatenate([X] * (max(sizes) // len(X) + 1))[: max(sizes)]
    on_gpu = torch.from_numpy(big).cuda()
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__} (CUDA "
          f"{torch.version.cuda}), peregrine {peregrine.__version__}; float32 rows x 28\n")
    header = " | ".join(f"{n:,} rows on GPU ms | {n:,} numpy ms" for n in sizes)
    print(f"| model | strategy | {header} | max abs diff |")
    print("|---|---|" + "---:|" * (2 * len(sizes) + 1))
    for name in args.models.split(","):
        model = train(name, X, y, args.threads)
        want = model.predict_proba(X[:2000])
        if args.profile:
            profile(model, on_gpu, TITLES[name])
            continue
        for strategy in (TreeStrategy.AUTO, TreeStrategy.GEMM, TreeStrategy.TREE_TRAVERSAL,
                         TreeStrategy.PERFECT_TREE_TRAVERSAL):
            try:
                c = peregrine.compile(model, "torch", device="cuda",
                                      options=CompileOptions(tree_strategy=strategy))
            except Exception as exc:  # noqa: BLE001 - an infeasible strategy is reported
                print(f"| {TITLES[name]} | {strategy.value} | {type(exc).__name__} |")
                continue
            picked = c._exec.tree_info()[0]["strategy"] if strategy is TreeStrategy.AUTO else ""
            out = c.spec.methods["predict_proba"].output
            exe = c._exec  # the program alone, rows and answers staying on the GPU
            cells = []
            for n in sizes:
                rows, host = on_gpu[:n], big[:n]
                cells.append(timed(lambda e=exe, r=rows, o=out: e.forward_tensors(r, (o,)),
                                   args.repeat))
                cells.append(timed(lambda c=c, h=host: c.predict_proba(h), args.repeat))
            diff = float(np.abs(c.predict_proba(X[:2000]) - want).max())
            label = strategy.value + (f" (picks {picked})" if picked else "")
            print(f"| {TITLES[name]} | {label} | "
                  + " | ".join(f"{t * 1e3:.2f}" for t in cells) + f" | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
