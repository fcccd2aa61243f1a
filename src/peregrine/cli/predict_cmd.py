"""``peregrine predict ARTIFACT DATA``: score a CSV/Parquet file in bounded memory."""

from __future__ import annotations

import argparse
import contextlib
import re
import time

from peregrine.cli._common import (
    CLIError,
    atomic_output,
    eprint,
    naming_file,
    positive_int,
    progress_bar,
)

HELP = "score a CSV or Parquet file with a compiled artifact"
DESCRIPTION = """\
Run a compiled artifact over DATA (CSV or Parquet) chunk by chunk, so memory stays bounded by
--batch-size rows whatever the file size. Columns are matched by name when the model has feature
names, by position otherwise. Output goes to OUT (CSV or Parquet by its extension), or as CSV to
stdout without -o. On any failure no output file is left behind."""

DEFAULT_CHUNK_ROWS = 65536


def add_parser(sub: argparse._SubParsersAction, parents: list) -> None:
    p = sub.add_parser(
        "predict",
        help=HELP,
        description=DESCRIPTION,
        parents=parents,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("artifact", metavar="ARTIFACT", help="an artifact from 'peregrine compile'")
    p.add_argument("data", metavar="DATA", help="input rows: .csv or .parquet")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="output file (.csv or .parquet); CSV on stdout when omitted",
    )
    p.add_argument(
        "--method",
        default="predict",
        help="predict, predict_proba, predict_log_proba, decision_function, ... (default: "
        "predict); "
        "'peregrine inspect' lists the artifact's methods",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_CHUNK_ROWS,
        metavar="N",
        help=f"rows read and scored per chunk (default: {DEFAULT_CHUNK_ROWS})",
    )
    p.add_argument(
        "--backend",
        metavar="NAME",
        help="rebuild the artifact for another backend (default: the saved one)",
    )
    p.add_argument("--device", help="run on another device (default: the saved one)")
    p.add_argument(
        "--no-header",
        action="store_true",
        help="the CSV has no header row: columns are taken by position",
    )
    p.add_argument(
        "--ignore-extra-columns",
        action="store_true",
        help="drop DATA columns the model does not use instead of failing",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import peregrine
    from peregrine.cli._common import check_input_file
    from peregrine.cli.data import DataReader, Schema, TableWriter, data_format_for_output

    check_input_file(args.artifact, "artifact")
    if args.output is not None:
        data_format_for_output(args.output)  # reject an unknown extension before any work
    with naming_file(args.artifact):
        compiled = peregrine.load(args.artifact, backend=args.backend, device=args.device)
    if args.method not in compiled.methods:
        raise CLIError(
            f"{compiled.spec.source} has no {args.method}(); "
            f"available: {', '.join(compiled.methods)}"
        )
    reader = DataReader(args.data, chunk_rows=args.batch_size, header=not args.no_header)
    schema = Schema.of(compiled.spec)
    fn = getattr(compiled, args.method)
    classes = compiled.classes_
    start_time = time.perf_counter()
    out_ctx = atomic_output(args.output) if args.output else contextlib.nullcontext(None)
    bar = progress_bar(reader.total_rows, f"predict {args.data}", enabled=not args.no_progress)
    n_rows = 0
    try:
        with out_ctx as tmp:
            writer = TableWriter(args.output, tmp)
            try:
                for start, df in reader.chunks():
                    values = _score(fn, df, start, schema, args)
                    writer.write(_frame(args.method, values, classes))
                    n_rows += len(df)
                    bar.update(len(df))
            finally:
                writer.close()
            if n_rows == 0:
                raise CLIError(f"{args.data} has no data rows")
    finally:
        bar.close()
    elapsed = time.perf_counter() - start_time
    where = args.output or "stdout"
    eprint(
        f"peregrine: {n_rows} rows scored with {args.method} ({compiled.backend}) in "
        f"{elapsed:.2f} s -> {where}"
    )
    return 0


def _score(fn, df, start: int, schema, args: argparse.Namespace):
    from peregrine.cli.data import to_model_frame
    from peregrine.errors import InputError

    frame = to_model_frame(
        df,
        start,
        schema,
        args.data,
        ignore_extra=args.ignore_extra_columns,
        header=not args.no_header,
    )
    try:
        return fn(frame)
    except InputError as exc:
        # The compiled model counts rows from 0 within the chunk: renumber them as data rows
        # of the file (from 1, as every other message here), or else say where the chunk began.
        text, n = re.subn(r"\bat row (\d+)", lambda m: f"at data row {start + int(m[1])}", str(exc))
        if n == 0:
            text = f"in the chunk starting at data row {start}: {text}"
        raise InputError(f"{args.data}: {text}") from exc


def _frame(method: str, values, classes):
    from peregrine.cli.data import output_frame

    return output_frame(method, values, classes)
