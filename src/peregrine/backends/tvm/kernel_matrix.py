"""KERNEL's row-by-vector matrix as one scheduled TIR function (``kernel_matrix``): the TVM
backend ran it as a fallback to its NumPy rule, whose libsvm rbf builds an (n, m, d) array of
differences (20K rows x 1,501 support vectors x 20 features: 2.1 s on Intel Xeon family 6
model 207, where this function takes about 0.1 s on one thread).

Layout. The m vectors are padded with zeros to chunks of ``LANES`` and stored ``(chunks, d,
LANES)``, so one chunk's values for feature k are one vector load. Rows run in parallel
tasks of ``ROWS``, and within a task in groups of ``GROUP`` rows that share each load of the
vectors (one row at a time, the vectors were read from L2 once per row: half the time).

Per (row, vector) the sum over features runs in feature order, one vector lane per support
vector:
- ``"diff"`` (libsvm's rbf, ``k_function``): ``sum((x_k - v_k)**2)``, then ``exp(-gamma *
  sum)``. libsvm's own order; a row with a huge feature gets an infinite distance and 0, as
  libsvm (no ``inf - inf``).
- ``"expanded"`` (``sklearn.metrics.pairwise.rbf_kernel``): ``x.v``, then ``((x.v * -2) +
  |x|^2) + |v|^2`` as the rule's in-place steps, clamped at 0 keeping NaN (``np.maximum``),
  then ``exp(-gamma * d)``; a huge row gives ``inf - inf = NaN`` as scikit-learn's does (its
  KernelPCA then raises on it).
- ``"dot"`` (linear and poly kernels): ``x.v``.

LLVM may fuse each product into its sum on CPUs with FMA (the square of a difference, the
product ``x_k v_k``): one rounding where the C loop has two, so these sums are within a few
ulps of libsvm's and NumPy's, not equal to them (no backend's are: NumPy's rule sums through
einsum or BLAS). ``exp`` is ``tir_math.exp``, within 1 ulp of glibc's. docs/tvm.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm.script import tirx as T

from peregrine.backends.tvm.tir_math import exp, is_nan

LANES = 8  # support vectors per chunk: one AVX-512 register of doubles
ROWS = 64  # rows per parallel task
GROUP = 8  # rows sharing each load of a chunk (8 accumulators in registers)
MODES = ("diff", "expanded", "dot")


def chunked(vectors: Any) -> tuple[np.ndarray, np.ndarray]:
    """The vectors as ``(chunks, d, LANES)``, zero-padded, and ``|v|^2`` per padded vector
    (``np.einsum("ij,ij->i")``, the rule's)."""
    v = np.asarray(vectors, np.float64)
    m, d = v.shape
    pad = -(-m // LANES) * LANES
    padded = np.zeros((pad, d))
    padded[:m] = v
    vv = np.einsum("ij,ij->i", padded, padded)
    return np.ascontiguousarray(padded.reshape(-1, LANES, d).transpose(0, 2, 1)), vv


def kernel_matrix(d: int, m: int, mode: str, gamma: float,
                  center_all: float | None = None) -> Any:
    """The PrimFunc ``(x (n, d), v (chunks, d, LANES), vv (chunks * LANES,), c (m,)) -> y (n,
    m)``, float64, for ``mode`` in ``MODES``. With ``center_all``, each finished row is
    centred as KernelCenterer.transform does, ``((k - c) - mean(k)) + center_all`` (``c``:
    ``center_rows``), the mean a sum in ``LANES`` partial sums (lane ``l`` adds columns ``l,
    l + LANES, ...``, added pairwise, then the last ``m % LANES``; NumPy's is pairwise in
    blocks: a few ulps apart) divided by ``m``; ``c`` is unread without it."""
    assert mode in MODES
    chunks = -(-m // LANES)
    full = m // LANES  # chunks whose every lane is a vector: stored straight into y
    tail = m - full * LANES
    neg_gamma = -float(gamma)

    def finish(acc: Any, xx: Any, vv: Any) -> Any:
        if mode == "diff":
            return exp(acc * T.float64(neg_gamma))
        if mode == "expanded":
            dist = (acc * T.float64(-2.0) + xx) + vv
            return exp(T.Select(is_nan(dist), dist, T.max(dist, T.float64(0.0)))
                       * T.float64(neg_gamma))
        return acc

    @T.macro
    def rows(X, V, VV, C, Y, acc, term, xx, res, row0, count):
        # ``count`` rows from ``row0``, sharing each load of a chunk
        for r in T.unroll(count):
            xx[r] = T.float64(0)
            if mode == "expanded":
                for k in range(d):
                    xx[r] = xx[r] + X[row0 + r, k] * X[row0 + r, k]
        for c in range(chunks):
            for r in T.unroll(count):
                for lane in T.vectorized(LANES):
                    acc[r, lane] = T.float64(0)
            for k in range(d):
                for r in T.unroll(count):
                    if mode == "diff":
                        for lane in T.vectorized(LANES):
                            term[r, lane] = X[row0 + r, k] - V[c, k, lane]
                        for lane in T.vectorized(LANES):
                            acc[r, lane] = acc[r, lane] + term[r, lane] * term[r, lane]
                    else:
                        for lane in T.vectorized(LANES):
                            acc[r, lane] = acc[r, lane] + X[row0 + r, k] * V[c, k, lane]
            for r in T.unroll(count):
                if c < full:
                    for lane in T.vectorized(LANES):
                        Y[row0 + r, c * LANES + lane] = finish(acc[r, lane], xx[r],
                                                               VV[c * LANES + lane])
                else:
                    for lane in T.vectorized(LANES):
                        res[r, lane] = finish(acc[r, lane], xx[r], VV[c * LANES + lane])
                    for lane in range(tail):
                        Y[row0 + r, c * LANES + lane] = res[r, lane]
        if center_all is not None:  # the row's mean of the raw kernel, then the centring
            for r in T.unroll(count):
                for lane in T.vectorized(LANES):
                    acc[r, lane] = T.float64(0)
                for c in range(full):
                    for lane in T.vectorized(LANES):
                        acc[r, lane] = acc[r, lane] + Y[row0 + r, c * LANES + lane]
                xx[r] = (((acc[r, 0] + acc[r, 4]) + (acc[r, 2] + acc[r, 6]))
                         + ((acc[r, 1] + acc[r, 5]) + (acc[r, 3] + acc[r, 7])))
                for lane in range(tail):
                    xx[r] = xx[r] + Y[row0 + r, full * LANES + lane]
                xx[r] = xx[r] / T.float64(m)
                for j in range(m):
                    Y[row0 + r, j] = ((Y[row0 + r, j] - C[j]) - xx[r]) + T.float64(
                        center_all if center_all is not None else 0.0)

    @T.prim_func
    def kernel(x: T.handle, v: T.handle, vsq: T.handle, cr: T.handle, y: T.handle):
        T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True})
        n = T.int64()
        X = T.match_buffer(x, (n, d), "float64")
        V = T.match_buffer(v, (chunks, d, LANES), "float64")
        VV = T.match_buffer(vsq, (chunks * LANES,), "float64")
        C = T.match_buffer(cr, (m,), "float64")
        Y = T.match_buffer(y, (n, m), "float64")
        for blk in T.parallel((n + ROWS - 1) // ROWS):
            # "global" scope: small buffers become stack slots LLVM keeps in registers ("local"
            # ones are heap workspaces, every access a load and a store)
            acc = T.alloc_buffer((GROUP, LANES), "float64", scope="global")
            term = T.alloc_buffer((GROUP, LANES), "float64", scope="global")
            xx = T.alloc_buffer((GROUP,), "float64", scope="global")
            res = T.alloc_buffer((GROUP, LANES), "float64", scope="global")
            # whole groups, then the task's last rows one at a time (a single row is not
            # computed eight times)
            for g in range(T.min(T.int64(ROWS), n - blk * ROWS) // GROUP):
                rows(X, V, VV, C, Y, acc, term, xx, res, blk * ROWS + g * GROUP, GROUP)
            for i in range(T.min(T.int64(ROWS), n - blk * ROWS) % GROUP):
                rows(X, V, VV, C, Y, acc, term, xx, res,
                     blk * ROWS + T.min(T.int64(ROWS), n - blk * ROWS) // GROUP * GROUP + i, 1)

    return kernel
