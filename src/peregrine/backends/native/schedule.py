"""The native backend's schedule: how the (row, tree) iteration space is walked and how the model
is laid out in memory (Treebeard, sections 5 and 8). One frozen, printable value; the code
generator follows it and nothing else, so a schedule printed by ``explain()`` can be passed back
through ``CompileOptions(schedule=...)`` to reproduce the same program.

Loop nest (``loop_order="rows_outer"``; ``"trees_outer"`` swaps the two tile loops)::

    for row_tile in rows step row_tile:             # parallel="rows": rows split over threads
      for tree_tile in trees step tree_tile:        # parallel="trees": trees split, sums privatised
        for block in row_tile step vector_width * interleave:
          acc = 0 (first tree tile) or the partial sums
          for tree in tree_tile:
            `interleave` walks of `vector_width` rows each, level by level
            acc += leaf values
          store acc (divided and offset by the base score after the last tree tile)
"""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass
from typing import Any


class Layout(enum.Enum):
    """Memory representation of the trees (a Treebeard "representation plugin")."""

    PERFECT = "perfect"  # array layout: every tree padded to the model's depth, children 2i+1/2i+2
    SPARSE = "sparse"  # node arrays with a child index, children adjacent, leaves self-loop
    # PERFECT slots with inputs quantised to per-feature threshold ranks: a row tile becomes
    # bytes that byte permutes (AVX-512 VBMI) index, so walks gather no inputs (representations.py)
    BINNED = "binned"
    # PERFECT slots of oblivious trees (one split per level, CatBoost's symmetric trees): each
    # level is one scalar node and one contiguous input load for all lanes, no gathers
    OBLIVIOUS = "oblivious"
    # OBLIVIOUS trees over BINNED inputs: 64 rows per byte compare, leaves looked up with byte
    # permutes of the tree's leaf table (AVX-512 VBMI), no gathers (representations.py)
    OBLIVIOUS_BINNED = "oblivious_binned"
    # SPARSE nodes as one 64-bit word; lanes that reach a leaf take the next row, so walks cost
    # the mean path, not the deepest (deep trees, AVX2/AVX-512 gathers; refill.py)
    REFILL = "refill"


class LoopOrder(enum.Enum):
    ROWS_OUTER = "rows_outer"  # each row tile sees every tree tile (accumulators stay hot)
    TREES_OUTER = "trees_outer"  # each tree tile sees every row tile (trees stay in cache)


class Lanes(enum.Enum):
    """What the SIMD lanes (and interleaved walks) hold."""

    ROWS = "rows"  # one tree at a time for vector_width x interleave rows: batch throughput
    TREES = "trees"  # one row at a time against vector_width x interleave trees: latency


class Parallel(enum.Enum):
    ROWS = "rows"  # threads take disjoint row ranges
    TREES = "trees"  # threads take disjoint tree ranges into private sums (small batches)


@dataclass(frozen=True)
class Schedule:
    """A concrete schedule. Sizes are in rows / trees; ``tree_tile=0`` means all trees.

    ``vector_width`` rows share one SIMD register (1 = scalar walks); ``interleave`` independent
    walks are emitted level by level so their loads overlap (Treebeard's interleave clause);
    ``row_tile`` is rounded up to a multiple of ``vector_width * interleave``.
    """

    layout: Layout = Layout.PERFECT
    lanes: Lanes = Lanes.ROWS
    vector_width: int = 16
    interleave: int = 2
    row_tile: int = 256
    tree_tile: int = 0
    loop_order: LoopOrder = LoopOrder.ROWS_OUTER
    parallel: Parallel = Parallel.ROWS
    # sort trees by depth (and output group): reassociates the sum, so off unless asked for
    reorder_trees: bool = False
    cache_rows: bool = True  # copy each row tile, transposed, into a stack buffer (SIMD only)
    node_pairs: bool = False  # gather feature and float32 threshold as one 64-bit word

    def __post_init__(self) -> None:
        for name, enum_type in (("layout", Layout), ("lanes", Lanes),
                                ("loop_order", LoopOrder), ("parallel", Parallel)):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, enum_type(value))
        if self.vector_width not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"Schedule.vector_width must be 1..32 (power of two), "
                             f"got {self.vector_width}")
        if not 1 <= self.interleave <= 16:
            raise ValueError(f"Schedule.interleave must be 1..16, got {self.interleave}")
        if self.tree_tile < 0 or self.row_tile < 1:
            raise ValueError("Schedule.row_tile must be >= 1 and tree_tile >= 0")
        block = self.block_rows
        if self.row_tile % block:
            object.__setattr__(self, "row_tile", (self.row_tile // block + 1) * block)

    @property
    def block_rows(self) -> int:
        """Rows walked together through one tree."""
        return self.vector_width * self.interleave

    def replace(self, **changes: Any) -> Schedule:
        return dataclasses.replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return {f.name: (v.value if isinstance(v, enum.Enum) else v)
                for f in dataclasses.fields(self) for v in [getattr(self, f.name)]}

    @classmethod
    def from_json(cls, data: dict[str, Any] | str) -> Schedule:
        if isinstance(data, str):
            data = json.loads(data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown Schedule fields {sorted(unknown)}")
        return cls(**data)

    def __str__(self) -> str:
        if self.lanes is Lanes.TREES:
            return (f"{self.layout.value} layout, one row at a time, {self.interleave} walks x "
                    f"{self.vector_width} trees, parallel over {self.parallel.value}")
        tiles = f"rows {self.row_tile} x trees {self.tree_tile or 'all'}"
        return (f"{self.layout.value} layout, {self.loop_order.value}, tiles {tiles}, "
                f"{self.interleave} walks x {self.vector_width} rows, "
                f"parallel over {self.parallel.value}"
                + (", trees sorted by depth" if self.reorder_trees else ""))


def as_schedule(value: Any) -> Schedule | None:
    """Accept a Schedule, its JSON dict (as stored in an artifact's options) or None."""
    if value is None or isinstance(value, Schedule):
        return value
    if isinstance(value, (dict, str)):
        return Schedule.from_json(value)
    raise TypeError(f"CompileOptions.schedule for the native backend must be a "
                    f"peregrine.backends.native.Schedule, got {type(value).__name__}")
