"""The parameter audit (issue #11, item 7). Every key of ``get_params(deep=False)`` of every
supported scikit-learn class is declared beside its frontend (``declare_params``) as
implemented or ignored (fit-only, or not touching the returned values): a key in neither set
fails here, so a parameter a new scikit-learn adds is audited before it can give a silent wrong
answer. Every implemented parameter is then fitted at non-default values (``NON_DEFAULT``) and
the compiled model checked against the source on every method, or refused naming the parameter
where the table says Peregrine refuses that value."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from scipy import sparse
from sklearn.base import is_regressor

import peregrine
from peregrine.errors import UnsupportedModelError
from peregrine.frontends.base import FIT_ONLY, PARAMS
from peregrine.ir.spec import METHOD_NAMES
from tests.test_method_audit import (
    CLASSES,
    KWARGS,
    TEXT,
    XNAN,
    Y2,
    Y2B,
    YR,
    YR2,
    X,
    Y,
    _factories,
    _lr,
    _refused_class,
    _sk,
)

AUDITED = [c for c in CLASSES if c.__module__.startswith("sklearn") and not _refused_class(c)]


def _declared(cls: type) -> tuple[frozenset[str], frozenset[str]]:
    entry = next((PARAMS[k] for k in cls.__mro__ if k in PARAMS), None)
    assert entry is not None, (
        f"{cls.__name__}: no declare_params(...) beside its frontend (issue #11 item 7)")
    return entry


@pytest.mark.parametrize("cls", AUDITED, ids=lambda c: c.__name__)
def test_every_parameter_is_declared(cls):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keys = set(_factories(cls)[0]().get_params(deep=False))
    implemented, ignored = _declared(cls)
    unknown = keys - implemented - ignored
    assert not unknown, (
        f"{cls.__name__}: parameters {sorted(unknown)} are neither implemented nor declared "
        "ignored; audit them in the frontend's declare_params (a new scikit-learn parameter?)")
    stale = (implemented | (ignored - FIT_ONLY)) - keys
    assert not stale, f"{cls.__name__}: declared but not parameters: {sorted(stale)}"
    assert not implemented & (ignored - FIT_ONLY), cls.__name__


# ------------------------------------------------------------ non-default values --------

XI = np.floor(X * 4)  # small integer codes 0..3: encoders, CategoricalNB-like data
XCAT = X.copy()
XCAT[:, 0] = np.floor(X[:, 0] * 4)
XZ = X.copy()
XZ[::5, 2] = 0.0  # zeros as the missing marker
XEMPTY = XNAN.copy()
XEMPTY[:, 3] = np.nan  # an all-missing column (keep_empty_features)
YB = (Y > 0).astype(int)


@dataclass(frozen=True)
class V:
    """One non-default value: ``extra`` constructor arguments it needs, ``data`` it is fitted
    on (a key of DATA), ``refused``: Peregrine refuses it, naming the parameter."""

    value: Any
    extra: dict[str, Any] = field(default_factory=dict)
    data: str = ""
    refused: bool = False


def _sk_fn(name: str) -> Any:
    from sklearn import feature_selection

    return getattr(feature_selection, name)


def _tree() -> Any:
    return _sk("DecisionTreeClassifier")(max_depth=3, random_state=0)


def _treer() -> Any:
    return _sk("DecisionTreeRegressor")(max_depth=3, random_state=0)


# name -> (fit X, fit y) for data a value needs; "" is the class's own default
DATA: dict[str, tuple[np.ndarray, Any]] = {
    "binary": (X, YB),
    "cat0": (XCAT, None),
    "int": (XI, None),
    "nan": (XNAN, None),
    "zeros": (XZ, None),
    "empty": (XEMPTY, None),
    "yr": (X, YR),
}
# classes fitted on other data than _default's (the same as tests/test_method_audit.py)
CLASS_DATA: dict[str, tuple[np.ndarray, Any]] = {
    "MissingIndicator": (XNAN, None), "SimpleImputer": (XNAN, None),
    "KNNImputer": (XNAN, None), "MultiOutputClassifier": (X, Y2),
    "ClassifierChain": (X, Y2B), "MultiOutputRegressor": (X, YR2), "RegressorChain": (X, YR2),
    "OneHotEncoder": (XI, None), "OrdinalEncoder": (XI, None), "TargetEncoder": (XI, None),
    "PLSRegression": (X, YR2), "PLSCanonical": (X, YR2), "CCA": (X, YR2), "PLSSVD": (X, YR2),
    **{k: (TEXT, None) for k in ("CountVectorizer", "TfidfVectorizer", "HashingVectorizer")},
}
BASE: dict[str, dict[str, Any]] = {
    "NuSVC": {"nu": 0.1},
    "MultiOutputClassifier": {"estimator": _lr()}, "ClassifierChain": {"estimator": _lr()},
    "MultiOutputRegressor": {"estimator": _sk("Ridge")()},
    "RegressorChain": {"estimator": _sk("Ridge")()},
    "PLSRegression": {"n_components": 2}, "PLSCanonical": {"n_components": 2},
    "CCA": {"n_components": 2}, "PLSSVD": {"n_components": 2},
    "FrozenEstimator": {"estimator": _lr().fit(X, Y)},
}

_FIT = "fit_intercept"
_KERNEL = {"kernel": [V("linear"), V("poly"), V("sigmoid")],
           "degree": [V(2, {"kernel": "poly"})], "gamma": [V("auto"), V(0.5)],
           "coef0": [V(1.0, {"kernel": "poly"}), V(0.5, {"kernel": "sigmoid"})]}
_SVC = {**_KERNEL, "decision_function_shape": [V("ovo")], "break_ties": [V(True)],
        "probability": [V(True, {"random_state": 0})]}
_KNN = {"n_neighbors": [V(3), V(1)], "weights": [V("distance")],
        "metric": [V("manhattan"), V("chebyshev"), V("euclidean"), V("cosine"),
                   V("seuclidean", {"metric_params": {"V": X.var(axis=0)}}),
                   V("mahalanobis", {"metric_params": {"VI": np.linalg.inv(np.cov(X.T))}})],
        "p": [V(1), V(3)],
        "metric_params": [V({"p": 3}), V({"w": np.arange(1.0, 5.0)}, refused=True)]}
_LINEAR_ONLY = {_FIT: [V(False)]}
_MLP = {"activation": [V("logistic"), V("tanh"), V("identity")]}
_IMPUTE_COMMON = {"missing_values": [V(0.0, data="zeros")], "add_indicator": [V(True)],
                  "keep_empty_features": [V(True, data="empty")]}


def _text_params(name: str) -> dict[str, list[V] | str]:
    """The text vectorizers' parameters (tests/test_text_pipelines.py covers more values)."""
    table: dict[str, list[V] | str] = {
        "input": "'filename' and 'file' read files named by the documents at fit time; "
                 "refused by sklearn_text._analyzer, tested there on content only",
        "analyzer": [V("char"), V("char_wb"), V(str.split, refused=True)],
        "preprocessor": [V(str.upper, refused=True)],
        "tokenizer": [V(str.split, {"token_pattern": None}, refused=True)],
        "strip_accents": [V("unicode"), V("ascii")],
        "token_pattern": [V(r"(?u)\b\w+\b"), V(r"\S+"), V(r"[a-z]{3}", refused=True)],
        "lowercase": [V(False)], "stop_words": [V(["ok", "fox"]), V("english")],
        "ngram_range": [V((1, 2)), V((2, 3))], "binary": [V(True)],
        # bytes documents: test_text_pipelines.py::test_bytes_documents_decode_like_sklearn
        "encoding": [V("latin-1"), V("no-such-codec", refused=True)],
        "decode_error": [V("replace"), V("ignore")],  # scikit-learn allows only these and strict
    }
    if name == "CountVectorizer":
        table["dtype"] = [V(np.float64), V(np.int32)]
    if name == "TfidfVectorizer":
        table.update(dtype=[V(np.float32, refused=True)], norm=[V("l1"), V(None)],
                     use_idf=[V(False)], sublinear_tf=[V(True)])
    if name == "HashingVectorizer":
        table.update(dtype=[V(np.float32)], norm=[V("l1"), V(None)],
                     alternate_sign=[V(False)], n_features=[V(16), V(2 ** 18)])
    return table


