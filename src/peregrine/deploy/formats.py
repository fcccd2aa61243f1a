"""Request and response bodies of ``peregrine serve``: JSON, ``.npy`` and Arrow IPC streams.

A decoded request is a :class:`Payload`: the rows to score (a 2-D NumPy array or a pandas
DataFrame, exactly what ``CompiledModel`` methods take) and a ``key`` saying which other requests
its rows may be stacked with. Numeric arrays of one dtype and width stack whatever format they
came in (a JSON row and an ``.npy`` body of float64 share one model call); DataFrames stack only
with frames of the same columns and dtypes; inputs whose concatenation could change their meaning
(categorical columns, whose codes differ per frame) get a key no other request shares.

Validation of the values themselves (feature count, column names, strings where numbers go,
NaN policy) is left to the compiled model, whose typed errors say what and where; this module
only rejects bodies that are not well-formed, with :class:`BodyError`.
"""

from __future__ import annotations

import io
import itertools
import json
import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from peregrine.deploy import arrow_layouts

try:  # parses JSON about 10x faster than json.loads (a 28-value row: 10 us -> 0.8 us)
    import orjson
except ImportError:  # the stdlib does the same, slower
    orjson = None

JSON = "application/json"
NPY = "application/x-npy"
ARROW = "application/vnd.apache.arrow.stream"
FORMATS = (JSON, NPY, ARROW)

_FLOAT64 = np.dtype(np.float64).str  # what arr.dtype.str says, without asking per request
_unique = itertools.count()  # keys for payloads that must not share a model call


