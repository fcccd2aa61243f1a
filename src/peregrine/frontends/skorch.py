"""skorch's nets (``NeuralNetClassifier``, ``NeuralNetBinaryClassifier``, ``NeuralNetRegressor``)
as a pipeline's final step or on their own. skorch nets have no ``transform``, so inside a
pipeline they can only end it; a network in the middle is a ``peregrine.TorchStep``.

What skorch computes (skorch 1.x, ``net.py`` / ``classifier.py`` / ``regressor.py``):
``predict_proba(X)`` runs ``module_`` in eval mode batch by batch (``forward_iter``), keeps the
first output of a tuple, applies ``_get_predict_nonlinearity()`` (``'auto'``: softmax over the
last dim for CrossEntropyLoss, sigmoid then ``[1 - p, p]`` for BCEWithLogitsLoss, ``[1 - p, p]``
for BCELoss, else the identity) and returns float32 numbers for a float32 module. Then

* NeuralNetClassifier.predict = ``predict_proba(X).argmax(axis=1)``: column indices (int64),
  not ``classes_``;
* NeuralNetBinaryClassifier: ``infer`` flattens the module's (n,) or (n, 1) output;
  ``predict = (predict_proba(X)[:, 1] > threshold).astype('uint8')``, compared in float32
  when ``threshold`` is a Python number (NumPy's rule for Python scalars);
* NeuralNetRegressor.predict = predict_proba = the module's output, (n, k) or (n,) as the module
  returns it.

skorch hands the module X as given: a float64 array reaching a float32 module raises a dtype
error in skorch, where the compiled model casts to the module's dtype and answers.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from skorch import NeuralNetBinaryClassifier, NeuralNetClassifier, NeuralNetRegressor
from skorch import __version__ as skorch_version
from skorch import utils as skorch_utils

from peregrine.errors import UnsupportedModelError
from peregrine.frontends.base import qualified_name, register_frontend, require_fitted
from peregrine.frontends.sklearn_pipeline import model_spec
from peregrine.frontends.steps import Context, Flow, Head, convert_head, register_head
from peregrine.frontends.torch_fx import Value
from peregrine.frontends.torch_nn import network, width_of
from peregrine.ir import Op
from peregrine.ir.spec import MethodSpec

# skorch.NeuralNet methods on the prediction path besides the public ones the registry's
# guard checks: a subclass redefining one predicts differently from what is translated
_PREDICT_PATH = ("infer", "evaluation_step", "forward_iter", "forward",
                 "_get_predict_nonlinearity")


def _nonlinearity(net: Any) -> str:
    """skorch's predict nonlinearity as one of "identity", "softmax", "sigmoid_2d", "2d"."""
    fn = net._get_predict_nonlinearity()  # skorch's own resolution of 'auto' and None
    if fn is skorch_utils._identity:
        return "identity"
    if fn is skorch_utils._sigmoid_then_2d:
        return "sigmoid_2d"
    if fn is skorch_utils._make_2d_probs:
        return "2d"
    if (isinstance(fn, functools.partial) and fn.func is torch.softmax and not fn.args
            and fn.keywords in ({"dim": -1}, {"dim": 1})):
        return "softmax"
    raise UnsupportedModelError(f"{qualified_name(net)}: predict_nonlinearity {fn!r} (supported:"
                                " 'auto', None, and skorch's softmax/sigmoid nonlinearities)")


def _output(net: Any, ctx: Context, flow: Flow) -> tuple[Value, str]:
    require_fitted(net, "module_")
    for name in _PREDICT_PATH:
        mine = getattr(type(net), name, None)
        theirs = next((getattr(k, name) for k in type(net).__mro__
                       if k.__module__.startswith("skorch.") and name in vars(k)), None)
        if mine is not theirs:
            raise UnsupportedModelError(f"{qualified_name(net)} overrides {name}(); Peregrine "
                                        "translates skorch's own prediction path only")
    out, dtype = network(net, net.module_, ctx, flow)
    if isinstance(out, (tuple, list)):  # skorch keeps the first output of a tuple
        out = out[0] if out else None
    if not isinstance(out, Value):
        raise UnsupportedModelError(f"{qualified_name(net)}: the module returns "
                                    f"{type(out).__name__}, not a tensor")
    return out, dtype


