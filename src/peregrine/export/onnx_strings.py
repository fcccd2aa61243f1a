"""String columns as string inputs of the ONNX file (``export_onnx(string_inputs=True)``,
``--string-inputs``): each column whose categories are strings becomes its own graph input,
``tensor(string)`` of shape ``[N, 1]``, and an ``ai.onnx.ml`` LabelEncoder maps it to the code
the compiled model's runtime gives the same string (``runtime/categories.py``): a category's
position, the empty string (the file's missing value) the code of the NaN category (code 0 of
a pipeline's vocabulary; a pandas str column's missing value, which scikit-learn reads as
NaN), anything else (unseen) NaN. The codes are Concat'ed with the numeric columns (input
``X``) in the model's column order and the program reads that matrix, as it reads the codes
file's X. A None category (code 1 of a vocabulary) has no string form and is not reachable
from the file. docs/export.md, "String inputs"."""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto, helper

MISSING = ""  # the file's missing value of a string column
# a value no fitted vocabulary holds, for the validation's unseen rows
UNSEEN = "\u2400peregrine-unseen"


def _is_missing(v: Any) -> bool:
    return v is None or (isinstance(v, (float, np.floating)) and v != v)


def string_columns(spec: Any) -> list[int]:
    """The columns that become string inputs: a category map whose categories (missing ones
    aside) are all strings; CatBoost's hashed columns are refused before this."""
    out = []
    for j, cats in sorted(spec.category_maps.items()):
        real = [c for c in cats if not _is_missing(c)]
        if j not in spec.hash_columns and real and all(isinstance(c, str) for c in real):
            out.append(j)
    return out


# names an input may not take: the numeric input and the outputs (onnx.OUTPUT_NAMES, methods)
RESERVED = frozenset({"X", "label", "variable", "probabilities", "scores", "log_probabilities",
                      "predict", "predict_proba", "decision_function", "score_samples",
                      "transform", "predict_log_proba"})


def input_names(spec: Any, cols: list[int], taken: frozenset[str] = RESERVED
                ) -> dict[int, str]:
    """Column -> its input's name: the feature name (``column_<j>`` without names), prefixed
    with ``input_`` where it would clash with ``X`` or an output."""
    names: dict[int, str] = {}
    for j in cols:
        name = str(spec.feature_names[j]) if spec.feature_names else f"column_{j}"
        while name in taken or name in names.values():
            name = f"input_{name}"
        names[j] = name
    return names


def missing_code(cats: tuple) -> float:
    """The code the runtime gives a missing (NaN) value of the column: the NaN category's
    position (a vocabulary's 0), else the first missing category's, else NaN."""
    for i, c in enumerate(cats):
        if isinstance(c, float) and c != c:
            return float(i)
    for i, c in enumerate(cats):
        if _is_missing(c):
            return float(i)
    return float("nan")


def lower_string_inputs(e: Any, spec: Any, names: dict[int, str], x_name: str,
                        x_elem: int, rows: Any) -> tuple[str, list[Any]]:
    """Emit the LabelEncoders and the Concat; the matrix's name and the graph's inputs."""
    d = spec.n_features
    numeric = [j for j in range(d) if j not in names]
    inputs = []
    if numeric:
        inputs.append(helper.make_tensor_value_info(x_name, x_elem, [rows, len(numeric)]))
    pieces, run_start = [], None  # runs of numeric columns: one Slice of X each
    at = {j: k for k, j in enumerate(numeric)}
    where: list[tuple[str, int]] = []  # per column: (X or its code tensor, column there)
    for j in range(d + 1):
        if j < d and j in at:
            run_start = j if run_start is None else run_start
            where.append((x_name, at[j]))
            continue
        if run_start is not None:
            lo = at[run_start]
            pieces.append(x_name if (lo == 0 and j - run_start == len(numeric))
                          else e.columns(x_name, lo, lo + (j - run_start)))
            run_start = None
        if j == d:
            break
        cats = spec.category_maps[j]
        keys = [c for c in cats if isinstance(c, str)]
        values = [float(i) for i, c in enumerate(cats) if isinstance(c, str)]
        gap = missing_code(cats)
        if MISSING not in keys and gap == gap:
            keys.append(MISSING)
            values.append(gap)
        inputs.append(helper.make_tensor_value_info(names[j], TensorProto.STRING, [rows, 1]))
        # codes are small integers: exact in float32 (the runtime refuses a map of 2^24)
        code = e.op("LabelEncoder", [names[j]], domain="ai.onnx.ml", keys_strings=keys,
                    values_floats=values, default_float=float("nan"))
        e.dtypes[code] = TensorProto.FLOAT
        pieces.append(e.cast(code, x_elem))
        e.widths[pieces[-1]] = 1
        e.string_codes[pieces[-1]] = (names[j], keys, values)
        where.append((pieces[-1], 0))
    out = pieces[0] if len(pieces) == 1 else e.op("Concat", pieces, axis=1)
    e.widths[x_name] = len(numeric)
    e.pieces[out] = where
    return out, inputs


