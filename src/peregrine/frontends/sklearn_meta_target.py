"""scikit-learn's TransformedTargetRegressor (compose/_target.py, sklearn 1.9): the regressor's
predictions through ``transformer_.inverse_transform``, in that transformer's own order of
operations, squeezed back to 1-D when fitted on a 1-D target. Registered from
``sklearn_meta.py``; helpers in ``meta_util.py``."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.compose import TransformedTargetRegressor
from sklearn.preprocessing import (
    FunctionTransformer,
    MaxAbsScaler,
    MinMaxScaler,
    RobustScaler,
    StandardScaler,
)

from peregrine.frontends.base import (
    declare_params,
    refuse_overrides,
    register_frontend,
    require_fitted,
    unsupported,
)
from peregrine.frontends.meta_util import node_width, sub_head
from peregrine.frontends.sklearn_pipeline import convert_single
from peregrine.frontends.steps import Context, Flow, Head, register_head
from peregrine.ir import Op
from peregrine.ir.ops import UFUNCS
from peregrine.ir.spec import MethodSpec


def _inverse(model: Any, trans: Any, ctx: Context, node: str, width: int) -> str:
    """``trans.inverse_transform`` of ``node`` in the transformer's own order of operations."""
    def per_col(value: Any, default: float) -> np.ndarray:
        v = default if value is None else value
        return np.broadcast_to(np.asarray(v, dtype=np.float64), (width,)).copy()

    for cls in (StandardScaler, RobustScaler, MaxAbsScaler, MinMaxScaler, FunctionTransformer):
        if isinstance(trans, cls):  # matched by isinstance, not the registries: same guard
            refuse_overrides(type(trans), cls)
    if isinstance(trans, StandardScaler):  # X *= scale_; X += mean_
        scale = per_col(trans.scale_ if trans.with_std else None, 1.0)
        shift = per_col(trans.mean_ if trans.with_mean else None, 0.0)
        return ctx.g.add(Op.AFFINE, (node,), width=width, scale=scale, shift=shift)
    if isinstance(trans, RobustScaler):  # X *= scale_; X += center_
        scale = per_col(trans.scale_ if trans.with_scaling else None, 1.0)
        shift = per_col(trans.center_ if trans.with_centering else None, 0.0)
        return ctx.g.add(Op.AFFINE, (node,), width=width, scale=scale, shift=shift)
    if isinstance(trans, MaxAbsScaler):  # X *= scale_
        return ctx.g.add(Op.AFFINE, (node,), width=width, scale=per_col(trans.scale_, 1.0),
                         shift=per_col(None, 0.0))
    if isinstance(trans, MinMaxScaler):  # X -= min_; X /= scale_
        return ctx.g.add(Op.CENTER_SCALE, (node,), width=width, center=per_col(trans.min_, 0.0),
                         scale=per_col(trans.scale_, 1.0))
    if isinstance(trans, FunctionTransformer):
        func = trans.inverse_func
        if trans.inv_kw_args:
            raise unsupported(model, "transformer inv_kw_args")
        if func is None:
            return node
        name = getattr(func, "__name__", None)
        if not (isinstance(func, np.ufunc) and name in UFUNCS):
            raise unsupported(model, f"inverse_func={func!r}",
                              "None or numpy ufuncs " + ", ".join(UFUNCS))
        return ctx.g.add(Op.UFUNC, (node,), width=width, name=name)
    raise unsupported(model, f"transformer {type(trans).__name__}",
                      "StandardScaler, RobustScaler, MaxAbsScaler, MinMaxScaler, "
                      "FunctionTransformer/func+inverse_func with numpy ufuncs")


def _revalidates(trans: Any) -> str:
    """What ``trans.inverse_transform`` refuses in the predictions (a guard kind, or ""): the
    scalers' check_array allows NaN, not infinity; a validating FunctionTransformer (the one
    TransformedTargetRegressor makes of func/inverse_func) refuses both."""
    if isinstance(trans, FunctionTransformer):
        return "inf+nan" if trans.validate else ""
    return "inf"


@register_head(TransformedTargetRegressor)
def head_transformed_target(model: TransformedTargetRegressor, ctx: Context,
                            flow: Flow) -> Head:
    require_fitted(model, "regressor_", "transformer_")
    head = sub_head(model, model.regressor_, ctx, flow, "predict")
    pred = head.outputs["predict"]
    width = node_width(ctx, pred)
    kind = _revalidates(model.transformer_)
    if kind:  # a prediction that overflowed raises in inverse_transform's check_array
        ctx.guard(Flow(pred, (None,) * width), model, kind)
    out = _inverse(model, model.transformer_, ctx, pred, width)
    # predict squeezes (n, 1) back to 1-D when fit saw a 1-D y (_training_dim, set by fit)
    squeeze = getattr(model, "_training_dim", 1) == 1 and width == 1
    return Head({"predict": out}, {"predict": MethodSpec("predict", squeeze=squeeze)})


register_frontend(TransformedTargetRegressor, library="scikit-learn", methods=("predict",),
                  notes="transformer StandardScaler/RobustScaler/MaxAbsScaler/MinMaxScaler, "
                  "or func/inverse_func numpy ufuncs")(convert_single)

# tests/test_param_audit.py
declare_params(TransformedTargetRegressor,
               implemented="regressor transformer func inverse_func", ignored="check_inverse")
