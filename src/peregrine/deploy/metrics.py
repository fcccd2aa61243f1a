"""Prometheus metrics of one server (text exposition format 0.0.4, written by prometheus-client).

One process: each app owns its registry, so several servers (or tests) in one process do not
share counts. The values are plain Python numbers that a request updates in well under a
microsecond, read into prometheus-client's metric families only when ``/metrics`` is scraped (a
custom collector, prometheus-client's documented pattern for values kept elsewhere):
prometheus-client's own counters and histograms take a lock and walk the buckets in Python on
every update, ~1.4 us per request here, 5 us per model call. ``--workers N``: prometheus-client's
multiprocess mode, its metric objects written through. The supervisor points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh directory before it starts the workers, every worker
writes its values to memory-mapped files there, and a scrape of any worker reads all of them:
counters and histograms are the sums over the workers (those that exited included),
``peregrine_queue_rows`` the sum over live workers, and ``peregrine_process_info`` one series per
live worker (``pid`` label). The mode is chosen when prometheus_client is first imported, from
that variable; a server started under another multiprocess supervisor with the variable set
uses it too. Either way the names, labels, buckets and meanings are the same.
"""

from __future__ import annotations

import bisect
import os
import threading
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Metric,
    disable_created_metrics,
    generate_latest,
    values,
)
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
)
from prometheus_client.utils import floatToGoString

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


# name (without _total), help, labels; the same in both modes
REQUESTS = ("peregrine_requests", "HTTP requests answered, by route, method, format and status",
            ("route", "method", "format", "status"))  # fmt: skip
LATENCY = ("peregrine_request_duration_seconds",
           "Time from the request's arrival to its response body, scoring routes", ("method",))  # fmt: skip
ERRORS = (
    "peregrine_errors",
    "Requests answered with an error, by kind (the error type)",
    ("kind",),
)
MODEL_CALLS = ("peregrine_model_calls", "Calls of the compiled model (one per batch)", ("method",))
MODEL_SECONDS = ("peregrine_model_call_seconds", "Duration of one call of the compiled model",
                 ("method",))  # fmt: skip
BATCH_ROWS = ("peregrine_batch_rows", "Rows per model call", ())
BATCH_REQUESTS = ("peregrine_batch_requests", "Requests coalesced into one model call", ())
ROWS = ("peregrine_rows_scored", "Rows scored", ("method",))
QUEUE_ROWS = ("peregrine_queue_rows", "Rows waiting for the model", ())
PROCESS = ("peregrine_process", "The model this process serves")


def new_metrics(content_hash: str | None, source: str) -> _LocalMetrics | _SharedMetrics:
    """The metrics of one server: written through to the shared files in multiprocess mode,
    kept in this process otherwise. Both have ``request_done``, ``on_call``, ``error``,
    ``exposition`` and ``close``."""
    if multiprocess_mode():
        return _SharedMetrics(content_hash, source)
    return _LocalMetrics(content_hash, source)


