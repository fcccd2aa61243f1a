"""The compiled tokenizer (kernels/text_kernel.py, runtime/text_native.py) against the NumPy
path it replaces and against scikit-learn, on random Unicode text: counts, indices and indptr
equal; tf-idf values and projected scores equal to the bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

import peregrine
from peregrine.runtime import text_native
from peregrine.runtime.text import TextRunner

# ASCII words, accents, a combining mark, Greek with capital sigma (Final_Sigma), Turkish
# dotted I (lower() lengthens it), CJK, emoji, digits, underscore, punctuation, NUL, a lone
# surrogate, and several kinds of space
ALPHABET = list("abcdefghijAB") + ["é", "Ü", "ß", "\u0301", "Σ", "Α", "σ", "ς", "İ", "I", "東",
                                    "京", "😀", "7", "_", "-", ".", "\x00", "\ud800", " ", " ",
                                    " ", "\t", "\u00a0", "\u2003", "\n"]
NO_SPECIAL = [c for c in ALPHABET if c not in ("Σ", "İ")]


def _docs(rng: np.random.Generator, n: int, alphabet: list[str], longest: int = 60) -> list[str]:
    words = ["".join(rng.choice(alphabet, rng.integers(1, 6))) for _ in range(300)]
    docs = []
    for _ in range(n):
        k = int(rng.integers(0, longest))
        docs.append(" ".join(rng.choice(words, k)) if rng.random() < 0.8 else
                    "".join(rng.choice(alphabet, k)))
    return docs


def _spec(vectorizer, docs):
    return peregrine.compile(vectorizer.fit(docs)).spec.text


CASES = [
    TfidfVectorizer(ngram_range=(1, 2)),
    TfidfVectorizer(ngram_range=(1, 3), norm="l1", stop_words=["ab", "ba", "東京"]),
    TfidfVectorizer(ngram_range=(2, 3), use_idf=False),
    TfidfVectorizer(binary=True, lowercase=False, token_pattern=r"\S+", min_df=2),
    TfidfVectorizer(sublinear_tf=True, token_pattern=r"\w+", norm=None),
    CountVectorizer(ngram_range=(1, 2), max_features=500),
    CountVectorizer(binary=True, token_pattern=r"(?u)\b\w+\b", stop_words=["a", "b"]),
]


@pytest.mark.parametrize("alphabet", [ALPHABET, NO_SPECIAL], ids=["special", "table"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_kernel_matches_numpy_and_sklearn(case, alphabet):
    rng = np.random.default_rng(case)
    train, test = _docs(rng, 300, alphabet), _docs(rng, 200, alphabet)
    vec = CASES[case]
    spec = _spec(vec, train)
    fast, slow = TextRunner(spec), TextRunner(spec, compiled=False)
    assert fast.native() is not None and slow.native() is None
    for got, want in zip(fast.counts(test), slow.counts(test)):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    got, want, sk = fast.matrix(test), slow.matrix(test), vec.transform(test)
    for a in (want, sk):
        assert got.dtype == a.dtype and np.array_equal(got.indptr, a.indptr)
        assert np.array_equal(got.indices, a.indices) and np.array_equal(got.data, a.data)
    W = rng.standard_normal((spec.n_features, 3))
    proj = dataclasses.replace(spec, projection=W)
    scores = TextRunner(proj).dense(test)
    assert np.array_equal(scores, TextRunner(proj, compiled=False).dense(test))
    assert np.array_equal(scores, np.asarray(sk @ W))  # scipy's product: sklearn's order


def test_long_documents_and_fallbacks(monkeypatch):
    """Rows of thousands of entries (the Shell sort's long passes), documents that are all
    separators, and the NumPy path taking over when the output could outgrow int32."""
    rng = np.random.default_rng(7)
    train = _docs(rng, 200, NO_SPECIAL)
    test = _docs(rng, 20, NO_SPECIAL, longest=5000) + ["", "   ", "\u2003", "-.-"]
    vec = TfidfVectorizer(ngram_range=(1, 2))
    spec = _spec(vec, train + test)  # the long documents' bigrams are terms: long rows
    got, sk = TextRunner(spec).matrix(test), vec.transform(test)
    assert np.diff(got.indptr).max() > 1000
    assert np.array_equal(got.indices, sk.indices) and np.array_equal(got.data, sk.data)
    monkeypatch.setattr(text_native, "_MAX_NNZ", 10)
    run = TextRunner(spec)
    assert run.native().run(test) is None
    small = run.matrix(test)
    assert np.array_equal(small.indices, sk.indices) and np.array_equal(small.data, sk.data)


def test_lower_table_is_python_lower():
    """The kernel's lowercase table, every code point: ``str.lower`` of the code point alone
    where that is one code point, the marker where it is several (U+0130) and for U+03A3
    (Final_Sigma: lower() decides by the neighbours)."""
    table = text_native.lower_table()
    low = [chr(c).lower() for c in range(0x110000)]
    want = np.array([ord(x) if len(x) == 1 else text_native.LOWER_SPECIAL for x in low],
                    dtype=np.uint32)
    want[0x3A3] = text_native.LOWER_SPECIAL
    assert np.array_equal(table, want)
    assert set(np.flatnonzero(table == text_native.LOWER_SPECIAL).tolist()) >= {0x130, 0x3A3}


@pytest.mark.parametrize("lowercase", [True, False])
@pytest.mark.parametrize("strip", ["ascii", "unicode"])
def test_strip_accents_runtime(strip, lowercase):
    """TextSpec.strip_accents (the frontend still refuses the parameter until the parameter
    audit expects it): lower(), NFKD, accents or all non-ASCII dropped, as sklearn's
    _preprocess; compatibility forms, Final_Sigma, U+0130, and a batch holding U+FFFF (the
    runtime's join separator: preprocessed one document at a time), compiled and NumPy paths,
    saved and loaded."""
    rng = np.random.default_rng(3)
    extra = ["ﬁne ﬂat ¼ ｆｕｌｌ Ⅻ ℌello naïve e\u0301cole ΟΔΟΣ İstanbul", "\u00a0x\u2003é"]
    train = _docs(rng, 200, ALPHABET) + extra
    test = _docs(rng, 100, ALPHABET) + extra
    vec = TfidfVectorizer(strip_accents=strip, lowercase=lowercase, ngram_range=(1, 2))
    vec.fit(train)
    plain = TfidfVectorizer(lowercase=lowercase, ngram_range=(1, 2),
                            vocabulary=vec.vocabulary_)
    plain.idf_ = vec.idf_  # the same fitted state but strip_accents: the spec is built for it
    spec = dataclasses.replace(peregrine.compile(plain).spec.text, strip_accents=strip)
    spec = type(spec).from_state(*spec.to_state())
    assert spec.strip_accents == strip
    for docs in (test, test + ["x\uffffy d\u00e9j\u00e0\uffffvu"]):
        sk = vec.transform(docs)
        for compiled in (True, False):
            got = TextRunner(spec, compiled=compiled).matrix(docs)
            assert np.array_equal(got.indptr, sk.indptr)
            assert np.array_equal(got.indices, sk.indices)
            assert np.array_equal(got.data, sk.data)


def test_strip_accents_spec_is_checked():
    spec = _spec(CountVectorizer(), ["ab bc cd"])
    with pytest.raises(ValueError, match="strip_accents"):
        dataclasses.replace(spec, strip_accents="latin")


@pytest.mark.parametrize("kwargs", [
    dict(ngram_range=(1, 2)),
    dict(ngram_range=(1, 3), alternate_sign=False, n_features=7, stop_words=["ab", "東京"]),
    dict(ngram_range=(2, 4), lowercase=False, token_pattern=r"\S+", norm=None),
    dict(analyzer="char_wb", ngram_range=(2, 4), n_features=97, norm="l1"),
])
def test_hashing_kernel_matches_numpy_and_sklearn(kwargs):
    """HashingVectorizer's compiled hashing (kernels/text_murmur.py) against the NumPy
    murmurhash and sklearn's murmurhash3_32, surrogate-free text (sklearn encodes UTF-8)."""
    from sklearn.feature_extraction.text import HashingVectorizer

    rng = np.random.default_rng(7)
    docs = _docs(rng, 400, [c for c in ALPHABET if c != "\ud800"])
    vec = HashingVectorizer(**kwargs).fit(docs)
    spec = _spec(vec, docs)
    got = TextRunner(spec).matrix(docs)
    ref = TextRunner(spec, compiled=False).matrix(docs)
    want = vec.transform(docs).tocsr()
    want.sum_duplicates()  # explicit zeros (hashed sums that cancel) are part of the answer
    for other in (ref, want):
        np.testing.assert_array_equal(got.indptr, other.indptr)
        np.testing.assert_array_equal(got.indices, other.indices)
        np.testing.assert_array_equal(got.data, other.data)


HASHING = [
    dict(ngram_range=(1, 2)),
    dict(ngram_range=(1, 3), n_features=97, norm="l1", binary=True),
    dict(ngram_range=(2, 2), n_features=31, norm=None, alternate_sign=False),
    dict(n_features=13, norm=None, lowercase=False, token_pattern=r"\S+"),
    dict(ngram_range=(1, 2), n_features=61, strip_accents="unicode", binary=True, norm=None),
    # stop words leave the tokens before the n-grams (a word of one letter, Greek with final
    # sigma, CJK, one that lowercasing makes, one only lowercase=False keeps)
    dict(ngram_range=(1, 3), n_features=53, stop_words=["ab", "ba", "東京", "a", "σς", "ib"]),
    dict(ngram_range=(1, 2), n_features=29, lowercase=False, token_pattern=r"(?u)\b\w+\b",
         stop_words=["AB", "a", "é"], norm=None),
]


@pytest.mark.parametrize("alphabet", [ALPHABET, NO_SPECIAL], ids=["special", "table"])
@pytest.mark.parametrize("case", range(len(HASHING)))
def test_hashing_word_kernel_matches_numpy_and_sklearn(case, alphabet):
    """kernels/text_hash_kernel.py (HashingVectorizer's words, one document at a time) against
    the NumPy path and scikit-learn: indices, indptr and values equal, the signed sums that
    cancel kept as explicit zeros as scikit-learn keeps them (binary makes them 1: few columns
    make many collisions here), and the projection equal to S @ W to the bit."""
    from sklearn.feature_extraction.text import HashingVectorizer

    rng = np.random.default_rng(40 + case)
    alphabet = [c for c in alphabet if c != "\ud800"]  # sklearn encodes UTF-8
    train, test = _docs(rng, 200, alphabet), _docs(rng, 300, alphabet)
    vec = HashingVectorizer(**HASHING[case]).fit(train)
    spec = _spec(vec, train)
    fast, slow = TextRunner(spec), TextRunner(spec, compiled=False)
    assert fast.native() is not None and slow.native() is None
    want = vec.transform(test)
    for got in (fast.matrix(test), slow.matrix(test)):
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.data, want.data)
    if spec.n_features < 100:
        assert (want.data == 0).any() or HASHING[case].get("binary") or \
            not HASHING[case].get("alternate_sign", True)
    w = rng.normal(size=(spec.n_features, 3))
    np.testing.assert_array_equal(fast.native().run(test, projection=w)[4], want @ w)


def test_hashing_cancelled_sums_reach_models_as_scikit_learn_gives_them():
    """A hashed document whose features cancel in a column: scikit-learn keeps the explicit 0,
    binary=True makes it 1 (a LogisticRegression then sees it), and XGBoost reads it as the
    value 0 where an absent entry is missing. Before, both pipelines answered differently."""
    import xgboost as xgb
    from sklearn.feature_extraction.text import HashingVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    rng = np.random.default_rng(3)
    alphabet = list("abcdefgh ")
    train, test = _docs(rng, 400, alphabet, 30), _docs(rng, 300, alphabet, 30)
    y = np.arange(len(train)) % 2
    probe = HashingVectorizer(n_features=7, norm=None).fit(train).transform(test)
    assert (probe.data == 0).sum() > 10  # cancelled sums stored as zeros
    for model in (make_pipeline(HashingVectorizer(n_features=7, binary=True),
                                LogisticRegression()),
                  make_pipeline(HashingVectorizer(n_features=7, norm=None),
                                xgb.XGBClassifier(n_estimators=8, max_depth=3,
                                                  random_state=0))):
        model.fit(train, y)
        for backend in ("reference", "native"):
            fast = peregrine.compile(model, backend=backend)
            np.testing.assert_allclose(fast.predict_proba(test), model.predict_proba(test),
                                       rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(fast.predict(test), model.predict(test))


def test_explain_names_the_tokenizer():
    """explain() says which tokenizer each text boundary runs and what the graph reads."""
    import json

    from sklearn.feature_extraction.text import HashingVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    rng = np.random.default_rng(9)
    docs = _docs(rng, 120, [c for c in NO_SPECIAL if c != "\ud800"])  # sklearn's UTF-8
    y = np.arange(len(docs)) % 2
    cases = [(TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 3)), "NativeChar"),
             (TfidfVectorizer(ngram_range=(1, 2)), "NativeText"),
             (HashingVectorizer(n_features=64), "NativeHash"),
             (HashingVectorizer(n_features=64, stop_words=["ab"]), "NativeHash"),
             (HashingVectorizer(n_features=64, analyzer="char"), "NativeChar"),
             (HashingVectorizer(n_features=2 ** 22 + 1), None)]  # past the kernels' columns
    for vec, kind in cases:
        fast = peregrine.compile(make_pipeline(vec, LogisticRegression()).fit(docs, y),
                                 backend="native")
        (entry,) = fast.explain_dict()["text"]
        json.dumps(entry)
        assert entry["tokenizer"] == (f"compiled kernel ({kind})" if kind else "NumPy path")
        assert entry["reads"] == "S @ projection (1 columns)"
        assert f"tokenizer: {entry['tokenizer']}" in fast.explain()


