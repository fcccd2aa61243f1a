"""scikit-learn ensembles of fitted sub-estimators: Bagging, AdaBoost (SAMME, AdaBoost.R2),
CalibratedClassifierCV, OneVsRestClassifier and OneVsOneClassifier (sklearn 1.9 sources
named per function). Registered from ``sklearn_meta.py``; helpers in ``meta_util.py``.

* Bagging (ensemble/_bagging.py): members read ``X[:, estimators_features_[i]]``;
  predict_proba sums members' probabilities (a member that saw only some classes adds into
  its own columns; one without predict_proba adds a one-hot vote) per joblib job, sums the
  jobs, divides by n_estimators; predict = argmax. decision_function / regression: the same
  sums of members' outputs. predict_log_proba: members' log-probabilities through
  np.logaddexp (per job, then jobs) minus log(n_estimators), or log(predict_proba) when the
  base estimator has no predict_log_proba (_bagging.py).
* AdaBoostClassifier.decision_function: sum over members of ``where(pred == classes, w,
  -1/(K-1) * w)`` (a per-member lookup table on the one-hot prediction), divided by
  ``estimator_weights_.sum()``; binary: ``-d0 + d1``. predict_proba:
  ``softmax([-d, d] / 2)`` or ``softmax(d / (K-1))``. AdaBoostRegressor: weighted median.
* CalibratedClassifierCV: per calibrated classifier, the member's decision_function (else
  predict_proba, positive column when binary) per class through its calibrator (sigmoid
  ``expit(-(a*T + b))``, isotonic ``np.interp`` on the thresholds), binary -> [1 - p, p],
  multiclass normalised by the row sum (zero -> uniform); the classifiers are averaged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import is_classifier, is_regressor
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import (
    AdaBoostClassifier,
    AdaBoostRegressor,
    BaggingClassifier,
    BaggingRegressor,
)
from sklearn.ensemble._base import _partition_estimators
from sklearn.isotonic import IsotonicRegression
from sklearn.multiclass import OneVsOneClassifier, OneVsRestClassifier

from peregrine.frontends.base import (
    add_log_proba,
    declare_params,
    qualified_name,
    register_frontend,
    require_fitted,
    unsupported,
)
from peregrine.frontends.meta_util import (
    class_positions,
    concat_nodes,
    label_values,
    node_width,
    one_hot_prediction,
    response,
    select_columns,
    sub_head,
    weighted_sum,
)
from peregrine.frontends.sklearn_pipeline import convert_single
from peregrine.frontends.steps import Context, Flow, Head, register_head, select
from peregrine.ir import Link, Op
from peregrine.ir.spec import MethodSpec


def _scatter(ctx: Context, node: str, positions: np.ndarray, width: int) -> str:
    """(n, len(positions)) -> (n, width): column i moved to positions[i], zeros elsewhere. A
    0/1 matrix product: each output is one finite value plus exact zeros, so it is exact."""
    if np.array_equal(positions, np.arange(width)):
        return node
    w = np.zeros((len(positions), width))
    w[np.arange(len(positions)), positions] = 1.0
    return ctx.g.add(Op.LINEAR, (node,), width=width, weight=w, bias=np.zeros(width))


def _job_mean(ctx: Context, model: Any, nodes: list[str]) -> str:
    """sum over joblib jobs of each job's running sum, / n_estimators (Bagging's reduce)."""
    _, _, starts = _partition_estimators(model.n_estimators, model.n_jobs)
    if len(starts) <= 2:
        return weighted_sum(ctx, nodes, [1.0] * len(nodes), model.n_estimators)
    parts = [weighted_sum(ctx, nodes[a:b], [1.0] * (b - a), 1.0)
             for a, b in zip(starts[:-1], starts[1:])]
    return weighted_sum(ctx, parts, [1.0] * len(parts), model.n_estimators)


# ------------------------------------------------------------------------ Bagging --


def _bagging_members(model: Any, ctx: Context, flow: Flow, method: str) -> list[Head]:
    require_fitted(model, "estimators_", "estimators_features_")
    return [sub_head(model, est, ctx, select(ctx, flow, feats), method)
            for est, feats in zip(model.estimators_, model.estimators_features_)]


@register_head(BaggingClassifier)
def head_bagging_classifier(model: BaggingClassifier, ctx: Context, flow: Flow) -> Head:
    require_fitted(model, "classes_", "n_classes_")
    k = int(model.n_classes_)
    heads = _bagging_members(model, ctx, flow, "predict")
    probas, full = [], True
    for est, head in zip(model.estimators_, heads):
        pos = np.asarray(est.classes_).astype(np.int64)  # members saw encoded targets
        full = full and len(pos) == k
        member_proba = response(model, est, head, "predict_proba")  # hasattr, as sklearn
        if member_proba is not None:
            probas.append(_scatter(ctx, member_proba, pos, k))
        else:  # resort to voting: proba[i, predictions[i]] += 1
            probas.append(one_hot_prediction(ctx, head, pos, k))
    proba = _job_mean(ctx, model, probas)
    label = ctx.g.add(Op.ARGMAX, (proba,), dtype="int64", width=1)
    outputs = {"predict": label, "predict_proba": proba}
    methods = {"predict": MethodSpec("predict", labels=np.asarray(model.classes_)),
               "predict_proba": MethodSpec("predict_proba")}
    _bagging_log_proba(model, ctx, heads, outputs, methods, k)
    # decision_function sums members' arrays as they are: only when every member saw every
    # class (sklearn cannot add differently shaped decisions either)
    if full and all("decision_function" in h.outputs for h in heads):
        outputs["decision_function"] = _job_mean(
            ctx, model, [h.outputs["decision_function"] for h in heads])
        methods["decision_function"] = MethodSpec("decision_function", squeeze=k == 2)
    return Head(outputs, methods)


def _bagging_log_proba(model: Any, ctx: Context, heads: list[Head], outputs: dict[str, str],
                       methods: dict[str, MethodSpec], k: int) -> None:
    """predict_log_proba: np.log(predict_proba) when estimator_ has no predict_log_proba;
    else the members' log-probabilities combined by np.logaddexp per joblib job (a member's
    classes into their columns), the jobs likewise, minus log(n_estimators) (Op.LOG_ADD_EXP):
    finite where a member's log-probability is (naive Bayes), unlike log(predict_proba)."""
    if not hasattr(model.estimator_, "predict_log_proba"):
        add_log_proba(ctx.g, outputs, methods, k)
        return
    for est, head in zip(model.estimators_, heads):
        if "predict_log_proba" not in head.outputs:
            raise unsupported(model, f"member {qualified_name(est)} without predict_log_proba")
    _, _, starts = _partition_estimators(model.n_estimators, model.n_jobs)
    outputs["predict_log_proba"] = ctx.g.add(
        Op.LOG_ADD_EXP, tuple(h.outputs["predict_log_proba"] for h in heads), width=k,
        columns=[np.asarray(e.classes_).astype(np.int64) for e in model.estimators_],
        starts=[int(v) for v in starts], shift=float(np.log(model.n_estimators)))
    methods["predict_log_proba"] = MethodSpec("predict_log_proba")


