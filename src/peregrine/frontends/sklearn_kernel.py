"""scikit-learn kernel methods and neighbours, as pipeline heads/steps and on their own.

* SVC/NuSVC/SVR/NuSVR/OneClassSVM (svm/_base.py, libsvm's svm.cpp ``svm_predict_values``):
  the kernel of each row against the support vectors (KERNEL, form "libsvm": rbf from the
  squared differences as ``k_function``, poly by libsvm's ``powi``), then one LINEAR giving
  libsvm's decision value per class pair: sum of ``_dual_coef_`` * kernel + ``_intercept_``
  (libsvm's -rho). sklearn negates it for binary classifiers; 'ovr' applies
  ``_ovr_decision_function(dec < 0, -dec, k)`` (OVR_DECISION). predict is libsvm's vote: pair
  (i, j) votes i when dec > 0, else j, the first class with most votes wins (a LINEAR of
  ``dec > 0`` then ARGMAX); with break_ties the argmax of the 'ovr' decision. predict_proba is
  libsvm's ``svm_predict_probability`` (SVM_PROBA).
* KNeighborsClassifier/Regressor: one KNN node (distances to ``_fit_X``, the k nearest, sklearn's
  weights); classifiers vote with one-hot rows of the class codes.
* KernelPCA: ``pairwise_kernels`` vs ``X_fit_`` (KERNEL, form "pairwise"), KernelCenterer,
  then the eigenvectors scaled by 1/sqrt(eigenvalue) as ``KernelPCA.transform``.

Every estimator here rejects NaN and inf (check_array), so the compiled model does too.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.sparse import issparse
from sklearn.decomposition import KernelPCA
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.svm import SVC, SVR, NuSVC, NuSVR, OneClassSVM

from peregrine.frontends.base import (
    add_log_proba,
    declare_params,
    register_frontend,
    require_fitted,
    unsupported,
)
from peregrine.frontends.sklearn_models import _linear, _numeric_input, _out
from peregrine.frontends.sklearn_pipeline import convert_single
from peregrine.frontends.steps import Context, Flow, Head, register_head, register_step
from peregrine.ir import Op
from peregrine.ir.ops import class_pairs
from peregrine.ir.spec import MethodSpec

KERNELS = ("linear", "poly", "rbf", "sigmoid")


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


# ---------------------------------------------------------------------------- SVMs --


def _check_kernel(est: Any, supported: tuple[str, ...]) -> None:
    if callable(est.kernel) or est.kernel not in supported:
        what = "a callable kernel" if callable(est.kernel) else f"kernel={est.kernel!r}"
        raise unsupported(est, what, ", ".join(supported))


def convert_svm(model: Any) -> Any:
    """Standalone frontend; the kernel is checked first, since sklearn records no
    n_features_in_ for a callable kernel."""
    _check_kernel(model, KERNELS)
    return convert_single(model)


def _svm_kernel(est: Any, ctx: Context, flow: Flow) -> str:
    _check_kernel(est, KERNELS)
    require_fitted(est, "support_vectors_", "_dual_coef_", "_intercept_", "_gamma")
    _numeric_input(est, ctx, flow)
    if getattr(est, "_sparse", False):
        raise unsupported(est, "a model fitted on sparse input", "dense fits")
    sv = _f64(est.support_vectors_)
    return ctx.g.add(Op.KERNEL, (flow.node,), width=sv.shape[0], kind=est.kernel, vectors=sv,
                     gamma=float(est._gamma), coef0=float(est.coef0), degree=int(est.degree),
                     form="libsvm")


def _pair_weights(est: Any) -> np.ndarray:
    """(n_SV, P): libsvm's coefficients of each support vector in each pair's sum."""
    coef = _f64(est._dual_coef_)
    n_sv = np.asarray(est._n_support, dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(n_sv)])
    k = len(n_sv)
    w = np.zeros((coef.shape[1], len(class_pairs(k))))
    for p, (i, j) in enumerate(class_pairs(k)):
        si, sj = slice(start[i], start[i + 1]), slice(start[j], start[j + 1])
        w[si, p] = coef[j - 1, si]
        w[sj, p] = coef[i, sj]
    return w


def _libsvm_votes(ctx: Context, dec: str, k: int) -> str:
    """svm_predict_values' vote counts: vote_i = sum (dec_p > 0), vote_j = sum (dec_p <= 0),
    a LINEAR of the 0/1 indicators (small integers, exact)."""
    pairs = class_pairs(k)
    pos = ctx.g.add(Op.BINARIZE, (dec,), width=len(pairs), threshold=0.0)
    w, b = np.zeros((len(pairs), k)), np.zeros(k)
    for p, (i, j) in enumerate(pairs):
        w[p, i], w[p, j] = 1.0, -1.0
        b[j] += 1.0
    return _linear(ctx, pos, w, b)


@register_head(SVC, NuSVC)
def head_svc(est: Any, ctx: Context, flow: Flow) -> Head:
    if est.break_ties and est.decision_function_shape == "ovo":  # BaseSVC.predict raises
        raise unsupported(est, "break_ties=True with decision_function_shape='ovo' (sklearn's "
                          "predict raises ValueError)")
    kern = _svm_kernel(est, ctx, flow)
    k = len(est.classes_)
    w, b = _pair_weights(est), _f64(est._intercept_)
    dec = _linear(ctx, kern, w, b)  # libsvm's sign
    neg = _linear(ctx, kern, -w, -b)  # -dec, exactly (negation is exact)
    labels = np.asarray(est.classes_)
    votes = ctx.g.add(Op.ARGMAX, (_libsvm_votes(ctx, dec, k),), dtype="int64", width=1)
    outputs = {"predict": votes}
    if k == 2 or est.decision_function_shape == "ovo":
        outputs["decision_function"] = neg if k == 2 else dec
    else:
        pred = ctx.g.add(Op.BINARIZE, (neg,), width=k * (k - 1) // 2, threshold=0.0)  # dec<0
        ovr = ctx.g.add(Op.OVR_DECISION, (pred, neg), width=k, n_classes=k)
        outputs["decision_function"] = ovr
        if est.break_ties:
            outputs["predict"] = ctx.g.add(Op.ARGMAX, (ovr,), dtype="int64", width=1)
    methods = {"predict": MethodSpec("predict", labels=labels),
               "decision_function": MethodSpec("decision_function", squeeze=k == 2)}
    if est.probability is True and np.size(est._probA) > 0:
        proba = ctx.g.add(Op.SVM_PROBA, (dec,), width=k, n_classes=k,
                          prob_a=_f64(est._probA), prob_b=_f64(est._probB))
        outputs["predict_proba"] = proba
        methods["predict_proba"] = MethodSpec("predict_proba")
        add_log_proba(ctx.g, outputs, methods, k)  # np.log(self.predict_proba(X))
    return Head(outputs, methods)


@register_head(SVR, NuSVR)
def head_svr(est: Any, ctx: Context, flow: Flow) -> Head:
    kern = _svm_kernel(est, ctx, flow)
    dec = _linear(ctx, kern, _f64(est._dual_coef_).T, _f64(est._intercept_))
    return Head({"predict": dec}, {"predict": MethodSpec("predict", squeeze=True)})


@register_head(OneClassSVM)
def head_one_class_svm(est: Any, ctx: Context, flow: Flow) -> Head:
    kern = _svm_kernel(est, ctx, flow)
    dec = _linear(ctx, kern, _f64(est._dual_coef_).T, _f64(est._intercept_))
    # score_samples = decision_function + offset_ (a second rounding, as sklearn)
    score = ctx.g.add(Op.AFFINE, (dec,), width=1, scale=1.0, shift=float(est.offset_[0]))
    label = ctx.g.add(Op.THRESHOLD, (dec,), dtype="int64", width=1, value=0.0, strict=True)
    return Head({"predict": label, "decision_function": dec, "score_samples": score},
                {"predict": MethodSpec("predict", labels=np.array([-1, 1], dtype=np.intp)),
                 "decision_function": MethodSpec("decision_function", squeeze=True),
                 "score_samples": MethodSpec("score_samples", squeeze=True)})


# ---------------------------------------------------------------------- neighbours --

_METRIC_ALIASES = {"euclidean": "euclidean", "l2": "euclidean", "manhattan": "manhattan",
                   "l1": "manhattan", "cityblock": "manhattan", "chebyshev": "chebyshev",
                   "infinity": "chebyshev", "minkowski": "minkowski", "cosine": "cosine"}


def _whitening(est: Any, metric: str, params: dict) -> tuple[np.ndarray | None, np.ndarray | None]:
    """seuclidean and mahalanobis are euclidean distances between linearly mapped rows:
    sum((x - v)**2 / V) = |x / sqrt(V) - v / sqrt(V)|^2 and (x - v) VI (x - v)' = |(x - v) A|^2
    with A = Q sqrt(lambda) from VI's symmetric part Q diag(lambda) Q' (the quadratic form sees
    only that). Returns (per-column scale, matrix): the mapped distances differ from sklearn's
    DistanceMetric loops by rounding only (a few ulps), so the neighbours are the same except
    for near-ties that close (the tests check identical neighbours and distances to 1e-5)."""
    if metric == "seuclidean":
        v = np.asarray(params.pop("V", None), dtype=np.float64)
        if v.ndim != 1 or not (np.isfinite(v).all() and (v > 0).all()):
            raise unsupported(est, "seuclidean metric_params V", "finite, positive variances")
        return 1.0 / np.sqrt(v), None
    vi = np.asarray(params.pop("VI", None), dtype=np.float64)
    if vi.ndim != 2 or vi.shape[0] != vi.shape[1] or not np.isfinite(vi).all():
        raise unsupported(est, "mahalanobis metric_params VI", "a finite square matrix")
    lam, q = np.linalg.eigh((vi + vi.T) / 2.0)
    if lam.min() < 0.0:  # sklearn takes the root of a negative form: NaN distances
        raise unsupported(est, "mahalanobis metric_params VI with a negative eigenvalue",
                          "positive semi-definite VI")
    return None, q * np.sqrt(lam)


def _neighbours(est: Any, ctx: Context, flow: Flow) -> tuple[str, dict]:
    """The KNN input node and attributes shared by the classifier and the regressor."""
    require_fitted(est, "_fit_X", "_y", "effective_metric_")
    _numeric_input(est, ctx, flow)
    metric = est.effective_metric_
    if callable(metric) or metric not in (*_METRIC_ALIASES, "seuclidean", "mahalanobis"):
        raise unsupported(est, f"metric={metric!r}", ", ".join(
            sorted((*_METRIC_ALIASES, "seuclidean", "mahalanobis"))))
    params = dict(est.effective_metric_params_ or {})
    scale = matrix = None
    if metric in ("seuclidean", "mahalanobis"):
        scale, matrix = _whitening(est, metric, params)
        metric = "euclidean"
    metric = _METRIC_ALIASES[metric]
    p = params.pop("p", 2.0)
    if params.get("w") is None:  # minkowski's per-feature weights, None when unset
        params.pop("w", None)
    if params:
        raise unsupported(est, f"metric_params {sorted(params)}", "p")
    if metric == "minkowski" and not (np.isfinite(p) and p >= 1):
        raise unsupported(est, f"minkowski p={p!r}", "finite p >= 1")
    if callable(est.weights) or est.weights not in ("uniform", "distance"):
        what = "callable weights" if callable(est.weights) else f"weights={est.weights!r}"
        raise unsupported(est, what, "uniform, distance")
    if issparse(est._fit_X):
        # sklearn's sparse distances (sparse dot products) round differently from a dense
        # program's, so the k nearest could differ on near ties: refused, not densified
        raise unsupported(est, "a fit on sparse input (scipy.sparse _fit_X: sklearn's sparse "
                          "distance kernels round differently from a dense program, so "
                          "near-tied neighbours could differ)", "a fit on a dense array")
    fit_x = _f64(est._fit_X)
    if fit_x.ndim != 2 or fit_x.shape[1] != flow.width:
        raise unsupported(est, "a precomputed or sparse fit", "dense X")
    if int(est.n_neighbors) > fit_x.shape[0]:  # kneighbors raises on every call
        raise unsupported(est, f"n_neighbors={est.n_neighbors} with n_samples_fit_="
                          f"{fit_x.shape[0]} (sklearn's predict raises ValueError: expected "
                          "n_neighbors <= n_samples_fit)")
    node = flow.node
    if scale is not None:  # the same elementwise product on both sides: equal rows stay equal
        if scale.shape[0] != flow.width:
            raise unsupported(est, "seuclidean V of another length than the features")
        node = ctx.g.add(Op.AFFINE, (node,), width=flow.width, scale=scale, shift=0.0)
        fit_x = fit_x * scale
    elif matrix is not None:
        if matrix.shape[0] != flow.width:
            raise unsupported(est, "mahalanobis VI of another size than the features")
        node = _linear(ctx, node, matrix, 0.0)
        fit_x = fit_x @ matrix
    return node, {"metric": metric, "p": float(p), "vectors": fit_x,
                  "k": int(est.n_neighbors), "weights": est.weights}


@register_head(KNeighborsClassifier)
def head_knn_classifier(est: Any, ctx: Context, flow: Flow) -> Head:
    node, attrs = _neighbours(est, ctx, flow)
    if est.outputs_2d_:
        raise unsupported(est, "multi-output targets", "one target column")
    k = len(est.classes_)
    onehot = np.eye(k)[np.asarray(est._y, dtype=np.int64)]
    proba = ctx.g.add(Op.KNN, (node,), width=k, values=onehot, normalize=True, **attrs)
    label = ctx.g.add(Op.ARGMAX, (proba,), dtype="int64", width=1)  # mode: smallest class
    return Head({"predict": label, "predict_proba": proba},
                {"predict": MethodSpec("predict", labels=np.asarray(est.classes_)),
                 "predict_proba": MethodSpec("predict_proba")})


@register_head(KNeighborsRegressor)
def head_knn_regressor(est: Any, ctx: Context, flow: Flow) -> Head:
    node, attrs = _neighbours(est, ctx, flow)
    y = _f64(est._y)
    y2 = y.reshape(len(y), -1)
    out = ctx.g.add(Op.KNN, (node,), width=y2.shape[1], values=y2, normalize=False, **attrs)
    return Head({"predict": out}, {"predict": MethodSpec("predict", squeeze=y.ndim == 1)})


# ------------------------------------------------------------------------ KernelPCA --

_KPCA_KERNELS = ("linear", "poly", "rbf", "sigmoid", "cosine")


@register_step(KernelPCA)
def step_kernel_pca(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "X_fit_", "eigenvectors_", "eigenvalues_", "_centerer")
    _numeric_input(est, ctx, flow)
    _check_kernel(est, _KPCA_KERNELS)
    fit_x = _f64(est.X_fit_)
    if fit_x.ndim != 2:
        raise unsupported(est, "a sparse fit", "dense X")
    centerer = est._centerer
    kern = ctx.g.add(Op.KERNEL, (flow.node,), width=fit_x.shape[0], kind=est.kernel,
                     vectors=fit_x, gamma=float(est.gamma_), coef0=float(est.coef0),
                     degree=float(est.degree), form="pairwise",
                     center_rows=_f64(centerer.K_fit_rows_),
                     center_all=float(centerer.K_fit_all_))
    # KernelCenterer.transform re-validates the kernel (check_array, finite only): a huge row
    # makes sklearn's expanded rbf distance inf - inf = NaN and a poly kernel overflow, and
    # scikit-learn raises there. Guarded after the centering, which is non-finite exactly
    # where the kernel is, short of a centering that overflows a finite kernel past ~1e307
    # (docs/exactness.md, "Values a later step re-validates")
    ctx.guard(Flow(kern, (None,) * fit_x.shape[0]), est, "inf+nan")
    vec, val = _f64(est.eigenvectors_), _f64(est.eigenvalues_)
    nz = np.flatnonzero(val)  # null-space components project to 0, as sklearn
    alphas = np.zeros_like(vec)
    alphas[:, nz] = vec[:, nz] / np.sqrt(val[nz])
    return _out(flow, _linear(ctx, kern, alphas, 0.0), alphas.shape[1])


_CLASSIFIER_NOTES = "kernels linear/poly/rbf/sigmoid; ovr/ovo, break_ties, probability"
register_frontend(SVC, NuSVC, library="scikit-learn",
                  methods=("predict", "decision_function", "predict_proba",
                           "predict_log_proba"),
                  notes=_CLASSIFIER_NOTES)(convert_svm)
register_frontend(SVR, NuSVR, library="scikit-learn", methods=("predict",),
                  notes="kernels linear/poly/rbf/sigmoid")(convert_svm)
register_frontend(OneClassSVM, library="scikit-learn",
                  methods=("predict", "decision_function", "score_samples"),
                  notes="kernels linear/poly/rbf/sigmoid")(convert_svm)
register_frontend(KNeighborsClassifier, library="scikit-learn",
                  methods=("predict", "predict_proba"),
                  notes="uniform/distance weights; euclidean, manhattan, chebyshev, minkowski, "
                  "cosine, seuclidean, mahalanobis")(convert_single)
register_frontend(KNeighborsRegressor, library="scikit-learn", methods=("predict",),
                  notes="uniform/distance weights; euclidean, manhattan, chebyshev, minkowski, "
                  "cosine, seuclidean, mahalanobis")(convert_single)
register_frontend(KernelPCA, library="scikit-learn", methods=("transform",),
                  notes="kernels linear/poly/rbf/sigmoid/cosine")(convert_single)

# tests/test_param_audit.py
_KERNEL = "kernel degree gamma coef0"
declare_params(SVC, implemented=_KERNEL + " decision_function_shape break_ties probability",
               ignored="C")
declare_params(NuSVC, implemented=_KERNEL + " decision_function_shape break_ties probability",
               ignored="nu")
declare_params(SVR, implemented=_KERNEL, ignored="C epsilon")
declare_params(NuSVR, implemented=_KERNEL, ignored="C nu")
declare_params(OneClassSVM, implemented=_KERNEL, ignored="nu")
declare_params(KNeighborsClassifier, KNeighborsRegressor,
               implemented="n_neighbors weights metric p metric_params",
               ignored="algorithm leaf_size")
# kernel_params reaches only callable kernels (KernelPCA._get_kernel), which are refused
declare_params(KernelPCA, implemented=_KERNEL,
               ignored="kernel_params n_components alpha eigen_solver fit_inverse_transform "
                       "iterated_power remove_zero_eig")
