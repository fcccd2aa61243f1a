"""passes/fold_votes.py: AdaBoost's per-tree votes (one tree -> ARGMAX -> ONE_HOT -> LINEAR)
folded into the trees' leaves. Exact: every backend gives the same bits with the pass on and
off, and scikit-learn's labels."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import AdaBoostClassifier
from sklearn.tree import DecisionTreeClassifier

import peregrine
from peregrine.frontends import convert
from peregrine.ir import Op

OFF = peregrine.CompileOptions(disable_passes=("fold_votes",))


def _model(classes: int, depth: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(600, 6))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5) * (classes - 2) + (X[:, 2] > 1)
    y = np.minimum(y, classes - 1)
    model = AdaBoostClassifier(DecisionTreeClassifier(max_depth=depth), n_estimators=12,
                               random_state=seed).fit(X, y)
    return model, rng.normal(size=(2_000, 6))


@pytest.mark.parametrize("backend", ["reference", "native", "torch"])
@pytest.mark.parametrize("classes,depth", [(2, 1), (3, 3)])
def test_folded_votes_are_the_same_bits(backend, classes, depth):
    model, Q = _model(classes, depth)
    on = peregrine.compile(model, backend)
    off = peregrine.compile(model, backend, options=OFF)
    folded = [p for p in on.explain_dict()["passes"] if p["pass"] == "fold_votes"][0]
    assert folded["changed"].startswith(f"{len(model.estimators_)} tree vote(s)")
    ops = [n.op for n in on.spec.graph.nodes]
    assert Op.ONE_HOT not in ops and ops.count(Op.ARGMAX) == (classes > 2)  # (predict's)
    for method in ("predict", "predict_proba", "decision_function"):
        got, want = getattr(on, method)(Q), getattr(off, method)(Q)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want, err_msg=method)
    np.testing.assert_array_equal(on.predict(Q), model.predict(Q))
    np.testing.assert_allclose(on.predict_proba(Q), model.predict_proba(Q), rtol=1e-5,
                               atol=1e-6)


def test_a_negative_zero_row_keeps_its_chain():
    """A leaf whose vote row would hold -0.0 (the folded tree's 0.0 + -0.0 loses the sign)
    keeps its chain; rows of ordinary numbers fold. (A LINEAR after a one-hot rarely makes
    -0.0: BLAS starts its sums at +0.0; so the chain is stood in for here.)"""
    from types import SimpleNamespace

    from peregrine.passes.fold_votes import _fold

    model, _ = _model(2, 1)
    tree = next(n for n in convert(model).graph.nodes if n.op is Op.TREE_ENSEMBLE)

    def chain(value: float):
        rule = lambda node, ins, options: np.full((len(ins[0]), 2), value)  # noqa: E731
        return [SimpleNamespace(name="vote", attrs=SimpleNamespace(rule=rule))]

    assert _fold(tree, chain(-0.0)) is None
    folded = _fold(tree, chain(0.25))
    assert folded.op is Op.TREE_ENSEMBLE and folded.name == "vote"
    forest = folded.attrs.forest
    leaves = forest.feature < 0
    assert (forest.value[leaves] == 0.25).all() and forest.n_outputs == 2