@register_head(BaggingRegressor)
def head_bagging_regressor(model: BaggingRegressor, ctx: Context, flow: Flow) -> Head:
    heads = _bagging_members(model, ctx, flow, "predict")
    pred = _job_mean(ctx, model, [h.outputs["predict"] for h in heads])
    return Head({"predict": pred}, {"predict": heads[0].methods["predict"]})


# ----------------------------------------------------------------------- AdaBoost --


@register_head(AdaBoostClassifier)
def head_adaboost_classifier(model: AdaBoostClassifier, ctx: Context, flow: Flow) -> Head:
    require_fitted(model, "estimators_", "estimator_weights_", "classes_")
    if getattr(model, "algorithm", "SAMME") not in ("SAMME", "deprecated"):
        raise unsupported(model, f"algorithm={model.algorithm!r}", "SAMME")
    classes = np.asarray(model.classes_)
    k = len(classes)
    if k < 2:
        raise unsupported(model, "a single class")
    ctx.reject_nan(flow)  # _check_X: validate_data rejects NaN and inf
    terms = []
    for est, w in zip(model.estimators_, model.estimator_weights_):
        head = sub_head(model, est, ctx, flow, "predict")
        pos = class_positions(model, head.methods["predict"].labels, classes)
        # np.where(pred == classes, w, -1 / (n_classes - 1) * w), as a lookup table
        table = np.full((len(pos), k), -1 / (k - 1) * w)
        table[np.arange(len(pos)), pos] = w
        onehot = one_hot_prediction(ctx, head, np.arange(len(pos)), len(pos))
        terms.append(ctx.g.add(Op.LINEAR, (onehot,), width=k, weight=table,
                               bias=np.zeros(k)))
    pred = weighted_sum(ctx, terms, [1.0] * len(terms), model.estimator_weights_.sum())
    if k == 2:  # pred[:, 0] *= -1; pred.sum(axis=1)
        dec = ctx.g.add(Op.LINEAR, (pred,), width=1, weight=np.array([[-1.0], [1.0]]),
                        bias=np.zeros(1))
        label = ctx.g.add(Op.THRESHOLD, (dec,), dtype="int64", width=1, value=0.0,
                          strict=True)
        both = ctx.g.add(Op.LINEAR, (dec,), width=2, weight=np.array([[-1.0, 1.0]]),
                         bias=np.zeros(2))
        scaled = weighted_sum(ctx, [both], [1.0], 2.0)  # vstack([-d, d]).T / 2
    else:
        dec = pred
        label = ctx.g.add(Op.ARGMAX, (dec,), dtype="int64", width=1)
        scaled = weighted_sum(ctx, [dec], [1.0], k - 1)  # decision /= n_classes - 1
    proba = ctx.g.add(Op.LINK, (scaled,), width=k, kind=Link.SOFTMAX)
    head = Head({"predict": label, "decision_function": dec, "predict_proba": proba},
                {"predict": MethodSpec("predict", labels=classes),
                 "decision_function": MethodSpec("decision_function", squeeze=k == 2),
                 "predict_proba": MethodSpec("predict_proba")})
    add_log_proba(ctx.g, head.outputs, head.methods, k)  # np.log(self.predict_proba(X))
    return head


