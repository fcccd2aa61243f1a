"""A linear model reading one-hot indicators, fused without the indicators (rowwise.py's
``one_hot_linear`` step; rowwise_emit.op_one_hot_linear emits it).

``LINEAR(ONE_HOT(x))``, or ``LINEAR(CONCAT(blocks))`` with one-hot blocks (a
ColumnTransformer's OneHotEncoder beside scalers, then LogisticRegression), is computed per row
as scikit-learn computes it on the sparse matrix the ColumnTransformer returns there
(``csr_matvec``: the row's stored values times their weights, added left to right from 0.0,
then the intercept): per one-hot input column, the category it equals picks one row of
weights (its slot's row of W; the unknown slot's row when none matches; zeros where no slot
is set, which leave the sum as it is), added in column order; a dense block adds
``x_j * W[j]`` for each of its columns in order. The 1.0s and 0.0s are never made: a row of
20 columns with 50 categories each is 20 comparisons of 50 lanes and 20 loads, where the
indicators were a 1,000-wide vector (past the fused kernel's width limit, so the op-by-op
rules ran: 1.6 GB of indicators for 200K rows).

The order is the indicator columns' (``W``'s rows) only when each input column's slots come
after the previous column's, as OneHotEncoder lays them out; other layouts are not fused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peregrine.ir import Graph, Op
from peregrine.ir.spec import GUARD

MAX_PARAMS = 1 << 16  # float64 parameters of one fused one-hot product (its weight rows)


def value_readers(graph: Graph) -> dict[str, int]:
    """How many times each node is read by other nodes and by outputs other than guards (only
    runtime/guards.py reads those, by the reference rules, on rows past the model's bound)."""
    count = graph.readers()
    for name, out in graph.outputs.items():
        if name.startswith(GUARD):
            count[out] -= 1
    return count


def absorbed(steps: list, wanted: set[str], readers: dict[str, int], by_name: dict,
             f32: dict[str, bool]) -> tuple[dict[str, list], set[str]]:
    """(LINEAR node name -> the nodes its input concatenates, the ONE_HOT and CONCAT nodes
    those LINEARs absorb) among ``steps``: where each absorbed node is read by the LINEAR
    alone and is not itself wanted, and the product fits (``_fits``)."""
    linears: dict[str, list] = {}
    taken: set[str] = set()
    for node in steps:
        if node.op is not Op.LINEAR:
            continue
        src = by_name[node.inputs[0]]
        parts = ([src] if src.op is Op.ONE_HOT else
                 [by_name[i] for i in src.inputs] if src.op is Op.CONCAT else [])
        hots = [p for p in parts if p.op is Op.ONE_HOT]
        inner = hots + ([src] if src.op is Op.CONCAT else [])
        if not hots or f32.get(src.name) or f32.get(node.name):
            continue  # no indicators; or float32 values the rules round (not reproduced here)
        if any(readers.get(n.name, 0) != 1 or n.name in wanted for n in inner):
            continue
        if not all(_in_column_order(p.attrs) for p in hots) or not _fits(node, parts):
            continue
        linears[node.name] = parts
        taken.update(n.name for n in inner)
    return linears, taken


def _in_column_order(a) -> bool:
    """Whether each input column's slots (and unknown slot) all come after the previous
    column's: summing the picked rows column by column is then W's row order."""
    top = -1
    for slots, unknown in zip(a.slots, a.unknown_slots):
        s = np.asarray(slots, dtype=np.int64).reshape(-1)
        s = np.concatenate([s[s >= 0], [int(unknown)] if int(unknown) >= 0 else []])
        if not s.size:
            continue
        if s.min() <= top:
            return False
        top = int(s.max())
    return True


def _fits(node, parts: list) -> bool:
    w = int(node.width)
    weight = np.asarray(node.attrs.weight)
    if weight.ndim != 2 or weight.shape != (sum(int(p.width) for p in parts), w):
        return False
    size = 0
    for p in parts:
        if p.op is Op.ONE_HOT:
            size += sum((np.size(c) + 1) * (w + 1) for c in p.attrs.categories)
        else:
            size += int(p.width) * w
    return size <= MAX_PARAMS


def one_hot_linear_step(node, parts: list, index: dict[str, int], by_name: dict,
                        param) -> tuple[dict, list[int], list[int]]:
    """(the step record, its input value indices, their widths): one block per part; a
    one-hot block reads the ONE_HOT's own input and holds, per input column it reads, its
    categories and one weight row per category plus the no-match row."""
    a = node.attrs
    w = int(node.width)
    weight = np.asarray(a.weight, dtype=np.float64)
    blocks, ins, widths, row = [], [], [], 0
    for p in parts:
        block = weight[row:row + int(p.width)]
        row += int(p.width)
        if p.op is not Op.ONE_HOT:
            blocks.append({"kind": "dense", "W": param(block)})
            ins.append(index[p.name])
            widths.append(int(p.width))
            continue
        src = p.inputs[0]
        cols = []
        for j, cats, slots, unknown in zip(p.attrs.columns, p.attrs.categories, p.attrs.slots,
                                           p.attrs.unknown_slots):
            cats = np.asarray(cats, dtype=np.float64).reshape(-1)
            slots = np.asarray(slots, dtype=np.int64).reshape(-1)
            rows = np.zeros((cats.size + 1, w))
            rows[:-1][slots >= 0] = block[slots[slots >= 0]]
            if int(unknown) >= 0:
                rows[-1] = block[int(unknown)]
            # a sum started at +0.0 is never -0.0 (x + y is -0.0 only for two -0.0s), so
            # adding a zero of either sign leaves it as it is: a column all of whose rows are
            # zeros (none of its slots read) is left out
            if not rows.any():
                continue
            col = {"j": int(j), "n": int(cats.size), "rows": param(rows),
                   "nan": [int(k) for k in np.flatnonzero(np.isnan(cats))]}
            if cats.size:
                col["cats"] = param(np.nan_to_num(cats, nan=0.0))
            cols.append(col)
        blocks.append({"kind": "one_hot", "cols": cols})
        ins.append(index[src])
        widths.append(int(by_name[src].width))
    step = {"op": "one_hot_linear", "blocks": blocks, "b": param(a.bias, w)}
    return step, ins, widths


MAX_TABLE = 1 << 22  # float64 entries of one RowTable (32 MiB)


@dataclass(frozen=True)
class RowTable:
    """A ONE_HOT's picked weight rows as one table indexed by value (the ONNX export's and
    the TVM backend's form, which have no per-column comparison loop): input column
    ``columns[k]``'s value ``v`` picks row ``offsets[k] + (v - lows[k])`` when that is a whole
    number in ``[0, spans[k])``, row ``offsets[k] + nan_rows[k]`` for NaN, and row
    ``offsets[k] + spans[k]`` (no match) otherwise. Columns none of whose rows moves a sum
    are left out."""

    columns: list[int]
    lows: list[float]
    spans: list[int]
    nan_rows: list[int]
    offsets: np.ndarray
    table: np.ndarray  # (rows, w) float64


def row_table(a, block: np.ndarray) -> RowTable | None:
    """The RowTable of ONE_HOT attributes ``a`` for the LINEAR weight rows ``block`` of its
    indicators; None unless each column's categories are integers in a short range (codes of
    strings, small integer categories) and no two columns set one slot (an indicator set by
    two columns is 1, not a sum of two rows), or when nothing is picked."""
    w = block.shape[1]
    cols, lows, spans, nan_rows, tables = [], [], [], [], []
    used: set[int] = set()
    for j, cats, slots, unknown in zip(a.columns, a.categories, a.slots, a.unknown_slots):
        c = np.asarray(cats, np.float64).reshape(-1)
        s = np.asarray(slots, np.int64).reshape(-1)
        mine = set(s[s >= 0].tolist()) | ({int(unknown)} if int(unknown) >= 0 else set())
        if mine & used:
            return None
        used |= mine
        num = c[~np.isnan(c)]
        if num.size and (not np.isfinite(num).all() or (num != np.floor(num)).any()):
            return None
        lo = float(num.min()) if num.size else 0.0
        span = int(num.max() - lo) + 1 if num.size else 0
        if span > max(64, 4 * num.size):
            return None
        # rows: value - lo = 0 .. span - 1, then no match (span), then a NaN category
        rows = np.tile(block[int(unknown)] if int(unknown) >= 0 else np.zeros(w), (span + 2, 1))
        for cat, slot in zip(c, s):
            rows[span + 1 if np.isnan(cat) else int(cat - lo)] = block[slot] if slot >= 0 else 0
        if not rows.any():
            continue  # nothing this column picks moves the sum
        cols.append(int(j))
        lows.append(lo)
        spans.append(span)
        nan_rows.append(span + 1 if np.isnan(c).any() else span)  # else: no match
        tables.append(rows)
    if not cols or sum(t.size for t in tables) > MAX_TABLE:
        return None
    offsets = np.cumsum([0] + [len(t) for t in tables[:-1]]).astype(np.int64)
    return RowTable(cols, lows, spans, nan_rows, offsets, np.concatenate(tables))
