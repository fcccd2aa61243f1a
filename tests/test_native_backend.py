"""Native (LLVM) backend against the NumPy reference on synthetic forests that exercise every
semantic feature of the Forest: NaN default directions, the missing-zero band, categorical
splits (both truncation rules), ``<`` with float32 inputs and ``<=`` with float64 inputs,
vector and grouped leaves, averaging; on rows holding NaN, +-inf, -0.0 and threshold edges.
The library-level checks live in tests/conformance (``-k native``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import peregrine  # noqa: E402
from peregrine.backends.native import NativeBackend, Schedule, compile_spec  # noqa: E402
from peregrine.backends.native import tune as native_schedule  # noqa: E402
from peregrine.errors import InputError, UnsupportedModelError  # noqa: E402
from peregrine.ir import (  # noqa: E402
    Aggregation,
    Comparison,
    GraphBuilder,
    Link,
    Op,
    bitset_from_categories,
    concat_trees,
    make_forest,
    semantics,  # noqa: E402
)
from peregrine.ir.spec import MethodSpec, ModelSpec  # noqa: E402
from peregrine.kernels import jit  # noqa: E402
from peregrine.options import CompileOptions  # noqa: E402
from peregrine.runtime.compiled import build  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6
SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-36, -1e-36, 1e-35, 1.0, -1.0, 0.5, -0.5,
            2.5, 3.0, 7.0, 33.0, 40.0, 63.0, 64.0, 1e30]


# ------------------------------------------------------------------------------ builders --
def random_tree(rng, n_features, depth, p_leaf, width, n_cat, missing_zero):
    cols = {k: [] for k in ("feature", "threshold", "left", "right", "nan_left", "value",
                            "missing_zero", "cat_index")}

    def add(d):
        i = len(cols["feature"])
        for k, v in (("feature", -1), ("threshold", 0.0), ("left", -1), ("right", -1),
                     ("nan_left", False), ("missing_zero", False), ("cat_index", -1)):
            cols[k].append(v)
        cols["value"].append(rng.normal(size=width))
        if d < depth and (d == 0 or rng.random() > p_leaf):
            cols["feature"][i] = int(rng.integers(n_features))
            cols["threshold"][i] = float(rng.choice(
                [rng.normal(), 0.0, 1.0, -1.0, 0.5, np.inf, -np.inf, 1e-36, 3.0, 0.1]))
            cols["nan_left"][i] = bool(rng.random() < 0.5)
            cols["missing_zero"][i] = bool(missing_zero and rng.random() < 0.3)
            if n_cat and rng.random() < 0.3:
                cols["cat_index"][i] = int(rng.integers(n_cat))
            cols["left"][i] = add(d + 1)
            cols["right"][i] = add(d + 1)
        return i

    add(0)
    return {k: np.array(v) for k, v in cols.items()}


def random_forest(seed=0, n_trees=12, n_features=6, depth=5, width=1, n_outputs=1,
                  groups=False, cat=False, missing_zero=False, p_leaf=0.2, **scalars):
    rng = np.random.default_rng(seed)
    n_cat = 5 if cat else 0
    parts = [random_tree(rng, n_features, depth, p_leaf, width, n_cat, missing_zero)
             for _ in range(n_trees)]
    a = concat_trees(parts)
    kw = {}
    if cat:
        kw["cat_index"] = a["cat_index"]
        kw["cat_bitsets"] = np.stack([bitset_from_categories(rng.choice(64, 20, replace=False), 2)
                                      for _ in range(n_cat)])
        kw["cat_unknown_left"] = rng.random(n_cat) < 0.5
    if missing_zero:
        kw["missing_zero"] = a["missing_zero"]
    return make_forest(
        feature=a["feature"], threshold=a["threshold"], left=a["left"], right=a["right"],
        nan_left=a["nan_left"], value=a["value"], tree_offsets=a["tree_offsets"],
        n_features=n_features, n_outputs=n_outputs,
        tree_group=rng.integers(n_outputs, size=n_trees) if groups else None,
        base_score=rng.normal(size=n_outputs), **kw, **scalars)


def edge_rows(forest, n=257, seed=1):
    """Normal rows salted with specials, the thresholds themselves and their float32/float64
    neighbours (where ``<`` and ``<=`` and the float32 rounding of thresholds differ)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, forest.n_features))
    t = forest.threshold[forest.feature >= 0]
    t = t[np.isfinite(t)]
    picks = [np.array(SPECIALS), t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf),
             np.nextafter(t.astype(np.float32), np.float32(np.inf)).astype(np.float64),
             np.nextafter(t.astype(np.float32), np.float32(-np.inf)).astype(np.float64)]
    for values, p in zip(picks, (0.25, 0.15, 0.05, 0.05, 0.05, 0.05)):
        mask = rng.random(X.shape) < p
        X[mask] = rng.choice(values, size=int(mask.sum()))
    return X


