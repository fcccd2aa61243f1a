"""The reference backend: a plain NumPy evaluator of the IR. It defines what each op means, is the
oracle for the other backends in tests, and the fallback when nothing faster is installed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from peregrine.backends.base import Backend, Executable
from peregrine.ir import Forest, Graph, Link, Node, Op
from peregrine.ir.forest import LIGHTGBM_ZERO_THRESHOLD
from peregrine.ir.spec import ModelSpec
from peregrine.options import CompileOptions, Precision

# ------------------------------------------------------------------------ tree semantics --


def compute_dtype(forest: Forest, x_dtype: np.dtype, precision: Precision) -> np.dtype:
    """Precision the comparisons run in. float32 is exact when the library itself rounds inputs to
    float32, or when the input already is float32 (thresholds are rounded to match)."""
    if precision is Precision.FLOAT32 or forest.input_dtype == np.float32:
        return np.dtype(np.float32)
    if precision is Precision.FLOAT64:
        return np.dtype(np.float64)
    return np.dtype(np.float32) if x_dtype == np.float32 else np.dtype(np.float64)


def decide_left(forest: Forest, nodes: np.ndarray, x: np.ndarray, thr: np.ndarray) -> np.ndarray:
    """Whether value ``x`` at internal node ``nodes`` goes left (the Forest's one decision rule)."""
    nan = np.isnan(x)
    with np.errstate(invalid="ignore"):
        left = np.where(nan, forest.nan_left[nodes], x <= thr[nodes])
        if forest.has_missing_zero:
            zero = forest.missing_zero[nodes] & (np.abs(x) <= LIGHTGBM_ZERO_THRESHOLD)
            left = np.where(zero, forest.nan_left[nodes], left)
        if forest.has_categorical:
            cat = forest.cat_index[nodes]
            is_cat = (cat >= 0) & ~nan
            if np.any(is_cat):
                n_bits = forest.n_cat_bits
                trunc = np.trunc(np.where(is_cat, x, 0.0))
                neg = (x < 0) if forest.cat_negative_before_trunc else (trunc < 0)
                invalid = neg | ~(trunc < n_bits)  # catches +inf too
                code = np.where(invalid | ~is_cat, 0, trunc).astype(np.int64)
                row = np.where(is_cat, cat, 0)
                word = forest.cat_bitsets[row, code // 32]
                bit = ((word >> (code % 32).astype(np.uint32)) & 1).astype(bool)
                cat_left = np.where(invalid, forest.cat_unknown_left[row], bit)
                left = np.where(is_cat, cat_left, left)
    return left


def forest_leaves(forest: Forest, X: np.ndarray, precision: Precision = Precision.AUTO):
    """Leaf node index reached in every tree: int64 (n_rows, n_trees)."""
    dt = compute_dtype(forest, X.dtype, precision)
    Xc = np.asarray(X, dtype=dt)
    thr = forest.thresholds_for(dt)
    n = Xc.shape[0]
    idx = np.broadcast_to(forest.tree_offsets[:-1], (n, forest.n_trees)).copy()
    rows = np.arange(n)[:, None]
    for _ in range(forest.max_depth()):
        feat = forest.feature[idx]
        active = feat >= 0
        if not active.any():
            break
        x = Xc[rows, np.where(active, feat, 0)]
        safe = np.where(active, idx, forest.tree_offsets[0])
        go_left = decide_left(forest, safe, x, thr)
        nxt = np.where(go_left, forest.left[safe], forest.right[safe])
        idx = np.where(active, nxt, idx)
    return idx


def forest_predict(forest: Forest, X: np.ndarray, precision: Precision = Precision.AUTO):
    """Aggregated ensemble output (n_rows, n_outputs) in float64."""
    leaves = forest_leaves(forest, X, precision)
    n = leaves.shape[0]
    # the library's own sum: its dtype, trees in order, from the base score for boosting
    # (Forest.sum_dtype, Forest.sum_starts_at_base): bit for bit, not just within a tolerance
    dt = np.float32 if precision is Precision.FLOAT32 else forest.sum_dtype
    out = np.zeros((n, forest.n_outputs), dtype=dt)
    if forest.sum_starts_at_base:
        out += forest.base_score.astype(dt)
    value = forest.value.astype(dt)
    if forest.value_width == forest.n_outputs:
        for t in range(forest.n_trees):  # tree order, as the libraries accumulate
            out += value[leaves[:, t]]
    else:
        for t in range(forest.n_trees):
            out[:, forest.tree_group[t]] += value[leaves[:, t], 0]
    if forest.sum_starts_at_base:
        return out.astype(np.float64)
    return out.astype(np.float64) / forest.output_divisor() + forest.base_score


# ------------------------------------------------------------------------- op rules -------

Rule = Callable[[Node, list, CompileOptions], np.ndarray]
RULES: dict[Op, Rule] = {}


def rule(op: Op) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        RULES[op] = fn
        return fn

    return deco


@rule(Op.REPLACE_WITH_NAN)
def _replace(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = ins[0]
    value = node.attrs["value"]
    # compare_dtype (optional): compare after casting x to it; XGBoost tests float32(x) == missing
    cdt = np.dtype(node.attrs.get("compare_dtype") or x.dtype)
    hit = x.astype(cdt, copy=False) == np.asarray(value, dtype=cdt)
    return np.where(hit, np.nan, x).astype(x.dtype)


@rule(Op.TREE_ENSEMBLE)
def _trees(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    return forest_predict(node.attrs["forest"], ins[0], options.precision)


@rule(Op.AFFINE)
def _affine(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    scale = np.asarray(node.attrs.get("scale", 1.0), dtype=np.float64)
    shift = np.asarray(node.attrs.get("shift", 0.0), dtype=np.float64)
    return ins[0] * scale + shift


def sigmoid(x: np.ndarray) -> np.ndarray:
    # Branch-free and overflow-free: exp of a non-positive number only.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


@rule(Op.LINK)
def _link(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = ins[0]
    kind = node.attrs["kind"]
    if kind is Link.IDENTITY:
        return x
    if kind is Link.SIGMOID:
        return sigmoid(float(node.attrs.get("scale", 1.0)) * x)
    if kind is Link.SOFTMAX:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if kind is Link.EXP:
        return np.exp(x)
    if kind is Link.ISOLATION_SCORE:
        return -(2.0 ** (-x / float(node.attrs["denominator"])))
    if kind is Link.LOG_SOFTMAX:
        with np.errstate(invalid="ignore"):  # inf - inf -> NaN (rows sklearn rejects anyway)
            return x - logsumexp_rows(x)
    raise NotImplementedError(f"reference backend: link {kind}")


def logsumexp_rows(x: np.ndarray) -> np.ndarray:
    """(n, 1) row-wise logsumexp in sklearn's utils._array_api._logsumexp order: the maxima
    are counted and left out of the sum, so a row whose other entries underflow still gets
    log(count) + max exactly (helper "logproba"; naive Bayes' predict_log_proba)."""
    m = x.max(axis=1, keepdims=True)
    at_max = x == m
    count = at_max.sum(axis=1, keepdims=True, dtype=x.dtype)
    shift = np.where(np.isfinite(m), m, 0)
    with np.errstate(all="ignore"):  # inf - inf and log(0) -> NaN/-inf, as sklearn's rows
        s = np.exp(np.where(at_max, -np.inf, x) - shift).sum(axis=1, keepdims=True)
        s = np.where(s == 0, s, s / count)
        return np.log1p(s) + np.log(count) + m


@rule(Op.BINARY_PROBA)
def _binary(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    p = ins[0][:, :1]
    return np.concatenate([1.0 - p, p], axis=1)


@rule(Op.ARGMAX)
def _argmax(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    return np.argmax(ins[0], axis=1)[:, None].astype(np.int64)


@rule(Op.THRESHOLD)
def _threshold(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = ins[0][:, :1]
    v = float(node.attrs["value"])
    hit = (x > v) if node.attrs.get("strict", True) else (x >= v)
    return hit.astype(np.int64)


@rule(Op.ORDINAL_ENCODE)
def _ordinal_encode(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = ins[0]
    out = x.copy()
    for j, cats in zip(node.attrs["columns"], node.attrs["categories"]):
        cats = np.asarray(cats, dtype=np.float64)
        col = x[:, int(j)].astype(np.float64)
        pos = np.searchsorted(cats, col)  # NaN sorts past the end
        hit = (pos < len(cats)) & (np.append(cats, np.nan)[pos] == col)
        out[:, int(j)] = np.where(hit, pos, np.nan)
    return out


# ------------------------------------------------------------- pipeline op rules --
# scikit-learn featurizers and linear models; float64 throughout (sklearn's float64 path;
# float32 inputs are promoted, the runtime casts the output back where sklearn keeps float32).


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


@rule(Op.LINEAR)
def _linear(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    # safe_sparse_dot(X, coef_.T) + intercept_ (sklearn/linear_model/_base.py)
    return _f64(ins[0]) @ _f64(node.attrs["weight"]) + _f64(node.attrs["bias"])


@rule(Op.SELECT)
def _select(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    return ins[0][:, np.asarray(node.attrs["columns"], dtype=np.int64).reshape(-1)]


@rule(Op.CONCAT)
def _concat(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    return np.concatenate([_f64(x) for x in ins], axis=1)


@rule(Op.CENTER_SCALE)
def _center_scale(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    # StandardScaler/RobustScaler/MaxAbsScaler: X -= center; X /= scale (two roundings)
    return (_f64(ins[0]) - _f64(node.attrs["center"])) / _f64(node.attrs["scale"])


@rule(Op.CLIP)
def _clip(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    return np.clip(_f64(ins[0]), float(node.attrs["low"]), float(node.attrs["high"]))


@rule(Op.NORMALIZE)
def _normalize(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    # sklearn.preprocessing.normalize: norms of 0 are replaced by 1 (_handle_zeros_in_scale)
    x = _f64(ins[0])
    norm = node.attrs["norm"]
    if norm == "l1":
        n = np.abs(x).sum(axis=1)
    elif norm == "l2":
        n = np.sqrt(np.einsum("ij,ij->i", x, x))
    else:
        n = np.max(np.abs(x), axis=1)
    zero = n == 0.0
    out = x / np.where(zero, 1.0, n)[:, None]
    if node.attrs.get("zero", "one") == "uniform":  # _predict_proba_lr: all-zero -> uniform
        out[zero] = 1.0 / x.shape[1]
    return out


@rule(Op.BINARIZE)
def _binarize(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    return (_f64(ins[0]) > float(node.attrs["threshold"])).astype(np.float64)


@rule(Op.IMPUTE)
def _impute(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = _f64(ins[0])
    missing = float(node.attrs["missing"])
    hit = np.isnan(x) if np.isnan(missing) else (x == missing)
    return np.where(hit, _f64(node.attrs["values"]), x)


def category_matches(x: np.ndarray, cats: np.ndarray) -> np.ndarray:
    """(n, len(cats)) bool: x equals the category, NaN matching a NaN category."""
    x = x[:, None]
    return (x == cats[None, :]) | (np.isnan(x) & np.isnan(cats)[None, :])


@rule(Op.ONE_HOT)
def _one_hot(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = _f64(ins[0])
    out = np.zeros((x.shape[0], int(node.width)), dtype=np.float64)
    for j, cats, slots, unknown in zip(node.attrs["columns"], node.attrs["categories"],
                                       node.attrs["slots"], node.attrs["unknown_slots"]):
        hit = category_matches(x[:, int(j)], _f64(cats))
        for k, slot in enumerate(np.asarray(slots, dtype=np.int64)):
            if slot >= 0:
                out[:, slot] = np.maximum(out[:, slot], hit[:, k])
        if int(unknown) >= 0:
            out[:, int(unknown)] = np.maximum(out[:, int(unknown)], ~hit.any(axis=1))
    return out


@rule(Op.CATEGORY_MAP)
def _category_map(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = _f64(ins[0])
    out = x.copy()
    for j, cats, codes, unknown in zip(node.attrs["columns"], node.attrs["categories"],
                                       node.attrs["codes"], node.attrs["unknown"]):
        hit = category_matches(x[:, int(j)], _f64(cats))
        first = np.argmax(hit, axis=1)
        code = np.append(_f64(codes), np.nan)[np.where(hit.any(axis=1), first, len(codes))]
        out[:, int(j)] = np.where(hit.any(axis=1), code, float(unknown))
    return out


@rule(Op.POLYNOMIAL)
def _polynomial(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    x = _f64(ins[0])
    powers = np.asarray(node.attrs["powers"], dtype=np.int64)
    out = np.ones((x.shape[0], powers.shape[0]), dtype=np.float64)
    for k, row in enumerate(powers):
        for j in np.flatnonzero(row):
            for _ in range(int(row[j])):  # repeated products, as sklearn multiplies columns
                out[:, k] = out[:, k] * x[:, j]
    return out


@rule(Op.UFUNC)
def _ufunc(node: Node, ins: list, options: CompileOptions) -> np.ndarray:
    with np.errstate(all="ignore"):  # log(-1) -> NaN, as numpy (sklearn does not check)
        return getattr(np, node.attrs["name"])(_f64(ins[0]))


def evaluate(graph: Graph, X: np.ndarray, outputs: tuple[str, ...],
             options: CompileOptions | None = None) -> dict[str, np.ndarray]:
    """Evaluate the graph outputs named in ``outputs`` on X (2-D)."""
    options = options or CompileOptions()
    values: dict[str, Any] = {}
    wanted = {graph.outputs[o] for o in outputs}
    needed = graph.needed(wanted)
    for node in graph.toposort():
        if node.name not in needed:
            continue
        if node.op is Op.INPUT:
            values[node.name] = X
            continue
        values[node.name] = RULES[node.op](node, [values[i] for i in node.inputs], options)
    return {o: values[graph.outputs[o]] for o in outputs}


class ReferenceExecutable(Executable):
    def __init__(self, spec: ModelSpec, options: CompileOptions) -> None:
        self.spec = spec
        self.options = options

    def run(self, X: Any, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        if not isinstance(X, np.ndarray):
            X = X.detach().cpu().numpy()
        return evaluate(self.spec.graph, X, outputs, self.options)

    def explain(self) -> dict[str, Any]:
        return {"backend": "reference", "why": "NumPy evaluator of the IR (the test oracle)"}


class ReferenceBackend(Backend):
    name = "reference"
    description = "NumPy evaluator of the IR; the oracle and fallback"

    @classmethod
    def compile(cls, spec: ModelSpec, options: CompileOptions, device: str) -> Executable:
        return ReferenceExecutable(spec, options)


# the rules of the kernel, meta-estimator and transformer ops live in modules of their own;
# importing them here registers them, so RULES is complete with this module
from peregrine.backends import (  # noqa: E402, F401
    reference_models,
    reference_neighbours,
    reference_transformers,
)
from peregrine.backends.reference_transformers import (  # noqa: E402, F401  (re-exported)
    QUANTILE_BOUNDS,
    quantile_clip,
)
