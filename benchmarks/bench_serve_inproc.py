"""The scoring route's own cost, without sockets (run by hand, not a test): ``peregrine serve``'s
ASGI app driven directly on a uvloop event loop, against the plain-ASGI empty handler driven the
same way, so what is left is what the app spends per request above uvicorn's protocol.

    .venv/bin/python benchmarks/bench_serve_inproc.py                 # single rows and bulk
    .venv/bin/python benchmarks/bench_serve_inproc.py --profile rows  # cProfile of one part

Single rows: ``--requests`` one-row JSON ``predict_proba`` requests from ``--clients``
concurrent tasks (each sends its next request when its answer is complete, as wrk does); bulk:
``--bodies`` 10K-row Arrow IPC bodies from 4 tasks, each body handed to the app in 64 KiB
messages (uvicorn's flow-control window). The figure is process CPU time per request
(``time.process_time``: all threads, the model's included), the steady measure on a shared
machine; the model's own CPU on the same rows is given beside it (in-process, no server).
Same model as ``bench_serve.py``: XGBoost 500 trees x depth 8, 28 features, native backend.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import _model  # noqa: E402  (beside this file)
from bench_serve_load import N_FEATURES, _empty_asgi_app  # noqa: E402

CHUNK = 64 << 10  # uvicorn hands a body over in messages of about its 64 KiB read window


def _scope(content_type: bytes, length: int) -> dict:
    return {
        "type": "http",
        "method": "POST",
        "path": "/v1/predict_proba",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", content_type),
            (b"content-length", b"%d" % length),
        ],
    }


async def _drive(app, bodies: list[bytes], content_type: bytes, n: int, clients: int) -> float:
    """``n`` requests (bodies in turn) from ``clients`` tasks; returns CPU seconds per request."""
    done = 0
    statuses: dict[int, int] = {}

    async def client(k: int) -> None:
        nonlocal done
        i = k
        while done < n:
            done += 1
            body = bodies[i % len(bodies)]
            i += clients
            messages = [
                {"type": "http.request", "body": body[s : s + CHUNK], "more_body": True}
                for s in range(0, len(body), CHUNK)
            ]
            messages[-1]["more_body"] = False
            it = iter(messages)

            async def receive(it=it):
                return next(it)

            async def send(message):
                if message["type"] == "http.response.start":
                    statuses[message["status"]] = statuses.get(message["status"], 0) + 1

            await app(_scope(content_type, len(body)), receive, send)

    c0 = time.process_time()
    await asyncio.gather(*(client(k) for k in range(clients)))
    seconds = time.process_time() - c0
    if set(statuses) != {200}:
        raise RuntimeError(f"answers other than 200: {statuses}")
    return seconds / done


def _arrow_body(block: np.ndarray) -> bytes:
    import pyarrow as pa

    table = pa.Table.from_arrays(
        [pa.array(block[:, j]) for j in range(block.shape[1])],
        names=[f"f{j}" for j in range(block.shape[1])],
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def main() -> None:
    import uvloop

    import peregrine
    from peregrine.deploy import ServeConfig, create_app
    from peregrine.deploy.app import settle_heap

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=40_000)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--bodies", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--parts", nargs="*", default=["rows", "bulk"], choices=["rows", "bulk"])
    p.add_argument("--profile", choices=["rows", "bulk"], help="cProfile this part, once")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-inproc-") as workdir:
        model, _, X = _model(workdir, 500, 8)
        artifact = os.path.join(workdir, "xgb.peregrine")
        peregrine.compile(model, backend="native").save(artifact)
        compiled = peregrine.load(artifact)
        app = create_app(ServeConfig(artifact), model=compiled)
    empty = _empty_asgi_app()
    settle_heap()  # as the CLI's server does
    rows = [json.dumps({"rows": [r.tolist()]}).encode() for r in X[:256]]
    block = np.resize(X, (10_000, N_FEATURES)).astype(np.float64)
    bulk = [_arrow_body(block)]
    parts = {
        "rows": (rows, b"application/json", args.requests, args.clients),
        "bulk": (bulk, b"application/vnd.apache.arrow.stream", args.bodies, 4),
    }
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)

    def run(target, part: str, n: int | None = None) -> float:
        bodies, ctype, count, clients = parts[part]
        return loop.run_until_complete(_drive(target, bodies, ctype, n or count, clients))

    loop.run_until_complete(app.state.batcher.start())  # the lifespan's startup

    for part in parts:  # warm-up: kernels, the batcher's cost estimate, caches
        run(app, part, 2000 if part == "rows" else 8)
        run(empty, part, 2000 if part == "rows" else 8)
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        run(app, args.profile)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(35)
        return

    out: dict = {"load_at_start": os.getloadavg()[0]}
    one_row = X[:1].astype(np.float64)
    for part in args.parts:
        ours, floor = [], []
        for _ in range(args.repeat):  # alternate, so that a change of load hits both
            ours.append(run(app, part) * 1e6)
            floor.append(run(empty, part) * 1e6)
        # the model's own CPU on the same rows: one row per call (the batcher stacks them, so
        # this is an upper bound for single rows), the 10K-row block for bulk
        data, calls = (one_row, 20_000) if part == "rows" else (block, 20)
        c0 = time.process_time()
        for _ in range(calls):
            compiled.predict_proba(data)
        model = (time.process_time() - c0) / calls * 1e6
        out[part] = {
            "app_cpu_us": sorted(ours),
            "empty_cpu_us": sorted(floor),
            "over_empty_us": float(np.median(ours) - np.median(floor)),
            "model_alone_cpu_us": model,
        }
        print(f"{part}: {json.dumps(out[part], default=lambda v: round(v, 1))}", flush=True)
    out["load_at_end"] = os.getloadavg()[0]
    print(json.dumps(out, default=float))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=float)


if __name__ == "__main__":
    main()
