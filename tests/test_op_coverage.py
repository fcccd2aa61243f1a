"""Every op has one definition (ir/semantics) and every backend either lowers it or declares
it a fallback, which runs that definition's NumPy rule; the fallbacks are listed in the docs
and may only shrink."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from peregrine.backends import _MODULES, get_backend
from peregrine.errors import UnsupportedModelError
from peregrine.ir.ops import Op
from peregrine.ir.semantics import DEFS

DOCS = Path(__file__).resolve().parents[1] / "docs"
OPS = frozenset(op for op in Op if op is not Op.INPUT)
# The fallbacks each backend had when they were first declared (commit after 327907d).
# Lowering an op lowers these; a new op a backend does not lower must raise them knowingly.
# native +3, tvm +1 (issue #15 item 4): DENSE, ACTIVATION and BATCH_NORM, a PyTorch network's
# layers; native runs torch's own kernels where torch is installed, else the rule
# (backends/native/rules.py).
# tvm +1 (issue #15, CatBoost CTRs): CTR_LOOKUP, the one node that replaced CatBoost graphs'
# INTERP lookups, which TVM already ran as rules (native and torch lower it).
# native -1 (2026-11-29): ONE_HOT, in row kernels (comparisons, or a linear model's rows).
# tvm -7 (2026-11-29): ONE_HOT, ORDINAL_ENCODE, CATEGORY_MAP, POLYNOMIAL, DIGITIZE,
# RANGE_CHECK and UFUNC (backends/tvm/ops_columns.py; a few ufunc names run their rule),
# then INTERP (a scheduled kernel, backends/tvm/kernels.py), OVR_DECISION (ops_votes.py) and
# QUANTILE (uniform; normal runs its rule for scipy's ndtri), CTR_LOOKUP (kernels.ctr_kernel).
# tvm -1 (2026-11-29): KERNEL (backends/tvm/ops_kernel.py; sigmoid, cosine and the float
# power run their rule)
# tvm -3 (2026-11-29): DENSE, ACTIVATION, BATCH_NORM (backends/tvm/ops_nn.py; float64
# networks, wide layers and the activations through tanh/expm1/log1p/erf run their rule)
# tvm -1 (2026-11-29): KNN (backends/tvm/knn.py; cosine, minkowski p other than 1 and 2 and
# rows of more than 256 features run their rule)
# native -1 (2026-11-29): KNN, its own kernel (kernels/knn.py; cosine and
# minkowski p not in {1, 2} run the rule)
MAX_FALLBACKS = {"native": 20, "torch": 0, "torchscript": 0, "reference": 0, "tvm": 6}


def _backend(name):
    try:
        return get_backend(name)
    except UnsupportedModelError as exc:
        pytest.skip(str(exc))


def test_every_op_has_one_definition():
    assert set(DEFS) == set(Op)
    for op, d in DEFS.items():
        assert d.op is op and d.__doc__, f"{op}: definition without its documentation"
        assert not inspect.isabstract(d), f"{op}: definition without a rule"


@pytest.mark.parametrize("name", [m[0] for m in _MODULES])
def test_backend_lowers_or_falls_back_for_every_op(name):
    backend = _backend(name)
    lowered, fallback = backend.lowered(), backend.fallback()
    assert lowered | fallback == OPS, f"{name}: no plan for {sorted(o.name for o in OPS - lowered - fallback)}"
    assert not lowered & fallback
    assert name in MAX_FALLBACKS, f"declare the new backend {name!r}'s fallback budget"
    assert len(fallback) <= MAX_FALLBACKS[name], (
        f"{name} falls back on {len(fallback)} ops, more than {MAX_FALLBACKS[name]}")


def test_native_fallbacks_are_documented():
    backend = _backend("native")
    text = (DOCS / "native.md").read_text()
    listed = re.search(r"<!-- native-fallbacks -->(.*?)<!-- /native-fallbacks -->", text, re.S)
    assert listed, "docs/native.md lost its fallback list"
    names = set(re.findall(r"`([A-Z_]+)`", listed.group(1)))
    assert names == {op.name for op in backend.fallback()}


def test_tvm_fallbacks_are_documented():
    backend = _backend("tvm")
    text = (DOCS / "tvm.md").read_text()
    listed = re.search(r"<!-- tvm-fallbacks -->(.*?)<!-- /tvm-fallbacks -->", text, re.S)
    assert listed, "docs/tvm.md lost its fallback list"
    names = set(re.findall(r"`([A-Z_]+)`", listed.group(1)))
    assert names == {op.name for op in backend.fallback()}


def test_native_fallbacks_run_the_rule():
    """rules.run hands every fallback op to its definition's rule (KERNEL's rbf aside, and a
    network's ops where torch is installed: tests/test_hybrid_pipelines.py)."""
    from peregrine.backends.native import rules

    calls = []

    class Probe:
        def rule(self, node, ins, options):
            calls.append(node.op)
            return "ran"

    class Node:
        def __init__(self, op):
            self.op, self.attrs = op, Probe()

    skip = {Op.KERNEL} | (set(rules.NETWORK_OPS) if rules._TORCH else set())
    for op in _backend("native").fallback() - skip:
        assert rules.run(Node(op), [], None) == "ran"
    assert len(calls) == len(_backend("native").fallback() - skip)
