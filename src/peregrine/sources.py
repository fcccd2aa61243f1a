"""Reading a saved, fitted model: from a path or from bytes, detect the format from the content
(the file name only breaks ties) and load it with the library's own loader, so the type-keyed
frontend registry receives the library's own object.

Formats (``ModelFormat``): XGBoost JSON / UBJSON (``xgboost.Booster``), LightGBM text models
(``lightgbm.Booster``), CatBoost binary ``.cbm`` and JSON models (``catboost.CatBoost.
load_model``), ONNX protobuf (``onnx.load_model_from_string``: an ``onnx.ModelProto``),
pickle / joblib files, and saved Spark ML model directories (``PipelineModel.save``: read by
``formats.spark_ml`` with pyarrow, no JVM, into a ``SparkPipelineModel``). Unpickling runs
arbitrary code, so pickles load only when the caller
passes ``allow_pickle=True`` (the CLI's ``--allow-pickle``); ``peregrine.compile(path)`` never
unpickles.
"""

from __future__ import annotations

import enum
import importlib
import io
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from peregrine.errors import PeregrineError
from peregrine.formats import spark_ml


class ModelFileError(PeregrineError, ValueError):
    """A model file (or bytes) that cannot be read: absent, empty, of an unknown format, refused
    (a pickle without ``allow_pickle``) or rejected by its library's loader."""


class ModelFormat(enum.Enum):
    XGBOOST_JSON = "xgboost-json"
    XGBOOST_UBJSON = "xgboost-ubjson"
    LIGHTGBM_TEXT = "lightgbm-text"
    CATBOOST_BINARY = "catboost-cbm"
    CATBOOST_JSON = "catboost-json"
    ONNX = "onnx"
    PICKLE = "pickle"
    PEREGRINE_ARTIFACT = "peregrine-artifact"
    SPARK_ML = "spark-ml"  # a directory: metadata/ (JSON), data/ (parquet), stages/


_PICKLE_EXTENSIONS = (".pkl", ".pickle", ".joblib", ".sav", ".pkl.gz", ".joblib.gz")
# joblib.dump(compress=...) writes these containers around the pickle stream
_COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x5d\x00\x00", b"\x04\x22\x4d\x18", b"ZF")
# UBJSON type markers that may follow the opening '{' (an optimised container, or a key length)
_UBJSON_MARKERS = b"$#iUIlLH"
# CatBoost's binary model starts with its descriptor "CBM1" (model.cpp, MODEL_FILE_DESCRIPTOR)
_CATBOOST_MAGIC = b"CBM1"
# top-level keys of CatBoost's JSON export (save_model(format="json"))
_CATBOOST_JSON_KEYS = (b'"features_info"', b'"oblivious_trees"', b'"model_info"',
                       b'"non_symmetric_trees"', b'"ctr_data"')  # ctr_data: CTR models' first


@dataclass(frozen=True)
class LoadedModel:
    model: Any
    format: ModelFormat
    path: str  # the file, or "<bytes>"

    @property
    def description(self) -> str:
        return f"{os.path.basename(self.path)} ({self.format.value})"


def _looks_like_onnx(head: bytes) -> bool:
    """ModelProto starts with field 1 (ir_version, varint: tag 0x08) and a small version;
    exporters write it first. The parse itself decides (``_load_onnx``)."""
    return len(head) > 2 and head[0] == 0x08 and 0 < head[1] < 0x20