@register_head(AdaBoostRegressor)
def head_adaboost_regressor(model: AdaBoostRegressor, ctx: Context, flow: Flow) -> Head:
    require_fitted(model, "estimators_", "estimator_weights_")
    ctx.reject_nan(flow)  # _check_X: validate_data rejects NaN and inf
    preds = []
    for est in model.estimators_:
        node = sub_head(model, est, ctx, flow, "predict").outputs["predict"]
        if node_width(ctx, node) != 1:
            raise unsupported(model, "multi-output members")
        preds.append(node)
    weights = np.asarray(model.estimator_weights_[: len(preds)], dtype=np.float64)
    median = ctx.g.add(Op.WEIGHTED_MEDIAN, (concat_nodes(ctx, preds),), width=1,
                       weights=weights)
    return Head({"predict": median}, {"predict": MethodSpec("predict", squeeze=True)})


# ---------------------------------------------------------------- Calibration --


def _calibrated(model: Any, cc: Any, ctx: Context, flow: Flow, classes: np.ndarray) -> str:
    """One _CalibratedClassifier.predict_proba."""
    est, k = cc.estimator, len(classes)
    head = sub_head(model, est, ctx, flow)
    # _get_response_values: decision_function first, then predict_proba
    pred = response(model, est, head, "decision_function")
    if pred is None:
        pred = response(model, est, head, "predict_proba")
        if pred is None:
            raise unsupported(model, f"estimator {qualified_name(est)} without "
                              "decision_function or predict_proba")
        if node_width(ctx, pred) == 2:  # binary: the positive class's column
            pred = select_columns(ctx, pred, [1])
    width = node_width(ctx, pred)
    pos = class_positions(model, est.classes_, classes)
    cals = list(cc.calibrators)[:width]
    if len(cals) != width or (k > 2 and width != len(pos)):
        raise unsupported(model, "a member whose classes do not match its calibrators")
    if all(type(c).__name__ == "_SigmoidCalibration" for c in cals):
        # expit(-(a_ * T + b_))
        lin = ctx.g.add(Op.AFFINE, (pred,), width=width,
                        scale=np.array([c.a_ for c in cals], dtype=np.float64),
                        shift=np.array([c.b_ for c in cals], dtype=np.float64))
        p = ctx.g.add(Op.LINK, (lin,), width=width, kind=Link.SIGMOID, scale=-1.0)
        isotonic = False
    elif all(isinstance(c, IsotonicRegression) for c in cals):
        # IsotonicRegression.predict re-validates the scores (check_array, finite only): a
        # decision value that overflowed to infinity raises there (the sigmoid takes it)
        ctx.guard(Flow(pred, (None,) * width), model, "inf+nan")
        # clip to [X_min_, X_max_] then np.interp: the thresholds start and end at X_min_ and
        # X_max_, so interp with left/right = the end values gives the same numbers
        xp = [np.asarray(c.X_thresholds_, dtype=np.float64) for c in cals]
        fp = [np.asarray(c.y_thresholds_, dtype=np.float64) for c in cals]
        if any(x[0] != c.X_min_ or x[-1] != c.X_max_ for x, c in zip(xp, cals)):
            raise unsupported(model, "isotonic thresholds not spanning [X_min_, X_max_]")
        p = ctx.g.add(Op.INTERP, (pred,), width=width, xp=xp, fp=fp,
                      left=np.array([f[0] for f in fp]), right=np.array([f[-1] for f in fp]))
        isotonic = True
        if max(float(f.max()) for f in fp) > 1.0 + 1e-5:
            raise unsupported(model, "isotonic calibrators above 1 + 1e-5")
    else:
        raise unsupported(model, f"method={model.method!r}", "sigmoid, isotonic")
    if k == 2:
        proba = ctx.g.add(Op.BINARY_PROBA, (p,), width=2)  # proba[:, 0] = 1 - proba[:, 1]
    else:
        proba = ctx.g.add(Op.NORMALIZE, (_scatter(ctx, p, pos, k),), width=k, norm="l1",
                          zero="uniform")
    if isotonic:
        # proba[(1 < proba) & (proba <= 1 + 1e-5)] = 1: a clip at 1, as nothing exceeds
        # 1 + 1e-5 (isotonic values are at most 1 + 1e-5, checked above)
        proba = ctx.g.add(Op.CLIP, (proba,), width=k, low=-np.inf, high=1.0)
    return proba


