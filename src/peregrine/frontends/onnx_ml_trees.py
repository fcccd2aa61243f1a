"""ONNX-ML tree ensembles (ai.onnx.ml TreeEnsembleRegressor / TreeEnsembleClassifier, opsets 1
and 3) as one Forest each, answering as ONNX Runtime does
(onnxruntime/core/providers/cpu/ml/tree_ensemble_common.h, tree_ensemble_aggregator.h):

* the input is compared in the threshold type (float32 for ``nodes_values``, float64 for
  ``nodes_values_as_tensor`` doubles); BRANCH_LEQ/LT/GTE/GT become the Forest's ``x <= t'``
  with t' the threshold or its float predecessor and the children swapped for GTE/GT;
  BRANCH_EQ/NEQ become two nodes (``x <= t`` then ``x <= pred(t)``);
* NaN takes the true branch where ``nodes_missing_value_tracks_true`` is 1 and the false branch
  otherwise (every comparison with NaN is false), except BRANCH_NEQ (``NaN != t`` is true);
* leaf weights are summed tree by tree in the threshold type (float32 for float models; ONNX
  Runtime may split the trees among threads and add the partial sums, so its order differs
  within float32 rounding), divided by the tree count for AVERAGE, then ``base_values`` added;
* classifiers: with more than two classes, the label is the first maximum of the scores and
  the post-transform (NONE, LOGISTIC, SOFTMAX) gives the probabilities; with two labels and
  weights for class 0 only (skl2onnx's and onnxmltools' binary form), the score s is the
  positive class's: label ``s > 0.5`` and probabilities ``[1 - s, s]`` when every weight is
  non-negative, otherwise label ``s > 0`` and ``[sigmoid(-s), sigmoid(s)]`` (LOGISTIC) or
  ``[-s, s]`` (NONE).

MIN/MAX aggregation, PROBIT, SOFTMAX_ZERO and BRANCH_MEMBER are refused.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from peregrine.frontends.onnx_ml import ML, Ctx, Value, class_labels, handles, refuse, set_out
from peregrine.ir import Aggregation, Comparison, Link, Op, concat_trees, make_forest

MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "LEAF")


def _pred(t: float, dtype: np.dtype) -> float:
    """The largest value of ``dtype`` below ``t`` (x < t is x <= _pred(t) in that dtype)."""
    return float(np.nextafter(dtype.type(t), dtype.type(-np.inf)))


def _thresholds(a: dict) -> tuple[np.ndarray, np.dtype]:
    if "nodes_values_as_tensor" in a:
        return np.asarray(a["nodes_values_as_tensor"], np.float64).reshape(-1), \
            np.dtype(np.float64)
    vals = np.asarray(a.get("nodes_values", []), np.float32).reshape(-1)
    return vals.astype(np.float64), np.dtype(np.float32)


def _weights(a: dict, prefix: str) -> tuple[np.ndarray, ...]:
    w = a.get(f"{prefix}_weights_as_tensor")
    if w is None:
        w = np.asarray(a.get(f"{prefix}_weights", []), np.float32)
    return (np.asarray(a[f"{prefix}_treeids"], np.int64), np.asarray(a[f"{prefix}_nodeids"],
            np.int64), np.asarray(a[f"{prefix}_ids"], np.int64),
            np.asarray(w, np.float64).reshape(-1))


def build_forest(node, a: dict, width: int, prefix: str, n_features: int, in_dtype: str):
    thresholds, tdtype = _thresholds(a)
    tree_ids = np.asarray(a["nodes_treeids"], np.int64)
    node_ids = np.asarray(a["nodes_nodeids"], np.int64)
    features = np.asarray(a["nodes_featureids"], np.int64)
    modes = list(a["nodes_modes"])
    true_ids = np.asarray(a["nodes_truenodeids"], np.int64)
    false_ids = np.asarray(a["nodes_falsenodeids"], np.int64)
    tracks = np.asarray(a.get("nodes_missing_value_tracks_true") or [0] * len(modes), np.int64)
    for m in set(modes) - set(MODES):
        raise refuse(node, f"node mode {m!r}")

    leaf_value: dict[tuple[int, int], np.ndarray] = defaultdict(lambda: np.zeros(width))
    for t, n, k, w in zip(*_weights(a, prefix)):
        if not 0 <= k < width:
            raise refuse(node, f"a leaf weight for target/class {k} of {width}")
        leaf_value[(int(t), int(n))][k] += w  # ORT adds each weight in turn (float32 exact
        # for one weight per class and leaf, the exporters' form)

    trees: dict[int, dict[int, int]] = defaultdict(dict)  # tree id -> node id -> row
    for row, (t, n) in enumerate(zip(tree_ids, node_ids)):
        trees[int(t)][int(n)] = row
    nodes = _OrtNodes(node, modes, features, thresholds, tdtype, true_ids, false_ids, tracks,
                      leaf_value, width, n_features)
    parts = [_TreeBuilder(nodes, t, trees[t]).build() for t in sorted(trees)]
    agg = a.get("aggregate_function", "SUM")
    if agg not in ("SUM", "AVERAGE"):
        raise refuse(node, f"aggregate_function {agg!r} (supported: SUM, AVERAGE)")
    base = a.get("base_values_as_tensor")
    if base is None:
        base = a.get("base_values")
    base = np.zeros(0) if base is None else np.asarray(base, np.float64).reshape(-1)
    forest = make_forest(
        **concat_trees(parts), n_features=n_features, n_outputs=width,
        comparison=Comparison.LE, input_dtype=tdtype if in_dtype != "float64" else
        np.dtype(np.float64),
        aggregation=Aggregation.SUM if agg == "SUM" else Aggregation.AVERAGE,
        sum_dtype=tdtype,  # ORT's ScoreValue<ThresholdType>
    )
    return forest, base


@dataclass(frozen=True)
class _OrtNodes:
    """The TreeEnsemble attributes one tree's nodes are read from (row-indexed arrays)."""

    node: Any  # the ONNX node, for refusals
    modes: list
    features: np.ndarray
    thresholds: np.ndarray
    tdtype: np.dtype
    true_ids: np.ndarray
    false_ids: np.ndarray
    tracks: np.ndarray
    leaf_value: dict
    width: int
    n_features: int


