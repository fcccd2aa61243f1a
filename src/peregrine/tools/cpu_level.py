"""Run a command as if on a CPU of a lower x86-64 level than this one.

    python -m peregrine.tools.cpu_level x86-64-v3 -- python -m pytest
    python -m peregrine.tools.cpu_level --list
    python -m peregrine.tools.cpu_level --below-host

The project's machines are x86-64 CPUs with AVX-512 (Intel Rocket Lake, AMD Zen 4) or with
AVX2 only (AMD Zen 3); users' may have AVX2 (x86-64-v3) or only SSE4.2 (x86-64-v2), and then
take other code paths: in the native backend (other vector widths, lane permutes, schedules)
and in the math libraries (torch's ATen kernels, oneDNN, MKL, OpenBLAS).
The command runs with ``PEREGRINE_CPU_LEVEL`` set (the native backend generates code for that
level only) and each library's own switch for the same level (``peregrine.config.CPU_LEVELS``).
The libraries read their switches when they load, hence a new process rather than a function.
"""

from __future__ import annotations

import argparse
import os
import sys

from peregrine.config import CPU_LEVELS

# x86-64 micro-architecture levels, lowest first; v4 (AVX-512) is never forced, only detected
LEVEL_ORDER = ("x86-64-v2", "x86-64-v3", "x86-64-v4")
_V4_FEATURES = ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")


def host_level(features: str | None = None) -> str | None:
    """The highest x86-64 level this CPU has (LLVM's view of its features, as the native
    backend reads them), or None below x86-64-v2. ``PEREGRINE_CPU_LEVEL`` is not consulted:
    this is the machine itself."""
    if features is None:
        import llvmlite.binding as llvm

        try:
            features = llvm.get_host_cpu_features().flatten()
        except RuntimeError:  # no feature list on this host: assume nothing beyond the base
            features = ""
    have = {f[1:] for f in features.split(",") if f.startswith("+")}
    needs = {"x86-64-v2": CPU_LEVELS["x86-64-v2"].llvm_features,
             "x86-64-v3": CPU_LEVELS["x86-64-v3"].llvm_features}
    level = None
    for name in LEVEL_ORDER[:2]:
        if not {f[1:] for f in needs[name].split(",")} <= have:
            return level
        level = name
    return "x86-64-v4" if set(_V4_FEATURES) <= have else level


def levels_below_host(features: str | None = None) -> list[str]:
    """The forcible levels strictly below this CPU's, highest first: the code paths a run on
    this machine does not take by itself (an AVX2-only host runs the x86-64-v3 paths anyway)."""
    host = host_level(features)
    rank = LEVEL_ORDER.index(host) if host in LEVEL_ORDER else 0
    return [name for name in reversed(LEVEL_ORDER[:rank]) if name in CPU_LEVELS]


def level_env(level: str) -> dict[str, str]:
    """The environment variables that force ``level``."""
    return {"PEREGRINE_CPU_LEVEL": level, **CPU_LEVELS[level].math_env}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m peregrine.tools.cpu_level",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("level", nargs="?", choices=sorted(CPU_LEVELS))
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the command to run, after --")
    parser.add_argument("--list", action="store_true", help="print the levels and their switches")
    parser.add_argument("--below-host", action="store_true",
                        help="print the levels below this CPU's, one per line (none: nothing)")
    args = parser.parse_args(argv)
    if args.below_host:
        for name in levels_below_host():
            print(name)
        return 0
    if args.list:
        for name in sorted(CPU_LEVELS):
            print(name, " ".join(f"{k}={v}" for k, v in level_env(name).items()))
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.level is None or not command:
        parser.error("give a level and a command: LEVEL -- COMMAND [ARGS...]")
    env = {**os.environ, **level_env(args.level)}
    sys.stdout.flush()
    os.execvpe(command[0], command, env)
    return 127  # not reached: exec replaces this process


if __name__ == "__main__":
    sys.exit(main())
