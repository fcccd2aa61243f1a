"""CatBoost categorical features as derived numeric columns of the forest's input.

The runtime hashes every categorical input column with CatBoost's ``CalcCatFeatureHash``
(``ModelSpec.hash_columns``, runtime/cat_hash.py), so the graph sees uint32 hashes (exact in
float64). Each split on a categorical feature reads one derived column, appended after the
inputs by a SELECT of the hashed columns and one CATEGORY_MAP (hash -> value, unknown hash ->
a constant), so the forest itself only has numeric ``x > border`` splits:

* ``OneHotFeature`` (``one_hot_max_size``): 1.0 iff the hash equals the split's value (the
  JSON holds it as a signed int32), split at 0.5;
* ``OnlineCtr``: the CTR value, looked up by hash in the model's ``ctr_data`` table, split at
  its float32 border. CatBoost's evaluator (catboost/libs/model/static_ctr_provider.cpp and
  the Python export's ``calc_ctrs``): a single-feature projection keys its table by
  ``CalcHash(0, (ui64)(i32)hash)`` = ``M * (M * hash)`` mod 2**64 with M = 0x4906ba494954cb65,
  which is invertible (M is odd), so each stored key gives back its category hash. The value is
  ``TModelCtr::Calc(good, total) = ((good + prior_num) / (total + prior_denom) + shift) * scale``
  in float32, with (good, total) per CTR type: Borders (binary) ``(c1, c0 + c1)``, Borders
  (k classes) ``(sum c[b+1:], sum c)``, Buckets ``(c[b], sum c)``, Counter / FeatureFreq
  ``(count, counter_denominator)``; a hash absent from the table gives ``Calc(0, 0)``. The
  JSON's ``hash_map`` lists the table's buckets ``[key, counts...]``, empty buckets keyed
  2**64 - 1 (skipped).

Refused (UnsupportedModelError): CTRs over feature combinations (``elements`` naming more than
one categorical feature or a binarized float/one-hot feature) and target-mean CTR types
(BinarizedTargetMeanValue, FloatTargetMeanValue).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.frontends.base import unsupported
from peregrine.ir import GraphBuilder, Op

CATBOOST_HASH = "catboost-city64-low32"  # runtime/cat_hash.py's rule name
_MAGIC = 0x4906BA494954CB65  # CalcHash's multiplier (catboost/libs/model/hash.h)
_M64 = (1 << 64) - 1
_EMPTY = _M64  # key of an empty bucket in the exported hash map
_INV_MAGIC2 = pow(_MAGIC * _MAGIC, -1, 1 << 64)
_COUNT_TYPES = ("Borders", "Buckets", "Counter", "FeatureFreq")


def _uint32(value: int) -> float:
    return float(int(value) & 0xFFFFFFFF)


class CategoricalColumns:
    """The derived columns (input column, categories, codes, unknown) a model's splits read."""

    def __init__(self, model: Any, raw: dict, n_inputs: int) -> None:
        info = raw["features_info"]
        self.model, self.n_inputs = model, n_inputs
        self.cat_column = {int(f["feature_index"]): int(f["flat_feature_index"])
                           for f in info.get("categorical_features") or []}
        self.ctrs = info.get("ctrs") or []
        self.ctr_data = raw.get("ctr_data") or {}
        self.derived: list[tuple[int, np.ndarray, np.ndarray, float]] = []
        self._index: dict[tuple, int] = {}
        # split_index numbers the binary features: float borders, one-hot values, CTR
        # borders, in features_info order (the evaluator's binarization order)
        self._ctr_of_split: dict[int, tuple[int, float]] = {}
        k = sum(len(f.get("borders") or []) for f in info.get("float_features") or [])
        k += sum(len(f.get("values") or []) for f in info.get("categorical_features") or [])
        for c, ctr in enumerate(self.ctrs):
            for border in ctr.get("borders") or []:
                self._ctr_of_split[k] = (c, float(border))
                k += 1

    def hash_columns(self) -> dict[int, str]:
        return {col: CATBOOST_HASH for col in sorted(self.cat_column.values())}

    def _column(self, key: tuple, make) -> int:
        if key not in self._index:
            self._index[key] = len(self.derived)
            self.derived.append(make())
        return self.n_inputs + self._index[key]

    def split_column(self, split: dict) -> tuple[int, float]:
        """(forest input column, border) of a OneHotFeature or OnlineCtr split."""
        if split["split_type"] == "OneHotFeature":
            f, value = int(split["cat_feature_index"]), int(split["value"])
            col = self.cat_column[f]
            return self._column(("onehot", f, value), lambda: (
                col, np.array([_uint32(value)]), np.array([1.0]), 0.0)), 0.5
        at = self._ctr_of_split.get(int(split.get("split_index", -1)))
        if at is None or np.float32(at[1]) != np.float32(split["border"]):
            raise unsupported(self.model, f"an OnlineCtr split whose split_index "
                              f"{split.get('split_index')} names no CTR border",
                              "CTR splits numbered as in features_info.ctrs")
        c = at[0]
        return self._column(("ctr", c), lambda: self._ctr_table(self.ctrs[c])), at[1]

    def _ctr_table(self, ctr: dict) -> tuple[int, np.ndarray, np.ndarray, float]:
        kind = ctr.get("ctr_type")
        elements = ctr.get("elements") or []
        name = ctr.get("identifier", kind)
        if len(elements) != 1 or elements[0].get("combination_element") != "cat_feature_value":
            raise unsupported(
                self.model, f"a CTR over a feature combination ({name})",
                "CTRs of single categorical features (train with max_ctr_complexity=1)")
        if kind not in _COUNT_TYPES:
            raise unsupported(self.model, f"CTR type {kind!r}", ", ".join(_COUNT_TYPES))
        col = self.cat_column[int(elements[0]["cat_feature_index"])]
        table = self.ctr_data.get(ctr["identifier"])
        if table is None:
            raise unsupported(self.model, f"a CTR without its ctr_data table ({name})")
        stride = int(table["hash_stride"])
        flat = table["hash_map"]
        rows = [flat[i:i + stride] for i in range(0, len(flat), stride)]
        rows = [r for r in rows if int(r[0]) != _EMPTY]
        hashes, good, total = [], [], []
        b = int(ctr.get("target_border_idx", 0))
        for r in rows:
            key = (int(r[0]) * _INV_MAGIC2) & _M64  # the (sign-extended) category hash
            signed = key - (1 << 64) if key >> 63 else key
            if not -(1 << 31) <= signed < (1 << 31):
                raise unsupported(self.model, f"a CTR table key that is no category hash "
                                  f"({name})")
            counts = [float(v) for v in r[1:]]
            if kind in ("Counter", "FeatureFreq"):
                g, t = counts[0], float(table["counter_denominator"])
            elif kind == "Buckets":
                g, t = counts[b], sum(counts)
            elif len(counts) == 2:
                g, t = counts[1], counts[0] + counts[1]
            else:
                g, t = sum(counts[b + 1:]), sum(counts)
            hashes.append(_uint32(signed))
            good.append(g)
            total.append(t)
        values = _calc(ctr, np.asarray(good), np.asarray(total))
        unknown = float(_calc(ctr, np.zeros(1), np.zeros(1))[0])
        return col, np.asarray(hashes, dtype=np.float64), values, unknown

    def add_columns(self, g: GraphBuilder, x: str) -> str:
        """The input with the derived columns appended (x unchanged when there are none)."""
        if not self.derived:
            return x
        k = len(self.derived)
        sel = g.add(Op.SELECT, (x,), width=k, columns=np.array([d[0] for d in self.derived]))
        mapped = g.add(Op.CATEGORY_MAP, (sel,), width=k, columns=np.arange(k),
                       categories=tuple(d[1] for d in self.derived),
                       codes=tuple(d[2] for d in self.derived),
                       unknown=np.array([d[3] for d in self.derived], dtype=np.float64))
        return g.add(Op.CONCAT, (x, mapped), width=self.n_inputs + k)


def _calc(ctr: dict, good: np.ndarray, total: np.ndarray) -> np.ndarray:
    """TModelCtr::Calc in float32 (its operands and fields are floats)."""
    f = np.float32
    num, den = f(ctr.get("prior_numerator", 0.0)), f(ctr.get("prior_denomerator", 1.0))
    shift, scale = f(ctr.get("shift", 0.0)), f(ctr.get("scale", 1.0))
    value = (good.astype(f) + num) / (total.astype(f) + den)
    return ((value + shift) * scale).astype(np.float64)
