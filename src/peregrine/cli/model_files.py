"""Reading a saved, fitted model from a file: detect the format from the file's first bytes (the
extension only breaks ties), then load it with the library's own loader.

Formats: XGBoost JSON / UBJSON (``xgboost.Booster(model_file=...)``), LightGBM text models
(``lightgbm.Booster(model_file=...)``), and scikit-learn pickle / joblib files. Unpickling runs
arbitrary code, so pickles load only when the user passes ``--allow-pickle``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from peregrine.cli._common import CLIError, check_input_file, require, warn

XGBOOST_JSON = "xgboost-json"
XGBOOST_UBJSON = "xgboost-ubjson"
LIGHTGBM_TEXT = "lightgbm-text"
PICKLE = "pickle"
PEREGRINE_ARTIFACT = "peregrine-artifact"

_PICKLE_EXTENSIONS = (".pkl", ".pickle", ".joblib", ".sav", ".pkl.gz", ".joblib.gz")
# joblib.dump(compress=...) writes these containers around the pickle stream
_COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"\x5d\x00\x00", b"\x04\x22\x4d\x18", b"ZF")
# UBJSON type markers that may follow the opening '{' (an optimised container, or a key length)
_UBJSON_MARKERS = b"$#iUIlLH"


@dataclass(frozen=True)
class LoadedModel:
    model: Any
    format: str
    path: str

    @property
    def description(self) -> str:
        return f"{os.path.basename(self.path)} ({self.format})"


def detect_format(path: str) -> str:
    """Name the format of a model file from its content; raise CLIError if it is none we read."""
    check_input_file(path, "model file")
    with open(path, "rb") as f:
        head = f.read(4096)
    lower = path.lower()
    stripped = head.lstrip()
    if not head:
        raise CLIError(f"model file {path} is empty")
    if head.startswith(b"PK\x03\x04"):
        # A zip: most likely a Peregrine artifact handed to the wrong command.
        return PEREGRINE_ARTIFACT
    if head.startswith((b"tree\n", b"tree\r\n")):
        return LIGHTGBM_TEXT  # LightGBM's save_model text always starts with the line "tree"
    if stripped.startswith(b"{"):
        if len(head) > 1 and head[0:1] == b"{" and head[1] in _UBJSON_MARKERS:
            return XGBOOST_UBJSON
        if b'"learner"' in head or lower.endswith(".json"):
            return XGBOOST_JSON  # XGBoost decides; its refusal is reported as such
        raise CLIError(
            f"model file {path} is JSON but not an XGBoost model (no 'learner' section); "
            "LightGBM models must be saved with Booster.save_model (text), not dump_model"
        )
    if lower.endswith(".ubj"):
        return XGBOOST_UBJSON
    if (
        head[:1] == b"\x80"
        or head.startswith(_COMPRESSED_MAGIC)
        or lower.endswith(_PICKLE_EXTENSIONS)
    ):
        return PICKLE  # pickle protocol >= 2 opens with PROTO (0x80); joblib may compress it
    raise CLIError(
        f"cannot tell what kind of model {path} holds; expected an XGBoost .json/.ubj model, a "
        "LightGBM text model, or a scikit-learn pickle/joblib file (with --allow-pickle)"
    )


def load_model(path: str, *, allow_pickle: bool = False) -> LoadedModel:
    fmt = detect_format(path)
    if fmt == PEREGRINE_ARTIFACT:
        raise CLIError(
            f"{path} is a zip archive (a compiled Peregrine artifact?); 'compile' and 'bench' "
            "take a fitted model file. Use 'peregrine inspect' or 'peregrine predict' on artifacts"
        )
    if fmt in (XGBOOST_JSON, XGBOOST_UBJSON):
        xgboost = require("xgboost", "reading an XGBoost model")
        try:
            model = xgboost.Booster(model_file=path)
        except xgboost.core.XGBoostError as exc:
            raise CLIError(
                f"XGBoost cannot read {path} as a saved model (Booster.save_model "
                f"JSON/UBJSON): {_first_line(exc)}"
            ) from exc
    elif fmt == LIGHTGBM_TEXT:
        lightgbm = require("lightgbm", "reading a LightGBM model")
        try:
            model = lightgbm.Booster(model_file=path)
        except lightgbm.basic.LightGBMError as exc:
            raise CLIError(f"LightGBM cannot read {path}: {_first_line(exc)}") from exc
    else:
        model = _load_pickle(path, allow_pickle)
    return LoadedModel(model, fmt, path)


def _load_pickle(path: str, allow_pickle: bool) -> Any:
    if not allow_pickle:
        raise CLIError(
            f"{path} is a pickle/joblib file; loading one runs arbitrary code from the file. "
            "If you trust it, pass --allow-pickle"
        )
    warn(f"unpickling {path}: this runs code stored in the file; only do it for files you trust")
    try:
        import joblib  # reads plain pickles too, and joblib's compressed containers
    except ImportError:
        joblib = None
    try:
        if joblib is not None:
            model = joblib.load(path)
        else:
            import pickle

            with open(path, "rb") as f:
                model = pickle.load(f)  # noqa: S301 - the user opted in with --allow-pickle
    except Exception as exc:  # unpickling can raise anything (missing class, truncated stream)
        raise CLIError(f"cannot unpickle {path}: {type(exc).__name__}: {_first_line(exc)}") from exc
    if isinstance(model, (dict, list, tuple, str, bytes, int, float)) or model is None:
        raise CLIError(f"{path} holds a {type(model).__name__}, not a fitted model")
    return model


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    # drop the native libraries' "[12:00:00] /path/to/source.cc:88: " log prefix
    return re.sub(r"^\[[\d:]+\]\s+\S+:\d+:\s*", "", line)
