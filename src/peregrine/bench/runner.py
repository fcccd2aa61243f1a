"""Run a benchmark: every selected system side by side in one process, on the same rows.

For each system: prepare (timed: conversion/compilation), memory, a correctness check against the
source library (rtol 1e-5, atol 1e-6), then throughput at each batch size. A system that fails
at any step is recorded with its error and the rest go on: a benchmark never crashes on a peer.
"""

from __future__ import annotations

import datetime
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from peregrine.bench.peers import (
    Peer,
    describe_model,
    model_library,
    model_n_features,
    score_method,
    select_systems,
)
from peregrine.bench.timing import Timing, max_rss_bytes, time_batch, timed, traced_peak

RTOL, ATOL = 1e-5, 1e-6
MEMORY_MODES = ("tracemalloc", "rss")


@dataclass(frozen=True)
class BenchConfig:
    batch_sizes: tuple[int, ...] = (1, 1000, 100_000)
    peers: str | tuple[str, ...] = "auto"
    threads: int | None = None
    repeat: int = 5
    batch1_rows: int = 300  # single-row calls per batch-1 run
    budget_s: float = 10.0  # timing budget per system and batch size
    memory: str = "tracemalloc"  # also "rss": skip the second, traced prepare
    verify_rows: int = 2000

    def __post_init__(self) -> None:
        if self.memory not in MEMORY_MODES:
            raise ValueError(f"memory must be one of {MEMORY_MODES}, got {self.memory!r}")
        if not self.batch_sizes or min(self.batch_sizes) < 1:
            raise ValueError("batch sizes must be positive integers")


@dataclass
class SystemResult:
    name: str
    label: str
    kind: str
    status: str = "ok"  # "ok" | "failed"
    note: str = ""
    compile_s: float | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    check: dict[str, Any] = field(default_factory=dict)
    timings: list[Timing] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)

    def timing(self, batch_size: int) -> Timing | None:
        return next((t for t in self.timings if t.batch_size == batch_size), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "kind": self.kind,
            "status": self.status,
            "note": self.note,
            "compile_s": self.compile_s,
            "memory": self.memory,
            "check": self.check,
            "versions": self.versions,
            "timings": [t.to_json() for t in self.timings],
        }


@dataclass
class BenchResult:
    model: dict[str, Any]
    data: dict[str, Any]
    config: BenchConfig
    systems: list[SystemResult]
    notes: list[str]
    started: str = ""

    @property
    def source(self) -> SystemResult:
        return self.systems[0]


def run_benchmark(
    model: Any,
    X: np.ndarray,
    config: BenchConfig | None = None,
    *,
    data_description: str = "",
    model_description: str = "",
    progress: Callable[[str], None] | None = None,
) -> BenchResult:
    """Benchmark ``model`` (a fitted model object) on rows ``X`` with every selected system.

    ``X`` is tiled when it holds fewer rows than the largest batch size. Returns a BenchResult;
    ``peregrine.bench.write_report`` turns it into report.md, report.json and plot.png.
    """
    config = config or BenchConfig()
    say = progress or (lambda msg: None)
    X = np.ascontiguousarray(X)
    n_features = model_n_features(model)
    if X.ndim != 2 or X.shape[1] != n_features:
        raise ValueError(f"X has shape {X.shape}; the model reads {n_features} features")
    n_source_rows = X.shape[0]
    need = max(max(config.batch_sizes), config.batch1_rows, min(config.verify_rows, n_source_rows))
    if X.shape[0] < need:
        X = np.resize(X, (need, n_features))  # repeats rows: same distribution, enough of them
    peers = config.peers if isinstance(config.peers, str) else list(config.peers)
    systems, notes = select_systems(model, peers)
    Xv = X[: min(config.verify_rows, n_source_rows)]
    reference: np.ndarray | None = None
    results = []
    with warnings.catch_warnings():
        # sklearn warns on every call with a bare array when it was fitted on a DataFrame:
        # thousands of identical lines at batch size 1. Arrays are the benchmark's contract.
        warnings.filterwarnings("ignore", message="X does not have valid feature names")
        for peer in systems:
            say(f"{peer.label}: preparing")
            res = _run_system(peer, model, n_features, X, Xv, reference, config, say)
            if peer.kind == "source":
                reference = res.check.pop("_output", None)
                if reference is None:
                    notes.append("the source library's own predict failed; outputs are unchecked")
            res.check.pop("_output", None)
            results.append(res)
    if X.shape[0] > n_source_rows:
        notes.append(
            f"the data holds {n_source_rows} rows; rows were repeated to fill "
            f"batches of up to {X.shape[0]}"
        )
    return BenchResult(
        model={
            "description": model_description or describe_model(model),
            "class": describe_model(model),
            "library": model_library(model),
            "n_features": n_features,
            "method": score_method(model),
        },
        data={"description": data_description, "rows": int(n_source_rows), "dtype": str(X.dtype)},
        config=config,
        systems=results,
        notes=notes,
        started=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )


