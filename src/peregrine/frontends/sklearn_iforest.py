"""scikit-learn IsolationForest: score_samples, decision_function, predict.

Semantics (sklearn/ensemble/_iforest.py, ``_compute_score_samples``): X is cast to float32 and
every ExtraTreeRegressor is applied (``tree.apply``: ``x <= threshold``, NaN follows
``missing_go_to_left``) to ``X[:, estimators_features_[t]]`` when the trees were fit on a feature
subset. Each tree adds ``depth[leaf] + c(n_node_samples[leaf]) - 1.0`` to a float64 sum, in tree
order, and ``score_samples = -2 ** (-sum / (n_trees * c(max_samples_)))`` with c sklearn's
``_average_path_length``. ``decision_function = score_samples - offset_``;
``predict = 1 where decision_function >= 0 else -1``.

The per-leaf constants are the model's own ``_decision_path_lengths`` and
``_average_path_length_per_tree`` (private fitted state set in ``fit``, exactly the arrays
``score_samples`` indexes); when absent they are recomputed the way ``fit`` does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from sklearn.ensemble import IsolationForest
from sklearn.ensemble._iforest import _average_path_length

from peregrine.frontends.base import declare_params, register_frontend, require_fitted, unsupported
from peregrine.frontends.sklearn_trees import tree_arrays, tree_model_spec
from peregrine.ir import Aggregation, GraphBuilder, Link, Op, concat_trees, make_forest
from peregrine.ir.spec import MethodSpec, ModelSpec


def _leaf_constants(model: Any) -> tuple[list, list]:
    depths = getattr(model, "_decision_path_lengths", None)
    avg = getattr(model, "_average_path_length_per_tree", None)
    if depths is None or avg is None or len(depths) != len(model.estimators_):
        depths = [est.tree_.compute_node_depths() for est in model.estimators_]
        avg = [_average_path_length(est.tree_.n_node_samples) for est in model.estimators_]
    return list(depths), list(avg)


@register_frontend(
    IsolationForest, library="scikit-learn",
    methods=("predict", "decision_function", "score_samples"),
    notes="feature subsampling, NaN and +-inf inputs",
)
def convert_isolation_forest(model: Any) -> ModelSpec:
    require_fitted(model, "estimators_", "estimators_features_", "offset_", "max_samples_")
    n_features = int(model.n_features_in_)
    # _compute_chunked_score_samples subsets columns only when _max_features != n_features;
    # otherwise estimators_features_ may be a permutation the trees never saw.
    max_features = getattr(model, "_max_features", n_features)
    subsample = max_features != n_features
    depths, avg = _leaf_constants(model)
    parts = []
    for est, features, d, c in zip(model.estimators_, model.estimators_features_, depths, avg):
        fmap = np.asarray(features, dtype=np.int64) if subsample else None
        part = tree_arrays(est.tree_, feature_map=fmap)
        # the same float64 expression _parallel_compute_tree_depths adds per sample
        part["value"] = np.asarray(d, dtype=np.float64) + np.asarray(c, np.float64) - 1.0
        parts.append(part)
    # a float64 sum from zero in tree order, as `depths +=` in _compute_score_samples
    forest = make_forest(
        **concat_trees(parts), n_features=n_features, n_outputs=1,
        input_dtype=np.dtype(np.float32), aggregation=Aggregation.SUM,
    )
    max_samples = getattr(model, "_max_samples", model.max_samples_)
    denominator = len(model.estimators_) * float(_average_path_length([max_samples])[0])
    if denominator == 0.0:
        raise unsupported(model, "max_samples=1 (every score is the constant -0.5)",
                          "max_samples >= 2")
    g = GraphBuilder()
    x = g.input(n_features)
    total = g.add(Op.TREE_ENSEMBLE, (x,), width=1, forest=forest)
    score = g.add(Op.LINK, (total,), width=1, kind=Link.ISOLATION_SCORE,
                  denominator=denominator)
    decision = g.add(Op.AFFINE, (score,), width=1, scale=1.0, shift=-float(model.offset_))
    label = g.add(Op.THRESHOLD, (decision,), dtype="int64", width=1, value=0.0, strict=False)
    graph = g.build({"score_samples": score, "decision_function": decision, "predict": label})
    methods = {
        "score_samples": MethodSpec("score_samples", squeeze=True),
        "decision_function": MethodSpec("decision_function", squeeze=True),
        "predict": MethodSpec("predict", labels=np.array([-1, 1])),
    }
    # score_samples validates with ensure_all_finite=False: NaN and +-inf are accepted
    # ... on a sparse X too, where NaN goes right at every node (ir/spec.py SPARSE_NAN "inf")
    spec = tree_model_spec(model, graph, methods, n_features, allow_nan=True, sparse_nan="inf")
    return dataclasses.replace(spec, allow_inf=True)

# tests/test_param_audit.py: contamination sets offset_, max_samples the path-length norm,
# max_features/bootstrap the per-tree feature subsets read at predict time.
declare_params(IsolationForest, implemented="contamination max_samples max_features bootstrap",
               ignored="n_estimators")
