"""A text column inside a ColumnTransformer on a DataFrame (docs/text.md, "A text column in a
ColumnTransformer"), against scikit-learn's own predict / predict_proba / decision_function on
Unicode text, numeric columns with NaN/inf and unseen categories, on every backend. Labels
identical; scores within rtol 1e-5 / atol 1e-6, and the linear scores within the stated
rounding bound of scikit-learn's running sum."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.decomposition import TruncatedSVD
from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier
from sklearn.feature_extraction.text import (
    CountVectorizer,
    HashingVectorizer,
    TfidfTransformer,
    TfidfVectorizer,
)
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler
from sklearn.svm import LinearSVC

import peregrine
from peregrine.errors import InputError, UnsupportedModelError
from tests.compile_helpers import compile_or_skip  # noqa: E402

WORDS = ("Héllo wörld déjà-vu 東京 タワー 123 a_b İstanbul ΣΑΣ ΟΔΟΣ café naïve 😀 ok the "
         "quick brown fox e\u0301cole ßtraße tab\tsep nbsp\u00a0x").split(" ")
BACKENDS = ["reference", "torch", "native", "tvm"]


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    docs = [" ".join(rng.choice(WORDS, rng.integers(0, 9))) for _ in range(n)]
    return pd.DataFrame({"price": rng.normal(size=n) * 100, "review": docs,
                         "age": rng.integers(0, 90, n).astype(float),
                         "country": rng.choice(["fr", "de", "us", "jp"], n)})


TRAIN = _frame(240, 0)
Y = np.random.default_rng(1).integers(0, 3, len(TRAIN))
TEST = pd.concat([_frame(60, 2), pd.DataFrame({
    "price": [0.0, 1e30, -3.5], "review": ["", "never seen at all", "İİ Σ 東京 fox"],
    "age": [0.0, 1.0, 200.0], "country": ["zz", "fr", "us"]})], ignore_index=True)
NUM = ("num", StandardScaler(), ["price", "age"])
CAT = ("cat", OneHotEncoder(handle_unknown="ignore"), ["country"])
TXT = ("txt", TfidfVectorizer(ngram_range=(1, 2)), "review")


def assert_same(model, fast, X):
    for meth in fast.methods:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want = getattr(model, meth)(X)
            got = getattr(fast, meth)(X)
        if meth == "predict" and hasattr(model, "classes_"):
            np.testing.assert_array_equal(got, want, err_msg=meth)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=meth)


CASES = {
    "tfidf-num-cat-lr": lambda: make_pipeline(ColumnTransformer([TXT, NUM, CAT]),
                                              LogisticRegression(max_iter=2000)),
    "num-tfidf-cat-svc": lambda: make_pipeline(ColumnTransformer([NUM, TXT, CAT]), LinearSVC()),
    "count-tfidf-passthrough": lambda: make_pipeline(ColumnTransformer(
        [("t", make_pipeline(CountVectorizer(), TfidfTransformer(sublinear_tf=True)),
          "review"), CAT], remainder="passthrough"), LogisticRegression(max_iter=2000)),
    "hashing-lr": lambda: make_pipeline(ColumnTransformer(
        [("t", HashingVectorizer(n_features=256), "review"), NUM, CAT]),
        LogisticRegression(max_iter=2000)),
    "text-only-lr": lambda: make_pipeline(ColumnTransformer([TXT, CAT]),
                                          LogisticRegression(max_iter=2000)),
    "svd-lr": lambda: make_pipeline(ColumnTransformer([TXT, NUM, CAT]), TruncatedSVD(4),
                                    LogisticRegression()),
    "forest": lambda: make_pipeline(ColumnTransformer([NUM, TXT, CAT]),
                                    RandomForestClassifier(8, random_state=0)),
    "hgb-dense": lambda: make_pipeline(ColumnTransformer([TXT, NUM, CAT], sparse_threshold=0),
                                       HistGradientBoostingClassifier(max_iter=8)),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def fitted(request):
    return request.param, CASES[request.param]().fit(TRAIN, Y)


@pytest.mark.parametrize("backend", BACKENDS)
def test_column_transformer_with_text(fitted, backend):
    name, model = fitted
    fast = compile_or_skip(model, backend)
    assert fast.spec.text is not None and fast.spec.text.frame_width == 4
    assert_same(model, fast, TEST)
    assert_same(model, fast, TEST.iloc[:1])  # one row
    reordered = TEST[["country", "review", "age", "price"]]  # by name, as sklearn selects
    np.testing.assert_array_equal(fast.predict(reordered), model.predict(TEST))


def test_ridge_scores():
    y = np.random.default_rng(3).normal(size=len(TRAIN))
    model = make_pipeline(ColumnTransformer([NUM, TXT, CAT]), Ridge()).fit(TRAIN, y)
    assert_same(model, compile_or_skip(model, "native"), TEST)


def test_linear_bound():
    """scikit-learn sums hstack([S, N]) @ w in one running sum over the row's entries; the
    boundary computes the text part with the same additions (equal bits alone: text-only) and
    the graph adds the numeric part's own sum: the difference is the rounding of a sum of
    m + 1 terms, at most 2 (m + 1) eps sum |x_j w_j| (m: the non-text entries)."""
    model = make_pipeline(ColumnTransformer([TXT, NUM, CAT]),
                          LogisticRegression(max_iter=2000)).fit(TRAIN, Y)
    ct, lr = model[0], model[-1]
    got = compile_or_skip(model, "native").decision_function(TEST)
    want = model.decision_function(TEST)
    terms = abs(ct.transform(TEST)) @ abs(lr.coef_.T) + abs(lr.intercept_)
    m = 2 + len(ct.named_transformers_["cat"].categories_[0]) + 1
    assert np.all(np.abs(got - want) <= 2 * (m + 1) * np.finfo(float).eps * terms)
    text_only = make_pipeline(ColumnTransformer([TXT]), LogisticRegression()).fit(TRAIN, Y)
    got = compile_or_skip(text_only, "native").decision_function(TEST)
    np.testing.assert_array_equal(got, text_only.decision_function(TEST))


def test_nan_inf_and_bad_input():
    model = make_pipeline(ColumnTransformer([TXT, NUM, CAT]),
                          LogisticRegression(max_iter=2000)).fit(TRAIN, Y)
    fast = compile_or_skip(model, "native")
    for value in (np.nan, np.inf, -np.inf):
        bad = TEST.copy()
        bad.loc[5, "age"] = value
        with pytest.raises(ValueError):
            model.predict(bad)
        with pytest.raises(InputError, match="row 5"):
            fast.predict(bad)
    with pytest.raises(InputError, match="review"):
        fast.predict(TEST.drop(columns="review"))
    with pytest.raises(InputError, match="document 3"):
        fast.predict(TEST.assign(review=[*TEST.review[:3], None, *TEST.review[4:]]))
    with pytest.raises(InputError, match="table"):
        fast.predict(list(TEST.review))
    # HistGradientBoosting takes NaN in the numeric columns (its missing-value rule)
    hgb = CASES["hgb-dense"]().fit(TRAIN, Y)
    nan = TEST.copy()
    nan.loc[::4, "price"] = np.nan
    assert_same(hgb, compile_or_skip(hgb, "native"), nan)


TWO_TEXT = {
    "lr": lambda: make_pipeline(ColumnTransformer([
        NUM, TXT, ("title", CountVectorizer(analyzer="char_wb", ngram_range=(2, 3)), "title"),
        CAT]), LogisticRegression(max_iter=2000)),
    "forest": lambda: make_pipeline(ColumnTransformer([
        TXT, NUM, ("title", HashingVectorizer(n_features=64), "title")]),
        RandomForestClassifier(8, random_state=0)),
}


@pytest.mark.parametrize("backend", ["reference", "native"])
@pytest.mark.parametrize("case", sorted(TWO_TEXT))
def test_two_text_columns(case, backend, tmp_path):
    def titled(df):
        return df.assign(title=[r[::-1][:12] for r in df.review])

    model = TWO_TEXT[case]().fit(titled(TRAIN), Y)
    fast = compile_or_skip(model, backend)
    assert len(fast.spec.text.more) == 1
    assert_same(model, fast, titled(TEST))
    fast.save(tmp_path / "m.peregrine")
    back = peregrine.load(tmp_path / "m.peregrine")
    np.testing.assert_array_equal(back.predict(titled(TEST)), model.predict(titled(TEST)))


def test_numpy_object_table():
    rng = np.random.default_rng(4)
    X = np.empty((80, 3), dtype=object)
    X[:, 0] = rng.normal(size=80)
    X[:, 1] = [" ".join(rng.choice(WORDS, 4)) for _ in range(80)]
    X[:, 2] = rng.normal(size=80)
    y = rng.integers(0, 2, 80)
    model = make_pipeline(ColumnTransformer([("t", CountVectorizer(), 1),
                                             ("n", StandardScaler(), [0, 2])]),
                          LogisticRegression()).fit(X, y)
    assert_same(model, compile_or_skip(model, "native"), X)


def test_save_load(tmp_path):
    model = make_pipeline(ColumnTransformer([TXT, NUM, CAT]),
                          LogisticRegression(max_iter=2000)).fit(TRAIN, Y)
    fast = compile_or_skip(model, "native")
    fast.save(tmp_path / "m.peregrine")
    back = peregrine.load(tmp_path / "m.peregrine")
    np.testing.assert_array_equal(back.predict_proba(TEST), fast.predict_proba(TEST))


@pytest.mark.parametrize("make, match", [
    (lambda: make_pipeline(ColumnTransformer([TXT, NUM]), StandardScaler(with_mean=False),
                           LogisticRegression()), "dense"),
    (lambda: make_pipeline(ColumnTransformer([TXT, NUM]), KNeighborsClassifier(3)), "dense"),
    (lambda: make_pipeline(ColumnTransformer([TXT, NUM], transformer_weights={"txt": 2.0}),
                           LogisticRegression()), "weight"),
    (lambda: make_pipeline(ColumnTransformer([("t", TfidfVectorizer(analyzer=str.split),
                                               "review"), NUM]), LogisticRegression()),
     "analyzer"),
])
def test_refused(make, match):
    model = make().fit(TRAIN, Y)
    with pytest.raises(UnsupportedModelError, match=match):
        peregrine.compile(model, backend="reference")


@pytest.mark.parametrize("backend", ["reference", "native"])
def test_nan_an_earlier_step_computes_raises_and_an_encoders_nan_answers(backend):
    """Beside a text column, a FunctionTransformer(np.log) makes NaN from a negative number:
    scikit-learn's LogisticRegression refuses it, and so does the compiled model (its guard;
    it was answered as NaN probabilities before). A NaN in the one-hot encoded column is the
    encoder's unknown category: scikit-learn answers, and so does the compiled model (it was
    refused at the boundary before)."""
    from sklearn.preprocessing import FunctionTransformer

    train = TRAIN.assign(price=np.abs(TRAIN["price"]) + 1.0,
                         age=TRAIN["age"].astype(float))
    model = make_pipeline(ColumnTransformer([
        TXT, ("log", FunctionTransformer(np.log), ["price"]),
        ("cat", OneHotEncoder(handle_unknown="ignore"), ["age"])]),
        LogisticRegression(max_iter=2000)).fit(train, Y)
    fast = compile_or_skip(model, backend)
    test = TEST.assign(price=np.abs(TEST["price"]) + 1.0)
    bad = test.copy()
    bad.loc[4, "price"] = -2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError):
            model.predict_proba(bad)
        with pytest.raises(InputError, match="row 4"):
            fast.predict_proba(bad)
    coded = test.copy()
    coded.loc[[3, 9], "age"] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # unknown categories
        want = model.predict_proba(coded)
    np.testing.assert_allclose(fast.predict_proba(coded), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fast.predict_proba(coded[3:4]), want[3:4], rtol=1e-5,
                               atol=1e-6)
    reaching = test.copy()
    reaching.loc[6, "price"] = np.nan  # reaches the model through the log: refused
    with pytest.raises(ValueError):
        model.predict(reaching)
    with pytest.raises(InputError, match="row 6"):
        fast.predict(reaching)
