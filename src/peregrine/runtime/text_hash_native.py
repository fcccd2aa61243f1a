"""A HashingVectorizer TextRunner (word analyzer; its stop words a verified table) laid out for its compiled
kernel (kernels/text_hash_kernel.py), and the call: documents -> CSR signed counts, normalised
values or the projected (n, K) scores in one pass, sharing NativeText's preprocessing
(``run``: Python's ``lower()`` of ASCII text, the lowercase table otherwise, NFKD in Python
for strip_accents).

The kernel computes what the NumPy path computes (runtime/text.py's tokens, text_hash.py's
MurmurHash3 and FeatureHasher's sums): tests/test_text_native.py compares both with
scikit-learn.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.kernels.text_hash_kernel import ARGS, HashKernelSpec
from peregrine.runtime.text_native import (
    NativeText,
    _signed,
    _slots,
    batch_args,
    bitmap_scratch,
    call,
    kernel_function,
    rows,
    token_capacity,
)
from peregrine.runtime.text_tokens import _Tokens

# the kernel keeps an int32 count per column and reads a bit per 4,096 columns for every
# document: past 2**22 columns (16 MiB of counts, 1,024 words a document) the NumPy path,
# whose cost does not grow with the columns, is the faster (2**27: 0.82 s against 0.03 s on
# 20,000 short documents)
MAX_COLUMNS = 1 << 22


class NativeHash(NativeText):
    """The kernel's view of a HashingVectorizer's TextRunner."""

    def __init__(self, run: Any) -> None:  # not NativeText's: it builds vocabulary tables
        spec = self.spec = run.spec
        if spec.analyzer != "word" or spec.n_features > MAX_COLUMNS:
            raise OverflowError("the NumPy path")  # (see MAX_COLUMNS)
        lo, hi = spec.ngram_range
        self.hi = hi
        # a TfidfTransformer behind it: its idf_; else ones (v * 1.0 is v)
        self.idf = (np.asarray(spec.idf, dtype=np.float64) if spec.idf is not None
                    else np.ones(spec.n_features, dtype=np.float64))
        self.keep = [run.table, self.idf]
        self.args = dict.fromkeys(ARGS, 0)
        if run.stop:  # the word kernel's token table, of the stop words alone
            stop = _Tokens(sorted(run.stop), spec.char_class)
            slots = _slots(stop.table)
            self.keep += [stop.codes, stop.starts, stop.lens, slots]
            self.args.update(stop_slots=slots.ctypes.data, stop_mask=stop.table.mask,
                             stop_shift=int(stop.table.shift), base=_signed(stop.base),
                             vcodes=stop.codes.ctypes.data, vstart=stop.starts.ctypes.data,
                             vlen=stop.lens.ctypes.data)
        self.args.update(klass=run.table.ctypes.data, min_len=spec.min_len, lo=lo, hi=hi,
                         n_features=spec.n_features, alt=int(spec.alternate_sign),
                         idf=self.idf.ctypes.data, norm={"": 0, "l1": 1, "l2": 2}[spec.norm],
                         binary=int(spec.binary))
        self.fn = kernel_function(HashKernelSpec())

    def _scan(self, codes: np.ndarray, lens: np.ndarray, table: np.ndarray | None,
              weigh: bool, projection: np.ndarray | None) -> tuple | None:
        spec, n = self.spec, lens.size
        lo, hi = spec.ngram_range
        longest = int(lens.max()) if n else 0
        reuse = projection is not None  # only y is wanted: every row reuses one buffer
        per_doc, cap = token_capacity(codes, lens, spec.min_len, hi - lo + 1, reuse)
        idx = np.empty(cap, dtype=np.int32)
        cnt = np.empty(cap, dtype=np.int64)
        val = np.empty(cap if weigh else 0, dtype=np.float64)
        indptr = np.empty(n + 1, dtype=np.int32)
        buf = np.empty(max(longest, 1), dtype=np.uint32)
        tok = np.empty((2, per_doc), dtype=np.int64)
        scratch = np.empty(hi * (4 * longest + 1) + 8, dtype=np.uint8)  # + the tail's slack
        marks, _marks = bitmap_scratch(spec.n_features)
        batch, y, _hold = batch_args(codes, lens, table, weigh, projection)
        args = dict(self.args, **batch, **marks, buf=buf.ctypes.data,
                    tok_s=tok[0].ctypes.data, tok_e=tok[1].ctypes.data,
                    bytes=scratch.ctypes.data, out_idx=idx.ctypes.data,
                    out_cnt=cnt.ctypes.data, indptr=indptr.ctypes.data,
                    out_val=val.ctypes.data)
        if call(self.fn, ARGS, args) != 0:
            return None  # the lowercase table met a code point it cannot map
        return rows(reuse, indptr, cnt, idx, val if weigh else None, y)
