"""Hybrid pipelines (issue #15 item 4): a trained PyTorch network inside a scikit-learn pipeline,
through peregrine.TorchStep and skorch. The networks compute in float32; their outputs feed
trees or are the probabilities (docs/hybrid.md, docs/exactness.md "Networks"). Skipped
without torch (TorchStep) or skorch.

The base rows are held out from training. On a training row a tree after the network may
compare the network's output with a threshold equal to it (XGBoost's histogram cuts are
training values), so a last-bit difference in a float32 product (BLAS blocking: NumPy's
OpenBLAS against torch's MKL) sends that row the other way; docs/exactness.md says so and this
suite scores new rows, where the outputs are not pinned to thresholds."""

from __future__ import annotations

import numpy as np
import torch
from lightgbm import LGBMClassifier
from sklearn.compose import ColumnTransformer
from sklearn.datasets import make_classification
from sklearn.impute import SimpleImputer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from xgboost import XGBClassifier

from peregrine import TorchStep
from tests.conformance.case import Case, cached

nn = torch.nn


@cached
def _data(n_classes: int):
    """(training rows, labels, held-out rows)."""
    X, y = make_classification(500, 6, n_informative=4, n_classes=n_classes, random_state=3)
    X = X.astype(np.float32)
    return X[:300], y[:300], X[300:]


def _one_thread(fn):
    """Train with one torch thread: tiny batches only wait for workers on a loaded machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn()
    finally:
        torch.set_num_threads(threads)


def _embedding(X: np.ndarray, y: np.ndarray, k: int) -> nn.Module:
    """Linear -> ReLU -> Linear -> BatchNorm1d -> Tanh, trained 30 Adam epochs with a head."""
    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(X.shape[1], 12), nn.ReLU(), nn.Linear(12, 6),
                         nn.BatchNorm1d(6), nn.Tanh())
    head = nn.Linear(6, k)
    xt = torch.from_numpy(StandardScaler().fit_transform(X).astype(np.float32))
    yt = torch.from_numpy(y.astype(np.int64))
    opt = torch.optim.Adam(list(body.parameters()) + list(head.parameters()), lr=0.03)

    def train():
        for _ in range(30):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(head(body(xt)), yt).backward()
            opt.step()

    _one_thread(train)
    return body.eval()


def _torchstep_lightgbm():
    X, y, held_out = _data(2)
    pipe = make_pipeline(StandardScaler(), TorchStep(_embedding(X, y, 2)),
                         LGBMClassifier(n_estimators=15, num_leaves=8, verbose=-1))
    return pipe.fit(X, y), held_out.astype(np.float64)


def _imputer_torchstep_xgboost():
    X, y, held_out = _data(3)
    X, held_out = X.copy(), held_out.astype(np.float64)
    X[::7, 2] = np.nan
    held_out[::7, 2] = np.nan
    pipe = make_pipeline(SimpleImputer(), StandardScaler(), TorchStep(_embedding(
        np.nan_to_num(X), y, 3)), XGBClassifier(n_estimators=10, max_depth=3))
    return pipe.fit(X, y), held_out


class _Net(nn.Module):
    def __init__(self, d: int = 6, k: int = 3, flat: bool = False) -> None:
        super().__init__()
        self.hidden, self.out, self.flat = nn.Linear(d, 12), nn.Linear(12, k), flat

    def forward(self, x):
        y = self.out(torch.nn.functional.gelu(self.hidden(x)))
        return y.reshape(-1) if self.flat else y


def _skorch(binary: bool):
    def build():
        import skorch

        X, y, held_out = _data(2 if binary else 3)
        torch.manual_seed(0)
        ct = ColumnTransformer([("scale", StandardScaler(), [0, 1, 2, 3])],
                               remainder="passthrough")
        kw = {"max_epochs": 6, "lr": 0.1, "verbose": 0, "train_split": None}
        if binary:
            net = skorch.NeuralNetBinaryClassifier(_Net, module__k=1, module__flat=True, **kw)
            y = y.astype(np.float32)
        else:
            net = skorch.NeuralNetClassifier(_Net, criterion=nn.CrossEntropyLoss, **kw)
        return _one_thread(lambda: make_pipeline(ct, net).fit(X, y)), held_out.astype(np.float64)

    return build


def _float32_source(model, method, X):
    # skorch hands X to the float32 module as it is (a float64 array is a dtype error there);
    # the compiled model casts: the source's answer on the same rows in float32
    return getattr(model, method)(np.asarray(X, dtype=np.float32))


CASES = [
    Case("hybrid-scaler-torchstep-lightgbm", _torchstep_lightgbm),
    Case("hybrid-imputer-torchstep-xgboost-3c", _imputer_torchstep_xgboost),
    Case("hybrid-columns-skorch-classifier-3c", _skorch(False), expect=_float32_source),
    Case("hybrid-columns-skorch-binary", _skorch(True), expect=_float32_source),
]
