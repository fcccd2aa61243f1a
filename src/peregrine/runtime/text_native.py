"""A TextRunner's tables laid out for the compiled tokenizer (kernels/text_kernel.py), and the
call: documents -> CSR counts, tf-idf values or the projected (n, K) scores in one pass.

The kernel computes what the NumPy path of runtime/text.py computes (tests/test_text_native.py
compares them on random Unicode text): the same token-class table, the same polynomial hash
and hash tables (their slots interleaved as (key, value) pairs so a probe touches one cache
line), the same code-point verification. Two differences of form, none of result:

* lowercasing: a table of each code point's ``str.lower()`` when it is one code point and
  context-free; any other (U+0130, U+03A3: Final_Sigma) makes the kernel stop and the text is
  lowercased by Python, then scanned again without the table;
* n-gram keys: one table for every n >= 2, keyed by the token ids plus one as digits in base
  ``tokens + 1`` (no leading zero digit, so n-grams of different n never share a key).
"""

from __future__ import annotations

import ctypes
import functools
import itertools
from typing import Any

import numpy as np

from peregrine.kernels.text_ir import LOWER_SPECIAL
from peregrine.kernels.text_kernel import ARGS, TextKernelSpec
from peregrine.runtime.text_tokens import (
    _N_CODES,
    _SEP,
    HashTable,
    _codes,
    lower_documents,
    stripped_codes,
)

_KERNEL = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)
_MAX_NNZ = (1 << 31) - 1  # indices and indptr are int32, as the NumPy path makes them


@functools.cache
def kernel_function(spec: Any) -> Any:
    """A text kernel (a ``GenericKernel``, built and cached by ``jit``) as a ctypes function
    of its int64 argument vector."""
    from peregrine.kernels import jit

    address, _ = jit.kernel_address(spec)
    return _KERNEL(address)


