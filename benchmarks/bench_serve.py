"""Serving and batch-scoring benchmark for issue #16 (run by hand, not a test), 127.0.0.1 only.

    .venv/bin/python benchmarks/bench_serve.py --duration 15 --repeat 3 --skip soak dask
    .venv/bin/python benchmarks/bench_serve.py --skip http soak --dask-rows 10000000

Parts (each bounded by --duration or a row count):
1. ceilings: the same stack (uvicorn + Starlette, uvloop/httptools, one process) with an empty
   handler that reads the body and returns a constant JSON answer; and the same empty handler as
   a plain ASGI callable on uvicorn, which is how ``peregrine serve`` answers its scoring route;
2. single-row JSON predict_proba, 64 concurrent connections, XGBoost 500 trees x depth 8:
   ``peregrine serve`` vs the same stack calling ``xgboost``'s ``predict_proba`` per request
   (a plain sync Starlette endpoint, run in its thread pool, as a user would write it);
   p50/p99, failures, the server's CPU time per request, the load average, and the server's
   model calls vs requests from /metrics; --repeat rounds of all four systems in turn, each
   figure compared with the ceilings of its own round (the machine's load drifts);
3. bulk: --bulk-rows rows posted as 10K-row Arrow IPC bodies (4 concurrent clients) vs the
   compiled model in-process on the same 10K-row blocks;
4. soak: --soak seconds at --rate requests/s, the server's RSS at start and end, then SIGTERM
   under load (no accepted request may be lost);
5. Dask: 2-worker LocalCluster (1 thread each) scoring Parquet in >= 8 partitions with
   ``peregrine.dask.predict`` vs ``map_partitions`` with the source model (XGBoost, n_jobs=1,
   shipped once in the graph as dask-ml's ParallelPostFit does).

The load generator for 1-2 is ``wrk`` (Debian package ``wrk``; compiled C, so it takes little of
the two cores it shares with the server); part 3 uses an httpx client (bodies of 2 MB: the client
costs little next to the server). Every figure is also given as a fraction of the ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

N_FEATURES = 28
CONNECTIONS = 64


# --------------------------------------------------------------------------------- apps --
def _empty_app():
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    answer = b'{"predictions":[[0.5,0.5]],"classes":[0,1]}'

    async def handler(request):
        await request.body()
        return Response(answer, media_type="application/json")

    return Starlette(routes=[Route("/v1/predict_proba", handler, methods=["POST"])])


def _empty_asgi_app():
    """The empty handler as a plain ASGI callable, the way ``peregrine serve`` answers
    ``POST /v1/<method>`` (ahead of Starlette's request and response objects): the ceiling for
    that route on uvicorn."""
    answer = b'{"predictions":[[0.5,0.5]],"classes":[0,1]}'
    head = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(answer))]

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        more = True
        while more:
            message = await receive()
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": head})
        await send({"type": "http.response.body", "body": answer})

    return app


def _xgboost_app(model_path: str):
    import xgboost as xgb
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    model = xgb.XGBClassifier()
    model.load_model(model_path)

    async def endpoint(request):  # what a user writes: parse, predict off the loop, answer
        doc = json.loads(await request.body())
        X = np.asarray(doc["rows"], dtype=np.float64)
        proba = await run_in_threadpool(model.predict_proba, X)
        return JSONResponse({"predictions": proba.tolist(), "classes": [0, 1]})

    return Starlette(routes=[Route("/v1/predict_proba", endpoint, methods=["POST"])])


def _run_app(kind: str, port: int, model_path: str | None) -> None:
    import uvicorn

    apps = {"empty": _empty_app, "empty-asgi": _empty_asgi_app}
    app = apps[kind]() if kind in apps else _xgboost_app(model_path)
    # lifespan off: the plain ASGI app has none (Starlette's would do nothing here)
    uvicorn.run(
        app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="off"
    )


# ------------------------------------------------------------------------------- helpers --
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.post(f"{url}/v1/predict_proba", json={"rows": [[0.0] * N_FEATURES]}, timeout=5)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def _start(cmd: list[str], env=None) -> subprocess.Popen:
    return subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_WRK_DONE = [
    "done = function(summary, latency, requests)",
    '  io.write(string.format("JSON {\\"requests\\": %d, \\"non2xx\\": %d, '
    '\\"connect\\": %d, \\"read\\": %d, \\"write\\": %d, \\"timeout\\": %d, '
    '\\"p50_ms\\": %.3f, \\"p99_ms\\": %.3f, \\"seconds\\": %.3f}\\n", '
    "summary.requests, summary.errors.status, summary.errors.connect, "
    "summary.errors.read, summary.errors.write, summary.errors.timeout, "
    "latency:percentile(50) / 1000, latency:percentile(99) / 1000, "
    "summary.duration / 1e6))",
    "end",
]


def _run_wrk(url: str, lua: list[str], duration: float, connections: int) -> dict:
    """wrk -t1 with a Lua script: requests/s, p50/p99 (ms), failures (non-2xx + socket
    errors), requests."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write("\n".join(lua + _WRK_DONE))
        script = f.name
    cpu0 = _children_cpu()
    try:
        out = subprocess.run(
            ["wrk", "-t1", f"-c{connections}", f"-d{duration:.0f}s", "--timeout", "5s",
             "-s", script, url],
            capture_output=True,
            text=True,
            timeout=duration + 60,
            check=True,
        ).stdout  # fmt: skip
    finally:
        os.unlink(script)
    doc = json.loads(re.search(r"^JSON (.*)$", out, re.M).group(1))
    failures = doc["non2xx"] + doc["connect"] + doc["read"] + doc["write"] + doc["timeout"]
    return {
        "rps": doc["requests"] / doc["seconds"],
        "p50_ms": doc["p50_ms"],
        "p99_ms": doc["p99_ms"],
        "requests": doc["requests"],
        "failures": failures,
        "client_cpu_s": _children_cpu() - cpu0,  # wrk's own user + system time
    }


def _children_cpu() -> float:
    import resource

    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _wrk(url: str, rows: np.ndarray, duration: float, connections: int = CONNECTIONS) -> dict:
    """Single-row JSON bodies (256 different rows in turn) posted to predict_proba."""
    bodies = [json.dumps({"rows": [r.tolist()]}) for r in rows[:256]]
    lua = ["bodies = {"]
    lua += ["  " + json.dumps(b) + "," for b in bodies]  # JSON strings are valid Lua strings
    lua += [
        "}",
        "i = 0",
        'wrk.method = "POST"',
        'wrk.headers["Content-Type"] = "application/json"',
        "request = function()",
        "  i = (i % #bodies) + 1",
        "  return wrk.format(nil, nil, nil, bodies[i])",
        "end",
    ]
    return _run_wrk(f"{url}/v1/predict_proba", lua, duration, connections)


def _wrk_body(url: str, path: str, content_type: str, duration: float, connections: int) -> dict:
    """The same binary body (read from ``path``) posted over and over."""
    lua = [
        f"local f = assert(io.open({json.dumps(path)}, 'rb'))",
        'wrk.body = f:read("*a")',
        "f:close()",
        'wrk.method = "POST"',
        f'wrk.headers["Content-Type"] = "{content_type}"',
    ]
    return _run_wrk(f"{url}/v1/predict_proba", lua, duration, connections)


def _metric(text: str, name: str) -> float:
    return sum(
        float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    )


# ----------------------------------------------------------------------------- model --
def _model(workdir: str, trees: int, depth: int):
    import xgboost as xgb

    rng = np.random.default_rng(0)
    X = rng.normal(size=(20000, N_FEATURES)).astype(np.float32)
    y = ((X[:, 0] * X[:, 1] + np.sin(X[:, 2]) + 0.3 * rng.normal(size=len(X))) > 0).astype(int)
    model = xgb.XGBClassifier(
        n_estimators=trees, max_depth=depth, tree_method="hist", random_state=0, n_jobs=2
    ).fit(X, y)
    path = os.path.join(workdir, "xgb.json")
    model.save_model(path)
    return model, path, X


# ------------------------------------------------------------------------------- parts --
SYSTEMS = ("empty", "empty-asgi", "xgboost", "peregrine")


def _serve_cmd(artifact: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "peregrine.cli", "serve", artifact, "--port", "0",
            "--log-level", "warning", *extra]  # fmt: skip


def _announced_url(proc: subprocess.Popen) -> str:
    for line in proc.stderr:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            return m.group(1)
    raise RuntimeError("the server did not announce its address")


def _cpu_seconds(pid: int, only: str | None = None) -> float:
    """User + system CPU of every thread of ``pid`` so far (/proc/PID/task/*/stat), or of the
    thread ``only`` (the main thread's id is the pid: the event loop's)."""
    total = 0
    for tid in [only] if only else os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
    return total / os.sysconf("SC_CLK_TCK")


def _http_run(kind: str, args, model_json: str, artifact: str, X) -> dict:
    """One system under wrk: throughput, latency, failures, the server's CPU per request, the
    load average at the end; for peregrine, model calls vs requests from /metrics."""
    import httpx

    if kind == "peregrine":
        proc = _start(_serve_cmd(artifact, "--max-batch", str(args.max_batch),
                                 "--max-delay-ms", str(args.max_delay_ms)))  # fmt: skip
        url = _announced_url(proc)
    else:
        port = _free_port()
        me = [sys.executable, os.path.abspath(__file__)]
        proc = _start(me + ["--app", kind, "--port", str(port), "--model", model_json])
        url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url)
        _wrk(url, X, 2)  # warm-up
        before = httpx.get(f"{url}/metrics").text if kind == "peregrine" else ""
        cpu0 = _cpu_seconds(proc.pid)
        res = _wrk(url, X, args.duration)
        res["server_cpu_us_per_request"] = (_cpu_seconds(proc.pid) - cpu0) / res["requests"] * 1e6
        res["load_average"] = os.getloadavg()[0]
        if kind == "peregrine":
            after = httpx.get(f"{url}/metrics").text
            for name in ("model_calls", "requests"):
                metric = f"peregrine_{name}_total"
                res[f"server_{name}"] = _metric(after, metric) - _metric(before, metric)
            # exactness spot check through the server
            r = httpx.post(f"{url}/v1/predict_proba", json={"rows": X[:100].tolist()}, timeout=30)
            source = _xgb(model_json).predict_proba(X[:100])
            np.testing.assert_allclose(r.json()["predictions"], source, 1e-5, 1e-6)
    finally:
        _stop(proc)
    return res


