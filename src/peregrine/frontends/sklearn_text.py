"""scikit-learn text vectorizers (sklearn/feature_extraction/text.py): CountVectorizer,
TfidfVectorizer, HashingVectorizer, and CountVectorizer -> TfidfTransformer, on their own
(transform returns the csr_matrix scikit-learn returns) and in front of any head that reads the
document-term matrix through linear layers (linear models, naive Bayes) or tree splits.

The vectorizer becomes the program's text boundary (``ir/semantics/text.py`` TextSpec, run by
``runtime/text.py``); the head is converted on a flow as wide as the vocabulary and the graph is
then split at its input (``_split``): the first LINEAR layers' weights become the boundary's
projection (S @ W computed as sklearn's sparse decision functions compute it; the layers keep
only their bias), or the columns tree splits read become the boundary's gather. The
(documents x vocabulary) matrix is never dense. Refused: a callable analyzer, callable
preprocessor/tokenizer/analyzer/strip_accents, token patterns outside TOKEN_PATTERNS, input
other than "content", each naming the parameter.
"""

from __future__ import annotations

import codecs
import dataclasses
from typing import Any

import numpy as np
from sklearn import __version__ as sklearn_version
from sklearn.feature_extraction.text import (
    CountVectorizer,
    HashingVectorizer,
    TfidfTransformer,
    TfidfVectorizer,
)
from sklearn.pipeline import Pipeline

from peregrine.errors import UnsupportedModelError
from peregrine.frontends.base import (
    declare_params,
    qualified_name,
    register_frontend,
    require_fitted,
    unsupported,
)
from peregrine.frontends.sklearn_pipeline import SOURCES
from peregrine.frontends.steps import Context, Flow, convert_head, convert_step
from peregrine.ir import Graph, GraphBuilder, Node, Op, verify
from peregrine.ir.linear_split import split_linear
from peregrine.ir.semantics import DEFS
from peregrine.ir.semantics.text import ANALYZERS, TOKEN_PATTERNS, TextSpec
from peregrine.ir.spec import MethodSpec, ModelSpec

VECTORIZERS = (CountVectorizer, HashingVectorizer)  # TfidfVectorizer is a CountVectorizer


def _analyzer(vec: Any) -> tuple[str, int]:
    """The token class of ``vec``'s analyzer, refusing what the boundary does not reproduce."""
    if vec.input != "content":
        raise unsupported(vec, f"input={vec.input!r}", "'content'")
    if vec.analyzer not in ANALYZERS:  # a callable
        raise unsupported(vec, f"analyzer={vec.analyzer!r}", "'word', 'char', 'char_wb'")
    for name in ("preprocessor",) + (("tokenizer",) if vec.analyzer == "word" else ()):
        if getattr(vec, name) is not None:
            raise unsupported(vec, f"a callable {name}", f"{name}=None")
    if vec.strip_accents not in (None, "ascii", "unicode"):  # a callable
        raise unsupported(vec, f"strip_accents={vec.strip_accents!r}",
                          "None, 'ascii', 'unicode'")
    lo, hi = vec.ngram_range
    if vec.analyzer != "word":  # char n-grams: the token pattern and tokenizer are unused
        if not 1 <= lo <= hi:
            raise unsupported(vec, f"ngram_range={vec.ngram_range!r}")
        return "word", 1
    if vec.token_pattern not in TOKEN_PATTERNS:
        raise unsupported(vec, f"token_pattern={vec.token_pattern!r}",
                          ", ".join(repr(p) for p in TOKEN_PATTERNS))
    if not 1 <= lo <= hi:
        raise unsupported(vec, f"ngram_range={vec.ngram_range!r}")
    return TOKEN_PATTERNS[vec.token_pattern]


def _stop_words(vec: Any) -> tuple[str, ...]:
    if vec.analyzer != "word":  # sklearn's char analyzers never read them
        return ()
    stop = vec.get_stop_words()  # "english" -> the built-in list; a list as given
    return tuple(sorted(stop)) if stop else ()


def _decoding(vec: Any) -> dict[str, str]:
    """How ``vec.decode`` reads bytes documents: ``doc.decode(encoding, decode_error)``."""
    try:
        codecs.lookup(vec.encoding)
        codecs.lookup_error(vec.decode_error)
    except (LookupError, TypeError):
        raise unsupported(vec, f"encoding={vec.encoding!r}, decode_error={vec.decode_error!r}",
                          "a codec and an error handler Python's codecs know") from None
    return {"encoding": str(vec.encoding), "decode_error": str(vec.decode_error)}


