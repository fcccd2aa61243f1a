"""Spark ML feature stages: VectorAssembler, StandardScaler, MinMaxScaler, MaxAbsScaler,
StringIndexer, OneHotEncoder, Imputer, Bucketizer (and IndexToString, which may only come after
the columns the compiled methods read). Each reproduces the transform of Spark 3.x/4.x's model
class (``org.apache.spark.ml.feature``), checked against Spark's own ``transform`` in
tests/test_spark_ml_frontend.py; the rule each follows is cited where it is built.

Rows Spark's transform raises on (``handleInvalid="error"``) or drops (``"skip"``: a compiled
model returns one answer per row, so it cannot drop one) are flagged by check nodes; the runtime
raises InputError naming the row and the input column.
"""

from __future__ import annotations

import math

import numpy as np

from peregrine.formats.spark_ml import SparkStage
from peregrine.frontends.spark_ml_stages import (
    Col,
    Ctx,
    choice,
    column_params,
    one_row,
    refuse,
    register_stage,
    vector,
)
from peregrine.ir import Op

FEATURE = "org.apache.spark.ml.feature."


def _pairs(stage: SparkStage) -> list[tuple[str, str]]:
    ins = column_params(stage, "inputCol", "inputCols")
    outs = column_params(stage, "outputCol", "outputCols")
    if len(ins) != len(outs):
        raise refuse(stage, f"{len(ins)} input and {len(outs)} output columns")
    return list(zip(ins, outs))


def _invalid(stage: SparkStage, what: str) -> str:
    handle = stage.params.get("handleInvalid", "error")
    if handle == "skip":
        return f"Spark {stage.name}(handleInvalid='skip') drops this row ({what})"
    return f"Spark {stage.name}(handleInvalid='{handle}') raises on {what}"


# ------------------------------------------------------------------ VectorAssembler --


@register_stage(FEATURE + "VectorAssembler")
def vector_assembler(stage: SparkStage, ctx: Ctx) -> None:
    # VectorAssembler.assemble: numbers and vectors side by side; a null or NaN number raises
    # ('error') or drops the row ('skip': na.drop over the input columns); 'keep' keeps NaN.
    # NaN inside a vector input is not checked; a null vector is (NaN-filled here: its first
    # entry tells).
    handle = choice(stage, "handleInvalid", ("error", "skip", "keep"))
    cols = [ctx.read(stage, c) for c in column_params(stage, "inputCol", "inputCols")]
    node = ctx.node_of(cols)
    if handle != "keep":
        checked = [c for c in cols if (c.nan and not c.vector) or c.null_row]
        if checked:
            flags = ctx.nan_flags(ctx.node_of([Col(c.node, c.index[:1], False, src=c.src)
                                               for c in checked]))
            ctx.check(flags, _invalid(stage, "a null or NaN"), checked)
    ctx.write(stage, stage.params["outputCol"], node, vector=True,
              nan=handle == "keep" and any(c.nan for c in cols))


# ----------------------------------------------------------------------- scalers --


@register_stage(FEATURE + "StandardScalerModel")
def standard_scaler(stage: SparkStage, ctx: Ctx) -> None:
    # StandardScalerModel.transform: shift = mean (withMean), scale = 1 / std with 0 for a zero
    # std (withStd); (x - shift) * scale, in that order, two roundings
    col = ctx.read(stage, stage.params["inputCol"], vector=True)
    row = one_row(stage)
    mean, std = vector(stage, row["mean"]), vector(stage, row["std"])
    node = ctx.node_of([col])
    if stage.params.get("withMean", False):
        node = ctx.g.add(Op.CENTER_SCALE, (node,), center=mean, scale=np.ones_like(mean))
    if stage.params.get("withStd", True):
        with np.errstate(divide="ignore"):
            scale = np.where(std == 0.0, 0.0, 1.0 / std)
        node = ctx.g.add(Op.AFFINE, (node,), scale=scale, shift=np.zeros_like(scale))
    ctx.write(stage, stage.params["outputCol"], node, vector=True, nan=col.nan,
              null_row=col.null_row)


