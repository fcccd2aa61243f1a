"""scipy.sparse input at the runtime boundary (docs/sparse.md).

A CSR, CSC or COO matrix or array is read with the source library's rule for the entries its
structure does not hold (``ModelSpec.sparse_absent``): scikit-learn, LightGBM and CatBoost read
them as 0; XGBoost's DMatrix reads them as missing (NaN: the default direction), while an
explicitly stored 0 stays a present 0 and a stored NaN stays NaN for every library.

The graph reads dense rows, so the matrix is made dense one block of rows at a time (at most
``BLOCK_BYTES`` of dense values per block) and the blocks' answers are concatenated: a
1M x 100K CSR never becomes an 800 GB array. Where the program's first op on the input is a
linear layer and the matrix is sparse enough, the product is taken on the sparse matrix itself
(``runtime/sparse_linear.py``) and no dense row is ever built.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from peregrine.errors import InputError
from peregrine.ir.ops import Op
from peregrine.ir.spec import ModelSpec

# dense bytes per block of rows: small enough that the block is still in cache when the kernel
# reads it (filling 100,000 x 500 at density 0.05 took 82 ms of thread time in 64 MiB blocks,
# 17 ms in 8 MiB and 16 ms in 2 MiB ones, Zen 4), large enough that a block's fixed cost (one
# executable run, tens of us) stays small (docs/sparse.md)
BLOCK_BYTES = 4 << 20
# wide matrices: at least MIN_ROWS rows a block (a block of 5 rows costs its fixed cost per 5
# rows) while that stays within MAX_BLOCK_BYTES, the memory bound
MIN_ROWS, MAX_BLOCK_BYTES = 128, 64 << 20
FORMATS = ("csr", "csc", "coo")


def is_sparse(X: Any) -> bool:
    """A scipy.sparse matrix or array (scipy is not imported for a dense input)."""
    sp = sys.modules.get("scipy.sparse")
    return sp is not None and sp.issparse(X)


def as_csr(X: Any, spec: ModelSpec, *, check: bool = True) -> Any:
    """``X`` as a canonical CSR matrix (duplicates summed, as scipy's ``toarray`` does) of a
    float dtype, checked against the contract: format, width, the source's absent-entry rule
    and, when ``check``, the stored values the source rejects (row and column named)."""
    from scipy import sparse

    if spec.sparse_absent == "refuse":
        raise InputError(f"{spec.source}: sparse input is not supported for this model: its "
                         "answer depends on which steps keep the matrix sparse (docs/sparse.md); "
                         "pass X.toarray() with the values the model should read")
    if spec.hash_columns:
        raise InputError(f"{spec.source} reads categorical columns {sorted(spec.hash_columns)} "
                         "as strings or integers; pass a numpy object array or a pandas "
                         "DataFrame, not a sparse matrix")
    if X.format not in FORMATS:
        raise InputError(f"sparse input in {X.format.upper()} format is not supported; pass "
                         "CSR, CSC or COO (X.tocsr())")
    if len(X.shape) != 2:
        raise InputError(f"input must be 2-D (rows, features), got {len(X.shape)}-D")
    if X.shape[1] != spec.n_features:
        raise InputError(f"input has {X.shape[1]} features, but the model expects "
                         f"{spec.n_features}")
    if X.shape[0] == 0:
        raise InputError("input has 0 rows; expected at least one")
    kind = X.dtype.kind
    if kind in "iub":
        X = X.astype(spec.int_input_dtype)
    elif kind != "f":
        raise InputError(f"sparse input has dtype {X.dtype}; expected numbers (float, int or "
                         "bool)")
    elif X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64 if X.dtype.itemsize > 4 else np.float32)
    csr = sparse.csr_matrix(X)  # no copy for a csr_matrix; csr_array/CSC/COO converted
    if not csr.has_canonical_format:
        csr = csr.copy()
        csr.sum_duplicates()  # also sorts each row's indices
    if check:
        _check_stored(csr, spec)
    if spec.sparse_nan != "missing":
        csr = _stored_nan(csr, spec, check)
    return csr


def _stored_nan(csr: Any, spec: ModelSpec, check: bool) -> Any:
    """NaN among the stored values where the source reads them otherwise than a dense NaN
    (``ModelSpec.sparse_nan``): refused (when ``check``), or read as +inf (a copy: the
    caller's matrix is left as it is)."""
    data = csr.data
    with np.errstate(all="ignore"):
        if not np.isnan(np.add.reduce(data, None)):  # no NaN (a NaN sum: NaN or inf - inf)
            return csr
    nan = np.isnan(data)
    if not nan.any():
        return csr
    if spec.sparse_nan == "refuse":
        if not check:
            return csr
        k = int(np.argmax(nan))
        row = int(np.searchsorted(csr.indptr, k, side="right")) - 1
        raise InputError(f"input contains NaN at row {row}, column {int(csr.indices[k])}; "
                         f"{spec.source} does not accept NaN in a sparse matrix (it does in "
                         "a dense array: pass X.toarray())")
    csr = csr.copy()
    csr.data[nan] = np.inf
    return csr


def _check_stored(csr: Any, spec: ModelSpec) -> None:
    """NaN / infinity among the stored values where the source rejects them (absent entries
    are 0, or NaN only where the source reads them as missing, which it accepts)."""
    if spec.allow_nan and spec.allow_inf:
        return
    data = csr.data
    with np.errstate(all="ignore"):
        if np.isfinite(np.add.reduce(data, None)):
            return
    bad = np.isinf(data) if spec.allow_nan else np.isnan(data) if spec.allow_inf else \
        ~np.isfinite(data)
    if not bad.any():
        return
    what = "infinity" if spec.allow_nan else "NaN" if spec.allow_inf else "NaN or infinity"
    k = int(np.argmax(bad))
    row = int(np.searchsorted(csr.indptr, k, side="right")) - 1
    raise InputError(f"input contains {what} at row {row}, column {int(csr.indices[k])}; "
                     f"{spec.source} does not accept it")


def block_rows(n_features: int) -> int:
    """Rows per dense block: BLOCK_BYTES of float64 values, or MIN_ROWS rows up to
    MAX_BLOCK_BYTES for wide matrices."""
    row = 8 * max(n_features, 1)
    return max(1, BLOCK_BYTES // row, min(MIN_ROWS, MAX_BLOCK_BYTES // row))


def block_dtype(model: Any, csr: Any) -> np.dtype:
    """float32 when every reader of the input is a forest whose library casts the input to
    float32 before comparing (``Forest.input_dtype``: scikit-learn trees, XGBoost) and no method
    returns the input's dtype: the cast the library makes, done while filling, halves the
    block's bytes; else the matrix's own dtype."""
    if csr.dtype == np.float32:
        return csr.dtype
    cached = model.__dict__.get("_sparse_f32")
    if cached is None:
        graph = model.spec.graph
        x = next(n.name for n in graph.nodes if n.op is Op.INPUT)
        readers = [n for n in graph.nodes if x in n.inputs]
        cached = model.__dict__["_sparse_f32"] = bool(readers) and all(
            n.op is Op.TREE_ENSEMBLE and n.attrs.forest.input_dtype == np.float32
            for n in readers) and all(m.dtype != "input" for m in model.spec.methods.values())
    return np.dtype(np.float32) if cached else csr.dtype


def dense_rows(csr: Any, start: int, stop: int, spec: ModelSpec,
               dtype: Any = None) -> np.ndarray:
    """Rows ``start:stop`` of canonical ``csr`` as a dense array, absent entries filled by the
    source's rule and stored entries (zeros and NaN included) copied as they are."""
    lo, hi = int(csr.indptr[start]), int(csr.indptr[stop])
    shape = (stop - start, csr.shape[1])
    dtype = csr.dtype if dtype is None else dtype
    if spec.sparse_absent == "nan":
        out = np.full(shape, np.nan, dtype=dtype)
    else:
        out = np.zeros(shape, dtype=dtype)
    # flat positions (row offset + column): one put, ~25% less time than out[rows, cols]
    at = np.repeat(np.arange(0, out.size, shape[1], dtype=np.int64),
                   np.diff(csr.indptr[start:stop + 1]))
    at += csr.indices[lo:hi]
    out.ravel()[at] = csr.data[lo:hi]  # canonical: one entry per position
    return out


def densify(X: Any, spec: ModelSpec, *, check: bool = True) -> np.ndarray:
    """The whole of ``X`` dense (prepare_input on a sparse matrix: callers that want one
    array; CompiledModel methods go through ``call_sparse``, which bounds the memory)."""
    csr = as_csr(X, spec, check=check)
    return dense_rows(csr, 0, csr.shape[0], spec)


def call_sparse(model: Any, name: str, X: Any) -> Any:
    """``model.<name>(X)`` for a sparse ``X``: the sparse linear path where it applies, else the
    dense method on blocks of rows, their answers concatenated."""
    spec = model.spec
    csr = as_csr(X, spec, check=model.options.validate_input)
    from peregrine.runtime.sparse_linear import linear_call

    out = linear_call(model, name, csr)
    if out is not None:
        return out
    n = csr.shape[0]
    step = block_rows(csr.shape[1])
    dtype = block_dtype(model, csr)
    if step >= n:
        return model._call(name, dense_rows(csr, 0, n, spec, dtype))
    parts = []
    for start in range(0, n, step):
        stop = min(n, start + step)
        try:
            parts.append(model._call(name, dense_rows(csr, start, stop, spec, dtype)))
        except InputError as exc:  # the block's row numbers: say which block
            raise InputError(f"rows {start}..{stop - 1} of the sparse input (row numbers "
                             f"below count from {start}): {exc}") from exc
    return concat_rows(parts)


def concat_rows(parts: list[Any]) -> Any:
    """Blocks' answers stacked by rows, in the class the method returns (dense or sparse)."""
    if is_sparse(parts[0]):
        from scipy import sparse

        out = sparse.vstack(parts, format=parts[0].format)
        return type(parts[0])(out)
    return np.concatenate(parts, axis=0)
