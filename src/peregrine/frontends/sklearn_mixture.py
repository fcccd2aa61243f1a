"""GaussianMixture and BayesianGaussianMixture (predict, predict_proba, score_samples) from
existing ops.

Both score a row by ``_estimate_weighted_log_prob`` = ``_estimate_log_gaussian_prob(X,
means_, precisions_cholesky_, covariance_type)`` plus per-component constants (log weights;
for the Bayesian mixture also its digamma terms, ``_estimate_log_prob`` and
``_estimate_log_weights``), computed as sklearn.mixture._gaussian_mixture does:

* full/tied: ``y = X @ P_k - mu_k @ P_k`` (one LINEAR for all components), ``sum(y**2)`` per
  component (a LINEAR summing each block of squares);
* diag: ``sum(mu**2 * prec) - 2 X @ (mu * prec).T + X**2 @ prec.T``;
* spherical: ``sum(mu**2) * prec - 2 (X @ mu.T) * prec + |x|^2 prec``;

then ``-0.5 * (d log(2 pi) + log_prob) + log_det`` (+ the constants). predict = argmax,
score_samples = the row's logsumexp (a running np.logaddexp over the components, LOG_ADD_EXP),
predict_proba = exp(weighted log prob - logsumexp) (SOFTMAX, the same quantity max-shifted).
Rounding differs from sklearn's only in summation order (a few ulps of the log-probabilities).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import digamma
from sklearn.mixture import BayesianGaussianMixture, GaussianMixture

from peregrine.frontends.base import declare_params, register_frontend, require_fitted, unsupported
from peregrine.frontends.sklearn_models import _linear, _numeric_input, block_sums
from peregrine.frontends.sklearn_pipeline import convert_single
from peregrine.frontends.steps import Context, Flow, Head, register_head
from peregrine.ir import Link, Op
from peregrine.ir.spec import MethodSpec


def _log_det(prec_chol: np.ndarray, cov: str, d: int, k: int) -> np.ndarray:
    """_compute_log_det_cholesky, per component."""
    if cov == "full":
        return np.array([np.sum(np.log(np.diag(p))) for p in prec_chol])
    if cov == "tied":
        return np.full(k, np.sum(np.log(np.diag(prec_chol))))
    if cov == "diag":
        return np.sum(np.log(prec_chol), axis=1)
    return d * np.log(prec_chol)


def _log_prob(ctx: Context, x: str, mu: np.ndarray, prec_chol: np.ndarray, cov: str) -> str:
    """The ``log_prob`` term of _estimate_log_gaussian_prob: (n, k)."""
    k, d = mu.shape
    if cov in ("full", "tied"):
        chols = prec_chol if cov == "full" else np.broadcast_to(prec_chol, (k, d, d))
        w = np.hstack(list(chols))  # (d, k*d)
        b = -np.concatenate([m @ p for m, p in zip(mu, chols)])
        y = _linear(ctx, x, w, b)
        sq = ctx.g.add(Op.UFUNC, (y,), width=k * d, name="square")
        return block_sums(ctx, sq, np.ones((k, d)), 0.0)  # (not one block-diagonal LINEAR)
    prec = prec_chol ** 2
    x2 = ctx.g.add(Op.UFUNC, (x,), width=d, name="square")
    both = ctx.g.add(Op.CONCAT, (x, x2), width=2 * d)
    if cov == "diag":
        w = np.vstack([-2.0 * (mu * prec).T, prec.T])
        return _linear(ctx, both, w, np.sum(mu ** 2 * prec, axis=1))
    w = np.vstack([-2.0 * mu.T * prec, np.ones((d, 1)) * prec])
    return _linear(ctx, both, w, np.sum(mu ** 2, axis=1) * prec)


def _constants(est: Any, d: int) -> np.ndarray:
    """Per-component additions to -0.5 * log_prob: log_det, -0.5 d log(2 pi) and the weights;
    for the Bayesian mixture the _estimate_log_prob terms and _estimate_log_weights."""
    k = len(est.means_)
    c = _log_det(np.asarray(est.precisions_cholesky_, np.float64), est.covariance_type, d, k)
    c = c - 0.5 * d * np.log(2 * np.pi)
    if isinstance(est, BayesianGaussianMixture):
        dof = np.asarray(est.degrees_of_freedom_, np.float64)
        log_lambda = d * np.log(2.0) + np.sum(
            digamma(0.5 * (dof - np.arange(0, d)[:, np.newaxis])), 0)
        c = c - 0.5 * d * np.log(dof) + 0.5 * (log_lambda - d / est.mean_precision_)
        return c + est._estimate_log_weights()
    return c + np.log(np.asarray(est.weights_, np.float64))


@register_head(GaussianMixture, BayesianGaussianMixture)
def head_mixture(est: Any, ctx: Context, flow: Flow) -> Head:
    require_fitted(est, "means_", "precisions_cholesky_")
    _numeric_input(est, ctx, flow)
    cov = est.covariance_type
    if cov not in ("full", "tied", "diag", "spherical"):
        raise unsupported(est, f"covariance_type={cov!r}", "full, tied, diag, spherical")
    mu = np.asarray(est.means_, np.float64)
    k, d = mu.shape
    log_prob = _log_prob(ctx, flow.node, mu, np.asarray(est.precisions_cholesky_, np.float64),
                         cov)
    wlp = ctx.g.add(Op.AFFINE, (log_prob,), width=k, scale=-0.5, shift=_constants(est, d))
    cols = [ctx.g.add(Op.SELECT, (wlp,), width=1, columns=np.array([j])) for j in range(k)]
    score = ctx.g.add(Op.LOG_ADD_EXP, tuple(cols), width=1, columns=[np.array([0])] * k,
                      starts=np.array([0, k]))
    # exp(wlp - logsumexp(wlp)) as _estimate_log_prob_resp computes it, not a softmax: the
    # same numbers but where wlp is huge (a row past ~1e150), where logsumexp's log(k) is
    # lost to rounding and scikit-learn answers exp(0) = 1 for every tied component
    log_resp = ctx.g.add(Op.LINK, (wlp,), width=k, kind=Link.LOG_SOFTMAX)
    proba = ctx.g.add(Op.LINK, (log_resp,), width=k, kind=Link.EXP)
    label = ctx.g.add(Op.ARGMAX, (wlp,), dtype="int64", width=1)
    return Head({"predict": label, "predict_proba": proba, "score_samples": score},
                {"predict": MethodSpec("predict", labels=np.arange(k, dtype=np.intp)),
                 "predict_proba": MethodSpec("predict_proba"),
                 "score_samples": MethodSpec("score_samples", squeeze=True)})


register_frontend(GaussianMixture, BayesianGaussianMixture, library="scikit-learn",
                  methods=("predict", "predict_proba", "score_samples"),
                  notes="covariance full/tied/diag/spherical")(convert_single)

# tests/test_param_audit.py: covariance_type decides the fitted precisions' shape
declare_params(GaussianMixture, implemented="covariance_type",
               ignored="init_params means_init n_components precisions_init reg_covar "
                       "verbose_interval weights_init")
declare_params(BayesianGaussianMixture, implemented="covariance_type "
                                                    "weight_concentration_prior_type",
               ignored="covariance_prior degrees_of_freedom_prior init_params "
                       "mean_precision_prior mean_prior n_components reg_covar verbose_interval "
                       "weight_concentration_prior")
