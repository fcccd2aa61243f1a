"""The ONNX-ML frontend: walks an ``onnx.ModelProto`` node by node through the handlers of
``onnx_ml.py`` (standard and linear ops) and ``onnx_ml_trees.py`` (tree ensembles), both
imported here so ``HANDLERS`` is complete, and builds the ModelSpec."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import ModelProto, numpy_helper

from peregrine.errors import UnsupportedModelError
from peregrine.frontends import onnx_ml_strings, onnx_ml_trees  # noqa: F401  (handlers)
from peregrine.frontends.base import register_frontend
from peregrine.frontends.onnx_ml import FLOAT_TYPES, HANDLERS, Ctx, Value, attrs, refuse
from peregrine.ir import GraphBuilder, Op
from peregrine.ir.spec import MethodSpec, ModelSpec


def _graph_inputs(model: ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


STRING = onnx.TensorProto.STRING


def _input_width(info: onnx.ValueInfoProto) -> tuple[int, str]:
    t = info.type.tensor_type
    dtype = "string" if t.elem_type == STRING else FLOAT_TYPES.get(t.elem_type)
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
    if dtype is None or len(dims) != 2 or dims[1] < 1:
        raise UnsupportedModelError(
            f"ONNX input {info.name!r}: Peregrine reads 2-D inputs of known width (float, "
            f"double, int64 or string), got element type {t.elem_type} and shape {dims}")
    return dims[1], dtype


@register_frontend(
    ModelProto, library="onnx", methods=("predict", "predict_proba"),
    notes="ONNX-ML graphs (skl2onnx, onnxmltools): TreeEnsembleClassifier/Regressor, "
    "TreeEnsemble (ai.onnx.ml 5), "
    "LinearClassifier/Regressor, Scaler, Normalizer, Imputer, Binarizer, ZipMap, "
    "ArrayFeatureExtractor, FeatureVectorizer, LabelEncoder, CategoryMapper, OneHotEncoder "
    "(string inputs as codes; one input, or one column per input), Cast, Concat, Gather, "
    "MatMul, Gemm, Add, Sigmoid, Softmax, ArgMax, Reshape, Identity; as ONNX Runtime answers "
    "on the same file",
)
def convert_onnx(model: ModelProto) -> ModelSpec:
    inputs = _graph_inputs(model)
    if not inputs:
        raise UnsupportedModelError("ONNX graph has no input")
    shapes = [_input_width(i) for i in inputs]
    if len(inputs) > 1 and any(w != 1 for w, _ in shapes):
        raise UnsupportedModelError(
            "ONNX graph has several inputs, not all one column wide ("
            + ", ".join(f"{i.name}: {w}" for i, (w, _) in zip(inputs, shapes))
            + "); Peregrine reads one input, or one column per input (a DataFrame's columns)")
    n_features = sum(w for w, _ in shapes)
    g = GraphBuilder()
    ctx = Ctx(g, opset={o.domain: o.version for o in model.opset_import})
    x = g.input(n_features)
    # string columns become codes at the boundary: positions in the graph's vocabulary
    vocab = onnx_ml_strings.vocabulary(model.graph.node, attrs)
    category_maps, start = {}, 0
    for info, (width, dtype) in zip(inputs, shapes):
        node = x if len(inputs) == 1 else g.add(Op.SELECT, (x,), width=width,
                                                 columns=np.arange(start, start + width))
        labels = None
        if dtype == "string":
            labels = np.array(vocab, dtype=object)
            category_maps |= {start + j: vocab for j in range(width)}
        ctx.values[info.name] = Value(node, width, dtype, labels=labels)
        start += width
    numeric = [d for _, d in shapes if d != "string"]
    in_dtype = "float32" if numeric and all(d == "float32" for d in numeric) else "float64"
    for init in model.graph.initializer:
        arr = numpy_helper.to_array(init)
        ctx.values[init.name] = Value(None, arr.size, str(arr.dtype), const=arr)
    for node in model.graph.node:
        if node.op_type == "Constant":
            value = attrs(node).get("value")
            if not isinstance(value, np.ndarray):
                raise refuse(node, "a non-tensor constant")
            ctx.values[node.output[0]] = Value(None, value.size, str(value.dtype), const=value)
            continue
        handler = HANDLERS.get((node.domain if node.domain != "ai.onnx" else "", node.op_type))
        if handler is None:
            raise UnsupportedModelError(
                f"ONNX op {node.op_type!r} of domain {node.domain or 'ai.onnx'!r} (node "
                f"{node.name or node.output[0]!r}) is not supported; supported: "
                + ", ".join(sorted(f"{d or 'ai.onnx'}::{o}" for d, o in HANDLERS)))
        handler(node, attrs(node), ctx)
    names = tuple(i.name for i in inputs) if len(inputs) > 1 or category_maps else None
    return _spec(model, ctx, n_features, in_dtype, names, category_maps)


def _label_positions(ctx: Ctx, lab: Value) -> str:
    """The int64 positions the runtime indexes the labels with. A string tensor computed by a
    lookup holds them as float codes 0..k-1 (never NaN: unknown keys take the default's
    position); ONE_HOT + ARGMAX turns those into int64 exactly."""
    if ctx.g.node(lab.node).dtype == "int64":
        return lab.node
    if lab.width != 1:
        raise UnsupportedModelError(f"ONNX string output of {lab.width} columns (Peregrine "
                                    "returns one column of labels)")
    k = len(lab.labels)
    hot = ctx.g.add(Op.ONE_HOT, (lab.node,), width=k, columns=np.array([0]),
                    categories=(np.arange(k, dtype=np.float64),), slots=(np.arange(k),),
                    unknown_slots=np.array([-1]))
    return ctx.g.add(Op.ARGMAX, (hot,), dtype="int64", width=1)


def _spec(model: ModelProto, ctx: Ctx, n_features: int, in_dtype: str,
          names: tuple[str, ...] | None, category_maps: dict) -> ModelSpec:
    outs = [ctx.get(o.name) for o in model.graph.output]
    labelled = [v for v in outs if v.labels is not None]
    scores = [v for v in outs if v.labels is None and v.node is not None]
    outputs, methods = {}, {}
    if labelled:
        lab = labelled[0]
        outputs["predict"] = _label_positions(ctx, lab)
        methods["predict"] = MethodSpec("predict", labels=lab.labels)
        if scores:
            outputs["predict_proba"] = scores[0].node
            methods["predict_proba"] = MethodSpec("predict_proba", dtype=scores[0].dtype)
    elif scores:
        outputs["predict"] = scores[0].node
        methods["predict"] = MethodSpec("predict", dtype=scores[0].dtype)
    else:
        raise UnsupportedModelError("ONNX graph has no output Peregrine can compute")
    producer = f"{model.producer_name} {model.producer_version}".strip()
    return ModelSpec(
        graph=ctx.g.build(outputs), methods=methods, n_features=n_features,
        source=f"onnx.ModelProto ({producer or 'unknown producer'})", feature_names=names,
        allow_nan=not ctx.finite_only, allow_inf=not (ctx.finite_only or ctx.inf_only),
        int_input_dtype="float64" if in_dtype != "float32" else "float32",
        versions={"onnx": onnx.__version__}, category_maps=category_maps,
    )