@register_head(NeuralNetClassifier)
def head_classifier(net: Any, ctx: Context, flow: Flow) -> Head:
    out, dtype = _output(net, ctx, flow)
    kind = _nonlinearity(net)
    if out.rank != 2 or kind in ("sigmoid_2d", "2d"):
        raise UnsupportedModelError(f"{qualified_name(net)}: a rank-{out.rank} module output "
                                    f"with the {kind} nonlinearity (predict_proba would not be "
                                    "(n, classes))")
    proba = out.node
    if kind == "softmax":
        proba = ctx.g.add(Op.ACTIVATION, (out.node,), width=out.width, kind="softmax",
                          net_dtype=dtype)
    label = ctx.g.add(Op.ARGMAX, (proba,), width=1)
    return Head({"predict": label, "predict_proba": proba},
                {"predict": MethodSpec("predict", labels=np.arange(out.width, dtype=np.int64)),
                 "predict_proba": MethodSpec("predict_proba", dtype=dtype)},
                allow_nan=True)


def _threshold(value: Any, dtype: str) -> float:
    """skorch's ``proba > threshold`` on ``dtype`` numbers as one exact comparison: a Python
    number meets the float32 array as float32 (rounded to nearest, NEP 50); a NumPy float64
    compares in float64, which for float32 probabilities is ``> t'`` with t' the largest
    float32 at or below it."""
    if isinstance(value, (np.floating, np.integer)) and np.dtype(type(value)).itemsize > 4:
        t = np.float64(value)
        r = np.asarray(t).astype(dtype)[()]
        if r > t:
            r = np.nextafter(r, np.asarray(-np.inf, dtype=dtype))
        return float(r)
    return float(np.asarray(float(value)).astype(dtype))


@register_head(NeuralNetBinaryClassifier)
def head_binary_classifier(net: Any, ctx: Context, flow: Flow) -> Head:
    out, dtype = _output(net, ctx, flow)
    if out.width != 1:
        raise UnsupportedModelError(f"{qualified_name(net)}: the module returns {out.width} "
                                    "columns; skorch's binary classifier expects (n,) or (n, 1)")
    kind = _nonlinearity(net)
    if kind not in ("sigmoid_2d", "2d"):
        raise UnsupportedModelError(f"{qualified_name(net)}: the {kind} nonlinearity (skorch's "
                                    "predict needs (n, 2) probabilities)")
    p = out
    if kind == "sigmoid_2d":
        node = ctx.g.add(Op.ACTIVATION, (out.node,), width=1, kind="sigmoid", net_dtype=dtype)
        p = Value(node, 1, 1)
    proba = ctx.g.add(Op.BINARY_PROBA, (p.node,), width=2)  # 1 - p stays in p's dtype
    label = ctx.g.add(Op.THRESHOLD, (p.node,), width=1, value=_threshold(net.threshold, dtype),
                      strict=True)
    return Head({"predict": label, "predict_proba": proba},
                {"predict": MethodSpec("predict", labels=np.array([0, 1], dtype=np.uint8)),
                 "predict_proba": MethodSpec("predict_proba", dtype=dtype)},
                allow_nan=True)


@register_head(NeuralNetRegressor)
def head_regressor(net: Any, ctx: Context, flow: Flow) -> Head:
    out, dtype = _output(net, ctx, flow)
    kind = _nonlinearity(net)
    node = out.node
    if kind == "softmax" and out.rank == 2:
        node = ctx.g.add(Op.ACTIVATION, (out.node,), width=out.width, kind="softmax",
                         net_dtype=dtype)
    elif kind != "identity":
        raise UnsupportedModelError(f"{qualified_name(net)}: the {kind} nonlinearity on a "
                                    "regressor")
    spec = MethodSpec("predict", squeeze=out.rank == 1, dtype=dtype)
    return Head({"predict": node, "predict_proba": node},
                {"predict": spec, "predict_proba": MethodSpec(
                    "predict_proba", squeeze=out.rank == 1, dtype=dtype)},
                allow_nan=True)


@register_frontend(NeuralNetClassifier, NeuralNetBinaryClassifier, NeuralNetRegressor,
                   library="skorch", methods=("predict", "predict_proba"),
                   notes="module_ translated as peregrine.TorchStep's; alone or ending a "
                   "pipeline (docs/hybrid.md)")
def convert_skorch(model: Any) -> Any:
    require_fitted(model, "module_")
    spec = model_spec(model, lambda ctx, flow: convert_head(model, ctx, flow),
                      n_features=width_of(model, model.module_))
    spec.versions.update({"skorch": skorch_version, "torch": torch.__version__})
    return spec


__all__ = ["head_binary_classifier", "head_classifier", "head_regressor"]
