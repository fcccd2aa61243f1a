"""Benchmark machinery shared by ``peregrine bench`` and the scripts in ``benchmarks/``.

>>> from peregrine.bench import BenchConfig, run_benchmark, write_report
>>> result = run_benchmark(model, X, BenchConfig(batch_sizes=(1, 1000), repeat=5))
>>> write_report(result, "out/")          # report.md, report.json, plot.png

Peers plug in through ``peregrine.bench.peers`` (``Peer`` + ``@register_peer``); Peregrine's
backends are discovered from ``peregrine.backends.available_backends()``.
"""

from peregrine.bench.peers import (
    PEERS,
    Peer,
    PeregrinePeer,
    SourcePeer,
    model_n_features,
    register_peer,
    registered_peers,
    score_method,
    select_systems,
)
from peregrine.bench.report import machine_info, markdown, to_json, write_report
from peregrine.bench.runner import (
    BenchConfig,
    BenchResult,
    SystemResult,
    align,
    compare,
    run_benchmark,
)
from peregrine.bench.timing import Timing, time_batch, time_runs

__all__ = [
    "PEERS", "BenchConfig", "BenchResult", "Peer", "PeregrinePeer", "SourcePeer",
    "SystemResult", "Timing", "align", "compare", "machine_info", "markdown",
    "model_n_features", "register_peer", "registered_peers", "run_benchmark", "score_method",
    "select_systems", "time_batch", "time_runs", "to_json", "write_report",
]  # fmt: skip