def model_spec(forest, chain=(), allow_nan=True):
    g = GraphBuilder()
    node = g.add(Op.TREE_ENSEMBLE, (g.input(forest.n_features),), width=forest.n_outputs,
                 forest=forest)
    for op, attrs in chain:  # widths and dtypes inferred by the ops
        node = g.add(op, (node,), **attrs)
    graph = g.build({"predict": node})
    return ModelSpec(graph=graph, methods={"predict": MethodSpec("predict")},
                     n_features=forest.n_features, source="test.Forest", allow_nan=allow_nan)


def compiled(spec, schedule=None, **options):
    return build(spec, "native", CompileOptions(schedule=schedule, **options), "cpu")


def expected(spec, X):
    return semantics.evaluate(spec.graph, X, ("predict",))["predict"]


def check(spec, X, schedule=None, **options):
    model = compiled(spec, schedule, **options)
    for dtype in (np.float64, np.float32):
        Xd = X.astype(dtype)
        np.testing.assert_allclose(model.predict(Xd), expected(spec, Xd), rtol=RTOL, atol=ATOL,
                                   err_msg=f"{schedule} {np.dtype(dtype).name}")
    return model


# ------------------------------------------------------------------------------- cases ---
CASES = {
    "le-float64": dict(),
    "lt-float32": dict(comparison=Comparison.LT, input_dtype=np.dtype(np.float32)),
    "missing-zero": dict(missing_zero=True),
    "categorical": dict(cat=True),
    "categorical-trunc-first": dict(cat=True, cat_negative_before_trunc=False),
    "vector-leaves-average": dict(width=3, n_outputs=3, aggregation=Aggregation.AVERAGE),
    "grouped-leaves": dict(n_outputs=3, groups=True, n_trees=20),
    "grouped-average": dict(n_outputs=2, groups=True, aggregation=Aggregation.AVERAGE),
    "deep-sparse": dict(depth=14, p_leaf=0.35, n_trees=6),
    "wide-rows": dict(n_features=45, n_trees=40),
    "stumps": dict(depth=1, n_trees=3),
}
SCHEDULES = {
    "rows-simd": Schedule(),
    "rows-scalar": Schedule(vector_width=1, interleave=3, row_tile=7),
    "rows-v8-tiles": Schedule(vector_width=8, interleave=2, tree_tile=3, cache_rows=False,
                              loop_order="trees_outer"),
    "trees-simd": Schedule(lanes="trees", interleave=2),
    "trees-pairs": Schedule(lanes="trees", interleave=3, node_pairs=True),
    "rows-pairs": Schedule(interleave=2, node_pairs=True, row_tile=40),
    "trees-scalar": Schedule(lanes="trees", vector_width=1, interleave=4),
    "sparse-rows": Schedule(layout="sparse", interleave=3),
    "sparse-trees": Schedule(layout="sparse", lanes="trees"),
}


@pytest.mark.parametrize("case", CASES)
def test_matches_reference(case):
    forest = random_forest(**CASES[case])
    check(model_spec(forest), edge_rows(forest))


@pytest.mark.parametrize("name", SCHEDULES)
def test_schedules_give_identical_outputs(name):
    forest = random_forest(seed=3, cat=True, missing_zero=True, n_outputs=2, groups=True,
                           n_trees=37, comparison=Comparison.LT)
    spec, X = model_spec(forest), edge_rows(forest, n=301)
    got = check(spec, X, SCHEDULES[name]).predict(X)
    base = compiled(spec, Schedule()).predict(X)
    np.testing.assert_allclose(got, base, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["rows-simd", "trees-pairs", "sparse-rows"])
@pytest.mark.parametrize("case", ["vector-leaves-average", "deep-sparse", "wide-rows"])
def test_shapes_under_schedules(case, name):
    forest = random_forest(**CASES[case])
    check(model_spec(forest), edge_rows(forest), SCHEDULES[name])