class _TreeBuilder:
    """One ORT tree as Forest node arrays: ``build`` emits its nodes from the root, copying a
    subtree that EQ/NEQ branches reach twice."""

    def __init__(self, src: _OrtNodes, tree: int, rows: dict[int, int]) -> None:
        self.src, self.t, self.rows = src, tree, rows
        self.feat: list[int] = []
        self.thr: list[float] = []
        self.left: list[int] = []
        self.right: list[int] = []
        self.nan_left: list[bool] = []
        self.value: list[np.ndarray] = []

    def build(self) -> dict:
        if 0 not in self.rows:
            raise refuse(self.src.node, f"tree {self.t} without node 0 (its root)")
        self.emit(0)
        return {"feature": self.feat, "threshold": self.thr, "left": self.left,
                "right": self.right, "nan_left": self.nan_left,
                "value": np.asarray(self.value).reshape(-1, self.src.width)}

    def new(self) -> int:
        self.feat.append(-1)
        self.thr.append(0.0)
        self.left.append(-1)
        self.right.append(-1)
        self.nan_left.append(False)
        self.value.append(np.zeros(self.src.width))
        return len(self.feat) - 1

    def emit(self, n: int, depth: int = 0) -> int:
        """Forest nodes for ORT node ``n`` and its subtree (copied where EQ/NEQ reach a
        subtree twice), returning the subtree's root index."""
        src, t = self.src, self.t
        feat, thr, left, right, nan_left = self.feat, self.thr, self.left, self.right, \
            self.nan_left
        if n not in self.rows or depth > 4096:
            raise refuse(src.node, f"tree {t}: node {n} missing or a cycle")
        r = self.rows[n]
        i = self.new()
        mode = src.modes[r]
        if mode == "LEAF":
            self.value[i] = src.leaf_value[(t, n)]
            return i
        if src.features[r] >= src.n_features:
            raise refuse(src.node, f"a split on feature {src.features[r]} of {src.n_features}")
        nan_yes = bool(src.tracks[r])
        x_t = float(src.thresholds[r])
        f = int(src.features[r])
        t_id, f_id = int(src.true_ids[r]), int(src.false_ids[r])
        if mode in ("BRANCH_EQ", "BRANCH_NEQ"):
            eq_id, ne_id = (t_id, f_id) if mode == "BRANCH_EQ" else (f_id, t_id)
            # NaN != t is true: NEQ sends NaN to its true child (ne) whatever the
            # tracking flag; EQ sends it to eq only when missing values track true
            nan_to_ne = mode == "BRANCH_NEQ" or not nan_yes
            # x <= t ? (x <= pred(t) ? ne : eq) : ne   (the ne subtree twice)
            inner = self.new()
            feat[i], thr[i], right[i] = f, x_t, self.emit(ne_id, depth + 1)
            left[i] = inner
            feat[inner], thr[inner] = f, _pred(x_t, src.tdtype)
            left[inner], right[inner] = self.emit(ne_id, depth + 1), self.emit(eq_id, depth + 1)
            nan_left[i] = not nan_to_ne  # NaN: to ne at the outer node (right) ...
            nan_left[inner] = False  # ... or to eq through the inner node's right
            return i
        if mode == "BRANCH_LEQ":
            t_le, lft, rgt, yes_left = x_t, t_id, f_id, True
        elif mode == "BRANCH_LT":
            t_le, lft, rgt, yes_left = _pred(x_t, src.tdtype), t_id, f_id, True
        elif mode == "BRANCH_GT":
            t_le, lft, rgt, yes_left = x_t, f_id, t_id, False
        else:  # BRANCH_GTE: x >= t is not (x <= pred(t))
            t_le, lft, rgt, yes_left = _pred(x_t, src.tdtype), f_id, t_id, False
        feat[i], thr[i] = f, t_le
        left[i] = self.emit(lft, depth + 1)
        right[i] = self.emit(rgt, depth + 1)
        nan_left[i] = yes_left == nan_yes
        return i


