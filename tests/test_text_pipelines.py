"""Text pipelines (docs/text.md): scikit-learn's vectorizers on their own and in front of linear
models, naive Bayes and trees, against scikit-learn's own transform/predict on Unicode text,
on every backend. Tokens and counts are exact; scores within rtol 1e-5 / atol 1e-6."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from scipy import sparse
from sklearn.ensemble import RandomForestClassifier
from sklearn.feature_extraction.text import (
    CountVectorizer,
    HashingVectorizer,
    TfidfTransformer,
    TfidfVectorizer,
)
from sklearn.linear_model import (
    LinearRegression,
    LogisticRegression,
    RidgeClassifier,
    SGDClassifier,
)
from sklearn.naive_bayes import BernoulliNB, ComplementNB, MultinomialNB
from sklearn.pipeline import make_pipeline
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier

import peregrine
from peregrine.errors import InputError, UnsupportedModelError
from peregrine.ir.semantics.text import TOKEN_PATTERNS
from peregrine.runtime.text_tokens import _class_table, _codes
from tests.compile_helpers import compile_or_skip  # noqa: E402

# accents, CJK, digits, underscores, Turkish dotted I (lower() lengthens it), final sigma,
# emoji, German sharp s, combining marks, an empty document, one with no known token
TRAIN = [
    "Héllo wörld, ÇA VA? déjà-vu 東京 タワー 123 a_b x",
    "İstanbul İİ Iİi ßtraße ΣΑΣ ΟΔΟΣ Σ σς café naïve",
    "emoji 😀😀 ok ok ok 👍🏽 thumbs",
    "hello hello world_1 1_2 __init__ 3.14 1,000",
    "The quick brown fox jumps over the lazy dog",
    "",
    "東京 東京 大阪 京都 tokyo Tokyo TOKYO",
    "e\u0301cole ecole école e\u0301cole",
    "tab\tseparated\nnew line\u00a0nbsp\u2003em space",
    "Ünïcode ÜNÏCODE ünïcode ok lazy dog fox",
] * 3
Y = np.arange(len(TRAIN)) % 3
TEST = TRAIN + ["never seen words at all", "   ", "hello 東京 again fox", "İİ İ i̇ ΣΑΣ",
                "\x00hello\x00world\x00", "a b c d"]
BACKENDS = ["reference", "torch", "torchscript", "native", "tvm"]


def assert_same(model, compiled, docs):
    for meth in compiled.methods:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # np.log(0) in predict_log_proba
            want = getattr(model, meth)(docs)
        got = getattr(compiled, meth)(docs)
        if sparse.issparse(want):
            assert type(got) is type(want) and got.dtype == want.dtype, meth
            assert got.shape == want.shape
            want = want.tocsr()
            np.testing.assert_array_equal(got.indptr, want.indptr, err_msg=meth)
            np.testing.assert_array_equal(got.indices, want.indices, err_msg=meth)
            if want.dtype.kind == "f" and not isinstance(model, (CountVectorizer,
                                                                 HashingVectorizer)) or \
                    isinstance(model, TfidfVectorizer):
                np.testing.assert_allclose(got.data, want.data, rtol=1e-12, atol=0, err_msg=meth)
            else:
                np.testing.assert_array_equal(got.data, want.data, err_msg=meth)
            continue
        assert got.shape == want.shape, meth
        if np.asarray(want).dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=meth)
        else:
            np.testing.assert_array_equal(got, want, err_msg=meth)


# -------------------------------------------------------------------------- tokens --


@pytest.mark.parametrize("pattern", sorted(TOKEN_PATTERNS))
def test_token_patterns_are_runs_of_their_class(pattern):
    """Every supported pattern's re.findall equals the maximal runs of its character class at
    least min_len long, on text holding every kind of character."""
    char_class, min_len = TOKEN_PATTERNS[pattern]
    rng = np.random.default_rng(0)
    alphabet = "".join(TRAIN) + "\u0130\u2028\u3000\u200b\u0660\u00b2\u2167_-'.\t \n"
    text = "".join(rng.choice(list(alphabet), 5000))
    table = _class_table(char_class)
    mark = table[_codes(text)]
    runs, start = [], None
    for i, m in enumerate(list(mark) + [False]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            if i - start >= min_len:
                runs.append(text[start:i])
            start = None
    assert runs == re.findall(pattern, text)


def test_word_table_is_python_re():
    """\\w of the table is str.isalnum() or '_', as CPython's sre defines it."""
    table = _class_table("word")
    sample = list(range(0, 0x3000)) + list(range(0x1F000, 0x1F700)) + [0x10FFFF]
    want = [chr(c).isalnum() or chr(c) == "_" for c in sample]
    assert table[sample].tolist() == want


# --------------------------------------------------------------------- vectorizers --

