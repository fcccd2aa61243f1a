"""Input normalisation at the runtime boundary: numpy, pandas, scipy.sparse and torch inputs
become one 2-D float array (or a torch tensor for tensor backends), checked against the model's contract.
Every rejection is an InputError that says what and where."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from peregrine.errors import InputError
from peregrine.ir.spec import GUARD, ModelSpec
from peregrine.runtime.cat_hash import hash_column
from peregrine.runtime.categories import category_codes, few_codes, is_vocabulary
from peregrine.runtime.guards import na_columns, read_columns
from peregrine.runtime.intervals import FLOAT32_OVERFLOW
from peregrine.runtime.sparse import densify, is_sparse


def is_dataframe(X: Any) -> bool:
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(X, pd.DataFrame)


def _is_tensor(X: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(X, torch.Tensor)


def prepare_input(X: Any, spec: ModelSpec, *, keep_tensor: bool = False, check: bool = True):
    """Return a 2-D float32/float64 array (or tensor when ``keep_tensor``) with validated shape."""
    if spec.text is not None:  # documents -> the dense matrix the graph reads (runtime/text.py)
        from peregrine.runtime.text import text_input

        # a ColumnTransformer's table: its other columns come back through this function
        return text_input(X, spec, lambda T, s: prepare_input(T, s, check=check))
    if _is_tensor(X):
        return _from_tensor(X, spec, keep_tensor, check)
    checked = None  # the columns to check (None: all)
    if is_dataframe(X):
        arr, checked = _from_dataframe(X, spec)
    else:
        if isinstance(X, (list, tuple)):
            try:
                X = np.asarray(X)
            except ValueError as exc:
                raise InputError(f"input is a ragged sequence: {exc}") from exc
        if is_sparse(X):  # the source's rule for absent entries (runtime/sparse.py)
            X = densify(X, spec, check=check)
        if not isinstance(X, np.ndarray):
            raise InputError(
                f"unsupported input type {type(X).__name__}; pass a numpy array, pandas "
                "DataFrame or torch tensor"
            )
        if X.ndim == 2 and (spec.hash_columns or (X.dtype.kind in "OUS" and (
                spec.category_maps or boundary_columns(spec, "objects")))):
            _check_shape(X.shape, spec)
            arr = _from_object_array(X, spec)
        else:
            arr = _numeric_array(X, where="input", int_dtype=spec.int_input_dtype)
            _refuse_numbers(spec)
    _check_shape(arr.shape, spec)
    if check:
        _check_values(arr, spec, checked)
    return arr


def _numeric_array(X: np.ndarray, where: str, int_dtype: str = "float64") -> np.ndarray:
    kind = X.dtype.kind
    if kind == "f":
        if X.dtype == np.float32 or X.dtype == np.float64:
            return X
        return X.astype(np.float64 if X.dtype.itemsize > 4 else np.float32)
    if kind in "iub":
        return X.astype(int_dtype)
    if kind == "O":
        try:
            return X.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{where} holds non-numeric values ({exc})") from exc
    raise InputError(f"{where} has dtype {X.dtype}; expected numbers (float, int or bool)")


def _check_shape(shape: tuple, spec: ModelSpec) -> None:
    if len(shape) != 2:
        hint = " (reshape a single row with X.reshape(1, -1))" if len(shape) == 1 else ""
        raise InputError(f"input must be 2-D (rows, features), got {len(shape)}-D{hint}")
    if shape[1] != spec.n_features:
        raise InputError(
            f"input has {shape[1]} features, but the model expects {spec.n_features}"
        )




def beyond_float32(arr: np.ndarray) -> bool:
    """Whether a float64 array holds a value that float32 rounds to infinity (NaN ignored).
    First one BLAS dot product of the values with themselves (one pass, ~3x cheaper than a
    max and a min): squares do not cancel, so a sum below half the threshold squared proves
    every value is below it; otherwise (large values, or a NaN making the sum NaN) the exact
    NaN-ignoring max and min decide."""
    flat = arr.reshape(-1)
    with np.errstate(all="ignore"):
        if float(np.dot(flat, flat)) < 0.5 * FLOAT32_OVERFLOW**2:
            return False
        return bool(np.fmax.reduce(flat) >= FLOAT32_OVERFLOW
                    or np.fmin.reduce(flat) <= -FLOAT32_OVERFLOW)


def _check_values(arr: np.ndarray, spec: ModelSpec, cols: Any = None) -> None:
    if spec.allow_nan and spec.allow_inf:
        return
    # (a text pipeline's table is narrower than the graph's input: its columns only)
    cols = None if cols is None else [c for c in sorted(cols) if c < arr.shape[1]]
    if cols is not None and len(cols) < arr.shape[1]:
        # a frame's unconverted columns are zeros: the proof reads the converted ones only
        # (the others may be untouched zero pages); anything else takes the full check
        sub = arr[:, np.asarray(cols, dtype=np.intp)]
        with np.errstate(all="ignore"):
            if np.isfinite(np.add.reduce(sub, None)) and not (
                    spec.finite_dtype == "float32" and not spec.allow_inf and
                    sub.dtype == np.float64 and sub.size and beyond_float32(sub)):
                return
    if spec.finite_dtype == "float32" and not spec.allow_inf and arr.dtype == np.float64 \
            and arr.size and beyond_float32(arr):
        # the source casts to float32 first and rejects the infinity that makes; a true
        # infinity is reported below as such
        with np.errstate(invalid="ignore"):
            big = np.isfinite(arr) & (np.abs(arr) >= FLOAT32_OVERFLOW)
        if big.any():
            r, k = np.argwhere(big)[0]
            raise InputError(
                f"input contains a value too large for float32 at row {r}, column {k} "
                f"({float(arr[r, k])!r}); {spec.source} casts its input to float32 and does "
                "not accept the infinity it becomes")
    # A finite sum proves the input holds neither NaN nor infinity: one contiguous pass with no
    # (rows, features) temporaries (what scikit-learn's own check does; 4x faster than column
    # sums, which stride). Otherwise column sums say which columns to examine element by
    # element. Category columns are skipped: NaN there is an unseen category, which the model
    # itself handles.
    with np.errstate(all="ignore"):
        if np.isfinite(np.add.reduce(arr, None)):
            return
        # Where NaN is accepted only an infinity is wrong, and the NaN-ignoring max and min
        # find one in two contiguous passes (an all-NaN input gives NaN: examined below). The
        # examination below copies the suspect columns: with NaN in every column (an
        # imputer's input, 100K x 64 doubles) that took 25 ms a call, these 3.5 ms.
        if spec.allow_nan and (np.fmax.reduce(arr, axis=None) < np.inf
                               and np.fmin.reduce(arr, axis=None) > -np.inf):
            return
        sums = np.add.reduce(arr, axis=0)
    suspect = ~np.isfinite(sums)
    if spec.category_maps:
        suspect[list(spec.category_maps)] = False
    if not suspect.any():
        return
    cols = np.flatnonzero(suspect)
    sub = arr[:, cols]
    if spec.allow_nan:
        bad = np.isinf(sub)
        what = "infinity"
    elif spec.allow_inf:
        bad = np.isnan(sub)
        what = "NaN"
    else:
        bad = ~np.isfinite(sub)
        what = "NaN or infinity"
    nan_ok = boundary_columns(spec, "nan_ok") if not spec.allow_nan else {}
    if nan_ok:  # NaN there reaches no step that rejects it (an encoder's category)
        ok = np.isin(cols, list(nan_ok))
        if ok.any():
            bad[:, ok] = np.isinf(sub[:, ok]) if not spec.allow_inf else False
    if bad.any():
        r, k = np.argwhere(bad)[0]
        raise InputError(
            f"input contains {what} at row {r}, column {cols[k]}; {spec.source} does not "
            "accept it"
        )


def _from_dataframe(df: Any, spec: ModelSpec) -> tuple[np.ndarray, frozenset | None]:
    """The frame's matrix, and the columns converted (None: all)."""
    import pandas as pd

    cols = [str(c) for c in df.columns.tolist()]  # a list first: Index iteration is slower
    if spec.feature_names is not None:
        present, expected = set(cols), set(spec.feature_names)
        missing = [c for c in spec.feature_names if c not in present]
        extra = [c for c in cols if c not in expected]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing columns {missing}")
            if extra:
                parts.append(f"unknown columns {extra}")
            raise InputError(
                f"DataFrame does not match the model's features: {'; '.join(parts)}"
            )
        if len(present) != len(cols):
            raise InputError("DataFrame has duplicate column names")
        position = {c: k for k, c in enumerate(cols)}
        order = [position[c] for c in spec.feature_names]  # no reordered copy of the frame
    elif df.shape[1] != spec.n_features:
        raise InputError(f"input has {df.shape[1]} features, but the model expects "
                         f"{spec.n_features}")
    else:
        order = list(range(df.shape[1]))
    # Columns of one numpy number dtype are converted together (pandas hands a block of them
    # over in one pass); category and string columns one vectorised lookup each; the rest
    # (object numbers, nullable extension dtypes) column by column. A few rows (an online
    # request) take the frame's column arrays instead: pandas' own column take and Series
    # construction cost 10-150 us each, more than the rest of a one-row call.
    arrays = _column_arrays(df) if df.shape[0] <= FEW_ROWS else None
    # a list: Series.iloc costs ~10 us a lookup on a one-row call
    dtypes = [a.dtype for a in arrays] if arrays is not None else list(df.dtypes)
    groups: dict[np.dtype, list[tuple[int, int]]] = {}  # dtype -> (output, frame) columns
    other: list[tuple[int, int]] = []
    for j, k in enumerate(order):
        dt = dtypes[k]
        if isinstance(dt, np.dtype) and dt.kind in "fiub" and j not in spec.hash_columns:
            groups.setdefault(dt, []).append((j, k))
        else:
            other.append((j, k))
    # float32 stays float32 only when every number column is float32 (sklearn's check_array on
    # a mixed frame gives float64). Columns turned into category codes (strings, categoricals)
    # do not count: their codes are small integers, exact in float32, and the steps reading
    # them (encoders, imputers on codes) compute the same in either dtype; a ColumnTransformer
    # block of float32 columns beside a string column is float32 in scikit-learn.
    coded = all(j in spec.category_maps and len(spec.category_maps[j]) < 1 << 24 and (
        isinstance(dtypes[k], pd.CategoricalDtype) or dtypes[k].kind not in "fiub")
        for j, k in other)
    all_f32 = set(groups) == {np.dtype(np.float32)} and coded
    read = read_columns(spec)
    na = na_columns(spec)  # columns whose pd.NA a step cannot take
    if read is not None and not (spec.allow_nan and spec.allow_inf):
        # columns a NaN/inf-rejecting step reads (SelectKBest's check_array reads all of
        # them) though no op does: proved finite in place, converted (and so located by the
        # check) only when that fails
        read = read | _unread_nonfinite(df, spec, read, order)
    if read is not None:  # columns no step reads (a ColumnTransformer's dropped remainder,
        # an ID column, one-hot blocks the trees never split on): not converted, not looked
        # up, not rejected (scikit-learn never looks at them either); their zeros are unread
        groups = {dt: kept for dt, pairs in groups.items()
                  if (kept := [(j, k) for j, k in pairs if j in read])}
        other = [(j, k) for j, k in other if j in read]
    # a few columns of a wide frame: column-major zeros, so the columns not written stay
    # untouched zero pages (row-major, writing k values a row touches every page)
    narrow = read is not None and 4 * len(read) <= len(order)
    out = (np.empty if read is None else np.zeros)(
        (df.shape[0], len(order)), dtype=np.float32 if all_f32 else np.float64,
        order="F" if narrow else "C")
    for pairs in groups.values():
        if arrays is not None:  # NumPy's casts, as to_numpy(dtype=...) makes them
            for j, k in pairs:
                out[:, j] = arrays[k]
            continue
        js, ks = [j for j, _ in pairs], [k for _, k in pairs]
        if ks == list(range(df.shape[1])):  # the whole frame in its order: no column take
            block = df.to_numpy(dtype=out.dtype)  # (~1 us for one row; iloc's take ~80 us)
        else:
            block = df.iloc[:, ks].to_numpy(dtype=out.dtype)
        if js == list(range(js[0], js[0] + len(js))):
            out[:, js[0]:js[0] + len(js)] = block
        else:
            out[:, js] = block
    for j, k in other:
        if arrays is not None and j in spec.category_maps and j not in spec.hash_columns and \
                not isinstance(dtypes[k], pd.CategoricalDtype) and dtypes[k].kind not in "fiub":
            codes = few_codes(np.asarray(arrays[k], dtype=object), spec.category_maps[j],
                              lambda k=k: df.columns[k], j in spec.category_unknown_error,
                              na.get(j, ""))
            if codes is not None:
                out[:, j] = codes
                continue
        col = df.iloc[:, k]
        name = df.columns[k]
        if j in spec.hash_columns:  # the source's hash of each value (CatBoost)
            out[:, j] = hash_column(col, spec.hash_columns[j], name)
            continue
        # object/string columns with a fit-time category map (a pipeline's string encoders,
        # scikit-learn HGB's categories) are looked up like category columns
        objects = boundary_columns(spec, "objects")
        if j in objects and col.dtype.kind == "O":
            out[:, j] = missing_or_zero(col.to_numpy(dtype=object), name, objects[j])
        elif isinstance(col.dtype, pd.CategoricalDtype) or (
            j in spec.category_maps and col.dtype.kind not in "fiub"
        ):
            out[:, j] = category_codes(col, spec.category_maps.get(j), name,
                                       j in spec.category_unknown_error, na.get(j, ""))
        else:
            out[:, j] = _other_column(col, name)
    return out, read


