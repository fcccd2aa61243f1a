"""Steps that hand the next step a scipy.sparse matrix: a ColumnTransformer whose fit chose
sparse output (``sparse_output_``, the default sparse_threshold=0.3 with one-hot columns), a
OneHotEncoder(sparse_output=True), a FeatureUnion with a sparse part (steps.Flow.sparse).

The next step reads the same values, except where the library reads a sparse matrix
differently: XGBoost takes its absent entries (the zeros) as missing, and scikit-learn's trees
refuse a NaN stored in it. Every case against the library's own predict on the same frame,
unseen categories and NaN included."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
from sklearn.feature_selection import VarianceThreshold
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline, make_union
from sklearn.preprocessing import (
    FunctionTransformer,
    MaxAbsScaler,
    Normalizer,
    OneHotEncoder,
    StandardScaler,
)

import peregrine
from peregrine.errors import InputError, UnsupportedModelError

BACKENDS = ["reference", "torch", "native"]
STRINGS = ["s0", "s1", "s2"]


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({c: rng.choice([f"v{j}" for j in range(30)], n) for c in STRINGS})
    df["a"] = rng.normal(size=n)
    df["b"] = rng.normal(size=n) * 3.0
    return df


TRAIN, TEST = _frame(1500, 0), _frame(400, 1)
Y = ((TRAIN.s0 < "v15") ^ (TRAIN.a > 0)).to_numpy().astype(int)
TEST.loc[3, "s1"] = "unseen"  # handle_unknown='ignore': an all-zero block
TEST.loc[5, "s0"] = "also unseen"


def _ct(**kw):
    return ColumnTransformer([("c", OneHotEncoder(handle_unknown="ignore"), STRINGS),
                              ("n", StandardScaler(), ["a"]), ("p", "passthrough", ["b"])],
                             **kw)


def _models():
    import lightgbm as lgb
    import xgboost as xgb

    return {
        "logistic": make_pipeline(_ct(), LogisticRegression(max_iter=1000)),
        "forest": make_pipeline(_ct(), RandomForestClassifier(20, random_state=0)),
        "gradient-boosting": make_pipeline(_ct(), GradientBoostingClassifier(n_estimators=20)),
        "xgboost": make_pipeline(_ct(), xgb.XGBClassifier(n_estimators=20, max_depth=4)),
        "lightgbm": make_pipeline(_ct(), lgb.LGBMClassifier(n_estimators=20, verbose=-1)),
        "ohe-xgboost": make_pipeline(
            ColumnTransformer([("c", OneHotEncoder(handle_unknown="ignore"), STRINGS)]),
            xgb.XGBClassifier(n_estimators=20, max_depth=4)),
        "selector-xgboost": make_pipeline(_ct(), VarianceThreshold(0.01),
                                          xgb.XGBClassifier(n_estimators=20, max_depth=4)),
    }


@pytest.fixture(scope="module")
def fitted():
    models = {}
    for name, m in _models().items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            models[name] = m.fit(TRAIN, Y)
    return models


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["logistic", "forest", "gradient-boosting", "xgboost",
                                  "lightgbm", "ohe-xgboost", "selector-xgboost"])
def test_model_after_a_sparse_column_transformer(fitted, name, backend):
    model = fitted[name]
    assert model[0].sparse_output_  # the case: fit chose a sparse hstack
    c = peregrine.compile(model, backend=backend)
    for rows in (TEST, TEST.iloc[3:4], TEST.iloc[:7]):
        np.testing.assert_array_equal(c.predict(rows), model.predict(rows))
        np.testing.assert_allclose(c.predict_proba(rows), model.predict_proba(rows),
                                   rtol=1e-5, atol=1e-6)


def test_xgboost_reads_absent_entries_as_missing(fitted):
    """The zeros of the sparse matrix are missing for XGBoost: its answer differs from the
    same values handed over dense, and the compiled model gives XGBoost's."""
    model = fitted["xgboost"]
    dense = model[0].transform(TEST).toarray()
    as_sparse = model[-1].predict_proba(sp.csr_matrix(dense))
    assert not np.allclose(as_sparse, model[-1].predict_proba(dense))
    got = peregrine.compile(model, backend="reference").predict_proba(TEST)
    np.testing.assert_allclose(got, as_sparse, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sparse_column_transformer_transform(backend):
    """As the last step its transform is the CSR scikit-learn returns."""
    ct = _ct().fit(TRAIN)
    assert ct.sparse_output_
    c = peregrine.compile(ct, backend=backend)
    want, got = ct.transform(TEST), c.transform(TEST)
    assert sp.issparse(got) and got.format == "csr" and type(got) is type(want)
    np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-12, atol=0)


@pytest.mark.parametrize("backend", ["reference", "native"])
def test_forest_refuses_nan_in_the_sparse_matrix(fitted, backend):
    """scikit-learn's forest takes NaN in a dense X, refuses it in a sparse one: a NaN
    passed through to a forest behind a sparse hstack raises, as the library raises."""
    X = np.random.default_rng(0).integers(0, 30, size=(600, 3)).astype(float)
    y = (X[:, 0] < 15).astype(int)
    union = make_pipeline(make_union(OneHotEncoder(handle_unknown="ignore"),
                                     FunctionTransformer()),
                          RandomForestClassifier(10, random_state=0)).fit(X, y)
    c = peregrine.compile(union, backend=backend)
    rows = X[:50].copy()
    np.testing.assert_allclose(c.predict_proba(rows), union.predict_proba(rows))
    rows[4, 2] = np.nan
    with pytest.raises(ValueError):
        union.predict_proba(rows)
    with pytest.raises(InputError):
        c.predict_proba(rows)