def _run_system(
    peer: Peer,
    model: Any,
    n_features: int,
    X: np.ndarray,
    Xv: np.ndarray,
    reference: np.ndarray | None,
    config: BenchConfig,
    say: Callable[[str], None],
) -> SystemResult:
    res = SystemResult(peer.name, peer.label, peer.kind)
    try:
        res.versions = peer.versions()
    except Exception as exc:  # noqa: BLE001 - a peer's metadata must not sink the run
        res.versions = {"error": _line(exc)}
    rss0 = max_rss_bytes()
    try:
        fn, res.compile_s = timed(lambda: peer.prepare(model, n_features, threads=config.threads))
    except Exception as exc:  # noqa: BLE001 - a failing peer is recorded and skipped
        res.status, res.note = "failed", f"prepare failed: {_line(exc)}"
        return res
    res.memory["rss_growth_mb"] = _mb(max_rss_bytes() - rss0)
    if config.memory == "tracemalloc":
        try:
            _, peak = traced_peak(lambda: peer.prepare(model, n_features, threads=config.threads))
            res.memory["compile_traced_peak_mb"] = _mb(peak)
        except Exception as exc:  # noqa: BLE001
            res.memory["compile_traced_peak_mb"] = None
            res.note = f"traced prepare failed: {_line(exc)}"
    try:
        out = np.asarray(fn(Xv))
    except Exception as exc:  # noqa: BLE001
        res.status, res.note = "failed", f"predict failed: {_line(exc)}"
        return res
    if peer.kind == "source":
        res.check = {"status": "reference", "_output": out}
    elif reference is None:
        res.check = {"status": "unchecked"}
    else:
        res.check = compare(out, reference)
    if config.memory == "tracemalloc":
        big = X[: max(config.batch_sizes)]
        try:
            _, peak = traced_peak(lambda: fn(big))
            res.memory["predict_traced_peak_mb"] = _mb(peak)
        except Exception:  # noqa: BLE001 - timing below reports the failure
            res.memory["predict_traced_peak_mb"] = None
    for b in config.batch_sizes:
        say(f"{peer.label}: batch {b}")
        try:
            t = time_batch(
                fn,
                X,
                b,
                repeat=config.repeat,
                budget_s=config.budget_s,
                batch1_rows=config.batch1_rows,
            )
        except Exception as exc:  # noqa: BLE001
            t = Timing(b, b, 1, error=_line(exc))
        res.timings.append(t)
    res.memory["rss_growth_total_mb"] = _mb(max_rss_bytes() - rss0)
    return res


def align(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Bring a peer's output to the reference's shape where the two only differ by convention:
    trailing unit axes, or a binary classifier's two probability columns against a Booster's
    single positive-class probability."""
    if got.shape == want.shape:
        return got
    if got.size == want.size:
        return got.reshape(want.shape)
    n = want.shape[0]
    if want.ndim == 1 and got.ndim == 2 and got.shape == (n, 2):
        return got[:, 1]
    if want.ndim == 2 and want.shape == (n, 2) and got.shape == (n,):
        return np.stack([1.0 - got, got], axis=1)
    return got


def compare(got: np.ndarray, want: np.ndarray) -> dict[str, Any]:
    """Agreement with the source within rtol 1e-5 / atol 1e-6 (labels: equality)."""
    got = align(np.asarray(got), np.asarray(want))
    if got.shape != want.shape:
        return {"status": "mismatch", "detail": f"shape {got.shape} != {want.shape}"}
    if want.dtype.kind in "fc" and got.dtype.kind in "fciub":
        g, w = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(invalid="ignore"):
            close = np.isclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=True)
            err = np.abs(g - w)
        max_abs = float(np.nanmax(err)) if err.size and not np.isnan(err).all() else 0.0
        bad = int((~close).sum())
        rows_bad = int((~close).reshape(len(close), -1).any(axis=1).sum())
        return {
            "status": "ok" if bad == 0 else "mismatch",
            "rows": int(len(want)),
            "rows_mismatched": rows_bad,
            "values_mismatched": bad,
            "max_abs_err": max_abs,
            "rtol": RTOL,
            "atol": ATOL,
        }
    same = (got.reshape(len(got), -1) == want.reshape(len(want), -1)).all(axis=1)
    bad = int((~same).sum())
    return {
        "status": "ok" if bad == 0 else "mismatch",
        "rows": int(len(want)),
        "rows_mismatched": bad,
    }


def _mb(n: int) -> float:
    return round(n / 2**20, 2)


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300]
