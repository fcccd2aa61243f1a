"""Measuring one system: wall time of repeated runs (median and spread), compile time, memory.

Conventions (stated in every report):
- A *run* at batch size b > 1 is one call on b rows. At batch size 1 a run is a loop of
  single-row calls over a few hundred rows, so per-call overhead, the thing batch 1 measures,
  dominates and the timer's resolution does not.
- One untimed warm-up run precedes the timed ones (first-call costs: lazy init, JIT, caches).
- Runs stop early once a time budget is spent; at least one run is always recorded.
- The garbage collector is off during timed runs, as ``timeit`` does, so a collection
  triggered by an earlier system's garbage is not charged to this one.
- Memory: ``tracemalloc`` peak (Python and NumPy heap allocations only; native allocations by
  C++/LLVM/torch libraries are invisible to it) and ``ru_maxrss`` growth (the process's resident
  high-water mark; 0 when an earlier step already reached a higher peak).
"""

from __future__ import annotations

import gc
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass
class Timing:
    """Seconds per run at one batch size, and derived throughput."""

    batch_size: int
    rows_per_run: int  # rows scored per run (batch size, or the batch-1 row count)
    calls_per_run: int
    seconds: list[float] = field(default_factory=list)
    error: str | None = None

    def _q(self, q: float) -> float:
        return float(np.quantile(self.seconds, q)) if self.seconds else float("nan")

    @property
    def median_s(self) -> float:
        return self._q(0.5)

    @property
    def rows_per_s(self) -> float:
        return self.rows_per_run / self.median_s if self.seconds else float("nan")

    @property
    def rows_per_s_iqr(self) -> tuple[float, float]:
        """Throughput at the slow (q3) and fast (q1) quartile of run times."""
        if not self.seconds:
            return (float("nan"), float("nan"))
        return (self.rows_per_run / self._q(0.75), self.rows_per_run / self._q(0.25))

    @property
    def latency_s(self) -> float:
        """Median seconds per call."""
        return self.median_s / self.calls_per_run if self.seconds else float("nan")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            {
                "runs": len(self.seconds),
                "median_s": _num(self.median_s),
                "q1_s": _num(self._q(0.25)),
                "q3_s": _num(self._q(0.75)),
                "min_s": _num(min(self.seconds)) if self.seconds else None,
                "max_s": _num(max(self.seconds)) if self.seconds else None,
                "latency_s": _num(self.latency_s),
                "rows_per_s": _num(self.rows_per_s),
                "rows_per_s_iqr": [_num(v) for v in self.rows_per_s_iqr],
            }
        )
        return d


def _num(v: float) -> float | None:
    return None if v != v else float(v)  # NaN -> null: JSON has no NaN


def time_runs(run: Callable[[], Any], *, repeat: int, budget_s: float) -> list[float]:
    """Warm up once, then time up to ``repeat`` runs within ``budget_s`` (at least one)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        t0 = time.perf_counter()
        run()
        warm = time.perf_counter() - t0
        if warm >= budget_s:
            return [warm]  # too slow to repeat; the warm-up is the only sample
        seconds: list[float] = []
        spent = warm
        while len(seconds) < repeat and (not seconds or spent < budget_s):
            t0 = time.perf_counter()
            run()
            dt = time.perf_counter() - t0
            seconds.append(dt)
            spent += dt
        return seconds
    finally:
        if enabled:
            gc.enable()


def time_batch(
    fn: Callable[[np.ndarray], Any],
    X: np.ndarray,
    batch_size: int,
    *,
    repeat: int,
    budget_s: float,
    batch1_rows: int = 300,
) -> Timing:
    """Time ``fn`` at one batch size on rows of ``X`` (which must hold >= batch_size rows)."""
    if batch_size == 1:
        rows = [X[i : i + 1] for i in range(min(batch1_rows, X.shape[0]))]

        def run() -> None:
            for r in rows:
                fn(r)

        timing = Timing(1, len(rows), len(rows))
    else:
        Xb = X[:batch_size]

        def run() -> None:
            fn(Xb)

        timing = Timing(batch_size, batch_size, 1)
    timing.seconds = time_runs(run, repeat=repeat, budget_s=budget_s)
    return timing


def max_rss_bytes() -> int:
    """The process's resident-set high-water mark (Linux reports KiB, macOS bytes)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(rss if sys.platform == "darwin" else rss * 1024)


def traced_peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    """(result, peak bytes traced by tracemalloc while ``fn`` ran)."""
    already = tracemalloc.is_tracing()
    if not already:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        result = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        if not already:
            tracemalloc.stop()
    return result, max(0, int(peak))


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0
