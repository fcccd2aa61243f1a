"""Tree ensembles as torch modules: Hummingbird's three strategies (OSDI'20, section 4.1) over the
Forest's one decision rule, batched over trees (the only Python loops run over depth levels and
over row chunks, never over trees).

Exactness. Decisions run in the same precision as ``reference.compute_dtype`` against
``Forest.thresholds_for`` of that precision, so ``x <= t'`` decides as the library does; both the
float32 and float64 threshold tables are kept so one module serves either input dtype. Leaf values
are gathered (never multiplied by a 0/1 matrix: NaN * 0 = NaN and inf * 0 = NaN) and summed in
float64 (float32 only under ``Precision.FLOAT32``). GEMM multiplies only 0/1 decisions by 0/+-1
path entries: small integers, exact in float32 and under TF32.

No module mutates its buffers in ``forward``: every call allocates its own temporaries, so one
module can serve many Python threads at once.

Not ``from __future__ import annotations``: TorchScript reads these annotations at runtime.
"""

import functools

import numpy as np
import torch
from torch import Tensor, nn

from peregrine import config
from peregrine.backends.torch import layout
from peregrine.ir import Aggregation, Forest
from peregrine.ir.forest import LIGHTGBM_ZERO_THRESHOLD
from peregrine.options import CompileOptions, Precision, TreeStrategy

# Rows per chunk (per intra-op thread). Chunking bounds memory for any batch (GEMM allocates
# rows x nodes) and keeps a chunk's temporaries in cache. Measured on a 2-core x86 VM (torch 2.13,
# 1 thread, 20k rows; 100 trees of depth 3/6/8 and 1000 of depth 6): traversals were fastest at
# 2**15 (row, tree) pairs per chunk, 1.2-1.5x slower at 4x fewer or more, 2-3x slower at 2**11
# (op overhead) or 2**21 (cache); GEMM (4k rows) was fastest at 2**19 (row, node) pairs, 1.2-1.7x
# slower at 4x fewer or more. Tests lower both to exercise chunking.
TRAVERSAL_CHUNK = 1 << 15  # (row, tree) pairs
GEMM_CHUNK = 1 << 19  # (row, internal node + leaf) pairs
# On a GPU a chunk is a few large kernels, not a cache-sized piece: each op costs about 8 us to
# launch whatever its size. With the CPU's chunks (1,048 rows for 500 trees at 16 threads) an
# NVIDIA H200 ran 80 kernels per chunk and its time was exactly the launches (XGBoost 500x8:
# 7.1 ms per 10K rows, 65.8 per 100K, 675 per 1M: 8.5 us a kernel; docs/benchmarks.md).
# 2**24 pairs bounds a chunk's temporaries to a few hundred MB.
GPU_CHUNK = 1 << 24  # (row, tree) or (row, node) pairs


def categorical_left(x: Tensor, row: Tensor, bitsets: Tensor, unknown_left: Tensor,
                     n_words: int, negative_before_trunc: bool) -> Tensor:
    """Category rule of ``Forest``: c = trunc(x); invalid (negative or >= 32 * n_words, NaN
    included) goes to ``unknown_left``, otherwise left iff bit c of the node's bitset is set.
    ``row`` (>= 0) broadcasts against ``x``; NaN rows are the caller's to override."""
    trunc = torch.trunc(x)
    # XGBoost/sklearn reject x < 0 before truncating; LightGBM truncates first (-0.5 -> 0).
    neg = (x < 0) if negative_before_trunc else (trunc < 0)
    invalid = neg | ~(trunc < float(n_words * 32))  # ~(<) also catches +inf and NaN
    code = torch.where(invalid, torch.zeros_like(trunc), trunc).to(torch.int64)
    word = bitsets.take(row * n_words + torch.bitwise_right_shift(code, 5))
    bit = torch.bitwise_and(torch.bitwise_right_shift(word, torch.bitwise_and(code, 31)), 1) == 1
    return torch.where(invalid, unknown_left.take(row), bit)


def _pick(table: Tensor, at: Tensor | None) -> Tensor:
    return table if at is None else table.index_select(0, at)


def _buffer(module: nn.Module, name: str, array: np.ndarray, dtype: torch.dtype) -> None:
    module.register_buffer(name, torch.from_numpy(np.array(array, copy=True)).to(dtype))


