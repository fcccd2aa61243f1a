"""A Triton Inference Server model repository around an exported ONNX model:
``DIR/<name>/config.pbtxt`` and ``DIR/<name>/1/model.onnx``, dynamic batching on the first
(batch) axis. The config's inputs and outputs are read from the ONNX file itself, so names,
dtypes and dims cannot drift from it."""

from __future__ import annotations

import os
import re
from typing import Any

from peregrine.export.onnx import ExportReport, export_onnx

TRITON_TYPES = {"float64": "TYPE_FP64", "float32": "TYPE_FP32", "int64": "TYPE_INT64",
                "int32": "TYPE_INT32", "bool": "TYPE_BOOL", "object": "TYPE_STRING"}


def model_name(source: str) -> str:
    """A Triton model name from the source class: sklearn.ensemble.RandomForestClassifier ->
    randomforestclassifier."""
    return re.sub(r"[^a-z0-9_]+", "_", source.rsplit(".", 1)[-1].lower()).strip("_") or "model"


def config_pbtxt(name: str, report: ExportReport, max_batch_size: int,
                 preferred: tuple[int, ...] = (), delay_us: int = 100) -> str:
    """config.pbtxt text: the batch axis is implicit (max_batch_size > 0), so dims list the
    other axes; a 1-D output ([batch]) is declared [1] and reshaped to [] (Triton's way of
    batching a per-row scalar)."""
    lines = [f'name: "{name}"', 'platform: "onnxruntime_onnx"', 'backend: "onnxruntime"',
             f"max_batch_size: {max_batch_size}"]

    def entries(kind: str, sig: dict[str, tuple[str, list[Any]]]) -> None:
        lines.append(f"{kind} [")
        items = []
        for nm, (dtype, dims) in sig.items():
            rest = [int(d) for d in dims[1:]]
            body = [f'    name: "{nm}"', f"    data_type: {TRITON_TYPES[dtype]}"]
            if rest:
                body.append(f"    dims: [ {', '.join(str(d) for d in rest)} ]")
            else:
                body.append("    dims: [ 1 ]")
                body.append("    reshape: { shape: [ ] }")
            items.append("  {\n" + "\n".join(body) + "\n  }")
        lines.append(",\n".join(items))
        lines.append("]")

    entries("input", report.inputs)
    entries("output", report.outputs)
    lines.append("dynamic_batching {")
    if preferred:
        lines.append(f"  preferred_batch_size: [ {', '.join(str(p) for p in preferred)} ]")
    lines.append(f"  max_queue_delay_microseconds: {delay_us}")
    lines.append("}")
    lines.append('instance_group [ { count: 1 kind: KIND_CPU } ]')
    return "\n".join(lines) + "\n"


def write_triton_repository(compiled: Any, directory: str | os.PathLike, *,
                            name: str | None = None, max_batch_size: int = 4096,
                            sample: Any = None, **onnx_options: Any) -> ExportReport:
    """Export ``compiled`` to ``directory/<name>/1/model.onnx`` (validated as ``export_onnx``
    does) and write ``directory/<name>/config.pbtxt``. Returns the ONNX export's report."""
    name = name or model_name(compiled.spec.source)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"Triton model name {name!r}: use letters, digits, '_', '-', '.'")
    if max_batch_size < 1:
        raise ValueError("max_batch_size must be >= 1 (dynamic batching needs a batch axis)")
    root = os.path.join(os.fspath(directory), name)
    os.makedirs(os.path.join(root, "1"), exist_ok=True)
    report = export_onnx(compiled, os.path.join(root, "1", "model.onnx"), batch="dynamic",
                         sample=sample, **onnx_options)
    with open(os.path.join(root, "config.pbtxt"), "w") as f:
        f.write(config_pbtxt(name, report, max_batch_size))
    return report
