"""Tree and linear heads after a text vectorizer, directly or behind a selector.

XGBoost after a text vectorizer reads the document-term matrix as the csr_matrix it is: its
absent entries are missing values, not zeros (a split's default direction decides them). The
compiled pipelines used to read them as 0 and answered differently from XGBoost on most
documents. LightGBM and scikit-learn's trees read absent entries as 0."""

from __future__ import annotations

import lightgbm as lgb
import numpy as np
import pytest
import xgboost as xgb
from sklearn.compose import ColumnTransformer
from sklearn.decomposition import TruncatedSVD
from sklearn.ensemble import RandomForestClassifier
from sklearn.feature_extraction.text import (
    CountVectorizer,
    HashingVectorizer,
    TfidfTransformer,
    TfidfVectorizer,
)
from sklearn.feature_selection import SelectKBest, chi2
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.naive_bayes import BernoulliNB, MultinomialNB
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MaxAbsScaler, StandardScaler
from sklearn.svm import LinearSVC

import peregrine
from peregrine.errors import UnsupportedModelError

RTOL, ATOL = 1e-5, 1e-6
rng = np.random.default_rng(0)
WORDS = "alpha beta gamma delta eps zeta eta theta iota kappa".split()
DOCS = [" ".join(rng.choice(WORDS, rng.integers(1, 12))) for _ in range(300)]
Y = np.array([("alpha" in d) + ("beta" in d) for d in DOCS]) % 2
TEST = DOCS[:60] + ["", "ALPHA alpha", "unknown words only", "alpha " * 500, "beta beta"]


def _xgb(**kw):
    return xgb.XGBClassifier(n_estimators=8, max_depth=3, random_state=0, **kw)


PIPES = {
    "count_xgb": lambda: make_pipeline(CountVectorizer(), _xgb()),
    "tfidf_bigrams_xgb": lambda: make_pipeline(TfidfVectorizer(ngram_range=(1, 2)), _xgb()),
    "count_tfidf_xgb": lambda: make_pipeline(CountVectorizer(), TfidfTransformer(), _xgb()),
    "hashing_xgb": lambda: make_pipeline(HashingVectorizer(n_features=64), _xgb()),
    "select_xgb": lambda: make_pipeline(CountVectorizer(), SelectKBest(chi2, k=5), _xgb()),
    "svd_xgb": lambda: make_pipeline(TfidfVectorizer(), TruncatedSVD(3, random_state=0),
                                     _xgb()),
    "count_xgb_regressor": lambda: make_pipeline(
        CountVectorizer(), xgb.XGBRegressor(n_estimators=8, max_depth=3, random_state=0)),
    "count_lightgbm": lambda: make_pipeline(  # LightGBM takes float sparse matrices only
        CountVectorizer(dtype=np.float64), lgb.LGBMClassifier(n_estimators=8, min_child_samples=5,
                                              verbose=-1)),
    "count_forest": lambda: make_pipeline(CountVectorizer(),
                                          RandomForestClassifier(8, random_state=0)),
    # a selector between the vectorizer and the head (was refused): its columns compose with
    # the boundary's projection or gather
    "select_forest": lambda: make_pipeline(TfidfVectorizer(), SelectKBest(chi2, k=4),
                                           RandomForestClassifier(8, random_state=0)),
    "select_logistic": lambda: make_pipeline(TfidfVectorizer(ngram_range=(1, 2)),
                                             SelectKBest(chi2, k=12), LogisticRegression()),
    "select_multinomial_nb": lambda: make_pipeline(CountVectorizer(), SelectKBest(chi2, k=6),
                                                   MultinomialNB()),
    "select_bernoulli_nb": lambda: make_pipeline(CountVectorizer(), SelectKBest(chi2, k=6),
                                                 BernoulliNB()),
    # a scaler on the sparse matrix (was refused): scikit-learn multiplies its stored values
    # by 1 / scale_ (not X / scale_, which rounds differently), the boundary does the same
    "max_abs_logistic": lambda: make_pipeline(CountVectorizer(ngram_range=(1, 2)),
                                              MaxAbsScaler(), LogisticRegression(C=50.0)),
    "max_abs_clip_sgd": lambda: make_pipeline(TfidfVectorizer(), MaxAbsScaler(clip=True),
                                              SGDClassifier(loss="log_loss", random_state=0)),
    "std_no_mean_svc": lambda: make_pipeline(CountVectorizer(), StandardScaler(with_mean=False),
                                             LinearSVC(C=10.0)),
    "max_abs_select_xgb": lambda: make_pipeline(CountVectorizer(), MaxAbsScaler(),
                                                SelectKBest(chi2, k=5), _xgb()),
    "max_abs_forest": lambda: make_pipeline(HashingVectorizer(n_features=32), MaxAbsScaler(),
                                            RandomForestClassifier(8, random_state=0)),
}


