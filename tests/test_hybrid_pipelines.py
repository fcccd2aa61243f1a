"""Hybrid pipelines (issue #15 item 4): scikit-learn pipelines with a PyTorch network inside,
through ``peregrine.TorchStep`` and skorch's nets, compiled into one program on every backend.

The contract (docs/hybrid.md, docs/exactness.md "Networks"): float64 outputs (what trees and
scikit-learn models compute from the network's output) within rtol 1e-5 / atol 1e-6 and labels
identical on the test rows; the network's float32 outputs within rtol 1e-5 of each value plus
1e-5 of its column's largest magnitude. That second term is there because float32 arithmetic
has no relative bound near zero: a layer's sum (a BLAS product, blocked differently by NumPy on
the reference backend than by torch) is off by ulps of its largest terms, and a value that
cancels to near zero carries that absolute error (the source's own float32 answer is as far
from the exact one). Measured here: at most 1.4e-6 of the column's magnitude on the reference
backend; torch, TorchScript and native run torch's kernels and measured no difference. A
downstream split could move for a value within that of its threshold, so the labels are
compared on the test rows, not promised for every row."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    GradientBoostingRegressor,
    HistGradientBoostingClassifier,
    RandomForestClassifier,
)
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import MinMaxScaler, OneHotEncoder, StandardScaler  # noqa: E402

import peregrine  # noqa: E402
from peregrine import TorchStep  # noqa: E402
from peregrine.backends import available_backends  # noqa: E402
from peregrine.errors import InputError, UnsupportedModelError  # noqa: E402

BACKENDS = ["reference", "torch", "torchscript", "native", "tvm"]  # tvm: skipped without it
RTOL, ATOL = 1e-5, 1e-6
D = 6
RNG = np.random.default_rng(7)
X_ALL = RNG.normal(size=(600, D)).astype(np.float32)
X_ALL[:, 5] = RNG.integers(0, 3, len(X_ALL))  # a small integer code (one-hot encoded)
Y3 = ((X_ALL[:, 0] + X_ALL[:, 1] ** 2 > 1).astype(int) + (X_ALL[:, 5] > 1)).astype(np.int64)
Y2 = (Y3 > 0).astype(np.int64)
YR = (X_ALL[:, 0] * 2 - np.sin(X_ALL[:, 2]) + 0.5 * X_ALL[:, 3] * X_ALL[:, 4]).astype(np.float32)
TRAIN, TEST = slice(0, 400), slice(400, 600)
X_NAN = X_ALL.copy()
X_NAN[::7, 1] = np.nan
X_NAN[3::11, 4] = np.nan


def _backend(name: str) -> str:
    if name not in available_backends():
        pytest.skip(f"backend {name} not available")
    return name


def _train(net: nn.Module, head: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int = 40,
           classes: bool = True) -> nn.Module:
    """A few full-batch Adam epochs (seeded by the caller): trained, not random, weights."""
    xt, yt = torch.from_numpy(np.ascontiguousarray(x, np.float32)), torch.from_numpy(y)
    opt = torch.optim.Adam(list(net.parameters()) + list(head.parameters()), lr=0.03)
    net.train()
    with _one_thread():
        for _ in range(epochs):
            opt.zero_grad()
            out = head(net(xt))
            loss = F.cross_entropy(out, yt) if classes else F.mse_loss(out.reshape(-1), yt)
            loss.backward()
            opt.step()
    return net.eval()


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Training tiny batches: torch's worker threads only wait on a loaded machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _embedding(y: np.ndarray, k: int) -> nn.Module:
    """StandardScaler-input embedding net: Linear -> ReLU -> Linear -> BatchNorm1d -> Tanh."""
    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(D, 16), nn.ReLU(), nn.Linear(16, 8), nn.BatchNorm1d(8),
                         nn.Tanh())
    x = StandardScaler().fit_transform(X_ALL[TRAIN])
    return _train(body, nn.Linear(8, k), x, y[TRAIN])


class Branchy(nn.Module):
    """Exercises the translator: branches, cat, BatchNorm1d, buffers, arithmetic with numbers,
    buffers and tensors, column slices, reshapes, functional and module activations, dropout."""

    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(d, 8), nn.Linear(d, 4)
        self.bn = nn.BatchNorm1d(12)
        self.drop = nn.Dropout(0.2)
        self.elu, self.selu, self.celu = nn.ELU(0.5), nn.SELU(), nn.CELU(0.7)
        self.gelu, self.mish, self.relu6 = nn.GELU(approximate="tanh"), nn.Mish(), nn.ReLU6()
        self.mid = nn.Linear(12, 6, bias=False)
        self.out = nn.Linear(6, k)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 12))

    def forward(self, x: Any) -> Any:
        h = torch.cat([F.leaky_relu(self.a(x), 0.2), torch.sigmoid(self.b(x))], dim=1)
        h = self.drop(self.bn(h)) * self.scale - 0.25
        h = F.gelu(h) + F.softplus(h[:, :12], beta=2.0)
        h = h / 3.0 + self.elu(h) * h.view(x.size(0), -1)
        h = torch.clamp(self.celu(self.selu(h)), min=-2.0)
        h = F.dropout(self.mid(F.silu(h)), 0.1, training=self.training)
        h = self.relu6(self.mish(self.gelu(-h))) + 1.5 * torch.tanh(h) - h[:, 0].unsqueeze(1)
        return F.log_softmax(self.out(h.flatten(1)), dim=-1)


def _branchy() -> nn.Module:
    torch.manual_seed(1)
    net = Branchy(D, 3)
    x = StandardScaler().fit_transform(X_ALL[TRAIN])
    return _train(net, nn.Identity(), x, Y3[TRAIN], epochs=30)


class Net(nn.Module):
    """skorch's module: Linear -> ReLU -> Linear, or with a 1-D output for the binary net."""

    def __init__(self, d: int = D, k: int = 2, flat: bool = False) -> None:
        super().__init__()
        self.hidden, self.out, self.flat = nn.Linear(d, 16), nn.Linear(16, k), flat

    def forward(self, x: Any) -> Any:
        y = self.out(torch.relu(self.hidden(x)))
        return y.squeeze(-1) if self.flat else y


