"""scikit-learn decision trees and bagged forests (RandomForest, ExtraTrees).

Semantics (sklearn/tree/_tree.pyx, ``apply_dense``): X is cast to float32, a sample goes left iff
``X[i, f] <= threshold`` (threshold stored as float64); NaN follows ``missing_go_to_left``.
Classifier leaves hold class weights, normalised per leaf exactly as ``predict_proba`` does;
forests average the per-tree outputs.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from sklearn import __version__ as sklearn_version
from sklearn.ensemble import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.tree import (
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    ExtraTreeClassifier,
    ExtraTreeRegressor,
)

from peregrine.frontends.base import (
    add_log_proba,
    declare_params,
    qualified_name,
    register_frontend,
    require_fitted,
    sklearn_feature_names,
    unsupported,
)
from peregrine.ir import Aggregation, GraphBuilder, Link, Op, concat_trees, make_forest
from peregrine.ir.spec import MethodSpec, ModelSpec


def tree_arrays(tree: Any, feature_map: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per-node arrays (local child indices) of one fitted ``sklearn.tree._tree.Tree``."""
    left = tree.children_left.astype(np.int64)
    right = tree.children_right.astype(np.int64)
    leaf = left < 0
    feature = tree.feature.astype(np.int64)
    if feature_map is not None:  # bagging on feature subsets: map back to input columns
        feature = np.where(leaf, -1, feature_map[np.maximum(feature, 0)])
    feature = np.where(leaf, -1, feature)
    missing_left = getattr(tree, "missing_go_to_left", None)
    nan_left = np.zeros(len(left), bool) if missing_left is None else missing_left.astype(bool)
    return {
        "feature": feature,
        "threshold": np.where(leaf, 0.0, tree.threshold),
        "left": np.where(leaf, -1, left),
        "right": np.where(leaf, -1, right),
        "nan_left": nan_left & ~leaf,
    }


def classifier_leaf_values(tree: Any, n_classes: int) -> np.ndarray:
    """Leaf class probabilities as DecisionTreeClassifier.predict_proba computes them."""
    proba = np.array(tree.value[:, 0, :n_classes], dtype=np.float64)
    normalizer = proba.sum(axis=1)
    normalizer[normalizer == 0.0] = 1.0
    return proba / normalizer[:, None]


