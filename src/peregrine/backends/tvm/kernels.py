"""Scheduled TIR functions for ops whose Relax form the default CPU pipeline leaves slow: one
pass over each row instead of a serial loop nest per Relax op.

LINEAR's dense product, ``y = x @ W + b`` in float64 (``dense_kernel``). TVM's default CPU
pipeline legalizes ``R.matmul`` into a serial three-loop nest that LLVM does not vectorize
(measured on Intel Xeon family 6 model 207, one thread, 100K rows x 286 features -> 2
outputs: 86 ms, this kernel 23 ms). Here each output is a dot product of the row with a
column of ``W`` (stored transposed, so both operands are read contiguously) in ``LANES``
partial sums: lane ``l`` adds the terms ``r = l, l + LANES, ...`` in order (LLVM may fuse
each product into its sum: a fused multiply-add), the lanes are added pairwise, the
remaining ``d % LANES`` terms one by one, then the bias. A fixed order, so every call gives
the same bits; it is not NumPy's BLAS order (no backend's product is: ``ir/semantics``' rule
is ``x @ W`` through BLAS), and its error is within the usual bound of a float64 sum of
``d`` products (docs/exactness.md).
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


def interp_kernel(width: int, flat: int, steps: int) -> Any:
    """INTERP, ``np.interp`` per column as NumPy's C loop computes it (``arr_interp``):
    ``(x (n, width), xp, fp, slopes (flat,), start, length (width,), left, right (width,))
    -> y (n, width)``, the columns' tables concatenated. Per value: NaN -> NaN; a one-point
    table -> left / right / fp[0] (NaN: fp[0]); else ``i`` = the count of ``xp <= x`` (a
    binary search of ``steps`` halvings), below -> left, above xp[-1] -> right, ``x ==
    xp[i - 1]`` -> fp[i - 1] (the last of repeated xp, and xp[-1] itself), else ``slope *
    (x - xp[j]) + fp[j]`` with NumPy's slope ``(fp[j+1] - fp[j]) / (xp[j+1] - xp[j])``,
    retried from the right end where that is NaN (an infinite x on a flat segment), and
    fp[j] where that is NaN too and the segment is flat. No fused multiply-add, as NumPy's
    loop: the product is its own statement (TVM's LLVM code fuses ``a * b + c`` written as
    one expression; measured 70 of 3,000 values one ulp off that way)."""

    @T.prim_func
    def interp(x: T.handle, xp: T.handle, fp: T.handle, sl: T.handle, st: T.handle,
               ln: T.handle, lf: T.handle, rt: T.handle, y: T.handle):
        T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True})
        n = T.int64()
        X = T.match_buffer(x, (n, width), "float64")
        XP = T.match_buffer(xp, (flat,), "float64")
        FP = T.match_buffer(fp, (flat,), "float64")
        SL = T.match_buffer(sl, (flat,), "float64")
        START = T.match_buffer(st, (width,), "int32")
        LENGTH = T.match_buffer(ln, (width,), "int32")
        LEFT = T.match_buffer(lf, (width,), "float64")
        RIGHT = T.match_buffer(rt, (width,), "float64")
        Y = T.match_buffer(y, (n, width), "float64")
        for blk in T.parallel((n + ROWS - 1) // ROWS):
            lo = T.alloc_buffer((1,), "int32", scope="local")
            hi = T.alloc_buffer((1,), "int32", scope="local")
            res = T.alloc_buffer((1,), "float64", scope="local")
            prod = T.alloc_buffer((1,), "float64", scope="local")
            for ii in range(T.min(T.int64(ROWS), n - blk * ROWS)):
                for c in range(width):
                    v = X[blk * ROWS + ii, c]
                    s = START[c]
                    m = LENGTH[c]
                    if T.isnan(v) and m > 1:
                        res[0] = v
                    elif m == 1:
                        res[0] = T.if_then_else(v < XP[s], LEFT[c],
                                                T.if_then_else(v > XP[s], RIGHT[c], FP[s]))
                    else:
                        lo[0] = 0
                        hi[0] = m
                        for _ in range(steps):
                            if lo[0] < hi[0]:
                                if XP[s + (lo[0] + hi[0]) // 2] <= v:
                                    lo[0] = (lo[0] + hi[0]) // 2 + 1
                                else:
                                    hi[0] = (lo[0] + hi[0]) // 2
                        if lo[0] == 0:
                            res[0] = LEFT[c]
                        elif v > XP[s + m - 1]:
                            res[0] = RIGHT[c]
                        elif XP[s + lo[0] - 1] == v:
                            res[0] = FP[s + lo[0] - 1]
                        else:
                            j = s + lo[0] - 1
                            prod[0] = SL[j] * (v - XP[j])
                            res[0] = prod[0] + FP[j]
                            if T.isnan(res[0]):
                                prod[0] = SL[j] * (v - XP[j + 1])
                                res[0] = prod[0] + FP[j + 1]
                                if T.isnan(res[0]) and FP[j] == FP[j + 1]:
                                    res[0] = FP[j]
                    Y[blk * ROWS + ii, c] = res[0]

    return interp


def interp_tables(xps: Any, fps: Any) -> tuple[np.ndarray, ...]:
    """The concatenated (xp, fp, slopes, start, length) of INTERP's per-column tables; slope j
    of a column is NumPy's ``(fp[j+1] - fp[j]) / (xp[j+1] - xp[j])`` (0 past its end)."""
    xp = [np.asarray(t, np.float64).reshape(-1) for t in xps]
    fp = [np.asarray(t, np.float64).reshape(-1) for t in fps]
    slopes = []
    with np.errstate(all="ignore"):  # repeated xp: a slope never read (x == xp there)
        for a, b in zip(xp, fp):
            s = np.zeros(len(a))
            s[:-1] = (b[1:] - b[:-1]) / (a[1:] - a[:-1])
            slopes.append(s)
    lengths = np.asarray([len(a) for a in xp], np.int32)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int32)
    return (np.concatenate(xp), np.concatenate(fp), np.concatenate(slopes), starts, lengths)