VECTORIZERS = {
    "count": lambda: CountVectorizer(),
    "count-bigram-stop": lambda: CountVectorizer(ngram_range=(1, 2), stop_words=["ok", "the"]),
    "count-binary-cased": lambda: CountVectorizer(lowercase=False, binary=True,
                                                  token_pattern=r"\S+"),
    "count-maxfeat": lambda: CountVectorizer(max_features=15, min_df=2, max_df=0.9,
                                             token_pattern=r"(?u)\b\w+\b"),
    "count-trigram-english": lambda: CountVectorizer(ngram_range=(2, 3), stop_words="english"),
    "tfidf": lambda: TfidfVectorizer(),
    "tfidf-bigram": lambda: TfidfVectorizer(ngram_range=(1, 2)),
    "tfidf-l1-sublinear": lambda: TfidfVectorizer(norm="l1", sublinear_tf=True,
                                                  smooth_idf=False),
    "tfidf-noidf-nonorm": lambda: TfidfVectorizer(use_idf=False, norm=None, binary=True),
    "hashing": lambda: HashingVectorizer(n_features=64),
    "hashing-bigram-stop": lambda: HashingVectorizer(n_features=2 ** 20, ngram_range=(1, 3),
                                                     stop_words=["ok"], norm="l1"),
    "hashing-unsigned-binary": lambda: HashingVectorizer(n_features=7, alternate_sign=False,
                                                         binary=True, norm=None,
                                                         token_pattern=r"\S+"),
    "hashing-counts": lambda: HashingVectorizer(n_features=50, norm=None, lowercase=False),
}


@pytest.mark.parametrize("backend", ["reference", "native"])
@pytest.mark.parametrize("name", sorted(VECTORIZERS))
def test_vectorizer_transform(name, backend):
    vec = VECTORIZERS[name]().fit(TRAIN)
    assert_same(vec, compile_or_skip(vec, backend), TEST)


# ------------------------------------------------------------------------ pipelines --

