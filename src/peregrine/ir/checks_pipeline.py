"""Attribute checks of the kernel-method, meta-estimator and transformer ops (``ir/ops.py``
documents each attribute); the helpers and the core ops' checks are in ``checks.py``. They
check what a backend relies on to index and loop safely (shapes against the input width,
enumerations, integer counts, ascending tables) and the values that would turn into a silent
NaN/inf answer (a zero divisor, non-finite support vectors)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from peregrine.ir.checks import (
    Check,
    array,
    ascending,
    attr,
    bad,
    check_width,
    choice,
    indices,
    integer,
    n_inputs,
    one_input,
    real,
    same_width,
    tables,
)
from peregrine.ir.ops import Op

if TYPE_CHECKING:
    from peregrine.ir.graph import Node

KERNEL_KINDS = ("linear", "poly", "rbf", "sigmoid", "cosine")
DISTANCE_METRICS = ("euclidean", "manhattan", "chebyshev", "minkowski", "cosine")
NEIGHBOUR_WEIGHTS = ("uniform", "distance")
EXTRAPOLATIONS = ("error", "continue", "periodic", "constant", "linear")


def _pair_count(n: Node) -> tuple[int, int]:
    """(n_classes, number of class pairs i < j)."""
    k = integer(n, "n_classes", 2)
    return k, k * (k - 1) // 2


def _vectors(n: Node, ins: list[Node]) -> np.ndarray:
    """(m, d) reference rows read against each input row; the node has one column per row."""
    one_input(n, ins)
    v = array(n, "vectors", (None, ins[0].width), finite=True)
    check_width(n, ins, v.shape[0])
    return v


# ------------------------------------------------------------ kernels, neighbours --


def _check_ovr_decision(n: Node, ins: list[Node]) -> None:
    n_inputs(n, ins, 2)  # predictions, confidences
    k, pairs = _pair_count(n)
    for i in ins:
        if i.width is not None and i.width != pairs:
            raise bad(n, f"input {i.name!r} has {i.width} columns, {k} classes make {pairs} "
                      "pairs")
    check_width(n, ins, k)


def _check_kernel(n: Node, ins: list[Node]) -> None:
    m = _vectors(n, ins).shape[0]
    kind = choice(n, "kind", KERNEL_KINDS)
    form = choice(n, "form", ("libsvm", "pairwise"))
    for key in ("gamma", "coef0"):
        real(n, key)
    if kind == "poly":
        degree = real(n, "degree")
        if degree < 0 or (form == "libsvm" and not float(degree).is_integer()):
            raise bad(n, f"degree={degree!r}: libsvm's powi takes an integer >= 0")
    if "center_rows" in n.attrs or "center_all" in n.attrs:  # KernelCenterer: both or none
        array(n, "center_rows", (m,), finite=True)
        real(n, "center_all")


def _check_svm_proba(n: Node, ins: list[Node]) -> None:
    one_input(n, ins)
    k, pairs = _pair_count(n)
    for key in ("prob_a", "prob_b"):
        array(n, key, (pairs,), finite=True)
    if ins[0].width is not None and ins[0].width != pairs:
        raise bad(n, f"reads {ins[0].width} decision values, {k} classes make {pairs} pairs")
    check_width(n, ins, k)


def _check_knn(n: Node, ins: list[Node]) -> None:
    one_input(n, ins)
    m = array(n, "vectors", (None, ins[0].width), finite=True).shape[0]  # the fitted rows
    if choice(n, "metric", DISTANCE_METRICS) == "minkowski" and real(n, "p") < 1:
        raise bad(n, "minkowski p must be >= 1")
    integer(n, "k", 1, m)
    choice(n, "weights", NEIGHBOUR_WEIGHTS)
    values = array(n, "values", (m, None))
    if not isinstance(n.attrs.get("normalize", False), bool):
        raise bad(n, "normalize must be a bool")
    check_width(n, ins, values.shape[1])


# ----------------------------------------------------------------- meta-estimators --


def _check_weighted_sum(n: Node, ins: list[Node]) -> None:
    if not ins:
        raise bad(n, "has no inputs")
    array(n, "weights", (len(ins),), finite=True)
    real(n, "divisor", nonzero=True)  # np.average raises on a zero weight sum
    for i in ins:
        check_width(n, ins, i.width)


def _check_weighted_median(n: Node, ins: list[Node]) -> None:
    one_input(n, ins)
    w = array(n, "weights", (ins[0].width,), finite=True)
    if w.size == 0:
        raise bad(n, "has no members")
    check_width(n, ins, 1)


# ------------------------------------------------------------------- transformers --


def _check_interp(n: Node, ins: list[Node]) -> None:
    same_width(n, ins)
    xp, fp = tables(n, "xp", ins[0].width), tables(n, "fp", ins[0].width)
    if len(xp) != len(fp):
        raise bad(n, "xp and fp list different numbers of columns")
    for x, f in zip(xp, fp):
        if x.size == 0 or x.shape != f.shape:
            raise bad(n, "a column's xp and fp differ in length or are empty")
        ascending(n, "xp", x)
    for key in ("left", "right"):
        array(n, key, (len(xp),))


def _check_quantile(n: Node, ins: list[Node]) -> None:
    same_width(n, ins)
    refs = array(n, "references", (None,), finite=True)
    ascending(n, "references", refs)
    for q in tables(n, "quantiles", ins[0].width):
        if q.shape != refs.shape:
            raise bad(n, f"a column has {q.size} quantiles for {refs.size} references")
        ascending(n, "quantiles", q)
    choice(n, "output", ("uniform", "normal"))


def _check_power(n: Node, ins: list[Node]) -> None:
    same_width(n, ins)
    choice(n, "method", ("yeo-johnson", "box-cox"))
    array(n, "lambdas", (ins[0].width,), finite=True)


def _check_digitize(n: Node, ins: list[Node]) -> None:
    same_width(n, ins)
    for e in tables(n, "edges", ins[0].width):
        ascending(n, "edges", e)


def _check_range_check(n: Node, ins: list[Node]) -> None:
    same_width(n, ins)
    for key in ("low", "high"):
        a = np.asarray(attr(n, key), dtype=np.float64)
        if a.ndim > 1 or (a.ndim == 1 and ins[0].width not in (None, a.shape[0])):
            raise bad(n, f"{key} has shape {a.shape}")


def _check_bspline(n: Node, ins: list[Node]) -> None:
    one_input(n, ins)
    d = ins[0].width
    knots = tables(n, "knots", d)
    k = integer(n, "degree", 0)
    coef = array(n, "coef", (None, None), finite=True)
    s = coef.shape[1]
    for t in knots:  # one (columns, knots) table in the torch lowering: one length
        if t.shape != knots[0].shape or t.size < 2 * k + 2 or t.size - k - 1 > coef.shape[0]:
            raise bad(n, "knot vectors differ in length or do not fit degree and coef")
        ascending(n, "knots", t)
    choice(n, "extrapolation", EXTRAPOLATIONS)
    for key in ("f_min", "f_max", "fp_min", "fp_max"):
        array(n, key, (len(knots), s))
    for key in ("low", "high"):
        array(n, key, (len(knots),))
    reach = array(n, "reach", (len(knots),))
    if np.any((reach < 0) | (reach > s) | (reach != np.round(reach))):
        raise bad(n, f"reach must hold integers in [0, {s}]")
    check_width(n, ins, len(knots) * s)


def _check_knn_impute(n: Node, ins: list[Node]) -> None:
    same_width(n, ins)
    d = ins[0].width
    fit = array(n, "fit_X", (None, d))
    integer(n, "n_neighbors", 1)
    choice(n, "weights", NEIGHBOUR_WEIGHTS)
    cols = indices(n, "columns", fit.shape[1])
    if len(set(cols.tolist())) != cols.size:
        raise bad(n, "columns repeats a column")
    array(n, "fill", (fit.shape[1],))


def _check_log_add_exp(n: Node, ins: list[Node]) -> None:
    if not ins:
        raise bad(n, "has no inputs")
    starts = indices(n, "starts", len(ins) + 1)
    if (starts.size < 2 or starts[0] != 0 or starts[-1] != len(ins)
            or np.any(np.diff(starts) <= 0)):
        raise bad(n, "starts must rise from 0 to the number of inputs")
    columns = attr(n, "columns")
    if not isinstance(columns, (list, tuple)) or len(columns) != len(ins):
        raise bad(n, "columns must list one index array per input")
    for i, cols in zip(ins, columns):  # each input's columns, scattered into the output
        idx = np.asarray(cols).reshape(-1)
        if (i.width is not None and idx.size != i.width) or (idx.size and (
                idx.dtype.kind not in "iu" or idx.min() < 0
                or (n.width is not None and idx.max() >= n.width))):
            raise bad(n, "columns must map each input column into the output's columns")
    real(n, "shift")


PIPELINE_CHECKS: dict[Op, Check] = {
    Op.OVR_DECISION: _check_ovr_decision,
    Op.KERNEL: _check_kernel,
    Op.SVM_PROBA: _check_svm_proba,
    Op.KNN: _check_knn,
    Op.WEIGHTED_SUM: _check_weighted_sum,
    Op.WEIGHTED_MEDIAN: _check_weighted_median,
    Op.INTERP: _check_interp,
    Op.QUANTILE: _check_quantile,
    Op.POWER: _check_power,
    Op.DIGITIZE: _check_digitize,
    Op.RANGE_CHECK: _check_range_check,
    Op.BSPLINE: _check_bspline,
    Op.KNN_IMPUTE: _check_knn_impute,
    Op.LOG_ADD_EXP: _check_log_add_exp,
}
