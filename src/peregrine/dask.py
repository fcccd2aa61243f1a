"""Score Dask collections with a compiled model: ``peregrine.dask.predict``.

The model travels to the workers as artifact bytes (one ``dask.delayed`` value: the scheduler
sends it to each worker once, whatever the number of partitions), never as a pickle of the source
model, and each worker process builds the kernels once (``peregrine.deploy.artifacts``; check
with ``client.run(peregrine.dask.load_counts)``). Works on the local schedulers, ``LocalCluster``
and distributed clusters alike. Needs the ``dask`` extra; ``import peregrine`` does not import
Dask.

>>> import dask.dataframe as dd, peregrine.dask
>>> ddf = dd.read_parquet("rows/*.parquet")
>>> proba = peregrine.dask.predict("model.peregrine", ddf, method="predict_proba")
>>> proba.to_parquet("scores/")
"""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.deploy.artifacts import artifact_bytes, artifact_key, load_cached, load_counts
from peregrine.errors import InputError, PeregrineError

__all__ = ["load_counts", "predict"]


def predict(
    model_or_artifact: Any,
    collection: Any,
    method: str = "predict",
    meta: Any = None,
    *,
    backend: str | None = None,
) -> Any:
    """Score every partition of ``collection`` with ``model_or_artifact.<method>``.

    Parameters
    ----------
    model_or_artifact:
        A :class:`peregrine.CompiledModel`, an artifact path, artifact bytes, or a fitted source
        model (compiled first with ``backend``, default ``"auto"``).
    collection:
        A Dask DataFrame (columns matched by name where the model has feature names, strings
        encoded where the model was fitted on them) or a 2-D Dask Array (rechunked to whole
        rows if it is chunked along columns).
    method:
        ``"predict"``, ``"predict_proba"``, ``"decision_function"``, ``"transform"``, ...
    meta:
        The output's meta (an empty pandas Series/DataFrame, or a NumPy dtype for arrays); by
        default it is found by scoring one sample row on the client.
    backend:
        Rebuild the artifact for this backend on the workers (default: the saved one).

    Returns
    -------
    A Dask Series (1-D outputs) or DataFrame (2-D; ``predict_proba`` columns named by class)
    with the partitions' index, for a DataFrame; a Dask Array with the input's row chunks, for
    an Array.
    """
    import dask
    import dask.array as da
    import dask.dataframe as dd

    data = artifact_bytes(model_or_artifact, backend)
    key = artifact_key(data)
    local = load_cached(data, key, backend)  # learns methods and outputs; cached on the client
    if method not in local.methods:
        raise InputError(f"{local} has no {method}(); available: {', '.join(local.methods)}")
    shipped = dask.delayed(data, pure=True, name=f"peregrine-artifact-{key[:16]}")
    if isinstance(collection, dd.DataFrame):
        if meta is None:
            meta = _frame_meta(local, method, collection)
        return collection.map_partitions(
            _score_frame, shipped, key, method, backend, meta, meta=meta, enforce_metadata=False
        )
    if isinstance(collection, da.Array):
        return _predict_array(local, method, collection, shipped, key, backend, meta)
    if isinstance(collection, dd.Series):
        raise InputError(
            "peregrine.dask.predict takes a Dask DataFrame or a 2-D Dask Array, "
            "not a Series; use series.to_frame()"
        )
    raise InputError(
        f"peregrine.dask.predict takes a Dask DataFrame or Array, got {type(collection).__name__}"
    )


# ------------------------------------------------------------------------- DataFrames --
def _output_columns(model: Any, method: str, width: int) -> list[str]:
    classes = model.classes_
    if (
        method in ("predict_proba", "predict_log_proba")
        and classes is not None
        and len(classes) == width
    ):
        return [str(c) for c in classes]
    return [str(j) for j in range(width)]


def _frame_meta(model: Any, method: str, collection: Any) -> Any:
    import pandas as pd
    from dask.dataframe.utils import meta_nonempty

    out = None
    try:  # dask's made-up rows: free, and right for numeric columns
        out = np.asarray(getattr(model, method)(meta_nonempty(collection._meta)))
    except PeregrineError:  # made-up strings the model's encoders reject: one real row
        sample = collection.head(1, npartitions=-1)
        if len(sample) == 0:
            raise InputError(
                "the DataFrame has no rows to learn the output type from; pass meta="
            ) from None
        out = np.asarray(getattr(model, method)(sample))
    if out.ndim == 1:
        return pd.Series(np.empty(0, dtype=out.dtype), name=method)
    columns = _output_columns(model, method, out.shape[1])
    return pd.DataFrame(np.empty((0, out.shape[1]), dtype=out.dtype), columns=columns)


def _score_frame(
    part: Any, data: bytes, key: str, method: str, backend: str | None, meta: Any
) -> Any:
    """On a worker: one partition."""
    import pandas as pd

    if len(part) == 0:  # the model refuses 0 rows; the answer to none is the empty meta
        empty = meta.iloc[:0].copy()
        empty.index = part.index
        return empty
    out = np.asarray(getattr(load_cached(data, key, backend), method)(part))
    if out.ndim == 1:
        return pd.Series(out, index=part.index, name=meta.name)
    return pd.DataFrame(out, index=part.index, columns=meta.columns)


# ----------------------------------------------------------------------------- Arrays --
def _predict_array(
    model: Any, method: str, arr: Any, shipped: Any, key: str, backend: str | None, meta: Any
) -> Any:
    import dask
    import dask.array as da

    if arr.ndim != 2:
        raise InputError(f"the Dask Array must be 2-D (rows, features), got {arr.ndim}-D")
    if arr.shape[1] != model.n_features_in_:
        raise InputError(
            f"the Dask Array has {arr.shape[1]} features, but the model expects "
            f"{model.n_features_in_}"
        )
    if arr.numblocks[1] != 1:
        arr = arr.rechunk({1: -1})  # whole rows per block
    sample = model.probe_row(arr.dtype if arr.dtype.kind == "f" else "f8")
    try:
        out = np.asarray(getattr(model, method)(sample))
    except PeregrineError:  # zeros the model rejects: one real row
        out = np.asarray(getattr(model, method)(arr[:1].compute()))
    width = out.shape[1] if out.ndim == 2 else None
    dtype = out.dtype if meta is None else np.dtype(getattr(meta, "dtype", meta))
    blocks = arr.to_delayed().ravel()
    score = dask.delayed(_score_block, pure=True)
    parts = []
    for block, rows in zip(blocks, arr.chunks[0]):
        shape = (rows,) if width is None else (rows, width)
        parts.append(da.from_delayed(score(block, shipped, key, method, backend), shape, dtype))
    return da.concatenate(parts, axis=0)


def _score_block(
    block: np.ndarray, data: bytes, key: str, method: str, backend: str | None
) -> np.ndarray:
    """On a worker: one block of whole rows."""
    model = load_cached(data, key, backend)
    if block.shape[0] == 0:
        out = np.asarray(getattr(model, method)(model.probe_row()))
        return out[:0]
    return np.asarray(getattr(model, method)(block))
