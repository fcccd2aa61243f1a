"""Passes keep results bit-identical and the graph valid."""

import numpy as np

from peregrine.backends.reference import evaluate
from peregrine.ir import GraphBuilder, Link, Op, make_forest
from peregrine.passes import format_graph, run_passes


def _forest():
    # one stump: x0 <= 0.5 -> 1.0 else 3.0
    return make_forest(feature=[0, -1, -1], threshold=[0.5, 0, 0], left=[1, -1, -1],
                       right=[2, -1, -1], nan_left=[True, False, False], value=[0, 1.0, 3.0],
                       tree_offsets=[0, 3], n_features=2, n_outputs=1)


def test_identity_links_and_affine_chains_fold_without_changing_bits():
    g = GraphBuilder()
    x = g.input(2)
    t = g.add(Op.TREE_ENSEMBLE, (x,), width=1, forest=_forest())
    a = g.add(Op.LINK, (t,), width=1, kind=Link.IDENTITY)
    b = g.add(Op.AFFINE, (a,), width=1, scale=0.1)
    c = g.add(Op.AFFINE, (b,), width=1, shift=-0.3)
    s = g.add(Op.LINK, (c,), width=1, kind=Link.SIGMOID)
    graph = g.build({"predict": c, "proba": s})
    out = run_passes(graph)
    ops = [n.op for n in out.nodes]
    assert Op.LINK in ops and ops.count(Op.AFFINE) == 1
    assert all(n.attrs.get("kind") is not Link.IDENTITY for n in out.nodes if n.op is Op.LINK)
    X = np.array([[0.0, 1.0], [1.0, 0.0], [np.nan, 2.0]])
    before = evaluate(graph, X, ("predict", "proba"))
    after = evaluate(out, X, ("predict", "proba"))
    for k in before:
        assert np.array_equal(before[k], after[k])
    assert "tree_ensemble" in format_graph(out)


def test_affine_with_two_readers_is_kept():
    g = GraphBuilder()
    x = g.input(2)
    t = g.add(Op.TREE_ENSEMBLE, (x,), width=1, forest=_forest())
    b = g.add(Op.AFFINE, (t,), width=1, scale=2.0)
    c = g.add(Op.AFFINE, (b,), width=1, shift=1.0)
    out = run_passes(g.build({"raw": b, "shifted": c}))
    assert [n.op for n in out.nodes].count(Op.AFFINE) == 2
