"""Hypothesis: random rows (any float the source accepts, including NaN/inf and values drawn
from the model's own thresholds) give the source library's answers on every backend."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import peregrine
from peregrine.backends import available_backends
from peregrine.frontends import convert
from tests.conformance.test_conformance import CASES, assert_same

# One representative case per library/family keeps this fast; the conformance suite covers all.
PICK = ("sk-rf-clf-multi", "sk-rf-reg", "sk-gb", "sk-hgb", "xgb-", "lgb-")


def _picked():
    out, seen = [], set()
    for case in CASES:
        for prefix in PICK:
            if case.id.startswith(prefix) and prefix not in seen:
                seen.add(prefix)
                out.append(case)
    return out


@st.composite
def rows(draw, spec, thresholds, n_features):
    n = draw(st.integers(1, 12))
    specials = [0.0, -0.0, 1e-36]
    if spec.allow_nan:
        specials.append(float("nan"))
    if spec.allow_inf:
        specials += [float("inf"), float("-inf")]
    value = st.one_of(
        st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32),
        st.sampled_from(specials),
        st.sampled_from(thresholds) if thresholds else st.just(0.5),
    )
    return np.array(draw(st.lists(st.lists(value, min_size=n_features, max_size=n_features),
                                  min_size=n, max_size=n)), dtype=np.float64)


@pytest.mark.parametrize("case", _picked(), ids=lambda c: c.id)
def test_random_rows_match_source(case):
    model, _ = case.built
    spec = convert(model)
    # finite thresholds only: sklearn's NaN-only splits store +inf, which the model rejects
    thresholds = sorted({float(t) for f in spec.graph.forests()
                         for t in f.threshold[f.feature >= 0][:200] if np.isfinite(t)})
    backends = [b for b in ("torch", "native") if b in available_backends()] or ["reference"]
    compiled = [peregrine.compile(model, b) for b in backends]

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(X=rows(spec, thresholds, spec.n_features), as_f32=st.booleans())
    def check(X, as_f32):
        if case.categorical:
            X[:, list(case.categorical)] = np.abs(np.nan_to_num(X[:, list(case.categorical)])) % 8
        if as_f32:
            X = X.astype(np.float32)
        for fast in compiled:
            for method in fast.methods:
                assert_same(method, getattr(fast, method)(X), case.expected(method, X),
                            f"{case.id} {fast.backend} {method}")

    check()