def _skorch(kind: str) -> Any:
    skorch = pytest.importorskip("skorch")
    torch.manual_seed(0)
    ct = ColumnTransformer([
        ("num", StandardScaler(), [0, 1, 2, 3, 4]),
        ("cat", OneHotEncoder(dtype=np.float32, sparse_output=False), [5]),
    ])
    kw = {"max_epochs": 8, "lr": 0.1, "verbose": 0, "train_split": None, "module__d": 8}
    x = X_ALL[TRAIN]
    if kind == "classifier":
        net = skorch.NeuralNetClassifier(Net, module__k=3, criterion=nn.CrossEntropyLoss, **kw)
        y = Y3[TRAIN]
    elif kind == "binary":
        net = skorch.NeuralNetBinaryClassifier(Net, module__k=1, module__flat=True,
                                               threshold=0.4, **kw)
        y = Y2[TRAIN].astype(np.float32)
    else:
        net = skorch.NeuralNetRegressor(Net, module__k=1, **kw)
        y = YR[TRAIN, None]
    with _one_thread():
        return make_pipeline(ct, net).fit(x, y)


@dataclass
class Case:
    model: Any
    rows: np.ndarray  # float32 test rows
    methods: tuple[str, ...]
    net: Any = None  # the pipeline up to the network's output, checked on its own
    float64_too: bool = True  # the source takes float64 rows as well (skorch does not)
    extra: dict = field(default_factory=dict)


def _tree_case(y: np.ndarray, k: int, final: Any, methods: tuple[str, ...]) -> Case:
    pipe = make_pipeline(StandardScaler(), TorchStep(_embedding(y, k)), final)
    pipe.fit(X_ALL[TRAIN], y[TRAIN])
    return Case(pipe, X_ALL[TEST], methods, net=pipe[:-1])


def _lightgbm() -> Case:
    lgb = pytest.importorskip("lightgbm")
    return _tree_case(Y2, 2, lgb.LGBMClassifier(n_estimators=15, num_leaves=8, verbose=-1),
                      ("predict", "predict_proba"))


def _xgboost() -> Case:
    xgb = pytest.importorskip("xgboost")
    return _tree_case(Y3, 3, xgb.XGBClassifier(n_estimators=10, max_depth=3),
                      ("predict", "predict_proba"))


def _sklearn_gbm() -> Case:
    pipe = make_pipeline(StandardScaler(), TorchStep(_embedding(Y3, 3)),
                         GradientBoostingRegressor(n_estimators=15, max_depth=3, random_state=0))
    pipe.fit(X_ALL[TRAIN], YR[TRAIN])
    return Case(pipe, X_ALL[TEST], ("predict",), net=pipe[:-1])


