"""Torch and TorchScript backends against the NumPy reference (the oracle).

Synthetic Forests cover every semantic feature of the Forest decision rule: NaN default
directions, LightGBM zero-as-missing, categorical splits under both truncation rules, ``<`` with
float32 library inputs and ``<=`` with float64, vector and grouped leaves, averaging, +-inf
thresholds. Each is compiled with all three strategies for both backends and compared with
``semantics.evaluate`` on rows holding NaN, +-inf, -0.0, threshold hits and their float32/float64
neighbours, and category codes in and out of range. Leaves reached must be identical (checked
per tree for the eager module); outputs within rtol 1e-5 / atol 1e-6 (in practice they differ
only by the summation order of float64 leaf values).
"""

from __future__ import annotations

import functools
import threading

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peregrine.backends.torch import LINKS, LOWERINGS, TorchBackend
from peregrine.backends.torch import trees as torch_trees
from peregrine.backends.torchscript import TorchScriptBackend
from peregrine.errors import UnsupportedModelError
from peregrine.ir import (
    Aggregation,
    Comparison,
    GraphBuilder,
    Link,
    Op,
    bitset_from_categories,
    concat_trees,
    make_forest,
    semantics,
)
from peregrine.ir.semantics import trees
from peregrine.ir.spec import MethodSpec, ModelSpec
from peregrine.options import CompileOptions, Precision, TreeStrategy
from peregrine.runtime.compiled import build

RTOL, ATOL = 1e-5, 1e-6
STRATEGIES = [TreeStrategy.GEMM, TreeStrategy.TREE_TRAVERSAL, TreeStrategy.PERFECT_TREE_TRAVERSAL]
BACKENDS = {"torch": TorchBackend, "torchscript": TorchScriptBackend}
# Thresholds: exact grid values (rows hit them), values float32 cannot hold (0.1, 1/3, jitter)
GRID = np.array([-2.5, -1.0, -0.0, 0.0, 0.1, 0.3, 1.0, 1.5, 2.0, 7.25, 1e-36, 1 / 3, 3.0, 31.0])
SPECIAL = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-36, -1e-36, 1e-35, -1e-35, -999.0]
CATEGORY_CODES = [-1.0, -0.5, 0.5, 1.0, 1.7, 31.0, 32.0, 33.0, 63.0, 64.0, 1000.0, 2.0**31]


def random_forest(seed: int, *, n_trees=6, max_depth=5, n_features=5, n_outputs=1, vector=True,
                  cat=False, mz=False, comparison=Comparison.LE, input_dtype=np.float64,
                  aggregation=Aggregation.SUM, neg_before=True, n_words=2, split_prob=0.8):
    """Random trees; features 0 and 1 split categorically when ``cat``."""
    rng = np.random.default_rng(seed)
    parts, bitsets, unknown = [], [], []
    for _ in range(n_trees):
        t = {k: [] for k in ("feature", "threshold", "left", "right", "nan_left", "value",
                             "missing_zero", "cat_index")}

        def grow(depth: int, t=t) -> int:
            i = len(t["feature"])
            for key, v in (("feature", -1), ("threshold", 0.0), ("left", -1), ("right", -1),
                           ("nan_left", False), ("missing_zero", False), ("cat_index", -1)):
                t[key].append(v)
            t["value"].append(rng.normal(size=n_outputs if vector else 1))
            if depth >= max_depth or (depth > 0 and rng.random() > split_prob):
                return i
            f = int(rng.integers(n_features))
            t["feature"][i] = f
            if cat and f < 2:
                t["cat_index"][i] = len(bitsets)
                codes = rng.choice(32 * n_words, size=int(rng.integers(1, 12)), replace=False)
                bitsets.append(bitset_from_categories(np.append(codes, [0, 1][: i % 3]), n_words))
                unknown.append(bool(rng.random() < 0.5))
            elif rng.random() < 0.05:
                t["threshold"][i] = float(rng.choice([np.inf, -np.inf]))
            else:
                jitter = rng.normal() * 1e-9 if rng.random() < 0.3 else 0.0
                t["threshold"][i] = float(rng.choice(GRID)) + jitter
            t["nan_left"][i] = bool(rng.random() < 0.5)
            t["missing_zero"][i] = bool(mz and rng.random() < 0.4)
            t["left"][i] = grow(depth + 1)
            t["right"][i] = grow(depth + 1)
            return i

        grow(0)
        t["value"] = np.array(t["value"])
        parts.append(t)
    arrays = concat_trees(parts)
    extra = {}
    if cat:
        extra = {"cat_bitsets": np.array(bitsets), "cat_unknown_left": np.array(unknown)}
    else:
        arrays.pop("cat_index")
    if not mz:
        arrays.pop("missing_zero")
    return make_forest(
        **arrays, **extra, n_features=n_features, n_outputs=n_outputs,
        tree_group=None if vector else np.arange(n_trees) % n_outputs,
        base_score=rng.normal(size=n_outputs), comparison=comparison,
        input_dtype=np.dtype(input_dtype), aggregation=aggregation,
        cat_negative_before_trunc=neg_before,
    )


