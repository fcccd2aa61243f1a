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

from peregrine.frontends.base import (
    add_log_proba,
    declare_params,
    register_frontend,
    require_fitted,
    unsupported,
)
from peregrine.frontends.sklearn_pipeline import convert_single
from peregrine.frontends.steps import Context, Flow, Head, check_no_strings, register_head
from peregrine.ir import Link, Op
from peregrine.ir.spec import MethodSpec


def _linear(est: Any, ctx: Context, flow: Flow) -> tuple[str, int, bool]:
    """The LINEAR node of ``est`` on ``flow``: (node, n_outputs, coef_ was 1-D)."""
    require_fitted(est, "coef_")
    check_no_strings(est, ctx, flow)
    ctx.reject_nan(flow, est)  # check_array rejects NaN and inf in every linear model
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

# tests/test_param_audit.py: fit_intercept=False leaves intercept_ a scalar 0.0; everything
# else lives in coef_/intercept_ except the GLM link (power, link), SGD's loss (which methods)
# and LinearSVC's multi_class (coef_'s shape).
declare_params(ARDRegression, implemented="fit_intercept",
               ignored="alpha_1 alpha_2 compute_score lambda_1 lambda_2 threshold_lambda")
declare_params(BayesianRidge, implemented="fit_intercept",
               ignored="alpha_1 alpha_2 alpha_init compute_score lambda_1 lambda_2 lambda_init")
declare_params(ElasticNet, implemented="fit_intercept",
               ignored="alpha l1_ratio positive precompute selection")
declare_params(Lasso, implemented="fit_intercept",
               ignored="alpha positive precompute selection")
declare_params(ElasticNetCV, implemented="fit_intercept",
               ignored="alphas eps l1_ratio positive precompute selection")
declare_params(LassoCV, implemented="fit_intercept",
               ignored="alphas eps positive precompute selection")
declare_params(GammaRegressor, PoissonRegressor, implemented="fit_intercept",
               ignored="alpha solver")
declare_params(TweedieRegressor, implemented="fit_intercept power link", ignored="alpha solver")
declare_params(HuberRegressor, implemented="fit_intercept", ignored="alpha epsilon")
declare_params(Lars, implemented="fit_intercept",
               ignored="eps fit_path jitter n_nonzero_coefs precompute")
declare_params(LassoLars, implemented="fit_intercept",
               ignored="alpha eps fit_path jitter positive precompute")
declare_params(LarsCV, implemented="fit_intercept", ignored="eps max_n_alphas precompute")
declare_params(LassoLarsCV, implemented="fit_intercept",
               ignored="eps max_n_alphas positive precompute")
declare_params(LassoLarsIC, implemented="fit_intercept",
               ignored="criterion eps noise_variance positive precompute")
declare_params(LinearRegression, implemented="fit_intercept", ignored="positive")
declare_params(OrthogonalMatchingPursuit, implemented="fit_intercept",
               ignored="n_nonzero_coefs precompute")
declare_params(QuantileRegressor, implemented="fit_intercept",
               ignored="alpha quantile solver solver_options")
declare_params(Ridge, RidgeClassifier, implemented="fit_intercept",
               ignored="alpha positive solver")
declare_params(RidgeCV, implemented="fit_intercept",
               ignored="alpha_per_target alphas gcv_mode store_cv_results")
declare_params(RidgeClassifierCV, implemented="fit_intercept", ignored="alphas store_cv_results")
declare_params(TheilSenRegressor, implemented="fit_intercept",
               ignored="max_subpopulation n_subsamples")
declare_params(LogisticRegression, implemented="fit_intercept",
               ignored="C dual intercept_scaling l1_ratio penalty solver")
declare_params(LogisticRegressionCV, implemented="fit_intercept",
               ignored="Cs dual intercept_scaling l1_ratios penalty refit solver "
                       "use_legacy_attributes")
declare_params(LinearSVC, implemented="fit_intercept multi_class",
               ignored="C dual intercept_scaling loss penalty")
declare_params(LinearSVR, implemented="fit_intercept",
               ignored="C dual epsilon intercept_scaling loss")
declare_params(SGDClassifier, implemented="fit_intercept loss",
               ignored="alpha average epsilon eta0 l1_ratio learning_rate penalty power_t")
declare_params(SGDRegressor, implemented="fit_intercept",
               ignored="alpha average epsilon eta0 l1_ratio learning_rate loss penalty power_t")
declare_params(Perceptron, implemented="fit_intercept", ignored="alpha eta0 l1_ratio penalty")
declare_params(PassiveAggressiveClassifier, implemented="fit_intercept",
               ignored="C average loss")
declare_params(PassiveAggressiveRegressor, implemented="fit_intercept",
               ignored="C average epsilon loss")