def _dtype(vec: Any, allowed: tuple[str, ...]) -> str:
    dtype = np.dtype(vec.dtype).name
    if dtype not in allowed:
        raise unsupported(vec, f"dtype={dtype}", ", ".join(allowed))
    return dtype


def text_spec(vec: Any, tfidf: Any = None) -> TextSpec:
    """The TextSpec of a fitted vectorizer (and the TfidfTransformer after a CountVectorizer)."""
    char_class, min_len = _analyzer(vec)
    common = {"char_class": char_class, "min_len": min_len, "lowercase": bool(vec.lowercase),
              "ngram_range": (int(vec.ngram_range[0]), int(vec.ngram_range[1])),
              "stop_words": _stop_words(vec), "binary": bool(vec.binary),
              "strip_accents": vec.strip_accents or "", "analyzer": vec.analyzer,
              **_decoding(vec)}
    if isinstance(vec, HashingVectorizer):
        hashing = {"vocabulary": (), "n_features": int(vec.n_features), "hashing": True,
                   "alternate_sign": bool(vec.alternate_sign)}
        if tfidf is None:
            return TextSpec(norm=vec.norm or "", dtype=_dtype(vec, ("float64", "float32")),
                            **hashing, **common)
        if vec.norm is not None:  # two row normalisations in a row: not reproduced
            raise unsupported(vec, f"norm={vec.norm!r} before a TfidfTransformer", "None")
        _dtype(vec, ("float64",))
        return TextSpec(idf=_idf(tfidf, int(vec.n_features)), norm=tfidf.norm or "",
                        sublinear_tf=bool(tfidf.sublinear_tf), dtype="float64", **hashing,
                        **common)
    require_fitted(vec, "vocabulary_")
    vocab = vec.vocabulary_
    terms = [""] * len(vocab)
    for term, j in vocab.items():
        terms[int(j)] = term
    if any(" " in w for w in _stop_words(vec)):
        raise unsupported(vec, "stop words containing a space")
    weights = tfidf if tfidf is not None else (vec if isinstance(vec, TfidfVectorizer) else None)
    if weights is None:
        return TextSpec(vocabulary=tuple(terms), n_features=len(terms),
                        dtype=_dtype(vec, ("int64", "int32", "float64")), **common)
    if weights is not tfidf:
        _dtype(vec, ("float64",))  # float32 TF-IDF rounds each step in float32: not reproduced
    idf = _idf(weights, len(terms))
    return TextSpec(vocabulary=tuple(terms), n_features=len(terms), idf=idf,
                    norm=weights.norm or "", sublinear_tf=bool(weights.sublinear_tf),
                    dtype="float64", **common)


def _idf(weights: Any, n_features: int) -> np.ndarray | None:
    """TfidfTransformer's (or TfidfVectorizer's) idf_, None without use_idf."""
    require_fitted(weights, "n_features_in_" if isinstance(weights, TfidfTransformer)
                   else "vocabulary_")
    if int(getattr(weights, "n_features_in_", n_features)) != n_features:
        raise unsupported(weights, f"{weights.n_features_in_} features after a vectorizer of "
                          f"{n_features}")
    return np.asarray(weights.idf_, dtype=np.float64) if weights.use_idf else None


# --------------------------------------------------------------------- conversion --


def _spec(model: Any, text: TextSpec, rest: list[Any]) -> ModelSpec:
    """The model: ``text`` at the boundary, then ``rest`` (steps and a head, or nothing)."""
    g = GraphBuilder()
    if not rest:  # the vectorizer alone: transform is S itself
        x = g.input(1)
        method = MethodSpec("transform", dtype=text.dtype, sparse="csr_matrix")
        return ModelSpec(graph=g.build({"transform": x}), methods={"transform": method},
                         n_features=1, source=qualified_name(model), allow_nan=False,
                         allow_inf=False, text=text, versions={"sklearn": sklearn_version})
    x = g.input(text.n_features)
    ctx = Context(g)
    # S is a csr_matrix: XGBoost reads its absent entries as missing (steps._absent_as_missing)
    flow = Flow(x, (None,) * text.n_features, nan=False, keeps_dtype=False, sparse="csr")
    for est in rest[:-1]:
        flow = convert_step(est, ctx, flow)
    head = convert_head(rest[-1], ctx, flow)
    if ctx.checks:
        raise unsupported(model, "steps checking their input rows after a text vectorizer")
    graph, text = _split(g.build(head.outputs), text, model)
    return ModelSpec(graph=graph, methods=head.methods, n_features=int(text.width),
                     source=qualified_name(model), allow_nan=False, allow_inf=False, text=text,
                     versions={"sklearn": sklearn_version})


