"""Public entry points: compile, load, supported_models."""

from __future__ import annotations

import dataclasses
import io
import os
from typing import IO, Any

import numpy as np

from peregrine.backends import get_backend, resolve_auto
from peregrine.errors import ArtifactError, InputError, UnsupportedModelError
from peregrine.frontends import FRONTENDS, convert, load_all
from peregrine.options import CompileOptions, Precision
from peregrine.passes import report_error, run_passes
from peregrine.passes.measure import measure_program
from peregrine.runtime.compiled import CompiledModel, build
from peregrine.sources import is_model_source, load_model


def compile(  # noqa: A001 - the public name users expect
    model: Any,
    backend: str = "auto",
    *,
    device: str = "cpu",
    options: CompileOptions | None = None,
    sample_input: Any = None,
) -> CompiledModel:
    """Compile a fitted model into a CompiledModel with the same methods and answers.

    Parameters
    ----------
    model:
        A fitted scikit-learn, XGBoost, LightGBM or CatBoost model, an ``onnx.ModelProto``
        (see ``supported_models()``), or a saved model: a path or bytes in any format
        ``peregrine.sources`` reads (XGBoost JSON/UBJSON, LightGBM text, CatBoost .cbm/JSON,
        ONNX), loaded with the library's own loader. Pickles are never read here.
    backend:
        ``"auto"`` (the default: the fastest backend installed for ``device``, native LLVM code
        on a CPU, torch on CUDA; ``compiled.to(device)`` re-picks), ``"native"``, ``"torch"``,
        ``"torchscript"``, ``"tvm"`` or ``"reference"``.
    device:
        ``"cpu"`` or a torch device such as ``"cuda"`` (tensor backends only).
    options:
        A :class:`CompileOptions`; defaults are exact and pick strategies automatically.
    sample_input:
        Representative rows; used to check the input contract early and, where a backend tunes,
        to measure candidate strategies on the user's own data. With
        ``CompileOptions(validate=True)`` every method is run on them through the source model
        and the compiled program, and a difference raises :class:`peregrine.ValidationError`.
    """
    options = options or CompileOptions()
    if not isinstance(options, CompileOptions):
        raise TypeError(f"options must be a peregrine.CompileOptions, got {type(options).__name__}")
    if not isinstance(backend, str):
        raise UnsupportedModelError(f"backend must be a string, got {type(backend).__name__}")
    if options.validate and sample_input is None:
        raise InputError(
            "CompileOptions(validate=True) needs sample_input: representative rows to run "
            "through both the source model and the compiled program"
        )
    auto = backend == "auto"
    if auto:
        backend = resolve_auto(device)
    get_backend(backend).prefetch()
    if is_model_source(model):
        model = load_model(model).model
    spec = convert(model)
    report: list[dict[str, Any]] = []
    exact_graph = spec.graph
    spec = dataclasses.replace(spec, graph=run_passes(spec.graph, options, report))
    rows = None
    if sample_input is not None:
        from peregrine.runtime.inputs import prepare_input

        rows = prepare_input(sample_input, spec, check=False)
        if rows.shape[0] == 0:
            raise InputError("sample_input has 0 rows")
        if options.batch_size is None:
            options = options.replace(batch_size=int(rows.shape[0]))
    devices = get_backend(backend).devices
    if device.split(":")[0] not in devices:
        raise UnsupportedModelError(
            f"backend {backend!r} runs on {', '.join(devices)}, not on {device!r}"
        )
    if rows is not None and not isinstance(rows, np.ndarray):  # a tensor kept as one
        rows = rows.detach().cpu().numpy()
    # Precision.FAST: the gated passes' measured error, on these rows or synthetic ones
    report_error(exact_graph, spec.graph, report, rows, options)
    compiled = build(spec, backend, options, device, sample=rows)
    compiled.auto_backend = auto
    _report_low_precision(compiled, backend, report, rows, options)
    compiled.passes = report
    if options.validate:
        from peregrine.runtime.validate import validate

        # the low-precision levels trade the contract for speed by request: measured only
        low = options.precision in (Precision.BFLOAT16, Precision.FLOAT16)
        compiled.validation = validate(compiled, model, sample_input, report_only=low)
    return compiled


_LOW_BACKENDS = ("torch", "torchscript")


