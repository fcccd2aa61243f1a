"""Compile time of every conformance case (tests/conformance) on every backend except TVM, with
a cold kernel cache (run by hand, not a test; issue #12's "compile time of any pipeline in the
conformance suite <= 1 s with a cold kernel cache").

    .venv/bin/python benchmarks/bench_compile.py [--backends native,torch] [--cases xgb,pipe]

Each compile gets an empty kernel cache directory and an empty in-memory kernel table, so every
native kernel is generated, optimised and compiled again (forked processes included: see
docs/native.md); models are trained first, and Python's imports are warmed by one compile per
backend before timing (a process pays them once, not per model). Wall time of
``peregrine.compile(model, backend)`` with the default options; the torch backend's time
includes tracing and TorchScript's scripting where that backend scripts. Prints the slowest
cases per backend and how many exceed the limit.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.conformance

LIMIT_S = 1.0


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines()
                    if line.startswith("Model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown CPU"


def _cold(jit, keep: list) -> None:
    """An empty disk cache and kernel table. The old table is kept alive: compiled models of
    earlier cases (and the one-row entry) still call into its engines."""
    os.environ["PEREGRINE_CACHE_DIR"] = tempfile.mkdtemp(prefix="peregrine-bench-compile-")
    keep.append(jit._loaded)
    jit._loaded = {}
    jit._built.clear()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="reference,torch,torchscript,native")
    ap.add_argument("--cases", default="", help="comma list of substrings of case ids")
    ap.add_argument("--top", type=int, default=8, help="slowest cases shown per backend")
    args = ap.parse_args(argv)

    from tests.conformance.test_conformance import CASES

    import peregrine
    from peregrine.backends import available_backends
    from peregrine.kernels import jit

    backends = [b for b in args.backends.split(",") if b in available_backends()]
    wanted = [s for s in args.cases.split(",") if s]
    cases = [c for c in CASES if not wanted or any(s in c.id for s in wanted)]
    built = []
    for case in cases:
        try:
            built.append((case.id, case.built[0]))
        except Exception as exc:  # noqa: BLE001 - a case whose library is missing is skipped
            print(f"skip {case.id}: {type(exc).__name__}: {exc}", file=sys.stderr)
    keep: list = []
    print(f"CPU: {_cpu()}; {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}; "
          f"peregrine {peregrine.__version__}; {len(built)} cases")
    for backend in backends:
        for _, model in built[:1]:  # imports of this backend, once
            _cold(jit, keep)
            try:
                peregrine.compile(model, backend)
            except Exception:  # noqa: BLE001
                pass
        times, refused = [], 0
        for cid, model in built:
            _cold(jit, keep)
            t = time.perf_counter()
            try:
                peregrine.compile(model, backend)
            except peregrine.errors.UnsupportedModelError:
                refused += 1
                continue
            times.append((time.perf_counter() - t, cid))
        times.sort(reverse=True)
        over = [c for s, c in times if s > LIMIT_S]
        total = sum(s for s, _ in times)
        print(f"\n{backend}: {len(times)} compiled ({refused} refused), "
              f"max {times[0][0]:.2f} s, mean {total / max(1, len(times)):.3f} s, "
              f"{len(over)} over {LIMIT_S:g} s; load {os.getloadavg()[0]:.1f}")
        for s, cid in times[:args.top]:
            print(f"  {s:6.3f} s  {cid}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
