"""Debug switches, read from the environment in one place.

PEREGRINE_DUMP_IR=1        print the IR graph after every pass (stderr)
PEREGRINE_DUMP_LLVM=DIR    write generated LLVM IR / optimised IR / assembly into DIR (native)
PEREGRINE_CACHE_DIR=DIR    where compiled native kernels are cached (default ~/.cache/peregrine)
PEREGRINE_CPU_LEVEL=LEVEL  generate native code for a lower x86-64 level than the host's
                           (x86-64-v3: AVX2, x86-64-v2: SSE4.2); see ``CPU_LEVELS``
PEREGRINE_COMPILE_JOBS=N   at most N processes compile native kernels at once (1: only this
                           one; default: the compiled model's thread count)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def dump_ir() -> bool:
    return os.environ.get("PEREGRINE_DUMP_IR", "") not in ("", "0")


def dump_llvm_dir() -> Path | None:
    value = os.environ.get("PEREGRINE_DUMP_LLVM", "")
    return Path(value) if value else None


def compile_jobs() -> int | None:
    value = os.environ.get("PEREGRINE_COMPILE_JOBS", "")
    try:
        return max(1, int(value)) if value else None
    except ValueError:
        raise ValueError(f"PEREGRINE_COMPILE_JOBS={value!r}: expected a whole number") from None


def cache_dir() -> Path:
    value = os.environ.get("PEREGRINE_CACHE_DIR", "")
    return Path(value) if value else Path.home() / ".cache" / "peregrine"


# Forced CPU levels. The project's machines are Intel or AMD with AVX-512, or AMD Zen 3 with
# AVX2 only; other users' CPUs may have AVX2 or only SSE4.2, and take other code paths in our
# kernels and in the math libraries.
# A level names what the native backend generates code for (LLVM's CPU name and the features it
# may use) and the switches that hold torch (ATen), oneDNN, MKL and OpenBLAS to the same level.
# Those libraries read their switches once, when they load: set them before Python starts
# (``python -m peregrine.tools.cpu_level LEVEL -- COMMAND`` does).
_V2 = "+cx16,+popcnt,+sahf,+sse3,+sse4.1,+sse4.2,+ssse3"
_V3 = _V2 + ",+avx,+avx2,+bmi,+bmi2,+f16c,+fma,+lzcnt,+movbe,+xsave"


@dataclass(frozen=True)
class CpuLevel:
    llvm_cpu: str  # LLVM's name for the level: code is generated for exactly these features
    llvm_features: str
    math_env: dict[str, str]  # switches of the math libraries for the same level


CPU_LEVELS = {
    "x86-64-v3": CpuLevel("x86-64-v3", _V3, {
        "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2", "MKL_CBWR": "AVX2", "OPENBLAS_CORETYPE": "Haswell"}),
    "x86-64-v2": CpuLevel("x86-64-v2", _V2, {
        "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "MKL_CBWR": "SSE4_2",
        "OPENBLAS_CORETYPE": "Nehalem"}),
}


def cpu_level() -> CpuLevel | None:
    """The forced level (``PEREGRINE_CPU_LEVEL``), or None for the host's own CPU."""
    value = os.environ.get("PEREGRINE_CPU_LEVEL", "")
    if value in ("", "native", "host"):
        return None
    if value not in CPU_LEVELS:
        raise ValueError(f"PEREGRINE_CPU_LEVEL={value!r}: expected one of "
                         f"{', '.join(['native', *CPU_LEVELS])}")
    return CPU_LEVELS[value]
