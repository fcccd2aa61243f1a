"""The dynamic batcher on its own, with a fake model that records its calls."""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from peregrine.deploy.batcher import Batcher, QueueFull, ShuttingDown
from peregrine.errors import InputError

pytestmark = pytest.mark.timeout(60)


class RecordingModel:
    """predict(X) = row sums; records the rows of every call; ``seconds`` per call."""

    def __init__(self, seconds: float = 0.0) -> None:
        self.seconds = seconds
        self.calls: list[int] = []
        self.lock = threading.Lock()

    def predict(self, X):
        with self.lock:
            self.calls.append(len(X))
        if self.seconds:
            time.sleep(self.seconds)
        X = np.asarray(X)
        if np.isnan(X).any():
            raise InputError(f"input contains NaN at row {int(np.argwhere(np.isnan(X))[0][0])}")
        return X.sum(axis=1)

    transform = predict


def run(coro):
    return asyncio.run(coro)


def key(width=3):
    return ("array", "<f8", width)


async def _started(model, **kw) -> Batcher:
    b = Batcher(model, **kw)
    await b.start()
    return b


def test_concurrent_requests_are_coalesced_into_fewer_calls():
    model = RecordingModel(seconds=0.005)

    async def main():
        b = await _started(model, max_batch=1024, max_delay=0.005)
        rng = np.random.default_rng(0)
        inputs = [rng.normal(size=(int(rng.integers(1, 20)), 3)) for _ in range(200)]
        outs = await asyncio.gather(*(b.submit("predict", key(), X, len(X)) for X in inputs))
        await b.stop()
        return inputs, outs, b

    inputs, outs, b = run(main())
    for X, out in zip(inputs, outs):
        np.testing.assert_array_equal(out, X.sum(axis=1))
    assert len(model.calls) < 20  # 200 requests
    assert b.stats.requests == 200 and b.stats.model_calls == len(model.calls)
    assert sum(model.calls) == sum(len(X) for X in inputs)


def test_a_lone_request_on_an_idle_server_is_not_delayed():
    model = RecordingModel()

    async def main():
        b = await _started(model, max_delay=0.5)  # a delay nobody should ever wait for here
        times = []
        for _ in range(5):  # one client, one request at a time
            t0 = time.perf_counter()
            out = await b.submit("predict", key(), np.ones((1, 3)), 1)
            times.append(time.perf_counter() - t0)
            assert out.tolist() == [3.0]
        await asyncio.sleep(0.6)  # idle again
        t0 = time.perf_counter()
        await b.submit("predict", key(), np.ones((1, 3)), 1)
        times.append(time.perf_counter() - t0)
        await b.stop()
        return times

    times = run(main())
    assert max(times) < 0.1, times


def test_max_batch_bounds_rows_per_call_and_a_big_request_runs_alone():
    model = RecordingModel(seconds=0.002)

    async def main():
        b = await _started(model, max_batch=32, max_delay=0.01)
        inputs = [np.ones((n, 3)) for n in [5] * 40 + [100]]
        outs = await asyncio.gather(*(b.submit("predict", key(), X, len(X)) for X in inputs))
        await b.stop()
        return inputs, outs

    inputs, outs = run(main())
    assert all(len(o) == len(X) for X, o in zip(inputs, outs))
    assert 100 in model.calls
    assert all(n <= 32 for n in model.calls if n != 100)


def test_incompatible_requests_are_never_stacked():
    model = RecordingModel(seconds=0.003)

    async def main():
        b = await _started(model, max_delay=0.01)
        jobs = []
        for i in range(30):
            width = 3 if i % 2 else 4
            X = np.full((2, width), float(i))
            method = "transform" if i % 3 == 0 else "predict"
            jobs.append((method, X, b.submit(method, key(width), X, 2)))
        outs = await asyncio.gather(*(j[2] for j in jobs))
        await b.stop()
        return jobs, outs

    jobs, outs = run(main())
    for (_, X, _), out in zip(jobs, outs):
        np.testing.assert_array_equal(out, X.sum(axis=1))  # a mixed stack would fail to concat


def test_a_bad_request_fails_alone_with_its_own_row_number():
    model = RecordingModel(seconds=0.003)

    async def main():
        b = await _started(model, max_delay=0.02)
        inputs = [np.ones((4, 3)) for _ in range(10)]
        inputs[6] = inputs[6].copy()
        inputs[6][2, 1] = np.nan
        results = await asyncio.gather(
            *(b.submit("predict", key(), X, 4) for X in inputs), return_exceptions=True
        )
        await b.stop()
        return results, b

    results, b = run(main())
    for i, r in enumerate(results):
        if i == 6:
            assert isinstance(r, InputError) and "row 2" in str(r)
        else:
            assert r.tolist() == [3.0] * 4
    assert b.stats.fallbacks >= 1