def _unread_nonfinite(df: Any, spec: ModelSpec, read: frozenset, order: list) -> set:
    """The columns a NaN/inf-rejecting step reads (``checked_columns``) that no op reads and
    that are not proved finite in place: a sum over each of the frame's own column arrays
    (views, no copy: ~0.03 s for 480 columns of 200K rows where converting them costs 0.14 s).
    Columns of other dtypes are converted and checked as before."""
    need = [j for j in checked_columns(spec) - read
            if j < len(order) and j not in spec.category_maps]
    if not need:
        return set()
    get = getattr(df, "_get_column_array", None)
    more = set()
    with np.errstate(all="ignore"):
        for j in need:
            try:
                a = get(order[j]) if get is not None else None
            except (TypeError, IndexError, AttributeError):
                a = None
            if not isinstance(a, np.ndarray) or a.dtype.kind not in "fiub":
                more.add(j)
            elif a.dtype.kind == "f" and not np.isfinite(np.add.reduce(a)):
                more.add(j)
    return more


FEW_ROWS = 64  # frames up to this many rows take the column-array path

# id(spec) -> (spec, the input columns some node reads, or None for all): the graph is fixed
# once compiled, so this is worked out once per model
def checked_columns(spec: ModelSpec) -> frozenset:
    """Input columns a step that rejects NaN or infinity reads as they are (guards of kind
    "input": ``steps.Context.reject_nan`` on input columns), read by an op or not."""
    entry = _CHECKED.get(id(spec))
    if entry is not None and entry[0] is spec:
        return entry[1]
    cols = frozenset(int(c) for o in spec.graph.outputs if o.startswith(GUARD + "input:")
                     for c in o.split("@", 1)[1].split(","))
    if len(_CHECKED) > 4096:
        _CHECKED.clear()
    _CHECKED[id(spec)] = (spec, cols)
    return cols


