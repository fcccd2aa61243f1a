"""Op.CATEGORY_MAP's rule (a sorted lookup since 2026-11-29, where it compared every value with
every category) against the definition written as a loop: the first equal category's code,
NaN equal to a NaN category, -0.0 equal to 0.0, repeated categories, no categories at all."""

from __future__ import annotations

import numpy as np

from peregrine.ir import GraphBuilder, Op
from peregrine.options import CompileOptions


def _first_match(v: float, cats: list, codes: list, unknown: float) -> float:
    for c, code in zip(cats, codes):
        if v == c or (np.isnan(v) and np.isnan(c)):
            return code
    return unknown


def test_category_map_rule_is_the_first_match():
    cats = [[3.0, -0.0, np.nan, 7.5, 0.0, 3.0, np.nan], [], [2.0, 1.0]]
    codes = [[10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0], [], [np.nan, 5.0]]
    unknown = [-1.0, -2.0, np.nan]
    g = GraphBuilder()
    x = g.input(4)
    node = g.add(Op.CATEGORY_MAP, (x,), width=4, columns=[0, 2, 3], categories=cats,
                 codes=codes, unknown=unknown)
    graph = g.build({"y": node})
    n = graph.by_name[node]
    rng = np.random.default_rng(0)
    values = np.array([3.0, -0.0, 0.0, np.nan, 7.5, 1.0, 2.0, 4.0, np.inf, -np.inf, 1e-300])
    X = rng.choice(values, size=(300, 4))
    got = n.attrs.rule(n, [X], CompileOptions())
    want = X.copy()
    for j, col in enumerate([0, 2, 3]):
        want[:, col] = [_first_match(v, cats[j], codes[j], unknown[j]) for v in X[:, col]]
    np.testing.assert_array_equal(got, want)  # NaN where NaN; column 1 passes through


def test_repeated_columns_reuse_the_lookup_only_when_equal():
    """TargetEncoder's multi-class form reads each feature once per class: a column equal to
    an earlier one with the same categories reuses that lookup; one differing value (or NaN
    against NaN, -0.0 against 0.0) keeps the answers of the definition."""
    cats = [[1.0, 2.0, np.nan, 0.0]] * 4
    codes = [[10.0, 20.0, 30.0, 40.0], [11.0, 21.0, 31.0, 41.0], [12.0, 22.0, 32.0, 42.0],
             [13.0, 23.0, 33.0, 43.0]]
    unknown = [-1.0, -2.0, -3.0, -4.0]
    g = GraphBuilder()
    x = g.input(4)
    node = g.add(Op.CATEGORY_MAP, (x,), width=4, columns=[0, 1, 2, 3], categories=cats,
                 codes=codes, unknown=unknown)
    n = g.build({"y": node}).by_name[node]
    rng = np.random.default_rng(1)
    col = rng.choice([1.0, 2.0, np.nan, 0.0, 5.0], size=200)
    X = np.stack([col, col, col.copy(), col], axis=1)
    X[17, 2] = 2.0 if col[17] != 2.0 else 1.0  # column 2 differs in one row
    X[X[:, 3] == 0.0, 3] = -0.0  # column 3 equals column 0 as numbers
    got = n.attrs.rule(n, [X], CompileOptions())
    want = X.copy()
    for j in range(4):
        want[:, j] = [_first_match(v, cats[j], codes[j], unknown[j]) for v in X[:, j]]
    np.testing.assert_array_equal(got, want)
