"""Transformers area: QuantileTransformer, PowerTransformer, KBinsDiscretizer, SplineTransformer,
MissingIndicator, SimpleImputer(add_indicator), TargetEncoder, CategoricalNB, RFE/RFECV, FastICA
and the PLS family, on small data (numpy input; string columns: tests/test_transformers.py).
Models that accept NaN are fitted with NaN so the edge rows exercise it."""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.cross_decomposition import CCA, PLSSVD, PLSCanonical, PLSRegression
from sklearn.decomposition import FastICA
from sklearn.feature_selection import RFE, RFECV
from sklearn.impute import KNNImputer, MissingIndicator, SimpleImputer
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.naive_bayes import CategoricalNB
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import (
    FunctionTransformer,
    KBinsDiscretizer,
    PowerTransformer,
    QuantileTransformer,
    SplineTransformer,
    StandardScaler,
    TargetEncoder,
)

from tests.conformance.case import Case, cached


@cached
def _data(n: int = 200, m: int = 4, seed: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, m)) * [1.0, 3.0, 0.5, 2.0][:m] + [0.0, 1.0, -2.0, 5.0][:m]
    X[:, -1] = np.round(X[:, -1])  # repeated values: repeated quantiles / knots
    y_reg = X @ rng.standard_normal(m) + rng.standard_normal(n)
    y_clf = (y_reg > np.median(y_reg)).astype(int) + (y_reg > np.quantile(y_reg, 0.8))
    return X, y_reg, y_clf


def _fit(make, target="none", nan=False, n=200):
    def build():
        X, y_reg, y_clf = _data(n)
        X = X.copy()
        if nan:
            X[::9, 0] = np.nan
            X[::13, 2] = np.nan
        if target == "wide":  # tanh reaches +-1.0 on these rows: knots span every input
            X[:2] = [[50.0] * X.shape[1], [-50.0] * X.shape[1]]
        y = {"none": None, "wide": None, "reg": y_reg, "clf": y_clf,
             "bin": (y_clf > 0).astype(int), "two": np.column_stack([y_reg, y_clf])}[target]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence warnings on small data
            model = make().fit(X, y)
        return model, X
    return build


def _case(name, make, **kw):
    return Case(f"tf-{name}", _fit(make, **kw))


@cached
def _codes():
    rng = np.random.default_rng(5)
    X = np.column_stack([rng.integers(0, 3, 250), rng.integers(0, 5, 250),
                         rng.integers(0, 2, 250)]).astype(np.float64)
    y_reg = X @ [1.0, -0.5, 2.0] + rng.standard_normal(250)
    return X, y_reg


def _categorical_case(name, make, target, category_values=None, nan=False):
    def build():
        X, y_reg = _codes()
        X = X.copy()
        if nan:
            X[::11, 1] = np.nan
        y = {"reg": y_reg, "bin": (y_reg > np.median(y_reg)).astype(int),
             "multi": np.digitize(y_reg, np.quantile(y_reg, [0.3, 0.7]))}[target]
        return make().fit(X, y), X
    return Case(f"tf-{name}", build, categorical=(0, 1, 2), category_values=category_values)


