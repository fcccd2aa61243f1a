"""XGBoost 3.x: XGBClassifier, XGBRegressor, XGBRanker (and their XGBRF subclasses) and a raw
``xgboost.Booster``. The model is read from the library's own JSON (``save_raw("json")``).

Semantics (src/predictor/predict_fn.h ``GetNextNode``, src/common/categorical.h ``Decision``):

* input is cast to float32; a numeric split goes left iff ``x < split_condition`` (float32);
* NaN, and the ``missing`` value (compared after the float32 cast), take ``default_left``;
* a categorical split sends a category in the stored set RIGHT; categories not in the set,
  negative values (tested on the float, so -0.5 is invalid) and codes >= 2**24 go LEFT;
* leaf values (``split_conditions`` on leaves) are float32 and trees of one output group are
  summed onto ``base_score``, which the JSON keeps in output space: the margin is the objective's
  ``ProbToMargin`` (logit, log or identity);
* the scikit-learn wrappers predict through ``inplace_predict`` (accepts +-inf) with trees up to
  ``best_iteration`` when early stopping ran; ``Booster.predict(DMatrix(X))`` uses every tree and
  DMatrix rejects +-inf unless ``missing`` is itself infinite.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xgboost
from xgboost import Booster, XGBClassifier, XGBRanker, XGBRegressor

from peregrine.errors import NotFittedError
from peregrine.frontends.base import qualified_name, register_frontend, unsupported
from peregrine.ir import (
    Comparison,
    Forest,
    GraphBuilder,
    Link,
    Op,
    bitset_from_categories,
    concat_trees,
    make_forest,
)
from peregrine.ir.spec import MethodSpec, ModelSpec

# objective -> (ProbToMargin of base_score, PredTransform). XGBoost's src/objective/*: logistic
# objectives use logit/sigmoid; poisson, tweedie, gamma and cox use log/exp; softmax, ranking and
# the other regression losses are the identity (binary:logitraw's ProbToMargin too, checked
# against predict(output_margin=True)).
OBJECTIVES: dict[str, tuple[str, str]] = {
    "binary:logistic": ("logit", "sigmoid"),
    "reg:logistic": ("logit", "sigmoid"),
    "binary:logitraw": ("identity", "identity"),
    "binary:hinge": ("identity", "hinge"),
    "reg:squarederror": ("identity", "identity"),
    "reg:squaredlogerror": ("identity", "identity"),
    "reg:pseudohubererror": ("identity", "identity"),
    "reg:absoluteerror": ("identity", "identity"),
    "reg:quantileerror": ("identity", "identity"),
    "count:poisson": ("log", "exp"),
    "reg:tweedie": ("log", "exp"),
    "reg:gamma": ("log", "exp"),
    "survival:cox": ("log", "exp"),
    "multi:softprob": ("identity", "softmax"),
    "multi:softmax": ("identity", "argmax"),
    "rank:pairwise": ("identity", "identity"),
    "rank:ndcg": ("identity", "identity"),
    "rank:map": ("identity", "identity"),
}
SUPPORTED_OBJECTIVES = ", ".join(OBJECTIVES)


@dataclass
class Parsed:
    """What the converters need from one booster's JSON."""

    objective: str
    n_features: int
    n_outputs: int  # num_class for softmax, num_target otherwise
    forest: Forest
    feature_names: tuple[str, ...] | None = None
    category_maps: dict[int, tuple[Any, ...]] = field(default_factory=dict)


# ------------------------------------------------------------------------------- parsing --


def _floats(text: str) -> np.ndarray:
    """base_score: "5E-1" (2.x) or "[5E-1]" / "[a,b,c]" (3.x vector intercept), float32."""
    parsed = json.loads(text) if text.strip().startswith("[") else [float(text)]
    return np.asarray(parsed, dtype=np.float32).reshape(-1)


