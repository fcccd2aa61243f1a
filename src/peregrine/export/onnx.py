"""CompiledModel -> ONNX: walk the program's IR graph, lower each op through ``LOWERINGS``
(``onnx_ops.py``, ``onnx_math.py``, ``onnx_trees.py``, ...), give the public methods named
outputs, check the model with ``onnx.checker`` and validate it in ONNX Runtime against the
compiled model before it is written. docs/export.md says what exports and how exact it is."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from peregrine.errors import UnsupportedModelError, ValidationError
from peregrine.export.onnx_inputs import (  # noqa: F401  (validation_rows: also library.py's)
    categories_metadata,
    rules_twin,
    validation_rows,
)
from peregrine.ir.ops import Op
from peregrine.options import Precision

DEFAULT_OPSET = 21
MIN_OPSET = 18  # ReduceSum/ReduceMax take their axes as an input
RTOL, ATOL = 1e-5, 1e-6
INPUT_NAME = "X"
# public method -> ONNX output name (skl2onnx's names for classifiers: label, probabilities)
OUTPUT_NAMES = {"predict": "variable", "predict_proba": "probabilities",
                "decision_function": "scores", "score_samples": "scores",
                "transform": "variable", "predict_log_proba": "log_probabilities"}


@dataclass
class ExportReport:
    """What ``export_onnx`` wrote and how close ONNX Runtime came to the compiled model."""

    path: str
    inputs: dict[str, tuple[str, list[Any]]]  # name -> (numpy dtype name, shape)
    outputs: dict[str, tuple[str, list[Any]]]
    methods: dict[str, str]  # public method -> output name
    opset: int
    rows: int = 0  # validation rows
    deviations: dict[str, dict[str, float]] = field(default_factory=dict)
    # "exact" (every value within rtol 1e-5 / atol 1e-6 of the compiled model) or "float32"
    # (the float32 level: ``deviations`` is its measured error, labels still identical)
    precision: str = "exact"


def _require() -> tuple[Any, Any]:
    try:
        import onnx
        import onnxruntime
    except ImportError as exc:
        raise UnsupportedModelError(
            f"ONNX export needs onnx and onnxruntime ({exc.name} is missing): "
            "pip install 'peregrine-ml[onnx]'") from None
    return onnx, onnxruntime


def exported_methods(spec: Any, methods: Any = None) -> list[str]:
    """The public methods that become outputs: predict and predict_proba where the model has
    them (a classifier's label and probabilities), else its one transform/score method."""
    if methods is not None:
        missing = [m for m in methods if m not in spec.methods]
        if missing:
            raise UnsupportedModelError(f"{spec.source} has no {', '.join(missing)}")
        return list(methods)
    chosen = [m for m in ("predict", "predict_proba") if m in spec.methods]
    if not chosen:
        chosen = [m for m in ("transform", "decision_function", "score_samples")
                  if m in spec.methods][:1]
    return chosen


def load_lowerings() -> dict:
    """The per-op ONNX lowerings (``onnx_graph.LOWERINGS``), every module that registers one
    imported here, so the table is complete whoever asks first (a build, or a test that
    reads an entry)."""
    from peregrine.export import (  # noqa: F401  (importing registers the lowerings)
        onnx_kernels,
        onnx_lookup,
        onnx_math,
        onnx_neighbours,
        onnx_nn,
        onnx_ops,
        onnx_transformers,
        onnx_trees,
    )
    from peregrine.export.onnx_graph import LOWERINGS

    return LOWERINGS


def build_onnx(compiled: Any, *, opset: int | None = None, batch: Any = "dynamic",
               ml_ops: str = "auto", methods: Any = None, input_dtype: str | None = None,
               exact_sums: bool = False, precision: Any = "auto",
               string_inputs: bool = False) -> tuple[Any, dict[str, str]]:
    """The ONNX ModelProto of ``compiled``'s program and {method: output name}."""
    onnx, _ = _require()
    from onnx import TensorProto, helper

    load_lowerings()
    from peregrine.export.onnx_float32 import float32_nodes, narrow_lowering, parse_precision
    from peregrine.export.onnx_graph import LOWERINGS, RUNNING_BACKENDS, Emitter
    from peregrine.export.onnx_tune import (
        drop_dead_nodes,
        drop_output_copies,
        match_constant_ranks,
    )
    from peregrine.export.onnx_vector_trees import plan_forests

    spec = compiled.spec
    if spec.text is not None:
        # the tokenizer (Python re semantics of \w, n-grams, the vocabulary lookup) has no
        # ONNX form that reproduces scikit-learn's tokens; the graph after it would export
        raise UnsupportedModelError(
            f"{spec.source}: ONNX export of a text vectorizer pipeline is not supported (its "
            f"tokenizer has no exact ONNX form); the {RUNNING_BACKENDS} backends run it")
    opset = DEFAULT_OPSET if opset is None else int(opset)
    if not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise UnsupportedModelError(
            f"ONNX opset {opset} is not exported: Peregrine writes opsets {MIN_OPSET} to "
            f"{onnx.defs.onnx_opset_version()} (ReduceSum/ReduceMax with axes inputs); the "
            f"{RUNNING_BACKENDS} backends run {spec.source}: peregrine.compile(model, "
            "backend=...)")
    if ml_ops not in ("auto", "always", "never"):
        raise ValueError(f"ml_ops={ml_ops!r}: use 'auto', 'always' or 'never'")
    if spec.hash_columns:
        # CatBoost's categorical features: the runtime hashes each string (CityHash) before
        # the graph, and no ONNX op computes that hash
        cols = sorted(spec.hash_columns)
        named = [spec.feature_names[c] if spec.feature_names else str(c) for c in cols]
        raise UnsupportedModelError(
            f"{spec.source}: ONNX export takes a numeric matrix; this model hashes string "
            f"columns ({', '.join(named)}: CatBoost's CityHash of each value, which no ONNX "
            "op computes), so it is not exported; the reference, torch, torchscript and "
            "native backends run it")
    # string / pandas category columns (spec.category_maps) are exported as their codes, as
    # the compiled model takes a numeric matrix and export_library does: the file's metadata
    # lists each column's categories in code order (categories_metadata); string_inputs=True
    # makes string columns string inputs, coded inside the graph (onnx_strings.py)
    from peregrine.export.onnx_strings import input_names, lower_string_inputs, string_columns

    strings = input_names(spec, string_columns(spec)) if string_inputs else {}
    if strings and ml_ops == "never":
        raise UnsupportedModelError(
            f"{spec.source}: string inputs are coded by ai.onnx.ml LabelEncoders, which "
            "ml_ops='never' leaves out; export the codes (string_inputs=False) or allow the "
            "ai.onnx.ml ops")
    if batch == "dynamic":
        rows: Any = "N"
    elif isinstance(batch, int) and not isinstance(batch, bool) and batch > 0:
        rows = int(batch)
    else:
        raise ValueError(f"batch={batch!r}: use 'dynamic' or a positive row count")

    chosen = exported_methods(spec, methods)
    e = Emitter(spec.source, ml_ops, exact_sums)
    graph = spec.graph
    wanted = [spec.methods[m].output for m in chosen]
    steps = graph.steps(graph.outputs[w] for w in wanted)
    e.results = {graph.outputs[w] for w in wanted}
    for node in steps:
        for i in node.inputs:
            e.consumers.setdefault(i, []).append(node)
    f32 = parse_precision(precision) is Precision.FLOAT32
    if input_dtype is None:
        input_dtype = "float32" if f32 else "float64"
    if input_dtype == "auto":
        input_dtype = "float32" if f32 or float32_exact(graph, steps) else "float64"
    if input_dtype not in ("float64", "float32"):
        raise ValueError(f"input_dtype={input_dtype!r}: use 'float64', 'float32' or 'auto'")
    if f32 and input_dtype != "float32":
        raise ValueError(f"precision='float32' exports a float32 input; input_dtype="
                         f"{input_dtype!r} contradicts it (leave input_dtype out)")
    x_elem = TensorProto.FLOAT if input_dtype == "float32" else TensorProto.DOUBLE
    names: dict[str, str] = {}
    e.dtypes[INPUT_NAME] = x_elem
    inputs = [helper.make_tensor_value_info(INPUT_NAME, x_elem, [rows, spec.n_features])]
    matrix = INPUT_NAME
    if strings:
        matrix, inputs = lower_string_inputs(e, spec, strings, INPUT_NAME, x_elem, rows)
    for node in graph.toposort():
        if node.op is Op.INPUT:
            # a float32 input is widened where an op reads it in double (one Cast, exact:
            # Emitter.cast); a forest comparing in float32 reads the float32 values
            names[node.name] = matrix
            e.dtypes[matrix] = x_elem
            e.widths[matrix] = spec.n_features
    if ml_ops != "never" and not exact_sums:
        e.tree_plan, e.ml_opset = plan_forests(steps)
    narrowed = float32_nodes(steps) if f32 else set()
    for node in steps:
        lower = LOWERINGS.get(node.op)
        if lower is None:
            e.refuse(node)
        ins = [names[i] for i in node.inputs]
        floats = [i for i in ins if e.dtypes.get(i) != TensorProto.INT64]
        # the float32 level: an op whose float inputs are all float32 already
        narrow = (node.name in narrowed and bool(floats)
                  and all(e.dtypes.get(i) == TensorProto.FLOAT for i in floats))
        e.working = TensorProto.FLOAT if narrow else TensorProto.DOUBLE
        if node.dtype != "int64":  # labels (int64) feeding arithmetic: NumPy's promotion
            ins = [e.to_work(i) for i in ins]
        first_node, first_const = len(e.nodes), len(e.initializers)
        out = lower(e, node, ins)  # type: ignore[misc]
        if narrow:
            narrow_lowering(e, first_node, first_const)
        e.working = TensorProto.DOUBLE
        names[node.name] = out
        e.dtypes[out] = (TensorProto.INT64 if node.dtype == "int64"
                         else TensorProto.FLOAT if narrow else TensorProto.DOUBLE)
        e.widths[out] = node.width

    outputs, taken = [], {}
    for m in chosen:
        ms = spec.methods[m]
        x = names[graph.outputs[ms.output]]
        name = "label" if ms.labels is not None else OUTPUT_NAMES[m]
        if name in taken.values():
            name = m
        taken[m] = name
        if ms.labels is not None:
            labels = np.asarray(ms.labels)
            flat = e.op("Reshape", [x, e.const(np.asarray([-1], np.int64))])
            e.nodes.append(helper.make_node("Gather", [e.const(labels), flat], [name],
                                            name=name, axis=0))
            elem = _elem_type(labels.dtype)
            shape: list[Any] = [rows]
        else:
            width = graph.node(graph.outputs[ms.output]).width
            shape = [rows] if ms.squeeze else [rows, width]
            if ms.squeeze:
                x = e.op("Reshape", [x, e.const(np.asarray([-1], np.int64))])
            # "input": the source returns the input's float dtype; the float32 level
            # returns float32 (as the converters' files do)
            dtype = (input_dtype if ms.dtype == "input" else ms.dtype)
            elem = _elem_type(np.dtype(dtype))
            if f32 and elem == TensorProto.DOUBLE:
                elem = TensorProto.FLOAT
            if elem == TensorProto.FLOAT and x in e.narrow:
                # a float32 value widened (exactly) is itself: its Cast becomes the
                # producer's output (drop_output_copies), not a narrowing of the widening
                x = e.narrow[x]
            e.nodes.append(helper.make_node("Cast", [x], [name], name=name, to=elem))
        outputs.append(helper.make_tensor_value_info(name, elem, shape))

    ml = sorted({n.op_type for n in e.nodes if n.domain == "ai.onnx.ml"})
    if ml and ml_ops == "never":  # a lowering without a standard-op form
        raise UnsupportedModelError(f"{spec.source}: ml_ops='never', but the export needs "
                                    f"ai.onnx.ml {', '.join(ml)}")
    g = helper.make_graph(e.nodes, "peregrine", inputs, outputs, e.initializers)
    opsets = [helper.make_opsetid("", opset)]
    if any(n.domain == "ai.onnx.ml" for n in e.nodes):
        opsets.append(helper.make_opsetid("ai.onnx.ml", e.ml_opset))
    from peregrine._version import __version__

    model = helper.make_model(g, opset_imports=opsets, producer_name="peregrine",
                              producer_version=__version__)
    model.ir_version = min(model.ir_version, 10)  # what ONNX Runtime 1.17+ reads
    model.doc_string = f"{spec.source}, exported by Peregrine {__version__}"
    drop_dead_nodes(model)  # e.g. a float32 input's Cast that only forests skipped
    match_constant_ranks(model)  # speed only: the same values (onnx_tune.py)
    drop_output_copies(model)
    onnx.checker.check_model(model, full_check=True)
    return model, taken


# ops between the input and a float32-comparing forest that keep a float32 value float32
# (a float32 input then decides every split as the source does on that input)
_VALUE_PRESERVING = {Op.SELECT, Op.CONCAT}


def float32_exact(graph: Any, steps: list[Any]) -> bool:
    """Whether the program reads its input only through forests that compare in float32
    (XGBoost, scikit-learn trees; ``Forest.input_dtype``), possibly after column selections:
    then a float32 input loses nothing, and ``input_dtype="auto"`` declares one."""
    by_input: dict[str, list[Any]] = {}
    for n in steps:
        for i in n.inputs:
            by_input.setdefault(i, []).append(n)
    starts = [n.name for n in graph.toposort() if n.op is Op.INPUT]
    seen, todo, forests = set(), list(starts), 0
    while todo:
        name = todo.pop()
        for c in by_input.get(name, []):
            if c.op is Op.TREE_ENSEMBLE and c.attrs.forest.input_dtype == np.float32:
                forests += 1
            elif c.op in _VALUE_PRESERVING:
                if c.name not in seen:
                    seen.add(c.name)
                    todo.append(c.name)
            else:
                return False
    return forests > 0


def _elem_type(dtype: np.dtype) -> int:
    from onnx import TensorProto, helper

    if dtype.kind in "OUS":
        return TensorProto.STRING
    # the label constant's own type (uint8 labels: skorch's binary classifier)
    return int(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))


