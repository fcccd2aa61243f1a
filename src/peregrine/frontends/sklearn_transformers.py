"""scikit-learn featurizers beyond the scalers and encoders: QuantileTransformer,
PowerTransformer, KBinsDiscretizer, SplineTransformer, TargetEncoder,
CategoricalNB and RFE/RFECV, as pipeline steps/heads and on their own. Each reproduces the
estimator's ``transform``/``predict`` from public fitted state, in sklearn's order of operations
(sources cited per step); the ops they need are documented in ``ir/ops.py`` (transformers area).

Rows sklearn *rejects* (Box-Cox on x <= 0, a spline value beyond the knots with
extrapolation='error', a CategoricalNB category outside its range, a feature with missing
values that MissingIndicator(error_on_new=True) never saw missing) are flagged by check nodes
(``Context.add_check``): the runtime raises InputError for them, as sklearn raises ValueError.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from sklearn.feature_selection import RFE, RFECV
from sklearn.impute import KNNImputer
from sklearn.naive_bayes import CategoricalNB
from sklearn.preprocessing import (
    KBinsDiscretizer,
    PowerTransformer,
    QuantileTransformer,
    SplineTransformer,
    TargetEncoder,
)
from sklearn.utils import get_tags
from sklearn.utils._missing import is_scalar_nan

from peregrine.frontends.base import declare_params, register_frontend, require_fitted, unsupported
from peregrine.frontends.sklearn_missing import _check, add_indicator
from peregrine.frontends.sklearn_models import _linear, _out, nb_classifier
from peregrine.frontends.sklearn_pipeline import convert_single
from peregrine.frontends.sklearn_preprocessing import _category_values
from peregrine.frontends.steps import (
    Context,
    Flow,
    Head,
    check_no_strings,
    convert_head,
    register_head,
    register_step,
    select,
)
from peregrine.ir import Op
from peregrine.ir.spec import MethodSpec


def _columns(ctx: Context, flow: Flow, op: Op, **attrs: Any) -> Flow:
    """``op`` applied to every column (same width), as a computed flow."""
    return flow.computed(ctx, ctx.g.add(op, (flow.node,), width=flow.width, **attrs),
                         flow.width)


def _code_one_hot(ctx: Context, node: str, n_codes: list[int]) -> str:
    """One-hot of per-column integer codes 0..n_codes[j]-1, blocks side by side (other
    values: all zeros)."""
    offsets = np.concatenate([[0], np.cumsum(n_codes)]).astype(np.int64)
    return ctx.g.add(Op.ONE_HOT, (node,), width=int(offsets[-1]),
                     columns=np.arange(len(n_codes)),
                     categories=tuple(np.arange(n, dtype=np.float64) for n in n_codes),
                     slots=tuple(np.arange(offsets[i], offsets[i + 1])
                                 for i in range(len(n_codes))),
                     unknown_slots=np.full(len(n_codes), -1))


# ----------------------------------------------------------- QuantileTransformer --


@register_step(QuantileTransformer)
def step_quantile(est: Any, ctx: Context, flow: Flow) -> Flow:
    """_data.py QuantileTransformer._transform_col (forward): NaN passes through, inf is
    rejected by check_array; float32 stays float32 (the results are written back into X)."""
    require_fitted(est, "quantiles_", "references_")
    check_no_strings(est, ctx, flow)
    q = np.asarray(est.quantiles_, dtype=np.float64)
    if np.isnan(q).any():  # np.interp on a NaN table: no defined answer to reproduce
        raise unsupported(est, "a column that was all-missing at fit (NaN quantiles_)")
    return _columns(ctx, flow, Op.QUANTILE, quantiles=tuple(q.T.copy()),
                    references=np.asarray(est.references_, dtype=np.float64),
                    output=str(est.output_distribution))


# -------------------------------------------------------------- PowerTransformer --


@register_step(PowerTransformer)
def step_power(est: Any, ctx: Context, flow: Flow) -> Flow:
    """PowerTransformer.transform: scipy's yeojohnson / special.boxcox per column with
    lambdas_, then the fitted StandardScaler when standardize (its X -= mean_; X /= scale_)."""
    require_fitted(est, "lambdas_")
    check_no_strings(est, ctx, flow)
    if est.method == "box-cox":  # _check_input: np.nanmin(X) <= 0 raises
        node = ctx.g.add(Op.RANGE_CHECK, (flow.node,), width=flow.width,
                         low=np.full(flow.width, np.nextafter(0.0, 1.0)),
                         high=np.full(flow.width, np.inf))
        _check(ctx, flow, node, "PowerTransformer(method='box-cox') needs strictly positive "
               "data; got x <= 0")
    out = _columns(ctx, flow, Op.POWER, method=str(est.method),
                   lambdas=np.asarray(est.lambdas_, dtype=np.float64))
    if est.standardize:
        sc = est._scaler  # the fitted StandardScaler (no public alias)
        # whose transform re-validates (check_array, allow-nan): a power that overflowed to
        # infinity raises there ("Input X contains infinity"), NaN passes
        ctx.reject_inf(out, est)
        out = _columns(ctx, out, Op.CENTER_SCALE, center=np.asarray(sc.mean_, np.float64),
                       scale=np.asarray(sc.scale_, np.float64))
    return out


# -------------------------------------------------------------- KBinsDiscretizer --


@register_step(KBinsDiscretizer)
def step_kbins(est: Any, ctx: Context, flow: Flow) -> Flow:
    """_discretization.py transform: searchsorted(bin_edges_[j][1:-1], x, 'right') per column,
    then the one-hot of the bin index for encode='onehot-dense'. Every strategy (uniform,
    quantile, kmeans) only changes the fitted edges; check_array rejects NaN."""
    require_fitted(est, "bin_edges_", "n_bins_")
    check_no_strings(est, ctx, flow)
    ctx.reject_nan(flow)
    if est.encode == "onehot" and ctx.sparse_last is not est:
        raise unsupported(est, "encode='onehot' (sparse output) in the middle of a pipeline",
                          "'ordinal', 'onehot-dense'; 'onehot' as the last step")
    if est.dtype not in (None, np.float64, "float64"):
        raise unsupported(est, f"dtype={est.dtype!r}", "None, np.float64")
    edges = tuple(np.asarray(e, dtype=np.float64)[1:-1] for e in est.bin_edges_)
    out = _columns(ctx, flow, Op.DIGITIZE, edges=edges)
    if est.dtype is not None:
        out = replace(out, keeps_dtype=False)
    if est.encode == "ordinal":
        return replace(out, nan=False)
    n_bins = [int(n) for n in est.n_bins_]
    node = _code_one_hot(ctx, out.node, n_bins)
    return Flow(node, (None,) * sum(n_bins), nan=False, keeps_dtype=out.keeps_dtype)


# -------------------------------------------------------------- SplineTransformer --


@register_step(SplineTransformer)
def step_spline(est: Any, ctx: Context, flow: Flow) -> Flow:
    """_polynomial.py SplineTransformer.transform (dense): one BSPLINE block per column, the
    last spline of each block dropped when include_bias=False."""
    require_fitted(est, "bsplines_")
    check_no_strings(est, ctx, flow)
    if est.sparse_output and ctx.sparse_last is not est:
        raise unsupported(est, "sparse_output=True in the middle of a pipeline",
                          "sparse_output=True as the last step")
    k, mode = int(est.degree), str(est.extrapolation)
    if k == 0 and mode == "constant":  # sklearn itself fails (f_max[-0:]) above the range
        raise unsupported(est, "degree=0 with extrapolation='constant'")
    if getattr(est, "handle_missing", "error") != "zeros":
        ctx.reject_nan(flow)
    splines = est.bsplines_
    coef = np.asarray(splines[0].c, dtype=np.float64)
    s = coef.shape[1]
    ends: dict[str, list[Any]] = {n: [] for n in ("f_min", "f_max", "fp_min", "fp_max",
                                                    "low", "high", "reach")}
    d = k  # sklearn's loop variable `degree`: 'linear' bumps it (<= 1 -> +1) for later columns
    for spl in splines:  # constant/linear: values and slopes at the ends, as sklearn's spl()
        reach = d + 1 if mode == "linear" and d <= 1 else d
        lo, hi = spl.t[d], spl.t[-d - 1]
        for name, at, nu in (("f_min", lo, 0), ("f_max", hi, 0), ("fp_min", lo, 1),
                             ("fp_max", hi, 1)):
            ends[name].append(np.asarray(spl(at, nu=nu), dtype=np.float64).reshape(s)
                              if mode in ("constant", "linear") else np.zeros(s))
        ends["low"].append(float(lo))
        ends["high"].append(float(hi))
        ends["reach"].append(reach)
        d = reach
    node = ctx.g.add(Op.BSPLINE, (flow.node,), width=flow.width * s,
                     knots=tuple(np.asarray(spl.t, dtype=np.float64) for spl in splines),
                     degree=k, coef=coef, extrapolation=mode,
                     **{name: np.asarray(v) for name, v in ends.items()})
    if mode == "error":  # values beyond the knots are NaN in sklearn, which then raises
        lows = [float(spl.t[k]) for spl in splines]
        highs = [float(spl.t[len(spl.t) - k - 1]) for spl in splines]
        check = ctx.g.add(Op.RANGE_CHECK, (flow.node,), width=flow.width, low=np.asarray(lows),
                          high=np.asarray(highs))
        _check(ctx, flow, check, "SplineTransformer(extrapolation='error'): X contains values "
               "beyond the limits of the knots")
    out = Flow(node, (None,) * (flow.width * s), nan=False, keeps_dtype=flow.keeps_dtype)
    if not est.include_bias:
        out = select(ctx, out, [j for j in range(out.width) if (j + 1) % s != 0])
    return out


# -------------------------------------------------------------------- KNNImputer --


@register_step(KNNImputer)
def step_knn_imputer(est: Any, ctx: Context, flow: Flow) -> Flow:
    """impute/_knn.py KNNImputer.transform (missing_values NaN, metric 'nan_euclidean'): each
    missing entry of a column that had values at fit time gets the (weighted) mean of its k
    nearest fit rows having that column; no donor at any distance -> the column's mean.
    Columns all-missing at fit are dropped (keep_empty_features: 0). Ties at the k-th distance
    keep the lowest fit rows; sklearn's argpartition keeps an unspecified one."""
    require_fitted(est, "_fit_X", "_mask_fit_X", "_valid_mask")  # no public fitted state
    check_no_strings(est, ctx, flow)
    if not is_scalar_nan(est.missing_values):
        raise unsupported(est, f"missing_values={est.missing_values!r}", "np.nan")
    if est.metric != "nan_euclidean":
        raise unsupported(est, f"metric={est.metric!r}", "'nan_euclidean'")
    if est.weights not in ("uniform", "distance"):
        raise unsupported(est, f"weights={est.weights!r}", "'uniform', 'distance'")
    fit = np.asarray(est._fit_X, dtype=np.float64)
    valid = np.asarray(est._valid_mask, dtype=bool)
    fit = np.where(np.asarray(est._mask_fit_X, dtype=bool), np.nan, fit)
    with np.errstate(invalid="ignore"):  # np.ma mean over present values; all-missing: unused
        fill = np.nan_to_num(np.nanmean(np.where(valid, fit, 0.0), axis=0))
    node = ctx.g.add(Op.KNN_IMPUTE, (flow.node,), width=flow.width, fit_X=fit,
                     n_neighbors=int(est.n_neighbors), weights=str(est.weights),
                     columns=np.flatnonzero(valid), fill=fill)
    out = replace(flow, node=node, src=(None,) * flow.width, nan=not valid.all())
    if est.keep_empty_features:  # Xc[:, ~valid_mask] = 0: x * 0 (NaN stays), then NaN -> 0
        out = _columns(ctx, out, Op.AFFINE, scale=valid.astype(np.float64), shift=0.0)
        out = _columns(ctx, out, Op.IMPUTE, values=np.zeros(flow.width), missing=np.nan)
    else:
        out = select(ctx, out, np.flatnonzero(valid))
    out = replace(out, nan=False)
    if est.add_indicator:
        out = add_indicator(est, ctx, flow, out)
    return out


