"""BINNED words with trees in the lanes (the few-rows kernel, backends/native/binned.py): one row
is quantised once to per-feature threshold ranks held in registers, and each node is one 32-bit
word compared with them. It must give the perfect layout's bits (same leaves, same order of
summation) on every row: NaN, +-inf, the thresholds and their float32/float64 neighbours, 1 to
48 rows, float32 and float64 input; and the libraries' own answers for XGBoost and LightGBM.
Where the target has no AVX-512 VBMI (PEREGRINE_CPU_LEVEL=x86-64-v3/v2) it is never chosen."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("llvmlite")

import peregrine  # noqa: E402
from peregrine.backends.native import Schedule, tune  # noqa: E402
from peregrine.backends.native.layout import choose_layout  # noqa: E402
from peregrine.backends.native.schedule import Lanes, Layout  # noqa: E402
from peregrine.options import CompileOptions  # noqa: E402
from tests.test_native_backend import (  # noqa: E402
    CASES,
    check,
    compiled,
    edge_rows,
    model_spec,
    random_forest,
)
from tests.test_representations import AVX2, HAS_VBMI, HOST, needs_vbmi  # noqa: E402,F401

ROW_COUNTS = (1, 2, 3, 17, 48)
PERFECT_LANES = Schedule(layout="perfect", lanes="trees", interleave=4, node_pairs=True)


def program_of(model):
    return next(iter(model._exec.programs.values()))


def layouts(model, small: bool) -> set[str]:
    """The representation each compare dtype's kernel was packed in."""
    program = program_of(model)
    return {program.variant(program.cmp_dtype(np.dtype(d)), small).packed.layout.value
            for d in (np.float32, np.float64)}


def same_bits(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@needs_vbmi
@pytest.mark.parametrize("case", ["le-float64", "lt-float32", "vector-leaves-average",
                                  "grouped-leaves", "grouped-average", "wide-rows", "stumps",
                                  "features-32", "features-33", "features-64", "many-trees"])
@pytest.mark.parametrize("interleave", [1, 3, 4])
def test_binned_lanes_give_the_perfect_layouts_bits(case, interleave):
    """Tree lanes over binned words as the schedule for every row count, against the
    reference (check: float32 and float64) and bit for bit against perfect tree lanes; 3
    walks of 16 trees do not divide the top levels' 512-tree padding."""
    extra = {"features-32": dict(n_features=32, n_trees=20),
             "features-33": dict(n_features=33, n_trees=20),
             "features-64": dict(n_features=64, n_trees=30),
             "many-trees": dict(n_trees=530, depth=3, n_features=40)}
    forest = random_forest(**(CASES[case] if case in CASES else extra[case]))
    spec, X = model_spec(forest), edge_rows(forest, n=301)
    lanes = check(spec, X, Schedule(layout="binned", lanes="trees", interleave=interleave))
    assert layouts(lanes, small=False) == {"binned"}
    perfect = compiled(spec, PERFECT_LANES)
    for dtype in (np.float64, np.float32):
        Xd = X.astype(dtype)
        for n in ROW_COUNTS + (301,):
            same_bits(lanes.predict(Xd[:n]), perfect.predict(Xd[:n]))
        for i in range(0, 301, 37):  # rows alone, as the one-row method runs them
            same_bits(lanes.predict(Xd[i:i + 1]), perfect.predict(Xd[i:i + 1]))


@needs_vbmi
def test_threshold_neighbours_and_specials_row_by_row():
    """Every threshold, its float32 and float64 neighbours above and below, NaN and +-inf in
    every feature of one-row calls (the default few-rows kernel, binned on this CPU)."""
    forest = random_forest(n_trees=40, depth=6, n_features=5, seed=7)
    spec = model_spec(forest)
    fast, perfect = compiled(spec), compiled(spec, PERFECT_LANES)
    assert layouts(fast, small=True) == {"binned"}
    t = forest.threshold[forest.feature >= 0]
    t = t[np.isfinite(t)]
    t32 = t.astype(np.float32)
    values = np.concatenate([
        t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf),
        np.nextafter(t32, np.float32(np.inf)).astype(np.float64),
        np.nextafter(t32, np.float32(-np.inf)).astype(np.float64),
        [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e300, -1e300]])
    rng = np.random.default_rng(0)
    X = rng.normal(size=(values.size, forest.n_features))
    for f in range(forest.n_features):
        X[:, f] = rng.permutation(values)
    for dtype in (np.float64, np.float32):
        with np.errstate(over="ignore"):
            Xd = X.astype(dtype)
        for i in range(Xd.shape[0]):
            same_bits(fast.predict(Xd[i:i + 1]), perfect.predict(Xd[i:i + 1]))


@needs_vbmi
def test_a_nan_threshold_takes_rank_zero():
    """``x < -inf`` (a NaN threshold after Forest.thresholds_for) is false for every number:
    its rank is 0 and the row's bins start at 1."""
    from peregrine.ir import Comparison

    forest = random_forest(n_trees=20, depth=4, comparison=Comparison.LT, seed=5)
    internal = forest.feature >= 0
    first = np.flatnonzero(internal)[::7]
    forest.threshold[first] = -np.inf
    spec, X = model_spec(forest), edge_rows(forest, n=120)
    lanes = check(spec, X, Schedule(layout="binned", lanes="trees", interleave=2))
    perfect = compiled(spec, PERFECT_LANES)
    assert program_of(lanes).variant(np.dtype(np.float64)).packed.rank_base == 1
    for n in ROW_COUNTS:
        same_bits(lanes.predict(X[:n]), perfect.predict(X[:n]))