def session(model: Any, threads: int = 1) -> Any:
    """An ONNX Runtime CPU session on ``model`` (a ModelProto, bytes or path)."""
    _, ort = _require()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    data = model.SerializeToString() if hasattr(model, "SerializeToString") else model
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])



def _run_batches(sess: Any, feed: dict[str, np.ndarray], fixed: int) -> list[np.ndarray]:
    """Every output for the rows of ``feed`` (input name -> rows); a file exported with a
    fixed batch (``batch=n``) takes exactly n rows a call, so the rows go in whole batches,
    the last one filled up with copies of its first row and the answers for those cut off."""
    n = len(next(iter(feed.values())))
    if not fixed or n == fixed:
        return sess.run(None, feed)
    parts = []
    for start in range(0, n, fixed):
        chunk = {}
        for k, v in feed.items():
            c = v[start:start + fixed]
            if len(c) < fixed:
                c = np.concatenate([c, np.repeat(c[:1], fixed - len(c), axis=0)])
            chunk[k] = c
        parts.append(sess.run(None, chunk))
    return [np.concatenate([p[i] for p in parts])[:n] for i in range(len(parts[0]))]


def validate(compiled: Any, model: Any, methods: dict[str, str], rows: Any = None,
             float32: bool = False) -> tuple[int, dict[str, dict[str, float]]]:
    """Run ``model`` in ONNX Runtime and ``compiled`` on the same rows; raise ValidationError
    where they differ beyond rtol 1e-5 / atol 1e-6 or a label differs. ``float32`` (the
    float32 level): values are measured, not bounded; labels must still be identical and
    NaN/inf where the compiled model has them (``onnx_float32.float32_mismatch``)."""
    from onnx import TensorProto

    from peregrine.export.onnx_float32 import float32_mismatch

    string_in = any(i.type.tensor_type.elem_type == TensorProto.STRING
                    for i in model.graph.input)
    x_in = [i for i in model.graph.input if i.name == INPUT_NAME]
    x_dtype = (np.float32 if x_in and x_in[0].type.tensor_type.elem_type == TensorProto.FLOAT
               else np.float64)
    frame = hasattr(rows, "columns") or getattr(getattr(rows, "dtype", None), "kind", "") == "O"
    if rows is None:
        X = validation_rows(compiled)
    elif frame and not string_in:
        # a DataFrame (or object array) with string / category columns: the codes the file
        # takes, made by the runtime's own conversion
        X = np.asarray(compiled.model_input(rows), dtype=np.float64)
    else:
        X = None if frame else np.asarray(rows, dtype=np.float64)
    if X is not None:
        X = np.ascontiguousarray(X.reshape(-1, compiled.spec.n_features))
    if string_in:
        # string inputs (onnx_strings.py): the rows' strings, and the compiled model's
        # matrix made from the same strings by the runtime's conversion
        from peregrine.export.onnx_strings import input_names, string_columns, string_feed

        names = input_names(compiled.spec, string_columns(compiled.spec))
        feed, X = string_feed(compiled, names, INPUT_NAME, x_dtype, rows if frame else None, X)
    if rows is None and compiled.spec.input_checks:
        keep = _accepted(compiled, X)
        X = X[keep]
        if string_in:
            feed = {k: v[keep] for k, v in feed.items()}
    if x_dtype == np.float32:
        with np.errstate(over="ignore"):  # the rows a float32 caller can pass
            X = X.astype(np.float32)
    if not string_in:
        feed = {INPUT_NAME: X}
    reference = rules_twin(compiled)
    expected: dict[str, np.ndarray] = {}
    for m in methods:
        expected[m] = _expected(reference, m, X)
    try:
        sess = session(model)
    except Exception as exc:  # noqa: BLE001 - ONNX Runtime lacks a kernel (e.g. a dtype)
        raise UnsupportedModelError(f"{compiled.spec.source}: ONNX Runtime cannot run the "
                                    f"exported model: {exc}") from exc
    fixed = model.graph.input[0].type.tensor_type.shape.dim[0].dim_value  # 0: dynamic
    if not len(X):
        raise ValidationError(f"{compiled.spec.source}: every generated validation row holds "
                              "a value the model rejects; pass sample= rows to validate on")
    got = dict(zip([o.name for o in sess.get_outputs()], _run_batches(sess, feed, fixed)))
    report: dict[str, dict[str, float]] = {}
    for m, name in methods.items():
        want, have = expected[m], np.asarray(got[name])
        ok = np.isfinite(want) if want.dtype.kind == "f" else np.ones(want.shape, bool)
        if want.shape != have.shape:
            raise ValidationError(f"ONNX export of {compiled.spec.source}: {m} -> {name} has "
                                  f"shape {have.shape}, the compiled model {want.shape}")
        if want.dtype.kind in "fc":
            with np.errstate(invalid="ignore"):  # -inf - -inf (a log of 0) is NaN: equal
                diff = np.abs(have.astype(np.float64) - want.astype(np.float64))
            bad = (float32_mismatch(have, want) if float32 else
                   ~np.isclose(have, want, rtol=RTOL, atol=ATOL, equal_nan=True))
            rel = diff[ok] / np.maximum(np.abs(want[ok]), 1e-300) if ok.any() else diff[ok]
            report[m] = {"max_abs": float(np.max(diff[ok], initial=0.0)),
                         "max_rel": float(np.max(rel, initial=0.0))}
        else:
            bad = have.astype(object) != want.astype(object)
            report[m] = {"mismatches": int(np.sum(bad))}
        if np.any(bad):
            r = int(np.argwhere(bad.reshape(len(X), -1))[0][0])
            rule = ("float32 level: labels equal, NaN/inf where the compiled model has them"
                    if float32 else f"rtol {RTOL}, atol {ATOL}, labels equal")
            raise ValidationError(
                f"ONNX export of {compiled.spec.source}: {m} differs from the compiled model "
                f"on {int(np.sum(bad))} value(s), first at row {r}: ONNX Runtime "
                f"{have[r]!r}, compiled {want[r]!r} ({rule})")
    return len(X), report


