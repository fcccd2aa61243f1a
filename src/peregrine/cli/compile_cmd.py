"""``peregrine compile MODEL -o ARTIFACT``: fitted model file -> saved Peregrine artifact."""

from __future__ import annotations

import argparse
import os
import time

from peregrine.cli._common import CLIError, atomic_output, human_bytes, positive_int, spinner
from peregrine.options import TUNE_MODES, Precision, TreeStrategy

HELP = "compile a saved model file (XGBoost JSON/UBJSON, LightGBM text, sklearn pickle)"
DESCRIPTION = """\
Compile a fitted model saved to a file into a Peregrine artifact that 'peregrine predict' (or
peregrine.load in Python) runs. The format is detected from the file's content: XGBoost JSON or
UBJSON, a LightGBM text model (Booster.save_model), or a scikit-learn pickle/joblib file. Pickles
run code when loaded, so they are read only with --allow-pickle."""


def add_parser(sub: argparse._SubParsersAction, parents: list) -> None:
    p = sub.add_parser(
        "compile",
        help=HELP,
        description=DESCRIPTION,
        parents=parents,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL", help="the fitted model file")
    p.add_argument(
        "-o",
        "--output",
        metavar="ARTIFACT",
        required=True,
        help="where to write the compiled artifact (a zip; any extension)",
    )
    p.add_argument(
        "--backend",
        default="auto",
        metavar="NAME",
        help="'auto' (the fastest available here) or a backend name; "
        "'peregrine backends' lists the ones installed (default: auto)",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="'cpu' or a torch device such as 'cuda' (tensor backends only; default: cpu)",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        metavar="N",
        help="typical rows per predict call; steers strategy/schedule choice",
    )
    p.add_argument(
        "--sample",
        metavar="DATA",
        help="CSV/Parquet rows representative of real input: checks the input schema "
        "now and lets backends that tune measure on it",
    )
    p.add_argument(
        "--validate",
        action="store_true",
        help="run every method on the --sample rows through the source library and the "
        "compiled program and fail if they differ (rtol 1e-5, atol 1e-6; labels exactly)",
    )
    p.add_argument(
        "--strategy",
        choices=[s.value for s in TreeStrategy],
        default="auto",
        help="tree lowering strategy for tensor backends (default: auto)",
    )
    p.add_argument(
        "--precision",
        choices=[s.value for s in Precision],
        default="auto",
        help="arithmetic precision; 'auto' keeps results exact (default: auto)",
    )
    p.add_argument(
        "--tune",
        choices=list(TUNE_MODES),
        default="auto",
        help="native tree schedules: 'auto' measures a few candidates when the batch size is "
        "known, 'off' takes the heuristic, 'exhaustive' searches the whole pruned space "
        "(slower to compile; the decision is cached per CPU) (default: auto)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        metavar="N",
        help="threads the compiled program may use (default: all cores)",
    )
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="allow reading a pickle/joblib MODEL (this runs code from the file)",
    )
    p.add_argument(
        "--ignore-extra-columns",
        action="store_true",
        help="drop --sample columns the model does not use instead of failing",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import peregrine
    from peregrine.cli.model_files import load_model
    from peregrine.options import CompileOptions

    if args.validate and not args.sample:
        raise CLIError(
            "--validate needs --sample DATA: the rows to compare the compiled "
            "program with the source library on"
        )
    loaded = load_model(args.model, allow_pickle=args.allow_pickle)
    options = CompileOptions(
        tree_strategy=args.strategy,
        precision=args.precision,
        n_threads=args.threads,
        batch_size=args.batch_size,
        validate=args.validate,
        tune=args.tune,
    )
    sample = _read_sample(args, loaded.model) if args.sample else None
    start = time.perf_counter()
    with spinner(f"compiling {os.path.basename(args.model)}"):
        compiled = peregrine.compile(
            loaded.model,
            backend=args.backend,
            device=args.device,
            options=options,
            sample_input=sample,
        )
    elapsed = time.perf_counter() - start
    with atomic_output(args.output) as tmp:
        content_hash = compiled.save(tmp)
    size = os.path.getsize(args.output)
    requested = "" if args.backend == compiled.backend else f" (requested {args.backend})"
    print(f"compiled {loaded.description}: {compiled.spec.source} -> {args.output}")
    print(
        f"  backend {compiled.backend}{requested} on {compiled.device}, {elapsed:.2f} s, "
        f"{human_bytes(size)}, content hash {content_hash[:16]}"
    )
    print(compiled.explain())
    return 0


def _read_sample(args: argparse.Namespace, model: object) -> object:
    """At most one chunk of --sample, matched to the model's columns like 'predict' does."""
    from peregrine.cli.data import DataReader, Schema, to_model_frame
    from peregrine.errors import InputError
    from peregrine.frontends import convert

    schema = Schema.of(convert(model))
    reader = DataReader(args.sample, chunk_rows=min(args.batch_size or 10_000, 100_000))
    for start, df in reader.chunks():
        return to_model_frame(
            df, start, schema, args.sample, ignore_extra=args.ignore_extra_columns
        )
    raise InputError(f"{args.sample}: has no data rows")
