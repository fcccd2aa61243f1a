"""Per-class scores of QuadraticDiscriminantAnalysis, GaussianMixture and GaussianNB (and
PCA's score_samples) on rows
far out (past ~1e150), where a square overflows to infinity for some classes, and on tied
scores too large for log(k) to survive rounding. scikit-learn computes each class alone and
normalises as _logsumexp / logsumexp or its shifted log-softmax; the compiled models used to
sum every class through one block-diagonal LINEAR (0 * inf = NaN in all classes), to take
GaussianMixture's probabilities from a softmax (1/3 where scikit-learn answers exp(0) = 1),
GaussianNB's from folded weights (finite where scikit-learn's division overflows to -inf),
and QDA's log-probabilities as s - (max + log(sum)) (0 where scikit-learn gives log(1/2))."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.decomposition import PCA
from sklearn.discriminant_analysis import QuadraticDiscriminantAnalysis
from sklearn.mixture import BayesianGaussianMixture, GaussianMixture
from sklearn.naive_bayes import GaussianNB

import peregrine

RTOL, ATOL = 1e-5, 1e-6
_rng = np.random.RandomState(0)
X2 = np.vstack([_rng.randn(30, 2) * 0.05, _rng.randn(30, 2) + 3, _rng.randn(30, 2) - 3])
Y2 = np.repeat([0, 1, 2], 30)
X3 = np.random.RandomState(0).randn(90, 3)
X3[:30] += 3
_A = np.random.RandomState(0).randn(30, 2)
ROWS2 = np.array([[1e153, 0.0], [1e154, 1e154], [0.5, 0.5], [-1e200, 3.0], [3e153, -2.0]])
ROWS3 = np.array([[1e154, X3[0, 1], X3[0, 2]], [1.0, 2.0, 3.0], [1e154, 1e154, 1e154],
                  [-2e153, 0.0, 1.0]])

MODELS = {
    "qda3": (lambda: QuadraticDiscriminantAnalysis().fit(X2, Y2), ROWS2),
    "qda2": (lambda: QuadraticDiscriminantAnalysis().fit(X2[:60], Y2[:60]), ROWS2),
    "qda_ties": (lambda: QuadraticDiscriminantAnalysis().fit(
        np.vstack([_A, _A + 1.0]), np.repeat([0, 1], 30)),
        np.array([[-1e20, 5.0], [-3e19, -1.0], [0.3, 0.2]])),
    "gmm_full": (lambda: GaussianMixture(3, random_state=0).fit(X3), ROWS3),
    "gmm_tied": (lambda: GaussianMixture(3, covariance_type="tied", random_state=0).fit(X3),
                 ROWS3),
    "bgmm_full": (lambda: BayesianGaussianMixture(n_components=3, random_state=0).fit(X3),
                  ROWS3),
    "gaussian_nb": (lambda: GaussianNB().fit(X2, Y2), ROWS2),
    # score_samples: -0.5 * sum(...) overflows to -inf where the sum does
    "pca": (lambda: PCA(2).fit(X3 * np.array([1.0, 10.0, 1.0])), ROWS3),
}
METHODS = ("predict", "predict_proba", "predict_log_proba", "decision_function",
           "score_samples")


@pytest.fixture(scope="module")
def fitted():
    return {name: make() for name, (make, _) in MODELS.items()}


@pytest.mark.parametrize("backend", ["reference", "native", "torch"])
@pytest.mark.parametrize("name", list(MODELS))
def test_far_rows_and_ties_match_scikit_learn(fitted, name, backend):
    model, rows = fitted[name], MODELS[name][1]
    compiled = peregrine.compile(model, backend=backend)
    for method in (m for m in METHODS if hasattr(model, m)):
        for batch in [rows] + [rows[i:i + 1] for i in range(len(rows))]:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                want = getattr(model, method)(batch)
            got = getattr(compiled, method)(batch)
            if method == "predict":
                np.testing.assert_array_equal(got, want, err_msg=f"{method} {batch}")
            else:
                np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, equal_nan=True,
                                           err_msg=f"{method} {batch}")


def test_the_rows_reach_the_cases(fitted):
    """The rows do what the module says: a class's score overflows while another's does not,
    and the tied log-probabilities are log(1/2)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        dec = fitted["qda3"].decision_function(ROWS2[:1])
        ties = fitted["qda_ties"].predict_log_proba(np.array([[-1e20, 5.0]]))
        tied = fitted["gmm_tied"].predict_proba(ROWS3[:1])
    assert np.isneginf(dec[0, 0]) and np.all(np.isfinite(dec[0, 1:]))
    np.testing.assert_allclose(ties, np.log(0.5))
    np.testing.assert_array_equal(tied, 1.0)
