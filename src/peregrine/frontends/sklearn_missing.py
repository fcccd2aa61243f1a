"""scikit-learn's missing-value indicator: MissingIndicator as a step and on its own, and the
``add_indicator=True`` block the imputers (SimpleImputer, KNNImputer) append. Rows sklearn
rejects (a feature with missing values that MissingIndicator(error_on_new=True) never saw
missing) are flagged by check nodes (``Context.add_check``): the runtime raises InputError."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.impute import MissingIndicator
from sklearn.utils._missing import is_scalar_nan

from peregrine.frontends.base import declare_params, register_frontend, require_fitted, unsupported
from peregrine.frontends.sklearn_pipeline import convert_single
from peregrine.frontends.steps import Context, Flow, Head, concat, register_head, register_step
from peregrine.ir import Op
from peregrine.ir.spec import MethodSpec


def _check(ctx: Context, flow: Flow, node: str, what: str, columns: Any = None) -> None:
    """Rows where ``node`` is non-zero raise InputError (per column: the input column read)."""
    cols = range(flow.width) if columns is None else columns
    ctx.add_check(node, [(what, -1 if flow.src[c] is None else int(flow.src[c])) for c in cols])


def string_missing_code(est: Any, ctx: Context, flow: Flow) -> Any:
    """The code of ``est.missing_values`` (np.nan, None, or a string: one per column) in
    string columns: NaN is code 0, None code 1 (steps.Vocab). scikit-learn tells them apart in
    object columns: with np.nan a None is a value like any other; with None (or a string) a
    NaN is refused ("Input contains NaN"), which a check node reproduces (InputError)."""
    vocabs = [ctx.vocab(s, est, i) for i, s in enumerate(flow.src)]
    ctx.reject_na(flow, est)  # its missing-value mask raises TypeError on pd.NA
    if is_scalar_nan(est.missing_values):
        return 0.0
    node = ctx.g.add(Op.ONE_HOT, (flow.node,), width=flow.width, columns=np.arange(flow.width),
                     categories=tuple(np.asarray([0.0]) for _ in range(flow.width)),
                     slots=tuple(np.asarray([i]) for i in range(flow.width)),
                     unknown_slots=np.full(flow.width, -1))
    _check(ctx, flow, node, f"{type(est).__name__}(missing_values="
           f"{est.missing_values!r}) got NaN in a string column; scikit-learn refuses it "
           "(Input contains NaN)")
    if isinstance(est.missing_values, str):
        return np.asarray([v.code(est.missing_values) for v in vocabs])
    return 1.0


# -------------------------------------------------------------- MissingIndicator --


def _missing_value(est: Any, ctx: Context, flow: Flow) -> tuple[float, bool]:
    """The float value that means missing in the graph, and whether columns hold strings."""
    strings = any(s is not None and s in ctx.vocabs for s in flow.src)
    missing = est.missing_values
    if strings:
        if not (missing is None or is_scalar_nan(missing) or isinstance(missing, str)):
            raise unsupported(est, f"missing_values={missing!r} on string columns",
                              "np.nan, None or a string")
        return string_missing_code(est, ctx, flow), True
    if isinstance(missing, str) or missing is None:
        raise unsupported(est, f"missing_values={missing!r} on numeric columns")
    return float(missing), False


def _indicator(ctx: Context, flow: Flow, columns: Any, missing: Any, strings: bool) -> str:
    """(n, len(columns)) 0/1: column is missing (NaN matches NaN; string codes: the missing
    value's code, one for all columns or one per column)."""
    cols = [int(c) for c in columns]
    codes = np.broadcast_to(np.asarray(missing, dtype=np.float64), (flow.width,))
    return ctx.g.add(Op.ONE_HOT, (flow.node,), width=len(cols), columns=np.asarray(cols),
                     categories=tuple(np.asarray([codes[c]]) for c in cols),
                     slots=tuple(np.asarray([i]) for i in range(len(cols))),
                     unknown_slots=np.full(len(cols), -1))


@register_step(MissingIndicator)
def step_missing_indicator(est: Any, ctx: Context, flow: Flow) -> Flow:
    """impute/_base.py MissingIndicator.transform: _get_mask(X)[:, features_]; with
    features='missing-only' and error_on_new, a missing value in another column raises."""
    require_fitted(est, "features_")
    if est.sparse is True and ctx.sparse_last is not est:
        raise unsupported(est, "sparse=True in the middle of a pipeline",
                          "sparse='auto' or False on dense input; sparse=True as the last step")
    missing, strings = _missing_value(est, ctx, flow)
    if not strings and not np.isnan(missing):
        ctx.reject_nan(flow)  # check_array: NaN is only allowed when it is the missing value
    features = np.asarray(est.features_, dtype=np.int64)
    if est.features == "missing-only" and est.error_on_new:
        new = [j for j in range(flow.width) if j not in set(features.tolist())]
        if new:
            node = _indicator(ctx, flow, new, missing, strings)
            _check(ctx, flow, node, "MissingIndicator: a feature with no missing values at fit "
                   "time has missing values", new)
    node = _indicator(ctx, flow, features, missing, strings)
    return Flow(node, (None,) * len(features), nan=False, keeps_dtype=True)


@register_head(MissingIndicator)
def head_missing_indicator(est: Any, ctx: Context, flow: Flow) -> Head:
    sparse = "csc_matrix" if est.sparse is True else ""  # transform: sp.csc_matrix(mask)
    ctx.sparse_last = est if sparse else None
    missing = est.missing_values
    if ctx.g.node(flow.node).op is Op.INPUT:
        # it alone reads the input, which may hold strings: scikit-learn compares object
        # values (X != X, X == None, X == "") and keeps no record of which columns held
        # strings at fit. np.nan: an object column becomes NaN or 0.0 at the boundary, a
        # numeric one stays numbers (isnan either way); None or a string: every column is
        # read as strings (codes), and a numeric X is refused, as scikit-learn refuses it
        if is_scalar_nan(missing):
            ctx.read_objects(flow, est)
        elif missing is None or isinstance(missing, str):
            for i, s in enumerate(flow.src):
                ctx.vocab(s, est, i)
            ctx.refuse_numbers(flow, est)
    out = step_missing_indicator(est, ctx, flow)  # transform returns a boolean mask
    return Head({"transform": out.node},
                {"transform": MethodSpec("transform", dtype="bool", sparse=sparse)},
                allow_nan=True)


def add_indicator(est: Any, ctx: Context, flow: Flow, imputed: Flow) -> Flow:
    """SimpleImputer(add_indicator=True): hstack(imputed, indicator_.transform(X))."""
    return concat(ctx, [imputed, step_missing_indicator(est.indicator_, ctx, flow)])


register_frontend(MissingIndicator, library="scikit-learn", methods=("transform",),
                  notes="alone or as a pipeline step; NaN where sklearn accepts it (see "
                  "docs/pipelines.md)")(convert_single)

# tests/test_param_audit.py
declare_params(MissingIndicator, implemented="features missing_values error_on_new sparse")