def string_feed(compiled: Any, names: dict[int, str], x_name: str, x_dtype: Any,
                rows: Any, X: np.ndarray | None, seed: int = 0
                ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The file's inputs for some rows and the compiled model's matrix for the same rows.
    ``rows`` a DataFrame or object array: its own strings (a missing value as ``""``); else ``X``
    (codes): each code's category (a missing category as ``""``), a NaN code ``""`` or an
    unseen string (not for a handle_unknown='error' column). The compiled model's matrix
    is the runtime's conversion of the same values (``""`` given as NaN)."""
    spec = compiled.spec
    d = spec.n_features
    values = np.empty((len(X) if rows is None else len(rows), d), dtype=object)
    if rows is not None:  # a DataFrame or an object array in the model's column order
        codes = np.asarray(compiled.model_input(rows), dtype=np.float64)
        for j in range(d):
            values[:, j] = codes[:, j]
        for j in names:
            if hasattr(rows, "columns"):
                col = (rows[spec.feature_names[j]] if spec.feature_names
                       else rows.iloc[:, j]).to_numpy(object)
            else:
                col = np.asarray(rows, dtype=object).reshape(len(rows), -1)[:, j]
            # None, NaN and pd.NA are all "" in a string tensor: the NaN category here
            values[:, j] = [v if isinstance(v, str) else float("nan") for v in col]
    else:
        assert X is not None
        rng = np.random.default_rng(seed)
        values[:] = X
        for j in names:
            cats = spec.category_maps[j]
            unseen_ok = j not in spec.category_unknown_error
            col = []
            for c in X[:, j]:
                v = cats[int(c)] if c == c and 0 <= c < len(cats) and c == int(c) else None
                if isinstance(v, str):
                    col.append(v)
                elif unseen_ok:  # a missing category, NaN or a code no category has
                    col.append(UNSEEN if rng.random() < 0.5 else float("nan"))
                else:  # a missing or unseen value is rejected there: mostly known strings
                    known = [v for v in cats if isinstance(v, str)]
                    col.append(known[int(rng.integers(len(known)))] if known and
                               rng.random() < 0.8 else float("nan"))
            values[:, j] = col
    expected = np.asarray(compiled.model_input(values), dtype=np.float64)
    feed: dict[str, np.ndarray] = {}
    numeric = [j for j in range(d) if j not in names]
    if numeric:
        with np.errstate(over="ignore"):
            feed[x_name] = np.ascontiguousarray(expected[:, numeric].astype(x_dtype))
    for j, name in names.items():
        feed[name] = np.asarray([v if isinstance(v, str) else MISSING for v in values[:, j]],
                                dtype=object).reshape(-1, 1)
    return feed, expected


def strings_metadata(spec: Any) -> dict[str, str]:
    """``peregrine.string_inputs``: a JSON object, input name -> the model's column index, and
    ``peregrine.string_missing``: the string a missing value is given as."""
    import json

    names = input_names(spec, string_columns(spec))
    if not names:
        return {}
    return {"peregrine.string_inputs": json.dumps({n: j for j, n in names.items()}),
            "peregrine.string_missing": json.dumps(MISSING)}
