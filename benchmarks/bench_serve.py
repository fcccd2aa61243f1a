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

Beside this file: ``bench_serve_load.py`` (the ceiling apps, wrk, process and /proc helpers),
``bench_serve_bulk.py`` (part 3) and ``bench_serve_dask.py`` (part 5); ``bench_serve_inproc.py``
measures the app alone (no sockets), the steadier figure for iterating on its cost per request.
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
import subprocess
import sys
import tempfile
import time

import numpy as np
from bench_serve_bulk import bench_bulk  # beside this file
from bench_serve_load import (
    BENCH_SERVE,
    N_FEATURES,
    _announced_url,
    _cpu_seconds,
    _free_port,
    _metric,
    _rss_mb,
    _run_app,
    _serve_cmd,
    _start,
    _stop,
    _wait_ready,
    _wrk,
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
        me = [sys.executable, BENCH_SERVE]
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
                    # (on SIGTERM it closes connections left idle for 0.5 s; a request written
                    # at that moment meets the close): never read, safe to retry, HTTP/1.1's
                    # keep-alive race (docs/deploy.md, "Shutdown")
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