# ----------------------------------------------------------------- TargetEncoder --


@register_step(TargetEncoder)
def step_target_encoder(est: Any, ctx: Context, flow: Flow) -> Flow:
    """_target_encoder.py transform: category -> encodings_ entry, unknown (including a missing
    value never seen at fit) -> target_mean_; multiclass: one column per (feature, class),
    feature-major. Numeric or string columns (codes from the boundary vocabulary)."""
    require_fitted(est, "encodings_", "categories_", "target_mean_")
    k = len(est.classes_) if est.target_type_ == "multiclass" else 1
    means = np.broadcast_to(np.asarray(est.target_mean_, dtype=np.float64), (k,))
    cats = [_category_values(est, ctx, flow, i, np.asarray(c))
            for i, c in enumerate(est.categories_)]
    x = flow
    if k > 1:
        x = select(ctx, flow, np.repeat(np.arange(flow.width), k))
    width = flow.width * k
    node = ctx.g.add(Op.CATEGORY_MAP, (x.node,), width=width, columns=np.arange(width),
                     categories=tuple(cats[e // k] for e in range(width)),
                     codes=tuple(np.asarray(e, dtype=np.float64) for e in est.encodings_),
                     unknown=np.asarray([means[e % k] for e in range(width)]))
    return _out(flow, node, width)


# ------------------------------------------------------------------ CategoricalNB --


@register_head(CategoricalNB)
def head_categorical_nb(est: Any, ctx: Context, flow: Flow) -> Head:
    """naive_bayes.py CategoricalNB: X cast to int (truncation), negative values and
    categories >= n_categories_ raise; jll = sum_i feature_log_prob_[i][:, x_i] + prior."""
    require_fitted(est, "feature_log_prob_", "class_log_prior_", "n_categories_")
    check_no_strings(est, ctx, flow)
    ctx.reject_nan(flow)
    n_cats = [int(n) for n in est.n_categories_]
    codes = ctx.g.add(Op.UFUNC, (flow.node,), width=flow.width, name="trunc")  # astype(int)
    cats = tuple(np.arange(n, dtype=np.float64) for n in n_cats)
    hot = _code_one_hot(ctx, codes, n_cats)
    bad = ctx.g.add(Op.ONE_HOT, (codes,), width=flow.width, columns=np.arange(flow.width),
                    categories=cats, slots=tuple(np.full(n, -1) for n in n_cats),
                    unknown_slots=np.arange(flow.width))
    _check(ctx, flow, bad, "CategoricalNB: category negative or beyond n_categories_")
    weight = np.vstack([np.asarray(f, dtype=np.float64).T for f in est.feature_log_prob_])
    jll = _linear(ctx, hot, weight, est.class_log_prior_)
    return nb_classifier(est, ctx, jll, len(est.classes_))  # _BaseNB's methods


# ---------------------------------------------------------------------- RFE/RFECV --


def _rfe_select(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "support_", "estimator_")
    if not get_tags(est).input_tags.allow_nan:  # SelectorMixin.transform validates X
        ctx.reject_nan(flow)
    return select(ctx, flow, np.flatnonzero(est.support_))


@register_step(RFE, RFECV)
def step_rfe(est: Any, ctx: Context, flow: Flow) -> Flow:
    return _rfe_select(est, ctx, flow)


@register_head(RFE, RFECV)
def head_rfe(est: Any, ctx: Context, flow: Flow) -> Head:
    """predict/predict_proba/decision_function = estimator_'s on X[:, support_]; transform."""
    kept = _rfe_select(est, ctx, flow)
    head = convert_head(est.estimator_, ctx, kept)
    outputs = {m: o for m, o in head.outputs.items() if m != "transform"}
    methods = {m: s for m, s in head.methods.items() if m != "transform"}
    outputs["transform"] = kept.node
    methods["transform"] = MethodSpec("transform", dtype="input")
    return Head(outputs, methods, allow_nan=head.allow_nan)


_TRANSFORMERS = (QuantileTransformer, PowerTransformer, KBinsDiscretizer, SplineTransformer,
                 TargetEncoder, KNNImputer)
register_frontend(*_TRANSFORMERS, library="scikit-learn", methods=("transform",),
                  notes="alone or as a pipeline step; NaN where sklearn accepts it (see "
                  "docs/pipelines.md)")(convert_single)
register_frontend(CategoricalNB, library="scikit-learn",
                  methods=("predict", "predict_proba", "predict_log_proba"),
                  notes="min_categories; out-of-range categories raise InputError")(convert_single)
register_frontend(RFE, RFECV, library="scikit-learn",
                  methods=("predict", "predict_proba", "predict_log_proba", "decision_function",
                           "transform"),
                  notes="support_ then the fitted estimator_'s methods")(convert_single)

# tests/test_param_audit.py
declare_params(KBinsDiscretizer, implemented="encode dtype n_bins strategy",
               ignored="quantile_method subsample")
declare_params(KNNImputer, implemented="n_neighbors weights metric missing_values "
                                       "add_indicator keep_empty_features")
declare_params(PowerTransformer, implemented="method standardize")
declare_params(QuantileTransformer, implemented="output_distribution",
               ignored="ignore_implicit_zeros n_quantiles subsample")
declare_params(RFE, implemented="estimator", ignored="importance_getter n_features_to_select "
                                                     "step")
declare_params(RFECV, implemented="estimator",
               ignored="importance_getter min_features_to_select step")
declare_params(SplineTransformer, implemented="degree extrapolation include_bias knots n_knots "
                                              "handle_missing sparse_output",
               ignored="order")
declare_params(TargetEncoder, implemented="target_type", ignored="categories smooth")
declare_params(CategoricalNB, ignored="alpha class_prior fit_prior force_alpha min_categories")
