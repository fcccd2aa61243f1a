"""CTR_LOOKUP (ir/semantics/ctr.py) on its own: the NumPy rule against a row-by-row reading of
its definition, and the native row kernel (backends/native/ctr_kernel.py), the torch and
TorchScript lowerings against the rule, bit for bit, on rows with unseen categories, NaN and
+-inf, through dense and searched key maps, one row and many (split over threads). CatBoost
models end to end: tests/test_catboost_ctr.py."""

from __future__ import annotations

import numpy as np
import pytest

from peregrine.ir import GraphBuilder, Op
from peregrine.ir.semantics.ctr import CtrLookup

HASHES = [np.array([10.0, 20.0, 30.0, 4e9]), np.array([5.0, 7.0]), np.array([20.0])]
THRESHOLDS = np.array([0.5, -1.0, 0.25])
BITS = [(2, 1), (3, 0), (2, 0)]  # (column, value where NaN)
# projections: (elements (codes 0-2, bits 3-5), weights, stored keys)
PROJECTIONS = [
    ([0], [1], [1, 2, 3, 4]),
    ([0, 1, 3], [1, 5, 15], [1, 6, 11, 17, 22, 29]),
    ([2, 4], [1, 2], [1, 3]),
    ([0, 1], [1, 1 << 40], [2, (1 << 40) + 3, (2 << 40) + 4]),  # too wide for a dense map
    ([5], [1], []),  # a table with no entries: always unknown
]
SOURCES = [0, 1, 1, 2, 3, 4, 0, 3]


def _op() -> CtrLookup:
    r = np.random.default_rng(0)
    values, offsets = [], [0]
    for p in SOURCES:
        v = np.concatenate([[r.normal()], r.normal(size=len(PROJECTIONS[p][2]))])
        values.append(v.astype(np.float32).astype(np.float64))
        offsets.append(offsets[-1] + len(v))
    cum = lambda lengths: np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)  # noqa: E731
    return CtrLookup(
        hash_columns=np.array([0, 1, 0]), hashes=np.concatenate(HASHES),
        hash_offsets=cum([len(h) for h in HASHES]),
        bit_columns=np.array([c for c, _ in BITS]), bit_thresholds=THRESHOLDS,
        bit_nan=np.array([v for _, v in BITS]),
        key_elements=np.concatenate([p[0] for p in PROJECTIONS]),
        key_weights=np.concatenate([p[1] for p in PROJECTIONS]),
        key_offsets=cum([len(p[0]) for p in PROJECTIONS]),
        keys=np.concatenate([np.asarray(p[2], np.int64) for p in PROJECTIONS]),
        keys_offsets=cum([len(p[2]) for p in PROJECTIONS]),
        sources=np.array(SOURCES), values=np.concatenate(values), value_offsets=cum(
            [len(v) for v in values]))


def _rows(n: int, seed: int) -> np.ndarray:
    r = np.random.default_rng(seed)
    x = np.column_stack([
        r.choice([10.0, 20.0, 30.0, 4e9, 11.0, 0.0, np.nan, np.inf], n),  # hashes, unseen
        r.choice([5.0, 7.0, 6.0, -np.inf], n),
        r.choice([0.5, np.nextafter(0.5, 1), 0.2, np.nan, np.inf, -np.inf], n),
        r.choice([-1.0, np.nextafter(-1.0, 0), -3.0, np.nan], n),
        r.normal(size=n),
    ])
    return x


def _by_definition(op: CtrLookup, x: np.ndarray) -> np.ndarray:
    """Row by row, with Python integers and dict lookups."""
    rows = []
    for row in x:
        el = []
        for e, col in enumerate(op.hash_columns):
            seg = list(op.hashes[op.hash_offsets[e]:op.hash_offsets[e + 1]])
            el.append(seg.index(row[col]) + 1 if row[col] in seg else 0)
        for b, col in enumerate(op.bit_columns):
            el.append(int(op.bit_nan[b]) if np.isnan(row[col]) else int(row[col] >
                                                                         op.bit_thresholds[b]))
        entry = []
        for p in range(op.n_projections):
            ks = range(op.key_offsets[p], op.key_offsets[p + 1])
            key = sum(el[op.key_elements[k]] * int(op.key_weights[k]) for k in ks)
            keys = [int(k) for k in op.keys[op.keys_offsets[p]:op.keys_offsets[p + 1]]]
            entry.append(keys.index(key) + 1 if key in keys else 0)
        derived = [op.values[op.value_offsets[d] + entry[p]] for d, p in enumerate(op.sources)]
        rows.append(np.concatenate([row, derived]))
    return np.asarray(rows, dtype=np.float32)  # the op's output dtype


