"""Every user mistake gets a typed error that says what and where."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import make_classification, make_regression
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
from sklearn.gaussian_process import GaussianProcessRegressor

import peregrine
from peregrine import InputError, NotFittedError, UnsupportedModelError


@pytest.fixture(scope="module")
def frame_model():
    X, y = make_classification(200, 4, n_informative=3, n_redundant=0, random_state=0)
    df = pd.DataFrame(X, columns=["age", "income", "score", "tenure"])
    model = RandomForestClassifier(5, max_depth=4, random_state=0).fit(df, y)
    return model, df


@pytest.fixture(scope="module")
def compiled(frame_model):
    return peregrine.compile(frame_model[0], "reference")


def test_unsupported_estimator_names_it_and_lists_supported():
    X, y = make_regression(50, 3, random_state=0)
    with pytest.raises(UnsupportedModelError,
                       match=r"GaussianProcessRegressor.*Supported models:.*RandomForest"):
        peregrine.compile(GaussianProcessRegressor().fit(X, y), "reference")


def test_arbitrary_object_unsupported():
    with pytest.raises(UnsupportedModelError, match="object"):
        peregrine.compile(object(), "reference")


def test_unfitted_model():
    with pytest.raises(NotFittedError, match="not fitted"):
        peregrine.compile(RandomForestClassifier(), "reference")


def test_unknown_backend(frame_model):
    with pytest.raises(UnsupportedModelError, match="unknown backend 'tpu'"):
        peregrine.compile(frame_model[0], "tpu")


def test_bad_options_type(frame_model):
    with pytest.raises(TypeError, match="CompileOptions"):
        peregrine.compile(frame_model[0], "reference", options={"tree_strategy": "gemm"})


def test_options_validate_values():
    with pytest.raises(ValueError):
        peregrine.CompileOptions(tree_strategy="fastest")
    with pytest.raises(ValueError, match="n_threads"):
        peregrine.CompileOptions(n_threads=0)


def test_wrong_feature_count(compiled):
    with pytest.raises(InputError, match="3 features, but the model expects 4"):
        compiled.predict(np.zeros((2, 3)))


def test_wrong_rank(compiled):
    with pytest.raises(InputError, match="2-D.*reshape"):
        compiled.predict(np.zeros(4))
    with pytest.raises(InputError, match="3-D"):
        compiled.predict(np.zeros((1, 2, 4)))


def test_empty_input(compiled):
    with pytest.raises(InputError, match="0 rows"):
        compiled.predict(np.zeros((0, 4)))


def test_strings_where_numbers_go(compiled):
    with pytest.raises(InputError, match="non-numeric"):
        compiled.predict(np.array([["a", "b", "c", "d"]], dtype=object))
    with pytest.raises(InputError, match="dtype"):
        compiled.predict(np.array([["a", "b", "c", "d"]]))


def test_unsupported_container(compiled):
    with pytest.raises(InputError, match="unsupported input type"):
        compiled.predict({"age": 1})


def test_sparse_input(compiled):
    """CSR/CSC/COO are read (tests/test_sparse_inputs.py); other formats and a wrong width
    are InputErrors."""
    sp = pytest.importorskip("scipy.sparse")
    with pytest.raises(InputError, match="LIL format"):
        compiled.predict(sp.lil_matrix(np.zeros((2, 4))))
    with pytest.raises(InputError, match="input has 3 features"):
        compiled.predict(sp.csr_matrix(np.zeros((2, 3))))
    np.testing.assert_array_equal(compiled.predict(sp.csr_matrix(np.zeros((2, 4)))),
                                  compiled.predict(np.zeros((2, 4))))


def test_dataframe_missing_and_unknown_columns(compiled, frame_model):
    _, df = frame_model
    with pytest.raises(InputError, match=r"missing columns \['tenure'\]"):
        compiled.predict(df.drop(columns=["tenure"]))
    with pytest.raises(InputError, match=r"unknown columns \['zip'\]"):
        compiled.predict(df.assign(zip=1.0))
    with pytest.raises(InputError, match=r"missing columns \['age'\].*unknown columns \['Age'\]"):
        compiled.predict(df.rename(columns={"age": "Age"}))


def test_dataframe_reordered_columns_matched_by_name(compiled, frame_model):
    model, df = frame_model
    shuffled = df[["tenure", "score", "age", "income"]]
    np.testing.assert_array_equal(compiled.predict_proba(shuffled), model.predict_proba(df))


def test_dataframe_string_column(compiled, frame_model):
    _, df = frame_model
    bad = df.astype({"income": object})
    bad.loc[3, "income"] = "n/a"
    with pytest.raises(InputError, match="column 'income'"):
        compiled.predict(bad)


def test_inf_rejected_where_source_rejects(compiled):
    X = np.zeros((3, 4))
    X[2, 1] = np.inf
    with pytest.raises(InputError, match="infinity at row 2, column 1"):
        compiled.predict(X)


@pytest.mark.parametrize("value", [np.inf, -np.inf])
def test_inf_among_nan_everywhere_rejected(value):
    """A model that accepts NaN but not infinity, with NaN in every column (so every column's
    sum is NaN): an infinity is still found and placed, and without one the NaN rows pass."""
    from sklearn.impute import SimpleImputer

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 5))
    X[rng.random(X.shape) < 0.3] = np.nan
    X[0] = np.nan
    imputer = SimpleImputer(strategy="median").fit(X)
    fast = peregrine.compile(imputer, "native")
    np.testing.assert_array_equal(fast.transform(X), imputer.transform(X))
    X[7, 3] = value
    with pytest.raises(InputError, match="infinity at row 7, column 3"):
        fast.transform(X)
    with pytest.raises(ValueError):  # (scikit-learn refuses it too)
        imputer.transform(X)


def test_methods_match_source(compiled):
    assert hasattr(compiled, "predict_proba")
    assert not hasattr(compiled, "transform")
    assert not hasattr(compiled, "decision_function")
    X, y = make_regression(50, 3, random_state=0)
    reg = peregrine.compile(RandomForestRegressor(3, random_state=0).fit(X, y), "reference")
    assert reg.methods == ("predict",)
    with pytest.raises(AttributeError, match="no predict_proba"):
        reg.predict_proba(X)


def test_unsupported_model_is_named():
    from sklearn.neighbors import RadiusNeighborsClassifier  # neighbour count varies per row

    X, y = make_classification(50, 3, n_informative=2, n_redundant=0, random_state=0)
    with pytest.raises(UnsupportedModelError, match="RadiusNeighborsClassifier"):
        peregrine.compile(RadiusNeighborsClassifier().fit(X, y), "reference")
