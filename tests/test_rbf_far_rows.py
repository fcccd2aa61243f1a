"""libsvm's rbf kernel on rows with a feature past ~1.3e154, where |x|^2 overflows to infinity.
scikit-learn accepts such finite rows: libsvm sums squared differences, so the kernel value is
0 (or a tiny number). The backends' expanded distance |x|^2 - 2 x.v + |v|^2 was inf - inf =
NaN there, which turned SVC's decision into NaN and its label into the wrong class. Each
backend, the fused one-row kernel and the ONNX export must answer as scikit-learn does; the
pairwise form (KernelPCA) computes the expanded distance itself, and raises where its NaN
reaches scikit-learn's KernelCenterer."""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pytest
from sklearn.decomposition import KernelPCA
from sklearn.svm import SVC, SVR, NuSVC, OneClassSVM

import peregrine
from peregrine.errors import InputError
from peregrine.ir.semantics.kernels import far_rows_vanish, overflowed_rows

RTOL, ATOL = 1e-5, 1e-6
BACKENDS = ["reference", "native", "torch", "torchscript"] + (
    ["tvm"] if importlib.util.find_spec("tvm") else [])  # the extra: CI installs it

rng = np.random.default_rng(0)
X = rng.normal(size=(120, 4))
y3 = np.digitize(X[:, 0] + X[:, 1], [-0.5, 0.5])


def _far_rows():
    rows = [X[:3].copy() for _ in range(6)]
    for r, (col, v) in zip(rows, [(0, 1.7e308), (1, -1.7e308), (2, 1e200), (3, 2e154),
                                  (0, 1e154), (1, 1e10)]):
        r[1, col] = v
    rows[4][1, 1] = 1e154  # |x|^2 = 2e308 from two features that are each fine
    return np.vstack(rows)


T = _far_rows()


def _models():
    return {
        "svc_ovo": SVC(gamma="scale").fit(X, y3),
        "svc_ovr_ties": SVC(decision_function_shape="ovr", break_ties=True).fit(X, y3),
        "nusvc": NuSVC(nu=0.3).fit(X, y3 == 1),
        "svr": SVR(C=3.0).fit(X, X[:, 0] - X[:, 2]),
        "one_class": OneClassSVM(gamma=0.5, nu=0.2).fit(X),
    }


MODELS = _models()


def _methods(model):
    return [m for m in ("predict", "decision_function", "score_samples")
            if hasattr(model, m)]


def _sklearn(model, method, rows):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return getattr(model, method)(rows)


def test_the_rows_overflow_and_the_bound_holds():
    assert overflowed_rows(T).sum() == 5  # every huge row but the 1e10 one
    for model in MODELS.values():
        assert far_rows_vanish(model.support_vectors_, float(model._gamma))
    # a gamma so small that a far row keeps a kernel value above 0: no shortcut
    assert not far_rows_vanish(X, 1e-310)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(MODELS))
def test_far_rows_match_scikit_learn(name, backend):
    model = MODELS[name]
    compiled = peregrine.compile(model, backend=backend)
    for method in _methods(model):
        want = _sklearn(model, method, T)
        assert np.all(np.isfinite(want))
        got = getattr(compiled, method)(T)
        if method == "predict" and name != "svr":
            np.testing.assert_array_equal(got, want, err_msg=method)
        else:
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=method)


@pytest.mark.parametrize("name", ["svc_ovo", "svr", "one_class"])
def test_far_rows_one_at_a_time_on_native(name):
    """One row at a time runs the native backend's fused row kernel (kernels/rowwise.py)."""
    model = MODELS[name]
    compiled = peregrine.compile(model, backend="native")
    for method in _methods(model):
        want = _sklearn(model, method, T)
        got = np.concatenate([getattr(compiled, method)(T[i:i + 1]) for i in range(len(T))])
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=method)


def test_a_tiny_gamma_is_not_fused():
    """Where the bound does not prove 0 (a gamma below ~1e-305), the fused row kernel leaves
    the rbf step to the rules' path, which recomputes far rows by differences."""
    from peregrine.ir import GraphBuilder, Op
    from peregrine.kernels.rowwise import _step

    for gamma, fused in ((0.5, True), (1e-310, False)):
        g = GraphBuilder()
        k = g.add(Op.KERNEL, (g.input(4),), width=5, kind="rbf", vectors=X[:5], gamma=gamma)
        step = _step(g.build({"out": k}).node(k), [4], lambda value, size=None: [0, 0])
        assert (step is not None) is fused


@pytest.mark.parametrize("backend", ["reference", "native", "torch", "tvm"])
def test_kernel_pca_raises_where_its_centerer_does(backend):
    """KernelPCA's rbf is sklearn.metrics.pairwise's expanded distance, inf - inf = NaN on
    some far rows, and its KernelCenterer re-validates the kernel: scikit-learn raises on
    those rows, the compiled model raises InputError; on the others both answer alike."""
    if backend == "tvm":
        pytest.importorskip("tvm")
    model = KernelPCA(2, kernel="rbf", gamma=0.3).fit(X)
    compiled = peregrine.compile(model, backend=backend)
    raised = 0
    for i in range(len(T)):
        row = T[i:i + 1]
        try:
            want = _sklearn(model, "transform", row)
        except ValueError:
            raised += 1
            with pytest.raises(InputError, match="KernelPCA: row 0"):
                compiled.transform(row)
            continue
        np.testing.assert_allclose(compiled.transform(row), want, rtol=RTOL, atol=ATOL)
    assert raised == 2


@pytest.mark.parametrize("name", ["svc_ovo", "nusvc", "svr", "one_class"])
def test_far_rows_in_the_exported_onnx(tmp_path, name):
    pytest.importorskip("onnxruntime")
    from peregrine.export.onnx import session

    model = MODELS[name]
    path = tmp_path / "m.onnx"
    peregrine.compile(model, backend="reference").export_onnx(path)
    sess = session(str(path))
    names = [o.name for o in sess.get_outputs()]
    out = dict(zip(names, sess.run(None, {"X": T})))
    if name == "svr":
        np.testing.assert_allclose(out["variable"].ravel(), model.predict(T),
                                   rtol=RTOL, atol=ATOL)
    else:
        np.testing.assert_array_equal(out["label"].ravel(), model.predict(T))
