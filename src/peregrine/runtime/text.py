"""The text boundary (``ir/semantics/text.py``'s TextSpec): documents become scikit-learn's
document-term matrix without a Python loop per document or per token.

A vocabulary's matrix (and the projected scores) come from the compiled kernel
(``runtime/text_native.py``, ``kernels/text_kernel.py``) when it applies; the NumPy path
below, array at a time, is the fallback (hashing, keys past int64, more than 2**31 entries,
no LLVM) and the kernel's test oracle (``TextRunner(spec, compiled=False)``):

1. All documents are joined with a space (neither cased nor case-ignorable, so ``str.lower`` of
   the join is the join of each document's ``lower()``, Final_Sigma included; and outside
   every supported token class, so no token spans two documents) and read as UTF-32 code
   points.
2. A code-point table built once from Python's own ``re`` (``\\w``) or ``str.isspace`` marks the
   token characters; tokens are the runs of marked code points at least ``min_len`` long.
3. Each token gets a 64-bit polynomial hash from prefix sums (``sum (c_j + 1) B^j`` mod 2**64, made
   position-independent by ``B^-start``), is looked up among the hashes of the terms' tokens
   in an open-addressing table (``text_tokens.HashTable``) and then compared code point by code point with the term it hit: a
   hash collision can only make a lookup miss a term it does not equal, never hit a wrong one.
4. Stop words are dropped; n-grams are keys of consecutive token ids (exact integers), looked
   up in a second table; (document, term) pairs are counted with one sort.
5. TF-IDF, binary, sublinear tf and the l1/l2 row norms follow TfidfTransformer.transform and
   sklearn's ``inplace_csr_row_normalize_l1/l2`` in their order of operations; row sums are
   accumulated left to right (as the Cython loops do) one position per step over all rows.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np

from peregrine.errors import InputError
from peregrine.ir.semantics.text import TextSpec
from peregrine.runtime.text_char import char_grams, lookup_spans
from peregrine.runtime.text_hash import hashed_features, hashed_spans
from peregrine.runtime.text_tokens import (
    _SEP,
    HashTable,
    _class_table,
    _codes,
    _Tokens,
    lower_documents,
    stripped_codes,
)


def documents(X: Any, spec: TextSpec | None = None, empty: bool = False) -> list[str]:
    """The documents of ``X`` (a 1-D array, list, tuple or Series of str), as scikit-learn's
    vectorizers take them; anything else is an InputError naming what and where. Bytes
    documents are decoded as the vectorizer's ``decode`` does (``spec.encoding``,
    ``spec.decode_error``). ``empty``: no documents is an answer (CountVectorizer alone)."""
    if isinstance(X, (str, bytes)):
        raise InputError("text input must be an iterable of documents, not one string")
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(X, pd.DataFrame):
        raise InputError("text input must be 1-D documents; pass the text column (a Series)")
    if hasattr(X, "to_numpy"):
        X = X.to_numpy(dtype=object)
    if isinstance(X, np.ndarray):
        if X.ndim != 1:
            raise InputError(f"text input must be 1-D (one document per row), got {X.ndim}-D")
        docs = X.tolist()
    elif isinstance(X, (list, tuple)):
        docs = list(X)
    else:
        raise InputError(f"unsupported text input type {type(X).__name__}; pass a list, 1-D "
                         "array or Series of strings")
    if set(map(type, docs)) == {str}:  # the common case, checked at C speed
        return docs
    for i, d in enumerate(docs):
        if type(d) is not str:
            docs[i] = _document(i, d, spec)
    if not docs and not empty:
        raise InputError("input has 0 documents; expected at least one")
    return docs


def _document(i: int, d: Any, spec: TextSpec | None) -> str:
    """Document ``i`` that is not exactly a str: a str subclass as its str, bytes decoded."""
    if isinstance(d, str):
        return str(d)
    if isinstance(d, (bytes, bytearray)):
        encoding, errors = (spec.encoding, spec.decode_error) if spec else ("utf-8", "strict")
        try:
            return bytes(d).decode(encoding, errors)
        except UnicodeError as e:  # scikit-learn raises UnicodeDecodeError
            raise InputError(f"document {i} is not valid {encoding} ({e}); the vectorizer "
                             f"decodes bytes with decode_error={errors!r}") from None
    raise InputError(f"document {i} is {d!r} ({type(d).__name__}); every document must "
                     "be a str or bytes (scikit-learn rejects NaN documents too)")


class TextRunner:
    """A TextSpec's compiled lookup tables; ``matrix(docs)`` is the vectorizer's transform."""

    def __init__(self, spec: TextSpec, compiled: bool = True) -> None:
        self.spec = spec
        self.table = _class_table(spec.char_class)
        lo, hi = spec.ngram_range
        self.stop = frozenset(spec.stop_words)
        self.compiled = compiled  # HashingVectorizer's compiled hashing (text_hash.py)
        # an idf of infinity (smooth_idf=False and a given vocabulary term no training
        # document held) makes values scikit-learn's normalize refuses: the NumPy path, which
        # says where (``_refuse_infinite``)
        self.infinite_idf = spec.idf is not None and not bool(np.all(np.isfinite(spec.idf)))
        self._native: Any = None if compiled and not self.infinite_idf else False
        if spec.hashing or spec.analyzer != "word":
            # character n-grams are looked up whole: one verified table of the terms
            self.tokens = None if spec.hashing else _Tokens(list(spec.vocabulary), "word")
            return
        parts: dict[str, int] = {}
        grams: list[list[int]] = []
        for term in spec.vocabulary:
            words = term.split(" ")
            grams.append([parts.setdefault(w, len(parts)) for w in words])
        stop = [w for w in spec.stop_words if w not in parts]
        names = list(parts) + stop
        self.is_stop = np.zeros(len(names), dtype=bool)
        self.is_stop[[i for i, w in enumerate(names) if w in self.stop]] = True
        self.tokens = _Tokens(names, spec.char_class)
        t = max(len(names), 1)
        if t ** hi >= 1 << 62:
            raise ValueError(f"text: {t} tokens ** n-gram length {hi} overflows the n-gram keys")
        self.t = t
        self.term_ids = grams  # each term's token ids (text_native.py builds its keys)
        # per n: n-gram key (token ids in base t) -> the term's column
        self.grams: dict[int, HashTable] = {}
        for n in range(lo, hi + 1):
            cols = [j for j, g in enumerate(grams) if len(g) == n]
            keys = np.zeros(len(cols), dtype=np.int64)
            for k in range(n):
                keys = keys * t + np.array([grams[j][k] for j in cols], dtype=np.int64)
            self.grams[n] = HashTable(keys, np.asarray(cols, dtype=np.int64))

    def native(self) -> Any:
        """The compiled tokenizer's tables (runtime/text_native.py; text_char_native.py for
        character n-grams, text_hash_native.py for HashingVectorizer's words), built on first
        use; None where it does not run (n-gram keys past int64, an empty vocabulary, more
        than 2**22 columns, no LLVM)."""
        if self._native is None:
            try:
                if self.spec.analyzer != "word":
                    from peregrine.runtime.text_char_native import NativeChar as kind
                elif self.spec.hashing:
                    from peregrine.runtime.text_hash_native import NativeHash as kind
                else:
                    from peregrine.runtime.text_native import NativeText as kind
                self._native = kind(self)
            except (ImportError, OSError, OverflowError, RuntimeError):
                self._native = False
        return self._native or None

    # ---------------------------------------------------------------------- tokenizer --
    def _tokens(self, docs: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                np.ndarray]:
        """(code points, run starts, run ends, run's document)."""
        spec = self.spec
        if spec.strip_accents:
            codes, lens = stripped_codes(docs, spec.lowercase, spec.strip_accents)
        else:
            joined = _SEP.join(docs)
            lens = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
            if spec.lowercase:
                joined, lens = lower_documents(joined, lens)
            codes = _codes(joined)
        doc_start = np.cumsum(lens + 1) - lens - 1
        mark = self.table[codes].view(np.int8)
        edges = np.diff(mark, prepend=np.int8(0), append=np.int8(0))
        starts = np.flatnonzero(edges == 1)
        ends = np.flatnonzero(edges == -1)
        if spec.min_len > 1:
            keep = ends - starts >= spec.min_len
            starts, ends = starts[keep], ends[keep]
        doc = np.searchsorted(doc_start, starts, side="right") - 1
        return codes, starts, ends, doc

    def counts(self, docs: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The document-term counts as CSR arrays (data int64, indices, indptr), indices
        sorted within each row, explicit zeros never stored."""
        spec = self.spec
        nat = self.native()
        got = None if nat is None else nat.run(docs)
        if got is not None:
            return got[:3]
        if spec.analyzer != "word":
            codes, starts, ends, doc = char_grams(docs, spec.analyzer, spec.lowercase,
                                                  spec.strip_accents, spec.ngram_range)
            if spec.hashing:
                feat, sign = hashed_spans(spec, codes, starts, ends, self.compiled)
                return _count_pairs(doc, feat, len(docs), spec.n_features, sign)
            ids = lookup_spans(self.tokens, codes, starts, ends, self.compiled)
            ok = ids >= 0
            return _count_pairs(doc[ok], ids[ok], len(docs), spec.n_features, None)
        codes, starts, ends, doc = self._tokens(docs)
        if spec.hashing:
            feat, sign, fdoc = hashed_features(self, codes, starts, ends, doc)
            return _count_pairs(fdoc, feat, len(docs), spec.n_features, sign)
        ids = self.tokens.lookup(codes, starts, ends)
        if self.stop:
            keep = ~((ids >= 0) & self.is_stop[np.maximum(ids, 0)])
            ids, doc = ids[keep], doc[keep]
        lo, hi = spec.ngram_range
        feats, fdocs = [], []
        m = ids.size
        for n in range(lo, hi + 1):
            if m < n:
                continue
            k = m - n + 1
            ok = doc[:k] == doc[n - 1:]
            key = np.zeros(k, dtype=np.int64)
            for i in range(n):
                part = ids[i:i + k]
                ok &= part >= 0
                key = key * self.t + np.maximum(part, 0)
            col = self.grams[n].get(key)
            ok &= col >= 0
            feats.append(col[ok])
            fdocs.append(doc[:k][ok])
        feat = np.concatenate(feats) if feats else np.zeros(0, dtype=np.int64)
        fdoc = np.concatenate(fdocs) if fdocs else np.zeros(0, dtype=np.int64)
        return _count_pairs(fdoc, feat, len(docs), spec.n_features, None)

    # ------------------------------------------------------------------------ weights --
    def matrix(self, docs: list[str]) -> Any:
        """S: the vectorizer's transform (a scipy.sparse csr_matrix of ``spec.dtype``)."""
        spec = self.spec
        if spec.hashing:
            _refuse_surrogates(docs)
        nat = self.native()
        if nat is not None and nat.weighs and (spec.idf is not None or spec.norm):
            got = nat.run(docs, weigh=True)  # tf-idf values from the kernel
            if got is not None:
                return _csr(self._scaled(got[3], got[1]), got[1], got[2], len(docs), spec)
        data, indices, indptr = self.counts(docs)
        if spec.binary:
            data = np.ones_like(data)  # X.data.fill(1) / np.sign of positive counts
        values = data.astype(np.float64)
        if spec.sublinear_tf:
            np.log(values, out=values)
            values += 1.0
        if spec.idf is not None:
            values *= np.asarray(spec.idf, dtype=np.float64)[indices]
        if self.infinite_idf and spec.norm:
            _refuse_infinite(values, indices, indptr, spec)
        if spec.norm:
            values = _normalize_rows(values, indptr, spec.norm)
        if spec.idf is None and not spec.norm and not spec.sublinear_tf \
                and spec.column_scale is None:
            values = data  # counts: CountVectorizer's integers
        return _csr(self._scaled(values, indices), indices, indptr, len(docs), spec)

    def _scaled(self, values: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """A scaler's sparse transform on S's values (TextSpec.column_scale): each value times
        its column's scale as inplace_column_scale does, then np.clip to [-1, 1]."""
        spec = self.spec
        if spec.column_scale is None:
            return values
        values = values * np.asarray(spec.column_scale, dtype=np.float64)[indices]
        if spec.clip:
            np.clip(values, -1.0, 1.0, out=values)
        return values

    def dense(self, docs: list[str]) -> np.ndarray:
        """The (n, K) float64 matrix the graph reads: S @ projection or S[:, columns]."""
        spec = self.spec
        if spec.hashing:
            _refuse_surrogates(docs)
        nat = self.native()
        if nat is not None and nat.weighs and spec.projection is not None and \
                spec.binarize is None and spec.column_scale is None:
            got = nat.run(docs, projection=np.asarray(spec.projection, dtype=np.float64))
            if got is not None:
                return got[4]
        s = self.matrix(docs)
        if spec.binarize is not None:  # sklearn's binarize on sparse input: x > t -> 1, else 0
            s.data = (s.data > spec.binarize).astype(np.float64)
        if spec.projection is not None:
            # scipy's csr @ dense, as sklearn's safe_sparse_dot does on sparse input: each
            # output accumulates data * weight over the row's entries in index order
            return np.asarray(s @ np.asarray(spec.projection, dtype=np.float64),
                              dtype=np.float64)
        cols = np.asarray(spec.columns, dtype=np.int64)
        sub = s[:, cols]
        if not spec.absent_nan:
            return np.asarray(sub.toarray(), dtype=np.float64)
        out = np.full(sub.shape, np.nan)  # absent: missing; stored (zeros too): the value
        rows = np.repeat(np.arange(sub.shape[0]), np.diff(sub.indptr))
        out[rows, sub.indices] = sub.data
        return out


def _refuse_surrogates(docs: list[str]) -> None:
    """HashingVectorizer hashes each feature's UTF-8 bytes: a lone surrogate code point has
    none, and scikit-learn raises UnicodeEncodeError there; an InputError naming the
    document (the kernels would encode it as Python's "surrogatepass" does)."""
    joined = "\n".join(docs)
    if joined.isascii():
        return
    try:
        joined.encode("utf-8")
    except UnicodeEncodeError as e:
        ends = np.cumsum([len(d) + 1 for d in docs])
        doc = int(np.searchsorted(ends, e.start, side="right"))
        raise InputError(
            f"document {doc} holds a lone surrogate (U+{ord(joined[e.start]):04X}), which has "
            "no UTF-8 encoding: HashingVectorizer hashes UTF-8 bytes (scikit-learn raises "
            "UnicodeEncodeError)") from None


def _refuse_infinite(values: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
                     spec: TextSpec) -> None:
    """An infinite idf reached a document: scikit-learn's normalize (check_array) refuses
    the infinity before the norm; an InputError naming the document and the term."""
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        doc = int(np.searchsorted(indptr, bad[0], side="right")) - 1
        col = int(indices[bad[0]])
        term = spec.vocabulary[col] if col < len(spec.vocabulary) else col
        raise InputError(
            f"document {doc}: term {term!r} has an infinite idf (smooth_idf=False and no "
            "training document held it), so its tf-idf is infinite and the norm refuses it, "
            "as scikit-learn's normalize does (Input contains infinity)")


def _csr(values: np.ndarray, indices: np.ndarray, indptr: np.ndarray, n_docs: int,
         spec: TextSpec) -> Any:
    from scipy import sparse

    out = sparse.csr_matrix((values.astype(spec.dtype, copy=False), indices, indptr),
                            shape=(n_docs, spec.n_features))
    out.has_sorted_indices = True
    return out


def _count_pairs(doc: np.ndarray, feat: np.ndarray, n_docs: int, n_features: int,
                 sign: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    key = doc.astype(np.int64) * n_features + feat
    if sign is None:
        uniq, data = np.unique(key, return_counts=True)
        data = data.astype(np.int64)
    else:  # HashingVectorizer: signed sums; sum_duplicates keeps the ones that cancel, as
        # explicit zeros (binary then makes them 1, XGBoost reads them as values)
        order = np.argsort(key, kind="stable")
        key, sign = key[order], sign[order]
        first = np.flatnonzero(np.diff(key, prepend=-1) != 0)
        uniq = key[first]
        data = np.add.reduceat(sign.astype(np.int64), first) if first.size else \
            np.zeros(0, dtype=np.int64)
    rows = uniq // n_features
    indices = (uniq - rows * n_features).astype(np.int32)
    indptr = np.zeros(n_docs + 1, dtype=np.int32)
    np.cumsum(np.bincount(rows, minlength=n_docs), out=indptr[1:])
    return data, indices, indptr


def _normalize_rows(values: np.ndarray, indptr: np.ndarray, norm: str) -> np.ndarray:
    """sklearn's inplace_csr_row_normalize_l1/l2: a left-to-right sum per row (|x| or x*x),
    rows summing to 0 untouched, then x / sqrt(sum) (l2) or x / sum (l1). The sums advance one
    position per step over all rows longer than it (rows sorted by length), so the order of
    additions is the Cython loop's."""
    terms = np.abs(values) if norm == "l1" else values * values
    nnz = np.diff(indptr).astype(np.int64)
    order = np.argsort(-nnz, kind="stable")
    starts = indptr[:-1].astype(np.int64)[order]
    lens = nnz[order]
    sums = np.zeros(lens.size, dtype=np.float64)
    longest = int(lens[0]) if lens.size else 0
    # rows longer than k (lens descending): the rows that have a k-th entry
    active = np.searchsorted(-lens, -np.arange(longest), side="left")
    for k in range(longest):
        a = int(active[k])
        sums[:a] += terms[starts[:a] + k]
    total = np.empty_like(sums)
    total[order] = sums
    if norm == "l2":
        total = np.sqrt(total)
    total[total == 0.0] = 1.0  # sum 0: the row is skipped (x / 1 is x)
    return values / np.repeat(total, nnz)


@functools.lru_cache(maxsize=32)
def _runner(spec: TextSpec) -> TextRunner:
    return TextRunner(spec)


def runner(spec: TextSpec) -> TextRunner:
    """The (cached) runner of ``spec``: its tables are built on the first call."""
    return _runner(spec)


def explain_text(spec: TextSpec) -> list[dict[str, Any]]:
    """What each text boundary of a model does (``CompiledModel.explain``): the analyzer, the
    matrix's columns, what the graph reads of it, and which tokenizer runs: a compiled kernel
    or the NumPy path (docs/text.md says where each applies). Builds the runner's tables, as
    the first call would."""
    out = []
    for one in (spec, *spec.more):
        nat = runner(one).native()
        reads = (f"S @ projection ({int(np.shape(one.projection)[1])} columns)"
                 if one.projection is not None else
                 f"S[:, columns] ({int(np.size(one.columns))} columns"
                 + (", absent entries as NaN)" if one.absent_nan else ")")
                 if one.columns is not None else "S (csr_matrix)")
        out.append({"analyzer": "hashing " + one.analyzer if one.hashing else one.analyzer,
                    "ngram_range": list(one.ngram_range), "columns": one.n_features,
                    "reads": reads,
                    "tokenizer": "NumPy path" if nat is None else
                    f"compiled kernel ({type(nat).__name__})"})
    return out


def text_matrix(X: Any, spec: Any) -> Any:
    """A text model's documents as its vectorizer's sparse matrix (``ModelSpec.text``)."""
    text = spec.text
    # CountVectorizer alone answers no documents with a (0, n) matrix; with idf or a norm
    # scikit-learn's check_array refuses 0 rows (HashingVectorizer raises too)
    counts = not (text.hashing or text.idf is not None or text.norm or text.sublinear_tf)
    docs = documents(X, text, empty=counts)
    if not docs:
        import scipy.sparse as sp

        return sp.csr_matrix((0, text.n_features), dtype=text.dtype)
    return runner(text).matrix(docs)


def text_input(X: Any, spec: Any, prepare: Any = None) -> np.ndarray:
    """A text model's documents as the dense (n, n_features) matrix its graph reads; for a
    table (``TextSpec.frame_width``: a ColumnTransformer's text column) its other columns
    through ``prepare`` (inputs.prepare_input: the ordinary input path, passed in so this
    module does not import it back), then the boundary's columns."""
    text = spec.text
    if not text.frame_width:
        return runner(text).dense(documents(X, text))
    from dataclasses import replace

    texts = (text, *text.more)
    docs, rest = _text_columns(X, spec, texts)
    arr = prepare(rest, replace(spec, text=None, n_features=text.frame_width))
    dense = [runner(t).dense(documents(d, t)) for t, d in zip(texts, docs)]
    return np.hstack([arr.astype(np.float64, copy=False), *dense])


def _text_columns(X: Any, spec: Any, texts: tuple) -> tuple[list[Any], Any]:
    """(each text column's documents, the table with a placeholder 0 in their place and in
    the unread columns) of a DataFrame (the columns by name when the model knows its names)
    or a 2-D numpy array."""
    text = spec.text
    blank = [t.column for t in texts] + list(text.unread)
    pd = sys.modules.get("pandas")
    if pd is not None and isinstance(X, pd.DataFrame):
        if spec.feature_names is not None:
            names = [spec.feature_names[c] for c in blank]
            for name in names[:len(texts)]:
                if name not in X.columns:
                    raise InputError(f"DataFrame has no column {name!r} (a text column)")
        elif X.shape[1] != text.frame_width:
            raise InputError(f"input has {X.shape[1]} columns, but the model expects "
                             f"{text.frame_width}")
        else:
            names = [X.columns[c] for c in blank]
        docs = [X[name] for name in names[:len(texts)]]
        if not all(isinstance(d, pd.Series) for d in docs):
            raise InputError(f"DataFrame has duplicate columns named one of {names}")
        rest = X.copy(deep=False)
        for name in names:  # the graph never reads them
            rest[name] = 0.0
        return docs, rest
    if isinstance(X, np.ndarray) and X.ndim == 2:
        if X.shape[1] != text.frame_width:
            raise InputError(f"input has {X.shape[1]} columns, but the model expects "
                             f"{text.frame_width}")
        rest = X.copy()
        rest[:, blank] = 0
        return [X[:, t.column] for t in texts], rest
    raise InputError(f"{spec.source} reads a table (a DataFrame, or a 2-D numpy array) whose "
                     f"column {text.column} holds the documents; got {type(X).__name__}")