# a string instead of a list: why the parameter gets no non-default value here
NON_DEFAULT: dict[str, dict[str, list[V] | str]] = {
    **{k: _text_params(k) for k in ("CountVectorizer", "TfidfVectorizer",
                                    "HashingVectorizer")},
    "GradientBoostingClassifier": {
        "init": [V("zero"), V(_sk("DummyClassifier")(strategy="prior"))],
        "learning_rate": [V(0.5)], "loss": [V("exponential", data="binary")]},
    "GradientBoostingRegressor": {
        "init": [V("zero"), V(_sk("DummyRegressor")(strategy="median"))],
        "learning_rate": [V(0.5)],
        "loss": [V("absolute_error"), V("huber"), V("quantile")]},
    "HistGradientBoostingClassifier": {
        "loss": "log_loss is the only loss scikit-learn accepts",
        "categorical_features": [V([0], data="cat0"), V([True, False, False, False],
                                                        data="cat0")]},
    "HistGradientBoostingRegressor": {
        "loss": [V("absolute_error"), V("poisson"), V("gamma"),
                 V("quantile", {"quantile": 0.3})],
        "categorical_features": [V([0], data="cat0")]},
    "IsolationForest": {
        "contamination": [V(0.1)], "max_samples": [V(20), V(0.5)],
        "max_features": [V(2), V(0.5)], "bootstrap": [V(True)]},
    "SVC": _SVC, "NuSVC": _SVC, "SVR": _KERNEL, "NuSVR": _KERNEL, "OneClassSVM": _KERNEL,
    "KNeighborsClassifier": _KNN, "KNeighborsRegressor": _KNN,
    "KernelPCA": {
        "kernel": [V("poly"), V("rbf"), V("sigmoid"), V("cosine")],
        "degree": [V(2, {"kernel": "poly"})], "gamma": [V(0.5, {"kernel": "rbf"})],
        "coef0": [V(0.5, {"kernel": "poly"})]},
    "TweedieRegressor": {_FIT: [V(False)], "power": [V(1.5), V(2.0), V(1.0)],
                         "link": [V("identity", {"power": 0.0}), V("log", {"power": 0.0})]},
    "LinearSVC": {_FIT: [V(False)], "multi_class": [V("crammer_singer")]},
    "SGDClassifier": {_FIT: [V(False)], "loss": [V("log_loss"), V("modified_huber"),
                                                 V("perceptron")]},
    "VotingClassifier": {
        "estimators": "required: the audit's fixture sets them",
        "voting": [V("hard"), V("soft")], "weights": [V([2.0, 1.0])],
        "flatten_transform": [V(False)]},
    "VotingRegressor": {"estimators": "required: the audit's fixture sets them",
                        "weights": [V([2.0, 1.0])]},
    "StackingClassifier": {
        "estimators": "required: the audit's fixture sets them",
        "final_estimator": [V(_tree())], "passthrough": [V(True)],
        "stack_method": [V("predict_proba"), V("predict")]},
    "StackingRegressor": {
        "estimators": "required: the audit's fixture sets them",
        "final_estimator": [V(_treer())], "passthrough": [V(True)]},
    "MultiOutputClassifier": {"estimator": [V(_tree())]},
    "MultiOutputRegressor": {"estimator": [V(_treer())]},
    "ClassifierChain": {"estimator": [V(_tree())], "order": [V([1, 0])],
                        "chain_method": [V("predict_proba"), V("decision_function")]},
    "RegressorChain": {"estimator": [V(_treer())], "order": [V([1, 0])]},
    **{k: {"estimator": [V(_tree(), {"param_grid": {"max_depth": [2, 3]}})],
           "refit": [V(False, refused=True)]}
       for k in ("GridSearchCV", "HalvingGridSearchCV")},
    **{k: {"estimator": [V(_tree(), {"param_distributions": {"max_depth": [2, 3]}})],
           "refit": [V(False, refused=True)]}
       for k in ("RandomizedSearchCV", "HalvingRandomSearchCV")},
    "FrozenEstimator": {"estimator": [V(_tree().fit(X, Y))]},
    "BaggingClassifier": {"estimator": [V(_lr())], "max_features": [V(2), V(0.5)],
                          "bootstrap_features": [V(True)]},
    "BaggingRegressor": {"estimator": [V(_sk("Ridge")())], "max_features": [V(2), V(0.5)],
                         "bootstrap_features": [V(True)]},
    "AdaBoostClassifier": {"estimator": [V(_lr()), V(_tree())]},
    "AdaBoostRegressor": {"estimator": [V(_sk("Ridge")())]},
    "CalibratedClassifierCV": {"estimator": [V(_sk("LinearSVC")())],
                               "method": [V("isotonic")], "ensemble": [V(False)]},
    "OneVsRestClassifier": {"estimator": [V(_tree()), V(_sk("LinearSVC")())]},
    "OneVsOneClassifier": {"estimator": [V(_tree()), V(_sk("LinearSVC")())]},
    "TransformedTargetRegressor": {
        "regressor": [V(_treer())], "transformer": [V(_sk("MinMaxScaler")())],
        "func": [V(np.log, {"inverse_func": np.exp, "transformer": None})],
        "inverse_func": [V(np.exp, {"func": np.log, "transformer": None})]},
    "MissingIndicator": {"features": [V("all")], "missing_values": [V(0.0, data="zeros")],
                         "error_on_new": [V(False)], "sparse": [V(True)]},
    "BernoulliNB": {"binarize": [V(0.5), V(None)]},
    "MLPClassifier": _MLP, "MLPRegressor": {**_MLP, "loss": [V("poisson")]},
    "GaussianMixture": {"covariance_type": [V("tied"), V("diag"), V("spherical")]},
    "BayesianGaussianMixture": {
        "covariance_type": [V("tied"), V("diag"), V("spherical")],
        "weight_concentration_prior_type": [V("dirichlet_distribution")]},
    "PCA": {"whiten": [V(True)]}, "IncrementalPCA": {"whiten": [V(True)]},
    "LinearDiscriminantAnalysis": {"solver": [V("lsqr"), V("eigen")], "n_components": [V(1)]},
    "QuadraticDiscriminantAnalysis": {"solver": [V("eigen")]},
    "FastICA": {"whiten": [V("arbitrary-variance"), V(False)]},
    **{k: {"scale": [V(False)]} for k in ("PLSRegression", "PLSCanonical", "CCA", "PLSSVD")},
    "StandardScaler": {"with_mean": [V(False)], "with_std": [V(False)]},
    "RobustScaler": {"with_centering": [V(False)], "with_scaling": [V(False)]},
    "MaxAbsScaler": {"clip": [V(True)]},
    "MinMaxScaler": {"clip": [V(True)], "feature_range": [V((-1.0, 2.0))]},
    "Normalizer": {"norm": [V("l1"), V("max")]},
    "Binarizer": {"threshold": [V(0.5)]},
    "FunctionTransformer": {
        "func": [V(np.log1p), V(np.sqrt)], "kw_args": [V({"decimals": 1}, {"func": np.round},
                                                          refused=True)],
        "validate": [V(True)], "accept_sparse": [V(True, {"validate": True})]},
    "PolynomialFeatures": {"degree": [V(3)], "interaction_only": [V(True)],
                           "include_bias": [V(False)]},
    "VarianceThreshold": {"threshold": [V(0.065)]},
    "SelectKBest": {"k": [V(1), V("all")], "score_func": [V(_sk_fn("chi2"))]},
    "SelectPercentile": {"percentile": [V(50)], "score_func": [V(_sk_fn("chi2"))]},
    "GenericUnivariateSelect": {"mode": [V("k_best", {"param": 2}), V("fpr", {"param": 0.5})],
                                "param": [V(0.5)], "score_func": [V(_sk_fn("chi2"))]},
    "SelectFromModel": {
        "estimator": [V(_tree())], "threshold": [V("mean"), V("0.5*median"), V(0.1)],
        "max_features": [V(2, {"threshold": -np.inf})], "norm_order": [V(2)],
        "importance_getter": [V("coef_")],
        "prefit": [V(True, {"estimator": _lr().fit(X, Y)})]},
    "SimpleImputer": {"strategy": [V("median"), V("most_frequent"), V("constant")],
                      "fill_value": [V(7.0, {"strategy": "constant"})], **_IMPUTE_COMMON},
    "KNNImputer": {"n_neighbors": [V(2)], "weights": [V("distance")],
                   "metric": "only 'nan_euclidean' or a callable (refused as code)",
                   **_IMPUTE_COMMON, "missing_values": [V(0.0, data="zeros", refused=True)]},
    "OneHotEncoder": {
        "categories": [V([[0.0, 1.0, 2.0, 3.0]] * 4)], "drop": [V("first"), V("if_binary")],
        "dtype": [V(np.float32)], "handle_unknown": [V("ignore"), V("infrequent_if_exist")],
        "max_categories": [V(2)], "min_frequency": [V(10)],
        "sparse_output": [V(True)]},
    "OrdinalEncoder": {
        "categories": [V([[0.0, 1.0, 2.0, 3.0]] * 4)], "dtype": [V(np.float32)],
        "handle_unknown": [V("use_encoded_value", {"unknown_value": -1})],
        "unknown_value": [V(-1, {"handle_unknown": "use_encoded_value"})],
        "encoded_missing_value": [V(-1, data="nan")],
        "max_categories": [V(2)], "min_frequency": [V(10)]},
    "KBinsDiscretizer": {"encode": [V("onehot-dense"), V("onehot")],
                         "dtype": [V(np.float32, refused=True)], "n_bins": [V(3)],
                         "strategy": [V("uniform"), V("kmeans")]},
    "PowerTransformer": {"method": [V("box-cox")], "standardize": [V(False)]},
    "QuantileTransformer": {"output_distribution": [V("normal")]},
    "RFE": {"estimator": [V(_tree())]}, "RFECV": {"estimator": [V(_tree())]},
    "SplineTransformer": {
        "degree": [V(2)], "n_knots": [V(3)], "knots": [V("quantile")],
        "extrapolation": [V("constant"), V("linear"), V("continue"), V("periodic")],
        "include_bias": [V(False)], "handle_missing": [V("zeros", data="nan")],
        "sparse_output": [V(True)]},
    "TargetEncoder": {"target_type": [V("continuous", data="yr"), V("binary", data="binary")]},
    "Pipeline": {"steps": "required: the audit's fixture sets them"},
    "ColumnTransformer": {
        "transformers": "required: the audit's fixture sets them",
        "remainder": [V("passthrough")], "sparse_threshold": [V(0.0)],
        "transformer_weights": [V({"s": 2.0, "p": 0.5})]},
    "FeatureUnion": {"transformer_list": "required: the audit's fixture sets them",
                     "transformer_weights": [V({"s": 2.0, "p": 0.5})]},
}