@pytest.fixture(scope="module")
def fitted():
    out = {}
    for name, make in PIPES.items():
        m = make()
        target = Y + rng.normal(size=len(Y)) * 0.1 if "regressor" in name else Y
        out[name] = m.fit(DOCS, target)
    return out


@pytest.mark.parametrize("backend", ["reference", "native", "torch"])
@pytest.mark.parametrize("name", list(PIPES))
def test_matches_the_library(fitted, name, backend):
    model = fitted[name]
    compiled = peregrine.compile(model, backend=backend)
    if "regressor" in name:
        np.testing.assert_allclose(compiled.predict(TEST), model.predict(TEST),
                                   rtol=RTOL, atol=ATOL)
        return
    np.testing.assert_array_equal(compiled.predict(TEST), model.predict(TEST))
    method = "predict_proba" if hasattr(model, "predict_proba") else "decision_function"
    np.testing.assert_allclose(getattr(compiled, method)(TEST), getattr(model, method)(TEST),
                               rtol=RTOL, atol=ATOL)


def test_the_missing_direction_matters_here(fitted):
    """The check above has teeth: reading absent entries as 0 changes XGBoost's answer."""
    import scipy.sparse as sp

    model = fitted["count_xgb"]
    s = model[0].transform(TEST)
    as_zero = model[-1].predict_proba(np.asarray(s.toarray(), dtype=np.float64))
    as_missing = model[-1].predict_proba(sp.csr_matrix(s))
    assert np.abs(as_zero - as_missing).max() > 1e-3


def test_a_text_column_in_a_sparse_column_transformer_before_xgboost_is_refused():
    import pandas as pd

    frame = pd.DataFrame({"text": DOCS, "num": np.arange(len(DOCS), dtype=float)})
    ct = ColumnTransformer([("t", CountVectorizer(), "text"), ("n", "passthrough", ["num"])],
                           sparse_threshold=1.0)  # a sparse hstack
    model = make_pipeline(ct, _xgb()).fit(frame, Y)
    assert ct.sparse_output_
    with pytest.raises(UnsupportedModelError, match="absent entries as missing"):
        peregrine.compile(model)


@pytest.mark.parametrize("backend", ["reference", "native", "torch"])
@pytest.mark.parametrize("scaler", [lambda: MaxAbsScaler(),
                                    lambda: StandardScaler(with_mean=False)],
                         ids=["max_abs", "standard_no_mean"])
def test_a_scaler_on_a_sparse_one_hot_before_xgboost_and_logistic(backend, scaler):
    """The same scalers on a OneHotEncoder's csr_matrix: scikit-learn multiplies the stored
    values by 1 / scale_ and XGBoost reads the absent entries as missing (was refused)."""
    import pandas as pd
    from sklearn.preprocessing import OneHotEncoder

    frame = pd.DataFrame({"a": rng.choice(list("pqrst"), 300), "b": rng.choice(list("xyz"), 300)})
    target = (frame["a"].isin(["p", "q"]) ^ (frame["b"] == "x")).to_numpy().astype(int)
    for head in (_xgb(), LogisticRegression()):
        model = make_pipeline(OneHotEncoder(sparse_output=True, handle_unknown="ignore"),
                              scaler(), head).fit(frame, target)
        compiled = peregrine.compile(model, backend=backend)
        np.testing.assert_array_equal(compiled.predict(frame), model.predict(frame))
        np.testing.assert_allclose(compiled.predict_proba(frame), model.predict_proba(frame),
                                   rtol=RTOL, atol=ATOL)


def test_onnx_export_of_a_text_pipeline_is_refused_by_name(fitted, tmp_path):
    """The tokenizer has no exact ONNX form: a typed error naming it (was an InputError about
    2-D input from the export's validation rows)."""
    pytest.importorskip("onnx")
    with pytest.raises(UnsupportedModelError, match="ONNX export of a text vectorizer"):
        peregrine.compile(fitted["count_xgb"]).export_onnx(tmp_path / "m.onnx")