def _ensemble(ctx: Ctx, x: Value, forest, base: np.ndarray, width: int) -> str:
    if base.size not in (0, 1, width):
        raise refuse_msg(f"{base.size} base_values for {width} outputs")
    if base.size == 1 and width > 1:
        base = np.zeros(0)  # ORT uses a single base value only for one output
    if base.size:
        import dataclasses

        forest = dataclasses.replace(forest, base_score=base.astype(np.float64))
    return ctx.g.add(Op.TREE_ENSEMBLE, (x.node,), width=width, forest=forest)


def refuse_msg(msg: str):
    from peregrine.errors import UnsupportedModelError

    return UnsupportedModelError(f"ONNX tree ensemble: {msg} is not supported")


@handles(ML, "TreeEnsembleRegressor")
def convert_tree_regressor(node, a, ctx: Ctx) -> None:
    x = ctx.computed(node.input[0])
    width = int(a.get("n_targets", 1))
    forest, base = build_forest(node, a, width, "target", x.width, x.dtype)
    out = _ensemble(ctx, x, forest, base, width)
    post = a.get("post_transform", "NONE")
    if post == "LOGISTIC":
        out = ctx.g.add(Op.LINK, (out,), width=width, kind=Link.SIGMOID)
    elif post == "SOFTMAX":
        out = ctx.g.add(Op.LINK, (out,), width=width, kind=Link.SOFTMAX)
    elif post != "NONE":
        raise refuse(node, f"post_transform {post!r}")
    set_out(ctx, node, Value(out, width, "float32"))


