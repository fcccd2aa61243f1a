"""Spark ML predictors: LogisticRegression, LinearRegression, DecisionTree*, RandomForest*,
GBT* (``org.apache.spark.ml.classification`` / ``.regression`` model classes).

Methods (docs/sources.md): ``predict`` is Spark's ``prediction`` column (a float64 class index
or value), ``predict_proba`` its ``probability`` column and ``decision_function`` its
``rawPrediction`` column, both (n, classes), for classifiers.

Trees: Spark compares float64 features, ``x <= threshold`` going left on a continuous split
(``ContinuousSplit.shouldGoLeft``), NaN going right; a categorical split sends the categories
saved as ``leftCategoriesOrThreshold`` left, every other value right (the Forest's category rule
truncates first, so a fractional value in a categorical feature, which no Spark stage makes,
would take its integer part's side). Leaves: a DecisionTreeClassifier's rawPrediction is its
leaf's class counts (``impurityStats``); a RandomForestClassifier sums each tree's counts
divided by their total, in tree order; probability normalises rawPrediction by its sum; GBT
sums ``prediction * treeWeight`` in tree order (Spark's ``BLAS.dot``, vectorised on a JVM with
the vector module: the order may differ there by an ulp).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from peregrine.formats.spark_ml import SparkStage
from peregrine.frontends.spark_ml_stages import (
    Ctx,
    ModelOut,
    matrix,
    one_row,
    refuse,
    register_stage,
    vector,
)
from peregrine.ir import Aggregation, Link, Op, bitset_from_categories, concat_trees, make_forest
from peregrine.ir.spec import MethodSpec

CLS = "org.apache.spark.ml.classification."
REG = "org.apache.spark.ml.regression."


def _features(stage: SparkStage, ctx: Ctx, n_features: int | None) -> str:
    col = ctx.read(stage, str(stage.params.get("featuresCol", "features")), vector=True)
    if n_features is not None and n_features != col.width:
        raise refuse(stage, f"a model of {n_features} features reading a vector of "
                     f"{col.width}")
    return ctx.node_of([col])


def _regressor(stage: SparkStage, ctx: Ctx, pred: str) -> None:
    name = str(stage.params.get("predictionCol") or "")
    if name:
        ctx.write(stage, name, pred, vector=False)
    ctx.model = ModelOut({"predict": pred}, {"predict": MethodSpec("predict", squeeze=True)})


def _thresholds(stage: SparkStage, n_classes: int) -> np.ndarray | None:
    if not stage.is_set("thresholds"):
        return None
    t = np.asarray(stage.params["thresholds"], dtype=np.float64)
    if t.shape != (n_classes,) or (t <= 0).any():
        raise refuse(stage, f"thresholds={t.tolist()}", "one positive threshold per class")
    return t


def _classifier(stage: SparkStage, ctx: Ctx, raw: str, proba: str, n_classes: int,
                pred: str | None = None) -> None:
    """The three columns of ProbabilisticClassificationModel.transform: prediction is
    raw2prediction (argmax of rawPrediction), or with thresholds the argmax of probability /
    thresholds (probability2prediction), or argmax of probability when rawPredictionCol is
    empty; ``pred`` overrides (LogisticRegression's binomial threshold)."""
    g = ctx.g
    raw_name = str(stage.params.get("rawPredictionCol") or "")
    t = _thresholds(stage, n_classes)
    if pred is None:
        if t is not None:
            scaled = g.add(Op.CENTER_SCALE, (proba,), center=np.zeros(n_classes), scale=t)
            pred = g.add(Op.ARGMAX, (scaled,))
        else:
            pred = g.add(Op.ARGMAX, (raw if raw_name else proba,))
    labels = np.arange(n_classes, dtype=np.float64)  # Spark's prediction is the index, double
    for param, node, vec in (("predictionCol", pred, False), ("rawPredictionCol", raw, True),
                             ("probabilityCol", proba, True)):
        name = str(stage.params.get(param) or "")
        if name and param != "predictionCol":
            ctx.write(stage, name, node, vector=vec)
    ctx.model = ModelOut(
        {"predict": pred, "predict_proba": proba, "decision_function": raw},
        {"predict": MethodSpec("predict", labels=labels),
         "predict_proba": MethodSpec("predict_proba"),
         "decision_function": MethodSpec("decision_function")})


def _binary(ctx: Ctx, margin: str, scale: float) -> tuple[str, str]:
    """rawPrediction [-m, m] and probability [p0, 1 - p0], p0 = 1 / (1 + exp(scale * m)) as
    Spark computes from rawPrediction(0) = -m (LogisticRegressionModel and
    GBTClassificationModel.raw2probabilityInPlace; scale 1 and 2)."""
    g = ctx.g
    both = g.add(Op.SELECT, (margin,), width=2, columns=np.array([0, 0]))
    raw = g.add(Op.AFFINE, (both,), scale=np.array([-1.0, 1.0]), shift=np.zeros(2))
    p0 = g.add(Op.LINK, (margin,), kind=Link.SIGMOID, scale=-scale)
    flipped = g.add(Op.BINARY_PROBA, (p0,))  # [1 - p0, p0]
    proba = g.add(Op.SELECT, (flipped,), width=2, columns=np.array([1, 0]))
    return raw, proba


# ------------------------------------------------------------------------ linear --


@register_stage(CLS + "LogisticRegressionModel", model=True)
def logistic_regression(stage: SparkStage, ctx: Ctx) -> None:
    row = one_row(stage)
    n_classes, n_features = int(row["numClasses"]), int(row["numFeatures"])
    coef = matrix(stage, row["coefficientMatrix"])
    intercept = vector(stage, row["interceptVector"])
    x = _features(stage, ctx, n_features)
    g = ctx.g
    if bool(row.get("isMultinomial")):
        raw = g.add(Op.LINEAR, (x,), weight=coef.T, bias=intercept)
        proba = g.add(Op.LINK, (raw,), kind=Link.SOFTMAX)
        _classifier(stage, ctx, raw, proba, n_classes)
        return
    # binomial: margin = features . coefficients + intercept; raw2prediction: margin >
    # log(t / (1 - t)) for getThreshold t (from thresholds when set: 1 / (1 + t0 / t1));
    # probability2prediction (no rawPredictionCol): probability(1) > t
    margin = g.add(Op.LINEAR, (x,), weight=coef.reshape(1, -1).T, bias=intercept[:1])
    raw, proba = _binary(ctx, margin, 1.0)
    t = float(stage.params.get("threshold", 0.5))
    if stage.is_set("thresholds"):
        ts = [float(v) for v in stage.params["thresholds"]]
        if len(ts) != 2 or ts[1] == 0:
            raise refuse(stage, f"thresholds={ts}", "two, the second non-zero")
        t = 1.0 / (1.0 + ts[0] / ts[1])
    if stage.params.get("rawPredictionCol"):
        cut = -math.inf if t == 0.0 else math.inf if t == 1.0 else math.log(t / (1.0 - t))
        pred = g.add(Op.THRESHOLD, (margin,), value=cut, strict=True)
    else:
        p1 = g.add(Op.SELECT, (proba,), width=1, columns=np.array([1]))
        pred = g.add(Op.THRESHOLD, (p1,), value=t, strict=True)
    _classifier(stage, ctx, raw, proba, 2, pred=pred)


@register_stage(REG + "LinearRegressionModel", model=True)
def linear_regression(stage: SparkStage, ctx: Ctx) -> None:
    # LinearRegressionModel.predict: features . coefficients + intercept (any loss)
    row = one_row(stage)
    coef = vector(stage, row["coefficients"])
    x = _features(stage, ctx, len(coef))
    pred = ctx.g.add(Op.LINEAR, (x,), weight=coef[:, None],
                     bias=np.array([float(row["intercept"])]))
    _regressor(stage, ctx, pred)


# ------------------------------------------------------------------------- trees --


def _tree_rows(stage: SparkStage) -> list[list[dict[str, Any]]]:
    """Node rows per tree, in tree order (a single tree's data has no treeID)."""
    if stage.data and "treeID" in stage.data[0]:
        trees: dict[int, list[dict[str, Any]]] = {}
        for r in stage.data:
            trees.setdefault(int(r["treeID"]), []).append(r["nodeData"])
        return [trees[k] for k in sorted(trees)]
    return [list(stage.data)]


def _tree_weights(stage: SparkStage, n_trees: int) -> np.ndarray:
    rows = sorted(stage.trees, key=lambda r: int(r["_1"]))
    if len(rows) != n_trees:
        raise refuse(stage, f"{len(rows)} tree weights for {n_trees} trees")
    return np.asarray([float(r["_3"]) for r in rows], dtype=np.float64)


def _forest(stage: SparkStage, n_features: int, n_outputs: int, leaf_value,
            aggregation: Aggregation):
    """The Forest of a saved tree model; ``leaf_value(tree index, node row)`` is a leaf's
    value vector."""
    parts, bitsets, n_cat = [], [], 0
    trees = _tree_rows(stage)
    words = max([1] + [math.ceil(int(n["split"]["numCategories"]) / 32)
                       for t in trees for n in t if int(n["leftChild"]) >= 0])
    for k, rows in enumerate(trees):
        rows = sorted(rows, key=lambda r: int(r["id"]))
        pos = {int(r["id"]): i for i, r in enumerate(rows)}
        m = len(rows)
        part = {"feature": np.full(m, -1), "threshold": np.zeros(m), "left": np.full(m, -1),
                "right": np.full(m, -1), "nan_left": np.zeros(m, bool),
                "cat_index": np.full(m, -1), "value": np.zeros((m, n_outputs))}
        for i, r in enumerate(rows):
            if int(r["leftChild"]) < 0:
                part["value"][i] = leaf_value(k, r)
                continue
            split = r["split"]
            part["feature"][i] = int(split["featureIndex"])
            part["left"][i], part["right"][i] = pos[int(r["leftChild"])], \
                pos[int(r["rightChild"])]
            if int(split["numCategories"]) >= 0:  # CategoricalSplit: leftCategories go left
                part["cat_index"][i] = n_cat
                bitsets.append(bitset_from_categories(split["leftCategoriesOrThreshold"], words))
                n_cat += 1
            else:
                part["threshold"][i] = float(split["leftCategoriesOrThreshold"][0])
        parts.append(part)
    if not parts:
        raise refuse(stage, "a tree model without trees")
    cats = {}
    if n_cat:
        cats = {"cat_bitsets": np.stack(bitsets), "cat_unknown_left": np.zeros(n_cat, bool)}
    arrays = concat_trees(parts)
    if not n_cat:
        arrays.pop("cat_index", None)
    return make_forest(**arrays, **cats, n_features=n_features, n_outputs=n_outputs,
                       aggregation=aggregation, input_dtype=np.dtype(np.float64),
                       cat_negative_before_trunc=True)


def _n_features(stage: SparkStage) -> int:
    return int(stage.metadata.get("numFeatures", 0))


@register_stage(CLS + "DecisionTreeClassificationModel", CLS + "RandomForestClassificationModel",
                model=True)
def tree_classifier(stage: SparkStage, ctx: Ctx) -> None:
    n_classes, n_features = int(stage.metadata["numClasses"]), _n_features(stage)
    forest_of_trees = stage.name.startswith("RandomForest")

    def leaf(k: int, r: dict[str, Any]) -> np.ndarray:
        counts = np.asarray(r["impurityStats"], dtype=np.float64)
        if len(counts) != n_classes:
            raise refuse(stage, f"a leaf with {len(counts)} class counts for {n_classes} "
                         "classes")
        if not forest_of_trees:
            return counts  # DecisionTreeClassificationModel.predictRaw: the counts
        total = counts.sum()  # RandomForestClassificationModel.predictRaw: counts / total
        return counts / total if total != 0 else np.zeros(n_classes)

    forest = _forest(stage, n_features, n_classes, leaf, Aggregation.SUM)
    x = _features(stage, ctx, n_features)
    raw = ctx.g.add(Op.TREE_ENSEMBLE, (x,), forest=forest)
    proba = ctx.g.add(Op.NORMALIZE, (raw,), norm="l1")  # normalizeToProbabilitiesInPlace
    _classifier(stage, ctx, raw, proba, n_classes)


@register_stage(REG + "DecisionTreeRegressionModel", REG + "RandomForestRegressionModel",
                model=True)
def tree_regressor(stage: SparkStage, ctx: Ctx) -> None:
    # RandomForestRegressionModel.predict: the trees' predictions summed in order / numTrees
    if stage.params.get("varianceCol"):
        raise refuse(stage, "varianceCol")
    n_features = _n_features(stage)
    average = stage.name.startswith("RandomForest")
    forest = _forest(stage, n_features, 1, lambda k, r: [float(r["prediction"])],
                     Aggregation.AVERAGE if average else Aggregation.SUM)
    pred = ctx.g.add(Op.TREE_ENSEMBLE, (_features(stage, ctx, n_features),), forest=forest)
    _regressor(stage, ctx, pred)


def _gbt_margin(stage: SparkStage, ctx: Ctx) -> str:
    n_features = _n_features(stage)
    weights = _tree_weights(stage, len(_tree_rows(stage)))
    forest = _forest(stage, n_features, 1,
                     lambda k, r: [float(r["prediction"]) * weights[k]], Aggregation.SUM)
    return ctx.g.add(Op.TREE_ENSEMBLE, (_features(stage, ctx, n_features),), forest=forest)


@register_stage(REG + "GBTRegressionModel", model=True)
def gbt_regressor(stage: SparkStage, ctx: Ctx) -> None:
    _regressor(stage, ctx, _gbt_margin(stage, ctx))


@register_stage(CLS + "GBTClassificationModel", model=True)
def gbt_classifier(stage: SparkStage, ctx: Ctx) -> None:
    # margin as GBTRegressionModel; rawPrediction [-m, m]; LogLoss.computeProbability(-m) =
    # 1 / (1 + exp(2m)) is probability(0), 1 - it probability(1)
    loss = stage.params.get("lossType", "logistic")
    if loss != "logistic":
        raise refuse(stage, f"lossType={loss!r}", "logistic")
    raw, proba = _binary(ctx, _gbt_margin(stage, ctx), 2.0)
    _classifier(stage, ctx, raw, proba, 2)

