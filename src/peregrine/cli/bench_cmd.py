"""``peregrine bench MODEL``: Peregrine's backends against the peers, side by side."""

from __future__ import annotations

import argparse
import os

from peregrine.cli._common import CLIError, eprint, positive_int, progress_bar

HELP = "time Peregrine's backends against the source library and peer systems"
DESCRIPTION = """\
Benchmark a fitted model file: the source library's own predict, every available Peregrine
backend, and every installed peer that handles the model (onnxruntime, tl2cgen, lleaves,
hummingbird), side by side in one process on the same rows. Reports median throughput with its
spread, compile time, memory, and whether each system's output matches the source library
(rtol 1e-5, atol 1e-6). Writes report.md, report.json and plot.png into --report DIR.

A peer that is missing or fails is skipped with a note. --peers takes peer names and Peregrine
backend names; when it names no backend, all available backends run."""


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s.replace("_", "")) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be positive, got {text!r}")
    return tuple(sorted(set(sizes)))


def add_parser(sub: argparse._SubParsersAction, parents: list) -> None:
    p = sub.add_parser(
        "bench",
        help=HELP,
        description=DESCRIPTION,
        parents=parents,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL", help="the fitted model file (as for 'compile')")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--data", metavar="DATA", help="rows to time on (CSV or Parquet)")
    src.add_argument(
        "--rows",
        type=positive_int,
        metavar="N",
        help="synthetic rows drawn over the model's split ranges (default: the largest batch size)",
    )
    p.add_argument(
        "--batch-sizes",
        type=_batch_sizes,
        default=(1, 1000, 100_000),
        metavar="B1,B2,...",
        help="rows per call to time (default: 1,1000,100000)",
    )
    p.add_argument(
        "--peers",
        default="auto",
        metavar="auto|NAME,...",
        help="'auto' (every installed peer) or names: source library 'source', "
        "onnxruntime, tl2cgen, lleaves, hummingbird, and Peregrine backends",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        metavar="N",
        help="threads for every system (default: each library's own default)",
    )
    p.add_argument(
        "--repeat",
        type=positive_int,
        default=5,
        metavar="R",
        help="timed runs per system and batch size (default: 5)",
    )
    p.add_argument(
        "--budget",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="stop repeating a system at one batch size after this long (default: 10)",
    )
    p.add_argument(
        "--batch1-rows",
        type=positive_int,
        default=300,
        metavar="N",
        help="single-row calls per batch-1 run (default: 300)",
    )
    p.add_argument(
        "--memory",
        choices=("tracemalloc", "rss"),
        default="tracemalloc",
        help="tracemalloc: compile once more under tracemalloc for its peak; "
        "rss: only ru_maxrss growth, no second compile (default: tracemalloc)",
    )
    p.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        default="float32",
        help="dtype of the input rows (default: float32)",
    )
    p.add_argument(
        "--report",
        metavar="DIR",
        default="peregrine-bench",
        help="directory for report.md, report.json, plot.png (default: peregrine-bench)",
    )
    p.add_argument(
        "--allow-pickle",
        action="store_true",
        help="allow reading a pickle/joblib MODEL (this runs code from the file)",
    )
    p.add_argument(
        "--fail-on-mismatch",
        action="store_true",
        help="exit with status 1 when any system's output differs from the source",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from peregrine.bench import BenchConfig, run_benchmark, write_report
    from peregrine.bench.data import synthetic_rows
    from peregrine.bench.peers import model_n_features
    from peregrine.cli.model_files import load_model

    if args.budget <= 0:
        raise CLIError(f"--budget must be positive, got {args.budget}")
    loaded = load_model(args.model, allow_pickle=args.allow_pickle)
    model = loaded.model
    try:
        n_features = model_n_features(model)
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    dtype = np.dtype(args.dtype)
    if args.data:
        X = _read_rows(args.data, model, n_features).astype(dtype)
        data_description = os.path.basename(args.data)
    else:
        n_rows = args.rows or max(args.batch_sizes)
        X = synthetic_rows(model, n_rows, n_features, dtype=dtype)
        data_description = "synthetic rows over the model's split ranges"
    peers = (
        "auto"
        if args.peers.strip() == "auto"
        else tuple(p for p in args.peers.split(",") if p.strip())
    )
    config = BenchConfig(
        batch_sizes=args.batch_sizes,
        peers=peers,
        threads=args.threads,
        repeat=args.repeat,
        batch1_rows=args.batch1_rows,
        budget_s=args.budget,
        memory=args.memory,
    )
    bar = progress_bar(None, "bench", unit="steps")

    def progress(message: str) -> None:
        bar.set_postfix_str(message)
        bar.update(1)

    try:
        result = run_benchmark(
            model,
            X,
            config,
            data_description=data_description,
            model_description=loaded.description,
            progress=progress,
        )
    finally:
        bar.close()
    paths = write_report(result, args.report)
    _summary(result, paths)
    mismatched = [s.label for s in result.systems if s.check.get("status") == "mismatch"]
    return 1 if mismatched and args.fail_on_mismatch else 0


def _read_rows(path: str, model: object, n_features: int):
    """DATA as a float array in the model's column order: by name when every model feature name
    is a column, else by position (the count must then match)."""
    import numpy as np
    import pandas as pd

    from peregrine.bench.peers import model_feature_names
    from peregrine.cli.data import DataReader, Schema, to_model_frame

    try:
        from peregrine.frontends import convert

        schema = Schema.of(convert(model))
    except Exception:  # noqa: BLE001 - models Peregrine cannot read are still benchmarked
        schema = Schema(n_features, model_feature_names(model))
    reader = DataReader(path, chunk_rows=100_000)
    raw = [df for _, df in reader.chunks()]
    if not raw:
        raise CLIError(f"{path} has no data rows")
    df = raw[0] if len(raw) == 1 else pd.concat(raw, ignore_index=True)
    if schema.feature_names and not set(schema.feature_names) <= {str(c) for c in df.columns}:
        schema = Schema(schema.n_features, None, schema.category_maps)
    frame = to_model_frame(df, 1, schema, path, ignore_extra=True)
    cols = [
        frame[c].cat.codes.astype(np.float64).where(frame[c].cat.codes >= 0)
        if isinstance(frame[c].dtype, pd.CategoricalDtype)
        else frame[c]
        for c in frame.columns
    ]
    return np.column_stack([np.asarray(c, dtype=np.float64) for c in cols])


def _summary(result, paths: dict[str, str]) -> None:
    from peregrine.bench.report import _cell

    batches = result.config.batch_sizes
    width = max(len(s.label) for s in result.systems) + 2
    print(
        f"{'system':<{width}}{'check':<12}" + "".join(f"{'batch ' + str(b):>26}" for b in batches)
    )
    for s in result.systems:
        if s.status != "ok":
            continue
        status = (
            s.check.get("status", "-").upper()
            if s.check.get("status") == "mismatch"
            else s.check.get("status", "-")
        )
        print(f"{s.label:<{width}}{status:<12}" + "".join(f"{_cell(s, b):>26}" for b in batches))
    for s in result.systems:
        if s.status != "ok":
            eprint(f"peregrine: note: {s.label}: {s.note}")
    for note in result.notes:
        eprint(f"peregrine: note: {note}")
    print("rows/s: median (IQR); report: " + ", ".join(paths.values()))
