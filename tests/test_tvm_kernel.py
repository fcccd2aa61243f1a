"""The tvm backend's KERNEL lowering (backends/tvm/ops_kernel.py, kernel_matrix.py) and its
vector exp (tir_math.py): the exp ulp by ulp against libm; each kernel kind and form against
its NumPy rule on rows with NaN, +-inf, huge values and exact support vectors, at row counts
around the kernel's groups and tasks and vector counts around its chunks; SVMs and KernelPCA
against scikit-learn; lowered kinds run in the program, the others by their rule."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import peregrine

pytest.importorskip("tvm")

import tvm  # noqa: E402
from sklearn.decomposition import KernelPCA  # noqa: E402
from sklearn.svm import SVC, SVR, NuSVC  # noqa: E402
from tvm.script import tirx as T  # noqa: E402

from peregrine.backends.tvm import tir_math  # noqa: E402
from peregrine.backends.tvm.build import host_target  # noqa: E402
from peregrine.ir import GraphBuilder, Op  # noqa: E402
from peregrine.ir.spec import MethodSpec, ModelSpec  # noqa: E402
from peregrine.options import CompileOptions  # noqa: E402
from peregrine.runtime.compiled import build  # noqa: E402
from tests.test_vmath import _libm_exp, _ulps  # noqa: E402
from tests.tvm_cache import fresh_library_cache  # noqa: E402,F401 (autouse)


# ------------------------------------------------------------------------------ exp --
@pytest.fixture(scope="module")
def tir_exp():
    @T.prim_func
    def vexp(x: T.handle, y: T.handle):
        T.func_attr({"tir.noalias": True, "tirx.is_scheduled": True, "global_symbol": "vexp"})
        n = T.int64()
        X = T.match_buffer(x, (n,), "float64")
        Y = T.match_buffer(y, (n,), "float64")
        for o in range(n // 8):
            for lane in T.vectorized(8):
                Y[o * 8 + lane] = tir_math.exp(X[o * 8 + lane])

    fn = tvm.compile(tvm.IRModule({"vexp": vexp}), target=host_target())["vexp"]

    def run(values: np.ndarray) -> np.ndarray:
        pad = -len(values) % 8
        x = np.concatenate([np.asarray(values, np.float64), np.zeros(pad)])
        y = tvm.runtime.tensor(np.empty_like(x))
        fn(tvm.runtime.tensor(x), y)
        return y.numpy()[: len(values)]

    return run


@pytest.mark.parametrize("lo, hi", [(-745.2, 709.78), (-40.0, 0.0), (-1.0, 1.0), (-1e-9, 1e-9),
                                    (-745.2, -700.0), (700.0, 709.78)])
def test_exp_within_one_ulp_of_libm(tir_exp, lo, hi):
    x = np.random.default_rng(int(abs(lo))).uniform(lo, hi, 20_000)
    want = np.array([_libm_exp(t) for t in x])
    assert _ulps(tir_exp(x), want).max() <= 1.0


def test_exp_special_values_and_every_power_of_two(tir_exp):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 709.78, 709.79, 710.0, 1e300, -745.13,
                  -745.14, -746.0, -1e300, 1e-300, -1e-300, -708.4, 0.5 * math.log(2)])
    got = tir_exp(x)
    want = np.array([t if math.isnan(t) else _libm_exp(t) for t in x])
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(np.isinf(got[ok]), np.isinf(want[ok]))
    assert np.array_equal(got[ok] == 0, want[ok] == 0)
    finite = ok & np.isfinite(want)
    assert _ulps(got[finite], want[finite]).max() <= 1.0
    assert got[0] == 1.0 and got[1] == 1.0
    powers = np.arange(-1074, 1024) * math.log(2)  # each scale factor, subnormals included
    assert _ulps(tir_exp(powers), np.array([_libm_exp(t) for t in powers])).max() <= 1.0


# --------------------------------------------------------------------- KERNEL alone --
def _kernel_program(vectors: np.ndarray, backend: str, **attrs):
    """A model whose one method is the KERNEL node's matrix."""
    g = GraphBuilder()
    k = g.add(Op.KERNEL, (g.input(vectors.shape[1]),), width=vectors.shape[0],
              vectors=vectors, **attrs)
    spec = ModelSpec(graph=g.build({"transform": k}),
                     methods={"transform": MethodSpec("transform")},
                     n_features=vectors.shape[1], source="test.Kernel")
    return build(spec, backend, CompileOptions(), "cpu")


