"""The Spark ML frontend: a saved ``PipelineModel`` (read by ``formats/spark_ml.py``, no JVM)
becomes one program answering as the pipeline's ``transform`` does.

The walk: find what the compiled methods need (the last predictor's ``prediction``,
``probability`` and ``rawPrediction`` columns, or, when the pipeline ends in a feature stage,
that stage's output columns as ``transform``), follow the stages' input columns back, and
convert only the stages on that path, in pipeline order (``spark_ml_features.py``,
``spark_ml_models.py``). The DataFrame columns those stages read and no stage writes are the
program's inputs, matched by name (``ModelSpec.feature_names``); a column a StringIndexer reads
holds strings. So a label indexer, whose input column is absent when predicting (Spark skips
it), is never asked for. An IndexToString of the final classifier's prediction makes ``predict``
return its strings. Every stage of the pipeline must still be one Peregrine knows: an
unknown class raises UnsupportedModelError naming it and its folder.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from peregrine.errors import UnsupportedModelError
from peregrine.formats.spark_ml import SparkPipelineModel, SparkStage
from peregrine.frontends import spark_ml_features, spark_ml_models  # noqa: F401  (register)
from peregrine.frontends.base import register_frontend
from peregrine.frontends.spark_ml_stages import STAGES, Col, Ctx, ModelOut, reads_writes
from peregrine.ir import GraphBuilder, Op
from peregrine.ir.spec import INPUT_ERRORS, MethodSpec, ModelSpec


def _known(stage: SparkStage) -> None:
    if stage.class_name not in STAGES:
        names = sorted(n.rsplit(".", 1)[-1] for n in STAGES)
        raise UnsupportedModelError(
            f"Spark stage {stage.class_name} ({stage.path}) is not supported. Supported: "
            + ", ".join(names))


def _plan(model: SparkPipelineModel) -> tuple[list[SparkStage], list[str], int]:
    """(stages to convert in order, input column names in first-read order, index of the
    stage whose columns are the methods)."""
    stages = list(model.stages)
    if not stages:
        raise UnsupportedModelError(f"Spark PipelineModel {model.path} has no stages")
    for s in stages:
        _known(s)
    predictors = [i for i, s in enumerate(stages) if STAGES[s.class_name].model]
    last = predictors[-1] if predictors else len(stages) - 1
    needed = set(reads_writes(stages[last])[0])
    keep = {last}
    for i in range(last - 1, -1, -1):
        reads, writes = reads_writes(stages[i])
        if needed & set(writes):
            keep.add(i)
            needed |= set(reads)
    order = sorted(keep)
    written: set[str] = set()
    inputs: list[str] = []
    for i in order:
        reads, writes = reads_writes(stages[i])
        inputs.extend(c for c in reads if c not in written and c not in inputs)
        written |= set(writes)
    return [stages[i] for i in order], inputs, last


def _transform_head(stage: SparkStage, ctx: Ctx) -> ModelOut:
    """A pipeline ending in a feature stage: ``transform`` returns its output column(s)."""
    cols = [ctx.columns[c] for c in reads_writes(stage)[1]]
    strings = [c for c in cols if c.src is not None and c.src in ctx.strings]
    if strings:
        raise UnsupportedModelError(f"{stage.describe()}: transform would return strings")
    return ModelOut({"transform": ctx.node_of(cols)}, {"transform": MethodSpec("transform")})


def _index_to_string(final: SparkStage, after: list[SparkStage], head: ModelOut) -> ModelOut:
    """An IndexToString of the final classifier's prediction (a stage after the model, the
    usual way back from a label StringIndexer): ``predict`` returns its strings, Spark's
    ``labels[int(prediction)]``. Spark fails on an index past the labels, so fewer labels than
    classes are refused; an IndexToString reading anything else is not compiled (nothing it
    writes is a method)."""
    pred_col = str(final.params.get("predictionCol") or "")
    for stage in after:
        if stage.name != "IndexToString" or not pred_col or \
                str(stage.params.get("inputCol") or "") != pred_col:
            continue
        labels = list(stage.params.get("labels") or [])
        method = head.methods.get("predict")
        if method is None or method.labels is None:
            raise UnsupportedModelError(f"{stage.describe()}: an IndexToString of a "
                                        "regression's prediction")
        if not labels:
            raise UnsupportedModelError(f"{stage.describe()}: labels taken from the column's "
                                        "metadata at transform time (set labels=...)")
        if len(labels) < len(method.labels):
            raise UnsupportedModelError(f"{stage.describe()}: {len(labels)} labels for "
                                        f"{len(method.labels)} classes (Spark fails on the "
                                        "others)")
        methods = dict(head.methods)
        methods["predict"] = replace(method, labels=np.array(
            [str(v) for v in labels[:len(method.labels)]], dtype=object))
        return ModelOut(head.outputs, methods)
    return head


@register_frontend(
    SparkPipelineModel, library="pyspark (saved)",
    methods=("predict", "predict_proba", "decision_function", "transform"),
    notes="a saved PipelineModel directory, read without a JVM: VectorAssembler, "
    "StandardScaler, MinMaxScaler, MaxAbsScaler, StringIndexer, OneHotEncoder, Imputer, "
    "Bucketizer, then LogisticRegression, LinearRegression, DecisionTree*, RandomForest*, "
    "GBT*; columns by name; predict/predict_proba/decision_function are Spark's prediction, "
    "probability and rawPrediction",
)
def convert_spark_pipeline(model: SparkPipelineModel) -> ModelSpec:
    stages, inputs, last = _plan(model)
    g = GraphBuilder()
    x = g.input(len(inputs))
    ctx = Ctx(g)
    for j, name in enumerate(inputs):
        ctx.columns[name] = Col(x, (j,), vector=False, src=j)
    for stage in stages:
        STAGES[stage.class_name].fn(stage, ctx)
    head = ctx.model if STAGES[stages[-1].class_name].model else \
        _transform_head(stages[-1], ctx)
    if head is None:
        raise UnsupportedModelError(f"{stages[-1].describe()} produced no output")
    head = _index_to_string(model.stages[last], model.stages[last + 1:], head)
    outputs = dict(head.outputs)
    if ctx.checks:
        nodes = [n for n, _ in ctx.checks]
        outputs[INPUT_ERRORS] = nodes[0] if len(nodes) == 1 else g.add(
            Op.CONCAT, tuple(nodes), width=sum(len(w) for _, w in ctx.checks))
    return ModelSpec(
        graph=g.build(outputs),
        methods=head.methods,
        n_features=len(inputs),
        source=f"pyspark.ml.PipelineModel ({model.stages[last].name}, Spark "
               f"{model.spark_version or '?'})",
        feature_names=tuple(inputs),
        allow_nan=True,  # a missing value is Spark's null; each stage decides (checks)
        allow_inf=True,
        category_maps={j: labels for j, labels in sorted(ctx.strings.items())},
        category_unknown_error=frozenset(ctx.unknown_error),
        input_checks=tuple(w for _, ws in ctx.checks for w in ws),
        versions={"spark": model.spark_version},
    )


__all__ = ["convert_spark_pipeline"]