class ForestModule(nn.Module):
    """Shared part: dtype choice, row chunking, the gathered decision rule and aggregation.
    Subclasses implement ``_leaves(x, thr) -> (batch, n_trees)`` rows of ``leaf_values``.

    Index tensors are int32 where they only feed ``index_select`` (as fast as int64 there, half
    the memory traffic); ``take`` is avoided (2-3x slower than ``index_select`` on CPU)."""

    def __init__(self, forest: Forest, nodes: layout.NodeTables, leaf_node: np.ndarray,
                 options: CompileOptions, row_elements: int, chunk_elements: int) -> None:
        super().__init__()
        precision = options.precision
        # Same rule as reference.compute_dtype.
        self.always32 = precision is Precision.FLOAT32 or forest.input_dtype == np.float32
        self.force64 = precision is Precision.FLOAT64 and not self.always32
        acc = torch.float32 if precision is Precision.FLOAT32 else torch.float64
        empty = np.zeros(0)
        _buffer(self, "thr32", empty if self.force64 else nodes.thr32, torch.float32)
        _buffer(self, "thr64", empty if self.always32 else nodes.thr64, torch.float64)
        _buffer(self, "feature", nodes.feature, torch.int64)  # feeds gather: int64
        _buffer(self, "nan_left", nodes.nan_left, torch.bool)
        self.has_mz = bool(nodes.missing_zero.any())
        _buffer(self, "missing_zero", nodes.missing_zero if self.has_mz else empty, torch.bool)
        self.zero = float(LIGHTGBM_ZERO_THRESHOLD)
        self.has_cat = bool((nodes.cat_row >= 0).any())
        self.n_words = int(forest.cat_bitsets.shape[1]) if self.has_cat else 1
        self.neg_before = bool(forest.cat_negative_before_trunc)
        _buffer(self, "cat_row", nodes.cat_row if self.has_cat else empty, torch.int64)
        bits = forest.cat_bitsets.reshape(-1) if self.has_cat else empty
        _buffer(self, "bitsets", bits.astype(np.int64), torch.int64)  # uint32 fits in int64
        unknown = forest.cat_unknown_left if self.has_cat else empty
        _buffer(self, "cat_unknown_left", unknown, torch.bool)

        self.n_trees = forest.n_trees
        self.n_outputs = forest.n_outputs
        # value width 1 with several outputs: each tree adds into its own group's column.
        self.grouped = forest.value_width != forest.n_outputs
        values = forest.value[leaf_node]
        _buffer(self, "leaf_values", values[:, 0] if self.grouped else values, acc)
        _buffer(self, "leaf_node", leaf_node, torch.int64)
        _buffer(self, "group", forest.tree_group.astype(np.int64), torch.int64)
        self.average = forest.aggregation is Aggregation.AVERAGE
        _buffer(self, "divisor", forest.output_divisor(), acc)
        _buffer(self, "base", forest.base_score, acc)
        # Each intra-op thread gets the measured single-thread chunk, and ops on a chunk exceed
        # torch's 32768-element parallel grain, so they can split across threads. (Multi-thread
        # scaling was not measurable on the 2-core, shared machine the sizes were tuned on.)
        threads = options.n_threads or torch.get_num_threads()
        self.chunk_rows = max(1, chunk_elements * threads // max(1, row_elements))
        self.gpu_chunk_rows = max(1, GPU_CHUNK // max(1, row_elements))

    # ------------------------------------------------------------------------ forward --
    def _compute(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if self.always32 or (not self.force64 and x.dtype == torch.float32):
            return x.to(torch.float32).contiguous(), self.thr32
        return x.to(torch.float64).contiguous(), self.thr64

    def forward(self, xs: list[Tensor]) -> Tensor:
        x, thr = self._compute(xs[0])
        n = x.shape[0]
        step = self.gpu_chunk_rows if x.is_cuda else self.chunk_rows
        if n <= step:
            return self._aggregate(self._leaves(x, thr))
        parts: list[Tensor] = []
        for start in range(0, n, step):
            chunk = x[start : start + step]
            parts.append(self._aggregate(self._leaves(chunk, thr)))
        return torch.cat(parts, 0)

    def _leaves(self, x: Tensor, thr: Tensor) -> Tensor:
        raise NotImplementedError

    def _any_nan(self, x: Tensor) -> bool:
        # One pass over the (rows, features) chunk lets NaN-free chunks skip three ops per node
        # visit. On GPUs the check would cost a host sync: always take the general path there.
        if x.is_cuda:
            return True
        return bool(torch.isnan(x).any())

    def _decide(self, v: Tensor, at: Tensor | None, thr: Tensor, any_nan: bool) -> Tensor:
        """reference.decide_left for values ``v`` at node-table positions ``at`` (1-D, int32),
        or, with ``at=None``, at every table position (tables broadcast over rows of ``v``).
        A NaN threshold (``<`` against -inf) compares False: right, as the library does.
        Attribute tables are gathered only when their part of the rule can fire."""
        left = v <= _pick(thr, at)
        if any_nan or self.has_mz or self.has_cat:
            nan_left = _pick(self.nan_left, at)
            nan = torch.isnan(v)
            if any_nan:
                left = torch.where(nan, nan_left, left)
            if self.has_mz:  # LightGBM MissingType::Zero: |x| <= kZeroThreshold is missing
                zero = _pick(self.missing_zero, at) & (torch.abs(v) <= self.zero)
                left = torch.where(zero, nan_left, left)
            if self.has_cat:  # the category rule overrides everything but NaN
                row = _pick(self.cat_row, at)
                cat_left = categorical_left(v, row.clamp(min=0), self.bitsets,
                                            self.cat_unknown_left, self.n_words, self.neg_before)
                left = torch.where((row >= 0) & ~nan, cat_left, left)
        return left

    def _aggregate(self, leaves: Tensor) -> Tensor:
        b = leaves.shape[0]
        flat = leaves.reshape(-1)
        if self.grouped:
            vals = self.leaf_values.index_select(0, flat).view(b, self.n_trees)
            out = torch.zeros(b, self.n_outputs, dtype=vals.dtype, device=vals.device)
            out = out.index_add(1, self.group, vals)  # tree order, as the reference adds
        else:
            out = self.leaf_values.index_select(0, flat).view(b, self.n_trees, -1).sum(1)
        if self.average:
            out = out / self.divisor
        return out + self.base

    # ---------------------------------------------------------- test / debug helper --
    def leaf_nodes(self, x: Tensor) -> Tensor:
        """Global Forest node id of the leaf every row reaches in every tree (eager only; not
        compiled by TorchScript). Compared with ``reference.forest_leaves`` in tests."""
        xc, thr = self._compute(x)
        return self.leaf_node.index_select(0, self._leaves(xc, thr).reshape(-1)).view(
            x.shape[0], self.n_trees)


class TreeTraversal(ForestModule):
    """Gather per level over the global node arrays; leaves point to themselves, so trees of
    every depth finish after ``max_depth`` steps. ``child[2 * node + go_left]`` is the next
    node, so one fused ``add(go_left, node, alpha=2)`` forms the lookup index."""

    def __init__(self, forest: Forest, options: CompileOptions) -> None:
        lay = layout.traversal_layout(forest)
        super().__init__(forest, lay.nodes, lay.leaf_node, options, forest.n_trees,
                         TRAVERSAL_CHUNK)
        right_left = np.stack([lay.children[1::2], lay.children[0::2]], axis=1).reshape(-1)
        _buffer(self, "child", right_left, torch.int32)
        _buffer(self, "roots", lay.roots, torch.int32)
        self.depth = lay.depth

    def _leaves(self, x: Tensor, thr: Tensor) -> Tensor:
        b = x.shape[0]
        any_nan = self._any_nan(x)
        at = self.roots.repeat(b)  # (b * n_trees,) row-major: row r, tree t at r * T + t
        for _ in range(self.depth):
            v = x.gather(1, self.feature.index_select(0, at).view(b, self.n_trees)).view(-1)
            left = self._decide(v, at, thr, any_nan)
            at = self.child.index_select(0, torch.add(left, at, alpha=2))
        return at.view(b, self.n_trees)


class PerfectTreeTraversal(ForestModule):
    """Trees padded to perfect depth D, stored level by level: level l holds a (n_trees, 2**l)
    block at offset n_trees * 2**l, so position ``p = T * 2**l + t * 2**l + k`` has its children
    at ``2p`` (right) and ``2p + 1`` (left): ``p = 2p + go_left`` needs no per-tree offset and no
    child table (Hummingbird's ``idx = 2 * idx + (x >= t)``, made global). After D steps
    ``p - T * 2**D`` is the final slot; shallow leaves own every slot below them."""

    def __init__(self, forest: Forest, options: CompileOptions) -> None:
        lay = layout.perfect_layout(forest)
        super().__init__(forest, lay.nodes, lay.leaf_node, options, forest.n_trees,
                         TRAVERSAL_CHUNK)
        self.depth = lay.depth
        self.first_leaf = forest.n_trees << lay.depth
        roots = forest.n_trees + np.arange(forest.n_trees)
        _buffer(self, "roots", roots, torch.int32)

    def _leaves(self, x: Tensor, thr: Tensor) -> Tensor:
        b = x.shape[0]
        any_nan = self._any_nan(x)
        at = self.roots.repeat(b)
        for _ in range(self.depth):
            v = x.gather(1, self.feature.index_select(0, at).view(b, self.n_trees)).view(-1)
            at = torch.add(self._decide(v, at, thr, any_nan), at, alpha=2)
        return (at - self.first_leaf).view(b, self.n_trees)


class Gemm(ForestModule):
    """Every internal node decided at once (feature columns gathered, not multiplied in), then
    per tree ``decisions @ path`` counts left turns taken toward each leaf: the reached leaf is
    the one whose count equals its number of left turns (Hummingbird's second GEMM and ==);
    a third product with the slot numbers turns the one-hot match into a leaf index."""

    def __init__(self, forest: Forest, options: CompileOptions) -> None:
        lay = layout.gemm_layout(forest)
        T, n_int, n_leaf = forest.n_trees, lay.n_internal, lay.n_leaves
        super().__init__(forest, lay.nodes, lay.leaf_node, options, T * (n_int + n_leaf),
                         GEMM_CHUNK)
        self.n_internal = n_int
        # dtype rewriting (issue #12): both products multiply 0/1 decisions by small integers
        # (path entries 0/+-1, partial sums at most the tree's depth; slot numbers), which
        # bfloat16 holds exactly up to 256, so on a CPU with bfloat16 dot products the
        # products run there at half the bytes and twice the rate (AMD EPYC Zen 4, 1 thread,
        # (100 x 4096 x 63) @ (63 x 64): 88 ms float32, 43 ms bfloat16) with the same bits.
        depth = int(np.count_nonzero(lay.path, axis=1).max(initial=0))  # ancestors per leaf
        mm = torch.bfloat16 if exact_bf16() and depth <= BF16_EXACT else torch.float32
        self.mm_dtype = mm
        _buffer(self, "path", lay.path, mm)
        _buffer(self, "n_left", lay.n_left[:, None, :], mm)
        slots = np.broadcast_to(np.arange(n_leaf, dtype=np.float32)[None, :, None],
                                (T, n_leaf, 1))
        _buffer(self, "slot", slots, mm if n_leaf <= BF16_EXACT else torch.float32)
        _buffer(self, "leaf_base", np.arange(T, dtype=np.int64)[None, :] * n_leaf, torch.int64)

    def _leaves(self, x: Tensor, thr: Tensor) -> Tensor:
        b = x.shape[0]
        v = x.index_select(1, self.feature)  # (b, T * n_internal)
        left = self._decide(v, None, thr, self._any_nan(x))  # node tables broadcast over rows
        # one copy converting and transposing at once: (trees, rows, nodes), contiguous as
        # the bfloat16 bmm wants it (a strided one copied it again)
        dec = torch.empty((self.n_trees, b, self.n_internal), dtype=self.path.dtype,
                          device=left.device)
        dec.copy_(left.view(b, self.n_trees, self.n_internal).transpose(0, 1))
        match = (torch.bmm(dec, self.path) == self.n_left).to(self.slot.dtype)  # (T, b, L)
        local = torch.bmm(match, self.slot).squeeze(2)  # exactly one match per tree
        return local.t().to(torch.int64) + self.leaf_base


# bfloat16's 8-bit significand holds every integer up to 256 exactly
BF16_EXACT = 256


def exact_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512_BF16 or AMX-BF16, which oneDNN
    uses for torch's bfloat16 bmm) and no lower CPU level is forced (peregrine.tools.cpu_level:
    then oneDNN may not use them either). Elsewhere bfloat16 products are emulated, slower
    than float32."""
    if config.cpu_level() is not None:
        return False
    return bool(_cpu_flags() & {"avx512_bf16", "amx_bf16"})


@functools.lru_cache(maxsize=1)
def _cpu_flags() -> frozenset:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:  # not Linux
        pass
    return frozenset()


STRATEGY_MODULES = {
    TreeStrategy.GEMM: Gemm,
    TreeStrategy.TREE_TRAVERSAL: TreeTraversal,
    TreeStrategy.PERFECT_TREE_TRAVERSAL: PerfectTreeTraversal,
}
