"""Schedules for the native backend (Treebeard's auto-scheduler, section 10, for CPUs).

``choose_schedule`` narrows the space by target, batch size, feature count and tree shape to a
fixed heuristic; when ``CompileOptions.batch_size`` is known (``peregrine.compile`` sets it from
``sample_input``), it measures a handful of candidates around the heuristic on a synthetic
batch of that size and keeps the fastest. Measured decisions are cached on disk, keyed by the
forest's shape, the batch size, the thread count and the CPU, so the next compile of a model of
that shape (or a reload of a saved one) gets the same schedule without measuring.

Two schedules come back: one for batches (lanes hold rows) and one for a few rows (lanes hold
trees: one row against 16 trees at a time), with the row count where the second takes over.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from peregrine import config
from peregrine.backends.native.codegen import CACHE_ROWS_BYTES
from peregrine.backends.native.layout import choose_layout
from peregrine.backends.native.refill import refill_schedule
from peregrine.backends.native.representations import REPRESENTATIONS
from peregrine.backends.native.schedule import Lanes, Layout, LoopOrder, Schedule
from peregrine.ir import Forest
from peregrine.kernels import jit
from peregrine.options import CompileOptions

BYTE_TILES = (Layout.BINNED, Layout.OBLIVIOUS_BINNED)  # row tiles quantised to a byte per value
PERFECT_MAX_DEPTH = 10  # deeper trees: padding wastes more than reading a child index costs
# Up to half a row block, trees in the lanes win: a row-lane block costs the same for 1 row
# as for all of its rows (measured crossover ~ 40-50 rows for 16 x 6 row blocks)
EXHAUSTIVE_BATCH = 10_000  # tune="exhaustive" without a batch size: a batch-scoring job
COST_SLACK = 3.0  # representations whose cost hint is this much over the cheapest: not measured
FIXED_WIDTH = (Layout.BINNED, Layout.OBLIVIOUS, Layout.OBLIVIOUS_BINNED)
MEASURE_MAX_ROWS = 4096  # a sample batch larger than this predicts nothing new
MEASURE_REPEATS = 3
MEASURE_SECONDS = 0.005  # per timing loop: enough calls that one call's noise averages out


@dataclass(frozen=True)
class Choice:
    schedule: Schedule  # batches
    few_rows: Schedule | None  # <= few_rows_max rows (None: the batch schedule throughout)
    few_rows_max: int
    why: str


def heuristic(forest: Forest, target: Any, batch: int | None = None) -> Choice:
    """The fixed rules, from what measurements on AVX-512 and AVX2 machines showed: interleave
    enough walks to cover a gather's latency (6 at depth 8), rows in lanes for batches, trees
    in lanes for a few rows, scalar walks where the target has no gathers."""
    depth = forest.max_depth()
    layout = choose_layout(forest, Layout.PERFECT if depth <= PERFECT_MAX_DEPTH
                           else Layout.SPARSE)
    why = [f"max depth {depth}: {layout.value} layout"]
    batch_layout = cheapest_layout(forest, target, layout)
    if batch_layout is not layout:
        why.append(f"batches: {batch_layout.value} layout (cost hints: "
                   f"{REPRESENTATIONS[batch_layout].cost(forest, target):.1f} vs "
                   f"{REPRESENTATIONS[layout].cost(forest, target):.1f})")
    if target.isa == "generic":
        batch_s = Schedule(layout=batch_layout, vector_width=1, interleave=8, row_tile=64)
        few = Schedule(layout=layout, lanes=Lanes.TREES, vector_width=1, interleave=8,
                       node_pairs=True)
        why.append("no gather instructions on this target: scalar walks x8")
        return Choice(batch_s, few, few_rows_max(batch_s), "; ".join(why))
    lanes = 16 if target.isa == "avx512" else 8
    perfect = layout is Layout.PERFECT
    # perfect walks read levels 1-6 from registers and need fewer walks to hide the rest;
    # sparse walks gather every level (feature and threshold as one 64-bit word: 25% faster
    # measured on a depth-35 random forest) and want more walks in flight
    walks = 6 if perfect else 8
    if batch_layout is Layout.OBLIVIOUS_BINNED:  # 64-row groups of 4 walks; two groups per
        # tree share its node words and leaf planes (measured 4% faster than one)
        walks = 8 if 128 * forest.n_features <= CACHE_ROWS_BYTES else 4
    block = lanes * walks
    # the transposed row tile must fit its stack buffer: fewer rows per tile for wide inputs,
    # gathers straight from the input when not even one block fits (thousands of features)
    itemsize = 4 if forest.input_dtype == np.float32 else 8  # float64 inputs compare in float64
    fit = CACHE_ROWS_BYTES // (itemsize * max(1, forest.n_features)) // block * block
    tile = min(3 * block, fit) if fit >= block else 3 * block
    if batch_layout is Layout.BINNED:  # a byte per input value: the tile always fits
        tile = min(3 * block, CACHE_ROWS_BYTES // max(1, forest.n_features) // block * block)
    if batch_layout is Layout.OBLIVIOUS_BINNED:  # long tiles: measured 5-9% faster than 3 blocks
        tile = max(block, min(1024, CACHE_ROWS_BYTES // max(1, forest.n_features)
                              // block * block))
    batch_s = Schedule(layout=batch_layout, vector_width=lanes, interleave=walks, row_tile=tile,
                       cache_rows=fit >= block, node_pairs=not perfect)
    if batch_layout is Layout.REFILL:  # lanes refilled from long row tiles (refill.py)
        batch_s = refill_schedule(batch_s, forest)
    if fit < block:
        why.append(f"{forest.n_features} features: rows read in place, not cached")
    # 4 walks of 16 trees on AVX-512: fewer live registers than 8 (no spills around the
    # gathers); one row against XGBoost 500 x depth 8, AMD EPYC Zen 4: 3.9 -> 3.4 us, RF and
    # LightGBM 2-10% (loaded machine). AVX2: 8 x 8, 8 x 4 and 8 x 6 within 2%.
    tree_walks = max(1, min(4 if lanes == 16 else 8, -(-forest.n_trees // lanes)))
    # tree lanes gather every level: (feature, threshold) pairs halve the elements gathered;
    # row lanes read the top levels from registers and lose more to unpacking than they gain
    few = Schedule(layout=few_rows_layout(forest, target, layout, lanes),
                   lanes=Lanes.TREES, vector_width=lanes, interleave=tree_walks,
                   node_pairs=True)  # pairs: for perfect (and binned's fallback to it)
    why.append(f"batches: {walks} walks x {lanes} rows per {lanes * 32}-bit vector; "
               f"<= {few_rows_max(batch_s)} rows: {tree_walks} walks x {lanes} trees"
               + (" over binned words" if few.layout is Layout.BINNED else ""))
    return Choice(batch_s, few, few_rows_max(batch_s), "; ".join(why))


def cheapest_layout(forest: Forest, target: Any, layout: Layout) -> Layout:
    """``layout`` or a representation derived from it (BINNED, OBLIVIOUS from PERFECT) that
    can hold the forest on this target and that the cost hints rank lower
    (representations.py)."""
    cmp = np.dtype(forest.input_dtype if forest.input_dtype == np.float32 else np.float64)
    options = [layout] + ([Layout.BINNED, Layout.OBLIVIOUS, Layout.OBLIVIOUS_BINNED]
                          if layout is Layout.PERFECT else [])
    options += [Layout.REFILL] if layout is Layout.SPARSE else []
    usable = [lay for lay in options if choose_layout(forest, lay, cmp, target) is lay]
    return min(usable, key=lambda lay: REPRESENTATIONS[lay].cost(forest, target),
               default=layout)


def few_rows_layout(forest: Forest, target: Any, layout: Layout, lanes: int) -> Layout:
    """BINNED tree lanes where they can hold the forest (AVX-512 VBMI, <= 254 thresholds a
    feature...: Binned.unsupported), else ``layout``. One row's bins sit in registers and a
    node is one 16-bit word: measured on an AMD EPYC (Zen 4), one row, 500 trees x depth 8,
    kernel thread time against perfect tree lanes in the same run: XGBoost 0.80-0.84x,
    LightGBM 0.63-0.69x (docs/native.md)."""
    if layout is not Layout.PERFECT or lanes != 16:
        return layout
    cmp = np.dtype(forest.input_dtype if forest.input_dtype == np.float32 else np.float64)
    binned = choose_layout(forest, Layout.BINNED, cmp, target, Lanes.TREES, lanes)
    return Layout.BINNED if binned is Layout.BINNED else layout


def few_rows_max(batch: Schedule) -> int:
    return max(4, batch.block_rows // 2)


def candidates(base: Choice, batch: int, forest: Forest | None = None,
               target: Any = None) -> list[Choice]:
    """A few variations around the heuristic for the batch size the user will run: the other
    representations that can hold the forest on this target (representations.py, cheapest by
    their cost hints first), more or fewer interleaved walks, and tree tiles."""
    s, few = base.schedule, base.few_rows
    if batch <= base.few_rows_max and few is not None:
        return [base] + [Choice(s, few.replace(interleave=k), base.few_rows_max, base.why)
                         for k in (1, 2, 8) if k != few.interleave] + [
            Choice(s, few.replace(layout=lay), base.few_rows_max, base.why)
            for lay in few_rows_layouts(few, forest, target) if lay is not few.layout]
    out = [base]
    changes: list[dict] = []
    if forest is not None and target is not None and s.vector_width == 16:
        cmp = np.dtype(forest.input_dtype if forest.input_dtype == np.float32 else np.float64)
        for layout in (Layout.OBLIVIOUS_BINNED, Layout.OBLIVIOUS, Layout.BINNED,
                       Layout.PERFECT, Layout.REFILL, Layout.SPARSE):
            if layout is not s.layout and choose_layout(forest, layout, cmp, target) is layout:
                change = {"layout": layout, "node_pairs": False}
                if layout is Layout.OBLIVIOUS_BINNED:  # walks in 64-row groups of 4
                    change["interleave"] = 4
                if layout in (Layout.REFILL, Layout.SPARSE):  # deep trees: one or the other
                    change = _deep(s, layout, forest).to_json()
                changes.append(change)
    changes += [{"interleave": 4}, {"interleave": 8}, {"tree_tile": 16, "row_tile": 512}]
    for change in changes:
        variant = s.replace(**change)
        if variant.layout in BYTE_TILES and forest is not None and (
                variant.row_tile * forest.n_features > CACHE_ROWS_BYTES):
            continue
        if variant != s and variant.block_rows <= max(batch, s.vector_width):
            out.append(Choice(variant, few, base.few_rows_max, base.why))
    return out


def few_rows_layouts(few: Schedule, forest: Forest | None, target: Any) -> list[Layout]:
    """The tree-lane representations worth measuring for a few rows: PERFECT and, where it
    can hold the forest with 16 lanes, BINNED (the heuristic's pick, few_rows_layout)."""
    if forest is None or target is None or few.layout not in (Layout.PERFECT, Layout.BINNED):
        return [few.layout]
    cmp = np.dtype(forest.input_dtype if forest.input_dtype == np.float32 else np.float64)
    out = [Layout.PERFECT]
    if choose_layout(forest, Layout.BINNED, cmp, target, Lanes.TREES, 16) is Layout.BINNED:
        out.append(Layout.BINNED)
    return out


def widths(target: Any) -> tuple[int, ...]:
    """float32 lanes of the target's 128-, 256- and 512-bit vectors (1: no gathers, scalar)."""
    return {"avx512": (4, 8, 16), "avx2": (4, 8)}.get(target.isa, (1,))


def search(forest: Forest, base: Choice, batch: int, options: CompileOptions, target: Any,
           threads: int, rows: np.ndarray | None) -> tuple[Choice, list[Choice], list[float]]:
    """``tune="exhaustive"``: coordinate descent over the schedule space, each stage measured
    around the best so far, so ~30 kernels are built instead of the ~300 of the full product:
    1. representations that can hold the forest on this target, pruned by their cost hints
       (over COST_SLACK x the cheapest's: not measured);
    2. vector width (128/256/512-bit where the representation allows) x interleave;
    3. row tile (1, 2, 3, 6 blocks) x loop order with tree tiles.
    A few rows (``batch`` within the few-rows range) search the tree-lane schedule's width and
    interleave instead. Returns the best choice, every candidate and its time."""
    s, few, fmax, why = base.schedule, base.few_rows, base.few_rows_max, base.why
    tried: list[Choice] = []
    timings: list[float] = []

    def stage(choices: list[Choice]) -> Choice:
        new = [c for c in dict.fromkeys(choices) if c not in tried]
        if new:
            _, times = measure(forest, new, batch, options, target, threads, rows)
            tried.extend(new)
            timings.extend(times)
        return tried[int(np.argmin(timings))]

    if batch <= fmax and few is not None:
        # binned words need 16 lanes (one register of the row's bins per 16 features)
        stage([base] + [Choice(s, few.replace(layout=lay, vector_width=w, interleave=k),
                               fmax, why)
                        for lay in few_rows_layouts(few, forest, target)
                        for w in ((16,) if lay is Layout.BINNED else widths(target))
                        for k in (1, 2, 3, 4, 6, 8)])
        return tried[int(np.argmin(timings))], tried, timings
    cmp = np.dtype(forest.input_dtype if forest.input_dtype == np.float32 else np.float64)
    usable = [lay for lay in Layout if choose_layout(forest, lay, cmp, target) is lay]
    costs = {lay: REPRESENTATIONS[lay].cost(forest, target) for lay in usable}
    cheapest = min(costs.values(), default=0.0)
    firsts = [base]
    for lay in usable:
        if lay is not s.layout and costs[lay] <= COST_SLACK * cheapest:
            change = {"layout": lay, "node_pairs": lay is Layout.SPARSE}
            if lay is Layout.OBLIVIOUS_BINNED:  # walks in 64-row groups of 4
                change["interleave"] = 4
            if lay in (Layout.REFILL, Layout.SPARSE):
                change = _deep(s, lay, forest).to_json()
            firsts.append(Choice(_fit(s.replace(**change), forest), few, fmax, why))
    best = stage(firsts)
    b = best.schedule
    # byte tiles and oblivious walks are written for 512-bit registers: interleave only
    lanes = (b.vector_width,) if b.layout in FIXED_WIDTH else widths(target)
    best = stage([Choice(_fit(b.replace(vector_width=w, interleave=k), forest), few, fmax, why)
                  for w in lanes for k in (2, 4, 6, 8, 12)])
    b = best.schedule
    tiles = [b.replace(row_tile=m * b.block_rows) for m in (1, 2, 3, 6)]
    tiles += [b.replace(loop_order=order, tree_tile=t) for t in (16, 64)
              for order in (LoopOrder.ROWS_OUTER, LoopOrder.TREES_OUTER)]
    stage([Choice(_fit(t, forest), few, fmax, why) for t in tiles
           if t.block_rows <= max(batch, t.vector_width)])
    return tried[int(np.argmin(timings))], tried, timings


def _deep(s: Schedule, layout: Layout, forest: Forest) -> Schedule:
    """The other deep-tree walk for a SPARSE or REFILL schedule: REFILL's long tiles of 4
    lane groups, or SPARSE's 8 walks over 3-block tiles (the heuristic's)."""
    if layout is Layout.REFILL:
        return refill_schedule(s, forest)
    return s.replace(layout=layout, interleave=8, row_tile=3 * 8 * s.vector_width,
                     cache_rows=True, node_pairs=True)


def _fit(schedule: Schedule, forest: Forest) -> Schedule:
    """A byte-tile schedule's row tile shrunk (in whole blocks) to fit its stack buffer."""
    if schedule.layout not in BYTE_TILES:
        return schedule
    most = CACHE_ROWS_BYTES // max(1, forest.n_features)
    tile = max(schedule.block_rows, most // schedule.block_rows * schedule.block_rows)
    return schedule.replace(row_tile=min(schedule.row_tile, tile))


def describe(schedule: Schedule) -> str:
    """Short name of a candidate for explain(): representation, walks x lanes, tiles."""
    if schedule.lanes is Lanes.TREES:
        return f"{schedule.layout.value} {schedule.interleave}x{schedule.vector_width} trees"
    tiles = f", tree tile {schedule.tree_tile}" if schedule.tree_tile else ""
    if schedule.loop_order is LoopOrder.TREES_OUTER:
        tiles += ", trees outer"
    return (f"{schedule.layout.value} {schedule.interleave}x{schedule.vector_width} "
            f"rows {schedule.row_tile}{tiles}")


def choose_schedule(forest: Forest, options: CompileOptions, target: Any,
                    threads: int, sample: np.ndarray | None = None) -> Choice:
    """``sample``: the user's rows as the forest reads them (``compile(sample_input=...)``);
    candidates are measured on them rather than on synthetic rows. ``options.tune`` picks
    the heuristic alone ("off"), a handful of candidates ("auto", when the batch size is
    known) or the staged search over the whole space ("exhaustive")."""
    exhaustive = options.tune == "exhaustive"
    batch = options.batch_size or (EXHAUSTIVE_BATCH if exhaustive else None)
    base = heuristic(forest, target, batch)
    if options.tune == "off" or batch is None or os.environ.get("PEREGRINE_NO_TUNE"):
        return base
    rows = None
    if sample is not None and sample.ndim == 2 and sample.shape[0]:
        n = min(batch, MEASURE_MAX_ROWS)
        # as many rows as the batch the user will run, repeating the sample if it is smaller
        rows = np.ascontiguousarray(sample[np.arange(n) % sample.shape[0]])
    digest = None if rows is None else hashlib.sha256(rows.tobytes()).hexdigest()[:12]
    key = _key(forest, batch, threads, target, digest, "exhaustive" if exhaustive else None)
    cached = _load_decision(key)
    if cached is not None:
        return cached
    if exhaustive:
        best, tried, timings = search(forest, base, batch, options, target, threads, rows)
    else:
        tried = candidates(base, batch, forest, target)
        best, timings = measure(forest, tried, batch, options, target, threads, rows)
    few_rows = base.few_rows is not None and batch <= base.few_rows_max
    shown = ", ".join(f"{describe(c.few_rows if few_rows else c.schedule)} {t * 1e6:.1f} us"
                      for c, t in zip(tried, timings))
    on = "the sample's" if rows is not None else "synthetic"
    choice = Choice(best.schedule, best.few_rows, best.few_rows_max,
                    f"{base.why}; measured {len(timings)} candidates on {batch} {on} rows "
                    f"({shown})")
    _store_decision(key, choice)
    return choice


def measure(forest: Forest, choices: list[Choice], batch: int, options: CompileOptions,
            target: Any, threads: int, rows: np.ndarray | None = None
            ) -> tuple[Choice, list[float]]:
    from peregrine.backends.native.program import ForestProgram

    if rows is None:
        rows = synthetic_rows(forest, min(batch, MEASURE_MAX_ROWS))
    program = np.zeros(1)  # an empty epilogue: only the trees are timed
    timings = []
    progs = [ForestProgram(forest, c.schedule, precision=options.precision, target=target,
                           n_threads=threads, small=c.few_rows, small_rows=c.few_rows_max)
             for c in choices]
    specs = []
    for prog in progs:
        with contextlib.suppress(ValueError):  # a schedule this forest cannot take: below
            specs += prog.kernel_specs(rows)
    jit.load_all(specs, target, jobs=jit.compile_jobs(threads))  # the candidates at once
    for prog in progs:
        run = prog.caller(program, forest.n_outputs,
                          lambda X, p=prog: p(X, program, forest.n_outputs))  # as compiled
        try:
            run(rows)  # compile and warm up
        except ValueError:  # a schedule this forest cannot take (kernel_spec says why)
            timings.append(float("inf"))
            continue
        t = time.perf_counter()
        run(rows)
        calls = max(1, min(1000, int(MEASURE_SECONDS / max(time.perf_counter() - t, 1e-7))))
        best = float("inf")
        for _ in range(MEASURE_REPEATS):  # best of a few loops: other processes only add time
            t = time.perf_counter()
            for _ in range(calls):
                run(rows)
            best = min(best, (time.perf_counter() - t) / calls)
        timings.append(best)
    return choices[int(np.argmin(timings))], timings


def synthetic_rows(forest: Forest, n: int, seed: int = 0) -> np.ndarray:
    """Rows drawn per feature from the thresholds the trees test on it, so walks take both
    sides of the splits as real data would (standard normals would not reach most leaves)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, forest.n_features)).astype(np.float32)
    internal = forest.feature >= 0
    feats, thr = forest.feature[internal], forest.threshold[internal]
    finite = np.isfinite(thr)
    for j in np.unique(feats):
        t = thr[(feats == j) & finite]
        if t.size:
            X[:, j] = rng.choice(t, n) + rng.standard_normal(n) * (np.std(t) + 1e-3) * 0.1
    return X


def _key(forest: Forest, batch: int, threads: int, target: Any,
         sample: str | None = None, mode: str | None = None) -> str:
    depths = forest.tree_depths()
    shape = [forest.n_trees, int(depths.max(initial=0)), round(float(depths.mean() or 0), 1),
             forest.n_features, forest.n_outputs, forest.value_width,
             forest.has_categorical, forest.has_missing_zero, batch, threads,
             target.cpu, target.features]
    if sample is not None:  # measured on the user's rows: a decision of its own
        shape.append(sample)
    if mode is not None:  # a wider search: a decision of its own (auto's keys unchanged)
        shape.append(mode)
    return hashlib.sha256(json.dumps(shape, default=str).encode()).hexdigest()[:24]


def _path():
    return config.cache_dir() / "native" / "schedules.json"


def _load_decision(key: str) -> Choice | None:
    try:
        entry = json.loads(_path().read_text())[key]
        few = entry["few_rows"]
        return Choice(Schedule.from_json(entry["schedule"]),
                      None if few is None else Schedule.from_json(few),
                      int(entry["few_rows_max"]), entry["why"] + " (cached decision)")
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _store_decision(key: str, choice: Choice) -> None:
    path = _path()
    try:
        table = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        table = {}
    table[key] = {"schedule": choice.schedule.to_json(),
                  "few_rows": None if choice.few_rows is None else choice.few_rows.to_json(),
                  "few_rows_max": choice.few_rows_max, "why": choice.why}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache only costs measuring again


__all__ = ["Choice", "candidates", "choose_schedule", "few_rows_max", "heuristic", "measure",
           "search", "synthetic_rows"]