def _imputed() -> Case:
    """NaN where the pipeline accepts it: imputed before the network, trees after it."""
    pipe = make_pipeline(SimpleImputer(), StandardScaler(), TorchStep(_embedding(Y3, 3)),
                         HistGradientBoostingClassifier(max_iter=10, random_state=0))
    pipe.fit(X_NAN[TRAIN], Y3[TRAIN])
    return Case(pipe, X_NAN[TEST], ("predict", "predict_proba"), net=pipe[:-1])


def _last_step() -> Case:
    pipe = make_pipeline(MinMaxScaler(), TorchStep(_branchy())).fit(X_ALL[TRAIN])
    return Case(pipe, X_ALL[TEST], ("transform",))


def _branchy_head() -> Case:
    pipe = make_pipeline(StandardScaler(), TorchStep(_branchy()),
                         RandomForestClassifier(n_estimators=10, max_depth=5, random_state=0))
    pipe.fit(X_ALL[TRAIN], Y3[TRAIN])
    return Case(pipe, X_ALL[TEST], ("predict", "predict_proba"), net=pipe[:-1])


def _alone() -> Case:
    return Case(TorchStep(_embedding(Y2, 2)).fit(X_ALL[TRAIN]), X_ALL[TEST], ("transform",))


CASES = {
    "scaler-torchstep-lightgbm": _lightgbm,
    "scaler-torchstep-xgboost": _xgboost,
    "scaler-torchstep-sklearn-gbm": _sklearn_gbm,
    "imputer-torchstep-hgb-nan": _imputed,
    "torchstep-last-step": _last_step,
    "torchstep-branches-forest": _branchy_head,
    "torchstep-alone": _alone,
    "columns-skorch-classifier": lambda: Case(_skorch("classifier"), X_ALL[TEST],
                                              ("predict", "predict_proba"), float64_too=False),
    "columns-skorch-binary": lambda: Case(_skorch("binary"), X_ALL[TEST],
                                          ("predict", "predict_proba"), float64_too=False),
    "columns-skorch-regressor": lambda: Case(_skorch("regressor"), X_ALL[TEST],
                                             ("predict", "predict_proba"), float64_too=False),
}


@functools.cache
def _case(name: str) -> Case:
    return CASES[name]()


def _same(got: np.ndarray, want: np.ndarray, where: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (
        where, got.shape, want.shape, got.dtype, want.dtype)
    if want.dtype == np.float32:  # a network's output: see the module docstring
        w = want.astype(np.float64).reshape(len(want), -1)
        err = np.abs(got.astype(np.float64).reshape(w.shape) - w)
        bound = RTOL * np.abs(w) + RTOL * np.abs(w).max(axis=0)
        worst = np.unravel_index(np.argmax(err - bound), err.shape)
        assert (err <= bound).all(), (where, worst, got.reshape(w.shape)[worst], w[worst])
    elif want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=where)
    else:
        np.testing.assert_array_equal(got, want, err_msg=where)


@functools.cache
def _compiled(name: str, backend: str) -> Any:
    return peregrine.compile(_case(name).model, backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_hybrid_pipeline_matches_source(name, backend):
    case = _case(name)
    fast = _compiled(name, _backend(backend))
    dtypes = (np.float32, np.float64) if case.float64_too else (np.float32,)
    for dtype in dtypes:
        rows = case.rows.astype(dtype)
        for method in case.methods:
            _same(getattr(fast, method)(rows), getattr(case.model, method)(rows),
                  f"{name} {backend} {method} {dtype.__name__}")
        if case.net is not None:  # the network's own outputs inside the pipeline
            net = peregrine.compile(case.net, backend)
            _same(net.transform(rows), case.net.transform(rows), f"{name} network {dtype}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["scaler-torchstep-lightgbm", "torchstep-branches-forest",
                                  "columns-skorch-binary"])
def test_artifact_round_trip(name, backend, tmp_path):
    case = _case(name)
    fast = _compiled(name, _backend(backend))
    path = tmp_path / "model.peregrine"
    fast.save(path)
    loaded = peregrine.load(path)
    for method in case.methods:
        np.testing.assert_array_equal(getattr(loaded, method)(case.rows),
                                      getattr(fast, method)(case.rows))


def test_torchstep_transform_is_a_validated_float32_transformer():
    step = _case("torchstep-alone").model
    out = step.transform(X_ALL[TEST].astype(np.float64))
    assert out.dtype == np.float32 and out.shape == (200, 8)
    with pytest.raises(ValueError):
        step.transform(X_NAN[TEST])  # finite input only, as scikit-learn's transformers
    fast = peregrine.compile(step, "reference")
    with pytest.raises(InputError):
        fast.transform(X_NAN[TEST])
    with pytest.raises(ValueError):
        step.transform(X_ALL[TEST, :4])