def base_margin(objective: str, base_score: np.ndarray) -> np.ndarray:
    """ProbToMargin in float32, as XGBoost computes it (``-log(1/p - 1)``, ``log(p)``)."""
    p = base_score.astype(np.float32)
    kind = OBJECTIVES[objective][0]
    with np.errstate(divide="ignore"):
        if kind == "logit":
            p = -np.log(np.float32(1.0) / p - np.float32(1.0))
        elif kind == "log":
            p = np.log(p)
    return p.astype(np.float64)


def _decode_categories(cats: dict | None, n_features: int) -> dict[int, tuple[Any, ...]]:
    """Training categories per pandas-category column from the model's ``cats`` field (3.1+):
    strings are UTF-8 bytes with offsets, numbers a plain value list. Code = position."""
    out: dict[int, tuple[Any, ...]] = {}
    if not cats:
        return out
    for j, enc in enumerate(cats.get("enc", [])[:n_features]):
        if "offsets" in enc:
            offsets, raw = enc["offsets"], bytes(enc["values"])
            if len(offsets) > 1:
                out[j] = tuple(raw[a:b].decode("utf-8") for a, b in zip(offsets, offsets[1:]))
        elif enc.get("values"):
            out[j] = tuple(enc["values"])
    return out


def _tree_arrays(tree: dict, weight: float | None, cat_offset: int, model: Any):
    """Per-node arrays of one JSON tree plus its categorical bitsets (left = not in the set)."""
    left = np.asarray(tree["left_children"], dtype=np.int64)
    right = np.asarray(tree["right_children"], dtype=np.int64)
    cond = np.asarray(tree["split_conditions"], dtype=np.float64).astype(np.float32)
    leaf = left < 0
    width = int(tree["tree_param"].get("size_leaf_vector", "1") or 1)
    width = max(width, 1)
    if width > 1:  # multi_output_tree: a leaf's right_children indexes leaf_weights rows
        weights = np.asarray(tree["leaf_weights"], dtype=np.float64).astype(np.float32)
        weights = weights.reshape(-1, width)
        value = np.zeros((len(left), width), dtype=np.float32)
        value[leaf] = weights[right[leaf]]
    else:
        value = np.where(leaf, cond, np.float32(0.0))[:, None]
    if weight is not None:  # dart: the tree's output times its weight, in float32
        value = value * np.float32(weight)
    split_type = np.asarray(tree.get("split_type", [0] * len(left)), dtype=np.int64)
    cat_index = np.full(len(left), -1, dtype=np.int64)
    sets = []
    nodes = tree.get("categories_nodes", [])
    for k, node in enumerate(nodes):
        begin = int(tree["categories_segments"][k])
        size = int(tree["categories_sizes"][k])
        sets.append(np.asarray(tree["categories"][begin : begin + size], dtype=np.int64))
        cat_index[node] = cat_offset + k
    if np.any((split_type == 1) & ~leaf & (cat_index < 0)):
        raise unsupported(model, "a categorical split without a category list")
    part = {
        "feature": np.where(leaf, -1, np.asarray(tree["split_indices"], dtype=np.int64)),
        "threshold": np.where(leaf | (cat_index >= 0), 0.0, cond.astype(np.float64)),
        "left": np.where(leaf, -1, left),
        "right": np.where(leaf, -1, right),
        "nan_left": np.asarray(tree["default_left"], dtype=bool) & ~leaf,
        "value": value.astype(np.float64),
        "cat_index": cat_index,
    }
    return part, sets


