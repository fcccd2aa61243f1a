"""Prometheus metrics of one server (prometheus-client, text exposition format 0.0.4).

One process: each app owns its registry, so several servers (or tests) in one process do not
share counts. ``--workers N``: prometheus-client's multiprocess mode. The supervisor points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory before it starts the workers, every worker
writes its values to memory-mapped files there, and a scrape of any worker reads all of them:
counters and histograms are the sums over the workers (those that exited included),
``peregrine_queue_rows`` the sum over live workers, and ``peregrine_process_info`` one series per
live worker (``pid`` label). The mode is chosen when prometheus_client is first imported, from
that variable; a server started under another multiprocess supervisor with the variable set
uses it too.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
    values,
)

disable_created_metrics()  # the *_created series double the scrape and say nothing here

LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536)


MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_mode() -> bool:
    """Whether this process's metric values live in PROMETHEUS_MULTIPROC_DIR's files (decided
    by prometheus_client when it was imported)."""
    return bool(getattr(values.ValueClass, "_multiprocess", False))


class Metrics:
    def __init__(self, content_hash: str | None, source: str) -> None:
        self.multiprocess = multiprocess_mode()
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "peregrine_requests",
            "HTTP requests answered, by route, method, format and status",
            ["route", "method", "format", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "peregrine_request_duration_seconds",
            "Time from the request's arrival to its response body, scoring routes",
            ["method"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.errors = Counter(
            "peregrine_errors",
            "Requests answered with an error, by kind (the error type)",
            ["kind"],
            registry=r,
        )
        self.model_calls = Counter(
            "peregrine_model_calls",
            "Calls of the compiled model (one per batch)",
            ["method"],
            registry=r,
        )
        self.model_seconds = Histogram(
            "peregrine_model_call_seconds",
            "Duration of one call of the compiled model",
            ["method"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_rows = Histogram(
            "peregrine_batch_rows", "Rows per model call", buckets=ROW_BUCKETS, registry=r
        )
        self.batch_requests = Histogram(
            "peregrine_batch_requests",
            "Requests coalesced into one model call",
            buckets=ROW_BUCKETS,
            registry=r,
        )
        self.rows = Counter("peregrine_rows_scored", "Rows scored", ["method"], registry=r)
        self.queue_rows = Gauge(
            "peregrine_queue_rows",
            "Rows waiting for the model",
            registry=r,
            multiprocess_mode="livesum",
        )
        labels = {"content_hash": content_hash or "", "source": source}
        if self.multiprocess:
            # Info metrics do not reach the shared files: a gauge of 1 per live worker, to
            # which the multiprocess collector adds the pid label itself
            info = Gauge(
                "peregrine_process_info",
                "The model this process serves",
                list(labels),
                registry=r,
                multiprocess_mode="liveall",
            )
            info.labels(**labels).set(1)
        else:
            Info("peregrine_process", "The model this process serves", registry=r).info(
                {**labels, "pid": str(os.getpid())}
            )

        self._children: dict[Any, tuple] = {}  # labelled children, looked up once

    def request_done(self, method: str, fmt: str, status: int, kind: str, seconds: float) -> None:
        key = (method, fmt, status, kind)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                self.requests.labels("score", method, fmt, str(status)),
                self.errors.labels(kind) if kind else self.latency.labels(method),
            )
        children[0].inc()
        if kind:
            children[1].inc()
        else:
            children[1].observe(seconds)

    def on_call(self, method: str, rows: int, requests: int, seconds: float) -> None:
        children = self._children.get(method)
        if children is None:
            children = self._children[method] = (
                self.model_calls.labels(method),
                self.model_seconds.labels(method),
                self.rows.labels(method),
            )
        children[0].inc()
        children[1].observe(seconds)
        children[2].inc(rows)
        self.batch_rows.observe(rows)
        self.batch_requests.observe(requests)

    def exposition(self) -> tuple[bytes, str]:
        if not self.multiprocess:
            return generate_latest(self.registry), CONTENT_TYPE_LATEST
        from prometheus_client import multiprocess

        # every worker's files, read at each scrape (prometheus-client's documented pattern)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST

    def close(self) -> None:
        """On a worker's clean exit: drop its live gauges (queue rows, process info) from the
        shared files; its counters stay in the totals."""
        if self.multiprocess:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(os.getpid())
