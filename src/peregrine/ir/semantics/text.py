"""Text featurizers at the program's input boundary (scikit-learn's CountVectorizer,
TfidfVectorizer, TfidfTransformer after a CountVectorizer, HashingVectorizer).

A text pipeline's raw input is a 1-D array of documents. The runtime turns it into the sparse
document-term matrix S (CSR, one column per vocabulary term or hash bucket) exactly as the
vectorizer's ``transform`` would, then into the dense matrix the graph reads: ``S @ projection``
(the first linear layer of a linear model or naive Bayes, computed as scikit-learn computes it
on sparse input) or ``S[:, columns]`` (the few terms a tree ensemble splits on). The
(n, vocabulary) matrix is never densified. ``TextSpec`` is that boundary's contract, carried by
``ModelSpec.text``; ``runtime/text.py`` is its vectorised implementation (docs/text.md).

Tokens follow scikit-learn's ``build_analyzer`` for ``analyzer="word"``: ``doc.lower()`` when
``lowercase``; tokens are the matches of ``token_pattern``; stop words are dropped; n-grams of
``ngram_range`` are the remaining tokens joined by one space. The supported token patterns are
those whose matches are the maximal runs of one character class of at least ``min_len``
characters (``TOKEN_PATTERNS``), which is what lets the runtime find them array-at-a-time.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

import numpy as np

# token_pattern -> (character class, shortest token). "word": Python re's \w for str patterns
# (str.isalnum() or "_"); "nonspace": not str.isspace(). Each pattern's matches (re.findall)
# are exactly the maximal runs of its class at least that long: \b on both sides of a greedy
# run of \w holds only at the run's ends (tests/test_text_tokens.py checks every pattern
# against re.findall on Unicode text).
TOKEN_PATTERNS: dict[str, tuple[str, int]] = {
    r"(?u)\b\w\w+\b": ("word", 2),
    r"\b\w\w+\b": ("word", 2),
    r"(?u)\w\w+": ("word", 2),
    r"\w\w+": ("word", 2),
    r"(?u)\b\w{2,}\b": ("word", 2),
    r"\b\w{2,}\b": ("word", 2),
    r"\w{2,}": ("word", 2),
    r"(?u)\b\w+\b": ("word", 1),
    r"\b\w+\b": ("word", 1),
    r"(?u)\w+": ("word", 1),
    r"\w+": ("word", 1),
    r"\S+": ("nonspace", 1),
    r"[^\s]+": ("nonspace", 1),
}
NORMS = ("", "l1", "l2")  # "" none; TfidfTransformer/HashingVectorizer's norm
STRIP_ACCENTS = ("", "ascii", "unicode")
ANALYZERS = ("word", "char", "char_wb")  # "" none; the vectorizers' strip_accents


@dataclass(frozen=True, eq=False)
class TextSpec:
    """What the boundary computes from the documents (one text input).

    ``vocabulary``: the terms in column order (``vocabulary_`` inverted), each a token or
    ``n`` tokens joined by one space; empty for hashing. ``n_features``: columns of S.
    ``hashing``: HashingVectorizer's murmurhash3 buckets (``alternate_sign``).
    ``idf``: TfidfTransformer's ``idf_`` (None: no idf weighting). ``projection``: (columns of
    S, K) float64 or None; ``columns``: the gathered columns or None; neither: the method
    returns S itself (a vectorizer on its own). ``dtype``: S's dtype (the vectorizer's)."""

    char_class: str  # "word" or "nonspace" (TOKEN_PATTERNS)
    min_len: int
    lowercase: bool
    ngram_range: tuple[int, int]
    stop_words: tuple[str, ...]
    vocabulary: tuple[str, ...]
    n_features: int
    binary: bool = False
    sublinear_tf: bool = False
    idf: np.ndarray | None = None
    norm: str = ""
    hashing: bool = False
    alternate_sign: bool = True
    dtype: str = "float64"
    projection: np.ndarray | None = None
    columns: np.ndarray | None = None
    binarize: float | None = None  # BernoulliNB's binarize on S before the projection
    column: int = 0  # the input column holding the documents (a DataFrame's, by position)
    # 0: the input is the documents alone. > 0: the input is a table this wide (a
    # ColumnTransformer's, docs/text.md "A text column in a ColumnTransformer"): ``column``
    # holds the documents, the other columns take the ordinary input path, and the graph reads
    # those ``frame_width`` columns (the text column a placeholder 0) followed by this
    # boundary's ``width`` columns
    frame_width: int = 0
    # "word" (tokens of char_class), "char" or "char_wb" (character n-grams of ngram_range,
    # runtime/text_char.py; char_class, min_len and stop_words unused)
    analyzer: str = "word"
    unread: tuple[int, ...] = ()  # table columns nothing reads (dropped): placeholders too
    # a table's other text columns (a ColumnTransformer's later text blocks, each with its own
    # ``column``): their boundaries' columns follow this one's, in this order
    more: tuple[TextSpec, ...] = ()
    strip_accents: str = ""  # after lower(): NFKD, then drop non-ASCII / combining marks
    # a scaler on S (MaxAbsScaler, StandardScaler(with_mean=False)): its sparse transform,
    # inplace_column_scale(S, 1 / scale_), multiplies each stored value by its column's
    # entry of this array; ``clip``: then np.clip(S.data, -1, 1) (MaxAbsScaler(clip=True))
    column_scale: np.ndarray | None = None
    clip: bool = False
    # the gathered columns go to XGBoost, which reads a sparse matrix's absent entries as
    # missing and its stored ones, explicit zeros included (a HashingVectorizer's signed sums
    # that cancel), as values: the gather writes NaN where S has no entry
    absent_nan: bool = False
    # bytes documents are decoded as the vectorizer's ``decode`` does:
    # ``doc.decode(encoding, decode_error)`` (str documents are read as they are)
    encoding: str = "utf-8"
    decode_error: str = "strict"

    def __post_init__(self) -> None:
        if self.char_class not in ("word", "nonspace") or self.min_len < 1:
            raise ValueError(f"text: bad token class {self.char_class!r}/{self.min_len}")
        lo, hi = self.ngram_range
        if not 1 <= lo <= hi:
            raise ValueError(f"text: bad ngram_range {self.ngram_range}")
        if self.analyzer not in ANALYZERS:
            raise ValueError(f"text: analyzer {self.analyzer!r} is not one of {ANALYZERS}")
        if self.strip_accents not in STRIP_ACCENTS:
            raise ValueError(f"text: strip_accents {self.strip_accents!r} is not one of "
                             f"{STRIP_ACCENTS}")
        if self.norm not in NORMS:
            raise ValueError(f"text: norm {self.norm!r} is not one of {NORMS}")
        if not self.hashing and len(self.vocabulary) != self.n_features:
            raise ValueError("text: vocabulary size differs from n_features")
        if self.idf is not None and np.shape(self.idf) != (self.n_features,):
            raise ValueError("text: idf has the wrong length")
        if self.column_scale is not None and np.shape(self.column_scale) != (self.n_features,):
            raise ValueError("text: column_scale has the wrong length")
        if self.projection is not None and np.shape(self.projection)[0] != self.n_features:
            raise ValueError("text: projection has the wrong number of rows")
        try:  # a codec or error handler Python does not know (a corrupt artifact)
            codecs.lookup(self.encoding)
            codecs.lookup_error(self.decode_error)
        except LookupError as e:
            raise ValueError(f"text: {e}") from None
        if self.frame_width and not 0 <= self.column < self.frame_width:
            raise ValueError(f"text: column {self.column} outside a table of "
                             f"{self.frame_width}")
        if self.columns is not None:
            cols = np.asarray(self.columns)
            if cols.size and (cols.min() < 0 or cols.max() >= self.n_features):
                raise ValueError("text: gathered column outside the vocabulary")

    @property
    def width(self) -> int | None:
        """Columns of the dense matrix handed to the graph; None: S is the answer."""
        if self.projection is not None:
            return int(np.shape(self.projection)[1])
        if self.columns is not None:
            return int(np.size(self.columns))
        return None

    def to_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        """(JSON-able metadata, arrays) for an artifact."""
        meta = {"char_class": self.char_class, "min_len": self.min_len,
                "lowercase": self.lowercase, "ngram_range": list(self.ngram_range),
                "stop_words": list(self.stop_words), "n_features": self.n_features,
                "binary": self.binary, "sublinear_tf": self.sublinear_tf, "norm": self.norm,
                "hashing": self.hashing, "alternate_sign": self.alternate_sign,
                "dtype": self.dtype, "column": self.column, "binarize": self.binarize,
                "strip_accents": self.strip_accents, "frame_width": self.frame_width,
                "unread": list(self.unread), "analyzer": self.analyzer, "clip": self.clip,
                "absent_nan": self.absent_nan, "encoding": self.encoding,
                "decode_error": self.decode_error}
        arrays = {"vocabulary": np.asarray(self.vocabulary, dtype=str)}
        for key in ("idf", "projection", "columns", "column_scale"):
            if getattr(self, key) is not None:
                arrays[key] = np.asarray(getattr(self, key))
        meta["more"] = []
        for i, other in enumerate(self.more):  # arrays keyed "more<i>.<key>"
            m, a = other.to_state()
            meta["more"].append(m)
            arrays.update({f"more{i}.{k}": v for k, v in a.items()})
        return meta, arrays

    @classmethod
    def from_state(cls, meta: dict, arrays: dict[str, np.ndarray]) -> TextSpec:
        vocab = arrays["vocabulary"]
        return cls(char_class=str(meta["char_class"]), min_len=int(meta["min_len"]),
                   lowercase=bool(meta["lowercase"]),
                   ngram_range=(int(meta["ngram_range"][0]), int(meta["ngram_range"][1])),
                   stop_words=tuple(str(w) for w in meta["stop_words"]),
                   vocabulary=tuple(str(v) for v in vocab.reshape(-1)),
                   n_features=int(meta["n_features"]), binary=bool(meta["binary"]),
                   sublinear_tf=bool(meta["sublinear_tf"]), norm=str(meta["norm"]),
                   hashing=bool(meta["hashing"]), alternate_sign=bool(meta["alternate_sign"]),
                   dtype=str(meta["dtype"]), column=int(meta["column"]),
                   binarize=None if meta.get("binarize") is None else float(meta["binarize"]),
                   strip_accents=str(meta.get("strip_accents", "")),
                   frame_width=int(meta.get("frame_width", 0)),
                   unread=tuple(int(c) for c in meta.get("unread", ())),
                   analyzer=str(meta.get("analyzer", "word")),
                   idf=arrays.get("idf"), projection=arrays.get("projection"),
                   columns=arrays.get("columns"), column_scale=arrays.get("column_scale"),
                   clip=bool(meta.get("clip", False)),
                   absent_nan=bool(meta.get("absent_nan", False)),
                   encoding=str(meta.get("encoding", "utf-8")),
                   decode_error=str(meta.get("decode_error", "strict")),
                   more=tuple(cls.from_state(m, {k.split(".", 1)[1]: v for k, v in arrays.items()
                                                 if k.startswith(f"more{i}.")})
                              for i, m in enumerate(meta.get("more", ()))))
