"""The ``peregrine`` command line: compile, predict, inspect, bench, export (and backends).

Each command lives in its own module with ``add_parser(subparsers, parents)`` and ``run(args)``.
``main`` turns every failure into one line on stderr and a non-zero exit code; ``--verbose``
adds the traceback. Exit codes: 0 success, 1 error, 2 usage error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from peregrine.cli import (
    backends_cmd,
    bench_cmd,
    compile_cmd,
    export_cmd,
    inspect_cmd,
    predict_cmd,
    serve_cmd,
)
from peregrine.cli._common import CLIError

COMMANDS = (compile_cmd, predict_cmd, inspect_cmd, bench_cmd, backends_cmd, serve_cmd,
            export_cmd)
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def build_parser() -> argparse.ArgumentParser:
    from peregrine._version import __version__

    # --verbose is accepted before or after the command; SUPPRESS keeps the subcommand's copy
    # from resetting a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="on error, show the full traceback",
    )
    parser = argparse.ArgumentParser(
        prog="peregrine",
        parents=[common],
        description="Compile fitted scikit-learn, XGBoost and LightGBM models into fast, exact "
        "programs; score files with them; benchmark them against peers.",
        epilog="Run 'peregrine COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"peregrine {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMANDS:
        module.add_parser(sub, [common])
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 for --help/--version
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    verbose = getattr(args, "verbose", False)
    try:
        return int(args.run(args) or EXIT_OK)
    except KeyboardInterrupt:
        print("peregrine: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `peregrine predict ... | head`: the reader left; not an error
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the CLI's promise: one line, never a traceback
        if verbose:
            traceback.print_exc()
        print(f"peregrine {args.command}: error: {error_line(exc, verbose)}", file=sys.stderr)
        return EXIT_ERROR


def error_line(exc: BaseException, verbose: bool = False) -> str:
    """One line that says what went wrong. Our own errors speak for themselves; anything else
    is named by its type, since its message alone may not say which layer failed."""
    from peregrine.errors import PeregrineError

    if isinstance(exc, (PeregrineError, CLIError)):
        text = str(exc)
    elif isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.strerror or type(exc).__name__}: {exc.filename}"
    elif isinstance(exc, FileNotFoundError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
        if not verbose:
            text += " (run with --verbose for the traceback)"
    return " ".join(text.split()) or type(exc).__name__


__all__ = ["build_parser", "main"]