@handles(ML, "TreeEnsembleClassifier")
def convert_tree_classifier(node, a, ctx: Ctx) -> None:
    x = ctx.computed(node.input[0])
    labels = class_labels(node, a)
    ids = np.asarray(a["class_ids"], np.int64)
    used = set(ids.tolist())
    post = a.get("post_transform", "NONE")
    g = ctx.g
    if len(labels) == 2 and used <= {0}:
        forest, base = build_forest(node, a, 1, "class", x.width, x.dtype)
        if base.size == 2:
            raise refuse(node, "two base_values with one scored class")
        s = _ensemble(ctx, x, forest, base[:1], 1)
        weights = np.asarray(a.get("class_weights", []), np.float64)
        if np.all(weights >= 0):
            label = g.add(Op.THRESHOLD, (s,), dtype="int64", width=1, value=0.5, strict=True)
            proba = g.add(Op.BINARY_PROBA, (s,), width=2)  # [1 - s, s]; no post-transform
        else:
            label = g.add(Op.THRESHOLD, (s,), dtype="int64", width=1, value=0.0, strict=True)
            if post == "LOGISTIC":
                both = g.add(Op.SELECT, (s,), width=2, columns=np.array([0, 0]))
                neg = g.add(Op.AFFINE, (both,), width=2, scale=np.array([-1.0, 1.0]),
                            shift=np.zeros(2))
                proba = g.add(Op.LINK, (neg,), width=2, kind=Link.SIGMOID)
            elif post == "NONE":
                both = g.add(Op.SELECT, (s,), width=2, columns=np.array([0, 0]))
                proba = g.add(Op.AFFINE, (both,), width=2, scale=np.array([-1.0, 1.0]),
                              shift=np.zeros(2))
            else:
                raise refuse(node, f"binary post_transform {post!r}")
    elif len(labels) > 2 or used == {0, 1}:
        width = len(labels)
        if len(labels) == 2:
            raise refuse(node, "two classes scored separately (ONNX Runtime's binary rules "
                         "for this form are not reproduced)")
        forest, base = build_forest(node, a, width, "class", x.width, x.dtype)
        if used != set(range(width)):
            raise refuse(node, "classes that no leaf scores")
        # every class must be scored by every row (ORT's has_score): each class id has a
        # tree whose every leaf writes it; the exporters write all classes or one per tree
        s = _ensemble(ctx, x, forest, base, width)
        label = g.add(Op.ARGMAX, (s,), dtype="int64", width=1)
        if post == "NONE":
            proba = s
        elif post == "LOGISTIC":
            proba = g.add(Op.LINK, (s,), width=width, kind=Link.SIGMOID)
        elif post == "SOFTMAX":
            proba = g.add(Op.LINK, (s,), width=width, kind=Link.SOFTMAX)
        else:
            raise refuse(node, f"post_transform {post!r}")
    else:
        raise refuse(node, f"class ids {sorted(used)} for {len(labels)} labels")
    set_out(ctx, node, Value(label, 1, "int64", labels=labels), 0)
    set_out(ctx, node, Value(proba, g.width(proba), "float32"), 1)


# ai.onnx.ml opset 5 ``TreeEnsemble``: integer enums in place of strings, interior nodes and
# leaves in separate arrays (a child is a leaf index where ``nodes_trueleafs`` /
# ``nodes_falseleafs`` say so), one (target, weight) per leaf, roots in ``tree_roots``, no base
# values (onnx/defs/traditionalml/defs.cc; ONNX Runtime runs it with the same tree_ensemble
# code as the opset-3 ops, so it is read into their attributes and built the same way)
V5_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ",
            "BRANCH_MEMBER")
