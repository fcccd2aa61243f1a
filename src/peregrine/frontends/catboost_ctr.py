"""CatBoost categorical features as derived numeric columns of the forest's input.

The runtime hashes every categorical input column with CatBoost's ``CalcCatFeatureHash``
(``ModelSpec.hash_columns``, runtime/cat_hash.py), so the graph sees uint32 hashes (exact in
float64). Each split on a categorical feature reads one derived column, appended after the
inputs, so the forest itself only has numeric ``x > border`` splits:

* ``OneHotFeature`` (``one_hot_max_size``): 1.0 iff the hash equals the split's value (the
  JSON holds it as a signed int32), split at 0.5;
* ``OnlineCtr``: the CTR value, looked up in the model's ``ctr_data`` table, split at its
  float32 border. CatBoost's evaluator (catboost/libs/model/static_ctr_provider.cpp and the
  Python export's ``calc_ctrs``) keys the table by the projection's chained ``CalcHash``
  (catboost_combos.py). The value is ``TModelCtr::Calc(good, total) = ((good + prior_num) /
  (total + prior_denom) + shift) * scale`` in float32, with (good, total) per CTR type:
  Borders (binary) ``(c1, c0 + c1)``, Borders (k classes) ``(sum c[b+1:], sum c)``, Buckets
  ``(c[b], sum c)``, Counter / FeatureFreq ``(count, counter_denominator)``,
  BinarizedTargetMeanValue / FloatTargetMeanValue ``(sum, count)``; a key absent from the
  table (an unseen category or combination) gives ``Calc(0, 0)``. The JSON's ``hash_map``
  lists the table's buckets ``[key, counts...]``, empty buckets keyed 2**64 - 1 (skipped).

A single-feature projection keys its table by ``CalcHash(0, (ui64)(i32)hash)`` =
``M * (M * hash)``, inverted (M is odd) to the category hash. A combination (several
categorical features, or categorical features with binarized float features ``x > border`` or
one-hot elements) cannot be keyed by one column, so its keys are decoded into tuples when
compiling (catboost_combos.py) and numbered in mixed radix: each categorical element a code
(1..n for the categories the tables hold, ascending hash order; 0 for any other), each
binarized element a bit (CatBoost's float32 comparison and NaN rule).

Every derived column comes from one CTR_LOOKUP node (ir/semantics/ctr.py; ``add_columns``):
each element and each key computed once per row, each column read off its key's table. On the
native backend it is one row kernel (backends/native/ctr_kernel.py). History, 200-tree default
model, 100K rows, native: CATEGORY_MAP (a comparison per key) 11.7 s; one INTERP per column
3.4 s; one INTERP node with dense tables plus SELECT/LINEAR/CONCAT between them ~1.3 s (the
NumPy passes between kernels were the cost); CTR_LOOKUP's kernel: docs/frontends/catboost.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from peregrine.frontends.base import unsupported
from peregrine.frontends.catboost_combos import Projection, decode_all
from peregrine.ir import GraphBuilder, Op

CATBOOST_HASH = "catboost-city64-low32"  # runtime/cat_hash.py's rule name
_MAGIC = 0x4906BA494954CB65  # CalcHash's multiplier (catboost/libs/model/hash.h)
_M64 = (1 << 64) - 1
_EMPTY = _M64  # key of an empty bucket in the exported hash map
_INV_MAGIC2 = pow(_MAGIC * _MAGIC, -1, 1 << 64)
_COUNT_TYPES = ("Borders", "Buckets", "Counter", "FeatureFreq", "BinarizedTargetMeanValue",
                "FloatTargetMeanValue")
_CAT = "cat_feature_value"
_FLOAT = "float_feature"
_ONE_HOT = "cat_feature_exact_value"  # a one-hot value in a combination


def _uint32(value: int) -> float:
    return float(int(value) & 0xFFFFFFFF)


def gt_float32_threshold(border: float) -> float:
    """t with ``x > t`` (float64 x) iff ``float32(x) > float32(border)``: CatBoost casts
    features to float32. float32(x) > b iff float32(x) >= next(b), i.e. x at or past the
    midpoint m of b and next(b) when that tie rounds up (to even), past m when it rounds down."""
    b = np.float32(border)
    with np.errstate(over="ignore"):
        nxt = np.nextafter(b, np.float32(np.inf))
        up = bool(np.float32(m := _midpoint(b, nxt)) == nxt)
    return float(np.nextafter(m, -np.inf)) if up else m


def _midpoint(b: np.float32, nxt: np.float32) -> float:
    """The float64 halfway between float32 b and its successor (exact in float64)."""
    if np.isinf(nxt):  # b is the largest float32: x rounds to inf from max + half an ulp on
        return float(b) + (float(b) - float(np.nextafter(b, np.float32(0)))) / 2
    return (float(b) + float(nxt)) / 2


@dataclass
class _Combination:
    """One combination table as the graph sees it: each row's tuple numbered in mixed radix."""

    # categorical elements: (input column, category hashes as uint32 floats, radix weight);
    # a one-hot element is one with the single category it tests (code 1 iff equal)
    slots: list[tuple[int, np.ndarray, float]]
    bits: list[tuple[int, float, bool, float]]  # float: (column, border, NaN true, weight)
    numbers: np.ndarray  # the number of each decoded tuple
    entry: np.ndarray  # the table entry of each decoded tuple
    size: int  # how many numbers the radix gives (every number is below it)


