"""scikit-learn kernel methods and neighbours: SVC/NuSVC/SVR/NuSVR/OneClassSVM for every
kernel, binary and multiclass, ovr/ovo, break_ties, probability=True (Platt and libsvm's
pairwise coupling); KNeighbors{Classifier,Regressor} for uniform/distance weights x metrics;
KernelPCA for every kernel; and pipelines ending in them. Small data (150 rows) keeps the
suite fast; continuous features keep neighbour distances free of ties."""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.datasets import make_classification
from sklearn.decomposition import KernelPCA
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC, SVR, NuSVC, NuSVR, OneClassSVM

from tests.conformance.case import Case, cached

KERNELS = ("linear", "poly", "rbf", "sigmoid")
METRICS = (("euclidean", {}), ("manhattan", {}), ("chebyshev", {}),
           ("minkowski", {"p": 3}), ("cosine", {}))


@cached
def _data(n_classes: int):
    X, y = make_classification(150, 5, n_informative=3, n_redundant=0, n_classes=n_classes,
                               random_state=3)
    return X, y


def _case(name, make, n_classes=2, target="class"):
    def build():
        X, y = _data(n_classes)
        if target == "first":  # regression on a feature-derived target
            y = X[:, 0] * 2.0 + np.sin(X[:, 1])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # probability= deprecation, convergence
            model = make()
            model = model.fit(X) if target == "none" else model.fit(X, y)
        return model, X
    return Case(f"kernel-{name}", build)


def _svc(kernel, **kw):
    return lambda: SVC(kernel=kernel, random_state=0, **kw)


CASES = [
    *[_case(f"svc-{k}-2c", _svc(k)) for k in KERNELS],
    *[_case(f"svc-{k}-3c", _svc(k), 3) for k in KERNELS],
    _case("svc-rbf-4c-ovo", _svc("rbf", decision_function_shape="ovo"), 4),
    _case("svc-poly-4c-break-ties", _svc("poly", break_ties=True, degree=2), 4),
    _case("svc-rbf-2c-proba", _svc("rbf", probability=True)),
    _case("svc-linear-3c-proba", _svc("linear", probability=True), 3),
    _case("svc-rbf-4c-proba-ovo", _svc("rbf", probability=True,
                                       decision_function_shape="ovo"), 4),
    _case("nusvc-rbf-3c-proba", lambda: NuSVC(nu=0.3, probability=True, random_state=0), 3),
    _case("nusvc-sigmoid-2c", lambda: NuSVC(kernel="sigmoid", nu=0.2)),
    *[_case(f"svr-{k}", lambda k=k: SVR(kernel=k, C=3.0), target="first") for k in KERNELS],
    _case("nusvr-rbf", lambda: NuSVR(nu=0.4), target="first"),
    _case("nusvr-poly", lambda: NuSVR(kernel="poly", degree=2), target="first"),
    *[_case(f"ocsvm-{k}", lambda k=k: OneClassSVM(kernel=k, nu=0.2), target="none")
      for k in KERNELS],
    *[_case(f"knn-{w}-{m}", lambda w=w, m=m, kw=kw: KNeighborsClassifier(
        5, weights=w, metric=m, **kw), 3) for w in ("uniform", "distance") for m, kw in METRICS],
    *[_case(f"knnreg-{w}-{m}", lambda w=w, m=m, kw=kw: KNeighborsRegressor(
        4, weights=w, metric=m, **kw), target="first")
      for w, (m, kw) in zip(("uniform", "distance") * 3, METRICS)],
    _case("knn-brute-distance", lambda: KNeighborsClassifier(
        7, weights="distance", algorithm="brute"), 2),
    *[_case(f"kpca-{k}", lambda k=k: KernelPCA(4, kernel=k), target="none")
      for k in (*KERNELS, "cosine")],
    _case("pipe-scale-svc", lambda: make_pipeline(StandardScaler(), SVC(probability=True,
                                                                         random_state=0)), 3),
    _case("pipe-scale-kpca-knn", lambda: make_pipeline(
        StandardScaler(), KernelPCA(3, kernel="rbf"), KNeighborsClassifier(5)), 3),
]
