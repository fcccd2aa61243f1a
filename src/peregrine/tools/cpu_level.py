"""Run a command as if on a CPU of a lower x86-64 level than this one.

    python -m peregrine.tools.cpu_level x86-64-v3 -- python -m pytest
    python -m peregrine.tools.cpu_level --list

The project's machines have AVX-512; users' may have AVX2 (x86-64-v3) or only SSE4.2
(x86-64-v2), and then take other code paths: in the native backend (other vector widths, lane
permutes, schedules) and in the math libraries (torch's ATen kernels, oneDNN, MKL, OpenBLAS).
The command runs with ``PEREGRINE_CPU_LEVEL`` set (the native backend generates code for that
level only) and each library's own switch for the same level (``peregrine.config.CPU_LEVELS``).
The libraries read their switches when they load, hence a new process rather than a function.
"""

from __future__ import annotations

import argparse
import os
import sys

from peregrine.config import CPU_LEVELS


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
    args = parser.parse_args(argv)
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
