"""Bulk Arrow scoring, ``peregrine serve`` at two revisions of ``peregrine/deploy`` alternated in
one driver (issue #16's bulk target), with the in-process model timed between every run.

    .venv/bin/python benchmarks/bench_serve_bulk_ab.py --before 615566d --rounds 4 --duration 8

Each round runs, in turn: the compiled model in-process on the 10K-row block, the server with
``--before``'s ``peregrine/deploy`` (the rest of the tree as it is now, so the model is the
same), the in-process model again, the server as it is now, the in-process model again. A server
run is ``wrk -c4`` posting the same 10K-row Arrow body (XGBoost 500 trees x depth 8, 28 float64
features, as ``bench_serve.py``'s part 3) for ``--duration`` seconds after a 2 s warm-up.

Per run: the server's CPU time per body (all threads, and its event loop's thread alone), wrk's,
and rows/s; the fractions are against the mean of the in-process runs on either side: **CPU
fraction** = in-process CPU per body / (server + wrk CPU per body), the steadier figure on a
shared machine; **wall fraction** = server rows/s / in-process rows/s. The load average is
recorded per run: other sessions' jobs share the two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from bench_serve import _model  # beside this file
from bench_serve_load import (
    N_FEATURES,
    _announced_url,
    _cpu_seconds,
    _serve_cmd,
    _start,
    _stop,
    _wait_ready,
    _wrk_body,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARROW = "application/vnd.apache.arrow.stream"


def _tree_with_deploy_of(rev: str, workdir: str) -> str:
    """A copy of src/ with peregrine/deploy/ as it was at ``rev``: the PYTHONPATH to run it."""
    src = os.path.join(workdir, f"src-{rev}")
    shutil.copytree(os.path.join(ROOT, "src"), src, ignore=shutil.ignore_patterns("__pycache__"))
    deploy = os.path.join(src, "peregrine", "deploy")
    shutil.rmtree(deploy)
    os.makedirs(deploy)
    files = subprocess.run(
        ["git", "ls-tree", "--name-only", rev, "src/peregrine/deploy/"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    for path in files:
        data = subprocess.run(
            ["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        with open(os.path.join(deploy, os.path.basename(path)), "wb") as f:
            f.write(data)
    return src


def _body(X: np.ndarray) -> tuple[np.ndarray, bytes]:
    import pyarrow as pa

    block = np.resize(X, (10_000, N_FEATURES)).astype(np.float64)
    table = pa.table({f"f{j}": block[:, j] for j in range(N_FEATURES)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return block, sink.getvalue().to_pybytes()


def _inproc(compiled, block: np.ndarray, calls: int) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(calls):
        compiled.predict_proba(block)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"rows_per_s": calls * 10_000 / wall, "cpu_ms_per_body": cpu / calls * 1e3}


def _server(artifact: str, body_path: str, duration: float, pythonpath: str | None) -> dict:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = _start(_serve_cmd(artifact), env=env)
    try:
        url = _announced_url(proc)
        _wait_ready(url)
        _wrk_body(url, body_path, ARROW, 2, 4)  # warm-up (kernels, heap, layouts)
        all0, loop0 = _cpu_seconds(proc.pid), _cpu_seconds(proc.pid, only=str(proc.pid))
        res = _wrk_body(url, body_path, ARROW, duration, 4)
        all1, loop1 = _cpu_seconds(proc.pid), _cpu_seconds(proc.pid, only=str(proc.pid))
    finally:
        _stop(proc)
    n = res["requests"]
    return {
        "rows_per_s": res["rps"] * 10_000,
        "server_cpu_ms_per_body": (all1 - all0) / n * 1e3,
        "loop_cpu_ms_per_body": (loop1 - loop0) / n * 1e3,
        "wrk_cpu_ms_per_body": res["client_cpu_s"] / n * 1e3,
        "bodies": n,
        "failures": res["failures"],
        "load_average": os.getloadavg()[0],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", required=True, help="git revision of peregrine/deploy to compare")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--duration", type=float, default=8.0, help="seconds of wrk per server run")
    p.add_argument("--calls", type=int, default=100, help="in-process calls per timing")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    import peregrine

    with tempfile.TemporaryDirectory(prefix="bench-bulk-ab-") as workdir:
        model, _, X = _model(workdir, 500, 8)
        artifact = os.path.join(workdir, "xgb.peregrine")
        peregrine.compile(model, backend="native").save(artifact)
        compiled = peregrine.load(artifact)
        block, body = _body(X)
        compiled.predict_proba(block)
        body_path = os.path.join(workdir, "body.arrows")
        with open(body_path, "wb") as f:
            f.write(body)
        before_src = _tree_with_deploy_of(args.before, workdir)
        configs = {"before": before_src, "after": None}
        runs: list[dict] = []
        inproc = [_inproc(compiled, block, args.calls)]
        for round_ in range(args.rounds):
            # alternate which server goes first, so neither always follows the other
            order = list(configs) if round_ % 2 == 0 else list(configs)[::-1]
            for name in order:
                res = _server(artifact, body_path, args.duration, configs[name])
                inproc.append(_inproc(compiled, block, args.calls))
                around = inproc[-2:]
                model_cpu = sum(r["cpu_ms_per_body"] for r in around) / 2
                model_rows = sum(r["rows_per_s"] for r in around) / 2
                spent = res["server_cpu_ms_per_body"] + res["wrk_cpu_ms_per_body"]
                res.update(
                    config=name,
                    round=round_ + 1,
                    inproc_cpu_ms_per_body=model_cpu,
                    cpu_fraction=model_cpu / spent,
                    wall_fraction=res["rows_per_s"] / model_rows,
                )
                runs.append(res)
                short = {k: round(v, 3) if isinstance(v, float) else v for k, v in res.items()}
                print(f"  {short}", flush=True)
    summary = {}
    for name in configs:
        mine = [r for r in runs if r["config"] == name]
        summary[name] = {
            k: float(np.median([r[k] for r in mine]))
            for k in ("cpu_fraction", "wall_fraction", "server_cpu_ms_per_body",
                      "loop_cpu_ms_per_body", "wrk_cpu_ms_per_body", "inproc_cpu_ms_per_body")
        }  # fmt: skip
    print(json.dumps({"median": summary}, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "inproc": inproc, "median": summary,
                       "cpu": _cpu_name(), "before": args.before}, f, indent=1)  # fmt: skip


def _cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines()
                    if line.startswith("Model name"))  # fmt: skip
    except (OSError, StopIteration):
        return "?"


if __name__ == "__main__":
    sys.exit(main())
