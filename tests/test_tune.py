"""The tree strategy heuristic: overrides, thresholds, infeasible requests, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from peregrine.backends.torch import strategy as heuristics
from peregrine.backends.torch.strategy import choose_tree_strategy
from peregrine.ir import make_forest
from peregrine.options import CompileOptions, TreeStrategy


def complete_forest(n_trees: int, depth: int):
    """n_trees complete binary trees of the given depth (heap numbering within each tree)."""
    size = (1 << (depth + 1)) - 1
    local = np.arange(size)
    internal = local < (1 << depth) - 1
    parts = {k: [] for k in ("feature", "threshold", "left", "right", "nan_left", "value")}
    for t in range(n_trees):
        off = t * size
        parts["feature"].append(np.where(internal, local % 3, -1))
        parts["threshold"].append(np.where(internal, 0.5, 0.0))
        parts["left"].append(np.where(internal, off + 2 * local + 1, -1))
        parts["right"].append(np.where(internal, off + 2 * local + 2, -1))
        parts["nan_left"].append(np.zeros(size, bool))
        parts["value"].append(np.linspace(-1, 1, size))
    arrays = {k: np.concatenate(v) for k, v in parts.items()}
    return make_forest(**arrays, tree_offsets=np.arange(n_trees + 1) * size, n_features=3,
                       n_outputs=1)


def chain_forest(depth: int):
    """One tree that is a chain: depth ``depth`` with only 2 * depth + 1 nodes."""
    n = 2 * depth + 1
    feature = np.full(n, -1)
    left = np.full(n, -1)
    right = np.full(n, -1)
    for d in range(depth):
        i = 2 * d
        feature[i], left[i], right[i] = 0, i + 1, i + 2
    return make_forest(feature=feature, threshold=np.zeros(n), left=left, right=right,
                       nan_left=np.zeros(n, bool), value=np.arange(n, dtype=float),
                       tree_offsets=[0, n], n_features=1, n_outputs=1)


@pytest.mark.parametrize("strategy", [s for s in TreeStrategy if s is not TreeStrategy.AUTO])
def test_explicit_strategy_wins(strategy):
    forest = complete_forest(10, 4)
    chosen, reason = choose_tree_strategy(forest, CompileOptions(tree_strategy=strategy))
    assert chosen is strategy
    assert "CompileOptions" in reason


def test_single_rows_on_small_forests_use_gemm():
    forest = complete_forest(100, 3)
    chosen, reason = choose_tree_strategy(forest, CompileOptions(batch_size=1))
    assert chosen is TreeStrategy.GEMM and "batch size 1" in reason


def test_batches_use_perfect_traversal_up_to_depth_10():
    for depth in (2, 3, 6, 10):
        for batch in (None, 16, 100_000):
            chosen, _ = choose_tree_strategy(complete_forest(4, depth),
                                             CompileOptions(batch_size=batch))
            assert chosen is TreeStrategy.PERFECT_TREE_TRAVERSAL, (depth, batch)
    # single rows but too many padded nodes for GEMM
    chosen, _ = choose_tree_strategy(complete_forest(100, 6), CompileOptions(batch_size=1))
    assert chosen is TreeStrategy.PERFECT_TREE_TRAVERSAL


def test_deep_dense_trees_stay_perfect_and_sparse_ones_traverse():
    chosen, reason = choose_tree_strategy(complete_forest(2, 12), CompileOptions())
    assert chosen is TreeStrategy.PERFECT_TREE_TRAVERSAL and "dense" in reason
    chosen, reason = choose_tree_strategy(chain_forest(14), CompileOptions())
    assert chosen is TreeStrategy.TREE_TRAVERSAL and "sparse" in reason
    chosen, reason = choose_tree_strategy(chain_forest(40), CompileOptions())
    assert chosen is TreeStrategy.TREE_TRAVERSAL and "slots" in reason


def test_infeasible_request_falls_back_with_reason():
    chosen, reason = choose_tree_strategy(
        chain_forest(40), CompileOptions(tree_strategy=TreeStrategy.PERFECT_TREE_TRAVERSAL))
    assert chosen is TreeStrategy.TREE_TRAVERSAL
    assert "infeasible" in reason and "perfect_tree_traversal" in reason


def test_infeasible_gemm_falls_back(monkeypatch):
    monkeypatch.setattr(heuristics, "GEMM_MAX_PATH_ELEMENTS", 10)
    chosen, reason = choose_tree_strategy(complete_forest(3, 3),
                                          CompileOptions(tree_strategy=TreeStrategy.GEMM))
    assert chosen is TreeStrategy.TREE_TRAVERSAL and "GEMM" in reason


def test_choice_is_deterministic():
    forest = complete_forest(7, 5)
    options = CompileOptions(batch_size=3)
    assert choose_tree_strategy(forest, options) == choose_tree_strategy(forest, options)


def test_torch_lowering_warns_on_fallback():
    torch = pytest.importorskip("torch")  # noqa: F841
    from peregrine.backends.torch import TorchBackend
    from peregrine.ir import GraphBuilder, Op
    from peregrine.ir.spec import ModelSpec

    forest = chain_forest(40)
    g = GraphBuilder()
    x = g.input(1)
    out = g.add(Op.TREE_ENSEMBLE, (x,), width=1, forest=forest)
    spec = ModelSpec(g.build({"raw": out}), {}, 1, "tests.chain")
    options = CompileOptions(tree_strategy=TreeStrategy.PERFECT_TREE_TRAVERSAL)
    with pytest.warns(RuntimeWarning, match="infeasible"):
        exe = TorchBackend.compile(spec, options, "cpu")
    assert exe.explain()["strategy"] == "tree_traversal"
    X = np.linspace(-1, 1, 9)[:, None]
    from peregrine.ir import semantics

    np.testing.assert_array_equal(exe.run(X, ("raw",))["raw"],
                                  semantics.evaluate(spec.graph, X, ("raw",))["raw"])
