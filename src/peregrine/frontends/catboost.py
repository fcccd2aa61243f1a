"""CatBoost 1.2: CatBoostClassifier, CatBoostRegressor, CatBoostRanker and ``catboost.CatBoost``,
read from the library's own JSON export (``save_model(format="json")``).

Semantics (catboost/libs/model/cpu/evaluator_impl.cpp and the JSON export's fields):

* features are cast to float32 and binarized against float32 borders: a split is true (the
  ``right`` child, bit 1 of an oblivious tree's leaf index) iff ``x > border``;
* NaN follows the feature's ``nan_value_treatment``: ``AsFalse`` (nan_mode Min) and ``AsIs``
  (Forbidden: the comparison with NaN is false) send it to the false side, ``AsTrue`` (Max)
  to the true side; +-inf compare as numbers;
* an oblivious tree of depth d tests ``splits[i]`` for bit i of the leaf index (split 0 is the
  least significant bit), ``leaf_values`` hold ``dimension`` values per leaf, leaf-major;
  non-symmetric trees (grow_policy Depthwise/Lossguide) are nested ``left``/``right`` dicts;
* the raw prediction is ``scale * sum(leaf values) + bias`` (``scale_and_bias``), summed in
  double; classifiers apply the sigmoid (Logloss, CrossEntropy) or softmax (MultiClass),
  Poisson and Tweedie regressors ``exp``; every other loss returns the raw value.

Categorical features: CatBoost keys each category by ``CalcCatFeatureHash`` (CityHash64 of
its string, low 32 bits) and stores no strings, so the spec marks those columns
``hash_columns`` and the runtime hashes each value at the boundary; the graph then derives one
numeric column per one-hot value (1 iff hash == value) and per CTR (the CTR value looked up by
hash, or for a combination of features the CTR value of the row's decoded tuple,
frontends/catboost_ctr.py and catboost_combos.py) in one CTR_LOOKUP node, and the forest splits on
those. Text and embedding features are refused.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import catboost
import numpy as np
from catboost import CatBoost, CatBoostClassifier, CatBoostRanker, CatBoostRegressor

from peregrine.errors import NotFittedError
from peregrine.frontends.base import add_log_proba, qualified_name, register_frontend, unsupported
from peregrine.frontends.catboost_ctr import CategoricalColumns
from peregrine.ir import Comparison, GraphBuilder, Link, Op, concat_trees, make_forest
from peregrine.ir.spec import MethodSpec, ModelSpec

# loss -> what predict() returns on top of the raw formula value (CatBoostRegressor.predict's
# default prediction_type: "Exponent" for Poisson/Tweedie, "RawFormulaVal" otherwise)
EXP_LOSSES = ("Poisson", "Tweedie")
CLASS_LOSSES = ("Logloss", "CrossEntropy")
MULTI_LOSSES = ("MultiClass",)
RANKING_LOSSES = ("YetiRank", "YetiRankPairwise", "PairLogit", "PairLogitPairwise", "QueryRMSE",
                  "QuerySoftMax", "QueryCrossEntropy", "StochasticRank", "LambdaMart")


def model_json(model: Any) -> dict:
    """The model as CatBoost's own JSON export."""
    if not model.is_fitted():
        raise NotFittedError(f"{qualified_name(model)} is not fitted; call fit() or "
                             "load_model() before peregrine.compile()")
    names = list(getattr(model, "feature_names_", None) or [])
    for getter, what in (("get_text_feature_indices", "text features"),
                         ("get_embedding_feature_indices", "embedding features")):
        idx = list(getattr(model, getter)())
        if idx:  # (the JSON export refuses them too)
            shown = ", ".join(str(names[i]) if i < len(names) else str(i) for i in idx)
            raise unsupported(model, f"{what} ({shown})", "numeric features")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.json")
        model.save_model(path, format="json")
        with open(path) as f:
            return json.load(f)


def _loss(model: Any, raw: dict) -> str:
    params = raw.get("model_info", {}).get("params", {})
    loss = params.get("loss_function", {}).get("type")
    if loss is None:
        loss = str(model.get_all_params().get("loss_function", "RMSE"))
    return str(loss).split(":")[0]


def _check_features(model: Any, info: dict) -> dict[int, int]:
    """float_feature_index -> input column; refuses text and embedding features."""
    for kind, what in (("text_features", "text features"),
                       ("embedding_features", "embedding features")):
        feats = info.get(kind) or []
        if feats:
            names = ", ".join(str(f.get("feature_id") or f.get("flat_feature_index"))
                              for f in feats)
            raise unsupported(model, f"{what} ({names})", "numeric and categorical features")
    return {int(f["feature_index"]): int(f["flat_feature_index"])
            for f in info.get("float_features") or []}


