"""Pieces every command shares: the CLI's own error type, optional imports with an actionable
message, progress indication on stderr, and writing a file atomically (temp file + rename) so a
failed command never leaves a half-written output behind."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from peregrine.errors import PeregrineError


class CLIError(PeregrineError):
    """A user-facing failure of a command (bad path, unknown format, bad flag combination)."""


def require(module: str, purpose: str) -> Any:
    """Import an optional dependency or fail with the one line that says how to get it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        package = {"pyarrow.parquet": "pyarrow"}.get(module, module)
        raise CLIError(
            f"{purpose} needs {package}, which is not installed; "
            f"pip install 'peregrine-ml[cli]' (or pip install {package})"
        ) from None


def eprint(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


def warn(message: str) -> None:
    eprint(f"peregrine: warning: {message}")


def _tqdm() -> Any:
    # Progress is cosmetic: without tqdm the command still works, it just stays quiet.
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm


class _NullBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int | None, desc: str, unit: str = "rows", enabled: bool = True) -> Any:
    """A tqdm bar on stderr; tqdm hides itself when stderr is not a terminal (disable=None),
    so pipes, logs and tests get clean output."""
    tqdm = _tqdm()
    if tqdm is None or not enabled:
        return _NullBar()
    return tqdm(
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=True,
        file=sys.stderr,
        disable=None,
        leave=False,
        dynamic_ncols=True,
    )


@contextlib.contextmanager
def spinner(desc: str, enabled: bool = True) -> Iterator[None]:
    """Elapsed-time indicator for a step with no measurable progress (compiling a model): a
    background thread ticks a total-less tqdm bar so the user sees the command is alive."""
    tqdm = _tqdm()
    if tqdm is None or not enabled or not sys.stderr.isatty():
        yield
        return
    bar = tqdm(total=None, desc=desc, bar_format="{desc} {elapsed}", file=sys.stderr, leave=False)
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.2):
            bar.refresh()

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        bar.close()


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[str]:
    """Yield a temp path beside ``path``; rename it onto ``path`` only if the block succeeds.
    Same directory, so the final ``os.replace`` is atomic and never crosses filesystems."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CLIError(f"output directory {directory} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".part", dir=directory)
    os.close(fd)
    try:
        yield tmp
        # mkstemp creates the file 0600; give the result the mode a plain open() would have
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def naming_file(path: str) -> Iterator[None]:
    """Make sure an artifact error says which file it is about (the core's messages name the
    member that failed, not always the file)."""
    from peregrine.errors import ArtifactError

    try:
        yield
    except ArtifactError as exc:
        if str(path) in str(exc):
            raise
        raise ArtifactError(f"{path}: {exc}") from exc


def check_input_file(path: str, what: str) -> None:
    if not os.path.exists(path):
        raise CLIError(f"{what} {path} does not exist")
    if os.path.isdir(path):
        raise CLIError(f"{what} {path} is a directory, not a file")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (reported by argparse as a usage error otherwise)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