FORESTS = {
    "le-f64-nan": dict(),
    "lt-f32-xgboost": dict(comparison=Comparison.LT, input_dtype=np.float32),
    "le-f32-sklearn-avg": dict(input_dtype=np.float32, n_outputs=3,
                               aggregation=Aggregation.AVERAGE),
    "missing-zero": dict(mz=True),
    "cat-negative-before-trunc": dict(cat=True, neg_before=True, n_words=1),
    "cat-trunc-first-lightgbm": dict(cat=True, neg_before=False, mz=True),
    "grouped-multiclass": dict(vector=False, n_outputs=3, n_trees=9),
    "grouped-average-cat": dict(vector=False, n_outputs=3, n_trees=7, cat=True,
                                aggregation=Aggregation.AVERAGE),
    "deep-sparse": dict(max_depth=11, n_trees=3, split_prob=0.7),
    "single-leaf-trees": dict(max_depth=0, n_trees=3, n_outputs=2),
}


@functools.cache
def forest(kind: str):
    return random_forest(sorted(FORESTS).index(kind), **FORESTS[kind])


def candidates(f) -> np.ndarray:
    """Values worth putting in a row: thresholds, their float32/float64 neighbours, specials."""
    t = f.threshold[np.isfinite(f.threshold)]
    t32 = t.astype(np.float32)
    near = [t, np.nextafter(t, -np.inf), np.nextafter(t, np.inf), t32.astype(np.float64),
            np.nextafter(t32, np.float32(-np.inf)).astype(np.float64),
            np.nextafter(t32, np.float32(np.inf)).astype(np.float64)]
    return np.unique(np.concatenate(near + [GRID, SPECIAL, CATEGORY_CODES]))


def edge_rows(f, n: int = 400, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.choice(candidates(f), size=(n, f.n_features))
    X[:8] = np.array(SPECIAL[:8])[:, None]  # whole rows of one special value
    return X


def make_spec(f) -> ModelSpec:
    """Every op and Link kind on top of one tree ensemble."""
    K = f.n_outputs
    g = GraphBuilder()
    x = g.input(f.n_features)
    x = g.add(Op.REPLACE_WITH_NAN, (x,), width=f.n_features, value=-999.0)
    raw = g.add(Op.TREE_ENSEMBLE, (x,), width=K, forest=f)
    sig = g.add(Op.LINK, (raw,), width=K, kind=Link.SIGMOID, scale=0.5)
    outs = {
        "raw": raw,
        "identity": g.add(Op.LINK, (raw,), width=K, kind=Link.IDENTITY),
        "sigmoid": sig,
        "softmax": g.add(Op.LINK, (raw,), width=K, kind=Link.SOFTMAX),
        "exp": g.add(Op.LINK, (raw,), width=K, kind=Link.EXP),
        "isolation": g.add(Op.LINK, (raw,), width=K, kind=Link.ISOLATION_SCORE,
                           denominator=3.7),
        "affine": g.add(Op.AFFINE, (raw,), width=K, scale=np.linspace(0.5, 2.0, K), shift=0.25),
        "binary": g.add(Op.BINARY_PROBA, (sig,), width=2),
        "argmax": g.add(Op.ARGMAX, (raw,), dtype="int64", width=1),
        "threshold": g.add(Op.THRESHOLD, (raw,), dtype="int64", width=1, value=0.0,
                           strict=False),
    }
    graph = g.build(outs)
    return ModelSpec(graph, {"predict": MethodSpec("argmax", squeeze=True, dtype="int64")},
                     f.n_features, "tests.synthetic")


OUTPUTS = ("raw", "identity", "sigmoid", "softmax", "exp", "isolation", "affine", "binary",
           "argmax", "threshold")


@functools.cache
def spec(kind: str) -> ModelSpec:
    return make_spec(forest(kind))


@functools.cache
def executable(kind: str, backend: str, strategy: TreeStrategy,
               precision: Precision = Precision.AUTO):
    options = CompileOptions(tree_strategy=strategy, precision=precision)
    return BACKENDS[backend].compile(spec(kind), options, "cpu")


def tree_module(exe):
    (low,) = [v for v in exe._lowered.values() if v.info is not None]
    return low.module


def check(kind: str, backend: str, strategy: TreeStrategy, X: np.ndarray,
          precision: Precision = Precision.AUTO) -> None:
    exe = executable(kind, backend, strategy, precision)
    options = CompileOptions(precision=precision)
    want = semantics.evaluate(spec(kind).graph, X, OUTPUTS, options)
    got = exe.run(X, OUTPUTS)
    where = f"{kind} {backend}/{strategy.value} {X.dtype}"
    for name in OUTPUTS:
        assert got[name].shape == want[name].shape, f"{where} {name} shape"
        if want[name].dtype.kind == "i":
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{where} {name}")
        else:
            np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL,
                                       err_msg=f"{where} {name}")
    if backend == "torch":  # decisions: the very leaf reached in every tree
        Xn = np.where(X == -999.0, np.nan, X).astype(X.dtype)
        leaves = tree_module(exe).leaf_nodes(torch.from_numpy(Xn)).numpy()
        ref = trees.forest_leaves(forest(kind), Xn, precision)
        np.testing.assert_array_equal(leaves, ref, err_msg=f"{where} leaves")
    else:  # TorchScript runs the same ops: bit-identical to the eager module
        eager = executable(kind, "torch", strategy, precision).run(X, OUTPUTS)
        for name in OUTPUTS:
            np.testing.assert_array_equal(got[name], eager[name], err_msg=f"{where} {name}")


