"""scikit-learn decompositions whose transform is a fixed affine map (FastICA, PLSRegression,
PLSCanonical, CCA, PLSSVD), and the estimators Peregrine refuses with a reason: NMF,
MiniBatchNMF and LatentDirichletAllocation (transform solves an optimisation problem per
call), FeatureHasher (hashes dicts/strings of tokens, not table columns), LabelEncoder and
LabelBinarizer (they transform targets, not features).

The PLS family's centring and scaling constants are private (``_x_mean``, ``_x_std``): sklearn
exposes no public equivalent, and its own transform/predict read exactly these.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.cross_decomposition import CCA, PLSSVD, PLSCanonical, PLSRegression
from sklearn.decomposition import NMF, FastICA, LatentDirichletAllocation, MiniBatchNMF
from sklearn.feature_extraction import FeatureHasher
from sklearn.preprocessing import LabelBinarizer, LabelEncoder

from peregrine.errors import UnsupportedModelError
from peregrine.frontends.base import (
    declare_params,
    qualified_name,
    register_frontend,
    require_fitted,
)
from peregrine.frontends.sklearn_models import _linear, _numeric_input, _out
from peregrine.frontends.sklearn_pipeline import convert_single
from peregrine.frontends.steps import Context, Flow, Head, register_head, register_step
from peregrine.ir import Op
from peregrine.ir.spec import MethodSpec


def _center_scale(ctx: Context, x: str, width: int, center: Any, scale: Any) -> str:
    return ctx.g.add(Op.CENTER_SCALE, (x,), width=width,
                     center=np.broadcast_to(np.asarray(center, np.float64), (width,)).copy(),
                     scale=np.broadcast_to(np.asarray(scale, np.float64), (width,)).copy())


@register_step(FastICA)
def step_fast_ica(est: Any, ctx: Context, flow: Flow) -> Flow:
    """_fastica.py transform: X -= mean_ when whiten; X @ components_.T."""
    require_fitted(est, "components_")
    _numeric_input(est, ctx, flow)
    comp = np.asarray(est.components_, np.float64)
    x = flow.node
    if est.whiten:
        x = _center_scale(ctx, x, flow.width, est.mean_, 1.0)
    return _out(flow, _linear(ctx, x, comp.T, 0.0), comp.shape[0])


@register_step(PLSRegression, PLSCanonical, CCA)
def step_pls(est: Any, ctx: Context, flow: Flow) -> Flow:
    """_pls.py _PLS.transform: X -= _x_mean; X /= _x_std; X @ x_rotations_."""
    require_fitted(est, "x_rotations_", "_x_mean", "_x_std")
    _numeric_input(est, ctx, flow)
    rot = np.asarray(est.x_rotations_, np.float64)
    x = _center_scale(ctx, flow.node, flow.width, est._x_mean, est._x_std)
    return _out(flow, _linear(ctx, x, rot, 0.0), rot.shape[1])


@register_head(PLSRegression, PLSCanonical, CCA)
def head_pls(est: Any, ctx: Context, flow: Flow) -> Head:
    """predict: (X - _x_mean) @ coef_.T + intercept_ (coef_ already scaled); and transform."""
    require_fitted(est, "coef_", "intercept_", "_x_mean")
    _numeric_input(est, ctx, flow)
    coef = np.asarray(est.coef_, np.float64)
    x = _center_scale(ctx, flow.node, flow.width, est._x_mean, 1.0)
    pred = _linear(ctx, x, coef.T, est.intercept_)
    return Head({"predict": pred, "transform": step_pls(est, ctx, flow).node},
                {"predict": MethodSpec("predict", squeeze=bool(est._predict_1d)),
                 "transform": MethodSpec("transform")})


@register_step(PLSSVD)
def step_pls_svd(est: Any, ctx: Context, flow: Flow) -> Flow:
    """_pls.py PLSSVD.transform: ((X - _x_mean) / _x_std) @ x_weights_ (one expression: the
    subtraction and division round as CENTER_SCALE does)."""
    require_fitted(est, "x_weights_", "_x_mean", "_x_std")
    _numeric_input(est, ctx, flow)
    w = np.asarray(est.x_weights_, np.float64)
    x = _center_scale(ctx, flow.node, flow.width, est._x_mean, est._x_std)
    return _out(flow, _linear(ctx, x, w, 0.0), w.shape[1])


register_frontend(FastICA, PLSSVD, library="scikit-learn", methods=("transform",),
                  notes="whiten variants (FastICA)")(convert_single)
register_frontend(PLSRegression, PLSCanonical, CCA, library="scikit-learn",
                  methods=("predict", "transform"), notes="")(convert_single)


# ------------------------------------------------------------ refused, with a reason --

_REFUSED = {
    NMF: "transform solves a non-negative least-squares problem per call (iterative, "
         "tolerance-dependent), so no fixed program reproduces it exactly",
    MiniBatchNMF: "transform solves a non-negative least-squares problem per call (iterative, "
                  "tolerance-dependent), so no fixed program reproduces it exactly",
    LatentDirichletAllocation: "transform runs variational-EM iterations per document until "
                               "convergence, so no fixed program reproduces it exactly",
    FeatureHasher: "it hashes dicts / token strings, not the numeric or string table columns "
                   "Peregrine takes; hash upstream and compile the model that follows",
    LabelEncoder: "it transforms targets (y), not features; a compiled classifier already "
                  "returns its class labels (classes_)",
    LabelBinarizer: "it transforms targets (y), not features; a compiled classifier already "
                    "returns its class labels (classes_)",
}


def _refuse(est: Any, *_: Any) -> Any:
    why = next(w for c, w in _REFUSED.items() if isinstance(est, c))
    raise UnsupportedModelError(f"{qualified_name(est)} is not supported: {why}")


for _cls, _why in _REFUSED.items():
    register_step(_cls)(_refuse)
    register_frontend(_cls, library="scikit-learn", methods=(),
                      notes=f"not supported: {_why}")(_refuse)

# tests/test_param_audit.py (the refused classes are not audited)
declare_params(FastICA, implemented="whiten",
               ignored="algorithm fun fun_args n_components w_init whiten_solver")
declare_params(PLSRegression, implemented="scale", ignored="n_components")
declare_params(PLSCanonical, implemented="scale", ignored="algorithm n_components")
declare_params(CCA, PLSSVD, implemented="scale", ignored="n_components")
