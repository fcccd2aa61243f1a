"""ONNX-ML graphs as input: an ``onnx.ModelProto`` (or a ``.onnx`` file through
``peregrine.sources``) made by skl2onnx, onnxmltools or another exporter, compiled to answer as
ONNX Runtime does on the same file.

The graph is walked in order; each ONNX node becomes Peregrine IR nodes through a handler in
``HANDLERS`` keyed by (domain, op type) (tree ensembles in ``onnx_ml_trees.py``; the walk
and the frontend registration in ``onnx_ml_model.py``). A value is an
IR node plus its width and the element type ONNX Runtime computes it in. An op with no handler
raises UnsupportedModelError naming the op and its domain.

Methods: a graph with a label output and a score output (classifiers: ``label`` and
``probabilities``, ZipMap'd or not) compiles to ``predict`` (the label, as ONNX Runtime's int64
or string tensor) and ``predict_proba`` (float32 scores, (n, classes)); a graph with one float
output compiles to ``predict`` with ONNX Runtime's shape ((n, 1) for regressors).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from peregrine.errors import UnsupportedModelError
from peregrine.ir import GraphBuilder, Link, Op

ML = "ai.onnx.ml"
FLOAT_TYPES = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.DOUBLE: "float64",
               onnx.TensorProto.INT64: "int64", onnx.TensorProto.INT32: "int32"}


@dataclass(frozen=True)
class Value:
    """One ONNX tensor as Peregrine sees it: an IR node (None for a constant), its width, the
    element type ONNX Runtime holds it in; ``labels`` when it is a class-label tensor (the IR
    node then holds indices into them)."""

    node: str | None
    width: int
    dtype: str = "float32"
    const: np.ndarray | None = None
    labels: np.ndarray | None = None
    # may hold NaN when the input holds NaN (and no infinity): cleared by an Imputer of NaN,
    # kept by the featurizers that cannot make one from finite values
    nan: bool = True


@dataclass
class Ctx:
    g: GraphBuilder
    values: dict[str, Value] = field(default_factory=dict)
    opset: dict[str, int] = field(default_factory=dict)
    # cleared by ops whose answer on NaN/inf input Peregrine does not reproduce: the compiled
    # model then rejects such input (InputError) instead of answering differently
    finite_only: bool = False
    # set where such an op is reached only by NaN-free values (an Imputer in front): the input
    # may hold NaN, but an infinity (which the imputer passes on) is refused
    inf_only: bool = False

    def get(self, name: str) -> Value:
        if name not in self.values:
            raise UnsupportedModelError(f"ONNX graph reads tensor {name!r}, which nothing "
                                        "computes (a second graph input?)")
        return self.values[name]

    def computed(self, name: str, strings: bool = False) -> Value:
        v = self.get(name)
        if v.node is None:
            raise UnsupportedModelError(f"ONNX tensor {name!r} is a constant where Peregrine "
                                        "needs the input's rows")
        if v.dtype == "string" and not strings:
            raise UnsupportedModelError(f"ONNX tensor {name!r} holds strings where Peregrine "
                                        "reads numbers (strings: LabelEncoder, CategoryMapper, "
                                        "OneHotEncoder, Gather, Identity, Reshape)")
        return v


def attrs(node: onnx.NodeProto) -> dict[str, Any]:
    out = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        elif isinstance(value, list) and value and isinstance(value[0], bytes):
            value = [v.decode("utf-8") for v in value]
        elif isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        out[a.name] = value
    return out


def refuse(node: onnx.NodeProto, what: str) -> UnsupportedModelError:
    return UnsupportedModelError(
        f"ONNX node {node.name or node.output[0]!r} ({node.domain or 'ai.onnx'}::"
        f"{node.op_type}): {what} is not supported")


Handler = Callable[[onnx.NodeProto, dict, Ctx], None]
HANDLERS: dict[tuple[str, str], Handler] = {}


def handles(domain: str, *op_types: str):
    def deco(fn: Handler) -> Handler:
        for op in op_types:
            HANDLERS[(domain, op)] = fn
        return fn
    return deco


def set_out(ctx: Ctx, node: onnx.NodeProto, value: Value, index: int = 0) -> None:
    if len(node.output) > index and node.output[index]:
        ctx.values[node.output[index]] = value


# ----------------------------------------------------------------- element-wise ops --


@handles("", "Identity", "Flatten")
@handles(ML, "ZipMap")
def _identity(node, a, ctx):
    # ZipMap turns (n, classes) scores into one {label: score} map per row; Peregrine's
    # predict_proba returns the (n, classes) array it was built from (docs/frontends/onnx_ml.md)
    set_out(ctx, node, ctx.get(node.input[0]))


@handles("", "Reshape")
def _reshape(node, a, ctx):
    v = ctx.get(node.input[0])
    shape = ctx.get(node.input[1]).const if len(node.input) > 1 else None
    if shape is None or len(shape) > 2 or (len(shape) == 2 and shape[1] not in (-1, v.width)) \
            or (len(shape) == 1 and v.width != 1):
        raise refuse(node, f"a reshape of (n, {v.width}) to {shape}")
    set_out(ctx, node, v)


@handles("", "Cast")
def _cast(node, a, ctx):
    v = ctx.get(node.input[0])
    to = FLOAT_TYPES.get(a["to"])
    if to is None:
        raise refuse(node, f"a cast to element type {a['to']}")
    if v.labels is not None:  # sklearn-onnx casts the label tensor to int64: labels kept
        if to in ("int64", "int32") and v.labels.dtype.kind in "iu":
            set_out(ctx, node, v)
            return
        raise refuse(node, f"a cast of class labels to {to}")
    node_name = v.node
    if to == "float32" and v.dtype == "float64":
        # round to float32 exactly as ONNX Runtime: an AFFINE in float32 is not an IR op, so
        # the value stays float64 and the consumer rounds (Forest.input_dtype, LINK float32)
        pass
    set_out(ctx, node, Value(node_name, v.width, to, v.const, None))


@handles("", "Sigmoid")
def _sigmoid(node, a, ctx):
    v = ctx.computed(node.input[0])
    set_out(ctx, node, Value(ctx.g.add(Op.LINK, (v.node,), width=v.width, kind=Link.SIGMOID),
                             v.width, v.dtype))


@handles("", "Softmax")
def _softmax(node, a, ctx):
    v = ctx.computed(node.input[0])
    if a.get("axis", -1 if ctx.opset.get("", 13) >= 13 else 1) not in (-1, 1):
        raise refuse(node, f"softmax over axis {a.get('axis')}")
    set_out(ctx, node, Value(ctx.g.add(Op.LINK, (v.node,), width=v.width, kind=Link.SOFTMAX),
                             v.width, v.dtype))


@handles("", "ArgMax")
def _argmax(node, a, ctx):
    v = ctx.computed(node.input[0])
    if a.get("axis", 0) not in (1, -1) or a.get("select_last_index", 0):
        raise refuse(node, "ArgMax other than over the columns, first maximum")
    out = ctx.g.add(Op.ARGMAX, (v.node,), dtype="int64", width=1)
    set_out(ctx, node, Value(out, 1, "int64"))


def _const_or_none(ctx: Ctx, name: str) -> np.ndarray | None:
    return ctx.get(name).const


@handles("", "MatMul", "Gemm")
def _matmul(node, a, ctx):
    x = ctx.computed(node.input[0])
    w = _const_or_none(ctx, node.input[1])
    if w is None or w.ndim != 2:
        raise refuse(node, "a product with a non-constant or non-2-D weight")
    w = w.astype(np.float64)
    if node.op_type == "Gemm":
        if a.get("transA", 0):
            raise refuse(node, "transA=1")
        if a.get("transB", 0):
            w = w.T
        w = w * float(a.get("alpha", 1.0))
        bias = np.zeros(w.shape[1])
        if len(node.input) > 2 and node.input[2]:
            c = _const_or_none(ctx, node.input[2])
            if c is None:
                raise refuse(node, "a non-constant C")
            bias = np.broadcast_to(c.astype(np.float64).reshape(-1) * float(a.get("beta", 1.0)),
                                   (w.shape[1],)).copy()
    else:
        bias = np.zeros(w.shape[1])
    out = ctx.g.add(Op.LINEAR, (x.node,), width=w.shape[1], weight=w, bias=bias)
    set_out(ctx, node, Value(out, w.shape[1], x.dtype))


@handles("", "Add", "Sub", "Mul", "Div")
def _binary(node, a, ctx):
    left, right = ctx.get(node.input[0]), ctx.get(node.input[1])
    if left.node is None and right.node is None:
        raise refuse(node, "constant folding of two constants")
    x, c = (left, right.const) if right.node is None else (right, left.const)
    if c is None or c.size not in (1, x.width):
        raise refuse(node, f"{node.op_type} of two computed tensors")
    c = np.broadcast_to(c.astype(np.float64).reshape(-1), (x.width,)).copy()
    swapped = left.node is None
    if node.op_type == "Add":
        scale, shift = np.ones(x.width), c
    elif node.op_type == "Sub":
        scale, shift = (-np.ones(x.width), c) if swapped else (np.ones(x.width), -c)
    elif node.op_type == "Mul":
        scale, shift = c, np.zeros(x.width)
    else:
        if swapped:
            raise refuse(node, "a constant divided by the input")
        scale, shift = 1.0 / c, np.zeros(x.width)
        if np.any(1.0 / scale != c):  # x * (1/c) is x / c only when 1/c is exact
            out = ctx.g.add(Op.CENTER_SCALE, (x.node,), width=x.width,
                            center=np.zeros(x.width), scale=c)
            set_out(ctx, node, Value(out, x.width, x.dtype))
            return
    out = ctx.g.add(Op.AFFINE, (x.node,), width=x.width, scale=scale, shift=shift)
    set_out(ctx, node, Value(out, x.width, x.dtype))


@handles("", "Concat")
@handles(ML, "FeatureVectorizer")
def _concat(node, a, ctx):
    if node.op_type == "Concat" and a.get("axis") not in (1, -1):
        raise refuse(node, f"Concat over axis {a.get('axis')}")
    parts = [ctx.computed(i, strings=True) for i in node.input]
    strings = [p.dtype == "string" for p in parts]
    if any(strings) and not (all(strings) and node.op_type == "Concat"):
        raise refuse(node, "a concatenation of strings with numbers")
    dims = a.get("inputdimensions")
    if dims is not None and list(dims) != [p.width for p in parts]:
        raise refuse(node, "input dimensions that differ from the inputs' widths")
    width = sum(p.width for p in parts)
    out = parts[0].node if len(parts) == 1 else ctx.g.add(
        Op.CONCAT, tuple(p.node for p in parts), width=width)
    dtype = "float64" if any(p.dtype == "float64" for p in parts) else parts[0].dtype
    # string columns share one vocabulary (the graph's), so their codes concatenate as they are
    set_out(ctx, node, Value(out, width, dtype, labels=parts[0].labels if any(strings)
                             else None, nan=any(p.nan for p in parts)))


@handles(ML, "ArrayFeatureExtractor")
def _extract(node, a, ctx):
    x = ctx.get(node.input[0])
    idx = _const_or_none(ctx, node.input[1])
    if idx is None:
        raise refuse(node, "non-constant indices")
    cols = np.asarray(idx, dtype=np.int64).reshape(-1)
    if x.labels is not None or x.node is None:
        raise refuse(node, "extraction from labels or constants")
    out = ctx.g.add(Op.SELECT, (x.node,), width=len(cols), columns=cols)
    set_out(ctx, node, Value(out, len(cols), x.dtype, nan=x.nan))


# --------------------------------------------------------------- ONNX-ML featurizers --


@handles(ML, "Scaler")
def _scaler(node, a, ctx):
    x = ctx.computed(node.input[0])
    n = x.width
    offset = np.broadcast_to(np.asarray(a.get("offset", [0.0]), np.float64), (n,)).copy()
    scale = np.broadcast_to(np.asarray(a.get("scale", [1.0]), np.float64), (n,)).copy()
    # ONNX Runtime: (x - offset) * scale; CENTER_SCALE divides, so it is exact only when
    # 1/scale is; otherwise AFFINE (x * scale - offset * scale) rounds once more (docs)
    inv = 1.0 / scale
    if np.all(1.0 / inv == scale):
        out = ctx.g.add(Op.CENTER_SCALE, (x.node,), width=n, center=offset, scale=inv)
    else:
        out = ctx.g.add(Op.AFFINE, (x.node,), width=n, scale=scale, shift=-offset * scale)
    # (x - offset) * scale of finite values: finite (infinity being refused, as below)
    finite = bool(np.all(np.isfinite(offset)) and np.all(np.isfinite(scale)))
    set_out(ctx, node, Value(out, n, "float32", nan=x.nan or not finite))


@handles(ML, "Normalizer")
def _normalizer(node, a, ctx):
    x = ctx.computed(node.input[0])
    norm = {"L1": "l1", "L2": "l2", "MAX": "max"}.get(a.get("norm", "MAX"))
    if norm is None:
        raise refuse(node, f"norm {a.get('norm')!r}")
    out = ctx.g.add(Op.NORMALIZE, (x.node,), width=x.width, norm=norm)
    set_out(ctx, node, Value(out, x.width, "float32"))


@handles(ML, "Imputer")
def _imputer(node, a, ctx):
    x = ctx.computed(node.input[0])
    values = a.get("imputed_value_floats")
    if values is None:
        raise refuse(node, "integer imputation")
    values = np.broadcast_to(np.asarray(values, np.float64), (x.width,)).copy()
    missing = float(a.get("replaced_value_float", np.nan))
    out = ctx.g.add(Op.IMPUTE, (x.node,), width=x.width, values=values, missing=missing)
    # NaN replaced by finite values: none left (an infinity passes on as it is)
    clears = bool(np.isnan(missing) and np.all(np.isfinite(values)))
    set_out(ctx, node, Value(out, x.width, x.dtype, nan=x.nan and not clears))


@handles(ML, "Binarizer")
def _binarizer(node, a, ctx):
    x = ctx.computed(node.input[0])
    out = ctx.g.add(Op.BINARIZE, (x.node,), width=x.width,
                    threshold=float(np.float32(a.get("threshold", 0.0))))
    set_out(ctx, node, Value(out, x.width, x.dtype))


# ------------------------------------------------------------------- linear models --


def _post(ctx: Ctx, node, scores: str, width: int, post: str) -> str:
    if post == "NONE":
        return scores
    if post == "LOGISTIC":
        return ctx.g.add(Op.LINK, (scores,), width=width, kind=Link.SIGMOID)
    if post == "SOFTMAX":
        return ctx.g.add(Op.LINK, (scores,), width=width, kind=Link.SOFTMAX)
    raise refuse(node, f"post_transform {post!r}")


def class_labels(node, a) -> np.ndarray:
    for key in ("classlabels_int64s", "classlabels_ints", "classlabels_strings"):
        if key in a:
            return np.asarray(a[key], dtype=object if key.endswith("strings") else np.int64)
    raise refuse(node, "a classifier without class labels")


@handles(ML, "LinearRegressor")
def _linear_regressor(node, a, ctx):
    x = ctx.computed(node.input[0])
    k = int(a.get("targets", 1))
    w = np.asarray(a["coefficients"], np.float64).reshape(k, x.width).T
    b = np.asarray(a.get("intercepts", np.zeros(k)), np.float64).reshape(k)
    out = ctx.g.add(Op.LINEAR, (x.node,), width=k, weight=w, bias=b)
    out = _post(ctx, node, out, k, a.get("post_transform", "NONE"))
    set_out(ctx, node, Value(out, k, "float32"))


@handles(ML, "LinearClassifier")
def _linear_classifier(node, a, ctx):
    """onnxruntime/core/providers/cpu/ml/linearclassifier.cc: scores = x W^T + b; one row of
    coefficients with two labels is the binary case (label: score > 0, scores [-s, s] before
    the post-transform, [1 - p, p] after LOGISTIC)."""
    x = ctx.computed(node.input[0])
    labels = class_labels(node, a)
    coef = np.asarray(a["coefficients"], np.float64)
    k = coef.size // x.width
    w = coef.reshape(k, x.width).T
    b = np.asarray(a.get("intercepts", np.zeros(k)), np.float64).reshape(k)
    post = a.get("post_transform", "NONE")
    g = ctx.g
    # NaN scores (NaN input, inf - inf): ONNX Runtime's label then follows its own comparison
    # loop, not a first-maximum rule; such rows are refused instead (only the infinite ones
    # when an Imputer in front replaces every NaN)
    if x.nan:
        ctx.finite_only = True
    else:
        ctx.inf_only = True
    scores = g.add(Op.LINEAR, (x.node,), width=k, weight=w, bias=b)
    if k == 1 and len(labels) == 2:
        label = g.add(Op.THRESHOLD, (scores,), dtype="int64", width=1, value=0.0, strict=True)
        if post == "LOGISTIC":
            p = g.add(Op.LINK, (scores,), width=1, kind=Link.SIGMOID)
            proba = g.add(Op.BINARY_PROBA, (p,), width=2)
        elif post == "NONE":
            both = g.add(Op.SELECT, (scores,), width=2, columns=np.array([0, 0]))
            proba = g.add(Op.AFFINE, (both,), width=2, scale=np.array([-1.0, 1.0]),
                          shift=np.zeros(2))
        else:
            raise refuse(node, f"binary post_transform {post!r}")
        width = 2
    elif k == len(labels):
        label = g.add(Op.ARGMAX, (scores,), dtype="int64", width=1)
        proba = _post(ctx, node, scores, k, post)
        width = k
    else:
        raise refuse(node, f"{k} coefficient rows for {len(labels)} labels")
    set_out(ctx, node, Value(label, 1, "int64", labels=labels), 0)
    set_out(ctx, node, Value(proba, width, "float32"), 1)


# ------------------------------------------------------------------------ the model --