_CHECKED: dict[int, tuple[ModelSpec, frozenset]] = {}


def boundary_columns(spec: ModelSpec, kind: str) -> dict[int, str]:
    """Input columns named by the boundary guards of ``kind`` (``guards.BOUNDARY_KINDS``:
    "strings", "objects"), each with the step's name."""
    entry = _BOUNDARY.get((id(spec), kind))
    if entry is not None and entry[0] is spec:
        return entry[1]
    out: dict[int, str] = {}
    for o in spec.graph.outputs:
        if o.startswith(f"{GUARD}{kind}:") and "@" in o:
            head, cols = o.split("@", 1)
            for c in cols.split(","):
                out.setdefault(int(c), head.split(":", 3)[3])
    if len(_BOUNDARY) > 4096:
        _BOUNDARY.clear()
    _BOUNDARY[(id(spec), kind)] = (spec, out)
    return out


_BOUNDARY: dict[tuple[int, str], tuple[ModelSpec, dict[int, str]]] = {}


def _refuse_numbers(spec: ModelSpec) -> None:
    """A numeric X where a step compares object values with None or a string (guards of kind
    "strings", ``steps.Context.refuse_numbers``): scikit-learn refuses the pair of types."""
    strings = boundary_columns(spec, "strings")
    if strings:
        j, step = min(strings.items())
        raise InputError(f"{spec.source}: {step} compares column {j} with a string or None, "
                         f"and scikit-learn refuses a numeric X there ('X' and "
                         f"'missing_values' types are expected to be both numerical); pass "
                         "an object array or a DataFrame")