def token_capacity(codes: np.ndarray, lens: np.ndarray, min_len: int, span: int,
                   reuse: bool) -> tuple[int, int]:
    """(tokens a document may hold at most, entries the outputs need): tokens are runs of >=
    ``min_len`` characters, each followed by a separator but the last, and each starts at most
    one term per n of the ``span`` n-gram lengths; ``reuse``: one document's row at a time."""
    longest = int(lens.max()) if lens.size else 0
    per_doc = (longest + 1) // (min_len + 1) + 1
    cap = (per_doc if reuse else (codes.size + 1) // (min_len + 1) + 1) * span
    if cap > _MAX_NNZ:
        raise _TooLarge
    return per_doc, cap


@functools.cache
def lower_table() -> np.ndarray:
    """uint32 per code point: ``ord(chr(c).lower())``, or LOWER_SPECIAL where lower() is not
    one code point (U+0130) or depends on the context (U+03A3, Final_Sigma)."""
    # str.lower maps each code point on its own except U+03A3, so one lower() of every code
    # point in a row is the table, provided nothing but U+0130 (left out) changes the length
    every = "".join(map(chr, range(_N_CODES)))
    head, tail = every[:0x130].lower(), every[0x131:].lower()
    table = np.full(_N_CODES, LOWER_SPECIAL, dtype=np.uint32)
    if len(head) == 0x130 and len(tail) == _N_CODES - 0x131:
        table[:0x130], table[0x131:] = _codes(head), _codes(tail)
    else:  # another Unicode version: code point by code point
        low = list(map(str.lower, map(chr, range(_N_CODES))))
        one = np.fromiter(map(len, low), dtype=np.int64, count=_N_CODES) == 1
        table[one] = _codes("".join(itertools.compress(low, one)))
    table[0x3A3] = LOWER_SPECIAL
    return table


def _slots(table: HashTable) -> np.ndarray:
    """A HashTable's slots as (key, value) pairs: the probe sequence is unchanged."""
    out = np.empty((table.slot_key.size, 2), dtype=np.uint64)
    out[:, 0] = table.slot_key
    out[:, 1] = table.slot_val.view(np.uint64)
    return out


def _signed(x: int) -> int:
    return x - (1 << 64) if x >= 1 << 63 else x


class NativeText:
    """The kernel's view of a TextRunner (``term_ids``: each vocabulary term's token ids)."""

    def __init__(self, run: Any) -> None:
        spec, tok = run.spec, run.tokens
        lo, hi = spec.ngram_range
        t = run.t
        if (t + 1) ** hi >= 1 << 63:
            raise OverflowError("n-gram keys overflow int64")
        self.spec, self.hi = spec, hi
        keys, cols, uni = [], [], np.full(t, -1, dtype=np.int32)
        for col, ids in enumerate(run.term_ids):
            if len(ids) == 1:
                uni[ids[0]] = col
            else:
                key = 0
                for i in ids:
                    key = key * (t + 1) + i + 1
                keys.append(key)
                cols.append(col)
        grams = HashTable(np.array(keys, dtype=np.int64), np.array(cols, dtype=np.int64))
        self.idf = (np.asarray(spec.idf, dtype=np.float64) if spec.idf is not None
                    else np.ones(spec.n_features, dtype=np.float64))
        self.keep = [tok.codes, tok.starts, tok.lens, run.is_stop, uni, self.idf,
                     tok_slots := _slots(tok.table), gram_slots := _slots(grams)]
        self.args = dict.fromkeys(ARGS, 0)
        self.args.update(
            klass=run.table.ctypes.data, min_len=spec.min_len, tok_slots=tok_slots.ctypes.data,
            tok_mask=tok.table.mask, tok_shift=int(tok.table.shift), base=_signed(tok.base),
            vcodes=tok.codes.ctypes.data, vstart=tok.starts.ctypes.data,
            vlen=tok.lens.ctypes.data, is_stop=run.is_stop.ctypes.data,
            uni_col=uni.ctypes.data if lo <= 1 else 0, gram_slots=gram_slots.ctypes.data,
            gram_mask=grams.mask, gram_shift=int(grams.shift), radix=t + 1, lo=lo, hi=hi,
            idf=self.idf.ctypes.data, norm={"": 0, "l1": 1, "l2": 2}[spec.norm],
            binary=int(spec.binary))
        self.fn = kernel_function(TextKernelSpec())

    @property
    def weighs(self) -> bool:
        """Whether the kernel computes S's values: TfidfTransformer in float64, or counts
        (exact in any dtype; scipy's product converts them to float64 as the kernel does);
        not sublinear_tf (NumPy's log is not the C library's)."""
        spec = self.spec
        plain = spec.idf is None and not spec.norm
        return (spec.dtype == "float64" or plain) and not spec.sublinear_tf

    def run(self, docs: list[str], weigh: bool = False,
            projection: np.ndarray | None = None) -> tuple | None:
        """(counts int64, indices int32, indptr int32, values float64 or None, scores or
        None); None when the output could outgrow int32 indices (the caller's NumPy path
        takes it)."""
        spec = self.spec
        weigh = weigh or projection is not None
        if spec.strip_accents:  # preprocessed in Python (NFKD), already lowercased
            codes, lens = stripped_codes(docs, spec.lowercase, spec.strip_accents)
            try:
                return self._scan(codes, lens, None, weigh, projection)
            except _TooLarge:
                return None
        joined = _SEP.join(docs)
        lens = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
        table = None
        if spec.lowercase and joined.isascii():
            joined = joined.lower()
        elif spec.lowercase:
            table = lower_table()
        try:
            got = self._scan(_codes(joined), lens, table, weigh, projection)
            if got is None:
                # a code point only Python lowercases: lowercase the text and scan it again
                joined, lens = lower_documents(joined, lens)
                got = self._scan(_codes(joined), lens, None, weigh, projection)
        except _TooLarge:
            return None
        return got

    def _scan(self, codes: np.ndarray, lens: np.ndarray, table: np.ndarray | None,
              weigh: bool, projection: np.ndarray | None) -> tuple | None:
        spec, n = self.spec, lens.size
        lo, hi = spec.ngram_range
        reuse = projection is not None  # only y is wanted: every row reuses one small buffer
        per_doc, cap = token_capacity(codes, lens, spec.min_len, hi - lo + 1, reuse)
        idx = np.empty(cap, dtype=np.int32)
        cnt = np.empty(cap, dtype=np.int64)
        val = np.empty(cap if weigh else 0, dtype=np.float64)
        indptr = np.empty(n + 1, dtype=np.int32)
        tok = np.empty((4, per_doc), dtype=np.int64)  # start, length, hash, kept ids
        gkeys = np.empty(per_doc * max(hi - 1, 1), dtype=np.int64)
        batch, y, _hold = batch_args(codes, lens, table, weigh, projection)
        args = dict(self.args, **batch, tok_s=tok[0].ctypes.data, tok_n=tok[1].ctypes.data,
                    tok_h=tok[2].ctypes.data, ids=tok[3].ctypes.data,
                    gkeys=gkeys.ctypes.data, out_idx=idx.ctypes.data,
                    out_cnt=cnt.ctypes.data, indptr=indptr.ctypes.data,
                    out_val=val.ctypes.data)
        if call(self.fn, ARGS, args) != 0:
            return None  # the lowercase table met a code point it cannot map
        return rows(reuse, indptr, cnt, idx, val if weigh else None, y)


def batch_args(codes: np.ndarray, lens: np.ndarray, table: np.ndarray | None, weigh: bool,
               projection: np.ndarray | None) -> tuple[dict, np.ndarray | None, list]:
    """The arguments every text kernel takes for a batch (the code points, each document's
    bounds, the lowercase table, reuse, weigh, the projection and its scores y), y, and the
    arrays the arguments point into (the caller holds them through the call)."""
    n = lens.size
    bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens + 1, out=bounds[1:])
    k = 0 if projection is None else projection.shape[1]
    w = None if projection is None else np.ascontiguousarray(projection, np.float64)
    y = np.zeros((n, k), dtype=np.float64) if k else None
    args = dict(codes=codes.ctypes.data, n_docs=n, bounds=bounds.ctypes.data,
                lower=0 if table is None else table.ctypes.data,
                reuse=int(projection is not None), weigh=int(weigh), k=k,
                w=0 if w is None else w.ctypes.data, y=0 if y is None else y.ctypes.data)
    return args, y, [bounds, w]


