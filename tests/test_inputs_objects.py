"""String columns at the boundary: numpy object arrays (integer column indices) are encoded like
DataFrame string columns, and both agree with scikit-learn on every backend that runs here."""

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, OrdinalEncoder, StandardScaler

import peregrine
from peregrine.errors import InputError

BACKENDS = ("reference", "torch", "torchscript")


def _object_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.empty((n, 4), dtype=object)
    X[:, 0] = rng.normal(size=n)
    X[:, 1] = rng.choice(["red", "green", "blue"], n)
    X[:, 2] = rng.normal(size=n)
    X[:, 3] = rng.choice(["a", "b", "c", "d"], n)
    y = (X[:, 0].astype(float) > 0) ^ (X[:, 1] == "red")
    return X, y.astype(int)


def _pipeline(handle_unknown: str = "ignore", imputer: bool = False):
    cat = OneHotEncoder(handle_unknown=handle_unknown, sparse_output=False)
    if imputer:
        cat = make_pipeline(SimpleImputer(strategy="most_frequent"), cat)
    ct = ColumnTransformer([
        ("num", StandardScaler(), [0, 2]),
        ("cat", cat, [1]),
        ("ord", OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1), [3]),
    ])
    return make_pipeline(ct, LogisticRegression(max_iter=300))


@pytest.mark.parametrize("backend", BACKENDS)
def test_object_array_matches_sklearn(backend):
    X, y = _object_data(200, 0)
    model = _pipeline().fit(X, y)
    test, _ = _object_data(60, 1)
    test[3, 1] = "purple"  # unseen: handle_unknown='ignore' gives all-zero indicators
    test[5, 3] = "zzz"  # unseen for the ordinal encoder: unknown_value
    compiled = peregrine.compile(model, backend)
    for method in ("predict", "predict_proba", "decision_function"):
        want = getattr(model, method)(test)
        got = getattr(compiled, method)(test)
        if method == "predict":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_object_array_with_missing_values(backend):
    X, y = _object_data(200, 2)
    # sklearn's imputer sees only NaN as missing in object columns (None is a known gap,
    # docs/pipelines.md), so missing strings are NaN here
    X[::7, 1] = np.nan
    model = _pipeline(imputer=True).fit(X, y)
    test, _ = _object_data(40, 3)
    test[::5, 1] = np.nan
    compiled = peregrine.compile(model, backend)
    np.testing.assert_allclose(compiled.predict_proba(test), model.predict_proba(test),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(compiled.predict(test), model.predict(test))


def test_object_array_equals_dataframe_encoding():
    X, y = _object_data(200, 4)
    model = _pipeline().fit(X, y)
    compiled = peregrine.compile(model, "torch")
    test, _ = _object_data(50, 5)
    frame = pd.DataFrame(test).astype({0: float, 2: float})
    # the same model on the same rows, once as an object array, once column-typed
    np.testing.assert_array_equal(compiled.predict_proba(test),
                                  peregrine.compile(model, "torch").predict_proba(
                                      frame.to_numpy(dtype=object)))
    np.testing.assert_allclose(compiled.predict_proba(test), model.predict_proba(test),
                               rtol=1e-5, atol=1e-6)


def test_object_array_unknown_string_with_handle_unknown_error():
    X, y = _object_data(200, 6)
    model = _pipeline(handle_unknown="error").fit(X, y)
    compiled = peregrine.compile(model, "torch")
    test, _ = _object_data(10, 7)
    compiled.predict(test)  # every category known: fine
    test[4, 1] = "purple"
    with pytest.raises(ValueError):
        model.predict(test)
    with pytest.raises(InputError, match=r"'purple'.*row 4"):
        compiled.predict(test)


def test_object_array_strings_in_a_numeric_column_are_rejected():
    X, y = _object_data(200, 8)
    compiled = peregrine.compile(_pipeline().fit(X, y), "torch")
    test, _ = _object_data(10, 9)
    test[2, 0] = "oops"
    with pytest.raises(InputError, match="column 0"):
        compiled.predict(test)


def test_object_array_wrong_width_is_rejected():
    X, y = _object_data(200, 10)
    compiled = peregrine.compile(_pipeline().fit(X, y), "torch")
    with pytest.raises(InputError, match="features"):
        compiled.predict(X[:, :3])


@pytest.mark.parametrize("storage", ["object", "arrow"])
def test_dataframe_string_columns_both_storages(storage):
    rng = np.random.default_rng(11)
    n = 150
    frame = pd.DataFrame({"x": rng.normal(size=n),
                          "c": rng.choice(["u", "v", "w"], n).astype(object)})
    y = ((frame["x"] > 0) ^ (frame["c"] == "u")).astype(int)
    ct = ColumnTransformer([("num", StandardScaler(), ["x"]),
                            ("cat", OneHotEncoder(handle_unknown="ignore",
                                                  sparse_output=False), ["c"])])
    model = make_pipeline(ct, LogisticRegression()).fit(frame, y)
    test = frame.iloc[:40].copy()
    test.loc[test.index[3], "c"] = "unseen"
    test.loc[test.index[4], "c"] = None
    test["c"] = test["c"].astype(object if storage == "object" else "string[pyarrow]")
    compiled = peregrine.compile(model, "torch")
    want = model.predict_proba(test.astype({"c": object}))
    np.testing.assert_allclose(compiled.predict_proba(test), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
def test_dataframe_of_one_dtype_in_or_out_of_order(dtype):
    """A frame of one number dtype in the training order is converted whole (DataFrame.to_numpy),
    reordered or with a column missing it goes through the column take or is refused; every
    form gives the model's answers on the same values as an array."""
    rng = np.random.default_rng(3)
    values = rng.normal(size=(40, 5)) * 3
    frame = pd.DataFrame(values, columns=list("abcde")).astype(dtype)
    y = (values[:, 0] + values[:, 1] > 0).astype(int)
    model = LogisticRegression().fit(frame, y)
    compiled = peregrine.compile(model, "native")
    want = compiled.predict_proba(frame.to_numpy())  # the array path: the same bits
    np.testing.assert_allclose(want, model.predict_proba(frame), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(compiled.predict_proba(frame), want)
    np.testing.assert_array_equal(compiled.predict_proba(frame.iloc[:1]), want[:1])
    np.testing.assert_array_equal(compiled.predict_proba(frame[list("ecabd")]), want)
    with pytest.raises(InputError, match="missing columns \\['d'\\]"):
        compiled.predict_proba(frame.drop(columns="d"))
    with pytest.raises(InputError, match="duplicate column names"):
        compiled.predict_proba(pd.concat([frame, frame[["a"]]], axis=1).iloc[:, [0, 1, 2, 3, 4]]
                               .set_axis(list("abcda"), axis=1).assign(e=frame.e))
