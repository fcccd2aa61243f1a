"""Tree representations (backends/native/representations.py): each one gives the bits every
other gives, and each refuses the forests and targets it cannot hold (the tuner then falls back
to PERFECT or SPARSE)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("llvmlite")

from peregrine.backends.native import Schedule  # noqa: E402
from peregrine.backends.native.layout import choose_layout, pack  # noqa: E402
from peregrine.backends.native.oblivious import row_of_position  # noqa: E402
from peregrine.backends.native.representations import (  # noqa: E402
    BIN_SLOTS,
    MAX_RANKS,
    REPRESENTATIONS,
    feature_thresholds,
    search_order,
)
from peregrine.backends.native.schedule import Lanes, Layout  # noqa: E402
from peregrine.ir import Comparison  # noqa: E402
from peregrine.kernels import jit  # noqa: E402
from tests.test_native_backend import (  # noqa: E402
    CASES,
    check,
    compiled,
    edge_rows,
    model_spec,
    random_forest,
)

HOST = jit.Target.host()
HAS_VBMI = HOST.isa == "avx512" and HOST.has("avx512vbmi")
needs_vbmi = pytest.mark.skipif(not HAS_VBMI, reason="BINNED needs AVX-512 VBMI byte permutes "
                                "(this CPU, or the forced PEREGRINE_CPU_LEVEL, lacks them)")
AVX2 = jit.Target("haswell", "+avx2,+fma,+bmi2,+popcnt,+sse4.2")


def layout_of(model) -> str:
    program = next(iter(model._exec.programs.values()))
    return program.variant(np.dtype(np.float64)).packed.layout.value


@needs_vbmi
@pytest.mark.parametrize("case", ["le-float64", "lt-float32", "vector-leaves-average",
                                  "grouped-leaves", "grouped-average", "wide-rows", "stumps"])
@pytest.mark.parametrize("interleave", [1, 3])
def test_binned_gives_the_perfect_layouts_bits(case, interleave):
    """Same leaves, so the same sums in the same order: bit-for-bit, NaN, +-inf, thresholds and
    their neighbours included (edge_rows), on both input dtypes and a ragged last block."""
    forest = random_forest(**CASES[case])
    spec, X = model_spec(forest), edge_rows(forest, n=301)
    tile = 16 * interleave * 2
    binned = check(spec, X, Schedule(layout="binned", interleave=interleave, row_tile=tile))
    assert layout_of(binned) == "binned"
    perfect = compiled(spec, Schedule(layout="perfect", interleave=interleave, row_tile=tile))
    for dtype in (np.float64, np.float32):
        Xd = X.astype(dtype)
        for rows in (Xd, Xd[:1], Xd[:17], Xd[:tile + 5]):
            np.testing.assert_array_equal(binned.predict(rows), perfect.predict(rows))


def test_ranks_decide_like_thresholds():
    """The identity BINNED rests on: x <= t[r] exactly when #{t < x} <= r, for sorted distinct
    t, at the thresholds, their neighbours and the infinities."""
    rng = np.random.default_rng(0)
    t = np.unique(np.concatenate([rng.normal(size=200).astype(np.float32), [-np.inf, np.inf]]))
    x = np.concatenate([t, np.nextafter(t, np.float32(np.inf)),
                        np.nextafter(t, np.float32(-np.inf)), rng.normal(size=500)])
    with np.errstate(over="ignore"):
        x = x.astype(np.float32)
    bins = 1 + np.searchsorted(t, x, side="left")  # what the kernel's binary search counts
    for r in range(t.size):
        np.testing.assert_array_equal(x <= t[r], bins <= r + 1)
    assert not np.any(bins <= 0)  # rank 0, a NaN threshold: no number goes left


def test_binned_refuses_what_it_cannot_hold():
    plain = random_forest()
    f32 = np.dtype(np.float32)
    rep = REPRESENTATIONS[Layout.BINNED]
    assert "VBMI" in rep.unsupported(plain, f32, AVX2)
    assert choose_layout(plain, Layout.BINNED, f32, AVX2) is Layout.PERFECT
    if HAS_VBMI:
        assert choose_layout(plain, Layout.BINNED, f32, HOST) is Layout.BINNED
        # tree lanes take it too (test_native_binned_lanes.py); narrower vectors do not
        assert choose_layout(plain, Layout.BINNED, f32, HOST, Lanes.TREES) is Layout.BINNED
        assert choose_layout(plain, Layout.BINNED, f32, HOST, Lanes.ROWS, 8) is Layout.PERFECT
        for reason, forest in (
                ("categorical", random_forest(cat=True)),
                ("categorical", random_forest(missing_zero=True)),
                ("features", random_forest(n_features=65)),
                ("depth", random_forest(depth=11, p_leaf=0.0, n_trees=2))):
            assert reason in rep.unsupported(forest, f32, HOST)
            assert choose_layout(forest, Layout.BINNED, f32, HOST) is not Layout.BINNED


def test_too_many_thresholds_on_one_feature_falls_back():
    forest = random_forest(n_trees=200, depth=6, p_leaf=0.0, n_features=1, seed=4)
    per_feature = feature_thresholds(forest, np.dtype(np.float64))
    assert per_feature is None  # 200 trees x 63 splits on one feature: > MAX_RANKS values
    assert np.unique(forest.threshold[forest.feature >= 0]).size > MAX_RANKS
    if HAS_VBMI:
        packed = pack(forest, Schedule(layout="binned"), np.float64, HOST)
        assert packed.layout is Layout.PERFECT


@needs_vbmi
def test_binned_ranks_pack_each_feature_separately():
    forest = random_forest(seed=2)
    packed = pack(forest, Schedule(layout="binned"), np.float64, HOST)
    per_feature = feature_thresholds(forest, np.dtype(np.float64))
    table = packed.bins.reshape(forest.n_features, -1)
    steps = BIN_SLOTS.bit_length() - 1
    for f, values in per_feature.items():
        # stored in the binary search's order: undo it to read the sorted thresholds
        ordered = np.full(BIN_SLOTS, np.inf)
        ordered[search_order(steps)] = table[f, : BIN_SLOTS - 1]
        np.testing.assert_array_equal(ordered[: values.size], values)
        assert np.all(np.isposinf(ordered[values.size:]))  # padding never counts as below x
        assert np.isposinf(table[f, BIN_SLOTS - 1])


@needs_vbmi
def test_search_measures_each_representation_and_explain_names_them(tmp_path, monkeypatch):
    from peregrine.backends.native import tune
    from peregrine.options import CompileOptions

    monkeypatch.setenv("PEREGRINE_CACHE_DIR", str(tmp_path))
    forest = random_forest(seed=6, n_trees=30)
    choice = tune.choose_schedule(forest, CompileOptions(batch_size=512), HOST, 1)
    assert "measured" in choice.why
    for name in ("binned 6x16", "perfect 6x16"):
        assert name in choice.why  # each candidate with its time
    again = tune.choose_schedule(forest, CompileOptions(batch_size=512), HOST, 1)
    assert "cached decision" in again.why and again.schedule == choice.schedule


def oblivious_forest(seed=0, n_trees=20, n_features=7, depth=5, n_outputs=1,
                     nan_by_feature=False, float32_leaves=False, **scalars):
    """Symmetric trees (one feature, threshold and NaN direction per level), in heap order;
    every third tree is shallower, as boosting's early trees may be. ``nan_by_feature``: NaN
    goes one way per feature (CatBoost's nan_mode), not per level."""
    from peregrine.ir import make_forest

    rng = np.random.default_rng(seed)
    feature_nan_left = rng.random(n_features) < 0.5
    parts = {k: [] for k in ("feature", "threshold", "left", "right", "nan_left", "value")}
    offsets = [0]
    for t in range(n_trees):
        d = depth if t % 3 else max(1, depth - 2)
        n_int = 2**d - 1
        feats = rng.integers(n_features, size=d)
        thr = np.round(rng.normal(size=d), 2)
        nan_left = feature_nan_left[feats] if nan_by_feature else rng.random(d) < 0.5
        level = np.floor(np.log2(np.arange(n_int) + 1)).astype(int)
        idx = np.arange(n_int)
        base = offsets[-1]
        parts["feature"] += [np.concatenate([feats[level], np.full(n_int + 1, -1)])]
        parts["threshold"] += [np.concatenate([thr[level], np.zeros(n_int + 1)])]
        parts["left"] += [np.concatenate([base + 2 * idx + 1, np.full(n_int + 1, -1)])]
        parts["right"] += [np.concatenate([base + 2 * idx + 2, np.full(n_int + 1, -1)])]
        parts["nan_left"] += [np.concatenate([nan_left[level], np.zeros(n_int + 1, bool)])]
        leaves = rng.normal(size=n_int + 1)
        if float32_leaves:
            leaves = leaves.astype(np.float32).astype(np.float64)
        parts["value"] += [np.concatenate([np.zeros(n_int), leaves])]
        offsets.append(base + 2 * n_int + 1)
    groups = rng.integers(n_outputs, size=n_trees) if n_outputs > 1 else None
    base_score = rng.normal(size=n_outputs)
    if float32_leaves:
        base_score = base_score.astype(np.float32).astype(np.float64)
    return make_forest(**{k: np.concatenate(v) for k, v in parts.items()},
                       tree_offsets=np.array(offsets), n_features=n_features,
                       n_outputs=n_outputs, tree_group=groups, base_score=base_score,
                       **scalars)


@pytest.mark.parametrize("interleave", [1, 4])
def test_oblivious_gives_the_perfect_layouts_bits(interleave):
    forest = oblivious_forest()
    spec, X = model_spec(forest), edge_rows(forest, n=301)
    tile = 16 * interleave * 2
    oblivious = check(spec, X, Schedule(layout="oblivious", interleave=interleave,
                                        row_tile=tile))
    assert layout_of(oblivious) == "oblivious"
    perfect = compiled(spec, Schedule(layout="perfect", interleave=interleave, row_tile=tile))
    for dtype in (np.float64, np.float32):
        Xd = X.astype(dtype)
        for rows in (Xd, Xd[:1], Xd[:17], Xd[:tile + 5]):
            np.testing.assert_array_equal(oblivious.predict(rows), perfect.predict(rows))
    # the heuristic takes it for batches wherever the forest is oblivious
    from peregrine.backends.native import tune

    assert tune.heuristic(forest, HOST).schedule.layout is Layout.OBLIVIOUS


def test_oblivious_refuses_trees_with_two_splits_on_a_level():
    rep = REPRESENTATIONS[Layout.OBLIVIOUS]
    assert rep.unsupported(oblivious_forest(), np.dtype(np.float64), HOST) is None
    assert "level" in rep.unsupported(random_forest(), np.dtype(np.float64), HOST)
    assert choose_layout(random_forest(), Layout.OBLIVIOUS, np.float64, HOST) is Layout.PERFECT
    assert choose_layout(oblivious_forest(), Layout.OBLIVIOUS, np.float64, HOST,
                         Lanes.TREES) is Layout.PERFECT


OBLIVIOUS_BINNED_CASES = {
    "float64": dict(),
    "lt-float32": dict(comparison=Comparison.LT, input_dtype=np.dtype(np.float32)),
    "float32-sums": dict(float32_leaves=True, sum_dtype=np.dtype(np.float32),
                         input_dtype=np.dtype(np.float32)),
    "grouped": dict(n_outputs=3, n_trees=30),
    "depth-6-wide": dict(depth=6, n_features=40, n_trees=12),
    "stumps": dict(depth=1, n_trees=5),
}


@needs_vbmi
@pytest.mark.parametrize("case", OBLIVIOUS_BINNED_CASES)
@pytest.mark.parametrize("interleave", [4, 8])
def test_oblivious_binned_gives_the_perfect_layouts_bits(case, interleave):
    """Byte compares and byte-plane leaf lookups: the same leaves summed in the same order, so
    the perfect layout's bits, NaN (both directions), +-inf, thresholds and their neighbours
    included, on both input dtypes and ragged last blocks."""
    forest = oblivious_forest(nan_by_feature=True, **OBLIVIOUS_BINNED_CASES[case])
    spec, X = model_spec(forest), edge_rows(forest, n=301)
    tile = 64 * (interleave // 4) * 2
    fast = check(spec, X, Schedule(layout="oblivious_binned", interleave=interleave,
                                   row_tile=tile))
    assert layout_of(fast) == "oblivious_binned"
    perfect = compiled(spec, Schedule(layout="perfect", interleave=2, row_tile=64))
    for dtype in (np.float64, np.float32):
        Xd = X.astype(dtype)
        for rows in (Xd, Xd[:1], Xd[:17], Xd[:tile + 5]):
            np.testing.assert_array_equal(fast.predict(rows), perfect.predict(rows))


@needs_vbmi
def test_oblivious_binned_searches_every_step_count():
    """Features with 0 to 254 thresholds take 0 to 8 search steps (an odd count starts with a
    single step); with a NaN threshold the bins start at 1."""
    for n in (1, 2, 3, 6, 13, 40, 100, MAX_RANKS):
        forest = stumps(np.linspace(-3, 3, n))
        spec, X = model_spec(forest), edge_rows(forest, n=400)
        fast = compiled(spec, Schedule(layout="oblivious_binned", interleave=4, row_tile=64))
        assert layout_of(fast) == "oblivious_binned"
        perfect = compiled(spec, Schedule(layout="perfect", interleave=2, row_tile=64))
        np.testing.assert_array_equal(fast.predict(X), perfect.predict(X))
    with_nan = stumps(np.concatenate([np.linspace(-3, 3, 20), [np.nan]]))
    spec, X = model_spec(with_nan), edge_rows(with_nan, n=400)
    fast = compiled(spec, Schedule(layout="oblivious_binned", interleave=4, row_tile=64))
    assert layout_of(fast) == "oblivious_binned"
    perfect = compiled(spec, Schedule(layout="perfect", interleave=2, row_tile=64))
    np.testing.assert_array_equal(fast.predict(X), perfect.predict(X))


def test_search_order_finds_each_count():
    """The stored order replays the kernel's search (two steps at a time, three candidates;
    a single first step for an odd count) to #{thresholds < x}, ties and padding included."""
    rng = np.random.default_rng(3)
    for n in (0, 1, 2, 5, 7, 31, 32, 100, MAX_RANKS):
        values = np.sort(np.round(rng.normal(size=n), 1))
        m = n.bit_length()
        padded = np.concatenate([values, np.full(2**m - n, np.inf)])
        stored = padded[search_order(m)] if m else padded[:0]
        x = np.concatenate([values, values + 0.05, [-np.inf, np.inf, -9.0, 9.0]])
        pos = np.zeros(x.size, np.int64)
        step = 0
        if m % 2:
            pos += 2 ** (m - 1) * (stored[0] < x)
            step = 1
        while step < m:
            quarter = 2 ** (m - 2 - step)
            mid = stored[2**step - 1 + (pos >> (m - step))]
            at = 2 ** (step + 1) - 1 + (pos >> (m - 1 - step))
            lo, hi = stored[at], stored[np.minimum(at + 1, stored.size - 1)]
            pos = pos + quarter * ((lo < x).astype(int) + (mid < x) + (hi < x))
            step += 2
        np.testing.assert_array_equal(pos, np.searchsorted(values, x, side="left"))


def test_unpacks_return_every_row_once():
    for itemsize in (4, 8):
        assert sorted(row_of_position(itemsize)) == list(range(64))


def test_oblivious_binned_refuses_what_it_cannot_hold():
    rep = REPRESENTATIONS[Layout.OBLIVIOUS_BINNED]
    f64 = np.dtype(np.float64)
    forest = oblivious_forest(nan_by_feature=True)
    assert "VBMI" in rep.unsupported(forest, f64, AVX2)
    assert choose_layout(forest, Layout.OBLIVIOUS_BINNED, f64, AVX2) is Layout.OBLIVIOUS
    if HAS_VBMI:
        assert rep.unsupported(forest, f64, HOST) is None
        for reason, bad in (("NaN", oblivious_forest()),
                            ("depth", oblivious_forest(depth=7, nan_by_feature=True)),
                            ("level", random_forest())):
            assert reason in rep.unsupported(bad, f64, HOST)
            assert choose_layout(bad, Layout.OBLIVIOUS_BINNED, f64, HOST) in (
                Layout.OBLIVIOUS, Layout.PERFECT)
        # walks come in groups of 4; tree lanes walk other trees
        assert choose_layout(forest, Layout.OBLIVIOUS_BINNED, f64, HOST,
                             interleave=3) is Layout.OBLIVIOUS
        assert choose_layout(forest, Layout.OBLIVIOUS_BINNED, f64, HOST,
                             Lanes.TREES) is Layout.PERFECT
        from peregrine.backends.native import tune

        assert tune.heuristic(forest, HOST).schedule.layout is Layout.OBLIVIOUS_BINNED


@needs_vbmi
@pytest.mark.parametrize("nan_mode", ["Min", "Max"])
def test_catboost_oblivious_binned_matches_reference_bits(nan_mode):
    cb = pytest.importorskip("catboost")
    import peregrine

    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, 6))
    X[::9, 1] = np.nan
    y = X[:, 0] + np.nan_to_num(X[:, 1]) * X[:, 2]
    model = cb.CatBoostRegressor(iterations=40, depth=6, nan_mode=nan_mode, verbose=0,
                                 random_seed=0, thread_count=1,
                                 allow_writing_files=False).fit(X, y)
    rows = rng.normal(size=(333, 6)) * 2
    rows[::4, 1] = np.nan
    rows[1, 0], rows[2, 2] = np.inf, -np.inf
    fast = peregrine.compile(model, "native", options=peregrine.CompileOptions(
        schedule=Schedule(layout="oblivious_binned", interleave=4, row_tile=128)))
    assert layout_of(fast) == "oblivious_binned"
    reference = peregrine.compile(model, "reference")
    for dtype in (np.float64, np.float32):
        np.testing.assert_array_equal(fast.predict(rows.astype(dtype)),
                                      reference.predict(rows.astype(dtype)))
        np.testing.assert_allclose(fast.predict(rows.astype(dtype)),
                                   model.predict(rows.astype(dtype)), rtol=1e-5, atol=1e-6)