# ------------------------------------------------------------------------------ tests --
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.value)
@pytest.mark.parametrize("kind", sorted(FORESTS))
def test_edge_rows_match_reference(kind, strategy, backend, dtype):
    with np.errstate(over="ignore"):
        X = edge_rows(forest(kind)).astype(dtype)
    check(kind, backend, strategy, X)


def _rows(kind: str):
    f = forest(kind)
    value = st.sampled_from(candidates(f).tolist())
    return st.lists(st.lists(value, min_size=f.n_features, max_size=f.n_features),
                    min_size=1, max_size=30).map(np.array)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.value)
@pytest.mark.parametrize("kind", sorted(FORESTS))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_rows_match_reference(kind, strategy, data):
    X = data.draw(_rows(kind))
    dtype = data.draw(st.sampled_from(["float64", "float32"]))
    backend = data.draw(st.sampled_from(sorted(BACKENDS)))
    with np.errstate(over="ignore"):
        check(kind, backend, strategy, X.astype(dtype))


@pytest.mark.parametrize("precision", [Precision.FLOAT32, Precision.FLOAT64])
@pytest.mark.parametrize("kind", ["le-f64-nan", "lt-f32-xgboost", "cat-trunc-first-lightgbm"])
def test_forced_precision_matches_reference(kind, precision):
    X = edge_rows(forest(kind))
    for dtype in ("float64", "float32"):
        for strategy in STRATEGIES:
            exe = executable(kind, "torch", strategy, precision)
            want = semantics.evaluate(spec(kind).graph, X.astype(dtype), ("raw",),
                                      CompileOptions(precision=precision))["raw"]
            got = exe.run(X.astype(dtype), ("raw",))["raw"]
            # FLOAT32 also sums leaf values in float32
            tol = 1e-5 if precision is Precision.FLOAT32 else 1e-12
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
            leaves = tree_module(exe).leaf_nodes(torch.from_numpy(X.astype(dtype))).numpy()
            ref = trees.forest_leaves(forest(kind), X.astype(dtype), precision)
            np.testing.assert_array_equal(leaves, ref)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.value)
def test_chunked_batches_equal_whole_batches(strategy, monkeypatch):
    kind = "cat-trunc-first-lightgbm"
    X = edge_rows(forest(kind), n=1000, seed=3)
    whole = executable(kind, "torch", strategy).run(X, OUTPUTS)
    monkeypatch.setattr(torch_trees, "TRAVERSAL_CHUNK", 64)
    monkeypatch.setattr(torch_trees, "GEMM_CHUNK", 64)
    exe = TorchBackend.compile(spec(kind), CompileOptions(tree_strategy=strategy), "cpu")
    assert tree_module(exe).chunk_rows < 100
    chunked = exe.run(X, OUTPUTS)
    for name in OUTPUTS:
        np.testing.assert_array_equal(chunked[name], whole[name])