def test_feature_union_with_a_sparse_part_transform():
    X = np.random.default_rng(0).integers(0, 30, size=(300, 3)).astype(float)
    union = make_union(OneHotEncoder(handle_unknown="ignore"), StandardScaler()).fit(X)
    c = peregrine.compile(union, backend="reference")
    want, got = union.transform(X[:40]), c.transform(X[:40])
    assert sp.issparse(want) and sp.issparse(got) and type(got) is type(want)
    np.testing.assert_allclose(got.toarray(), want.toarray(), rtol=1e-12, atol=1e-15)


def test_xgboost_behind_a_step_of_unknown_format_is_refused():
    """A step that reads the sparse matrix and is not known to keep it sparse (Normalizer is
    not listed; TruncatedSVD makes it dense: which one XGBoost gets decides what a zero
    means)."""
    import xgboost as xgb

    model = make_pipeline(_ct(), Normalizer(),
                          xgb.XGBClassifier(n_estimators=5)).fit(TRAIN, Y)
    with pytest.raises(UnsupportedModelError, match="absent entries as missing"):
        peregrine.compile(model, backend="reference")


def test_xgboost_behind_a_scaler_of_the_sparse_matrix():
    """MaxAbsScaler keeps the matrix sparse (stored values times 1 / scale_): XGBoost after
    it reads the absent entries as missing, as it does behind the ColumnTransformer itself."""
    import xgboost as xgb

    model = make_pipeline(_ct(), MaxAbsScaler(),
                          xgb.XGBClassifier(n_estimators=5)).fit(TRAIN, Y)
    for backend in BACKENDS:
        got = peregrine.compile(model, backend=backend).predict_proba(TRAIN)
        np.testing.assert_allclose(got, model.predict_proba(TRAIN), rtol=1e-5, atol=1e-6)


def test_linear_model_after_a_sparse_one_hot_encoder():
    """A OneHotEncoder(sparse_output=True) step straight into a linear model."""
    X = np.random.default_rng(1).integers(0, 20, size=(500, 4)).astype(float)
    y = X[:, 0] * 0.5 - (X[:, 1] == 3)
    model = make_pipeline(OneHotEncoder(handle_unknown="ignore"), Ridge()).fit(X, y)
    for backend in BACKENDS:
        got = peregrine.compile(model, backend=backend).predict(X[:60])
        np.testing.assert_allclose(got, model.predict(X[:60]), rtol=1e-5, atol=1e-6)


def test_tvm_and_onnx_export_after_a_sparse_column_transformer(fitted, tmp_path):
    """The absent-as-missing step (IMPUTE 0 -> NaN) in the TVM backend and the ONNX file
    (validated on export against the compiled model, then against XGBoost here)."""
    pytest.importorskip("tvm")
    pytest.importorskip("onnxruntime")
    from peregrine.export.onnx import session

    model = fitted["xgboost"]
    c = peregrine.compile(model, backend="tvm")
    np.testing.assert_allclose(c.predict_proba(TEST), model.predict_proba(TEST), rtol=1e-5,
                               atol=1e-6)
    path = tmp_path / "m.onnx"
    peregrine.compile(model, backend="reference").export_onnx(path, string_inputs=True)
    sess = session(str(path), 1)
    # the numbers as one matrix "X" in the model's column order, each string column alone
    feeds = {"X": TEST[["a", "b"]].to_numpy(np.float64)}
    feeds.update({c: TEST[[c]].to_numpy(object) for c in STRINGS})
    names = [o.name for o in sess.get_outputs()]
    out = dict(zip(names, sess.run(None, feeds)))
    np.testing.assert_allclose(out["probabilities"], model.predict_proba(TEST), rtol=1e-5,
                               atol=1e-6)


def _text_frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(200)] + ["red"]
    return pd.DataFrame({"t": [" ".join(rng.choice(words, 5)) for _ in range(n)],
                         "c": rng.choice(list("abc"), n), "x": rng.normal(size=n)})


def test_text_column_transformer_sparse_hstack():
    """A ColumnTransformer with a text column whose hstack is sparse: a forest behind it
    answers as scikit-learn and refuses the NaN scikit-learn refuses there; XGBoost (absent
    entries missing) is refused, not answered as if they were 0."""
    import xgboost as xgb
    from sklearn.feature_extraction.text import CountVectorizer

    df, test = _text_frame(800, 0), _text_frame(100, 1)
    y = (df.t.str.contains("red") ^ (df.x > 0)).to_numpy().astype(int)

    def ct():
        return ColumnTransformer([("t", CountVectorizer(), "t"), ("c", OneHotEncoder(), ["c"]),
                                  ("x", "passthrough", ["x"])])

    forest = make_pipeline(ct(), RandomForestClassifier(10, random_state=0)).fit(df, y)
    assert forest[0].sparse_output_
    c = peregrine.compile(forest, backend="reference")
    np.testing.assert_allclose(c.predict_proba(test), forest.predict_proba(test))
    test.loc[2, "x"] = np.nan
    with pytest.raises(ValueError):
        forest.predict_proba(test)
    with pytest.raises(InputError):
        c.predict_proba(test)
    boosted = make_pipeline(ct(), xgb.XGBClassifier(n_estimators=5)).fit(df, y)
    with pytest.raises(UnsupportedModelError, match="sparse hstack with a text column"):
        peregrine.compile(boosted, backend="reference")