def missing_or_zero(values: Any, where: Any, step: str) -> np.ndarray:
    """An object column a step reads only for its float NaNs (guards of kind "objects": a
    MissingIndicator(np.nan) alone, whose mask is ``X != X`` on object input): NaN where the
    value is a float NaN, 0.0 anywhere else (strings, None, numbers, infinity); pd.NA raises,
    as ``X != X`` raises TypeError on it in scikit-learn."""
    vals = np.asarray(values, dtype=object).reshape(-1)
    try:
        nan = np.asarray(vals != vals, dtype=bool)
    except TypeError as exc:  # pd.NA: "boolean value of NA is ambiguous"
        raise InputError(f"column {where!r} holds pd.NA, which {step} cannot compare "
                         "(scikit-learn raises TypeError)") from exc
    return np.where(nan, np.nan, 0.0)


def _column_arrays(df: Any) -> list | None:
    """The frame's columns as arrays, by position, without building a Series for each
    (``DataFrame._get_column_array``, which pandas' own row reductions use: ~0.6 us a column
    where ``df.iloc[:, k]`` costs ~20 us on pandas 3). None where pandas lacks it: the caller
    then takes the public path, which gives the same values."""
    get = getattr(df, "_get_column_array", None)
    if get is None:
        return None
    try:
        return [get(k) for k in range(df.shape[1])]
    except (TypeError, IndexError, AttributeError):
        return None


