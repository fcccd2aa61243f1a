"""``peregrine export MODEL --format onnx|triton|shared-library -o PATH``: a compiled program
for a runtime outside Peregrine (docs/export.md)."""

from __future__ import annotations

import argparse
import os
import time

from peregrine.cli._common import CLIError, positive_int, spinner

FORMATS = ("onnx", "triton", "shared-library")
HELP = "export a model as ONNX, a Triton model repository or a shared library"
DESCRIPTION = """\
Export a model for a runtime outside Peregrine. MODEL is a compiled Peregrine artifact
('peregrine compile') or a fitted model file 'compile' accepts (XGBoost JSON/UBJSON, LightGBM
text, CatBoost, ONNX, a scikit-learn pickle with --allow-pickle).

  --format onnx            -o model.onnx: an ONNX model (input X, float64 or --input-dtype,
                           dynamic batch axis;
                           classifiers output 'label' and 'probabilities', others 'variable')
  --format triton          -o DIR: a Triton model repository, DIR/NAME/config.pbtxt and
                           DIR/NAME/1/model.onnx, dynamic batching configured
  --format shared-library  -o LIB.so: a shared library and its C header (LIB.h) for --target
                           x86_64-linux-gnu (default) or aarch64-linux-gnu, linking only
                           libc and libm; one C function per method (--prefix names them)

The ONNX export is checked with onnx.checker and validated in ONNX Runtime against the
compiled model on the --sample rows (or generated rows, NaN included where the model accepts
NaN); a shared library built for this machine's architecture is validated the same way
through ctypes. A difference beyond rtol 1e-5 / atol 1e-6, or any label that differs, fails
the command. An operation the format cannot express fails naming it."""