def ctr_kernel(width: int, a: Any) -> Any:
    """CTR_LOOKUP (``ir/semantics/ctr.py``): ``x (n, width) -> [float32(x), derived columns]``
    (float32), CatBoost's categorical columns read off their tables row by row. Elements:
    a code is the position + 1 of the row's hash among its element's ascending hashes (a
    binary search for the first entry >= the value, then equality: NaN and unseen values
    give 0), a bit is ``x > threshold`` (NaN: the element's ``bit_nan``). A projection's key
    is its elements times their weights, summed in int64 (exact: keys stay below 2**52), its
    entry the key's position + 1 among the projection's ascending keys (0: absent); a
    derived column is ``values[offset + entry]`` of its projection, rounded to float32. All
    integer arithmetic and lookups: the rule's values exactly."""
    c, b = int(a.hash_columns.size), int(a.bit_columns.size)
    n_el = max(c + b, 1)
    p, d = int(a.key_offsets.size) - 1, int(a.sources.size)
    seg = np.diff(a.hash_offsets).max(initial=0)
    keyseg = np.diff(a.keys_offsets).max(initial=0)
    steps = int(max(seg, keyseg, 1)).bit_length() + 1
    sizes = {k: max(int(np.asarray(getattr(a, k)).size), 1) for k in (
        "hashes", "hash_offsets", "hash_columns", "bit_columns", "bit_thresholds", "bit_nan",
        "key_elements", "key_weights", "key_offsets", "keys", "keys_offsets", "sources",
        "values", "value_offsets")}
    out_w = width + d

    @T.prim_func
    def ctr(x: T.handle, hc: T.handle, hs: T.handle, ho: T.handle, bc: T.handle,
            bt: T.handle, bn: T.handle, ke: T.handle, kw: T.handle, ko: T.handle,
            ks: T.handle, kso: T.handle, src: T.handle, vals: T.handle, vo: T.handle,
            y: T.handle):
        T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True})
        n = T.int64()
        X = T.match_buffer(x, (n, width), "float64")
        HC = T.match_buffer(hc, (sizes["hash_columns"],), "int64")
        HS = T.match_buffer(hs, (sizes["hashes"],), "float64")
        HO = T.match_buffer(ho, (sizes["hash_offsets"],), "int64")
        BC = T.match_buffer(bc, (sizes["bit_columns"],), "int64")
        BT = T.match_buffer(bt, (sizes["bit_thresholds"],), "float64")
        BN = T.match_buffer(bn, (sizes["bit_nan"],), "int64")
        KE = T.match_buffer(ke, (sizes["key_elements"],), "int64")
        KW = T.match_buffer(kw, (sizes["key_weights"],), "int64")
        KO = T.match_buffer(ko, (sizes["key_offsets"],), "int64")
        KS = T.match_buffer(ks, (sizes["keys"],), "int64")
        KSO = T.match_buffer(kso, (sizes["keys_offsets"],), "int64")
        SRC = T.match_buffer(src, (sizes["sources"],), "int64")
        VALS = T.match_buffer(vals, (sizes["values"],), "float64")
        VO = T.match_buffer(vo, (sizes["value_offsets"],), "int64")
        Y = T.match_buffer(y, (n, out_w), "float32")
        for blk in T.parallel((n + ROWS - 1) // ROWS):
            el = T.alloc_buffer((n_el,), "int64", scope="local")
            entry = T.alloc_buffer((max(p, 1),), "int64", scope="local")
            lo = T.alloc_buffer((1,), "int64", scope="local")
            hi = T.alloc_buffer((1,), "int64", scope="local")
            num = T.alloc_buffer((1,), "int64", scope="local")
            for ii in range(T.min(T.int64(ROWS), n - blk * ROWS)):
                row = blk * ROWS + ii
                for e in range(c):
                    v = X[row, HC[e]]
                    lo[0] = HO[e]
                    hi[0] = HO[e + 1]
                    for _ in range(steps):
                        if lo[0] < hi[0]:
                            if HS[(lo[0] + hi[0]) // 2] < v:
                                lo[0] = (lo[0] + hi[0]) // 2 + 1
                            else:
                                hi[0] = (lo[0] + hi[0]) // 2
                    el[e] = T.if_then_else(
                        lo[0] < HO[e + 1] and HS[T.max(T.min(lo[0], HO[e + 1] - 1), 0)] == v,
                        lo[0] - HO[e] + 1, T.int64(0))
                for k in range(b):
                    v = X[row, BC[k]]
                    el[c + k] = T.if_then_else(T.isnan(v), BN[k],
                                               T.if_then_else(v > BT[k], T.int64(1), T.int64(0)))
                for q in range(p):
                    num[0] = T.int64(0)
                    for k in range(KO[q + 1] - KO[q]):
                        num[0] = num[0] + el[KE[KO[q] + k]] * KW[KO[q] + k]
                    lo[0] = KSO[q]
                    hi[0] = KSO[q + 1]
                    for _ in range(steps):
                        if lo[0] < hi[0]:
                            if KS[(lo[0] + hi[0]) // 2] < num[0]:
                                lo[0] = (lo[0] + hi[0]) // 2 + 1
                            else:
                                hi[0] = (lo[0] + hi[0]) // 2
                    entry[q] = T.if_then_else(
                        lo[0] < KSO[q + 1] and KS[T.max(T.min(lo[0], KSO[q + 1] - 1), 0)] == num[0],
                        lo[0] - KSO[q] + 1, T.int64(0))
                for j in range(width):
                    Y[row, j] = T.Cast("float32", X[row, j])
                for k in range(d):
                    Y[row, width + k] = T.Cast("float32", VALS[VO[k] + entry[SRC[k]]])

    return ctr


def map_kernel(width: int, in_dtype: str, out_dtype: str, fn: Any) -> Any:
    """An element-wise op as one scheduled pass: ``(x (n, width) in_dtype, a (width,), b
    (width,)) -> y (n, width) out_dtype``, ``y = out_dtype(fn(x, a_j, b_j))`` with ``x`` the
    input value rounded to ``out_dtype`` (exact for the callers: the rules' input dtype),
    then held in float64, and ``fn`` building a float64 TIR expression from it and the
    column's constants ``a_j``, ``b_j`` (a scaler's center and scale, a layer's terms).

    Used for a network's element-wise layers (``ops_nn.py``) and the column transforms of
    ``ops.py`` (AFFINE, CENTER_SCALE, CLIP, IMPUTE, BINARIZE). Relax's element-wise ops on the
    dynamic batch axis ran about 10 ns a value (a ReLU of 100K x 64 float32 values: 64 ms,
    Intel Xeon family 6 model 207), and each fused Relax function writes every intermediate to
    a full-size buffer; this loop's rows run in parallel tasks and its columns vectorize. An
    ``fn`` whose product feeds a sum fences the product (``tir_math.fenced``) where the rule
    rounds it: TVM's LLVM code would fuse them into one multiply-add."""

    @T.prim_func
    def elementwise(x: T.handle, a: T.handle, b: T.handle, y: T.handle):
        T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True})
        n = T.int64()
        X = T.match_buffer(x, (n, width), in_dtype)
        A = T.match_buffer(a, (width,), "float64")
        B = T.match_buffer(b, (width,), "float64")
        Y = T.match_buffer(y, (n, width), out_dtype)
        for blk in T.parallel((n + ROWS - 1) // ROWS):
            # each row through a buffer: Relax's op-pattern analysis then reads the function
            # as opaque (checked), so its fusion leaves this scheduled loop alone
            row = T.alloc_buffer((width,), out_dtype, scope="global")
            for i in range(T.min(T.int64(ROWS), n - blk * ROWS)):
                for j in range(width):
                    row[j] = T.Cast(out_dtype, fn(T.Cast("float64", T.Cast(
                        out_dtype, X[blk * ROWS + i, j])), A[j], B[j]))
                for j in range(width):
                    Y[blk * ROWS + i, j] = row[j]

    return elementwise