def _report_low_precision(compiled: CompiledModel, backend: str, report: list[dict[str, Any]],
                          rows: Any, options: CompileOptions) -> None:
    """Precision.BFLOAT16 / FLOAT16: the program's measured error per output (passes/measure.py)
    on the torch backends, or a note that this backend ran the level as AUTO."""
    level = options.precision
    if level not in (Precision.BFLOAT16, Precision.FLOAT16):
        return
    graph = compiled.spec.graph
    if backend not in _LOW_BACKENDS:
        n = f"{len(graph.nodes)} -> {len(graph.nodes)}"
        report.append({"pass": "precision", "nodes": n, "changed": (
            f"{level.value}: the {backend} backend has no low-precision program; ran as "
            f"'auto' (exact); use backend='torch' or 'torchscript'")})
        return
    report.append(measure_program(graph, compiled._exec.run, level.value, rows, options))


def load(path: str | os.PathLike | bytes | IO[bytes], *, backend: str | None = None,
         device: str | None = None) -> CompiledModel:
    """Load an artifact written by ``CompiledModel.save``. Never unpickles or runs stored code.

    ``path`` is a file path, the artifact's bytes, or a binary file object (what a server,
    a Dask worker or a Spark task receives). The program is rebuilt for the saved backend
    (or ``backend`` if given; ``"auto"``: the fastest one for the device) from the stored IR.
    """
    from peregrine.runtime.artifact import load_artifact

    if isinstance(path, (bytes, bytearray, memoryview)):
        path = _NamedBytes(bytes(path))
    elif not hasattr(path, "read") and not os.path.exists(path):
        raise FileNotFoundError(f"no artifact at {path}")
    spec, body, content_hash = load_artifact(path)
    try:
        options = CompileOptions.from_json(body["options"])
    except (KeyError, ValueError, TypeError) as exc:
        raise ArtifactError(f"{path}: stored options are invalid ({exc})") from exc
    chosen = backend or body["backend"]
    auto = chosen == "auto"
    if auto:
        chosen = resolve_auto(device or body["device"])
    # the saved program's choices (e.g. native schedules) apply to the backend that made them
    saved = body.get("backend_state") if chosen == body["backend"] else None
    if saved is not None and not isinstance(saved, dict):
        raise ArtifactError(f"{path}: stored backend state is not an object")
    validation = body.get("validation")  # absent unless validated (and before it existed)
    if validation is not None and not isinstance(validation, dict):
        raise ArtifactError(f"{path}: stored validation report is not an object")
    passes = body.get("passes")  # absent before the pass manager
    if passes is not None and not (isinstance(passes, list)
                                   and all(isinstance(p, dict) for p in passes)):
        raise ArtifactError(f"{path}: stored pass report is not a list of objects")
    compiled = build(spec, chosen, options, device or body["device"], content_hash, saved=saved)
    compiled.validation = validation
    compiled.passes = passes
    compiled.auto_backend = auto
    return compiled


class _NamedBytes(io.BytesIO):
    """Artifact bytes; named in error messages as what they are."""

    def __str__(self) -> str:
        return f"<artifact bytes ({len(self.getbuffer())} bytes)>"


# every in-process backend runs every op (native and tvm run the ops without native code or
# a TVM lowering through their NumPy rules: docs/native.md, docs/tvm.md)
IN_PROCESS_BACKENDS = ("reference", "native", "torch", "torchscript", "tvm")


def _backends(model_name: str) -> dict[str, str]:
    from peregrine.export.support import onnx_export_support

    return {**{b: "yes" for b in IN_PROCESS_BACKENDS},
            "onnx-export": onnx_export_support(model_name)}


def supported_models() -> list[dict[str, Any]]:
    """One row per supported estimator class: name, library, methods, notes, and
    ``backends``: for each backend and the ONNX export, "yes", "partial: ..." or "no: ..."."""
    load_all()
    rows = []
    for entry in FRONTENDS:
        rows.append({
            "model": entry.key.__name__,
            "module": entry.key.__module__.split(".")[0],
            "library": entry.info.get("library", ""),
            "methods": list(entry.info.get("methods", ())),
            "notes": entry.info.get("notes", ""),
            "backends": _backends(entry.key.__name__),
        })
    return sorted(rows, key=lambda r: (r["library"], r["model"]))
