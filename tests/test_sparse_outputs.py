"""Transformers that end a pipeline with sparse output (issue #11 item 7): the compiled
transform returns the scipy.sparse class the source returns (csr_matrix; csc_matrix for
MissingIndicator), with its dtype and values, on every backend and after save/load. In the
middle of a pipeline, where the next step would read the sparse matrix its own way, the
steps that refused sparse output still refuse it."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse
from sklearn.impute import MissingIndicator
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import (
    KBinsDiscretizer,
    OneHotEncoder,
    SplineTransformer,
    StandardScaler,
)

import peregrine
from peregrine.backends import available_backends
from peregrine.errors import UnsupportedModelError

RNG = np.random.default_rng(7)
X = RNG.uniform(0.0, 1.0, (80, 3))
XI = np.floor(X * 4)
XN = X.copy()
XN[::4, 1] = np.nan
XN[::7, 2] = np.nan
Y = (X[:, 0] > 0.5).astype(int)


def _models() -> dict:
    return {
        "onehot": (OneHotEncoder().fit(XI), XI),
        "onehot-float32-drop": (OneHotEncoder(dtype=np.float32, drop="first").fit(XI), XI),
        "onehot-ignore": (OneHotEncoder(handle_unknown="ignore").fit(XI),
                          np.vstack([XI, XI[:5] + 7])),
        "kbins-onehot": (KBinsDiscretizer(n_bins=4, encode="onehot",
                                          quantile_method="averaged_inverted_cdf").fit(X),
                         np.vstack([X, X[:5] * 3 - 1])),
        "spline-sparse": (SplineTransformer(n_knots=4, sparse_output=True).fit(X), X),
        "missing-indicator": (MissingIndicator(sparse=True).fit(XN), XN),
        "missing-indicator-all": (MissingIndicator(sparse=True, features="all").fit(XN), XN),
        "pipeline-last": (make_pipeline(StandardScaler(), KBinsDiscretizer(
            n_bins=3, encode="onehot", quantile_method="averaged_inverted_cdf")).fit(X), X),
    }


MODELS = _models()


@pytest.mark.parametrize("backend", ["reference", "torch", "torchscript", "native"])
@pytest.mark.parametrize("name", list(MODELS))
def test_sparse_transform_matches_sklearn(name, backend, tmp_path):
    if backend not in available_backends():
        pytest.skip(f"backend {backend} not available")
    model, rows = MODELS[name]
    want = model.transform(rows)
    assert sparse.issparse(want)
    fast = peregrine.compile(model, backend)
    for compiled in (fast, _reloaded(fast, tmp_path)):
        for r in (rows, rows[:1]):
            got, w = compiled.transform(r), model.transform(r)
            assert type(got) is type(w), (type(got), type(w))
            assert got.dtype == w.dtype and got.shape == w.shape
            np.testing.assert_array_equal(got.toarray(), w.toarray())


def _reloaded(fast, tmp_path):
    path = tmp_path / "m.peregrine"
    fast.save(path)
    return peregrine.load(path)


def test_sparse_steps_in_the_middle_are_refused():
    for step in (KBinsDiscretizer(n_bins=3, encode="onehot",
                                  quantile_method="averaged_inverted_cdf"),
                 SplineTransformer(n_knots=4, sparse_output=True)):
        pipe = make_pipeline(step, LogisticRegression()).fit(X, Y)
        with pytest.raises(UnsupportedModelError, match="middle of a pipeline"):
            peregrine.compile(pipe, "reference")


@pytest.mark.parametrize("dtype", [np.float32, np.int64, "float64"])
@pytest.mark.parametrize("cls", [OneHotEncoder, "OrdinalEncoder"])
def test_encoder_dtype_is_the_sources(cls, dtype):
    from sklearn.preprocessing import OrdinalEncoder

    cls = OrdinalEncoder if cls == "OrdinalEncoder" else cls
    kw = {"sparse_output": False} if cls is OneHotEncoder else {}
    model = cls(dtype=dtype, **kw).fit(XI)
    got, want = peregrine.compile(model, "reference").transform(XI), model.transform(XI)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
