"""scikit-learn composition meta-estimators: Voting, Stacking, MultiOutput,
RegressorChain/ClassifierChain and the hyper-parameter searches (their ``best_estimator_``).
Bagging, AdaBoost, calibration and the multiclass wrappers are in
``sklearn_meta_ensembles.py``, TransformedTargetRegressor in ``sklearn_meta_target.py``. Every sub-estimator is converted with ``steps.convert_head``,
so anything Peregrine supports (linear models, trees, boosting, XGBoost, LightGBM, pipelines,
other meta-estimators) works inside them; outputs are combined in sklearn's order of
operations (sklearn 1.9 sources named per function):

* VotingClassifier (ensemble/_voting.py): soft = ``np.average`` of the members' predict_proba
  over the estimator axis (a running weighted sum, divided by the weight sum, or the count);
  hard = ``argmax(bincount(predictions, weights))``, the bincount as a running sum of one-hot
  predictions times weights; members are fitted on ``le_``-encoded targets.
* Stacking (ensemble/_stacking.py ``_concatenate_predictions``): members' stack_method_
  outputs, 1-D ones as columns, predict_proba's first column dropped for two classes, then X
  when passthrough; the final estimator reads that hstack (float64).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.ensemble import (
    StackingClassifier,
    StackingRegressor,
    VotingClassifier,
    VotingRegressor,
)
from sklearn.model_selection import GridSearchCV, RandomizedSearchCV
from sklearn.multioutput import (
    ClassifierChain,
    MultiOutputClassifier,
    MultiOutputRegressor,
    RegressorChain,
)

from peregrine.frontends import (  # noqa: F401  (they register their heads)
    sklearn_meta_ensembles,
    sklearn_meta_target,
)
from peregrine.frontends.base import (
    add_log_proba,
    declare_params,
    register_frontend,
    require_fitted,
    unsupported,
)
from peregrine.frontends.meta_util import (
    computed_flow,
    concat_nodes,
    encoded_positions,
    label_values,
    node_width,
    one_hot_prediction,
    select_columns,
    sub_head,
    weighted_sum,
)
from peregrine.frontends.sklearn_pipeline import convert_single
from peregrine.frontends.steps import Context, Flow, Head, concat, convert_head, register_head
from peregrine.ir import Op
from peregrine.ir.spec import MethodSpec

try:  # the successive-halving searches live in a module sklearn marks experimental
    from sklearn.model_selection._search_successive_halving import (
        HalvingGridSearchCV,
        HalvingRandomSearchCV,
    )
    SEARCHES: tuple[type, ...] = (GridSearchCV, RandomizedSearchCV, HalvingGridSearchCV,
                                  HalvingRandomSearchCV)
except ImportError:  # pragma: no cover - older/newer sklearn layouts
    SEARCHES = (GridSearchCV, RandomizedSearchCV)

CLASSIFIER_METHODS = ("predict", "predict_proba", "predict_log_proba", "decision_function",
                      "transform")


# -------------------------------------------------------------------------- Voting --


def _voting_weights(model: Any) -> list[float] | None:
    """``_weights_not_none``: the weights of the estimators that are not 'drop'."""
    if model.weights is None:
        return None
    return [float(w) for (_, est), w in zip(model.estimators, model.weights) if est != "drop"]


def _average_divisor(model: Any, weights: list[float] | None, count: int) -> float:
    """np.average's denominator: the weights' np.sum (which raises ZeroDivisionError at 0 on
    every call in sklearn, so such a model is refused), or the member count."""
    if weights is None:
        return float(count)
    total = float(np.sum(np.asarray(weights, dtype=np.float64)))
    if total == 0.0:
        raise unsupported(model, "weights summing to 0 (np.average raises ZeroDivisionError "
                          "in sklearn's predict)")
    return total


@register_head(VotingClassifier)
def head_voting_classifier(model: VotingClassifier, ctx: Context, flow: Flow) -> Head:
    require_fitted(model, "estimators_", "le_")
    classes = np.asarray(model.le_.classes_)
    k, ests = len(classes), list(model.estimators_)
    weights = _voting_weights(model)
    ones = [1.0] * len(ests)
    if model.voting == "soft":
        heads = [sub_head(model, e, ctx, flow, "predict_proba") for e in ests]
        for e in ests:
            if not np.array_equal(encoded_positions(model, e, k), np.arange(k)):
                raise unsupported(model, "a member that saw only some classes")
        probas = [h.outputs["predict_proba"] for h in heads]
        # np.average over the estimator axis: sum(p_i * w_i) / np.sum(w), or the mean
        divisor = _average_divisor(model, weights, len(ests))
        proba = weighted_sum(ctx, probas, weights or ones, divisor)
        label = ctx.g.add(Op.ARGMAX, (proba,), dtype="int64", width=1)
        outputs = {"predict": label, "predict_proba": proba}
        methods = {"predict": MethodSpec("predict", labels=classes),
                   "predict_proba": MethodSpec("predict_proba")}
        if model.flatten_transform:  # else transform is 3-D (not offered, see docs)
            outputs["transform"] = concat_nodes(ctx, probas)
            methods["transform"] = MethodSpec("transform")
        return Head(outputs, methods)
    if weights is not None and min(weights) < 0:
        # bincount's output stops at the largest predicted class; with non-negative weights
        # the classes past it (count 0) can never beat it, so a full-width argmax agrees
        raise unsupported(model, "negative weights with voting='hard'")
    heads = [sub_head(model, e, ctx, flow, "predict") for e in ests]
    votes = [one_hot_prediction(ctx, h, encoded_positions(model, e, k), k)
             for h, e in zip(heads, ests)]
    counts = weighted_sum(ctx, votes, weights or ones, 1.0)
    label = ctx.g.add(Op.ARGMAX, (counts,), dtype="int64", width=1)
    predicted = concat_nodes(ctx, [label_values(model, ctx, h) for h in heads])
    dtype = np.result_type(*[np.asarray(e.classes_).dtype for e in ests]).name
    return Head({"predict": label, "transform": predicted},
                {"predict": MethodSpec("predict", labels=classes),
                 "transform": MethodSpec("transform", dtype=dtype)})


@register_head(VotingRegressor)
def head_voting_regressor(model: VotingRegressor, ctx: Context, flow: Flow) -> Head:
    require_fitted(model, "estimators_")
    preds = []
    for e in model.estimators_:
        head = sub_head(model, e, ctx, flow, "predict")
        if node_width(ctx, head.outputs["predict"]) != 1:
            raise unsupported(model, "multi-output members")
        preds.append(head.outputs["predict"])
    weights = _voting_weights(model)
    divisor = _average_divisor(model, weights, len(preds))
    pred = weighted_sum(ctx, preds, weights or [1.0] * len(preds), divisor)
    return Head({"predict": pred, "transform": concat_nodes(ctx, preds)},
                {"predict": MethodSpec("predict", squeeze=True),
                 "transform": MethodSpec("transform")})


# ------------------------------------------------------------------------ Stacking --


def _stack_features(model: Any, ctx: Context, flow: Flow,
                    n_classes: int | None) -> tuple[Flow, str]:
    """The hstack the final estimator reads (``_transform``), and its dtype."""
    require_fitted(model, "estimators_", "final_estimator_", "stack_method_")
    cols: list[Flow] = []
    dtypes: list[np.dtype] = []
    for est, meth in zip(model.estimators_, model.stack_method_):
        head = sub_head(model, est, ctx, flow, meth)
        node = head.outputs[meth]
        dtypes.append(np.dtype(np.float64))
        if meth == "predict" and head.methods["predict"].labels is not None:
            node = label_values(model, ctx, head)  # members predict encoded labels
            dtypes[-1] = np.asarray(head.methods["predict"].labels).dtype
        elif meth == "predict_proba" and n_classes == 2:
            node = select_columns(ctx, node, range(1, node_width(ctx, node)))  # preds[:, 1:]
        cols.append(computed_flow(node, node_width(ctx, node)))
    if model.passthrough:
        cols.append(flow)
        dtypes.append(np.dtype(np.float32))  # X: float32 or float64, promoted by the rest
    meta = concat(ctx, cols)
    # np.hstack: NaN only where X had it; integer labels alone stay integers
    flow = Flow(meta.node, meta.src, nan=model.passthrough and flow.nan, keeps_dtype=False)
    return flow, np.result_type(*dtypes).name


def _final_head(model: Any, ctx: Context, meta: Flow) -> Head:
    """The final estimator on the stacked features. Its re-validation of them (check_array:
    a member's prediction that overflowed raises there) holds for the methods it runs, not for
    ``transform``, which returns the stack unvalidated as scikit-learn does."""
    before = set(ctx.guarded)
    final = sub_head(model, model.final_estimator_, ctx, meta, "predict")
    ctx.exempt_from(set(ctx.guarded) - before, meta.node)
    return final


@register_head(StackingClassifier)
def head_stacking_classifier(model: StackingClassifier, ctx: Context, flow: Flow) -> Head:
    require_fitted(model, "classes_")
    if isinstance(model._label_encoder, list):
        raise unsupported(model, "multilabel targets")
    classes = np.asarray(model.classes_)
    meta, dtype = _stack_features(model, ctx, flow, len(classes))
    final = _final_head(model, ctx, meta)
    methods = dict(final.methods)
    # the final estimator predicts encoded labels: map them through _label_encoder
    encoded = encoded_positions(model, model.final_estimator_, len(classes))
    methods["predict"] = MethodSpec("predict", labels=classes[encoded])
    outputs: dict[str, str] = {m: final.outputs[m] for m in ("predict", "predict_proba",
                                                             "decision_function")
                               if m in final.outputs}
    outputs["transform"] = meta.node
    methods["transform"] = MethodSpec("transform", dtype=dtype)
    return Head(outputs, {m: methods[m] for m in outputs})


@register_head(StackingRegressor)
def head_stacking_regressor(model: StackingRegressor, ctx: Context, flow: Flow) -> Head:
    meta, dtype = _stack_features(model, ctx, flow, None)
    final = _final_head(model, ctx, meta)
    return Head({"predict": final.outputs["predict"], "transform": meta.node},
                {"predict": final.methods["predict"],
                 "transform": MethodSpec("transform", dtype=dtype)})


# -------------------------------------------------------------------- MultiOutput --


@register_head(MultiOutputRegressor)
def head_multioutput_regressor(model: Any, ctx: Context, flow: Flow) -> Head:
    require_fitted(model, "estimators_")
    preds = []
    for e in model.estimators_:
        node = sub_head(model, e, ctx, flow, "predict").outputs["predict"]
        if node_width(ctx, node) != 1:
            raise unsupported(model, "members with multi-output predictions")
        preds.append(node)
    return Head({"predict": concat_nodes(ctx, preds)}, {"predict": MethodSpec("predict")})


@register_head(MultiOutputClassifier)
def head_multioutput_classifier(model: Any, ctx: Context, flow: Flow) -> Head:
    """predict only: the labels of every output as numbers, (n, n_outputs). predict_proba
    is a list of arrays in sklearn, which a compiled model does not return."""
    require_fitted(model, "estimators_")
    heads = [sub_head(model, e, ctx, flow, "predict") for e in model.estimators_]
    cols = [label_values(model, ctx, h) for h in heads]
    dtype = np.result_type(*[np.asarray(h.methods["predict"].labels).dtype for h in heads])
    return Head({"predict": concat_nodes(ctx, cols)},
                {"predict": MethodSpec("predict", dtype=dtype.name)})


# ------------------------------------------------------------------------- Chains --


def _chain_response(model: Any, ctx: Context, head: Head, method: str) -> str:
    """``_get_response_values(est, X_aug, method)`` as one column."""
    if method == "predict":
        if head.methods["predict"].labels is not None:
            return label_values(model, ctx, head)
        node = head.outputs["predict"]
    elif method == "predict_proba":
        node = head.outputs["predict_proba"]
        if node_width(ctx, node) != 2:
            raise unsupported(model, "members with more than two classes")
        node = select_columns(ctx, node, [1])  # the positive class, classes_[-1]
    elif method == "decision_function":
        node = head.outputs["decision_function"]
    else:
        raise unsupported(model, f"chain_method={method!r}",
                          "predict, predict_proba, decision_function")
    if node_width(ctx, node) != 1:
        raise unsupported(model, f"members whose {method} has several columns")
    return node


def _head_chain(model: Any, ctx: Context, flow: Flow) -> Head:
    """_BaseChain._get_predictions: member i reads hstack(X, features of members < i)."""
    require_fitted(model, "estimators_", "order_")
    ctx.reject_nan(flow)  # validate_data rejects NaN and inf
    chain_method = getattr(model, "chain_method_", "predict")
    wanted = ["predict"]
    if isinstance(model, ClassifierChain):
        wanted += [m for m in ("predict_proba", "decision_function")
                   if hasattr(model, m)]
    features: list[str] = []
    outputs: dict[str, list[str]] = {m: [] for m in wanted}
    for est in model.estimators_:
        aug = concat(ctx, [flow] + [computed_flow(f, 1) for f in features])
        aug = Flow(aug.node, aug.src, nan=flow.nan, keeps_dtype=False)  # float64 hstack
        needed = set(wanted) | {chain_method}
        head = sub_head(model, est, ctx, aug, *sorted(needed))
        features.append(_chain_response(model, ctx, head, chain_method))
        for m in wanted:
            outputs[m].append(_chain_response(model, ctx, head, m))
    order = np.asarray(model.order_, dtype=np.int64)
    inv = np.empty_like(order)
    inv[order] = np.arange(len(order))
    nodes = {m: select_columns(ctx, concat_nodes(ctx, cols), inv) for m, cols in outputs.items()}
    # Y_output_chain is a float64 array: labels come back as float64 too
    methods = {m: MethodSpec(m) for m in nodes}
    if "predict_proba" in nodes:  # ClassifierChain: np.log(self.predict_proba(X))
        add_log_proba(ctx.g, nodes, methods, len(order))
    return Head(nodes, methods)


register_head(RegressorChain, ClassifierChain)(_head_chain)


# ------------------------------------------------------------ searches, frozen models --


def _check_refit(model: Any) -> None:
    if not model.refit:
        raise unsupported(model, "refit=False (there is no best_estimator_ to compile)")
    require_fitted(model, "best_estimator_")


@register_head(*SEARCHES)
def head_search(model: Any, ctx: Context, flow: Flow) -> Head:
    _check_refit(model)
    return convert_head(model.best_estimator_, ctx, flow)


def convert_search(model: Any) -> Any:
    _check_refit(model)  # before n_features_in_, which only exists through best_estimator_
    return convert_single(model)


try:
    from sklearn.frozen import FrozenEstimator

    @register_head(FrozenEstimator)
    def head_frozen(model: Any, ctx: Context, flow: Flow) -> Head:
        return convert_head(model.estimator, ctx, flow)

    register_frontend(FrozenEstimator, library="scikit-learn", methods=CLASSIFIER_METHODS,
                      notes="the wrapped estimator's methods")(convert_single)
    declare_params(FrozenEstimator, implemented="estimator")
except ImportError:  # pragma: no cover - sklearn < 1.6
    pass


# --------------------------------------------------------------------- frontends --

register_frontend(VotingClassifier, library="scikit-learn",
                  methods=("predict", "predict_proba", "transform"),
                  notes="hard/soft, weights; any supported members; transform when "
                  "flatten_transform (soft) or hard")(convert_single)
register_frontend(VotingRegressor, library="scikit-learn", methods=("predict", "transform"),
                  notes="weights; any supported members")(convert_single)
register_frontend(StackingClassifier, library="scikit-learn",
                  methods=("predict", "predict_proba", "decision_function", "transform"),
                  notes="stack_method auto/predict_proba/decision_function/predict, "
                  "passthrough; binary probabilities drop their first column")(convert_single)
register_frontend(StackingRegressor, library="scikit-learn", methods=("predict", "transform"),
                  notes="passthrough; any supported members and final estimator")(convert_single)
register_frontend(MultiOutputRegressor, library="scikit-learn", methods=("predict",),
                  notes="single-output members")(convert_single)
register_frontend(MultiOutputClassifier, library="scikit-learn", methods=("predict",),
                  notes="predict (numeric labels); predict_proba returns a list in sklearn: "
                  "not offered")(convert_single)
register_frontend(RegressorChain, library="scikit-learn", methods=("predict",),
                  notes="order, cv; rejects NaN as sklearn does")(convert_single)
register_frontend(ClassifierChain, library="scikit-learn",
                  methods=("predict", "predict_proba", "predict_log_proba",
                           "decision_function"),
                  notes="binary members; chain_method predict/predict_proba/"
                  "decision_function; predict returns float64 labels as sklearn")(convert_single)
register_frontend(*SEARCHES, library="scikit-learn", methods=CLASSIFIER_METHODS,
                  notes="compiles best_estimator_ (refit=True); its methods")(convert_search)

__all__ = ["SEARCHES", "convert_search"]

# tests/test_param_audit.py
declare_params(VotingClassifier, implemented="estimators voting weights flatten_transform")
declare_params(VotingRegressor, implemented="estimators weights")
declare_params(StackingClassifier,
               implemented="estimators final_estimator passthrough stack_method")
declare_params(StackingRegressor, implemented="estimators final_estimator passthrough")
declare_params(MultiOutputClassifier, MultiOutputRegressor, implemented="estimator")
declare_params(ClassifierChain, implemented="estimator order chain_method")
declare_params(RegressorChain, implemented="estimator order")
_HALVING = "aggressive_elimination factor max_resources min_resources resource"
for _search, _fit_only in zip(SEARCHES, ("param_grid", "param_distributions n_iter",
                                         "param_grid " + _HALVING,
                                         "param_distributions n_candidates " + _HALVING)):
    declare_params(_search, implemented="estimator refit", ignored=_fit_only)
