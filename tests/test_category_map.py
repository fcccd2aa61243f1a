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
