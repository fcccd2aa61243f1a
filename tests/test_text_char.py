"""analyzer="char" and "char_wb" (docs/text.md): scikit-learn's ``_char_ngrams`` /
``_char_wb_ngrams`` on random Unicode text (whitespace runs, lone tabs and exotic spaces,
combining marks, Turkish dotted I, final sigma, astral code points), compared with the
vectorizers' own transform (vocabulary lookup and murmurhash): equal indices and equal values;
and in front of a linear model and a forest on every backend."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.ensemble import RandomForestClassifier
from sklearn.feature_extraction.text import (
    CountVectorizer,
    HashingVectorizer,
    TfidfVectorizer,
)
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline

import peregrine
from peregrine.frontends.sklearn_text import text_spec
from peregrine.runtime.text import TextRunner

PIECES = list("abcAB é\u0301İΣσς東京😀 \t\n\r\u00a0\u2003\u3000\x1c\x85_1.-") + [
    "  ", " \t ", "ΟΔΟΣ", "\n\n", "ﬁ", "Å"]


def _docs(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    docs = ["".join(rng.choice(PIECES, rng.integers(0, 16))) for _ in range(n)]
    # random code points from the whole range (surrogates left out: not valid str for sklearn)
    cps = rng.integers(0, 0x30000, size=(n // 4, 12))
    cps[(cps >= 0xD800) & (cps < 0xE000)] = 0x41
    docs += ["".join(map(chr, row)) for row in cps]
    return docs + ["", " ", "  a  ", "\t", "x", "a\tb", " ab ", "ab"]


TRAIN, TEST = _docs(300, 0), _docs(200, 1)


def _same_csr(got, want):
    want = want.tocsr()
    want.sum_duplicates()  # explicit zeros (hashed sums that cancel) are part of the answer
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)


@pytest.mark.parametrize("analyzer, ngram_range, lowercase, strip", list(itertools.product(
    ["char", "char_wb"], [(1, 1), (1, 3), (2, 4), (3, 3), (4, 6)], [True, False],
    [None, "unicode", "ascii"])))
def test_char_ngrams_match_sklearn(analyzer, ngram_range, lowercase, strip):
    kw = dict(analyzer=analyzer, ngram_range=ngram_range, lowercase=lowercase,
              strip_accents=strip)
    for vec in (CountVectorizer(**kw).fit(TRAIN),
                HashingVectorizer(n_features=97, norm=None, **kw).fit(TRAIN),
                HashingVectorizer(n_features=2 ** 20, alternate_sign=False, **kw).fit(TRAIN),
                TfidfVectorizer(sublinear_tf=True, **kw).fit(TRAIN)):
        run = TextRunner(text_spec(vec), compiled=False)
        _same_csr(run.matrix(TEST), vec.transform(TEST))
        got = peregrine.compile(vec, backend="reference").transform(TEST)
        _same_csr(got, vec.transform(TEST))


@pytest.mark.parametrize("backend", ["reference", "torch", "native"])
@pytest.mark.parametrize("analyzer", ["char", "char_wb"])
def test_char_pipelines(analyzer, backend):
    y = np.arange(len(TRAIN)) % 3
    for head in (LogisticRegression(max_iter=500), RandomForestClassifier(8, random_state=0)):
        model = make_pipeline(TfidfVectorizer(analyzer=analyzer, ngram_range=(2, 4)),
                              head).fit(TRAIN, y)
        fast = peregrine.compile(model, backend=backend)
        np.testing.assert_array_equal(fast.predict(TEST), model.predict(TEST))
        np.testing.assert_allclose(fast.predict_proba(TEST), model.predict_proba(TEST),
                                   rtol=1e-5, atol=1e-6)


def test_char_stop_words_ignored_and_artifact(tmp_path):
    vec = CountVectorizer(analyzer="char_wb", ngram_range=(1, 3),
                          stop_words=["ab"]).fit(TRAIN)  # sklearn warns and ignores them
    fast = peregrine.compile(vec, backend="reference")
    _same_csr(fast.transform(TEST), vec.transform(TEST))
    fast.save(tmp_path / "v.peregrine")
    _same_csr(peregrine.load(tmp_path / "v.peregrine").transform(TEST), vec.transform(TEST))


def test_span_kernel_matches_numpy_lookup():
    """kernels/text_spans.py against text_tokens._Tokens.lookup on every span of random text
    (terms, strings one code point off, other lengths, the empty span)."""
    from peregrine.runtime.text_char import lookup_spans
    from peregrine.runtime.text_tokens import _codes, _Tokens

    rng = np.random.default_rng(5)
    terms = sorted({"".join(rng.choice(PIECES[:20], rng.integers(1, 5))) for _ in range(300)})
    table = _Tokens(terms, "word")
    codes = _codes(" ".join(TEST + terms))
    starts = rng.integers(0, codes.size - 6, 20000)
    ends = starts + rng.integers(0, 6, starts.size)
    want = table.lookup(codes, starts, ends)
    assert (want >= 0).sum() > 100
    np.testing.assert_array_equal(lookup_spans(table, codes, starts, ends), want)


def _batches() -> list[list[str]]:
    """TEST as one batch (Turkish I and sigma in it: lowercased by Python, then scanned), its
    ASCII documents (Python's lower()), and its documents the lowercase table maps (the
    kernel lowercases them)."""
    special = ("\u0130", "\u03a3")
    return [TEST, [d for d in TEST if d.isascii()],
            [d for d in TEST if not d.isascii() and not any(c in d for c in special)]]


@pytest.mark.parametrize("analyzer, ngram_range", list(itertools.product(
    ["char", "char_wb"], [(1, 1), (1, 3), (2, 4), (4, 6)])))
def test_char_kernel_matches_sklearn(analyzer, ngram_range, monkeypatch):
    """kernels/text_char_kernel.py: counts, tf-idf values (l2, l1 with binary, none), hashed
    windows' signed sums (HashingVectorizer) and the projection S @ W in scipy's order, bit for bit, lowercase or not, with NFKD accents, on
    each kind of batch; and with the outputs' first guess at zero, so that every document
    makes the kernel stop, the outputs grow and the call resume there."""
    from peregrine.runtime import text_char_native

    rng = np.random.default_rng(3)
    for lowercase, strip in ((True, None), (False, None), (True, "unicode")):
        kw = dict(analyzer=analyzer, ngram_range=ngram_range, lowercase=lowercase,
                  strip_accents=strip)
        for vec in (CountVectorizer(**kw), TfidfVectorizer(**kw),
                    TfidfVectorizer(norm="l1", binary=True, **kw),
                    TfidfVectorizer(norm=None, **kw),
                    # hashed windows: few columns, so signed sums cancel (explicit zeros)
                    HashingVectorizer(n_features=97, norm=None, **kw),
                    HashingVectorizer(n_features=61, binary=True, norm="l1", **kw),
                    HashingVectorizer(n_features=2 ** 12, alternate_sign=False, **kw)):
            vec.fit(TRAIN)
            spec = text_spec(vec)
            run = TextRunner(spec)
            native = run.native()
            assert native is not None and native.weighs
            proj = rng.normal(size=(spec.n_features, 3))
            for docs in _batches():
                want = vec.transform(docs)
                _same_csr(run.matrix(docs), want)
                np.testing.assert_array_equal(native.run(docs, projection=proj)[4],
                                              want @ proj)
            monkeypatch.setattr(text_char_native, "GUESS", 0.0)
            _same_csr(run.matrix(TEST), vec.transform(TEST))
            monkeypatch.undo()


def test_char_kernel_edges():
    """Empty and all-space documents, a batch of one, a vocabulary of one term."""
    vec = CountVectorizer(analyzer="char_wb", ngram_range=(2, 3)).fit(["ab"])
    run = TextRunner(text_spec(vec))
    assert run.native() is not None
    for docs in (["", "   ", "\t\n"], ["ab"], ["x ab  ab\u3000ab"], ["ab"] * 3):
        _same_csr(run.matrix(docs), vec.transform(docs))
    vec = CountVectorizer(analyzer="char", ngram_range=(3, 5)).fit(["a  b\t\tc", "ab"])
    run = TextRunner(text_spec(vec))
    for docs in (["", "a", "ab", "a \t b", "a  b\t\tc  "], ["a b c " * 50]):
        _same_csr(run.matrix(docs), vec.transform(docs))