for _cls in AUDITED:  # fit_intercept=False: intercept_ becomes the scalar 0.0
    if "fit_intercept" in _declared(_cls)[0]:
        NON_DEFAULT.setdefault(_cls.__name__, {}).setdefault(_FIT, [V(False)])


def _cases() -> list[Any]:
    out = []
    for cls in AUDITED:
        for param in sorted(_declared(cls)[0]):
            values = NON_DEFAULT.get(cls.__name__, {}).get(param)
            if isinstance(values, list):
                out += [pytest.param(cls, param, v, id=f"{cls.__name__}-{param}-{i}")
                        for i, v in enumerate(values)]
    return out


def test_every_implemented_parameter_has_non_default_values():
    missing = [f"{c.__name__}.{p}" for c in AUDITED for p in sorted(_declared(c)[0])
               if p not in NON_DEFAULT.get(c.__name__, {})]
    assert not missing, f"give non-default values (or the reason there are none): {missing}"
    for name, table in NON_DEFAULT.items():
        for param, values in table.items():
            assert values, f"{name}.{param}"
            assert not isinstance(values, str) or len(values) > 20, f"{name}.{param}: say why"


def _fit(cls: type, param: str, v: V) -> tuple[Any, np.ndarray]:
    name = cls.__name__
    kwargs = {**KWARGS.get(name, dict)(), **BASE.get(name, {}), **v.extra, param: v.value}
    est = cls(**kwargs)
    if v.data:
        x, y = DATA[v.data]
    elif name in CLASS_DATA:
        x, y = CLASS_DATA[name]
    else:
        x, y = X, None
    if y is None:
        y = YR if is_regressor(est) else Y
    if name == "FrozenEstimator":
        return est, x
    return est.fit(x, y), x