def _other_column(col: Any, name: Any) -> np.ndarray:
    """A column that is neither a numpy number dtype nor a category: object numbers, pandas
    extension dtypes (nullable ints/floats: NA becomes NaN)."""
    import pandas as pd

    values = col.to_numpy()
    if values.dtype.kind in "fiub":
        return values.astype(np.float64, copy=False)
    if values.dtype.kind == "O" or isinstance(col.dtype, pd.StringDtype) or \
            values.dtype.kind in "US":
        try:
            return pd.to_numeric(col, errors="raise").to_numpy(dtype=np.float64,
                                                               na_value=np.nan)
        except (TypeError, ValueError) as exc:
            raise InputError(f"column {name!r} holds non-numeric values ({exc})") from exc
    try:
        return col.to_numpy(dtype=np.float64, na_value=np.nan)
    except (TypeError, ValueError) as exc:
        raise InputError(f"column {name!r} has dtype {col.dtype}; expected numbers") from exc


def _from_object_array(X: np.ndarray, spec: ModelSpec) -> np.ndarray:
    """A numpy object (or string) array for a model whose pipeline encodes strings (integer
    column indices): category columns holding strings are encoded exactly as DataFrame string
    columns are; the other columns must hold numbers (None becomes NaN)."""
    out = np.empty(X.shape, dtype=np.float64)
    objects = boundary_columns(spec, "objects")
    for j, step in objects.items():
        out[:, j] = missing_or_zero(X[:, j], j, step)
    numeric = [j for j in range(X.shape[1]) if j not in spec.category_maps and
               j not in spec.hash_columns and j not in objects]
    for j in numeric:
        try:
            out[:, j] = X[:, j].astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(f"input column {j} holds non-numeric values ({exc})") from exc
    for j, rule in spec.hash_columns.items():
        out[:, j] = hash_column(X[:, j], rule, j)
    for j, cats in spec.category_maps.items():
        col = X[:, j]
        # numbers: codes as before (not in a pipeline's string vocabulary, where a float NaN
        # is the NaN category and any other number a value unseen at fit time)
        if col.dtype.kind == "O" and not is_vocabulary(cats) and _all_numbers(col):
            out[:, j] = col.astype(np.float64)
            continue
        out[:, j] = category_codes(col, cats, j, j in spec.category_unknown_error,
                                   na_columns(spec).get(j, ""))
    return out


def _all_numbers(col: np.ndarray) -> bool:
    import pandas as pd

    return pd.api.types.infer_dtype(col, skipna=True) in ("integer", "floating",
                                                           "mixed-integer-float", "decimal")


def _from_tensor(X: Any, spec: ModelSpec, keep_tensor: bool, check: bool):
    import torch

    if spec.hash_columns:
        raise InputError(f"{spec.source} reads categorical columns "
                         f"{sorted(spec.hash_columns)} as strings or integers; pass a numpy "
                         "object array or a pandas DataFrame, not a tensor")
    if X.dim() != 2:
        _check_shape(tuple(X.shape), spec)
    if not (X.dtype.is_floating_point or X.dtype in (torch.int32, torch.int64, torch.bool,
                                                     torch.int16, torch.int8, torch.uint8)):
        raise InputError(f"tensor has dtype {X.dtype}; expected a real number dtype")
    if X.dtype not in (torch.float32, torch.float64):
        X = X.to(getattr(torch, spec.int_input_dtype) if not X.dtype.is_floating_point
                 else torch.float32)
    _check_shape(tuple(X.shape), spec)
    if keep_tensor:
        if check and not (spec.allow_nan and spec.allow_inf):
            _check_values(X.detach().cpu().numpy(), spec)
        return X
    arr = X.detach().cpu().numpy()
    if check:
        _check_values(arr, spec)
    return arr