class _TreeBuilder:
    """Node arrays of one tree in Forest form (left = split false, right = split true)."""

    def __init__(self, columns: dict[int, int], nan_true: dict[int, bool], width: int,
                 model: Any, cats: CategoricalColumns) -> None:
        self.columns, self.nan_true, self.width, self.model = columns, nan_true, width, model
        self.cats = cats
        self.reset()

    def reset(self) -> None:
        self.feature: list[int] = []
        self.threshold: list[float] = []
        self.left: list[int] = []
        self.right: list[int] = []
        self.nan_left: list[bool] = []
        self.value: list[np.ndarray] = []

    def node(self) -> int:
        self.feature.append(-1)
        self.threshold.append(0.0)
        self.left.append(-1)
        self.right.append(-1)
        self.nan_left.append(False)
        self.value.append(np.zeros(self.width))
        return len(self.feature) - 1

    def split(self, i: int, split: dict) -> None:
        kind = split.get("split_type")
        if kind in ("OneHotFeature", "OnlineCtr"):
            # a derived column: 1.0 iff the hash equals the value, or the CTR value; the
            # split is true (right) iff it is > the (float32) border
            self.feature[i], border = self.cats.split_column(split)
            self.threshold[i] = float(np.float32(border))
            self.nan_left[i] = True  # derived columns are never NaN
            return
        if kind != "FloatFeature":
            raise unsupported(self.model, f"split type {kind!r}",
                              "FloatFeature, OneHotFeature, OnlineCtr")
        f = int(split["float_feature_index"])
        self.feature[i] = self.columns[f]
        # float32 border, ``x > border`` is true: the Forest's left is ``x <= border``
        self.threshold[i] = float(np.float32(split["border"]))
        self.nan_left[i] = not self.nan_true[f]

    def part(self) -> dict:
        return {"feature": self.feature, "threshold": self.threshold, "left": self.left,
                "right": self.right, "nan_left": self.nan_left,
                "value": np.asarray(self.value, dtype=np.float64).reshape(-1, self.width)}

    def oblivious(self, tree: dict) -> dict:
        self.reset()
        splits = tree.get("splits") or []
        depth = len(splits)
        values = np.asarray(tree["leaf_values"], dtype=np.float64).reshape(-1, self.width)
        if len(values) != 1 << depth:
            raise unsupported(self.model, f"an oblivious tree with {len(values)} leaves at "
                              f"depth {depth}")
        # breadth first: level l tests splits[depth - 1 - l] (leaf index bits, MSB first)
        level = [self.node()]
        for lvl in range(depth):
            nxt = []
            for i in level:
                self.split(i, splits[depth - 1 - lvl])
                self.left[i], self.right[i] = self.node(), self.node()
                nxt += [self.left[i], self.right[i]]
            level = nxt
        for leaf, i in enumerate(level):
            self.value[i] = values[leaf]
        return self.part()

    def nested(self, tree: dict) -> dict:
        self.reset()
        stack = [(tree, self.node())]
        while stack:
            sub, i = stack.pop()
            if "split" not in sub:
                self.value[i] = np.asarray(sub["value"], dtype=np.float64).reshape(self.width)
                continue
            self.split(i, sub["split"])
            self.left[i], self.right[i] = self.node(), self.node()
            stack += [(sub["left"], self.left[i]), (sub["right"], self.right[i])]
        return self.part()


def parse_forest(model: Any, raw: dict, width: int):
    info = raw["features_info"]
    columns = _check_features(model, info)
    nan_true = {int(f["feature_index"]): f.get("nan_value_treatment") == "AsTrue"
                for f in info.get("float_features") or []}
    n_inputs = 1 + max((int(f["flat_feature_index"]) for kind in info.values()
                        if isinstance(kind, list) for f in kind
                        if isinstance(f, dict) and "flat_feature_index" in f), default=-1)
    cats = CategoricalColumns(model, raw, n_inputs)
    build = _TreeBuilder(columns, nan_true, width, model, cats)
    if "oblivious_trees" in raw:
        parts = [build.oblivious(t) for t in raw["oblivious_trees"]]
    else:
        parts = [build.nested(t) for t in raw.get("trees") or []]
    if not parts:
        parts = [{"feature": [-1], "threshold": [0.0], "left": [-1], "right": [-1],
                  "nan_left": [False], "value": np.zeros((1, width))}]
    # every feature the model was trained on is listed (flat index = input column); the
    # derived categorical columns follow the inputs
    forest = make_forest(
        **concat_trees(parts), n_features=n_inputs + len(cats.derived), n_outputs=width,
        comparison=Comparison.LE, input_dtype=np.dtype(np.float32),
    )
    return forest, cats


def _raw(model: Any, raw: dict, width: int) -> tuple[GraphBuilder, str, int, dict]:
    """Graph computing CatBoost's RawFormulaVal: scale * forest + bias."""
    forest, cats = parse_forest(model, raw, width)
    scale, bias = raw.get("scale_and_bias", [1.0, [0.0]])
    bias = np.asarray(bias, dtype=np.float64).reshape(-1)
    if bias.size == 1:
        bias = np.repeat(bias, width)
    g = GraphBuilder()
    x = g.input(cats.n_inputs)
    x = cats.add_columns(g, x)
    out = g.add(Op.TREE_ENSEMBLE, (x,), width=width, forest=forest)
    if float(scale) != 1.0 or np.any(bias != 0.0):
        out = g.add(Op.AFFINE, (out,), width=width, scale=np.full(width, float(scale)),
                    shift=bias)
    return g, out, cats.n_inputs, cats.hash_columns()