def _rows(x: np.ndarray) -> list[np.ndarray]:
    """Rows to compare on: the fit rows with rows outside their range (clip, unknown
    categories, extrapolation), or the fit rows alone where the source refuses the others."""
    if x.dtype == object:  # documents
        return [x]
    wide = np.vstack([x, np.where(np.isnan(x), x, x * 1.5 - 0.2)[:20], np.floor(x[:5]) + 5])
    return [wide, x]


@pytest.mark.parametrize("backend", ["reference", "torch", "torchscript", "native"])
@pytest.mark.parametrize(("cls", "param", "v"), _cases())
def test_implemented_parameter_at_non_default_value(cls, param, v, backend):
    from peregrine.backends import available_backends

    if backend not in available_backends():
        pytest.skip(f"backend {backend} not available")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, x = _fit(cls, param, v)
        if v.refused:
            if backend == "reference":  # the frontend refuses: no backend is involved
                with pytest.raises(UnsupportedModelError, match=param):
                    peregrine.compile(model, backend)
            return
        fast = peregrine.compile(model, backend)
        for rows in _rows(x):
            try:
                want = {m: getattr(model, m)(rows) for m in METHOD_NAMES if hasattr(fast, m)}
            except ValueError:
                continue  # the source refuses rows outside the fit range: try the fit rows
            for m, w in want.items():
                got = getattr(fast, m)(rows)
                where = f"{cls.__name__}({param}={v.value!r}).{m}"
                if sparse.issparse(w):  # the same scipy.sparse class, then its values
                    assert type(got) is type(w), f"{where}: {type(got)} != {type(w)}"
                    w, got = w.toarray(), got.toarray()
                w, got = np.asarray(w), np.asarray(got)
                assert got.shape == w.shape, f"{where}: shape {got.shape} != {w.shape}"
                if w.dtype.kind in "fc":
                    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6, err_msg=where)
                else:
                    np.testing.assert_array_equal(got, w, err_msg=where)
            return
        pytest.fail("the source refused every row set")