def detect_format(head: bytes, name: str = "") -> ModelFormat:
    """Name the format of a model from its first bytes (``name``: file name for tie-breaks);
    raise ModelFileError if it is none Peregrine reads."""
    lower = name.lower()
    where = f"model file {name}" if name else "model bytes"
    stripped = head.lstrip()
    if not head:
        raise ModelFileError(f"{where} is empty")
    if head.startswith(b"PK\x03\x04"):
        return ModelFormat.PEREGRINE_ARTIFACT  # a zip: a Peregrine artifact, most likely
    if head.startswith(_CATBOOST_MAGIC):
        return ModelFormat.CATBOOST_BINARY
    if head.startswith((b"tree\n", b"tree\r\n")):
        return ModelFormat.LIGHTGBM_TEXT  # LightGBM's save_model text starts with "tree"
    if stripped.startswith(b"{"):
        if len(head) > 1 and head[0:1] == b"{" and head[1] in _UBJSON_MARKERS:
            return ModelFormat.XGBOOST_UBJSON
        if any(key in head for key in _CATBOOST_JSON_KEYS) and b'"learner"' not in head:
            return ModelFormat.CATBOOST_JSON
        if b'"learner"' in head or lower.endswith(".json"):
            return ModelFormat.XGBOOST_JSON  # XGBoost decides; its refusal is reported as such
        raise ModelFileError(
            f"{where} is JSON but not an XGBoost model (no 'learner' section) nor a CatBoost "
            "one; LightGBM models must be saved with Booster.save_model (text), not dump_model"
        )
    if lower.endswith(".ubj"):
        return ModelFormat.XGBOOST_UBJSON
    if lower.endswith(".onnx") or _looks_like_onnx(head):
        return ModelFormat.ONNX
    if lower.endswith(".cbm"):
        return ModelFormat.CATBOOST_BINARY
    if (head[:1] == b"\x80" or head.startswith(_COMPRESSED_MAGIC)
            or lower.endswith(_PICKLE_EXTENSIONS)):
        return ModelFormat.PICKLE  # pickle protocol >= 2 opens with PROTO (0x80)
    raise ModelFileError(
        f"cannot tell what kind of model {name or 'the bytes'} hold(s); expected an XGBoost "
        ".json/.ubj model, a LightGBM text model, a CatBoost .cbm/JSON model, an ONNX model, "
        "or a scikit-learn pickle/joblib file (with allow_pickle / --allow-pickle)"
    )