def bitmap_scratch(n_features: int) -> tuple[dict, list]:
    """text_rows.mark_column's zeroed arrays (the kernels leave them zero) as arguments, and
    the arrays."""
    seen = np.zeros(n_features, dtype=np.int32)
    bits = np.zeros(-(-n_features // 64), dtype=np.uint64)
    top = np.zeros(-(-bits.size // 64), dtype=np.uint64)
    return dict(seen=seen.ctypes.data, bits=bits.ctypes.data, top=top.ctypes.data,
                n_top=top.size), [seen, bits, top]


def call(fn: Any, names: tuple[str, ...], args: dict) -> int:
    """Run a text kernel on its argument vector (int64, in ``names`` order)."""
    vec = np.fromiter((args[a] for a in names), dtype=np.int64, count=len(names))
    return int(fn(vec.ctypes.data))


def rows(reuse: bool, indptr: np.ndarray, cnt: np.ndarray, idx: np.ndarray,
         val: np.ndarray | None, y: np.ndarray | None) -> tuple:
    """``run``'s answer: the scores alone when the rows were not kept (``reuse``: a
    projection), else the CSR arrays trimmed to the rows' entries (and the values when
    weighed)."""
    if reuse:
        return None, None, None, None, y
    nnz = int(indptr[-1])
    return (cnt[:nnz].copy(), idx[:nnz].copy(), indptr,
            None if val is None else val[:nnz].copy(), None)


class _TooLarge(Exception):
    """The output could outgrow int32 indices: the NumPy path (int64 keys) takes it."""