def test_hashing_then_tfidf_transformer_weighs_by_idf():
    """HashingVectorizer(norm=None) -> TfidfTransformer: the hashing kernel multiplies by the
    transformer's idf_ (it used ones: plain normalised counts), as the NumPy path does."""
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from peregrine.frontends.sklearn_text import text_spec

    rng = np.random.default_rng(11)
    alphabet = [c for c in NO_SPECIAL if c != "\ud800"]  # sklearn encodes UTF-8
    docs, test = _docs(rng, 200, alphabet), _docs(rng, 100, alphabet)
    hv = HashingVectorizer(n_features=32, norm=None, ngram_range=(1, 2))
    tf = TfidfTransformer().fit(hv.transform(docs))
    want = tf.transform(hv.transform(test))
    run = TextRunner(text_spec(hv, tf))
    assert run.native() is not None
    for got in (run.matrix(test), TextRunner(text_spec(hv, tf), compiled=False).matrix(test)):
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.data, want.data)
    y = np.arange(len(docs)) % 2
    model = make_pipeline(HashingVectorizer(n_features=32, norm=None), TfidfTransformer(),
                          LogisticRegression()).fit(docs, y)
    fast = peregrine.compile(model, backend="native")
    np.testing.assert_allclose(fast.predict_proba(test), model.predict_proba(test),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("analyzer", ["char", "char_wb", "word"])
def test_nul_characters_in_terms(analyzer):
    """"b" and "b\\0" are two terms: the terms' hash adds c + 1 per code point (with c alone a
    trailing NUL added nothing under every base, and every call raised RuntimeError)."""
    kw = dict(token_pattern=r"\S+") if analyzer == "word" else dict(ngram_range=(1, 3))
    train = ["b\x00 a", "ab\x00\x00 b", "\x00", "b a"]
    vec = CountVectorizer(analyzer=analyzer, **kw).fit(train)
    test = train + ["b\x00\x00\x00 ab", ""]
    for compiled in (True, False):
        got = TextRunner(_spec(vec, train), compiled=compiled).matrix(test)
        np.testing.assert_array_equal(got.toarray(), vec.transform(test).toarray())


def test_hashing_refuses_lone_surrogates_as_scikit_learn_does():
    from sklearn.feature_extraction.text import HashingVectorizer

    vec = HashingVectorizer(token_pattern=r"\S+").fit(["a"])
    with pytest.raises(UnicodeEncodeError):
        vec.transform(["ok", "a\ud800b cd"])
    fast = peregrine.compile(vec)
    with pytest.raises(peregrine.InputError, match="document 1 holds a lone surrogate"):
        fast.transform(["ok", "a\ud800b cd"])
    assert fast.transform(["ok \u00e9"]).nnz == 2


def test_infinite_idf_is_refused_where_scikit_learn_normalize_refuses_it():
    """smooth_idf=False and a given vocabulary term no training document held: idf_ is
    infinite; scikit-learn's normalize raises on a document holding the term."""
    vec = TfidfVectorizer(smooth_idf=False, vocabulary=["apple", "zzz"]).fit(["apple pie"] * 3)
    with pytest.raises(ValueError, match="infinity"):
        vec.transform(["zzz apple"])
    fast = peregrine.compile(vec)
    with pytest.raises(peregrine.InputError, match="document 1: term 'zzz'"):
        fast.transform(["apple", "zzz apple"])
    np.testing.assert_array_equal(fast.transform(["apple", "pie"]).toarray(),
                                  vec.transform(["apple", "pie"]).toarray())


def test_wide_hashing_takes_the_numpy_path():
    """Past MAX_COLUMNS the per-column counts and bitmap scan cost more than the NumPy path:
    the kernel steps aside (the answer is the same)."""
    from sklearn.feature_extraction.text import HashingVectorizer

    from peregrine.runtime.text_hash_native import MAX_COLUMNS

    docs = ["a b c", "c d", ""]
    for n, native in ((MAX_COLUMNS, True), (MAX_COLUMNS + 1, False)):
        vec = HashingVectorizer(n_features=n).fit(docs)
        run = TextRunner(_spec(vec, docs))
        assert (run.native() is not None) is native
        got, want = run.matrix(docs), vec.transform(docs)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.data, want.data)
