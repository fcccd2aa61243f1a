"""Meta-estimator ops (Voting, Stacking, Bagging, AdaBoost, calibration, and Bagging's
log-probabilities): combining sub-estimator outputs in scikit-learn's order of accumulation,
float64 throughout."""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.ir.ops import Op
from peregrine.ir.semantics.base import (
    Attrs,
    array,
    bad,
    check_width,
    define,
    f64,
    indices,
    real,
    some_inputs,
)
from peregrine.options import CompileOptions


@define(Op.WEIGHTED_SUM)
class WeightedSum(Attrs):
    """Several inputs of one width: (((x0 * w0) + x1 * w1) + ...) / divisor, summed in input
    order (np.average over the estimator axis, bincount's accumulation, Bagging's and
    AdaBoost's running sums)."""

    weights: Any
    divisor: float = 1.0

    def check(self, n: Any, ins: list) -> None:
        some_inputs(n, ins)
        array(n, "weights", self.weights, (len(ins),), finite=True)
        real(n, "divisor", self.divisor, nonzero=True)  # np.average raises on a zero sum
        for i in ins:
            check_width(n, i.width)

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        weights = [float(w) for w in self.weights]
        acc = f64(ins[0]) * weights[0]
        for x, w in zip(ins[1:], weights[1:]):
            acc = acc + f64(x) * w
        return acc / float(self.divisor)


@define(Op.WEIGHTED_MEDIAN)
class WeightedMedian(Attrs):
    """(n, m) member predictions -> (n, 1): AdaBoostRegressor._get_median_predict (argsort
    each row, cumulative ``weights`` in that order, the first sorted prediction whose
    cumulative weight >= half the row's total)."""

    weights: Any

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        w = array(n, "weights", self.weights, (ins[0].width,), finite=True)
        if w.size == 0:
            raise bad(n, "has no members")

    def infer_width(self, widths: list) -> int:
        return 1

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        pred = f64(ins[0])  # the same calls as sklearn, so ties sort as sklearn's do
        sorted_idx = np.argsort(pred, axis=1)
        cdf = np.cumsum(f64(self.weights)[sorted_idx], axis=1)
        median_idx = (cdf >= 0.5 * cdf[:, -1][:, None]).argmax(axis=1)
        rows = np.arange(pred.shape[0])
        return pred[rows, sorted_idx[rows, median_idx]][:, None]


@define(Op.LOG_ADD_EXP)
class LogAddExp(Attrs):
    """Members' log-probabilities -> BaggingClassifier.predict_log_proba. ``columns``: per
    input, the output column of each of its columns; ``starts``: input index where each
    joblib job begins, then the count. Per job a running np.logaddexp from -inf over its
    members (columns a member lacks unchanged), then np.logaddexp of the jobs in order, minus
    ``shift`` (log n_estimators)."""

    columns: Any
    starts: Any
    shift: float = 0.0

    def check(self, n: Any, ins: list) -> None:
        some_inputs(n, ins)
        starts = indices(n, "starts", self.starts, len(ins) + 1)
        if (starts.size < 2 or starts[0] != 0 or starts[-1] != len(ins)
                or np.any(np.diff(starts) <= 0)):
            raise bad(n, "starts must rise from 0 to the number of inputs")
        if not isinstance(self.columns, (list, tuple)) or len(self.columns) != len(ins):
            raise bad(n, "columns must list one index array per input")
        for i, cols in zip(ins, self.columns):  # each input's columns, scattered into the out
            idx = np.asarray(cols).reshape(-1)
            if (i.width is not None and idx.size != i.width) or (idx.size and (
                    idx.dtype.kind not in "iu" or idx.min() < 0
                    or (n.width is not None and idx.max() >= n.width))):
                raise bad(n, "columns must map each input column into the output's columns")
        real(n, "shift", self.shift)

    def infer_width(self, widths: list) -> None:
        return None  # the number of classes: the frontend says it

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        # ensemble/_bagging.py _parallel_predict_log_proba per job, then the reduce over jobs
        starts = [int(s) for s in self.starts]
        jobs = []
        with np.errstate(all="ignore"):  # NaN rows stay NaN, as sklearn's
            for a, b in zip(starts[:-1], starts[1:]):
                acc = np.full((ins[0].shape[0], int(node.width)), -np.inf)
                for x, cols in zip(ins[a:b], self.columns[a:b]):
                    cols = np.asarray(cols, dtype=np.int64)
                    acc[:, cols] = np.logaddexp(acc[:, cols], f64(x))
                jobs.append(acc)
            out = jobs[0]
            for acc in jobs[1:]:
                out = np.logaddexp(out, acc)
            return out - float(self.shift)
