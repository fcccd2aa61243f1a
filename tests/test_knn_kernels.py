"""The compiled KNN kernels (kernels/knn.py, backends/tvm/knn.py): each backend's
KNeighborsClassifier and KNeighborsRegressor with each kernel metric, uniform and distance
weights, against scikit-learn and bit for bit against the reference backend's rule: fitted
sets smaller and larger than the rule's candidate count, rows around the kernels' vectors of 8
and tasks of 64, ties at the k-th neighbour on integer data (lowest index first), query rows
equal to fitted rows (zero distances under distance weights) and rows far enough out that
distances overflow; the metrics left to the rule reported as fallbacks on TVM."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

import peregrine
from tests.tvm_cache import fresh_library_cache  # noqa: F401 (autouse)

BACKENDS = ["native"] + (["tvm"] if importlib.util.find_spec("tvm") else [])
LOWERED = [("euclidean", 2), ("manhattan", 2), ("chebyshev", 2), ("minkowski", 1),
           ("minkowski", 2)]


def _fallbacks(compiled) -> list:
    return compiled.explain_dict()["backend_choices"].get("fallback_ops", [])


def _bits_equal(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype, what
    same = (got.view(np.int64) == want.view(np.int64)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{what}: {(~same).sum()} values differ, first {np.argwhere(~same)[0]}"


def _rows(rng, X: np.ndarray, n: int) -> np.ndarray:
    """Query rows: new ones, exact copies of fitted rows, near copies."""
    Q = rng.normal(size=(n, X.shape[1])) * X.std(axis=0) + X.mean(axis=0)
    copies = rng.choice(len(X), size=max(1, n // 5))
    Q[: len(copies)] = X[copies]
    Q[len(copies): 2 * len(copies)] = X[copies] * (1 + 1e-15)
    return Q[:n]


def _check(model, Q: np.ndarray, methods: tuple[str, ...], backend: str) -> None:
    fast = peregrine.compile(model, backend)
    ref = peregrine.compile(model, "reference")
    assert "KNN" not in _fallbacks(fast), fast.explain()
    for method in methods:
        got = getattr(fast, method)(Q)
        if method == "predict" and isinstance(model, KNeighborsClassifier):
            np.testing.assert_array_equal(got, model.predict(Q))
        else:
            np.testing.assert_allclose(got, getattr(model, method)(Q), rtol=1e-5, atol=1e-6)
            _bits_equal(got, getattr(ref, method)(Q), f"{method} vs reference")
        np.testing.assert_array_equal(getattr(fast, method)(Q[:1]), got[:1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("metric,p", LOWERED)
@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("m", [12, 300])  # below and above the rule's candidate count
def test_classifier(metric, p, weights, m, backend):
    rng = np.random.default_rng(m + p)
    X = rng.normal(size=(m, 6)) * [1, 10, 0.1, 3, 1, 100]
    y = rng.integers(0, 3, size=m)
    model = KNeighborsClassifier(5, metric=metric, p=p, weights=weights).fit(X, y)
    _check(model, _rows(rng, X, 137), ("predict", "predict_proba"), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("metric,p", LOWERED)
@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_regressor(metric, p, weights, backend):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(200, 11))
    y = np.column_stack([X[:, 0] * 3 + rng.normal(size=200), X[:, 1] ** 2])
    model = KNeighborsRegressor(4, metric=metric, p=p, weights=weights).fit(X, y)
    _check(model, _rows(rng, X, 70), ("predict",), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [1, 5, 9])
def test_ties_take_the_lowest_index(k, backend):
    """Integer data: many fitted rows at exactly the k-th distance; the rule's (the lowest
    index) are taken, so predict_proba equals the reference backend's bit for bit."""
    rng = np.random.default_rng(k)
    X = rng.integers(0, 4, size=(500, 3)).astype(float)
    y = rng.integers(0, 4, size=500)
    Q = rng.integers(0, 4, size=(300, 3)).astype(float)
    for algorithm in ("brute", "kd_tree"):
        model = KNeighborsClassifier(k, algorithm=algorithm).fit(X, y)
        fast, ref = peregrine.compile(model, backend), peregrine.compile(model, "reference")
        _bits_equal(fast.predict_proba(Q), ref.predict_proba(Q), algorithm)
        np.testing.assert_array_equal(fast.predict(Q), ref.predict(Q))


