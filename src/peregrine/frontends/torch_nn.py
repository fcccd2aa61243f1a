"""``peregrine.TorchStep`` (a trained PyTorch module as a scikit-learn transformer) as a pipeline
step, as the step ending a pipeline, and on its own. The module is translated into IR ops by
``torch_fx.translate`` (nothing of it is pickled into an artifact).

TorchStep.transform validates its input as scikit-learn's transformers do (finite numbers:
NaN is refused, so an imputer goes before the network), casts it to the module's dtype and
returns the module's output in that dtype, one column for a 1-D output. What follows reads that
float32 output (``Flow.keeps_dtype``: a float32 StandardScaler after it stays float32, a
forest compares the float32 values).

torch itself is imported only when a TorchStep is converted (``torch_fx``): loading the
frontends for an XGBoost model does not pay torch's import time."""

from __future__ import annotations

from typing import Any

from peregrine.errors import NotFittedError, UnsupportedModelError
from peregrine.frontends.base import qualified_name, register_frontend
from peregrine.frontends.sklearn_pipeline import model_spec
from peregrine.frontends.steps import (
    Context,
    Flow,
    Head,
    check_no_strings,
    convert_head,
    register_head,
    register_step,
)
from peregrine.ir.spec import MethodSpec
from peregrine.torch_step import TorchStep


def network(est: Any, module: Any, ctx: Context, flow: Flow) -> tuple[Any, str]:
    """``module``'s forward after ``flow`` (the owner ``est`` names errors): its output
    structure and dtype. The input must hold numbers (strings are encoded by earlier steps)."""
    from peregrine.frontends.torch_fx import translate

    check_no_strings(est, ctx, flow)
    if module is None:
        raise UnsupportedModelError(f"{qualified_name(est)} has no module")
    return translate(ctx.g, module, flow.node, flow.width, qualified_name(est))


def _torch_step(est: TorchStep, ctx: Context, flow: Flow) -> tuple[Any, str]:
    from peregrine.frontends.torch_fx import Value

    ctx.reject_nan(flow)  # validate_data: finite input only
    out, dtype = network(est, est.module, ctx, flow)
    if not isinstance(out, Value):
        raise UnsupportedModelError(f"{qualified_name(est)}: the module returns "
                                    f"{type(out).__name__}; TorchStep needs one tensor")
    return out, dtype


@register_step(TorchStep)
def step_torch(est: TorchStep, ctx: Context, flow: Flow) -> Flow:
    out, _ = _torch_step(est, ctx, flow)
    # a 1-D output is one column (TorchStep.transform reshapes it); the values are finite
    # wherever the input is, and stay in the module's dtype for what follows
    return Flow(out.node, (None,) * out.width, nan=False, keeps_dtype=True)


@register_head(TorchStep)
def head_torch(est: TorchStep, ctx: Context, flow: Flow) -> Head:
    out, dtype = _torch_step(est, ctx, flow)
    return Head({"transform": out.node}, {"transform": MethodSpec("transform", dtype=dtype)},
                allow_nan=False)


def width_of(est: Any, module: Any) -> int:
    """The input width of a network compiled on its own: ``n_features_in_`` when fitted,
    else its first layer's."""
    from peregrine.frontends.torch_fx import input_width

    n = getattr(est, "n_features_in_", None)
    if n is None:
        n = input_width(module) if module is not None else None
    if n is None:
        raise NotFittedError(f"{qualified_name(est)}: the input width is unknown (no "
                             "n_features_in_ and no nn.Linear/BatchNorm1d layer); call fit(X)")
    return int(n)


@register_frontend(TorchStep, library="torch", methods=("transform",),
                   notes="peregrine.TorchStep(module): Linear, BatchNorm1d, activations, "
                   "dropout, cat/slicing/arithmetic, traced by torch.fx, in the module's dtype; "
                   "in pipelines (docs/hybrid.md)")
def convert_torch_step(model: TorchStep) -> Any:
    return model_spec(model, lambda ctx, flow: convert_head(model, ctx, flow),
                      n_features=width_of(model, model.module))


__all__ = ["network", "width_of"]
