"""Tree strategy choice for the tensor backends: one function, overridden by
``CompileOptions.tree_strategy``, and a pure function of forest shape and options (no timing), so
a reloaded artifact rebuilds the same program and ``explain()`` can say why.

Measurements behind the thresholds (torch 2.13 CPU backend, 1 intra-op thread, CPU time per call,
best of repeated runs, 2-core x86 VM; synthetic forests of 100 or 500 near-complete trees over 30
features; microseconds per call at batch 1, microseconds per row otherwise):

    trees depth | batch 1: GEMM  TT   PTT | batch 256: GEMM  TT   PTT | batch 10k: GEMM  TT   PTT
     100    2   |          39    46   44  |            2.1  0.97 0.86 |            3.1  1.0  0.91
     100    3   |          43    58   54  |            3.9  1.5  1.1  |            5.2  1.7  1.6
     100    4   |          59    69   63  |            8.7  1.9  1.6  |            10   1.8  1.5
     100    5   |          60    80   74  |            18   2.5  2.0  |            19   2.7  2.4
     100    6   |         119    93   82  |            43   2.8  1.9  |            49   3.6  2.4
     100    8   |        1750   117  100  |           527   3.8  3.3  |           525   4.9  4.1
     100   10   |       15066   143  121  |          8208   7.8  4.6  |             -   -    -
     100   12   |           -   178  154  |             -   9.3  6.6  |             -   11   7.4
     500    3   |          80    62   57  |            26   6.4  7.6  |            27   9.6  8.6
     500    6   |         560   103   92  |           362   16   10   |           428   25   16
     500    8   |           -   131  115  |             -   25   22   |             -   36   23

- GEMM evaluates every node, so its cost grows with padded nodes ``T * (internal + leaves)``
  while the traversals pay a fixed number of ops per level. GEMM only wins for single rows with
  few padded nodes: it won at 0.7k-6.3k padded nodes (100 trees, depth 2-5) and lost at 7.5k
  (500 x depth 3) and 12.7k (100 x depth 6). At 4+ rows it never won on this CPU. (Hummingbird
  reports GEMM winning up to depth ~10 on GPUs; not measured here: no GPU on this machine.)
- PerfectTreeTraversal beat TreeTraversal by 1.1-1.6x at every depth <= 12 for near-complete
  trees (no child-table lookup; level-blocked tables). For sparse deep trees (each node split
  with p = 0.75) the advantage held at depth 10 (padding 5x the real nodes: 3.0 vs 3.6 us/row at
  1k rows) and vanished from depth 12 (padding 8x: tie; 15x and 26x at depth 14/16: tie or
  worse), while the padded tables grow as 2**depth. So: perfect padding up to depth 10, deeper
  only while padding stays within 4x the real node count, and never past PERFECT_MAX_SLOTS.
"""

from __future__ import annotations

import numpy as np

from peregrine.ir import Forest
from peregrine.options import CompileOptions, TreeStrategy

GEMM_MAX_BATCH = 2  # rows per call (CompileOptions.batch_size) for which GEMM can win
GEMM_MAX_PADDED_NODES = 6400  # n_trees * (internal + leaves) of the widest tree
PERFECT_ALWAYS_DEPTH = 10  # perfect padding regardless of sparsity up to this depth
PERFECT_MAX_PADDING = 4.0  # deeper: padded slots / real nodes at most this
# Static table caps (elements); past them a strategy is infeasible even when requested.
GEMM_MAX_PATH_ELEMENTS = 1 << 26  # n_trees * internal * leaves float32 path entries: 256 MiB
PERFECT_MAX_SLOTS = 1 << 22  # n_trees * 2**depth slots at ~40 + 8 * width bytes: ~200 MiB


def gemm_sizes(forest: Forest) -> tuple[int, int]:
    """(widest internal-node count, widest leaf count) over the trees: GEMM pads to these."""
    tree = forest.tree_of_node()
    leaf = forest.is_leaf
    n_int = np.bincount(tree[~leaf], minlength=forest.n_trees)
    n_leaf = np.bincount(tree[leaf], minlength=forest.n_trees)
    return int(n_int.max(initial=0)), int(n_leaf.max(initial=1))


def perfect_slots(forest: Forest) -> int:
    return forest.n_trees << forest.max_depth()


def infeasible(forest: Forest, strategy: TreeStrategy) -> str | None:
    """Why ``strategy`` cannot hold this forest in memory, or None when it can."""
    if strategy is TreeStrategy.GEMM:
        n_int, n_leaf = gemm_sizes(forest)
        n = forest.n_trees * n_int * n_leaf
        if n > GEMM_MAX_PATH_ELEMENTS:
            return f"GEMM path matrices would hold {n:,} entries (cap {GEMM_MAX_PATH_ELEMENTS:,})"
    if strategy is TreeStrategy.PERFECT_TREE_TRAVERSAL:
        slots = perfect_slots(forest)
        if slots > PERFECT_MAX_SLOTS:
            return (f"perfect padding to depth {forest.max_depth()} needs {slots:,} slots "
                    f"(cap {PERFECT_MAX_SLOTS:,})")
    return None


def choose_tree_strategy(forest: Forest, options: CompileOptions) -> tuple[TreeStrategy, str]:
    """(strategy, reason) for lowering ``forest`` under ``options``.

    ``options.tree_strategy`` wins unless the forest cannot fit that strategy's tables (then
    TreeTraversal, which is linear in the real node count, and the reason says so).
    """
    requested = options.tree_strategy
    if requested is not TreeStrategy.AUTO:
        why = infeasible(forest, requested)
        if why is None:
            return requested, "set by CompileOptions.tree_strategy"
        return TreeStrategy.TREE_TRAVERSAL, (
            f"CompileOptions.tree_strategy={requested.value} is infeasible ({why}); "
            "using tree_traversal"
        )
    depth = forest.max_depth()
    batch = options.batch_size
    n_int, n_leaf = gemm_sizes(forest)
    padded = forest.n_trees * (n_int + n_leaf)
    if batch is not None and batch <= GEMM_MAX_BATCH and padded <= GEMM_MAX_PADDED_NODES:
        return TreeStrategy.GEMM, (
            f"batch size {batch} <= {GEMM_MAX_BATCH} and {padded} padded nodes <= "
            f"{GEMM_MAX_PADDED_NODES}: evaluating all nodes at once costs fewer ops"
        )
    if infeasible(forest, TreeStrategy.PERFECT_TREE_TRAVERSAL) is None:
        if depth <= PERFECT_ALWAYS_DEPTH:
            return TreeStrategy.PERFECT_TREE_TRAVERSAL, (
                f"max depth {depth} <= {PERFECT_ALWAYS_DEPTH}: perfect padding is cheap and "
                "saves the child lookup per level"
            )
        padding = perfect_slots(forest) / max(1, forest.n_nodes)
        if padding <= PERFECT_MAX_PADDING:
            return TreeStrategy.PERFECT_TREE_TRAVERSAL, (
                f"max depth {depth} but trees are dense (padding {padding:.1f}x <= "
                f"{PERFECT_MAX_PADDING}x)"
            )
        return TreeStrategy.TREE_TRAVERSAL, (
            f"max depth {depth} > {PERFECT_ALWAYS_DEPTH} with sparse trees (padding "
            f"{padding:.1f}x > {PERFECT_MAX_PADDING}x)"
        )
    return TreeStrategy.TREE_TRAVERSAL, (
        f"max depth {depth}: {infeasible(forest, TreeStrategy.PERFECT_TREE_TRAVERSAL)}"
    )