@pytest.mark.parametrize("backend", BACKENDS)
def test_overflowing_distances(backend):
    """Rows past 1e154 overflow the squared distances to infinity: ties at infinity, by
    index, as the rule (scikit-learn accepts such rows)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 4))
    model = KNeighborsRegressor(3).fit(X, rng.normal(size=60))
    Q = rng.normal(size=(20, 4))
    Q[::3, 1] = 1e200
    fast, ref = peregrine.compile(model, backend), peregrine.compile(model, "reference")
    _bits_equal(fast.predict(Q), ref.predict(Q), "overflow")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("metric,p", [("cosine", 2), ("minkowski", 3)])
def test_other_metrics_run_their_rule(metric, p, backend):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 4))
    model = KNeighborsClassifier(3, metric=metric, p=p).fit(X, rng.integers(0, 2, 50))
    fast = peregrine.compile(model, backend)
    if backend == "tvm":  # (the native backend reports no per-node fallbacks)
        assert "KNN" in _fallbacks(fast)
    Q = rng.normal(size=(30, 4))
    np.testing.assert_allclose(fast.predict_proba(Q), model.predict_proba(Q), atol=1e-6)


def test_native_rows_split_over_threads():
    """Enough work for two threads: the same bits as one thread and as the rule."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(400, 8))
    model = KNeighborsRegressor(6, weights="distance").fit(X, rng.normal(size=(400, 2)))
    Q = rng.normal(size=(2000, 8))
    two = peregrine.compile(model, "native", options=peregrine.CompileOptions(n_threads=2))
    one = peregrine.compile(model, "native", options=peregrine.CompileOptions(n_threads=1))
    ref = peregrine.compile(model, "reference")
    _bits_equal(two.predict(Q), one.predict(Q), "two threads vs one")
    _bits_equal(two.predict(Q), ref.predict(Q), "vs reference")


@pytest.mark.parametrize("backend", BACKENDS)
def test_wide_euclidean_rows_run_the_rule(backend):
    """Past ``KERNEL_EUCLIDEAN_FEATURES`` the rule's BLAS search is faster for euclidean
    distances: the rule runs (a fallback on TVM), the same answers; manhattan keeps the kernel
    (its rule builds every difference too)."""
    from peregrine.ir.semantics.neighbours import KERNEL_EUCLIDEAN_FEATURES, kernel_form

    rng = np.random.default_rng(5)
    d = KERNEL_EUCLIDEAN_FEATURES + 1
    X = rng.normal(size=(120, d))
    y = rng.integers(0, 3, 120)
    Q = rng.normal(size=(40, d))
    for metric, kernel in (("euclidean", False), ("manhattan", True)):
        model = KNeighborsClassifier(4, metric=metric, weights="distance").fit(X, y)
        fast, ref = peregrine.compile(model, backend), peregrine.compile(model, "reference")
        node = next(n for n in fast.spec.graph.nodes if n.op.name == "KNN")
        assert (kernel_form(node.attrs) is not None) == kernel
        if backend == "tvm":
            assert ("KNN" in _fallbacks(fast)) == (not kernel)
        _bits_equal(fast.predict_proba(Q), ref.predict_proba(Q), metric)


# --- the native euclidean search (kernels/knn_search.py): where its cost model says
# it beats knn.py's kernel (big fitted sets, wide rows), the rule's search with its candidate step
# as a kernel, in float32 then float64 ---

WIDE = 65


@pytest.fixture
def search_everywhere(monkeypatch):
    """Small models through the search (the cost model would give them the kernel)."""
    from peregrine.kernels import knn

    monkeypatch.setattr(knn, "faster_than_search", lambda m, d: False)


def _search_model(model):
    from peregrine.kernels import knn, knn_search

    node = next(n for n in peregrine.compile(model, "reference").spec.graph.nodes
                if n.op.name == "KNN")
    assert not knn.usable(node.attrs) and knn_search.usable(node.attrs)
    return model


def test_cost_model_chooses_the_search_for_big_models():
    from peregrine.kernels.knn import faster_than_search

    assert faster_than_search(5_000, 20) and faster_than_search(1_000, 200)
    assert not faster_than_search(20_000, 200) and not faster_than_search(4_000, 100)
    assert not faster_than_search(300_000, 16)  # fitted rows streamed from memory