def test_tensor_inputs_and_odd_numpy_layouts():
    kind = "le-f64-nan"
    exe = executable(kind, "torch", TreeStrategy.TREE_TRAVERSAL)
    X = edge_rows(forest(kind), n=64)
    want = exe.run(X, ("raw",))["raw"]
    assert exe.accepts_tensors
    np.testing.assert_array_equal(exe.run(torch.from_numpy(X), ("raw",))["raw"], want)
    wide = torch.from_numpy(np.repeat(X, 2, axis=1))[:, ::2]  # non-contiguous tensor
    np.testing.assert_array_equal(exe.run(wide, ("raw",))["raw"], want)
    frozen = X.copy()
    frozen.flags.writeable = False
    np.testing.assert_array_equal(exe.run(frozen, ("raw",))["raw"], want)
    np.testing.assert_array_equal(exe.run(X[::-1], ("raw",))["raw"], want[::-1])
    np.testing.assert_array_equal(exe.run(np.asfortranarray(X), ("raw",))["raw"], want)
    (t,) = exe.forward_tensors(torch.from_numpy(X), ("raw",))
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float64


def test_concurrent_calls_give_single_threaded_answers():
    kind = "grouped-average-cat"
    model = build(spec(kind), "torch", CompileOptions(tree_strategy=TreeStrategy.GEMM), "cpu")
    X = edge_rows(forest(kind), n=600, seed=5)
    slices = [X[i * 75 : (i + 1) * 75] for i in range(8)]
    want = [model.predict(s) for s in slices]
    got: list = [None] * 8
    errors: list = []
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(20):
                out = model.predict(slices[i])
                assert np.array_equal(out, want[i])
            got[i] = out
        except BaseException as exc:  # noqa: BLE001 - reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(8):
        np.testing.assert_array_equal(got[i], want[i])


def test_n_threads_is_applied_per_call_and_restored(monkeypatch):
    seen = []
    kind = "le-f64-nan"
    exe = TorchBackend.compile(spec(kind), CompileOptions(n_threads=1), "cpu")
    before = torch.get_num_threads()
    module = tree_module(exe)
    original = module._aggregate

    def spy(leaves):
        seen.append(torch.get_num_threads())
        return original(leaves)

    monkeypatch.setattr(module, "_aggregate", spy)
    exe.run(edge_rows(forest(kind), n=16), ("raw",))
    assert seen == [1]
    assert torch.get_num_threads() == before
    assert exe.explain()["n_threads"] == 1


def test_explain_reports_choices():
    exe = executable("lt-f32-xgboost", "torchscript", TreeStrategy.PERFECT_TREE_TRAVERSAL)
    info = exe.explain()
    assert info["backend"] == "torchscript"
    assert info["strategy"] == "perfect_tree_traversal"
    assert "CompileOptions" in info["reason"]
    assert info["n_trees"] == 6 and info["max_depth"] == forest("lt-f32-xgboost").max_depth()
    # XGBoost compares in float32 whatever the input: float32 decisions for both dtypes
    assert info["compute_dtype"] == {"float32 input": "float32", "float64 input": "float32"}
    assert info["accumulate_dtype"] == "float64"
    auto = TorchBackend.compile(spec("le-f64-nan"), CompileOptions(), "cpu").explain()
    assert auto["compute_dtype"] == {"float32 input": "float32", "float64 input": "float64"}
    assert auto["strategy"] in {s.value for s in STRATEGIES} and auto["reason"]


def test_every_reference_op_and_link_has_a_lowering():
    missing = [op.value for op in semantics.DEFS if op not in LOWERINGS and op is not Op.INPUT]
    assert not missing, f"ops without a torch lowering: {missing}"
    assert set(LINKS) == set(Link)


def test_missing_lowering_raises_naming_the_op(monkeypatch):
    monkeypatch.delitem(LOWERINGS, Op.ARGMAX)
    with pytest.raises(UnsupportedModelError, match="argmax"):
        TorchBackend.compile(spec("le-f64-nan"), CompileOptions(), "cpu")


def test_unknown_link_raises(monkeypatch):
    monkeypatch.delitem(LINKS, Link.SOFTMAX)
    with pytest.raises(UnsupportedModelError, match="softmax"):
        TorchScriptBackend.compile(spec("le-f64-nan"), CompileOptions(), "cpu")