def test_decisions_at_threshold_edges_are_exact():
    """One split per tree, left leaf 2**-tree: the sum spells out every decision exactly."""
    rng = np.random.default_rng(7)
    thresholds = np.concatenate([rng.normal(size=20), [0.1, 1 / 3, 1e-36, -np.inf, 1e300]])
    n = len(thresholds)
    for comparison, in_dtype in ((Comparison.LE, np.float64), (Comparison.LT, np.float32)):
        forest = make_forest(
            feature=np.tile([0, -1, -1], n),
            threshold=np.where(np.tile([True, False, False], n), np.repeat(thresholds, 3), 0.0),
            left=np.concatenate([[3 * i + 1, -1, -1] for i in range(n)]),
            right=np.concatenate([[3 * i + 2, -1, -1] for i in range(n)]),
            nan_left=np.tile([True, False, False], n),
            value=np.tile([0.0, 1.0, 0.0], n) * np.repeat(2.0 ** -np.arange(n), 3),
            tree_offsets=np.arange(n + 1) * 3, n_features=1, n_outputs=1,
            comparison=comparison, input_dtype=np.dtype(in_dtype))
        t = thresholds[np.isfinite(thresholds)]
        t32 = t[np.abs(t) < 1e38].astype(np.float32)
        xs = np.concatenate([t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf),
                             np.nextafter(t32, np.float32(np.inf)),
                             np.nextafter(t32, np.float32(-np.inf)), SPECIALS])[:, None]
        spec = model_spec(forest)
        for schedule in (Schedule(), Schedule(lanes="trees"), Schedule(vector_width=1)):
            model = compiled(spec, schedule)
            for dtype in (np.float64, np.float32):
                with np.errstate(over="ignore"):  # 1e300 becomes inf in float32, as intended
                    X = xs.astype(dtype)
                    want = expected(spec, X)
                np.testing.assert_array_equal(model.predict(X), want)


def test_float64_inputs_compare_in_float64():
    """Two inputs that round to the same float32 sit on either side of a float64 threshold."""
    t = 0.1
    forest = make_forest(feature=[0, -1, -1], threshold=[t, 0, 0], left=[1, -1, -1],
                         right=[2, -1, -1], nan_left=[False] * 3, value=[0.0, 1.0, 2.0],
                         tree_offsets=[0, 3], n_features=1, n_outputs=1)
    X = np.array([[t], [np.nextafter(t, 1.0)], [np.nextafter(t, 0.0)]])
    assert np.float32(X[0, 0]) == np.float32(X[1, 0])
    model = compiled(model_spec(forest))
    np.testing.assert_array_equal(model.predict(X).ravel(), [1.0, 2.0, 1.0])


@pytest.mark.parametrize("chain", [
    [(Op.LINK, {"kind": Link.SIGMOID}), (Op.BINARY_PROBA, {})],
    [(Op.LINK, {"kind": Link.SIGMOID, "scale": 2.5})],
    [(Op.AFFINE, {"scale": 0.5, "shift": np.array([1.0, -2.0, 3.0])}),
     (Op.LINK, {"kind": Link.SOFTMAX})],
    [(Op.LINK, {"kind": Link.EXP})],
    [(Op.LINK, {"kind": Link.ISOLATION_SCORE, "denominator": 7.5})],
    [(Op.LINK, {"kind": Link.SOFTMAX}), (Op.ARGMAX, {})],
    [(Op.LINK, {"kind": Link.SIGMOID}), (Op.THRESHOLD, {"value": 0.5})],
    [(Op.THRESHOLD, {"value": 0.0, "strict": False})],
], ids=["sigmoid-binary", "sigmoid-scaled", "affine-softmax", "exp", "isolation", "argmax",
        "threshold", "threshold-or-equal"])
def test_fused_epilogue(chain):
    n_outputs = 3 if any(k.get("kind") is Link.SOFTMAX for _, k in chain) else 1
    forest = random_forest(seed=5, n_outputs=n_outputs, groups=n_outputs > 1, n_trees=30)
    spec = model_spec(forest, chain)
    X = edge_rows(forest)
    for schedule in (None, Schedule(lanes="trees")):
        model = compiled(spec, schedule)
        for rows in (X, X[:1], X[:5]):
            got, want = model.predict(rows), expected(spec, rows)
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
            else:
                np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", [Op.ARGMAX, Op.THRESHOLD])