def _split(graph: Graph, text: TextSpec, model: Any) -> tuple[Graph, TextSpec]:
    """Move the reading of the (documents x terms) input into the boundary: every reader of
    the input is a LINEAR layer (its weights become the projection; it keeps its bias as an
    AFFINE shift, added after the product as sklearn adds intercept_ / class_log_prior_), a
    BINARIZE feeding only LINEAR layers (BernoulliNB: binarized counts), or a tree ensemble
    (the columns its splits read are gathered, its features renumbered; XGBoost's through the
    IMPUTE reading absent entries as missing), each possibly behind a selector's SELECT."""
    inp = x = next(n for n in graph.nodes if n.op is Op.INPUT)
    readers = [n for n in graph.nodes if x.name in n.inputs]
    # a scaler on S (MaxAbsScaler, StandardScaler(with_mean=False), then MaxAbsScaler's CLIP):
    # scikit-learn scales a sparse matrix's stored values by 1 / scale_, as the boundary does
    scaled = _column_scaler(graph, readers, text)
    if scaled:  # the AFFINE's scale is the reciprocal (preprocessing._sparse_scale)
        scale = np.asarray(scaled[0].attrs.scale, dtype=np.float64)
        text = dataclasses.replace(text, column_scale=scale, clip=len(scaled) == 2,
                                   dtype="float64")
        x = scaled[-1]
        readers = [n for n in graph.nodes if x.name in n.inputs]
    # a selector's columns (SelectKBest(chi2) on the counts): the reading below goes through
    # them; increasing, so the kept entries of each row are met in S's index order
    chosen = sel = None
    if len(readers) == 1 and readers[0].op is Op.SELECT:
        cols = np.asarray(readers[0].attrs.columns, dtype=np.int64).reshape(-1)
        if cols.size and np.all(np.diff(cols) > 0):
            chosen, sel = cols, readers[0]
            x = sel
            readers = [n for n in graph.nodes if x.name in n.inputs]
    binarize = None
    if len(readers) == 1 and readers[0].op is Op.BINARIZE:
        b = readers[0]
        thr = float(b.attrs.threshold)
        if thr < 0:  # sklearn's binarize refuses a sparse matrix with a negative threshold
            raise unsupported(model, f"binarize threshold {thr} < 0 on sparse counts")
        binarize, x = b, b
        readers = [n for n in graph.nodes if b.name in n.inputs]
    absent = None
    if len(readers) == 1 and _absent_is_missing(readers[0]):
        absent = readers[0]  # XGBoost: S's absent entries (its zeros) read as missing
        readers = [n for n in graph.nodes if absent.name in n.inputs]
    nodes = {n.name: n for n in graph.nodes}
    if absent is None and readers and all(n.op is Op.LINEAR for n in readers):
        drop = tuple(n.name for n in (inp, *scaled, sel, binarize) if n is not None)
        out, proj = split_linear(graph, x.name, readers, drop)
        if chosen is not None:
            # the rows of the unselected terms are 0: scipy's product adds data * 0 = +-0 for
            # them, which leaves every partial sum as it was (signed zeros aside)
            full = np.zeros((text.n_features, proj.shape[1]))
            full[chosen] = proj
            proj = full
        return out, dataclasses.replace(text, projection=proj,
                                        binarize=None if binarize is None else
                                        float(binarize.attrs.threshold))
    if binarize is None and readers and all(n.op is Op.TREE_ENSEMBLE for n in readers):
        used = np.unique(np.concatenate([
            n.attrs.forest.feature[n.attrs.forest.feature >= 0] for n in readers]))
        cols = used.astype(np.int64) if used.size else np.zeros(1, dtype=np.int64)
        new_x = Node("X", Op.INPUT, (), {}, "float64", int(cols.size))
        gather = cols if chosen is None else chosen[cols]  # S's own column numbers
        for n in readers:
            f = n.attrs.forest
            feature = f.feature.copy()
            inner = feature >= 0
            feature[inner] = np.searchsorted(cols, feature[inner]).astype(feature.dtype)
            forest = dataclasses.replace(f, feature=feature, n_features=int(cols.size))
            inputs = tuple("X" if i == x.name else i for i in n.inputs)
            nodes[n.name] = dataclasses.replace(n, inputs=inputs,
                                                attrs=dataclasses.replace(n.attrs, forest=forest))
        # XGBoost: the gather itself writes NaN for S's absent entries (its 0 -> NaN would
        # also turn a HashingVectorizer's explicit zeros, values to XGBoost, into missing)
        text = dataclasses.replace(text, columns=gather, absent_nan=absent is not None)
        if absent is not None:
            for n in readers:
                nodes[n.name] = dataclasses.replace(nodes[n.name], inputs=tuple(
                    "X" if i == absent.name else i for i in nodes[n.name].inputs))
            nodes.pop(absent.name)
    else:
        ops = sorted({n.op.name for n in readers})
        raise UnsupportedModelError(
            f"{qualified_name(model)}: after a text vectorizer the document-term matrix may be "
            f"read only by linear layers or tree ensembles, not {', '.join(ops) or 'nothing'} "
            "(the matrix is sparse and never made dense)")
    for gone in {n.name for n in (inp, *scaled, sel, binarize) if n is not None}:
        nodes.pop(gone, None)
    nodes["X"] = new_x
    out = Graph(tuple(nodes[n] for n in ["X"] + [n for n in nodes if n != "X"]),
                dict(graph.outputs))
    verify(out)
    return out, text


