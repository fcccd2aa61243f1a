"""Every method the source has (issue #11, item 4). For every supported class, a small fitted
instance is compiled and each method of ``METHOD_NAMES`` the source has must exist on the
compiled model, unless the library lists it in ``REFUSED_METHODS`` with a reason; the compiled
model has no method the source lacks; and each method it has returns the source's answer."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from sklearn.base import is_classifier, is_regressor

import peregrine
from peregrine.errors import UnsupportedModelError
from peregrine.frontends import FRONTENDS, load_all
from peregrine.frontends.base import REFUSED_METHODS, refused_method
from peregrine.ir.spec import METHOD_NAMES

RNG = np.random.default_rng(0)
X = RNG.uniform(0.1, 1.0, (60, 4))
Y = ((X[:, 0] + X[:, 1] > 1.1).astype(int) + (X[:, 2] > 0.5)).astype(int)  # 3 classes
YR = X @ np.array([1.0, -0.5, 0.25, 2.0]) + 1.0  # positive: Gamma/Poisson accept it
Y2 = np.column_stack([Y, X[:, 3] > 0.5]).astype(int)
Y2B = np.column_stack([Y > 0, X[:, 3] > 0.5]).astype(int)  # binary outputs (ClassifierChain)
YR2 = np.column_stack([YR, X[:, 0]])
# documents for the text vectorizers (tests/test_text_pipelines.py has the Unicode matrix)
TEXT = np.array(["déjà vu 東京 ok", "the quick brown fox", "İstanbul ΣΑΣ emoji 😀 ok ok", "",
                 "a_b 123 fox fox"] * 4, dtype=object)
XNAN = X.copy()
XNAN[::7, 1] = np.nan


def _sk(name: str) -> Any:
    """A scikit-learn class by its public name (sklearn.utils.all_estimators)."""
    from sklearn.experimental import enable_halving_search_cv  # noqa: F401
    from sklearn.utils import all_estimators

    return dict(all_estimators())[name]


def _lr() -> Any:
    return _sk("LogisticRegression")()


# constructor arguments of classes fitted the default way (fit(X, Y), fit(X, YR) or fit(X, Y)
# for transformers, which ignore y unless they select on it)
KWARGS: dict[str, Callable[[], dict[str, Any]]] = {
    "RandomForestClassifier": lambda: {"n_estimators": 3, "max_depth": 3, "random_state": 0},
    "RandomForestRegressor": lambda: {"n_estimators": 3, "max_depth": 3, "random_state": 0},
    "ExtraTreesClassifier": lambda: {"n_estimators": 3, "max_depth": 3, "random_state": 0},
    "ExtraTreesRegressor": lambda: {"n_estimators": 3, "max_depth": 3, "random_state": 0},
    "GradientBoostingClassifier": lambda: {"n_estimators": 3, "max_depth": 2},
    "GradientBoostingRegressor": lambda: {"n_estimators": 3, "max_depth": 2},
    "HistGradientBoostingClassifier": lambda: {"max_iter": 3},
    "HistGradientBoostingRegressor": lambda: {"max_iter": 3},
    "IsolationForest": lambda: {"n_estimators": 5, "random_state": 0},
    "AdaBoostClassifier": lambda: {"n_estimators": 3, "random_state": 0},
    "AdaBoostRegressor": lambda: {"n_estimators": 3, "random_state": 0},
    "BaggingClassifier": lambda: {"n_estimators": 3, "random_state": 0},
    "BaggingRegressor": lambda: {"n_estimators": 3, "random_state": 0},
    "MLPClassifier": lambda: {"hidden_layer_sizes": (5,), "max_iter": 30, "random_state": 0},
    "MLPRegressor": lambda: {"hidden_layer_sizes": (5,), "max_iter": 30, "random_state": 0},
    "KMeans": lambda: {"n_clusters": 2, "n_init": 1, "random_state": 0},
    "MiniBatchKMeans": lambda: {"n_clusters": 2, "n_init": 1, "random_state": 0},
    "PCA": lambda: {"n_components": 2},
    "IncrementalPCA": lambda: {"n_components": 2},
    "TruncatedSVD": lambda: {"n_components": 2},
    "KernelPCA": lambda: {"n_components": 2},
    "FastICA": lambda: {"n_components": 2, "random_state": 0},
    "QuantileTransformer": lambda: {"n_quantiles": 20},
    "SelectKBest": lambda: {"k": 2},
    "CalibratedClassifierCV": lambda: {"estimator": _lr(), "cv": 2},
    "OneVsRestClassifier": lambda: {"estimator": _lr()},
    "OneVsOneClassifier": lambda: {"estimator": _lr()},
    "RFE": lambda: {"estimator": _lr(), "n_features_to_select": 2},
    "RFECV": lambda: {"estimator": _lr(), "cv": 2},
    "SelectFromModel": lambda: {"estimator": _lr()},
    "GridSearchCV": lambda: {"estimator": _lr(), "param_grid": {"C": [0.5, 1.0]}, "cv": 2},
    "RandomizedSearchCV": lambda: {"estimator": _lr(), "param_distributions": {"C": [0.5, 1.0]},
                                   "n_iter": 2, "cv": 2, "random_state": 0},
    "HalvingGridSearchCV": lambda: {"estimator": _lr(), "param_grid": {"C": [0.5, 1.0]},
                                    "cv": 2, "min_resources": 20},
    "HalvingRandomSearchCV": lambda: {"estimator": _lr(),
                                      "param_distributions": {"C": [0.5, 1.0]}, "cv": 2,
                                      "min_resources": 20, "random_state": 0},
    "VotingClassifier": lambda: {"estimators": [("a", _lr()), ("b", _sk("GaussianNB")())],
                                 "voting": "soft"},
    "VotingRegressor": lambda: {"estimators": [("a", _sk("Ridge")()),
                                               ("b", _sk("LinearRegression")())]},
    "StackingClassifier": lambda: {"estimators": [("a", _lr()), ("b", _sk("GaussianNB")())],
                                   "cv": 2},
    "StackingRegressor": lambda: {"estimators": [("a", _sk("Ridge")()),
                                                 ("b", _sk("LinearRegression")())], "cv": 2},
    "TransformedTargetRegressor": lambda: {"regressor": _sk("Ridge")(),
                                           "transformer": _sk("StandardScaler")()},
    "ColumnTransformer": lambda: {"transformers": [("s", _sk("StandardScaler")(), [0, 1]),
                                                   ("p", "passthrough", [2])]},
    "FeatureUnion": lambda: {"transformer_list": [("s", _sk("StandardScaler")()),
                                                  ("p", _sk("PCA")(2))]},
    "TheilSenRegressor": lambda: {"random_state": 0},
    "KBinsDiscretizer": lambda: {"encode": "ordinal"},
    "OneHotEncoder": lambda: {"sparse_output": False},
}


def _default(cls: type) -> Any:
    est = cls(**KWARGS.get(cls.__name__, dict)())
    if is_classifier(est):
        return est.fit(X, Y)
    if is_regressor(est):
        return est.fit(X, YR)
    return est.fit(X, Y)


def _pipeline(*names: str) -> Callable[[], Any]:
    def make() -> Any:
        from sklearn.pipeline import make_pipeline

        steps = [_sk(n)(**KWARGS.get(n, dict)()) for n in names]
        pipe = make_pipeline(*steps)
        return pipe.fit(X, YR if is_regressor(steps[-1]) else Y)

    return make


def _xgb(kind: str) -> Callable[[], Any]:
    def make() -> Any:
        import xgboost as xgb

        kw = {"n_estimators": 2, "max_depth": 2}
        if kind == "XGBClassifier":
            return xgb.XGBClassifier(**kw).fit(X, Y)
        if kind == "XGBRegressor":
            return xgb.XGBRegressor(**kw).fit(X, YR)
        if kind == "XGBRanker":
            return xgb.XGBRanker(**kw).fit(X, Y, qid=np.repeat([0, 1], 30))
        return xgb.train({"max_depth": 2}, xgb.DMatrix(X, YR), 2)

    return make


def _lgbm(kind: str) -> Callable[[], Any]:
    def make() -> Any:
        import lightgbm as lgb

        kw = {"n_estimators": 2, "verbose": -1, "min_child_samples": 5}
        if kind == "LGBMModel":
            return lgb.LGBMModel(objective="regression", **kw).fit(X, YR)
        if kind == "LGBMRanker":
            return lgb.LGBMRanker(**kw).fit(X, Y, group=[30, 30])
        if kind == "Booster":
            return lgb.train({"verbose": -1, "min_data_in_leaf": 5}, lgb.Dataset(X, YR), 2)
        cls = getattr(lgb, kind)
        return cls(**kw).fit(X, Y if kind == "LGBMClassifier" else YR)

    return make


def _catboost_ranker() -> Any:
    from catboost import CatBoostRanker

    return CatBoostRanker(iterations=3, depth=2, verbose=0).fit(
        X, Y, group_id=np.repeat([0, 1], 30))


def _onnx_classifier() -> Any:
    """An ONNX-ML graph as skl2onnx writes it (labels and probabilities, no ZipMap)."""
    from skl2onnx import to_onnx

    return to_onnx(_lr().fit(X, Y), X[:1].astype(np.float32), options={"zipmap": False})


def _torch_net(d: int, k: int) -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(d, 8), torch.nn.ReLU(), torch.nn.Linear(8, k))


def _torch_step() -> Any:
    from peregrine import TorchStep

    return TorchStep(_torch_net(4, 2)).fit(X)


def _skorch(kind: str) -> Callable[[], Any]:
    """A skorch net trained two epochs on float32 rows (skorch feeds X to the module as is)."""

    def make() -> Any:
        import skorch
        import torch

        kw = {"max_epochs": 2, "verbose": 0, "train_split": None}
        x32 = X.astype(np.float32)
        if kind == "NeuralNetClassifier":
            return skorch.NeuralNetClassifier(_torch_net(4, 3), criterion=torch.nn.CrossEntropyLoss,
                                              **kw).fit(x32, Y)
        if kind == "NeuralNetBinaryClassifier":
            return skorch.NeuralNetBinaryClassifier(_torch_net(4, 1), **kw).fit(
                x32, (Y > 0).astype(np.float32))
        return skorch.NeuralNetRegressor(_torch_net(4, 1), **kw).fit(
            x32, YR.astype(np.float32)[:, None])

    return make


class _OnnxSource:
    """What an ONNX graph's 'methods' are: ONNX Runtime's outputs on the same file (the label
    output is predict, the score output predict_proba)."""

    def __init__(self, proto: Any) -> None:
        import onnxruntime as ort

        self.session = ort.InferenceSession(proto.SerializeToString(),
                                            providers=["CPUExecutionProvider"])

    def _run(self, rows: np.ndarray) -> list[np.ndarray]:
        name = self.session.get_inputs()[0].name
        return self.session.run(None, {name: rows.astype(np.float32)})

    def predict(self, rows: np.ndarray) -> np.ndarray:
        return self._run(rows)[0]

    def predict_proba(self, rows: np.ndarray) -> np.ndarray:
        return self._run(rows)[1]


# (class name, module top) -> factories; classes not listed use _default only
FACTORIES: dict[tuple[str, str], list[Callable[[], Any]]] = {
    **{(k, "sklearn"): [lambda k=k: _sk(k)().fit(TEXT)]
       for k in ("CountVectorizer", "TfidfVectorizer", "HashingVectorizer")},
    ("CategoricalNB", "sklearn"): [lambda: _sk("CategoricalNB")().fit((X * 3).astype(int), Y)],
    ("MissingIndicator", "sklearn"): [lambda: _sk("MissingIndicator")().fit(XNAN)],
    ("SimpleImputer", "sklearn"): [lambda: _sk("SimpleImputer")().fit(XNAN)],
    ("KNNImputer", "sklearn"): [lambda: _sk("KNNImputer")().fit(XNAN)],
    ("MultiOutputClassifier", "sklearn"): [
        lambda: _sk("MultiOutputClassifier")(_lr()).fit(X, Y2)],
    ("ClassifierChain", "sklearn"): [lambda: _sk("ClassifierChain")(_lr()).fit(X, Y2B)],
    **{(k, "sklearn"): [lambda k=k: _sk(k)(n_components=2).fit(X, YR2)]
       for k in ("CCA", "PLSCanonical", "PLSSVD")},
    ("LabelEncoder", "sklearn"): [lambda: _sk("LabelEncoder")().fit(Y)],
    ("LabelBinarizer", "sklearn"): [lambda: _sk("LabelBinarizer")().fit(Y)],
    ("MultiOutputRegressor", "sklearn"): [
        lambda: _sk("MultiOutputRegressor")(_sk("Ridge")()).fit(X, YR2)],
    ("RegressorChain", "sklearn"): [lambda: _sk("RegressorChain")(_sk("Ridge")()).fit(X, YR2)],
    ("SVC", "sklearn"): [lambda: _default(_sk("SVC")),
                         lambda: _sk("SVC")(probability=True, random_state=0).fit(X, Y)],
    ("NuSVC", "sklearn"): [lambda: _sk("NuSVC")(nu=0.1).fit(X, Y),
                           lambda: _sk("NuSVC")(nu=0.1, probability=True, random_state=0)
                           .fit(X, Y)],
    ("SGDClassifier", "sklearn"): [
        lambda: _default(_sk("SGDClassifier")),
        lambda: _sk("SGDClassifier")(loss="log_loss", random_state=0).fit(X, Y)],
    ("LinearDiscriminantAnalysis", "sklearn"): [
        lambda: _default(_sk("LinearDiscriminantAnalysis")),
        lambda: _sk("LinearDiscriminantAnalysis")(solver="lsqr").fit(X, Y)],
    ("BaggingClassifier", "sklearn"): [
        lambda: _default(_sk("BaggingClassifier")),
        lambda: _sk("BaggingClassifier")(_lr(), n_estimators=3, random_state=0).fit(X, Y)],
    ("GridSearchCV", "sklearn"): [
        lambda: _default(_sk("GridSearchCV")),
        lambda: _sk("GridSearchCV")(_sk("PCA")(), {"n_components": [1, 2]}, cv=2).fit(X)],
    ("FrozenEstimator", "sklearn"): [
        lambda: _sk("FrozenEstimator")(_lr().fit(X, Y)),
        lambda: _sk("FrozenEstimator")(_sk("IsolationForest")(n_estimators=3, random_state=0)
                                       .fit(X))],
    ("Pipeline", "sklearn"): [
        _pipeline("PCA", "PCA"),
        _pipeline("StandardScaler", "OneClassSVM"),
        _pipeline("StandardScaler", "LogisticRegression"),
        _pipeline("StandardScaler", "Ridge"),
        _pipeline("StandardScaler", "PCA"),
        _pipeline("StandardScaler", "IsolationForest"),
        _pipeline("MinMaxScaler", "SVC"),
    ],
    **{(k, "xgboost"): [_xgb(k)] for k in ("XGBClassifier", "XGBRegressor", "XGBRanker",
                                            "Booster")},
    **{(k, "lightgbm"): [_lgbm(k)] for k in ("LGBMClassifier", "LGBMRegressor", "LGBMRanker",
                                             "LGBMModel", "Booster")},
    ("CatBoostRanker", "catboost"): [_catboost_ranker],
    ("ModelProto", "onnx"): [_onnx_classifier],
    ("TorchStep", "peregrine"): [_torch_step],
    **{(k, "skorch"): [_skorch(k)] for k in ("NeuralNetClassifier", "NeuralNetBinaryClassifier",
                                            "NeuralNetRegressor")},
}


# Sources whose methods are columns of another system, audited where that system runs:
# a saved Spark ML pipeline's prediction/probability/rawPrediction, against Spark's transform
# on a local session (the session is slow to start; one test file owns it)
AUDITED_ELSEWHERE = {
    ("SparkPipelineModel", "peregrine"): "tests/test_spark_ml_frontend.py::"
                                          "test_methods_are_the_spark_columns",
}


def _classes() -> list[type]:
    load_all()
    return sorted((e.key for e in FRONTENDS), key=lambda c: (c.__module__, c.__name__))


def _refused_class(cls: type) -> bool:
    """Registered only to say why it is refused (NMF, FeatureHasher, ...): no methods."""
    return not FRONTENDS.lookup(cls).info.get("methods")


CLASSES = _classes()


def _key(cls: type) -> tuple[str, str]:
    return cls.__name__, cls.__module__.split(".")[0]


def _factories(cls: type) -> list[Callable[[], Any]]:
    return FACTORIES.get(_key(cls), [lambda: _default(cls)])


def _same(got: np.ndarray, want: np.ndarray, where: str) -> None:
    if hasattr(want, "toarray"):  # scipy.sparse: the same class, then the values
        assert type(got) is type(want), f"{where}: {type(got)} != {type(want)}"
        got, want = got.toarray(), want.toarray()
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{where}: shape {got.shape} != {want.shape}"
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=where)
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


def _rows(model: Any) -> np.ndarray:
    if type(model).__name__.endswith("Vectorizer"):
        return TEXT
    if type(model).__name__ == "CategoricalNB":
        return (X * 3).astype(int).astype(np.float64)
    if type(model).__module__.startswith("skorch"):
        return X.astype(np.float32)  # skorch hands X to the float32 module as it is
    return X


def _source(model: Any, method: str, rows: np.ndarray) -> np.ndarray:
    if type(model).__module__.startswith("xgboost") and type(model).__name__ == "Booster":
        import xgboost as xgb

        return model.predict(xgb.DMatrix(rows))
    return getattr(model, method)(rows)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{_key(c)[1]}.{c.__name__}")
def test_compiled_model_has_every_method_of_the_source(cls):
    if _key(cls) in AUDITED_ELSEWHERE:
        pytest.skip(f"audited in {AUDITED_ELSEWHERE[_key(cls)]}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for make in _factories(cls):
            model = make()
            if _refused_class(cls):
                with pytest.raises(UnsupportedModelError):
                    peregrine.compile(model, "reference")
                continue
            fast = peregrine.compile(model, "reference")
            rows = _rows(model)
            if type(model).__name__ == "ModelProto":
                model = _OnnxSource(model)
            for m in METHOD_NAMES:
                src, got = hasattr(model, m), hasattr(fast, m)
                where = f"{type(model).__name__}.{m}"
                if src and not got:
                    assert refused_method(model, m) is not None, (
                        f"{where}: the source has it, the compiled model does not; implement "
                        "it or list it in peregrine.frontends.base.REFUSED_METHODS")
                    continue
                assert got == src, f"{where}: the compiled model has it, the source does not"
                if got:
                    _same(getattr(fast, m)(rows), _source(model, m, rows), where)


def test_audit_walks_every_row_of_supported_models():
    """The audited classes are exactly ``supported_models()``'s rows, so a class registered
    later is audited too (its default construction must work, or it needs an entry in
    FACTORIES / KWARGS above)."""
    rows = {(r["model"], r["module"]) for r in peregrine.supported_models()}
    assert rows == {_key(c) for c in CLASSES}


def test_refused_methods_table_is_well_formed():
    names = {f"{_key(c)[1]}.{c.__name__}" for c in CLASSES}
    for (name, method), why in REFUSED_METHODS.items():
        assert name in names, f"{name}: not a supported class"
        assert method in METHOD_NAMES, name
        assert len(why) > 20, f"{name}.{method}: say why"


# ------------------------------------------------------------------- PCA.score_samples --

PCA_X = np.random.default_rng(1).normal(size=(120, 6)) @ np.random.default_rng(2).normal(
    size=(6, 6)) + 3.0


def _pca_models() -> dict[str, Any]:
    from sklearn.pipeline import make_pipeline

    pca = _sk("PCA")
    return {
        "k2": pca(2).fit(PCA_X),
        "whiten": pca(3, whiten=True).fit(PCA_X),
        "full-rank": pca().fit(PCA_X),  # noise_variance_ 0: precision = inv(covariance)
        "mle": pca("mle").fit(PCA_X),
        "fit-float32": pca(2).fit(PCA_X.astype(np.float32)),  # float32 in, float32 out
        "pipeline": make_pipeline(_sk("StandardScaler")(), pca(2, whiten=True)).fit(PCA_X),
    }


PCA_MODELS = _pca_models()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", ["reference", "torch", "torchscript", "native"])
@pytest.mark.parametrize("name", list(PCA_MODELS))
def test_pca_score_samples_matches_sklearn(name, backend, dtype):
    from peregrine.backends import available_backends

    if backend not in available_backends():
        pytest.skip(f"backend {backend} not available")
    model = PCA_MODELS[name]
    rows = np.vstack([PCA_X, 10 * PCA_X[:5], np.zeros((1, 6))]).astype(dtype)
    fast = peregrine.compile(model, backend)
    want = model.score_samples(rows)
    got = fast.score_samples(rows)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fast.transform(rows), model.transform(rows), rtol=1e-5,
                               atol=1e-6)
    one = np.concatenate([fast.score_samples(rows[i:i + 1]) for i in range(3)])
    np.testing.assert_allclose(one, want[:3], rtol=1e-5, atol=1e-6)


def test_pca_score_samples_rejects_nan_as_sklearn_does():
    from peregrine.errors import InputError

    rows = PCA_X[:4].copy()
    rows[1, 2] = np.nan
    with pytest.raises(ValueError):
        PCA_MODELS["k2"].score_samples(rows)
    with pytest.raises(InputError):
        peregrine.compile(PCA_MODELS["k2"], "reference").score_samples(rows)


def test_incremental_pca_has_no_score_samples_like_its_source():
    model = _sk("IncrementalPCA")(2).fit(PCA_X)
    assert not hasattr(model, "score_samples")
    assert not hasattr(peregrine.compile(model, "reference"), "score_samples")