CASES = [
    # QuantileTransformer: uniform / normal, repeated quantiles in the last column, NaN
    _case("quantile-uniform", lambda: QuantileTransformer(n_quantiles=50), nan=True),
    _case("quantile-normal", lambda: QuantileTransformer(n_quantiles=120,
                                                         output_distribution="normal"),
          nan=True),
    _case("quantile-normal-full", lambda: QuantileTransformer(n_quantiles=1000,
                                                              output_distribution="normal")),
    # PowerTransformer: Yeo-Johnson (standardize on/off), Box-Cox on positive data
    _case("power-yj", lambda: PowerTransformer(), nan=True),
    _case("power-yj-raw", lambda: PowerTransformer(standardize=False), nan=True),
    _case("power-boxcox", lambda: make_pipeline(FunctionTransformer(np.exp),
                                                PowerTransformer(method="box-cox")), nan=True),
    _case("power-boxcox-raw", lambda: make_pipeline(
        FunctionTransformer(np.exp), PowerTransformer(method="box-cox", standardize=False))),
    # KBinsDiscretizer: every strategy, ordinal and dense one-hot
    _case("kbins-uniform-ordinal", lambda: KBinsDiscretizer(5, encode="ordinal",
                                                            strategy="uniform")),
    _case("kbins-quantile-onehot", lambda: KBinsDiscretizer(
        4, encode="onehot-dense", strategy="quantile", quantile_method="averaged_inverted_cdf")),
    _case("kbins-kmeans-onehot", lambda: KBinsDiscretizer(3, encode="onehot-dense",
                                                          strategy="kmeans")),
    # SplineTransformer: every extrapolation, degrees 1-3, quantile knots, no bias, NaN zeros
    _case("spline-constant", lambda: SplineTransformer(n_knots=5, degree=3)),
    _case("spline-linear-d1", lambda: SplineTransformer(n_knots=4, degree=1,
                                                        extrapolation="linear")),
    _case("spline-linear-d3", lambda: SplineTransformer(n_knots=6, degree=3,
                                                        extrapolation="linear",
                                                        knots="quantile")),
    _case("spline-continue", lambda: SplineTransformer(n_knots=4, degree=2,
                                                       extrapolation="continue",
                                                       include_bias=False)),
    _case("spline-periodic", lambda: SplineTransformer(n_knots=5, degree=3,
                                                       extrapolation="periodic")),
    _case("spline-error", lambda: make_pipeline(FunctionTransformer(np.tanh),
                                                SplineTransformer(n_knots=4, degree=2,
                                                                  extrapolation="error")),
          target="wide"),
    _case("spline-nan-zeros", lambda: SplineTransformer(n_knots=4, degree=2,
                                                        handle_missing="zeros"), nan=True),
    # MissingIndicator (boolean output), SimpleImputer(add_indicator=True)
    _case("missing-indicator-all", lambda: MissingIndicator(features="all"), nan=True),
    _case("missing-indicator-only", lambda: MissingIndicator(error_on_new=False), nan=True),
    _case("missing-indicator-zero", lambda: MissingIndicator(missing_values=0.0,
                                                             features="all")),
    _case("imputer-add-indicator", lambda: SimpleImputer(add_indicator=True), nan=True),
    # KNNImputer: uniform / distance weights, add_indicator; NaN rows in fit and transform
    _case("knn-imputer-uniform", lambda: KNNImputer(n_neighbors=3), nan=True, n=120),
    _case("knn-imputer-distance", lambda: KNNImputer(n_neighbors=4, weights="distance",
                                                     add_indicator=True), nan=True, n=120),
    # FastICA (whiten variants) and the PLS family
    _case("fastica-unit", lambda: FastICA(3, random_state=0)),
    _case("fastica-arbitrary", lambda: FastICA(3, whiten="arbitrary-variance",
                                               random_state=0)),
    _case("plsregression", lambda: PLSRegression(2), target="reg"),
    _case("plscanonical", lambda: make_pipeline(StandardScaler(), PLSCanonical(2)),
          target="two"),
    _case("cca", lambda: CCA(1), target="reg"),
    _case("plssvd", lambda: PLSSVD(1), target="reg"),
    # RFE / RFECV (transform and the estimator's methods)
    _case("rfe-logistic", lambda: RFE(LogisticRegression(), n_features_to_select=2),
          target="clf"),
    _case("rfecv-linear", lambda: RFECV(LinearRegression(), cv=3), target="reg"),
    # TargetEncoder on integer codes: unseen codes and NaN (seen or not) -> target_mean_
    _categorical_case("target-encoder-continuous", lambda: TargetEncoder(),
                      "reg", nan=True),
    _categorical_case("target-encoder-binary", lambda: TargetEncoder(), "bin"),
    _categorical_case("target-encoder-multiclass",
                      lambda: TargetEncoder(smooth=2.0), "multi"),
    # CategoricalNB: codes cast to int as sklearn does (0.5 -> 0, 1.7 -> 1)
    _categorical_case("categorical-nb", lambda: CategoricalNB(), "multi",
                      category_values=(0, 0.5, 1, 1.7, 0.0, 1e-30)),
    _categorical_case("categorical-nb-min", lambda: CategoricalNB(min_categories=[4, 6, 4]),
                      "bin", category_values=(0, 1, 2, 3, 1.5)),
]
