"""scikit-learn featurizers as pipeline steps (and as models on their own, with ``transform``).

Each reads public fitted state and reproduces ``transform`` (sklearn/preprocessing/_data.py,
_encoders.py, _polynomial.py, impute/_base.py, feature_selection/_base.py) with a few IR ops.
Encoders learn their category -> output-column mapping by calling their own ``transform`` once
on a probe holding every fitted category (exact by construction: drop, infrequent grouping and
encoded missing values included); unknown values follow ``handle_unknown``.

handle_unknown='error': sklearn raises on a value outside ``categories_``. A compiled program
cannot raise per row, so the encoder adds a check (``_unknown_check``): a ONE_HOT node whose
only slots are "no category matched", one per column, exported as the INPUT_ERRORS output; the
runtime evaluates it with every call and raises InputError on the first flagged row. This one
mechanism is right wherever the column comes from (numeric input, imputed codes, a computed
column); unseen *strings* are also rejected earlier, at the boundary, where the offending value
is still known (``ModelSpec.category_unknown_error``). Known gap: string columns see None, NaN
and pd.NA alike as missing.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import numpy as np
from sklearn.feature_selection import (
    GenericUnivariateSelect,
    SelectFromModel,
    SelectKBest,
    SelectPercentile,
    VarianceThreshold,
)
from sklearn.impute import SimpleImputer
from sklearn.preprocessing import (
    Binarizer,
    FunctionTransformer,
    MaxAbsScaler,
    MinMaxScaler,
    Normalizer,
    OneHotEncoder,
    OrdinalEncoder,
    PolynomialFeatures,
    RobustScaler,
    StandardScaler,
)
from sklearn.utils._missing import is_scalar_nan

from peregrine.frontends.base import declare_params, register_frontend, require_fitted, unsupported
from peregrine.frontends.sklearn_missing import add_indicator, string_missing_code
from peregrine.frontends.sklearn_pipeline import convert_single
from peregrine.frontends.steps import Context, Flow, check_no_strings, register_step, select
from peregrine.ir import Op
from peregrine.ir.ops import UFUNCS


def _per_column(value: Any, width: int, default: float) -> np.ndarray:
    if value is None:
        return np.full(width, default)
    return np.broadcast_to(np.asarray(value, dtype=np.float64), (width,)).copy()


def _numeric(est: Any, ctx: Context, flow: Flow, op: Op, nan_ok: bool = True, **attrs) -> Flow:
    check_no_strings(est, ctx, flow)
    if not nan_ok:
        ctx.reject_nan(flow)
    node = ctx.g.add(op, (flow.node,), width=flow.width, **attrs)
    return replace(flow, node=node, src=(None,) * flow.width)


# --------------------------------------------------------------------------- scalers --


# dtype: the scalers validate X with dtype=FLOAT_DTYPES, so a float32 X stays float32 and
# every in-place step (``X -= center``, ``X /= scale``, ``X *= scale_``...) rounds to float32;
# StandardScaler first casts mean_ and scale_ to X's dtype (``xp.astype(self.mean_, X.dtype)``,
# scikit-learn 1.9), the others apply their fitted arrays as they are (NumPy's float64 loop for
# a float64 parameter, then the store rounds). The ops' ``float32`` attribute does exactly that
# when the flow still carries the input's dtype (``Flow.keeps_dtype``).


def _f32(flow: Flow, mode: Any) -> Any:
    return mode if flow.keeps_dtype else ("never" if isinstance(mode, str) else False)


def _sparse_scale(est: Any, ctx: Context, flow: Flow, scale: Any) -> Flow:
    """A scaler's transform of a CSR matrix an earlier step built (Flow.sparse "csr"):
    inplace_column_scale(X, 1 / scale_), each stored value times the reciprocal, which rounds
    differently from the dense X /= scale_. Absent entries stay absent (0)."""
    recip = 1.0 / _per_column(scale, flow.width, 1.0)
    return _numeric(est, ctx, flow, Op.AFFINE, scale=recip, shift=np.zeros(flow.width),
                    float32=_f32(flow, "round"))


@register_step(StandardScaler)
def step_standard_scaler(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "n_features_in_")
    if est.with_mean:  # "Cannot center sparse matrices"
        ctx.refuse_sparse(flow)
    elif flow.sparse == "csr":
        return _sparse_scale(est, ctx, flow, est.scale_)
    # transform: X -= mean_ (with_mean); X /= scale_ (with_std); NaN passes through
    return _numeric(est, ctx, flow, Op.CENTER_SCALE,
                    center=_per_column(est.mean_ if est.with_mean else None, flow.width, 0.0),
                    scale=_per_column(est.scale_, flow.width, 1.0),
                    float32=_f32(flow, "cast"))


@register_step(RobustScaler)
def step_robust_scaler(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "n_features_in_")
    return _numeric(est, ctx, flow, Op.CENTER_SCALE,
                    center=_per_column(est.center_, flow.width, 0.0),
                    scale=_per_column(est.scale_, flow.width, 1.0),
                    float32=_f32(flow, "round"))


@register_step(MaxAbsScaler)
def step_max_abs_scaler(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "scale_")
    if flow.sparse == "csr":
        out = _sparse_scale(est, ctx, flow, est.scale_)
    else:
        out = _numeric(est, ctx, flow, Op.CENTER_SCALE, center=np.zeros(flow.width),
                       scale=_per_column(est.scale_, flow.width, 1.0),
                       float32=_f32(flow, "round"))
    if getattr(est, "clip", False):  # X /= scale_, then clipped to [-1, 1] (sklearn >= 1.9)
        node = ctx.g.add(Op.CLIP, (out.node,), width=out.width, low=-1.0, high=1.0,
                         float32=_f32(flow, True))
        out = replace(out, node=node)
    return out


@register_step(MinMaxScaler)
def step_min_max_scaler(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "scale_", "min_")
    # transform: X *= scale_; X += min_; clip to feature_range when clip=True
    out = _numeric(est, ctx, flow, Op.AFFINE, scale=_per_column(est.scale_, flow.width, 1.0),
                   shift=_per_column(est.min_, flow.width, 0.0), float32=_f32(flow, "round"))
    if est.clip:
        lo, hi = est.feature_range
        node = ctx.g.add(Op.CLIP, (out.node,), width=out.width, low=float(lo), high=float(hi),
                         float32=_f32(flow, True))
        out = replace(out, node=node)
    return out


@register_step(Normalizer)
def step_normalizer(est: Any, ctx: Context, flow: Flow) -> Flow:
    if est.norm not in ("l1", "l2", "max"):
        raise unsupported(est, f"norm={est.norm!r}", "l1, l2, max")
    # normalize(X) on a float32 X: float32 norms (NumPy's summation order), X /= norms
    return _numeric(est, ctx, flow, Op.NORMALIZE, nan_ok=False, norm=est.norm,
                    float32=_f32(flow, True), tiny=True)


@register_step(Binarizer)
def step_binarizer(est: Any, ctx: Context, flow: Flow) -> Flow:
    # binarize: X > threshold on X's dtype. A Python number is cast to a float32 X's dtype
    # (NEP 50), so float32(0.1) > 0.1 is False there; a NumPy scalar keeps its own dtype
    weak = not isinstance(est.threshold, np.generic)
    return _numeric(est, ctx, flow, Op.BINARIZE, nan_ok=False, threshold=float(est.threshold),
                    float32=_f32(flow, weak))


@register_step(FunctionTransformer)
def step_function_transformer(est: Any, ctx: Context, flow: Flow) -> Flow:
    func = est.func
    if est.kw_args:
        raise unsupported(est, "kw_args")
    if func is None:
        return flow
    name = getattr(func, "__name__", None)
    if not (isinstance(func, np.ufunc) and name in UFUNCS):
        raise unsupported(est, f"func={func!r}", "None or numpy ufuncs " + ", ".join(UFUNCS))
    if est.validate:
        ctx.reject_nan(flow)
    # a float32 X stays float32 (validate=True keeps float32 too): NumPy's float32 loop
    return _numeric(est, ctx, flow, Op.UFUNC, name=name, float32=_f32(flow, True))


@register_step(PolynomialFeatures)
def step_polynomial(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "powers_")
    powers = np.asarray(est.powers_, dtype=np.int64)
    check_no_strings(est, ctx, flow)
    ctx.reject_nan(flow)
    # transform fills an array of X's dtype: a float32 X rounds every product
    node = ctx.g.add(Op.POLYNOMIAL, (flow.node,), width=powers.shape[0], powers=powers,
                     float32=_f32(flow, True))
    return replace(flow, node=node, src=(None,) * powers.shape[0])


# -------------------------------------------------------------------- feature selection --


@register_step(VarianceThreshold, SelectKBest, SelectPercentile, SelectFromModel,
               GenericUnivariateSelect)
def step_selector(est: Any, ctx: Context, flow: Flow) -> Flow:
    cols = est.get_support(indices=True)
    if not isinstance(est, VarianceThreshold):  # selectors validate finite input
        ctx.reject_nan(flow)
    return select(ctx, flow, cols)


# --------------------------------------------------------------------------- imputer --


def _is_string_column(values: np.ndarray) -> bool:
    # strategy="constant" leaves statistics_ an object array on numeric data too
    # (array([7.0, 7.0], dtype=object)): strings only where an element is one
    if values.dtype.kind == "O":
        return any(isinstance(v, str) for v in values.ravel())
    return values.dtype.kind in "US"


@register_step(SimpleImputer)
def step_simple_imputer(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "statistics_")
    out = _simple_impute(est, ctx, flow)
    if est.add_indicator:  # hstack(imputed, indicator_.transform(X)), as _BaseImputer
        out = add_indicator(est, ctx, flow, out)
    return out


def _simple_impute(est: Any, ctx: Context, flow: Flow) -> Flow:
    stats = np.asarray(est.statistics_)
    missing = est.missing_values
    if _is_string_column(stats):
        if not (missing is None or is_scalar_nan(missing)):
            raise unsupported(est, f"missing_values={missing!r} on string columns",
                              "np.nan or None")
        values = [ctx.vocab(s, est, j).code(v) for j, (s, v) in enumerate(zip(flow.src, stats))]
        code = string_missing_code(est, ctx, flow)
        node = ctx.g.add(Op.IMPUTE, (flow.node,), width=flow.width, values=np.asarray(values),
                         missing=code)
        return replace(flow, node=node)  # still codes of the same input columns
    stats = stats.astype(np.float64)
    # transform casts statistics_ to the dtype X had at fit (the private ``_fill_dtype``, no
    # public record of it): fitted on float32, the fill values are float32 on any input
    fill_dtype = getattr(est, "_fill_dtype", None)
    if fill_dtype is not None and np.dtype(fill_dtype) == np.float32:
        stats = stats.astype(np.float32).astype(np.float64)
    if isinstance(missing, str) or missing is None:
        raise unsupported(est, f"missing_values={missing!r} on numeric columns")
    keep = np.arange(flow.width)
    if not est.keep_empty_features:
        # transform drops the columns all-missing at fit (NaN statistics), strategy
        # 'constant' too since scikit-learn 1.6 (before, its statistics were never NaN)
        keep = np.flatnonzero(~np.isnan(stats))
    elif np.isnan(stats).any():
        raise unsupported(est, "keep_empty_features=True with empty features")
    # X[mask] = statistics_ on a float32 X stores them rounded to float32
    out = _numeric(est, ctx, flow, Op.IMPUTE, values=stats, missing=float(missing),
                   float32=_f32(flow, True))
    if is_scalar_nan(missing):
        out = replace(out, nan=False)
    return select(ctx, out, keep)


# -------------------------------------------------------------------------- encoders --


def _probe(est: Any) -> tuple[np.ndarray, list[np.ndarray]]:
    """est.transform on rows that hold every fitted category of every column (row r, column i
    holds categories_[i][r % n_i]) and the rows used, per column."""
    cats = est.categories_
    m = max(len(c) for c in cats)
    numeric = all(c.dtype.kind in "iufb" for c in cats)
    probe = np.empty((m, len(cats)), dtype=np.float64 if numeric else object)
    for i, c in enumerate(cats):
        probe[:, i] = [c[r % len(c)] for r in range(m)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fit on a DataFrame, probed with an array
        out = est.transform(probe)
    out = out.toarray() if hasattr(out, "toarray") else np.asarray(out)
    return np.asarray(out, dtype=np.float64), [np.arange(len(c)) for c in cats]


def _category_values(est: Any, ctx: Context, flow: Flow, i: int, cats: np.ndarray) -> np.ndarray:
    """Float values a column holds in the graph for each fitted category (codes for strings)."""
    if cats.dtype.kind in "iufb":
        return cats.astype(np.float64)
    vocab = ctx.vocab(flow.src[i], est, i)
    return np.asarray([vocab.code(c) for c in cats], dtype=np.float64)


def _unknown_check(est: Any, ctx: Context, flow: Flow, cats: list[np.ndarray]) -> None:
    """handle_unknown='error': flag rows whose value matches none of ``cats`` (see top)."""
    if est.handle_unknown != "error":
        return
    node = ctx.g.add(Op.ONE_HOT, (flow.node,), width=flow.width, columns=np.arange(flow.width),
                     categories=tuple(cats),
                     slots=tuple(np.full(len(c), -1, dtype=np.int64) for c in cats),
                     unknown_slots=np.arange(flow.width))
    name = type(est).__name__
    ctx.add_check(node, [(f"{name}(handle_unknown='error') got a category unseen at fit time",
                          -1 if s is None else int(s)) for s in flow.src])
    ctx.unknown_error.update(s for s in flow.src if s is not None and s in ctx.vocabs)


@register_step(OneHotEncoder)
def step_one_hot(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "categories_")
    out, rows = _probe(est)
    widths = [int(w) for w in est._n_features_outs]  # output block per input column
    offsets = np.concatenate([[0], np.cumsum(widths)])
    infrequent = getattr(est, "infrequent_categories_", [None] * len(widths))
    cats_out, slots_out, unknown_out = [], [], []
    for i, cats in enumerate(est.categories_):
        block = out[rows[i], offsets[i]:offsets[i + 1]]
        slots = np.where(block.any(axis=1), offsets[i] + np.argmax(block, axis=1), -1)
        unknown = -1
        # 'infrequent_if_exist' (and 'warn', 1.6+) send unknowns to the infrequent column
        if est.handle_unknown in ("infrequent_if_exist", "warn") and infrequent[i] is not None:
            first = np.flatnonzero(np.isin(cats, infrequent[i]))[0]
            unknown = int(slots[first])
        cats_out.append(_category_values(est, ctx, flow, i, cats))
        slots_out.append(slots.astype(np.int64))
        unknown_out.append(unknown)
    node = ctx.g.add(Op.ONE_HOT, (flow.node,), width=int(offsets[-1]),
                     columns=np.arange(flow.width), categories=tuple(cats_out),
                     slots=tuple(slots_out), unknown_slots=np.asarray(unknown_out))
    _unknown_check(est, ctx, flow, cats_out)
    return Flow(node, (None,) * int(offsets[-1]), nan=False, keeps_dtype=False)


@register_step(OrdinalEncoder)
def step_ordinal(est: Any, ctx: Context, flow: Flow) -> Flow:
    require_fitted(est, "categories_")
    out, rows = _probe(est)
    unknown = np.nan
    if est.handle_unknown == "use_encoded_value":
        unknown = float(est.unknown_value)
    cats_out, codes_out = [], []
    for i, cats in enumerate(est.categories_):
        cats_out.append(_category_values(est, ctx, flow, i, cats))
        codes_out.append(out[rows[i], i])
    node = ctx.g.add(Op.CATEGORY_MAP, (flow.node,), width=flow.width,
                     columns=np.arange(flow.width), categories=tuple(cats_out),
                     codes=tuple(codes_out), unknown=np.full(flow.width, unknown))
    _unknown_check(est, ctx, flow, cats_out)
    nan = bool(np.isnan(unknown) or any(np.isnan(c).any() for c in codes_out))
    return Flow(node, (None,) * flow.width, nan=nan, keeps_dtype=False)


_TRANSFORMERS = (StandardScaler, RobustScaler, MaxAbsScaler, MinMaxScaler, Normalizer,
                 Binarizer, FunctionTransformer, PolynomialFeatures, VarianceThreshold,
                 SelectKBest, SelectPercentile, SelectFromModel, GenericUnivariateSelect,
                 SimpleImputer, OneHotEncoder, OrdinalEncoder)
register_frontend(*_TRANSFORMERS, library="scikit-learn", methods=("transform",),
                  notes="alone or as a Pipeline/ColumnTransformer/FeatureUnion step; sparse "
                  "output (scipy.sparse) as the last step; strings through pandas columns")(convert_single)

# tests/test_param_audit.py
declare_params(StandardScaler, implemented="with_mean with_std")
declare_params(RobustScaler, implemented="with_centering with_scaling",
               ignored="quantile_range unit_variance")
declare_params(MaxAbsScaler, implemented="clip")
declare_params(MinMaxScaler, implemented="clip feature_range")
declare_params(Normalizer, implemented="norm")
declare_params(Binarizer, implemented="threshold")
declare_params(FunctionTransformer, implemented="func kw_args validate accept_sparse",
               ignored="check_inverse feature_names_out inv_kw_args inverse_func")
declare_params(PolynomialFeatures, implemented="degree interaction_only include_bias",
               ignored="order")
declare_params(VarianceThreshold, implemented="threshold")
declare_params(SelectKBest, implemented="k score_func")
declare_params(SelectPercentile, implemented="percentile score_func")
declare_params(GenericUnivariateSelect, implemented="mode param score_func")
declare_params(SelectFromModel,
               implemented="estimator threshold max_features norm_order importance_getter "
                           "prefit")
declare_params(SimpleImputer, implemented="strategy fill_value missing_values add_indicator "
                                          "keep_empty_features")
declare_params(OneHotEncoder, implemented="categories drop dtype handle_unknown max_categories "
                                          "min_frequency sparse_output",
               ignored="feature_name_combiner")
declare_params(OrdinalEncoder, implemented="categories dtype encoded_missing_value "
                                           "handle_unknown max_categories min_frequency "
                                           "unknown_value")