def _accepted(compiled: Any, X: np.ndarray) -> np.ndarray:
    """The generated rows the source would not reject (an unseen category reaching an
    encoder with handle_unknown='error' raises there; the ONNX program cannot raise)."""
    from peregrine.ir.spec import INPUT_ERRORS

    flags = np.asarray(compiled._exec.run(X, (INPUT_ERRORS,))[INPUT_ERRORS])
    return ~np.any(flags != 0, axis=1)



def _expected(compiled: Any, method: str, X: np.ndarray) -> np.ndarray:
    return np.asarray(getattr(compiled, method)(X))


def export_onnx(compiled: Any, path: str | os.PathLike, *, opset: int | None = None,
                batch: Any = "dynamic", ml_ops: str = "auto", methods: Any = None,
                sample: Any = None, validate_rows: bool = True,
                input_dtype: str | None = None, exact_sums: bool | None = None,
                precision: Any = "auto", string_inputs: bool = False) -> ExportReport:
    """Write ``compiled``'s program as an ONNX model at ``path`` after checking it
    (``onnx.checker``) and validating it in ONNX Runtime on ``sample`` (or generated rows).
    ``input_dtype``: "float64" (the default: exact for every source), "float32" (the file
    takes float32 and reproduces the compiled model on float32 arrays) or "auto" (float32
    where the program reads its input only through float32-comparing forests).
    ``precision``: "auto"/"float64" (``Precision``; the default) write the exact program;
    "float32" the float32 level: a float32 input, linear models, MLPs, scalers, links in
    float32 (forests keep exact decisions and double sums), float32 outputs; validation then
    records the measured error (``ExportReport.deviations``, the file's metadata_props) and
    requires identical labels (``onnx_float32.py``, docs/export.md).
    ``exact_sums``: True writes every forest's sum in the library's order and precision
    (XGBoost's float32 sum bit for bit; per-class copies of vector-leaf forests), False the
    faster one-traversal forms (docs/export.md: their bounds), None (default) the faster
    forms unless they fail validation, then the exact ones."""
    onnx, _ = _require()
    from peregrine.export.onnx_float32 import parse_precision

    f32 = parse_precision(precision) is Precision.FLOAT32
    fast = not exact_sums
    model, taken = build_onnx(compiled, opset=opset, batch=batch, ml_ops=ml_ops,
                              methods=methods, input_dtype=input_dtype, exact_sums=not fast,
                              precision=precision, string_inputs=string_inputs)
    n_rows, deviations = 0, {}
    if validate_rows:
        try:
            n_rows, deviations = validate(compiled, model, taken, sample, float32=f32)
        except ValidationError:
            if exact_sums is not None:
                raise
            # the one-traversal tree forms reorder or round sums: measured per model, and
            # where their bound is not good enough here, the library's own order is written
            model, taken = build_onnx(compiled, opset=opset, batch=batch, ml_ops=ml_ops,
                                      methods=methods, input_dtype=input_dtype,
                                      exact_sums=True, precision=precision,
                                      string_inputs=string_inputs)
            n_rows, deviations = validate(compiled, model, taken, sample, float32=f32)
    level = "float32" if f32 else "exact"
    extra = categories_metadata(compiled.spec)
    if string_inputs:
        from peregrine.export.onnx_strings import strings_metadata

        extra |= strings_metadata(compiled.spec)
    _record(model, level, n_rows, deviations, extra)
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    onnx.save_model(model, tmp)
    os.replace(tmp, path)
    return ExportReport(path=path, inputs=_signature(model.graph.input),
                        outputs=_signature(model.graph.output), methods=taken,
                        opset=model.opset_import[0].version, rows=n_rows,
                        deviations=deviations, precision=level)



def _record(model: Any, level: str, rows: int, deviations: dict[str, dict[str, float]],
            extra: dict[str, str] | None = None) -> None:
    """The precision level and the validation's measured error in the file's metadata_props
    (``peregrine.precision``, ``peregrine.validation.<method>``: "max_abs=..;max_rel=.." or
    "mismatches=0", on ``peregrine.validation_rows`` rows), for whoever deploys it."""
    from onnx import helper

    props = {"peregrine.precision": level, "peregrine.validation_rows": str(rows),
             **(extra or {})}
    for m, dev in deviations.items():
        props[f"peregrine.validation.{m}"] = ";".join(f"{k}={v:.3g}" for k, v in dev.items())
    helper.set_model_props(model, props)


def _signature(values: Any) -> dict[str, tuple[str, list[Any]]]:
    from onnx import helper

    out = {}
    for v in values:
        t = v.type.tensor_type
        dims = [d.dim_param or d.dim_value for d in t.shape.dim]
        out[v.name] = (helper.tensor_dtype_to_np_dtype(t.elem_type).name, dims)
    return out
