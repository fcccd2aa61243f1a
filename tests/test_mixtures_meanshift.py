"""MeanShift (predict: the nearest cluster centre) and GaussianMixture/BayesianGaussianMixture
(predict, predict_proba, score_samples) against scikit-learn on every backend (issue #11,
item 7: refused where Hummingbird converts them)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.cluster import MeanShift
from sklearn.mixture import BayesianGaussianMixture, GaussianMixture

import peregrine
from peregrine.backends import available_backends

BACKENDS = ["reference", "torch", "torchscript", "native"]
RNG = np.random.default_rng(5)
X = np.vstack([RNG.normal(c, 0.5, (50, 3)) @ RNG.normal(size=(3, 3)) for c in (0, 2, 4)])
ROWS = np.vstack([X, X[:10] * 5.0, RNG.normal(size=(20, 3)), np.zeros((1, 3))])


def _models() -> dict:
    out = {"meanshift": MeanShift().fit(X),
           "meanshift-bin-seeding": MeanShift(bin_seeding=True, cluster_all=False).fit(X)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BayesianGaussianMixture's convergence warning
        for cov in ("full", "tied", "diag", "spherical"):
            out[f"gmm-{cov}"] = GaussianMixture(3, covariance_type=cov, random_state=0).fit(X)
            for prior in ("dirichlet_process", "dirichlet_distribution"):
                out[f"bgmm-{cov}-{prior}"] = BayesianGaussianMixture(
                    n_components=4, covariance_type=cov, random_state=0,
                    weight_concentration_prior_type=prior).fit(X)
    return out


MODELS = _models()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(MODELS))
def test_matches_sklearn(name, backend, dtype):
    if backend not in available_backends():
        pytest.skip(f"backend {backend} not available")
    model = MODELS[name]
    rows = ROWS.astype(dtype)
    fast = peregrine.compile(model, backend)
    methods = [m for m in ("predict", "predict_proba", "score_samples") if hasattr(model, m)]
    assert [m for m in methods if hasattr(fast, m)] == methods
    for m in methods:
        want, got = getattr(model, m)(rows), getattr(fast, m)(rows)
        assert got.shape == want.shape, m
        if m == "predict":
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=m)


def test_mixture_in_a_pipeline():
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    pipe = make_pipeline(StandardScaler(), GaussianMixture(3, random_state=0)).fit(X)
    fast = peregrine.compile(pipe, "reference")
    np.testing.assert_allclose(fast.score_samples(ROWS), pipe.score_samples(ROWS), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(fast.predict(ROWS), pipe.predict(ROWS))
