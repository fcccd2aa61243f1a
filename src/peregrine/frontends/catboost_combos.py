"""The tuples behind CatBoost's combination-CTR table keys.

CatBoost keys a CTR table by a hash of the projection's elements (catboost/libs/model/hash.h,
``CalcHash(a, b) = M * (a + M * b)`` mod 2**64, M = 0x4906ba494954cb65; the chain starts at
0): first each categorical feature's ``(ui64)(i32)`` category hash, in the projection's order,
then each binarized element as 0/1 (a float feature's ``x > border``, a one-hot element's
``hash == value``). The model stores only the 64-bit keys, no strings and no tuples, so a
compiled program cannot rebuild a key from a row without 64-bit integer arithmetic.
Peregrine instead recovers, once when compiling, the tuple each key stands for, and the graph
matches rows by tuple (``catboost_ctr.py``).

Each step of the chain is invertible given its element (M is odd):
``prev = h * M**-1 - M * v``. The first category is recovered for free, because
``h_1 = M**2 * v_1`` must give a sign-extended 32-bit ``v_1``; a wrong guess elsewhere in the
chain lands there with probability 2**-32. So a key decodes when the category sets of all but
one of its features are known: bits and known features are peeled off the end, known prefixes
are chained from the start, and the one unknown position is solved where the two meet,
checked by that 32-bit range. Sets are learned table by table (a single-feature table gives
its feature's set outright; CatBoost fills every table from the whole learning set, so each
table holds every category of its features that training saw), until every table decodes.

Every tuple found hashes to its key, so it maps exactly as CatBoost's lookup does; a category
Peregrine never learned could only reach a stored key by a 64-bit collision, where CatBoost
would read that entry and Peregrine reads "unknown".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAGIC = 0x4906BA494954CB65  # CalcHash's multiplier (catboost/libs/model/hash.h)
_M64 = (1 << 64) - 1
_INV = pow(MAGIC, -1, 1 << 64)
_U = np.uint64
# candidate pairs tried at the meeting position, at most; a larger search is refused rather
# than left to run for minutes
SEARCH_LIMIT = 1 << 26


@dataclass(frozen=True)
class Projection:
    """A combination: its categorical features (hash order) and its number of 0/1 elements."""

    cats: tuple[int, ...]
    n_bits: int


def _u64(values) -> np.ndarray:
    """Signed category hashes as CatBoost's ``(ui64)(i32)`` (sign-extended) words."""
    return np.asarray(values, dtype=np.int64).astype(_U)


def chain(h: np.ndarray, v: np.ndarray) -> np.ndarray:
    """CalcHash(h, v), element-wise (uint64 arithmetic wraps mod 2**64)."""
    with np.errstate(over="ignore"):
        return _U(MAGIC) * (h + _U(MAGIC) * v)