def _xgb(model_json: str):
    import xgboost as xgb

    m = xgb.XGBClassifier()
    m.load_model(model_json)
    return m


def bench_http(args, workdir: str, model, model_json: str, artifact: str, X) -> dict:
    """--repeat rounds of every system in turn (the machine's load drifts: each figure is
    compared with the ceiling measured in the same round)."""
    runs: dict[str, list[dict]] = {k: [] for k in SYSTEMS}
    for round_ in range(args.repeat):
        for kind in SYSTEMS:
            res = _http_run(kind, args, model_json, artifact, X)
            runs[kind].append(res)
            short = {k: round(v, 2) if isinstance(v, float) else v for k, v in res.items()}
            print(f"  round {round_ + 1} {kind}: {short}", flush=True)
    rounds = []
    for i in range(args.repeat):
        ceiling, asgi = runs["empty"][i]["rps"], runs["empty-asgi"][i]["rps"]
        ours, theirs = runs["peregrine"][i]["rps"], runs["xgboost"][i]["rps"]
        rounds.append({
            "peregrine_vs_xgboost": ours / theirs,
            "peregrine_vs_ceiling": ours / ceiling,
            "peregrine_vs_asgi_ceiling": ours / asgi,
            "xgboost_vs_ceiling": theirs / ceiling,
        })  # fmt: skip
        print(f"  round {i + 1} ratios: { {k: round(v, 3) for k, v in rounds[-1].items()} }")
    res: dict = {"runs": runs, "rounds": rounds}
    if args.bulk_rows:
        proc = _start(_serve_cmd(artifact))
        try:
            url = _announced_url(proc)
            _wait_ready(url)
            res["bulk"] = bench_bulk(url, artifact, X, args.bulk_rows, args.duration, proc.pid)
        finally:
            _stop(proc)
    return res


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
    any handler on this stack."""
    port = _free_port()
    me = [sys.executable, os.path.abspath(__file__)]
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


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def bench_soak(args, artifact: str, X) -> dict:
    """--soak seconds at --rate requests/s (single-row JSON, one async client), resident memory
    of the server at the start and the end, then SIGTERM under the same load: requests on
    established connections must all be answered (refused connections after it are expected).
    """
    import httpx

    proc = _start(
        [
            sys.executable,
            "-m",
            "peregrine.cli",
            "serve",
            artifact,
            "--port",
            "0",
            "--log-level",
            "warning",
        ]
    )
    url = None
    for line in proc.stderr:
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            url = m.group(1)
            break
    _wait_ready(url)
    bodies = [json.dumps({"rows": [r.tolist()]}).encode() for r in X[:256]]
    headers = {"Content-Type": "application/json"}
    out: dict = {"rate": args.rate, "seconds": args.soak}

    async def load(seconds: float, stop_at: float | None = None) -> dict:
        counts: dict = {"ok": 0, "refused": 0, "closed_unread": 0, "lost": 0, "other": 0}
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:

            async def one(i: int) -> None:
                try:
                    r = await client.post(
                        f"{url}/v1/predict_proba", content=bodies[i % 256], headers=headers
                    )
                    counts["ok" if r.status_code == 200 else "other"] += 1
                except httpx.ConnectError:
                    counts["refused"] += 1  # not accepted: the server had stopped listening
                except httpx.RemoteProtocolError:
                    # the server closed a keep-alive connection before it read this request
                    # (uvicorn closes idle connections on SIGTERM; a request in flight on the
                    # wire meets the close): never accepted, safe to retry, HTTP/1.1's race
                    counts["closed_unread"] += 1
                except httpx.TransportError as exc:
                    counts["lost"] += 1  # accepted, then dropped: must never happen
                    counts.setdefault("lost_errors", []).append(repr(exc))

            tasks, t0, i = [], time.perf_counter(), 0
            while time.perf_counter() - t0 < seconds:
                tasks.append(asyncio.ensure_future(one(i)))
                i += 1
                if stop_at is not None and time.perf_counter() - t0 >= stop_at:
                    proc.send_signal(signal.SIGTERM)
                    stop_at = None
                await asyncio.sleep(max(0.0, t0 + i / args.rate - time.perf_counter()))
            await asyncio.gather(*tasks)
        return counts

    try:
        asyncio.run(load(2))  # warm-up
        out["rss_start_mb"] = _rss_mb(proc.pid)
        out["soak"] = asyncio.run(load(args.soak))
        out["rss_end_mb"] = _rss_mb(proc.pid)
        out["sigterm"] = asyncio.run(load(4, stop_at=2))
        out["exit"] = proc.wait(60)
    finally:
        _stop(proc)
    print(f"  soak: {out}", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=15.0, help="seconds per wrk run")
    p.add_argument("--repeat", type=int, default=3, help="rounds of the HTTP comparison")
    p.add_argument("--trees", type=int, default=500)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--max-batch", type=int, default=1024)
    p.add_argument("--max-delay-ms", type=float, default=2.0)
    p.add_argument("--bulk-rows", type=int, default=1_000_000)
    p.add_argument("--dask-rows", type=int, default=10_000_000)
    p.add_argument("--soak", type=float, default=600.0, help="soak seconds at --rate")
    p.add_argument("--rate", type=float, default=500.0, help="soak requests per second")
    p.add_argument("--skip", nargs="*", default=[], choices=["http", "soak", "dask"])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--app", choices=["empty", "empty-asgi", "xgboost"], help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.app:
        _run_app(args.app, args.port, args.model)
        return
    if shutil.which("wrk") is None and "http" not in args.skip:
        sys.exit("wrk is not installed: apt-get install wrk (or --skip http)")
    import peregrine

    results: dict = {"machine": _machine(), "load_at_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as workdir:
        t0 = time.perf_counter()
        model, model_json, X = _model(workdir, args.trees, args.depth)
        artifact = os.path.join(workdir, "xgb.peregrine")
        peregrine.compile(model, backend="native").save(artifact)
        print(f"model trained and compiled in {time.perf_counter() - t0:.1f} s", flush=True)
        if "http" not in args.skip:
            results["http"] = bench_http(args, workdir, model, model_json, artifact, X)
        if "soak" not in args.skip:
            results["soak"] = bench_soak(args, artifact, X)
        if "dask" not in args.skip:
            from bench_serve_dask import bench_dask  # beside this file

            results["dask"] = bench_dask(args, workdir, model, model_json, X)
    results["load_at_end"] = os.getloadavg()[0]
    print(json.dumps(results, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def _machine() -> dict:
    import starlette
    import uvicorn
    import xgboost

    import peregrine

    cpu = platform.processor()
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        cpu = re.search(r"Model name:\s*(.*)", lscpu).group(1).strip()
    except (OSError, AttributeError):
        pass
    versions = {
        "python": platform.python_version(),
        "peregrine": peregrine.__version__,
        "xgboost": xgboost.__version__,
        "uvicorn": uvicorn.__version__,
        "starlette": starlette.__version__,
        "numpy": np.__version__,
    }
    for mod in ("uvloop", "httptools", "dask", "distributed", "pyarrow"):
        try:
            versions[mod] = __import__(mod).__version__
        except ImportError:
            pass
    wrk = subprocess.run(["wrk", "-v"], capture_output=True, text=True)
    versions["wrk"] = (wrk.stdout + wrk.stderr).split("\n")[0][:40]
    return {"cpu": cpu, "cores": os.cpu_count(), "versions": versions}


if __name__ == "__main__":
    main()