def test_float64_module_and_one_dimensional_output():
    torch.manual_seed(3)
    net = nn.Sequential(nn.Linear(D, 5), nn.ELU(), nn.Linear(5, 1), nn.Flatten(0)).double()
    step = TorchStep(net)  # never fitted: the width comes from the first Linear
    want = step.transform(X_ALL[TEST])
    assert want.dtype == np.float64 and want.shape == (200, 1)
    for backend in BACKENDS:
        got = peregrine.compile(step, _backend(backend)).transform(X_ALL[TEST])
        _same(got, want, backend)


class Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 2, 3)

    def forward(self, x: Any) -> Any:
        return self.conv(x)


class BatchSum(nn.Module):
    def forward(self, x: Any) -> Any:
        return x - x.mean(dim=0)


class TrainingDropout(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(D, 3)

    def forward(self, x: Any) -> Any:
        return F.dropout(self.fc(x), 0.5)  # training=True: random at prediction time


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(D, 3)

    def forward(self, x: Any) -> Any:
        return self.fc(x), x


@pytest.mark.parametrize("module, says", [
    (nn.Sequential(nn.Linear(D, 4), nn.LSTMCell(4, 2)), "LSTMCell"),
    (Conv(), "Conv1d"),
    (BatchSum(), ".mean()"),
    (TrainingDropout(), "dropout with training=True"),
    (nn.Sequential(nn.Linear(D, 3), nn.Softmax(dim=0)), "softmax over dim 0"),
    (Pair(), "returns tuple"),
])
def test_untranslatable_module_is_refused_naming_it(module, says):
    pipe = make_pipeline(StandardScaler(), TorchStep(module))
    pipe[0].fit(X_ALL[TRAIN])
    pipe[1].n_features_in_ = D
    with pytest.raises(UnsupportedModelError) as err:
        peregrine.compile(pipe, "reference")
    msg = str(err.value)
    assert says in msg and "TorchStep" in msg, msg
    if says != "returns tuple":
        assert "torch.fx node" in msg, msg


def test_forward_hook_and_custom_nonlinearity_are_refused():
    net = nn.Sequential(nn.Linear(D, 3))
    net[0].register_forward_hook(lambda m, i, o: o * 2)
    with pytest.raises(UnsupportedModelError, match="forward hooks"):
        peregrine.compile(TorchStep(net), "reference")
    skorch = pytest.importorskip("skorch")
    clf = skorch.NeuralNetClassifier(Net, module__k=3, criterion=nn.CrossEntropyLoss,
                                     max_epochs=1, verbose=0, train_split=None,
                                     predict_nonlinearity=lambda y: y * 2)
    with _one_thread():
        clf.fit(X_ALL[TRAIN], Y3[TRAIN])
    with pytest.raises(UnsupportedModelError, match="predict_nonlinearity"):
        peregrine.compile(clf, "reference")


def test_skorch_net_alone_and_its_labels():
    """A skorch classifier on its own (its input width from the module's first Linear):
    predict is the argmax column index (int64), as skorch returns it; the binary net's predict
    is uint8."""
    skorch = pytest.importorskip("skorch")
    torch.manual_seed(0)
    clf = skorch.NeuralNetClassifier(Net, module__k=3, criterion=nn.CrossEntropyLoss,
                                     max_epochs=3, verbose=0, train_split=None)
    with _one_thread():
        clf.fit(X_ALL[TRAIN], Y3[TRAIN])
    for backend in BACKENDS:
        fast = peregrine.compile(clf, _backend(backend))
        for method in ("predict", "predict_proba"):
            _same(getattr(fast, method)(X_ALL[TEST]), getattr(clf, method)(X_ALL[TEST]),
                  f"{backend} {method}")
    binary = _case("columns-skorch-binary").model
    assert peregrine.compile(binary, "reference").predict(X_ALL[TEST]).dtype == np.uint8


def test_native_runs_the_rules_without_torch_kernels(monkeypatch):
    """native runs a network's ops with torch's kernels where torch is installed (the source's
    bits), else their NumPy rules: the reference's answer."""
    if "native" not in available_backends():
        pytest.skip("backend native not available")
    from peregrine.backends.native import rules

    case = _case("scaler-torchstep-xgboost")
    monkeypatch.setattr(rules, "_TORCH", False)
    rows = case.rows
    got = peregrine.compile(case.net, "native").transform(rows)
    np.testing.assert_array_equal(got, peregrine.compile(case.net, "reference").transform(rows))
