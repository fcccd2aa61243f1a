"""Spark ML's saved model directories (``PipelineModel.write().save(path)``), read without a JVM.

Layout (Spark's ``DefaultParamsWriter`` and each model's writer; Spark 2.4 to 4.x):

    path/metadata/part-00000           one JSON line: class, uid, sparkVersion, paramMap,
                                       defaultParamMap (and per class extras: numFeatures...)
    path/data/*.parquet                the fitted state (absent for pure transformers)
    path/treesMetadata/*.parquet       ensembles: per tree (treeID, metadata JSON, weight)
    path/stages/<i>_<uid>/             a PipelineModel's stages, the same layout each

The reader returns the metadata JSON and parquet rows as they are (``pyarrow``); what they mean
is the frontend's business (``frontends/spark_ml.py``). A nested PipelineModel is flattened into
its parent's stage list (it transforms exactly as its stages in order), and a directory holding
one saved model or transformer reads as a one-stage pipeline.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from typing import Any

from peregrine.errors import PeregrineError

PIPELINE_MODEL = "org.apache.spark.ml.PipelineModel"


class SparkFormatError(PeregrineError, ValueError):
    """A directory that looks like a saved Spark ML model but cannot be read as one."""


@dataclass(frozen=True)
class SparkStage:
    """One saved stage: its JVM class, parameters (defaults overlaid by the values set), the
    whole metadata JSON, and the rows of its parquet data."""

    class_name: str  # "org.apache.spark.ml.feature.StandardScalerModel"
    uid: str
    params: dict[str, Any]
    metadata: dict[str, Any]
    data: tuple[dict[str, Any], ...]  # rows of data/*.parquet; () when the stage has none
    trees: tuple[dict[str, Any], ...]  # rows of treesMetadata/*.parquet (ensembles)
    path: str

    @property
    def name(self) -> str:
        """The class's short name: ``StandardScalerModel``."""
        return self.class_name.rsplit(".", 1)[-1]

    def is_set(self, param: str) -> bool:
        """Whether the user set ``param`` (not only its default)."""
        return param in self.metadata.get("paramMap", {})

    def describe(self) -> str:
        return f"Spark {self.name} ({self.path})"


@dataclass(frozen=True)
class SparkPipelineModel:
    """A saved PipelineModel (or one saved stage) as plain data."""

    path: str
    uid: str
    spark_version: str
    stages: tuple[SparkStage, ...]


def _metadata_file(path: str) -> str | None:
    parts = sorted(glob.glob(os.path.join(path, "metadata", "part-*")))
    return parts[0] if parts else None


def is_spark_ml_dir(path: str) -> bool:
    """Whether ``path`` is a directory holding a saved Spark ML model (its metadata names a
    ``org.apache.spark.ml`` class)."""
    if not os.path.isdir(path):
        return False
    meta = _metadata_file(path)
    if meta is None:
        return False
    try:
        with open(meta, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and b'"org.apache.spark.ml.' in head


def _read_metadata(path: str) -> dict[str, Any]:
    meta = _metadata_file(path)
    if meta is None:
        raise SparkFormatError(f"{path} has no metadata/part-* file; not a saved Spark ML "
                               "model directory")
    try:
        with open(meta, encoding="utf-8") as f:
            out = json.loads(f.readline())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SparkFormatError(f"{meta}: unreadable Spark ML metadata ({exc})") from exc
    if not isinstance(out, dict) or not isinstance(out.get("class"), str):
        raise SparkFormatError(f"{meta}: Spark ML metadata without a 'class'")
    return out


def _read_rows(path: str) -> tuple[dict[str, Any], ...]:
    """Rows of every parquet part file under ``path`` (none when the folder is absent)."""
    files = sorted(glob.glob(os.path.join(path, "*.parquet")))
    if not files:
        return ()
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SparkFormatError("reading a saved Spark ML model needs pyarrow, which is not "
                               "installed; pip install pyarrow") from None
    rows: list[dict[str, Any]] = []
    for file in files:
        try:
            rows.extend(pq.read_table(file).to_pylist())
        except Exception as exc:  # noqa: BLE001 - pyarrow's ArrowInvalid, OSError and friends
            raise SparkFormatError(f"{file}: unreadable parquet ({exc})") from exc
    return tuple(rows)


def _read_stage(path: str, meta: dict[str, Any]) -> SparkStage:
    params = dict(meta.get("defaultParamMap") or {})
    params.update(meta.get("paramMap") or {})
    return SparkStage(
        class_name=meta["class"], uid=str(meta.get("uid", "")), params=params, metadata=meta,
        data=_read_rows(os.path.join(path, "data")),
        trees=_read_rows(os.path.join(path, "treesMetadata")), path=path,
    )


def _stages(path: str, meta: dict[str, Any]) -> list[SparkStage]:
    if meta["class"] != PIPELINE_MODEL:
        return [_read_stage(path, meta)]
    uids = (meta.get("paramMap") or {}).get("stageUids")
    if not isinstance(uids, list):
        raise SparkFormatError(f"{path}: PipelineModel metadata without stageUids")
    out: list[SparkStage] = []
    for i, uid in enumerate(uids):
        # PipelineSharedWriter.getStagePath: stages/<index>_<uid>, the index zero-padded to
        # the width of the stage count
        folder = os.path.join(path, "stages", f"{i:0{len(str(len(uids)))}d}_{uid}")
        if not os.path.isdir(folder):
            raise SparkFormatError(f"{path}: stage {i} ({uid}) has no folder {folder}")
        sub = _read_metadata(folder)
        out.extend(_stages(folder, sub))
    return out


def read_spark_ml(path: str) -> SparkPipelineModel:
    """Read the saved Spark ML model at ``path`` (a PipelineModel or one stage)."""
    path = os.fspath(path)
    meta = _read_metadata(path)
    if not meta["class"].startswith("org.apache.spark.ml."):
        raise SparkFormatError(f"{path}: {meta['class']} is not a Spark ML class")
    return SparkPipelineModel(path=path, uid=str(meta.get("uid", "")),
                              spark_version=str(meta.get("sparkVersion", "")),
                              stages=tuple(_stages(path, meta)))


__all__ = ["PIPELINE_MODEL", "SparkFormatError", "SparkPipelineModel", "SparkStage",
           "is_spark_ml_dir", "read_spark_ml"]