def test_rule_follows_the_definition():
    op = _op()
    x = _rows(400, 1)
    got = op.rule(None, [x], None)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, _by_definition(op, x))


@pytest.mark.parametrize("n", [1, 7, 64, 65, 20_000])
@pytest.mark.parametrize("threads", [1, 2])
def test_native_kernel_matches_the_rule(n, threads):
    from peregrine.backends.native.ctr_kernel import CtrProgram

    op = _op()
    prog = CtrProgram(op)
    assert prog.usable
    assert (prog._arrays["dense_offsets"] < 0).sum() == 1  # one projection searched
    x = _rows(n, n)
    got = prog(x, threads)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, op.rule(None, [x], None))


@pytest.mark.parametrize("script", [False, True])
def test_torch_lowering_matches_the_rule(script):
    torch = pytest.importorskip("torch")
    from peregrine.backends.torch.ops_ctr import CtrLookup as TorchCtr

    op = _op()
    module = TorchCtr(op)
    if script:
        module = torch.jit.script(module)
    for n in (1, 300):
        x = _rows(n, 10 + n)
        got = module([torch.from_numpy(x)]).numpy()
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, op.rule(None, [x], None))


@pytest.mark.parametrize("backend", ["reference", "native", "torch", "torchscript", "tvm"])
def test_graph_with_the_op_on_every_backend(backend):
    """A graph of the op alone (its output as ``transform``) built by each backend."""
    from peregrine.ir.spec import MethodSpec, ModelSpec
    from peregrine.options import CompileOptions
    from peregrine.runtime.compiled import build

    op = _op()
    g = GraphBuilder()
    x = g.input(5)
    out = g.add(Op.CTR_LOOKUP, (x,), width=5 + len(SOURCES), **{
        k: v for k, v in op.items()})
    spec = ModelSpec(graph=g.build({"transform": out}), methods={
        "transform": MethodSpec("transform")}, n_features=5, source="test", allow_nan=True,
        allow_inf=True)
    if backend.startswith("torch"):
        pytest.importorskip("torch")
    if backend == "tvm":
        pytest.importorskip("tvm")
    compiled = build(spec, backend, CompileOptions(), "cpu")
    if backend == "tvm":  # in the compiled program (backends/tvm/kernels.ctr_kernel)
        assert "fallback_ops" not in compiled.explain_dict()["backend_choices"]
    for n in (1, 7, 64, 65, 500):
        rows = _rows(n, 3 + n)
        np.testing.assert_array_equal(compiled.transform(rows), op.rule(None, [rows], None))


def test_bad_attributes_are_refused():
    from dataclasses import replace

    from peregrine.ir.graph import Node

    op = _op()
    node = Node("ctr", Op.CTR_LOOKUP, ("x",), op, "float64", 5 + len(SOURCES))
    inp = Node("x", Op.INPUT, (), {}, "float64", 5)
    op.check(node, [inp])
    for change, what in [
        (dict(hashes=op.hashes[::-1].copy()), "not strictly ascending"),
        (dict(hash_columns=np.array([0, 1, 9])), "outside the input"),
        (dict(bit_nan=np.array([1, 2, 0])), "bit_nan"),
        (dict(sources=np.array(SOURCES[:-1] + [9])), "names no projection"),
        (dict(key_weights=np.concatenate([p[1] for p in PROJECTIONS[:-1]] + [[1 << 53]])),
         "reach past"),
    ]:
        with pytest.raises(ValueError, match=what):
            replace(op, **change).check(node, [inp])
