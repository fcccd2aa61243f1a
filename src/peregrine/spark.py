"""Score Spark DataFrames with a compiled model: ``peregrine.spark.predict_udf``.

The UDF is a pandas UDF (Arrow batches in, one pandas call of the compiled model per batch):
the input columns are packed into one struct column, so each batch reaches the model as a pandas
DataFrame with the columns' names, matched by name like any DataFrame (strings encoded where the
model was fitted on them). The artifact bytes are broadcast once (never a pickle of the source
model) and each Python worker process builds the kernels once. Needs the ``spark`` extra and a
Java 17+ runtime; ``import peregrine`` does not import pyspark.

>>> import peregrine.spark
>>> proba = peregrine.spark.predict_udf("model.peregrine", method="predict_proba")
>>> scored = df.withColumn("proba", proba())          # the model's own feature names
>>> scored = df.withColumn("proba", proba("a", "b"))  # or these columns, by name
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from peregrine.deploy.artifacts import artifact_bytes, artifact_key, load_cached
from peregrine.errors import InputError, PeregrineError

__all__ = ["predict_udf", "spark_type_of"]


class _Shipped:
    """The artifact as the UDF carries it: a broadcast variable (classic Spark: sent to each
    executor once) or the bytes themselves (Spark Connect has no broadcast)."""

    def __init__(self, data: bytes, key: str, spark: Any) -> None:
        self.key = key
        self.broadcast = None
        self.data: bytes | None = data
        if spark is None:
            return
        try:  # Spark Connect sessions have no SparkContext (accessing it raises)
            self.broadcast = spark.sparkContext.broadcast(data)
            self.data = None
        except Exception:  # noqa: BLE001 - then the bytes travel inside the UDF
            self.broadcast = None

    def value(self) -> bytes:
        return self.broadcast.value if self.broadcast is not None else self.data


def spark_type_of(out: np.ndarray) -> Any:
    """The Spark SQL type of a model output: labels and scores per row, arrays for 2-D."""
    from pyspark.sql import types as T

    def scalar(dtype: np.dtype) -> Any:
        if dtype.kind == "f":
            return T.FloatType() if dtype.itemsize == 4 else T.DoubleType()
        if dtype.kind in "iu":
            return T.LongType()
        if dtype.kind == "b":
            return T.BooleanType()
        return T.StringType()

    if out.ndim == 2:
        return T.ArrayType(scalar(out.dtype), containsNull=False)
    return scalar(out.dtype)


def predict_udf(
    model_or_artifact: Any,
    method: str = "predict_proba",
    *,
    return_type: Any = None,
    threads: int | None = 1,
    backend: str | None = None,
    spark: Any = None,
) -> Any:
    """A function of column names (or Columns) returning the scored Column.

    Parameters
    ----------
    model_or_artifact:
        A :class:`peregrine.CompiledModel`, an artifact path, artifact bytes, or a fitted source
        model (compiled first with ``backend``, default ``"auto"``, and ``threads``).
    method:
        ``"predict_proba"`` (default), ``"predict"``, ``"decision_function"``, ``"transform"``...
    return_type:
        The Spark type of the result; by default found by scoring one sample row on the driver
        (1-D outputs: double/float/long/string; 2-D: an array per row).
    threads:
        Threads each task's model call may use (default 1: Spark already runs one task per
        core). ``None`` keeps the artifact's own setting.
    backend:
        Rebuild the artifact for this backend on the executors (default: the saved one).
    spark:
        The SparkSession to broadcast through (default: the active one).

    Returns
    -------
    ``udf(*cols)``: called with no argument it scores the model's feature names (models fitted
    with names); otherwise the given columns, passed to the model under their names.
    """
    from pyspark.sql import Column, SparkSession
    from pyspark.sql import functions as F

    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1 or None, got {threads}")
    if not isinstance(model_or_artifact, (bytes, bytearray, memoryview, str, os.PathLike)):
        import peregrine

        if not isinstance(model_or_artifact, peregrine.CompiledModel):
            options = peregrine.CompileOptions(n_threads=threads)
            model_or_artifact = peregrine.compile(
                model_or_artifact, backend=backend or "auto", options=options
            )
    data = artifact_bytes(model_or_artifact, backend)
    key = artifact_key(data)
    local = load_cached(data, key, backend)
    if method not in local.methods:
        raise InputError(f"{local} has no {method}(); available: {', '.join(local.methods)}")
    names = local.feature_names_in_
    if return_type is None:
        return_type = spark_type_of(_sample_output(local, method))
    spark = spark or SparkSession.getActiveSession()
    shipped = _Shipped(data, key, spark)
    score = F.pandas_udf(_make_scorer(shipped, method, backend, threads), return_type)

    def udf(*cols: Any) -> Column:
        if not cols:
            if names is None:
                raise InputError(
                    f"{local} was fitted without feature names: name the columns, "
                    "udf('a', 'b', ...), in the model's order"
                )
            cols = tuple(str(n) for n in names)
        columns = [F.col(c) if isinstance(c, str) else c for c in cols]
        return score(F.struct(*columns)).alias(method)

    udf.__doc__ = f"{method} of {local}: udf(*columns) -> Column"
    udf.return_type = return_type  # type: ignore[attr-defined]
    udf.broadcast = shipped.broadcast  # type: ignore[attr-defined]  (None: bytes in the UDF)
    return udf


def _sample_output(model: Any, method: str) -> np.ndarray:
    fn = getattr(model, method)
    n = model.n_features_in_
    for row in (model.probe_row(), np.zeros((1, n)), np.ones((1, n))):
        try:
            return np.asarray(fn(row))
        except PeregrineError:
            continue
    raise InputError(
        f"could not find the output type of {model}.{method} by scoring a sample "
        "row; pass return_type="
    )


def _make_scorer(shipped: _Shipped, method: str, backend: str | None, threads: int | None) -> Any:
    import pandas as pd

    def scorer(batches: Iterator[pd.DataFrame]) -> Iterator[pd.Series]:
        model = _load_on_executor(shipped, backend, threads)
        fn = getattr(model, method)
        for batch in batches:
            out = np.asarray(fn(batch))
            if out.ndim == 2:
                yield pd.Series(list(out))
            else:
                yield pd.Series(out)

    # real types, not the strings `from __future__ import annotations` leaves: pyspark reads
    # the hints to pick the UDF kind (iterator of DataFrames -> iterator of Series)
    scorer.__annotations__ = {"batches": Iterator[pd.DataFrame], "return": Iterator[pd.Series]}
    return scorer


def _load_on_executor(shipped: _Shipped, backend: str | None, threads: int | None) -> Any:
    """The model, built once per Python worker process. With ``threads``, the build sees only
    that many CPUs, so the kernels it sizes from the CPUs this process may use (the default
    when the artifact does not fix ``n_threads``) use that many threads.

    A stopgap: ``peregrine.load`` takes no thread count yet; once it does this becomes an
    argument."""
    narrow = threads is not None and hasattr(os, "sched_getaffinity")
    if narrow:
        mask = os.sched_getaffinity(0)
        narrow = len(mask) > threads
    if not narrow:
        return load_cached(shipped.value(), shipped.key, backend)
    os.sched_setaffinity(0, sorted(mask)[:threads])
    try:
        return load_cached(shipped.value(), shipped.key, backend)
    finally:
        os.sched_setaffinity(0, mask)
