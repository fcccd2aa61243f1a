"""String tensors in ONNX-ML graphs (skl2onnx's and onnxmltools' encoders): LabelEncoder,
CategoryMapper and OneHotEncoder on strings, Gather of input columns, as ONNX Runtime answers
(onnxruntime/core/providers/cpu/ml/label_encoder.cc, category_mapper.cc, onehotencoder.cc).

Strings never enter the IR. A string input column is mapped at the runtime boundary to codes,
as the scikit-learn frontend's string columns are (``ModelSpec.category_maps``,
runtime/categories.py): the code of a value is its position in the graph's vocabulary, every
string the graph's ops compare with; any other string (and a missing value) gets NaN, which no
key matches, so it takes the op's default as an unseen string does in ONNX Runtime. A string
tensor is a ``Value`` whose ``labels`` are its strings and whose node holds positions into
them (the representation of class labels), so a string output (a LabelEncoder to strings,
a classifier's labels) comes back as strings.
"""

from __future__ import annotations

import numpy as np

from peregrine.frontends.onnx_ml import ML, Ctx, Value, handles, refuse, set_out
from peregrine.ir import Op

# ops whose string attributes are the strings they compare their input with
_KEYS = {"LabelEncoder": ("keys_strings", "keys_tensor"), "CategoryMapper": ("cats_strings",),
         "OneHotEncoder": ("cats_strings",)}


def vocabulary(nodes, attrs_of) -> tuple[str, ...]:
    """Every string the graph's encoders compare their inputs with, sorted: the code table of
    every string input column."""
    words: set[str] = set()
    for node in nodes:
        for key in _KEYS.get(node.op_type, ()):
            value = attrs_of(node).get(key)
            if value is None:
                continue
            arr = np.asarray(value).reshape(-1)
            if arr.dtype.kind in "OUS":
                words.update(v.decode() if isinstance(v, bytes) else str(v) for v in arr)
    return tuple(sorted(words))


def _table(a: dict, prefix: str) -> np.ndarray | None:
    """LabelEncoder's keys or values, whichever typed attribute holds them."""
    for suffix in ("strings", "int64s", "floats"):
        if f"{prefix}_{suffix}" in a:
            arr = np.asarray(a[f"{prefix}_{suffix}"])
            return arr.astype(object) if suffix == "strings" else arr
    if f"{prefix}_tensor" in a:
        arr = np.asarray(a[f"{prefix}_tensor"]).reshape(-1)
        return np.array([v.decode() if isinstance(v, bytes) else v for v in arr], dtype=object) \
            if arr.dtype.kind in "OSU" else arr
    return None


def _default(a: dict, values: np.ndarray):
    """ONNX Runtime's default for a key not found, in the values' type."""
    if "default_tensor" in a:
        d = np.asarray(a["default_tensor"]).reshape(-1)[0]
        return d.decode() if isinstance(d, bytes) else d
    if values.dtype == object:
        return a.get("default_string", "_Unused")
    if values.dtype.kind == "f":
        return float(a.get("default_float", -0.0))
    return int(a.get("default_int64", -1))


def _keys_as_input(node, x: Value, keys: np.ndarray) -> np.ndarray:
    """The keys as the float64 values the input's node holds (string keys: their positions)."""
    if keys.dtype == object:
        if x.labels is None or x.dtype != "string":
            raise refuse(node, "string keys on a numeric input")
        pos = {s: i for i, s in enumerate(x.labels.tolist())}
        return np.array([float(pos.get(k, np.nan)) for k in keys.tolist()])
    if x.labels is not None:
        raise refuse(node, "numeric keys on a string input")
    return keys.astype(np.float64)


