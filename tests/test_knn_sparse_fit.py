"""KNeighborsClassifier/Regressor fitted on scipy.sparse data: refused at compile time with an
UnsupportedModelError naming the estimator and why (sklearn's sparse distance kernels round
differently from a dense program), not a bare ValueError; alone and in a pipeline."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MaxAbsScaler

import peregrine
from peregrine.errors import UnsupportedModelError


@pytest.mark.parametrize("cls", [KNeighborsClassifier, KNeighborsRegressor])
@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_knn_sparse_fit_refused(cls, fmt):
    X = sp.random(40, 5, density=0.4, format=fmt, random_state=0)
    y = np.arange(40) % 3
    for model in (cls(n_neighbors=3).fit(X, y),
                  make_pipeline(MaxAbsScaler(), cls(n_neighbors=3)).fit(X, y)):
        with pytest.raises(UnsupportedModelError, match=rf"{cls.__name__}.*sparse input"):
            peregrine.compile(model, backend="reference")


def test_knn_dense_fit_still_compiles():
    X = np.random.default_rng(0).random((40, 5))
    y = np.arange(40) % 3
    model = KNeighborsClassifier(n_neighbors=3).fit(X, y)
    compiled = peregrine.compile(model, backend="reference")
    np.testing.assert_array_equal(compiled.predict(X), model.predict(X))
