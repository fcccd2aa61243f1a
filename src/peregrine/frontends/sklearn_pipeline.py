"""scikit-learn composition: Pipeline, ColumnTransformer, FeatureUnion, and every registered
transformer/linear model on its own. Each is converted by threading a ``steps.Flow`` through
the step registry (``steps.py``); the final estimator contributes the public methods.

ColumnTransformer (sklearn/compose/_column_transformer.py): ``transformers_`` holds the fitted
transformers with their columns already resolved by fit (names, masks, callables, slices), and
``_transformer_to_input_indices`` maps each (also 'remainder') to input column indices; the
output hstacks the transformers in ``transformers_`` order, skipping 'drop' and empty
selections; with ``sparse_output_`` (decided at fit) the hstack is a CSR matrix, which the
next step reads as its values (Flow.sparse says where that matters: docs/sparse.md).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from sklearn import __version__ as sklearn_version
from sklearn.compose import ColumnTransformer
from sklearn.pipeline import FeatureUnion, Pipeline

from peregrine.errors import UnsupportedModelError
from peregrine.frontends.base import (
    declare_params,
    qualified_name,
    register_frontend,
    require_fitted,
    sklearn_feature_names,
    unsupported,
)
from peregrine.frontends.steps import (
    Context,
    Flow,
    Head,
    concat,
    convert_head,
    convert_step,
    register_head,
    register_step,
    select,
    sparse_parts,
    weighted,
)
from peregrine.ir import GraphBuilder
from peregrine.ir.spec import BOUNDARY_KINDS, INPUT_ERRORS, MethodSpec, ModelSpec
from peregrine.registry import TypeRegistry


def model_spec(model: Any, build_head, n_features: int | None = None) -> ModelSpec:
    """Convert ``model`` by ``build_head(ctx, flow) -> Head`` on a fresh graph; ``n_features``:
    the input width of a model without ``n_features_in_`` (a PyTorch network's first layer's)."""
    n = getattr(model, "n_features_in_", None) if n_features is None else n_features
    if n is None:
        require_fitted(model, "n_features_in_")
    g = GraphBuilder()
    x = g.input(int(n))
    ctx = Context(g)
    head: Head = build_head(ctx, Flow(x, tuple(range(int(n)))))
    outputs = dict(head.outputs)
    check = ctx.check_node()
    if check is not None:
        outputs[INPUT_ERRORS] = check
    ctx.accept_nan_columns(int(n))
    for (node, kind), key in ctx.guarded.items():
        outputs[guard_name(key, kind, head.outputs, ctx.exempt.get((node, kind), ()))] = \
            node.split("@")[0]
    graph = g.build(outputs)
    # infinity: refused at the boundary when a step reads an input column as it is and
    # refuses it (Context.reject_inf), or when a guard refuses infinity computed later (an
    # infinite input may reach it: exp -> PowerTransformer; refused up front, so the input
    # contract stays "accepted means answered", over-strict only where a step maps infinity
    # back to a finite value, tanh before a linear model)
    refused = any(kind.startswith(("inf", "float32")) for _, kind in ctx.guarded)
    sparse_absent = ctx.sparse_absent
    if sparse_absent == "nan" and sum(x in n.inputs for n in graph.nodes) != ctx.sparse_readers:
        sparse_absent = "refuse"  # other steps read the raw input too, with the rule of 0
    return ModelSpec(
        graph=graph,
        methods=frame_output(model, head.methods),
        n_features=int(n),
        source=qualified_name(model),
        feature_names=sklearn_feature_names(model),
        allow_nan=ctx.allow_nan,  # steps clear it when a NaN-rejecting step may see NaN
        allow_inf=ctx.allow_inf and not refused,
        category_maps={j: tuple(v.values) for j, v in sorted(ctx.vocabs.items())},
        category_unknown_error=frozenset(ctx.unknown_error),
        input_checks=tuple(w for _, ws in ctx.checks for w in ws),
        sparse_absent=sparse_absent,
        sparse_nan=ctx.sparse_nan,
        versions={"sklearn": sklearn_version},
    )


def guard_name(key: str, kind: str, methods: dict[str, str], exempt: Any) -> str:
    """A guard's output name, with ``#<method>,...`` after the step where only some methods
    run the step that re-validates (runtime/guards.py ``check_guards``); a name without it
    holds for every method (and every artifact saved before)."""
    held = [m for m, node in methods.items() if node not in exempt]
    if kind in BOUNDARY_KINDS or len(held) == len(methods):
        return key
    head, at, cols = key.partition("@")
    return f"{head}#{','.join(held)}{at}{cols}"


def frame_output(model: Any, methods: dict[str, MethodSpec]) -> dict[str, MethodSpec]:
    """``transform`` returning a DataFrame where scikit-learn's does: the estimator whose
    transform the caller runs (a Pipeline's last step) configured by set_output(transform=
    "pandas") (MethodSpec.frame_columns). Other containers ("polars") stay arrays."""
    m = methods.get("transform")
    if m is None or m.sparse or m.strings:
        return methods
    last = model
    while isinstance(last, Pipeline) and last.steps:
        last = last.steps[-1][1]
    try:
        from sklearn.utils._set_output import _get_output_config

        dense = _get_output_config("transform", last)["dense"]
    except Exception:  # noqa: BLE001 - a private helper; no config means arrays
        return methods
    if dense != "pandas" or not hasattr(model, "get_feature_names_out"):
        return methods
    try:
        columns = tuple(str(c) for c in model.get_feature_names_out())
    except Exception:  # noqa: BLE001 - no names (a FunctionTransformer without
        return methods  # feature_names_out): scikit-learn's pandas output fails there too
    return {**methods, "transform": replace(m, frame_columns=columns)}


def convert_single(model: Any) -> ModelSpec:
    """Frontend of a lone transformer or linear model: a one-step pipeline."""
    return model_spec(model, lambda ctx, flow: convert_head(model, ctx, flow))


# -------------------------------------------------------------------------- Pipeline --


def _pipeline_steps(model: Pipeline) -> list[Any]:
    require_fitted(model, "n_features_in_")
    return [est for _, est in model.steps]


def _pipeline_head(model: Pipeline, ctx: Context, flow: Flow) -> Head:
    steps = _pipeline_steps(model)
    for est in steps[:-1]:
        flow = convert_step(est, ctx, flow)
    last = steps[-1]
    if last is None or (isinstance(last, str) and last == "passthrough"):
        raise unsupported(model, "a pipeline ending in 'passthrough'")
    return convert_head(last, ctx, flow)


# Pipelines whose first step does not read a numeric matrix convert through the frontend
# registered here for that step's class (text vectorizers: sklearn_text.py)
SOURCES: TypeRegistry[Any] = TypeRegistry("pipeline source")


@register_frontend(
    Pipeline, library="scikit-learn",
    methods=("predict", "predict_proba", "predict_log_proba", "decision_function", "transform"),
    notes="any supported transformers followed by any supported model (trees, boosting, "
    "XGBoost, LightGBM, linear); methods of the final step",
)
def convert_pipeline(model: Pipeline) -> ModelSpec:
    source = SOURCES.lookup(type(model.steps[0][1])) if model.steps else None
    if source is not None:
        return source.fn(model)
    return model_spec(model, lambda ctx, flow: _pipeline_head(model, ctx, flow))


# a nested pipeline as a final step (VotingClassifier members, Pipeline in Pipeline)
register_head(Pipeline)(_pipeline_head)


@register_step(Pipeline)
def step_pipeline(model: Pipeline, ctx: Context, flow: Flow) -> Flow:
    for est in _pipeline_steps(model):
        flow = convert_step(est, ctx, flow)
    return flow


# ----------------------------------------------------------------- ColumnTransformer --


@register_step(ColumnTransformer)
def step_column_transformer(model: ColumnTransformer, ctx: Context, flow: Flow) -> Flow:
    require_fitted(model, "transformers_", "n_features_in_")
    indices = model._transformer_to_input_indices  # fitted name -> input column indices
    weights = model.transformer_weights or {}  # _iter: get_weight(name), also 'remainder'
    parts = []
    for name, trans, _columns in model.transformers_:
        if isinstance(trans, str) and trans == "drop":
            continue
        cols = np.asarray(indices.get(name, []), dtype=np.int64)
        if cols.size == 0:  # sklearn skips empty selections
            continue
        part = convert_step(trans, ctx, select(ctx, flow, cols, block=True))
        parts.append(weighted(model, ctx, part, weights.get(name)))
    if not parts:
        raise unsupported(model, "a ColumnTransformer that outputs no columns")
    out = concat(ctx, parts)
    n_out = getattr(model, "_n_features_out", None)
    if n_out is not None and int(n_out) != out.width:
        raise unsupported(model, f"output width {n_out} (converted {out.width})")
    # fit decided (sparse_threshold against the fit data's density): a sparse hstack of every
    # block, or a dense one of every block densified (_hstack)
    return replace(out, sparse="csr" if getattr(model, "sparse_output_", False) else "")


@register_frontend(ColumnTransformer, library="scikit-learn", methods=("transform",),
                   notes="names, indices, masks, callables; remainder drop/passthrough/"
                   "estimator; dense or sparse output (sparse_output_: CSR, read by the next step as "
                   "the library reads a sparse matrix)")
def convert_column_transformer(model: ColumnTransformer) -> ModelSpec:
    return convert_single(model)


# ---------------------------------------------------------------------- FeatureUnion --


@register_step(FeatureUnion)
def step_feature_union(model: FeatureUnion, ctx: Context, flow: Flow) -> Flow:
    require_fitted(model, "n_features_in_")
    weights = model.transformer_weights or {}
    parts = []
    for name, trans in model.transformer_list:
        if isinstance(trans, str) and trans == "drop":
            continue
        parts.append(weighted(model, ctx, convert_step(trans, ctx, flow), weights.get(name)))
    if not parts:
        raise unsupported(model, "a FeatureUnion that outputs no columns")
    return replace(concat(ctx, parts), sparse=sparse_parts(parts))


@register_frontend(FeatureUnion, library="scikit-learn", methods=("transform",),
                   notes="transformer_weights; a sparse part makes the output CSR, as scikit-learn's")
def convert_feature_union(model: FeatureUnion) -> ModelSpec:
    return convert_single(model)


__all__ = ["UnsupportedModelError", "convert_single", "model_spec"]

# tests/test_param_audit.py
# transform_input routes fit-time metadata through the steps; it never reaches predict
declare_params(Pipeline, implemented="steps", ignored="memory transform_input")
declare_params(ColumnTransformer,
               implemented="transformers remainder sparse_threshold transformer_weights")
declare_params(FeatureUnion, implemented="transformer_list transformer_weights")