def _lookup(ctx: Ctx, node, x: Value, keys: np.ndarray, values: np.ndarray, default) -> Value:
    """CATEGORY_MAP of every column of x: key -> value, anything else -> default. String values
    come out as positions into ``values + [default]``."""
    cats = _keys_as_input(node, x, keys)
    keep = ~np.isnan(cats)  # a string key no input string can hold (never: the vocabulary)
    cats = cats[keep]
    if values.dtype == object:
        labels = np.array(list(values.tolist()) + [default], dtype=object)
        codes, unknown, dtype = np.arange(len(values), dtype=np.float64)[keep], \
            float(len(values)), "string"
    else:
        labels, codes = None, values.astype(np.float64)[keep]
        unknown = float(default)
        dtype = "int64" if values.dtype.kind in "iu" else "float32"
        if dtype == "float32" and np.any(codes.astype(np.float32) != codes):
            codes = codes.astype(np.float32).astype(np.float64)  # ORT holds float values
    # the first of repeated keys wins in ONNX Runtime's map build (emplace keeps the first)
    _, first = np.unique(cats, return_index=True)
    first = np.sort(first)
    cats, codes = cats[first], codes[first]
    k = x.width
    out = ctx.g.add(Op.CATEGORY_MAP, (x.node,), width=k, columns=np.arange(k),
                    categories=tuple(cats for _ in range(k)),
                    codes=tuple(codes for _ in range(k)), unknown=np.full(k, unknown))
    return Value(out, k, dtype, labels=labels)


@handles(ML, "LabelEncoder")
def _label_encoder(node, a, ctx: Ctx) -> None:
    x = ctx.computed(node.input[0], strings=True)
    keys, values = _table(a, "keys"), _table(a, "values")
    if keys is None or values is None or len(keys) != len(values):
        raise refuse(node, "keys and values of different lengths or types")
    set_out(ctx, node, _lookup(ctx, node, x, keys, values, _default(a, values)))


@handles(ML, "CategoryMapper")
def _category_mapper(node, a, ctx: Ctx) -> None:
    x = ctx.computed(node.input[0], strings=True)
    strings = np.asarray(a.get("cats_strings", []), dtype=object)
    ints = np.asarray(a.get("cats_int64s", []), dtype=np.int64)
    if len(strings) != len(ints):
        raise refuse(node, "cats_strings and cats_int64s of different lengths")
    if x.dtype == "string":  # strings -> int64
        out = _lookup(ctx, node, x, strings, ints, int(a.get("default_int64", -1)))
    else:  # int64 -> strings
        out = _lookup(ctx, node, x, ints, strings, a.get("default_string", "_Unused"))
    set_out(ctx, node, out)


@handles(ML, "OneHotEncoder")
def _one_hot(node, a, ctx: Ctx) -> None:
    """(n, k) -> (n, k * categories) float: the (n, k, categories) output flattened as the
    exporters' following Reshape reads it; zeros=1 sets no column for an unknown value."""
    x = ctx.computed(node.input[0], strings=True)
    if "cats_strings" in a:
        cats = _keys_as_input(node, x, np.asarray(a["cats_strings"], dtype=object))
    elif "cats_int64s" in a:
        cats = _keys_as_input(node, x, np.asarray(a["cats_int64s"], dtype=np.int64))
    else:
        raise refuse(node, "a OneHotEncoder without categories")
    if not int(a.get("zeros", 1)):
        raise refuse(node, "zeros=0 (ONNX Runtime fails on an unknown category)")
    n_cats, k = len(cats), x.width
    keep = ~np.isnan(cats)
    out = ctx.g.add(Op.ONE_HOT, (x.node,), width=k * n_cats, columns=np.arange(k),
                    categories=tuple(cats[keep] for _ in range(k)),
                    slots=tuple(j * n_cats + np.flatnonzero(keep) for j in range(k)),
                    unknown_slots=np.full(k, -1))
    set_out(ctx, node, Value(out, k * n_cats, "float32"))


@handles("", "Gather")
def _gather(node, a, ctx: Ctx) -> None:
    """Columns of a 2-D tensor by constant indices (skl2onnx picks a DataFrame input's
    columns this way)."""
    x = ctx.computed(node.input[0], strings=True)
    idx = ctx.get(node.input[1]).const
    if idx is None or int(a.get("axis", 0)) not in (1, -1) or np.asarray(idx).ndim > 1:
        raise refuse(node, "a Gather other than of columns by constant indices")
    cols = np.asarray(idx, dtype=np.int64).reshape(-1)
    cols = np.where(cols < 0, cols + x.width, cols)
    if np.any((cols < 0) | (cols >= x.width)):
        raise refuse(node, f"column indices {cols.tolist()} of {x.width}")
    out = ctx.g.add(Op.SELECT, (x.node,), width=len(cols), columns=cols)
    set_out(ctx, node, Value(out, len(cols), x.dtype, labels=x.labels))
