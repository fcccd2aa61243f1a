"""backends/native/merge.py: a WEIGHTED_SUM of one-tree forests (Bagging over decision trees,
AdaBoost after fold_votes) runs as one forest on the native backend, with the same bits as the
reference backend's member-by-member sum."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import (
    AdaBoostClassifier,
    BaggingClassifier,
    BaggingRegressor,
    VotingRegressor,
)
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

import peregrine
from peregrine.backends.native.merge import merge_tree_sums
from peregrine.ir import Op


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(500, 5))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int) + (X[:, 3] > 1)
    Q = rng.normal(size=(3_000, 5))
    Q[:300] = np.round(Q[:300])  # rows on thresholds' neighbourhoods of integers
    return X, y, Q


def _merged(compiled) -> list[str]:
    return [v for k, v in compiled.explain_dict()["backend_choices"].items()
            if k.endswith(" why") and "merged into one" in str(v)]


MODELS = {
    "adaboost": lambda X, y: AdaBoostClassifier(DecisionTreeClassifier(max_depth=2),
                                                n_estimators=30, random_state=0).fit(X, y),
    "bagging-clf": lambda X, y: BaggingClassifier(DecisionTreeClassifier(max_depth=4),
                                                  n_estimators=20, random_state=0).fit(X, y),
    "bagging-reg": lambda X, y: BaggingRegressor(DecisionTreeRegressor(max_depth=5),
                                                 n_estimators=20, random_state=0).fit(
        X, X[:, 0] * y),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_merged_forest_is_the_reference_sum(name):
    X, y, Q = _data()
    model = MODELS[name](X, y)
    fast = peregrine.compile(model, "native")
    ref = peregrine.compile(model, "reference")
    assert _merged(fast), fast.explain()
    methods = [m for m in ("predict", "predict_proba", "predict_log_proba", "decision_function")
               if hasattr(model, m) and hasattr(fast, m)]
    for method in methods:
        got, want = getattr(fast, method)(Q), getattr(ref, method)(Q)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want, err_msg=method)
        np.testing.assert_array_equal(getattr(fast, method)(Q[:3]), want[:3])  # few rows
    np.testing.assert_array_equal(fast.predict(Q), model.predict(Q))


def test_not_merged_where_the_sum_is_not_the_same():
    X, y, Q = _data(1)
    # weights other than 1.0: each member's output is scaled before the sum
    voting = VotingRegressor([("a", DecisionTreeRegressor(max_depth=3)),
                              ("b", DecisionTreeRegressor(max_depth=4, random_state=1))],
                             weights=[0.3, 0.7]).fit(X, X[:, 1])
    assert not _merged(peregrine.compile(voting, "native"))
    # float32 sums: the forest would add in float32 where the sum adds in float64
    bag = MODELS["bagging-reg"](X, y)
    f32 = peregrine.compile(bag, "native", options=peregrine.CompileOptions(precision="float32"))
    assert not _merged(f32)

    # the graph rewrite itself: members only the sum reads go; one read elsewhere too stays
    # (BaggingClassifier's log-probabilities read each member's log)
    graph = peregrine.compile(bag, "reference").spec.graph
    out, notes = merge_tree_sums(graph)
    assert len(notes) == 1 and sum(n.op is Op.TREE_ENSEMBLE for n in out.nodes) == 1
    clf = peregrine.compile(MODELS["bagging-clf"](X, y), "reference").spec.graph
    out, notes = merge_tree_sums(clf)
    forests = sum(n.op is Op.TREE_ENSEMBLE for n in clf.nodes)
    assert len(notes) == 1 and sum(n.op is Op.TREE_ENSEMBLE for n in out.nodes) == forests + 1
