"""Which input columns' NaN can reach a value of the graph being built.

A step that rejects NaN (a linear model's ``check_array``) refuses it in what it reads; the
boundary must then refuse a NaN in every input column from which one can reach that step, and
only there: a NaN that a OneHotEncoder reads becomes its NaN category (or an unknown one),
a NaN a SimpleImputer reads is filled, and scikit-learn answers such rows. Per output column
of each node, the set of input columns whose NaN it may carry:

* ``ONE_HOT``: none (indicators are 0 or 1);
* ``IMPUTE`` of NaN with finite fill values: none;
* ``CATEGORY_MAP`` (OrdinalEncoder): a mapped column whose NaN becomes a number (a fitted NaN
  category with a numeric ``encoded_missing_value``, or a numeric unknown value when NaN was
  never seen): none; other columns their own;
* ``SELECT`` and ``CONCAT``: the columns they move;
* the per-column ops (those whose definition names ``PER_COLUMN`` parameters: scalers,
  clips, ufuncs, quantile and power transforms, interpolation tables...): column j's own;
* any other op: every column any of its inputs may carry (a product mixes them).

``None`` where a width is unknown: the caller refuses NaN in every column, as before.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from peregrine.ir import Node, Op


def per_column(n: Node) -> bool:
    """Output column j computed from input column j alone (the op's ``narrow`` keeps the
    columns it is asked for: ir/semantics/base.py)."""
    return type(n.attrs).PER_COLUMN is not None


def nan_sources(node_of: Callable[[str], Node], name: str) -> frozenset[int] | None:
    """The input columns whose NaN may reach node ``name``'s output (any of its columns)."""
    memo: dict[str, list[frozenset[int]] | None] = {}

    def reach(at: str) -> list[frozenset[int]] | None:
        if at in memo:
            return memo[at]
        n = node_of(at)
        width = None if n.width is None else int(n.width)
        ins = [reach(i) for i in n.inputs]
        if width is None or any(x is None for x in ins):
            out = None
        elif n.op is Op.INPUT:
            out = [frozenset([j]) for j in range(width)]
        elif n.op is Op.SELECT:
            cols = [int(c) for c in np.asarray(n.attrs.columns).reshape(-1)]
            out = [ins[0][c] for c in cols] if all(0 <= c < len(ins[0]) for c in cols) \
                else None
        elif n.op is Op.CONCAT:
            out = [s for x in ins for s in x]
        elif n.op is Op.ONE_HOT or (n.op is Op.IMPUTE and _fills_nan(n.attrs)):
            out = [frozenset()] * width
        elif n.op is Op.CATEGORY_MAP and len(ins) == 1 and len(ins[0]) == width:
            out = list(ins[0])
            for j, cats, codes, unknown in zip(n.attrs.columns, n.attrs.categories,
                                               n.attrs.codes, n.attrs.unknown):
                if not _maps_nan_to_nan(cats, codes, unknown):
                    out[int(j)] = frozenset()
        elif per_column(n) and len(ins) == 1 and len(ins[0]) == width:
            out = ins[0]
        else:
            every = frozenset().union(*(s for x in ins for s in x))
            out = [every] * width
        memo[at] = out
        return out

    got = reach(name)
    return None if got is None else frozenset().union(*got)


def _fills_nan(a) -> bool:
    """An IMPUTE whose missing marker is NaN and whose fill values are finite: no NaN out."""
    missing = float(a.missing)
    return bool(np.isnan(missing) and np.all(np.isfinite(np.asarray(a.values, dtype=float))))


def _maps_nan_to_nan(cats, codes, unknown) -> bool:
    """Whether an OrdinalEncoder column gives NaN for a NaN: its NaN category's code, else
    its unknown value (NaN matches only a NaN category: ir/semantics CategoryMap)."""
    cats = np.asarray(cats, dtype=float).reshape(-1)
    at = np.flatnonzero(np.isnan(cats))
    value = np.asarray(codes, dtype=float).reshape(-1)[at[0]] if at.size else float(unknown)
    return bool(np.isnan(value))