def test_chosen_for_few_rows_only_where_it_can_hold_the_forest():
    forest = random_forest(n_trees=30)
    f32 = np.dtype(np.float32)
    assert tune.heuristic(forest, AVX2).few_rows.layout is Layout.PERFECT
    assert choose_layout(forest, Layout.BINNED, f32, AVX2, Lanes.TREES) is Layout.PERFECT
    if HAS_VBMI:
        few = tune.heuristic(forest, HOST).few_rows
        assert few.layout is Layout.BINNED and few.lanes is Lanes.TREES
        assert few.node_pairs  # what perfect, its fallback, reads
        # narrower vectors and forests binned words cannot hold keep the perfect layout
        assert choose_layout(forest, Layout.BINNED, f32, HOST, Lanes.TREES,
                             8) is Layout.PERFECT
        for wide in (random_forest(n_features=65), random_forest(cat=True),
                     random_forest(missing_zero=True)):
            assert tune.heuristic(wide, HOST).few_rows.layout is Layout.PERFECT
        # the tuner measures both for a few rows
        base = tune.heuristic(forest, HOST, 1)
        tried = {c.few_rows.layout for c in tune.candidates(base, 1, forest, HOST)}
        assert tried == {Layout.BINNED, Layout.PERFECT}
    else:  # this target (or the forced CPU level) never gets it
        few = tune.heuristic(forest, HOST).few_rows
        assert few is None or few.layout is not Layout.BINNED


def test_tuner_measures_both_layouts_for_a_few_rows(tmp_path, monkeypatch):
    """A batch size within the few-rows range: the tuner times perfect and (where it applies)
    binned tree lanes, names them in its reasons, and whichever wins gives the same bits."""
    monkeypatch.setenv("PEREGRINE_CACHE_DIR", str(tmp_path))
    forest = random_forest(n_trees=40, seed=2)
    choice = tune.choose_schedule(forest, CompileOptions(batch_size=1), HOST, 1)
    assert "measured" in choice.why and re.search(r"perfect \d+x\d+ trees", choice.why)
    assert bool(re.search(r"binned \d+x16 trees", choice.why)) == HAS_VBMI
    spec, X = model_spec(forest), edge_rows(forest, n=48)
    tuned, perfect = compiled(spec, batch_size=1), compiled(spec, PERFECT_LANES)
    for dtype in (np.float64, np.float32):
        for n in ROW_COUNTS:
            Xd = X[:n].astype(dtype)
            same_bits(tuned.predict(Xd), perfect.predict(Xd))


xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")


def _training_rows(rng, n, nf):
    X = rng.normal(size=(n, nf))
    X[rng.random(X.shape) < 0.1] = np.nan  # missing values: learned default directions
    y = (np.nan_to_num(X[:, 0]) + 0.5 * np.nan_to_num(X[:, 1]) > 0).astype(int)
    return X, y


def _probe_rows(model_forest_thresholds, rng, n, nf):
    """Normal rows salted with NaN, +-inf and the trees' thresholds and their neighbours."""
    X = rng.normal(size=(n, nf))
    t = model_forest_thresholds
    picks = [np.array([np.nan, np.inf, -np.inf]), t, np.nextafter(t, np.inf),
             np.nextafter(t, -np.inf),
             np.nextafter(t.astype(np.float32), np.float32(np.inf)).astype(np.float64),
             np.nextafter(t.astype(np.float32), np.float32(-np.inf)).astype(np.float64)]
    for values, p in zip(picks, (0.15, 0.1, 0.05, 0.05, 0.05, 0.05)):
        mask = rng.random(X.shape) < p
        X[mask] = rng.choice(values, size=int(mask.sum()))
    return X


def _thresholds(compiled_model):
    forest = program_of(compiled_model).forest
    t = forest.threshold[forest.feature >= 0]
    return np.unique(t[np.isfinite(t)])


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_library_models_row_by_row(library):
    """XGBoost (bit for bit) and LightGBM (within the project's tolerance, as the perfect
    layout) through the one-row method, 1 to 48 rows, float32 and float64 input; and the same
    bits as perfect tree lanes."""
    rng = np.random.default_rng(0)
    X, y = _training_rows(rng, 800, 8)
    if library == "xgboost":
        model = xgb.XGBClassifier(n_estimators=60, max_depth=6, tree_method="hist").fit(X, y)
    else:
        model = lgb.LGBMClassifier(n_estimators=60, num_leaves=40, max_depth=6,
                                   verbose=-1).fit(X, y)
    fast = peregrine.compile(model, "native")
    perfect = peregrine.compile(model, "native",
                                options=peregrine.CompileOptions(schedule=PERFECT_LANES))
    if HAS_VBMI:
        assert "binned" in layouts(fast, small=True)
    probe = _probe_rows(_thresholds(fast), rng, 120, 8)
    for dtype in (np.float32, np.float64):
        with np.errstate(over="ignore"):
            P = probe.astype(dtype)
        for n in ROW_COUNTS:
            got, want = fast.predict_proba(P[:n]), model.predict_proba(P[:n])
            if library == "xgboost":
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            same_bits(got, perfect.predict_proba(P[:n]))
            np.testing.assert_array_equal(fast.predict(P[:n]), model.predict(P[:n]))
        for i in range(P.shape[0]):
            row = P[i:i + 1]
            same_bits(fast.predict_proba(row), perfect.predict_proba(row))
