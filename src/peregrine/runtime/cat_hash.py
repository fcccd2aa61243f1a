"""Hashing rules for ``ModelSpec.hash_columns``: a categorical input column becomes the number
its source library keys categories by.

``catboost-city64-low32``: CatBoost's ``CalcCatFeatureHash`` (catboost/libs/cat_feature/
cat_feature.cpp): the low 32 bits of CityHash64 (version 1.0.2, the one vendored in CatBoost's
util/digest/city.cpp) of the value's UTF-8 string. Integers (and bools) are hashed as their
decimal string, as CatBoost's Python package converts them; floats, None and NaN are refused, as
CatBoost refuses them ("cat_features must be integer or string"). The result is the uint32, exact
in float64. Each distinct value of a column is hashed once (Arrow-backed string columns through
Arrow's dictionary encoding, others through pandas.factorize), and each string's hash is kept
(``_string_hash``, an LRU cache of 65536 strings): at 100K rows of 6 string columns the boundary
took 60 ms through NumPy object copies, 12 ms this way.
"""

from __future__ import annotations

import numbers
from functools import lru_cache
from typing import Any

import numpy as np

from peregrine.errors import InputError

CATBOOST_HASH = "catboost-city64-low32"
HASH_RULES = (CATBOOST_HASH,)

_M64 = (1 << 64) - 1
_K0 = 0xC3A5C85C97CB3127
_K1 = 0xB492B66FBE98F273
_K2 = 0x9AE16A3B2F90404F
_K3 = 0xC949D7C7509E6557


def _f64(s: bytes, i: int) -> int:
    return int.from_bytes(s[i:i + 8], "little")


def _f32(s: bytes, i: int) -> int:
    return int.from_bytes(s[i:i + 4], "little")


def _rot(v: int, shift: int) -> int:
    return v if shift == 0 else ((v >> shift) | (v << (64 - shift))) & _M64


def _mix(v: int) -> int:
    return v ^ (v >> 47)


def _len16(u: int, v: int) -> int:  # Hash128to64
    mul = 0x9DDFEA08EB382D69
    a = ((u ^ v) * mul) & _M64
    a ^= a >> 47
    b = ((v ^ a) * mul) & _M64
    b ^= b >> 47
    return (b * mul) & _M64


def _len0to16(s: bytes) -> int:
    n = len(s)
    if n > 8:
        a, b = _f64(s, 0), _f64(s, n - 8)
        return _len16(a, _rot((b + n) & _M64, n)) ^ b
    if n >= 4:
        return _len16((n + (_f32(s, 0) << 3)) & _M64, _f32(s, n - 4))
    if n > 0:
        y = s[0] + (s[n >> 1] << 8)
        z = n + (s[n - 1] << 2)
        return (_mix(((y * _K2) ^ (z * _K3)) & _M64) * _K2) & _M64
    return _K2


def _len17to32(s: bytes) -> int:
    n = len(s)
    a = (_f64(s, 0) * _K1) & _M64
    b = _f64(s, 8)
    c = (_f64(s, n - 8) * _K2) & _M64
    d = (_f64(s, n - 16) * _K0) & _M64
    return _len16((_rot((a - b) & _M64, 43) + _rot(c, 30) + d) & _M64,
                  (a + _rot(b ^ _K3, 20) - c + n) & _M64)


def _weak32(w: int, x: int, y: int, z: int, a: int, b: int) -> tuple[int, int]:
    a = (a + w) & _M64
    b = _rot((b + a + z) & _M64, 21)
    c = a
    a = (a + x + y) & _M64
    b = (b + _rot(a, 44)) & _M64
    return (a + z) & _M64, (b + c) & _M64


def _weak32s(s: bytes, i: int, a: int, b: int) -> tuple[int, int]:
    return _weak32(_f64(s, i), _f64(s, i + 8), _f64(s, i + 16), _f64(s, i + 24), a, b)


def _len33to64(s: bytes) -> int:
    n = len(s)
    z = _f64(s, 24)
    a = (_f64(s, 0) + (n + _f64(s, n - 16)) * _K0) & _M64
    b = _rot((a + z) & _M64, 52)
    c = _rot(a, 37)
    a = (a + _f64(s, 8)) & _M64
    c = (c + _rot(a, 7)) & _M64
    a = (a + _f64(s, 16)) & _M64
    vf = (a + z) & _M64
    vs = (b + _rot(a, 31) + c) & _M64
    a = (_f64(s, 16) + _f64(s, n - 32)) & _M64
    z = _f64(s, n - 8)
    b = _rot((a + z) & _M64, 52)
    c = _rot(a, 37)
    a = (a + _f64(s, n - 24)) & _M64
    c = (c + _rot(a, 7)) & _M64
    a = (a + _f64(s, n - 16)) & _M64
    wf = (a + z) & _M64
    ws = (b + _rot(a, 31) + c) & _M64
    r = _mix(((vf + ws) * _K2 + (wf + vs) * _K0) & _M64)
    return (_mix((r * _K0 + vs) & _M64) * _K2) & _M64


