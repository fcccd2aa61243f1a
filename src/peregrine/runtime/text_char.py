"""Character n-grams (``analyzer="char"`` and ``"char_wb"``), array at a time: the spans of
code points scikit-learn's ``_char_ngrams`` / ``_char_wb_ngrams`` produce
(sklearn/feature_extraction/text.py), for the vocabulary lookup or the murmurhash of
runtime/text.py. No Python loop runs per document or per n-gram.

* Preprocessing is the word analyzer's (``lower()``, then strip_accents), documents joined by a
  space and read as UTF-32 code points (``text_tokens``).
* ``char``: ``re.sub(r"\\s\\s+", " ", doc)`` first: a run of two or more whitespace code
  points (``re``'s own ``\\s``, the table ``_class_table("nonspace")`` is made from) becomes one
  space, a lone one (a tab) stays as it is; then every window of n code points inside the
  document, for n in ngram_range (``range(min_n, min(max_n + 1, len + 1))``: none longer than
  the document).
* ``char_wb``: the words of ``doc.split()`` (maximal runs of non-whitespace: ``str.split`` and
  ``re``'s ``\\s`` share CPython's Py_UNICODE_ISSPACE), each padded to ``" " + w + " "`` of
  length L; for n from min_n: the L - n + 1 windows while n < L, then the whole padded word
  once at the first n >= L and no larger n (the ``offset == 0`` break), so a padded word
  longer than max_n never yields itself.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from peregrine.runtime.text_tokens import (
    _SEP,
    _class_table,
    _codes,
    _ranges,
    lower_documents,
    stripped_codes,
)


def _preprocessed(docs: list[str], lowercase: bool,
                  strip: str) -> tuple[np.ndarray, np.ndarray]:
    """(code points of the preprocessed documents joined by ``_SEP``, each one's length)."""
    if strip:
        return stripped_codes(docs, lowercase, strip)
    joined = _SEP.join(docs)
    lens = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
    if lowercase:
        joined, lens = lower_documents(joined, lens)
    return _codes(joined), lens


def _squeeze_spaces(codes: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``re.sub(r"\\s\\s+", " ", doc)`` of every document at once (the joining spaces are kept
    out of the runs, so a run never spans two documents)."""
    starts = np.cumsum(lens + 1) - lens - 1
    ws = ~_class_table("nonspace")[codes]
    ws[starts[1:] - 1] = False  # the joints
    edges = np.diff(ws.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    rs, re_ = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    long = re_ - rs >= 2
    if not long.any():
        return codes, lens
    rs, re_ = rs[long], re_[long]
    codes = codes.copy()
    codes[rs] = ord(" ")
    mark = np.zeros(codes.size + 1, dtype=np.int64)
    np.add.at(mark, rs + 1, 1)
    np.add.at(mark, re_, -1)
    keep = np.cumsum(mark[:-1]) == 0
    # each document loses sum(run length - 1) of its runs
    doc = np.searchsorted(starts, rs, side="right") - 1
    lost = np.bincount(doc, weights=re_ - rs - 1, minlength=lens.size).astype(np.int64)
    return codes[keep], lens - lost


def _windows(starts: np.ndarray, lens: np.ndarray, lo: int, hi: int,
             owner: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, owner) of every window of n in [lo, hi] code points inside each span."""
    gs, ge, go = [], [], []
    for n in range(lo, hi + 1):
        ok = lens >= n
        pos, which = _ranges(starts[ok], lens[ok] - n + 1)
        gs.append(pos)
        ge.append(pos + n)
        go.append(owner[ok][which])
    return np.concatenate(gs), np.concatenate(ge), np.concatenate(go)


def char_grams(docs: list[str], analyzer: str, lowercase: bool, strip: str,
               ngram_range: tuple[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                      np.ndarray]:
    """(code points, gram starts, gram ends, gram's document) of every character n-gram."""
    lo, hi = ngram_range
    codes, lens = _preprocessed(docs, lowercase, strip)
    if analyzer == "char":
        codes, lens = _squeeze_spaces(codes, lens)
        starts = np.cumsum(lens + 1) - lens - 1
        s, e, d = _windows(starts, lens, lo, hi, np.arange(lens.size))
        return codes, s, e, d
    # char_wb: the words, each padded with a space on both sides in a buffer of their own
    doc_start = np.cumsum(lens + 1) - lens - 1
    mark = _class_table("nonspace")[codes].view(np.int8)  # the joints are spaces
    edges = np.diff(mark, prepend=np.int8(0), append=np.int8(0))
    ws, we = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    wdoc = np.searchsorted(doc_start, ws, side="right") - 1
    plen = we - ws + 2
    pstart = np.cumsum(plen) - plen
    buf = np.full(int(plen.sum()), ord(" "), dtype=np.uint32)
    pos, owner = _ranges(ws, we - ws)
    buf[pos - ws[owner] + pstart[owner] + 1] = codes[pos]
    s, e, d = _windows(pstart, plen, lo, hi, wdoc)
    # a padded word shorter than min_n is one gram, itself (w[0:n] at n = min_n, then the
    # break); one of length n in the range is its own window of n already
    short = plen < lo
    return (buf, np.concatenate((s, pstart[short])),
            np.concatenate((e, pstart[short] + plen[short])), np.concatenate((d, wdoc[short])))


@functools.cache
def _span_kernel() -> Any:
    """The compiled span lookup (kernels/text_spans.py), False where LLVM is missing."""
    try:
        from peregrine.kernels import jit
        from peregrine.kernels.text_spans import SpanKernelSpec

        address, _ = jit.kernel_address(SpanKernelSpec())
    except (ImportError, OSError, RuntimeError):
        return False
    return ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(address)


def lookup_spans(tokens: Any, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 compiled: bool = True) -> np.ndarray:
    """``tokens.lookup`` (text_tokens._Tokens: the term of each span, -1 for none), by the
    compiled kernel when there is one."""
    kernel = _span_kernel() if compiled else False
    if not kernel or not tokens.size:
        return tokens.lookup(codes, starts, ends)
    codes = np.ascontiguousarray(codes, dtype=np.uint32)
    s, e = (np.ascontiguousarray(v, dtype=np.int64) for v in (starts, ends))
    t = tokens.table
    vcodes = np.ascontiguousarray(tokens.codes, dtype=np.uint32)
    vstart, vlen = (np.ascontiguousarray(v, dtype=np.int64) for v in (tokens.starts,
                                                                       tokens.lens))
    out = np.empty(s.size, dtype=np.int64)
    argv = np.array([codes.ctypes.data, s.ctypes.data, e.ctypes.data, s.size,
                     t.slot_key.ctypes.data, t.slot_val.ctypes.data, t.mask, int(t.shift),
                     tokens.base if tokens.base < 1 << 63 else tokens.base - (1 << 64),
                     vcodes.ctypes.data, vstart.ctypes.data, vlen.ctypes.data,
                     out.ctypes.data], dtype=np.int64)
    kernel(argv.ctypes.data)
    return out
