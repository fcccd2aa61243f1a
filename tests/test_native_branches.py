"""The native lowering's ``fuse_branches``: row-wise ops beside forests that read only the
input (a voting or stacking model's linear and naive Bayes members) run as one row kernel
whose outputs keep their rules' dtypes; and the row kernel shape that once made LLVM's
optimiser assert (a SELECT of a softmax)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.ensemble import RandomForestClassifier, StackingClassifier, VotingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsClassifier
from sklearn.tree import DecisionTreeClassifier

import peregrine
from peregrine import CompileOptions
from peregrine.ir import GraphBuilder, Link, Op
from peregrine.kernels.fused import row_kernel


def _data(n_classes):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 6))
    y = np.digitize(X[:, 0] + 0.5 * X[:, 1], np.linspace(-1, 1, n_classes + 1)[1:-1])
    return X, y


def _members():
    return [("lr", LogisticRegression(max_iter=500)),
            ("rf", RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0)),
            ("nb", GaussianNB())]


MODELS = {
    "vote-soft-3c": lambda: VotingClassifier(_members(), voting="soft"),
    "vote-hard-3c": lambda: VotingClassifier(_members(), voting="hard"),
    "stack-passthrough-2c": lambda: StackingClassifier(
        [("lr", LogisticRegression()), ("dt", DecisionTreeClassifier(max_depth=3,
                                                                     random_state=0)),
         ("nb", GaussianNB())], passthrough=True),
    "stack-knn-3c": lambda: StackingClassifier(
        [("knn", KNeighborsClassifier(5)), ("rf", RandomForestClassifier(
            n_estimators=5, max_depth=4, random_state=0)), ("nb", GaussianNB())]),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_members_beside_forests_run_as_one_row_kernel(name):
    X, y = _data(2 if name.endswith("2c") else 3)
    model = MODELS[name]().fit(X, y)
    fast = peregrine.compile(model, "native")
    unfused = peregrine.compile(model, "native", options=CompileOptions(fused_kernels=False))
    assert "fuse_branches" in fast.explain()
    assert "fuse_branches" not in unfused.explain()
    rows = np.concatenate([X, X * 30, np.zeros((2, X.shape[1]))])
    for dtype in (np.float64, np.float32):
        r = rows.astype(dtype)
        for method in fast.methods:
            if method == "transform":
                continue
            got, want = getattr(fast, method)(r), getattr(model, method)(r)
            assert got.dtype == want.dtype, method
            if method == "predict":
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got, getattr(unfused, method)(r), rtol=1e-9,
                                       atol=1e-12)


@pytest.mark.parametrize("width", [1, 2, 3, 4, 5, 8, 16])
@pytest.mark.parametrize("kind", [Link.SOFTMAX, Link.EXP])
def test_a_selected_softmax_column_compiles(width, kind):
    """A LINEAR -> LINK(softmax) -> SELECT kernel: LLVM's optimiser asserted (cast to a
    fixed vector type) on its one-lane shuffles and one-lane splats until rowwise_emit built
    the last pairwise addition as an ordered reduction and splats as LLVM's own form."""
    rng = np.random.default_rng(width)
    g = GraphBuilder()
    x = g.input(3)
    lin = g.add(Op.LINEAR, (x,), width=width, weight=rng.normal(size=(3, width)),
                bias=rng.normal(size=width))
    link = g.add(Op.LINK, (lin,), width=width, kind=kind)
    pick = g.add(Op.SELECT, (link,), width=1, columns=np.array([width - 1]))
    graph = g.build({"t": pick})
    kernel = row_kernel(graph, [pick], [False])
    assert kernel is not None
    kernel.prepare()
    rows = rng.normal(size=(9, 3))
    (got,) = kernel.run(rows, 1)
    z = rows @ graph.by_name[lin].attrs.weight + graph.by_name[lin].attrs.bias
    e = np.exp(z - z.max(1, keepdims=True)) if kind is Link.SOFTMAX else np.exp(z)
    want = (e / e.sum(1, keepdims=True) if kind is Link.SOFTMAX else e)[:, -1:]
    np.testing.assert_allclose(got, want, rtol=1e-14)
