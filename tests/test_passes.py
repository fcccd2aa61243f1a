"""Passes keep results bit-identical and the graph valid."""

import numpy as np
import pytest

from peregrine.ir import GraphBuilder, Link, Op, make_forest
from peregrine.ir.semantics import evaluate
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
    assert all(n.attrs.kind is not Link.IDENTITY for n in out.nodes if n.op is Op.LINK)
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


def test_graph_builder_looks_nodes_up_by_name():
    g = GraphBuilder()
    x = g.input(3)
    a = g.add(Op.AFFINE, (x,), width=3, scale=2.0)
    u = g.add(Op.AFFINE, (a,), scale=1.0)  # width inferred from the input's
    k = g.add(Op.LOG_ADD_EXP, (a,), columns=[[0, 1, 2]], starts=[0, 1])  # width not inferable
    assert g.node(a).op is Op.AFFINE and g.width(x) == 3 and g.width(a) == 3
    assert g.width(u) == 3
    with pytest.raises(ValueError, match="no known width"):
        g.width(k)
    with pytest.raises(KeyError):
        g.node("nowhere")


def _knn_graph(**attrs):
    g = GraphBuilder()
    x = g.input(2)
    knn = g.add(Op.KNN, (x,), width=2, **{"metric": "euclidean", "p": 2.0,
                                          "vectors": np.arange(6.0).reshape(3, 2), "k": 2,
                                          "weights": "uniform", "values": np.eye(3)[:, :2],
                                          "normalize": True, **attrs})
    return g.build({"predict": knn})


def test_verifier_checks_new_op_attributes():
    X = np.array([[0.0, 1.0], [4.0, 4.0]])
    out = evaluate(_knn_graph(), X, ("predict",))["predict"]
    assert out.shape == (2, 2)
    for attrs, message in [({"k": 4}, "k=4"), ({"k": 1.5}, "k=1.5"),
                           ({"weights": "inverse"}, "weights="),
                           ({"values": np.eye(2)}, "values has shape"),
                           ({"metric": "hamming"}, "metric="),
                           ({"metric": "minkowski", "p": 0.5}, "p must be >= 1"),
                           ({"vectors": np.ones((3, 3))}, "vectors has shape")]:
        with pytest.raises(ValueError, match=message):
            _knn_graph(**attrs)
    g = GraphBuilder()
    x = g.input(2)
    g.add(Op.KERNEL, (x,), width=1, kind="poly", vectors=np.ones((1, 2)), gamma=1.0, coef0=0.0,
          degree=2.5, form="libsvm")  # libsvm's powi takes an integer degree
    with pytest.raises(ValueError, match="degree"):
        g.build({})
