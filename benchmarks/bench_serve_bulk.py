"""Part 3 of ``bench_serve.py`` (run through it: ``--repeat 0 --skip soak dask``): 10K-row
Arrow IPC bodies posted to ``peregrine serve`` (an httpx client, then ``wrk -c4``) against the
compiled model in-process on the same blocks, in wall time and in CPU time per body; and the
floor under any handler on this stack (the plain-ASGI empty handler receiving the same
bodies)."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time

import numpy as np
from bench_serve_load import (  # beside this file
    BENCH_SERVE,
    N_FEATURES,
    _cpu_seconds,
    _free_port,
    _start,
    _stop,
    _wait_ready,
    _wrk_body,
)


def bench_bulk(
    url: str, artifact: str, X, total_rows: int, wrk_seconds: float = 10, pid: int | None = None
) -> dict:
    """Rows/s over HTTP against the same blocks in-process; with the server's ``pid``, also its
    CPU time per 10K-row body (all threads, and its event loop's thread alone) against the
    in-process call's CPU time: the steadier comparison on a shared machine."""
    import httpx
    import pyarrow as pa

    import peregrine

    block = np.resize(X, (10_000, N_FEATURES)).astype(np.float64)
    table = pa.Table.from_arrays(
        [pa.array(block[:, j]) for j in range(N_FEATURES)],
        names=[f"f{j}" for j in range(N_FEATURES)],
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    body = sink.getvalue().to_pybytes()
    n_requests = max(1, total_rows // 10_000)
    headers = {"Content-Type": "application/vnd.apache.arrow.stream"}

    async def run() -> tuple[float, int]:
        failures = 0
        sem = asyncio.Semaphore(4)
        async with httpx.AsyncClient(timeout=120) as client:

            async def one():
                nonlocal failures
                async with sem:
                    r = await client.post(f"{url}/v1/predict_proba", content=body, headers=headers)
                    if r.status_code != 200:
                        failures += 1
                    else:
                        pa.ipc.open_stream(r.content).read_all()

            await one()  # warm-up
            t0 = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(n_requests)))
            return time.perf_counter() - t0, failures

    compiled = peregrine.load(artifact)
    compiled.predict_proba(block)

    inproc_cpu: list[float] = []

    def inproc() -> float:
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n_requests):
            compiled.predict_proba(block)
        inproc_cpu.append((time.process_time() - c0) / n_requests)
        return time.perf_counter() - t0

    def server_cpu() -> tuple[float, float]:
        if pid is None:
            return 0.0, 0.0
        return _cpu_seconds(pid), _cpu_seconds(pid, only=str(pid))

    # the in-process reference is timed before, between and after the two HTTP runs, and each
    # HTTP run is compared with the mean of the two around it: the load of a shared machine
    # drifts within minutes
    local = [inproc()]
    cpu0 = server_cpu()
    seconds, failures = asyncio.run(run())
    cpu1 = server_cpu()
    local.append(inproc())
    # the same bodies from wrk (compiled C; it does not read the answers, which the httpx run
    # above checked): what the server sustains when the client costs little of the two cores
    with tempfile.NamedTemporaryFile(suffix=".arrows", delete=False) as f:
        f.write(body)
    try:
        cpu2 = server_cpu()
        by_wrk = _wrk_body(url, f.name, headers["Content-Type"], wrk_seconds, 4)
        cpu3 = server_cpu()
        floor = _bulk_floor(f.name, headers["Content-Type"], wrk_seconds) if pid else None
    finally:
        os.unlink(f.name)
    local.append(inproc())
    rows = n_requests * 10_000
    wrk_rows_per_s = by_wrk["rps"] * 10_000
    out = {
        "rows": rows,
        "http_rows_per_s": rows / seconds,
        "inproc_rows_per_s": [rows / t for t in local],
        "fraction": (local[0] + local[1]) / 2 / seconds,
        "failures": failures,
        "wrk_rows_per_s": wrk_rows_per_s,
        "wrk_fraction": wrk_rows_per_s * (local[1] + local[2]) / 2 / rows,
        "wrk_requests": by_wrk["requests"],
        "wrk_failures": by_wrk["failures"],
        "load_average": os.getloadavg()[0],
        "inproc_cpu_ms_per_body": [c * 1e3 for c in inproc_cpu],
    }
    if pid is not None:  # warm-up included in the httpx run's count: one body more
        for name, (a, b), bodies in (
            ("httpx", (cpu0, cpu1), n_requests + 1),
            ("wrk", (cpu2, cpu3), by_wrk["requests"]),
        ):
            out[f"{name}_server_cpu_ms_per_body"] = (b[0] - a[0]) / bodies * 1e3
            out[f"{name}_loop_cpu_ms_per_body"] = (b[1] - a[1]) / bodies * 1e3
        out["wrk_client_cpu_ms_per_body"] = by_wrk["client_cpu_s"] / by_wrk["requests"] * 1e3
        out["floor"] = floor
        # the fraction two busy cores allow: the model's CPU over everything spent per body
        model_cpu = sum(inproc_cpu[1:]) / 2 * 1e3
        spent = out["wrk_server_cpu_ms_per_body"] + out["wrk_client_cpu_ms_per_body"]
        out["wrk_cpu_fraction"] = model_cpu / spent
        out["floor_cpu_fraction"] = model_cpu / (
            model_cpu + floor["server_cpu_ms_per_body"] + floor["client_cpu_ms_per_body"]
        )
    print(f"  bulk: {out}", flush=True)
    return out


def _bulk_floor(path: str, content_type: str, seconds: float) -> dict:
    """The same bodies posted by wrk to the plain ASGI empty handler (it reads every body and
    answers a constant): what uvicorn and the kernel spend receiving a body, the floor under
    any handler on this stack (its heap kept from re-faulting per body: ``_steady_heap``)."""
    port = _free_port()
    me = [sys.executable, BENCH_SERVE]
    proc = _start(me + ["--app", "empty-asgi", "--port", str(port), "--model", "-"])
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url)
        _wrk_body(url, path, content_type, 2, 4)  # warm-up
        cpu0 = _cpu_seconds(proc.pid)
        res = _wrk_body(url, path, content_type, seconds, 4)
        n = res["requests"]
        return {
            "bodies_per_s": res["rps"],
            "server_cpu_ms_per_body": (_cpu_seconds(proc.pid) - cpu0) / n * 1e3,
            "client_cpu_ms_per_body": res["client_cpu_s"] / n * 1e3,
            "failures": res["failures"],
        }
    finally:
        _stop(proc)
