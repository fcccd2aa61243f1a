"""The ONNX-ML frontend: walks an ``onnx.ModelProto`` node by node through the handlers of
``onnx_ml.py`` (standard and linear ops) and ``onnx_ml_trees.py`` (tree ensembles), both
imported here so ``HANDLERS`` is complete, and builds the ModelSpec."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import ModelProto, numpy_helper

from peregrine.errors import UnsupportedModelError
from peregrine.frontends import onnx_ml_trees  # noqa: F401  (registers the tree handlers)
from peregrine.frontends.base import register_frontend
from peregrine.frontends.onnx_ml import FLOAT_TYPES, HANDLERS, Ctx, Value, attrs, refuse
from peregrine.ir import GraphBuilder
from peregrine.ir.spec import MethodSpec, ModelSpec


def _graph_inputs(model: ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _input_width(info: onnx.ValueInfoProto) -> tuple[int, str]:
    t = info.type.tensor_type
    dtype = FLOAT_TYPES.get(t.elem_type)
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
    if dtype is None or len(dims) != 2 or dims[1] < 1:
        raise UnsupportedModelError(
            f"ONNX input {info.name!r}: Peregrine reads one 2-D numeric input of known width "
            f"(float, double or int64), got element type {t.elem_type} and shape {dims}")
    return dims[1], dtype


@register_frontend(
    ModelProto, library="onnx", methods=("predict", "predict_proba"),
    notes="ONNX-ML graphs (skl2onnx, onnxmltools): TreeEnsembleClassifier/Regressor, "
    "TreeEnsemble (ai.onnx.ml 5), "
    "LinearClassifier/Regressor, Scaler, Normalizer, Imputer, Binarizer, ZipMap, "
    "ArrayFeatureExtractor, FeatureVectorizer, Cast, Concat, MatMul, Gemm, Add, Sigmoid, "
    "Softmax, ArgMax, Reshape, Identity; as ONNX Runtime answers on the same file",
)
def convert_onnx(model: ModelProto) -> ModelSpec:
    inputs = _graph_inputs(model)
    if len(inputs) != 1:
        raise UnsupportedModelError(
            f"ONNX graph has {len(inputs)} inputs ({', '.join(i.name for i in inputs)}); "
            "Peregrine reads graphs with one 2-D numeric input")
    n_features, in_dtype = _input_width(inputs[0])
    g = GraphBuilder()
    ctx = Ctx(g, opset={o.domain: o.version for o in model.opset_import})
    ctx.values[inputs[0].name] = Value(g.input(n_features), n_features, in_dtype)
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
    return _spec(model, ctx, n_features, in_dtype)


def _spec(model: ModelProto, ctx: Ctx, n_features: int, in_dtype: str) -> ModelSpec:
    outs = [ctx.get(o.name) for o in model.graph.output]
    labelled = [v for v in outs if v.labels is not None]
    scores = [v for v in outs if v.labels is None and v.node is not None]
    outputs, methods = {}, {}
    if labelled:
        lab = labelled[0]
        outputs["predict"] = lab.node
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
    names = None
    return ModelSpec(
        graph=ctx.g.build(outputs), methods=methods, n_features=n_features,
        source=f"onnx.ModelProto ({producer or 'unknown producer'})", feature_names=names,
        allow_nan=not ctx.finite_only, allow_inf=not ctx.finite_only,
        int_input_dtype="float64" if in_dtype != "float32" else "float32",
        versions={"onnx": onnx.__version__},
    )