@register_head(CalibratedClassifierCV)
def head_calibrated(model: CalibratedClassifierCV, ctx: Context, flow: Flow) -> Head:
    require_fitted(model, "calibrated_classifiers_", "classes_")
    if model.method not in ("sigmoid", "isotonic"):
        raise unsupported(model, f"method={model.method!r}", "sigmoid, isotonic")
    classes = np.asarray(model.classes_)
    probas = [_calibrated(model, cc, ctx, flow, classes)
              for cc in model.calibrated_classifiers_]
    proba = weighted_sum(ctx, probas, [1.0] * len(probas), len(probas))
    label = ctx.g.add(Op.ARGMAX, (proba,), dtype="int64", width=1)
    return Head({"predict": label, "predict_proba": proba},
                {"predict": MethodSpec("predict", labels=classes),
                 "predict_proba": MethodSpec("predict_proba")})


# ----------------------------------------------------------- OneVsRest / OneVsOne --


def _binary_score(model: Any, est: Any, head: Head, ctx: Context) -> str:
    """multiclass._predict_binary: predict (regressors), else decision_function, else the
    positive class's probability."""
    if is_regressor(est):
        node = head.outputs.get("predict")
    else:
        node = response(model, est, head, "decision_function")
        proba = None if node is not None else response(model, est, head, "predict_proba")
        if proba is not None:
            node = select_columns(ctx, proba, [1])
    if node is None or node_width(ctx, node) != 1:
        raise unsupported(model, f"member {qualified_name(est)} without a one-column score")
    return node


def _threshold(est: Any) -> float:
    """multiclass._threshold_for_binary_predict."""
    return 0.0 if hasattr(est, "decision_function") and is_classifier(est) else 0.5


@register_head(OneVsRestClassifier)
def head_ovr(model: OneVsRestClassifier, ctx: Context, flow: Flow) -> Head:
    require_fitted(model, "estimators_", "label_binarizer_")
    if model.label_binarizer_.y_type_.startswith("multilabel"):
        raise unsupported(model, "multilabel targets")
    ests, classes = list(model.estimators_), np.asarray(model.classes_)
    for e in ests:
        if type(e).__name__ == "_ConstantPredictor":
            raise unsupported(model, "a class present in every or no training row "
                              "(_ConstantPredictor member)")
    heads = [sub_head(model, e, ctx, flow) for e in ests]
    scores = [_binary_score(model, e, h, ctx) for e, h in zip(ests, heads)]
    if len(ests) == 1:
        label = ctx.g.add(Op.THRESHOLD, (scores[0],), dtype="int64", width=1,
                          value=_threshold(ests[0]), strict=True)
    else:  # the reversed maximum loop breaks ties to the lowest index, as argmax
        label = ctx.g.add(Op.ARGMAX, (concat_nodes(ctx, scores),), dtype="int64", width=1)
    outputs = {"predict": label}
    methods = {"predict": MethodSpec("predict", labels=classes)}
    if all("predict_proba" in h.outputs for h in heads):
        y = concat_nodes(ctx, [select_columns(ctx, h.outputs["predict_proba"], [1])
                               for h in heads])
        if len(ests) == 1:
            y = ctx.g.add(Op.BINARY_PROBA, (y,), width=2)
        # np.divide(Y, row_sums, where=row_sums != 0): zero rows stay zero
        outputs["predict_proba"] = ctx.g.add(Op.NORMALIZE, (y,), width=max(len(ests), 2),
                                             norm="l1")
        methods["predict_proba"] = MethodSpec("predict_proba")
    if all("decision_function" in h.outputs for h in heads):
        if len(ests) == 1:
            outputs["decision_function"] = heads[0].outputs["decision_function"]
            methods["decision_function"] = heads[0].methods["decision_function"]
        else:
            outputs["decision_function"] = concat_nodes(
                ctx, [h.outputs["decision_function"] for h in heads])
            methods["decision_function"] = MethodSpec("decision_function")
    return Head(outputs, methods)


