"""set_output(transform="pandas"): scikit-learn's transform returns a DataFrame (columns from
get_feature_names_out, the input frame's index); so does the compiled model's, on every path
(one row, a batch, an array input), after save/load, and through the CLI's table writer."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.decomposition import PCA
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, OneHotEncoder, StandardScaler

import peregrine

BACKENDS = ["reference", "torch", "native"]
RNG = np.random.default_rng(0)
DF = pd.DataFrame({"a": RNG.normal(size=200), "b": RNG.normal(size=200) * 4.0,
                   "s": RNG.choice(["x", "y", "z"], 200)},
                  index=pd.Index([f"r{i}" for i in range(200)], name="id"))


def _models():
    ct = ColumnTransformer([("n", StandardScaler(), ["a", "b"]),
                            ("c", OneHotEncoder(sparse_output=False), ["s"])])
    return {
        "scaler": (StandardScaler(), ["a", "b"]),
        "column-transformer": (ct, ["a", "b", "s"]),
        "pipeline": (make_pipeline(SimpleImputer(), MinMaxScaler(), PCA(2)), ["a", "b"]),
    }


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(_models()))
def test_transform_returns_the_same_frame(name, backend, tmp_path):
    est, cols = _models()[name]
    est = est.set_output(transform="pandas").fit(DF[cols])
    c = peregrine.compile(est, backend=backend)
    for rows in (DF[cols], DF[cols].iloc[3:4], DF[cols].iloc[:7]):
        want, got = est.transform(rows), c.transform(rows)
        assert isinstance(got, pd.DataFrame)
        pd.testing.assert_index_equal(got.columns, want.columns)
        pd.testing.assert_index_equal(got.index, want.index)
        np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-5, atol=1e-6)
    if name != "column-transformer":  # an array input: a default index, as scikit-learn's
        arr = DF[cols].to_numpy()[:5]
        got = c.transform(arr)
        assert isinstance(got, pd.DataFrame) and list(got.index) == list(range(5))
    path = tmp_path / "m.peregrine"
    c.save(path)
    loaded = peregrine.load(path).transform(DF[cols].iloc[:2])
    pd.testing.assert_frame_equal(loaded, est.transform(DF[cols].iloc[:2]), rtol=1e-5)


def test_default_output_stays_an_array():
    est = StandardScaler().fit(DF[["a", "b"]])
    assert type(peregrine.compile(est).transform(DF[["a", "b"]])) is np.ndarray


def test_cli_table_of_a_frame_output():
    from peregrine.cli.data import output_frame

    frame = pd.DataFrame([[1.0, 2.0]], columns=["n__a", "n__b"], index=["r7"])
    out = output_frame("transform", frame, None)
    assert list(out.columns) == ["n__a", "n__b"] and out.to_numpy().tolist() == [[1.0, 2.0]]
