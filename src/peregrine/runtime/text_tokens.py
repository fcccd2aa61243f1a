"""The text boundary's token machinery (runtime/text.py describes the whole): the code-point
tables, the polynomial run hashes and the verified token table."""

from __future__ import annotations

import functools
import re
import unicodedata

import numpy as np

_N_CODES = 0x110000
_SEP = " "
_BASES = (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9)  # odd: invertible


@functools.cache
def _class_table(char_class: str) -> np.ndarray:
    """bool per code point: a token character. "word" is taken from ``re`` itself (the
    ``\\w`` of str patterns), so the table is Python's definition, not a re-implementation."""
    every = "".join(map(chr, range(_N_CODES)))
    table = np.zeros(_N_CODES, dtype=bool)
    if char_class == "word":
        table[[m.start() for m in re.finditer(r"\w", every)]] = True
    else:
        table[:] = True
        table[[m.start() for m in re.finditer(r"\s", every)]] = False
    return table


@functools.cache
def _lower_growth() -> tuple[np.ndarray, np.ndarray]:
    """Code points whose ``lower()`` is not one code point, and how many it adds (U+0130)."""
    grow = [(c, len(chr(c).lower()) - 1) for c in range(_N_CODES) if len(chr(c).lower()) != 1]
    return (np.array([c for c, _ in grow], dtype=np.uint32),
            np.array([g for _, g in grow], dtype=np.int64))


def lower_documents(joined: str, lens: np.ndarray) -> tuple[str, np.ndarray]:
    """``joined.lower()`` (documents joined by ``_SEP``) and each document's length after it:
    lower() lengthens a few code points (U+0130 -> "i\u0307"), and never shortens one, so the
    lengths are recounted only when the text grew."""
    lowered = joined.lower()
    if len(lowered) == len(joined):
        return lowered, lens
    codes0 = _codes(joined)
    grow_cp, grow_by = _lower_growth()
    hit = np.isin(codes0, grow_cp)
    extra = np.zeros(codes0.size, dtype=np.int64)
    extra[hit] = grow_by[np.searchsorted(grow_cp, codes0[hit])]
    ends0 = np.cumsum(lens + 1) - 1
    csum = np.concatenate(([0], np.cumsum(extra)))
    return lowered, lens + csum[ends0] - csum[ends0 - lens]


_DOC_SEP = "\uffff"  # a noncharacter: uncased, not case-ignorable, no decomposition, ccc 0


@functools.cache
def _combining() -> np.ndarray:
    """bool per code point: ``unicodedata.combining(c) != 0`` (strip_accents_unicode drops
    these)."""
    ccc = np.fromiter(map(unicodedata.combining, map(chr, range(_N_CODES))), dtype=np.int32,
                      count=_N_CODES)
    return ccc != 0


def _strip(text: str, lowercase: bool, strip: str, keep: int = -1) -> np.ndarray:
    """Code points of sklearn's ``_preprocess``: ``lower()``, then strip_accents_ascii
    (NFKD, non-ASCII dropped) or strip_accents_unicode (NFKD, combining marks dropped; its
    shortcut for ASCII text is the same result). Code point ``keep`` is never dropped."""
    if lowercase:
        text = text.lower()
    codes = _codes(unicodedata.normalize("NFKD", text))
    drop = codes >= 128 if strip == "ascii" else _combining()[codes]
    return codes[~drop | (codes == keep)]


def stripped_codes(docs: list[str], lowercase: bool,
                   strip: str) -> tuple[np.ndarray, np.ndarray]:
    """(code points of the preprocessed documents joined by ``_SEP``, each one's length) for
    ``strip_accents``. The documents are joined by U+FFFF and preprocessed at once: NFKD
    neither decomposes it nor reorders marks across it (a starter), lower() leaves it and
    Final_Sigma sees it as a boundary, as a space; the separators then give the lengths and
    become ``_SEP``. A document holding U+FFFF itself is preprocessed on its own."""
    sep = ord(_SEP)
    joined = _DOC_SEP.join(docs)
    if joined.count(_DOC_SEP) != len(docs) - 1:
        parts = [_strip(d, lowercase, strip) for d in docs]
        lens = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        glue = np.array([sep], dtype=np.uint32)
        return np.concatenate([x for p in parts for x in (glue, p)][1:]), lens
    codes = _strip(joined, lowercase, strip, keep=ord(_DOC_SEP))
    at = np.flatnonzero(codes == ord(_DOC_SEP))
    lens = np.diff(np.concatenate(([-1], at, [codes.size]))) - 1
    codes[at] = sep
    return codes, lens


def _codes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


# --------------------------------------------------------------------------- tokens --


@functools.lru_cache(maxsize=64)
def _powers(n: int, base: int) -> tuple[np.ndarray, np.ndarray]:
    """B**j and B**-j mod 2**64 for j < n (cumulative products wrap modulo 2**64)."""
    inv = pow(base, -1, 1 << 64)
    with np.errstate(over="ignore"):
        p = np.cumprod(np.full(n, base, dtype=np.uint64))
        q = np.cumprod(np.full(n, inv, dtype=np.uint64))
    p = np.concatenate(([np.uint64(1)], p[:-1]))
    q = np.concatenate(([np.uint64(1)], q[:-1]))
    return p, q


