"""HashingVectorizer's features, array-at-a-time: each token or n-gram (tokens joined by one
space) is hashed with MurmurHash3 x86_32 of its UTF-8 bytes, seed 0, as a signed 32-bit integer
(sklearn.utils.murmurhash3_32(feature, seed=0, positive=False), called by
sklearn/feature_extraction/_hashing_fast.pyx); its column is ``abs(h) % n_features`` (with
abs(-2**31) = 2**31) and its value -1 when ``alternate_sign`` and h < 0, else 1. The hash runs
over all features at once, one 4-byte block position per step."""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from peregrine.runtime.text_tokens import _ranges, _Tokens

_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def murmur3_32(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Signed MurmurHash3 x86_32 (seed 0) of each byte range [s, s + l) of ``buf`` (uint8)."""
    n = starts.size
    h = np.zeros(n, dtype=np.uint32)
    with np.errstate(over="ignore"):
        nblocks = lens // 4
        order = np.argsort(-nblocks, kind="stable")
        sb = nblocks[order]
        active = np.searchsorted(-sb, -np.arange(int(sb[0]) if n else 0), side="left")
        src = starts[order]
        hs = np.zeros(n, dtype=np.uint32)
        for i in range(active.size):  # block i of every feature that has one
            a = int(active[i])
            p = src[:a] + 4 * i
            k = (buf[p].astype(np.uint32) | (buf[p + 1].astype(np.uint32) << np.uint32(8))
                 | (buf[p + 2].astype(np.uint32) << np.uint32(16))
                 | (buf[p + 3].astype(np.uint32) << np.uint32(24)))
            k = _rotl(k * _C1, 15) * _C2
            x = _rotl(hs[:a] ^ k, 13)
            hs[:a] = x * np.uint32(5) + np.uint32(0xE6546B64)
        h[order] = hs
        rem = lens & 3
        tail = starts + 4 * nblocks
        k1 = np.zeros(n, dtype=np.uint32)
        for j in (2, 1, 0):
            has = rem > j
            k1[has] ^= buf[tail[has] + j].astype(np.uint32) << np.uint32(8 * j)
        has = rem > 0
        k1[has] = _rotl(k1[has] * _C1, 15) * _C2
        h ^= k1
        h ^= lens.astype(np.uint32)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h.view(np.int32)


def _utf8(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(UTF-8 bytes of the code points, byte offset of each code point and of the end)."""
    text = codes.tobytes().decode("utf-32-le", "surrogatepass")
    buf = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    width = 1 + (codes >= 0x80) + (codes >= 0x800) + (codes >= 0x10000)
    offsets = np.zeros(codes.size + 1, dtype=np.int64)
    np.cumsum(width, out=offsets[1:])
    return buf, offsets


@functools.cache
def _murmur_kernel() -> Any:
    """The compiled hashing kernel (kernels/text_murmur.py), False where LLVM is missing."""
    try:
        from peregrine.kernels import jit
        from peregrine.kernels.text_murmur import MurmurKernelSpec

        address, _ = jit.kernel_address(MurmurKernelSpec())
    except (ImportError, OSError, RuntimeError):
        return False
    return ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(address)


def _compiled_features(spec: Any, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                       doc: np.ndarray, ngrams: tuple[int, int] | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """hashed_features' (column, sign, document) from the compiled kernel, None without it;
    ``ngrams`` (1, 1): each span hashed whole (character n-grams)."""
    kernel = _murmur_kernel()
    if not kernel:
        return None
    lo, hi = ngrams or spec.ngram_range
    m = int(starts.size)
    longest = int((ends - starts).max()) if m else 0
    codes = np.ascontiguousarray(codes, dtype=np.uint32)
    tok_s, tok_e, tok_doc = (np.ascontiguousarray(v, dtype=np.int64)
                             for v in (starts, ends, doc))
    scratch = np.empty(hi * (4 * longest + 1) + 8, dtype=np.uint8)  # + the tail's slack
    cap = max(m * (hi - lo + 1), 1)
    col, sign, fdoc = (np.empty(cap, dtype=np.int64) for _ in range(3))
    argv = np.array([codes.ctypes.data, tok_s.ctypes.data, tok_e.ctypes.data,
                     tok_doc.ctypes.data, m, lo, hi, spec.n_features, int(spec.alternate_sign),
                     scratch.ctypes.data, col.ctypes.data, sign.ctypes.data, fdoc.ctypes.data],
                    dtype=np.int64)
    k = int(kernel(argv.ctypes.data))
    return col[:k], sign[:k], fdoc[:k]


def hashed_spans(spec: Any, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                 compiled: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(column, sign) of each span [s, e) of ``codes`` hashed whole (character n-grams)."""
    if compiled:
        got = _compiled_features(spec, codes, starts, ends, np.zeros(starts.size, np.int64),
                                 ngrams=(1, 1))
        if got is not None:
            return got[0], got[1]
    buf, off = _utf8(codes)
    h = murmur3_32(buf, off[starts], off[ends] - off[starts]).astype(np.int64)
    sign = np.where(h < 0, -1, 1) if spec.alternate_sign else np.ones(h.size, np.int64)
    return np.abs(h) % spec.n_features, sign


def hashed_features(run: Any, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                    doc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(column, sign, document) of every feature of every document."""
    spec = run.spec
    if run.stop:
        stop = getattr(run, "_stop_table", None)
        if stop is None:
            stop = run._stop_table = _Tokens(sorted(run.stop), spec.char_class)
        keep = stop.lookup(codes, starts, ends) < 0
        starts, ends, doc = starts[keep], ends[keep], doc[keep]
    if getattr(run, "compiled", False):
        got = _compiled_features(spec, codes, starts, ends, doc)
        if got is not None:
            return got
    buf, off = _utf8(codes)
    space = buf.size  # a space byte appended: the joint between n-gram tokens
    buf = np.concatenate((buf, np.frombuffer(b" ", dtype=np.uint8)))
    b0, b1 = off[starts], off[ends]
    lo, hi = spec.ngram_range
    m = starts.size
    hashes, docs = [], []
    for n in range(lo, hi + 1):
        k = m - n + 1
        if k <= 0:
            continue
        ok = doc[:k] == doc[n - 1:]
        if n == 1:
            hashes.append(murmur3_32(buf, b0, b1 - b0))
            docs.append(doc)
            continue
        first = np.flatnonzero(ok)
        # the n-gram's pieces: token, space, token, ... gathered into one byte buffer
        piece_s = np.empty((first.size, 2 * n - 1), dtype=np.int64)
        piece_l = np.empty_like(piece_s)
        for i in range(n):
            piece_s[:, 2 * i] = b0[first + i]
            piece_l[:, 2 * i] = b1[first + i] - b0[first + i]
            if i < n - 1:
                piece_s[:, 2 * i + 1] = space
                piece_l[:, 2 * i + 1] = 1
        pos, _ = _ranges(piece_s.reshape(-1), piece_l.reshape(-1))
        gram_buf = buf[pos]
        glen = piece_l.sum(axis=1)
        gstart = np.cumsum(glen) - glen
        hashes.append(murmur3_32(gram_buf, gstart, glen))
        docs.append(doc[first])
    h = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.int32)
    fdoc = np.concatenate(docs) if docs else np.zeros(0, dtype=np.int64)
    h64 = h.astype(np.int64)
    col = np.abs(h64) % spec.n_features
    sign = np.where(h64 < 0, -1, 1) if spec.alternate_sign else np.ones(h64.size, np.int64)
    return col, sign, fdoc
