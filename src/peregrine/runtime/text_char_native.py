"""A character-n-gram TextRunner's tables laid out for its compiled kernel
(kernels/text_char_kernel.py), and the call: documents -> CSR counts, tf-idf values or the
projected (n, K) scores in one pass, as NativeText does for words (whose preprocessing,
``run``, it shares: Python's ``lower()`` of ASCII text, the lowercase table otherwise, NFKD in
Python for strip_accents).

The kernel computes what runtime/text_char.py's NumPy path computes (the same windows, the
same verified table of the terms, or for HashingVectorizer the same MurmurHash3 of each
window's UTF-8: tests/test_text_char.py compares both with scikit-learn).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from peregrine.kernels.text_char_kernel import ARGS, CharKernelSpec, doc_bound
from peregrine.runtime.text_hash_native import MAX_COLUMNS
from peregrine.runtime.text_native import (
    _MAX_NNZ,
    NativeText,
    _signed,
    _slots,
    _TooLarge,
    batch_args,
    bitmap_scratch,
    call,
    kernel_function,
    rows,
)
from peregrine.runtime.text_tokens import _class_table

FULL = 2  # the kernel's answer when the next document may not fit the outputs
GUESS = 1.0  # first guess at the matrix's entries, per code point and n (grown on FULL)


@functools.cache
def _nonspace() -> np.ndarray:
    return np.ascontiguousarray(_class_table("nonspace"), dtype=np.uint8)


class NativeChar(NativeText):
    """The kernel's view of a character-n-gram TextRunner (its ``tokens``: the terms)."""

    def __init__(self, run: Any) -> None:  # not NativeText's: it builds the word tables
        spec, tok = run.spec, run.tokens
        if spec.n_features > MAX_COLUMNS or not (spec.hashing or tok.size):
            # a matrix too wide for the per-column counts, or nothing to look up: the NumPy
            # path answers
            raise OverflowError("the NumPy path")
        lo, hi = spec.ngram_range
        self.spec, self.hi = spec, hi
        self.idf = (np.asarray(spec.idf, dtype=np.float64) if spec.idf is not None
                    else np.ones(spec.n_features, dtype=np.float64))
        nonspace = _nonspace()
        self.keep = [self.idf, nonspace]
        self.args = dict.fromkeys(ARGS, 0)
        self.args.update(
            nonspace=nonspace.ctypes.data, wb=int(spec.analyzer == "char_wb"), lo=lo, hi=hi,
            idf=self.idf.ctypes.data, norm={"": 0, "l1": 1, "l2": 2}[spec.norm],
            binary=int(spec.binary))
        if spec.hashing:  # each window's UTF-8 hashed (text_murmur.py)
            self.args.update(hashing=1, n_features=spec.n_features,
                             alt=int(spec.alternate_sign))
        else:
            self.keep += [tok.codes, tok.starts, tok.lens, tok_slots := _slots(tok.table)]
            self.args.update(
                tok_slots=tok_slots.ctypes.data, tok_mask=tok.table.mask,
                tok_shift=int(tok.table.shift), base=_signed(tok.base),
                vcodes=tok.codes.ctypes.data, vstart=tok.starts.ctypes.data,
                vlen=tok.lens.ctypes.data)
        self.fn = kernel_function(CharKernelSpec())

    def _scan(self, codes: np.ndarray, lens: np.ndarray, table: np.ndarray | None,
              weigh: bool, projection: np.ndarray | None) -> tuple | None:
        lo, hi = self.spec.ngram_range
        n = lens.size
        longest = doc_bound(int(lens.max()) if n else 0, lo, hi)
        reuse = projection is not None  # only y is wanted: every row reuses one buffer
        # a first guess at the whole matrix (the kernel asks for more when it needs it)
        cap = longest if reuse else longest + int(codes.size * (hi - lo + 1) * GUESS)
        if cap > _MAX_NNZ:
            raise _TooLarge
        out = _Outputs(cap, weigh)
        indptr = np.zeros(n + 1, dtype=np.int32)
        buf = np.empty(longest, dtype=np.uint32)
        grams = np.empty((3, longest), dtype=np.int64)  # start, length, hash
        utf8 = np.empty(4 * hi + 8, dtype=np.uint8)  # a window's UTF-8 (+ the tail's slack)
        stopped = np.zeros(1, dtype=np.int64)
        marks, _marks = bitmap_scratch(self.spec.n_features)
        batch, y, _hold = batch_args(codes, lens, table, weigh, projection)
        args = dict(self.args, **batch, **marks, buf=buf.ctypes.data,
                    g_s=grams[0].ctypes.data, g_n=grams[1].ctypes.data,
                    g_h=grams[2].ctypes.data, bytes=utf8.ctypes.data,
                    stopped=stopped.ctypes.data,
                    indptr=indptr.ctypes.data)
        first = 0
        while True:
            args.update(out.args(), first=first)
            rc = call(self.fn, ARGS, args)
            if rc == 0:
                break
            if rc != FULL:
                return None  # the lowercase table met a code point it cannot map
            first = int(stopped[0])
            need = int(indptr[first]) + doc_bound(int(lens[first]), lo, hi)
            out.grow(max(2 * out.cap, need), int(indptr[first]))
        return rows(reuse, indptr, out.cnt, out.idx, out.val if weigh else None, y)


class _Outputs:
    """The kernel's output entries (column int32, count int64, value float64), grown when
    the kernel stops at a document they may not hold."""

    def __init__(self, cap: int, weigh: bool) -> None:
        self.cap, self.weigh = cap, weigh
        self.idx = np.empty(cap, dtype=np.int32)
        self.cnt = np.empty(cap, dtype=np.int64)
        self.val = np.empty(cap if weigh else 0, dtype=np.float64)

    def grow(self, cap: int, used: int) -> None:
        if cap > _MAX_NNZ:
            raise _TooLarge
        for name in ("idx", "cnt", "val") if self.weigh else ("idx", "cnt"):
            old = getattr(self, name)
            new = np.empty(cap, dtype=old.dtype)
            new[:used] = old[:used]
            setattr(self, name, new)
        self.cap = cap

    def args(self) -> dict:
        return dict(cap=self.cap, out_idx=self.idx.ctypes.data, out_cnt=self.cnt.ctypes.data,
                    out_val=self.val.ctypes.data)
