"""KNN (``ir/semantics/neighbours.py``: KNeighborsClassifier / Regressor) as one scheduled TIR
function (``knn_kernel``): the TVM backend ran it as a fallback to its NumPy rule.

The rule's answer is the specification's: the distance of each row to every fitted row from
their differences, the k smallest by (distance, index), the weighted average of their values.
Here every distance is computed, a row's k best kept in a sorted list as the fitted rows go by
in index order (a distance enters only strictly below the k-th, and goes after equal ones: the
stable sort's order), then the weights and the average.

Bits. Each sum is written as the rule's NumPy call adds it (``ir/semantics/row_sums.py``
programs): euclidean ``np.einsum("ijk,ijk->ij")`` of the differences (its contiguous loop,
the norms' order), minkowski p=2 and manhattan ``ndarray.sum`` (pairwise), the class sums
and the weight sums pairwise; each product is fenced (``tir_math.fenced``: NumPy rounds it
before the sum, TVM's LLVM code would fuse them). So distances, neighbours, weights and
outputs are the rule's bits (``tests/test_knn_kernels.py``). Other metrics (cosine's BLAS product,
minkowski's ``pow`` for p other than 1 and 2), rows of more than ``KERNEL_MAX_FEATURES``
features (the sums are written out term by term here) and euclidean rows of more than
``KERNEL_EUCLIDEAN_FEATURES`` (the rule's BLAS search is faster there) run the rule
(``ops.rule_only``; ``neighbours.kernel_form``).

Layout as the kernel matrix (``kernel_matrix.py``): fitted rows in chunks of ``LANES``,
``(chunks, d, LANES)``; rows in parallel tasks of ``ROWS``, groups of ``GROUP`` rows sharing
each chunk's loads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tvm.script import tirx as T

from peregrine.backends.tvm.kernel_matrix import GROUP, LANES, ROWS
from peregrine.backends.tvm.tir_math import fenced
from peregrine.ir.semantics.neighbours import KERNEL_MAX_FEATURES
from peregrine.ir.semantics.row_sums import evaluate, row_sum_program

INF = float("inf")


def program_sum(program: list[int], leaf: Callable[[int], Any]) -> Any:
    """The TIR expression adding ``leaf(j)`` in ``program``'s order (``row_sums``)."""
    return evaluate(program, leaf, lambda a, b: a + b)


def buffer_sum(program: list[int], buf: Any) -> Any:
    """The sum of the 1-d buffer's values in ``program``'s order."""
    return program_sum(program, lambda j: buf[j])


def _distance(metric: str, d: int) -> Callable[[Any, Any, Any, Any, Any], Any]:
    """(X, V, row, chunk, lane) -> the TIR distance of one row to one fitted row."""
    einsum, pairwise = row_sum_program("einsum", d, "float64"), row_sum_program(
        "pairwise", d, "float64")

    def diff(X: Any, V: Any, row: Any, c: Any, lane: Any, j: int) -> Any:
        return X[row, j] - V[c, j, lane]

    def fn(X: Any, V: Any, row: Any, c: Any, lane: Any) -> Any:
        def square(j: int) -> Any:
            t = diff(X, V, row, c, lane, j)
            return fenced(t * t)

        def absolute(j: int) -> Any:
            return T.abs(diff(X, V, row, c, lane, j))

        if metric == "euclidean":
            return T.sqrt(program_sum(einsum, square))
        if metric == "minkowski2":  # (|d| ** 2).sum() ** 0.5
            return T.sqrt(program_sum(pairwise, square))
        if metric == "chebyshev":
            out = absolute(0)
            for j in range(1, d):
                out = T.max(out, absolute(j))
            return out
        return program_sum(pairwise, absolute)  # manhattan (minkowski p=1 too)

    return fn


