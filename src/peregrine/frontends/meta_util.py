"""Helpers shared by the meta-estimator frontends (``sklearn_meta.py``,
``sklearn_meta_ensembles.py``): sub-estimators are converted with ``steps.convert_head`` on a
flow (any supported model, pipeline, tree ensemble, XGBoost or LightGBM works), and their
method outputs are read back as graph nodes and combined.

A sub-classifier's ``predict`` output is the *index* of the predicted class in its own
``classes_`` (int64, (n, 1)); these helpers turn it into one-hot slots of the meta-estimator's
classes or into the label values themselves."""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.frontends.base import qualified_name, unsupported
from peregrine.frontends.steps import Context, Flow, Head, convert_head
from peregrine.ir import Op


def node_width(ctx: Context, node: str) -> int:
    """Columns of a node already added to the graph being built."""
    return ctx.g.width(node)


def sub_head(meta: Any, est: Any, ctx: Context, flow: Flow, *methods: str) -> Head:
    """``est`` converted on ``flow``; every method in ``methods`` must exist on it."""
    head = convert_head(est, ctx, flow)
    for m in methods:
        if m not in head.outputs:
            raise unsupported(meta, f"sub-estimator {qualified_name(est)} without {m}")
    return head


def response(meta: Any, est: Any, head: Head, method: str) -> str | None:
    """The member's ``method`` output, or None when sklearn's ``est`` lacks it too. sklearn
    picks a member's response by ``hasattr`` (decision_function before predict_proba, vote
    when there is no predict_proba): were Peregrine to lack a method the member has, it would
    silently pick another response than sklearn, so that is refused."""
    if method in head.outputs:
        return head.outputs[method]
    if hasattr(est, method):
        raise unsupported(meta, f"member {qualified_name(est)}: its {method}, which sklearn "
                          "uses here,")
    return None


def class_positions(meta: Any, labels: Any, classes: Any) -> np.ndarray:
    """Position of each of ``labels`` (a sub-estimator's classes_) in ``classes``."""
    index = {c: i for i, c in enumerate(np.asarray(classes).tolist())}
    try:
        return np.asarray([index[c] for c in np.asarray(labels).tolist()], dtype=np.int64)
    except KeyError as exc:
        raise unsupported(meta, f"a sub-estimator class {exc.args[0]!r} outside classes_ "
                          f"{np.asarray(classes).tolist()}") from None


def encoded_positions(meta: Any, est: Any, n_classes: int) -> np.ndarray:
    """A sub-estimator fitted on encoded targets (0..n_classes-1): its classes_ as ints."""
    labels = np.asarray(est.classes_)
    pos = labels.astype(np.int64) if labels.dtype.kind in "biuf" else None
    if pos is None or np.any(pos != labels) or np.any((pos < 0) | (pos >= n_classes)):
        raise unsupported(meta, f"sub-estimator {qualified_name(est)} classes_ "
                          f"{labels.tolist()} are not encoded class indices")
    return pos


def one_hot_prediction(ctx: Context, head: Head, slots: np.ndarray, width: int) -> str:
    """(n, width) 0/1: column ``slots[i]`` is 1 where the sub-classifier predicts its class i."""
    slots = np.asarray(slots, dtype=np.int64)
    return ctx.g.add(Op.ONE_HOT, (head.outputs["predict"],), width=width, columns=[0],
                     categories=[np.arange(len(slots), dtype=np.float64)], slots=[slots],
                     unknown_slots=np.asarray([-1]))


def label_values(meta: Any, ctx: Context, head: Head) -> str:
    """The sub-classifier's predicted labels as numbers, (n, 1): index -> classes_[index]."""
    labels = np.asarray(head.methods["predict"].labels)
    if labels.dtype.kind not in "biuf":
        raise unsupported(meta, f"non-numeric class labels ({labels.dtype}) returned as numbers",
                          "integer, boolean or float labels")
    node = head.outputs["predict"]
    if np.array_equal(labels, np.arange(len(labels))):
        return node
    return ctx.g.add(Op.CATEGORY_MAP, (node,), width=1, columns=[0],
                     categories=[np.arange(len(labels), dtype=np.float64)],
                     codes=[labels.astype(np.float64)], unknown=[np.nan])


def weighted_sum(ctx: Context, nodes: list[str], weights: Any, divisor: float) -> str:
    """sum_i nodes[i] * weights[i] in order, divided by ``divisor`` (Op.WEIGHTED_SUM)."""
    weights = [float(w) for w in weights]
    if len(nodes) == 1 and weights[0] == 1.0 and float(divisor) == 1.0:
        return nodes[0]
    return ctx.g.add(Op.WEIGHTED_SUM, tuple(nodes), width=node_width(ctx, nodes[0]),
                     weights=weights, divisor=float(divisor))


def concat_nodes(ctx: Context, nodes: list[str]) -> str:
    if len(nodes) == 1:
        return nodes[0]
    return ctx.g.add(Op.CONCAT, tuple(nodes), width=sum(node_width(ctx, n) for n in nodes))


def select_columns(ctx: Context, node: str, columns: Any) -> str:
    cols = np.asarray(columns, dtype=np.int64).reshape(-1)
    if np.array_equal(cols, np.arange(node_width(ctx, node))):
        return node
    return ctx.g.add(Op.SELECT, (node,), width=len(cols), columns=cols)


def computed_flow(node: str, width: int, nan: bool = False) -> Flow:
    """A flow of float64 columns computed from sub-estimator outputs."""
    return Flow(node, (None,) * width, nan=nan, keeps_dtype=False)