def _hash_runs(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray,
               base: int) -> np.ndarray:
    """Polynomial hash sum (c_{s+j} + 1) B^j (mod 2**64) of each run [s, e) of ``codes``
    (the + 1: a run and the same run with NUL characters after it hash apart, so a vocabulary
    holding "ab" and "ab\0" has distinct hashes; with c alone they collide under every base)."""
    n = codes.size + 1
    p, q = _powers(1 << max(16, (n - 1).bit_length()), base)  # cached per power of two
    with np.errstate(over="ignore"):
        prefix = np.zeros(n, dtype=np.uint64)
        np.cumsum((codes.astype(np.uint64) + np.uint64(1)) * p[:codes.size], out=prefix[1:])
        return (prefix[ends] - prefix[starts]) * q[starts]


def _ranges(starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions, owner): the concatenation of ranges [s, s + l) and each position's range."""
    total = int(lens.sum())
    owner = np.repeat(np.arange(lens.size), lens)
    first = np.cumsum(lens) - lens
    pos = np.arange(total, dtype=np.int64) - first[owner] + starts[owner]
    return pos, owner


class _Tokens:
    """The vocabulary's tokens (and stop words) as a hash table verified by string compare."""

    def __init__(self, tokens: list[str], char_class: str) -> None:
        self.size = len(tokens)
        joined = _SEP.join(tokens)
        codes = _codes(joined)
        lens = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
        starts = np.cumsum(lens + 1) - lens - 1
        self.codes, self.starts, self.lens = codes, starts, lens
        for base in _BASES:  # a base under which the tokens' hashes are distinct
            h = _hash_runs(codes, starts, starts + lens, base)
            order = np.argsort(h, kind="stable")
            if np.all(np.diff(h[order]) != 0):
                break
        else:  # three 64-bit bases colliding on one vocabulary: not a realistic input
            raise RuntimeError("text: vocabulary tokens collide under every hash base")
        self.base = base
        self.table = HashTable(h, np.arange(h.size, dtype=np.int64))

    def lookup(self, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Id of each run's token among ``tokens``, -1 when it is none of them."""
        if not self.size or not starts.size:
            return np.full(starts.size, -1, dtype=np.int64)
        ids = self.table.get(_hash_runs(codes, starts, ends, self.base))
        lens = ends - starts
        cand = np.flatnonzero(ids >= 0)
        same_len = self.lens[ids[cand]] == lens[cand]
        ids[cand[~same_len]] = -1
        cand = cand[same_len]
        pos, owner = _ranges(starts[cand], lens[cand])
        ref = pos - starts[cand][owner] + self.starts[ids[cand]][owner]
        differs = codes[pos] != self.codes[ref]
        if differs.any():  # a hash collision: the run is not the term it hashed to
            ids[cand[np.unique(owner[differs])]] = -1
        return ids


_MIX = np.uint64(0x9E3779B97F4A7C15)


class HashTable:
    """Distinct uint64 keys -> int64 values: open addressing with linear probing at a load of
    at most 1/4, looked up for a whole array of queries at once (one gather per probe round;
    most queries resolve in the first). Replaces a binary search whose ~19 dependent cache
    misses per query dominated the lookup of 10^5-10^6-term vocabularies."""

    def __init__(self, keys: np.ndarray, values: np.ndarray) -> None:
        keys = np.asarray(keys).view(np.uint64)
        bits = max(4, (4 * max(keys.size, 1) - 1).bit_length())
        self.shift, self.mask = np.uint64(64 - bits), (1 << bits) - 1
        self.slot_key = np.zeros(1 << bits, dtype=np.uint64)
        self.slot_val = np.full(1 << bits, -1, dtype=np.int64)
        pos = self._home(keys)
        pending = np.arange(keys.size)
        while pending.size:
            p = pos[pending]
            free = self.slot_val[p] < 0
            cand, at = pending[free], p[free]
            _, first = np.unique(at, return_index=True)  # one key per free slot per round
            win = cand[first]
            self.slot_key[pos[win]] = keys[win]
            self.slot_val[pos[win]] = values[win]
            placed = np.zeros(keys.size, dtype=bool)
            placed[win] = True
            pending = pending[~placed[pending]]
            pos[pending] = (pos[pending] + 1) & self.mask

    def _home(self, keys: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return ((keys * _MIX) >> self.shift).astype(np.int64)

    def get(self, queries: np.ndarray) -> np.ndarray:
        """The value of each query, -1 where it is not a key."""
        q = np.asarray(queries).view(np.uint64)
        out = np.full(q.size, -1, dtype=np.int64)
        pos = self._home(q)
        v = self.slot_val[pos]
        hit = (v >= 0) & (self.slot_key[pos] == q)
        out[hit] = v[hit]
        pending = np.flatnonzero((v >= 0) & ~hit)
        while pending.size:
            p = (pos[pending] + 1) & self.mask
            pos[pending] = p
            v = self.slot_val[p]
            hit = (v >= 0) & (self.slot_key[p] == q[pending])
            out[pending[hit]] = v[hit]
            pending = pending[(v >= 0) & ~hit]
        return out
