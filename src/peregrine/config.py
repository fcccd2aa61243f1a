"""Debug switches, read from the environment in one place.

PEREGRINE_DUMP_IR=1        print the IR graph after every pass (stderr)
PEREGRINE_DUMP_LLVM=DIR    write generated LLVM IR / optimised IR / assembly into DIR (native)
PEREGRINE_CACHE_DIR=DIR    where compiled native kernels are cached (default ~/.cache/peregrine)
"""

from __future__ import annotations

import os
from pathlib import Path


def dump_ir() -> bool:
    return os.environ.get("PEREGRINE_DUMP_IR", "") not in ("", "0")


def dump_llvm_dir() -> Path | None:
    value = os.environ.get("PEREGRINE_DUMP_LLVM", "")
    return Path(value) if value else None


def cache_dir() -> Path:
    value = os.environ.get("PEREGRINE_CACHE_DIR", "")
    return Path(value) if value else Path.home() / ".cache" / "peregrine"
