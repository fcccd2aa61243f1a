"""Dynamic batching: concurrent requests share one call of the compiled model.

Requests wait in one FIFO queue. The dispatcher (a callback on the server's event loop, run once
per loop iteration in which requests arrived, so every request read in that iteration is in the
queue) takes the oldest request and every queued request whose rows may be stacked with it (same
method, same payload key: see ``formats.Payload``) up to ``max_batch`` rows, and runs the model
once on the stacked rows; the answer is split back by row counts.

Where the model runs: a call predicted to take less than ``inline_seconds`` (from the measured
seconds per row of earlier calls) runs on the event loop itself. For single-row requests to a
tree ensemble the model costs microseconds per row, while handing a batch to a worker thread and
waking the loop back costs tens of microseconds and makes the loop wait for the GIL; the loop is
blocked only that long. Longer calls (big bodies, slow models, the first call of each method)
run in a worker thread while the loop keeps reading requests.

When to dispatch is the whole trade-off:

- a request on an idle server (nothing running, nothing finished within ``max_delay``) goes at
  once: a lone client never pays the delay;
- under load the dispatcher waits, at most ``max_delay`` after the oldest queued request arrived,
  for as many requests as the previous batch held (the clients that got answers are likely to
  ask again) or for ``max_batch`` rows, whichever comes first;
- while the model is busy (``threads`` batches in flight) requests simply queue; when it frees,
  the oldest has usually waited past ``max_delay`` and everything queued goes at once.

If a stacked call raises one of Peregrine's errors, some request's rows are bad: each request is
then scored alone, so every request gets its own answer or its own error (row numbers relative to
its own body), never a neighbour's. The queue is bounded in rows (``max_queue_rows``): over the
bound :meth:`Batcher.submit` raises :class:`QueueFull` instead of buffering without limit.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from peregrine.errors import PeregrineError


class QueueFull(RuntimeError):
    """The batcher holds ``max_queue_rows`` rows already (HTTP 503)."""


class ShuttingDown(RuntimeError):
    """The batcher was stopped before the request could be queued (HTTP 503)."""


class _Job:
    """One request in the queue (a plain slotted class: one is built per request)."""

    __slots__ = ("method", "key", "data", "rows", "future", "arrival")

    def __init__(
        self, method: str, key: tuple, data: Any, rows: int, future: asyncio.Future, arrival: float
    ) -> None:
        self.method, self.key, self.data, self.rows = method, key, data, rows
        self.future, self.arrival = future, arrival


@dataclass
class BatchStats:
    """What the batcher did so far (also exported as Prometheus metrics by the server)."""

    requests: int = 0
    model_calls: int = 0
    batches: int = 0
    rows: int = 0
    fallbacks: int = 0  # stacked calls that failed and were re-run request by request
    inline_batches: int = 0  # batches run on the event loop rather than in a worker thread


def _concat(parts: list[Any]) -> Any:
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts, axis=0)
    import pandas as pd

    return pd.concat(parts, axis=0, ignore_index=True)


class Batcher:
    """Coalesce concurrent calls of ``model.<method>(rows)`` into batched calls.

    Parameters
    ----------
    model:
        Anything with the methods requests name (a :class:`peregrine.CompiledModel`).
    max_batch:
        Rows per model call, at most (a single larger request runs alone, unsplit).
    max_delay:
        Seconds a request may wait for others under load (never on an idle server).
    max_queue_rows:
        Rows waiting, at most; beyond it ``submit`` raises :class:`QueueFull`.
    threads:
        Model calls that may run at once (each in its own worker thread).
    inline_seconds:
        Calls predicted to take at most this long run on the event loop, not in a thread
        (0: always in a thread).
    on_call:
        ``on_call(method, rows, requests, seconds)`` after each model call (metrics).
    """

    def __init__(
        self,
        model: Any,
        *,
        max_batch: int = 1024,
        max_delay: float = 0.002,
        max_queue_rows: int = 1 << 20,
        threads: int = 1,
        inline_seconds: float = 0.001,
        on_call: Callable[[str, int, int, float], None] | None = None,
    ) -> None:
        if max_batch < 1 or threads < 1 or max_delay < 0 or max_queue_rows < 1:
            raise ValueError("max_batch, threads and max_queue_rows must be >= 1, max_delay >= 0")
        if inline_seconds < 0:
            raise ValueError("inline_seconds must be >= 0")
        self.model = model
        self.max_batch, self.max_delay = max_batch, max_delay
        self.max_queue_rows, self.threads = max_queue_rows, threads
        self.inline_seconds = inline_seconds
        self.on_call = on_call
        self.stats = BatchStats()
        self._queue: collections.deque[_Job] = collections.deque()
        self._queued_rows = 0
        self._inflight = 0
        self._last_done = -1e9
        self._expect = 1  # requests the previous batch held: how many to wait for under load
        # per method: seconds per row of the last calls (their median predicts the next call:
        # a call stretched by a preempted core does not send the next ones to a thread)
        self._row_seconds: dict[str, collections.deque[float]] = {}
        self._row_cost: dict[str, float] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False  # a dispatch is queued on the loop already
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._pool: ThreadPoolExecutor | None = None
        self._closing = False

    # ------------------------------------------------------------------------- lifecycle --
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="peregrine-model")

    async def stop(self) -> None:
        """Refuse new requests, answer every queued and running one, then stop."""
        self._closing = True
        while self._queue or self._inflight:
            self._kick()
            await asyncio.sleep(0.001)
        if self._timer is not None:
            self._timer.cancel()
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    @property
    def queued_rows(self) -> int:
        return self._queued_rows

    # ----------------------------------------------------------------------------- submit --
    async def submit(self, method: str, key: tuple, data: Any, rows: int) -> Any:
        """Score ``data`` (``rows`` rows) with ``model.<method>``; returns its output or raises
        the model's error for these rows."""
        return await self.enqueue(method, key, data, rows)

    def enqueue(self, method: str, key: tuple, data: Any, rows: int) -> asyncio.Future:
        """:meth:`submit` without its coroutine (the server's path: one object less per
        request): the future of the output; raises :class:`ShuttingDown` or
        :class:`QueueFull` at once."""
        loop = self._loop
        if self._closing or loop is None:
            raise ShuttingDown("the server is shutting down")
        if self._queue and self._queued_rows + rows > self.max_queue_rows:
            raise QueueFull(
                f"{self._queued_rows} rows are already waiting (limit "
                f"{self.max_queue_rows}); retry later"
            )
        job = _Job(method, key, data, rows, loop.create_future(), time.perf_counter())
        self._queue.append(job)
        self._queued_rows += rows
        self.stats.requests += 1
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._dispatch)
        return job.future

    # --------------------------------------------------------------------------- dispatch --
    def _idle(self, now: float) -> bool:
        return self._inflight == 0 and now - self._last_done > self.max_delay

    def _kick(self) -> None:
        if not self._scheduled and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._dispatch)

    def _on_timer(self) -> None:
        self._timer = None
        self._dispatch()

    def _dispatch(self) -> None:
        """On the event loop: start every batch that may start now.

        While every thread is busy, a request of ``max_batch`` rows or more (a bulk body: it
        runs alone, nothing can join it) still goes to the pool, whose worker starts it the
        moment the running call ends (at most one such call waits per thread). Handed over
        only when a thread was free, each bulk call waited for the event loop to see the
        previous one finish and submit the next: with the loop busy receiving and decoding
        the next bodies, both cores sat partly idle between calls."""
        self._scheduled = False
        queue = self._queue
        while queue:
            if self._inflight >= self.threads:
                if self._inflight >= 2 * self.threads or queue[0].rows < self.max_batch:
                    return
                job = queue.popleft()
                self._queued_rows -= job.rows
                self._submit([job])
                continue
            now = time.perf_counter()
            if (
                not self._closing
                and self._queued_rows < self.max_batch
                and len(queue) < self._expect
                and not self._idle(now)
            ):
                deadline = queue[0].arrival + self.max_delay
                if now < deadline:  # under load: wait for the others, at most max_delay
                    if self._timer is None or self._timer_at > deadline:
                        if self._timer is not None:
                            self._timer.cancel()
                        assert self._loop is not None
                        self._timer_at = deadline
                        self._timer = self._loop.call_later(deadline - now, self._on_timer)
                    return
            batch = self._take()
            self._expect = len(batch)
            rows = sum(j.rows for j in batch)
            cost = self._row_cost.get(batch[0].method)
            if cost is not None and cost * rows <= self.inline_seconds:
                self._run_inline(batch)
            else:
                self._submit(batch)

    def _submit(self, batch: list[_Job]) -> None:
        """The batch to a worker thread; its answers come back through :meth:`_finish`."""
        self._inflight += 1
        assert self._loop is not None
        fut = self._loop.run_in_executor(self._pool, self._execute, batch)
        fut.add_done_callback(lambda f, b=batch: self._finish(b, f))

    def _run_inline(self, batch: list[_Job]) -> None:
        self.stats.inline_batches += 1
        try:
            results = self._execute(batch)
        except Exception as exc:  # noqa: BLE001 - each request gets the error, as in a thread
            self._deliver(batch, None, exc)
        else:
            self._deliver(batch, results, None)
        self._last_done = time.perf_counter()

    def _take(self) -> list[_Job]:
        """The oldest job and the queued jobs that may share its call, up to max_batch rows."""
        first = self._queue.popleft()
        batch, rows, keep = [first], first.rows, []
        while self._queue and rows < self.max_batch:
            job = self._queue.popleft()
            if (
                job.method == first.method
                and job.key == first.key
                and rows + job.rows <= self.max_batch
            ):
                batch.append(job)
                rows += job.rows
            else:
                keep.append(job)
        self._queue.extendleft(reversed(keep))
        self._queued_rows -= rows
        return batch

    def _execute(self, batch: list[_Job]) -> list[tuple[bool, Any]]:
        """One model call for the batch (in a worker thread or inline); (ok, output or error)
        per job."""
        live = [j for j in batch if not j.future.cancelled()]  # the client went away
        if not live:
            return [(False, asyncio.CancelledError())] * len(batch)
        method = batch[0].method
        fn = getattr(self.model, method)
        try:
            out = self._call(fn, method, [j.data for j in live], len(live))
        except PeregrineError:
            if len(live) == 1:  # one request: its own error, as it is
                raise
            self.stats.fallbacks += 1
            # one request's rows are bad: each request alone gets its answer or its own error
            results: dict[int, tuple[bool, Any]] = {}
            for j in live:
                try:
                    results[id(j)] = (True, self._call(fn, j.method, [j.data], 1))
                except PeregrineError as exc:
                    results[id(j)] = (False, exc)
            return [results.get(id(j), (False, asyncio.CancelledError())) for j in batch]
        answers: list[tuple[bool, Any]] = []
        alive = None if len(live) == len(batch) else {id(j) for j in live}
        start = 0
        for j in batch:
            if alive is None or id(j) in alive:
                end = start + j.rows
                answers.append((True, out[start:end]))
                start = end
            else:
                answers.append((False, asyncio.CancelledError()))
        return answers

    def _call(self, fn: Any, method: str, parts: list[Any], n_requests: int) -> Any:
        data = _concat(parts)
        t0 = time.perf_counter()
        out = np.asarray(fn(data))
        seconds = time.perf_counter() - t0
        rows = int(data.shape[0])
        recent = self._row_seconds.get(method)
        if recent is None:
            recent = self._row_seconds[method] = collections.deque(maxlen=15)
        recent.append(seconds / rows)
        self._row_cost[method] = sorted(recent)[len(recent) // 2]
        self.stats.model_calls += 1
        self.stats.batches += 1
        self.stats.rows += rows
        if self.on_call is not None:
            self.on_call(method, rows, n_requests, seconds)
        return out

    def _finish(self, batch: list[_Job], fut: asyncio.Future) -> None:
        """On the event loop, after a call in a worker thread: free its slot, answer, and
        start what waited for the slot."""
        self._inflight -= 1
        self._last_done = time.perf_counter()
        exc = fut.exception()
        self._deliver(batch, None if exc is not None else fut.result(), exc)
        self._kick()

    @staticmethod
    def _deliver(
        batch: list[_Job], results: list[tuple[bool, Any]] | None, exc: BaseException | None
    ) -> None:
        for i, job in enumerate(batch):
            if job.future.done():  # cancelled: the client disconnected
                continue
            if exc is not None:
                job.future.set_exception(exc)
                continue
            assert results is not None
            ok, value = results[i]
            if ok:
                job.future.set_result(value)
            else:
                job.future.set_exception(value)
