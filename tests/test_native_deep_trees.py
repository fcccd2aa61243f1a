"""REFILL walks for deep trees (backends/native/refill.py): lanes that reach a leaf take the
next row of the tile. They must give the SPARSE layout's bits (the same nodes, decisions and
leaves, summed in the same order) on rows of every kind (NaN, +-inf, -0.0, thresholds and their
float32 neighbours), on every batch size through the tile's tails (1 to 300 rows, so lane
groups start part empty and drain), and scikit-learn's own answers for unlimited-depth trees.
Where the target has no gathers (PEREGRINE_CPU_LEVEL=x86-64-v2) the representation refuses
and SPARSE runs instead; on AVX2 (x86-64-v3) it walks 8 lanes a group."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import peregrine  # noqa: E402
from peregrine.backends.native import Schedule, epilogue, tune  # noqa: E402
from peregrine.backends.native.layout import choose_layout  # noqa: E402
from peregrine.backends.native.program import ForestProgram  # noqa: E402
from peregrine.backends.native.representations import REPRESENTATIONS  # noqa: E402
from peregrine.backends.native.schedule import Layout  # noqa: E402
from peregrine.errors import InputError  # noqa: E402
from peregrine.ir import Aggregation, Comparison  # noqa: E402
from peregrine.options import CompileOptions  # noqa: E402
from tests.test_native_backend import (  # noqa: E402
    check,
    compiled,
    edge_rows,
    model_spec,
    random_forest,
)
from tests.test_representations import AVX2, HOST  # noqa: E402

F32 = np.dtype(np.float32)
GATHERS = HOST.isa in ("avx512", "avx2")
needs_gathers = pytest.mark.skipif(not GATHERS, reason="REFILL needs vector gathers "
                                   "(AVX2 or AVX-512)")
LANES = 16 if HOST.isa == "avx512" else 8
SPARSE = Schedule(layout="sparse", vector_width=LANES, interleave=3, row_tile=3 * 3 * LANES,
                  node_pairs=True)
FLOAT32_IN = dict(comparison=Comparison.LT, input_dtype=F32)  # XGBoost-like: compares float32
CASES = {
    "deep": dict(depth=16, p_leaf=0.3, n_trees=3, **FLOAT32_IN),
    "one-tree": dict(depth=22, p_leaf=0.2, n_trees=1, input_dtype=F32),
    "vector-leaves-average": dict(depth=12, p_leaf=0.3, width=3, n_outputs=3,
                                  aggregation=Aggregation.AVERAGE, input_dtype=F32),
    "grouped-leaves": dict(depth=12, p_leaf=0.3, n_outputs=3, groups=True, n_trees=7,
                           **FLOAT32_IN),
    "missing-zero": dict(depth=12, p_leaf=0.3, missing_zero=True, n_trees=4, input_dtype=F32),
    "categorical": dict(depth=12, p_leaf=0.3, cat=True, n_trees=4, **FLOAT32_IN),
    "stumps": dict(depth=1, n_trees=3, **FLOAT32_IN),
}


def raw(forest, schedule, X, threads=1):
    """The batch kernel alone (no few-rows path): sums and, through an empty epilogue, the
    finished outputs."""
    prog = ForestProgram(forest, schedule, precision=CompileOptions().precision, target=HOST,
                         n_threads=threads)
    program = epilogue.encode([], forest.n_outputs)[0]
    return prog, prog.raw(X), prog(X, program, forest.n_outputs)


def same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@needs_gathers
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("walks", [1, 4])
def test_refill_gives_the_sparse_layouts_bits(case, walks):
    forest = random_forest(seed=5, **CASES[case])
    X = edge_rows(forest, n=301).astype(np.float32)
    refill = Schedule(layout="refill", vector_width=LANES, interleave=walks,
                      row_tile=2 * walks * LANES, cache_rows=False, node_pairs=True)
    prog, sums, out = raw(forest, refill, X)
    assert prog.variant(F32).packed.layout is Layout.REFILL
    _, want_sums, want = raw(forest, SPARSE, X)
    same_bits(sums, want_sums)
    same_bits(out, want)
    same_bits(raw(forest, refill, X, threads=2)[1], want_sums)  # row ranges off the blocks
    for n in list(range(1, 40)) + [63, 64, 65, 127, 128, 129, 200, 255, 256, 257, 300]:
        _, part, out_n = raw(forest, refill, X[:n])  # tails: part-empty groups, drains
        same_bits(part, want_sums[:n])
        same_bits(out_n, want[:n])


@needs_gathers
@pytest.mark.parametrize("width", [4, 8])
def test_narrower_lanes_give_the_same_bits(width):
    """128- and 256-bit groups (the exhaustive search's widths), 3 and 12 groups."""
    forest = random_forest(seed=6, **CASES["grouped-leaves"])
    X = edge_rows(forest, n=301).astype(np.float32)
    _, want_sums, want = raw(forest, SPARSE, X)
    for walks in (3, 12):
        refill = Schedule(layout="refill", vector_width=width, interleave=walks,
                          row_tile=4096, cache_rows=False, node_pairs=True)
        for n in (1, 5, 37, 301):
            _, sums, out = raw(forest, refill, X[:n])
            same_bits(sums, want_sums[:n])
            same_bits(out, want[:n])


@needs_gathers
@pytest.mark.parametrize("case", ["deep", "vector-leaves-average", "categorical"])
def test_refill_matches_the_reference_through_the_model(case):
    """Compiled with REFILL as the batch schedule: float32 and float64 input, against the
    reference rules (check), and one and two threads alike."""
    forest = random_forest(seed=9, **CASES[case])
    spec, X = model_spec(forest), edge_rows(forest, n=700)
    refill = tune.refill_schedule(Schedule(vector_width=LANES), forest)
    model = check(spec, X, refill)
    two = compiled(spec, refill, n_threads=2)
    same_bits(two.predict(X), model.predict(X))


@needs_gathers
def test_tree_lanes_read_refill_words():
    """A REFILL pack walked with trees in the lanes (the SPARSE walk over the same words,
    which masks the right child off the feature) gives the same answers."""
    forest = random_forest(seed=2, **CASES["deep"])
    spec, X = model_spec(forest), edge_rows(forest, n=60)
    check(spec, X, Schedule(layout="refill", lanes="trees", vector_width=LANES, interleave=2,
                            node_pairs=True))


def test_refill_refuses_what_it_cannot_hold():
    rep = REPRESENTATIONS[Layout.REFILL]
    f32 = random_forest(**CASES["deep"])
    f64 = random_forest(depth=14, p_leaf=0.3)  # float64 inputs compare in float64
    assert "float64" in rep.unsupported(f64, np.dtype(np.float64), AVX2)
    assert choose_layout(f64, Layout.REFILL, np.float64, AVX2) is Layout.PERFECT
    assert rep.unsupported(f32, F32, AVX2) is None
    from peregrine.kernels import jit

    assert "gathers" in rep.unsupported(f32, F32, jit.Target.generic())
    assert choose_layout(f32, Layout.REFILL, F32, jit.Target.generic()) is not Layout.REFILL
    if GATHERS:
        assert rep.unsupported(f32, F32, HOST) is None


@needs_gathers
def test_heuristic_picks_refill_for_deep_float32_trees_and_the_tuner_measures_it(
        tmp_path, monkeypatch):
    monkeypatch.setenv("PEREGRINE_CACHE_DIR", str(tmp_path))
    deep = random_forest(seed=1, depth=24, p_leaf=0.4, n_trees=2, **FLOAT32_IN)  # unbalanced
    choice = tune.heuristic(deep, HOST)
    assert choice.schedule.layout is Layout.REFILL
    assert choice.few_rows.layout is Layout.SPARSE  # one row: trees in the lanes
    assert "refill" in choice.why
    measured = tune.choose_schedule(deep, CompileOptions(batch_size=2048), HOST, 1)
    assert "refill" in measured.why and "sparse" in measured.why  # both were measured
    balanced = random_forest(seed=1, depth=12, p_leaf=0.0, n_trees=3, **FLOAT32_IN)
    assert tune.heuristic(balanced, HOST).schedule.layout is Layout.SPARSE  # no lanes idle


# ---------------------------------------------------------------- scikit-learn trees --
def sklearn_rows(X, model, rng, n=3000):
    """Test rows: the data, NaN, the largest floats, -0.0, every threshold and its float32
    neighbours (scikit-learn rejects infinity: so does the compiled model, tested below)."""
    rows = X[rng.integers(len(X), size=n)].copy()
    thr = model.tree_.threshold[model.tree_.feature >= 0].astype(np.float32)
    thr = thr[np.isfinite(thr)]  # splits of NaN from the rest have threshold inf
    picks = np.concatenate([thr, np.nextafter(thr, np.float32(np.inf)),
                            np.nextafter(thr, np.float32(-np.inf)),
                            np.array([np.nan, 3.4e38, -3.4e38, -0.0], np.float32)])
    mask = rng.random(rows.shape) < 0.3
    rows[mask] = rng.choice(picks, size=int(mask.sum()))
    return rows


@pytest.fixture(scope="module")
def deep_tree():
    sklearn = pytest.importorskip("sklearn")  # noqa: F841
    from sklearn.datasets import make_classification
    from sklearn.tree import DecisionTreeClassifier

    X, y = make_classification(6000, 8, n_informative=6, n_classes=3, random_state=0)
    X = X.astype(np.float32)
    rng = np.random.default_rng(0)
    X[rng.random(X.shape) < 0.05] = np.nan  # trained with missing values: NaN directions
    model = DecisionTreeClassifier(random_state=0).fit(X, y)  # unlimited depth
    assert model.get_depth() > 16
    return model, X, rng


def test_unlimited_depth_decision_tree_matches_scikit_learn(deep_tree):
    model, X, rng = deep_tree
    fast = peregrine.compile(model, backend="native")
    rows = sklearn_rows(X, model, rng)
    if GATHERS:
        assert "refill layout" in fast.explain()
    for data in (rows, rows.astype(np.float64)):
        same_bits(fast.predict_proba(data), model.predict_proba(data))
        np.testing.assert_array_equal(fast.predict(data), model.predict(data))
    for n in list(range(1, 70)) + [127, 128, 129, 255, 256, 257, 299, 300]:
        same_bits(fast.predict_proba(rows[:n]), model.predict_proba(rows[:n]))
    bad = rows[:300].copy()
    bad[7, 3] = np.inf
    with pytest.raises(InputError, match="row 7, column 3"):
        fast.predict_proba(bad)


def test_deep_regressor_and_forest_match_scikit_learn(deep_tree):
    from sklearn.ensemble import RandomForestRegressor
    from sklearn.tree import DecisionTreeRegressor

    _, X, rng = deep_tree
    y = np.nan_to_num(X[:, 0]) * 3 + np.nan_to_num(X[:, 1]) ** 2 + rng.normal(size=len(X))
    for model in (DecisionTreeRegressor(random_state=0),
                  RandomForestRegressor(5, random_state=0, n_jobs=1)):
        model.fit(X, y)
        fast = peregrine.compile(model, backend="native")
        one = model if hasattr(model, "tree_") else model.estimators_[0]
        rows = sklearn_rows(X, one, rng, n=1500)
        if GATHERS:
            assert "refill layout" in fast.explain()
        got, want = fast.predict(rows), model.predict(rows)
        if hasattr(model, "tree_"):
            same_bits(got, want)
        else:  # the forest's mean: the library's order of summation
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