def city_hash64(s: bytes) -> int:
    """CityHash64 v1.0.2 of ``s`` (an unsigned 64-bit int)."""
    n = len(s)
    if n <= 16:
        return _len0to16(s)
    if n <= 32:
        return _len17to32(s)
    if n <= 64:
        return _len33to64(s)
    x = _f64(s, 0)
    y = _f64(s, n - 16) ^ _K1
    z = _f64(s, n - 56) ^ _K0
    v = _weak32s(s, n - 64, n, y)
    w = _weak32s(s, n - 32, (n * _K1) & _M64, _K0)
    z = (z + _mix(v[1]) * _K1) & _M64
    x = (_rot((z + x) & _M64, 39) * _K1) & _M64
    y = (_rot(y, 33) * _K1) & _M64
    pos, left = 0, (n - 1) & ~63
    while True:
        x = (_rot((x + y + v[0] + _f64(s, pos + 16)) & _M64, 37) * _K1) & _M64
        y = (_rot((y + v[1] + _f64(s, pos + 48)) & _M64, 42) * _K1) & _M64
        x ^= w[1]
        y ^= v[0]
        z = _rot(z ^ w[0], 33)
        v = _weak32s(s, pos, (v[1] * _K1) & _M64, (x + w[0]) & _M64)
        w = _weak32s(s, pos + 32, (z + w[1]) & _M64, y)
        z, x = x, z
        pos += 64
        left -= 64
        if left == 0:
            break
    return _len16((_len16(v[0], w[0]) + _mix(y) * _K1 + z) & _M64,
                  (_len16(v[1], w[1]) + x) & _M64)


def _catboost_string(value: Any, where: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return str(int(value))
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, bytes):
        return value.decode()
    raise InputError(f"column {where!r} holds {value!r}; CatBoost's categorical features take "
                     "integers or strings (floats, None and NaN must be converted to strings)")


def catboost_hash(value: Any, where: Any = "?") -> int:
    """CatBoost's CalcCatFeatureHash of one value, as the uint32."""
    return _string_hash(_catboost_string(value, where))


SMALL = 64  # columns up to this long are hashed value by value (pandas.factorize costs ~20 us)


@lru_cache(maxsize=1 << 16)
def _string_hash(s: str) -> int:
    # CityHash in Python costs ~10 us a string; a column's categories recur from call to call
    # (a served model sees the same few hundred values), so each is hashed once per process
    return city_hash64(s.encode("utf-8")) & 0xFFFFFFFF


def _arrow_strings(values: Any) -> Any:
    """A pandas column backed by Arrow strings (pandas' ``str`` dtype) as one Arrow array,
    or None: hashed through Arrow's dictionary encoding, without NumPy's object copy."""
    array = getattr(values, "array", None)
    if array is None or not hasattr(array, "__arrow_array__"):
        return None
    try:
        import pyarrow as pa

        arr = pa.chunked_array(array.__arrow_array__()).combine_chunks()
    except (ImportError, TypeError, ValueError):
        return None
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return arr
    return None


def _hash_arrow(arr: Any, where: Any) -> np.ndarray:
    if arr.null_count:
        raise InputError(f"column {where!r} holds a missing value; CatBoost's categorical "
                         "features take integers or strings")
    enc = arr.dictionary_encode()
    table = np.array([_string_hash(v) for v in enc.dictionary.to_pylist()], dtype=np.float64)
    return table[np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.intp)]


def hash_column(values: Any, rule: str, where: Any) -> np.ndarray:
    """float64 hashes of a 1-D column (numpy array, pandas Series or Categorical): each
    distinct value hashed once."""
    if rule != CATBOOST_HASH:
        raise InputError(f"unknown hashing rule {rule!r} for column {where!r}")
    if hasattr(values, "cat") or type(values).__name__ == "Categorical":
        cat = values.cat if hasattr(values, "cat") else values
        codes = np.asarray(cat.codes)
        if (codes < 0).any():
            raise InputError(f"column {where!r} holds a missing category; CatBoost's "
                             "categorical features take integers or strings")
        table = np.array([catboost_hash(v, where) for v in cat.categories], dtype=np.float64)
        return table[codes]
    if len(values) <= SMALL:
        # a few rows (online scoring): value by value through the hash cache, no factorize or
        # Arrow encoding (~20 us a column); floats and missing values reach catboost_hash,
        # which refuses them
        return np.array([_string_hash(v) if type(v) is str else catboost_hash(v, where)
                         for v in np.asarray(values, dtype=object).reshape(-1)],
                        dtype=np.float64)
    strings = _arrow_strings(values)
    if strings is not None:
        return _hash_arrow(strings, where)
    arr = np.asarray(values)
    if arr.dtype.kind in "iub":
        uniq, inverse = np.unique(arr, return_inverse=True)
        return np.array([catboost_hash(v.item(), where) for v in uniq],
                        dtype=np.float64)[inverse.reshape(-1)]
    if arr.dtype.kind == "f":
        raise InputError(f"column {where!r} holds floats; CatBoost's categorical features take "
                         "integers or strings")
    arr = arr.astype(object).reshape(-1)
    try:
        import pandas as pd

        if pd.api.types.infer_dtype(arr, skipna=False) == "string":
            codes, uniq = pd.factorize(arr)
            table = np.array([catboost_hash(v, where) for v in uniq], dtype=np.float64)
            return table[codes]
    except ImportError:
        pass
    # one hash per distinct value: dict lookup keeps 1 and "1" apart only by their string
    cache: dict[Any, float] = {}
    out = np.empty(arr.shape[0], dtype=np.float64)
    for i, v in enumerate(arr):
        key = (type(v), v) if not isinstance(v, float) else None
        if key is None or key not in cache:
            h = float(catboost_hash(v, where))
            if key is None:
                out[i] = h
                continue
            cache[key] = h
        out[i] = cache[key]
    return out
