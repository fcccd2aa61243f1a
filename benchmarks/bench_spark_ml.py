"""Saved Spark ML pipeline (issue #15 item 3): StringIndexer + Imputer + VectorAssembler +
RandomForestClassifier (50 trees, depth 6, 20 numeric columns and one string column), compiled
by Peregrine from the saved directory, against Spark's own ``transform`` on a local session.

Spark is timed computing every output column of the transform into the ``noop`` sink (no
driver collection) on a cached DataFrame of N rows, and on one row with ``collect()``; Peregrine
on the same rows as a pandas DataFrame (strings looked up at the boundary), predict_proba.
Best-of-N wall times.

    .venv/bin/python benchmarks/bench_spark_ml.py [--rows 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import numpy as np
import pandas as pd

import peregrine


def best(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 20))
    X[rng.random(X.shape) < 0.02] = np.nan
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(20)])
    df["city"] = rng.choice(["oslo", "lima", "pune", "kobe", "graz"], size=n)
    score = np.nan_to_num(X[:, 0]) + np.sin(np.nan_to_num(X[:, 1])) + (df["city"] == "lima")
    df["label"] = np.digitize(score, [-0.5, 0.7]).astype(float)
    return df


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    from pyspark import __version__ as spark_version
    from pyspark.ml import Pipeline
    from pyspark.ml.classification import RandomForestClassifier
    from pyspark.ml.feature import Imputer, StringIndexer, VectorAssembler
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "2g")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    nums = [f"f{j}" for j in range(20)]
    stages = [StringIndexer(inputCol="city", outputCol="city_i", handleInvalid="keep"),
              Imputer(inputCols=nums, outputCols=[f"{c}_i" for c in nums]),
              VectorAssembler(inputCols=[f"{c}_i" for c in nums] + ["city_i"],
                              outputCol="features"),
              RandomForestClassifier(numTrees=50, maxDepth=6, seed=0)]
    model = Pipeline(stages=stages).fit(spark.createDataFrame(frame(20_000, 0)))
    test = frame(args.rows, 1).drop(columns="label")
    sdf = spark.createDataFrame(test).repartition(2).cache()
    sdf.count()
    one = spark.createDataFrame(test.iloc[:1])
    print(f"python {platform.python_version()}, pyspark {spark_version} (local[2]), peregrine "
          f"{peregrine.__version__}, cpus {os.cpu_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        model.write().overwrite().save(os.path.join(tmp, "p"))
        t = time.perf_counter()
        compiled = {b: peregrine.compile(os.path.join(tmp, "p"), backend=b)
                    for b in ("native", "torch")}
        print(f"compile (both backends, from the directory): {time.perf_counter() - t:.2f} s")
    X = test[list(compiled["native"].spec.feature_names)]
    spark_big = best(lambda: model.transform(sdf).write.format("noop").mode("overwrite").save(),
                     args.repeat)
    spark_one = best(lambda: model.transform(one).select("probability").collect(), args.repeat)
    for name, fast in compiled.items():
        big = best(lambda f=fast: f.predict_proba(X), args.repeat)
        small = best(lambda f=fast: f.predict_proba(X.iloc[:1]), args.repeat * 20)
        print(f"rows={len(X)}: peregrine-{name} {big * 1e3:.1f} ms, spark transform "
              f"{spark_big * 1e3:.1f} ms ({spark_big / big:.1f}x)")
        print(f"rows=1: peregrine-{name} {small * 1e3:.3f} ms, spark transform+collect "
              f"{spark_one * 1e3:.1f} ms ({spark_one / small:.0f}x)")
    spark.stop()


if __name__ == "__main__":
    main()
