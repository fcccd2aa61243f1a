"""Category columns at the runtime boundary: strings (or pandas categoricals) become the float
codes the graph works on, with one vectorised lookup per column, never a Python loop per row.

A code is the position of the value among the categories recorded at fit time
(``ModelSpec.category_maps``); a missing value (None, NaN, pd.NA) gets the position of the NaN
category when there is one (code 0 of a pipeline's string vocabulary), and a value unseen at fit
time becomes NaN (or an InputError when an encoder with handle_unknown='error' reads it).

Lookups, fastest first: Arrow string data (pandas' ``str`` dtype, or an object column that
converts to Arrow strings) goes through ``pyarrow.compute.index_in`` (a hash lookup in C++,
about 25x faster than pandas' object hash table on 200K rows); a pandas categorical maps its few
categories once and gathers by its codes; anything else (mixed strings and numbers) falls back to
``pandas.Index.get_indexer`` on the object values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from peregrine.errors import InputError


def _missing_position(categories: tuple) -> int:
    for i, c in enumerate(categories):
        if c is None or (isinstance(c, float) and np.isnan(c)):
            return i
    return -1


def _finish(pos: np.ndarray, missing: np.ndarray, categories: tuple, values: Any, name: Any,
            unknown_error: bool) -> np.ndarray:
    """pos: int positions (-1 unseen or missing); missing: bool mask of missing inputs."""
    if unknown_error:
        # missing values are not an error here: an imputer may come first, the graph's own
        # check decides (see docs/pipelines.md, handle_unknown="error")
        unseen = (pos < 0) & ~missing
        if unseen.any():
            r = int(np.flatnonzero(unseen)[0])
            value = values[r]
            raise InputError(
                f"column {name!r} holds {value!r} (row {r}), a category unseen at fit "
                "time; the model's encoder has handle_unknown='error'"
            )
    codes = pos.astype(np.float64)
    codes[missing] = _missing_position(categories)
    codes[codes < 0] = np.nan
    return codes


def _arrow_lookup(arr: Any, categories: tuple, values: Any, name: Any,
                  unknown_error: bool) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.compute as pc

    strs = [(i, c) for i, c in enumerate(categories) if isinstance(c, str)]
    where = np.array([i for i, _ in strs] + [-1], dtype=np.int64)
    value_set = pa.array([c for _, c in strs], type=pa.string())
    if pa.types.is_null(arr.type):  # every value missing
        hit = np.full(len(arr), -1, dtype=np.int64)
    else:
        if not pa.types.is_string(arr.type):
            arr = arr.cast(pa.string())
        found = pc.fill_null(pc.index_in(arr, value_set=value_set), -1)
        hit = np.asarray(found.to_numpy(zero_copy_only=False), dtype=np.int64)
    missing = np.asarray(pc.is_null(arr).to_numpy(zero_copy_only=False), dtype=bool)
    return _finish(where[hit], missing, categories, values, name, unknown_error)


def _as_arrow_strings(values: Any) -> Any:
    """The column as an Arrow string (or all-null) array, or None when it is not one."""
    try:
        import pyarrow as pa
    except ImportError:  # optional: the pandas fallback below is exact, only slower
        return None
    array = getattr(values, "array", None)
    if array is not None and hasattr(array, "__arrow_array__"):  # pandas' Arrow-backed strings
        try:
            arr = pa.chunked_array(array.__arrow_array__()).combine_chunks()
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            return None
    else:
        try:
            arr = pa.array(np.asarray(values, dtype=object), from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
            return None  # mixed types
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type) or \
            pa.types.is_null(arr.type):
        return arr
    return None


def category_codes(col: Any, categories: tuple | None, name: Any,
                   unknown_error: bool = False) -> np.ndarray:
    """Float codes of one column (a pandas Series or a 1-D numpy object array)."""
    import pandas as pd

    dtype = getattr(col, "dtype", None)
    if isinstance(dtype, pd.CategoricalDtype):
        raw = col.cat.codes.to_numpy()
        if categories is None:  # the column's own codes (no fit-time map)
            codes = raw.astype(np.float64)
            codes[raw < 0] = np.nan
            return codes
        # map the column's few categories once, then gather by its codes
        mapping = pd.Index(list(categories)).get_indexer(col.cat.categories.to_numpy(object))
        pos = np.append(mapping, -1)[raw]  # raw -1 (missing) -> -1
        values = col.cat.categories.to_numpy(object)[np.maximum(raw, 0)] if unknown_error \
            else None
        if values is not None:
            values = np.where(raw < 0, None, values)
        return _finish(pos, raw < 0, categories, values, name, unknown_error)
    categories = tuple(categories or ())
    arr = _as_arrow_strings(col)
    if arr is not None:
        return _arrow_lookup(arr, categories, _ValuesAt(col), name, unknown_error)
    values = np.asarray(col.to_numpy(dtype=object) if hasattr(col, "to_numpy") else col,
                        dtype=object)
    # get_indexer: -1 for unseen values, without pandas' deprecation of unseen values in
    # pd.Categorical(values, categories=...); NaN-likes match the NaN category
    pos = pd.Index(list(categories)).get_indexer(values)
    return _finish(pos, np.asarray(pd.isna(values), dtype=bool) & (pos < 0), categories,
                   values, name, unknown_error)


# categories tuple id -> (the tuple, {string category: position}); the tuple is kept so an id
# is never reused for another map while its entry lives
_STRING_POSITIONS: dict[int, tuple[tuple, dict]] = {}


def few_codes(values: np.ndarray, categories: tuple, name: Any, unknown_error: bool = False
              ) -> np.ndarray | None:
    """``category_codes`` of a few string values (a 1-D object array) by dictionary lookups:
    for an online request the vectorised lookups' set-up (an Arrow array, a hash table per
    call) costs ~80 us a column, a dict lookup ~0.1 us a value. Same codes: a string is found
    by equality among the string categories, a missing value (None, NaN, pd.NA) gets the
    missing category's position, an unseen string NaN or the encoder's error. None when some
    value is neither a string nor missing: the general path decides those. ``name``: a
    callable giving the column's name, for the error only."""
    import pandas as pd

    entry = _STRING_POSITIONS.get(id(categories))
    if entry is None or entry[0] is not categories:
        if len(_STRING_POSITIONS) > 4096:
            _STRING_POSITIONS.clear()
        entry = _STRING_POSITIONS[id(categories)] = (categories, {
            c: i for i, c in enumerate(categories) if isinstance(c, str)})
    positions = entry[1]
    pos = np.empty(len(values), dtype=np.int64)
    missing = np.zeros(len(values), dtype=bool)
    for r, v in enumerate(values):
        if isinstance(v, str):
            pos[r] = positions.get(v, -1)
        elif v is None or v is pd.NA or (isinstance(v, float) and v != v):
            pos[r], missing[r] = -1, True
        else:
            return None
    if unknown_error and ((pos < 0) & ~missing).any():
        return _finish(pos, missing, categories, values, name(), unknown_error)
    return _finish(pos, missing, categories, values, None, False)


class _ValuesAt:
    """``values[r]`` of a Series or array, fetched only for an error message."""

    def __init__(self, col: Any) -> None:
        self.col = col

    def __getitem__(self, r: int) -> Any:
        col = self.col
        return col.iloc[r] if hasattr(col, "iloc") else col[r]
