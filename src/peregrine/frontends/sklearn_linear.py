"""scikit-learn linear models, as pipeline heads and as models on their own.

Every one computes ``X @ coef_.T + intercept_`` (sklearn/linear_model/_base.py
``LinearModel._decision_function`` / ``LinearClassifierMixin.decision_function``) in float64
(float32 input times float64 ``coef_`` promotes). Classifiers follow
``LinearClassifierMixin.predict``: one score column -> class 1 iff score > 0, else argmax;
``decision_function`` is 1-D for binary problems. Probabilities:

* LogisticRegression(CV) 1.9: binary -> ``_predict_proba_lr`` ([1 - expit, expit]), multiclass
  -> softmax of the decision (_logistic.py ``predict_proba``).
* SGDClassifier: log_loss -> ``_predict_proba_lr`` (OvR: expit per class, rows normalised, an
  all-zero row uniform); modified_huber -> (clip(d, -1, 1) + 1) / 2, normalised the same way
  (_stochastic_gradient.py ``_predict_proba``).

Generalised linear models (Poisson/Gamma/Tweedie) return ``link.inverse(raw)``: exp for the
log link (_glm/glm.py ``predict``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn._loss.link import IdentityLink, LogLink
from sklearn.linear_model import (
    ARDRegression,
    BayesianRidge,
    ElasticNet,
    ElasticNetCV,
    GammaRegressor,
    HuberRegressor,
    Lars,
    LarsCV,
    Lasso,
    LassoCV,
    LassoLars,
    LassoLarsCV,
    LassoLarsIC,
    LinearRegression,
    LogisticRegression,
    LogisticRegressionCV,
    OrthogonalMatchingPursuit,
    PassiveAggressiveClassifier,
    PassiveAggressiveRegressor,
    Perceptron,
    PoissonRegressor,
    QuantileRegressor,
    Ridge,
    RidgeClassifier,
    RidgeClassifierCV,
    RidgeCV,
    SGDClassifier,
    SGDRegressor,
    TheilSenRegressor,
    TweedieRegressor,
)
from sklearn.svm import LinearSVC, LinearSVR

from peregrine.frontends.base import add_log_proba, register_frontend, require_fitted, unsupported
from peregrine.frontends.sklearn_pipeline import convert_single
from peregrine.frontends.steps import Context, Flow, Head, check_no_strings, register_head
from peregrine.ir import Link, Op
from peregrine.ir.spec import MethodSpec


def _linear(est: Any, ctx: Context, flow: Flow) -> tuple[str, int, bool]:
    """The LINEAR node of ``est`` on ``flow``: (node, n_outputs, coef_ was 1-D)."""
    require_fitted(est, "coef_")
    check_no_strings(est, ctx, flow)
    ctx.reject_nan(flow)  # check_array rejects NaN and inf in every linear model
    coef = np.asarray(est.coef_, dtype=np.float64)
    one_d = coef.ndim == 1
    coef = coef.reshape(-1, coef.shape[-1])  # (k, n)
    if coef.shape[1] != flow.width:
        raise unsupported(est, f"coef_ with {coef.shape[1]} features on {flow.width} columns")
    k = coef.shape[0]
    intercept = np.broadcast_to(np.asarray(getattr(est, "intercept_", 0.0), np.float64), (k,))
    node = ctx.g.add(Op.LINEAR, (flow.node,), width=k, weight=coef.T.copy(),
                     bias=intercept.copy())
    return node, k, one_d


REGRESSORS = (LinearRegression, Ridge, RidgeCV, Lasso, LassoCV, ElasticNet, ElasticNetCV, Lars,
              LarsCV, LassoLars, LassoLarsCV, LassoLarsIC, OrthogonalMatchingPursuit,
              BayesianRidge, ARDRegression, HuberRegressor, QuantileRegressor,
              TheilSenRegressor, SGDRegressor, PassiveAggressiveRegressor, LinearSVR)
GLMS = (PoissonRegressor, GammaRegressor, TweedieRegressor)
CLASSIFIERS = (LogisticRegression, LogisticRegressionCV, RidgeClassifier, RidgeClassifierCV,
               SGDClassifier, Perceptron, PassiveAggressiveClassifier, LinearSVC)


@register_head(*REGRESSORS)
def head_linear_regressor(est: Any, ctx: Context, flow: Flow) -> Head:
    node, k, one_d = _linear(est, ctx, flow)
    return Head({"predict": node}, {"predict": MethodSpec("predict", squeeze=one_d)})


@register_head(*GLMS)
def head_glm(est: Any, ctx: Context, flow: Flow) -> Head:
    node, k, _ = _linear(est, ctx, flow)
    link = est._base_loss.link  # predict = link.inverse(X @ coef_ + intercept_)
    if isinstance(link, LogLink):
        node = ctx.g.add(Op.LINK, (node,), width=1, kind=Link.EXP)
    elif not isinstance(link, IdentityLink):
        raise unsupported(est, f"link {type(link).__name__}", "log, identity")
    return Head({"predict": node}, {"predict": MethodSpec("predict", squeeze=True)})


def _ovr_proba(ctx: Context, scores: str, k: int, huber: bool) -> str:
    if huber:  # (clip(d, -1, 1) + 1) / 2
        p = ctx.g.add(Op.CLIP, (scores,), width=k, low=-1.0, high=1.0)
        p = ctx.g.add(Op.AFFINE, (p,), width=k, scale=0.5, shift=0.5)
    else:
        p = ctx.g.add(Op.LINK, (scores,), width=k, kind=Link.SIGMOID)
    if k == 1:
        return ctx.g.add(Op.BINARY_PROBA, (p,), width=2)
    return ctx.g.add(Op.NORMALIZE, (p,), width=k, norm="l1", zero="uniform")


def _decision_dtype(est: Any) -> str:
    """``X @ coef_.T + intercept_``: fitted on float32, SGD/Perceptron/PassiveAggressive keep
    coef_ float32 (and a multiclass intercept_ float32), so a float32 X gives float32 scores and
    a float64 X float64 ("input"); a float64 intercept_ promotes. The values: docs/exactness.md
    "Linear models fitted on float32"."""
    coef, icpt = np.asarray(est.coef_), np.asarray(getattr(est, "intercept_", 0.0))
    return "input" if coef.dtype == icpt.dtype == np.float32 else "float64"


@register_head(*CLASSIFIERS)
def head_linear_classifier(est: Any, ctx: Context, flow: Flow) -> Head:
    require_fitted(est, "classes_")
    scores, k, _ = _linear(est, ctx, flow)
    if k == 1:  # LinearClassifierMixin.predict: (scores > 0) picks classes_[1]
        label = ctx.g.add(Op.THRESHOLD, (scores,), dtype="int64", width=1, value=0.0,
                          strict=True)
    else:
        label = ctx.g.add(Op.ARGMAX, (scores,), dtype="int64", width=1)
    outputs = {"decision_function": scores, "predict": label}
    methods = {
        "predict": MethodSpec("predict", labels=np.asarray(est.classes_)),
        "decision_function": MethodSpec("decision_function", squeeze=k == 1,
                                        dtype=_decision_dtype(est)),
    }
    proba = None
    if isinstance(est, LogisticRegression):
        if k == 1:
            proba = _ovr_proba(ctx, scores, 1, huber=False)
        else:
            proba = ctx.g.add(Op.LINK, (scores,), width=k, kind=Link.SOFTMAX)
    elif isinstance(est, SGDClassifier) and est.loss in ("log_loss", "modified_huber"):
        proba = _ovr_proba(ctx, scores, k, huber=est.loss == "modified_huber")
    if proba is not None:
        outputs["predict_proba"] = proba
        methods["predict_proba"] = MethodSpec("predict_proba")
        # both classes define predict_log_proba as np.log(self.predict_proba(X)); SGD's only
        # where it has predict_proba (available_if(_check_proba))
        add_log_proba(ctx.g, outputs, methods, max(k, 2))
    return Head(outputs, methods)


register_frontend(*REGRESSORS, *GLMS, library="scikit-learn", methods=("predict",),
                  notes="X @ coef_ + intercept_ in float64; GLMs with log/identity link"
                  )(convert_single)
_PROBA = (LogisticRegression, LogisticRegressionCV, SGDClassifier)
register_frontend(*_PROBA, library="scikit-learn",
                  methods=("predict", "predict_proba", "predict_log_proba",
                           "decision_function"),
                  notes="binary and multiclass; predict_proba/predict_log_proba for "
                  "LogisticRegression(CV) and SGDClassifier log_loss/modified_huber")(convert_single)
register_frontend(*[c for c in CLASSIFIERS if c not in _PROBA], library="scikit-learn",
                  methods=("predict", "decision_function"),
                  notes="binary and multiclass")(convert_single)