def test_fused_decisions_on_ties_and_nan(op):
    """A decision fused into the kernel's epilogue (the class index written as a float64
    number) gives np.argmax's answer on ties (the first maximum) and on NaN (the first NaN), and
    Threshold's on values equal to the threshold and on NaN (class 0), for one row, a few rows
    and a batch."""
    import dataclasses

    width = 3 if op is Op.ARGMAX else 1
    forest = random_forest(seed=9, n_outputs=width, width=width, n_trees=4, depth=3)
    rng = np.random.default_rng(2)
    value = np.round(forest.value * 2) / 8  # few distinct sums: ties between columns
    value[rng.random(value.shape) < 0.1] = np.nan
    forest = dataclasses.replace(forest, value=value, base_score=np.zeros(width))
    chain = [(op, {"value": 0.0, "strict": True} if op is Op.THRESHOLD else {})]
    spec = model_spec(forest, chain)
    X = edge_rows(forest)
    want = expected(spec, X)
    raw = expected(model_spec(forest), X)
    assert np.isnan(raw).any() and (want.dtype == np.int64)
    if op is Op.ARGMAX:  # the case is only a test if ties reach the argmax
        assert any(len(set(r)) < width for r in raw[~np.isnan(raw).any(axis=1)])
    else:
        assert (raw == 0.0).any()
    for schedule in (None, Schedule(lanes="trees")):
        model = compiled(spec, schedule)
        for rows in (X, X[:1], X[:5]):
            got = model._exec.run(rows, ("predict",))["predict"]
            assert got.dtype == np.int64  # the executable's value, before the method's cast
            np.testing.assert_array_equal(got, expected(spec, rows))
            np.testing.assert_array_equal(model.predict(rows), expected(spec, rows))


def test_single_rows_match_batch():
    forest = random_forest(seed=11, n_trees=70, n_outputs=2, groups=True, missing_zero=True)
    spec = model_spec(forest)
    X = edge_rows(forest, n=130)
    model = compiled(spec)
    batch = model.predict(X)  # row lanes; chunks up to half a row block walk tree lanes
    for k in (1, 2, 7, 16, 47, 48, 49, 100):
        got = np.concatenate([model.predict(X[i:i + k]) for i in range(0, len(X), k)])
        np.testing.assert_allclose(got, batch, rtol=1e-12, atol=1e-12)
    single = model.predict(np.ascontiguousarray(X[3:4]).astype(np.float32))
    np.testing.assert_allclose(single, expected(spec, X[3:4].astype(np.float32)), RTOL, ATOL)