class _Histogram:
    """Counts per bucket (the last one +Inf; a value equal to a bound counts in that bound's
    bucket, Prometheus's ``le``) and the sum."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds, self.counts, self.sum = bounds, [0] * (len(bounds) + 1), 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, float]]:
        out, total = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts):
            total += n
            out.append((floatToGoString(bound), float(total)))
        return out


class _LocalMetrics:
    """One process's metrics as plain numbers, exported by :meth:`collect` at scrape time."""

    multiprocess = False

    def __init__(self, content_hash: str | None, source: str) -> None:
        self._info = {"content_hash": content_hash or "", "source": source,
                      "pid": str(os.getpid())}  # fmt: skip
        self._requests: dict[tuple[str, str, int], int] = {}
        self._latency: dict[str, _Histogram] = {}
        self._errors: dict[str, int] = {}
        # model calls run in worker threads (several with --threads N): their counts take a
        # lock, once per call; the request counts are the event loop's alone
        self._lock = threading.Lock()
        self._calls: dict[str, list] = {}  # method -> [calls, rows, seconds histogram]
        self._batch_rows = _Histogram(ROW_BUCKETS)
        self._batch_requests = _Histogram(ROW_BUCKETS)
        self._queue_rows = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def request_done(self, method: str, fmt: str, status: int, kind: str, seconds: float) -> None:
        key = (method, fmt, status)
        self._requests[key] = self._requests.get(key, 0) + 1
        if kind:
            self._errors[kind] = self._errors.get(kind, 0) + 1
        else:
            hist = self._latency.get(method)
            if hist is None:
                hist = self._latency[method] = _Histogram(LATENCY_BUCKETS)
            hist.observe(seconds)

    def error(self, kind: str) -> None:
        """An error answered outside the scoring route (Starlette's 404/405 pages)."""
        self._errors[kind] = self._errors.get(kind, 0) + 1

    def on_call(self, method: str, rows: int, requests: int, seconds: float) -> None:
        with self._lock:
            call = self._calls.get(method)
            if call is None:
                call = self._calls[method] = [0, 0, _Histogram(LATENCY_BUCKETS)]
            call[0] += 1
            call[1] += rows
            call[2].observe(seconds)
            self._batch_rows.observe(rows)
            self._batch_requests.observe(requests)

    def collect(self) -> list[Metric]:
        """prometheus-client's collector interface: the families, in a scrape's order."""
        requests = CounterMetricFamily(*REQUESTS[:2], labels=REQUESTS[2])
        for (method, fmt, status), n in list(self._requests.items()):
            requests.add_metric(["score", method, fmt, str(status)], n)
        latency = HistogramMetricFamily(*LATENCY[:2], labels=LATENCY[2])
        for method, hist in list(self._latency.items()):
            latency.add_metric([method], hist.buckets(), hist.sum)
        errors = CounterMetricFamily(*ERRORS[:2], labels=ERRORS[2])
        for kind, n in list(self._errors.items()):
            errors.add_metric([kind], n)
        calls = CounterMetricFamily(*MODEL_CALLS[:2], labels=MODEL_CALLS[2])
        seconds = HistogramMetricFamily(*MODEL_SECONDS[:2], labels=MODEL_SECONDS[2])
        rows = CounterMetricFamily(*ROWS[:2], labels=ROWS[2])
        batch_rows = HistogramMetricFamily(*BATCH_ROWS[:2])
        batch_requests = HistogramMetricFamily(*BATCH_REQUESTS[:2])
        with self._lock:
            for method, (n, n_rows, hist) in self._calls.items():
                calls.add_metric([method], n)
                seconds.add_metric([method], hist.buckets(), hist.sum)
                rows.add_metric([method], n_rows)
            batch_rows.add_metric([], self._batch_rows.buckets(), self._batch_rows.sum)
            batch_requests.add_metric([], self._batch_requests.buckets(), self._batch_requests.sum)
        queue = GaugeMetricFamily(*QUEUE_ROWS[:2], value=self._queue_rows)
        info = InfoMetricFamily(*PROCESS, value=self._info)
        return [requests, latency, errors, calls, seconds, batch_rows, batch_requests, rows,
                queue, info]  # fmt: skip

    def exposition(self, queue_rows: int) -> tuple[bytes, str]:
        self._queue_rows = queue_rows
        return generate_latest(self.registry), CONTENT_TYPE_LATEST

    def close(self) -> None:
        pass


class _SharedMetrics:
    """prometheus-client's metric objects, written through to PROMETHEUS_MULTIPROC_DIR's files
    on every update (what another worker's scrape reads)."""

    multiprocess = True

    def __init__(self, content_hash: str | None, source: str) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(*REQUESTS[:2], REQUESTS[2], registry=r)
        self.latency = Histogram(*LATENCY[:2], LATENCY[2], buckets=LATENCY_BUCKETS, registry=r)
        self.errors = Counter(*ERRORS[:2], ERRORS[2], registry=r)
        self.model_calls = Counter(*MODEL_CALLS[:2], MODEL_CALLS[2], registry=r)
        self.model_seconds = Histogram(
            *MODEL_SECONDS[:2], MODEL_SECONDS[2], buckets=LATENCY_BUCKETS, registry=r
        )
        self.batch_rows = Histogram(*BATCH_ROWS[:2], buckets=ROW_BUCKETS, registry=r)
        self.batch_requests = Histogram(*BATCH_REQUESTS[:2], buckets=ROW_BUCKETS, registry=r)
        self.rows = Counter(*ROWS[:2], ROWS[2], registry=r)
        self.queue_rows = Gauge(*QUEUE_ROWS[:2], registry=r, multiprocess_mode="livesum")
        # Info metrics do not reach the shared files: a gauge of 1 per live worker, to which
        # the multiprocess collector adds the pid label itself
        labels = {"content_hash": content_hash or "", "source": source}
        info = Gauge(f"{PROCESS[0]}_info", PROCESS[1], list(labels), registry=r,
                     multiprocess_mode="liveall")  # fmt: skip
        info.labels(**labels).set(1)
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

    def error(self, kind: str) -> None:
        self.errors.labels(kind).inc()

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

    def exposition(self, queue_rows: int) -> tuple[bytes, str]:
        from prometheus_client import multiprocess

        self.queue_rows.set(queue_rows)
        # every worker's files, read at each scrape (prometheus-client's documented pattern)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST

    def close(self) -> None:
        """On a worker's clean exit: drop its live gauges (queue rows, process info) from the
        shared files; its counters stay in the totals."""
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid())