@register_head(OneVsOneClassifier)
def head_ovo(model: OneVsOneClassifier, ctx: Context, flow: Flow) -> Head:
    require_fitted(model, "estimators_", "classes_")
    if getattr(model, "pairwise_indices_", None) is not None:
        raise unsupported(model, "a precomputed-kernel member (pairwise_indices_)")
    ests, classes = list(model.estimators_), np.asarray(model.classes_)
    heads = [sub_head(model, e, ctx, flow, "predict") for e in ests]
    # members were fitted on 0/1 targets (class i vs class j): predictions are 0 or 1
    votes = concat_nodes(ctx, [label_values(model, ctx, h) for h in heads])
    conf = concat_nodes(ctx, [_binary_score(model, e, h, ctx) for e, h in zip(ests, heads)])
    dec = ctx.g.add(Op.OVR_DECISION, (votes, conf), width=len(classes),
                    n_classes=len(classes))
    if len(classes) == 2:
        dec = select_columns(ctx, dec, [1])  # Y[:, 1]
        label = ctx.g.add(Op.THRESHOLD, (dec,), dtype="int64", width=1,
                          value=_threshold(ests[0]), strict=True)
    else:
        label = ctx.g.add(Op.ARGMAX, (dec,), dtype="int64", width=1)
    return Head({"predict": label, "decision_function": dec},
                {"predict": MethodSpec("predict", labels=classes),
                 "decision_function": MethodSpec("decision_function",
                                                 squeeze=len(classes) == 2)})


# --------------------------------------------------------------------- frontends --

register_frontend(BaggingClassifier, library="scikit-learn",
                  methods=("predict", "predict_proba", "predict_log_proba",
                           "decision_function"),
                  notes="estimators_features_ (bootstrap_features too); proba averaging or "
                  "vote fallback; decision_function when every member saw every class"
                  )(convert_single)
register_frontend(BaggingRegressor, library="scikit-learn", methods=("predict",),
                  notes="estimators_features_; any supported member")(convert_single)
register_frontend(AdaBoostClassifier, library="scikit-learn",
                  methods=("predict", "predict_proba", "predict_log_proba",
                           "decision_function"),
                  notes="SAMME; rejects NaN as sklearn does")(convert_single)
register_frontend(AdaBoostRegressor, library="scikit-learn", methods=("predict",),
                  notes="weighted median (AdaBoost.R2); rejects NaN as sklearn does"
                  )(convert_single)
register_frontend(CalibratedClassifierCV, library="scikit-learn",
                  methods=("predict", "predict_proba"),
                  notes="sigmoid and isotonic, ensemble True/False, binary and multiclass; "
                  "not method='temperature'")(convert_single)
register_frontend(OneVsRestClassifier, library="scikit-learn",
                  methods=("predict", "predict_proba", "decision_function"),
                  notes="multiclass and binary; multilabel unsupported")(convert_single)
register_frontend(OneVsOneClassifier, library="scikit-learn",
                  methods=("predict", "decision_function"),
                  notes="votes plus normalised confidences (_ovr_decision_function)"
                  )(convert_single)

# tests/test_param_audit.py: Bagging's max_features/bootstrap_features give the feature
# subsets read at predict time; the fitted estimators_ carry the rest.
declare_params(BaggingClassifier, BaggingRegressor,
               implemented="estimator max_features bootstrap_features",
               ignored="bootstrap max_samples n_estimators oob_score")
declare_params(AdaBoostClassifier, implemented="estimator",
               ignored="learning_rate n_estimators")
declare_params(AdaBoostRegressor, implemented="estimator",
               ignored="learning_rate loss n_estimators")
declare_params(CalibratedClassifierCV, implemented="estimator method ensemble")
declare_params(OneVsRestClassifier, OneVsOneClassifier, implemented="estimator")