class BodyError(ValueError):
    """The request body is not well-formed (HTTP 400), or its format is unknown (415)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Payload:
    data: Any  # np.ndarray (2-D) or pandas.DataFrame
    rows: int
    key: tuple  # payloads with equal keys may be concatenated into one model call
    fmt: str  # the response format: the request's own


def media_type(content_type: str | None) -> str:
    """The format named by a Content-Type header (parameters such as charset ignored)."""
    base = (content_type or JSON).split(";")[0].strip().lower()
    # curl -d sends application/x-www-form-urlencoded unless told otherwise: a JSON body is
    # what anyone posting to this server means by it
    if base in ("", "*/*", "text/json", "text/plain", "application/x-www-form-urlencoded"):
        return JSON
    if base in ("application/vnd.apache.arrow.file", "application/x-arrow"):
        raise BodyError(f"Content-Type {base}: send an Arrow IPC *stream* ({ARROW})", 415)
    if base in ("application/octet-stream", "application/npy"):
        return NPY
    if base not in FORMATS:
        raise BodyError(f"unsupported Content-Type {base!r}; send one of {', '.join(FORMATS)}", 415)
    return base


_MEDIA_TYPES: dict[bytes | None, str] = {}  # Content-Type header bytes -> format, seen so far


def media_type_of(header: bytes | None) -> str:
    """:func:`media_type` of a raw header value, remembered: a server sees the same few
    Content-Type values over and over (the split, strip and lower cost ~0.5 us a request).
    Only accepted values are remembered, and at most 64 of them (clients choose the header)."""
    fmt = _MEDIA_TYPES.get(header)
    if fmt is None:
        fmt = media_type(None if header is None else header.decode("latin-1"))
        if len(_MEDIA_TYPES) < 64:
            _MEDIA_TYPES[header] = fmt
    return fmt


def decode(body: bytes | memoryview, fmt: str, feature_names: tuple[str, ...] | None) -> Payload:
    """``body``: a bytes-like object (a memoryview where the server read it in several
    messages)."""
    if fmt == JSON:
        return _decode_json(body)
    if fmt == NPY:
        return _decode_npy(body)
    return _decode_arrow(body, feature_names)


def _array_payload(arr: np.ndarray, fmt: str) -> Payload:
    return Payload(arr, int(arr.shape[0]), ("array", arr.dtype.str, arr.shape[1]), fmt)


def _frame_payload(df: Any, fmt: str) -> Payload:
    import pandas as pd

    dtypes = tuple(str(t) for t in df.dtypes)
    if any(isinstance(t, pd.CategoricalDtype) for t in df.dtypes):
        key: tuple = ("alone", next(_unique))
    else:
        key = ("frame", tuple(str(c) for c in df.columns), dtypes)
    return Payload(df, int(df.shape[0]), key, fmt)


# ------------------------------------------------------------------------------------ JSON --
def _loads(body: bytes | memoryview) -> Any:
    """``json.loads``'s answer, the same Python values (floats correctly rounded in both; the
    tests compare them on edge cases). orjson is strict JSON; what only json.loads reads
    (NaN/Infinity literals, integers beyond 64 bits, UTF-16 bodies, lone surrogates) and
    malformed bodies (its error message names the position) take json.loads."""
    if orjson is not None:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    # json.loads takes no memoryview (a body the server read in several messages)
    return json.loads(bytes(body) if isinstance(body, memoryview) else body)


def _decode_json(body: bytes) -> Payload:
    try:
        doc = _loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BodyError(f"body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or ("rows" in doc) == ("columns" in doc):
        raise BodyError(
            'JSON body must be an object with either "rows": [[...], ...] or '
            '"columns": {"name": [...], ...}'
        )
    if "rows" in doc:
        return _json_rows(doc["rows"])
    return _json_columns(doc["columns"])


def _json_rows(rows: Any) -> Payload:
    if not isinstance(rows, list) or not rows:
        raise BodyError('"rows" must be a non-empty list of rows (lists of values)')
    first = rows[0]
    if not isinstance(first, list):
        raise BodyError('"rows" must be a list of lists; row 0 is not a list')
    width = len(first)
    if len(rows) > 1:  # a single row is a list of its own width
        for i, row in enumerate(rows):
            if not isinstance(row, list) or len(row) != width:
                what = "is not a list" if not isinstance(row, list) else f"has {len(row)} values"
                raise BodyError(f'"rows": row {i} {what}; row 0 has {width}')
    try:
        # numbers, booleans and null (NaN): the common case, one conversion
        arr = np.array(rows, dtype=np.float64)
    except (TypeError, ValueError):  # noqa: B904 - the object path below says what is wrong
        # strings somewhere: an object array, which the model encodes where it was fitted on
        # strings and rejects, naming the column, where it was not
        arr = np.empty((len(rows), width), dtype=object)
        for i, row in enumerate(rows):
            for j, v in enumerate(row):
                if isinstance(v, (list, dict)):
                    what = type(v).__name__
                    raise BodyError(f'"rows": row {i}, column {j} holds a nested {what}') from None
                arr[i, j] = np.nan if v is None else v
        # per-row encoding (fit-time category maps): such rows stack like numeric ones
        return Payload(arr, len(rows), ("array", "object", width), JSON)
    if arr.ndim != 2:
        raise BodyError('"rows" must be a list of lists of values (a 2-D table)')
    return Payload(arr, len(rows), ("array", _FLOAT64, width), JSON)  # _array_payload's key


def _json_columns(columns: Any) -> Payload:
    import pandas as pd

    if not isinstance(columns, dict) or not columns:
        raise BodyError('"columns" must be a non-empty object mapping column names to lists')
    length = None
    for name, values in columns.items():
        if not isinstance(values, list):
            raise BodyError(f'"columns": column {name!r} is not a list of values')
        if length is None:
            length = len(values)
        elif len(values) != length:
            raise BodyError(
                f'"columns": column {name!r} has {len(values)} values, the first '
                f"column has {length}"
            )
        for i, v in enumerate(values):
            if isinstance(v, (list, dict)):
                raise BodyError(f'"columns": column {name!r}, row {i} holds a nested value')
    if not length:
        raise BodyError('"columns" holds no rows')
    data = {}
    for name, values in columns.items():
        col = pd.Series(values)
        if col.dtype == object and all(
            v is None or isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
        ):
            col = col.astype(np.float64)  # numbers with nulls: NaN where null
        data[name] = col
    return _frame_payload(pd.DataFrame(data), JSON)


def encode_json(out: np.ndarray, classes: Any = None) -> bytes:
    """``{"predictions": [...]}`` (plus ``"classes"``); ``classes`` an array or, cheaper, a
    list already."""
    if classes is not None and not isinstance(classes, list):
        classes = np.asarray(classes).tolist()
    if orjson is not None and out.dtype.kind in "fiub":
        # tolist() gives each float as the double of the same value (a float32 answer's exact
        # value), written by orjson with the shortest digits that read back as that double,
        # as json.dumps writes them; NaN and infinities become null, as below. A single-row
        # answer costs ~0.5 us this way, ~2 us through a float64 copy and orjson's numpy path
        doc: dict[str, Any] = {"predictions": out.tolist()}
        if classes is not None:
            doc["classes"] = classes
        try:
            return orjson.dumps(doc)
        except TypeError:  # a value orjson does not take (an integer beyond 64 bits)
            pass
    doc = {"predictions": out.tolist()}
    if classes is not None:
        doc["classes"] = classes
    try:
        return json.dumps(doc, allow_nan=False, separators=(",", ":")).encode()
    except ValueError:  # NaN or infinity in the output: JSON has no such numbers, send null
        doc["predictions"] = _finite_or_none(doc["predictions"])
        return json.dumps(doc, separators=(",", ":")).encode()


def _finite_or_none(v: Any) -> Any:
    if isinstance(v, list):
        return [_finite_or_none(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


# ------------------------------------------------------------------------------------- npy --
# np.load parses the .npy header with ast.literal_eval, and CPython 3.11 (before 3.11.8) keeps
# the AST validator's recursion depth per interpreter, not per thread: two threads parsing at
# once can raise "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905;
# seen here as a 500 under concurrent .npy requests). One lock serialises the header parses.
NPY_LOCK = threading.Lock()


def load_npy(body: bytes) -> Any:
    """np.load of a .npy body without pickles, safe to call from several threads at once."""
    with NPY_LOCK:
        return np.load(io.BytesIO(body), allow_pickle=False)


def _decode_npy(body: bytes) -> Payload:
    try:
        arr = load_npy(body)
    except ValueError as exc:  # object arrays need pickles: refused
        raise BodyError(f"body is not a valid .npy array without pickles: {exc}") from None
    except (OSError, EOFError) as exc:
        raise BodyError(f"body is not a valid .npy array: {exc}") from None
    if not isinstance(arr, np.ndarray) or arr.ndim != 2:
        raise BodyError(
            f".npy body must hold a 2-D array (rows, features), got {getattr(arr, 'ndim', '?')}-D"
        )
    if arr.shape[0] == 0:
        raise BodyError(".npy body holds 0 rows")
    if arr.dtype.kind in "fiub":
        return _array_payload(arr, NPY)
    return Payload(arr, int(arr.shape[0]), ("alone", next(_unique)), NPY)


def encode_npy(out: np.ndarray) -> bytes:
    if out.dtype == object:  # string labels: .npy without pickles holds them as unicode
        out = out.astype(str)
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(out), allow_pickle=False)
    return buf.getvalue()


# ----------------------------------------------------------------------------------- Arrow --
def _decode_arrow(body: bytes, feature_names: tuple[str, ...] | None) -> Payload:
    import pyarrow as pa

    whole = np.frombuffer(body, np.uint8)
    # a body laid out as one seen before (every byte but the values equal): its rows at once
    known = arrow_layouts.known_rows(whole, feature_names)
    if known is not None:
        return _array_payload(known, ARROW)
    try:
        reader = pa.ipc.open_stream(body)  # zero-copy: the batches' buffers point into body
        batches = list(reader)
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        raise BodyError(f"body is not a valid Arrow IPC stream: {exc}") from None
    schema = reader.schema
    rows = sum(b.num_rows for b in batches)
    if rows == 0:
        raise BodyError("Arrow body holds 0 rows")
    names = tuple(schema.names)
    order = list(range(len(names)))
    if (
        feature_names is not None
        and set(names) == set(feature_names)
        and len(names) == len(feature_names)
    ):
        order = [names.index(n) for n in feature_names]  # matched by name
        names = feature_names
    types = set(schema.types)
    numeric = len(types) == 1 and next(iter(types)) in (pa.float64(), pa.float32())
    if numeric and (feature_names is None or names == feature_names):
        # the bulk case: one float type, columns the model's own: one (rows, features) array
        dtype = np.float64 if next(iter(types)) == pa.float64() else np.float32
        arr = np.empty((rows, len(order)), dtype=dtype)
        start = 0
        for batch in batches:
            n = batch.num_rows
            if n:
                layout = _fill_rows(arr[start : start + n], [batch.column(k) for k in order], whole)
                if layout is not None and len(batches) == 1:
                    arrow_layouts.remember_body(whole, layout, feature_names)
            start += n
        return _array_payload(arr, ARROW)
    # anything else (strings, integers, mixed types, other names) is a DataFrame: the model
    # matches its columns by name and says which one is wrong
    table = pa.Table.from_batches(batches, schema=schema).select(order)
    return _frame_payload(table.rename_columns(list(names)).to_pandas(), ARROW)


def _fill_rows(
    out: np.ndarray, columns: list, body: np.ndarray
) -> arrow_layouts.ColumnLayout | None:
    """``out[:] =`` the float ``columns`` side by side (nulls become NaN); the columns' layout
    in ``body`` where they are one strided view of it.

    An IPC writer lays a batch's column buffers out one after the other, each padded to 8
    bytes: where none has nulls and they sit in ``body`` at one spacing, the body *is* a
    (features, rows) matrix, and one transposing copy of that view fills ``out`` (a 10K x 28
    float64 body: ~0.12 ms, against ~0.4 ms for 28 strided column writes). Any other layout
    (nulls, slices, columns reordered by name) goes column by column."""
    layout = arrow_layouts.layout_of(columns, body, out.dtype)
    if layout is not None:
        np.copyto(out, layout.columns(body).T)
        return layout
    for j, col in enumerate(columns):
        out[:, j] = col.to_numpy(zero_copy_only=False)  # nulls: NaN
    return None


def _column_matrix(columns: list, body: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """The columns as one strided (features, rows) view of ``body``, or None where their
    buffers are not equally spaced inside it."""
    layout = arrow_layouts.layout_of(columns, body, dtype)
    return None if layout is None else layout.columns(body)


def encode_arrow(out: np.ndarray, classes: Any = None) -> bytes:
    import pyarrow as pa

    if out.ndim == 1:
        names = ["predictions"]
    elif classes is not None and len(classes) == out.shape[1]:
        names = [str(c) for c in classes]
    else:
        names = [str(j) for j in range(out.shape[1])]
    # an answer of a shape, dtype and names written before: pyarrow's bytes, these values
    data = arrow_layouts.known_answer(out, names)
    if data is not None:
        return data
    # one transposing copy makes every column contiguous, so Arrow takes each without a copy
    # of its own (strided columns were converted element by element)
    cols = [out] if out.ndim == 1 else list(np.ascontiguousarray(out.T))
    arrays = [pa.array(c.astype(str) if c.dtype == object else c) for c in cols]
    batch = pa.RecordBatch.from_arrays(arrays, names=names)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    data = sink.getvalue().to_pybytes()
    arrow_layouts.remember_answer(out, names, data)
    return data


def encode(out: np.ndarray, fmt: str, classes: Any = None) -> bytes:
    if fmt == JSON:
        return encode_json(out, classes)
    if fmt == NPY:
        return encode_npy(out)
    return encode_arrow(out, classes)