V5_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
# post_transform as ONNX Runtime reads it (its POST_EVAL_TRANSFORM enum: 1 LOGISTIC, 2 SOFTMAX;
# measured on onnxruntime 1.32), which swaps 1 and 2 against the ONNX spec's text ("SOFTMAX (1),
# LOGISTIC (2)"); Peregrine answers as ONNX Runtime does on the same file
V5_POSTS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def _v5_as_v3(node, a: dict) -> dict:
    """The opset-3 attributes of the same trees, tree-local node ids in depth-first order."""
    def arr(key, dtype=np.int64):
        return np.asarray(a.get(key, []), dtype).reshape(-1)

    splits = np.asarray(a["nodes_splits"]).reshape(-1)
    weights = np.asarray(a["leaf_weights"]).reshape(-1)
    modes = arr("nodes_modes")
    feats, true_ids, false_ids = arr("nodes_featureids"), arr("nodes_truenodeids"), \
        arr("nodes_falsenodeids")
    true_leaf, false_leaf = arr("nodes_trueleafs"), arr("nodes_falseleafs")
    tracks = arr("nodes_missing_value_tracks_true") if "nodes_missing_value_tracks_true" in a \
        else np.zeros(len(modes), np.int64)
    targets = arr("leaf_targetids")
    n = len(modes)
    if not (len(splits) == len(feats) == len(true_ids) == len(false_ids) == len(true_leaf)
            == len(false_leaf) == len(tracks) == n) or len(targets) != len(weights):
        raise refuse(node, "node or leaf arrays of different lengths")
    for m in set(modes.tolist()):
        if not 0 <= m < len(V5_MODES):
            raise refuse(node, f"node mode {m}")
    out: dict[str, list] = defaultdict(list)

    def visit(t: int, first: int, index: int, leaf: bool, depth: int) -> int:
        """Rows for the subtree at ``index`` of tree t (whose rows start at ``first``); its
        root's tree-local node id."""
        nid = len(out["nodes_treeids"]) - first
        if depth > 4096 or not 0 <= index < (len(weights) if leaf else n):
            raise refuse(node, f"tree {t}: a child index {index} out of range or a cycle")
        out["nodes_treeids"].append(t)
        out["nodes_nodeids"].append(nid)
        if leaf:
            for key, v in (("nodes_featureids", 0), ("nodes_values", 0.0),
                           ("nodes_modes", "LEAF"), ("nodes_truenodeids", 0),
                           ("nodes_falsenodeids", 0), ("nodes_missing_value_tracks_true", 0)):
                out[key].append(v)
            out["target_treeids"].append(t)
            out["target_nodeids"].append(nid)
            out["target_ids"].append(int(targets[index]))
            out["target_weights"].append(weights[index])
            return nid
        row = len(out["nodes_modes"])
        for key, v in (("nodes_featureids", int(feats[index])), ("nodes_values", splits[index]),
                       ("nodes_modes", V5_MODES[int(modes[index])]), ("nodes_truenodeids", 0),
                       ("nodes_falsenodeids", 0),
                       ("nodes_missing_value_tracks_true", int(tracks[index]))):
            out[key].append(v)
        out["nodes_truenodeids"][row] = visit(t, first, int(true_ids[index]),
                                              bool(true_leaf[index]), depth + 1)
        out["nodes_falsenodeids"][row] = visit(t, first, int(false_ids[index]),
                                               bool(false_leaf[index]), depth + 1)
        return nid

    for t, root in enumerate(arr("tree_roots")):
        visit(t, len(out["nodes_treeids"]), int(root), False, 0)
    v3 = dict(out)
    # the split and weight types stay as given: double splits compare in double
    if splits.dtype == np.float64:
        v3["nodes_values_as_tensor"] = np.asarray(v3.pop("nodes_values"), np.float64)
        v3["target_weights_as_tensor"] = np.asarray(v3.pop("target_weights"), np.float64)
    elif splits.dtype != np.float32:
        raise refuse(node, f"{splits.dtype} splits")
    agg, post = int(a.get("aggregate_function", 1)), int(a.get("post_transform", 0))
    if not (0 <= agg < len(V5_AGGREGATES) and 0 <= post < len(V5_POSTS)):
        raise refuse(node, f"aggregate_function {agg} / post_transform {post}")
    v3["aggregate_function"] = V5_AGGREGATES[agg]
    v3["post_transform"] = V5_POSTS[post]
    v3["n_targets"] = int(a.get("n_targets", 1))
    return v3


@handles(ML, "TreeEnsemble")
def convert_tree_ensemble(node, a, ctx: Ctx) -> None:
    if "BRANCH_MEMBER" in {V5_MODES[m] for m in np.asarray(a.get("nodes_modes", []))
                           .reshape(-1).tolist() if 0 <= m < len(V5_MODES)}:
        raise refuse(node, "node mode BRANCH_MEMBER (set membership)")
    v3 = _v5_as_v3(node, a)
    x = ctx.computed(node.input[0])
    width = v3["n_targets"]
    forest, base = build_forest(node, v3, width, "target", x.width, x.dtype)
    out = _ensemble(ctx, x, forest, base, width)
    post = v3["post_transform"]
    if post == "LOGISTIC":
        out = ctx.g.add(Op.LINK, (out,), width=width, kind=Link.SIGMOID)
    elif post == "SOFTMAX":
        out = ctx.g.add(Op.LINK, (out,), width=width, kind=Link.SOFTMAX)
    elif post != "NONE":
        raise refuse(node, f"post_transform {post!r}")
    # the output has the input's type (T): float32 splits with float32 input
    set_out(ctx, node, Value(out, width, "float64" if forest.sum_dtype == np.float64
                             else "float32"))
