"""scikit-learn linear models, featurizers and numeric pipelines (numpy input). DataFrame and
string-column pipelines are tested in tests/test_pipelines.py."""

from __future__ import annotations

import warnings

import numpy as np
from sklearn import linear_model as lm
from sklearn import naive_bayes as nb
from sklearn.cluster import KMeans, MiniBatchKMeans
from sklearn.compose import ColumnTransformer
from sklearn.datasets import make_classification, make_regression
from sklearn.decomposition import PCA, IncrementalPCA, TruncatedSVD
from sklearn.discriminant_analysis import (
    LinearDiscriminantAnalysis,
    QuadraticDiscriminantAnalysis,
)
from sklearn.ensemble import GradientBoostingRegressor, RandomForestClassifier
from sklearn.feature_selection import SelectKBest, VarianceThreshold, f_classif
from sklearn.impute import SimpleImputer
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.pipeline import FeatureUnion, make_pipeline
from sklearn.preprocessing import (
    Binarizer,
    FunctionTransformer,
    MaxAbsScaler,
    MinMaxScaler,
    Normalizer,
    OneHotEncoder,
    OrdinalEncoder,
    PolynomialFeatures,
    RobustScaler,
    StandardScaler,
)
from sklearn.svm import LinearSVC, LinearSVR

from tests.conformance.case import Case, cached


@cached
def _clf(n_classes: int):
    return make_classification(300, 6, n_informative=4, n_classes=n_classes, random_state=1)


@cached
def _reg():
    X, y = make_regression(300, 6, n_informative=4, noise=1.0, random_state=1)
    return X, y


def _fit(make, data, positive_y=False, nan_col=None):
    def build():
        X, y = data()
        X = X.copy()
        if positive_y:
            y = np.exp(y / np.abs(y).max())
        if nan_col is not None:
            X[::7, nan_col] = np.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence warnings on small data
            model = make().fit(X, y)
        return model, np.nan_to_num(X) if nan_col is None else X
    return build


def _reg_case(name, make, **kw):
    return Case(f"pipe-{name}", _fit(make, _reg, **kw))


def _clf_case(name, make, n_classes=2, **kw):
    return Case(f"pipe-{name}-{n_classes}c", _fit(make, lambda: _clf(n_classes), **kw))


@cached
def _counts(n_classes: int):
    X, y = _clf(n_classes)
    return np.round(np.abs(X) * 2), y  # non-negative counts for Multinomial/ComplementNB


def _mlp(act, n_classes=2):
    return _clf_case(f"mlp-{act}", lambda: MLPClassifier(hidden_layer_sizes=(7, 5), activation=act, max_iter=300,
                                                         random_state=0), n_classes=n_classes)


def _f64_expect(model, method, X):
    # sklearn 1.9's KMeans.predict raises on float32 rows for a float64-fitted model (Cython
    # buffer dtype mismatch); its float64 answer is the reference
    return getattr(model, method)(np.asarray(X, dtype=np.float64))


def _models_cases():
    out = []
    for k in (2, 3):
        out += [
            _clf_case("gaussiannb", nb.GaussianNB, n_classes=k),
            _clf_case("bernoullinb", lambda: nb.BernoulliNB(binarize=0.2), n_classes=k),
            Case(f"pipe-multinomialnb-{k}c", _fit(nb.MultinomialNB, lambda k=k: _counts(k))),
            Case(f"pipe-complementnb-{k}c", _fit(nb.ComplementNB, lambda k=k: _counts(k))),
            _clf_case("lda", LinearDiscriminantAnalysis, n_classes=k),
            _clf_case("qda", lambda: QuadraticDiscriminantAnalysis(reg_param=0.1), n_classes=k),
        ]
    out += [_mlp(a) for a in ("identity", "logistic", "tanh", "relu")]
    out += [
        _mlp("relu", n_classes=3),
        _reg_case("mlpreg-tanh", lambda: MLPRegressor(hidden_layer_sizes=(6,), activation="tanh", max_iter=300,
                                                      random_state=0)),
        _reg_case("mlpreg-relu", lambda: MLPRegressor(hidden_layer_sizes=(6, 4), max_iter=300, random_state=0)),
        _reg_case("pca", lambda: PCA(4)),
        _reg_case("pca-whiten", lambda: PCA(3, whiten=True)),
        _reg_case("ipca", lambda: IncrementalPCA(3)),
        _reg_case("tsvd", lambda: TruncatedSVD(3, random_state=0)),
        Case("pipe-kmeans", _fit(lambda: KMeans(4, n_init=2, random_state=0), _reg),
             expect=_f64_expect),
        Case("pipe-mbkmeans", _fit(lambda: MiniBatchKMeans(3, n_init=2, random_state=0), _reg),
             expect=_f64_expect),
        _clf_case("lda-eigen", lambda: LinearDiscriminantAnalysis(solver="eigen", shrinkage=0.1), n_classes=3),
        _clf_case("scale-pca-lda-pipe", lambda: make_pipeline(
            StandardScaler(), PCA(4, whiten=True), LinearDiscriminantAnalysis()), n_classes=3),
    ]
    return out