def _rows(rng, vectors: np.ndarray, n: int) -> np.ndarray:
    """Normal rows, the support vectors themselves (distance 0) and rows beside them, a NaN,
    +-inf and a huge feature (|x|^2 overflows: libsvm's 0, the expanded form's NaN)."""
    d = vectors.shape[1]
    X = rng.normal(size=(n, d))
    X[: min(n, len(vectors))] = vectors[: min(n, len(vectors))]
    if n > 12:
        X[len(vectors) % 5 + 1] = vectors[0] + 1e-9
        X[7, 0], X[8, 1], X[9, 2] = np.nan, np.inf, -np.inf
        X[10, 0], X[11] = 1e200, 1e155
        X[12] = 1e-170  # squares underflow
    return X


KINDS = [("rbf", "libsvm"), ("rbf", "pairwise"), ("linear", "libsvm"), ("poly", "libsvm")]


@pytest.mark.parametrize("center", [False, True], ids=["raw", "centred"])
@pytest.mark.parametrize("kind,form", KINDS)
@pytest.mark.parametrize("m", [1, 8, 13])
def test_kernel_matrix_matches_its_rule(kind, form, m, center):
    """Centred (KernelCenterer): in the kernel function, but for poly (after its power)."""
    rng = np.random.default_rng(m)
    vectors = rng.normal(size=(m, 5))
    attrs = dict(kind=kind, form=form, gamma=0.3, coef0=0.5, degree=3.0)
    if center:
        attrs.update(center_rows=rng.normal(size=m), center_all=0.75)
    compiled = _kernel_program(vectors, "tvm", **attrs)
    assert "KERNEL" not in compiled.explain_dict()["backend_choices"].get("fallback_ops", [])
    ref = _kernel_program(vectors, "reference", **attrs)
    for n in (1, 7, 8, 9, 63, 64, 65, 200):  # groups of 8, tasks of 64, their tails
        X = _rows(rng, vectors, n)
        with np.errstate(all="ignore"):
            want = ref.transform(X)
        got = compiled.transform(X)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{n} rows")
        # a sum's rounding is relative to its terms, not to a result that cancels: the dot
        # kinds within a few ulps of sum |x_k v_k| (raised to poly's power); centred, a mean
        # of m values in another order, then differences of O(1) values
        with np.errstate(all="ignore"):
            terms = np.abs(X) @ np.abs(vectors).T
            if kind == "poly":
                terms = 3 * (0.3 * terms + 0.5) ** 3
        atol = (8 * 2.0**-52 * terms if kind in ("linear", "poly") else 0.0) + (
            1e-14 if center else 1e-300)
        ok = np.isfinite(want)
        err = np.abs(got - want)[ok]
        assert np.all(err <= 1e-13 * np.abs(want)[ok] + np.broadcast_to(atol, want.shape)[ok]), (
            f"{n} rows: {err.max()}")
        np.testing.assert_array_equal(got[~ok], want[~ok], err_msg=f"{n} rows")
        np.testing.assert_array_equal(compiled.transform(X[:1]), got[:1])


