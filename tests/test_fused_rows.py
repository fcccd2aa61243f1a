"""Fused row-wise kernels (kernels/rowwise.py, fused.py) behind the torch backend on
CPU: same answers as scikit-learn, the reference backend and the op-by-op torch program, on
float32 and float64, odd row counts, several threads, NaN/inf where the source takes them,
and the same typed errors where it does not."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("llvmlite")
pytest.importorskip("sklearn")
torch = pytest.importorskip("torch")

from sklearn import linear_model as lm  # noqa: E402
from sklearn.feature_selection import VarianceThreshold  # noqa: E402
from sklearn.naive_bayes import BernoulliNB  # noqa: E402
from sklearn.neural_network import MLPClassifier, MLPRegressor  # noqa: E402
from sklearn.pipeline import FeatureUnion, make_pipeline  # noqa: E402
from sklearn.preprocessing import (  # noqa: E402
    Binarizer,
    MaxAbsScaler,
    MinMaxScaler,
    Normalizer,
    PolynomialFeatures,
    RobustScaler,
    StandardScaler,
)
from sklearn.svm import LinearSVC  # noqa: E402

import peregrine  # noqa: E402
from peregrine import CompileOptions  # noqa: E402
from peregrine.backends.torch.module import FusedProgram, GraphProgram  # noqa: E402
from peregrine.errors import InputError  # noqa: E402
from peregrine.kernels.fused import RowKernel  # noqa: E402

RNG = np.random.default_rng(7)
X_FIT = RNG.normal(size=(400, 6)) * [1, 10, 0.1, 3, 1, 100] + [0, 5, 0, -2, 0, 1000]
Y2 = (X_FIT[:, 0] + X_FIT[:, 3] > -2).astype(int)
Y3 = np.digitize(X_FIT[:, 0], [-0.5, 0.5])


def _fit(est, y=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X_FIT, y) if y is not None else est.fit(X_FIT)


MODELS = {
    "logreg-binary": lambda: _fit(lm.LogisticRegression(max_iter=500), Y2),
    "logreg-multinomial": lambda: _fit(lm.LogisticRegression(max_iter=500), Y3),
    "sgd": lambda: _fit(lm.SGDClassifier(random_state=0), Y3),
    "linear-svc": lambda: _fit(LinearSVC(), Y2),
    "ridge": lambda: _fit(lm.Ridge(), X_FIT[:, 1]),
    "bernoulli-nb": lambda: _fit(BernoulliNB(binarize=0.2), Y3),
    "standard-scaler": lambda: _fit(StandardScaler()),
    "robust-scaler": lambda: _fit(RobustScaler()),
    "maxabs-scaler": lambda: _fit(MaxAbsScaler()),
    "minmax-clip": lambda: _fit(MinMaxScaler(clip=True)),
    "normalizer-l1": lambda: _fit(Normalizer("l1")),
    "normalizer-l2": lambda: _fit(Normalizer("l2")),
    "normalizer-max": lambda: _fit(Normalizer("max")),
    "binarizer": lambda: _fit(Binarizer(threshold=0.5)),
    "poly-3": lambda: _fit(PolynomialFeatures(3)),
    "poly-interactions": lambda: _fit(PolynomialFeatures(2, interaction_only=True,
                                                         include_bias=False)),
    "poly-logreg": lambda: _fit(make_pipeline(PolynomialFeatures(2), StandardScaler(),
                                              lm.LogisticRegression(max_iter=1000)), Y3),
    "mlp-relu": lambda: _fit(MLPClassifier(hidden_layer_sizes=(16,), max_iter=30, random_state=0), Y3),
    "mlp-regressor": lambda: _fit(MLPRegressor(hidden_layer_sizes=(8,), max_iter=30, random_state=0),
                                  X_FIT[:, 0]),
    "scaler-logreg": lambda: _fit(make_pipeline(StandardScaler(), lm.LogisticRegression()), Y2),
    "union-select": lambda: _fit(FeatureUnion([("a", MinMaxScaler()), ("b", make_pipeline(
        VarianceThreshold(0.5), Normalizer()))])),
}


def _methods(est) -> list[str]:
    return [m for m in ("predict", "predict_proba", "predict_log_proba", "decision_function",
                        "transform") if hasattr(est, m)]


def _rows(n: int, dtype, seed: int = 0) -> np.ndarray:
    r = np.random.default_rng(seed)
    return (r.normal(size=(n, 6)) * X_FIT.std(0) + X_FIT.mean(0)).astype(dtype)


def _fused(cm) -> dict:
    if cm.backend == "native":
        return cm._exec.row_kernels()
    return {k: p for k, p in cm._exec._programs.items() if isinstance(p, FusedProgram)}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("backend", ["torch", "native"])
def test_fused_matches_sklearn_and_op_by_op(name, dtype, backend):
    est = MODELS[name]()
    fused = peregrine.compile(est, backend=backend)
    plain = peregrine.compile(est, backend=backend, options=CompileOptions(fused_kernels=False))
    assert _fused(fused), f"{name}: nothing fused"
    assert not _fused(plain)
    for n in (1, 3, 5, 4099):  # odd counts: the unrolled loop's tail
        X = _rows(n, dtype, seed=n)
        for method in _methods(est):
            want = getattr(est, method)(X)
            got = getattr(fused, method)(X)
            ref = getattr(plain, method)(X)
            assert got.dtype == want.dtype and got.shape == want.shape, (name, method)
            if want.dtype.kind not in "f":  # class labels
                np.testing.assert_array_equal(got, want, err_msg=f"{name}.{method}")
            else:
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{name}.{method} vs sklearn")
                # against the op-by-op program (torch ops / NumPy rules): only the order of a few float64 sums
                # differs (and float32 outputs round the same float64 values)
                tight = 1e-6 if got.dtype == np.float32 else 1e-12
                np.testing.assert_allclose(got, ref, rtol=tight, atol=tight,
                                           err_msg=f"{name}.{method} vs op-by-op")


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_thread_split_is_bitwise_stable(threads):
    est = MODELS["scaler-logreg"]()
    one = peregrine.compile(est, backend="torch", options=CompileOptions(n_threads=1))
    many = peregrine.compile(est, backend="torch", options=CompileOptions(n_threads=threads))
    X = _rows(70_001, np.float32, seed=3)
    for method in ("predict_proba", "decision_function", "predict"):
        np.testing.assert_array_equal(getattr(one, method)(X), getattr(many, method)(X))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("rows", [1, 9, 100_000])
@pytest.mark.parametrize("backend", ["torch", "native"])
def test_rejected_values_raise_where_sklearn_does(bad, rows, backend):
    est = MODELS["logreg-binary"]()
    cm = peregrine.compile(est, backend=backend)
    X = _rows(rows, np.float32)
    X[rows // 2, 4] = bad
    with pytest.raises(ValueError):
        est.predict_proba(X)
    with pytest.raises(InputError, match=f"row {rows // 2}, column 4"):
        cm.predict_proba(X)
    with pytest.raises(InputError):  # the tensor path checks too
        cm.predict_proba(torch.from_numpy(X))


@pytest.mark.parametrize("backend", ["torch", "native"])
def test_accepted_nan_flows_through(backend):
    # scalers take NaN (they ignore it in fit and keep it in transform)
    X = _rows(50, np.float64)
    X[[3, 7], [1, 5]] = np.nan
    for name in ("standard-scaler", "minmax-clip", "maxabs-scaler", "robust-scaler"):
        est = MODELS[name]()
        cm = peregrine.compile(est, backend=backend)
        assert _fused(cm)
        np.testing.assert_allclose(cm.transform(X), est.transform(X), rtol=1e-12, atol=1e-12,
                                   equal_nan=True, err_msg=name)


def test_zero_rows_in_normalizers():
    X = _rows(8, np.float64)
    X[2] = 0.0
    for name in ("normalizer-l1", "normalizer-l2", "normalizer-max"):
        est = MODELS[name]()
        cm = peregrine.compile(est, backend="torch")
        np.testing.assert_array_equal(cm.transform(X)[2], np.zeros(6))
        np.testing.assert_allclose(cm.transform(X), est.transform(X), rtol=1e-12, atol=1e-15)


def test_argmax_ties_and_first_maximum():
    # equal scores: the first class wins, as np.argmax
    est = lm.LogisticRegression().fit(X_FIT, Y3)
    est.coef_[:] = 0.0
    est.intercept_[:] = [1.0, 3.0, 3.0]
    cm = peregrine.compile(est, backend="torch")
    np.testing.assert_array_equal(cm.predict(_rows(5, np.float32)), np.full(5, 1))


def test_other_inputs_take_the_op_by_op_program():
    est = MODELS["bernoulli-nb"]()
    cm = peregrine.compile(est, backend="torch")
    X = _rows(33, np.float64)
    want = est.predict_proba(X)
    # a non-contiguous tensor, and an integer one (cast by the runtime)
    Xt = torch.from_numpy(np.asfortranarray(X))
    np.testing.assert_allclose(cm.predict_proba(Xt), want, rtol=1e-12, atol=1e-12)
    Xi = np.round(X).astype(np.int64)
    np.testing.assert_allclose(cm.predict_proba(Xi), est.predict_proba(Xi), rtol=1e-12,
                               atol=1e-12)
    program = next(iter(_fused(cm).values()))
    with torch.inference_mode():
        half = program(torch.from_numpy(X).to(torch.float16))  # not a kernel input dtype
    assert isinstance(program.fallback, GraphProgram) and half[0].shape[0] == 33


def test_torchscript_and_cuda_never_fuse():
    est = MODELS["standard-scaler"]()
    ts = peregrine.compile(est, backend="torchscript")
    assert not any(isinstance(p, FusedProgram) for p in ts._exec._programs.values())
    assert "fused_kernels" not in ts.explain()


def test_unfusable_graph_keeps_op_by_op_program():
    from sklearn.preprocessing import FunctionTransformer

    est = FunctionTransformer(np.tanh).fit(X_FIT)  # tanh: no fused op
    cm = peregrine.compile(est, backend="torch")
    assert not _fused(cm)
    np.testing.assert_allclose(cm.transform(X_FIT), np.tanh(X_FIT), rtol=1e-12)


def test_kernel_shared_across_models_of_one_shape():
    a = lm.LogisticRegression().fit(X_FIT, Y2)
    b = lm.LogisticRegression(C=0.01).fit(X_FIT, Y2)
    ka, kb = (peregrine.compile(m, backend="torch")._exec._program(("predict_proba",)).kernel
              for m in (a, b))
    assert ka.symbols == kb.symbols  # parameters travel in a buffer, not in the code
    X = _rows(10, np.float64)
    assert not np.allclose(ka.run(X, 1)[0], kb.run(X, 1)[0])


def test_option_round_trips_through_artifacts(tmp_path):
    est = MODELS["sgd"]()
    cm = peregrine.compile(est, backend="torch", options=CompileOptions(fused_kernels=False))
    cm.save(tmp_path / "m.peregrine")
    loaded = peregrine.load(tmp_path / "m.peregrine")
    assert loaded.options.fused_kernels is False and not _fused(loaded)
    X = _rows(20, np.float32)
    np.testing.assert_array_equal(loaded.decision_function(X), cm.decision_function(X))


def test_without_llvmlite_the_torch_backend_still_works(monkeypatch):
    monkeypatch.setitem(sys.modules, "peregrine.kernels.fused", None)  # import fails
    est = MODELS["scaler-logreg"]()
    cm = peregrine.compile(est, backend="torch")
    assert not _fused(cm)
    X = _rows(30, np.float32)
    np.testing.assert_allclose(cm.predict_proba(X), est.predict_proba(X), rtol=1e-5, atol=1e-6)


def test_row_kernel_refuses_what_it_cannot_fuse():
    est = make_pipeline(StandardScaler(), lm.LogisticRegression()).fit(X_FIT, Y2)
    spec = peregrine.compile(est, backend="reference").spec
    graph = spec.graph
    k = RowKernel(graph, [graph.outputs["predict_proba"]], [False])
    assert k.fusable
    # the input returned as is: nothing to fuse
    k_input = RowKernel(graph, [next(n.name for n in graph.nodes if not n.inputs)], [True])
    assert not k_input.fusable


def test_wide_inputs_keep_the_blas_program():
    # 600 input columns: a GEMV for torch's BLAS, not a 600-lane row vector
    Xw = np.random.default_rng(0).normal(size=(200, 600))
    est = lm.LogisticRegression(max_iter=200).fit(Xw, (Xw[:, 0] > 0).astype(int))
    cm = peregrine.compile(est, backend="torch")
    assert not _fused(cm)
    np.testing.assert_allclose(cm.predict_proba(Xw), est.predict_proba(Xw), rtol=1e-5, atol=1e-6)


def test_option_must_be_a_bool():
    with pytest.raises(ValueError, match="fused_kernels"):
        CompileOptions(fused_kernels="no")