def stumps(thresholds):
    from peregrine.ir import make_forest

    n = len(thresholds)
    rng = np.random.default_rng(n)
    return make_forest(
        feature=np.tile([0, -1, -1], n),
        threshold=np.where(np.tile([True, False, False], n), np.repeat(thresholds, 3), 0.0),
        left=np.concatenate([[3 * i + 1, -1, -1] for i in range(n)]),
        right=np.concatenate([[3 * i + 2, -1, -1] for i in range(n)]),
        nan_left=np.tile([True, False, False], n),
        value=np.tile([0.0, 1.0, 0.0], n) * np.repeat(rng.normal(size=n), 3),
        tree_offsets=np.arange(n + 1) * 3, n_features=1, n_outputs=1)


@needs_vbmi
def test_a_full_byte_of_ranks():
    """254 distinct thresholds on a feature (LightGBM's 255 bins) fit the byte; with a NaN
    threshold among them rank 0 is taken and one fewer fits."""
    full = stumps(np.linspace(-3, 3, MAX_RANKS))
    spec, X = model_spec(full), edge_rows(full, n=400)
    binned = compiled(spec, Schedule(layout="binned", interleave=2, row_tile=64))
    assert layout_of(binned) == "binned"
    perfect = compiled(spec, Schedule(layout="perfect", interleave=2, row_tile=64))
    np.testing.assert_array_equal(binned.predict(X), perfect.predict(X))
    with_nan = stumps(np.concatenate([np.linspace(-3, 3, MAX_RANKS), [np.nan]]))
    assert "more than 253" in REPRESENTATIONS[Layout.BINNED].unsupported(
        with_nan, np.dtype(np.float64), HOST)
    fewer = stumps(np.concatenate([np.linspace(-3, 3, MAX_RANKS - 1), [np.nan]]))
    spec, X = model_spec(fewer), edge_rows(fewer, n=400)
    binned = compiled(spec, Schedule(layout="binned", interleave=2, row_tile=64))
    assert layout_of(binned) == "binned"
    perfect = compiled(spec, Schedule(layout="perfect", interleave=2, row_tile=64))
    np.testing.assert_array_equal(binned.predict(X), perfect.predict(X))
