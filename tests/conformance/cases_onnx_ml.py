"""ONNX-ML graphs made by skl2onnx and onnxmltools (never by Peregrine), compared with ONNX
Runtime running the same ModelProto: tree ensembles from scikit-learn, XGBoost and LightGBM
(binary, multiclass, regression; NaN where the exporter's model takes it), linear models behind
scalers, imputer and normalizer. ONNX Runtime reads float32, so the expected answer is its run
on float32(X)."""

from __future__ import annotations

import functools
import warnings

import lightgbm as lgb
import numpy as np
import onnxruntime as ort
import xgboost as xgb
from onnxmltools import convert_lightgbm, convert_xgboost
from onnxmltools.convert.common.data_types import FloatTensorType
from skl2onnx import to_onnx
from sklearn.datasets import make_classification, make_regression
from sklearn.ensemble import (
    ExtraTreesRegressor,
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    RandomForestClassifier,
)
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MaxAbsScaler, MinMaxScaler, Normalizer, StandardScaler
from sklearn.tree import DecisionTreeClassifier

from tests.conformance.case import Case, cached

N_FEATURES = 8
TYPES = [("input", FloatTensorType([None, N_FEATURES]))]


@cached
def data(kind: str, nan: bool):
    if kind == "reg":
        X, y = make_regression(600, N_FEATURES, n_informative=5, noise=5.0, random_state=0)
    else:
        X, y = make_classification(600, N_FEATURES, n_informative=5, random_state=0,
                                   n_classes=3 if kind == "multi" else 2)
    X = X.astype(np.float32)
    if nan:
        X[::9, 1] = np.nan
    return X, y


@functools.cache
def _session(model_bytes: bytes) -> ort.InferenceSession:
    return ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])


def run_ort(model, method: str, X: np.ndarray) -> np.ndarray:
    sess = _session(model.SerializeToString())
    outs = sess.run(None, {sess.get_inputs()[0].name: np.asarray(X, dtype=np.float32)})
    out = outs[0] if method == "predict" else outs[1]
    if isinstance(out, list):  # ZipMap: one {label: score} per row, labels in class order
        keys = list(out[0])
        out = np.array([[row[k] for k in keys] for row in out], dtype=np.float32)
    return out


def _skl(make, kind: str, nan: bool = False, **options):
    def build():
        X, y = data(kind, nan)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onx = to_onnx(make().fit(X, y), X[:1], options=options or None)
        return onx, X.astype(np.float64)
    return cached(build)


def _mltools(make, kind: str, convert):
    def build():
        X, y = data(kind, True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            onx = convert(make().fit(X, y), initial_types=TYPES)
        return onx, X.astype(np.float64)
    return cached(build)


NO_ZIPMAP = {"zipmap": False}
TREES = dict(n_estimators=15, max_depth=5, random_state=0)
CASES = [Case(id, build, expect=run_ort) for id, build in [
    ("onnx-skl-rf-binary", _skl(lambda: RandomForestClassifier(**TREES), "bin", **NO_ZIPMAP)),
    ("onnx-skl-rf-multi-zipmap", _skl(lambda: RandomForestClassifier(**TREES), "multi")),
    ("onnx-skl-dt-multi", _skl(lambda: DecisionTreeClassifier(max_depth=7), "multi")),
    ("onnx-skl-et-regressor", _skl(lambda: ExtraTreesRegressor(**TREES), "reg")),
    ("onnx-skl-gb-binary", _skl(lambda: GradientBoostingClassifier(**TREES), "bin")),
    ("onnx-skl-gb-multi", _skl(lambda: GradientBoostingClassifier(**TREES), "multi")),
    ("onnx-skl-gb-regressor", _skl(lambda: GradientBoostingRegressor(**TREES), "reg")),
    ("onnx-xgb-binary", _mltools(lambda: xgb.XGBClassifier(**TREES), "bin", convert_xgboost)),
    ("onnx-xgb-multi", _mltools(lambda: xgb.XGBClassifier(**TREES), "multi", convert_xgboost)),
    ("onnx-xgb-regressor", _mltools(lambda: xgb.XGBRegressor(**TREES), "reg", convert_xgboost)),
    ("onnx-lgb-binary", _mltools(lambda: lgb.LGBMClassifier(n_estimators=15, verbose=-1),
                                 "bin", convert_lightgbm)),
    ("onnx-lgb-multi", _mltools(lambda: lgb.LGBMClassifier(n_estimators=15, verbose=-1),
                                "multi", convert_lightgbm)),
    ("onnx-lgb-regressor", _mltools(lambda: lgb.LGBMRegressor(n_estimators=15, verbose=-1),
                                    "reg", convert_lightgbm)),
    ("onnx-skl-logistic-binary", _skl(lambda: make_pipeline(StandardScaler(),
                                                            LogisticRegression()), "bin")),
    ("onnx-skl-logistic-multi", _skl(lambda: make_pipeline(MinMaxScaler(),
                                                           LogisticRegression()), "multi")),
    ("onnx-skl-imputer-ridge", _skl(lambda: make_pipeline(SimpleImputer(), Ridge()), "reg",
                                    nan=True)),
    ("onnx-skl-normalizer-forest", _skl(
        lambda: make_pipeline(Normalizer(), RandomForestClassifier(**TREES)), "multi")),
    ("onnx-skl-maxabs-linear", _skl(lambda: make_pipeline(MaxAbsScaler(), LinearRegression()),
                                    "reg")),
]]