def knn_kernel(d: int, m: int, k: int, width: int, metric: str, distance_weights: bool,
               normalize: bool) -> Any:
    """The PrimFunc ``(x (n, d), v (chunks, d, LANES), values (m, width)) -> y (n, width)``,
    float64: Op.KNN's rule for ``metric``, a ``neighbours.kernel_form``."""
    assert 1 <= k <= m and d <= KERNEL_MAX_FEATURES
    chunks = -(-m // LANES)
    dist = _distance(metric, d)
    class_sum = row_sum_program("pairwise", width, "float64")
    weight_sum = row_sum_program("pairwise", k, "float64")

    @T.macro
    def insert(bd, bi, cnt, place, r, dv, j):
        # a sorted list of the k best: dv enters strictly below the k-th (an equal distance
        # of a lower index stays) and goes after the equal ones already in it
        if cnt[r] < k or dv < bd[r, k - 1]:
            place[0] = T.min(cnt[r], k - 1)
            if cnt[r] < k:
                cnt[r] = cnt[r] + 1
            for t in range(k - 1):
                if k - 1 - t <= place[0] and bd[r, k - 2 - t] > dv:
                    bd[r, k - 1 - t] = bd[r, k - 2 - t]
                    bi[r, k - 1 - t] = bi[r, k - 2 - t]
                    place[0] = k - 2 - t
            bd[r, place[0]] = dv
            bi[r, place[0]] = j

    @T.macro
    def finish(VAL, Y, bd, bi, wt, out, flag, r, row):
        # neighbors._base._get_weights, then sklearn's accumulation in neighbour order
        flag[0] = 0
        for i in range(k):
            if distance_weights:
                wt[i] = T.float64(1) / bd[r, i]
                if T.isinf(wt[i]):
                    flag[0] = 1
            else:
                wt[i] = T.float64(1)
        if flag[0] == 1:  # a zero distance: those neighbours weigh 1, the others 0
            for i in range(k):
                wt[i] = T.Select(T.isinf(wt[i]), T.float64(1), T.float64(0))
        for col in range(width):
            out[col] = T.float64(0)
        for i in range(k):
            for col in range(width):
                out[col] = out[col] + fenced(wt[i] * VAL[bi[r, i], col])
        if normalize:
            total = buffer_sum(class_sum, out)
            for col in range(width):
                Y[row, col] = out[col] / T.Select(total == T.float64(0), T.float64(1), total)
        else:
            wsum = buffer_sum(weight_sum, wt)
            for col in range(width):
                Y[row, col] = out[col] / wsum

    @T.macro
    def rows(X, V, VAL, Y, acc, bd, bi, cnt, place, wt, out, flag, row0, count):
        for r in T.unroll(count):
            cnt[r] = 0
            # +inf in the unfilled list: the insertion's test reads the k-th before it is
            # filled (its "not full" branch decides then), never uninitialised memory
            for q in range(k):
                bd[r, q] = T.float64(INF)
        for c in range(chunks):
            for r in T.unroll(count):
                for lane in T.vectorized(LANES):
                    acc[r, lane] = dist(X, V, row0 + r, c, lane)
            for r in range(count):
                for lane in range(LANES):
                    if c * LANES + lane < m:
                        insert(bd, bi, cnt, place, r, acc[r, lane], T.Cast(
                            "int64", c * LANES + lane))
        for r in range(count):
            finish(VAL, Y, bd, bi, wt, out, flag, r, row0 + r)

    @T.prim_func
    def knn(x: T.handle, v: T.handle, values: T.handle, y: T.handle):
        T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True})
        n = T.int64()
        X = T.match_buffer(x, (n, d), "float64")
        V = T.match_buffer(v, (chunks, d, LANES), "float64")
        VAL = T.match_buffer(values, (m, width), "float64")
        Y = T.match_buffer(y, (n, width), "float64")
        for blk in T.parallel((n + ROWS - 1) // ROWS):
            # "global" scope: stack slots (kernel_matrix.py)
            acc = T.alloc_buffer((GROUP, LANES), "float64", scope="global")
            bd = T.alloc_buffer((GROUP, k), "float64", scope="global")
            bi = T.alloc_buffer((GROUP, k), "int64", scope="global")
            cnt = T.alloc_buffer((GROUP,), "int32", scope="global")
            place = T.alloc_buffer((1,), "int32", scope="global")
            wt = T.alloc_buffer((k,), "float64", scope="global")
            out = T.alloc_buffer((width,), "float64", scope="global")
            flag = T.alloc_buffer((1,), "int32", scope="global")
            for g in range(T.min(T.int64(ROWS), n - blk * ROWS) // GROUP):
                rows(X, V, VAL, Y, acc, bd, bi, cnt, place, wt, out, flag,
                     blk * ROWS + g * GROUP, GROUP)
            for i in range(T.min(T.int64(ROWS), n - blk * ROWS) % GROUP):
                rows(X, V, VAL, Y, acc, bd, bi, cnt, place, wt, out, flag,
                     blk * ROWS + T.min(T.int64(ROWS), n - blk * ROWS) // GROUP * GROUP + i, 1)

    return knn