class CategoricalColumns:
    """The derived columns a model's splits read: one-hot indicators and CTR values."""

    def __init__(self, model: Any, raw: dict, n_inputs: int) -> None:
        info = raw["features_info"]
        self.model, self.n_inputs = model, n_inputs
        self.cat_column = {int(f["feature_index"]): int(f["flat_feature_index"])
                           for f in info.get("categorical_features") or []}
        floats = info.get("float_features") or []
        self.float_column = {int(f["feature_index"]): int(f["flat_feature_index"])
                             for f in floats}
        self.nan_true = {int(f["feature_index"]): f.get("nan_value_treatment") == "AsTrue"
                         for f in floats}
        self.ctrs = info.get("ctrs") or []
        self.ctr_data = raw.get("ctr_data") or {}
        # ("map", column, categories, values, unknown) or ("combo", combination, values,
        # unknown), in the order the forest numbers them after the inputs
        self.derived: list[tuple] = []
        self._index: dict[tuple, int] = {}
        self._combos: dict[str, _Combination] | None = None
        # split_index numbers the binary features: float borders, one-hot values, CTR
        # borders, in features_info order (the evaluator's binarization order)
        self._ctr_of_split: dict[int, tuple[int, float]] = {}
        k = sum(len(f.get("borders") or []) for f in floats)
        k += sum(len(f.get("values") or []) for f in info.get("categorical_features") or [])
        for c, ctr in enumerate(self.ctrs):
            for border in ctr.get("borders") or []:
                self._ctr_of_split[k] = (c, float(border))
                k += 1

    def hash_columns(self) -> dict[int, str]:
        return {col: CATBOOST_HASH for col in sorted(self.cat_column.values())}

    def _column(self, key: tuple, make) -> int:
        if key not in self._index:
            entry = make()
            self._index[key] = len(self.derived)
            self.derived.append(entry)
        return self.n_inputs + self._index[key]

    def split_column(self, split: dict) -> tuple[int, float]:
        """(forest input column, border) of a OneHotFeature or OnlineCtr split."""
        if split["split_type"] == "OneHotFeature":
            f, value = int(split["cat_feature_index"]), int(split["value"])
            col = self.cat_column[f]
            return self._column(("onehot", f, value), lambda: (
                "map", col, np.array([_uint32(value)]), np.array([1.0]), 0.0)), 0.5
        at = self._ctr_of_split.get(int(split.get("split_index", -1)))
        if at is None or np.float32(at[1]) != np.float32(split["border"]):
            raise unsupported(self.model, f"an OnlineCtr split whose split_index "
                              f"{split.get('split_index')} names no CTR border",
                              "CTR splits numbered as in features_info.ctrs")
        c = at[0]
        return self._column(("ctr", c), lambda: self._ctr_column(self.ctrs[c])), at[1]

    def _table(self, ctr: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(keys as uint64, good, total) of every stored entry of the CTR's table."""
        kind, name = ctr.get("ctr_type"), ctr.get("identifier", ctr.get("ctr_type"))
        if kind not in _COUNT_TYPES:
            raise unsupported(self.model, f"CTR type {kind!r}", ", ".join(_COUNT_TYPES))
        table = self.ctr_data.get(ctr["identifier"])
        if table is None:
            raise unsupported(self.model, f"a CTR without its ctr_data table ({name})")
        stride = int(table["hash_stride"])
        flat = table["hash_map"]
        rows = [flat[i:i + stride] for i in range(0, len(flat), stride)]
        rows = [r for r in rows if int(r[0]) != _EMPTY]
        b = int(ctr.get("target_border_idx", 0))
        good, total = [], []
        for r in rows:
            counts = [float(v) for v in r[1:]]
            if kind in ("Counter", "FeatureFreq"):
                g, t = counts[0], float(table["counter_denominator"])
            elif kind in ("BinarizedTargetMeanValue", "FloatTargetMeanValue"):
                g, t = counts[0], counts[1]  # the bucket's (target sum, count)
            elif kind == "Buckets":
                g, t = counts[b], sum(counts)
            elif len(counts) == 2:
                g, t = counts[1], counts[0] + counts[1]
            else:
                g, t = sum(counts[b + 1:]), sum(counts)
            good.append(g)
            total.append(t)
        keys = np.array([int(r[0]) for r in rows], dtype=np.uint64)
        return keys, np.asarray(good, dtype=np.float64), np.asarray(total, dtype=np.float64)

    def _ctr_column(self, ctr: dict) -> tuple:
        elements = ctr.get("elements") or []
        keys, good, total = self._table(ctr)
        values = _calc(ctr, good, total)
        unknown = float(_calc(ctr, np.zeros(1), np.zeros(1))[0])
        if len(elements) == 1 and elements[0].get("combination_element") == _CAT:
            col = self.cat_column[int(elements[0]["cat_feature_index"])]
            hashes = []
            for key in keys:
                h = (int(key) * _INV_MAGIC2) & _M64  # the (sign-extended) category hash
                signed = h - (1 << 64) if h >> 63 else h
                if not -(1 << 31) <= signed < (1 << 31):
                    raise unsupported(self.model, "a CTR table key that is no category hash "
                                      f"({ctr.get('identifier')})")
                hashes.append(_uint32(signed))
            return "map", col, np.asarray(hashes, dtype=np.float64), values, unknown
        combo = self._combinations()[ctr["identifier"]]
        return "combo", combo, values[combo.entry], unknown

    def _projection(self, ctr: dict) -> tuple[Projection, list[dict]]:
        """The hash chain's structure: categorical features first, then the binarized
        elements (float ``x > border``, one-hot ``hash == value``) in the export's order."""
        cats, bits = [], []
        for e in ctr.get("elements") or []:
            kind = e.get("combination_element")
            if kind == _CAT:
                cats.append(int(e["cat_feature_index"]))
            elif kind in (_FLOAT, _ONE_HOT):
                bits.append(e)
            else:
                raise unsupported(self.model, f"a CTR combination element {kind!r} "
                                  f"({ctr.get('identifier')})", f"{_CAT}, {_FLOAT}, {_ONE_HOT}")
        if not cats:
            raise unsupported(self.model, f"a CTR with no categorical feature "
                              f"({ctr.get('identifier')})")
        return Projection(tuple(cats), len(bits)), bits

    def _combinations(self) -> dict[str, _Combination]:
        """Every table's tuples, decoded once (the tables teach each other their categories)."""
        if self._combos is not None:
            return self._combos
        projections, keys, elements = {}, {}, {}
        for ctr in self.ctrs:
            name = ctr["identifier"]
            if name in projections or name not in self.ctr_data:
                continue
            projections[name], elements[name] = self._projection(ctr)
            keys[name] = self._table(ctr)[0]
        try:
            decoded = decode_all(projections, keys)
        except ValueError as exc:
            raise unsupported(self.model, f"a CTR over a feature combination whose keys "
                              f"Peregrine cannot decode: {exc}") from exc
        self._combos = {}
        for name, rows in decoded.items():
            proj = projections[name]
            k = len(proj.cats)
            slots, bits, radix = [], [], 1
            numbers = np.zeros(len(rows), dtype=np.float64)
            for j, f in enumerate(proj.cats):
                hashes = rows[:, 1 + j] & 0xFFFFFFFF  # the uint32 hash the input column holds
                values = np.unique(hashes)  # ascending: code c (1..n) is the c-th, 0 any other
                code = np.searchsorted(values, hashes) + 1
                slots.append((self.cat_column[f], values.astype(np.float64), float(radix)))
                numbers += code * float(radix)
                radix *= len(values) + 1
            for i, e in enumerate(elements[name]):
                if e["combination_element"] == _ONE_HOT:
                    col = self.cat_column[int(e["cat_feature_index"])]
                    slots.append((col, np.array([_uint32(e["value"])]), float(radix)))
                else:
                    f = int(e["float_feature_index"])
                    bits.append((self.float_column[f], float(np.float32(e["border"])),
                                 self.nan_true[f], float(radix)))
                numbers += rows[:, 1 + k + i] * float(radix)
                radix *= 2
            if radix > 1 << 52:  # CTR_LOOKUP's keys are exact in float64
                raise unsupported(self.model, f"a CTR combination with {radix} tuples "
                                  f"({name})", "combinations numbered below 2**52")
            self._combos[name] = _Combination(slots, bits, numbers, rows[:, 0], radix)
        return self._combos

    def add_columns(self, g: GraphBuilder, x: str) -> str:
        """The input with the derived columns appended (x unchanged when there are none), in
        the forest's order, by one CTR_LOOKUP node (ir/semantics/ctr.py): each distinct
        element (a categorical column's code, a float bit) and each distinct key (a code, a
        combination's tuple number) is computed once per row, and every derived column reads
        its value off the table of its key."""
        if not self.derived:
            return x
        keys = _Keys()
        for d in self.derived:
            if d[0] == "map":
                _, col, cats, values, unknown = d
                order = np.argsort(cats, kind="stable")
                e = keys.code(col, np.asarray(cats, np.float64)[order])
                # code c (1..n) is the c-th category in ascending hash order, 0 any other
                n = len(cats)
                p = keys.projection(("code", e), [(e, 1)], np.arange(1, n + 1))
                keys.column(p, np.asarray(values, np.float64)[order], unknown)
            else:
                _, combo, values, unknown = d
                p = keys.combination(combo)
                order = np.argsort(combo.numbers, kind="stable")
                keys.column(p, np.asarray(values, np.float64)[order], unknown)
        return g.add(Op.CTR_LOOKUP, (x,), width=self.n_inputs + len(self.derived),
                     **keys.attrs())


class _Keys:
    """The CTR_LOOKUP node's tables: distinct elements (categorical codes, float bits),
    distinct projections (the key each derived column reads) and the derived columns."""

    def __init__(self) -> None:
        self.codes: dict[tuple, int] = {}  # (column, categories) -> code element
        self.code_tables: list[tuple[int, np.ndarray]] = []
        self.bits: dict[tuple, int] = {}  # (column, border, NaN true) -> bit element
        self.projections: dict[Any, int] = {}
        self.key_parts: list[list[tuple[tuple, int]]] = []  # (element, weight) per projection
        self.key_sets: list[np.ndarray] = []
        self.columns: list[tuple[int, np.ndarray, float]] = []  # (projection, values, unknown)

    def code(self, col: int, cats: np.ndarray) -> tuple:
        key = (col, cats.tobytes())  # a feature's categories are the same in every table
        if key not in self.codes:
            self.codes[key] = len(self.code_tables)
            self.code_tables.append((col, cats))
        return ("code", self.codes[key])

    def bit(self, col: int, border: float, nan_true: bool) -> tuple:
        return ("bit", self.bits.setdefault((col, border, nan_true), len(self.bits)))

    def projection(self, name: Any, parts: list, numbers: np.ndarray) -> int:
        if name not in self.projections:
            self.projections[name] = len(self.key_parts)
            self.key_parts.append(parts)
            self.key_sets.append(np.asarray(numbers, np.int64))
        return self.projections[name]

    def combination(self, combo: _Combination) -> int:
        parts = [(self.code(col, cats), int(w)) for col, cats, w in combo.slots]
        parts += [(self.bit(col, border, nan), int(w)) for col, border, nan, w in combo.bits]
        return self.projection(id(combo), parts, np.sort(combo.numbers.astype(np.int64)))

    def column(self, p: int, values: np.ndarray, unknown: float) -> None:
        self.columns.append((p, values, unknown))

    def attrs(self) -> dict:
        n_codes = len(self.code_tables)
        element = lambda e: e[1] if e[0] == "code" else n_codes + e[1]  # noqa: E731
        bits = list(self.bits)
        cats = [c for _, c in self.code_tables]
        # bit = [float32(x) > border] = [x > t] exactly (gt_float32_threshold); NaN per nan_mode
        return dict(
            hash_columns=np.asarray([c for c, _ in self.code_tables], np.int64),
            hashes=np.concatenate(cats) if cats else np.zeros(0),
            hash_offsets=_offsets(len(c) for c in cats),
            bit_columns=np.asarray([c for c, _, _ in bits], np.int64),
            bit_thresholds=np.asarray([gt_float32_threshold(b) for _, b, _ in bits]),
            bit_nan=np.asarray([int(nan) for _, _, nan in bits], np.int64),
            key_elements=np.asarray([element(e) for parts in self.key_parts for e, _ in parts],
                                    np.int64),
            key_weights=np.asarray([w for parts in self.key_parts for _, w in parts], np.int64),
            key_offsets=_offsets(len(parts) for parts in self.key_parts),
            keys=np.concatenate(self.key_sets),
            keys_offsets=_offsets(len(k) for k in self.key_sets),
            sources=np.asarray([p for p, _, _ in self.columns], np.int64),
            values=np.concatenate([np.concatenate([[u], v]) for _, v, u in self.columns]),
            value_offsets=_offsets(len(v) + 1 for _, v, _ in self.columns),
        )


def _offsets(lengths) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(list(lengths), dtype=np.int64)]).astype(np.int64)


def _calc(ctr: dict, good: np.ndarray, total: np.ndarray) -> np.ndarray:
    """TModelCtr::Calc in float32 (its operands and fields are floats)."""
    f = np.float32
    num, den = f(ctr.get("prior_numerator", 0.0)), f(ctr.get("prior_denomerator", 1.0))
    shift, scale = f(ctr.get("shift", 0.0)), f(ctr.get("scale", 1.0))
    value = (good.astype(f) + num) / (total.astype(f) + den)
    return ((value + shift) * scale).astype(np.float64)