def test_the_queue_is_bounded_in_rows():
    model = RecordingModel(seconds=0.05)

    async def main():
        b = await _started(model, max_batch=4, max_queue_rows=8)
        results = await asyncio.gather(
            *(b.submit("predict", key(), np.ones((4, 3)), 4) for _ in range(10)),
            return_exceptions=True,
        )
        await b.stop()
        return results

    results = run(main())
    full = [r for r in results if isinstance(r, QueueFull)]
    assert full and len(full) < 10
    assert all(r.tolist() == [3.0] * 4 for r in results if not isinstance(r, QueueFull))


def test_stop_answers_what_was_queued_then_refuses():
    model = RecordingModel(seconds=0.01)

    async def main():
        b = await _started(model, max_batch=2)
        pending = [
            asyncio.ensure_future(b.submit("predict", key(), np.ones((2, 3)), 2)) for _ in range(6)
        ]
        await asyncio.sleep(0)  # queued
        await b.stop()
        outs = await asyncio.gather(*pending)
        with pytest.raises(ShuttingDown):
            await b.submit("predict", key(), np.ones((2, 3)), 2)
        return outs

    outs = run(main())
    assert all(o.tolist() == [3.0, 3.0] for o in outs)
    assert len(model.calls) == 6


class ThreadRecordingModel(RecordingModel):
    """Also records the thread of every call."""

    def __init__(self, seconds: float = 0.0) -> None:
        super().__init__(seconds)
        self.threads: list[str] = []

    def predict(self, X):
        self.threads.append(threading.current_thread().name)
        return super().predict(X)


def test_quick_calls_run_on_the_event_loop_slow_ones_in_a_thread():
    async def main(model, **kw):
        b = await _started(model, max_delay=0.001, **kw)
        loop_thread = threading.current_thread().name
        for _ in range(3):  # sequential, then concurrent requests
            out = await b.submit("predict", key(), np.ones((1, 3)), 1)
            assert out.tolist() == [3.0]
        inputs = [np.full((2, 3), float(i)) for i in range(20)]
        outs = await asyncio.gather(*(b.submit("predict", key(), X, 2) for X in inputs))
        for X, out in zip(inputs, outs):
            np.testing.assert_array_equal(out, X.sum(axis=1))
        await b.stop()
        return loop_thread, b.stats

    # no measured cost yet: the first call goes to a thread; then (microseconds per row,
    # a budget of a second) every call runs on the loop
    quick = ThreadRecordingModel()
    loop_thread, stats = run(main(quick, inline_seconds=1.0))
    assert quick.threads[0] != loop_thread
    assert set(quick.threads[1:]) == {loop_thread}
    assert stats.inline_batches == len(quick.threads) - 1
    assert len(quick.calls) == 4  # the 20 concurrent requests arrived in one loop turn: one call

    # 20 ms a call: over the 1 ms budget, always a worker thread
    slow = ThreadRecordingModel(seconds=0.02)
    loop_thread, stats = run(main(slow, inline_seconds=0.001))
    assert loop_thread not in slow.threads and stats.inline_batches == 0

    # inline_seconds=0: never on the loop
    never = ThreadRecordingModel()
    loop_thread, stats = run(main(never, inline_seconds=0.0))
    assert loop_thread not in never.threads and stats.inline_batches == 0


def test_errors_of_inline_calls_reach_their_own_request():
    model = RecordingModel()

    async def main():
        b = await _started(model, max_delay=0.001, inline_seconds=1.0)
        await b.submit("predict", key(), np.ones((1, 3)), 1)  # measured: inline from now on
        inputs = [np.ones((3, 3)) for _ in range(8)]
        inputs[5] = inputs[5].copy()
        inputs[5][1, 0] = np.nan
        results = await asyncio.gather(
            *(b.submit("predict", key(), X, 3) for X in inputs), return_exceptions=True
        )
        alone = await asyncio.gather(
            b.submit("predict", key(), inputs[5], 3), return_exceptions=True
        )
        await b.stop()
        return results + alone, b

    results, b = run(main())
    assert b.stats.inline_batches >= 2
    for i, r in enumerate(results):
        if i in (5, 8):
            assert isinstance(r, InputError) and "row 1" in str(r)
        else:
            assert r.tolist() == [3.0] * 3