def test_float32_method_output_on_every_path():
    """A method returning float32 (XGBoost's predict_proba) gets the same numbers from the
    few-rows path, which casts inside the executable, as from the batch path."""
    forest = random_forest(seed=12, n_trees=40, comparison=Comparison.LT,
                           input_dtype=np.dtype(np.float32))
    spec = model_spec(forest, [(Op.LINK, {"kind": Link.SIGMOID}), (Op.BINARY_PROBA, {})])
    spec = ModelSpec(graph=spec.graph, methods={"predict": MethodSpec("predict", dtype="float32")},
                     n_features=spec.n_features, source=spec.source)
    model = compiled(spec)
    X = edge_rows(forest, n=120).astype(np.float32)
    want = expected(spec, X).astype(np.float32)
    rows = np.concatenate([model.predict(X[i:i + 1]) for i in range(len(X))])
    assert rows.dtype == np.float32
    np.testing.assert_allclose(rows, model.predict(X), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(rows, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("parallel", ["rows", "trees"])
def test_one_and_two_threads(parallel):
    forest = random_forest(seed=2, n_trees=60, depth=6, n_outputs=2, groups=True)
    spec = model_spec(forest, [(Op.LINK, {"kind": Link.SOFTMAX})])
    X = edge_rows(forest, n=4000)
    want = expected(spec, X)
    for threads in (1, 2):
        model = compiled(spec, Schedule(parallel=parallel), n_threads=threads)
        np.testing.assert_allclose(model.predict(X), want, rtol=1e-12, atol=1e-12)


def test_generic_x86_target_gives_identical_results():
    forest = random_forest(seed=4, cat=True, missing_zero=True, n_trees=25, n_features=40)
    spec = model_spec(forest, [(Op.LINK, {"kind": Link.SIGMOID})])
    X = edge_rows(forest)
    run = lambda model, rows: model.run(rows, ("predict",))["predict"]  # noqa: E731
    for schedule in (Schedule(), Schedule(lanes="trees"), Schedule(layout="sparse")):
        options = CompileOptions(schedule=schedule)
        host = compile_spec(spec, options)
        generic = compile_spec(spec, options, target=jit.Target.generic())
        assert generic.target.isa == "generic"
        for rows in (X, X[:1], X[:3]):  # same schedule, same sums: the same bits
            np.testing.assert_array_equal(run(generic, rows), run(host, rows))
    auto = compile_spec(spec, CompileOptions(), target=jit.Target.generic())  # scalar walks
    np.testing.assert_allclose(run(auto, X), expected(spec, X), rtol=1e-13, atol=1e-13)


def test_kernel_cache_hits_disk_after_memory_is_cleared(tmp_path, monkeypatch):
    monkeypatch.setenv("PEREGRINE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit, "_loaded", {})
    spec = model_spec(random_forest(seed=9, n_trees=3, depth=3))
    model = compiled(spec, Schedule(interleave=5))
    assert "(compiled)" in model.explain()
    assert list((tmp_path / "native").glob("*.o"))
    again = compiled(spec, Schedule(interleave=5))
    assert "(memory)" in again.explain()
    monkeypatch.setattr(jit, "_loaded", {})
    third = compiled(spec, Schedule(interleave=5))
    assert "(disk)" in third.explain() and "(compiled)" not in third.explain()
    X = np.random.default_rng(0).normal(size=(50, 6))
    np.testing.assert_array_equal(third.predict(X), model.predict(X))


def test_wrong_inputs_raise_typed_errors():
    spec = model_spec(random_forest(n_trees=2, depth=2))
    model = compiled(spec)
    with pytest.raises(InputError, match="features"):
        model.predict(np.zeros((3, 5)))
    with pytest.raises(InputError, match="2-D"):
        model.predict(np.zeros(6))
    with pytest.raises(InputError):
        model.predict(np.array([["a"] * 6]))
    with pytest.raises(UnsupportedModelError, match="schedule"):
        compiled(spec, schedule=3)
    with pytest.raises(UnsupportedModelError, match="schedule"):
        compiled(spec, schedule={"vector_width": 3})
    with pytest.raises(UnsupportedModelError, match="CPU"):
        NativeBackend.compile(spec, CompileOptions(), "cuda")


def test_schedule_round_trips_and_prints():
    s = Schedule(layout="sparse", lanes="trees", vector_width=8, interleave=3, row_tile=50)
    assert s.row_tile == 72  # rounded up to whole blocks of 8 x 3 rows
    assert Schedule.from_json(s.to_json()) == s
    assert Schedule.from_json(json.dumps(s.to_json())) == s
    assert "sparse" in str(s) and "3 walks" in str(s)
    with pytest.raises(ValueError):
        Schedule.from_json({"bogus": 1})


def test_save_load_predicts_identically(tmp_path):
    forest = random_forest(seed=8, cat=True, n_outputs=2, groups=True)
    spec = model_spec(forest, [(Op.LINK, {"kind": Link.SOFTMAX})])
    model = compiled(spec, Schedule(interleave=3))
    path = tmp_path / "model.peregrine"
    model.save(path)
    state = model._exec.artifact_state()
    json.dumps(state)  # JSON-able
    loaded = peregrine.load(path)
    assert loaded.backend == "native"
    X = edge_rows(forest)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    assert loaded._exec.artifact_state()["forests"] == state["forests"]


def test_explain_names_the_schedule():
    model = compiled(model_spec(random_forest()))
    text = model.explain()
    assert "schedule" in text and "perfect layout" in text and "kernel" in text


def test_unavailable_without_llvmlite(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llvmlite" else real(name, *a))
    assert not NativeBackend.available()


def test_tuner_heuristic_and_measured_decision_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PEREGRINE_CACHE_DIR", str(tmp_path))
    target = jit.Target.host()
    shallow, deep = random_forest(depth=4), random_forest(depth=14, p_leaf=0.3)
    # shallow trees: perfect, quantised to threshold ranks where byte permutes exist
    binned = target.isa == "avx512" and target.has("avx512vbmi")
    assert native_schedule.heuristic(shallow, target).schedule.layout.value == (
        "binned" if binned else "perfect")
    assert native_schedule.heuristic(shallow, target).few_rows.layout.value == (
        "binned" if binned else "perfect")  # one row's bins in registers (binned.py)
    assert native_schedule.heuristic(deep, target).schedule.layout.value == "sparse"
    generic = native_schedule.heuristic(shallow, jit.Target.generic())
    assert generic.schedule.vector_width == 1
    options = CompileOptions(batch_size=64)
    first = native_schedule.choose_schedule(shallow, options, target, 1)
    assert "measured" in first.why
    again = native_schedule.choose_schedule(shallow, options, target, 1)
    assert "cached" in again.why and again.schedule == first.schedule


def test_tune_modes(tmp_path, monkeypatch):
    """tune="off" never measures; tune="exhaustive" measures a staged search (representations,
    then width x interleave, then tiles and loop order) without a batch size, caches it apart
    from "auto"'s decision, and its winner gives the same answers as the heuristic's."""
    monkeypatch.setenv("PEREGRINE_CACHE_DIR", str(tmp_path))
    target = jit.Target.host()
    forest = random_forest(seed=3, depth=5, n_trees=20)
    spec = model_spec(forest)
    real = native_schedule.measure
    calls = []

    def spy(forest, choices, *a, **k):
        calls.append(list(choices))
        return real(forest, choices, *a, **k)

    monkeypatch.setattr(native_schedule, "measure", spy)
    off = native_schedule.choose_schedule(forest, CompileOptions(batch_size=512, tune="off"),
                                          target, 1)
    assert calls == [] and "measured" not in off.why
    full = native_schedule.choose_schedule(forest, CompileOptions(tune="exhaustive"), target, 1)
    tried = [c.schedule for stage in calls for c in stage]
    assert len(calls) == 3 and len(tried) == len(set(tried)) > 10, calls
    second = {c.schedule.vector_width for c in calls[1]}  # widths the winning layout allows
    assert second == ({16} if calls[1][0].schedule.layout in native_schedule.FIXED_WIDTH
                      else set(native_schedule.widths(target)))
    assert {s.loop_order.value for s in tried} == {"rows_outer", "trees_outer"}
    assert f"measured {len(tried)} candidates on 10000 synthetic rows" in full.why
    again = native_schedule.choose_schedule(forest, CompileOptions(tune="exhaustive"), target, 1)
    assert "cached" in again.why and again.schedule == full.schedule and len(calls) == 3
    auto = native_schedule.choose_schedule(forest, CompileOptions(batch_size=10_000), target, 1)
    assert "cached" not in auto.why  # auto's decision is its own
    X = edge_rows(forest)
    heuristic = compiled(spec, tune="off")
    searched = compiled(spec, full.schedule)
    np.testing.assert_array_equal(searched.predict(X), heuristic.predict(X))
    # a few rows: the tree-lane schedule's width and interleave are searched
    calls.clear()
    few = native_schedule.choose_schedule(forest, CompileOptions(batch_size=1,
                                                                 tune="exhaustive"), target, 1)
    assert len(calls) == 1 and {c.few_rows.vector_width for c in calls[0]} == set(
        native_schedule.widths(target)) and few.few_rows is not None
    with pytest.raises(ValueError, match="tune must be one of"):
        CompileOptions(tune="fast")
    assert CompileOptions.from_json(CompileOptions(tune="exhaustive").to_json()).tune == (
        "exhaustive")
    legacy = CompileOptions().to_json()
    del legacy["tune"]  # artifacts saved before the option load with the default
    assert CompileOptions.from_json(legacy).tune == "auto"


def test_load_reuses_the_saved_schedule(tmp_path, monkeypatch):
    """A loaded artifact runs the schedule it was saved with (no re-derivation or tuning), on
    the CPU it was saved on; on another CPU the schedule is derived afresh."""
    monkeypatch.setenv("PEREGRINE_CACHE_DIR", str(tmp_path / "cache"))
    forest = random_forest(seed=5)
    spec = model_spec(forest)
    model = compiled(spec, batch_size=300)  # a measured choice
    path = tmp_path / "model.peregrine"
    model.save(path)
    monkeypatch.setenv("PEREGRINE_CACHE_DIR", str(tmp_path / "empty"))  # no cached decision
    monkeypatch.setattr(native_schedule, "measure", lambda *a, **k: pytest.fail("tuned"))
    loaded = peregrine.load(path)
    name = next(iter(loaded._exec.programs))
    assert loaded._exec.programs[name].schedule == model._exec.programs[name].schedule
    assert "stored in the artifact" in loaded._exec.reasons[name]
    X = edge_rows(forest)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    # another CPU: the stored choice does not apply
    from peregrine.backends.native import _saved_choices

    state = model._exec.artifact_state()
    state["target"]["cpu"] = "some-other-cpu"
    assert _saved_choices(state, jit.Target.host()) == {}
    bad = model._exec.artifact_state()
    bad["forests"][name]["schedule"] = {"bogus": 1}
    with pytest.raises(peregrine.ArtifactError, match="schedule"):
        _saved_choices(bad, jit.Target.host())


def test_tuner_measures_on_the_users_sample(tmp_path, monkeypatch):
    monkeypatch.setenv("PEREGRINE_CACHE_DIR", str(tmp_path))
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5)) * 10 + 3
    y = (X[:, 0] > 3).astype(int)
    pipe = make_pipeline(StandardScaler(), RandomForestClassifier(
        n_estimators=8, max_depth=4, random_state=0)).fit(X, y)
    seen = []
    real = native_schedule.measure

    def spy(forest, choices, batch, options, target, threads, rows=None):
        seen.append(rows)
        return real(forest, choices, batch, options, target, threads, rows)

    monkeypatch.setattr(native_schedule, "measure", spy)
    model = peregrine.compile(pipe, "native", sample_input=X[:40])
    assert len(seen) == 1 and seen[0].shape == (40, 5)
    # the forest's rows are the scaled sample (the pipeline's scaler ran first)
    np.testing.assert_allclose(seen[0], pipe[0].transform(X[:40]), rtol=1e-12)
    assert "the sample's rows" in model.explain()
    np.testing.assert_array_equal(model.predict(X), pipe.predict(X))
    with pytest.raises(peregrine.InputError, match="0 rows"):
        peregrine.compile(pipe, "native", sample_input=X[:0])


def test_rule_plans_run_in_row_blocks(monkeypatch):
    """Models with no forest and no fused kernel (kernel SVMs, KNN) run their NumPy rules in
    row blocks; block boundaries change nothing, and the rbf kernel's expanded form (the
    native rule) agrees with sklearn's libsvm."""
    from sklearn.datasets import make_classification
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.svm import SVC

    from peregrine.backends.native import executable

    X, y = make_classification(400, 6, n_informative=4, n_classes=3, random_state=0)
    rows = np.random.default_rng(1).standard_normal((1000, 6))
    for model, method in ((SVC(probability=True, random_state=0).fit(X, y), "predict_proba"),
                          (SVC().fit(X, y), "decision_function"),
                          (KNeighborsClassifier(7, weights="distance").fit(X, y),
                           "predict_proba")):
        whole = getattr(peregrine.compile(model, backend="native"), method)(rows)
        monkeypatch.setattr(executable, "BLOCK_BYTES", 1)
        monkeypatch.setattr(executable, "MIN_BLOCK_ROWS", 97)  # 11 blocks, the last short
        blocked = getattr(peregrine.compile(model, backend="native"), method)(rows)
        monkeypatch.undo()
        # BLAS may pick another kernel for another matrix size: rounding-level differences
        np.testing.assert_allclose(blocked, whole, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(whole, getattr(model, method)(rows), rtol=1e-5, atol=1e-6)


def test_row_chunks_cover_every_row_once_in_whole_blocks():
    from peregrine.backends.native.program import row_chunks

    for n, threads, block in [(1, 2, 96), (150, 2, 96), (10_000, 2, 96), (100_000, 2, 96),
                              (100_003, 4, 128), (1 << 20, 16, 64)]:
        spans = row_chunks(n, threads, block)
        assert spans[0][0] == 0 and spans[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        if n >= 2 * block:  # whole SIMD blocks but the last, enough chunks to share
            assert all((e - s) % block == 0 for s, e in spans[:-1])
            assert len(spans) >= min(threads, n // block)