@register_stage(FEATURE + "MinMaxScalerModel")
def min_max_scaler(stage: SparkStage, ctx: Ctx) -> None:
    # MinMaxScalerModel.transform: scale = max - min; per feature range = originalMax -
    # originalMin, factor = scale / range (0 for a constant feature); NaN stays NaN, a constant
    # feature becomes 0.5 * scale + min, others (x - originalMin) * factor + min
    col = ctx.read(stage, stage.params["inputCol"], vector=True)
    row = one_row(stage)
    lo, hi = vector(stage, row["originalMin"]), vector(stage, row["originalMax"])
    out_min = float(stage.params.get("min", 0.0))
    scale = float(stage.params.get("max", 1.0)) - out_min
    span = hi - lo
    constant = span == 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(constant, 0.0, scale / np.where(constant, 1.0, span))
    node = ctx.node_of([col])
    if constant.any():
        # x * 0 is NaN for infinite x: a constant feature's +-inf becomes 0 first (Spark gives
        # the constant for any non-NaN value); other features keep theirs
        for inf in (np.inf, -np.inf):
            node = ctx.g.add(Op.IMPUTE, (node,), values=np.where(constant, 0.0, inf),
                             missing=inf)
    node = ctx.g.add(Op.CENTER_SCALE, (node,), center=np.where(constant, 0.0, lo),
                     scale=np.ones_like(lo))
    shift = np.where(constant, 0.5 * scale + out_min, out_min)
    node = ctx.g.add(Op.AFFINE, (node,), scale=factor, shift=shift)
    ctx.write(stage, stage.params["outputCol"], node, vector=True, nan=col.nan,
              null_row=col.null_row)


@register_stage(FEATURE + "MaxAbsScalerModel")
def max_abs_scaler(stage: SparkStage, ctx: Ctx) -> None:
    # MaxAbsScalerModel.transform: x * (1 / maxAbs), a zero maxAbs scaling by 1
    col = ctx.read(stage, stage.params["inputCol"], vector=True)
    max_abs = vector(stage, one_row(stage)["maxAbs"])
    scale = 1.0 / np.where(max_abs == 0.0, 1.0, max_abs)
    node = ctx.g.add(Op.AFFINE, (ctx.node_of([col]),), scale=scale,
                     shift=np.zeros_like(scale))
    ctx.write(stage, stage.params["outputCol"], node, vector=True, nan=col.nan,
              null_row=col.null_row)


# ----------------------------------------------------------------- StringIndexer --