def _spec(model: Any, graph, methods, n_features: int, hashed: dict) -> ModelSpec:
    names = getattr(model, "feature_names_", None)
    return ModelSpec(
        graph=graph, methods=methods, n_features=n_features, source=qualified_name(model),
        feature_names=tuple(str(n) for n in names) if names else None,
        allow_nan=True, allow_inf=True, versions={"catboost": catboost.__version__},
        hash_columns=hashed,
    )


def _dimension(raw: dict) -> int:
    trees = raw.get("oblivious_trees") or []
    if trees:
        depth = len(trees[0].get("splits") or [])
        return len(trees[0]["leaf_values"]) >> depth
    bias = raw.get("scale_and_bias", [1.0, [0.0]])[1]
    return max(len(bias) if isinstance(bias, list) else 1, 1)


@register_frontend(
    CatBoostRegressor, library="catboost", methods=("predict",),
    notes="numeric and categorical features (one-hot, CTRs of single features and "
    "combinations); oblivious and Depthwise/Lossguide trees; NaN modes Min/Max/Forbidden; RMSE, "
    "MAE, Quantile, Expectile, Huber, Poisson/Tweedie (exp), ...",
)
@register_frontend(
    CatBoostRanker, library="catboost", methods=("predict",),
    notes="numeric and categorical features; YetiRank, PairLogit, QueryRMSE, ... (raw scores)",
)
@register_frontend(
    CatBoost, library="catboost", methods=("predict",),
    notes="predict() as CatBoost.predict: RawFormulaVal",
)
def convert_regressor(model: Any) -> ModelSpec:
    raw = model_json(model)
    loss = _loss(model, raw)
    width = _dimension(raw)
    g, out, n, hashed = _raw(model, raw, width)
    exp = type(model) is CatBoostRegressor and loss in EXP_LOSSES
    if exp:
        out = g.add(Op.LINK, (out,), width=width, kind=Link.EXP)
    graph = g.build({"predict": out})
    return _spec(model, graph, {"predict": MethodSpec("predict", squeeze=width == 1)}, n,
                 hashed)


@register_frontend(
    CatBoostClassifier, library="catboost", methods=("predict", "predict_proba"),
    notes="numeric and categorical features (one-hot, CTRs of single features and "
    "combinations, hashed at the input boundary); Logloss, CrossEntropy, MultiClass; oblivious "
    "and non-symmetric trees; NaN modes Min/Max/Forbidden",
)
def convert_classifier(model: Any) -> ModelSpec:
    raw = model_json(model)
    loss = _loss(model, raw)
    width = _dimension(raw)
    labels = np.asarray(model.classes_)
    if loss in CLASS_LOSSES and width == 1:
        threshold = model.get_probability_threshold()
        if threshold is not None and float(threshold) != 0.5:
            raise unsupported(model, f"probability threshold {threshold}", "0.5")
        g, score, n, hashed = _raw(model, raw, 1)
        p = g.add(Op.LINK, (score,), width=1, kind=Link.SIGMOID)
        proba = g.add(Op.BINARY_PROBA, (p,), width=2)
        # CatBoost's "Class" prediction: raw formula value > 0 (probability > 0.5)
        label = g.add(Op.THRESHOLD, (score,), dtype="int64", width=1, value=0.0, strict=True)
        squeeze = True
    elif loss in MULTI_LOSSES and width == len(labels):
        g, score, n, hashed = _raw(model, raw, width)
        proba = g.add(Op.LINK, (score,), width=width, kind=Link.SOFTMAX)
        label = g.add(Op.ARGMAX, (score,), dtype="int64", width=1)
        squeeze = False  # CatBoostClassifier.predict returns (n, 1) for MultiClass
        if np.array_equal(labels, np.arange(width)):
            # the runtime returns labelled outputs 1-D; class ids 0..k-1 need no labels, so
            # the (n, 1) int64 column is returned as it is
            labels = None
    else:
        raise unsupported(model, f"loss {loss!r} with {width} dimensions",
                          ", ".join(CLASS_LOSSES + MULTI_LOSSES))
    outputs = {"predict": label, "predict_proba": proba}
    methods: dict[str, MethodSpec] = {}
    add_log_proba(g, outputs, methods, len(model.classes_))  # np.log of predict_proba
    graph = g.build(outputs)
    methods |= {"predict": MethodSpec("predict", squeeze=squeeze, labels=labels,
                                     dtype="int64" if labels is None else "float64"),
               "predict_proba": MethodSpec("predict_proba")}
    return _spec(model, graph, methods, n, hashed)
