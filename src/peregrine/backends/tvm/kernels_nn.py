"""DENSE's float32 product as one scheduled TIR function (``dense32_kernel``): a PyTorch
network's ``nn.Linear`` inside a pipeline (``ir/semantics/nn.py``), which the TVM backend ran as
a fallback to its NumPy rule.

Order. Each output's sum is ``acc = fma(x_k, w_k, acc)`` over the inputs in order, from 0,
written ``acc + x_k * w_k`` in one statement, which LLVM contracts into one fused multiply-add
on targets with FMA (without FMA, a forced x86-64-v2 level, each product is rounded first);
then the bias, one float32 addition. That is OpenBLAS's sgemm on AVX-512 for outputs in whole
blocks of 16, so NumPy's rule has the same bits there; for the narrower remainder columns and
one-output layers OpenBLAS sums in another order (measured on Intel Xeon family 6 model 207:
37 inputs x 3 outputs, 297 of 300 rows one ulp apart somewhere), and torch's own kernels,
which the torch and native backends call, block the sum their way: every backend's layer is
within float32 rounding of the source's (docs/exactness.md, "Networks"). Wider layers than
``MAX_INPUTS`` run their rule.

Layout: outputs in chunks of ``LANES`` floats, weights ``(chunks, d, LANES)``, rows in
parallel tasks of ``ROWS`` and groups of ``GROUP`` sharing each weight load, as the kernel
matrix (``kernel_matrix.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm.script import tirx as T

LANES = 16  # float32 outputs per vector (one AVX-512 register)
ROWS = 64
GROUP = 8
MAX_INPUTS = 512  # the FMA chain of the ONNX export (export/onnx_nn.py FMA_CHAIN_MAX)


def chunked_weights(weight: Any) -> np.ndarray:
    """``weight`` (d, k) as float32 ``(chunks, d, LANES)``, zero-padded outputs."""
    w = np.asarray(weight, np.float64).astype(np.float32)  # exact: DENSE holds float32 numbers
    d, k = w.shape
    pad = -(-k // LANES) * LANES
    padded = np.zeros((d, pad), np.float32)
    padded[:, :k] = w
    return np.ascontiguousarray(padded.reshape(d, -1, LANES).transpose(1, 0, 2))


def dense32_kernel(d: int, k: int) -> Any:
    """The PrimFunc ``(x (n, d), w (chunks, d, LANES), b (k,)) -> y (n, k)``, float32."""
    chunks = -(-k // LANES)
    full = k // LANES
    tail = k - full * LANES

    @T.macro
    def rows(X, W, B, Y, acc, row0, count):
        for c in range(chunks):
            for r in T.unroll(count):
                for lane in T.vectorized(LANES):
                    acc[r, lane] = T.float32(0)
            for kk in range(d):
                for r in T.unroll(count):
                    for lane in T.vectorized(LANES):
                        acc[r, lane] = acc[r, lane] + X[row0 + r, kk] * W[c, kk, lane]
            for r in T.unroll(count):
                if c < full:
                    for lane in T.vectorized(LANES):
                        Y[row0 + r, c * LANES + lane] = acc[r, lane] + B[c * LANES + lane]
                else:
                    for lane in range(tail):
                        Y[row0 + r, c * LANES + lane] = acc[r, lane] + B[c * LANES + lane]

    @T.prim_func
    def dense32(x: T.handle, w: T.handle, b: T.handle, y: T.handle):
        T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True})
        n = T.int64()
        X = T.match_buffer(x, (n, d), "float32")
        W = T.match_buffer(w, (chunks, d, LANES), "float32")
        B = T.match_buffer(b, (k,), "float32")
        Y = T.match_buffer(y, (n, k), "float32")
        for blk in T.parallel((n + ROWS - 1) // ROWS):
            # "global": stack slots LLVM keeps in registers (kernel_matrix.py)
            acc = T.alloc_buffer((GROUP, LANES), "float32", scope="global")
            for g in range(T.min(T.int64(ROWS), n - blk * ROWS) // GROUP):
                rows(X, W, B, Y, acc, blk * ROWS + g * GROUP, GROUP)
            for i in range(T.min(T.int64(ROWS), n - blk * ROWS) % GROUP):
                rows(X, W, B, Y, acc,
                     blk * ROWS + T.min(T.int64(ROWS), n - blk * ROWS) // GROUP * GROUP + i, 1)

    return dense32


def softmax_kernel(width: int, in_dtype: str, log: bool) -> Any:
    """Row-wise softmax / log_softmax of a float32 network (``ir/semantics/nn.py``): per row
    ``s = float32(x - max)`` (torch's rounding), then ``exp(s) / sum`` or ``s - log(sum)`` in
    float64, rounded to float32; the sum in column order (NumPy's pairwise order for at most 8
    columns; a few float64 ulps from it beyond, which the float32 rounding absorbs but at a
    tie). ``exp`` and ``log`` are the C library's (``T.exp`` / ``T.log``)."""

    @T.prim_func
    def softmax(x: T.handle, ones: T.handle, y: T.handle):
        T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True})
        n = T.int64()
        X = T.match_buffer(x, (n, width), in_dtype)
        # float32 ones the row is multiplied by (exact): a second input, as TVM 0.27's reshape
        # analysis fails on a scheduled function of one input (ops_nn._elementwise)
        ONES = T.match_buffer(ones, (width,), "float32")
        Y = T.match_buffer(y, (n, width), "float32")
        for blk in T.parallel((n + ROWS - 1) // ROWS):
            top = T.alloc_buffer((1,), "float64", scope="global")
            total = T.alloc_buffer((1,), "float64", scope="global")
            s = T.alloc_buffer((width,), "float64", scope="global")
            for i in range(T.min(T.int64(ROWS), n - blk * ROWS)):
                top[0] = T.Cast("float64", T.Cast("float32", X[blk * ROWS + i, 0]) * ONES[0])
                # (a NaN makes the sum NaN, so the whole row, as the rule's max does)
                for j in range(width):
                    v = T.Cast("float64", T.Cast("float32", X[blk * ROWS + i, j]) * ONES[j])
                    top[0] = T.Select(v > top[0], v, top[0])
                total[0] = T.float64(0)
                for j in range(width):
                    s[j] = T.Cast("float64", T.Cast("float32", T.Cast(
                        "float64", T.Cast("float32", X[blk * ROWS + i, j]) * ONES[j]) - top[0]))
                    total[0] = total[0] + T.exp(s[j])
                for j in range(width):
                    if log:
                        Y[blk * ROWS + i, j] = T.Cast("float32", s[j] - T.log(total[0]))
                    else:
                        Y[blk * ROWS + i, j] = T.Cast("float32", T.exp(s[j]) / total[0])

    return softmax