def _numeric_labels(labels: list[str]) -> np.ndarray | None:
    """The labels as numbers when every one is a finite number's string (a numeric column
    Spark cast to string when fitting), else None."""
    try:
        values = np.asarray([float(v) for v in labels], dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return values if np.isfinite(values).all() and len(set(values)) == len(values) else None


@register_stage(FEATURE + "StringIndexerModel")
def string_indexer(stage: SparkStage, ctx: Ctx) -> None:
    # StringIndexerModel.transform: the value's position in labelsArray[i] (labels in Spark 2);
    # null and unseen values are invalid: 'keep' gives len(labels), 'error' raises, 'skip'
    # drops the row. The string column becomes its code at the runtime boundary
    # (ModelSpec.category_maps: position = index, unseen or missing -> NaN).
    handle = choice(stage, "handleInvalid", ("error", "skip", "keep"))
    row = one_row(stage)
    arrays = row.get("labelsArray") or ([row["labels"]] if "labels" in row else None)
    pairs = _pairs(stage)
    if not arrays or len(arrays) != len(pairs):
        raise refuse(stage, "saved data without one label list per input column")
    for (name, out), labels in zip(pairs, arrays):
        col = ctx.read(stage, name, vector=False)
        numeric = _numeric_labels(labels)
        if numeric is not None:  # numbers: matched exactly, in the graph
            node = ctx.g.add(Op.CATEGORY_MAP, (ctx.node_of([col]),), columns=np.array([0]),
                             categories=(numeric,),
                             codes=(np.arange(len(numeric), dtype=np.float64),),
                             unknown=np.array([np.nan]))
        else:
            if col.src is None:
                raise refuse(stage, f"strings in column {name!r}, computed by an earlier stage")
            if col.src in ctx.strings:
                raise refuse(stage, f"column {name!r} read by a second StringIndexer")
            ctx.strings[col.src] = tuple(str(v) for v in labels)
            if handle == "error":
                ctx.unknown_error.add(col.src)  # unseen strings raise at the boundary
            node = ctx.node_of([col])
        if handle == "keep":
            node = ctx.g.add(Op.IMPUTE, (node,), values=np.array([float(len(labels))]))
        else:
            ctx.check(ctx.nan_flags(node), _invalid(stage, "a null or a label unseen at fit "
                                                    "time"), [col])
        ctx.write(stage, out, node, vector=False, integral=True, nan=False)


@register_stage(FEATURE + "IndexToString")
def index_to_string(stage: SparkStage, ctx: Ctx) -> None:
    raise refuse(stage, "IndexToString's string output as a compiled method",
                 "IndexToString after the final model, reading none of the columns it needs")


# ----------------------------------------------------------------- OneHotEncoder --


@register_stage(FEATURE + "OneHotEncoderModel")
def one_hot_encoder(stage: SparkStage, ctx: Ctx) -> None:
    # OneHotEncoderModel's encoder: a value v with 0 <= v < categorySize is category int(v)
    # (truncated: 1.5 is category 1); others are invalid: 'keep' makes them category
    # categorySize, 'error' raises. The vector has categorySize columns, one more with 'keep',
    # one fewer with dropLast; a category past the end sets none. A null gives a null vector.
    handle = choice(stage, "handleInvalid", ("error", "keep"))
    drop = bool(stage.params.get("dropLast", True))
    sizes = [int(s) for s in one_row(stage)["categorySizes"]]
    pairs = _pairs(stage)
    if len(sizes) != len(pairs):
        raise refuse(stage, "saved data without one category size per input column")
    for (name, out), orig in zip(pairs, sizes):
        col = ctx.read(stage, name, vector=False)
        width = orig + (handle == "keep") - drop
        x = ctx.node_of([col])
        if col.integral:  # integer codes: the category is the value
            codes, cats = x, np.arange(orig, dtype=np.float64)
        else:  # floor through bins: x < 0 -> 0, [i, i + 1) -> i + 1, x >= orig and NaN -> past
            codes = ctx.g.add(Op.DIGITIZE, (x,), edges=(np.arange(orig + 1, dtype=np.float64),))
            cats = np.arange(1, orig + 1, dtype=np.float64)
        slots = np.where(np.arange(orig) < width, np.arange(orig), -1)
        unknown = orig if handle == "keep" and orig < width else -1
        node = ctx.g.add(Op.ONE_HOT, (codes,), width=width, columns=np.array([0]),
                         categories=(cats,), slots=(slots,), unknown_slots=np.array([unknown]))
        if handle == "error":
            bad = ctx.g.add(Op.RANGE_CHECK, (x,), low=0.0,
                            high=float(np.nextafter(float(orig), -np.inf)))
            ctx.check(bad, _invalid(stage, "a negative value or one past the categories seen "
                                    "at fit time"), [col])
        if col.nan:
            node = ctx.with_nulls(node, ctx.null_mask(x, width))
        ctx.write(stage, out, node, vector=True, nan=col.nan, null_row=col.nan)


# ----------------------------------------------------------------------- Imputer --


@register_stage(FEATURE + "ImputerModel")
def imputer(stage: SparkStage, ctx: Ctx) -> None:
    # ImputerModel.transform: when(isnull, surrogate).when(value === missingValue, surrogate);
    # a NaN input here is Spark's null, so it is always replaced
    row = one_row(stage)
    missing = float(stage.params.get("missingValue", math.nan))
    for name, out in _pairs(stage):
        col = ctx.read(stage, name, vector=False)
        if name not in row:
            raise refuse(stage, f"saved data without a surrogate for column {name!r}")
        value = np.array([float(row[name])])
        node = ctx.g.add(Op.IMPUTE, (ctx.node_of([col]),), values=value)
        if not math.isnan(missing):
            node = ctx.g.add(Op.IMPUTE, (node,), values=value, missing=missing)
        ctx.write(stage, out, node, vector=False, nan=False)


# -------------------------------------------------------------------- Bucketizer --


@register_stage(FEATURE + "Bucketizer")
def bucketizer(stage: SparkStage, ctx: Ctx) -> None:
    # Bucketizer.binarySearchForBuckets: splits s_0 < ... < s_k; x in [s_i, s_i+1) is bucket
    # i, x == s_k is bucket k - 1, x outside [s_0, s_k] raises whatever handleInvalid says.
    # A null stays null (the UDF takes a primitive double); 'skip' drops rows with nulls.
    handle = choice(stage, "handleInvalid", ("error", "skip", "keep"))
    pairs = _pairs(stage)
    if stage.is_set("splitsArray"):
        all_splits = [list(s) for s in stage.params["splitsArray"]]
    else:
        all_splits = [list(stage.params["splits"])]
    if len(all_splits) != len(pairs):
        raise refuse(stage, "a split list per input column")
    for (name, out), raw in zip(pairs, all_splits):
        col = ctx.read(stage, name, vector=False)
        splits = np.asarray([float(s) for s in raw], dtype=np.float64)  # "-Inf"/"Inf" strings
        x = ctx.node_of([col])
        node = ctx.g.add(Op.DIGITIZE, (x,), edges=(splits[1:-1],))
        bad = ctx.g.add(Op.RANGE_CHECK, (x,), low=float(splits[0]), high=float(splits[-1]))
        ctx.check(bad, f"Spark Bucketizer raises on a value outside its splits [{splits[0]}, "
                  f"{splits[-1]}]", [col])
        if col.nan:
            if handle == "skip":
                ctx.check(ctx.nan_flags(x), _invalid(stage, "a null"), [col])
            node = ctx.with_nulls(node, ctx.null_mask(x, 1))
        ctx.write(stage, out, node, vector=False, integral=True, nan=col.nan)
