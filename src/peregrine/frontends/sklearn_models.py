"""scikit-learn naive Bayes, MLPs, decompositions, k-means and discriminant analysis, as pipeline
heads/steps and on their own. Every one is built from existing ops (LINEAR, SELECT,
CENTER_SCALE, UFUNC square/tanh, CLIP, LINK sigmoid/softmax, ARGMAX), keeping sklearn's order
of operations where rounding could matter:

* GaussianNB (naive_bayes.py ``_joint_log_likelihood``): log prior - 0.5 sum log(2 pi var) -
  0.5 sum (x - theta)^2 / var. The input is tiled once per class (SELECT), centred by theta
  (CENTER_SCALE: the subtraction sklearn does, not an expanded quadratic that would cancel),
  squared, and summed with weights -0.5/var (LINEAR). predict_proba = exp(jll - logsumexp) =
  softmax(jll) (LINK SOFTMAX, max-subtracted); predict_log_proba = jll - logsumexp(jll) (LINK
  LOG_SOFTMAX), finite where predict_proba underflows.
* Bernoulli/Multinomial/ComplementNB: jll is affine in X (LINEAR), after BINARIZE for
  BernoulliNB(binarize=t). QDA: (x - mean_k) @ (R_k * S_k^-1/2), squared and summed per class.
* MLP (neural_network/_multilayer_perceptron.py ``_forward_pass_fast``): LINEAR per layer in
  float64 (float32 input times float64 coefs_ promotes), relu = clip(x, 0, inf), tanh, logistic
  = expit; output softmax, or logistic with predict = (p > 0.5) (LabelBinarizer threshold).
* PCA/IncrementalPCA (decomposition/_base.py ``transform``): (X @ C.T - mean @ C.T) / scale
  with sqrt(explained_variance_) clamped to eps when whiten; TruncatedSVD: X @ C.T. PCA's
  score_samples: see ``head_pca``.
* KMeans: transform = euclidean_distances, which sklearn computes expanded
  (sqrt(max(|x|^2 - 2 x.c + |c|^2, 0))), so we do too; predict = argmin(|c|^2 - 2 x.c) as its
  Cython _labels_inertia, i.e. argmax(2 x.c - |c|^2).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from sklearn.cluster import KMeans, MeanShift, MiniBatchKMeans
from sklearn.decomposition import PCA, IncrementalPCA, TruncatedSVD
from sklearn.discriminant_analysis import (
    LinearDiscriminantAnalysis,
    QuadraticDiscriminantAnalysis,
)
from sklearn.naive_bayes import BernoulliNB, ComplementNB, GaussianNB, MultinomialNB
from sklearn.neural_network import MLPClassifier, MLPRegressor

from peregrine.frontends.base import (
    add_log_proba,
    declare_params,
    register_frontend,
    require_fitted,
    unsupported,
)
from peregrine.frontends.sklearn_pipeline import convert_single
from peregrine.frontends.steps import (
    Context,
    Flow,
    Head,
    check_no_strings,
    convert_step,
    register_head,
    register_step,
)
from peregrine.ir import Link, Op
from peregrine.ir.spec import MethodSpec


def _numeric_input(est: Any, ctx: Context, flow: Flow) -> None:
    check_no_strings(est, ctx, flow)
    ctx.reject_nan(flow, est)  # check_array rejects NaN and inf in all of these


def _linear(ctx: Context, x: str, weight: Any, bias: Any) -> str:
    w = np.asarray(weight, dtype=np.float64)
    b = np.broadcast_to(np.asarray(bias, dtype=np.float64), (w.shape[1],)).copy()
    return ctx.g.add(Op.LINEAR, (x,), width=w.shape[1], weight=w, bias=b)


def _classifier(est: Any, ctx: Context, scores: str, k: int, proba: str | None,
                decision: str | None = None) -> Head:
    """predict = classes_[argmax(scores)], plus predict_proba/decision_function when given."""
    label = ctx.g.add(Op.ARGMAX, (scores,), dtype="int64", width=1)
    outputs = {"predict": label}
    methods = {"predict": MethodSpec("predict", labels=np.asarray(est.classes_))}
    if proba is not None:
        outputs["predict_proba"] = proba
        methods["predict_proba"] = MethodSpec("predict_proba")
    if decision is not None:
        outputs["decision_function"] = decision
        methods["decision_function"] = MethodSpec("decision_function", squeeze=k == 2)
    return Head(outputs, methods)


def nb_classifier(est: Any, ctx: Context, jll: str, k: int) -> Head:
    """A naive Bayes head from its joint log-likelihood (_BaseNB): predict = argmax(jll),
    predict_proba = exp(predict_log_proba) = softmax(jll), predict_log_proba = jll -
    logsumexp(jll), finite where the probability underflows."""
    head = _classifier(est, ctx, jll, k, _softmax(ctx, jll, k))
    add_log_proba(ctx.g, head.outputs, head.methods, k, scores=jll)
    return head


def _softmax(ctx: Context, x: str, k: int) -> str:
    return ctx.g.add(Op.LINK, (x,), width=k, kind=Link.SOFTMAX)


def _centered_tiles(ctx: Context, flow: Flow, centers: np.ndarray) -> str:
    """(n, k*m): block i is x - centers[i] (the subtraction done as sklearn does it)."""
    k, m = centers.shape
    tiled = ctx.g.add(Op.SELECT, (flow.node,), width=k * m, columns=np.tile(np.arange(m), k))
    return ctx.g.add(Op.CENTER_SCALE, (tiled,), width=k * m, center=centers.ravel(),
                     scale=np.ones(k * m))


def block_sums(ctx: Context, x: str, weights: np.ndarray, bias: Any) -> str:
    """(n, k): column i is block i of ``x``'s k blocks of m columns summed with per-entry
    ``weights`` (k, m), plus ``bias[i]``. One LINEAR per block on its SELECT, not one LINEAR
    with a block-diagonal weight: a square that overflowed to infinity in one class's block
    met the other classes' zero weights there, and 0 * inf made every class NaN (QDA,
    GaussianMixture on a row past ~1e154), where scikit-learn sums each class alone."""
    w = np.asarray(weights, dtype=np.float64)
    k, m = w.shape
    b = np.broadcast_to(np.asarray(bias, dtype=np.float64), (k,))
    parts = []
    for i in range(k):
        block = ctx.g.add(Op.SELECT, (x,), width=m, columns=np.arange(i * m, (i + 1) * m))
        parts.append(_linear(ctx, block, w[i].reshape(m, 1), b[i:i + 1]))
    return parts[0] if k == 1 else ctx.g.add(Op.CONCAT, tuple(parts), width=k)


# ---------------------------------------------------------------------- naive Bayes --


@register_head(GaussianNB)
def head_gaussian_nb(est: Any, ctx: Context, flow: Flow) -> Head:
    require_fitted(est, "theta_", "var_", "class_prior_")
    _numeric_input(est, ctx, flow)
    theta, var = np.asarray(est.theta_, np.float64), np.asarray(est.var_, np.float64)
    k, m = theta.shape
    # _joint_log_likelihood's order: log(prior) + (c - 0.5 * sum((x - theta)**2 / var)),
    # c = -0.5 * sum(log(2 pi var)). Dividing before the sum is where scikit-learn overflows
    # (a row past ~1e153 gives -inf there, not a finite number from folded weights)
    sq = ctx.g.add(Op.UFUNC, (_centered_tiles(ctx, flow, theta),), width=k * m, name="square")
    scaled = ctx.g.add(Op.CENTER_SCALE, (sq,), width=k * m, center=np.zeros(k * m),
                       scale=var.ravel())
    sums = block_sums(ctx, scaled, np.ones((k, m)), 0.0)
    n_ij = ctx.g.add(Op.AFFINE, (sums,), width=k, scale=np.full(k, -0.5),
                     shift=-0.5 * np.sum(np.log(2.0 * np.pi * var), axis=1))
    jll = ctx.g.add(Op.AFFINE, (n_ij,), width=k, scale=np.ones(k),
                    shift=np.log(np.asarray(est.class_prior_, np.float64)))
    return nb_classifier(est, ctx, jll, k)


@register_head(BernoulliNB, MultinomialNB, ComplementNB)
def head_discrete_nb(est: Any, ctx: Context, flow: Flow) -> Head:
    require_fitted(est, "feature_log_prob_", "class_log_prior_")
    _numeric_input(est, ctx, flow)
    flp = np.asarray(est.feature_log_prob_, np.float64)
    prior = np.asarray(est.class_log_prior_, np.float64)
    x = flow.node
    if isinstance(est, BernoulliNB):
        if est.binarize is not None:
            x = ctx.g.add(Op.BINARIZE, (x,), width=flow.width, threshold=float(est.binarize))
        neg = np.log(1 - np.exp(flp))
        weight, bias = (flp - neg).T, prior + neg.sum(axis=1)
    elif isinstance(est, ComplementNB):
        weight, bias = flp.T, prior if len(est.classes_) == 1 else np.zeros(len(prior))
    else:
        weight, bias = flp.T, prior
    k = flp.shape[0]
    return nb_classifier(est, ctx, _linear(ctx, x, weight, bias), k)


# ----------------------------------------------------------------------------- MLP --


def _mlp_forward(est: Any, ctx: Context, flow: Flow) -> str:
    require_fitted(est, "coefs_", "intercepts_")
    _numeric_input(est, ctx, flow)
    x = flow.node
    last = len(est.coefs_) - 1
    for i, (w, b) in enumerate(zip(est.coefs_, est.intercepts_)):
        x = _linear(ctx, x, w, b)
        act = est.activation if i < last else est.out_activation_
        width = np.shape(w)[1]
        if act == "relu":  # np.maximum(x, 0) == clip(x, 0, inf)
            x = ctx.g.add(Op.CLIP, (x,), width=width, low=0.0, high=float("inf"))
        elif act == "tanh":
            x = ctx.g.add(Op.UFUNC, (x,), width=width, name="tanh")
        elif act == "logistic":
            x = ctx.g.add(Op.LINK, (x,), width=width, kind=Link.SIGMOID)
        elif act == "exp":  # MLPRegressor(loss="poisson")
            x = ctx.g.add(Op.LINK, (x,), width=width, kind=Link.EXP)
        elif act == "softmax":
            x = _softmax(ctx, x, width)
        elif act != "identity":
            raise unsupported(est, f"activation {act!r}", "identity, logistic, tanh, relu")
    return x


@register_head(MLPClassifier)
def head_mlp_classifier(est: Any, ctx: Context, flow: Flow) -> Head:
    out = _mlp_forward(est, ctx, flow)
    k = len(est.classes_)
    if est.out_activation_ == "softmax":
        head = _classifier(est, ctx, out, k, out)
    else:
        if k != 2 or est.n_outputs_ != 1:
            raise unsupported(est, "multilabel targets", "binary and multiclass")
        label = ctx.g.add(Op.THRESHOLD, (out,), dtype="int64", width=1, value=0.5,
                          strict=True)
        proba = ctx.g.add(Op.BINARY_PROBA, (out,), width=2)
        head = Head({"predict": label, "predict_proba": proba},
                    {"predict": MethodSpec("predict", labels=np.asarray(est.classes_)),
                     "predict_proba": MethodSpec("predict_proba")})
    add_log_proba(ctx.g, head.outputs, head.methods, k)  # np.log(predict_proba(X))
    return head


@register_head(MLPRegressor)
def head_mlp_regressor(est: Any, ctx: Context, flow: Flow) -> Head:
    out = _mlp_forward(est, ctx, flow)
    return Head({"predict": out}, {"predict": MethodSpec("predict", squeeze=est.n_outputs_ == 1)})


# ------------------------------------------------------------------- decompositions --


def _out(flow: Flow, node: str, width: int) -> Flow:
    return Flow(node, (None,) * width, nan=False, keeps_dtype=False)


@register_step(PCA, IncrementalPCA)
def step_pca(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "components_", "mean_")
    _numeric_input(est, ctx, flow)
    comp = np.asarray(est.components_, np.float64)
    w, b = comp.T, -(np.asarray(est.mean_, np.float64) @ comp.T)
    if est.whiten:
        scale = np.sqrt(np.asarray(est.explained_variance_, np.float64))
        scale[scale < np.finfo(scale.dtype).eps] = np.finfo(scale.dtype).eps
        node = _linear(ctx, flow.node, w, b)
        node = ctx.g.add(Op.CENTER_SCALE, (node,), width=len(scale),
                         center=np.zeros(len(scale)), scale=scale)
    else:
        node = _linear(ctx, flow.node, w, b)
    return _out(flow, node, comp.shape[0])


@register_head(PCA)
def head_pca(est: Any, ctx: Context, flow: Flow) -> Head:
    """transform, and score_samples: the log-likelihood under the probabilistic PCA model
    (decomposition/_pca.py ``score_samples``), in sklearn's order: Xr = X - mean_ (float64),
    -0.5 * sum(Xr * (Xr @ P), axis=1) - 0.5 * (d log(2 pi) - fast_logdet(P)) with P =
    ``get_precision()`` (read from the fitted state, as sklearn does each call). The row-wise
    product is a POLYNOMIAL of degree 2 over [Xr, Xr @ P] (column k times column d + k), the
    sum a LINEAR of ones, then -0.5 times it less the constant (an AFFINE)."""
    from sklearn.utils.extmath import fast_logdet

    transform = step_pca(est, ctx, flow).node  # checks fitted state and input
    source = est.get_precision()  # float32 when fitted on float32, as the constant below
    precision = np.asarray(source, np.float64)
    d = flow.width
    xr = ctx.g.add(Op.CENTER_SCALE, (flow.node,), width=d,
                   center=np.asarray(est.mean_, np.float64), scale=np.ones(d))
    xp = _linear(ctx, xr, precision, 0.0)
    both = ctx.g.add(Op.CONCAT, (xr, xp), width=2 * d)
    powers = np.hstack([np.eye(d, dtype=np.int64), np.eye(d, dtype=np.int64)])
    prod = ctx.g.add(Op.POLYNOMIAL, (both,), width=d, powers=powers)
    const = float(0.5 * (d * math.log(2.0 * np.pi) - fast_logdet(source)))  # sklearn's types
    # summed, then times -0.5 (-0.5 folded into the weights is exact scaling, but kept the
    # sum finite where scikit-learn's overflows to infinity on a row past ~1e154)
    total = _linear(ctx, prod, np.ones((d, 1)), 0.0)
    ll = ctx.g.add(Op.AFFINE, (total,), width=1, scale=np.full(1, -0.5), shift=np.full(1, -const))
    # fitted on float32, sklearn computes in float32 for float32 input (float64 for float64)
    dtype = "input" if np.asarray(est.mean_).dtype == np.float32 else "float64"
    return Head({"transform": transform, "score_samples": ll},
                {"transform": MethodSpec("transform", dtype=dtype),
                 "score_samples": MethodSpec("score_samples", squeeze=True, dtype=dtype)},
                allow_nan=True)


@register_step(TruncatedSVD)
def step_truncated_svd(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "components_")
    _numeric_input(est, ctx, flow)
    comp = np.asarray(est.components_, np.float64)
    return _out(flow, _linear(ctx, flow.node, comp.T, 0.0), comp.shape[0])


def _squared_norms(ctx: Context, flow: Flow) -> str:
    sq = ctx.g.add(Op.UFUNC, (flow.node,), width=flow.width, name="square")
    return _linear(ctx, sq, np.ones((flow.width, 1)), 0.0)


@register_step(KMeans, MiniBatchKMeans)
def step_kmeans(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "cluster_centers_")
    _numeric_input(est, ctx, flow)
    c = np.asarray(est.cluster_centers_, np.float64)
    xx = _squared_norms(ctx, flow)
    both = ctx.g.add(Op.CONCAT, (flow.node, xx), width=flow.width + 1)
    w = np.vstack([-2.0 * c.T, np.ones((1, len(c)))])
    d2 = _linear(ctx, both, w, np.einsum("ij,ij->i", c, c))
    d2 = ctx.g.add(Op.CLIP, (d2,), width=len(c), low=0.0, high=float("inf"))
    return _out(flow, ctx.g.add(Op.UFUNC, (d2,), width=len(c), name="sqrt"), len(c))


@register_head(KMeans, MiniBatchKMeans)
def head_kmeans(est: Any, ctx: Context, flow: Flow) -> Head:
    c = np.asarray(est.cluster_centers_, np.float64)
    transform = step_kmeans(est, ctx, flow).node
    score = _linear(ctx, flow.node, 2.0 * c.T, -np.einsum("ij,ij->i", c, c))
    label = ctx.g.add(Op.ARGMAX, (score,), dtype="int64", width=1)
    return Head({"predict": label, "transform": transform},
                {"predict": MethodSpec("predict", labels=np.arange(len(c), dtype=np.int32)),
                 "transform": MethodSpec("transform")})


@register_head(MeanShift)
def head_mean_shift(est: Any, ctx: Context, flow: Flow) -> Head:
    """MeanShift.predict = pairwise_distances_argmin(X, cluster_centers_): the nearest centre
    by the expanded squared distance (|c|^2 - 2 x.c, |x|^2 being common), first on ties, as
    KMeans.predict; labels are intp as pairwise_distances_argmin returns them."""
    require_fitted(est, "cluster_centers_")
    _numeric_input(est, ctx, flow)
    c = np.asarray(est.cluster_centers_, np.float64)
    score = _linear(ctx, flow.node, 2.0 * c.T, -np.einsum("ij,ij->i", c, c))
    label = ctx.g.add(Op.ARGMAX, (score,), dtype="int64", width=1)
    return Head({"predict": label},
                {"predict": MethodSpec("predict", labels=np.arange(len(c), dtype=np.intp))})


# ------------------------------------------------------------- discriminant analysis --


@register_step(LinearDiscriminantAnalysis)
def step_lda(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "scalings_")
    _numeric_input(est, ctx, flow)
    if est.solver not in ("svd", "eigen"):
        raise unsupported(est, f"transform with solver={est.solver!r}", "svd, eigen")
    scal = np.asarray(est.scalings_, np.float64)[:, : est._max_components]
    x = flow.node
    if est.solver == "svd":  # (X - xbar_) @ scalings_
        x = ctx.g.add(Op.CENTER_SCALE, (x,), width=flow.width, center=est.xbar_,
                      scale=np.ones(flow.width))
    return _out(flow, _linear(ctx, x, scal, 0.0), scal.shape[1])


@register_head(LinearDiscriminantAnalysis)
def head_lda(est: Any, ctx: Context, flow: Flow) -> Head:
    require_fitted(est, "coef_", "classes_")
    _numeric_input(est, ctx, flow)
    coef = np.asarray(est.coef_, np.float64)
    scores = _linear(ctx, flow.node, coef.T, est.intercept_)
    k = len(est.classes_)
    if k == 2:  # LinearClassifierMixin: one column; proba [1 - expit, expit]
        label = ctx.g.add(Op.THRESHOLD, (scores,), dtype="int64", width=1, value=0.0)
        p = ctx.g.add(Op.LINK, (scores,), width=1, kind=Link.SIGMOID)
        head = Head({"predict": label, "predict_proba": ctx.g.add(Op.BINARY_PROBA, (p,),
                                                                  width=2),
                     "decision_function": scores},
                    {"predict": MethodSpec("predict", labels=np.asarray(est.classes_)),
                     "predict_proba": MethodSpec("predict_proba"),
                     "decision_function": MethodSpec("decision_function", squeeze=True)})
    else:
        head = _classifier(est, ctx, scores, k, _softmax(ctx, scores, k), scores)
    # predict_log_proba: prediction[prediction == 0.0] += smallest_normal, then log
    add_log_proba(ctx.g, head.outputs, head.methods, k, floor_zeros=True)
    if est.solver in ("svd", "eigen"):
        head.outputs["transform"] = step_lda(est, ctx, flow).node
        head.methods["transform"] = MethodSpec("transform")
    return head


@register_head(QuadraticDiscriminantAnalysis)
def head_qda(est: Any, ctx: Context, flow: Flow) -> Head:
    require_fitted(est, "rotations_", "scalings_", "means_")
    _numeric_input(est, ctx, flow)
    means = np.asarray(est.means_, np.float64)
    k, m = means.shape
    blocks = [np.asarray(R) * (np.asarray(S) ** -0.5) for R, S in
              zip(est.rotations_, est.scalings_)]
    r = blocks[0].shape[1]
    proj = np.zeros((k * m, k * r))  # block-diagonal: (x - mean_i) @ (R_i * S_i^-1/2)
    for i, b in enumerate(blocks):
        proj[i * m:(i + 1) * m, i * r:(i + 1) * r] = b
    x2 = _linear(ctx, _centered_tiles(ctx, flow, means), proj, 0.0)
    sq = ctx.g.add(Op.UFUNC, (x2,), width=k * r, name="square")
    u = np.asarray([np.sum(np.log(s)) for s in est.scalings_])
    scores = block_sums(ctx, sq, np.full((k, r), -0.5), -0.5 * u + np.log(est.priors_))
    decision = scores
    if k == 2:
        decision = _linear(ctx, scores, np.array([[-1.0], [1.0]]), 0.0)
    # predict_log_proba: (scores - max) - log(sum(exp(scores - max))), the max subtracted
    # first (torch's log_softmax, the ACTIVATION op, has that order; Link.LOG_SOFTMAX's
    # scores - (max + log(sum)) loses log(2) to rounding on tied scores past ~1e16);
    # predict_proba = exp(predict_log_proba), as DiscriminantAnalysisPredictionMixin does
    log_proba = ctx.g.add(Op.ACTIVATION, (scores,), width=k, kind="log_softmax",
                          net_dtype="float64")
    proba = ctx.g.add(Op.LINK, (log_proba,), width=k, kind=Link.EXP)
    head = _classifier(est, ctx, scores, k, proba, decision)
    head.outputs["predict_log_proba"] = log_proba
    head.methods["predict_log_proba"] = MethodSpec("predict_log_proba")
    return head


register_frontend(GaussianNB, BernoulliNB, MultinomialNB, ComplementNB, MLPClassifier,
                  library="scikit-learn",
                  methods=("predict", "predict_proba", "predict_log_proba"),
                  notes="binary and multiclass; float64 like sklearn")(convert_single)
register_frontend(QuadraticDiscriminantAnalysis, library="scikit-learn",
                  methods=("predict", "predict_proba", "predict_log_proba",
                           "decision_function"),
                  notes="binary and multiclass; float64 like sklearn")(convert_single)
register_frontend(LinearDiscriminantAnalysis, library="scikit-learn",
                  methods=("predict", "predict_proba", "predict_log_proba",
                           "decision_function", "transform"),
                  notes="binary and multiclass; transform for solver svd/eigen")(convert_single)
register_frontend(MLPRegressor, library="scikit-learn", methods=("predict",),
                  notes="identity/logistic/tanh/relu")(convert_single)
register_frontend(PCA, library="scikit-learn", methods=("transform", "score_samples"),
                  notes="whiten included")(convert_single)
register_frontend(IncrementalPCA, TruncatedSVD, library="scikit-learn",
                  methods=("transform",), notes="whiten included")(convert_single)
register_frontend(KMeans, MiniBatchKMeans, library="scikit-learn",
                  methods=("predict", "transform"), notes="")(convert_single)
register_frontend(MeanShift, library="scikit-learn", methods=("predict",),
                  notes="predict: the nearest of cluster_centers_")(convert_single)

__all__ = ["convert_step"]

# tests/test_param_audit.py
declare_params(GaussianNB, ignored="priors var_smoothing")
declare_params(BernoulliNB, implemented="binarize",
               ignored="alpha class_prior fit_prior force_alpha")
declare_params(MultinomialNB, ignored="alpha class_prior fit_prior force_alpha")
declare_params(ComplementNB, ignored="alpha class_prior fit_prior force_alpha norm")
_MLP_FIT = ("alpha batch_size beta_1 beta_2 epsilon hidden_layer_sizes learning_rate "
            "learning_rate_init max_fun momentum nesterovs_momentum power_t solver")
declare_params(MLPClassifier, implemented="activation", ignored=_MLP_FIT)
declare_params(MLPRegressor, implemented="activation loss", ignored=_MLP_FIT)
declare_params(PCA, implemented="whiten",
               ignored="iterated_power n_components n_oversamples power_iteration_normalizer "
                       "svd_solver")
declare_params(IncrementalPCA, implemented="whiten", ignored="batch_size n_components")
declare_params(TruncatedSVD, ignored="algorithm n_components n_iter n_oversamples "
                                     "power_iteration_normalizer")
declare_params(KMeans, ignored="algorithm init n_clusters")
declare_params(MeanShift, ignored="bandwidth bin_seeding cluster_all min_bin_freq seeds")
declare_params(MiniBatchKMeans, ignored="batch_size compute_labels init init_size "
                                        "max_no_improvement n_clusters reassignment_ratio")
declare_params(LinearDiscriminantAnalysis, implemented="solver n_components",
               ignored="covariance_estimator priors shrinkage store_covariance")
declare_params(QuadraticDiscriminantAnalysis, implemented="solver",
               ignored="covariance_estimator priors reg_param shrinkage store_covariance")