def _codes_pipeline():
    # integer-valued columns 0 and 1 one-hot / ordinal encoded, the rest scaled
    ct = ColumnTransformer([
        ("oh", OneHotEncoder(handle_unknown="ignore", sparse_output=False), [0]),
        ("ord", OrdinalEncoder(handle_unknown="use_encoded_value", unknown_value=-1), [1]),
    ], remainder=StandardScaler())
    return make_pipeline(ct, lm.LogisticRegression())


def _int_data():
    X, y = _clf(3)
    X = X.copy()
    X[:, 0] = np.round(X[:, 0])
    X[:, 1] = np.round(X[:, 1] * 2)
    return X, y


CASES = [
    _reg_case("linreg", lm.LinearRegression),
    _reg_case("ridge", lambda: lm.Ridge(alpha=2.0)),
    _reg_case("ridgecv", lm.RidgeCV),
    _reg_case("lasso", lambda: lm.Lasso(alpha=0.5)),
    _reg_case("elasticnet", lambda: lm.ElasticNet(alpha=0.3)),
    _reg_case("lars", lm.Lars),
    _reg_case("bayesridge", lm.BayesianRidge),
    _reg_case("ard", lm.ARDRegression),
    _reg_case("huber", lm.HuberRegressor),
    _reg_case("quantile", lambda: lm.QuantileRegressor(alpha=0.0)),
    _reg_case("sgdreg", lambda: make_pipeline(StandardScaler(), lm.SGDRegressor(random_state=0))),
    _reg_case("linearsvr", lambda: LinearSVR(random_state=0)),
    _reg_case("poisson", lambda: lm.PoissonRegressor(alpha=0.1), positive_y=True),
    _reg_case("gamma", lambda: lm.GammaRegressor(alpha=0.1), positive_y=True),
    _reg_case("tweedie0", lambda: lm.TweedieRegressor(power=0.0), positive_y=True),
    _clf_case("logreg", lm.LogisticRegression),
    _clf_case("logreg", lm.LogisticRegression, n_classes=3),
    _clf_case("logregcv", lambda: lm.LogisticRegressionCV(cv=3), n_classes=3),
    _clf_case("ridgeclf", lm.RidgeClassifier),
    _clf_case("ridgeclf", lm.RidgeClassifier, n_classes=3),
    _clf_case("sgd-log", lambda: lm.SGDClassifier(loss="log_loss", random_state=0), n_classes=3),
    _clf_case("sgd-huber", lambda: lm.SGDClassifier(loss="modified_huber", random_state=0)),
    _clf_case("sgd-huber", lambda: lm.SGDClassifier(loss="modified_huber", random_state=0),
              n_classes=3),
    _clf_case("perceptron", lm.Perceptron, n_classes=3),
    _clf_case("linearsvc", lambda: LinearSVC(random_state=0), n_classes=3),
    # featurizers alone (transform; float32 stays float32 where sklearn keeps it)
    _reg_case("standard", StandardScaler, nan_col=2),
    _reg_case("minmax-clip", lambda: MinMaxScaler(clip=True), nan_col=2),
    _reg_case("maxabs", MaxAbsScaler, nan_col=2),
    _reg_case("robust", RobustScaler, nan_col=2),
    _reg_case("normalizer-l1", lambda: Normalizer("l1")),
    _reg_case("normalizer-max", lambda: Normalizer("max")),
    _reg_case("binarizer", lambda: Binarizer(threshold=0.3)),
    _reg_case("imputer-median", lambda: SimpleImputer(strategy="median"), nan_col=2),
    _reg_case("poly", lambda: PolynomialFeatures(2)),
    _reg_case("abs-log1p", lambda: make_pipeline(FunctionTransformer(np.abs),
                                                 FunctionTransformer(np.log1p))),
    # pipelines of numeric steps
    # a guarded log: no input bound covers its batches (runtime/guards.py batch_proves)
    _clf_case("abs-log1p-scale-logreg", lambda: make_pipeline(
        FunctionTransformer(np.abs), FunctionTransformer(np.log1p), StandardScaler(),
        lm.LogisticRegression())),
    _clf_case("impute-scale-logreg", lambda: make_pipeline(
        SimpleImputer(), StandardScaler(), lm.LogisticRegression()), n_classes=3, nan_col=1),
    _clf_case("union-select-forest", lambda: make_pipeline(
        FeatureUnion([("s", StandardScaler()), ("p", PolynomialFeatures(2))]),
        VarianceThreshold(), SelectKBest(f_classif, k=8),
        RandomForestClassifier(8, max_depth=6, random_state=0)), n_classes=3),
    _reg_case("ct-gb", lambda: make_pipeline(
        ColumnTransformer([("a", RobustScaler(), [0, 2]), ("b", "drop", [1])],
                          remainder="passthrough"),
        GradientBoostingRegressor(n_estimators=10, max_depth=3, random_state=0))),
    Case("pipe-codes-logreg-3c", _fit(_codes_pipeline, _int_data), categorical=(0, 1),
         category_values=(-1, 0, 1, 2, 3, 0.5, 7)),
    *_models_cases(),
]
