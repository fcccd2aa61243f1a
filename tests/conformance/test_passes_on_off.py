"""Every conformance case through the graph passes, on and off (issue #12: "passes on and off
give answers within tolerance; exact-by-default passes give identical labels").

For each case some exact pass changes (about 70 of the 323: identity links, dead nodes,
duplicates, injection, push-down, AdaBoost's folded votes...), the model is compiled with the
default pipeline and with every pass disabled, on the in-process backends. The exact passes
promise more than the conformance tolerance: the same bits, for every method, on the suite's
rows (NaN, +-inf, threshold edges, category edge codes) in float64 and float32; and the
program with the passes off matches the source library like the one with them on (which
test_conformance.py checks). Cases no pass changes compile to the same program either way
and are skipped. The gated passes (Precision.FAST) have their own conformance test in
tests/test_passes_precision.py.

`make test` runs the reference, native and torch backends; the torch tree strategies one by
one, TorchScript and TVM run in the slow matrix (`make test-all`)."""

from __future__ import annotations

import numpy as np
import pytest

import peregrine
from peregrine.options import CompileOptions, TreeStrategy
from peregrine.passes import GATED, run_passes
from tests.conformance.test_conformance import CASES, _available, _rows, assert_same

ALL_OFF = CompileOptions(passes=())
# (backend, tree strategy): `make test` runs the first three, the slow matrix the rest
DEFAULT_TARGETS = (("reference", TreeStrategy.AUTO), ("native", TreeStrategy.AUTO),
                   ("torch", TreeStrategy.AUTO))
SLOW_TARGETS = (("torch", TreeStrategy.GEMM), ("torch", TreeStrategy.TREE_TRAVERSAL),
                ("torch", TreeStrategy.PERFECT_TREE_TRAVERSAL), ("torchscript", TreeStrategy.AUTO),
                ("tvm", TreeStrategy.AUTO))


def _changed_by(graph) -> list[str]:
    """The exact passes that change ``graph`` under the default options."""
    report: list[dict] = []
    run_passes(graph, CompileOptions(), report)
    return [r["pass"] for r in report if r["pass"] not in GATED
            and not r["changed"].startswith("nothing")]


def _check(case, targets, rows_cache) -> None:
    spec, X = _rows(case, rows_cache)
    changed = _changed_by(spec.graph)
    if not changed:
        pytest.skip("no exact pass changes this case's graph")
    model, _ = case.built
    ran = 0
    for backend, strategy in targets:
        if not _available(backend):
            continue
        on = peregrine.compile(model, backend, options=CompileOptions(tree_strategy=strategy))
        off = peregrine.compile(model, backend, options=ALL_OFF.replace(tree_strategy=strategy))
        for dtype in ("float64", "float32"):
            rows = X.astype(dtype)
            for method in on.methods:
                where = (f"{case.id} {backend}/{strategy.value} {dtype} {method} "
                         f"(passes that change it: {', '.join(changed)})")
                got_on, got_off = getattr(on, method)(rows), getattr(off, method)(rows)
                # exact passes: the same bits (NaN where NaN) and dtype
                np.testing.assert_array_equal(got_on, got_off, err_msg=where)
                assert got_on.dtype == got_off.dtype, where
                assert_same(method, got_off, case.expected(method, rows), where + ", passes off")
        ran += 1
    if not ran:
        pytest.skip("none of these backends is available")


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_exact_passes_keep_every_bit(case, rows_cache):
    _check(case, DEFAULT_TARGETS, rows_cache)


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_exact_passes_keep_every_bit_on_every_target(case, rows_cache):
    _check(case, SLOW_TARGETS, rows_cache)


@pytest.fixture(scope="module")
def rows_cache():
    return {}
