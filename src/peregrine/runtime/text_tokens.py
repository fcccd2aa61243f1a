"""The text boundary's token machinery (runtime/text.py describes the whole): the code-point
tables, the polynomial run hashes and the verified token table."""

from __future__ import annotations

import functools
import re

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
    """Polynomial hash sum c_{s+j} B^j (mod 2**64) of each run [s, e) of ``codes``."""
    n = codes.size + 1
    p, q = _powers(1 << max(16, (n - 1).bit_length()), base)  # cached per power of two
    with np.errstate(over="ignore"):
        prefix = np.zeros(n, dtype=np.uint64)
        np.cumsum(codes.astype(np.uint64) * p[:codes.size], out=prefix[1:])
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
        self.base, self.hashes, self.ids = base, h[order], order.astype(np.int64)

    def lookup(self, codes: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Id of each run's token among ``tokens``, -1 when it is none of them."""
        if not self.size or not starts.size:
            return np.full(starts.size, -1, dtype=np.int64)
        h = _hash_runs(codes, starts, ends, self.base)
        at = np.minimum(np.searchsorted(self.hashes, h), self.size - 1)
        hit = self.hashes[at] == h
        ids = np.where(hit, self.ids[at], -1)
        lens = ends - starts
        cand = np.flatnonzero(hit)
        same_len = self.lens[ids[cand]] == lens[cand]
        ids[cand[~same_len]] = -1
        cand = cand[same_len]
        pos, owner = _ranges(starts[cand], lens[cand])
        ref = pos - starts[cand][owner] + self.starts[ids[cand]][owner]
        differs = codes[pos] != self.codes[ref]
        if differs.any():  # a hash collision: the run is not the term it hashed to
            ids[cand[np.unique(owner[differs])]] = -1
        return ids