def test_native_search_big_model():
    """A model the cost model sends to the search, against scikit-learn and the rule."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(4_000, 100))
    model = _search_model(KNeighborsClassifier(5).fit(X, rng.integers(0, 3, 4_000)))
    _check(model, _rows(rng, X, 300), ("predict", "predict_proba"), "native")


@pytest.mark.usefixtures("search_everywhere")
@pytest.mark.parametrize("metric,p", [("euclidean", 2), ("minkowski", 2)])
@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("m", [121, 400])  # a partial vector at the end; whole ones
@pytest.mark.parametrize("d", [3, WIDE])
def test_native_search(metric, p, weights, m, d):
    rng = np.random.default_rng(m + d)
    X = rng.normal(size=(m, d)) * rng.uniform(0.1, 10, size=d)
    y = rng.integers(0, 3, size=m)
    clf = _search_model(KNeighborsClassifier(5, metric=metric, p=p, weights=weights).fit(X, y))
    _check(clf, _rows(rng, X, 150), ("predict", "predict_proba"), "native")
    reg = _search_model(KNeighborsRegressor(7, metric=metric, p=p, weights=weights).fit(
        X, X[:, :2] @ [1.0, -2.0]))
    _check(reg, _rows(rng, X, 90), ("predict",), "native")


@pytest.mark.usefixtures("search_everywhere")
@pytest.mark.parametrize("threads", [1, 2])
def test_native_search_ties_and_overflow(threads):
    """Integer data: many fitted rows tie at the candidate bound, and the kernel may take
    other tied candidates than the rule's partition: the answer is the rule's all the same.
    Rows past 1e154 overflow the expanded form (not finite): recomputed as the rule does."""
    rng = np.random.default_rng(threads)
    X = rng.integers(0, 2, size=(600, WIDE)).astype(float)
    y = rng.integers(0, 4, size=600)
    Q = rng.integers(0, 2, size=(700, WIDE)).astype(float)
    Q[::7, 3] = 1e200
    Q[1::7, 5] = -1e155
    Q[2::7, 6] = 1e30  # beyond the float32 tier, not the float64 one
    options = peregrine.CompileOptions(n_threads=threads)
    for k in (1, 6):
        model = _search_model(KNeighborsClassifier(k, weights="distance").fit(X, y))
        fast = peregrine.compile(model, "native", options=options)
        ref = peregrine.compile(model, "reference")
        _bits_equal(fast.predict_proba(Q), ref.predict_proba(Q), f"k={k}")
        np.testing.assert_array_equal(fast.predict(Q), ref.predict(Q))


@pytest.mark.usefixtures("search_everywhere")
@pytest.mark.parametrize("scale", [1e-12, 1.0, 1e17])
def test_native_search_tiers(scale):
    """Data the float32 tier serves (unit scale), and scales it leaves to the float64 tier
    (tiny: its bound ignores float32's subnormals; huge: float32 would overflow), and tight
    clusters far from the mean (its bound too loose): the rule's bits every time."""
    from peregrine.kernels import knn_search

    rng = np.random.default_rng(12)
    centres = rng.normal(size=(6, 30)) * 1e3
    for X in (rng.normal(size=(500, 30)) * scale,
              (centres[rng.integers(0, 6, 500)] + rng.normal(size=(500, 30)) * 1e-3) * scale):
        Q = X[rng.integers(0, 500, 2_000)] + rng.normal(size=(2_000, 30)) * X.std() * 1e-3
        model = _search_model(KNeighborsRegressor(4).fit(X, rng.normal(size=500)))
        fast = peregrine.compile(model, "native")
        _bits_equal(fast.predict(Q), peregrine.compile(model, "reference").predict(Q), "tiers")
        node = next(n for n in fast.spec.graph.nodes if n.op.name == "KNN")
        assert knn_search.search(node.attrs, 1).use32 == (scale < 1e17)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_candidate_kernel_against_numpy(dtype):
    """The candidate kernel against NumPy's expanded values in the same type and order: the
    same K-th smallest value and finiteness, and a set of the K smallest (every candidate at
    most the bound, every other fitted row at least it), ties, overflow and tiny values
    included."""
    from peregrine.kernels.knn_search import Candidates

    rng = np.random.default_rng(4)
    v = rng.normal(size=(203, 9)).astype(dtype)
    v[:40] = np.round(v[:40])  # ties
    x = np.vstack([rng.normal(size=(60, 9)), np.round(rng.normal(size=(20, 9)))]).astype(dtype)
    with np.errstate(over="ignore"):  # (float32: inf)
        x[3, 2], x[4, 0], x[5, 1] = 1e200, -1e160, 1e-300
    n_cand = 24
    xx, vv = np.einsum("ij,ij->i", x, x), np.einsum("ij,ij->i", v, v)
    with np.errstate(over="ignore", invalid="ignore"):
        prod = x @ v.T
        approx = (prod * x.dtype.type(-2.0) + xx[:, None]) + vv
    cand, bound, finite = Candidates(n_cand, dtype, threads=1)(prod, xx, vv)
    np.testing.assert_array_equal(finite, np.isfinite(approx).all(axis=1))
    assert not finite[3] and not finite[4] and finite[5]
    want = np.partition(approx[finite], n_cand - 1, axis=1)[:, n_cand - 1]
    _bits_equal(bound[finite], want.astype(np.float64), "bound")
    for r in np.flatnonzero(finite):
        chosen = np.zeros(len(v), bool)
        chosen[cand[r]] = True
        assert chosen.sum() == n_cand
        assert (approx[r, chosen] <= bound[r]).all() and (approx[r, ~chosen] >= bound[r]).all()


@pytest.mark.parametrize("case", ["normal", "offset", "clusters", "integers", "tiny", "huge"])
def test_float32_tier_bound(case):
    """The float32 tier's bound (``Search.lower32``) is below the specification's squared
    distance (the sum of squared float64 differences) of every fitted row that is not a
    candidate, on every row it serves: data far from the origin, tight clusters, ties, and
    scales the tier hands on (tiny, huge: no bound)."""
    from types import SimpleNamespace

    from peregrine.kernels.knn_search import Search

    rng = np.random.default_rng(9)
    d = 70
    v = rng.normal(size=(900, d))
    if case == "offset":
        v = v * 1e-3 + 1e4
    elif case == "clusters":
        v = rng.normal(size=(9, d))[rng.integers(0, 9, 900)] * 1e3 + v * 1e-3
    elif case == "integers":
        v = rng.integers(0, 2, size=(900, d)).astype(float)
    elif case == "tiny":
        v = v * 1e-9
    elif case == "huge":
        v = v * 1e17
    x = v[rng.integers(0, 900, 300)] + (v.std() * 1e-2) * rng.normal(size=(300, d))
    x[::10] = v[rng.integers(0, 900, 30)]  # exact copies
    search = Search(SimpleNamespace(vectors=v, k=5, metric="euclidean", p=2.0), threads=1)
    if case == "huge":
        assert not search.use32
        return
    cand, lower = search.candidates32(x, search.n_cand)
    spec = np.einsum("ijk,ijk->ij", x[:, None, :] - v[None], x[:, None, :] - v[None])
    served = np.isfinite(lower)
    assert served.any() == (case != "tiny")
    for r in np.flatnonzero(served):
        others = np.ones(len(v), bool)
        others[cand[r]] = False
        assert lower[r] <= spec[r, others].min(), (r, lower[r], spec[r, others].min())
    if case in ("normal", "offset"):  # most rows are answered by this tier
        near = np.sort(spec, axis=1)[:, 4]
        assert (lower > near * (1 + 1e-15)).mean() > 0.8


# --- the torch backend on the CPU runs the same kernels (kernels/knn.py), eagerly ---


@pytest.mark.parametrize("metric,p,m,d", [("euclidean", 2, 300, 6), ("manhattan", 1, 300, 6),
                                          ("euclidean", 2, 4_000, 100)])  # the search
def test_torch_backend_runs_the_kernels_on_cpu(metric, p, m, d):
    """Eager torch on the CPU: the kernels' answer, the reference backend's bits; with
    ``fused_kernels=False`` and through TorchScript the torch code (the same answer within
    rounding: torch sums the differences in its own order)."""
    rng = np.random.default_rng(m)
    X = rng.normal(size=(m, d))
    model = KNeighborsRegressor(5, metric=metric, p=p, weights="distance").fit(
        X, rng.normal(size=(m, 2)))
    Q = _rows(rng, X, 400)
    want = peregrine.compile(model, "reference").predict(Q)
    _bits_equal(peregrine.compile(model, "torch").predict(Q), want, "torch, kernels")
    op_by_op = peregrine.compile(model, "torch",
                                 options=peregrine.CompileOptions(fused_kernels=False))
    for other in (op_by_op, peregrine.compile(model, "torchscript")):
        np.testing.assert_allclose(other.predict(Q), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(want, model.predict(Q), rtol=1e-5, atol=1e-6)
