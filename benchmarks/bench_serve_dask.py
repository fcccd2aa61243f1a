"""Part 5 of ``bench_serve.py`` (run through it: ``--skip http soak --dask-rows 10000000``):
a 2-worker LocalCluster (processes, 1 thread each) scoring Parquet in >= 8 partitions with
``peregrine.dask.predict`` vs ``map_partitions`` with the source model (XGBoost, n_jobs=1,
shipped once in the graph as dask-ml's ParallelPostFit does): wall time, the workers' CPU time,
and whether the answers are identical."""

from __future__ import annotations

import os
import time

import numpy as np


def bench_dask(args, workdir: str, model, model_json: str, X) -> dict:
    import dask
    import dask.dataframe as dd
    import pandas as pd
    import xgboost as xgb
    from distributed import Client, LocalCluster

    import peregrine
    import peregrine.dask

    n_features = X.shape[1]
    cols = [f"f{j}" for j in range(n_features)]
    rows = args.dask_rows
    parts = max(8, rows // 250_000)
    pq = os.path.join(workdir, "rows")
    os.makedirs(pq)
    per = rows // parts
    for i in range(parts):
        block = np.resize(np.roll(X, i, axis=0), (per, n_features))
        pd.DataFrame(block, columns=cols).to_parquet(os.path.join(pq, f"part-{i:03d}.parquet"))
    named = xgb.XGBClassifier()
    named.load_model(model_json)
    compiled = peregrine.compile(
        named, backend="native", options=peregrine.CompileOptions(n_threads=1)
    )

    source = xgb.XGBClassifier(n_jobs=1)
    source.load_model(model_json)

    def source_partition(df, m):
        # a user's map_partitions (or dask-ml's ParallelPostFit): the fitted model travels in
        # the graph as one pickled value, each worker unpickles it once
        return pd.DataFrame(m.predict_proba(df.to_numpy()), index=df.index, columns=["0", "1"])

    res = {"rows": per * parts, "partitions": parts}
    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        ddf = dd.read_parquet(pq)
        assert ddf.npartitions >= 8
        meta = pd.DataFrame({"0": np.float32([]), "1": np.float32([])})

        def workers_cpu() -> float:  # user + system seconds of the worker processes so far
            return sum(client.run(_process_cpu).values())

        t0, c0 = time.perf_counter(), workers_cpu()
        ours = peregrine.dask.predict(compiled, ddf, method="predict_proba").compute()
        res["peregrine_s"] = time.perf_counter() - t0
        res["peregrine_worker_cpu_s"] = workers_cpu() - c0
        t0, c0 = time.perf_counter(), workers_cpu()
        shipped = dask.delayed(source, pure=True, name="xgboost-source-model")
        theirs = ddf.map_partitions(source_partition, shipped, meta=meta).compute()
        res["source_s"] = time.perf_counter() - t0
        res["source_worker_cpu_s"] = workers_cpu() - c0
        res["speedup"] = res["source_s"] / res["peregrine_s"]
        # the workers' CPU time (reading Parquet included) moves less with other people's load
        res["cpu_speedup"] = res["source_worker_cpu_s"] / res["peregrine_worker_cpu_s"]
        res["max_abs_diff"] = float(np.abs(ours.to_numpy() - theirs.to_numpy()).max())
        res["identical"] = bool((ours.to_numpy() == theirs.to_numpy()).all())
        res["differing_values"] = int((ours.to_numpy() != theirs.to_numpy()).sum())
        res["same_labels"] = bool(
            ((ours.to_numpy()[:, 1] > 0.5) == (theirs.to_numpy()[:, 1] > 0.5)).all()
        )
        res["kernel_builds_per_worker"] = list(
            sum(c.values()) for c in client.run(peregrine.dask.load_counts).values()
        )
    print(f"  dask: {res}", flush=True)
    return res


def _process_cpu() -> float:
    import resource

    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime
