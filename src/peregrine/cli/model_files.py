"""The CLI's side of reading a model file: the library's loader (``peregrine.sources``: format
from the content, the library's own loader) with the CLI's conventions: a missing file or an
unreadable one is a CLIError, and unpickling (``--allow-pickle``) prints a warning first."""

from __future__ import annotations

from peregrine.cli._common import CLIError, check_input_file, warn
from peregrine.sources import LoadedModel, ModelFileError, ModelFormat, detect_format

__all__ = ["LoadedModel", "ModelFormat", "load_model"]


def load_model(path: str, *, allow_pickle: bool = False) -> LoadedModel:
    import os

    from peregrine import sources

    if os.path.isdir(path):  # a saved Spark ML model is a directory; sources decides
        try:
            return sources.load_model(path, allow_pickle=allow_pickle)
        except ModelFileError as exc:
            raise CLIError(str(exc)) from exc
    check_input_file(path, "model file")
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
        if allow_pickle and detect_format(head, path) is ModelFormat.PICKLE:
            warn(f"unpickling {path}: this runs code stored in the file; only do it for files "
                 "you trust")
        return sources.load_model(path, allow_pickle=allow_pickle)
    except ModelFileError as exc:
        raise CLIError(str(exc)) from exc
