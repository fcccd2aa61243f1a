"""Category columns at the runtime boundary: strings (or pandas categoricals) become the float
codes the graph works on, with one vectorised lookup per column, never a Python loop per row.

A code is the position of the value among the categories recorded at fit time
(``ModelSpec.category_maps``), and a value unseen at fit time becomes NaN (or an InputError when
an encoder with handle_unknown='error' reads it). Missing values: a scikit-learn pipeline's
string vocabulary holds both NaN (code 0) and None (code 1), and they are told apart as
scikit-learn's encoders and imputers tell them apart in object columns: a float NaN (and a
missing value of a pandas ``str`` or categorical column, which scikit-learn reads as NaN) gets
the NaN category, None the None category, and pd.NA (an object column's, or a nullable
``string`` column's) is a value like any other, unseen. Any other map (older artifacts, other
libraries' category maps) gives every missing value the position of its first NaN/None
category, or NaN when it has none.

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


def is_vocabulary(categories: tuple) -> bool:
    """A scikit-learn pipeline's string vocabulary (steps.Vocab: NaN at 0, None at 1, then the
    strings), whose missing values are told apart; any other map treats them alike."""
    return len(categories) >= 2 and categories[1] is None and \
        isinstance(categories[0], float) and categories[0] != categories[0]


def _index_of(categories: tuple, values: np.ndarray) -> np.ndarray:
    """Positions of ``values`` among the categories that are not missing values (-1 where
    none): pandas finds NaN and None alike, and an index holding both is not unique."""
    import pandas as pd

    keep = [i for i, c in enumerate(categories) if not (c is None or _is_nan(c))]
    found = pd.Index([categories[i] for i in keep], dtype=object).get_indexer(values)
    return np.append(np.asarray(keep, dtype=np.int64), -1)[found]


def _is_nan(v: Any) -> bool:
    # scikit-learn's is_scalar_nan: a real-number NaN (np.float32 too), not pd.NA or NaT
    return isinstance(v, (float, np.floating)) and v != v


def _finish(pos: np.ndarray, missing: np.ndarray, categories: tuple, values: Any, name: Any,
            unknown_error: bool, nulls: Any = None, na_error: str = "") -> np.ndarray:
    """pos: int positions (-1 unseen or missing); missing: bool mask of missing inputs;
    ``nulls``: the values of the missing rows (None: read them from ``values``), needed only
    where the map tells None from NaN. ``na_error``: the step that cannot take pd.NA (a
    string imputer or MissingIndicator: scikit-learn's ``X != X`` mask raises TypeError,
    "boolean value of NA is ambiguous"), or "" where pd.NA is an unseen value."""
    split = is_vocabulary(categories)
    if split and missing.any():
        rows = np.flatnonzero(missing)
        got = [values[r] for r in rows] if nulls is None else nulls
        pos, missing = pos.copy(), missing.copy()
        for r, v in zip(rows, got):
            if v is None:
                pos[r] = 1
            elif _is_nan(v):
                pos[r] = 0
            elif na_error:
                raise InputError(
                    f"column {name!r} holds pd.NA (row {int(r)}); {na_error} cannot tell "
                    "whether it is missing (scikit-learn raises TypeError: boolean value of "
                    "NA is ambiguous); use np.nan or None")
            else:  # pd.NA: scikit-learn's encoders find it among no categories
                pos[r], missing[r] = -1, False
    if unknown_error:
        # missing values are not an error here: an imputer may come first, the graph's own
        # check decides (see docs/pipelines.md, handle_unknown="error")
        unseen = (pos < 0) & ~missing
        if unseen.any():
            r = int(np.flatnonzero(unseen)[0])
            value = values[r]
            raise InputError(
                f"column {name!r} holds {value!r} (row {r}), a category unseen at fit "
                "time, which the model rejects (a scikit-learn encoder with "
                "handle_unknown='error', or XGBoost's categorical features)"
            )
    codes = pos.astype(np.float64)
    if not split and missing.any():
        codes[missing] = _missing_position(categories)
    codes[codes < 0] = np.nan
    return codes


def _arrow_lookup(arr: Any, categories: tuple, values: Any, name: Any,
                  unknown_error: bool, na_error: str = "") -> np.ndarray:
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
    nulls = None
    if is_vocabulary(categories) and missing.any():
        nulls = values.take(np.flatnonzero(missing))  # Arrow made None and NaN alike
    return _finish(where[hit], missing, categories, values, name, unknown_error, nulls,
                   na_error)


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
                   unknown_error: bool = False, na_error: str = "") -> np.ndarray:
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
        mapping = _index_of(categories, col.cat.categories.to_numpy(object))
        pos = np.append(mapping, -1)[raw]  # raw -1 (missing) -> -1
        values = col.cat.categories.to_numpy(object)[np.maximum(raw, 0)] if unknown_error \
            else None
        if values is not None:
            values = np.where(raw < 0, None, values)
        missing = raw < 0  # scikit-learn reads a categorical's missing values as NaN
        return _finish(pos, missing, categories, values, name, unknown_error,
                       nulls=[np.nan] * int(missing.sum()))
    categories = tuple(categories or ())
    arr = _as_arrow_strings(col)
    if arr is not None:
        return _arrow_lookup(arr, categories, _ValuesAt(col), name, unknown_error, na_error)
    values = np.asarray(col.to_numpy(dtype=object) if hasattr(col, "to_numpy") else col,
                        dtype=object)
    # get_indexer: -1 for unseen values, without pandas' deprecation of unseen values in
    # pd.Categorical(values, categories=...); it matches every NA-like to the first one, so
    # missing values are placed by _finish
    pos = _index_of(categories, values)
    missing = np.asarray(pd.isna(values), dtype=bool)
    pos[missing] = -1
    return _finish(pos, missing, categories, values, name, unknown_error, na_error=na_error)


# categories tuple id -> (the tuple, {string category: position}); the tuple is kept so an id
# is never reused for another map while its entry lives
_STRING_POSITIONS: dict[int, tuple[tuple, dict]] = {}


def few_codes(values: np.ndarray, categories: tuple, name: Any, unknown_error: bool = False,
              na_error: str = "") -> np.ndarray | None:
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
        elif v is None or v is pd.NA or _is_nan(v):
            pos[r], missing[r] = -1, True  # placed by _finish (None vs NaN vs pd.NA)
        else:
            return None
    if (unknown_error or na_error) and (pos < 0).any():  # (pd.NA: _finish decides)
        return _finish(pos, missing, categories, values, name(), unknown_error,
                       na_error=na_error)
    return _finish(pos, missing, categories, values, None, False)


class _ValuesAt:
    """``values[r]`` of a Series or array, fetched only for an error message."""

    def __init__(self, col: Any) -> None:
        self.col = col

    def __getitem__(self, r: int) -> Any:
        col = self.col
        return col.iloc[r] if hasattr(col, "iloc") else col[r]

    def take(self, rows: np.ndarray) -> list:
        """The values at ``rows`` (missing ones), in one conversion rather than one lookup
        each: a pandas string column has one missing value (its dtype's na_value: NaN for
        ``str``, pd.NA for ``string``)."""
        import pandas as pd

        col = self.col
        if isinstance(getattr(col, "dtype", None), pd.StringDtype):
            return [col.dtype.na_value] * len(rows)
        values = col.to_numpy(dtype=object) if hasattr(col, "to_numpy") else col
        return list(np.asarray(values, dtype=object)[rows])