def _require(module: str, purpose: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ModelFileError(f"{purpose} needs {module}, which is not installed; "
                             f"pip install {module}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    # drop the native libraries' "[12:00:00] /path/to/source.cc:88: " log prefix
    return re.sub(r"^\[[\d:]+\]\s+\S+:\d+:\s*", "", line)


# -------------------------------------------------------------- one loader per format --
# Each takes (path or None, data or None, shown name); exactly one of path/data is given.


def _load_xgboost(path: str | None, data: bytes | None, name: str) -> Any:
    xgboost = _require("xgboost", "reading an XGBoost model")
    try:
        return xgboost.Booster(model_file=path if path is not None else bytearray(data or b""))
    except xgboost.core.XGBoostError as exc:
        raise ModelFileError(f"XGBoost cannot read {name} as a saved model (Booster.save_model "
                             f"JSON/UBJSON): {_first_line(exc)}") from exc


def _load_lightgbm(path: str | None, data: bytes | None, name: str) -> Any:
    lightgbm = _require("lightgbm", "reading a LightGBM model")
    try:
        if path is not None:
            return lightgbm.Booster(model_file=path)
        return lightgbm.Booster(model_str=(data or b"").decode("utf-8"))
    except (lightgbm.basic.LightGBMError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"LightGBM cannot read {name}: {_first_line(exc)}") from exc


def _catboost_class(model: Any) -> Any:
    """The wrapper class a loaded model's saved loss implies (CatBoostClassifier for Logloss,
    CrossEntropy, MultiClass: predict returns labels as the trained wrapper did), or CatBoost."""
    import catboost

    loss = str(model.get_all_params().get("loss_function", "")).split(":")[0]
    if loss in ("Logloss", "CrossEntropy", "MultiClass", "MultiClassOneVsAll"):
        return catboost.CatBoostClassifier
    if loss in ("YetiRank", "YetiRankPairwise", "PairLogit", "PairLogitPairwise", "QueryRMSE",
                "QuerySoftMax", "StochasticRank", "LambdaMart"):
        return catboost.CatBoostRanker
    return catboost.CatBoostRegressor if loss else catboost.CatBoost


def _catboost_loader(fmt: str) -> Callable[[str | None, bytes | None, str], Any]:
    def load(path: str | None, data: bytes | None, name: str) -> Any:
        catboost = _require("catboost", "reading a CatBoost model")
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            if path is None:  # CatBoost's JSON loader reads files only: one path for both
                path = os.path.join(tmp, f"model.{fmt}")
                with open(path, "wb") as f:
                    f.write(data or b"")
            try:
                model = catboost.CatBoost().load_model(path, format=fmt)
                cls = _catboost_class(model)
                if cls is not catboost.CatBoost:
                    model = cls().load_model(path, format=fmt)
            except catboost.CatBoostError as exc:
                raise ModelFileError(f"CatBoost cannot read {name}: {_first_line(exc)}") from exc
        return model
    return load


def _load_onnx(path: str | None, data: bytes | None, name: str) -> Any:
    onnx = _require("onnx", "reading an ONNX model")
    try:
        if path is not None:
            with open(path, "rb") as f:
                data = f.read()
        model = onnx.load_model_from_string(data or b"")
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise ModelFileError(f"{name} is not a readable ONNX model: {_first_line(exc)}") from exc
    if not model.graph.node and not model.graph.output:
        raise ModelFileError(f"{name} parses as protobuf but holds no ONNX graph")
    return model


def _load_pickle(path: str | None, data: bytes | None, name: str) -> Any:
    try:
        import joblib  # reads plain pickles too, and joblib's compressed containers
    except ImportError:
        joblib = None
    try:
        source: Any = path if path is not None else io.BytesIO(data or b"")
        if joblib is not None:
            model = joblib.load(source)
        else:
            import pickle

            if path is not None:
                with open(path, "rb") as f:
                    model = pickle.load(f)  # noqa: S301 - the caller opted in (allow_pickle)
            else:
                model = pickle.loads(data or b"")  # noqa: S301
    except Exception as exc:  # unpickling can raise anything (missing class, truncated stream)
        raise ModelFileError(f"cannot unpickle {name}: {type(exc).__name__}: "
                             f"{_first_line(exc)}") from exc
    if isinstance(model, (dict, list, tuple, str, bytes, int, float)) or model is None:
        raise ModelFileError(f"{name} holds a {type(model).__name__}, not a fitted model")
    return model


def _load_spark_ml(path: str | None, data: bytes | None, name: str) -> Any:
    if path is None:
        raise ModelFileError("a saved Spark ML model is a directory; pass its path, not bytes")
    try:
        return spark_ml.read_spark_ml(path)
    except spark_ml.SparkFormatError as exc:
        raise ModelFileError(str(exc)) from exc


LOADERS: dict[ModelFormat, Callable[[str | None, bytes | None, str], Any]] = {
    ModelFormat.XGBOOST_JSON: _load_xgboost,
    ModelFormat.XGBOOST_UBJSON: _load_xgboost,
    ModelFormat.LIGHTGBM_TEXT: _load_lightgbm,
    ModelFormat.CATBOOST_BINARY: _catboost_loader("cbm"),
    ModelFormat.CATBOOST_JSON: _catboost_loader("json"),
    ModelFormat.ONNX: _load_onnx,
    ModelFormat.PICKLE: _load_pickle,
    ModelFormat.SPARK_ML: _load_spark_ml,
}


def is_model_source(obj: Any) -> bool:
    """Whether ``peregrine.compile`` should read ``obj`` through this loader."""
    return isinstance(obj, (str, os.PathLike, bytes, bytearray, memoryview))


def load_model(source: str | os.PathLike | bytes, *, allow_pickle: bool = False) -> LoadedModel:
    """Load the fitted model saved at ``source`` (a path) or held in ``source`` (bytes)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        path, data, name = None, bytes(source), "<bytes>"
        head = data[:4096]
    else:
        path = name = os.fspath(source)
        if not os.path.exists(path):
            raise ModelFileError(f"model file {path} does not exist")
        if os.path.isdir(path):
            if spark_ml.is_spark_ml_dir(path):
                return LoadedModel(_load_spark_ml(path, None, name), ModelFormat.SPARK_ML, name)
            raise ModelFileError(f"model file {path} is a directory, not a file (nor a saved "
                                 "Spark ML model: no metadata/part-* naming a Spark ML class)")
        data = None
        with open(path, "rb") as f:
            head = f.read(4096)
    fmt = detect_format(head, "" if path is None else path)
    if fmt is ModelFormat.PEREGRINE_ARTIFACT:
        raise ModelFileError(
            f"{name} is a zip archive (a compiled Peregrine artifact?); 'compile' and 'bench' "
            "take a fitted model file. Use 'peregrine inspect' or 'peregrine predict' on "
            "artifacts (peregrine.load in Python)"
        )
    if fmt is ModelFormat.PICKLE and not allow_pickle:
        raise ModelFileError(
            f"{name} is a pickle/joblib file; loading one runs arbitrary code from the file. "
            "If you trust it, pass --allow-pickle (or unpickle it yourself and compile the "
            "object)"
        )
    return LoadedModel(LOADERS[fmt](path, data, name), fmt, name)


__all__ = ["LOADERS", "LoadedModel", "ModelFileError", "ModelFormat", "detect_format",
           "is_model_source", "load_model"]
