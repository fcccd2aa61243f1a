"""Scheduled TIR functions for ops whose Relax form the default CPU pipeline leaves slow: one
pass over each row instead of a serial loop nest per Relax op.

LINEAR's dense product, ``y = x @ W + b`` in float64 (``dense_kernel``). TVM's default CPU pipeline legalizes ``R.matmul`` into a serial three-loop nest that LLVM does
not vectorize (measured on Intel Xeon family 6 model 207, one thread, 100K rows x 286
features -> 2 classes: 0.29 s, where torch's MKL product takes 0.03 s). Here each output is a
dot product of the row with a column of ``W`` (stored transposed, so both operands are read
contiguously) in ``LANES`` partial sums: lane ``l`` adds the terms ``r = l, l + LANES, ...``
in order, the lanes are added pairwise, the remaining ``d % LANES`` terms one by one, then
the bias. A fixed order, so every call gives the same bits; it is not NumPy's BLAS order (no
backend's product is: ``ir/semantics``' rule is ``x @ W`` through BLAS), and its error is
within the usual bound of a float64 sum of ``d`` products (docs/exactness.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm.script import tirx as T

LANES = 8  # one AVX-512 register of doubles
ROWS = 64  # rows per parallel task (one task per row cost ~70 ns a row)


def _lane_sum(acc: Any) -> Any:
    """The eight partial sums added pairwise: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))."""
    return (((acc[0] + acc[4]) + (acc[2] + acc[6]))
            + ((acc[1] + acc[5]) + (acc[3] + acc[7])))


def dense_kernel(d: int, k: int) -> Any:
    """The PrimFunc ``(x (n, d), wt (k, d), b (k,)) -> y (n, k)``, float64."""
    blocks = d // LANES
    full = blocks * LANES

    @T.prim_func
    def dense(x: T.handle, wt: T.handle, b: T.handle, y: T.handle):
        T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True})
        n = T.int64()
        X = T.match_buffer(x, (n, d), "float64")
        WT = T.match_buffer(wt, (k, d), "float64")
        BIAS = T.match_buffer(b, (k,), "float64")
        Y = T.match_buffer(y, (n, k), "float64")
        for blk in T.parallel((n + ROWS - 1) // ROWS):
            acc = T.alloc_buffer((LANES,), "float64", scope="local")
            s = T.alloc_buffer((1,), "float64", scope="local")
            for ii in range(T.min(T.int64(ROWS), n - blk * ROWS)):
                for j in range(k):
                    for lane in T.vectorized(LANES):
                        acc[lane] = T.float64(0)
                    for ro in range(blocks):
                        for lane in T.vectorized(LANES):
                            acc[lane] = acc[lane] + X[blk * ROWS + ii, ro * LANES + lane] * WT[
                                j, ro * LANES + lane]
                    s[0] = _lane_sum(acc)
                    for r in range(d - full):
                        s[0] = s[0] + X[blk * ROWS + ii, full + r] * WT[j, full + r]
                    Y[blk * ROWS + ii, j] = s[0] + BIAS[j]

    return dense


def constants(weight: Any, bias: Any) -> tuple[np.ndarray, np.ndarray]:
    """``W`` transposed (k, d) and the bias broadcast to (k,), contiguous float64."""
    w = np.asarray(weight, np.float64)
    b = np.broadcast_to(np.asarray(bias, np.float64), (w.shape[1],))
    return np.ascontiguousarray(w.T), np.ascontiguousarray(b)


def polynomial_kernel(n_in: int, factors: np.ndarray, dtype: str) -> Any:
    """POLYNOMIAL's terms, ``(x (n, n_in)) -> y (n, terms)`` in ``dtype``: each row copied into
    a local buffer with a 1.0 after it, each term the running product of its factors in
    ``factors`` (a (degree, terms) table of column numbers, ``n_in`` the 1.0: a trailing
    ``* 1.0`` is exact), so every product is the rule's, in its order and dtype. (The Relax
    form, three ``take``s and two multiplies that the pipeline does not fuse, measured 0.21 s
    for degree 3 of 10 columns at 100K rows, Intel Xeon family 6 model 207.)"""
    degree, terms = factors.shape

    @T.prim_func
    def polynomial(x: T.handle, f: T.handle, y: T.handle):
        T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True})
        n = T.int64()
        X = T.match_buffer(x, (n, n_in), dtype)
        F = T.match_buffer(f, (degree, terms), "int32")
        Y = T.match_buffer(y, (n, terms), dtype)
        for blk in T.parallel((n + ROWS - 1) // ROWS):
            row = T.alloc_buffer((n_in + 1,), dtype, scope="local")
            acc = T.alloc_buffer((1,), dtype, scope="local")
            row[n_in] = T.Cast(dtype, 1)
            for ii in range(T.min(T.int64(ROWS), n - blk * ROWS)):
                for j in range(n_in):
                    row[j] = X[blk * ROWS + ii, j]
                for t in range(terms):
                    acc[0] = row[F[0, t]]
                    for dd in range(degree - 1):
                        acc[0] = acc[0] * row[F[dd + 1, t]]
                    Y[blk * ROWS + ii, t] = acc[0]

    return polynomial
