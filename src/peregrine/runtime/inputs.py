"""Input normalisation at the runtime boundary: numpy, pandas and torch inputs become one 2-D
float array (or a torch tensor for tensor backends), checked against the model's contract.
Every rejection is an InputError that says what and where."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from peregrine.errors import InputError
from peregrine.frontends.base import ModelSpec


def _is_dataframe(X: Any) -> bool:
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(X, pd.DataFrame)


def _is_tensor(X: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(X, torch.Tensor)


def prepare_input(X: Any, spec: ModelSpec, *, keep_tensor: bool = False, check: bool = True):
    """Return a 2-D float32/float64 array (or tensor when ``keep_tensor``) with validated shape."""
    if _is_tensor(X):
        return _from_tensor(X, spec, keep_tensor, check)
    if _is_dataframe(X):
        arr = _from_dataframe(X, spec)
    else:
        if isinstance(X, (list, tuple)):
            try:
                X = np.asarray(X)
            except ValueError as exc:
                raise InputError(f"input is a ragged sequence: {exc}") from exc
        if not isinstance(X, np.ndarray):
            if hasattr(X, "toarray") or hasattr(X, "tocsr"):
                raise InputError("sparse matrices are not supported; pass a dense array")
            raise InputError(
                f"unsupported input type {type(X).__name__}; pass a numpy array, pandas "
                "DataFrame or torch tensor"
            )
        arr = _numeric_array(X, where="input", int_dtype=spec.int_input_dtype)
    _check_shape(arr.shape, spec)
    if check:
        _check_values(arr, spec)
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


def _check_values(arr: np.ndarray, spec: ModelSpec) -> None:
    if spec.allow_nan and spec.allow_inf:
        return
    if spec.category_maps:  # NaN there is an unseen category, which the model itself handles
        arr = arr.copy()
        arr[:, list(spec.category_maps)] = 0.0
    if spec.allow_nan:
        bad = np.isinf(arr)
        what = "infinity"
    elif spec.allow_inf:
        bad = np.isnan(arr)
        what = "NaN"
    else:
        bad = ~np.isfinite(arr)
        what = "NaN or infinity"
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise InputError(
            f"input contains {what} at row {r}, column {c}; {spec.source} does not accept it"
        )


def _from_dataframe(df: Any, spec: ModelSpec) -> np.ndarray:
    import pandas as pd

    cols = [str(c) for c in df.columns]
    if spec.feature_names is not None:
        missing = [c for c in spec.feature_names if c not in cols]
        extra = [c for c in cols if c not in set(spec.feature_names)]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing columns {missing}")
            if extra:
                parts.append(f"unknown columns {extra}")
            raise InputError(
                f"DataFrame does not match the model's features: {'; '.join(parts)}"
            )
        if len(set(cols)) != len(cols):
            raise InputError("DataFrame has duplicate column names")
        df = df[list(spec.feature_names)]
    elif df.shape[1] != spec.n_features:
        raise InputError(f"input has {df.shape[1]} features, but the model expects "
                         f"{spec.n_features}")
    out = np.empty(df.shape, dtype=np.float64)
    all_f32 = True
    for j, name in enumerate(df.columns):
        col = df.iloc[:, j]
        # object/string columns with a fit-time category map (scikit-learn HGB encodes those
        # itself) are looked up like category columns
        if isinstance(col.dtype, pd.CategoricalDtype) or (
            j in spec.category_maps and col.dtype.kind not in "fiub"
        ):
            out[:, j] = _category_codes(col, spec.category_maps.get(j), name,
                                        j in spec.category_unknown_error)
            all_f32 = False
            continue
        values = col.to_numpy()
        if values.dtype.kind not in "fiub":
            if values.dtype.kind == "O" or isinstance(col.dtype, pd.StringDtype) or values.dtype.kind in "US":
                try:
                    values = pd.to_numeric(col, errors="raise").to_numpy(dtype=np.float64, na_value=np.nan)
                except (TypeError, ValueError) as exc:
                    raise InputError(f"column {name!r} holds non-numeric values ({exc})") from exc
            else:
                try:
                    values = col.to_numpy(dtype=np.float64, na_value=np.nan)
                except (TypeError, ValueError) as exc:
                    raise InputError(f"column {name!r} has dtype {col.dtype}; expected numbers") from exc
        elif values.dtype.kind != "f":
            values = values.astype(np.float64)
        if values.dtype != np.float32:
            all_f32 = False
        out[:, j] = values
    return out.astype(np.float32) if all_f32 and df.shape[1] else out


def _category_codes(col: Any, categories: tuple | None, name: Any,
                    unknown_error: bool = False) -> np.ndarray:
    """Codes as the source library saw them at fit time: the position of each value among the
    categories recorded then (not the column's own, possibly different, category order).
    Values unseen at fit time become missing, as LightGBM's and XGBoost's pandas paths do,
    unless ``unknown_error`` (an encoder with handle_unknown='error' reads the column, so
    scikit-learn raises): then the first unseen value is an InputError."""
    import pandas as pd

    if categories is None:
        codes = col.cat.codes.to_numpy()
    else:
        # get_indexer: -1 for unseen values, without pandas' deprecation of unseen values in
        # pd.Categorical(values, categories=...)
        values = col.to_numpy(dtype=object)
        codes = pd.Index(list(categories)).get_indexer(values)
        if unknown_error:
            # missing values have code 0 (or -1 here); whether they are an error depends on
            # the steps before the encoder (an imputer), so the graph's check decides those
            unseen = (codes < 0) & ~pd.isna(values)
            if unseen.any():
                r = int(np.flatnonzero(unseen)[0])
                raise InputError(
                    f"column {name!r} holds {values[r]!r} (row {r}), a category unseen at fit "
                    "time; the model's encoder has handle_unknown='error'"
                )
    codes = codes.astype(np.float64)
    codes[codes < 0] = np.nan
    return codes


def _from_tensor(X: Any, spec: ModelSpec, keep_tensor: bool, check: bool):
    import torch

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
