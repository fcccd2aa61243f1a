"""KNN's neighbour search (reference_neighbours, and the torch lowering that mirrors it) against
the specification computed the slow way: every distance from its differences, a stable sort.
The expanded-form candidates, the partition and the per-row safety check must never change
which neighbours are chosen, ties included."""

from __future__ import annotations

import numpy as np
import pytest

from peregrine.ir.semantics import neighbours as rn

torch = pytest.importorskip("torch")

from peregrine.backends.torch.ops_kernel import Knn  # noqa: E402
from peregrine.ir import GraphBuilder, Op  # noqa: E402


def _spec(x, v, metric, p, k):
    """The definition: all distances from differences, a stable sort's first k."""
    d = x[:, None, :] - v[None, :, :]
    with np.errstate(over="ignore"):
        return _reduce_then_sort(d, metric, p, k)


def _reduce_then_sort(d, metric, p, k):
    if metric == "euclidean":
        dist = np.sqrt(np.einsum("ijk,ijk->ij", d, d))
    elif metric == "manhattan":
        dist = np.abs(d).sum(axis=2)
    elif metric == "chebyshev":
        dist = np.abs(d).max(axis=2)
    else:
        dist = (np.abs(d) ** p).sum(axis=2) ** (1.0 / p)
    idx = np.argsort(dist, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(dist, idx, axis=1), idx


def _torch_nearest(x, v, metric, p, k):
    g = GraphBuilder()
    xin = g.input(v.shape[1])
    node = g.add(Op.KNN, (xin,), width=1, metric=metric, p=p, vectors=v, k=k,
                 weights="uniform", values=np.ones((len(v), 1)), normalize=False)
    module = Knn(g.build({"y": node}).by_name[node])
    near, idx = module._nearest(torch.from_numpy(x))
    return near.numpy(), idx.numpy()


def _data(kind, seed=0, n=300, m=400, d=6):
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        return rng.standard_normal((n, d)), rng.standard_normal((m, d))
    if kind == "grid":  # small integers: many exactly equal distances
        return (rng.integers(-2, 3, (n, d)).astype(float),
                rng.integers(-2, 3, (m, d)).astype(float))
    if kind == "duplicates":  # fitted rows repeated, queries on them
        v = np.repeat(rng.standard_normal((m // 4, d)), 4, axis=0)
        return np.concatenate([v[:n // 2], rng.standard_normal((n - n // 2, d))]), v
    if kind == "offset":  # far from the origin: the expanded form loses digits
        return 1e6 + rng.standard_normal((n, d)), 1e6 + rng.standard_normal((m, d))
    if kind == "huge":  # squares overflow: every row takes the checked fallback
        return 1e160 * rng.standard_normal((n, d)), 1e160 * rng.standard_normal((m, d))
    raise ValueError(kind)


METRICS = [("euclidean", 2.0), ("minkowski", 2.0), ("manhattan", 1.0), ("chebyshev", 1.0),
           ("minkowski", 3.0)]


@pytest.mark.parametrize("kind", ["gaussian", "grid", "duplicates", "offset", "huge"])
@pytest.mark.parametrize("metric, p", METRICS, ids=[f"{m}-{p}" for m, p in METRICS])
@pytest.mark.parametrize("k", [1, 5, 30])
def test_nearest_is_the_specification(kind, metric, p, k):
    x, v = _data(kind)
    want_d, want_i = _spec(x, v, metric, p, k)
    got_d, got_i = rn.nearest(x, v, metric, p, k)
    assert np.array_equal(got_i, want_i)
    assert np.array_equal(got_d, want_d)
    # torch reduces the differences in its own order: the same distances up to rounding
    # (these data have no near-ties that rounding could reorder)
    t_d, t_i = _torch_nearest(x, v, metric, p, k)
    assert np.array_equal(t_i, want_i)
    np.testing.assert_allclose(t_d, want_d, rtol=1e-13, atol=0)


def test_smallest_breaks_ties_by_index():
    dist = np.array([[3.0, 1.0, 1.0, 2.0, 1.0, 0.5],
                     [2.0, 2.0, 2.0, 2.0, 2.0, 2.0],
                     [np.inf, 0.0, np.inf, 0.0, np.inf, 0.0]])
    for k in range(1, 7):
        want = np.argsort(dist, axis=1, kind="stable")[:, :k]
        assert np.array_equal(rn.smallest(dist, k), want)


def test_smallest_with_nan_keeps_the_sort_order():
    dist = np.array([[np.nan, 1.0, np.nan, 0.0], [1.0, np.nan, 2.0, 3.0]])
    for k in range(1, 5):
        assert np.array_equal(rn.smallest(dist, k),
                              np.argsort(dist, axis=1, kind="stable")[:, :k])


def test_rows_failing_the_check_are_recomputed(monkeypatch):
    # an error bound so large that no row passes: every row goes the specification's way
    x, v = _data("grid", seed=3)
    monkeypatch.setattr(rn, "ERROR_BOUND", 1e12)
    want = _spec(x, v, "euclidean", 2.0, 7)
    got = rn.nearest(x, v, "euclidean", 2.0, 7)
    assert np.array_equal(got[1], want[1]) and np.array_equal(got[0], want[0])


def test_chunks_and_zero_rows():
    x, v = _data("gaussian", n=5000, m=1000)
    want = _spec(x[:50], v, "euclidean", 2.0, 3)
    got = rn.nearest(x, v, "euclidean", 2.0, 3)  # 5000 x 1000 spans several chunks
    assert np.array_equal(got[1][:50], want[1])
    assert rn.nearest(x[:0], v, "euclidean", 2.0, 3)[1].shape == (0, 3)
    assert _torch_nearest(x[:0], v, "euclidean", 2.0, 3)[1].shape == (0, 3)


# ------------------------------------------------ seuclidean and mahalanobis (issue #11) --

def _whitened_models():
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

    rng = np.random.default_rng(3)
    x = rng.normal(size=(80, 5)) @ rng.normal(size=(5, 5)) + 2.0
    y = (x[:, 0] + x[:, 1] > 4.0).astype(int) + (x[:, 2] > 2.0)
    params = {"seuclidean": {"V": x.var(axis=0)},
              "mahalanobis": {"VI": np.linalg.inv(np.cov(x.T))}}
    models = {}
    for metric, mp in params.items():
        for algo in ("auto", "brute"):
            for weights in ("uniform", "distance"):
                kw = {"metric": metric, "metric_params": mp, "algorithm": algo,
                      "weights": weights}
                models[f"{metric}-{algo}-{weights}-clf"] = KNeighborsClassifier(5, **kw).fit(x, y)
                models[f"{metric}-{algo}-{weights}-reg"] = KNeighborsRegressor(4, **kw).fit(
                    x, x[:, 3])
            # k=1 on the row index: predict is the nearest neighbour itself
            models[f"{metric}-{algo}-index"] = KNeighborsRegressor(
                1, metric=metric, metric_params=mp, algorithm=algo).fit(x, np.arange(80.0))
    rows = np.vstack([x, rng.normal(size=(60, 5)) @ rng.normal(size=(5, 5)) + 2.0,
                      x[:5] * 10.0])
    return models, rows


WHITENED, WHITENED_ROWS = _whitened_models()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", ["reference", "torch", "torchscript", "native", "tvm"])
@pytest.mark.parametrize("name", list(WHITENED))
def test_seuclidean_and_mahalanobis_match_sklearn(name, backend, dtype):
    import peregrine
    from peregrine.backends import available_backends

    if backend not in available_backends():
        pytest.skip(f"backend {backend} not available")
    model = WHITENED[name]
    rows = WHITENED_ROWS.astype(dtype)
    fast = peregrine.compile(model, backend)
    if name.endswith("index"):  # the same neighbour, exactly
        np.testing.assert_array_equal(fast.predict(rows), model.predict(rows))
        return
    np.testing.assert_allclose(fast.predict(rows), model.predict(rows), rtol=1e-5, atol=1e-6)
    if hasattr(model, "predict_proba"):
        np.testing.assert_allclose(fast.predict_proba(rows), model.predict_proba(rows),
                                   rtol=1e-5, atol=1e-6)


def test_whitened_metrics_refuse_what_sklearn_computes_differently():
    from sklearn.neighbors import KNeighborsRegressor

    import peregrine
    from peregrine.errors import UnsupportedModelError

    x = np.random.default_rng(4).normal(size=(30, 3))
    bad_vi = -np.eye(3)  # negative form: sklearn's distances are NaN
    model = KNeighborsRegressor(3, metric="mahalanobis", metric_params={"VI": bad_vi},
                                algorithm="brute").fit(x, x[:, 0])
    with pytest.raises(UnsupportedModelError, match="mahalanobis"):
        peregrine.compile(model, "reference")
    model = KNeighborsRegressor(3, metric="seuclidean", metric_params={"V": np.zeros(3)},
                                algorithm="brute").fit(x, x[:, 0])
    with pytest.raises(UnsupportedModelError, match="seuclidean"):
        peregrine.compile(model, "reference")


@pytest.mark.parametrize("algorithm", ["kd_tree", "ball_tree", "brute"])
def test_ties_at_the_kth_neighbour_take_the_lowest_index(algorithm):
    """Where the k-th and the (k+1)-th nearest fitted rows are at the same distance, which of
    them counts is an implementation detail of scikit-learn (the KD or ball tree's traversal,
    the brute search's heaps) on which its own algorithms disagree; the compiled model takes
    the lowest index (docs/exactness.md, "Nearest neighbours: ties"). Every other row gets
    scikit-learn's answer exactly. Integer-valued features, where such ties are common."""
    from sklearn.neighbors import KNeighborsClassifier

    import peregrine

    rng = np.random.default_rng(0)
    x = rng.integers(0, 8, size=(500, 3)).astype(float)
    y = rng.integers(0, 3, 500)
    rows = rng.integers(0, 8, size=(300, 3)).astype(float)
    k = 5
    model = KNeighborsClassifier(k, algorithm=algorithm).fit(x, y)
    fast = peregrine.compile(model, "native")
    d = np.sqrt(((rows[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    order = np.argsort(d, axis=1, kind="stable")
    edge = np.take_along_axis(d, order[:, k - 1 : k + 1], axis=1)
    untied = edge[:, 0] < edge[:, 1]
    assert 30 < untied.sum() < len(rows) - 30  # both kinds of rows are there
    np.testing.assert_array_equal(fast.predict_proba(rows[untied]),
                                  model.predict_proba(rows[untied]))
    np.testing.assert_array_equal(fast.predict(rows[untied]), model.predict(rows[untied]))
    votes = y[order[:, :k]]  # the lowest-index k nearest, every row
    want = np.stack([(votes == c).sum(1) for c in range(3)], axis=1) / k
    np.testing.assert_array_equal(fast.predict_proba(rows), want)
    np.testing.assert_array_equal(fast.predict(rows), model.classes_[np.argmax(want, axis=1)])