def _read_json(data: bytes) -> Any:
    """orjson where installed (the serve extra): 500 trees' 4.8 MB in 0.04 s against the
    standard library's 0.10 s, the same values (both round each number correctly; tested).
    XGBoost writes NaN and infinity as bare words, which only the standard library reads."""
    try:
        import orjson
    except ImportError:
        return json.loads(data)
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def parse_booster(booster: Booster, model: Any, iteration_end: int = 0) -> Parsed:
    """Read the booster's JSON; keep the trees of iterations [0, iteration_end) (0: all)."""
    try:
        raw = _read_json(bytes(booster.save_raw(raw_format="json")))
    except xgboost.core.XGBoostError as exc:
        raise NotFittedError(
            f"{qualified_name(model)} is not trained ({str(exc).splitlines()[0]}); "
            "train it or load a model before peregrine.compile()"
        ) from exc
    learner = raw["learner"]
    gbm = learner["gradient_booster"]
    tree_weights = None
    if gbm["name"] == "dart":
        tree_weights = [float(w) for w in gbm["weight_drop"]]
        gbm = gbm["gbtree"]
    if gbm["name"] != "gbtree":
        raise unsupported(model, f"booster={gbm['name']!r}", "gbtree, dart")
    objective = learner["objective"]["name"]
    if objective not in OBJECTIVES:
        raise unsupported(model, f"objective {objective!r}", SUPPORTED_OBJECTIVES)
    params = learner["learner_model_param"]
    n_features = int(params["num_feature"])
    n_class = int(params.get("num_class", "0"))
    n_target = int(params.get("num_target", "1"))
    if n_class > 1 and n_target > 1:
        raise unsupported(model, "multi-class multi-target models")
    n_outputs = max(n_class, n_target, 1)
    if objective.startswith("multi:") and n_class < 1:
        raise unsupported(model, f"{objective} without num_class")
    mdl = gbm["model"]
    trees, groups = mdl["trees"], [int(g) for g in mdl["tree_info"]]
    score = _floats(params["base_score"])
    # learner.cc InitModelUserParam: while NeedFit() (boost_from_average and no tree yet) the
    # base_score is a dummy and used as the margin without ProbToMargin.
    dummy = not trees and str(params.get("boost_from_average", "1")) not in ("0", "false")
    margin = score.astype(np.float64) if dummy else base_margin(objective, score)
    if margin.size == 1:
        margin = np.repeat(margin, n_outputs)
    if margin.size != n_outputs:
        raise unsupported(model, f"base_score of size {margin.size} for {n_outputs} outputs")

    if end := int(iteration_end):
        indptr = mdl.get("iteration_indptr")
        if indptr is None:  # 2.x JSON: every iteration has groups * num_parallel_tree trees
            per = int(mdl["gbtree_model_param"]["num_parallel_tree"]) * max(n_class, n_target, 1)
            indptr = [per * i for i in range(len(trees) // max(per, 1) + 1)]
        n_keep = int(indptr[min(end, len(indptr) - 1)])
        trees, groups = trees[:n_keep], groups[:n_keep]

    parts, bitsets = [], []
    vector_leaf = False
    for i, tree in enumerate(trees):
        w = None if tree_weights is None else tree_weights[i]
        part, sets = _tree_arrays(tree, w, len(bitsets), model)
        vector_leaf |= part["value"].shape[1] > 1
        parts.append(part)
        bitsets.extend(sets)
    if vector_leaf and any(p["value"].shape[1] != n_outputs for p in parts):
        raise unsupported(model, "a mix of vector-leaf and scalar-leaf trees")
    if not parts:  # zero boosted rounds: the base score alone
        parts = [{"feature": [-1], "threshold": [0.0], "left": [-1], "right": [-1],
                  "nan_left": [False], "value": np.zeros((1, 1)), "cat_index": [-1]}]
        groups = [0]
    arrays = concat_trees(parts)
    cat = {}
    if bitsets:
        # Node bitsets in XGBoost hold max_cat + 1 bits; codes past them go left, as do codes
        # >= 32 * n_words here (cat_unknown_left), so one width for all nodes keeps the rule.
        top = max((int(s.max()) if s.size else 0) for s in bitsets)
        n_words = top // 32 + 1
        full = np.full(n_words, 0xFFFFFFFF, dtype=np.uint32)
        cat = {
            "cat_bitsets": np.stack([full & ~bitset_from_categories(s, n_words) for s in bitsets]),
            "cat_unknown_left": np.ones(len(bitsets), dtype=bool),
            "cat_negative_before_trunc": True,  # InvalidCat tests `cat < 0` on the float
        }
    else:
        arrays["cat_index"] = None
    forest = make_forest(
        **arrays, **cat, n_features=n_features, n_outputs=n_outputs,
        tree_group=np.zeros(len(groups)) if vector_leaf else groups,
        base_score=margin, comparison=Comparison.LT, input_dtype=np.dtype(np.float32),
        sum_dtype=np.dtype(np.float32),  # cpu_predictor: float preds += leaf, tree by tree
    )
    names = learner.get("feature_names") or None
    return Parsed(
        objective=objective, n_features=n_features, n_outputs=n_outputs, forest=forest,
        feature_names=tuple(str(n) for n in names) if names else None,
        category_maps=_decode_categories(mdl.get("cats"), n_features),
    )


# --------------------------------------------------------------------------------- graph --


def _margin(parsed: Parsed, missing: float) -> tuple[GraphBuilder, str]:
    g = GraphBuilder()
    x = g.input(parsed.n_features)
    if not np.isnan(missing):
        # XGBoost compares the missing value after the float32 cast (IsValidFunctor on float).
        x = g.add(Op.REPLACE_WITH_NAN, (x,), width=parsed.n_features, value=float(missing),
                  compare_dtype="float32")
    out = g.add(Op.TREE_ENSEMBLE, (x,), width=parsed.n_outputs, forest=parsed.forest)
    return g, out


def _transform(g: GraphBuilder, margin: str, parsed: Parsed, model: Any) -> tuple[str, bool]:
    """What Booster.predict returns (PredTransform); bool: 1-D result."""
    kind = OBJECTIVES[parsed.objective][1]
    k = parsed.n_outputs
    # sigmoid and softmax in float32 around libm's expf, as common::Sigmoid / common::Softmax
    if kind == "sigmoid":
        return g.add(Op.LINK, (margin,), width=k, kind=Link.SIGMOID, float32=True), k == 1
    if kind == "exp":
        return g.add(Op.LINK, (margin,), width=k, kind=Link.EXP), k == 1
    if kind == "softmax":
        return g.add(Op.LINK, (margin,), width=k, kind=Link.SOFTMAX, float32=True), False
    if kind == "argmax":  # class ids as float32, first maximum (std::max_element)
        return g.add(Op.ARGMAX, (margin,), dtype="int64", width=1), True
    if kind == "hinge":  # preds > 0 ? 1 : 0
        if k != 1:
            raise unsupported(model, "multi-target binary:hinge")
        return g.add(Op.THRESHOLD, (margin,), dtype="int64", width=1, value=0.0,
                     strict=True), True
    return g.add(Op.LINK, (margin,), width=k, kind=Link.IDENTITY), k == 1


def _spec(model: Any, parsed: Parsed, graph, methods, *, allow_inf: bool) -> ModelSpec:
    return ModelSpec(
        graph=graph, methods=methods, n_features=parsed.n_features,
        source=qualified_name(model), feature_names=parsed.feature_names,
        allow_nan=True, allow_inf=allow_inf, category_maps=parsed.category_maps,
        # XGBoost 3.x re-codes a DataFrame's categories into the training ones and raises
        # "Found a category not in the training set" (docs/frontends/xgboost.md: past the
        # largest one; inside the range its lower-bound search answers for the next larger
        # category instead): an unseen category is an InputError here, never a guess
        category_unknown_error=frozenset(parsed.category_maps),
        # a DMatrix built from CSR/CSC/COO stores only the present entries: absent ones are
        # missing (default direction), not 0 (docs/sparse.md)
        sparse_absent="nan", versions={"xgboost": xgboost.__version__},
    )


# ------------------------------------------------------------------------ the converters --


def _wrapper_booster(model: Any) -> tuple[Booster, int]:
    """The fitted booster and the iteration end XGBModel.predict uses (best_iteration + 1)."""
    try:
        booster = model.get_booster()
    except (AttributeError, ValueError) as exc:  # sklearn NotFittedError is both
        raise NotFittedError(
            f"{qualified_name(model)} is not fitted; call fit() before peregrine.compile()"
        ) from exc
    if callable(getattr(model, "objective", None)):
        raise unsupported(model, "a custom objective function", SUPPORTED_OBJECTIVES)
    best = booster.attr("best_iteration")  # XGBModel._get_iteration_range
    return booster, 0 if best is None else int(best) + 1


def _missing(model: Any) -> float:
    missing = getattr(model, "missing", np.nan)
    return np.nan if missing is None else float(missing)


@register_frontend(
    XGBRanker, library="xgboost", methods=("predict",),
    notes="rank:pairwise, rank:ndcg, rank:map; best_iteration; missing; categorical",
)
@register_frontend(
    XGBRegressor, library="xgboost", methods=("predict",),
    notes="reg/count/survival:cox objectives, multi-target, vector leaves, dart; best_iteration; "
    "missing; categorical",
)
def convert_regressor(model: Any) -> ModelSpec:
    booster, end = _wrapper_booster(model)
    parsed = parse_booster(booster, model, end)
    g, margin = _margin(parsed, _missing(model))
    out, flat = _transform(g, margin, parsed, model)
    graph = g.build({"predict": out})
    methods = {"predict": MethodSpec("predict", squeeze=flat, dtype="float32")}
    return _spec(model, parsed, graph, methods, allow_inf=True)


@register_frontend(
    XGBClassifier, library="xgboost", methods=("predict", "predict_proba"),
    notes="binary and multiclass (softprob, softmax); best_iteration; missing; categorical",
)
def convert_classifier(model: Any) -> ModelSpec:
    booster, end = _wrapper_booster(model)
    parsed = parse_booster(booster, model, end)
    g, margin = _margin(parsed, _missing(model))
    k = parsed.n_outputs
    obj = parsed.objective
    if obj == "multi:softmax":
        # predict: class ids cast to int32; predict_proba: scipy softmax of the margin
        label = g.add(Op.ARGMAX, (margin,), dtype="int64", width=1)
        proba = g.add(Op.LINK, (margin,), width=k, kind=Link.SOFTMAX)
        labels = np.arange(k, dtype=np.int32)
    elif k > 1:
        if obj != "multi:softprob" or k == 2:
            # 2-D output with n_classes_ == 2 is XGBClassifier's multi-label branch
            raise unsupported(model, f"{obj} with {k} outputs (multi-label)",
                              "binary objectives, multi:softprob/softmax with >= 3 classes")
        proba, _ = _transform(g, margin, parsed, model)
        label = g.add(Op.ARGMAX, (proba,), dtype="int64", width=1)
        labels = np.arange(k, dtype=np.int64)
    else:
        # binary: [1 - p, p] and p > 0.5 on whatever Booster.predict returns (the margin for
        # binary:logitraw, exactly as XGBClassifier does)
        p, _ = _transform(g, margin, parsed, model)
        proba = g.add(Op.BINARY_PROBA, (p,), width=2)
        label = g.add(Op.THRESHOLD, (p,), dtype="int64", width=1, value=0.5, strict=True)
        labels = np.arange(2, dtype=np.int64)
    graph = g.build({"predict": label, "predict_proba": proba})
    methods = {
        "predict": MethodSpec("predict", labels=labels),
        "predict_proba": MethodSpec("predict_proba", dtype="float32"),
    }
    return _spec(model, parsed, graph, methods, allow_inf=True)


@register_frontend(
    Booster, library="xgboost", methods=("predict",),
    notes="Booster.predict(DMatrix(X)): all trees, NaN missing, +-inf rejected",
)
def convert_booster(booster: Booster) -> ModelSpec:
    parsed = parse_booster(booster, booster)
    g, margin = _margin(parsed, np.nan)
    out, flat = _transform(g, margin, parsed, booster)
    graph = g.build({"predict": out})
    methods = {"predict": MethodSpec("predict", squeeze=flat, dtype="float32")}
    # DMatrix(X) (missing=NaN) raises "Input data contains `inf`" for +-inf
    return _spec(booster, parsed, graph, methods, allow_inf=False)
