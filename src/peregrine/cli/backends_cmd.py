"""``peregrine backends``: which backends this installation has, and which models it compiles."""

from __future__ import annotations

import argparse
import json

HELP = "list the backends available here and the supported model classes"


def add_parser(sub: argparse._SubParsersAction, parents: list) -> None:
    p = sub.add_parser("backends", help=HELP, description=HELP, parents=parents)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import peregrine
    from peregrine.backends import available_backends, resolve_auto

    backends = available_backends()
    models = peregrine.supported_models()
    if args.json:
        print(
            json.dumps({"backends": backends, "auto": resolve_auto(), "models": models}, indent=2)
        )
        return 0
    print(f"backends: {', '.join(backends)} (auto = {resolve_auto()})")
    print("models:")
    for row in models:
        print(f"  {row['library']:<10} {row['model']:<32} {', '.join(row['methods'])}")
    return 0