def _column_scaler(graph: Graph, readers: list[Node], text: TextSpec) -> list[Node]:
    """[AFFINE] or [AFFINE, CLIP(-1, 1)] when the input's one reader is a scaler's sparse
    transform (``preprocessing._sparse_scale``: a scale and no shift), on a float64 S (a
    float32 one would round each product to float32); else []."""
    if len(readers) != 1 or readers[0].op is not Op.AFFINE or text.dtype == "float32":
        return []
    sc = readers[0]
    if np.any(np.asarray(sc.attrs.shift, dtype=np.float64) != 0.0):
        return []
    after = [n for n in graph.nodes if sc.name in n.inputs]
    if len(after) == 1 and after[0].op is Op.CLIP and \
            (float(after[0].attrs.low), float(after[0].attrs.high)) == (-1.0, 1.0):
        return [sc, after[0]]
    return [sc]


def _absent_is_missing(n: Node) -> bool:
    """The IMPUTE 0 -> NaN steps._absent_as_missing puts before XGBoost reading a sparse
    matrix (the text boundary's gather takes its place: ``TextSpec.absent_nan``)."""
    return (n.op is Op.IMPUTE and float(n.attrs.missing) == 0.0
            and bool(np.all(np.isnan(np.asarray(n.attrs.values, dtype=np.float64)))))


def _node(name: str, op: Op, inputs: tuple[str, ...], width: int, **attrs: Any) -> Node:
    typed = DEFS[op].of(attrs)
    return Node(name, op, inputs, typed, typed.OUT_DTYPE, width)


def _text_steps(model: Pipeline) -> tuple[TextSpec, list[Any]]:
    steps = [est for _, est in model.steps if not (est is None or est == "passthrough")]
    vec, rest = steps[0], steps[1:]
    tfidf = None
    if rest and isinstance(rest[0], TfidfTransformer):
        if isinstance(vec, TfidfVectorizer):
            raise unsupported(rest[0], "a TfidfTransformer after a TfidfVectorizer")
        tfidf, rest = rest[0], rest[1:]
    return text_spec(vec, tfidf), rest


@SOURCES.register(*VECTORIZERS, library="scikit-learn", methods=(), notes="")
def convert_text_pipeline(model: Pipeline) -> ModelSpec:
    """A Pipeline whose first step is a text vectorizer."""
    text, rest = _text_steps(model)
    return _spec(model, text, rest)


@register_frontend(CountVectorizer, TfidfVectorizer, HashingVectorizer,
                   library="scikit-learn", methods=("transform",),
                   notes="analyzer 'word' (token patterns: docs/text.md), 'char', "
                   "'char_wb'; lowercase, stop words, n-grams, binary, TF-IDF options, l1/l2 "
                   "norms; csr_matrix output; in a Pipeline before linear models, naive "
                   "Bayes and trees (also behind a selector, MaxAbsScaler or "
                   "StandardScaler(with_mean=False)), also as a ColumnTransformer's text column")
def convert_vectorizer(model: Any) -> ModelSpec:
    return _spec(model, text_spec(model), [])


# tests/test_param_audit.py (max_df, min_df, max_features, vocabulary: their effect is the
# fitted vocabulary_; dtype: CountVectorizer's output dtype, TfidfVectorizer float64 only)
_TEXT = ("input encoding decode_error analyzer preprocessor tokenizer strip_accents token_pattern lowercase "
         "stop_words ngram_range binary dtype")
declare_params(TfidfVectorizer, implemented=_TEXT + " norm use_idf sublinear_tf",
               ignored="max_df min_df max_features vocabulary smooth_idf")
declare_params(CountVectorizer, implemented=_TEXT,
               ignored="max_df min_df max_features vocabulary")
declare_params(HashingVectorizer, implemented=_TEXT + " n_features norm alternate_sign")
declare_params(TfidfTransformer, implemented="norm use_idf sublinear_tf", ignored="smooth_idf")