HEADS = {
    "logistic": lambda: LogisticRegression(),
    "linear-svc": lambda: LinearSVC(),
    "sgd": lambda: SGDClassifier(loss="log_loss", random_state=0),
    "ridge": lambda: RidgeClassifier(),
    "multinomial-nb": lambda: MultinomialNB(),
    "complement-nb": lambda: ComplementNB(),
    "bernoulli-nb": lambda: BernoulliNB(binarize=0.1),
    "tree": lambda: DecisionTreeClassifier(random_state=0),
    "forest": lambda: RandomForestClassifier(n_estimators=4, random_state=0),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("head", sorted(HEADS))
def test_tfidf_pipeline(head, backend):
    pipe = make_pipeline(TfidfVectorizer(ngram_range=(1, 2)), HEADS[head]()).fit(TRAIN, Y)
    assert_same(pipe, compile_or_skip(pipe, backend), TEST)


@pytest.mark.parametrize("backend", BACKENDS)
def test_count_tfidf_transformer_regression(backend):
    pipe = make_pipeline(CountVectorizer(stop_words=["ok"]), TfidfTransformer(sublinear_tf=True),
                         LinearRegression()).fit(TRAIN, Y * 1.5)
    assert_same(pipe, compile_or_skip(pipe, backend), TEST)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hashing_pipeline(backend):
    pipe = make_pipeline(HashingVectorizer(n_features=2 ** 12, ngram_range=(1, 2), norm=None),
                         TfidfTransformer(), LogisticRegression()).fit(TRAIN, Y)
    assert_same(pipe, compile_or_skip(pipe, backend), TEST)


def test_murmurhash_is_sklearns():
    from sklearn.utils import murmurhash3_32

    from peregrine.runtime.text_hash import murmur3_32

    words = ["", "a", "ab", "abc", "abcd", "abcde", "東京", "😀x", "İi̇", "hello world foo bar"]
    data = b"".join(w.encode("utf-8") for w in words)
    lens = np.array([len(w.encode("utf-8")) for w in words])
    got = murmur3_32(np.frombuffer(data, np.uint8), np.cumsum(lens) - lens, lens)
    assert got.tolist() == [murmurhash3_32(w, seed=0) for w in words]


def test_binary_logistic_on_counts():
    pipe = make_pipeline(CountVectorizer(binary=True), LogisticRegression()).fit(TRAIN, Y > 0)
    assert_same(pipe, compile_or_skip(pipe, "native"), TEST)


def test_saved_text_pipeline_loads(tmp_path):
    pipe = make_pipeline(TfidfVectorizer(ngram_range=(1, 2)), MultinomialNB()).fit(TRAIN, Y)
    m = compile_or_skip(pipe, "reference")
    m.save(tmp_path / "m.peregrine")
    assert_same(pipe, peregrine.load(tmp_path / "m.peregrine"), TEST)
    vec = TfidfVectorizer().fit(TRAIN)
    compile_or_skip(vec, "reference").save(tmp_path / "v.peregrine")
    assert_same(vec, peregrine.load(tmp_path / "v.peregrine"), TEST)


# ------------------------------------------------------------------ input and refusals --


def test_inputs_like_sklearn():
    import pandas as pd

    pipe = make_pipeline(TfidfVectorizer(), LogisticRegression()).fit(TRAIN, Y)
    m = compile_or_skip(pipe, "reference")
    want = pipe.predict_proba(TEST)
    for docs in (TEST, tuple(TEST), np.array(TEST, dtype=object), np.array(TEST),
                 pd.Series(TEST)):
        np.testing.assert_allclose(m.predict_proba(docs), want, rtol=1e-12)
    for bad in ("one string", [1, 2], ["ok", None], ["ok", np.nan], np.array([["a"], ["b"]]),
                [], pd.DataFrame({"t": TEST})):
        with pytest.raises(InputError):
            m.predict(bad)


@pytest.mark.parametrize("backend", ["reference", "native"])
@pytest.mark.parametrize("vec", [
    CountVectorizer(), TfidfVectorizer(ngram_range=(1, 2)), HashingVectorizer(n_features=64),
    CountVectorizer(analyzer="char_wb", ngram_range=(2, 3)),
    CountVectorizer(encoding="latin-1"), TfidfVectorizer(decode_error="replace"),
    HashingVectorizer(n_features=64, decode_error="ignore"),
], ids=["count", "tfidf", "hashing", "char_wb", "latin1", "replace", "hashing-ignore"])
def test_bytes_documents_decode_like_sklearn(vec, backend):
    """Bytes documents are decoded with the vectorizer's encoding and decode_error, as its
    ``decode`` does (numpy ``S`` arrays, np.bytes_, bytes mixed with str); bytes that do not
    decode under 'strict' raise InputError naming the document where scikit-learn raises
    UnicodeDecodeError."""
    vec = vec.fit(TRAIN)
    enc = vec.encoding
    docs = [d.encode(enc, "ignore") for d in TEST] + ["a str beside bytes"]
    docs[1] = np.bytes_(docs[1])
    broken = [b"caf\xe9 ok lazy dog", b"\xff\xfe fox", "fine"]  # not UTF-8
    for model in (vec, make_pipeline(vec, LogisticRegression()).fit(TRAIN, Y)):
        m = compile_or_skip(model, backend)
        meth = "transform" if model is vec else "predict_proba"
        got, want = getattr(m, meth), getattr(model, meth)
        for batch in (docs, np.array(docs[:-1]), broken):
            try:
                expected = want(batch)
            except UnicodeDecodeError:
                with pytest.raises(InputError, match="document 0 is not valid utf-8"):
                    got(batch)
                continue
            if sparse.issparse(expected):
                np.testing.assert_array_equal(got(batch).toarray(), expected.toarray())
            else:
                np.testing.assert_allclose(got(batch), expected, rtol=1e-12, atol=1e-15)


def test_empty_batch_like_sklearn():
    """CountVectorizer alone maps no documents to a (0, n) matrix as scikit-learn does; with
    idf, a norm, hashing or a model after it scikit-learn refuses 0 rows, and so do we."""
    vec = CountVectorizer(ngram_range=(1, 2)).fit(TRAIN)
    m = compile_or_skip(vec, "reference")
    for empty in ([], (), np.array([], dtype=object)):
        got, want = m.transform(empty), vec.transform(empty)
        assert sparse.issparse(got) and got.shape == want.shape and got.dtype == want.dtype
    for model in (TfidfVectorizer().fit(TRAIN), HashingVectorizer(),
                  make_pipeline(CountVectorizer(), LogisticRegression()).fit(TRAIN, Y)):
        m = compile_or_skip(model, "reference")
        with pytest.raises(InputError, match="0 documents"):
            m.predict([]) if "predict" in m.methods else m.transform([])


def test_unknown_codec_is_refused():
    vec = CountVectorizer(encoding="no-such-codec").fit(TRAIN)
    with pytest.raises(UnsupportedModelError, match="no-such-codec"):
        peregrine.compile(vec)


@pytest.mark.parametrize("kwargs, name", [
    ({"analyzer": str.split}, "analyzer"),
    ({"strip_accents": str.upper}, "strip_accents"),
    ({"token_pattern": r"[a-z]{3}"}, "token_pattern"),
    ({"tokenizer": str.split, "token_pattern": None}, "tokenizer"),
    ({"preprocessor": str.upper}, "preprocessor"),
    ({"dtype": np.float32}, "dtype"),
])
def test_refused_parameters_are_named(kwargs, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vec = TfidfVectorizer(**kwargs).fit(TRAIN)
    with pytest.raises(UnsupportedModelError, match=name):
        peregrine.compile(vec, backend="reference")
