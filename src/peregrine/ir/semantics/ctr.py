"""CTR_LOOKUP: CatBoost's categorical features as derived columns, computed in one step
(frontends/catboost_ctr.py builds it; the native backend runs it as one row kernel,
backends/native/ctr_kernel.py).

Every derived column (a one-hot indicator, a CTR value) is read off a table over a *key* of the
row, and keys are integers made of *elements*:

* a code element: the position + 1 of the row's category hash (the value of input column
  ``hash_columns[e]``) among the element's ``hashes`` (segment e of the flat array, split by
  ``hash_offsets``), 0 for any other value (an unseen category, NaN);
* a bit element: ``x > bit_thresholds[b]`` on input column ``bit_columns[b]``, or
  ``bit_nan[b]`` where x is NaN (CatBoost's float32 comparison of a binarized float feature
  against its border, the threshold chosen so the float64 comparison decides the same:
  ``catboost_ctr.gt_float32_threshold``).

Elements are numbered codes first, then bits. Projection p's key is the mixed-radix number
``sum(element[key_elements[k]] * key_weights[k])`` over its segment k of ``key_offsets``
(integers below 2**52, exact in int64); its entry is the position + 1 of that number among
the projection's ascending ``keys`` (segment p of ``keys_offsets``), 0 when absent. Derived column d is ``values[value_offsets[d] + entry]`` of projection
``sources[d]`` (its segment holds the unknown value first, then one value per key).

The output is float32: the input as CatBoost's evaluator reads features (every value cast to
float32; the categorical columns' hashes are not exact there, and nothing reads them after this
op), then the derived columns (CTR values are float32 in CatBoost: ``TModelCtr::Calc``).
float32 halves what the op writes and the forest reads: at 100K rows of the benchmark model the
native kernel plus the tree walk took 20 ms less (of ~110 ms, one thread).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.ir.ops import Op
from peregrine.ir.semantics.base import Attrs, bad, define, f64
from peregrine.options import CompileOptions

_INT_ATTRS = ("hash_columns", "hash_offsets", "bit_columns", "bit_nan", "key_elements",
              "key_weights", "key_offsets", "keys", "keys_offsets", "sources", "value_offsets")
KEY_LIMIT = 1 << 52  # keys are exact integers in float64 too (the torch lowering's searches)


def _segments(n: Any, key: str, offsets: np.ndarray, size: int, count: int) -> None:
    if offsets.shape != (count + 1,) or offsets[0] != 0 or offsets[-1] != size or \
            np.any(np.diff(offsets) < 0):
        raise bad(n, f"{key} does not split {size} entries into {count} segments")


@define(Op.CTR_LOOKUP)
class CtrLookup(Attrs):
    """x -> [x, derived columns]: CatBoost's one-hot and CTR columns, each read off a table
    over an integer key (a category code or a combination's mixed-radix tuple number) of the
    row, float32 (see ir/semantics/ctr.py)."""

    hash_columns: Any
    hashes: Any
    hash_offsets: Any
    bit_columns: Any
    bit_thresholds: Any
    bit_nan: Any
    key_elements: Any
    key_weights: Any
    key_offsets: Any
    keys: Any
    keys_offsets: Any
    sources: Any
    values: Any
    value_offsets: Any

    def __post_init__(self) -> None:
        for name in _INT_ATTRS:  # one dtype whatever the builder or the artifact gave
            object.__setattr__(self, name, np.ascontiguousarray(
                np.asarray(getattr(self, name)).reshape(-1), dtype=np.int64))
        for name in ("hashes", "bit_thresholds", "values"):
            object.__setattr__(self, name, np.ascontiguousarray(
                np.asarray(getattr(self, name)).reshape(-1), dtype=np.float64))

    @property
    def n_codes(self) -> int:
        return int(self.hash_columns.size)

    @property
    def n_elements(self) -> int:
        return self.n_codes + int(self.bit_columns.size)

    @property
    def n_projections(self) -> int:
        return int(self.key_offsets.size) - 1

    def check(self, n: Any, ins: list) -> None:
        super().check(n, ins)
        width = ins[0].width
        c, b, p, d = self.n_codes, self.bit_columns.size, self.n_projections, self.sources.size
        for key, cols in (("hash_columns", self.hash_columns), ("bit_columns", self.bit_columns)):
            if cols.size and (cols.min() < 0 or (width is not None and cols.max() >= width)):
                raise bad(n, f"{key} names a column outside the input")
        _segments(n, "hash_offsets", self.hash_offsets, self.hashes.size, c)
        for e in range(c):
            seg = self.hashes[self.hash_offsets[e]:self.hash_offsets[e + 1]]
            if np.isnan(seg).any() or np.any(np.diff(seg) <= 0):
                raise bad(n, f"hashes of code element {e} are not strictly ascending")
        if self.bit_thresholds.shape != (b,) or self.bit_nan.shape != (b,) or \
                np.any((self.bit_nan != 0) & (self.bit_nan != 1)):
            raise bad(n, "bit_thresholds and bit_nan (0 or 1) need one entry per bit column")
        if p < 0:
            raise bad(n, "key_offsets is empty")
        _segments(n, "key_offsets", self.key_offsets, self.key_elements.size, p)
        if np.any(np.diff(self.key_offsets) == 0):
            raise bad(n, "a projection has no key element")
        if self.key_weights.shape != self.key_elements.shape:
            raise bad(n, "key_weights need one weight per key element")
        if self.key_elements.size and (self.key_elements.min() < 0 or
                                       self.key_elements.max() >= self.n_elements):
            raise bad(n, "key_elements names no element")
        if np.any(self.key_weights < 0) or np.any(self.key_weights >= KEY_LIMIT) or \
                self.max_keys().max(initial=0) >= KEY_LIMIT:
            raise bad(n, f"a projection's keys reach past {KEY_LIMIT}")
        _segments(n, "keys_offsets", self.keys_offsets, self.keys.size, p)
        for q in range(p):
            if np.any(np.diff(self.keys[self.keys_offsets[q]:self.keys_offsets[q + 1]]) <= 0):
                raise bad(n, f"keys of projection {q} are not strictly ascending")
        if d and (self.sources.min() < 0 or self.sources.max() >= p):
            raise bad(n, "sources names no projection")
        _segments(n, "value_offsets", self.value_offsets, self.values.size, d)
        want = 1 + np.diff(self.keys_offsets)[self.sources] if d else np.zeros(0)
        if not np.array_equal(np.diff(self.value_offsets), want):
            raise bad(n, "each derived column needs 1 + (its projection's keys) values")

    def max_keys(self) -> np.ndarray:
        """The largest key each projection can form (codes up to their category count)."""
        top = np.concatenate([np.diff(self.hash_offsets), np.ones(self.bit_columns.size,
                                                                  np.int64)])
        if not self.key_elements.size:
            return np.zeros(self.n_projections, np.int64)
        # (checked first: weights below 2**52 and codes below 2**31 keep products in int64 only
        # while they are; the float64 sum says whether the exact one could pass the limit)
        prod = top[self.key_elements].astype(np.float64) * self.key_weights
        return np.add.reduceat(prod, self.key_offsets[:-1])

    def infer_width(self, widths: list) -> int | None:
        return None if widths[0] is None else widths[0] + int(self.sources.size)

    def elements(self, x: np.ndarray) -> np.ndarray:
        """(n, codes + bits) int64: every element of every row."""
        out = np.empty((x.shape[0], self.n_elements), dtype=np.int64)
        for e, col in enumerate(self.hash_columns):
            seg = self.hashes[self.hash_offsets[e]:self.hash_offsets[e + 1]]
            v = x[:, col]
            pos = np.searchsorted(seg, v)
            hit = seg[np.minimum(pos, seg.size - 1)] == v if seg.size else np.zeros(len(v), bool)
            out[:, e] = np.where(hit, pos + 1, 0)
        for b, col in enumerate(self.bit_columns):
            v = x[:, col]
            out[:, self.n_codes + b] = np.where(np.isnan(v), self.bit_nan[b],
                                                v > self.bit_thresholds[b])
        return out

    def entries(self, elements: np.ndarray) -> np.ndarray:
        """(n, projections) int64: each row's entry in each projection's table (0: absent)."""
        out = np.zeros((elements.shape[0], self.n_projections), dtype=np.int64)
        for q in range(self.n_projections):
            ks = slice(self.key_offsets[q], self.key_offsets[q + 1])
            number = elements[:, self.key_elements[ks]] @ self.key_weights[ks]
            keys = self.keys[self.keys_offsets[q]:self.keys_offsets[q + 1]]
            if not keys.size:
                continue
            pos = np.searchsorted(keys, number)
            hit = keys[np.minimum(pos, keys.size - 1)] == number
            out[:, q] = np.where(hit, pos + 1, 0)
        return out

    def rule(self, node: Any, ins: list, options: CompileOptions) -> np.ndarray:
        x = f64(ins[0])
        n, w = x.shape
        out = np.empty((n, w + self.sources.size), dtype=np.float32)
        out[:, :w] = x
        entry = self.entries(self.elements(x))
        for d, q in enumerate(self.sources):
            out[:, w + d] = self.values[self.value_offsets[d] + entry[:, q]]
        return out

    def float32_out(self, ins_float32: list[bool]) -> bool:
        return True