def test_replace_with_nan_compare_dtype():
    f = forest("lt-f32-xgboost")
    g = GraphBuilder()
    x = g.input(f.n_features)
    x = g.add(Op.REPLACE_WITH_NAN, (x,), width=f.n_features, value=0.1, compare_dtype="float32")
    raw = g.add(Op.TREE_ENSEMBLE, (x,), width=1, forest=f)
    s = ModelSpec(g.build({"raw": raw}), {}, f.n_features, "tests.synthetic")
    X = edge_rows(f, n=200)
    X[::3, 1] = 0.1  # float32(0.1) == float32(missing): NaN
    X[1::3, 2] = float(np.float32(0.1))
    for backend in BACKENDS.values():
        got = backend.compile(s, CompileOptions(), "cpu").run(X, ("raw",))["raw"]
        want = semantics.evaluate(s.graph, X, ("raw",))["raw"]
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_ordinal_encode_matches_reference():
    f = forest("cat-trunc-first-lightgbm")
    g = GraphBuilder()
    x = g.input(f.n_features)
    cats = [np.array([-1.0, 0.0, 2.5, 7.0, np.inf]), np.array([1.0, 3.0]), np.array([])]
    x = g.add(Op.ORDINAL_ENCODE, (x,), width=f.n_features, columns=[0, 1, 3], categories=cats)
    raw = g.add(Op.TREE_ENSEMBLE, (x,), width=1, forest=f)
    s = ModelSpec(g.build({"enc": x, "raw": raw}), {}, f.n_features, "tests.synthetic")
    X = edge_rows(f, n=300)
    X[::4, 0] = 2.5
    X[1::4, 0] = -0.0
    X[2::4, 1] = 3.0
    for backend in BACKENDS.values():
        exe = backend.compile(s, CompileOptions(), "cpu")
        for dtype in ("float64", "float32"):
            got = exe.run(X.astype(dtype), ("enc", "raw"))
            want = semantics.evaluate(s.graph, X.astype(dtype), ("enc", "raw"))
            np.testing.assert_array_equal(got["enc"], want["enc"])
            np.testing.assert_allclose(got["raw"], want["raw"], rtol=RTOL, atol=ATOL)


def test_rebuild_is_deterministic():
    kind = "grouped-multiclass"
    a = TorchBackend.compile(spec(kind), CompileOptions(), "cpu")
    b = TorchBackend.compile(spec(kind), CompileOptions(), "cpu")
    assert a.artifact_state() == b.artifact_state()
    sa, sb = tree_module(a).state_dict(), tree_module(b).state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def test_save_load_round_trip(tmp_path):
    sklearn = pytest.importorskip("sklearn.ensemble")
    import peregrine

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 6))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    model = sklearn.RandomForestClassifier(8, max_depth=6, random_state=0).fit(X, y)
    for backend in BACKENDS:
        compiled = peregrine.compile(model, backend)
        compiled.save(tmp_path / f"{backend}.pgn")
        loaded = peregrine.load(tmp_path / f"{backend}.pgn")
        np.testing.assert_array_equal(loaded.predict_proba(X), compiled.predict_proba(X))
        np.testing.assert_allclose(loaded.predict_proba(X), model.predict_proba(X), rtol=RTOL)
        assert loaded.explain_dict()["backend_choices"]["strategy"] == \
            compiled.explain_dict()["backend_choices"]["strategy"]


def test_bad_device_is_a_typed_error():
    with pytest.raises(UnsupportedModelError):
        TorchBackend.compile(spec("le-f64-nan"), CompileOptions(), "tpu")
    if not torch.cuda.is_available():
        with pytest.raises(UnsupportedModelError, match="CUDA"):
            TorchBackend.compile(spec("le-f64-nan"), CompileOptions(), "cuda")


# -------------------------------------------------------------------------------- GPU --
@pytest.mark.gpu
@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.value)
def test_cuda_matches_cpu(strategy, backend):
    kind = "cat-trunc-first-lightgbm"
    X = edge_rows(forest(kind))
    cpu = BACKENDS[backend].compile(spec(kind), CompileOptions(tree_strategy=strategy), "cpu")
    want = cpu.run(X, OUTPUTS)
    gpu = BACKENDS[backend].compile(spec(kind), CompileOptions(tree_strategy=strategy), "cpu")
    gpu = gpu.to("cuda")
    assert gpu.device.startswith("cuda")
    for inputs in (X, torch.from_numpy(X).cuda(), torch.from_numpy(X.astype(np.float32)).cuda()):
        got = gpu.run(inputs, OUTPUTS)
        ref = want if not (isinstance(inputs, torch.Tensor) and inputs.dtype == torch.float32) \
            else cpu.run(X.astype(np.float32), OUTPUTS)
        for name in OUTPUTS:
            np.testing.assert_allclose(got[name], ref[name], rtol=RTOL, atol=ATOL)
    (t,) = gpu.forward_tensors(torch.from_numpy(X).cuda(), ("raw",))
    assert t.is_cuda  # stays on the device: no host round trip