def unchain(h: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The h' with CalcHash(h', v) == h."""
    with np.errstate(over="ignore"):
        return h * _U(_INV) - _U(MAGIC) * v


def key_of(cats: list[int], bits: list[int]) -> int:
    """The table key of one tuple (signed category hashes, then bits), as CatBoost computes it."""
    h = 0
    for v in [int(c) & _M64 for c in cats] + [int(b) for b in bits]:
        h = (MAGIC * ((h + MAGIC * v) & _M64)) & _M64
    return h


def _int32(w: np.ndarray) -> np.ndarray:
    """True where a uint64 word is a sign-extended int32."""
    s = w.astype(np.int64)
    return (s >= -(1 << 31)) & (s < (1 << 31))


def decode(proj: Projection, keys: np.ndarray, known: dict[int, np.ndarray]
           ) -> np.ndarray | None:
    """Rows ``[key index, category hashes (signed)..., bits...]`` of every tuple found whose
    chain gives a key, or None when more than one of the projection's features has no known
    set. Raises ValueError when the search would pass SEARCH_LIMIT."""
    k, m = len(proj.cats), proj.n_bits
    unknown = [j for j, f in enumerate(proj.cats) if f not in known]
    if len(unknown) > 1:
        return None
    sizes = [len(known.get(f, ())) for f in proj.cats]
    n_cand = len(keys) << m
    if unknown:
        u = unknown[0]
    else:  # the cheapest meeting point: prefixes enumerated once, suffixes per key
        u = min(range(k), key=lambda j: (int(np.prod(sizes[:j])) *
                                          n_cand * int(np.prod(sizes[j + 1:]))))
    cost = int(np.prod(sizes[:u])) * n_cand * int(np.prod(sizes[u + 1:]))
    if cost > SEARCH_LIMIT:
        raise ValueError(f"recovering {len(keys)} keys over {k} categorical features "
                         f"({' x '.join(map(str, sizes))} known categories) needs {cost} "
                         f"trials, more than {SEARCH_LIMIT}")
    # candidates after peeling the bits off the end: one per (key, bit pattern)
    idx = np.repeat(np.arange(len(keys)), 1 << m)
    pattern = np.tile(np.arange(1 << m), len(keys))
    bits = ((pattern[:, None] >> np.arange(m)[None, :]) & 1).astype(np.int64)  # bit i: ith
    h = np.asarray(keys, dtype=_U)[idx]
    for i in reversed(range(m)):
        h = unchain(h, bits[:, i].astype(_U))
    # peel the known features after u off the end
    suffix = np.zeros((len(h), 0), dtype=np.int64)
    for j in reversed(range(u + 1, k)):
        vals = np.asarray(known[proj.cats[j]], dtype=np.int64)
        rep = len(vals)
        h = unchain(np.repeat(h, rep), np.tile(_u64(vals), len(idx)))
        idx, bits = np.repeat(idx, rep), np.repeat(bits, rep, axis=0)
        suffix = np.column_stack([np.tile(vals, len(suffix)), np.repeat(suffix, rep, axis=0)])
    # chain the known features before u from 0
    prefix_h = np.zeros(1, dtype=_U)
    prefix = np.zeros((1, 0), dtype=np.int64)
    for j in range(u):
        vals = np.asarray(known[proj.cats[j]], dtype=np.int64)
        prefix_h = chain(np.repeat(prefix_h, len(vals)), np.tile(_u64(vals), len(prefix_h)))
        prefix = np.column_stack([np.repeat(prefix, len(vals), axis=0),
                                  np.tile(vals, len(prefix))])
    # meet: h = CalcHash(p, v_u) for a prefix hash p, so v_u = (h * M**-1 - p) * M**-1
    rows = []
    base = unchain(h, np.zeros_like(h))
    for p in range(len(prefix_h)):
        with np.errstate(over="ignore"):
            v = (base - prefix_h[p]) * _U(_INV)
        hit = np.flatnonzero(_int32(v))
        if hit.size:
            rows.append(np.column_stack([
                idx[hit], np.repeat(prefix[p:p + 1], hit.size, axis=0),
                v[hit].astype(np.int64), suffix[hit], bits[hit]]))
    if not rows:
        return np.zeros((0, 1 + k + m), dtype=np.int64)
    return np.concatenate(rows)


def decode_all(projections: dict[str, Projection], keys: dict[str, np.ndarray]
               ) -> dict[str, np.ndarray]:
    """Decode every table, learning each feature's categories from the tables decoded before;
    a table left undecodable (or a key no tuple explains) raises ValueError naming it."""
    known: dict[int, set[int]] = {}
    done: dict[str, np.ndarray] = {}
    while len(done) < len(projections):
        progress = False
        for name, proj in projections.items():
            if name in done:
                continue
            rows = decode(proj, keys[name], {f: np.array(sorted(s), dtype=np.int64)
                                             for f, s in known.items()})
            if rows is None:
                continue
            missing = np.setdiff1d(np.arange(len(keys[name])), rows[:, 0])
            if missing.size:
                raise ValueError(f"{missing.size} of the {len(keys[name])} keys of {name} "
                                 "match no tuple of the categories the model's tables hold")
            for j, f in enumerate(proj.cats):
                known.setdefault(f, set()).update(int(v) for v in np.unique(rows[:, 1 + j]))
            done[name] = rows
            progress = True
        if not progress:
            left = [n for n in projections if n not in done]
            raise ValueError(f"no table gives the categories of {left[0]} (more than one of "
                             "its features appears in no decodable table)")
    return done
