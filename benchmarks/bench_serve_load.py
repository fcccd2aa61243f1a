"""Load generators and process helpers of ``bench_serve.py`` (run through it, not alone): the
ceiling apps (run in a child process as ``bench_serve.py --app KIND``), ``wrk`` with Lua bodies,
starting and stopping servers, and reading a process's CPU time and resident memory from
/proc."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

N_FEATURES = 28
CONNECTIONS = 64
# the ceiling apps run as children of this script, under its own CLI (--app KIND)
BENCH_SERVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_serve.py")


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


def _steady_heap() -> None:
    """glibc malloc thresholds for the empty handlers (PEREGRINE_BENCH_MALLOC=0: the defaults).

    With glibc's defaults the empty handler, receiving 2.2 MB bodies and nothing else, grew its
    heap for every body and trimmed it back when the body was freed: under ``perf`` 47% of its
    CPU was page faults, zeroing and ``brk``/``munmap``, and it spent 2.6-2.7 ms per body.
    ``peregrine serve`` does not (0.4% of its samples in page faults, the same CPU per body
    with these thresholds or without), so the floor under it is the empty handler without the
    churn: allocations up to 32 MiB stay on the heap, which is not trimmed below 256 MiB free
    (0.7-0.9 ms per body; docs/deploy.md)."""
    if os.environ.get("PEREGRINE_BENCH_MALLOC") == "0" or not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD (also ends the dynamic threshold)
    mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD


def _run_app(kind: str, port: int, model_path: str | None) -> None:
    import uvicorn

    apps = {"empty": _empty_app, "empty-asgi": _empty_asgi_app}
    if kind in apps:
        _steady_heap()
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


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024