def test_rbf_forms_at_overflowing_rows():
    """Features past ~1.3e154: libsvm's differences give a distance of inf and a kernel of 0;
    the expanded form gives inf (0) where only |x|^2 overflows and inf - inf = NaN where x.v
    overflows upward too (scikit-learn's KernelPCA then raises), as the rules do."""
    vectors = np.array([[2.0, 2.0, 2.0], [-2.0, -2.0, -2.0], [0.5, -0.5, 0.25]])
    X = np.array([[1e308, 1e308, 1e308], [1e200, 0.0, 0.0], [1e155, 1e155, 1e155],
                  [0.5, 0.5, 0.5]])
    for form in ("libsvm", "pairwise"):
        got = _kernel_program(vectors, "tvm", kind="rbf", form=form, gamma=0.1).transform(X)
        with np.errstate(all="ignore"):
            want = _kernel_program(vectors, "reference", kind="rbf", form=form,
                                   gamma=0.1).transform(X)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=form)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=0, err_msg=form)
        if form == "libsvm":
            assert np.all(got[:3] == 0.0)
        else:
            assert np.isnan(got[0, 0]) and got[1, 0] == 0.0


@pytest.mark.parametrize("kind,form", [("sigmoid", "libsvm"), ("cosine", "pairwise"),
                                       ("poly", "pairwise")])
def test_other_kinds_run_their_rule(kind, form):
    vectors = np.random.default_rng(1).normal(size=(6, 4))
    attrs = dict(kind=kind, form=form, gamma=0.3, coef0=0.5, degree=2.5 if form == "pairwise"
                 else 3.0)
    compiled = _kernel_program(vectors, "tvm", **attrs)
    assert "KERNEL" in compiled.explain_dict()["backend_choices"]["fallback_ops"]
    X = np.random.default_rng(2).normal(size=(20, 4))
    with np.errstate(invalid="ignore"):  # a negative base to a fractional power: NaN
        np.testing.assert_array_equal(
            compiled.transform(X), _kernel_program(vectors, "reference", **attrs).transform(X))


# ------------------------------------------------------------------------ models --
def _data(n=300, d=6, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] + X[:, 1] > 0).astype(int) + (classes > 2) * (X[:, 2] > 0.5).astype(int)
    return X, y


@pytest.mark.parametrize("model", [
    SVC(kernel="rbf", gamma=0.2), SVC(kernel="linear"), SVC(kernel="poly", degree=3),
    NuSVC(kernel="rbf"), SVC(kernel="rbf", decision_function_shape="ovo"),
    SVR(kernel="rbf"), SVR(kernel="poly", degree=2)], ids=repr)
def test_svms_match_scikit_learn(model):
    X, y = _data()
    model.fit(X, y.astype(float) if isinstance(model, SVR) else y)
    compiled = peregrine.compile(model, "tvm")
    assert "KERNEL" not in compiled.explain_dict()["backend_choices"].get("fallback_ops", [])
    Xt = _rows(np.random.default_rng(3), X[:20], 150)
    Xt = Xt[np.isfinite(Xt).all(axis=1)]  # scikit-learn rejects NaN and infinity
    for method in ("predict", "decision_function"):
        if not hasattr(model, method):
            continue
        got, want = getattr(compiled, method)(Xt), getattr(model, method)(Xt)
        if method == "predict" and not isinstance(model, SVR):
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel", ["rbf", "linear", "poly"])
def test_kernel_pca_matches_scikit_learn(kernel):
    X, _ = _data(200, 5)
    model = KernelPCA(n_components=4, kernel=kernel, gamma=0.2, degree=3).fit(X)
    compiled = peregrine.compile(model, "tvm")
    expected_rule = kernel == "poly"  # scikit-learn's float power runs its rule
    assert ("KERNEL" in compiled.explain_dict()["backend_choices"].get("fallback_ops", [])) \
        == expected_rule
    Xt = np.random.default_rng(4).normal(size=(70, 5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = model.transform(Xt)
    np.testing.assert_allclose(compiled.transform(Xt), want, rtol=1e-5, atol=1e-6)
    huge = np.full((1, 5), 1e308)  # the expanded distance's NaN: scikit-learn raises
    with np.errstate(all="ignore"), pytest.raises(ValueError):
        model.transform(huge)
    with np.errstate(all="ignore"), pytest.raises(peregrine.InputError):
        compiled.transform(huge)