def add_parser(sub: argparse._SubParsersAction, parents: list) -> None:
    p = sub.add_parser("export", help=HELP, description=DESCRIPTION, parents=parents,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="a Peregrine artifact or a fitted model file")
    p.add_argument("--format", choices=FORMATS, default="onnx",
                   help="what to write (default: onnx)")
    p.add_argument("-o", "--output", metavar="PATH", required=True,
                   help="the .onnx file (onnx), the model repository directory (triton) or "
                   "the .so file (shared-library; the header goes beside it, .h)")
    p.add_argument("--name", metavar="NAME",
                   help="Triton model name (default: the source class, lower case)")
    p.add_argument("--max-batch-size", type=positive_int, default=4096, metavar="N",
                   help="Triton max_batch_size (default: 4096)")
    p.add_argument("--opset", type=int, metavar="N",
                   help="ai.onnx opset to write (default: 21; 18 or newer)")
    p.add_argument("--batch", default="dynamic", metavar="N|dynamic",
                   help="the batch axis: 'dynamic' (default) or a fixed row count (onnx)")
    p.add_argument("--ml-ops", choices=("auto", "always", "never"), default="auto",
                   help="use ai.onnx.ml operators (TreeEnsemble) where they apply "
                   "(default: auto); never: standard ops only (trees as a traversal)")
    p.add_argument("--input-dtype", choices=("float64", "float32", "auto"), default=None,
                   help="the ONNX input's dtype: float64 (default), float32, or auto (float32 "
                   "where the model reads its input only through float32-comparing trees)")
    p.add_argument("--precision", choices=("auto", "float64", "float32"), default="auto",
                   help="auto/float64 (default): the exact program; float32: a float32 input and "
                   "float32 arithmetic for linear models, MLPs, scalers (trees keep exact "
                   "splits), the measured error reported and stored in the file (onnx, triton)")
    p.add_argument("--string-inputs", action="store_true",
                   help="string columns as tensor(string) inputs, one per column, coded "
                   "inside the graph (ai.onnx.ml LabelEncoder); default: X holds their codes "
                   "(onnx, triton)")
    p.add_argument("--exact-sums", action="store_true",
                   help="trees: the library's sums in its order (XGBoost bit for bit), not the "
                   "faster one-traversal forms (onnx, triton)")
    p.add_argument("--target", default="x86_64-linux-gnu", metavar="TRIPLE",
                   help="shared-library platform: x86_64-linux-gnu (default) or "
                   "aarch64-linux-gnu")
    p.add_argument("--cpu", metavar="CPU",
                   help="shared-library CPU: x86-64 (default), x86-64-v2, x86-64-v3, "
                   "x86-64-v4 or host; generic on aarch64")
    p.add_argument("--prefix", default="peregrine", metavar="NAME",
                   help="shared-library C symbol prefix (default: peregrine -> "
                   "peregrine_predict)")
    p.add_argument("--sample", metavar="DATA",
                   help="CSV/Parquet rows to validate the export on (default: generated rows)")
    p.add_argument("--allow-pickle", action="store_true",
                   help="allow reading a pickle/joblib MODEL (this runs code from the file)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.format == "shared-library":
        return _shared_library(args)
    batch: int | str = args.batch
    if batch != "dynamic":
        try:
            batch = int(batch)
        except ValueError:
            raise CLIError(f"--batch {args.batch!r}: use 'dynamic' or a row count") from None
        if args.format == "triton":
            raise CLIError("--format triton batches dynamically; leave --batch out")
    compiled = _compiled(args)
    # string / category columns: the frame itself, which export_onnx turns into codes
    sample = _sample(args, compiled, frame_ok=True) if args.sample else None
    options = {"opset": args.opset, "ml_ops": args.ml_ops, "input_dtype": args.input_dtype,
               "exact_sums": True if args.exact_sums else None, "precision": args.precision}
    if args.string_inputs:
        options["string_inputs"] = True
    start = time.perf_counter()
    with spinner(f"exporting {os.path.basename(args.model)}"):
        if args.format == "onnx":
            from peregrine.export import export_onnx

            report = export_onnx(compiled, args.output, batch=batch, sample=sample, **options)
            where = args.output
        else:
            from peregrine.export import write_triton_repository

            report = write_triton_repository(compiled, args.output, name=args.name,
                                             max_batch_size=args.max_batch_size,
                                             sample=sample, **options)
            where = os.path.dirname(os.path.dirname(report.path))
    elapsed = time.perf_counter() - start
    print(f"exported {compiled.spec.source} as {args.format} -> {where} ({elapsed:.2f} s)")
    for name, (dtype, dims) in report.inputs.items():
        print(f"  input  {name}: {dtype} {dims}")
    for name, (dtype, dims) in report.outputs.items():
        method = next((m for m, o in report.methods.items() if o == name), "")
        print(f"  output {name}: {dtype} {dims} ({method})")
    level = ("float32 level: errors measured, labels identical" if report.precision ==
             "float32" else "exact: rtol 1e-5, atol 1e-6, labels identical")
    for method, dev in report.deviations.items():
        text = ", ".join(f"{k} {v:.3g}" for k, v in dev.items())
        print(f"  validated {method} on {report.rows} rows in ONNX Runtime ({level}): {text}")
    return 0


def _shared_library(args: argparse.Namespace) -> int:
    compiled = _compiled(args)
    sample = _sample(args, compiled) if args.sample else None
    start = time.perf_counter()
    with spinner(f"building {os.path.basename(args.output)}"):
        report = compiled.export_library(args.output, target=args.target, cpu=args.cpu,
                                         prefix=args.prefix, sample=sample)
    elapsed = time.perf_counter() - start
    print(f"exported {compiled.spec.source} as a shared library for {report.target} "
          f"(CPU {report.cpu}) -> {report.path}, header {report.header} ({elapsed:.2f} s)")
    for method, width in report.methods.items():
        print(f"  {args.prefix}_{method}(const float *X, size_t rows, double *out) and "
              f"{args.prefix}_{method}_f64: {width} value(s) per row")
    if report.labels:
        print(f"  {len(report.labels)} classes: predict writes class indices, "
              f"{args.prefix}_class_label(i) names them")
    if report.rows:
        for method, dev in report.deviations.items():
            print(f"  validated {method} on {report.rows} rows (float and double): max |diff| "
                  f"{dev['max_abs']:.3g}")
    else:
        print(f"  not validated here: {report.target} code does not run on this machine")
    return 0


def _compiled(args: argparse.Namespace):
    """The compiled model: loaded from an artifact, or compiled from a model file with the
    reference backend (the ops' NumPy rules: the oracle the export is validated against)."""
    import peregrine
    from peregrine.cli._common import check_input_file
    from peregrine.sources import ModelFormat, detect_format

    check_input_file(args.model, "model file")
    with open(args.model, "rb") as f:
        head = f.read(4096)
    if detect_format(head, args.model) is ModelFormat.PEREGRINE_ARTIFACT:
        return peregrine.load(args.model, backend="reference")
    from peregrine.cli.model_files import load_model

    loaded = load_model(args.model, allow_pickle=args.allow_pickle)
    return peregrine.compile(loaded.model, backend="reference")


def _sample(args: argparse.Namespace, compiled, frame_ok: bool = False):
    import numpy as np

    from peregrine.cli.data import DataReader, Schema, to_model_frame
    from peregrine.errors import InputError

    reader = DataReader(args.sample, chunk_rows=10_000)
    for start, df in reader.chunks():
        if frame_ok and compiled.spec.category_maps:
            # the rows as read: the runtime's DataFrame conversion (inside export_onnx) maps
            # the string / category columns to codes by name
            return df
        frame = to_model_frame(df, start, Schema.of(compiled.spec), args.sample)
        return np.asarray(frame, dtype=np.float64)
    raise InputError(f"{args.sample}: has no data rows")