def accepts_nan(model: Any, n_features: int) -> bool:
    """Whether the fitted estimator accepts NaN at predict time. scikit-learn decides this from
    splitter/criterion/monotonic constraints in private helpers whose rules move between
    releases, so ask the estimator itself on one all-NaN row."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. "X does not have valid feature names"
        try:
            model.predict(np.full((1, n_features), np.nan, dtype=np.float32))
        except ValueError:
            return False
    return True


def tree_model_spec(model: Any, graph, methods: dict, n_features: int, **kw) -> ModelSpec:
    # NaN in a sparse X: refused even where a dense NaN is taken (ir/spec.py SPARSE_NAN)
    kw.setdefault("sparse_nan", "refuse")
    return ModelSpec(
        graph=graph,
        methods=methods,
        n_features=n_features,
        source=qualified_name(model),
        feature_names=sklearn_feature_names(model),
        allow_inf=False,  # check_array rejects infinity for every sklearn tree model
        finite_dtype="float32",  # ... after the cast to float32 (DTYPE): 1e300 is infinity
        versions={"sklearn": sklearn_version},
        **kw,
    )


def classifier_graph(forest, n_classes: int, labels: np.ndarray):
    """Graph and methods for a classifier whose ensemble output already is the probability."""
    g = GraphBuilder()
    x = g.input(forest.n_features)
    proba = g.add(Op.TREE_ENSEMBLE, (x,), width=n_classes, forest=forest)
    label = g.add(Op.ARGMAX, (proba,), dtype="int64", width=1)
    outputs = {"predict_proba": proba, "predict": label}
    methods = {
        "predict": MethodSpec("predict", labels=np.asarray(labels)),
        "predict_proba": MethodSpec("predict_proba", dtype="float64"),
    }
    add_log_proba(g, outputs, methods, n_classes)  # np.log(predict_proba), _classes.py
    return g.build(outputs), methods


def regressor_graph(forest):
    g = GraphBuilder()
    x = g.input(forest.n_features)
    out = g.add(Op.TREE_ENSEMBLE, (x,), width=forest.n_outputs, forest=forest)
    out = g.add(Op.LINK, (out,), width=forest.n_outputs, kind=Link.IDENTITY)
    graph = g.build({"predict": out})
    return graph, {"predict": MethodSpec("predict", squeeze=forest.n_outputs == 1)}


def _estimators(model: Any) -> list[Any]:
    return list(model.estimators_) if hasattr(model, "estimators_") else [model]


@register_frontend(
    DecisionTreeClassifier, ExtraTreeClassifier, RandomForestClassifier, ExtraTreesClassifier,
    library="scikit-learn", methods=("predict", "predict_proba", "predict_log_proba"),
    notes="binary and multiclass; NaN where sklearn accepts it",
)
def convert_tree_classifier(model: Any) -> ModelSpec:
    require_fitted(model, "classes_", "n_features_in_")
    if getattr(model, "n_outputs_", 1) != 1:
        raise unsupported(model, "multi-output classification", "single-output classifiers")
    n_classes = int(model.n_classes_)
    parts = []
    for est in _estimators(model):
        part = tree_arrays(est.tree_)
        part["value"] = classifier_leaf_values(est.tree_, n_classes)
        parts.append(part)
    arrays = concat_trees(parts)
    forest = make_forest(
        **arrays, n_features=model.n_features_in_, n_outputs=n_classes,
        input_dtype=np.dtype(np.float32),
        aggregation=Aggregation.AVERAGE if hasattr(model, "estimators_") else Aggregation.SUM,
    )
    graph, methods = classifier_graph(forest, n_classes, model.classes_)
    return tree_model_spec(model, graph, methods, model.n_features_in_,
                           allow_nan=accepts_nan(model, model.n_features_in_))


@register_frontend(
    DecisionTreeRegressor, ExtraTreeRegressor, RandomForestRegressor, ExtraTreesRegressor,
    library="scikit-learn", methods=("predict",),
    notes="single and multi-output; NaN where sklearn accepts it",
)
def convert_tree_regressor(model: Any) -> ModelSpec:
    require_fitted(model, "n_features_in_")
    n_outputs = int(getattr(model, "n_outputs_", 1))
    parts = []
    for est in _estimators(model):
        part = tree_arrays(est.tree_)
        part["value"] = np.array(est.tree_.value[:, :, 0], dtype=np.float64)
        parts.append(part)
    arrays = concat_trees(parts)
    forest = make_forest(
        **arrays, n_features=model.n_features_in_, n_outputs=n_outputs,
        input_dtype=np.dtype(np.float32),
        aggregation=Aggregation.AVERAGE if hasattr(model, "estimators_") else Aggregation.SUM,
    )
    graph, methods = regressor_graph(forest)
    return tree_model_spec(model, graph, methods, model.n_features_in_,
                           allow_nan=accepts_nan(model, model.n_features_in_))

# Tree structure, leaf values and feature subsets are fitted state; no parameter is read when
# predicting (tests/test_param_audit.py).
_TREE_FIT = ("ccp_alpha criterion max_depth max_features max_leaf_nodes min_impurity_decrease "
             "min_samples_leaf min_samples_split min_weight_fraction_leaf monotonic_cst")
declare_params(DecisionTreeClassifier, DecisionTreeRegressor, ExtraTreeClassifier,
               ExtraTreeRegressor, ignored=_TREE_FIT + " splitter")
declare_params(RandomForestClassifier, RandomForestRegressor, ExtraTreesClassifier,
               ExtraTreesRegressor,
               ignored=_TREE_FIT + " bootstrap max_samples n_estimators oob_score")
